r"""geoopt <-> riemfl: riemfl manifolds in geoopt's optimisers, geoopt manifolds in riemfl.

* :func:`to_geoopt` wraps a riemfl :class:`~riemfl.manifolds.Manifold` as a ``geoopt.Manifold``
  (a :class:`GeooptManifold`), so that ``geoopt.ManifoldParameter``,
  ``geoopt.optim.RiemannianSGD`` and ``RiemannianAdam`` optimise on any riemfl manifold.
* :func:`from_geoopt` wraps a ``geoopt.Manifold`` as a riemfl manifold (a :class:`FromGeoopt`),
  for riemfl's solvers and conformance kit.

Stand-ins for geoopt's classes
------------------------------
A riemfl manifold with a geoopt counterpart is wrapped in a class that also carries that geoopt
class's whole public API (every public method and property, with geoopt's parameter names,
keyword-only markers and defaults; the methods live in :mod:`riemfl.adapters.geoopt_api`), so
code written against geoopt's class runs unchanged:

=================================  ====================================
riemfl                             geoopt
=================================  ====================================
``Euclidean(*shape)``              ``Euclidean(ndim)``
``Sphere(n)``                      ``Sphere()``
``Stiefel(n, p)``                  ``EuclideanStiefel()``
``Stiefel(n, p, metric=            ``CanonicalStiefel()`` (``Stiefel()``)
"canonical")``
``Lorentz(n, beta=k)``             ``Lorentz(k)``
``PoincareBall(n, c)``             ``PoincareBall(c)``
``SPD(n)`` (affine-invariant)      ``SymmetricPositiveDefinite()``
``BirkhoffPolytope(n)``            ``BirkhoffPolytope()``
=================================  ====================================

The adapter class is ``Geoopt`` + geoopt's class name (``GeooptPoincareBall``, ...), a module
attribute, so parameters on it pickle. The API includes ``expmap0``, ``logmap0``, ``transp0``,
``inner0``, ``dist0``, ``random_normal`` and ``k`` for the Lorentz model, the gyrovector
operations (``mobius_add`` ... ``weighted_midpoint``), ``dist2plane``, ``lambda_x``, ``c``, ``k``
and ``radius`` for the ball. Every value is computed by riemfl (its maps and gyrovector
functions, or formulas over them), never by geoopt; the classes
are ``geoopt.Manifold`` subclasses, not subclasses of geoopt's classes, so ``isinstance(m,
geoopt.PoincareBall)`` is False. The ball's stand-in is registered as a virtual subclass of
``geoopt.Stereographic`` (whose whole API it has), so ``isinstance(m, geoopt.Stereographic)``
is True and ``geoopt.StereographicProductManifold`` takes it. Each stand-in carries its geoopt
class's ``__scaling__`` table, so ``geoopt.Scaled`` rescales the same methods (``dist0``,
``expmap0``, ...) as for geoopt's class. The curvature ``k`` of the ball (:math:`-c`) and of
the hyperboloid (:math:`\beta`) is a module buffer, float64 at first: ``.to()``, ``.float()``,
``Manifold.dtype`` and ``Manifold.device`` see it (geoopt's ``ProductManifold`` checks that its
factors share a dtype); the maps compute in their arguments' dtype from riemfl's parameter.
Other riemfl manifolds (SPD with another metric included) get the generic
:class:`GeooptManifold`.

Steps that are not tangent
--------------------------
geoopt's optimisers hand ``retr``, ``retr_transp`` and ``expmap`` vectors that are not tangent:
``RiemannianSGD``'s momentum buffer starts as the Euclidean gradient, so its first steps and the
buffer it transports have a normal part, and ``RiemannianAdam`` divides its first moment
componentwise by the second where the metric's ``component_inner`` is componentwise. geoopt's own
classes land on the manifold anyway: a retraction through a projection (``projx(x + u)``, QR,
Sinkhorn), a re-lift of the result (``Lorentz.expmap`` projects u and re-lifts, ``project=True``),
a Cayley transform of a skew matrix built from any u. riemfl's maps assume tangent input (``exp``
of the hyperboloid, the Cayley retraction's low-rank solve): one step with a random ambient vector
left the hyperboloid and St(20, 10) by distances of order 1. Every stand-in (and the generic
adapter) therefore first projects the step and the transported vector onto :math:`T_xM` with
riemfl's ``to_tangent``: ``retr(x, u) = R_x(P_x u)``, ``expmap(x, u) = Exp_x(P_x u)``,
``transp(x, y, v) = T_{x\to y}(P_x v)``, and so ``retr_transp``, ``expmap_transp``,
``transp_follow_*``, and the Lorentz maps at the origin. The result is a point of M and a vector
tangent there, for any u and v; for tangent u and v nothing changes but rounding. The ball needs
nothing (every vector of :math:`\mathbb{R}^n` is tangent to it).

``retr_transp(x, u, v)`` and ``transp_follow_retr`` carry v by the differential of the
retraction, :math:`\mathrm{D}R_x(u)[v]` (vector transport by differentiated retraction, Absil,
Mahony & Sepulchre 2008, Sec. 8.1.2), where riemfl has it (``retraction_transport``; the
Cayley retraction of the Stiefel manifold, so the canonical-metric Stiefel's default), else by
``transp``. geoopt's line search (``RiemannianLineSearch``) pairs the gradient at
:math:`R_x(td)` with ``retr_transp(x, td, d)``: only the retraction's differential makes that
the derivative of :math:`t \mapsto f(R_x(td))`, which the strong Wolfe conditions test (with
the projection transport it found no step on the canonical Stiefel).

``inner(None, u, v)`` (and ``norm(None, u)``) is accepted where the metric does not depend on
the point, as geoopt's ``Euclidean``, ``Sphere``, ``EuclideanStiefel`` and ``Lorentz`` ignore
x there; the other stand-ins raise :class:`~riemfl.errors.ParameterError`.

Deliberate differences from geoopt's classes:

* ``projx`` is riemfl's metric projection: it raises :class:`~riemfl.errors.ProjectionError`
  where the nearest point does not exist (outside the Poincare ball, an indefinite matrix for
  SPD) instead of clamping (the ball) or taking absolute eigenvalues (SPD);
* ``project=`` and ``norm_tan=`` are accepted and change nothing: geoopt uses them to clamp
  results onto a smaller ball or re-lift them onto the hyperboloid; riemfl's maps return points
  of the manifold to rounding and clamp nothing (``dim=`` is honoured);
* the ball's ``retr`` is riemfl's retraction, the exponential map (geoopt's
  ``PoincareBallExact``; ``geoopt.PoincareBall.retr`` is :math:`x + u`, clamped); ``inner`` with
  ``keepdim=False`` returns one value a point (geoopt's returns a B x B matrix for B points);
* the Lorentz ``norm(u)`` is :math:`\sqrt{\max(\langle u, u\rangle_L, 0)}` (geoopt clamps at
  :math:`10^{-4}`); ``random`` is riemfl's sampler (geoopt's Lorentz has none) and
  ``random_normal`` draws :math:`\mathrm{Exp}_o((0, \bar v))`, :math:`\bar v \sim
  N(\text{mean}, \text{std}^2)` (geoopt first scales its draw to unit length);
  ``geodesic_unit`` normalises u (geoopt assumes :math:`\|u\| = 1`);
* SPD's ``transp`` is the parallel transport (as geoopt's), not riemfl's ``transport`` (the
  identity); Birkhoff's ``expmap`` is the retraction, as geoopt's;
* Birkhoff keeps riemfl's Fisher conventions: ``proju`` is the Fisher-orthogonal projection
  (geoopt's is :math:`\Pi_X(u \odot X)`, its ``egrad2rgrad``), ``inner`` is
  :math:`\sum_{ij} u_{ij}v_{ij}/x_{ij}` (geoopt's is that divided by n), ``transp`` is
  :math:`\Pi_Y(v \odot \sqrt{Y \oslash X})` (geoopt's is :math:`\Pi_Y(v \odot Y)`), Sinkhorn
  runs to riemfl's tolerance (``tol``, ``max_iter`` are riemfl's; ``eps`` is 0);
* the canonical Stiefel's ``proju`` is the orthogonal projection onto :math:`T_x` (geoopt's is
  :math:`u - xu^\top x`, the canonical gradient map, which ``egrad2rgrad`` is in both), its
  ``retr`` is riemfl's Cayley retraction (geoopt builds the Cayley W as :math:`ux^\top -
  xu^\top` from its argument: a retraction only for :math:`x^\top u = 0`; geoopt's ``retr(x,
  (I - xx^\top/2)u)`` is riemfl's :math:`R_x(u)`), its ``expmap`` the exact exponential map
  (geoopt's is the Cayley transform), and it transports by projection (``transp``; geoopt's
  class has none) or by the retraction's differential (``retr_transp``; geoopt's rotates v by
  the Cayley transform);
* where geoopt's class raises ``NotImplementedError`` (``EuclideanStiefel.logmap`` and
  ``dist``, ``CanonicalStiefel.transp``, ``logmap`` and ``dist``, ``Lorentz.random``), the
  stand-in computes riemfl's map;
* samplers other than the Euclidean and Poincare normals (where geoopt's recipe is reused, so
  the same torch seed gives the same points) are riemfl's, seeded from torch's generator.

Both directions translate names and conventions only; every map is computed by the wrapped
library. Torch tensors keep their dtype and device and autograd flows through (geoopt computes
in torch; riemfl's maps are torch-native). geoopt is imported on first use; without it the
functions raise :class:`~riemfl.errors.MissingDependencyError` naming the ``geoopt`` extra.

Name map (geoopt -> riemfl)
---------------------------
============================  ===========================================================
geoopt                        riemfl
============================  ===========================================================
``projx(x)``                  ``project(a)`` (riemfl: the metric projection :math:`P_M`)
``proju(x, u)``               ``to_tangent(x, a)``
``egrad2rgrad(x, g)``         ``egrad_to_rgrad(x, g)``
``inner(x, u, v, keepdim)``   ``inner(x, u, v)`` (``v=None`` means ``v = u``)
``norm(x, u, keepdim)``       ``norm(x, u)``
``retr(x, u)``                ``retract(x, u)``
``expmap(x, u)``              ``exp(x, u)``
``logmap(x, y)``              ``log(x, y)``
``dist(x, y, keepdim)``       ``dist(x, y)``
``transp(x, y, v)``           ``transport(x, y, v)``
``retr_transp(x, u, v)``      ``(retract(x, u), retraction_transport(x, u, v))``, or
                              ``transport(x, retract(x, u), v)`` without it
``random(*size)``             ``random_point(*batch, rng=..., like=...)``
``check_point_on_manifold``   ``check_point`` (``NotOnManifoldError`` -> ``(False, reason)``)
============================  ===========================================================

Differences between the two libraries' maps (measured in ``tests/adapters``)
------------------------------------------------------------------------------
* ``geoopt.Lorentz(k)`` is riemfl's ``Lorentz(n, beta=k)`` (same ordering, time coordinate
  first; k is riemfl's :math:`\beta`, curvature :math:`-1/k`). Its ``projx`` is the cheap lift
  :math:`x_0 = \sqrt{k + \|\bar x\|^2}` (riemfl's :meth:`~riemfl.manifolds.Lorentz.lift`), not
  the nearest point; riemfl's ``project`` is the metric projection. geoopt's Minkowski norm
  clamps :math:`\langle u, u\rangle_L` at ``1e-8``, so ``expmap``, ``retr``, ``logmap`` and
  ``transp`` are wrong for tangent norms or distances below ``1e-4`` (``retr(x, 0)`` is off by
  :math:`(\cosh 10^{-4} - 1)\|x\| \approx 5\cdot10^{-9}\|x\|`; ``logmap`` of points ``1e-6``
  apart has the wrong length); ``egrad2rgrad`` negates the time component of the gradient it is
  given *in place*. Above those scales the maps agree with riemfl's to rounding.
* ``geoopt.Sphere.dist`` clamps :math:`\langle x, y\rangle` to :math:`1 - \epsilon`, so
  distances below :math:`\arccos(1 - \epsilon)` come back as that floor (``4.5e-4`` in float64,
  ``1.4e-2`` in float32) and ``logmap`` inherits it; riemfl's ``atan2`` form is accurate at
  every distance.
* ``geoopt.PoincareBall`` (and ``PoincareBallExact``) clamps: ``projx`` and the results of
  ``expmap``, ``mobius_add``, ... are moved onto the radius :math:`(1 - 10^{-5})/\sqrt c`
  (float64) or :math:`(1 - 4\cdot10^{-3})/\sqrt c` (float32), so ``expmap`` reaches no point
  beyond hyperbolic distance :math:`12.2/\sqrt c` (float64) or :math:`6.2/\sqrt c` (float32)
  from the origin; ``dist`` and ``logmap``, :math:`\operatorname{artanh}(\sqrt c\|{-x}\oplus
  y\|)`, cancel near the boundary (relative error 0.15 at radius :math:`1 - 10^{-4}` in both
  dtypes, :math:`4\cdot10^{-3}` at :math:`1 - 10^{-3}` in float32; riemfl's are exact to
  rounding there). Within radius 0.999 the maps agree with riemfl's to rounding; ``transp`` is
  the parallel transport. ``PoincareBall.retr`` is :math:`x + u` (clamped), which ``logmap``
  does not invert; ``inner(x, u, v)`` of a batch of B points returns a B x B matrix unless
  ``keepdim=True`` (``from_geoopt`` asks for ``keepdim=True``).
* ``geoopt.SymmetricPositiveDefinite`` (its default metric, "AIM", is riemfl's
  affine-invariant one) has riemfl's ``exp``, ``log``, ``dist``, parallel transport (its
  ``transp``) and second-order retraction :math:`X + U + \tfrac12 UX^{-1}U` to rounding in
  float64; its ``logmap`` inverts ``expmap``, not ``retr``; its ``projx`` maps the eigenvalues of
  :math:`\operatorname{sym}(a)` to their absolute values, no nearest point for an indefinite
  matrix (riemfl raises). In float32, ``dist`` of points :math:`10^{-3}` apart is off by up to
  :math:`5\cdot10^{-4}` relative (riemfl: :math:`2\cdot10^{-5}`).
* ``geoopt.BirkhoffPolytope``: ``proju(x, u)`` is :math:`\Pi_X(u \odot X)`, equal to its
  ``egrad2rgrad`` and not a projection; ``inner`` is the Fisher metric of Douik & Hassibi 2019
  divided by n (so its ``egrad2rgrad`` is not the gradient for its own ``inner``); ``transp`` is
  :math:`\Pi_Y(v \odot Y)`; ``expmap`` is ``retr``. ``from_geoopt`` translates them to riemfl's
  conventions (``to_tangent(x, a) = proju(x, a / x)``, ``inner`` times n, ``transport`` the
  projection :math:`\Pi_Y`). Sinkhorn stops at a row/column residual ``tol`` (default
  :math:`10^{-5}`: column sums off by :math:`4\cdot10^{-6}`, ``retr`` off riemfl's by
  :math:`5\cdot10^{-6}`) and adds ``eps`` to its denominators; built with ``tol=1e-13, eps=0``
  it is riemfl's Sinkhorn to rounding (and ``from_geoopt`` needs ``dim=`` with the default
  ``tol``: geoopt's tangent projection fixes a multiplier, which leaves an offset of the size
  of the residual). Its sampler scales :math:`|N(0, 1)|` entries, so entries near
  :math:`10^{-7}` occur.
* ``geoopt.EuclideanStiefel.retr`` is the QR retraction (riemfl's ``Stiefel(n, p,
  retraction="qr")``); riemfl's default is the polar retraction. Projections, ``expmap`` and
  the projection transport are the same maps. ``geoopt.Stiefel()`` defaults to the canonical
  metric, whose ``expmap`` is the Cayley retraction, not the exponential map.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..backend import Array, is_torch, to_numpy
from ..errors import NotOnManifoldError, ParameterError, ShapeError
from ..manifolds.base import Manifold
from ._lazy import EXACT_MAPS, ForeignManifold, LazyClass, require

# GeooptManifold is built on first use (module __getattr__ below)
__all__ = [  # noqa: F822
    "to_geoopt",
    "from_geoopt",
    "GeooptManifold",
    "GeooptEuclidean",
    "GeooptSphere",
    "GeooptEuclideanStiefel",
    "GeooptCanonicalStiefel",
    "GeooptLorentz",
    "GeooptPoincareBall",
    "GeooptSymmetricPositiveDefinite",
    "GeooptBirkhoffPolytope",
    "FromGeoopt",
    "EXACT_MAPS",
]

_FLOOR = (
    "geoopt.Sphere.dist clamps <x, y> to 1 - eps, so distances below arccos(1 - eps) (4.5e-4 "
    "in float64, 1.4e-2 in float32) come back as that floor"
)
_CLAMP = (
    "geoopt.Lorentz clamps the Minkowski norm at 1e-4 (<u, u>_L at 1e-8), so {} is wrong for "
    "tangent norms and distances below 1e-4"
)
_PROJECTION_TRANSP = "geoopt's transp is the projection onto T_y M, not parallel transport"
#: what riemfl knows of geoopt's own classes, per map: "" where it is exact, else why not
_KNOWN: dict[str, dict[str, str]] = {
    "Euclidean": dict.fromkeys(EXACT_MAPS, ""),
    "Sphere": {
        "project": "",
        "exp": "",
        "log": _FLOOR + ", and logmap inherits it",
        "dist": _FLOOR,
        "parallel_transport": _PROJECTION_TRANSP,
        "inverse_retract": "geoopt.Sphere has no inverse of its retraction",
    },
    "EuclideanStiefel": {
        "project": "",
        "exp": "",
        "log": "geoopt.EuclideanStiefel has no logmap",
        "dist": "geoopt.EuclideanStiefel has no dist",
        "parallel_transport": _PROJECTION_TRANSP,
        "inverse_retract": "geoopt.EuclideanStiefel has no inverse of its retraction",
    },
    "CanonicalStiefel": {
        "project": "",
        "exp": "geoopt.CanonicalStiefel.expmap is the Cayley retraction, not the exponential map",
        "log": "geoopt.CanonicalStiefel has no logmap",
        "dist": "geoopt.CanonicalStiefel has no dist",
    },
    "Lorentz": {
        "project": "geoopt.Lorentz.projx is the lift x_0 = sqrt(k + |x_1:|^2), not the metric "
        "projection",
        "exp": _CLAMP.format("expmap"),
        "log": _CLAMP.format("logmap"),
        "dist": "geoopt.Lorentz.dist is arccosh(-<x, y>_L / k), which loses half the digits for "
        "close points",
        "parallel_transport": _CLAMP.format("transp"),
        "inverse_retract": _CLAMP.format("logmap"),
    },
}
_BALL_CANCELS = (
    "geoopt.PoincareBall.{} takes artanh(sqrt(c)|-x (+) y|), which cancels near the boundary: "
    "relative error 0.15 at radius 1 - 1e-4 (float64 and float32), 4e-3 at 1 - 1e-3 (float32)"
)
_KNOWN["PoincareBall"] = {
    "project": "geoopt.PoincareBall.projx clamps onto the radius (1 - 1e-5)/sqrt(c) in float64, "
    "(1 - 4e-3)/sqrt(c) in float32, moving points of the ball; the open ball has no nearest point "
    "outside it",
    "exp": "geoopt.PoincareBall.expmap clamps its result onto that radius: points beyond "
    "hyperbolic distance 6.2/sqrt(c) from the origin (float32; 12.2/sqrt(c) in float64) come "
    "back at that distance",
    "log": _BALL_CANCELS.format("logmap"),
    "dist": _BALL_CANCELS.format("dist"),
    "parallel_transport": "",
    "inverse_retract": "geoopt.PoincareBall.retr is x + u (clamped), which logmap does not invert",
}
_KNOWN["PoincareBallExact"] = {
    **_KNOWN["PoincareBall"],
    "inverse_retract": _BALL_CANCELS.format("logmap") + " (its retr is expmap)",
}
_KNOWN["SymmetricPositiveDefinite"] = {
    "project": "geoopt.SymmetricPositiveDefinite.projx replaces the eigenvalues of sym(a) by "
    "their absolute values, which is not the nearest point for an indefinite sym(a) (the open "
    "cone has none)",
    "exp": "",
    "log": "",
    "dist": "",
    "parallel_transport": "",
    "inverse_retract": "geoopt.SymmetricPositiveDefinite.retr is X + U + U X^-1 U / 2, which "
    "its logmap does not invert",
}
_KNOWN["BirkhoffPolytope"] = {
    "project": "geoopt.BirkhoffPolytope.projx stops Sinkhorn at tol (default 1e-5: column sums "
    "off by 4e-6) and adds eps (1e-12) to its denominators; built with tol=1e-13, eps=0 it is "
    "riemfl's Sinkhorn (KL) projection to rounding: pass exact=['project']",
    "exp": "geoopt.BirkhoffPolytope.expmap is its retraction (the Fisher geodesics have no "
    "closed form)",
    "log": "geoopt.BirkhoffPolytope has no logmap",
    "dist": "geoopt.BirkhoffPolytope has no dist",
    "parallel_transport": "geoopt.BirkhoffPolytope.transp is Pi_Y(v * y), not parallel transport",
    "inverse_retract": "geoopt.BirkhoffPolytope has no inverse of its retraction",
}
_KNOWN["SphereExact"] = _KNOWN["Sphere"]
_KNOWN["EuclideanStiefelExact"] = _KNOWN["EuclideanStiefel"]


def _geoopt(feature: str):
    return require("geoopt", "geoopt", feature)


# ---------------------------------------------------------------------------------- to_geoopt
def _build_geoopt_manifold() -> type:
    geoopt = _geoopt("riemfl.adapters.geoopt.GeooptManifold")
    import torch
    from geoopt.utils import size2shape

    class GeooptManifold(geoopt.Manifold):
        r"""A riemfl manifold behind geoopt's ``Manifold`` API (made by :func:`to_geoopt`).

        Every geoopt method calls the riemfl map of the same meaning (see the module docstring
        for the name map); batch dimensions, dtype, device and autograd are riemfl's. The only
        state is the riemfl manifold (``riemfl_manifold``), so the object pickles, deep-copies
        and travels with ``torch.save`` whenever the riemfl manifold does.

        ``projx`` is riemfl's metric projection :math:`P_M(a) = \arg\min_{x\in M}\|x - a\|`
        (geoopt's own ``Lorentz.projx`` is a cheaper lift); it raises
        :class:`~riemfl.errors.ProjectionError` where :math:`P_M` is not unique and
        ``NotImplementedError`` for a manifold without a projection. ``random`` seeds riemfl's
        sampler from torch's global generator, as geoopt's own ``random`` uses that generator
        (so ``origin()``, which fixes it, is deterministic).

        ``retr``, ``expmap`` and ``transp`` project their vector onto :math:`T_xM` first
        (``proju``), so that the non-tangent steps of geoopt's optimisers land on M;
        ``retr_transp`` and ``transp_follow_retr`` carry vectors by the retraction's differential
        where the riemfl manifold has ``retraction_transport`` (see the module docstring).
        """

        reversible = False

        def __init__(self, manifold: Manifold) -> None:
            super().__init__()
            self.riemfl_manifold = manifold
            self.ndim = manifold.ndim
            self.name = f"riemfl.{manifold.name}"

        # -------------------------------------------------------------- checks
        def _check_shape(self, shape, name):
            ps = self.riemfl_manifold.point_shape
            shape = tuple(shape)
            if len(shape) < len(ps) or shape[len(shape) - len(ps) :] != ps:
                expected = ", ".join(["..."] + [str(s) for s in ps])
                return False, f"'{name}' has shape {shape}; {self.name} expects ({expected})"
            return True, None

        def _check_point_on_manifold(self, x, *, atol=1e-5, rtol=1e-5):
            # riemfl measures each constraint on a scale of its own (relative for Lorentz):
            # geoopt's atol is riemfl's tolerance, rtol has no counterpart
            return _explain(self.riemfl_manifold.check_point, x, atol=atol)

        def _check_vector_on_tangent(self, x, u, *, atol=1e-5, rtol=1e-5):
            return _explain(self.riemfl_manifold.check_tangent, x, u, atol=atol)

        # -------------------------------------------------------------- geometry
        #: whether the metric does not depend on the point, so that ``inner(None, u, v)`` and
        #: ``norm(None, u)`` are defined (geoopt's Euclidean, Sphere, EuclideanStiefel and
        #: Lorentz ignore x there); set by the stand-ins of those classes
        _metric_ignores_point = False

        def projx(self, x):
            return self.riemfl_manifold.project(x)

        def proju(self, x, u):
            return self.riemfl_manifold.to_tangent(x, u)

        def egrad2rgrad(self, x, u):
            return self.riemfl_manifold.egrad_to_rgrad(x, u)

        def inner(self, x, u, v=None, *, keepdim=False):
            x = self._base_point(x, u, "inner")
            out = self.riemfl_manifold.inner(x, u, u if v is None else v)
            return self._keep(out, keepdim)

        def norm(self, x, u, *, keepdim=False):
            x = self._base_point(x, u, "norm")
            return self._keep(self.riemfl_manifold.norm(x, u), keepdim)

        def retr(self, x, u):
            return self.riemfl_manifold.retract(x, self.proju(x, u))

        def expmap(self, x, u):
            return self.riemfl_manifold.exp(x, self.proju(x, u))

        def logmap(self, x, y):
            return self.riemfl_manifold.log(x, y)

        def dist(self, x, y, *, keepdim=False):
            return self._keep(self.riemfl_manifold.dist(x, y), keepdim)

        def transp(self, x, y, v):
            return self.riemfl_manifold.transport(x, y, self.proju(x, v))

        def retr_transp(self, x, u, v):
            r""":math:`(R_x(u), \mathcal T(v))` with u and v projected onto :math:`T_xM` and
            :math:`\mathcal T` the differential of the retraction where riemfl has it
            (``retraction_transport``), else ``transp``."""
            u = self.proju(x, u)
            y = self.retr(x, u)
            return y, self._follow_retraction(x, u, v, y)

        def transp_follow_retr(self, x, u, v):
            return self._follow_retraction(x, self.proju(x, u), v)

        def _follow_retraction(self, x, u, v, y=None):
            """v carried along the retraction step u (tangent) from x to :math:`R_x(u)`."""
            m = self.riemfl_manifold
            if m.supports("retraction_transport")[0]:
                return m.retraction_transport(x, u, self.proju(x, v))
            return self.transp(x, self.retr(x, u) if y is None else y, v)

        def _base_point(self, x, u, what):
            """x, or where geoopt ignores it and the metric does not read it, u in its place."""
            if x is not None:
                return x
            if not self._metric_ignores_point:
                raise ParameterError(
                    f"{self.name}.{what}: x is None, but the metric of "
                    f"{self.riemfl_manifold.name} depends on the point; expected the point x "
                    "(only stand-ins whose metric does not depend on x accept x=None)"
                )
            return u  # any array of the point's shape: the metric does not read it

        def _keep(self, out, keepdim):
            return out.reshape(tuple(out.shape) + (1,) * self.ndim) if keepdim else out

        # -------------------------------------------------------------- sampling
        def random(self, *size, dtype=None, device=None, **kwargs):
            return self._sample(size, dtype, device)

        def _sample(self, size, dtype, device):
            """riemfl's sampler, seeded from torch's global generator, as a ManifoldTensor."""
            shape = size2shape(*size)
            ok, reason = self._check_shape(shape, "x")
            if not ok:
                raise ShapeError(reason)
            seed = int(torch.randint(0, 2**62, (1,)).item())
            like = torch.empty((), dtype=dtype or torch.get_default_dtype(), device=device)
            batch = shape[: len(shape) - self.ndim]
            x = self.riemfl_manifold.random_point(*batch, rng=seed, like=like)
            return geoopt.ManifoldTensor(x, manifold=self)

        def extra_repr(self) -> str:
            return ""

    return GeooptManifold


def _explain(check, *args, atol: float):
    try:
        check(*args, atol=atol)
    except NotOnManifoldError as exc:
        return False, str(exc)
    return True, None


_GEOOPT_MANIFOLD = LazyClass(__name__, "GeooptManifold", _build_geoopt_manifold)

#: riemfl manifold with a geoopt counterpart -> (adapter class: "Geoopt" + the geoopt class's
#: name, its API mixin in geoopt_api); the canonical-metric Stiefel is keyed by its metric
_PEERS: dict[str, tuple[str, str]] = {
    "Euclidean": ("GeooptEuclidean", "EuclideanAPI"),
    "Sphere": ("GeooptSphere", "SphereAPI"),
    "Stiefel": ("GeooptEuclideanStiefel", "StiefelAPI"),
    "Stiefel-canonical": ("GeooptCanonicalStiefel", "CanonicalStiefelAPI"),
    "Lorentz": ("GeooptLorentz", "LorentzAPI"),
    "PoincareBall": ("GeooptPoincareBall", "PoincareBallAPI"),
    "SPD": ("GeooptSymmetricPositiveDefinite", "SPDAPI"),
    "BirkhoffPolytope": ("GeooptBirkhoffPolytope", "BirkhoffPolytopeAPI"),
}
#: stand-ins that geoopt's isinstance checks accept as a subclass of one of its classes (a
#: virtual subclass: the stand-in has that class's whole API): StereographicProductManifold
#: takes only Stereographic factors
_VIRTUAL_BASES = {"GeooptPoincareBall": "Stereographic"}


def _build_peer(name: str, mixin: str) -> Any:
    def build() -> type:
        geoopt = _geoopt(f"riemfl.adapters.geoopt.{name}")
        from . import geoopt_api

        peer = getattr(geoopt, name[len("Geoopt") :])
        cls = type(mixin, (getattr(geoopt_api, mixin), _GEOOPT_MANIFOLD.get()), {})
        cls.__scaling__ = _scaling_table(peer, cls)
        if name in _VIRTUAL_BASES:
            getattr(geoopt, _VIRTUAL_BASES[name]).register(cls)
        return cls

    return build


def _scaling_table(peer: type, cls: type) -> Any:
    """geoopt's ``__scaling__`` table of the peer class, for ``geoopt.Scaled``: how each method
    scales with the radius (the stand-in's methods have the peer's names and parameters).
    A method whose scaled parameter the stand-in's method lacks (its own sampler in place of
    geoopt's ``random``) is marked ``NotCompatible``: ``Scaled`` then raises
    ``NotImplementedError`` for it."""
    from geoopt.manifolds.base import ScalingInfo

    table = peer.__scaling__.copy()
    for method, info in table.items():
        if info is ScalingInfo.NotCompatible:
            continue
        accepted = inspect.signature(getattr(cls, method)).parameters
        if any(k not in accepted for k in info.kwargs):
            table[method] = ScalingInfo.NotCompatible
    return table


_PEER_CLASSES = {
    name: LazyClass(__name__, name, _build_peer(name, mixin)) for name, mixin in _PEERS.values()
}


def _peer(manifold: Manifold) -> str | None:
    """The adapter class name for a riemfl manifold with a geoopt counterpart, else None."""
    from ..manifolds import SPD, BirkhoffPolytope, Euclidean, Lorentz, PoincareBall, Sphere, Stiefel

    kinds = (Euclidean, Sphere, Stiefel, Lorentz, PoincareBall, SPD, BirkhoffPolytope)
    for kind in kinds:
        if type(manifold) is kind:
            if kind is SPD and manifold.metric != "affine-invariant":
                return None  # geoopt implements only the affine-invariant metric ("AIM")
            if kind is Stiefel and manifold.metric == "canonical":
                return _PEERS["Stiefel-canonical"][0]
            return _PEERS[kind.__name__][0]
    return None


def __getattr__(name: str) -> Any:
    # PEP 562: the geoopt subclasses exist once geoopt is importable; pickle finds them here
    if name == "GeooptManifold":
        return _GEOOPT_MANIFOLD.get()
    if name in _PEER_CLASSES:
        return _PEER_CLASSES[name].get()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def to_geoopt(manifold: Manifold) -> Any:
    """A ``geoopt.Manifold`` backed by a riemfl manifold.

    Parameters
    ----------
    manifold : riemfl.manifolds.Manifold
        Any riemfl manifold (Stiefel, Sphere, Lorentz, Product, BezierGraph, a user's own).

    Returns
    -------
    GeooptManifold
        Use it as the ``manifold=`` of ``geoopt.ManifoldParameter``; geoopt's
        ``RiemannianSGD`` and ``RiemannianAdam`` then take riemfl's retraction,
        ``egrad_to_rgrad`` and transport. ``to_geoopt(from_geoopt(m))`` is ``m`` itself.

    Raises
    ------
    MissingDependencyError
        geoopt is not installed (``pip install "riemfl[geoopt]"``).
    ParameterError
        ``manifold`` is not a riemfl manifold.

    Examples
    --------
    >>> import geoopt, torch
    >>> from riemfl import Stiefel
    >>> m = to_geoopt(Stiefel(5, 2))
    >>> x = geoopt.ManifoldParameter(m.random(5, 2, dtype=torch.float64), manifold=m)
    """
    _geoopt("riemfl.adapters.geoopt.to_geoopt")
    cls = _GEOOPT_MANIFOLD.get()
    if isinstance(manifold, FromGeoopt):
        return manifold.wrapped
    if not isinstance(manifold, Manifold):
        raise ParameterError(
            f"to_geoopt needs a riemfl Manifold, got {type(manifold).__name__} "
            "(for a geoopt manifold, use it directly or wrap it with from_geoopt)"
        )
    peer = _peer(manifold)
    return cls(manifold) if peer is None else _PEER_CLASSES[peer].get()(manifold)


# -------------------------------------------------------------------------------- from_geoopt
class FromGeoopt(ForeignManifold):
    r"""A geoopt manifold behind riemfl's manifold contract (made by :func:`from_geoopt`).

    numpy input is copied into a torch tensor of the same dtype (CPU), passed to geoopt and
    returned as numpy; torch input goes to geoopt as it is, so dtype, device and autograd are
    geoopt's. Copies are also what keeps riemfl's inputs intact where geoopt writes in place
    (``Lorentz.egrad2rgrad``). geoopt's own buffers and parameters (a Lorentz ``k``, a
    ``Sphere`` subspace projector) stay on the dtype and device the user gave them.

    Maps taken from geoopt: ``to_tangent`` (``proju``), ``egrad_to_rgrad``, ``inner``,
    ``retract`` (``retr``), ``transport`` (``transp``, or the projection onto :math:`T_yM` when
    geoopt has none) always; ``project``, ``exp``, ``log``, ``dist``, ``parallel_transport`` and
    ``inverse_retract`` only where they are exact (see :func:`from_geoopt`), the others are
    declared unsupported with the reason, so :mod:`riemfl.testing` skips them. The norm is
    :math:`\sqrt{\langle u, u\rangle_x}` from geoopt's ``inner`` (geoopt's ``Lorentz.norm``
    clamps at ``1e-4`` and has no ``x`` argument).

    ``check_point`` measures :math:`\|\mathrm{projx}(x) - x\|` (geoopt's ``projx`` fixes
    exactly the points of M); ``random_point`` runs geoopt's ``random`` (which draws from
    torch's global generator) under a generator seeded from ``rng`` and restores the global
    state after.
    """

    library = "geoopt"
    methods = {
        "project": "projx",
        "to_tangent": "proju",
        "egrad_to_rgrad": "egrad2rgrad",
        "inner": "inner",
        "retract": "retr",
        "exp": "expmap",
        "log": "logmap",
        "inverse_retract": "logmap",
        "dist": "dist",
        "transport": "transp",
        "parallel_transport": "transp",
    }

    def __init__(
        self,
        manifold: Any,
        point_shape: Iterable[int],
        dim: int | None,
        exact: Iterable[str] | None,
        constants: dict[str, float | None],
    ) -> None:
        geoopt = _geoopt("riemfl.adapters.geoopt.from_geoopt")
        if not isinstance(manifold, geoopt.Manifold):
            raise ParameterError(
                f"from_geoopt needs a geoopt.Manifold, got {type(manifold).__name__} "
                "(for a riemfl manifold, use it directly or wrap it with to_geoopt)"
            )
        shape = tuple(int(s) for s in point_shape)
        ndim = manifold.ndim
        ok, reason = manifold._check_shape(shape, "point_shape")
        if not ok or (ndim is not None and len(shape) != ndim) or not shape:
            raise ShapeError(
                f"from_geoopt: point_shape {shape} does not fit {manifold!r} (it needs {ndim} "
                f"trailing dimensions{'; ' + reason if reason else ''})"
            )
        self.point_shape = shape
        self.name = f"from_geoopt({type(manifold).__name__}, {shape})"
        self._wrap(manifold, geoopt.Manifold, _KNOWN, exact, constants)
        self._has_random = type(manifold).random is not geoopt.Manifold.random
        self._dim = self._tangent_rank() if dim is None else int(dim)

    @property
    def geoopt_manifold(self) -> Any:
        """The wrapped ``geoopt.Manifold``."""
        return self.wrapped

    def _tangent_rank(self) -> int:
        """Rank of ``proju`` at a sample point: the intrinsic dimension."""
        x = self._random_point((), np.random.default_rng(0))
        size = math.prod(self.point_shape)
        basis = np.eye(size).reshape((size,) + self.point_shape)
        images = np.reshape(self._to_tangent(x, basis), (size, size))
        s = np.linalg.svd(images, compute_uv=False)
        return int(np.sum(s > 1e-8 * max(float(s[0]), 1e-300)))

    # ------------------------------------------------------------------ translation
    def _call(self, fn, *arrays: Array, scalar: bool = False) -> Array:
        """Run a geoopt map on numpy or torch arrays; the result has the input's type.

        The arguments are broadcast to one shape first: riemfl's contract broadcasts every
        map, geoopt's maps do not all (``EuclideanStiefel.expmap`` concatenates x and u).
        """
        import torch

        if any(is_torch(a) for a in arrays):
            ref = next(a for a in arrays if is_torch(a))
            tensors = [
                a
                if is_torch(a)
                else torch.as_tensor(np.asarray(a), dtype=ref.dtype, device=ref.device)
                for a in arrays
            ]
            return fn(*torch.broadcast_tensors(*tensors))
        dtype = np.result_type(*arrays)
        arrays = np.broadcast_arrays(*(np.asarray(a, dtype=dtype) for a in arrays))
        out = fn(*(torch.tensor(a) for a in arrays))
        return out.detach().cpu().numpy()

    def _inner(self, x, u, v):
        # keepdim=True, then drop the point's axes: geoopt's Stereographic.inner with
        # keepdim=False multiplies (B, 1) by (B,) and returns a B x B matrix for B points
        inner, ndim = self.wrapped.inner, len(self.point_shape)

        def kept(x, u, v):
            out = inner(x, u, v, keepdim=True)
            return out.reshape(out.shape[: out.dim() - ndim])

        return self._call(kept, x, u, v, scalar=True)

    def _egrad_to_rgrad(self, x, g):
        # geoopt's Lorentz.egrad2rgrad writes into its argument: hand it a copy
        egrad2rgrad = self.wrapped.egrad2rgrad
        return self._call(lambda x, g: egrad2rgrad(x, g.clone()), x, g)

    def _random_point(self, batch_shape, rng):
        import torch

        m = self.wrapped
        # geoopt's Lorentz registers its sampler as random_normal only
        sample = m.random if self._has_random else getattr(m, "random_normal", m.random)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(rng.integers(2**62)))
            try:
                x = sample(*(tuple(batch_shape) + self.point_shape), dtype=torch.float64)
            except ValueError as exc:  # the dtype is fixed by a parameter (Lorentz k)
                raise ParameterError(
                    f"{self.name}: geoopt samples in the dtype of the manifold's own parameters "
                    f"({exc}); riemfl samples float64 points: build the geoopt manifold in "
                    "float64 (e.g. geoopt.Lorentz(k=torch.tensor(1.0, dtype=torch.float64)) or "
                    "call .double() on it)"
                ) from exc
        return np.asarray(to_numpy(x), dtype=np.float64)

    def _point_violation(self, x):
        d = to_numpy(self._call(self.wrapped.projx, x) - x)
        violation = float(np.sqrt(np.max(np.sum(d * d, axis=self._axes))))
        return "x = projx(x) (geoopt's projx fixes the points of M)", violation


def from_geoopt(
    manifold: Any,
    point_shape: Iterable[int],
    *,
    dim: int | None = None,
    exact: Iterable[str] | None = None,
    proximal_smoothness: float | None = None,
    diameter: float | None = None,
    injectivity_radius: float | None = None,
) -> Manifold:
    r"""A riemfl manifold backed by a geoopt manifold.

    Parameters
    ----------
    manifold : geoopt.Manifold
        E.g. ``geoopt.Sphere()``, ``geoopt.EuclideanStiefel()``, ``geoopt.Lorentz()``,
        ``geoopt.PoincareBall()``, ``geoopt.SymmetricPositiveDefinite()``,
        ``geoopt.BirkhoffPolytope()`` (translated to riemfl's Fisher conventions).
        ``to_geoopt`` objects are unwrapped: ``from_geoopt(to_geoopt(m), ...)`` is ``m``.
    point_shape : tuple of int
        Shape of one point (geoopt manifolds only know the number of trailing dimensions).
    dim : int, optional
        Intrinsic dimension; default: the rank of ``proju`` at a sample point (one SVD of a
        :math:`N \times N` matrix, :math:`N` = number of ambient coordinates).
    exact : iterable of str, optional
        The maps among :data:`EXACT_MAPS` that geoopt computes exactly in riemfl's sense:
        ``"project"`` (``projx`` is the metric projection), ``"exp"``, ``"log"``, ``"dist"``,
        ``"parallel_transport"`` (``transp`` is parallel transport) and ``"inverse_retract"``
        (``retr`` is ``expmap`` and ``logmap`` inverts it). Default: riemfl's table of geoopt's
        own classes (Euclidean: all; Sphere and EuclideanStiefel: project and exp;
        CanonicalStiefel: project; Lorentz: none; SymmetricPositiveDefinite: exp, log, dist and
        parallel_transport; PoincareBall and PoincareBallExact: parallel_transport;
        BirkhoffPolytope: none; see the module docstring), nothing for other classes. The rest
        are declared unsupported, with the reason.
    proximal_smoothness, diameter, injectivity_radius : float, optional
        riemfl's constants, which geoopt does not provide (unsupported when not given).

    Returns
    -------
    FromGeoopt

    Raises
    ------
    MissingDependencyError
        geoopt is not installed.
    ParameterError
        ``manifold`` is not a geoopt manifold, or ``exact`` names a map that does not exist or
        that the geoopt class does not implement.
    ShapeError
        ``point_shape`` does not fit the geoopt manifold.
    """
    _geoopt("riemfl.adapters.geoopt.from_geoopt")
    if isinstance(manifold, _GEOOPT_MANIFOLD.get()):
        return manifold.riemfl_manifold
    constants = {
        "proximal_smoothness": proximal_smoothness,
        "diameter": diameter,
        "injectivity_radius": injectivity_radius,
    }
    kind = _FromGeooptBirkhoff if type(manifold).__name__ == "BirkhoffPolytope" else FromGeoopt
    return kind(manifold, point_shape, dim, exact, constants)


class _FromGeooptBirkhoff(FromGeoopt):
    r"""``geoopt.BirkhoffPolytope`` in riemfl's conventions (the Fisher metric of Douik &
    Hassibi 2019, which geoopt's ``egrad2rgrad`` and riemfl use).

    geoopt's ``proju(x, u)`` is :math:`\Pi_X(u \odot X)` (its ``egrad2rgrad``), not a
    projection: ``to_tangent(x, a)`` is ``proju(x, a / x)`` = :math:`\Pi_X(a)`. geoopt's
    ``inner`` is the Fisher metric divided by n: ``inner`` multiplies it by n, so that
    ``egrad_to_rgrad`` is the gradient of that metric. geoopt's ``transp`` is
    :math:`\Pi_Y(v \odot Y)`, which does not fix tangent vectors at Y = X: ``transport`` is the
    projection :math:`\Pi_Y(v)`.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._available.discard("transport")

    def _solved(self, fn, *arrays):
        """``_call`` of a geoopt map that solves geoopt's (singular at x <= 0) linear system."""
        try:
            return self._call(fn, *arrays)
        except RuntimeError as exc:  # torch.linalg.solve inside geoopt's TorchScript
            raise NotOnManifoldError(
                f"{self.name}: geoopt's tangent projection failed at x ({exc}); expected a point "
                "with positive entries (doubly stochastic)"
            ) from exc

    def _to_tangent(self, x, a):
        proju = self.wrapped.proju
        return self._solved(lambda x, a: proju(x, a / x), x, a)

    def _egrad_to_rgrad(self, x, g):
        return self._solved(self.wrapped.egrad2rgrad, x, g)

    def _inner(self, x, u, v):
        return self.point_shape[-1] * super()._inner(x, u, v)

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

from collections.abc import Iterable
from typing import Any

from riemfl.adapters._geoopt_from import FromGeoopt, FromGeooptBirkhoff
from riemfl.adapters._geoopt_manifold import GEOOPT_MANIFOLD, require_geoopt
from riemfl.adapters._geoopt_peers import PEER_CLASSES, peer_name
from riemfl.adapters._lazy import EXACT_MAPS

from riemfl.errors import ParameterError
from riemfl.manifolds.base import Manifold

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


def __getattr__(name: str) -> Any:
    # PEP 562: the geoopt subclasses exist once geoopt is importable; pickle finds them here
    if name == "GeooptManifold":
        return GEOOPT_MANIFOLD.get()
    if name in PEER_CLASSES:
        return PEER_CLASSES[name].get()
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
    require_geoopt("riemfl.adapters.geoopt.to_geoopt")
    cls = GEOOPT_MANIFOLD.get()
    if isinstance(manifold, FromGeoopt):
        return manifold.wrapped
    if not isinstance(manifold, Manifold):
        raise ParameterError(
            f"to_geoopt needs a riemfl Manifold, got {type(manifold).__name__} "
            "(for a geoopt manifold, use it directly or wrap it with from_geoopt)"
        )
    peer = peer_name(manifold)
    return cls(manifold) if peer is None else PEER_CLASSES[peer].get()(manifold)


# -------------------------------------------------------------------------------- from_geoopt
def from_geoopt(
    manifold: Any,
    point_shape: Iterable[int],
    *,
    dim: int | None = None,
    exact: Iterable[str] | None = None,
    reach: float | None = None,
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
    reach, diameter, injectivity_radius : float, optional
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
    require_geoopt("riemfl.adapters.geoopt.from_geoopt")
    if isinstance(manifold, GEOOPT_MANIFOLD.get()):
        return manifold.riemfl_manifold
    constants = {
        "reach": reach,
        "diameter": diameter,
        "injectivity_radius": injectivity_radius,
    }
    kind = FromGeooptBirkhoff if type(manifold).__name__ == "BirkhoffPolytope" else FromGeoopt
    return kind(manifold, point_shape, dim, exact, constants)

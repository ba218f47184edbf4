r"""The unit sphere :math:`S^{n-1} = \{x \in \mathbb{R}^n : \|x\| = 1\}`."""

from __future__ import annotations

import math

import numpy as np

from .._validation import integer
from ..backend import Array, ops_for
from ..check_levels import level_of, refuse
from ..errors import CutLocusError, ProjectionError
from .base import Manifold, result_checked
from .elementary import angle_over_sine, cos_sqrt, sinc_sqrt, squared_angle

__all__ = ["Sphere", "ambient_norm"]


def ambient_norm(a: Array) -> Array:
    r""":math:`\|a\|` over the last axis (kept), scaled by :math:`\max_i |a_i|` where
    :math:`\|a\|^2` overflows (a itself is finite: the input policy); at the check levels
    ``"deferred"`` and ``"off"`` a torch tensor's norm is taken without a read (the scaled form
    where it overflows, the scale 1 elsewhere: the same norm), so a row of a batch may differ by
    an ulp from eager mode's, which scales the whole batch where one row overflows; a numpy
    array, whose read synchronises no device, takes eager mode's form at every level."""
    ops = ops_for(a)
    nrm = ops.sqrt(ops.vecdot(a, a))
    if type(a) is np.ndarray or level_of(a) == "eager":
        if not ops.all_finite(nrm):
            scale = ops.amax(ops.abs(a), axis=-1, keepdims=True)
            scaled = a / scale
            nrm = scale * ops.sqrt(ops.vecdot(scaled, scaled))
        return nrm
    # without a read: the scaled norm everywhere, with the scale 1 (exact: the same norm)
    # where |a|^2 is finite, so that no zero scale reaches a division
    scale = ops.where(nrm < math.inf, 1.0, ops.amax(ops.abs(a), axis=-1, keepdims=True))
    scaled = a / scale
    return scale * ops.sqrt(ops.vecdot(scaled, scaled))


class Sphere(Manifold):
    r"""Unit sphere :math:`S^{n-1} \subset \mathbb{R}^n` with the round (embedded) metric.

    Sizes: ``n`` is the ambient size (points are unit vectors of :math:`\mathbb{R}^n`); ``dim``
    is n - 1.

    * :math:`P_M(a) = a/\|a\|`, undefined at :math:`a = 0` (``ProjectionError``).
    * :math:`\mathrm{Exp}_x(u) = \cos\|u\|\,x + \sin\|u\|\,u/\|u\|`.
    * :math:`\mathrm{Log}_x(y) = \theta\,(y - \langle x,y\rangle x)/\|y - \langle x,y\rangle x\|`
      with :math:`\theta = \operatorname{atan2}(\|y - \langle x, y\rangle x\|, \langle x,
      y\rangle)` (accurate for small and large angles); undefined at antipodes
      (``CutLocusError``). :math:`d(x, y) = \theta`, and ``squared_dist`` :math:`\theta^2 =
      \|w\|^2(\theta/\sin\theta)^2` for :math:`\theta < \pi/2` (no square root of
      :math:`\|w\|^2`: smooth at :math:`y = x`), :math:`\theta^2` itself beyond
      (:func:`~riemfl.manifolds.elementary.squared_angle`).
    * Parallel transport along the minimising geodesic (Absil, Mahony, Sepulchre 2008, eq. 8.1.3
      form): :math:`\Gamma_{x\to y}(v) = v - \frac{\langle y, v\rangle}{1 + \langle x,
      y\rangle}(x + y)`.
    * Riemannian Hessian (Boumal 2023, Sec. 7.2; Absil, Mahony & Trumpf 2013):
      :math:`\operatorname{Hess} f(x)[u] = P_x\big(\nabla^2 \bar f(x)[u] - \langle x,
      \nabla\bar f(x)\rangle\,u\big)` with :math:`P_x(a) = a - \langle x, a\rangle x`: the
      Weingarten map of the sphere is :math:`\mathrm{W}_x(u, n) = -\langle x, n\rangle u`.
    * The default retraction is the metric projection :math:`R_x(u) = (x+u)/\|x+u\|`; its inverse
      is :math:`R_x^{-1}(y) = y/\langle x, y\rangle - x`, defined for :math:`\langle x, y\rangle >
      0`.

    Constants: proximal smoothness 1 (the reach of the unit sphere is its radius), ambient
    diameter 2, injectivity radius :math:`\pi`.

    Parameters
    ----------
    n : int
        Dimension of the ambient space (points are unit vectors of length ``n``), ``n >= 2``.
    """

    def curvature_bound(self) -> tuple[float | None, str]:
        return 1.0, "constant curvature 1"

    def __init__(self, n: int) -> None:
        self.n = integer(n, "Sphere(n): n", minimum=2)
        self.point_shape = (self.n,)
        self.name = f"Sphere({self.n})"

    @property
    def dim(self) -> int:
        return self.n - 1

    reach = 1.0
    diameter = 2.0
    injectivity_radius = math.pi

    # every non-finite argument reaches the result (see Manifold._result_checked): x is not read
    # by the metric; dist, squared_dist (atan2 saturates) and parallel_transport check their
    # arguments first
    _result_checked = result_checked(
        "to_tangent",
        "egrad_to_rgrad",
        "retract",
        "inverse_retract",
        "exp",
        "log",
        inner=(0,),
        norm=(0,),
        transport=(0,),
    )

    def _dot(self, u, v):
        return ops_for(u, v).vecdot(u, v)

    def _project(self, a):
        nrm = ambient_norm(a)
        refuse(nrm <= ops_for(a).eps(a) * 10, ProjectionError, _zero_message, self.name)
        return a / nrm

    def _to_tangent(self, x, a):
        return a - self._dot(x, a) * x

    def _retract(self, x, u):
        y = x + u
        if type(y) is np.ndarray:  # numpy: normalise in place (a single point: a scalar norm)
            if y.ndim == 1:
                y /= math.sqrt(y @ y)
                return y
            return np.divide(y, np.sqrt(self._dot(y, y)), out=y)
        return y / ops_for(y).sqrt(self._dot(y, y))

    def _inverse_retract(self, x, y):
        c = self._dot(x, y)
        refuse(c <= 0, CutLocusError, _inverse_retract_message, self.name, c)
        return y / c - x

    def _exp(self, x, u):
        t2 = self._dot(u, u)
        if type(t2) is np.ndarray:  # numpy: no autograd, so the direct formulas are safe at 0
            t = np.sqrt(t2)
            return np.cos(t) * x + np.sinc(t / np.pi) * u
        return cos_sqrt(t2) * x + sinc_sqrt(t2) * u

    def _log_parts(self, x, y):
        """(ops, <x,y>, w = y - <x,y> x, |w|^2); |w| = sin(angle) for unit x, y."""
        ops = ops_for(x, y)
        c = self._dot(x, y)
        w = y - c * x
        return ops, c, w, self._dot(w, w)

    def _log(self, x, y):
        ops, c, w, s2 = self._log_parts(x, y)
        antipodal = (c < 0) & (s2 <= (1e3 * ops.eps(s2)) ** 2)
        refuse(antipodal, CutLocusError, _antipodal_log_message, self.name)
        return angle_over_sine(c, s2) * w

    def _dist(self, x, y):
        ops, c, _, s2 = self._log_parts(x, y)
        return ops.arctan2(ops.safe_sqrt(s2), c)[..., 0]

    def _squared_dist(self, x, y):
        _, c, _, s2 = self._log_parts(x, y)
        return squared_angle(c, s2)[..., 0]

    def _parallel_transport(self, x, y, u):
        c = self._dot(x, y)
        antipodal = c <= -1 + 1e3 * ops_for(c).eps(c)
        refuse(antipodal, CutLocusError, _antipodal_transport_message, self.name)
        return u - self._dot(y, u) / (1.0 + c) * (x + y)

    def _ehess_to_rhess(self, x, g, h, u):
        return self._to_tangent(x, h - self._dot(x, g) * u)

    def _random_point(self, batch_shape, rng):
        g = rng.standard_normal(batch_shape + self.point_shape)
        return g / np.linalg.norm(g, axis=-1, keepdims=True)

    def _point_violation(self, x):
        ops = ops_for(x)
        return "|x| = 1", ops.to_float(ops.abs(ops.sqrt(self._dot(x, x)) - 1.0))

    def _tangent_violation(self, x, u):
        ops = ops_for(x, u)
        return "<x, u> = 0", ops.to_float(ops.abs(self._dot(x, u)))


def _zero_message(name: str) -> str:
    return (
        f"{name}: P_M(a) = a/|a| is not defined at a = 0 (every point of the sphere is "
        f"nearest); expected a nonzero ambient vector"
    )


def _inverse_retract_message(name: str, c) -> str:
    ops = ops_for(c)
    return (
        f"{name}: the inverse projection retraction needs <x, y> > 0; "
        f"got <x, y> = {ops.to_float(-ops.amax(-c)):.3e}"
    )


def _antipodal_log_message(name: str) -> str:
    return (
        f"{name}: log is not defined for antipodal points (y = -x): every direction is a "
        f"minimising geodesic; expected <x, y> > -1"
    )


def _antipodal_transport_message(name: str) -> str:
    return f"{name}: parallel transport between antipodal points"

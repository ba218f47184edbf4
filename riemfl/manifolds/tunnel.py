r"""The epsilon-tunnel around a Bezier curve (Licudi et al. 2025, Sec. 3; Dold et al. 2025).

The paper defines it in one sentence, "epsilon-balls extruded along a Bezier curve", a set whose
geodesics "coincide with a polynomial curve but maintain the dimensionality" of the parameter
space and which "enables a variant of Sharpness-Aware Minimisation (SAM) [...] for curve
learning". It gives no formula, sampling rule or value of epsilon. *The choice made here* (derived
here) is the closed epsilon-neighbourhood of the curve segment:

.. math::
    T_\epsilon(c) = \{c(t) + u : t \in [0, 1],\ \|u\| \le \epsilon\}
    = \{a : d(a, c([0, 1])) \le \epsilon\}.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import real
from ..backend import Array, RandomState, as_generator, ops_for, to_numpy
from ..errors import ParameterError
from .base import Manifold
from .bezier import BezierCurve, bernstein_weights
from .bezier_fixed import FixedCurve
from .bezier_graph import BezierGraph

__all__ = ["EpsilonTunnel"]

_NO_GEODESICS = (
    "an epsilon-tunnel is a closed full-dimensional set with a boundary: straight lines leave it, "
    "so it has no exp/log/dist; use retract (the metric projection of x + u)"
)


class EpsilonTunnel(Manifold):
    r"""The closed :math:`\epsilon`-neighbourhood of the curve segment :math:`c([0, 1])`.

    Sizes: no size parameter (``eps`` is the radius); points lie in the curve's ambient space
    :math:`\mathbb{R}^d`, and ``dim`` is d (a full-dimensional set).

    * ``contains(a)``: :math:`d(a, c([0,1])) \le \epsilon`;
    * ``project(a)``: the nearest curve point :math:`c(t^*)` (over [0, 1]), then the residual
      clipped to radius :math:`\epsilon`: :math:`c(t^*) + \min(1, \epsilon/\|r\|)\,r`,
      :math:`r = a - c(t^*)`. This is the exact nearest point of the tunnel wherever
      :math:`c(t^*)` is unique;
    * the tangent space is the whole ambient space (``to_tangent`` is the identity), the metric
      the Euclidean one (so the Riemannian Hessian is the Euclidean one, ``ehess_to_rhess(x, g,
      h, u) = h``: an open subset of :math:`\mathbb{R}^D` in the interior), and
      ``retract(x, u) = project(x + u)``; at the check levels ``"deferred"`` and ``"off"``
      torch tensors get the nearest curve point in fixed iterations, without a read
      (:class:`~riemfl.manifolds.bezier_fixed.FixedCurve`); there are no geodesic maps
      (``exp``/``log``/``dist``/``inverse_retract``/``parallel_transport`` raise with the
      reason);
    * :meth:`sample`: t uniform in arc length (or in the parameter) and u uniform in the
      :math:`\epsilon`-ball (or in the ball of the normal space of the curve at t);
      :meth:`adversarial`: the SAM-style point :math:`c(t) + \epsilon\,g/\|g\|` for a gradient g.

    Constants. ``reach`` is :math:`\mathrm{reach}(c) - \epsilon` (the nearest-point
    map of the curve is unique within its reach, and the tunnel's boundary is the level set at
    :math:`\epsilon`), with the reach of :class:`~riemfl.manifolds.bezier_graph.BezierGraph`
    (exact for quadratics); :math:`\epsilon \ge` reach raises ``ParameterError``. ``diameter`` is
    :math:`\max_{s,t}\|c(s) - c(t)\| + 2\epsilon`, the maximum found on a 2001-point grid through
    the control points' Gram matrix (no pass over the D-dimensional data), enlarged by 1e-6
    relative so that it bounds the grid error.
    """

    unsupported = {
        "exp": _NO_GEODESICS,
        "log": _NO_GEODESICS,
        "dist": _NO_GEODESICS,
        "inverse_retract": _NO_GEODESICS,
        "parallel_transport": _NO_GEODESICS,
    }

    def __init__(self, curve: BezierCurve, eps: float) -> None:
        if not isinstance(curve, BezierCurve) or not curve.euclidean:
            raise ParameterError("EpsilonTunnel needs a BezierCurve with a Euclidean base")
        eps = real(eps, "EpsilonTunnel: eps", above=0)
        graph = BezierGraph(curve)  # also rejects curves that are not immersions
        if eps >= graph.reach:
            raise ParameterError(
                f"EpsilonTunnel: eps = {eps} must be below the curve's reach "
                f"{graph.reach:.6g} (else the tunnel's nearest points are not unique)"
            )
        self.curve = graph.curve
        self.eps = float(eps)
        self._reach = graph.reach
        self.point_shape = self.curve.point_shape
        self.name = f"EpsilonTunnel(degree={self.curve.degree}, eps={self.eps:g})"
        self._fixed = FixedCurve(self.curve, self.name)

    @property
    def dim(self) -> int:
        return math.prod(self.point_shape)

    @property
    def reach(self) -> float:
        return self._reach - self.eps

    @property
    def diameter(self) -> float:
        cp = np.reshape(self.curve.control_points, (self.curve.degree + 1, -1))
        gram = cp @ cp.T
        w = np.asarray(bernstein_weights(self.curve.degree, np.linspace(0.0, 1.0, 2001)))
        sq = np.einsum("ti,ij,tj->t", w, gram, w)
        cross = w @ gram @ w.T
        chord2 = np.maximum(sq[:, None] + sq[None, :] - 2 * cross, 0.0)
        return float(np.sqrt(chord2.max())) * (1 + 1e-6) + 2 * self.eps

    # ------------------------------------------------------------------ membership and sampling
    def distance_to_curve(self, a: Array) -> Array:
        """Distance from ``a`` to the curve segment c([0, 1]) (batched)."""
        self._shape(a, "ambient point a")
        return self.curve.like(a).closest_point(a)[1]

    def contains(self, a: Array, atol: float = 0.0) -> Array:
        """Whether each ``a`` lies in the tunnel (within ``atol``)."""
        return self.distance_to_curve(a) <= self.eps + atol

    def sample(
        self,
        n: int,
        rng: RandomState = None,
        *,
        uniform: str = "arc_length",
        normal_only: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``n`` random tunnel points ``(t, c(t) + u)`` (numpy float64).

        t is uniform in arc length (``uniform="arc_length"``) or in the parameter; u is uniform
        in the eps-ball, or, with ``normal_only``, in the eps-ball of the normal space of the
        curve at c(t) (the hyperplane orthogonal to c'(t)).
        """
        gen = as_generator(rng)
        t, centre = self.curve.sample(n, gen, uniform=uniform)
        size = math.prod(self.point_shape)
        g = gen.standard_normal((n, size))
        dims = size
        if normal_only:
            v = np.reshape(np.asarray(self.curve.velocity(t)), (n, size))
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            g -= np.sum(g * v, axis=1, keepdims=True) * v
            dims = size - 1
        radius = self.eps * gen.uniform(0.0, 1.0, size=(n, 1)) ** (1.0 / max(dims, 1))
        u = radius * g / np.linalg.norm(g, axis=1, keepdims=True)
        return t, np.asarray(centre) + np.reshape(u, (n,) + self.point_shape)

    def adversarial(self, t: float, gradient: Array) -> Array:
        r"""SAM-style point :math:`c(t) + \epsilon\,g/\|g\|` (``c(t)`` if g = 0)."""
        self._shape(gradient, "gradient")
        ops = ops_for(gradient)
        curve = self.curve.like(gradient)
        norm = ops.sqrt(ops.sum(gradient * gradient))
        if ops.to_float(norm) == 0.0:
            return curve(t)
        return curve(t) + self.eps * gradient / norm

    # ------------------------------------------------------------------ contract
    def _project(self, a):
        ops = ops_for(a)
        curve, t = self._fixed.closest(a, extended=False)
        centre = curve(t)
        r = a - centre
        rn = ops.sqrt(ops.sum(r * r, axis=self._axes))
        outside = rn > self.eps
        scale = ops.where(
            outside, self.eps / ops.where(outside, rn, ops.ones_like(rn)), 1.0 + 0 * rn
        )
        return centre + ops.reshape(scale, tuple(scale.shape) + (1,) * self.ndim) * r

    def _to_tangent(self, x, a):
        return a + 0.0 * x

    def _ehess_to_rhess(self, x, g, h, u):
        return self._to_tangent(x, h)

    def _retract(self, x, u):
        return self._project(x + u)

    def _random_point(self, batch_shape, rng):
        n = math.prod(batch_shape)
        _, pts = self.sample(n, rng)
        return np.reshape(pts, tuple(batch_shape) + self.point_shape)

    def _point_violation(self, x):
        d = np.asarray(self.curve.closest_point(to_numpy(x, np.float64))[1])
        return "dist(x, curve) <= eps", float(np.max(np.maximum(d - self.eps, 0.0)))

    def _tangent_violation(self, x, u):
        return "u in R^D (full-dimensional)", 0.0

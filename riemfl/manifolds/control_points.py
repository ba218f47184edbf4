r"""The manifold :math:`M^n` of the n control points of a curve on M (Licudi et al. 2025, Sec. 3).

AsyncBezier learns a quadratic curve between the global model and a client model: its control
points live in :math:`M_\Phi = (M_\Theta)^3`, and the *point parametrisation* :math:`\phi_\Theta
= (\Theta, \Theta, \Theta)` embeds :math:`M_\Theta` as the degenerate curves :math:`M_\Phi^0`
(all control points equal). *A choice where the paper is open:* it names the space
:math:`(M_\Theta)^n` but not its metric; riemfl gives it the product metric.
"""

from __future__ import annotations

import math

from .._validation import integer
from ..backend import Array, ops_for
from ..errors import NotOnManifoldError, ParameterError
from .base import Manifold, dist_from_squared

__all__ = ["ControlPoints"]


class ControlPoints(Manifold):
    r""":math:`M^n`: n points of a base manifold M, as arrays of shape ``(n, *M.point_shape)``.

    Sizes: ``n_points`` is the number of points (ambient: points have shape ``(n_points,
    *M.point_shape)``); ``dim`` is ``n_points * M.dim``.

    The control-point axis is an extra batch axis of the base manifold, so every map is the base
    map applied to all n points at once; ``inner``, ``norm`` and ``dist`` combine over the points
    with the product metric (:math:`\langle u, v\rangle = \sum_i \langle u_i, v_i\rangle_{x_i}`,
    :math:`d^2 = \sum_i d_i^2`), and the Riemannian Hessian is the base's on each point (the
    product metric's connection is the factors'). Unlike :class:`~riemfl.manifolds.Product`
    there is no flat packing: a point is directly the control-point array of a
    :class:`~riemfl.manifolds.bezier.BezierCurve`.

    Constants: reach and injectivity radius of M, diameter :math:`\sqrt n\,\mathrm{diam}(M)`.
    """

    def __init__(self, manifold: Manifold, n_points: int) -> None:
        if not isinstance(manifold, Manifold):
            raise ParameterError("ControlPoints(manifold, n_points) needs a Manifold")
        self.base = manifold
        self.n_points = integer(n_points, "ControlPoints(manifold, n_points): n_points", minimum=1)
        self.point_shape = (self.n_points,) + tuple(manifold.point_shape)
        self.name = f"ControlPoints({manifold.name}, {self.n_points})"
        self.unsupported = dict(manifold.unsupported)

    @property
    def dim(self) -> int:
        return self.n_points * self.base.dim

    @property
    def reach(self) -> float:
        return self.base.reach

    @property
    def diameter(self) -> float:
        return math.sqrt(self.n_points) * self.base.diameter

    @property
    def injectivity_radius(self) -> float:
        return self.base.injectivity_radius

    def supports(self, method: str) -> tuple[bool, str]:
        return self.base.supports(method)

    # ------------------------------------------------------------------ point parametrisation
    def phi(self, theta: Array) -> Array:
        r""":math:`\phi(\Theta) = (\Theta, \dots, \Theta)`: the degenerate curve at a point."""
        self.base._shape(theta, "point theta")
        ops = ops_for(theta)
        lead = tuple(theta.shape[: theta.ndim - self.base.ndim])
        expanded = ops.reshape(theta, lead + (1,) + tuple(self.base.point_shape))
        return expanded + ops.zeros_like(ops.broadcast_to(expanded, lead + self.point_shape))

    def phi_inverse(self, x: Array, atol: float | None = None) -> Array:
        r""":math:`\phi^{-1}`, defined on :math:`M^0 = \phi(M)` only (all control points equal).

        Raises :class:`~riemfl.errors.NotOnManifoldError` with the largest spread otherwise.
        """
        self._shape(x, "control points x")
        ops = ops_for(x)
        rest = (slice(None),) * self.base.ndim
        first = x[(Ellipsis, slice(0, 1)) + rest]
        spread = ops.to_float(ops.amax(ops.abs(x - first))) if x.shape[-self.ndim] > 1 else 0.0
        scale = max(1.0, ops.to_float(ops.amax(ops.abs(x))))
        tol = 1e3 * ops.eps(x) * scale if atol is None else atol
        if spread > tol:
            raise NotOnManifoldError(
                f"{self.name}: phi^-1 is only defined where all control points are equal; they "
                f"differ by up to {spread:.3e} > {tol:.1e}"
            )
        return first[(Ellipsis, 0) + rest]

    # ------------------------------------------------------------------ contract (delegated)
    def _reduce(self, values):
        return ops_for(values).sum(values, axis=-1)

    def _project(self, a):
        return self.base._project(a)

    def _to_tangent(self, x, a):
        return self.base._to_tangent(x, a)

    def _egrad_to_rgrad(self, x, g):
        return self.base._egrad_to_rgrad(x, g)

    def _ehess_to_rhess(self, x, g, h, u):
        return self.base._ehess_to_rhess(x, g, h, u)

    def _inner(self, x, u, v):
        return self._reduce(self.base._inner(x, u, v))

    def _retract(self, x, u):
        return self.base._retract(x, u)

    def _inverse_retract(self, x, y):
        return self.base._inverse_retract(x, y)

    def _exp(self, x, u):
        return self.base._exp(x, u)

    def _log(self, x, y):
        return self.base._log(x, y)

    def _squared_dist(self, x, y):
        return self._reduce(self.base._squared_dist(x, y))

    _dist = dist_from_squared

    def _transport(self, x, y, u):
        return self.base._transport(x, y, u)

    def _parallel_transport(self, x, y, u):
        return self.base._parallel_transport(x, y, u)

    def _random_point(self, batch_shape, rng):
        return self.base._random_point(tuple(batch_shape) + (self.n_points,), rng)

    def _point_violation(self, x):
        return self.base._point_violation(x)

    def _tangent_violation(self, x, u):
        return self.base._tangent_violation(x, u)

    def default_atol(self, a) -> float:
        return self.base.default_atol(a)

    def _point_gap(self, x, y):
        g = self.base._point_gap(x, y)
        return ops_for(g).sqrt(self._reduce(g * g))

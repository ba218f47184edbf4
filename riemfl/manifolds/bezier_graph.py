r"""The image of a Euclidean Bezier curve as a 1-dimensional embedded submanifold.

"The graph of a Bezier curve is a 1-dimensional submanifold, on which the geodesics trivially
follow the polynomial" (Licudi et al. 2025, Sec. 3). :class:`BezierGraph` implements the manifold
contract on the image of the *extended* curve :math:`c: \mathbb{R} \to
\mathbb{R}^{\text{shape}}` (the polynomial beyond [0, 1]), so that it has no boundary: the metric
is the induced (pull-back) one, geodesics are the curve traversed at unit speed, and geodesic
distance is arc length.

*A choice where the paper is open.* The paper's curves are defined on [0, 1] and it notes that
this domain "can be sensibly extended" to the real line (Licudi et al. 2025, Sec. 3, footnote);
the graph is taken over the extended domain, so that ``exp`` never stops at an end point.
"""

from __future__ import annotations

import math

import numpy as np

from ..backend import Array, ops_for, to_numpy
from ..errors import ParameterError
from .base import Manifold
from .bezier import BezierCurve
from .bezier_arclength import quadratic_coefficients
from .bezier_fixed import FixedCurve

__all__ = ["BezierGraph"]


class BezierGraph(Manifold):
    r"""The curve :math:`\{c(t) : t \in \mathbb{R}\}` of a Euclidean Bezier curve, as a manifold.

    Sizes: no size parameter; points lie in the curve's ambient space :math:`\mathbb{R}^d` (d
    from the control points' shape), and ``dim`` is 1.

    With :math:`t(x)` the parameter of a point, :math:`\hat v(x) = c'(t)/\|c'(t)\|` and
    :math:`s(t) = \int_0^t\|c'\|` the arc length:

    * ``project(a)`` = :math:`c(t^*(a))`, the nearest curve point (:meth:`BezierCurve.closest_point`
      over the extended curve);
    * tangent space :math:`\mathrm{span}\,c'(t)`, ``to_tangent(x, a)`` =
      :math:`\langle a, \hat v\rangle\hat v`; the metric is the Euclidean one restricted to it;
    * ``exp(x, u)`` moves by signed arc length :math:`\langle u, \hat v\rangle`: :math:`c(s^{-1}(
      s(t(x)) + \langle u, \hat v\rangle))`; ``log(x, y) = (s(t(y)) - s(t(x)))\,\hat v(x)``;
      ``dist`` = :math:`|s(t(y)) - s(t(x))|`; parallel transport carries the coordinate along
      :math:`\hat v` (exact, an isometry); ``retract`` = ``exp``;
    * ``ehess_to_rhess(x, g, h, u)`` = :math:`\langle h + \langle\kappa, g\rangle u, \hat
      v\rangle\,\hat v`, the projected Euclidean Hessian plus the Weingarten map
      :math:`\mathrm{W}_x(u, n) = \langle\kappa, n\rangle u` of a curve, with the curvature
      vector :math:`\kappa = (c'' - \langle c'', \hat v\rangle\hat v)/\|c'\|^2` (derived
      here from the arc-length parametrisation :math:`\gamma(s) = c(t(s))`: :math:`\gamma' =
      \hat v`, :math:`\gamma'' = \kappa`, so :math:`\tfrac{d^2}{ds^2}\bar f(\gamma) =
      \langle \nabla^2\bar f[\hat v], \hat v\rangle + \langle\nabla\bar f, \kappa\rangle`;
      only the normal part of g counts, as :math:`\kappa \perp \hat v`);
    * torch: every map is differentiable in its arguments (the parameter of a point and the
      inverse arc length are found without a gradient, then one differentiable Newton step at
      the solution gives the exact first derivative by the implicit function theorem);
    * check levels: the two solves run on the host, exactly, at ``"eager"`` and for numpy
      arrays; for torch tensors at ``"deferred"`` and ``"off"`` they run in a fixed number of
      tensor operations that read nothing back (the closest parameter from a quadratic's cubic
      in closed form, else by Aberth-Ehrlich iterations; the inverse arc length by bracketed
      Newton steps:
      :class:`~riemfl.manifolds.bezier_fixed.FixedCurve`), and one that did not converge raises
      :class:`~riemfl.errors.ConvergenceError` at the boundary of ``"deferred"``.

    Constants. ``reach`` is the reach of the curve, at most its minimal radius of
    curvature and half its bottleneck distance. For a quadratic :math:`c(t) = A + 2ta + t^2b`
    (a parabola, convex, no bottleneck) it is exact: the minimal radius of curvature, at the
    vertex :math:`t_v = -a\cdot b/b\cdot b`, is :math:`2\|a_\perp\|^2/\|b\|` with :math:`a_\perp
    = a - (a\cdot b/b\cdot b)\,b`; infinite for a straight line (:math:`b = 0`). Other degrees: a
    numerical estimate, the minimum over a dense grid of :math:`t \in [-1, 2]` of the radius of
    curvature and of half the distance between non-neighbouring grid points whose chord is nearly
    normal to both tangents (an upper bound of the true reach, close for moderate bends).
    ``diameter`` and ``injectivity_radius`` are infinite (an embedded copy of the real line;
    higher-degree extended curves that self-intersect are not embedded and are not detected).

    Raises :class:`~riemfl.errors.ParameterError` if the curve is not an immersion (its velocity
    vanishes: all control points equal, or a quadratic folding back on a line).
    """

    def __init__(self, curve: BezierCurve) -> None:
        if not isinstance(curve, BezierCurve) or not curve.euclidean:
            raise ParameterError("BezierGraph needs a BezierCurve with a Euclidean base")
        # a float64 numpy copy: the reach below is computed once, so later in-place changes of
        # the given control points (a torch optimiser step) must not reach the graph
        self.curve = BezierCurve(np.array(to_numpy(curve.control_points), dtype=np.float64))
        self.point_shape = self.curve.point_shape
        self.name = f"BezierGraph(degree={self.curve.degree}, shape={self.point_shape})"
        self._fixed = FixedCurve(self.curve, self.name)
        self._check_immersion()
        self._reach = self._compute_reach()

    @property
    def dim(self) -> int:
        return 1

    @property
    def reach(self) -> float:
        return self._reach

    diameter = math.inf
    injectivity_radius = math.inf
    unsupported = {}

    # ------------------------------------------------------------------ construction helpers
    def _check_immersion(self) -> None:
        scale = float(np.max(np.abs(self.curve.control_points))) + 1e-300
        minimal = self._fixed.least_speed  # the least speed over the whole real line
        if minimal <= 1e-9 * scale:
            raise ParameterError(
                f"{self.name}: the curve is not an immersion (its velocity vanishes, minimum speed "
                f"{minimal:.3e}): all control points equal, or the curve folds back on itself; "
                f"expected a regular curve"
            )

    def _compute_reach(self) -> float:
        if self.curve.degree == 2:
            _, a, b = quadratic_coefficients(self.curve.control_points)
            bb = float(b @ b)
            if bb == 0.0:
                return math.inf
            a_perp = a - (a @ b) / bb * b
            return 2.0 * float(a_perp @ a_perp) / math.sqrt(bb)
        grid = np.linspace(-1.0, 2.0, 1201)
        v = np.reshape(np.asarray(self.curve.velocity(grid)), (grid.size, -1))
        acc = np.reshape(np.asarray(self.curve.acceleration(grid)), (grid.size, -1))
        speed2 = np.sum(v * v, axis=1)
        cross2 = np.maximum(speed2 * np.sum(acc * acc, axis=1) - np.sum(v * acc, axis=1) ** 2, 0)
        radius = np.min(speed2**1.5 / np.maximum(np.sqrt(cross2), 1e-300))
        pts = np.reshape(np.asarray(self.curve(grid)), (grid.size, -1))
        unit = v / np.sqrt(speed2)[:, None]
        chords = pts[None, :, :] - pts[:, None, :]
        lengths = np.linalg.norm(chords, axis=-1)
        normal_i = np.abs(np.einsum("ijk,ik->ij", chords, unit)) <= 0.02 * lengths
        normal_j = np.abs(np.einsum("ijk,jk->ij", chords, unit)) <= 0.02 * lengths
        far = np.abs(np.arange(grid.size)[:, None] - np.arange(grid.size)[None, :]) > 20
        mask = normal_i & normal_j & far
        bottleneck = float(lengths[mask].min()) / 2 if mask.any() else math.inf
        return float(min(radius, bottleneck))

    # ------------------------------------------------------------------ parameters of points
    def parameter(self, x: Array) -> Array:
        """The parameter t(x) of the curve point nearest to x (batched; differentiable in torch)."""
        self._shape(x, "point x")
        return self._param(x)

    def _param(self, x):
        return self._located(x)[1]

    def _located(self, x) -> tuple[BezierCurve, Array]:
        """The curve in x's array type, dtype and device, and the parameter t(x) on it."""
        return self._fixed.closest(x, extended=True)

    def _unit_velocity(self, curve, t):
        ops = ops_for(t)
        v = curve.velocity(t)
        return v / self._expand(ops.sqrt(ops.sum(v * v, axis=self._axes)))

    def _expand(self, a):
        return ops_for(a).reshape(a, tuple(a.shape) + (1,) * self.ndim)

    # ------------------------------------------------------------------ contract
    def _project(self, a):
        curve, t = self._located(a)
        return curve(t)

    def _to_tangent(self, x, a):
        v_hat = self._unit_velocity(*self._located(x))
        return self._expand(ops_for(a).sum(a * v_hat, axis=self._axes)) * v_hat

    def _ehess_to_rhess(self, x, g, h, u):
        ops = ops_for(x, g, h, u)
        curve, t = self._located(x)
        v_hat = self._unit_velocity(curve, t)
        velocity, acceleration = curve.velocity(t), curve.acceleration(t)
        speed2 = ops.sum(velocity * velocity, axis=self._axes)
        along = ops.sum(acceleration * v_hat, axis=self._axes)
        normal = acceleration - self._expand(along) * v_hat  # kappa * |c'|^2
        bend = ops.sum(normal * g, axis=self._axes) / speed2  # <kappa, g>
        w = h + self._expand(bend) * u
        return self._expand(ops.sum(w * v_hat, axis=self._axes)) * v_hat

    def _exp(self, x, u):
        curve, t = self._located(x)
        v_hat = self._unit_velocity(curve, t)
        shift = ops_for(u).sum(u * v_hat, axis=self._axes)
        return curve(self._fixed.parameter_at_arc_length(t, shift))

    _retract = _exp

    def _log(self, x, y):
        curve, tx = self._located(x)
        length = self._fixed.arc_length_at(self._param(y)) - self._fixed.arc_length_at(tx)
        return self._expand(length) * self._unit_velocity(curve, tx)

    _inverse_retract = _log

    def _dist(self, x, y):
        arc = self._fixed.arc_length_at
        return ops_for(x).abs(arc(self._param(y)) - arc(self._param(x)))

    def _parallel_transport(self, x, y, u):
        curve, tx = self._located(x)
        vx = self._unit_velocity(curve, tx)
        vy = self._unit_velocity(curve, self._param(y))
        return self._expand(ops_for(u).sum(u * vx, axis=self._axes)) * vy

    _transport = _parallel_transport

    def _random_point(self, batch_shape, rng):
        return np.asarray(self.curve(rng.uniform(0.0, 1.0, size=batch_shape)))

    def _point_violation(self, x):
        x = to_numpy(x, np.float64)
        gap = x - np.asarray(self.curve(self.curve.closest_point(x, extended=True)[0]))
        axes = tuple(range(-self.ndim, 0))
        return "x on the curve", float(np.max(np.sqrt(np.sum(gap * gap, axis=axes))))

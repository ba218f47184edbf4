r"""The Lorentz (hyperboloid) model of hyperbolic space,
:math:`\mathbb{H}^n_\beta = \{x \in \mathbb{R}^{n+1} : \langle x, x\rangle_L = -\beta,\ x_0 > 0\}`,
with the Minkowski product :math:`\langle u, v\rangle_L = -u_0 v_0 + \sum_{i\ge1} u_i v_i` and
sectional curvature :math:`-1/\beta`.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import integer, real
from ..backend import Array, ops_for
from ..check_levels import level_of, refuse
from ..errors import ProjectionError
from .base import Manifold, result_checked
from .elementary import acosh1p_over_sinh, asinh_sqrt_over, cosh_sqrt, sinhc_sqrt

__all__ = ["Lorentz", "minkowski_inner"]


def minkowski_inner(u: Array, v: Array, keepdims: bool = False) -> Array:
    r""":math:`\langle u, v\rangle_L = -u_0 v_0 + \sum_{i \ge 1} u_i v_i` over the last axis."""
    ops = ops_for(u, v)
    prod = u * v
    out = ops.sum(prod[..., 1:], axis=-1, keepdims=True) - prod[..., :1]
    return out if keepdims else out[..., 0]


def _newton_steps(eps: float) -> int:
    r"""The fixed number of Newton steps of :meth:`Lorentz._projection_root` without a read.

    From its start :math:`s_0 \approx 2\sqrt\beta` at the focal point (a triple root of g),
    Newton's method shrinks s by 2/3 a step until :math:`s^2/\beta` is below eps (then g
    rounds to 0): :math:`\log(\sqrt{\varepsilon}/2)/\log(2/3)` steps (47 in float64, 22 in
    float32), here with 8 more; the simple roots need at most about 16.
    """
    return math.ceil(math.log(math.sqrt(eps) / 2.0) / math.log(2.0 / 3.0)) + 8


def _focal_axis_message(name: str, beta: float) -> str:
    return (
        f"{name}: the nearest point of the hyperboloid is not unique for points on the axis "
        f"beyond the focal point (a_1: = 0 and a_0 > 2 sqrt(beta) = {2 * math.sqrt(beta):.4g}); "
        f"expected a point within sqrt(beta) of M"
    )


class Lorentz(Manifold):
    r"""Hyperboloid :math:`\mathbb{H}^n_\beta \subset \mathbb{R}^{n+1}` (curvature
    :math:`-1/\beta`).

    Sizes: ``n`` is the intrinsic dimension (``dim`` is n), not the ambient size: points are
    vectors of :math:`\mathbb{R}^{n+1}`.

    With :math:`\theta = \|u\|_L/\sqrt\beta` and :math:`\theta_{xy} = d(x,y)/\sqrt\beta`:

    * metric: the Minkowski product restricted to :math:`T_x = \{u : \langle x, u\rangle_L =
      0\}`; ``to_tangent(x, a)`` is the Minkowski-orthogonal projection
      :math:`a + \langle x, a\rangle_L\, x/\beta`; ``egrad_to_rgrad`` applies it to
      :math:`J g` with :math:`J = \mathrm{diag}(-1, 1, \dots, 1)`;
    * Riemannian Hessian: :math:`\operatorname{Hess} f(x)[u] = P_x\big(J\nabla^2\bar f(x)[u]
      + \tfrac1\beta\langle x, \nabla\bar f(x)\rangle\, u\big)`, with
      :math:`\langle x, \nabla\bar f\rangle` the Euclidean product (Boumal 2023, Sec. 7.6,
      for :math:`\beta = 1`). Derivation: the ambient Minkowski space is flat, so the
      Levi-Civita connection of M is the Minkowski-orthogonal projection of the ambient
      derivative; the gradient field :math:`G(y) = Jg(y) + \langle y, Jg(y)\rangle_L\,y/\beta`
      has :math:`\mathrm{D}G(x)[u] = Jh + (\dots)\,x + \langle x, Jg\rangle_L\,u/\beta`,
      :math:`P_x` removes the multiple of x, and :math:`\langle x, Jg\rangle_L = x^\top g`;
    * :math:`\mathrm{Exp}_x(u) = \cosh\theta\, x + \sqrt\beta\sinh\theta\, u/\|u\|_L`;
    * :math:`d(x,y) = \sqrt\beta\,\mathrm{arccosh}(-\langle x,y\rangle_L/\beta)`, evaluated as
      :math:`2\sqrt\beta\,\mathrm{arcsinh}(\|x-y\|_L/(2\sqrt\beta))` for close points (no
      cancellation; :math:`\langle x - y, x - y\rangle_L = 4\beta\sinh^2(\theta_{xy}/2)`);
      ``squared_dist`` :math:`2\beta e\,(\operatorname{arsinh}\sqrt{e/2}/\sqrt{e/2})^2`,
      :math:`e = \cosh\theta_{xy} - 1`, a function of e without its square root (smooth at
      :math:`y = x`);
    * :math:`\mathrm{Log}_x(y) = \frac{\theta_{xy}}{\sinh\theta_{xy}}(y + \langle x,
      y\rangle_L\, x/\beta)`;
    * parallel transport :math:`v + \frac{\langle y, v\rangle_L}{\beta - \langle x,
      y\rangle_L}(x + y)`;
    * two ways onto M: :meth:`lift` (:math:`x_0 = \sqrt{\beta + \|\bar a\|^2}`, the cheap map
      geoopt calls ``projx``; not a nearest point) and :meth:`project`, the exact nearest point in
      the Euclidean ambient norm.

    **Exact projection.** By rotational symmetry the nearest point lies in the plane of the
    :math:`x_0` axis and :math:`\bar a`: write :math:`r = \|\bar a\|` and the candidate
    :math:`(\sqrt{\beta + s^2},\ s\,\bar a/r)`. Stationarity of :math:`(\sqrt{\beta+s^2} - a_0)^2
    + (s - r)^2` gives :math:`g(s) = 2s - r - a_0 s/\sqrt{\beta + s^2} = 0`. On :math:`s \ge 0`,
    g is convex (:math:`g'' = 3 a_0 \beta s(\beta + s^2)^{-5/2} \ge 0` for :math:`a_0 \ge 0`;
    g is increasing for :math:`a_0 < 0`) with :math:`g(0) = -r \le 0`, so it has one root, reached
    monotonically by Newton's method from :math:`s = r + |a_0|` (where :math:`g \ge 0`). In torch,
    the root is found without gradient tracking and one differentiable Newton step at the root
    gives the exact implicit derivative.

    **Proximal smoothness** :math:`\hat\gamma = \sqrt\beta`. The epigraph
    :math:`K = \{x_0 \ge \sqrt{\beta + \|\bar x\|^2}\}` is convex, so points below M have a
    unique nearest point. Above M, the focal points are the centres of curvature; the principal
    radii of curvature (Euclidean, of the graph :math:`x_0 = \sqrt{\beta + \rho^2}`) are
    :math:`\rho_1 = (\beta + 2\rho^2)^{3/2}/\beta` along meridians and
    :math:`\rho_2 = \sqrt{\beta + \rho^2}\sqrt{\beta + 2\rho^2}/\sqrt\beta` around the axis, both
    minimal at the vertex :math:`\rho = 0`, where they equal :math:`\sqrt\beta`. The set of points
    with several nearest points is the axis ray :math:`\{\bar a = 0, a_0 > 2\sqrt\beta\}`, at
    distance :math:`\ge \sqrt\beta` from M, so the reach is exactly :math:`\sqrt\beta`; ``project``
    raises ``ProjectionError`` on that ray. Diameter and injectivity radius are infinite.

    **Stability far from the origin.** ``check_point`` measures :math:`|\langle x,x\rangle_L +
    \beta|` relative to :math:`\|x\|^2` (the rounding error of the form itself), so points from
    ``lift``/``exp`` far from the origin pass in float32 and float64 (geoopt issue #193).
    """

    def curvature_bound(self) -> tuple[float | None, str]:
        return -1.0 / self.beta, "constant curvature -1/beta"

    def __init__(self, n: int, beta: float = 1.0) -> None:
        self.n = integer(n, "Lorentz(n): n", minimum=1)
        self.beta = real(beta, "Lorentz: beta", above=0)
        self.point_shape = (self.n + 1,)
        self.name = f"Lorentz({self.n})" if beta == 1.0 else f"Lorentz({self.n}, beta={beta})"

    @property
    def dim(self) -> int:
        return self.n

    @property
    def reach(self) -> float:
        return math.sqrt(self.beta)

    diameter = math.inf
    injectivity_radius = math.inf

    # see Manifold._result_checked: x is not read by the metric; exp clamps <u, u>_L at 0 and
    # log clamps cosh(d) - 1 at 0, but both add the arguments themselves (times factors that are
    # never 0) to the result, and the transport's coefficient multiplies x + y. norm (a clamp of
    # <u, u>_L, which is -inf for an infinite u_0) and dist (a clamp, then arcsinh) check first
    _result_checked = result_checked(
        "to_tangent",
        "egrad_to_rgrad",
        "retract",
        "inverse_retract",
        "exp",
        "log",
        "transport",
        "parallel_transport",
        inner=(0,),
    )
    _euclidean_norm_ok = False

    # ----------------------------------------------------------------- ways onto the manifold
    def lift(self, a: Array) -> Array:
        r"""Cheap map onto M: keep :math:`\bar a = a_{1:}` and set :math:`x_0 = \sqrt{\beta +
        \|\bar a\|^2}` (not the nearest point; see :meth:`project`)."""
        self._shape(a, "ambient point a")
        ops = ops_for(a)
        spatial = a[..., 1:]
        x0 = ops.sqrt(self.beta + ops.sum(spatial * spatial, axis=-1, keepdims=True))
        return ops.concatenate([x0, spatial], axis=-1)

    def _projection_root(self, ops, a0, r):
        r"""Root s >= 0 of g(s) = 2s - r - a0 s / sqrt(beta + s^2) by monotone Newton.

        Eager, until every step is below 4 eps max(s, 1) (at most 100 steps). Otherwise (no
        read of the steps) a fixed :func:`_newton_steps` steps, as many as the slowest
        convergence needs: g has a triple root at the focal point, where the steps shrink s by
        2/3 each until it stalls (at :math:`s^2/\beta` below eps); every other root is simple
        and reached in at most about 16 steps.
        """
        beta = self.beta
        s = r + ops.abs(a0)
        eager = level_of(a0) == "eager"
        for _ in range(100 if eager else _newton_steps(ops.eps(s))):
            q = ops.sqrt(beta + s * s)
            g = 2.0 * s - r - a0 * s / q
            dg = 2.0 - a0 * beta / (q * q * q)
            dg = ops.where(dg > 0, dg, ops.ones_like(dg))
            step = g / dg
            s = ops.maximum(s - step, 0.0)
            if eager and not ops.any(ops.abs(step) > 4 * ops.eps(s) * ops.maximum(s, 1.0)):
                break
        return s

    def _project(self, a):
        ops = ops_for(a)
        a0 = a[..., :1]
        spatial = a[..., 1:]
        r = ops.sqrt(ops.sum(spatial * spatial, axis=-1, keepdims=True))
        eps = ops.eps(a)
        on_axis = r <= 1e2 * eps * ops.maximum(ops.abs(a0), 1.0)
        beyond_focus = on_axis & (a0 > 2.0 * math.sqrt(self.beta) * (1 + 1e2 * eps))
        refuse(beyond_focus, ProjectionError, _focal_axis_message, self.name, self.beta)
        with ops.no_grad():
            s = self._projection_root(ops, ops.detach(a0), ops.detach(r))
        if ops.is_torch and a.requires_grad:
            q = ops.sqrt(self.beta + s * s)
            g = 2.0 * s - r - a0 * s / q
            dg = 2.0 - a0 * self.beta / (q * q * q)
            s = s - g / dg
        r_safe = ops.where(on_axis, ops.ones_like(r), r)
        direction = ops.where(on_axis, ops.zeros_like(spatial), spatial / r_safe)
        x0 = ops.sqrt(self.beta + s * s)
        return ops.concatenate([x0, s * direction], axis=-1)

    # ----------------------------------------------------------------- metric and tangent space
    def _inner(self, x, u, v):
        return minkowski_inner(u, v)

    def _to_tangent(self, x, a):
        return a + minkowski_inner(x, a, keepdims=True) * x / self.beta

    def _egrad_to_rgrad(self, x, g):
        ops = ops_for(g)
        flipped = ops.concatenate([-g[..., :1], g[..., 1:]], axis=-1)
        return self._to_tangent(x, flipped)

    def _ehess_to_rhess(self, x, g, h, u):
        ops = ops_for(x, g, h, u)
        flipped = ops.concatenate([-h[..., :1], h[..., 1:]], axis=-1)
        return self._to_tangent(x, flipped + ops.sum(x * g, axis=-1, keepdims=True) / self.beta * u)

    # ----------------------------------------------------------------- exact maps
    def _exp(self, x, u):
        theta2 = minkowski_inner(u, u, keepdims=True) / self.beta
        return cosh_sqrt(theta2) * x + sinhc_sqrt(theta2) * u

    _retract = _exp

    def _cosh_minus_one(self, x, y):
        r""":math:`e = \cosh\theta_{xy} - 1 \ge 0`, without cancellation for close points.

        :math:`\langle x - y, x - y\rangle_L = 2\beta e`; far apart, :math:`e = -\langle x,
        y\rangle_L/\beta - 1` is used instead.
        """
        ops = ops_for(x, y)
        d = x - y
        chord = minkowski_inner(d, d, keepdims=True) / (2.0 * self.beta)
        direct = -minkowski_inner(x, y, keepdims=True) / self.beta - 1.0
        return ops.maximum(ops.where(direct < 1.0, chord, direct), 0.0)

    def _log(self, x, y):
        e = self._cosh_minus_one(x, y)
        # y - cosh(theta) x = (y - x) - e x: no cancellation for close points
        return acosh1p_over_sinh(e) * ((y - x) - e * x)

    _inverse_retract = _log

    def _dist(self, x, y):
        ops = ops_for(x, y)
        e = self._cosh_minus_one(x, y)
        return 2.0 * math.sqrt(self.beta) * ops.arcsinh(ops.safe_sqrt(0.5 * e))[..., 0]

    def _squared_dist(self, x, y):
        e = self._cosh_minus_one(x, y)
        ratio = asinh_sqrt_over(0.5 * e)
        return (2.0 * self.beta * e * ratio * ratio)[..., 0]

    def _parallel_transport(self, x, y, v):
        coef = minkowski_inner(y, v, keepdims=True) / (
            self.beta - minkowski_inner(x, y, keepdims=True)
        )
        return v + coef * (x + y)

    _transport = _parallel_transport

    # ----------------------------------------------------------------- sampling and checks
    def _random_point(self, batch_shape, rng):
        spatial = rng.standard_normal(batch_shape + (self.n,))
        x0 = np.sqrt(self.beta + np.sum(spatial * spatial, axis=-1, keepdims=True))
        return np.concatenate([x0, spatial], axis=-1)

    def default_atol(self, a) -> float:
        return 1e3 * ops_for(a).eps(a)

    def _point_violation(self, x):
        ops = ops_for(x)
        form = minkowski_inner(x, x)
        scale = ops.sum(x * x, axis=-1) + self.beta
        rel = ops.abs(form + self.beta) / scale
        if ops.any(x[..., 0] <= 0):
            return "x_0 > 0 (upper sheet)", math.inf
        return "<x, x>_L = -beta (relative to |x|^2)", ops.to_float(rel)

    def _tangent_violation(self, x, u):
        ops = ops_for(x, u)
        scale = ops.sqrt(ops.sum(x * x, axis=-1) * ops.sum(u * u, axis=-1)) + self.beta
        return "<x, u>_L = 0 (relative)", ops.to_float(ops.abs(minkowski_inner(x, u)) / scale)

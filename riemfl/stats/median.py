r"""The weighted geometric median of points on a manifold, by the Riemannian Weiszfeld algorithm.

The weighted geometric median of :math:`p_1, \dots, p_n` with weights :math:`w_i \ge 0`,
:math:`\sum_i w_i = 1`, is a minimiser of

.. math:: f(m) = \sum_i w_i\, d(m, p_i),

a robust centre: points of total weight below 1/2 may move arbitrarily far and the median
moves a bounded amount (its breakdown point is 1/2; Fletcher, Venkatasubramanian & Joshi 2009).
Their Riemannian Weiszfeld algorithm, here in its weighted form, is

.. math::

    m \leftarrow \mathrm{Exp}_m(\alpha\, v), \qquad
    v = \frac{R}{S}, \qquad R = \sum_{i \in I} w_i\,\frac{\mathrm{Log}_m(p_i)}{d_i}, \qquad
    S = \sum_{i \in I} \frac{w_i}{d_i}, \qquad d_i = \|\mathrm{Log}_m(p_i)\|_m,

over the points :math:`I = \{i : d_i > \varepsilon\}` that do not coincide with m. Away from
the data :math:`\operatorname{grad} f(m) = -R`, and v is a gradient step of length
:math:`\|R\|/S`. Fletcher et al. prove convergence for :math:`0 < \alpha \le 2` on manifolds of
non-negative curvature when the points do not all lie on one geodesic.

**On a data point.** Let :math:`\eta` be the total weight of the points with :math:`d_i \le
\varepsilon` (an iterate that close to a data point is first moved onto it). There f is not
differentiable: its subdifferential is :math:`-R + \bar B(0, \eta)`, so m is a median (a
stationary point) exactly when :math:`\|R\|_m \le \eta`, the optimality condition of a data
point used by Vardi & Zhang (2000), and the iteration stops there. Otherwise it steps away as
their modified Weiszfeld map does, in the tangent space:

.. math:: m \leftarrow \mathrm{Exp}_m\big(\alpha\,(1 - \eta/\|R\|_m)\, v\big),

a step along the steepest-descent direction :math:`R/\|R\|_m` of length :math:`\alpha(\|R\|_m -
\eta)/S` (with :math:`\eta = 0` it is Fletcher et al.'s step). A point whose weight is at least
the sum of the others' is a median (:math:`f(x) \ge f(p_k) + (w_k - \sum_{i \ne k} w_i)\,
d(x, p_k)` by the triangle inequality, on any metric space); it is returned exactly.

**Near a data point** (riemfl's choice). Weiszfeld's iteration is slow when the median lies at
or near a data point :math:`p_j`: the majorising quadratic of :math:`w_j d(\cdot, p_j)`, of
curvature :math:`w_j/d_j`, dominates the step, and the distance to the median shrinks by a
factor of about :math:`w_j/\|R_j\|` per step, close to 1 when :math:`p_j`'s weight nearly
balances the others' pull :math:`R_j`. So where :math:`p_j` carries at least half of the step's
weights (:math:`w_j/d_j \ge S/2`), the step keeps :math:`p_j`'s term exact and majorises only
the others': with :math:`\ell = \mathrm{Log}_m(p_j)`, :math:`S_j = S - w_j/d_j` and the others'
Weiszfeld direction :math:`v_j = (R - w_j\ell/d_j)/S_j`,

.. math::

    m \leftarrow \mathrm{Exp}_m\big(\alpha(\ell + \tau u)\big), \qquad u = v_j - \ell, \qquad
    \tau = \max\big(0,\ 1 - w_j/(S_j\|u\|_m)\big),

the minimiser over the tangent space at m of :math:`w_j\|x - \ell\| + \sum_{i \ne j}
\tfrac{w_i}{2d_i}\|x - \mathrm{Log}_m(p_i)\|^2`; :math:`\tau = 0` moves m onto :math:`p_j`. In
:math:`\mathbb{R}^n` it is a majorisation-minimisation step (f does not increase), its fixed
points off :math:`p_j` are the stationary points of f, and at :math:`m = p_j` it is Vardi and
Zhang's step above.

The **residual** is the norm of the smallest subgradient, :math:`\max(0, \|R\|_m - \eta)`
(:math:`\|R\|_m` away from the data): a number in [0, 1] for normalised weights, and the
iteration stops when it is at most ``tol``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import integer, optional, real
from ..backend import Array, ops_for, to_like, to_numpy
from ..errors import ConvergenceError
from ..manifolds.base import Manifold
from ._inputs import prepare, repeat, returned

__all__ = ["MedianResult", "geometric_median", "RELATIVE_EPS"]

#: the default of ``eps``, the distance below which an iterate is taken to be on a data point:
#: this (or 1000 ulps of the points' dtype, if more) times the largest distance from the start
#: point to a point, or times 1 if that is less (the logarithm of coincident points rounds to a
#: few ulps, not to 0)
RELATIVE_EPS = 1e-12


@dataclass(frozen=True)
class MedianResult:
    """The outcome of :func:`geometric_median`.

    Attributes
    ----------
    point : array
        The median, of shape ``point_shape``, in the type, dtype and device of the points.
    residual : float
        The norm of the smallest Riemannian subgradient of f at ``point`` with normalised
        weights: :math:`\\|\\sum_i w_i \\mathrm{Log}_m(p_i)/d_i\\|_m` away from the data,
        :math:`\\max(0, \\|R\\|_m - \\eta)` on a data point (module docstring).
    iterations : int
        The number of steps taken.
    converged : bool
        Whether ``residual <= tol`` (else ``max_iter`` was reached).
    at_data_point : bool
        Whether ``point`` is one of the data points (of positive weight).
    """

    point: Any
    residual: float
    iterations: int
    converged: bool
    at_data_point: bool


def geometric_median(
    manifold: Manifold,
    points: Array,
    weights: Any = None,
    *,
    x0: Array | None = None,
    tol: float = 1e-10,
    max_iter: int = 1000,
    eps: float | None = None,
    step_size: float = 1.0,
) -> MedianResult:
    r"""The weighted geometric median :math:`\arg\min_m \sum_i w_i d(m, p_i)`, by the Riemannian
    Weiszfeld algorithm with Vardi and Zhang's rule at the data points (module docstring).

    Parameters
    ----------
    manifold : Manifold
        It must have ``exp`` and ``log``.
    points : array, shape (n, \*point_shape)
        numpy array or torch tensor of n >= 1 points, each checked to be on the manifold.
    weights : array-like of n numbers, optional
        Non-negative, finite, with a positive sum; normalised to sum 1. Default: uniform.
        Points of weight 0 take no part.
    x0 : array, optional
        The start point (checked to be on the manifold). Default: the first point of largest
        weight.
    tol : float
        Stop when the residual (module docstring), a number in [0, 1], is at most ``tol``; > 0.
    max_iter : int
        The largest number of steps, >= 0.
    eps : float, optional
        An iterate within this distance of a data point is moved onto it and the point counts
        as coinciding; > 0. Default: :data:`RELATIVE_EPS` (or 1000 ulps of the points' dtype,
        if more: 1.2e-4 for float32) times the largest distance from the start point to a
        point, or times 1 if that is less (raise it where distances are computed less
        accurately, e.g. far from the origin of an ambient representation).
    step_size : float
        The step :math:`\alpha` of Fletcher et al. (2009), in (0, 2].

    Returns
    -------
    MedianResult
        The point is in the type, dtype and device of ``points``; float32 points are processed
        in float64 (projected onto the manifold there) and the median rounded once. No gradient
        flows through the iteration.

    Raises
    ------
    ParameterError
        A manifold without ``exp`` or ``log``, bad weights, or a bad scalar parameter.
    ShapeError
        ``points`` is not a non-empty stack of points, or ``x0`` not one point.
    NotOnManifoldError
        A point (the message names its index) or ``x0`` is not on the manifold.
    ConvergenceError
        An iterate became non-finite.
    """
    where = "geometric_median"
    tol = real(tol, f"{where}: tol", above=0)
    max_iter = integer(max_iter, f"{where}: max_iter", minimum=0)
    eps = optional(real, eps, f"{where}: eps", above=0)
    step_size = real(step_size, f"{where}: step_size", above=0, at_most=2)
    points, p, w, m = prepare(manifold, points, weights, x0, where, ("exp", "log"))
    ops = ops_for(points)
    with ops.no_grad():
        floor = max(RELATIVE_EPS, 1e3 * ops.eps(points))  # float32 data: 1000 of its ulps
        run = _Weiszfeld(manifold, p, w, eps, floor, step_size)
        m, residual, steps, k = run.solve(m, tol, max_iter)
    return MedianResult(
        point=returned(m, points),
        residual=residual,
        iterations=steps,
        converged=residual <= tol,
        at_data_point=k is not None,
    )


class _Weiszfeld:
    """The iteration's state: the points of positive weight, their weights, eps and the step."""

    def __init__(
        self,
        manifold: Manifold,
        p: Array,
        w: np.ndarray,
        eps: float | None,
        floor: float,
        step: float,
    ) -> None:
        self.manifold, self.p, self.w, self.eps, self.step = manifold, p, w, eps, step
        self.floor = floor
        self.ops = ops_for(p)
        self.shape = tuple(p.shape)
        self.wcol_shape = (-1,) + (1,) * manifold.ndim

    def _logs(self, m: Array) -> tuple[Array, np.ndarray]:
        """:math:`\\mathrm{Log}_m(p_i)` and :math:`d_i = \\|\\mathrm{Log}_m(p_i)\\|_m`."""
        logs = self.manifold.log(repeat(m, self.shape), self.p)
        d = self.manifold.norm(repeat(m, self.shape), logs)
        return logs, to_numpy(d).astype(np.float64)

    def _on_data(self, m: Array) -> tuple[Array, Array, np.ndarray, int | None]:
        """``m`` (moved onto the nearest data point within eps), its logs and distances, and
        the index of that data point (None when m is on none)."""
        logs, d = self._logs(m)
        if self.eps is None:  # relative to the spread from the start point
            self.eps = self.floor * max(float(d.max()), 1.0)
        k = int(np.argmin(d))
        if d[k] > self.eps:
            return m, logs, d, None
        if d[k] > 0.0:
            m = self.ops.zeros(self.shape[1:], m) + self.p[k]
            logs, d = self._logs(m)
            d[k] = 0.0
        return m, logs, d, k

    def _state(self, m: Array, logs: Array, d: np.ndarray) -> tuple | None:
        """At m: (coef_i = w_i/d_i off the data, their sum, R, |R|_m, eta, residual), or None
        when every point of positive weight is at m."""
        near = d <= self.eps
        eta = float(self.w[near].sum())
        coef = np.where(near, 0.0, self.w / np.where(near, 1.0, d))
        total = float(coef.sum())
        if total == 0.0:
            return None
        R = self.ops.sum(to_like(coef.reshape(self.wcol_shape), logs) * logs, axis=0)
        r = self.ops.to_float(self.manifold.norm(m, R))
        return coef, total, R, r, eta, max(0.0, r - eta)

    def solve(self, m: Array, tol: float, max_iter: int) -> tuple[Array, float, int, int | None]:
        """Iterate from m: (last iterate, its residual, steps, index of its data point)."""
        steps = 0
        while True:
            m, logs, d, k = self._on_data(m)
            state = self._state(m, logs, d)
            if state is None:  # every point of positive weight is at m
                return m, 0.0, steps, k
            coef, total, R, r, eta, residual = state
            if not np.isfinite(residual):
                raise ConvergenceError(
                    f"geometric_median: the residual became non-finite after {steps} steps"
                )
            if residual <= tol or steps == max_iter:
                return m, residual, steps, k
            j = int(np.argmax(coef))
            if k is None and coef[j] >= 0.5 * total:
                step = self._near_step(m, logs, coef, total, R, j)
                if step is None:  # the data point p_j minimises the model: go there
                    m = self.ops.zeros(self.shape[1:], self.p) + self.p[j]
                    steps += 1
                    continue
            else:  # Fletcher et al.'s step, with Vardi and Zhang's factor on a data point
                step = (1.0 - eta / r) / total * R
            m = self.manifold.exp(m, self.step * step)
            steps += 1
            if not self.ops.all_finite(m):
                raise ConvergenceError(
                    f"geometric_median: the iterate became non-finite at step {steps} "
                    f"(step_size {self.step}); try a smaller step_size"
                )

    def _near_step(
        self, m: Array, logs: Array, coef: np.ndarray, total: float, R: Array, j: int
    ) -> Array | None:
        """The step near the data point p_j that pulls most: the other points' terms majorised
        as in Weiszfeld's step, p_j's term kept exact (module docstring); None when the model's
        minimiser is p_j itself."""
        others = total - coef[j]
        if others == 0.0:  # p_j is the only point off m
            return None
        to_j = logs[j]
        u = (R - coef[j] * to_j) / others - to_j  # from p_j to the others' Weiszfeld point
        nu = self.ops.to_float(self.manifold.norm(m, u))
        tau = 1.0 - self.w[j] / (others * nu) if nu > 0 else 0.0
        if tau <= 0.0:
            return None
        return to_j + tau * u

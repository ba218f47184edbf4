r"""The weighted Fréchet (Karcher) mean of points on a manifold.

The weighted Karcher mean of points :math:`p_1, \dots, p_n` with weights :math:`w_i \ge 0`,
:math:`\sum_i w_i = 1`, is a minimiser of

.. math:: f(m) = \tfrac12 \sum_i w_i\, d(m, p_i)^2

(Karcher 1977). Within the injectivity radius, :math:`\operatorname{grad} \tfrac12 d(\cdot,
p)^2(m) = -\mathrm{Log}_m(p)`, so :math:`\operatorname{grad} f(m) = -\sum_i w_i
\mathrm{Log}_m(p_i)`, and Riemannian gradient descent with step t is

.. math:: m \leftarrow \mathrm{Exp}_m\Big(t \sum_i w_i\,\mathrm{Log}_m(p_i)\Big).

With t = 1 it is the classical fixed-point iteration of the Karcher mean (Pennec 2006; Afsari,
Tron & Vidal 2013 study its convergence for constant steps). It stops when the Riemannian
gradient norm :math:`\|\sum_i w_i \mathrm{Log}_m(p_i)\|_m` is at most ``tol``.

``method="retraction"`` replaces Exp and Log by the manifold's ``retract`` and
``inverse_retract``, for manifolds without an exact logarithm. Its fixed point solves
:math:`\sum_i w_i R_m^{-1}(p_i) = 0`: an approximation of the Karcher mean, close to it when the
points are concentrated (:math:`R_m^{-1}` agrees with Log to first order), not the Karcher mean
itself.

The uniqueness of the mean is checked with a sufficient condition
(:mod:`riemfl.stats.uniqueness`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import integer, real
from ..backend import Array, ops_for, to_like
from ..errors import ConvergenceError, ParameterError
from ..manifolds.base import Manifold
from ._inputs import prepare, repeat, returned
from .uniqueness import UNIQUENESS_MODES, check_uniqueness, report_uniqueness

__all__ = ["FrechetResult", "frechet_mean", "MEAN_METHODS"]

#: the methods of :func:`frechet_mean`: the maps each uses
MEAN_METHODS = {"exp": ("exp", "log"), "retraction": ("retract", "inverse_retract")}


@dataclass(frozen=True)
class FrechetResult:
    """The outcome of :func:`frechet_mean`.

    Attributes
    ----------
    point : array
        The mean, of shape ``point_shape``, in the type, dtype and device of the points.
    grad_norm : float
        :math:`\\|\\sum_i w_i \\mathrm{Log}_m(p_i)\\|_m` at ``point`` (with ``inverse_retract``
        for ``method="retraction"``), weights normalised to sum 1.
    iterations : int
        The number of steps taken.
    converged : bool
        Whether ``grad_norm <= tol`` (else ``max_iter`` was reached).
    method : str
        ``"exp"`` (the Karcher mean) or ``"retraction"`` (an approximation of it).
    unique : bool or None
        True when the sufficient condition for a unique mean holds
        (:mod:`riemfl.stats.uniqueness`); None when it is not known (the condition fails, the
        manifold has no known curvature bound, ``uniqueness="ignore"``, or
        ``method="retraction"``).
    """

    point: Any
    grad_norm: float
    iterations: int
    converged: bool
    method: str
    unique: bool | None


def frechet_mean(
    manifold: Manifold,
    points: Array,
    weights: Any = None,
    *,
    x0: Array | None = None,
    tol: float = 1e-10,
    max_iter: int = 500,
    step_size: float = 1.0,
    method: str = "exp",
    uniqueness: str = "warn",
) -> FrechetResult:
    r"""The weighted Karcher mean :math:`\arg\min_m \tfrac12\sum_i w_i d(m, p_i)^2`, by
    Riemannian gradient descent (module docstring).

    Parameters
    ----------
    manifold : Manifold
        It must have ``exp`` and ``log`` (``method="exp"``) or ``retract`` and
        ``inverse_retract`` (``method="retraction"``).
    points : array, shape (n, \*point_shape)
        numpy array or torch tensor of n >= 1 points, each checked to be on the manifold.
    weights : array-like of n numbers, optional
        Non-negative, finite, with a positive sum; normalised to sum 1. Default: uniform.
        Points of weight 0 take no part.
    x0 : array, optional
        The start point (checked to be on the manifold). Default: the first point of largest
        weight.
    tol : float
        Stop when :math:`\|\sum_i w_i \mathrm{Log}_m(p_i)\|_m \le` ``tol`` (a distance: the
        norm of the gradient of f with normalised weights), > 0.
    max_iter : int
        The largest number of steps, >= 0.
    step_size : float
        The step t, in (0, 2); 1 is the classical fixed-point iteration.
    method : {"exp", "retraction"}
        The maps of the iteration (module docstring).
    uniqueness : {"warn", "raise", "ignore"}
        What to do when the sufficient condition for a unique mean
        (:mod:`riemfl.stats.uniqueness`) is not verified: warn
        (:class:`~riemfl.stats.NonUniqueMeanWarning`), raise
        (:class:`~riemfl.stats.NonUniqueMeanError`) or skip the check. Checked for
        ``method="exp"`` only.

    Returns
    -------
    FrechetResult
        The point is in the type, dtype and device of ``points``. float32 points are averaged
        in float64 (projected onto the manifold there) and the mean rounded once. No gradient
        flows through the iteration (the result is detached).

    Raises
    ------
    ParameterError
        A manifold without the maps of ``method``, bad weights, or a bad scalar parameter.
    ShapeError
        ``points`` is not a non-empty stack of points, or ``x0`` not one point.
    NotOnManifoldError
        A point (the message names its index) or ``x0`` is not on the manifold.
    ConvergenceError
        An iterate became non-finite.
    NonUniqueMeanError
        ``uniqueness="raise"`` and the condition is not verified.
    """
    where = "frechet_mean"
    if method not in MEAN_METHODS:
        raise ParameterError(
            f"{where}: method must be one of {tuple(MEAN_METHODS)}, got {method!r}"
        )
    if uniqueness not in UNIQUENESS_MODES:
        raise ParameterError(
            f"{where}: uniqueness must be one of {UNIQUENESS_MODES}, got {uniqueness!r}"
        )
    tol = real(tol, f"{where}: tol", above=0)
    max_iter = integer(max_iter, f"{where}: max_iter", minimum=0)
    step_size = real(step_size, f"{where}: step_size", above=0, below=2)
    hint = "; method='retraction' uses retract and inverse_retract" if method == "exp" else ""
    points, p, w, m = prepare(manifold, points, weights, x0, where, MEAN_METHODS[method], hint)
    with ops_for(points).no_grad():
        first = m
        unique = None
        if method == "exp" and uniqueness != "ignore":  # around the start point first
            unique = check_uniqueness(manifold, p, [m])[0]
        m, g_norm, steps = _descend(manifold, method, p, w, m, tol, max_iter, step_size)
        if method == "exp" and uniqueness != "ignore" and not unique:
            unique, message = check_uniqueness(manifold, p, [m, first])
            report_uniqueness(uniqueness, unique, message, where)
    return FrechetResult(
        point=returned(m, points),
        grad_norm=g_norm,
        iterations=steps,
        converged=g_norm <= tol,
        method=method,
        unique=unique,
    )


def _descend(
    manifold: Manifold,
    method: str,
    p: Array,
    w: np.ndarray,
    m: Array,
    tol: float,
    max_iter: int,
    step_size: float,
) -> tuple[Array, float, int]:
    """The gradient iteration: (last iterate, its gradient norm, steps taken)."""
    ops = ops_for(p)
    step_map, log_map = (
        (manifold.exp, manifold.log)
        if method == "exp"
        else (manifold.retract, manifold.inverse_retract)
    )
    wcol = to_like(w.reshape((-1,) + (1,) * manifold.ndim), p)
    steps = 0
    while True:
        g = ops.sum(wcol * log_map(repeat(m, tuple(p.shape)), p), axis=0)
        if not ops.all_finite(g):
            raise ConvergenceError(
                f"frechet_mean: the gradient became non-finite after {steps} steps "
                f"(step_size {step_size})"
            )
        g_norm = ops.to_float(manifold.norm(m, g))
        if g_norm <= tol or steps == max_iter:
            return m, g_norm, steps
        m = step_map(m, step_size * g)
        steps += 1
        if not ops.all_finite(m):
            raise ConvergenceError(
                f"frechet_mean: the iterate became non-finite at step {steps} "
                f"(step_size {step_size}, gradient norm {g_norm:.3e} before the step); the "
                f"points may be spread beyond where the iteration converges: try a smaller "
                f"step_size"
            )

"""Checks of exp, log and the distance: exp and log inverse within the injectivity radius,
``dist = norm(log)`` and symmetric, ``squared_dist = dist**2``, the torch gradients of ``dist``
and ``squared_dist`` at coincident points, and point gaps within the diameter."""

from __future__ import annotations

import numpy as np

from ..manifolds.base import Manifold
from .assertions import assert_close, assert_same_point
from .checks_points import check_point_on_manifold
from .config import Tolerance, to_numpy

__all__ = [
    "check_exp_log",
    "check_squared_dist",
    "check_distance_gradients_at_coincident_points",
    "check_diameter",
]


def check_exp_log(manifold: Manifold, x, u, tol: Tolerance) -> None:
    """Exp and log are inverse within the injectivity radius; dist is the norm of log."""
    y = manifold.exp(x, u)
    check_point_on_manifold(manifold, y, tol)
    v = manifold.log(x, y)
    assert_close(v, u, tol, "log(x, exp(x, u)) = u", manifold)
    assert_same_point(manifold.exp(x, v), y, tol, "exp(x, log(x, y)) = y", manifold)
    assert_close(manifold.log(x, x), 0.0 * to_numpy(u), tol, "log(x, x) = 0", manifold)
    d = manifold.dist(x, y)
    assert_close(d, manifold.norm(x, u), tol, "dist(x, exp(x, u)) = |u|", manifold)
    assert_close(manifold.dist(y, x), d, tol, "dist symmetric", manifold)
    assert_close(d, manifold.norm(x, v), tol, "dist = |log|", manifold)


def check_squared_dist(manifold: Manifold, x, y, tol: Tolerance) -> None:
    """``squared_dist(x, y) = dist(x, y)**2`` (within ``tol``), symmetric, non-negative, and
    ``squared_dist(x, x) = 0``."""
    d = to_numpy(manifold.dist(x, y))
    sd = manifold.squared_dist(x, y)
    assert_close(sd, d * d, tol, "squared_dist(x, y) = dist(x, y)^2", manifold)
    assert_close(manifold.squared_dist(y, x), sd, tol, "squared_dist symmetric", manifold)
    if np.any(to_numpy(sd) < 0):
        raise AssertionError(f"{manifold.name}: squared_dist negative: {to_numpy(sd).min():.3e}")
    zero = manifold.squared_dist(x, x)
    assert_close(zero, 0.0 * to_numpy(zero), tol, "squared_dist(x, x) = 0", manifold)


def _gradients_at_coincident_points(manifold: Manifold, x: np.ndarray, method: str):
    """(value, gradient in x, gradient in y) of ``method(x, y)`` at ``y = x`` (torch float64,
    as numpy; an argument the map does not read has gradient 0)."""
    import torch

    first = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    second = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    out = getattr(manifold, method)(first, second)
    grads = torch.autograd.grad(out.sum(), (first, second), allow_unused=True)
    gx, gy = (np.zeros(x.shape) if g is None else g.numpy() for g in grads)
    if not (np.all(np.isfinite(gx)) and np.all(np.isfinite(gy))):
        raise AssertionError(
            f"{manifold.name}.{method}: the torch gradient is not finite at y = x (a square "
            f"root of a vanishing argument: use ops.safe_sqrt, or a form without the root)"
        )
    return np.asarray(out.detach().numpy(), dtype=np.float64), gx, gy


def check_distance_gradients_at_coincident_points(
    manifold: Manifold, x: np.ndarray, rng: np.random.Generator
) -> None:
    r"""torch gradients of ``dist`` and ``squared_dist`` at :math:`y = x` (float64).

    * Both are finite (:math:`d` is not differentiable at :math:`y = x`, where a square root
      of a vanishing argument gives ``0 * inf = NaN`` unless guarded).
    * :math:`d^2` has the zero gradient there. The computed distance of x to itself is a
      rounding residual :math:`\rho` (often exactly 0), and :math:`d^2` is smooth, so along
      tangent directions :math:`(v, w)` of x and y its derivative is :math:`2\rho\,
      \mathrm{D}d[(v, w)]`, at most :math:`2\rho(\|v\|_x + \|w\|_x)` (d is 1-Lipschitz in the
      Riemannian norm); the check allows twice that (the rounding of :math:`\rho` and of the
      derivative), which is 0 where :math:`\rho = 0`. (Normal directions of an embedded
      manifold are not constrained: the map need not be defined off M.)
    * :math:`d` has the zero subgradient wherever the computed distance is exactly 0.
    """
    x = np.asarray(x, dtype=np.float64)
    axes = tuple(range(-manifold.ndim, 0))
    sd, gx, gy = _gradients_at_coincident_points(manifold, x, "squared_dist")
    v, w = (to_numpy(manifold.random_tangent(x, rng=rng)) for _ in range(2))
    derivative = np.abs(np.sum(gx * v, axis=axes) + np.sum(gy * w, axis=axes))
    lengths = to_numpy(manifold.norm(x, v)) + to_numpy(manifold.norm(x, w))
    bound = 4.0 * np.sqrt(np.maximum(sd, 0.0)) * lengths
    if np.any(derivative > bound):
        worst = int(np.argmax(derivative - bound))
        raise AssertionError(
            f"{manifold.name}.squared_dist: the torch gradient at y = x is not 0: its derivative "
            f"along tangent directions (v, w) is {float(derivative.flat[worst]):.3e} > "
            f"4 sqrt(squared_dist(x, x)) (|v| + |w|) = {float(bound.flat[worst]):.3e}"
        )
    d, gx, gy = _gradients_at_coincident_points(manifold, x, "dist")
    zero = np.reshape(d == 0, d.shape + (1,) * manifold.ndim)
    if np.any(zero & ((gx != 0) | (gy != 0))):
        raise AssertionError(
            f"{manifold.name}.dist: the computed distance of x to itself is 0 but its torch "
            f"gradient is not (the zero subgradient expected)"
        )


def check_diameter(manifold: Manifold, x, y) -> None:
    """Point gaps never exceed the declared diameter."""
    gap = float(np.max(to_numpy(manifold.point_gap(x, y))))
    if gap > manifold.diameter * (1 + 1e-9):
        raise AssertionError(
            f"{manifold.name}: two points are {gap:.6e} apart, beyond diameter {manifold.diameter}"
        )

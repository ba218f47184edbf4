r"""Checks of the retraction and of exp as a retraction: :math:`R_x(0) = x` and
:math:`R_x(u) \in M`, the retraction first order and exp second order (Taylor slopes), and
``inverse_retract`` the inverse of ``retract``."""

from __future__ import annotations

import numpy as np

from ..manifolds.base import Manifold
from .assertions import assert_close, assert_same_point
from .checks_points import check_point_on_manifold
from .config import Tolerance, to_numpy
from .slopes import check_slope

__all__ = [
    "check_retraction",
    "check_retraction_first_order",
    "check_exp_second_order",
    "check_inverse_retraction",
]


def check_retraction(manifold: Manifold, x, u, tol: Tolerance) -> None:
    """:math:`R_x(0) = x` and :math:`R_x(u) \\in M`."""
    assert_same_point(manifold.retract(x, manifold.zero_tangent(x)), x, tol, "R_x(0)", manifold)
    check_point_on_manifold(manifold, manifold.retract(x, u), tol)


def check_retraction_first_order(manifold: Manifold, x: np.ndarray, u: np.ndarray) -> None:
    """:math:`R_x(tu) - x - tu = O(t^2)` (slope >= 2 on a log-log plot, see
    :func:`check_slope`; float64 only)."""

    def remainder(t):
        return to_numpy(manifold.retract(x, t * u)) - x - t * u

    check_slope(manifold, remainder, x, 2.0, "retraction is not first order")


def check_exp_second_order(manifold: Manifold, x: np.ndarray, u: np.ndarray) -> None:
    r"""Tangential part of :math:`\mathrm{Exp}_x(tu) - x - tu` is :math:`O(t^3)` (zero
    acceleration: exp is a second-order retraction), and the whole is :math:`O(t^2)` (see
    :func:`check_slope`; float64 only)."""

    def remainder(t):
        return to_numpy(manifold.exp(x, t * u)) - x - t * u

    def tangential(t):
        return to_numpy(manifold.to_tangent(x, remainder(t)))

    check_slope(manifold, tangential, x, 3.0, "exp is not second order")
    check_slope(manifold, remainder, x, 2.0, "exp is not first order")


def check_inverse_retraction(manifold: Manifold, x, u, tol: Tolerance) -> None:
    """``inverse_retract(x, retract(x, u)) = u`` and ``retract(x, inverse_retract(x, y)) = y``."""
    y = manifold.retract(x, u)
    back = manifold.inverse_retract(x, y)
    manifold.check_tangent(x, back, atol=max(tol.atol, manifold.default_atol(x)) * 10)
    assert_close(back, u, tol, "inverse_retract(x, retract(x, u)) = u", manifold)
    assert_same_point(manifold.retract(x, back), y, tol, "retract(x, inverse_retract)", manifold)

"""Checks of the vector transports: ``transport`` tangent and linear, parallel transport
isometric, and the transport by differentiated retraction the derivative of ``retract``."""

from __future__ import annotations

import numpy as np

from ..manifolds.base import Manifold
from .assertions import assert_close
from .config import Tolerance, to_numpy
from .slopes import check_slope

__all__ = [
    "check_transport",
    "check_parallel_transport",
    "check_retraction_transport",
    "check_retraction_transport_first_order",
]


def check_transport(manifold: Manifold, x, y, u, v, tol: Tolerance) -> None:
    """Vector transport lands in :math:`T_yM` and is linear."""
    tu = manifold.transport(x, y, u)
    manifold.check_tangent(y, tu, atol=max(tol.atol, manifold.default_atol(y)) * 10)
    lin = manifold.transport(x, y, 2.0 * u - 3.0 * v)
    assert_close(
        lin,
        2.0 * to_numpy(tu) - 3.0 * to_numpy(manifold.transport(x, y, v)),
        tol,
        "transport linear",
        manifold,
    )


def check_parallel_transport(manifold: Manifold, x, y, u, v, tol: Tolerance) -> None:
    """Parallel transport: tangent at y, isometric, identity from x to x."""
    pu, pv = manifold.parallel_transport(x, y, u), manifold.parallel_transport(x, y, v)
    manifold.check_tangent(y, pu, atol=max(tol.atol, manifold.default_atol(y)) * 10)
    assert_close(
        manifold.inner(y, pu, pv),
        manifold.inner(x, u, v),
        tol,
        "<P u, P v>_y = <u, v>_x (isometry)",
        manifold,
    )
    assert_close(manifold.parallel_transport(x, x, u), u, tol, "P_{x->x} = id", manifold)


def check_retraction_transport(manifold: Manifold, x, u, v, tol: Tolerance) -> None:
    r"""Vector transport by differentiated retraction, :math:`\mathcal T_u(v) = \mathrm D
    R_x(u)[v]`: tangent at :math:`R_x(u)`, linear in v, and :math:`\mathcal T_0 = \mathrm{id}`
    (:math:`R_x(tv) = x + tv + O(t^2)`)."""
    y = manifold.retract(x, u)
    tv = manifold.retraction_transport(x, u, v)
    manifold.check_tangent(y, tv, atol=max(tol.atol, manifold.default_atol(y)) * 10)
    assert_close(
        manifold.retraction_transport(x, u, 2.0 * v - 3.0 * u),
        2.0 * to_numpy(tv) - 3.0 * to_numpy(manifold.retraction_transport(x, u, u)),
        tol,
        "retraction_transport linear",
        manifold,
    )
    zero = manifold.zero_tangent(x)
    assert_close(manifold.retraction_transport(x, zero, v), v, tol, "T_0 = id", manifold)


def check_retraction_transport_first_order(
    manifold: Manifold, x: np.ndarray, u: np.ndarray, v: np.ndarray
) -> None:
    r""":math:`R_x(u + tv) - R_x(u) - t\,\mathcal T_u(v) = O(t^2)`: the transport is the
    derivative of the retraction along v (slope >= 2, see :func:`check_slope`; float64)."""
    y = to_numpy(manifold.retract(x, u))
    tv = to_numpy(manifold.retraction_transport(x, u, v))

    def remainder(t):
        return to_numpy(manifold.retract(x, u + t * v)) - y - t * tv

    check_slope(manifold, remainder, y, 2.0, "retraction_transport is not D R_x(u)")

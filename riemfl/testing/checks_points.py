"""Checks of points, tangent spaces, the metric and the projection onto the manifold:
points on M, ``project`` and ``to_tangent`` idempotent, ``zero_tangent``, the metric symmetric,
bilinear and positive, the tangent spaces of dimension ``dim``, and ``project`` the nearest
point (and 2-Lipschitz) inside the proximal-smoothness tube."""

from __future__ import annotations

import math

import numpy as np

from ..manifolds.base import Manifold
from .assertions import assert_close, assert_same_point
from .config import Tolerance, to_numpy
from .strategies import scaled_tangent, unit_ambient

__all__ = [
    "tangent_basis",
    "check_point_on_manifold",
    "check_projection",
    "check_to_tangent",
    "check_zero_tangent",
    "check_metric",
    "check_nearest_point",
    "check_projection_lipschitz",
]


def _ambient_norm(a, manifold: Manifold) -> np.ndarray:
    a = to_numpy(a)
    return np.sqrt(np.sum(a * a, axis=tuple(range(-manifold.ndim, 0))))


def tangent_basis(manifold: Manifold, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Euclidean-orthonormal basis of :math:`T_xM` as rows of flat vectors, shape (dim, N).

    Built from ``dim + 8`` random tangent vectors; also asserts that they span a space of
    exactly ``manifold.dim`` dimensions (so it checks the ``dim`` property).
    """
    x = to_numpy(x)
    k = manifold.dim + 8
    samples = np.stack([to_numpy(manifold.random_tangent(x, rng=rng)).ravel() for _ in range(k)])
    _, s, vt = np.linalg.svd(samples, full_matrices=False)
    rank = int(np.sum(s > 1e-8 * s[0]))
    if rank != manifold.dim:
        raise AssertionError(
            f"{manifold.name}: random tangent vectors span {rank} dimensions; dim says "
            f"{manifold.dim}"
        )
    return vt[: manifold.dim]


def check_point_on_manifold(manifold: Manifold, x, tol: Tolerance) -> None:
    """``x`` passes ``check_point`` (used on every map's output)."""
    manifold.check_point(x, atol=max(tol.atol, manifold.default_atol(x)))


def check_projection(manifold: Manifold, a, x, tol: Tolerance) -> None:
    """``project(a)`` is on M, ``project`` is idempotent and fixes points of M."""
    p = manifold.project(a)
    check_point_on_manifold(manifold, p, tol)
    assert_same_point(manifold.project(p), p, tol, "project(project(a)) = project(a)", manifold)
    assert_same_point(manifold.project(x), x, tol, "project(x) = x for x on M", manifold)


def check_to_tangent(manifold: Manifold, x, a, tol: Tolerance) -> None:
    """``to_tangent(x, a)`` is tangent and ``to_tangent`` is idempotent."""
    t = manifold.to_tangent(x, a)
    manifold.check_tangent(x, t, atol=max(tol.atol, manifold.default_atol(x)))
    assert_close(manifold.to_tangent(x, t), t, tol, "to_tangent idempotent", manifold)
    r = manifold.random_tangent(x, rng=0)
    manifold.check_tangent(x, r, atol=max(tol.atol, manifold.default_atol(x)))


def check_zero_tangent(manifold: Manifold, x, tol: Tolerance) -> None:
    """``zero_tangent(x)`` is tangent, of norm 0, and ``R_x(0) = x``."""
    z = manifold.zero_tangent(x)
    manifold.check_tangent(x, z)
    assert_close(manifold.norm(x, z), 0.0 * to_numpy(manifold.norm(x, z)), tol, "|0|", manifold)


def check_metric(manifold: Manifold, x, u, v, w, tol: Tolerance) -> None:
    """Symmetry, bilinearity and positivity of the metric; ``norm**2 = inner(u, u)``."""
    uv, vu = manifold.inner(x, u, v), manifold.inner(x, v, u)
    assert_close(uv, vu, tol, "<u, v> = <v, u>", manifold)
    lin = manifold.inner(x, u, 2.0 * v - 3.0 * w)
    assert_close(lin, 2.0 * uv - 3.0 * manifold.inner(x, u, w), tol, "bilinearity", manifold)
    uu = to_numpy(manifold.inner(x, u, u))
    if np.any(uu < -tol.atol):
        raise AssertionError(f"{manifold.name}: <u, u> negative: {uu.min():.3e}")
    assert_close(to_numpy(manifold.norm(x, u)) ** 2, uu, tol, "|u|^2 = <u, u>", manifold)


# --------------------------------------------------------------------------- metric projection
def check_nearest_point(manifold: Manifold, x: np.ndarray, fraction: float, rng) -> None:
    """P_M returns the nearest point inside the proximal-smoothness tube (float64).

    1. Normal offsets: with :math:`\\nu` a unit Euclidean normal at x and
       :math:`s = ` ``fraction`` :math:`\\cdot \\hat\\gamma < \\hat\\gamma`,
       :math:`P_M(x + s\\nu) = x`.
    2. For a random ambient point a in the tube, :math:`\\|a - P_M(a)\\| \\le \\|a - y\\|` for
       manifold points y near :math:`P_M(a)` (retractions of small tangent vectors) and random y.
    """
    tol = Tolerance(1e-8, 1e-8)
    gamma = manifold.reach
    reach = gamma if math.isfinite(gamma) else 1.0
    basis = tangent_basis(manifold, x, rng)
    n_ambient = basis.shape[1]
    if manifold.dim < n_ambient:
        w = rng.standard_normal(n_ambient)
        nu = w - basis.T @ (basis @ w)
        nu = np.reshape(nu / np.linalg.norm(nu), x.shape)
        a = x + fraction * reach * nu
        what = "P_M(x + s nu) = x for a normal offset inside the tube"
        assert_same_point(manifold.project(a), x, tol.scaled(1 / (1 - fraction)), what, manifold)
    a = x + fraction * reach * unit_ambient(manifold, (), rng)
    p = to_numpy(manifold.project(a))
    d_p = float(_ambient_norm(a - p, manifold))
    for k in range(24):
        if k < 16:
            radius = rng.uniform(0.0, 0.5) * min(reach, 1.0)
            y = to_numpy(manifold.retract(p, scaled_tangent(manifold, p, radius, rng)))
        else:
            y = manifold.random_point(rng=rng)
        d_y = float(_ambient_norm(a - y, manifold))
        if d_y < d_p - 1e-10 * max(1.0, d_p):
            raise AssertionError(
                f"{manifold.name}: P_M(a) is not the nearest point: |a - P_M(a)| = {d_p:.10e} but "
                f"a manifold point is at {d_y:.10e}"
            )


def check_projection_lipschitz(manifold: Manifold, a, b) -> None:
    """:math:`\\|P_M(a) - P_M(b)\\| \\le 2\\|a - b\\|` for a, b in the half tube (float64)."""
    pa, pb = to_numpy(manifold.project(a)), to_numpy(manifold.project(b))
    lhs = float(_ambient_norm(pa - pb, manifold))
    rhs = 2.0 * float(_ambient_norm(to_numpy(a) - to_numpy(b), manifold))
    if lhs > rhs * (1 + 1e-9) + 1e-12:
        raise AssertionError(
            f"{manifold.name}: P_M is not 2-Lipschitz on the half tube: |P(a) - P(b)| = "
            f"{lhs:.6e} > 2|a - b| = {rhs:.6e}"
        )

"""Comparison helpers of the conformance checks: two arrays equal within a tolerance, two
representations the same point. Each raises :class:`AssertionError` naming the manifold, the
identity and the measured discrepancy."""

from __future__ import annotations

import numpy as np

from ..manifolds.base import Manifold
from .config import Tolerance, to_numpy

__all__ = [
    "assert_close",
    "assert_same_point",
]


def assert_close(actual, expected, tol: Tolerance, what: str, manifold: Manifold) -> None:
    """Assert ``|actual - expected| <= atol + rtol * max(1, |expected|)`` elementwise-max."""
    a, e = to_numpy(actual), to_numpy(expected)
    if a.shape != e.shape:
        a, e = np.broadcast_arrays(a, e)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(e))):
        raise AssertionError(f"{manifold.name}: {what}: non-finite values")
    err = float(np.max(np.abs(a - e))) if a.size else 0.0
    bound = tol.atol + tol.rtol * max(1.0, float(np.max(np.abs(e))) if e.size else 0.0)
    if err > bound:
        raise AssertionError(f"{manifold.name}: {what}: max deviation {err:.3e} > {bound:.3e}")


def assert_same_point(x, y, tol: Tolerance, what: str, manifold: Manifold) -> None:
    """Assert that two point representations are the same point (``manifold.point_gap``)."""
    gap = to_numpy(manifold.point_gap(x, y))
    scale = max(1.0, float(np.max(np.abs(to_numpy(y)))))
    bound = tol.atol + tol.rtol * scale
    if not np.all(np.isfinite(gap)) or float(np.max(gap)) > bound:
        raise AssertionError(
            f"{manifold.name}: {what}: points differ by {float(np.max(gap)):.3e} > {bound:.3e}"
        )

"""Shared helpers of the problem tests: a central finite difference of a scalar function."""

import numpy as np
import pytest


def _fd(f, x, u, h=1e-6):
    """Central difference (f(x + h u) - f(x - h u)) / 2h of a scalar function of an array."""
    return (f(x + h * u) - f(x - h * u)) / (2 * h)


@pytest.fixture
def fd():
    return _fd


@pytest.fixture
def assert_grad_matches_fd(fd):
    """Check <g, u> == directional finite difference of f along a few random directions."""

    def check(f, g, x, rng, *, n_dirs=3, rtol=1e-6, h=1e-6):
        for _ in range(n_dirs):
            u = rng.standard_normal(x.shape)
            exact = float(np.sum(g * u))
            approx = fd(f, x, u, h)
            assert abs(exact - approx) <= rtol * max(1.0, abs(exact)), (exact, approx)

    return check

"""Shared data of the tests of riemfl.stats: clusters of points around a centre and weights,
drawn from a seed (hypothesis draws the seed). Session-scoped fixtures: hypothesis runs many
examples per test call."""

import numpy as np
import pytest


def _cluster(manifold, n, radius, seed):
    """(points, centre): n points ``Exp_c(u_i)`` around a random centre c with ``|u_i| <=
    radius``, so that every point lies within ``radius`` of c."""
    rng = np.random.default_rng(seed)
    c = manifold.random_point(rng=rng)
    base = np.broadcast_to(c, (n, *manifold.point_shape)).copy()
    u = manifold.random_tangent(base, rng=rng)
    lengths = radius * rng.uniform(0.05, 1.0, n)
    u = u * (lengths / manifold.norm(base, u)).reshape((n,) + (1,) * manifold.ndim)
    return manifold.exp(base, u), c


def _weights(n, seed, zeros=False):
    """Positive weights (some zero with ``zeros``, never all), not normalised."""
    rng = np.random.default_rng(seed + 1)
    w = rng.uniform(0.1, 2.0, n)
    if zeros and n > 1:
        w[rng.random(n) < 0.3] = 0.0
        w[rng.integers(n)] = 1.0
    return w


@pytest.fixture(scope="session")
def cluster():
    return _cluster


@pytest.fixture(scope="session")
def weights():
    return _weights

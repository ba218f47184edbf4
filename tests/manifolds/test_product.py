"""Product manifolds: packing and constants."""

import math

import numpy as np
import pytest
from hypothesis import given

from riemfl import Euclidean, Lorentz, ParameterError, Product, ShapeError, Sphere, Stiefel
from riemfl.testing import strategies as rst

P = Product(Sphere(3), Stiefel(4, 2), Euclidean(2))


@given(x=rst.points(P, (2,)))
def test_split_pack_round_trip(x):
    parts = P.split(x)
    assert [p.shape for p in parts] == [(2, 3), (2, 4, 2), (2, 2)]
    np.testing.assert_array_equal(P.pack(*parts), x)


@given(x=rst.points(P))
def test_componentwise_maps(x):
    u = P.random_tangent(x, rng=0) * 0.3
    y = P.exp(x, u)
    for m, xi, ui, yi in zip(P.manifolds, P.split(x), P.split(u), P.split(y), strict=True):
        np.testing.assert_allclose(m.exp(xi, ui), yi, atol=1e-12)
    dists = [m.dist(a, b) for m, a, b in zip(P.manifolds, P.split(x), P.split(y), strict=True)]
    np.testing.assert_allclose(P.dist(x, y), math.sqrt(sum(d**2 for d in dists)), atol=1e-12)


def test_constants_and_capabilities():
    assert P.dim == 2 + 5 + 2
    assert P.proximal_smoothness == 1.0
    assert P.diameter == math.inf
    assert Product(Sphere(3), Stiefel(4, 1)).diameter == pytest.approx(math.sqrt(8))
    assert Product(Lorentz(2, beta=0.25), Sphere(3)).proximal_smoothness == 0.5
    ok, why = P.supports("parallel_transport")
    assert not ok and "Stiefel" in why


def test_pack_validates():
    with pytest.raises(ParameterError, match="needs 3 components"):
        P.pack(np.zeros(3))
    with pytest.raises(ShapeError):
        P.pack(np.zeros(3), np.zeros((4, 3)), np.zeros(2))

"""Product manifolds: packing and constants."""

import math

import numpy as np
import pytest
from hypothesis import given

from riemfl import Euclidean, Lorentz, ParameterError, Product, ShapeError, Sphere, Stiefel
from riemfl.manifolds import BirkhoffPolytope, PoincareBall, Simplex
from riemfl.testing import importorskip
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
    assert P.reach == 1.0
    assert P.diameter == math.inf
    assert Product(Sphere(3), Stiefel(4, 1)).diameter == pytest.approx(math.sqrt(8))
    assert Product(Lorentz(2, beta=0.25), Sphere(3)).reach == 0.5
    ok, why = P.supports("parallel_transport")
    assert not ok and "Stiefel" in why


def test_pack_validates():
    with pytest.raises(ParameterError, match="needs 3 components"):
        P.pack(np.zeros(3))
    with pytest.raises(ShapeError):
        P.pack(np.zeros(3), np.zeros((4, 3)), np.zeros(2))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_local_reach_is_the_minimum_over_the_factors(backend):
    """Product(Sphere, PoincareBall): per point, min(1, the ball factor's local radius), batched
    and single, in the input's type; a factor with only the uniform constant contributes it."""
    m = Product(Sphere(3), PoincareBall(2, c=0.25))  # the ball of radius 2
    radii = np.array([0.1, 0.5, 0.9, 1.1, 1.5, 1.99])  # local radii 2 - |x|: above and below 1
    ball = radii[:, None] * np.array([0.6, 0.8])
    x = m.pack(Sphere(3).random_point(6, rng=0), ball)
    expected = np.minimum(1.0, PoincareBall(2, c=0.25).local_reach(ball))
    np.testing.assert_allclose(expected, np.minimum(1.0, 2.0 - radii), rtol=1e-12)
    assert np.any(expected < 1.0) and np.any(expected == 1.0)  # both factors decide somewhere
    if backend == "torch":
        torch = importorskip("torch")
        x = torch.as_tensor(x)
    got = m.local_reach(x)
    assert type(got) is type(x) and tuple(got.shape) == (6,)
    # the same factor map on a strided view of x: its sums may round differently (a few eps)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=8 * np.finfo(float).eps)
    single = np.asarray(m.local_reach(x[4]))
    np.testing.assert_allclose(single, expected[4], rtol=8 * np.finfo(float).eps)
    uniform = Product(Sphere(3), Stiefel(4, 2), Euclidean(2))
    radii = uniform.local_reach(uniform.random_point(2, rng=1))
    np.testing.assert_array_equal(radii, [1.0, 1.0])


def test_local_reach_names_a_factor_without_one():
    m = Product(Sphere(3), BirkhoffPolytope(3))
    with pytest.raises(NotImplementedError, match=r"factor BirkhoffPolytope\(3\).*Sinkhorn"):
        m.local_reach(m.random_point(rng=0))
    with pytest.raises(ShapeError):
        m.local_reach(np.zeros(5))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_a_factor_on_its_boundary_is_refused_by_check_point_and_every_map(backend):
    # a factor's strict constraint (no tolerance: the open simplex's p > 0) is not a violation
    # the factors' largest one shows: the product asks each factor's own check_point too; and
    # each map traces the factor's non-finite metric to the boundary point (a typed error)
    from riemfl.errors import NonFiniteError, NotOnManifoldError

    convert = np.asarray if backend == "numpy" else importorskip("torch").as_tensor
    m = Product(PoincareBall(2), Euclidean(2))
    x = convert(np.array([1.0, 0.0, 0.3, 0.4]))
    u = convert(np.array([0.1, 0.2, 0.3, 0.4]))
    with pytest.raises(NotOnManifoldError, match=r"PoincareBall\(2\).*c\|x\|\^2 < 1"):
        m.check_point(x)
    on_edge = convert(np.array([0.5, 0.5, 0.0, 1.0, 1.0]))
    with pytest.raises(NotOnManifoldError, match=r"factor Simplex\(3\).*p > 0"):
        Product(Simplex(3), Euclidean(2)).check_point(on_edge)
    calls = {
        "inner": (x, u, u),
        "norm": (x, u),
        "retract": (x, u),
        "exp": (x, u),
        "egrad_to_rgrad": (x, u),
        "log": (x, x),
        "dist": (x, x),
        "inverse_retract": (x, x),
        "parallel_transport": (x, x, u),
    }
    for method, args in calls.items():
        with pytest.raises(NotOnManifoldError, match=f"{method}.*boundary") as err:
            getattr(m, method)(*args)
        assert not isinstance(err.value, NonFiniteError)

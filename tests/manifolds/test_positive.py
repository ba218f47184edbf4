"""Positive beyond the kit: exp solves the geodesic equation of the log metric, the maps are
pymanopt's, log coordinates are an isometry, and project/check_point refuse the boundary."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from riemfl import NotOnManifoldError, ParameterError, Positive, ProjectionError
from riemfl.testing import importorskip
from riemfl.testing import strategies as rst


def test_exp_solves_the_geodesic_equation():
    """x'' = x'^2 / x (the Christoffel symbols Gamma^i_ii = -1/x_i of diag(1/x^2)), by central
    differences along exp_x(tu); the kit's second-order test does not apply to this metric."""
    m = Positive(3, 2)
    x = m.random_point(rng=0)
    u = m.random_tangent(x, rng=1)
    h, t = 1e-4, 0.6
    y = m.exp(x, t * u)
    yp = (m.exp(x, (t + h) * u) - m.exp(x, (t - h) * u)) / (2 * h)
    ypp = (m.exp(x, (t + h) * u) - 2 * y + m.exp(x, (t - h) * u)) / h**2
    np.testing.assert_allclose(ypp, yp**2 / y, rtol=1e-5, atol=1e-6)
    # and the tangential part of exp_x(tu) - x - tu is O(t^2), not O(t^3): the kit's check fails
    small = m.exp(x, 1e-3 * u) - x - 1e-3 * u
    np.testing.assert_allclose(small, 0.5e-6 * u**2 / x, rtol=1e-2)


@given(seed=rst.seeds(), norm=st.floats(0.0, 3.0))
def test_matches_pymanopt_and_log_coordinates(seed, norm):
    pymanopt = importorskip("pymanopt")
    ref = pymanopt.manifolds.Positive(4, 2, use_parallel_transport=True)
    m = Positive(4, 2)
    rng = np.random.default_rng(seed)
    x = m.random_point(rng=rng)
    u = rst.scaled_tangent(m, x, norm, rng)
    v = m.random_tangent(x, rng=rng)
    y = m.exp(x, u)
    np.testing.assert_allclose(y, ref.exp(x, u), rtol=1e-14)
    np.testing.assert_allclose(m.log(x, y), ref.log(x, y), rtol=1e-9, atol=1e-12)
    assert m.dist(x, y) == pytest.approx(ref.dist(x, y), rel=1e-9, abs=1e-12)
    assert m.dist(x, y) == pytest.approx(norm, rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(m.parallel_transport(x, y, v), ref.transport(x, y, v))
    assert m.inner(x, u, v) == pytest.approx(ref.inner_product(x, u, v))
    g, h = rng.standard_normal((2, 4, 2))
    np.testing.assert_allclose(m.egrad_to_rgrad(x, g), ref.euclidean_to_riemannian_gradient(x, g))
    np.testing.assert_allclose(
        m.ehess_to_rhess(x, g, h, u), ref.euclidean_to_riemannian_hessian(x, g, h, u)
    )
    # the log map to log coordinates is an isometry: dist is |log y - log x|
    assert m.dist(x, y) == pytest.approx(np.linalg.norm(np.log(y) - np.log(x)), abs=1e-12)


def test_project_refuses_entries_outside_the_open_orthant():
    m = Positive(3)
    a = np.array([[0.5, 1.0, 2.0], [0.3, -0.1, 0.0]])
    np.testing.assert_array_equal(m.project(a[0]), a[0])
    with pytest.raises(ProjectionError, match=r"batch element \(1,\).*entries \[\(1,\), \(2,\)\]"):
        m.project(a)


def test_local_reach_is_the_distance_to_the_boundary():
    m = Positive(2, 2)
    x = np.array([[1.0, 0.2], [3.0, 0.7]])
    rho = m.local_reach(x)
    assert rho == pytest.approx(0.2)
    inside = x.copy()
    inside[0, 1] -= 0.999 * rho
    np.testing.assert_array_equal(m.project(inside), inside)
    inside[0, 1] -= 0.002 * rho  # a step of length rho towards the boundary leaves the orthant
    with pytest.raises(ProjectionError):
        m.project(inside)
    with pytest.raises(NotImplementedError, match="not closed"):
        _ = m.reach


def test_check_point_is_strict():
    m = Positive(3)
    m.check_point(np.array([1e-300, 1.0, 2.0]))
    with pytest.raises(NotOnManifoldError, match=r"entry \(1,\) = 0\.000e\+00"):
        m.check_point(np.array([1.0, 0.0, 2.0]))
    assert m.point_violation(np.array([1.0, -0.5, 2.0])) == ("x > 0 (every entry)", 0.5)


def test_parameters_and_names():
    assert Positive(3).name == "Positive(3)"
    assert Positive(4, 2).name == "Positive(4, 2)" and Positive(4, 2).dim == 8
    with pytest.raises(ParameterError, match="every dimension must be an integer >= 1, got 0"):
        Positive(0)


def test_exp_of_steps_that_underflow_stays_positive():
    """x e^(u/x) with u/x = -1000 underflows to 0 in float64 (-200 in float32): exp returns the
    smallest normal number there, a point of the open orthant, and the distance stays finite
    and equal to |u|_x (log coordinates are exact up to the floor)."""
    m = Positive(3)
    for dtype, ratio in ((np.float64, -1000.0), (np.float32, -200.0)):
        x = np.array([1.0, 2.0, 0.5], dtype=dtype)
        u = (x * np.array([ratio, 0.5, -0.25])).astype(dtype)
        y = m.exp(x, u)
        assert y.dtype == dtype and y[0] == np.finfo(dtype).tiny and y[1] > 0
        m.check_point(y)
        assert np.isfinite(m.dist(x, y)) and np.isfinite(m.squared_dist(x, y))
        np.testing.assert_array_equal(m.retract(x, u), y)

"""Elliptope beyond the kit: the horizontal projection (and pymanopt's sign), the nearest
representative, the second-order retraction on the quotient, the class invariance of the maps,
the constants and the typed errors."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from riemfl import Elliptope, ParameterError, ProjectionError
from riemfl.testing import checks, importorskip
from riemfl.testing import strategies as rst


def _skew(rng, k):
    w = rng.standard_normal((k, k))
    return w - w.T


def _orthogonal(rng, k):
    q, r = np.linalg.qr(rng.standard_normal((k, k)))
    return q * np.sign(np.diag(r))


@given(seed=rst.seeds())
def test_horizontal_projection(seed):
    """P^h is the orthogonal projection onto {U : <y_i, u_i> = 0, Y^T U symmetric}: it kills
    the vertical vectors Y Omega and the row normals diag(c) Y, and A - P^h(A) is orthogonal to
    every horizontal vector."""
    m = Elliptope(6, 3)
    rng = np.random.default_rng(seed)
    y = m.random_point(rng=rng)
    a = rng.standard_normal(y.shape)
    p = m.to_tangent(y, a)
    np.testing.assert_allclose(p.T @ y, y.T @ p, atol=1e-13)
    np.testing.assert_allclose(np.sum(y * p, axis=1), 0.0, atol=1e-13)
    np.testing.assert_allclose(m.to_tangent(y, y @ _skew(rng, 3)), 0.0, atol=1e-13)
    np.testing.assert_allclose(m.to_tangent(y, rng.standard_normal((6, 1)) * y), 0.0, atol=1e-13)
    w = m.random_tangent(y, rng=rng)
    assert abs(np.sum((a - p) * w)) < 1e-12 * max(1.0, np.abs(a).sum())


def test_pymanopt_projection_differs_by_the_vertical_sign():
    """pymanopt 2.2.1's Elliptope.projection returns eta + Y Omega (eta the row-wise tangent
    part), which is not horizontal; riemfl's is eta - Y Omega. The retraction agrees."""
    pymanopt = importorskip("pymanopt")
    ref = pymanopt.manifolds.Elliptope(5, 3)
    m = Elliptope(5, 3)
    rng = np.random.default_rng(3)
    y = m.random_point(rng=rng)
    a = rng.standard_normal(y.shape)
    eta = a - y * np.sum(y * a, axis=1, keepdims=True)
    np.testing.assert_allclose(m.to_tangent(y, a), 2 * eta - ref.projection(y, a), atol=1e-12)
    u = m.random_tangent(y, rng=rng)
    np.testing.assert_allclose(m.retract(y, u), ref.retraction(y, u), atol=1e-14)


@given(seed=rst.seeds())
def test_maps_respect_the_classes(seed):
    """With Y' = YQ: horizontal vectors lift as UQ, retract(YQ, UQ) = retract(Y, U) Q,
    project(AQ) = project(A) Q, the Hessian lifts as Hess Q (f(Y) = tr(Y^T S Y)/2), and
    point_gap(Y, YQ) = 0."""
    m = Elliptope(5, 3)
    rng = np.random.default_rng(seed)
    y = m.random_point(rng=rng)
    q = _orthogonal(rng, 3)
    u = m.random_tangent(y, rng=rng)
    a = rng.standard_normal(y.shape)
    np.testing.assert_allclose(m.to_tangent(y @ q, a @ q), m.to_tangent(y, a) @ q, atol=1e-13)
    np.testing.assert_allclose(m.retract(y @ q, u @ q), m.retract(y, u) @ q, atol=1e-14)
    np.testing.assert_allclose(m.project(a @ q), m.project(a) @ q, atol=1e-14)
    s = rng.standard_normal((5, 5))
    s = s + s.T
    hess = m.ehess_to_rhess(y, s @ y, s @ u, u)
    hess_q = m.ehess_to_rhess(y @ q, s @ y @ q, s @ u @ q, u @ q)
    np.testing.assert_allclose(hess_q, hess @ q, atol=1e-12)
    assert float(m.point_gap(y, y @ q)) < 1e-14


@given(seed=rst.seeds(), fraction=st.floats(0.05, 0.8))
def test_project_is_the_nearest_representative(seed, fraction):
    """Row normalisation is the metric projection onto the total space: a row-normal offset
    Y + diag(c) Y with |c| < 1 goes back to Y, and no unit-row matrix is nearer to A."""
    m = Elliptope(5, 3)
    rng = np.random.default_rng(seed)
    y = m.random_point(rng=rng)
    c = rng.uniform(-fraction, fraction, size=(5, 1))
    np.testing.assert_allclose(m.project(y + c * y), y, atol=1e-14)
    a = y + fraction * rst.unit_ambient(m, (), rng)
    p = m.project(a)
    near = m.retract(p, rst.scaled_tangent(m, p, 0.3, rng))
    far = m.random_point(rng=rng)
    for z in (near, far, p @ _orthogonal(rng, 3)):
        assert np.linalg.norm(a - p) <= np.linalg.norm(a - z) + 1e-12


def test_retraction_is_second_order_on_the_quotient():
    """The horizontal part of R_Y(tU) - Y - tU is O(t^3): the acceleration of the row
    normalisation is normal to the total space, hence orthogonal to the horizontal space."""
    m = Elliptope(6, 3)
    rng = np.random.default_rng(0)
    y = m.random_point(rng=rng)
    u = m.random_tangent(y, rng=rng)
    ts = np.logspace(-3, -1.5, 6)
    errors = [np.linalg.norm(m.to_tangent(y, m.retract(y, t * u) - y - t * u)) for t in ts]
    slope = np.polyfit(np.log(ts), np.log(errors), 1)[0]
    assert slope > 2.75
    full = [np.linalg.norm(m.retract(y, t * u) - y - t * u) for t in ts]
    assert np.polyfit(np.log(ts), np.log(full), 1)[0] == pytest.approx(2.0, abs=0.1)


def test_hessian_taylor_for_a_non_invariant_quadratic_in_the_total_space():
    """The kit checks the Hessian with f(YQ) = f(Y); the formula is also self-adjoint for any
    f (the diag term is symmetric), checked here with a generic quadratic."""
    m = Elliptope(5, 2)
    rng = np.random.default_rng(1)
    y = m.random_point(rng=rng)
    u, v = m.random_tangent(y, rng=rng), m.random_tangent(y, rng=rng)
    fn = checks.quadratic_function(m.point_shape, rng)
    g = fn.egrad(y)
    left = np.sum(m.ehess_to_rhess(y, g, fn.ehess(y, u), u) * v)
    right = np.sum(u * m.ehess_to_rhess(y, g, fn.ehess(y, v), v))
    assert left == pytest.approx(right, rel=1e-12, abs=1e-12)


def test_diameter_attained_with_a_hadamard_pair():
    """n = 4: C1 = s s^T, C2 = t t^T with orthogonal sign vectors s, t are sqrt(2) n apart."""
    m = Elliptope(4, 2)
    s = np.array([1.0, 1.0, 1.0, 1.0])
    t = np.array([1.0, -1.0, 1.0, -1.0])
    y1 = np.stack([s, np.zeros(4)], axis=1)
    y2 = np.stack([t, np.zeros(4)], axis=1)
    assert float(m.point_gap(y1, y2)) == pytest.approx(m.diameter, rel=1e-15)
    rng = np.random.default_rng(2)
    gaps = m.point_gap(m.random_point(200, rng=rng), m.random_point(200, rng=rng))
    assert np.max(gaps) <= m.diameter


def test_typed_errors_and_reasons():
    with pytest.raises(ParameterError, match=r"Elliptope\(n, k\): n \(n >= k\) .* >= 3, got 2"):
        Elliptope(2, 3)
    with pytest.raises(ParameterError, match=r"Elliptope\(n, k\): k must be an integer >= 2"):
        Elliptope(4, 1)
    m = Elliptope(4, 2)
    a = np.ones((4, 2))
    a[2] = 0.0
    with pytest.raises(ProjectionError, match="row"):
        m.project(a)
    assert m.dim == 4 * 1 - 1
    for name in ("exp", "log", "dist", "parallel_transport", "inverse_retract"):
        ok, why = m.supports(name)
        assert not ok and why
    with pytest.raises(NotImplementedError, match="no exp"):
        m.injectivity_radius  # noqa: B018

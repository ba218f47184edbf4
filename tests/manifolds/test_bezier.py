"""Bezier curves: evaluation, derivatives, arc length, closest point, gradients, errors."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import comb

from riemfl import NotOnManifoldError, ParameterError, ShapeError, Sphere
from riemfl.manifolds.bezier import BezierCurve, bernstein_weights
from riemfl.testing import strategies as rst

degrees = st.integers(1, 6)


def random_curve(seed, degree=2, dim=3):
    return BezierCurve(np.random.default_rng(seed).standard_normal((degree + 1, dim)))


@given(seed=rst.seeds(), degree=degrees, t=st.floats(-0.5, 1.5))
def test_de_casteljau_equals_bernstein_form(seed, degree, t):
    curve = random_curve(seed, degree)
    bern = sum(
        comb(degree, i) * t**i * (1 - t) ** (degree - i) * curve.control_points[i]
        for i in range(degree + 1)
    )
    np.testing.assert_allclose(curve(t), bern, atol=1e-12)
    np.testing.assert_allclose(bernstein_weights(degree, np.array(t)).sum(), 1.0, atol=1e-14)


@given(seed=rst.seeds())
def test_quadratic_through_chord_midpoint_is_the_uniform_segment(seed):
    rng = np.random.default_rng(seed)
    a, c = rng.standard_normal(4), rng.standard_normal(4)
    curve = BezierCurve(np.stack([a, (a + c) / 2, c]))
    ts = np.linspace(-0.3, 1.3, 9)
    np.testing.assert_allclose(curve(ts), a + ts[:, None] * (c - a), atol=1e-12)
    np.testing.assert_allclose(curve.speed(ts), np.linalg.norm(c - a), rtol=1e-12)
    np.testing.assert_allclose(curve.acceleration(ts), 0.0, atol=1e-12)
    np.testing.assert_allclose(curve.arc_length(), np.linalg.norm(c - a), rtol=1e-12)


@given(seed=rst.seeds(), degree=degrees)
def test_arc_length_of_a_straight_curve_is_the_chord(seed, degree):
    rng = np.random.default_rng(seed)
    a, c = rng.standard_normal(3), rng.standard_normal(3)
    fractions = np.sort(rng.uniform(0, 1, degree - 1)) if degree > 1 else np.array([])
    points = [a] + [a + f * (c - a) for f in fractions] + [c]  # monotone along the chord
    curve = BezierCurve(np.stack(points))
    np.testing.assert_allclose(curve.arc_length(panels=64), np.linalg.norm(c - a), rtol=1e-9)


@given(seed=rst.seeds(), t0=st.floats(-0.5, 0.5), t1=st.floats(0.5, 1.5))
def test_quadratic_closed_form_matches_quadrature(seed, t0, t1):
    curve = random_curve(seed, 2, 5)
    closed = curve.arc_length(t0, t1)
    quad = curve._gauss_legendre_length(t0, t1, panels=64)
    np.testing.assert_allclose(closed, quad, rtol=1e-10)


@given(seed=rst.seeds(), degree=degrees, t=st.floats(-0.5, 1.5))
def test_derivatives_match_finite_differences(seed, degree, t):
    curve = random_curve(seed, degree)
    h = 1e-5
    fd1 = (curve(t + h) - curve(t - h)) / (2 * h)
    fd2 = (curve(t + h) - 2 * curve(t) + curve(t - h)) / h**2
    np.testing.assert_allclose(curve.velocity(t), fd1, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(curve.acceleration(t), fd2, rtol=1e-3, atol=1e-3)


@given(seed=rst.seeds(), degree=degrees)
def test_extrapolation_is_continuous_at_one(seed, degree):
    curve = random_curve(seed, degree)
    for h in (1e-4, 1e-6):
        np.testing.assert_allclose(curve(1 + h), curve(1) + h * curve.velocity(1.0), atol=5 * h * h
                                   * (1 + np.abs(curve.acceleration(1.0)).max()))  # fmt: skip
    np.testing.assert_allclose(curve(1.0), curve.control_points[-1], atol=1e-14)


@given(seed=rst.seeds(), degree=st.integers(2, 4), extended=st.booleans())
def test_closest_point_against_dense_search(seed, degree, extended):
    rng = np.random.default_rng(seed)
    curve = random_curve(seed, degree)
    a = rng.standard_normal((5, 3)) * 1.5
    t, dist = curve.closest_point(a, extended=extended)
    grid = np.linspace(-3, 4, 70001) if extended else np.linspace(0, 1, 20001)
    dense = np.linalg.norm(curve(grid)[None, :, :] - a[:, None, :], axis=-1).min(axis=1)
    assert np.all(dist <= dense + 1e-9)
    assert np.all(dist >= dense - 1e-3)  # the grid is only that fine
    np.testing.assert_allclose(np.linalg.norm(curve(t) - a, axis=-1), dist, atol=1e-12)
    if not extended:
        assert np.all((0 <= t) & (t <= 1))


@given(seed=rst.seeds())
def test_arc_length_reparametrisation(seed):
    curve = random_curve(seed, 3)
    length = float(curve.arc_length())
    s = np.array([0.0, 0.2, 0.5, 0.9, 1.0, 1.2]) * length
    t = curve.parameter_at_arc_length(s)
    np.testing.assert_allclose(curve.arc_length_at(t), s, atol=1e-9 * length)
    assert t[0] == pytest.approx(0.0, abs=1e-9) and t[4] == pytest.approx(1.0, abs=1e-9)
    assert t[5] > 1.0  # beyond the end: the extrapolated curve


def test_uniform_in_arc_length_sampling():
    curve = BezierCurve(np.array([[0.0, 0.0], [0.1, 0.0], [4.0, 0.0]]))  # fast at the end
    t_par, _ = curve.sample(4000, rng=0)
    t_arc, pts = curve.sample(4000, rng=0, uniform="arc_length")
    # positions along the x axis are uniform for arc-length sampling, not for parameter sampling
    assert abs(np.mean(pts[:, 0]) - 2.0) < 0.1
    assert abs(np.mean(curve(t_par)[:, 0]) - 2.0) > 0.3
    assert pts.shape == (4000, 2) and t_arc.shape == (4000,)


def test_geodesic_de_casteljau_on_the_sphere():
    s = Sphere(3)
    rng = np.random.default_rng(0)
    x = s.random_point(rng=rng)
    pts = np.stack([s.exp(x, 0.4 * s.random_tangent(x, rng=rng)) for _ in range(3)])
    curve = BezierCurve(pts, s)
    ts = np.linspace(-0.2, 1.2, 8)
    s.check_point(curve(ts))
    np.testing.assert_allclose(curve(0.0), pts[0], atol=1e-14)
    np.testing.assert_allclose(curve(1.0), pts[2], atol=1e-14)
    line = BezierCurve(pts[:2], s)  # degree 1: the geodesic
    np.testing.assert_allclose(line(ts), s.exp(pts[0], ts[:, None] * s.log(pts[0], pts[1])),
                               atol=1e-12)  # fmt: skip
    np.testing.assert_allclose(line.arc_length(), s.dist(pts[0], pts[1]), rtol=1e-7)
    s.check_tangent(curve(0.3), curve.velocity(0.3), atol=1e-8)


def test_gradients_with_respect_to_control_points():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    base = rng.standard_normal((3, 4))
    direction = rng.standard_normal((3, 4))
    target = rng.standard_normal(4)

    def objective(cp):
        curve = BezierCurve(cp)
        return (curve(0.3) * torch.as_tensor(target)).sum() + curve.arc_length()

    cp = torch.tensor(base, requires_grad=True)
    (grad,) = torch.autograd.grad(objective(cp), cp)
    h = 1e-6
    with torch.no_grad():
        fd = (objective(torch.tensor(base + h * direction))
              - objective(torch.tensor(base - h * direction))) / (2 * h)  # fmt: skip
    assert float((grad * torch.as_tensor(direction)).sum()) == pytest.approx(float(fd), rel=1e-6)
    t, dist = BezierCurve(cp).closest_point(torch.as_tensor(target))
    dist.backward()
    assert torch.isfinite(cp.grad).all() and 0.0 <= t <= 1.0


def test_float32_and_torch_keep_types():
    torch = pytest.importorskip("torch")
    cp = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32)
    assert BezierCurve(cp)(np.linspace(0, 1, 4)).dtype == np.float32
    out = BezierCurve(torch.as_tensor(cp))(0.5)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == (5,)


def test_bad_input():
    with pytest.raises(ShapeError, match="degree >= 1"):
        BezierCurve(np.zeros((1, 3)))
    with pytest.raises(ParameterError, match="NaN"):
        BezierCurve(np.full((3, 2), np.nan))
    with pytest.raises(ShapeError, match="do not match"):
        BezierCurve(np.zeros((3, 2)), Sphere(3))
    with pytest.raises(NotOnManifoldError):
        BezierCurve(np.ones((3, 3)), Sphere(3))
    with pytest.raises(ShapeError):
        random_curve(0).closest_point(np.zeros(4))
    with pytest.raises(ParameterError, match="order"):
        random_curve(0).derivative(0.5, order=3)
    with pytest.raises(ParameterError, match="zero length"):
        BezierCurve(np.zeros((3, 2))).parameter_at_arc_length(0.5)
    assert math.isfinite(float(BezierCurve(np.zeros((3, 2))).arc_length()))

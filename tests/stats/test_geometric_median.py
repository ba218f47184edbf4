"""riemfl.stats.geometric_median: the first-order (subgradient) condition, agreement with a
generic minimiser in R^n, the rule at a data point, numpy and torch, and bad input.

The stopping rule gives a smallest subgradient of norm ``<= tol`` at the result m (normalised
weights). By convexity, ``f(m) - f(x) <= tol * d(m, x)`` for every x in a convex region holding
both (all of R^n), which bounds the comparison with another minimiser; each check adds the
rounding of its own arithmetic, ``ROUNDING`` ulps per summand.
"""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from riemfl.errors import ConvergenceError, NotOnManifoldError, ParameterError, ShapeError
from riemfl.manifolds import (
    SPD,
    Elliptope,
    Euclidean,
    Lorentz,
    PoincareBall,
    Sphere,
    Stiefel,
)
from riemfl.stats import geometric_median

TOL = 1e-10
EPS = float(np.finfo(np.float64).eps)
ROUNDING = 100

#: (manifold, cluster radius)
CASES = {
    "sphere": (lambda: Sphere(4), 0.5),
    "stiefel": (lambda: Stiefel(5, 2), 0.3),
    "spd": (lambda: SPD(3), 1.0),
    "euclidean": (lambda: Euclidean(3), 2.0),
    "poincare": (lambda: PoincareBall(3), 1.0),
    "lorentz": (lambda: Lorentz(2), 1.0),
}
seeds = st.integers(0, 2**32 - 2)


def _residual(M, m, points, w, eps):
    """The norm of the smallest subgradient of sum_i w_i d(m, p_i) at m, one point at a time:
    max(0, |sum_{d_i > eps} w_i Log_m(p_i)/d_i| - sum_{d_i <= eps} w_i)."""
    w = np.asarray(w, dtype=float) / np.sum(w)
    R, eta = 0.0, 0.0
    for wi, p in zip(w, points, strict=True):
        if wi == 0:
            continue
        v = M.log(m, p)
        d = float(M.norm(m, v))
        if d <= eps:
            eta += wi
        else:
            R = R + wi * v / d
    return max(0.0, float(M.norm(m, R)) - eta) if not np.isscalar(R) else 0.0


def _f(points, w, x):
    return float((w / w.sum()) @ np.linalg.norm(points - x, axis=1))


@pytest.mark.parametrize("case", sorted(CASES))
@settings(max_examples=8)
@given(seed=seeds, n=st.integers(1, 7))
def test_the_subgradient_condition_holds_at_the_median(case, seed, n, cluster, weights):
    make, radius = CASES[case]
    M = make()
    points, _ = cluster(M, n, radius, seed)
    w = weights(n, seed, zeros=True)
    result = geometric_median(M, points, w)
    assert result.converged and result.residual <= TOL
    M.check_point(result.point)
    # an independent evaluation, with the default eps (1e-12 times the spread, at least 1e-12)
    eps = 1e-12 * max(1.0, 2 * radius)
    # a unit vector Log_m(p)/d rounds at about eps/d relative: the nearest point off m counts
    d = np.array([float(M.dist(result.point, p)) for p in points])
    scale = max(1.0, 1.0 / d[d > eps].min()) if np.any(d > eps) else 1.0
    bound = TOL + ROUNDING * n * EPS * scale
    assert _residual(M, result.point, points, w, eps) <= bound
    if result.at_data_point:
        assert any(np.array_equal(result.point, p) for p in points)


@settings(max_examples=20)
@given(seed=seeds, n=st.integers(1, 8), dim=st.integers(1, 3))
def test_euclidean_median_agrees_with_a_generic_minimiser(seed, n, dim, weights):
    rng = np.random.default_rng(seed)
    points = rng.standard_normal((n, dim))
    w = weights(n, seed)
    result = geometric_median(Euclidean(dim), points, w)
    assert result.converged
    m = result.point
    best = minimize(
        lambda x: _f(points, w, x),
        points.mean(axis=0),
        method="Nelder-Mead",
        options={"xatol": 1e-10, "fatol": 1e-14, "maxiter": 20_000},
    )
    # f convex with a subgradient of norm <= tol at m: f(m) <= f(x) + tol |m - x| for every x
    gap = TOL * float(np.linalg.norm(m - best.x))
    assert _f(points, w, m) <= best.fun + gap + ROUNDING * n * EPS * max(1.0, np.abs(points).max())


def test_a_point_heavier_than_the_others_together_is_the_median_exactly(cluster):
    for M, radius in [(Euclidean(2), 3.0), (Sphere(3), 0.6), (SPD(2), 1.0)]:
        points, _ = cluster(M, 5, radius, 11)
        w = np.array([0.5, 1.0, 3.0, 0.6, 0.4])  # 3 > 0.5 + 1 + 0.6 + 0.4
        for x0 in (None, points[0], points[4]):
            result = geometric_median(M, points, w, x0=x0)
            assert np.array_equal(result.point, points[2]), (M, x0)
            assert result.at_data_point and result.residual == 0.0 and result.converged


def test_a_vertex_with_a_wide_angle_is_the_median():
    # the Fermat point of a triangle with an angle >= 120 degrees at a vertex is that vertex,
    # although its weight (1/3) is below the others' (2/3)
    points = np.array([[0.0, 0.0], [1.0, 0.1], [-1.0, 0.1]])
    result = geometric_median(Euclidean(2), points, x0=np.array([0.0, 1.0]))
    assert np.array_equal(result.point, points[0]) and result.at_data_point


def test_a_vertex_that_is_not_the_median_is_left():
    # equilateral triangle: the median is the centroid; starting on a vertex, the Vardi-Zhang
    # step leaves it
    t = np.array([0.0, 2.0, 4.0]) * np.pi / 3
    points = np.stack([np.cos(t), np.sin(t)], axis=1)
    result = geometric_median(Euclidean(2), points, x0=points[0])
    assert result.converged and not result.at_data_point
    # near the centroid, f's Hessian has smallest eigenvalue 1/2 (sum_i (I - u_i u_i^T)/(3 d_i)
    # with d_i = 1), so |m - centroid| <= 2 |subgradient| <= 2 tol
    assert np.linalg.norm(result.point) <= 2 * TOL + ROUNDING * 3 * EPS


def test_the_step_from_a_data_point_is_vardi_and_zhangs():
    # from p_0 (not the median), one step: p_0 + (1 - w_0/|R|) R/S, R and S over the others
    points = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    w = np.array([0.1, 0.4, 0.3, 0.2])  # |R| = 0.30 > w_0 = 0.1
    result = geometric_median(Euclidean(2), points, w, x0=points[0], max_iter=1)
    diff = points[1:] - points[0]
    d = np.linalg.norm(diff, axis=1)
    R = (w[1:] / d) @ diff
    S = float(np.sum(w[1:] / d))
    expected = points[0] + (1 - w[0] / np.linalg.norm(R)) * R / S
    assert result.iterations == 1 and not result.at_data_point
    np.testing.assert_allclose(result.point, expected, rtol=0, atol=ROUNDING * 4 * EPS)


def test_a_median_near_a_heavy_data_point_is_found_quickly():
    # p_0's weight 0.4 nearly balances the others' pull |R_0| = 0.6/sqrt(2) = 0.424: plain
    # Weiszfeld steps shrink the distance to the median by about 0.4/0.424 each (some 300
    # steps to 1e-10); the step that keeps p_0's term exact needs a few dozen
    points = np.array([[0.0, 0.0], [1.0, 1.0], [1.0, -1.0]])
    w = np.array([0.4, 0.3, 0.3])
    result = geometric_median(Euclidean(2), points, w, x0=np.array([0.5, 0.3]), max_iter=60)
    assert result.converged and not result.at_data_point
    # by symmetry the median is (x, 0) with 0.4 = 0.6 (1 - x)/h, h = sqrt((1 - x)^2 + 1):
    # x = 1 - 2/sqrt(5); f's Hessian there has smallest eigenvalue 0.6/h^3 (along the axis)
    x = 1 - 2 / np.sqrt(5)
    curvature = 0.6 / ((1 - x) ** 2 + 1) ** 1.5
    assert np.linalg.norm(result.point - [x, 0.0]) <= TOL / curvature + ROUNDING * EPS


def test_all_points_at_one_place():
    points = np.tile([[0.0, 1.0, 0.0]], (4, 1))
    result = geometric_median(Sphere(3), points)
    assert np.array_equal(result.point, points[0]) and result.iterations == 0


def test_numpy_and_torch_give_the_same_median(cluster, weights):
    torch = pytest.importorskip("torch")
    M = SPD(3)
    points, _ = cluster(M, 6, 1.0, 5)
    w = weights(6, 5)
    a = geometric_median(M, points, w)
    b = geometric_median(M, torch.from_numpy(points), w)
    assert isinstance(b.point, torch.Tensor) and b.point.dtype == torch.float64
    assert a.converged and b.converged and a.at_data_point == b.at_data_point
    # the same arithmetic up to the backends' rounding: the two residuals are both <= tol and
    # the objective values agree within tol * d(a, b) (convexity, in both directions)
    d = float(M.dist(a.point, b.point.numpy()))
    fa = float(w @ M.dist(np.broadcast_to(a.point, points.shape), points)) / w.sum()
    fb = float(w @ M.dist(np.broadcast_to(b.point.numpy(), points.shape), points)) / w.sum()
    assert abs(fa - fb) <= TOL * d + ROUNDING * 6 * EPS * max(fa, 1.0)
    c = geometric_median(M, torch.from_numpy(points).float(), w)
    assert c.point.dtype == torch.float32 and c.converged
    # float32 unit vectors are off the sphere by ~1e-7 in float64: projected there, the heavy
    # point is still found as the median, and rounded back it is the float32 data point
    x = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.6, 0.8, 0.0]])
    d = geometric_median(Sphere(3), x, torch.tensor([1.0, 2.0, 3.0]), x0=x[0])
    assert d.converged and d.at_data_point and d.residual == 0.0
    assert float((d.point - x[2]).abs().max()) <= float(np.finfo(np.float32).eps)


def test_max_iter_ends_without_convergence(cluster):
    points, _ = cluster(Sphere(4), 6, 0.5, 2)
    result = geometric_median(Sphere(4), points, max_iter=2)
    assert result.iterations == 2 and not result.converged and result.residual > TOL


def test_a_non_finite_iterate_is_a_convergence_error():
    class Broken(Euclidean):
        def _exp(self, x, u):
            return x * np.nan

    with pytest.raises(ConvergenceError, match="non-finite at step 1"):
        geometric_median(Broken(2), np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tol": -1.0}, "tol must be a finite number > 0"),
        ({"eps": 0.0}, "eps must be a finite number > 0"),
        ({"step_size": 2.5}, "step_size must be a finite number > 0 and <= 2"),
        ({"max_iter": 1.5}, "max_iter must be an integer"),
        ({"weights": [1.0, -1.0]}, r"weights\[1\] = -1.0 is negative"),
        ({"weights": [0.0, 0.0]}, "sum to 0"),
        ({"weights": [np.nan, 1.0]}, r"weights\[0\] is nan"),
        ({"weights": [1.0, 1.0, 1.0]}, r"expected \(2,\)"),
    ],
)
def test_bad_parameters_are_parameter_errors(kwargs, message):
    points = np.array([[1.0, 0, 0], [0, 1.0, 0]])
    with pytest.raises(ParameterError, match=message):
        geometric_median(Sphere(3), points, **kwargs)


def test_bad_points_and_manifolds():
    with pytest.raises(NotOnManifoldError, match=r"points\[1\] is not on Sphere\(3\)"):
        geometric_median(Sphere(3), np.array([[1.0, 0, 0], [0, 2.0, 0]]))
    with pytest.raises(ShapeError, match="empty"):
        geometric_median(Sphere(3), np.zeros((0, 3)))
    with pytest.raises(ShapeError, match=r"shape \(3,\); expected \(n, 3\)"):
        geometric_median(Sphere(3), np.array([1.0, 0, 0]))
    M = Elliptope(4, 2)
    with pytest.raises(ParameterError, match="Elliptope.*no exp map"):
        geometric_median(M, M.random_point(3, rng=0))


def test_no_uniqueness_warning_is_issued(cluster):
    points, _ = cluster(Sphere(3), 5, 1.5, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        geometric_median(Sphere(3), points)

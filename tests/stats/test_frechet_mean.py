"""riemfl.stats.frechet_mean: first-order conditions, closed forms, invariance under isometries,
agreement with a generic optimiser and between numpy and torch, the uniqueness check, and the
refusal of bad input.

Tolerances come from the stopping rule: the result has a gradient norm ``|g| <= tol``, and where
f is mu-strongly geodesically convex (mu = 1 on a Hadamard manifold, ``min theta cot theta`` on
the sphere within distance theta of the points) its distance to the true mean is at most
``|g| / mu``. On top of that each check allows the rounding of its own arithmetic,
``ROUNDING`` ulps per summand, scaled by the size of the numbers.
"""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import expm, logm
from scipy.optimize import minimize

from riemfl.errors import (
    ConvergenceError,
    NotOnManifoldError,
    ParameterError,
    RiemflError,
    ShapeError,
)
from riemfl.manifolds import (
    SPD,
    Euclidean,
    FixedRank,
    Lorentz,
    PoincareBall,
    SpecialOrthogonal,
    Sphere,
    Stiefel,
)
from riemfl.stats import (
    NonUniqueMeanError,
    NonUniqueMeanWarning,
    curvature_bound,
    frechet_mean,
    uniqueness_radius,
)

TOL = 1e-10
EPS = float(np.finfo(np.float64).eps)
ROUNDING = 100  # ulps per summand allowed for the rounding of a check's own arithmetic

#: (manifold, cluster radius): every point within the radius of a centre, so within twice it of
#: a data point, below the uniqueness radius r* of each family
CASES = {
    "sphere": (lambda: Sphere(4), 0.5),
    "stiefel": (lambda: Stiefel(5, 2), 0.3),
    "spd": (lambda: SPD(3), 1.0),
    "euclidean": (lambda: Euclidean(3), 2.0),
    "poincare": (lambda: PoincareBall(3), 1.0),
    "lorentz": (lambda: Lorentz(2), 1.0),
    "rotations": (lambda: SpecialOrthogonal(3), 0.5),
}
seeds = st.integers(0, 2**32 - 2)
sizes = st.integers(1, 6)


def _gradient(M, m, points, w):
    """sum_i w_i Log_m(p_i), normalised weights, one point at a time."""
    w = np.asarray(w, dtype=float) / np.sum(w)
    return sum(wi * M.log(m, p) for wi, p in zip(w, points, strict=True) if wi > 0)


def _f(M, m, points, w):
    w = np.asarray(w, dtype=float) / np.sum(w)
    return 0.5 * float(np.sum(w * M.squared_dist(np.broadcast_to(m, points.shape), points)))


# ------------------------------------------------------------------ first-order conditions
@pytest.mark.parametrize("case", sorted(CASES))
@settings(max_examples=8)
@given(seed=seeds, n=sizes)
def test_the_gradient_vanishes_at_the_mean(case, seed, n, cluster, weights):
    make, radius = CASES[case]
    M = make()
    points, _ = cluster(M, n, radius, seed)
    w = weights(n, seed, zeros=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NonUniqueMeanWarning)  # clusters are within r*
        result = frechet_mean(M, points, w)
    assert result.converged and result.unique is True and result.method == "exp"
    assert result.grad_norm <= TOL
    M.check_point(result.point)
    g = _gradient(M, result.point, points, w)
    assert float(M.norm(result.point, g)) <= TOL + ROUNDING * n * EPS * 2 * radius


@settings(max_examples=15)
@given(seed=seeds, n=sizes)
def test_euclidean_mean_is_the_weighted_average(seed, n, weights):
    rng = np.random.default_rng(seed)
    points = 10.0 * rng.standard_normal((n, 3))
    w = weights(n, seed)
    result = frechet_mean(Euclidean(3), points, w)
    # in R^n the gradient is sum w_i p_i - m itself: |m - closed form| = |g| <= tol
    closed = (w / w.sum()) @ points
    scale = np.abs(points).max()
    assert np.linalg.norm(result.point - closed) <= TOL + ROUNDING * n * EPS * scale


@pytest.mark.parametrize("metric", ["affine-invariant", "log-euclidean"])
@settings(max_examples=10)
@given(seed=seeds, n=sizes)
def test_mean_of_commuting_spd_matrices_is_exp_of_the_mean_log(metric, seed, n, weights):
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((3, 3)))  # a common eigenbasis
    lam = np.exp(rng.uniform(-1.5, 1.5, (n, 3)))
    points = np.einsum("ij,nj,kj->nik", q, lam, q)
    w = weights(n, seed)
    M = SPD(3, metric)
    result = frechet_mean(M, points, w, uniqueness="raise")  # flat / Hadamard: always unique
    closed = expm(np.einsum("n,nij->ij", w / w.sum(), np.stack([logm(p).real for p in points])))
    # Hadamard (or flat): f is 1-strongly convex, d(m, m*) <= |g| <= tol; logm/expm and the
    # distance round at about eps times the condition number
    kappa = lam.max() / lam.min()
    assert float(M.dist(result.point, closed)) <= TOL + ROUNDING * n * EPS * kappa


@settings(max_examples=15)
@given(seed=seeds, n=sizes)
def test_mean_on_a_great_circle_is_at_the_weighted_mean_angle(seed, n, weights):
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((4, 2)))  # a random plane of R^4
    start = rng.uniform(-math.pi, math.pi)
    angles = start + rng.uniform(0.0, 0.95 * math.pi, n)  # within an open half-circle
    points = np.cos(angles)[:, None] * q[:, 0] + np.sin(angles)[:, None] * q[:, 1]
    w = weights(n, seed)
    M = Sphere(4)
    result = frechet_mean(M, points, w, uniqueness="ignore")
    mean_angle = float((w / w.sum()) @ angles)
    closed = math.cos(mean_angle) * q[:, 0] + math.sin(mean_angle) * q[:, 1]
    # the iterates stay on the circle, where |g| = |angle(m) - mean angle|
    assert float(M.dist(result.point, closed)) <= TOL + ROUNDING * n * EPS * math.pi


# ------------------------------------------------------------------ isometries
@settings(max_examples=10)
@given(seed=seeds, n=sizes)
def test_rotating_sphere_points_rotates_their_mean(seed, n, cluster, weights):
    M = Sphere(4)
    radius = 0.4
    points, _ = cluster(M, n, radius, seed)
    w = weights(n, seed)
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((4, 4)))
    a = frechet_mean(M, points, w).point
    b = frechet_mean(M, points @ q.T, w).point
    # both within |g|/mu of the true means, mu = theta cot theta at theta = 2 radius
    mu = 2 * radius / math.tan(2 * radius)
    assert float(M.dist(q @ a, b)) <= 2 * TOL / mu + ROUNDING * n * EPS


@settings(max_examples=10)
@given(seed=seeds, n=sizes)
def test_congruence_moves_the_spd_mean(seed, n, cluster, weights):
    M = SPD(3)
    points, _ = cluster(M, n, 1.0, seed)
    w = weights(n, seed)
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    a = q * rng.uniform(0.5, 2.0, 3)  # condition number at most 4
    moved = a @ points @ a.T
    m = frechet_mean(M, points, w).point
    m_moved = frechet_mean(M, moved, w).point
    # X -> A X A^T is an isometry of the affine-invariant metric; mu = 1 (Hadamard)
    scale = 16.0 * max(np.linalg.cond(p) for p in points)
    assert float(M.dist(a @ m @ a.T, m_moved)) <= 2 * TOL + ROUNDING * n * EPS * scale


# ------------------------------------------------------------------ a generic optimiser
@pytest.mark.parametrize("case", ["sphere", "spd", "rotations"])
@settings(max_examples=4)
@given(seed=seeds, n=st.integers(2, 5))
def test_no_generic_optimiser_finds_a_lower_value(case, seed, n, cluster, weights):
    make, radius = CASES[case]
    M = make()
    points, _ = cluster(M, n, radius, seed)
    w = weights(n, seed)
    m = frechet_mean(M, points, w).point
    f_m = _f(M, m, points, w)

    def pulled_back(v):
        return _f(M, M.exp(m, M.to_tangent(m, v.reshape(m.shape))), points, w)

    best = minimize(pulled_back, np.zeros(m.size), method="BFGS", options={"gtol": 1e-12})
    # f(m) - f* <= |g|^2 / (2 mu) <= tol^2 (mu >= 1/2 here); f itself rounds at eps * f
    assert best.fun >= f_m - TOL**2 - ROUNDING * n * EPS * max(f_m, 1.0)


def test_numpy_and_torch_give_the_same_mean(cluster, weights):
    torch = pytest.importorskip("torch")
    M = Sphere(4)
    points, _ = cluster(M, 5, 0.4, 3)
    w = weights(5, 3)
    a = frechet_mean(M, points, w)
    b = frechet_mean(M, torch.from_numpy(points), torch.from_numpy(w))
    assert isinstance(b.point, torch.Tensor) and b.point.dtype == torch.float64
    assert b.converged and b.unique is True
    mu = 0.8 / math.tan(0.8)
    assert float(M.dist(a.point, b.point.numpy())) <= 2 * TOL / mu + ROUNDING * 5 * EPS
    c = frechet_mean(M, torch.from_numpy(points).float(), w)  # float32: averaged in float64
    assert c.point.dtype == torch.float32 and c.converged
    # rounding the points to float32 moves them by eps32, the mean by at most eps32 / mu, and
    # the result is rounded once more
    f32 = float(np.finfo(np.float32).eps)
    assert np.abs(c.point.double().numpy() - a.point).max() <= 2 * f32 / mu + f32


def test_zero_weights_take_no_part(cluster):
    M = Sphere(3)
    points, _ = cluster(M, 4, 0.5, 7)
    far = -points[:1]  # antipodal to a point: its log from near there is not even defined
    w = np.array([1.0, 2.0, 0.5, 1.0])
    a = frechet_mean(M, points, w)
    b = frechet_mean(M, np.concatenate([points, far]), np.append(w, 0.0))
    assert np.array_equal(a.point, b.point) and a.iterations == b.iterations


def test_the_result_is_a_new_array():
    points = np.eye(3)[:1]
    result = frechet_mean(Sphere(3), points)
    assert result.iterations == 0 and np.array_equal(result.point, points[0])
    result.point[0] = 5.0
    assert points[0, 0] == 1.0


def test_max_iter_ends_without_convergence_and_without_error(cluster):
    M = Sphere(4)
    points, _ = cluster(M, 5, 0.5, 1)
    result = frechet_mean(M, points, max_iter=1, step_size=0.1)
    assert result.iterations == 1 and not result.converged and result.grad_norm > TOL


def test_the_retraction_method_is_labelled_and_refused_without_log():
    M = FixedRank(5, 4, 2)
    c = M.random_point(rng=0)
    base = np.broadcast_to(c, (4, 5, 4)).copy()
    points = M.retract(base, 0.1 * M.random_tangent(base, rng=1))
    with pytest.raises(ParameterError, match=r"no exp map.*method='retraction'"):
        frechet_mean(M, points)
    result = frechet_mean(M, points, method="retraction")
    assert result.method == "retraction" and result.unique is None and result.converged
    g = sum(M.inverse_retract(result.point, p) for p in points) / 4
    assert float(M.norm(result.point, g)) <= TOL + ROUNDING * 4 * EPS * 10


def test_a_non_finite_iterate_is_a_convergence_error():
    class Broken(Euclidean):
        def _exp(self, x, u):
            return x * np.nan

    with pytest.raises(ConvergenceError, match="non-finite at step 1"):
        frechet_mean(Broken(2), np.array([[0.0, 0.0], [1.0, 0.0]]))


# ------------------------------------------------------------------ uniqueness
def _spread_on_the_sphere():
    """e_1 (weight 1) and two points 0.6 pi away on either side (weight 1/4 each): the mean is
    e_1 (by symmetry), and every ball around it or a data point holding them has radius
    0.6 pi > r* = pi/2."""
    t = 0.6 * math.pi
    points = np.array(
        [[1.0, 0.0, 0.0], [math.cos(t), math.sin(t), 0], [math.cos(t), -math.sin(t), 0]]
    )
    return points, np.array([1.0, 0.25, 0.25])


def test_points_spread_beyond_the_radius_warn():
    points, w = _spread_on_the_sphere()
    with pytest.warns(NonUniqueMeanWarning, match=r"Sphere\(3\).*Afsari 2011"):
        result = frechet_mean(Sphere(3), points, w)
    assert result.unique is None and result.converged
    np.testing.assert_allclose(result.point, [1.0, 0.0, 0.0], atol=TOL)


def test_points_spread_beyond_the_radius_raise_or_pass_silently():
    points, w = _spread_on_the_sphere()
    with pytest.raises(NonUniqueMeanError, match="may not be unique") as info:
        frechet_mean(Sphere(3), points, w, uniqueness="raise")
    assert isinstance(info.value, RiemflError)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert frechet_mean(Sphere(3), points, w, uniqueness="ignore").unique is None


@pytest.mark.parametrize(
    "make", [lambda: SPD(3), lambda: Euclidean(2), lambda: PoincareBall(2), lambda: Lorentz(2)]
)
def test_hadamard_manifolds_are_silent_however_spread_the_points(make):
    M = make()
    points = M.random_point(6, rng=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert frechet_mean(M, points, uniqueness="raise").unique is True
    assert uniqueness_radius(M)[0] == math.inf


def test_a_manifold_without_a_known_bound_says_so():
    M = SPD(2, "bures-wasserstein")
    assert curvature_bound(M)[0] is None
    points = np.array([np.eye(2), np.diag([2.0, 0.5])])
    with pytest.warns(NonUniqueMeanWarning, match="declares no upper bound"):
        assert frechet_mean(M, points).unique is None


def test_the_uniqueness_radii():
    assert uniqueness_radius(Sphere(3))[0] == pytest.approx(math.pi / 2)
    assert uniqueness_radius(Stiefel(4, 2))[0] == pytest.approx(math.pi / 2)
    # SO(n), Frobenius metric: the injectivity radius sqrt(2) pi binds (Delta = 1/2)
    assert uniqueness_radius(SpecialOrthogonal(3))[0] == pytest.approx(math.pi / math.sqrt(2))


# ------------------------------------------------------------------ bad input
BAD_WEIGHTS = [
    ([1.0, -0.5, 1.0], r"weights\[1\] = -0.5 is negative"),
    ([0.0, 0.0, 0.0], "sum to 0"),
    ([1.0, float("nan"), 1.0], r"weights\[1\] is nan"),
    ([1.0, float("inf"), 1.0], r"weights\[1\] is inf"),
    ([1.0, 1.0], r"shape \(2,\); expected \(3,\)"),
    ([[1.0, 1.0, 1.0]], r"shape \(1, 3\); expected \(3,\)"),
    (["a", "b", "c"], "real numbers"),
]


@pytest.mark.parametrize(("w", "message"), BAD_WEIGHTS)
def test_bad_weights_are_parameter_errors(w, message):
    points = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]])
    with pytest.raises(ParameterError, match=message):
        frechet_mean(Sphere(3), points, w)


def test_a_point_off_the_manifold_is_named():
    points = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.1]])
    with pytest.raises(NotOnManifoldError, match=r"points\[2\] is not on Sphere\(3\)"):
        frechet_mean(Sphere(3), points)
    with pytest.raises(NotOnManifoldError, match=r"points\[1\]"):
        frechet_mean(Sphere(3), np.array([[1.0, 0, 0], [np.nan, 0, 0]]))
    with pytest.raises(NotOnManifoldError, match="x0 is not on"):
        frechet_mean(Sphere(3), points[:2], x0=np.array([2.0, 0, 0]))


@pytest.mark.parametrize(
    ("points", "message"),
    [
        (np.zeros((0, 3)), "empty"),
        (np.array([1.0, 0, 0]), r"expected \(n, 3\)"),
        (np.ones((2, 4)) / 2, r"shape \(2, 4\); expected \(n, 3\)"),
        ([[1.0, 0], [0.0]], "not an array"),
    ],
)
def test_bad_point_stacks_are_shape_errors(points, message):
    with pytest.raises(ShapeError, match=message):
        frechet_mean(Sphere(3), points)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tol": 0.0}, "tol must be a finite number > 0"),
        ({"tol": float("nan")}, "tol"),
        ({"max_iter": -1}, "max_iter must be an integer >= 0"),
        ({"max_iter": True}, "max_iter"),
        ({"step_size": 2.0}, "step_size must be a finite number > 0 and < 2"),
        ({"method": "newton"}, "method must be one of"),
        ({"uniqueness": "maybe"}, "uniqueness must be one of"),
    ],
)
def test_bad_parameters_are_parameter_errors(kwargs, message):
    points = np.array([[1.0, 0, 0], [0, 1.0, 0]])
    with pytest.raises(ParameterError, match=message):
        frechet_mean(Sphere(3), points, **kwargs)


def test_bad_x0_and_manifold():
    points = np.array([[1.0, 0, 0], [0, 1.0, 0]])
    with pytest.raises(ShapeError, match=r"x0 has shape \(2,\)"):
        frechet_mean(Sphere(3), points, x0=np.array([1.0, 0]))
    with pytest.raises(ParameterError, match="must be a riemfl Manifold"):
        frechet_mean("sphere", points)


def test_the_bound_is_what_the_manifold_declares():
    """The uniqueness check reads Manifold.curvature_bound: a subclass that declares another
    bound changes the radius (Sphere: inj = pi; Delta = 4 gives pi/sqrt(4) = pi/2 < pi)."""

    class MoreCurved(Sphere):
        def curvature_bound(self):
            return 4.0, "declared by the test"

    radius, reason = uniqueness_radius(MoreCurved(3))
    assert radius == pytest.approx(math.pi / 4) and "declared by the test" in reason
    assert curvature_bound(MoreCurved(3)) == (4.0, "declared by the test")

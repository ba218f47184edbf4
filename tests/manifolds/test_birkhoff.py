"""BirkhoffPolytope beyond the kit: the pseudo-inverse solve of the tangent projection, Sinkhorn
(its form, its tolerance and its iteration limit), the Hessian along a second-order curve, the
constants and the typed errors."""

import numpy as np
import pytest
from hypothesis import given

from riemfl import BirkhoffPolytope, ConvergenceError, ParameterError, ProjectionError
from riemfl.manifolds.birkhoff import sinkhorn
from riemfl.testing import checks
from riemfl.testing import strategies as rst


@given(seed=rst.seeds())
def test_multipliers_are_the_pseudo_inverse_solution(seed):
    """(A + w w^T)^{-1} b = A^+ b for b orthogonal to the kernel w of A = [[I, X], [X^T, I]],
    and the projection is Fisher-orthogonal: <Z - P(Z), V>_X = 0 for tangent V."""
    m = BirkhoffPolytope(5)
    rng = np.random.default_rng(seed)
    x = m.random_point(rng=rng)
    z = rng.standard_normal(x.shape)
    a = np.block([[np.eye(5), x], [x.T, np.eye(5)]])
    b = np.concatenate([z.sum(axis=1), z.sum(axis=0)])
    alpha, beta = m._multipliers(x, z.sum(axis=1), z.sum(axis=0))
    np.testing.assert_allclose(np.concatenate([alpha, beta]), np.linalg.pinv(a) @ b, atol=1e-12)
    p = m.to_tangent(x, z)
    v = m.random_tangent(x, rng=rng)
    assert abs(float(m.inner(x, z - p, v))) < 1e-11 * max(1.0, float(np.sum(np.abs(z / x))))


def test_projection_stays_tangent_near_the_boundary():
    """Near a permutation matrix (entries down to 1e-6) A is badly conditioned apart from its
    kernel; the deflated solve still returns a tangent vector."""
    m = BirkhoffPolytope(4)
    perm = np.eye(4)[[1, 2, 3, 0]]
    x = sinkhorn(perm + 1e-6, 1e-15, 10_000)
    z = np.random.default_rng(0).standard_normal(x.shape)
    p = m.to_tangent(x, z)
    assert np.abs(p.sum(axis=0)).max() < 1e-9
    assert np.abs(p.sum(axis=1)).max() < 1e-9
    np.testing.assert_allclose(m.to_tangent(x, p), p, atol=1e-9)


@given(seed=rst.seeds())
def test_project_is_sinkhorn_scaling(seed):
    """project(A) = D1 A D2: log project(A) - log A = r 1^T + 1 c^T (zero mixed differences),
    doubly stochastic, and project fixes points of the polytope."""
    m = BirkhoffPolytope(4)
    rng = np.random.default_rng(seed)
    a = np.exp(rng.standard_normal((4, 4)))
    p = m.project(a)
    m.check_point(p)
    d = np.log(p) - np.log(a)
    mixed = d - d[:, :1] - d[:1, :] + d[0, 0]
    np.testing.assert_allclose(mixed, 0.0, atol=1e-12)
    x = m.random_point(rng=rng)
    np.testing.assert_allclose(m.project(x), x, atol=1e-13)


def test_project_is_not_the_metric_projection():
    """Sinkhorn scaling is a KL projection: a doubly stochastic matrix can be nearer in the
    Frobenius norm (here the Frobenius projection onto the affine set of unit row and column
    sums, which stays positive)."""
    m = BirkhoffPolytope(3)
    a = np.array([[2.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    p = m.project(a)
    j = np.ones((3, 3)) / 3
    nearest = a - (a @ j + j @ a) + j @ a @ j + j  # the affine Frobenius projection
    m.check_point(nearest)
    assert np.linalg.norm(a - nearest) < np.linalg.norm(a - p) - 0.05


def test_sinkhorn_iteration_limit_raises_naming_the_residual():
    m = BirkhoffPolytope(3, max_iter=2, tol=1e-14)
    a = np.array([[100.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.01]])
    with pytest.raises(ConvergenceError, match=r"residual .* > tol 1.0e-14 .* max_iter = 2"):
        m.project(a)
    assert BirkhoffPolytope(3).project(a).shape == (3, 3)


def test_numpy_at_off_stops_at_the_tolerance_and_returns_the_last_iterate_at_the_limit():
    import riemfl

    a = np.array([[100.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.01]])
    m = BirkhoffPolytope(3)
    with riemfl.checks("off"):
        off = m.project(a)
    assert np.array_equal(off, m.project(a))  # eager's sweeps, bit for bit
    # at the limit: no check at off, the iterate of the second sweep (rows rescaled)
    limited = BirkhoffPolytope(3, max_iter=2, tol=1e-14)
    with riemfl.checks("off"):
        last = limited.project(a)
    np.testing.assert_allclose(last.sum(axis=-1), 1.0, rtol=0, atol=4 * np.finfo(float).eps)
    assert np.abs(last.sum(axis=-2) - 1.0).max() > 1e-3


def test_hessian_along_a_second_order_curve():
    """c(t) = Sinkhorn((sqrt X + tU / (2 sqrt X))^2) has zero covariant acceleration at t = 0
    (the Fisher geodesic of the orthant, whose acceleration u^2/(4x) - Christoffel term cancels,
    then a normal scaling), so f(c(t)) - f - t<grad, U> - t^2/2 <Hess U, U> is O(t^3); the
    Douik-Hassibi retraction leaves a t^2 term."""
    m = BirkhoffPolytope(4)
    rng = np.random.default_rng(3)
    x = m.random_point(rng=rng)
    u = rst.scaled_tangent(m, x, 0.5, rng)
    fn = checks.quadratic_function(m.point_shape, rng)
    g = fn.egrad(x)
    f0 = float(fn.cost(x))
    slope1 = float(m.inner(x, m.egrad_to_rgrad(x, g), u))
    slope2 = float(m.inner(x, m.ehess_to_rhess(x, g, fn.ehess(x, u), u), u))
    root = np.sqrt(x)
    ts = np.logspace(-3, -1.5, 6)

    def error(curve):
        return np.array(
            [abs(float(fn.cost(curve(t))) - f0 - t * slope1 - 0.5 * t * t * slope2) for t in ts]
        )

    second = error(lambda t: sinkhorn((root + t * u / (2 * root)) ** 2, 1e-15, 10_000))
    assert np.polyfit(np.log(ts), np.log(second), 1)[0] > 2.75
    first = error(lambda t: m.retract(x, t * u))
    assert np.polyfit(np.log(ts), np.log(first), 1)[0] < 2.25


def test_constants_and_typed_errors():
    m = BirkhoffPolytope(4)
    identity, shift = np.eye(4), np.eye(4)[[1, 2, 3, 0]]
    assert float(m.point_gap(identity, shift)) == pytest.approx(m.diameter, rel=1e-15)
    assert m.dim == 9
    with pytest.raises(ProjectionError, match="positive entries"):
        m.project(-np.ones((4, 4)))
    with pytest.raises(ParameterError, match=r"BirkhoffPolytope\(n\): n must be an integer >= 2"):
        BirkhoffPolytope(1)
    with pytest.raises(ParameterError, match="tol"):
        BirkhoffPolytope(3, tol=0.0)
    with pytest.raises(ParameterError, match="max_iter"):
        BirkhoffPolytope(3, max_iter=0)
    for name in ("exp", "log", "dist", "parallel_transport", "inverse_retract"):
        ok, why = m.supports(name)
        assert not ok and why
    with pytest.raises(NotImplementedError, match="Sinkhorn"):
        m.reach  # noqa: B018
    with pytest.raises(NotImplementedError, match="not complete"):
        m.injectivity_radius  # noqa: B018


def test_retract_keeps_entries_positive_when_one_underflows():
    """A point with an entry of 6e-301 and a step with U/X = -100 there: X exp(U/X) underflows
    to 0 at that entry (Sinkhorn keeps a zero), and retract returns the smallest normal number
    instead, so every entry of the result is positive."""
    m = BirkhoffPolytope(3)
    a = np.ones((3, 3)) + np.eye(3)
    a[0, 1] = 1e-300
    x = m.project(a)
    u = -100.0 * x[0, 1] * np.array([[-1.0, 1.0, 0.0], [1.0, -1.0, 0.0], [0.0, 0.0, 0.0]])
    m.check_tangent(x, u)
    y = m.retract(x, u)
    assert y[0, 1] == np.finfo(np.float64).tiny and np.all(y > 0)
    m.check_point(y)

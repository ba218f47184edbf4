"""LRMC on Stiefel: least-squares coefficients, envelope gradient, fallback, generator."""

import math

import numpy as np
import pytest

from riemfl import ParameterError, ShapeError
from riemfl.problems import LRMCProblem, sample_batches


def _reference_loss(a, omega, x):
    """f(X) = 1/2 |P_Omega(X V(X) - A)|^2 with V by one lstsq per column (the plain loop)."""
    total = 0.0
    for t in range(a.shape[1]):
        rows = omega[:, t]
        if rows.any():
            v = np.linalg.lstsq(x[rows], a[rows, t], rcond=None)[0]
            total += 0.5 * np.sum((x[rows] @ v - a[rows, t]) ** 2)
    return total


@pytest.fixture
def small():
    rng = np.random.default_rng(0)
    d, t, k = 8, 13, 2
    a = rng.standard_normal((d, k)) @ rng.standard_normal((k, t)) + 0.1 * rng.standard_normal(
        (d, t)
    )
    omega = rng.uniform(size=(d, t)) < 0.6
    omega[:, 0] = False  # no observation
    omega[:, 1] = False
    omega[3, 1] = True  # one observation < k: the fallback
    omega[:, 2] = False
    omega[[1, 5], 2] = True  # exactly k observations
    return a, omega, LRMCProblem(a, omega, 3, k)


def test_loss_and_gradient_against_loop_and_finite_differences(small, assert_grad_matches_fd):
    a, omega, problem = small
    rng = np.random.default_rng(1)
    xs = problem.manifold.random_point(problem.n_clients, rng=rng)
    losses = problem.client_losses(problem.all_clients, xs)
    grads = problem.client_egrads(problem.all_clients, xs)
    for i, cols in enumerate(problem.column_blocks):

        def f(x, cols=cols):
            return _reference_loss(a[:, cols], omega[:, cols], x)

        assert losses[i] == pytest.approx(f(xs[i]), rel=1e-10)
        assert_grad_matches_fd(f, grads[i], xs[i], rng, rtol=1e-5)


def test_gradient_is_tangent(small):
    _, _, problem = small
    xs = problem.manifold.random_point(problem.n_clients, rng=2)
    grads = problem.client_egrads(problem.all_clients, xs)
    np.testing.assert_allclose(xs.swapaxes(-1, -2) @ grads, 0, atol=1e-11)
    x = xs[0]
    np.testing.assert_allclose(problem.rgrad(x), problem.egrad(x), atol=1e-11)


def test_fallback_columns(small):
    a, omega, problem = small
    x = problem.manifold.random_point(rng=3)
    xs = np.stack([x] * problem.n_clients)
    v = problem.coefficients(xs, problem._obs, problem._mask)
    # column 0: unobserved -> 0; column 1: one observation -> minimum-norm solution
    np.testing.assert_array_equal(v[0, 0], 0)
    expected = np.linalg.pinv(x[3:4]) @ a[3:4, 1]
    np.testing.assert_allclose(v[0, 1], expected, rtol=1e-10)
    np.testing.assert_allclose(x[3] @ v[0, 1], a[3, 1], rtol=1e-10)  # exact fit
    exact = np.linalg.solve(x[[1, 5]], a[[1, 5], 2])
    np.testing.assert_allclose(v[0, 2], exact, rtol=1e-8)
    assert np.isfinite(problem.client_egrads(problem.all_clients, xs)).all()


def test_ill_conditioned_gram_uses_lstsq():
    rng = np.random.default_rng(4)
    d, k = 6, 2
    x = np.linalg.qr(rng.standard_normal((d, k)))[0]
    # observed rows 0 and 1 of a point whose two observed rows are (nearly) parallel
    x[1] = x[0] * (1 + 1e-9)
    x = np.linalg.qr(x)[0]
    a = rng.standard_normal((d, 1))
    omega = np.zeros((d, 1), dtype=bool)
    omega[[0, 1], 0] = True
    problem = LRMCProblem(a, omega, 1, k)
    v = problem.coefficients(x[None], problem._obs, problem._mask)
    ref = np.linalg.lstsq(x[[0, 1]], a[[0, 1], 0], rcond=None)[0]
    np.testing.assert_allclose(v[0, 0], ref, rtol=1e-6)
    assert np.isfinite(v).all()


def test_stacked_equals_loop_and_subsets(small):
    _, _, problem = small
    xs = problem.manifold.random_point(3, rng=5)
    clients = [2, 0, 2]
    stacked = problem.client_egrads(clients, xs)
    for j, i in enumerate(clients):
        np.testing.assert_allclose(stacked[j], problem.client_egrads([i], xs[j : j + 1])[0])
    np.testing.assert_allclose(
        problem.client_losses(clients, xs),
        [problem.client_losses([i], xs[j : j + 1])[0] for j, i in enumerate(clients)],
    )


def test_column_minibatches_are_unbiased_and_full_batch_is_full(small):
    _, _, problem = small
    x = problem.manifold.random_point(rng=6)
    for i, m in enumerate(problem.n_samples):
        singles = problem.client_egrads([i] * m, np.stack([x] * m), np.arange(m)[:, None])
        full = problem.client_egrads([i], x[None])
        np.testing.assert_allclose(singles.mean(0), full[0], atol=1e-12)
        perm = np.random.default_rng(i).permutation(m)[None]
        np.testing.assert_allclose(problem.client_egrads([i], x[None], perm), full, atol=1e-12)
    batches = sample_batches(np.random.default_rng(0), problem.n_samples, [0, 1], 2)
    assert problem.client_egrads([0, 1], np.stack([x, x]), batches).shape == (2, 8, 2)


def test_synthetic_generator():
    problem = LRMCProblem.synthetic()
    assert problem.nu == pytest.approx(10 * 2 * (100 + 1000 - 2) / (100 * 1000))
    assert problem.nu == pytest.approx(0.2196)
    assert problem.n_samples == (100,) * 10 and problem.manifold.point_shape == (100, 2)
    frac = problem.describe()["observed_fraction"]
    assert abs(frac - problem.nu) < 4 * math.sqrt(problem.nu * (1 - problem.nu) / 1e5)
    left, right = problem.factors
    assert left.shape == (100, 2) and right.shape == (2, 1000)
    assert problem.optimum == 0.0
    x_star = problem.solution()
    problem.manifold.check_point(x_star)
    assert problem.loss(x_star) < 1e-20
    assert problem.grad_norm(x_star) < 1e-9
    x0 = problem.manifold.random_point(rng=0)  # seed 0 for both data and start: not the solution
    assert problem.loss(x0) > 100
    assert problem.grad_norm(x0) > 1
    np.testing.assert_array_equal(
        LRMCProblem.synthetic(d=10, T=30, seed=3)._obs,
        LRMCProblem.synthetic(d=10, T=30, seed=3)._obs,
    )


def test_uneven_column_split():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((5, 11))
    omega = rng.uniform(size=a.shape) < 0.8
    problem = LRMCProblem(a, omega, 3, 2)
    assert problem.n_samples == (4, 4, 3)
    x = problem.manifold.random_point(rng=1)
    assert problem.loss(x) * 3 == pytest.approx(_reference_loss(a, omega, x), rel=1e-10)


def test_unobserved_entries_may_be_nan():
    a = np.array([[1.0, np.nan], [2.0, 3.0], [np.nan, 1.0]])
    omega = ~np.isnan(a)
    problem = LRMCProblem(a, omega, 2, 1)
    assert np.isfinite(problem.loss(np.array([[1.0], [0.0], [0.0]])))


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: LRMCProblem(np.ones((3, 4)), np.ones((3, 3), bool), 2, 1), ShapeError, "mask"),
        (lambda: LRMCProblem(np.ones((3, 4)), np.full((3, 4), 2), 2, 1), ParameterError, "0/1"),
        (
            lambda: LRMCProblem(np.ones((3, 4)), np.ones((3, 4), bool), 5, 1),
            ParameterError,
            "<= 4, got 5",
        ),
        (lambda: LRMCProblem(np.ones((3, 4)), np.ones((3, 4), bool), 2, 4), ParameterError, "k"),
        (
            lambda: LRMCProblem(np.full((3, 4), np.inf), np.ones((3, 4), bool), 2, 1),
            ParameterError,
            "observed",
        ),
        (lambda: LRMCProblem.synthetic(T=0), ParameterError, "T must be"),
        (lambda: LRMCProblem.synthetic(oversampling=-1), ParameterError, "oversampling"),
    ],
)
def test_errors(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_solution_unknown_without_truth():
    problem = LRMCProblem(np.ones((3, 4)), np.ones((3, 4), bool), 2, 1)
    with pytest.raises(ParameterError, match="truth"):
        problem.solution()

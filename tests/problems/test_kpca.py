"""kPCA on Stiefel: oracle against formulas and finite differences, f*, beta, mini-batches."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riemfl import ParameterError, ShapeError, Stiefel
from riemfl.problems import KPCAProblem, sample_batches
from riemfl.testing import importorskip


def _blocks(rng, sizes, d):
    return [rng.standard_normal((p, d)) * (1 + i) for i, p in enumerate(sizes)]


def _loss(a, x):
    return -0.5 * np.trace(x.T @ a.T @ a @ x)


@pytest.fixture(params=["equal", "nearly-equal", "unequal"])
def problem(request):
    sizes = {"equal": [6, 6, 6], "nearly-equal": [7, 6, 6, 7], "unequal": [1, 9, 3]}
    rng = np.random.default_rng(1)
    return KPCAProblem(_blocks(rng, sizes[request.param], 5), 2)


def test_storage_paths_are_both_exercised():
    rng = np.random.default_rng(0)
    assert KPCAProblem(_blocks(rng, [4, 5], 3), 1)._padded is not None
    assert KPCAProblem(_blocks(rng, [1, 9, 3], 3), 1)._padded is None


def test_full_gradient_and_loss_match_finite_differences(problem, assert_grad_matches_fd):
    rng = np.random.default_rng(2)
    xs = problem.manifold.random_point(problem.n_clients, rng=rng)
    grads = problem.client_egrads(problem.all_clients, xs)
    for i, a in enumerate(problem.blocks):
        assert_grad_matches_fd(lambda x, a=a: _loss(a, x), grads[i], xs[i], rng)
    losses = problem.client_losses(problem.all_clients, xs)
    np.testing.assert_allclose(
        losses, [_loss(a, x) for a, x in zip(problem.blocks, xs, strict=True)]
    )


def test_minibatch_gradient_matches_finite_differences(problem, assert_grad_matches_fd):
    rng = np.random.default_rng(3)
    clients = [2, 0]
    xs = problem.manifold.random_point(2, rng=rng)
    b = 1
    batches = sample_batches(rng, problem.n_samples, clients, b)
    grads = problem.client_egrads(clients, xs, batches)
    for j, i in enumerate(clients):
        p, rows = problem.n_samples[i], problem.blocks[i][batches[j]]

        def batch_loss(x, p=p, rows=rows):
            # f_i(x; B) = (1/b) sum_{l in B} f_il(x), f_il = -(p/2) |x^T a_l|^2
            return -(p / (2 * b)) * np.sum((rows @ x) ** 2)

        assert_grad_matches_fd(batch_loss, grads[j], xs[j], rng)


def test_minibatch_gradient_is_unbiased_by_enumeration(problem):
    """The mean over every b-subset of a client's rows equals the full gradient (exactly)."""
    rng = np.random.default_rng(4)
    x = problem.manifold.random_point(rng=rng)
    full = problem.client_egrads(problem.all_clients, problem._stack(x))
    for i, p in enumerate(problem.n_samples):
        for b in {1, min(2, p), p}:
            subsets = np.array(list(itertools.combinations(range(p), b)))
            grads = problem.client_egrads([i] * len(subsets), np.stack([x] * len(subsets)), subsets)
            np.testing.assert_allclose(grads.mean(0), full[i], rtol=1e-10, atol=1e-10)


def test_full_batch_equals_full_gradient(problem):
    rng = np.random.default_rng(5)
    xs = problem.manifold.random_point(problem.n_clients, rng=rng)
    clients = list(problem.all_clients)
    b = min(problem.n_samples)
    if len(set(problem.n_samples)) > 1:
        clients = [int(np.argmin(problem.n_samples))]
        xs = xs[:1]
    batches = np.stack([rng.permutation(problem.n_samples[i])[:b] for i in clients])
    np.testing.assert_allclose(
        problem.client_egrads(clients, xs, batches), problem.client_egrads(clients, xs)
    )


def test_stacked_oracle_equals_loop_and_subsets(problem):
    rng = np.random.default_rng(6)
    clients = [problem.n_clients - 1, 0, 0]
    xs = problem.manifold.random_point(3, rng=rng)
    stacked = problem.client_egrads(clients, xs)
    loop = [
        -(problem.blocks[i].T @ problem.blocks[i]) @ x for i, x in zip(clients, xs, strict=True)
    ]
    np.testing.assert_allclose(stacked, loop, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        problem.client_losses(clients, xs),
        [_loss(problem.blocks[i], x) for i, x in zip(clients, xs, strict=True)],
    )
    batches = np.array([[0], [0], [0]])
    bl = problem.client_egrads(clients, xs, batches)
    for j, i in enumerate(clients):
        row = problem.blocks[i][:1]
        np.testing.assert_allclose(bl[j], -problem.n_samples[i] * row.T @ (row @ xs[j]))


def test_optimum_solution_and_smoothness(problem):
    x_star = problem.solution()
    problem.manifold.check_point(x_star)
    assert problem.loss(x_star) == pytest.approx(problem.optimum, rel=1e-12)
    assert problem.grad_norm(x_star) < 1e-10
    stacked = np.concatenate(problem.blocks)
    assert problem.smoothness == pytest.approx(np.linalg.norm(stacked, 2) ** 2, rel=1e-12)
    cbar = sum(a.T @ a for a in problem.blocks) / problem.n_clients
    top = np.sort(np.linalg.eigvalsh(cbar))[::-1][: problem.k]
    assert problem.optimum == pytest.approx(-0.5 * top.sum(), rel=1e-12)
    rng = np.random.default_rng(7)
    xs = problem.manifold.random_point(200, rng=rng)
    losses = problem.client_losses(
        np.repeat(np.arange(problem.n_clients), 200),
        np.tile(xs, (problem.n_clients, 1, 1)),
    )
    f = losses.reshape(problem.n_clients, 200).mean(0)
    assert f.min() >= problem.optimum - 1e-10
    assert problem.optimality_gap(x_star) == pytest.approx(0, abs=1e-10)


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    d=st.integers(2, 5),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_random_problems_gradient_and_invariants(sizes, d, seed, data):
    k = data.draw(st.integers(1, d))
    rng = np.random.default_rng(seed)
    problem = KPCAProblem(_blocks(rng, sizes, d), k)
    x = problem.manifold.random_point(rng=rng)
    u = rng.standard_normal(x.shape)
    h = 1e-6
    fd = (problem.loss(x + h * u) - problem.loss(x - h * u)) / (2 * h)
    g = problem.egrad(x)
    assert abs(np.sum(g * u) - fd) <= 1e-6 * max(1.0, abs(fd))
    assert problem.loss(x) >= problem.optimum - 1e-9 * max(1.0, abs(problem.optimum))
    assert problem.loss(problem.solution()) == pytest.approx(problem.optimum, rel=1e-9, abs=1e-12)


def test_synthetic_generator_shapes_and_variances():
    problem = KPCAProblem.synthetic()
    assert problem.n_clients == 30 and problem.n_samples == (15,) * 30
    assert problem.manifold.point_shape == (20, 5)
    assert isinstance(problem.manifold, Stiefel)
    big = KPCAProblem.synthetic(n_clients=4, d=50, k=2, p=2000, seed=1)
    for i, a in enumerate(big.blocks, start=1):
        assert a.shape == (2000, 50)
        assert np.var(a) == pytest.approx(2 * i / 4, rel=0.03)  # variance 2i/n
        assert abs(np.mean(a)) < 0.03
    std = KPCAProblem.synthetic(n_clients=4, d=50, k=2, p=2000, seed=1, scale="std")
    for i, a in enumerate(std.blocks, start=1):
        assert np.std(a) == pytest.approx(2 * i / 4, rel=0.03)
    again = KPCAProblem.synthetic(seed=0)
    np.testing.assert_array_equal(again.covariances, problem.covariances)
    # the data are not the first Gaussian draws of default_rng(seed): independent of x0 draws
    first = np.random.default_rng(0).standard_normal((15, 20))
    assert not np.allclose(problem.blocks[0] / math.sqrt(2 / 30), first)


def test_from_labelled_uses_label_sorted_blocks():
    features = np.arange(24.0).reshape(8, 3)
    labels = np.array([3, 1, 2, 1, 0, 3, 2, 0])
    problem = KPCAProblem.from_labelled(features, labels, 3, 1)
    order = [4, 7, 1, 3, 2, 6, 0, 5]
    np.testing.assert_array_equal(np.concatenate(problem.blocks), features[order])
    assert problem.n_samples == (3, 3, 2)


def test_digits_problem():
    importorskip("sklearn")
    problem = KPCAProblem.digits(n_clients=10, k=2)
    assert problem.manifold.point_shape == (64, 2)
    assert sum(problem.n_samples) == 1797
    assert problem.loss(problem.solution()) == pytest.approx(problem.optimum)


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: KPCAProblem([], 1), ParameterError, "non-empty"),
        (lambda: KPCAProblem([np.ones((2, 3)), np.ones((2, 4))], 1), ShapeError, "dimension d"),
        (
            lambda: KPCAProblem([np.ones((2, 3))], 4),
            ParameterError,
            r"k \(k <= d = 3\) must be an integer >= 1",
        ),
        (lambda: KPCAProblem([np.ones(3)], 1), ShapeError, "2-D"),
        (lambda: KPCAProblem([np.full((2, 3), np.nan)], 1), ParameterError, "NaN"),
        (lambda: KPCAProblem.synthetic(scale="sd"), ParameterError, "scale"),
        (lambda: KPCAProblem.synthetic(p=0), ParameterError, "p must be"),
    ],
)
def test_constructor_errors(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_oracle_errors():
    problem = KPCAProblem.synthetic(n_clients=3, d=4, k=2, p=3)
    xs = problem.manifold.random_point(2, rng=0)
    with pytest.raises(ParameterError, match="out of range"):
        problem.client_egrads([0, 3], xs)
    with pytest.raises(ShapeError, match=r"expected \(2, 4, 2\)"):
        problem.client_egrads([0, 1], xs[:, :, :1])
    with pytest.raises(ShapeError, match="batches has shape"):
        problem.client_egrads([0, 1], xs, np.zeros((3, 1), dtype=int))
    with pytest.raises(ParameterError, match="outside 0..2"):
        problem.client_egrads([0, 1], xs, np.array([[0], [3]]))
    with pytest.raises(ParameterError, match="integer"):
        problem.client_egrads([0, 1], xs, np.zeros((2, 1)))
    with pytest.raises(ParameterError, match="clients must be"):
        problem.client_losses([[0, 1]], xs)


def test_row_storage_is_the_covariance_oracle_up_to_rounding():
    rng = np.random.default_rng(3)
    blocks = [rng.normal(size=(int(p), 12)) for p in rng.integers(8, 10, size=7)]
    dense = KPCAProblem(blocks, 3)
    rows = KPCAProblem(blocks, 3, storage="rows")
    assert rows._covariances is None  # nothing of size n d^2 until asked for
    xs = dense.manifold.random_point(7, rng=1)
    for clients in (range(7), [4, 0, 6]):
        sub = xs[: len(clients)]
        np.testing.assert_allclose(
            rows.client_egrads(clients, sub), dense.client_egrads(clients, sub), atol=1e-12
        )
        np.testing.assert_allclose(
            rows.client_losses(clients, sub), dense.client_losses(clients, sub), atol=1e-12
        )
    batches = np.stack([rng.choice(8, size=(2, 4), replace=False) for _ in range(3)])[:, 0]
    np.testing.assert_allclose(
        rows.client_egrads([1, 2, 5], xs[:3], batches),
        dense.client_egrads([1, 2, 5], xs[:3], batches),
        atol=1e-12,
    )
    assert rows.optimum == pytest.approx(dense.optimum, abs=1e-12)
    np.testing.assert_allclose(rows.covariances, dense.covariances, atol=1e-12)
    assert rows.describe() == {**dense.describe(), "storage": "rows"}


def test_row_storage_refuses_bad_settings():
    rng = np.random.default_rng(0)
    with pytest.raises(ParameterError, match="storage must be one of"):
        KPCAProblem([rng.normal(size=(5, 4))], 2, storage="dense")
    with pytest.raises(ParameterError, match="similar sizes"):
        KPCAProblem([rng.normal(size=(2, 4)), rng.normal(size=(40, 4))], 2, storage="rows")

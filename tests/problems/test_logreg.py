"""Softmax regression: the oracle against finite differences and enumeration, the constants,
the minimiser, the splits and the errors."""

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from riemfl import ParameterError, ShapeError
from riemfl.problems import SoftmaxRegressionProblem
from riemfl.testing import importorskip
from riemfl.testing import strategies as rst


def _problem(seed=0, sizes=(7, 4, 9), d=3, c=4, l2=0.05):
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((m, d)) * 1.5 for m in sizes]
    ys = [rng.integers(0, c, size=m) for m in sizes]
    return SoftmaxRegressionProblem(xs, ys, c, l2=l2)


@pytest.fixture(scope="module")
def problem():
    return _problem()


@pytest.fixture(scope="module")
def digits():
    importorskip("sklearn")  # scikit-learn ships the digits
    return SoftmaxRegressionProblem.digits(6, seed=3)


def test_loss_and_gradient_match_finite_differences(problem, assert_grad_matches_fd):
    rng = np.random.default_rng(1)
    w = rng.standard_normal(problem.manifold.point_shape)
    for i in problem.all_clients:

        def f(x, i=i):
            return float(problem.client_losses([i], x[None])[0])

        g = problem.client_egrads([i], w[None])[0]
        assert_grad_matches_fd(f, g, w, rng)
    assert_grad_matches_fd(problem.loss, problem.egrad(w), w, rng)


def test_the_loss_is_the_cross_entropy_written_out(problem):
    w = np.random.default_rng(2).standard_normal(problem.manifold.point_shape)
    x, y = problem.inputs[1], problem.labels[1]
    logits = x @ w
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    expected = -np.mean(np.log(probs[np.arange(y.size), y])) + 0.5 * problem.l2 * np.sum(w * w)
    assert problem.client_losses([1], w[None])[0] == pytest.approx(expected, rel=1e-13)
    assert np.array_equal(x[:, -1], np.ones(y.size))  # the bias column


def test_minibatch_gradients_average_to_the_full_gradient(problem):
    """Unbiased: the mean over every batch of size 2 of a client is its full gradient; a batch of
    all rows in another order is the full gradient itself."""
    w = np.random.default_rng(3).standard_normal(problem.manifold.point_shape)
    i, m = 1, problem.n_samples[1]
    pairs = np.array(list(itertools.combinations(range(m), 2)))
    grads = problem.client_egrads([i] * len(pairs), np.repeat(w[None], len(pairs), 0), pairs)
    full = problem.client_egrads([i], w[None])[0]
    np.testing.assert_allclose(grads.mean(axis=0), full, atol=1e-13)
    order = np.random.default_rng(4).permutation(m)[None]
    np.testing.assert_allclose(problem.client_egrads([i], w[None], order)[0], full, atol=1e-13)


@given(seed=rst.seeds(), scale=st.sampled_from([0.1, 1.0, 10.0]))
def test_gradients_are_smoothness_lipschitz(seed, scale):
    problem = _problem(seed % 1000)
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((2, *problem.manifold.point_shape)) * scale
    for i in problem.all_clients:
        ga, gb = problem.client_egrads([i, i], np.stack([a, b]))
        assert np.linalg.norm(ga - gb) <= problem.smoothness * np.linalg.norm(a - b) * (1 + 1e-12)


def test_optimum_and_solution(problem):
    x = problem.solution
    assert problem.grad_norm(x) <= 1e-7
    assert problem.loss(x) == pytest.approx(problem.optimum, abs=1e-14)
    rng = np.random.default_rng(5)
    for _ in range(20):  # strongly convex: every other point is higher
        y = x + rng.standard_normal(x.shape) * 0.1
        assert problem.optimality_gap(y) > 0
    assert problem.describe()["n_classes"] == 4 and problem.describe()["l2"] == 0.05
    assert problem.manifold.point_shape == (4, 4)


def test_digits_split_and_fit(digits):
    assert digits.n_clients == 6 and sum(digits.n_samples) == 1797 and min(digits.n_samples) >= 1
    assert digits.manifold.point_shape == (65, 10) and digits.name == "logreg-digits"
    assert digits.accuracy(digits.solution) > 0.95
    assert digits.accuracy(np.zeros((65, 10))) == pytest.approx(
        float(np.mean(np.concatenate(digits.labels) == 0))
    )  # all logits equal: argmax is class 0
    # the same seed gives the same split; Dirichlet clients are label-skewed
    again = SoftmaxRegressionProblem.digits(6, seed=3)
    assert again.n_samples == digits.n_samples
    shares = [np.bincount(y, minlength=10) / y.size for y in digits.labels]
    assert max(s.max() for s in shares) > 0.3


def test_label_sorted_split():
    x = np.arange(40, dtype=float).reshape(20, 2)
    y = np.repeat(np.arange(4), 5)[::-1].copy()
    p = SoftmaxRegressionProblem.from_labelled(x, y, 4, partition="label-sorted")
    assert [set(lab.tolist()) for lab in p.labels] == [{0}, {1}, {2}, {3}]
    assert p.n_classes == 4
    with pytest.raises(ParameterError, match="partition must be one of"):
        SoftmaxRegressionProblem.from_labelled(x, y, 4, partition="iid")


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"n_classes": 1}, ParameterError, "n_classes must be an integer >= 2"),
        ({"l2": 0.0}, ParameterError, "l2 must be a finite number > 0"),
        ({"l2": float("nan")}, ParameterError, "l2 must be a finite number > 0"),
        ({"labels": [np.array([0, 1, 2])] * 2}, ParameterError, "one label array per client"),
        ({"labels": [np.array([0, 1])]}, ShapeError, "labels must be 3 integers"),
        ({"labels": [np.array([0.0, 1.0, 1.0])]}, ShapeError, "labels must be 3 integers"),
        ({"labels": [np.array([0, 1, 3])], "n_classes": 3}, ParameterError, "outside 0..2"),
        ({"features": []}, ParameterError, "non-empty sequence"),
    ],
)
def test_constructor_errors(kwargs, error, words):
    args = {"features": [np.ones((3, 2))], "labels": [np.array([0, 1, 2])], "n_classes": 3}
    args.update(kwargs)
    if "features" in kwargs and "labels" not in kwargs:
        args["labels"] = []
    with pytest.raises(error, match=words):
        SoftmaxRegressionProblem(args.pop("features"), args.pop("labels"), **args)


def test_feature_dimensions_must_agree_and_be_finite():
    with pytest.raises(ShapeError, match="client 1 has 3 features, client 0 has 2"):
        SoftmaxRegressionProblem([np.ones((2, 2)), np.ones((2, 3))], [[0, 1], [1, 0]], 2)
    with pytest.raises(ParameterError, match="NaN or infinite"):
        SoftmaxRegressionProblem([np.array([[np.nan, 1.0]])], [np.array([0])], 2)


def test_oracle_errors(problem):
    w = np.zeros(problem.manifold.point_shape)
    with pytest.raises(ShapeError, match="xs has shape"):
        problem.client_egrads([0], w)
    with pytest.raises(ParameterError, match="out of range"):
        problem.client_egrads([3], w[None])
    with pytest.raises(ParameterError, match="indices outside"):
        problem.client_egrads([0], w[None], np.array([[0, 7]]))


def test_the_solve_for_f_star_prints_only_when_asked(capsys):
    """A library call is silent; ``progress=True`` (the command line's) draws a bar of the
    L-BFGS solve on stderr, ending at 100/100 with the same minimiser."""
    quiet = _problem()
    assert capsys.readouterr() == ("", "")
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((m, 3)) * 1.5 for m in (7, 4, 9)]
    ys = [rng.integers(0, 4, size=m) for m in (7, 4, 9)]
    shown = SoftmaxRegressionProblem(xs, ys, 4, l2=0.05, progress=True)
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("solving for f* (L-BFGS) [")
    assert "100/100" in err.splitlines()[-1] and "grad=" in err
    assert shown.optimum == quiet.optimum
    np.testing.assert_array_equal(shown.solution, quiet.solution)

"""The federated Karcher mean on SPD(n): oracle, optimum, errors, federated runs."""

import numpy as np
import pytest

from riemfl import CutLocusError, NotOnManifoldError, ParameterError, ShapeError
from riemfl.federated import RFedAvg, RFedProj, RFedProx, RFedSVRG, run_sync
from riemfl.linalg import sym
from riemfl.manifolds import SPD
from riemfl.manifolds.spd import expm, logm
from riemfl.problems import SPDMeanProblem, sample_batches

METRICS = ("affine-invariant", "log-euclidean")


def _uneven(metric):
    rng = np.random.default_rng(4)
    M = SPD(3)
    return SPDMeanProblem([M.random_point(m, rng=rng) for m in (3, 1, 5)], metric)


@pytest.mark.parametrize("metric", METRICS)
def test_loss_against_the_distance_and_gradient_against_finite_differences(
    metric, assert_grad_matches_fd
):
    problem = _uneven(metric)
    M = SPD(3, metric)
    rng = np.random.default_rng(0)
    x = M.random_point(rng=rng)
    blocks = np.split(problem.matrices, np.cumsum(problem.n_samples)[:-1])
    loop = [np.mean([0.5 * float(M.dist(x, a)) ** 2 for a in b]) for b in blocks]
    assert np.allclose(problem.client_losses(range(3), np.stack([x] * 3)), loop, rtol=1e-10)
    assert problem.loss(x) == pytest.approx(np.mean(loop), rel=1e-10)
    for i in range(3):
        xs = x[None]
        g = problem.client_egrads([i], xs)
        assert np.allclose(g, np.swapaxes(g, -1, -2), atol=1e-13)  # symmetric
        # along symmetric directions (the oracle symmetrises its argument)
        f = lambda y, i=i: float(problem.client_losses([i], y)[0])  # noqa: E731
        for _ in range(3):
            u = sym(rng.standard_normal(xs.shape))
            exact = float(np.sum(g * u))
            approx = (f(xs + 1e-6 * u) - f(xs - 1e-6 * u)) / 2e-6
            assert exact == pytest.approx(approx, rel=1e-6, abs=1e-7)


@pytest.mark.parametrize("metric", METRICS)
def test_the_optimum_is_the_weighted_karcher_mean(metric):
    problem = SPDMeanProblem.synthetic(n_clients=4, per_client=5, metric=metric, seed=2)
    M = problem.manifold
    x_star = problem.solution()
    assert problem.grad_norm(x_star) < 1e-10
    # the first-order condition: sum_ij w_ij Log_X(A_ij) = 0
    logs = M.log(np.broadcast_to(x_star, problem.matrices.shape), problem.matrices)
    assert np.abs(np.sum(problem.weights[:, None, None] * logs, axis=0)).max() < 1e-10
    rng = np.random.default_rng(1)
    for _ in range(5):
        y = M.exp(x_star, 0.05 * M.random_tangent(x_star, rng=rng))
        assert problem.loss(y) > problem.optimum


def test_log_euclidean_optimum_is_closed_form():
    problem = SPDMeanProblem.synthetic(n_clients=3, per_client=2, metric="log-euclidean")
    expected = expm(np.mean(logm(problem.matrices), axis=0))  # equal m_i: plain mean
    assert np.allclose(problem.solution(), expected, atol=1e-12)


def test_subsets_and_minibatches():
    problem = _uneven("affine-invariant")
    rng = np.random.default_rng(3)
    xs = SPD(3).random_point(2, rng=rng)
    full = problem.client_egrads(range(3), np.stack([xs[0]] * 3))
    assert np.allclose(problem.client_egrads([2, 0], xs[[0, 0]]), full[[2, 0]], atol=1e-14)
    whole = np.array([[0, 1, 2, 3, 4]])
    assert np.allclose(problem.client_egrads([2], xs[:1], whole), full[2:], atol=1e-14)
    batches = [sample_batches(rng, problem.n_samples, [2], 2) for _ in range(2000)]
    mean = np.mean([problem.client_egrads([2], xs[:1], b) for b in batches], axis=0)
    assert np.allclose(mean, full[2:], atol=0.05 * np.abs(full[2]).max())


def test_the_generator_is_deterministic_by_seed():
    a = SPDMeanProblem.synthetic(n_clients=3, per_client=4, seed=5)
    b = SPDMeanProblem.synthetic(n_clients=3, per_client=4, seed=5)
    c = SPDMeanProblem.synthetic(n_clients=3, per_client=4, seed=6)
    assert np.array_equal(a.matrices, b.matrices) and a.optimum == b.optimum
    assert not np.allclose(a.matrices, c.matrices)
    SPD(3).check_point(a.matrices)
    # no spread and no heterogeneity: every matrix is I, the optimum 0
    flat = SPDMeanProblem.synthetic(n_clients=3, n=2, per_client=4, heterogeneity=0.0, spread=0.0)
    assert np.allclose(flat.solution(), np.eye(2)) and flat.optimum == pytest.approx(0, abs=1e-20)


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: SPDMeanProblem([np.eye(2)[None]], "bures-wasserstein"), ParameterError, "metric"),
        (lambda: SPDMeanProblem([]), ParameterError, "non-empty"),
        (lambda: SPDMeanProblem([np.eye(2)]), ShapeError, "m_i, n, n"),
        (lambda: SPDMeanProblem([np.eye(2)[None], np.eye(3)[None]]), ShapeError, "client 1"),
        (lambda: SPDMeanProblem([-np.eye(2)[None]]), NotOnManifoldError, "positive definite"),
        (lambda: SPDMeanProblem([np.full((1, 2, 2), np.nan)]), ParameterError, "NaN"),
        (lambda: SPDMeanProblem.synthetic(n_clients=0), ParameterError, "n_clients"),
        (lambda: SPDMeanProblem.synthetic(heterogeneity=-1.0), ParameterError, "heterogeneity"),
        (lambda: SPDMeanProblem.synthetic(seed="x"), ParameterError, "seed"),
    ],
)
def test_errors(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_oracle_errors():
    problem = _uneven("affine-invariant")
    with pytest.raises(NotOnManifoldError, match="positive definite"):
        problem.client_egrads([0], -np.eye(3)[None])
    with pytest.raises(ShapeError, match="xs has shape"):
        problem.client_losses([0], np.eye(3))
    with pytest.raises(ParameterError, match="outside"):
        problem.client_egrads([1], np.eye(3)[None], np.array([[1]]))


#: (metric, algorithm, rounds, gap f(x_R) - f* reached from the default start, synthetic
#: defaults: 10 clients of 20 matrices in SPD(3), heterogeneity 1). SPD's project exists inside
#: the open cone, so RFedProj runs. With the affine-invariant metric the approximate operators'
#: inverse retraction is defined only for Y > X/2 (Loewner order), which the clients' points
#: leave at eta = 0.3: there RFedAvg/RFedProx/RFedSVRG run with exact operators, and with the
#: approximate ones at eta = 0.1
RUNS = [
    ("affine-invariant", RFedProj(0.3, 5), 40, 1e-12),
    ("affine-invariant", RFedSVRG(0.3, 5, "exact"), 40, 1e-12),
    ("affine-invariant", RFedAvg(0.3, 5, "exact"), 40, 1e-6),
    ("affine-invariant", RFedProx(0.3, 5, 1.0, "exact"), 40, 1e-6),
    ("affine-invariant", RFedSVRG(0.1, 5), 60, 1e-12),
    ("affine-invariant", RFedAvg(0.1, 5), 60, 1e-4),
    ("affine-invariant", RFedProx(0.1, 5, 1.0), 60, 1e-4),
    ("log-euclidean", RFedProj(0.3, 5), 40, 1e-12),
    ("log-euclidean", RFedSVRG(0.3, 5), 40, 1e-12),
    ("log-euclidean", RFedAvg(0.3, 5), 40, 1e-12),
    ("log-euclidean", RFedProx(0.3, 5, 1.0), 40, 1e-10),
]


@pytest.mark.parametrize("metric, algorithm, rounds, gap", RUNS)
def test_every_synchronous_algorithm_reaches_the_karcher_mean(metric, algorithm, rounds, gap):
    problem = SPDMeanProblem.synthetic(metric=metric)
    history = run_sync(problem, algorithm, rounds)
    assert history.optimality_gap[0] > 0.1
    assert -1e-12 <= history.optimality_gap[-1] <= gap
    problem.manifold.check_point(history.final_point)


def test_approximate_operators_refuse_points_outside_the_inverse_retraction_domain():
    problem = SPDMeanProblem.synthetic()
    with pytest.raises(CutLocusError, match="Y > X/2"):
        run_sync(problem, RFedAvg(0.3, 5), 5)

"""Chordal L2 rotation averaging on SO(3): oracle, closed-form optimum, errors, federated runs."""

import numpy as np
import pytest

from riemfl import NotOnManifoldError, ParameterError, ShapeError
from riemfl.errors import DataError
from riemfl.federated import RFedAvg, RFedProj, RFedProx, RFedSVRG, run_sync
from riemfl.linalg import special_polar
from riemfl.problems import RotationAveragingProblem, sample_batches


@pytest.fixture
def small():
    return RotationAveragingProblem.synthetic(n_clients=4, per_client=6, seed=3)


def test_loss_against_loop_and_gradient_against_finite_differences(small, assert_grad_matches_fd):
    rng = np.random.default_rng(0)
    x = small.manifold.random_point(rng=rng)
    loop = np.mean([np.mean([0.5 * np.sum((x - r) ** 2) for r in block]) for block in small.blocks])
    assert small.loss(x) == pytest.approx(loop, rel=1e-13)
    for i in range(small.n_clients):
        xs = rng.standard_normal((1, 3, 3))  # the oracle is the ambient one: any 3x3 matrix
        assert_grad_matches_fd(
            lambda y, i=i: float(np.mean([0.5 * np.sum((y[0] - r) ** 2) for r in small.blocks[i]])),
            small.client_egrads([i], xs),
            xs,
            rng,
        )


def test_the_optimum_is_the_special_polar_factor_of_the_mean(small):
    x_star = small.solution()
    assert np.allclose(x_star, special_polar(np.mean([b.mean(0) for b in small.blocks], 0)))
    assert small.grad_norm(x_star) < 1e-12
    rng = np.random.default_rng(1)
    for _ in range(5):  # nearby rotations are worse
        y = small.manifold.exp(x_star, small.manifold.random_tangent(x_star, rng=rng) * 0.1)
        assert small.loss(y) > small.optimum
    assert small.loss(small.truth) >= small.optimum


def test_minibatches_are_unbiased_and_full_batch_is_full(small):
    x = np.broadcast_to(small.manifold.random_point(rng=np.random.default_rng(2)), (2, 3, 3))
    full = small.client_egrads([1, 3], x)
    whole = np.tile(np.arange(6), (2, 1))
    assert np.allclose(small.client_egrads([1, 3], x, whole), full, atol=1e-15)
    rng = np.random.default_rng(0)
    draws = [
        small.client_egrads([1, 3], x, sample_batches(rng, small.n_samples, [1, 3], 2))
        for _ in range(3000)
    ]
    assert np.allclose(np.mean(draws, 0), full, atol=0.02)


def test_the_generator_is_deterministic_by_seed():
    a = RotationAveragingProblem.synthetic(n_clients=3, per_client=4, seed=5)
    b = RotationAveragingProblem.synthetic(n_clients=3, per_client=4, seed=5)
    c = RotationAveragingProblem.synthetic(n_clients=3, per_client=4, seed=6)
    assert all(np.array_equal(u, v) for u, v in zip(a.blocks, b.blocks, strict=True))
    assert not np.allclose(a.blocks[0], c.blocks[0])
    assert a.optimum == b.optimum
    a.manifold.check_point(np.concatenate(a.blocks))
    # heterogeneity moves the client means apart; no noise and no bias: every R_ij is R*
    exact = RotationAveragingProblem.synthetic(
        n_clients=3, per_client=4, noise=0.0, heterogeneity=0.0, seed=1
    )
    assert np.allclose(exact.solution(), exact.truth, atol=1e-12)
    assert exact.optimum == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: RotationAveragingProblem([]), ParameterError, "non-empty"),
        (lambda: RotationAveragingProblem([np.eye(3)]), ShapeError, "m_i, n, n"),
        (
            lambda: RotationAveragingProblem([np.eye(3)[None], np.eye(2)[None]]),
            ShapeError,
            "same size",
        ),
        (
            lambda: RotationAveragingProblem([2 * np.eye(3)[None]]),
            NotOnManifoldError,
            "not on the manifold",
        ),
        (
            lambda: RotationAveragingProblem([-np.eye(3)[None]]),
            NotOnManifoldError,
            "not on the manifold",
        ),
        (lambda: RotationAveragingProblem([[[["a"]]]]), ParameterError, "real numbers"),
        (lambda: RotationAveragingProblem.synthetic(n_clients=0), ParameterError, "n_clients"),
        (lambda: RotationAveragingProblem.synthetic(noise=-1.0), ParameterError, "noise"),
        (lambda: RotationAveragingProblem.synthetic(seed="x"), ParameterError, "seed"),
    ],
)
def test_errors(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_a_mean_without_a_unique_rotation_is_refused():
    # R and R rotated by pi about z average to a rank-1 matrix: no unique nearest rotation
    flip = np.diag([-1.0, -1.0, 1.0])
    with pytest.raises(DataError, match="not unique"):
        RotationAveragingProblem([np.stack([np.eye(3), flip])])


def test_oracle_errors(small):
    with pytest.raises(ShapeError, match="xs has shape"):
        small.client_egrads([0], np.eye(3))
    with pytest.raises(ParameterError, match="out of range"):
        small.client_losses([7], np.eye(3)[None])


#: every synchronous algorithm (SO(3) has project, exp, log and parallel transport) with the
#: gap f(x_R) - f* it reaches in 40 rounds of 5 local steps (eta = 0.3) from the default start;
#: RFedAvg and RFedProx keep a client-drift bias, RFedProj and RFedSVRG correct it
ALGORITHMS = [
    (RFedProj(0.3, 5), 1e-12),
    (RFedSVRG(0.3, 5), 1e-12),
    (RFedSVRG(0.3, 5, "exact"), 1e-12),
    (RFedAvg(0.3, 5), 1e-4),
    (RFedAvg(0.3, 5, "exact"), 1e-5),
    (RFedProx(0.3, 5, 1.0), 1e-5),
]


@pytest.mark.parametrize("algorithm, gap", ALGORITHMS, ids=lambda a: getattr(a, "name", str(a)))
def test_every_synchronous_algorithm_reaches_the_optimum(algorithm, gap):
    problem = RotationAveragingProblem.synthetic(seed=0)
    history = run_sync(problem, algorithm, 40)
    assert history.optimality_gap[0] > 0.1
    assert -1e-12 <= history.optimality_gap[-1] <= gap
    problem.manifold.check_point(history.final_point)

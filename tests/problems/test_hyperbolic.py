"""Nickel-Kiela embedding of a tree on (Poincare ball)^N: oracle, generator, errors, runs."""

import numpy as np
import pytest

from riemfl import NotOnManifoldError, ParameterError, ShapeError
from riemfl.federated import RFedAvg, RFedProj, RFedProx, RFedSVRG, run_sync
from riemfl.manifolds import PoincareBall
from riemfl.problems import HyperbolicEmbeddingProblem, balanced_tree, sample_batches


@pytest.fixture(scope="module")
def small():
    return HyperbolicEmbeddingProblem.tree(n_clients=3, reference_iterations=0, mu=0.05)


def _loop_loss(problem, x, i):
    """f_i by a plain loop over client i's relations with PoincareBall.dist."""
    ball = PoincareBall(problem.dim, problem.c)
    nodes = x.reshape(problem.n_nodes, problem.dim)
    terms = []
    for (u, v), neg in zip(
        problem.relations[problem.owners == i], problem.negatives[problem.owners == i], strict=True
    ):
        d = [float(ball.dist(nodes[u], nodes[w])) for w in [v, *neg]]
        terms.append(d[0] + np.log(np.sum(np.exp(-np.array(d)))))
    origin = np.zeros(problem.dim)
    penalty = sum(0.5 * float(ball.dist(origin, p)) ** 2 for p in nodes)
    return np.mean(terms) + problem.mu * penalty


def test_loss_against_a_loop_and_gradient_against_finite_differences(small, assert_grad_matches_fd):
    rng = np.random.default_rng(0)
    x = 0.8 * small.manifold.random_point(rng=rng)
    for i in range(small.n_clients):
        assert small.client_losses([i], x[None])[0] == pytest.approx(
            _loop_loss(small, x, i), rel=1e-12
        )
        assert_grad_matches_fd(
            lambda y, i=i: float(small.client_losses([i], y)[0]),
            small.client_egrads([i], x[None]),
            x[None],
            rng,
            rtol=1e-6,
        )


def test_the_lorentz_model_is_the_same_loss_through_the_isometry(assert_grad_matches_fd):
    ball = HyperbolicEmbeddingProblem.tree(n_clients=3, reference_iterations=0)
    hyperboloid = HyperbolicEmbeddingProblem.tree(
        n_clients=3, reference_iterations=0, model="lorentz"
    )
    assert hyperboloid.manifold.point_shape == (15 * 3,)
    rng = np.random.default_rng(2)
    y = hyperboloid.manifold.random_point(rng=rng)
    x = ball.ball.from_lorentz(y.reshape(15, 3)).reshape(-1)
    assert np.allclose(
        hyperboloid.client_losses(range(3), np.stack([y] * 3)),
        ball.client_losses(range(3), np.stack([x] * 3)),
        rtol=1e-12,
    )
    for i in range(3):
        assert_grad_matches_fd(
            lambda z, i=i: float(hyperboloid.client_losses([i], z)[0]),
            hyperboloid.client_egrads([i], y[None]),
            y[None],
            rng,
        )
    # the Riemannian gradients correspond through the isometry's differential
    gy = hyperboloid.rgrad(y).reshape(15, 3)
    gx = ball.rgrad(x).reshape(15, 2)
    assert np.allclose(ball.ball.from_lorentz_tangent(y.reshape(15, 3), gy), gx, atol=1e-10)
    with pytest.raises(NotOnManifoldError, match="upper sheet"):
        hyperboloid.client_losses([0], -y[None])
    with pytest.raises(ParameterError, match="model"):
        HyperbolicEmbeddingProblem.tree(model="klein")


def test_subsets_and_minibatches(small):
    rng = np.random.default_rng(1)
    xs = 0.8 * small.manifold.random_point(2, rng=rng)
    full = small.client_egrads([2, 0], xs)
    assert np.allclose(small.client_egrads([0], xs[1:]), full[1:], atol=1e-14)
    m = small.n_samples[2]
    assert np.allclose(small.client_egrads([2], xs[:1], np.arange(m)[None]), full[:1], atol=1e-14)
    draws = [
        small.client_egrads([2], xs[:1], sample_batches(rng, small.n_samples, [2], 3))
        for _ in range(3000)
    ]
    assert np.allclose(np.mean(draws, 0), full[:1], atol=0.03 * np.abs(full).max())


def test_the_tree_and_its_relations():
    edges = balanced_tree(2, 3)
    assert edges.shape == (14, 2) and edges[-1].tolist() == [6, 14]
    p = HyperbolicEmbeddingProblem.tree(n_clients=5, n_negatives=4, reference_iterations=0)
    assert p.n_nodes == 15 and len(p.relations) == 28 and sum(p.n_samples) == 28
    assert p.manifold.point_shape == (30,)
    # negatives are neither u nor one of u's neighbours, distinct per relation
    adjacent = {(int(a), int(b)) for a, b in edges} | {(int(b), int(a)) for a, b in edges}
    for (u, _), neg in zip(p.relations, p.negatives, strict=True):
        assert len(set(neg.tolist())) == 4
        assert all(w != u and (u, w) not in adjacent for w in neg.tolist())


def test_the_generator_is_deterministic_by_seed():
    a = HyperbolicEmbeddingProblem.tree(seed=5, reference_iterations=0)
    b = HyperbolicEmbeddingProblem.tree(seed=5, reference_iterations=0)
    c = HyperbolicEmbeddingProblem.tree(seed=6, reference_iterations=0)
    assert np.array_equal(a.negatives, b.negatives) and np.array_equal(a.owners, b.owners)
    assert np.array_equal(a.relations, b.relations)
    assert not np.array_equal(a.negatives, c.negatives)
    # the subtree split: each client's relations come from few of the root's subtrees
    s = HyperbolicEmbeddingProblem.tree(n_clients=2, split="subtree", reference_iterations=0)
    first = s.relations[s.owners == 0]
    assert not np.isin(first.max(axis=1), [2, 5, 6, 11, 12, 13, 14]).any()


def test_the_reference_run():
    p = HyperbolicEmbeddingProblem.tree()
    assert p.optimum is None and np.isnan(p.optimality_gap(p.reference_point))
    start = p.loss(np.random.default_rng(0).uniform(-1e-3, 1e-3, p.n_nodes * p.dim))
    assert p.reference_loss < start - 0.9
    assert p.reference_gap(p.reference_point) == 0.0
    assert "gradient descent" in p.reference_method
    assert p.describe()["reference_loss"] == p.reference_loss


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: HyperbolicEmbeddingProblem.tree(split="x"), ParameterError, "split"),
        (lambda: HyperbolicEmbeddingProblem.tree(n_clients=29), ParameterError, "n_clients"),
        (lambda: HyperbolicEmbeddingProblem.tree(n_negatives=12), ParameterError, "n_negatives"),
        (lambda: HyperbolicEmbeddingProblem.tree(mu=-1.0), ParameterError, "mu"),
        (lambda: HyperbolicEmbeddingProblem.tree(c=0.0), ParameterError, "c must"),
        (lambda: HyperbolicEmbeddingProblem.tree(seed="x"), ParameterError, "seed"),
        (lambda: balanced_tree(0, 2), ParameterError, "branching"),
        (
            lambda: HyperbolicEmbeddingProblem(3, [[0, 1]], [[2]], [1]),
            ParameterError,
            "hold no relation",
        ),
        (lambda: HyperbolicEmbeddingProblem(3, [[0, 3]], [[2]], [0]), ParameterError, "0..2"),
        (lambda: HyperbolicEmbeddingProblem(3, [[0, 1]], [[2], [1]], [0]), ShapeError, "one row"),
        (lambda: HyperbolicEmbeddingProblem(3, [[0.0, 1.0]], [[2]], [0]), ParameterError, "int"),
    ],
)
def test_errors(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_oracle_errors(small):
    with pytest.raises(NotOnManifoldError, match="open ball"):
        small.client_egrads([0], np.ones((1, 30)))
    with pytest.raises(ShapeError, match="xs has shape"):
        small.client_losses([0], np.zeros(30))


#: every synchronous algorithm (the ball has project inside the open ball, the hyperboloid an
#: exact project; both exp, log and parallel transport, and a retraction that is exp, so the
#: approximate operators are the exact ones) runs 100
#: rounds of 5 local steps (eta = 0.3) on the default tree (b = 2, h = 3, 4 clients, K = 5,
#: mu = 0.01) from the default start; the loss reaches the centralised reference within 0.02
#: (observed: 0.005 to 0.008, on both models)
ALGORITHMS = [
    RFedProj(0.3, 5),
    RFedAvg(0.3, 5),
    RFedProx(0.3, 5, 0.1),
    RFedSVRG(0.3, 5),
    RFedSVRG(0.3, 5, "exact"),
]


@pytest.mark.slow  # 10 federated runs of 100 rounds
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("model", ["poincare", "lorentz"])
def test_every_synchronous_algorithm_reaches_the_reference(model, algorithm):
    problem = HyperbolicEmbeddingProblem.tree(model=model)
    history = run_sync(problem, algorithm, 100)
    assert history.loss[0] - problem.reference_loss > 0.5
    assert abs(history.loss[-1] - problem.reference_loss) <= 0.02
    problem.manifold.check_point(history.final_point)

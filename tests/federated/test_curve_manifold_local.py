"""AsyncBezier's client on a curved base: the control-point gradient, the client, its errors."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import riemfl
from riemfl.errors import MissingDependencyError, ParameterError
from riemfl.federated.async_engine import run_async
from riemfl.federated.async_manifold import AsyncBezier
from riemfl.federated.curve_local import BezierProblemTrainer
from riemfl.federated.curve_manifold_local import (
    ManifoldBezierTrainer,
    batch_geometry,
    covector,
    curve_point_gradient,
)
from riemfl.federated.local import ProblemTrainer
from riemfl.federated.run_core import RunOptions
from riemfl.manifolds.bezier_eval import geodesic_de_casteljau
from riemfl.testing import importorskip

importorskip("torch")


def _unit(m, x, rng):
    u = m.random_tangent(x, rng=rng)
    return u / float(m.norm(x, u))


def _small_ball_point(ball, rng):
    return 0.3 * rng.uniform(-1.0, 1.0, size=ball.point_shape)


def _sphere_and_ball():
    sphere, ball = riemfl.Sphere(3), riemfl.PoincareBall(2)
    m = riemfl.Product(sphere, ball)
    return m, lambda rng: m.pack(sphere.random_point(rng=rng), _small_ball_point(ball, rng))


def _nodes():
    ball = riemfl.PoincareBall(2)
    m = riemfl.Product(*[ball] * 3)
    return m, lambda rng: _small_ball_point(riemfl.Euclidean(6), rng)


def _plain(m):
    return m, lambda rng: m.random_point(rng=rng)


#: name -> (manifold, a start point from a generator)
MANIFOLDS = {
    "sphere": lambda: _plain(riemfl.Sphere(4)),
    "stiefel": lambda: _plain(riemfl.Stiefel(6, 2)),
    "stiefel-canonical": lambda: _plain(riemfl.Stiefel(5, 2, metric="canonical")),
    "lorentz": lambda: _plain(riemfl.Lorentz(3)),
    "poincare-nodes": _nodes,
    "mixed-product": _sphere_and_ball,
    "euclidean": lambda: _plain(riemfl.Euclidean(3, 2)),
}


def _control_points(name, degree, seed):
    """A curve through a random point, its other control points at geodesic distances < 1."""
    m, point = MANIFOLDS[name]()
    rng = np.random.default_rng(seed)
    a = point(rng)
    points = [a] + [m.exp(a, (0.3 + 0.2 * k) * _unit(m, a, rng)) for k in range(degree)]
    return m, np.stack(points), rng


@pytest.mark.parametrize("name", list(MANIFOLDS))
@pytest.mark.parametrize("degree", [2, 3])
def test_control_point_gradient_matches_finite_differences(name, degree):
    """<grad_{P_k} L, xi> is the derivative of L(c(.; s)) along the retraction curve
    t -> R_{P_k}(t xi), for every control point and a random tangent xi."""
    m, phi, rng = _control_points(name, degree, seed=3)
    target = rng.normal(size=phi.shape[1:])

    def loss(x):  # a smooth function of the ambient coordinates
        return float(np.sum(target * x) + 0.5 * np.sum(x * x) + np.sum(x**3) / 3)

    s = 0.37
    x, grads = curve_point_gradient(m, phi, s, lambda x: target + x + x**2)
    np.testing.assert_allclose(x, geodesic_de_casteljau(m, phi, np.float64(s)), atol=1e-12)
    h = 1e-5
    for k in range(degree + 1):
        m.check_tangent(phi[k], grads[k])
        xi = _unit(m, phi[k], rng)

        def along(t, k=k, xi=xi):
            moved = phi.copy()
            moved[k] = m.retract(phi[k], t * xi)
            return loss(geodesic_de_casteljau(m, moved, np.float64(s)))

        fd = (along(h) - along(-h)) / (2 * h)
        assert float(m.inner(phi[k], grads[k], xi)) == pytest.approx(fd, rel=1e-6, abs=1e-8)


def test_covector_pairs_like_the_metric():
    """<G, w>_F = <r, w>_x for tangent w, on conformal, Minkowski and canonical metrics."""
    for m in (riemfl.PoincareBall(3), riemfl.Lorentz(3), riemfl.Stiefel(5, 2, metric="canonical")):
        rng = np.random.default_rng(0)
        x = m.random_point(rng=rng)
        r, w = m.random_tangent(x, rng=rng), m.random_tangent(x, rng=rng)
        g = covector(m, x, r)
        assert float(np.sum(g * w)) == pytest.approx(float(m.inner(x, r, w)), rel=1e-12)


def test_prox_gradient_matches_finite_differences():
    """The prox term mu/2 d^2(c(s), anchor) through the covector of -mu Log_x(anchor)."""
    m, phi, rng = _control_points("sphere", 2, seed=5)
    anchor = m.exp(phi[0], 0.4 * _unit(m, phi[0], rng))

    def prox(x):
        return 0.5 * float(m.dist(x, anchor)) ** 2

    s = 0.6
    _, grads = curve_point_gradient(
        m, phi, s, lambda x: covector(m, x, -np.asarray(m.log(x, anchor)))
    )
    xi = _unit(m, phi[1], rng)
    h = 1e-5

    def along(t):
        moved = phi.copy()
        moved[1] = m.retract(phi[1], t * xi)
        return prox(geodesic_de_casteljau(m, moved, np.float64(s)))

    fd = (along(h) - along(-h)) / (2 * h)
    assert float(m.inner(phi[1], grads[1], xi)) == pytest.approx(fd, rel=1e-6)


def test_a_product_of_one_factor_is_evaluated_as_a_batch():
    ball = riemfl.PoincareBall(2)
    assert batch_geometry(riemfl.Product(ball, ball, ball)) == (ball, (3, 2))
    mixed = riemfl.Product(ball, riemfl.PoincareBall(2))  # equal, but not the same object
    assert batch_geometry(mixed) == (mixed, (4,))


@pytest.mark.parametrize("freeze_end", [True, False])
def test_control_points_stay_on_the_manifold(stiefel_problem, freeze_end):
    m = stiefel_problem.manifold
    start = m.random_point(rng=np.random.default_rng(0))
    trainer = ManifoldBezierTrainer(
        stiefel_problem, 0.02, 2, 3, mu=0.5, batch_size=4, freeze_end=freeze_end
    )
    phi = trainer.train(1, start, np.random.default_rng(1))
    assert phi.shape == (3, 7, 3)
    m.check_point(phi)
    np.testing.assert_array_equal(phi[0], start)  # the curve starts at the global model
    assert float(m.dist(phi[1], start)) > 0.0
    assert trainer.num_batches(1) == 5 and trainer.n_samples(1) == 8
    warm = ManifoldBezierTrainer(stiefel_problem, 0.02, 2, 0, mu=0.5, batch_size=4)
    end = warm.train(1, start, np.random.default_rng(1))[2]
    if freeze_end:
        np.testing.assert_allclose(phi[2], end, atol=1e-14)
    else:
        assert float(m.dist(phi[2], end)) > 0.0


def test_warm_up_is_riemannian_sgd(stiefel_problem):
    """Without curve steps and prox the end point is ProblemTrainer's local model."""
    start = stiefel_problem.manifold.random_point(rng=np.random.default_rng(2))
    phi = ManifoldBezierTrainer(stiefel_problem, 0.03, 4, 0, batch_size=3).train(
        0, start, np.random.default_rng(4)
    )
    local = ProblemTrainer(stiefel_problem, 0.03, 4, batch_size=3).train(
        0, start, np.random.default_rng(4)
    )
    np.testing.assert_allclose(phi[2], local, atol=1e-13)
    np.testing.assert_array_equal(phi[:2], [start, start])


@pytest.mark.parametrize("freeze_end", [True, False])
def test_on_euclidean_space_it_is_bezier_problem_trainer(euclidean_problem, freeze_end):
    """Same draws, same steps: the geodesic curve is the Bernstein one, the Riemannian
    gradient B_k(s) (grad l_i + mu (x - start)), the retraction x + u."""
    kw = {"mu": 0.3, "batch_size": 2, "freeze_end": freeze_end}
    start = np.random.default_rng(0).normal(size=(5, 2))
    ours = ManifoldBezierTrainer(euclidean_problem, 0.05, 3, 4, **kw)
    theirs = BezierProblemTrainer(euclidean_problem, 0.05, 3, 4, **kw)
    a = ours.train(2, start, np.random.default_rng(9))
    b = theirs.train(2, start, np.random.default_rng(9))
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)
    assert ours.num_batches(2) == theirs.num_batches(2)


def test_degree_one_with_a_frozen_end_trains_nothing_but_draws_alike(euclidean_problem):
    start = np.zeros((5, 2))
    ours = ManifoldBezierTrainer(euclidean_problem, 0.05, 2, 2, degree=1, batch_size=2)
    theirs = BezierProblemTrainer(euclidean_problem, 0.05, 2, 2, degree=1, batch_size=2)
    rng_a, rng_b = np.random.default_rng(1), np.random.default_rng(1)
    np.testing.assert_allclose(ours.train(0, start, rng_a), theirs.train(0, start, rng_b))
    assert rng_a.uniform() == rng_b.uniform()


def test_errors(stiefel_problem, monkeypatch):
    no_exp = type("P", (), {"manifold": riemfl.FixedRank(5, 4, 2), "name": "p"})()
    with pytest.raises(ParameterError, match=r"FixedRank\(5, 4, 2\)\.exp"):
        ManifoldBezierTrainer(no_exp, 0.1)
    with pytest.raises(ParameterError, match="mu"):
        ManifoldBezierTrainer(stiefel_problem, 0.1, mu=-1.0)
    with pytest.raises(ParameterError, match="step_size"):
        ManifoldBezierTrainer(stiefel_problem, 0.0)
    with pytest.raises(ParameterError, match="curve_steps"):
        ManifoldBezierTrainer(stiefel_problem, 0.1, curve_steps=-1)
    stiefel_problem.n_samples = None
    with pytest.raises(ParameterError, match="batch_size"):
        ManifoldBezierTrainer(stiefel_problem, 0.1, batch_size=2)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    with pytest.raises(MissingDependencyError, match="riemfl\\[torch\\]"):
        ManifoldBezierTrainer(stiefel_problem, 0.1)


def test_asyncbezier_runs_on_stiefel_with_the_curve_client(stiefel_problem):
    """The async engine and AsyncBezier use the client unchanged: curves uploaded, models on
    the manifold, the loss down from the start."""
    m = stiefel_problem.manifold
    trainer = ManifoldBezierTrainer(stiefel_problem, 0.01, 2, 2)
    x0 = m.random_point(rng=np.random.default_rng(3))
    history = run_async(
        trainer,
        AsyncBezier(m, 3.0),
        12,
        options=RunOptions(seed=0, record_every=12),
        x0=x0,
        weights="uniform",
    )
    assert history.metrics["updates"][-1] == 12 and history.metrics["dropped"][-1] == 0
    assert history.metrics["loss"][-1] < history.metrics["loss"][0]

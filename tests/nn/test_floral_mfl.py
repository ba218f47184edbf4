"""MFL with the exponential-weights router (riemfl.nn.floral.mfl), the theory's quantities and
bounds (riemfl.nn.floral.mfl_theory), and the router's exponential-weights modes in the torch
trainer: each checked against a computation by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from riemfl.errors import DataError, ParameterError, ShapeError
from riemfl.nn.floral import mfl_theory as th
from riemfl.nn.floral.mfl import (
    LeastSquaresClients,
    exp_weights,
    least_squares_clients,
    match_clusters,
    router_regret,
    run_mfl,
)
from riemfl.nn.floral.synthetic import synthetic_linear, synthetic_mlp


def tiny_clients(ridge=0.0, seed=0, n_rows=(3, 2, 4, 3)):
    """Four clients (two per cluster, k mod 2), 1 output, 2 inputs (with the bias column)."""
    rng = np.random.default_rng(seed)
    k, n_max = len(n_rows), max(n_rows)
    x = np.zeros((k, n_max, 2))
    y = np.zeros((k, n_max, 1))
    for i, n in enumerate(n_rows):
        x[i, :n, 0] = rng.standard_normal(n)
        x[i, :n, 1] = 1.0
        y[i, :n, 0] = (1.0 if i % 2 else -1.0) * x[i, :n, 0] + 0.3 * rng.standard_normal(n)
    return LeastSquaresClients(x, y, np.array(n_rows), np.arange(k) % 2, 2, ridge)


def rows(clients, i):
    n = clients.n_samples[i]
    return clients.features[i, :n], clients.targets[i, :n]


def loss(clients, i, w):
    x, y = rows(clients, i)
    return 0.5 * np.sum((x @ w.T - y) ** 2) / len(x) + 0.5 * clients.ridge * np.sum(w**2)


def grad(clients, i, w):
    x, y = rows(clients, i)
    return (x @ w.T - y).T @ x / len(x) + clients.ridge * w


# ------------------------------------------------------------------------------ the router
def test_exp_weights_by_hand_for_two_clusters():
    pi = exp_weights(np.array([1.0, 3.0]), 0.5)
    want = np.exp([-0.5, -1.5]) / np.exp([-0.5, -1.5]).sum()
    np.testing.assert_allclose(pi, want)
    # cumulative: the prior's log-weights are kept
    prior = np.log(np.array([0.2, 0.8]))
    got = exp_weights(np.array([1.0, 3.0]), 0.5, prior)
    want = np.array([0.2 * math.exp(-0.5), 0.8 * math.exp(-1.5)])
    np.testing.assert_allclose(got, want / want.sum())
    np.testing.assert_allclose(exp_weights(np.array([1.0, 3.0]), 0.0), [0.5, 0.5])
    # no overflow for huge losses
    assert np.isfinite(exp_weights(np.array([1e6, 2e6]), 1.0)).all()


def test_torch_router_exp_weights_modes_by_hand():
    torch = pytest.importorskip("torch")
    from riemfl.nn.floral import Router

    r = Router(2, "exp-weights")
    assert not r.logits.requires_grad
    r.exp_weights_update(torch.tensor([1.0, 3.0]), 0.5)
    want = np.exp([-0.5, -1.5]) / np.exp([-0.5, -1.5]).sum()
    np.testing.assert_allclose(r.probabilities().numpy(), want, rtol=1e-6)
    r.exp_weights_update(torch.tensor([2.0, 0.0]), 0.5)  # reset: the first losses are forgotten
    want = np.exp([-1.0, 0.0]) / np.exp([-1.0, 0.0]).sum()
    np.testing.assert_allclose(r.probabilities().numpy(), want, rtol=1e-6)

    cum = Router(2, "exp-weights-cumulative")
    cum.exp_weights_update(torch.tensor([1.0, 3.0]), 0.5)
    cum.exp_weights_update(torch.tensor([2.0, 0.0]), 0.5)
    want = np.exp([-1.5, -1.5]) / 2 / np.exp([-1.5, -1.5]).mean()
    np.testing.assert_allclose(cum.probabilities().numpy(), want, rtol=1e-6)

    with cum.one_hot(1):
        np.testing.assert_array_equal(cum().numpy(), [0.0, 1.0])
    assert cum.forced is None and abs(float(cum().sum()) - 1) < 1e-6

    with pytest.raises(ParameterError):
        Router(2, "learned").exp_weights_update(torch.zeros(2), 0.1)
    with pytest.raises(ParameterError):
        r.exp_weights_update(torch.zeros(2), -1.0)
    with pytest.raises(ParameterError):
        r.exp_weights_update(torch.tensor([0.0, math.inf]), 1.0)
    with pytest.raises(ShapeError):
        r.exp_weights_update(torch.zeros(3), 1.0)
    with pytest.raises(ParameterError):
        Router(2, "exp-weight")
    with pytest.raises(ParameterError):
        with r.one_hot(2):
            pass


def test_trainer_sets_the_exp_weights_router_from_the_received_models():
    torch = pytest.importorskip("torch")
    from torch import nn

    from riemfl.nn.floral import FloralTrainer, floralize

    task = synthetic_linear(seed=3)
    for mode in ("exp-weights", "exp-weights-cumulative"):
        torch.manual_seed(0)
        model = floralize(nn.Sequential(nn.Linear(10, 3)), 2, rank=1, routing=mode, seed=0)
        with torch.no_grad():  # distinct clusters at the start (the LoRA init zeroes one side)
            for _, layer in model.adaptors():
                layer.lora_out.normal_()
        tr = FloralTrainer(model, task.clients, loss="mse", lr=0.05, router_lr=0.7, batch_size=4)
        start = tr.global_parameters()
        x, y = (torch.as_tensor(a, dtype=torch.float32) for a in task.clients[2][:2])
        by_hand = []
        for c in range(2):
            tr.layout.load(model, start)
            merged = model.merge(np.eye(2)[c])[0]
            with torch.no_grad():
                out = merged(x)
            by_hand.append(float(0.5 * ((out - y) ** 2).sum(-1).mean()))
        by_hand = np.array(by_hand)
        tr.train(2, start, np.random.default_rng(0))
        want = np.exp(-0.7 * by_hand) / np.exp(-0.7 * by_hand).sum()
        np.testing.assert_allclose(tr.last_pi[2], want, rtol=1e-5)
        np.testing.assert_allclose(tr.upload_weights(2)[1], want, rtol=1e-5)
        tr.train(2, start, np.random.default_rng(1))  # the same models received again
        twice = np.exp(-1.4 * by_hand) / np.exp(-1.4 * by_hand).sum()
        np.testing.assert_allclose(
            tr.last_pi[2], twice if mode == "exp-weights-cumulative" else want, rtol=1e-5
        )


# ------------------------------------------------------------------------------ aggregation weights
def test_aggregation_weights_by_hand():
    pi = np.array([[0.75, 0.25], [0.5, 0.5], [0.0, 1.0]])
    n = np.array([1.0, 2.0, 1.0])
    want = np.array([[0.75 / 1.75, 0.25 / 2.25], [1.0 / 1.75, 1.0 / 2.25], [0.0, 1.0 / 2.25]])
    np.testing.assert_allclose(th.aggregation_weights(pi, n), want)
    stacked = th.aggregation_weights(np.stack([pi, pi]), n)  # leading (time) axes are kept
    np.testing.assert_allclose(stacked[1], want)
    truth = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    delta = th.mismatch(pi, truth, n)
    p = th.aggregation_weights(truth, n)
    np.testing.assert_allclose(delta, np.abs(want - p).sum(0))
    np.testing.assert_allclose(th.mismatch(truth, truth, n), [0.0, 0.0])
    floor = th.weight_floor(pi, truth, n)
    np.testing.assert_allclose(floor, [min(want[0, 0] / p[0, 0], want[1, 0] / p[1, 0]), 1 / 2.25])
    with pytest.raises(ParameterError):
        th.aggregation_weights(np.array([[0.5, 0.6]]), np.ones(1))
    with pytest.raises(ShapeError):
        th.aggregation_weights(np.ones(3), np.ones(3))


def test_uniformity_and_effective_variance_by_hand():
    pi = np.array([[1.0, 0.0], [0.6, 0.4], [0.0, 1.0]])
    n = np.array([1.0, 1.0, 2.0])
    p_c = np.array([(1.0 + 0.6) / 4, (0.4 + 2.0) / 4])  # p(c) = sum_k p(k) pi_c^k
    u = th.uniformity(pi, n)
    # cluster 0: clients with pi >= p(c) = 0.4 are 0 (1.0) and 1 (0.6) -> min p(c)/pi = 0.4
    # cluster 1: p(c) = 0.6; client 2 (1.0) -> 0.6 (client 1's 0.4 < 0.6 is left out)
    np.testing.assert_allclose(u, [p_c[0] / 1.0, p_c[1] / 1.0])
    w = th.aggregation_weights(pi, n)
    np.testing.assert_allclose(th.effective_variance(2.0, w), 2.0 * (w**2).sum(0))
    equal = th.aggregation_weights(np.eye(2)[np.arange(10) % 2], np.ones(10))
    np.testing.assert_allclose(th.effective_variance(1.0, equal), [0.2, 0.2])  # 1/K_c


# ------------------------------------------------------------------------------ the algorithm
def hand_run(clients, w0, pi0, steps, h, mu, s, router="reset"):
    """MFL with full gradients, written out client by client and step by step."""
    k, c = pi0.shape
    n = clients.n_samples.astype(float)
    copies = [[w0[j].copy() for j in range(c)] for _ in range(k)]
    pi = pi0.copy()
    logw = np.log(np.maximum(pi, 1e-300))
    models, routers, avg_num, avg_den = [w0.copy()], [pi.copy()], 0.0, 0.0
    for t in range(steps):
        p_hat = pi * n[:, None] / (pi * n[:, None]).sum(0)
        virtual = np.array([sum(p_hat[i, j] * copies[i][j] for i in range(k)) for j in range(c)])
        avg_num = avg_num + (t + s) ** 2 * virtual
        avg_den += (t + s) ** 2
        eta = 1 / (mu * (t + s))
        copies = [
            [copies[i][j] - eta * grad(clients, i, copies[i][j]) for j in range(c)]
            for i in range(k)
        ]
        if (t + 1) % h == 0:
            w = np.array([sum(p_hat[i, j] * copies[i][j] for i in range(k)) for j in range(c)])
            copies = [[w[j].copy() for j in range(c)] for _ in range(k)]
            if router != "oracle":
                ell = np.array([[loss(clients, i, w[j]) for j in range(c)] for i in range(k)])
                logw = (logw if router == "cumulative" else 0.0) - eta * ell
                pi = np.exp(logw - logw.max(1, keepdims=True))
                pi /= pi.sum(1, keepdims=True)
            models.append(w)
            routers.append(pi.copy())
    return np.array(models), np.array(routers), avg_num / avg_den


@pytest.mark.parametrize("router", ["reset", "cumulative"])
def test_one_and_two_synchronisations_by_hand(router):
    cl = tiny_clients()
    w0 = np.array([[[0.5, -0.2]], [[-0.4, 0.1]]])
    mu, s, h = 0.5, 4.0, 2
    run = run_mfl(
        cl,
        2,
        4,
        local_steps=h,
        batch_size=None,
        router=router,
        mu=mu,
        s=s,
        init=w0,
        record_at=[2, 4],
    )
    models, routers, avg = hand_run(cl, w0, np.full((4, 2), 0.5), 4, h, mu, s, router)
    np.testing.assert_allclose(run.models, models, rtol=1e-12)
    np.testing.assert_allclose(run.routers, routers, rtol=1e-12)
    np.testing.assert_allclose(run.averages[-1], avg, rtol=1e-12)
    np.testing.assert_array_equal(run.sync_steps, [0, 2, 4])
    # the first synchronisation: from the uniform router, p^_c^k = p(k) = N^k / N
    eta = [1 / (mu * (t + s)) for t in range(2)]
    first = []
    for j in range(2):
        total = 0.0
        for i in range(4):
            w = w0[j]
            for e in eta:
                w = w - e * grad(cl, i, w)
            total = total + cl.n_samples[i] / cl.n_samples.sum() * w
        first.append(total)
    np.testing.assert_allclose(run.models[1], np.array(first), rtol=1e-12)
    ell = np.array([[loss(cl, i, first[j]) for j in range(2)] for i in range(4)])
    want = np.exp(-eta[1] * ell)
    np.testing.assert_allclose(run.routers[1], want / want.sum(1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(run.losses[1], ell, rtol=1e-12)


def test_perfect_router_is_per_cluster_local_sgd_with_no_mismatch():
    cl = tiny_clients()
    w0 = np.array([[[0.5, -0.2]], [[-0.4, 0.1]]])
    run = run_mfl(cl, 2, 6, local_steps=3, batch_size=None, router="oracle", mu=0.5, s=4.0, init=w0)
    delta = th.mismatch(run.routers, cl.true_router(), cl.n_samples)
    assert np.all(delta == 0)
    # per-cluster local GD: cluster c's model sees only its clients, weighted by N^k
    for c in range(2):
        mine = [i for i in range(4) if cl.clusters[i] == c]
        w, t = w0[c], 0
        for r in range(2):
            ends = []
            for i in mine:
                v = w.copy()
                for tt in range(t, t + 3):
                    v = v - 1 / (0.5 * (tt + 4.0)) * grad(cl, i, v)
                ends.append(v)
            t += 3
            n = cl.n_samples[mine].astype(float)
            w = sum(nk / n.sum() * v for nk, v in zip(n, ends, strict=True))
            np.testing.assert_allclose(run.models[r + 1, c], w, rtol=1e-12)
    # with minibatches, the other cluster's data cannot reach a cluster's model
    changed = tiny_clients()
    changed.targets[1] += 5.0
    changed = LeastSquaresClients(
        changed.features, changed.targets, changed.n_samples, changed.clusters, 2
    )
    a = run_mfl(cl, 2, 30, local_steps=3, batch_size=2, router="oracle", mu=0.5, s=4.0, seed=3)
    b = run_mfl(changed, 2, 30, local_steps=3, batch_size=2, router="oracle", mu=0.5, s=4.0, seed=3)
    np.testing.assert_array_equal(a.models[:, 0], b.models[:, 0])
    assert not np.allclose(a.models[:, 1], b.models[:, 1])


def test_one_cluster_is_local_sgd():
    """C = 1 (Corollary A.5's setting): the router is 1, p^ = p(k), local GD with averaging."""
    cl = tiny_clients()
    w0 = np.array([[[0.3, 0.3]]])
    run = run_mfl(cl, 1, 6, local_steps=2, batch_size=None, mu=0.5, s=4.0, init=w0)
    assert np.all(run.routers == 1.0)
    w, n = w0[0], cl.n_samples / cl.n_samples.sum()
    for r in range(3):
        ends = []
        for i in range(4):
            v = w.copy()
            for t in range(2 * r, 2 * r + 2):
                v = v - 1 / (0.5 * (t + 4.0)) * grad(cl, i, v)
            ends.append(v)
        w = sum(p * v for p, v in zip(n, ends, strict=True))
        np.testing.assert_allclose(run.models[r + 1, 0], w, rtol=1e-12)
    assert np.all(router_regret(run.routers, run.losses)["regret"] == 0)


def test_least_squares_clients_losses_gradients_and_optimum():
    cl = tiny_clients(ridge=0.1)
    w = np.array([[[0.2, -0.7]], [[1.0, 0.5]]])
    np.testing.assert_allclose(
        cl.losses(w), [[loss(cl, i, w[m]) for m in range(2)] for i in range(4)], rtol=1e-12
    )
    p = cl.true_weights()
    star = cl.minimisers()
    for c in range(2):
        g = sum(p[i, c] * grad(cl, i, star[c]) for i in range(4))
        np.testing.assert_allclose(g, 0.0, atol=1e-12)
    mu, big_l = cl.curvature()
    h = cl.cluster_hessians()
    np.testing.assert_allclose(mu, [np.linalg.eigvalsh(m)[0] for m in h])
    assert np.all(mu >= 0.1 - 1e-12) and np.all(big_l >= mu)
    task = synthetic_linear(seed=0)
    built = least_squares_clients(task)
    assert built.shape == (3, 11) and built.n_clients == 10
    np.testing.assert_allclose(built.features[0, :, :10], task.clients[0][0], rtol=1e-6)


def test_gradient_moments_by_enumerating_the_minibatches():
    cl = tiny_clients(ridge=0.05, n_rows=(2, 3, 2, 2))
    w = np.array([[[0.4, -0.3]]])
    g2, s2 = cl.gradient_moments(w, batch_size=2)
    p = cl.true_weights()
    for c in range(2):
        want_g2 = want_s2 = 0.0
        full_c = sum(p[i, c] * grad(cl, i, w[0]) for i in range(4))
        for i in range(4):
            x, y = rows(cl, i)
            row_grads = [
                np.outer(x[j] @ w[0].T - y[j], x[j]) + cl.ridge * w[0] for j in range(len(x))
            ]
            pairs = [(a + b) / 2 for a in row_grads for b in row_grads]  # with replacement
            want_g2 += p[i, c] * np.mean([np.sum(g**2) for g in pairs])
            want_s2 += p[i, c] * np.mean([np.sum((full_c - g) ** 2) for g in pairs])
        np.testing.assert_allclose(g2[0, c], want_g2, rtol=1e-12)
        np.testing.assert_allclose(s2[0, c], want_s2, rtol=1e-12)
    full_g2, full_s2 = cl.gradient_moments(w, batch_size=None)
    assert np.all(full_g2 <= g2) and np.all(full_s2 <= s2)


def test_regret_and_matching_by_hand():
    routers = np.array([[[0.5, 0.5]], [[0.8, 0.2]], [[0.8, 0.2]]])
    losses = np.array([[[9.0, 9.0]], [[1.0, 3.0]], [[4.0, 2.0]]])
    reg = router_regret(routers, losses)
    # round 0: 0.5*1 + 0.5*3 - 1 = 1; round 1: 0.8*4 + 0.2*2 - 2 = 1.6
    np.testing.assert_allclose(reg["per_round"][:, 0], [1.0, 1.6])
    np.testing.assert_allclose(reg["regret"], [2.6])
    np.testing.assert_allclose(reg["static"], [2.0 + 3.6 - 5.0])
    cl = tiny_clients()
    run = run_mfl(cl, 2, 12, local_steps=3, batch_size=None, router="oracle", mu=0.5, s=4.0)
    swapped = run_mfl(
        cl,
        2,
        12,
        local_steps=3,
        batch_size=None,
        mu=0.5,
        s=4.0,
        init=run.models[0],
        router_scale=50.0,
    )
    perm = match_clusters(cl, swapped)
    assert sorted(perm.tolist()) == [0, 1]
    flipped = type(swapped)(**{**swapped.__dict__, "averages": swapped.averages[:, ::-1]})
    np.testing.assert_array_equal(match_clusters(cl, flipped), perm[::-1])


def test_the_paper_task_cumulative_router_finds_the_clusters_and_reset_does_not():
    """The run the experiment measures, short: eq. (5)'s router with its decaying step stays
    near uniform; the cumulative one separates the clusters (a test that can fail)."""
    cl = least_squares_clients(synthetic_linear(seed=0), noise_std=0.5)
    args = {"local_steps": 5, "batch_size": 4, "s": 72.0, "seed": 0, "steps": 4000}
    for router, low, high in (("reset", 0.9, 1.1), ("cumulative", 0.0, 1e-3)):
        run = run_mfl(cl, 2, router=router, **args)
        perm = match_clusters(cl, run)
        delta = th.mismatch(run.routers[:, :, perm], cl.true_router(), cl.n_samples)
        assert low <= delta[-1].max() <= high, (router, delta[-1])


# ------------------------------------------------------------------------------ the theorems
def test_bounds_against_hand_computation():
    t = np.array([10.0, 1000.0])
    kw = {"sigma_tilde2": 0.3, "g2": 2.0, "mu": 0.5, "local_steps": 3, "s": 20.0}
    got = th.bound_a9(t, kappa=4.0, n_clients=10, n_clusters=2, **kw)
    for value, tt in zip(got, t, strict=True):
        lead = (8 * 0.3 + 32 * 2.0 * math.log(20)) * (1 / (0.5 * tt) + 39 / (0.5 * tt**2))
        want = lead + 18 * 4 * 9 * 2.0 / (0.5 * tt**2) + 24 * 19 * 400 * 2.0 / (0.5 * tt**3)
        assert value == pytest.approx(want, rel=1e-12)
    got = th.bound_a10(t, smoothness=2.0, delta0=1.0, beta=0.5, **kw)
    for value, tt in zip(got, t, strict=True):
        want = 12 * 0.3 * (1 / (0.5 * tt) + 39 / (0.5 * tt**2))
        want += 48 * 2.0 * 1.0 / (0.5 * tt**1.5)
        want += 24 * 2.0 * (19 + 2 * 20**-0.5) * 400 / (0.5 * tt**3)
        want += 48 * 2.0 * 9 * 2.0 / (0.25 * tt**2)
        assert value == pytest.approx(want, rel=1e-12)
    assert np.all(np.diff(got) < 0)
    assert th.minimum_s(3, 4.0, 0.5) == max(9, 32)
    assert th.minimum_s(3, 4.0, 0.5, g2=2.0, mu=0.5) == 16 * 2.0 / (0.5 * 0.5)
    assert th.condition_number(2.0, 0.5) == 4.0
    np.testing.assert_allclose(th.step_size([0, 5], 0.5, 20.0), [1 / 10, 1 / 12.5])
    np.testing.assert_allclose(th.averaging_weight([0, 5], 20.0), [400, 625])


def test_decay_fits_and_checks():
    t = np.arange(0, 500, 5.0)
    delta = np.sqrt(((t + 10) / 10) ** -0.4)  # ||delta||^2 = ((t + s)/s)^-0.4, delta_0 = 1
    assert th.decay_exponent(t, delta, 10.0) == pytest.approx(0.4, rel=1e-9)
    assert th.decay_holds(t, delta, 10.0, 0.4) and not th.decay_holds(t, delta, 10.0, 0.6)
    a, b = th.fit_power([1, 10, 100], [3, 0.3, 0.03])
    assert a == pytest.approx(-1) and b == pytest.approx(3)
    assert math.isnan(th.fit_power([1, 2], [0, 0])[0])
    truth = np.eye(2)[[0, 1]]
    moving = np.stack([np.full((2, 2), 0.5), [[0.9, 0.1], [0.2, 0.8]], [[0.95, 0.05], [0.1, 0.9]]])
    assert th.entrywise_shrinks(moving, truth, np.ones(2))
    assert not th.entrywise_shrinks(moving[::-1], truth, np.ones(2))
    floor = th.weight_floor(moving, truth, np.ones(2)).min(-1)
    assert th.lemma_a7_step_holds([0, 1, 2], floor, mu=1.0, s=100.0, g2=0.1, smoothness=1.0)
    assert not th.lemma_a7_step_holds([0, 1, 2], floor, mu=1.0, s=2.0, g2=0.1, smoothness=1.0)


# ------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"router": "hedge"}, ParameterError),
        ({"gradients": "server"}, ParameterError),
        ({"steps": 0}, ParameterError),
        ({"n_clusters": 0}, ParameterError),
        ({"n_clusters": 3, "router": "oracle"}, ParameterError),
        ({"n_clusters": 3, "gradients": "cluster"}, ParameterError),
        ({"local_steps": 0}, ParameterError),
        ({"batch_size": 0}, ParameterError),
        ({"record_at": [0]}, ParameterError),
        ({"record_at": [11]}, ParameterError),
        ({"s": 0.5}, ParameterError),
        ({"mu": 0.0}, ParameterError),
        ({"router_scale": -1.0}, ParameterError),
        ({"init": np.zeros((2, 1, 3))}, ShapeError),
    ],
)
def test_run_mfl_refuses_bad_settings(kwargs, error):
    args = {"n_clusters": 2, "steps": 10, **kwargs}
    with pytest.raises(error):
        run_mfl(tiny_clients(), args.pop("n_clusters"), args.pop("steps"), **args)


def test_theory_functions_refuse_bad_settings():
    kw = {"sigma_tilde2": 0.3, "g2": 2.0, "mu": 0.5, "local_steps": 3, "s": 20.0}
    with pytest.raises(DataError):
        th.bound_a9(0, kappa=4.0, n_clients=10, n_clusters=2, **kw)
    with pytest.raises(ParameterError):
        th.bound_a9(10, kappa=0.5, n_clients=10, n_clusters=2, **kw)
    with pytest.raises(ParameterError):
        th.bound_a10(10, smoothness=2.0, delta0=1.0, beta=1.0, **kw)
    with pytest.raises(ParameterError):
        th.bound_a10(10, smoothness=2.0, delta0=2.5, beta=0.5, **kw)
    with pytest.raises(ParameterError):
        th.bound_a10(10, smoothness=0.1, delta0=1.0, beta=0.5, **kw)
    with pytest.raises(ParameterError):
        th.minimum_s(3, 4.0, 0.0)
    with pytest.raises(ParameterError):
        th.minimum_s(3, 4.0, 0.5, g2=1.0)  # G^2 without mu
    with pytest.raises(ParameterError):
        th.condition_number(0.1, 0.5)
    with pytest.raises(ShapeError):
        th.decay_holds([1.0, 2.0], [1.0, 0.5], 10.0, 0.5)  # must start at t = 0
    with pytest.raises(DataError):
        least_squares_clients(synthetic_mlp(seed=0))
    with pytest.raises(ParameterError):
        least_squares_clients(synthetic_linear(seed=0), ridge=-1.0)
    with pytest.raises(ShapeError):
        router_regret(np.ones((2, 3, 2)), np.ones((2, 3)))

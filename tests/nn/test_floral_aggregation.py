"""FLoRAL aggregation: eq. (2), Algorithm 1's averages, the manifold-aware rule, the server."""

from __future__ import annotations

import numpy as np
import pytest

from riemfl.testing import importorskip

torch = importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402
from torch import nn  # noqa: E402

from riemfl.errors import ParameterError, ProjectionError, ShapeError  # noqa: E402
from riemfl.federated.async_rules import Arrival  # noqa: E402
from riemfl.nn.floral import (  # noqa: E402
    EnsembleModel,
    FederatedLayout,
    FloralAggregator,
    FloralFedBuff,
    ServerOptimizer,
    average_base,
    average_clusters,
    average_products,
    cluster_probabilities,
    factor_average_error,
    floralize,
    retract_products,
)

PI = np.array([[0.75, 0.25], [0.5, 0.5], [0.0, 1.0]])
N = np.array([10.0, 30.0, 60.0])


# ------------------------------------------------------------------------------ eq. (2)
def test_cluster_probabilities_by_hand():
    p = cluster_probabilities(PI, N)
    np.testing.assert_allclose(p.p_k, [0.1, 0.3, 0.6])
    np.testing.assert_allclose(p.p_kc, [[0.075, 0.025], [0.15, 0.15], [0.0, 0.6]])
    np.testing.assert_allclose(p.p_c, [0.225, 0.775])
    # p(k|c) = pi_c^k N^k / sum_k' pi_c^k' N^k'
    np.testing.assert_allclose(p.p_k_given_c[:, 0], [7.5 / 22.5, 15 / 22.5, 0.0])
    np.testing.assert_allclose(p.p_k_given_c[:, 1], [2.5 / 77.5, 15 / 77.5, 60 / 77.5])
    assert not p.empty.any()


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        np.float64, st.tuples(st.integers(1, 6), st.integers(1, 5)), elements=st.floats(0.01, 10.0)
    ),
    st.integers(0, 2**16),
)
def test_cluster_probabilities_are_distributions(raw, seed):
    pi = raw / raw.sum(1, keepdims=True)
    n = np.random.default_rng(seed).integers(1, 50, raw.shape[0]).astype(float)
    p = cluster_probabilities(pi, n)
    assert p.p_kc.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(p.p_kc.sum(1), p.p_k)
    np.testing.assert_allclose(p.p_kc.sum(0), p.p_c)
    np.testing.assert_allclose(p.p_k_given_c.sum(0), 1.0)
    np.testing.assert_allclose(p.p_k_given_c * p.p_c, p.p_kc, atol=1e-12)


def test_probabilities_validate_their_input():
    with pytest.raises(ParameterError, match="simplex"):
        cluster_probabilities([[0.6, 0.6]], [1.0])
    with pytest.raises(ShapeError, match="one per client"):
        cluster_probabilities(PI, [1.0, 2.0])
    with pytest.raises(ParameterError, match="positive total"):
        cluster_probabilities(PI, [0.0, 0.0, 0.0])
    with pytest.raises(ParameterError, match="finite"):
        cluster_probabilities([[np.nan, 1.0]], [1.0])


# ------------------------------------------------------------------------------ Algorithm 1
def test_average_base_weights_by_samples():
    u = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    np.testing.assert_allclose(average_base(u, N), [(10 + 90 + 300) / 100, (20 + 120 + 360) / 100])


def test_average_clusters_weights_by_pi_times_samples():
    a = np.arange(3 * 2 * 2, dtype=float).reshape(3, 2, 2)  # (K, C, 2)
    p = cluster_probabilities(PI, N)
    out = average_clusters(a, p)
    w0 = np.array([7.5, 15.0, 0.0]) / 22.5
    w1 = np.array([2.5, 15.0, 60.0]) / 77.5
    np.testing.assert_allclose(out[0], w0 @ a[:, 0])
    np.testing.assert_allclose(out[1], w1 @ a[:, 1])


def test_empty_cluster_keeps_its_previous_adaptor():
    pi = np.array([[1.0, 0.0], [1.0, 0.0]])  # pi*: nobody in cluster 1 this round
    p = cluster_probabilities(pi, [5.0, 5.0])
    assert p.empty.tolist() == [False, True]
    a = np.array([[[1.0], [7.0]], [[3.0], [9.0]]])
    prev = np.array([[0.0], [-1.0]])
    np.testing.assert_allclose(average_clusters(a, p, prev), [[2.0], [-1.0]])
    with pytest.raises(ParameterError, match="previous"):
        average_clusters(a, p)


# --------------------------------------------- manifold-aware product averages (riemfl)
def _factors(rng, k=4, c=2, m=6, n=5, r=2):
    return rng.standard_normal((k, c, m, r)), rng.standard_normal((k, c, n, r))


def test_manifold_aware_average_is_the_truncated_svd_of_the_mean_product():
    rng = np.random.default_rng(0)
    a, b = _factors(rng)
    pi = rng.dirichlet(np.ones(2), size=4)
    p = cluster_probabilities(pi, [3.0, 1.0, 2.0, 4.0])
    new_a, new_b, fallbacks = average_products(a, b, p)
    assert fallbacks == 0
    for c in range(2):
        mean = sum(p.p_k_given_c[k, c] * a[k, c] @ b[k, c].T for k in range(4))
        u, s, vt = np.linalg.svd(mean)
        truncated = (u[:, :2] * s[:2]) @ vt[:2]
        np.testing.assert_allclose(new_a[c] @ new_b[c].T, truncated, atol=1e-12)
        # balanced factors: A^T A = B^T B = diag(s_r)
        np.testing.assert_allclose(new_a[c].T @ new_a[c], np.diag(s[:2]), atol=1e-12)
        np.testing.assert_allclose(new_b[c].T @ new_b[c], np.diag(s[:2]), atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_products_are_gauge_invariant_factors_are_not(seed):
    rng = np.random.default_rng(seed)
    a, b = _factors(rng, k=3, c=2, m=5, n=4, r=2)
    p = cluster_probabilities(rng.dirichlet(np.ones(2), size=3), rng.uniform(1, 5, 3))
    q = np.linalg.qr(rng.standard_normal((3, 2, 2, 2)))[0]
    g = q * rng.uniform(0.5, 2.0, (3, 2, 1, 2))  # a random invertible gauge per client/cluster
    ga, gb = a @ g, b @ np.linalg.inv(g).swapaxes(-1, -2)
    np.testing.assert_allclose(ga @ gb.swapaxes(-1, -2), a @ b.swapaxes(-1, -2), atol=1e-10)
    pa, pb, _ = average_products(a, b, p)
    qa, qb, _ = average_products(ga, gb, p)
    np.testing.assert_allclose(pa @ pb.swapaxes(-1, -2), qa @ qb.swapaxes(-1, -2), atol=1e-9)
    fa, fb = average_clusters(a, p), average_clusters(b, p)
    ha, hb = average_clusters(ga, p), average_clusters(gb, p)
    moved = np.abs(fa @ fb.swapaxes(-1, -2) - ha @ hb.swapaxes(-1, -2)).max()
    assert moved > 1e-6  # factor averaging depends on the clients' gauges


def test_factor_average_error():
    rng = np.random.default_rng(1)
    a, b = _factors(rng, k=3, c=2)
    w = cluster_probabilities(rng.dirichlet(np.ones(2), 3), np.ones(3)).p_k_given_c
    same_a = np.broadcast_to(a[:1], a.shape)
    same_b = np.broadcast_to(b[:1], b.shape)
    np.testing.assert_allclose(factor_average_error(same_a, same_b, w), 0.0, atol=1e-12)
    err = factor_average_error(a, b, w)
    mean = np.einsum("kc,kcmr,kcnr->cmn", w, a, b)
    prod = np.einsum("kc,kcmr->cmr", w, a) @ np.einsum("kc,kcnr->cnr", w, b).swapaxes(-1, -2)
    np.testing.assert_allclose(
        err, np.linalg.norm(mean - prod, axis=(1, 2)) / np.linalg.norm(mean, axis=(1, 2))
    )


def test_rank_deficient_product_falls_back_to_the_factor_average():
    rng = np.random.default_rng(2)
    a = np.zeros((2, 1, 4, 2))  # the LoRA init: every output factor zero
    b = rng.standard_normal((2, 1, 3, 2))
    p = cluster_probabilities(np.ones((2, 1)), [1.0, 3.0])
    new_a, new_b, fallbacks = average_products(a, b, p)
    assert fallbacks == 1
    np.testing.assert_allclose(new_b, average_clusters(b, p))
    np.testing.assert_allclose(new_a, 0.0)


def test_a_tie_in_the_singular_values_is_an_error():
    x = np.diag([2.0, 1.0, 1.0])[None]  # sigma_2 = sigma_3: P_2 not unique
    fallback = (np.zeros((1, 3, 2)), np.zeros((1, 3, 2)))
    with pytest.raises(ProjectionError, match="not unique"):
        retract_products(x, 2, fallback)


# ------------------------------------------------------------------------------ the server
def _tiny_model(c=2):
    torch.manual_seed(0)
    return floralize(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)), c, rank=1, seed=0)


def _uploads(layout, k, seed=0):
    return np.random.default_rng(seed).standard_normal((k, layout.size))


def test_aggregator_applies_algorithm_1_parameter_by_parameter():
    model = _tiny_model()
    lay = FederatedLayout(model)
    ups = _uploads(lay, 3)
    x0 = np.zeros(lay.size)
    new, info = FloralAggregator(lay).aggregate(x0, ups, N, PI)
    parts, out = lay.split(ups), lay.split(new)
    p = cluster_probabilities(PI, N)
    for e in lay.entries:
        if e.role == "base":
            np.testing.assert_allclose(out[e.name], np.tensordot(N / N.sum(), parts[e.name], 1))
        else:
            for c in range(2):
                want = np.einsum("k,k...->...", p.p_k_given_c[:, c], parts[e.name][:, c])
                np.testing.assert_allclose(out[e.name][c], want)
    assert info["empty_clusters"] == 0 and np.isfinite(info["factor_average_error"])
    assert {e.role for e in lay.entries} == {"base", "cluster"}
    assert "router.logits" not in {e.name for e in lay.entries}


def test_aggregator_products_mode_and_errors():
    model = _tiny_model()
    lay = FederatedLayout(model)
    ups = _uploads(lay, 3, seed=1)
    x0 = _uploads(lay, 1, seed=2)[0]
    fac, _ = FloralAggregator(lay, "factors").aggregate(x0, ups, N, PI)
    prod, info = FloralAggregator(lay, "products").aggregate(x0, ups, N, PI)
    p = cluster_probabilities(PI, N)
    a_u, b_u = lay.split(ups), lay.split(prod)
    for pair in lay.factor_pairs:
        a = pair.out_view.to_matrix(a_u[pair.out_name])  # (K, C, m, r)
        b = pair.in_view.to_matrix(a_u[pair.in_name])
        want_a, want_b, _ = average_products(a, b, p)
        got_a = pair.out_view.to_matrix(b_u[pair.out_name])
        got_b = pair.in_view.to_matrix(b_u[pair.in_name])
        got = got_a @ got_b.swapaxes(-1, -2)
        np.testing.assert_allclose(got, want_a @ want_b.swapaxes(-1, -2))
    base = [e for e in lay.entries if not e.name.endswith(("lora_out", "lora_in"))]
    for e in base:  # everything but the factor pairs is aggregated alike
        np.testing.assert_allclose(prod[e.offset : e.stop], fac[e.offset : e.stop])
    assert info["product_fallbacks"] == 0
    with pytest.raises(ParameterError, match="pass pi"):
        FloralAggregator(lay).aggregate(x0, ups, N)
    with pytest.raises(ShapeError):
        FloralAggregator(lay).aggregate(x0[:-1], ups, N, PI)
    ups[1, 0] = np.nan
    with pytest.raises(ParameterError, match=r"rows\) \[1\]"):
        FloralAggregator(lay).aggregate(x0, ups, N, PI)
    with pytest.raises(ParameterError, match="adaptors"):
        FloralAggregator(lay, "tangent")


def test_server_optimizers():
    g = np.array([0.5, -2.0, 0.0])
    sgd = ServerOptimizer("sgd", lr=0.5)
    np.testing.assert_allclose(sgd.step(g), 0.5 * g)
    current, averaged = np.array([1.0, 2.0, 3.0]), np.array([0.5, 4.0, 3.0])
    assert ServerOptimizer().apply(current, averaged) is averaged  # SGD, lr 1: Algorithm 1
    adam = ServerOptimizer("adam")
    assert adam.lr == 1e-3
    # first Adam step: m_hat = g, v_hat = g^2, so the move is lr * g / (|g| + eps)
    np.testing.assert_allclose(adam.step(g), 1e-3 * g / (np.abs(g) + 1e-8))
    state = adam.state_dict()
    other = ServerOptimizer("adam")
    other.load_state_dict(state)
    np.testing.assert_allclose(other.step(g), adam.step(g))
    with pytest.raises(ParameterError):
        ServerOptimizer("rmsprop")


def test_ensemble_models_are_aggregated_per_cluster():
    torch.manual_seed(0)
    model = EnsembleModel(nn.Sequential(nn.Linear(2, 2)), 2)
    lay = FederatedLayout(model)
    assert {e.role for e in lay.entries} == {"cluster"} and lay.n_clusters == 2
    ups = _uploads(lay, 3)
    new, _ = FloralAggregator(lay).aggregate(np.zeros(lay.size), ups, N, PI)
    p = cluster_probabilities(PI, N)
    w = lay.split(ups)["stacked.0__weight"]
    np.testing.assert_allclose(
        lay.split(new)["stacked.0__weight"][1], np.einsum("k,kij->ij", p.p_k_given_c[:, 1], w[:, 1])
    )


# ------------------------------------------------------------------------------ FedBuff
@pytest.mark.parametrize("adaptors", ["factors", "products"])
def test_fedbuff_floral_without_staleness_is_algorithm_1(adaptors):
    model = _tiny_model()
    lay = FederatedLayout(model)
    x = _uploads(lay, 1, seed=3)[0]
    ups = x + 0.1 * _uploads(lay, 3, seed=4)
    weights = {k: (N[k], PI[k]) for k in range(3)}
    rule = FloralFedBuff(lay, weights.__getitem__, buffer_size=3, adaptors=adaptors)
    rule.reset(None, 3)
    outs = [rule.apply(None, Arrival(k, x, ups[k], x, 0, 1.0, 0)) for k in range(3)]
    assert outs[0] is None and outs[1] is None
    expected, _ = FloralAggregator(lay, adaptors).aggregate(x, ups, N, PI)
    if adaptors == "factors":
        np.testing.assert_allclose(outs[2], expected, atol=1e-12)
    else:  # the factors are balanced representatives: compare the adaptors
        got, want = lay.split(outs[2]), lay.split(expected)
        for pair in lay.factor_pairs:
            g = pair.out_view.to_matrix(got[pair.out_name])
            h = pair.in_view.to_matrix(got[pair.in_name])
            u = pair.out_view.to_matrix(want[pair.out_name])
            v = pair.in_view.to_matrix(want[pair.in_name])
            np.testing.assert_allclose(g @ h.swapaxes(-1, -2), u @ v.swapaxes(-1, -2), atol=1e-10)


def test_fedbuff_floral_steps_from_stale_bases():
    model = _tiny_model()
    lay = FederatedLayout(model)
    base0, current = _uploads(lay, 2, seed=5)
    local = base0 + 0.2
    rule = FloralFedBuff(lay, lambda k: (2.0, np.array([0.5, 0.5])), buffer_size=1, server_lr=0.5)
    rule.reset(None, 1)
    new = rule.apply(None, Arrival(0, base0, local, current, 3, 1.0, 3))
    # x <- x - eta * (base - local): the stale client's delta, applied at the current model
    np.testing.assert_allclose(new, current + 0.5 * 0.2)

"""Asynchronous server rules on Euclidean space equal their papers' formulas exactly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import riemfl
from riemfl.errors import ParameterError, ProjectionError
from riemfl.federated.async_rules import (
    ASGD,
    DCASGD,
    Arrival,
    AsyncFedED,
    FedAsync,
    FedBuff,
    FedGS,
    FedOrtho,
    OrthoCorrect,
    OrthoDyn,
    OrthoStrict,
    SumBuffer,
    staleness_function,
    switch_schedule,
)

E = riemfl.Euclidean(4)


def _arrival(seed=0, staleness=3, weight=0.2, version=20, client=1, drift_scale=1.0):
    rng = np.random.default_rng(seed)
    base = rng.normal(size=4)
    local = base + rng.normal(size=4)
    current = base + drift_scale * rng.normal(size=4)
    return Arrival(client, base, local, current, staleness, weight, version)


seeds = st.integers(0, 10_000)


@given(seeds)
def test_fedasync_mixes_in_the_local_model(seed):
    a = _arrival(seed)
    new = FedAsync(server_lr=3.0).apply(E, a)
    np.testing.assert_allclose(new, a.current + 3.0 * 0.2 * (a.local - a.current), atol=1e-14)


def test_fedasync_staleness_functions():
    a = _arrival(staleness=6)
    poly = FedAsync(server_lr=1.0, staleness="polynomial").apply(E, a)
    np.testing.assert_allclose(poly, a.current + 0.2 * 7**-0.5 * (a.local - a.current))
    s = staleness_function("hinge", a=10, b=4)
    assert s(4) == 1.0 and s(6) == pytest.approx(1 / 21)
    with pytest.raises(ParameterError):
        staleness_function("exponential")


@given(seeds)
def test_asgd_applies_the_stale_update(seed):
    a = _arrival(seed)
    new = ASGD(server_lr=2.0).apply(E, a)
    np.testing.assert_allclose(new, a.current + 2.0 * 0.2 * (a.local - a.base), atol=1e-14)


@given(seeds, st.floats(-1, 1), st.floats(0, 1))
def test_orthocorrect_is_tr_equation_15(seed, vartheta, alpha):
    a = _arrival(seed)
    u, d = a.local - a.base, a.current - a.base
    rate = 1.5 * a.weight
    rule = OrthoCorrect(alpha, vartheta, server_lr=1.5)
    new = rule.apply(E, a)
    cos = u @ d / np.linalg.norm(u) / np.linalg.norm(d)
    if cos <= vartheta:
        expected = a.current + rate * (u - (u @ d) / (d @ d) * d)
        assert rule.projections == 1
    else:
        expected = a.current + rate * (u - alpha * d)  # x^tau - eta * (Delta + alpha (x^tau - x^t))
        assert rule.projections == 0
    np.testing.assert_allclose(new, expected, atol=1e-12)


@given(seeds)
def test_orthostrict_makes_asgd_and_fedasync_coincide(seed):
    a = _arrival(seed)
    np.testing.assert_allclose(
        OrthoStrict(alpha=0.0).apply(E, a), OrthoStrict(alpha=1.0).apply(E, a), atol=1e-12
    )


def test_zero_drift_skips_the_projection():
    a = _arrival()
    a.current = a.base.copy()
    rule = FedOrtho(server_lr=1.0)
    np.testing.assert_allclose(rule.apply(E, a), FedAsync(server_lr=1.0).apply(E, a))
    assert rule.projections == 0


def test_fedortho_and_fedgs_are_orthodc_over_fedasync():
    a = _arrival(seed=4)
    u, d = a.local - a.base, a.current - a.base
    orth = a.current + a.weight * (u - (u @ d) / (d @ d) * d)
    np.testing.assert_allclose(FedOrtho().apply(E, a), orth, atol=1e-12)
    gs = FedGS().apply(E, a)
    expected = orth if u @ d <= 0 else FedAsync().apply(E, a)
    np.testing.assert_allclose(gs, expected, atol=1e-12)


def test_orthodyn_follows_its_schedule():
    rule = OrthoDyn(switch_schedule(10))
    early, late = _arrival(version=5), _arrival(version=15)
    np.testing.assert_allclose(rule.apply(E, early), OrthoCorrect(0, 0).apply(E, early))
    np.testing.assert_allclose(rule.apply(E, late), OrthoCorrect(1, 0).apply(E, late))
    with pytest.raises(ParameterError):
        OrthoCorrect(0.0, 1.5)


def test_dcasgd_constant_and_adaptive_lambda():
    a = _arrival(seed=2)
    delta, d = a.base - a.local, a.current - a.base
    fixed = DCASGD(server_lr=1.0, lambda0=0.3, adaptive=False).apply(E, a)
    np.testing.assert_allclose(fixed, a.current - a.weight * (delta + 0.3 * delta * delta * d))
    rule = DCASGD(server_lr=1.0, lambda0=2.0, adaptive=True, momentum=0.9)
    b = _arrival(seed=3)
    rule.apply(E, a)
    second = rule.apply(E, b)
    delta_b, d_b = b.base - b.local, b.current - b.base
    ms = 0.9 * (0.1 * delta * delta) + 0.1 * delta_b * delta_b
    lam = 2.0 / (np.sqrt(ms) + 1e-7)
    np.testing.assert_allclose(second, b.current - b.weight * (delta_b + lam * delta_b**2 * d_b))


def test_asyncfeded_rate_epochs_and_warmup():
    rule = AsyncFedED(
        server_lr=1.0, gamma_bar=1.0, kappa=0.5, warmup=10, initial_epochs=3, eps=1e-8
    )
    rule.reset(E, 4)
    a = _arrival(version=20, client=2)
    u, d = a.local - a.base, a.current - a.base
    gamma = np.linalg.norm(d) / np.linalg.norm(u)
    new = rule.apply(E, a)
    np.testing.assert_allclose(new, a.current + a.weight / (gamma + 1e-8) * u)
    expected_epochs = min(max(3 + int(np.floor((1.0 - gamma) / 0.5)), 1), 20)
    assert rule.local_epochs(2) == expected_epochs
    assert rule.local_epochs(0) == 3
    warm = _arrival(version=3, client=0)
    np.testing.assert_allclose(
        rule.apply(E, warm),
        warm.current + warm.weight / (1.0 + 1e-8) * (warm.local - warm.base),
    )
    assert rule.local_epochs(0) == 3  # gamma = gamma_bar during warm-up: no change


def test_fedbuff_reads_only_the_sum_and_steps_every_k():
    rule = FedBuff(buffer_size=3)
    rule.reset(E, 5)
    arrivals = [_arrival(seed=s) for s in range(3)]
    current = arrivals[0].current
    for a in arrivals:
        a.current = current
    assert rule.apply(E, arrivals[0]) is None and rule.apply(E, arrivals[1]) is None
    new = rule.apply(E, arrivals[2])
    total = sum(a.base - a.local for a in arrivals)
    np.testing.assert_allclose(new, current - total / 3, atol=1e-14)
    assert rule.buffer.count == 0
    scaled = FedBuff(buffer_size=1, server_lr=1.0, staleness_scaling=True)
    a = _arrival(staleness=3)
    np.testing.assert_allclose(scaled.apply(E, a), a.current - (a.base - a.local) / 2.0)


def test_sum_buffer_exposes_no_individual_update():
    buf = SumBuffer()
    buf.add(np.ones(3))
    buf.add(2 * np.ones(3), weight=0.5)
    np.testing.assert_allclose(buf.total(), 2 * np.ones(3))
    assert buf.count == 2 and not hasattr(buf, "updates")
    buf.clear()
    with pytest.raises(ParameterError):
        buf.total()


def test_fedbuff_on_a_manifold_projects_inside_the_reach_only():
    S = riemfl.Stiefel(5, 2)
    rng = np.random.default_rng(0)
    x = S.random_point(rng=rng)
    near = S.retract(x, 0.05 * S.random_tangent(x, rng=rng))
    small = Arrival(0, x, near, x, 0, 1.0, 0)
    new = FedBuff(buffer_size=1, server_lr=1.0).apply(S, small)
    S.check_point(new)
    far = Arrival(0, x, -x, x, 0, 1.0, 0)  # |beta * delta| = |2x| = 2 sqrt(2) > reach 1
    with pytest.raises(ProjectionError, match="proximal-smoothness radius"):
        FedBuff(buffer_size=1, server_lr=1.0).apply(S, far)
    shrunk = FedBuff(buffer_size=1, server_lr=1.0, outside_reach="shrink").apply(S, far)
    S.check_point(shrunk)


@pytest.mark.parametrize(
    "rule",
    [
        FedAsync(server_lr=5.0),
        ASGD(server_lr=5.0),
        FedOrtho(server_lr=5.0),
        DCASGD(server_lr=2.0),
        AsyncFedED(server_lr=0.5),
    ],
)
def test_rules_keep_a_stiefel_model_on_the_manifold(rule):
    S = riemfl.Stiefel(6, 2)
    rng = np.random.default_rng(1)
    base = S.random_point(rng=rng)
    current = S.retract(base, 0.1 * S.random_tangent(base, rng=rng))
    local = S.retract(base, 0.1 * S.random_tangent(base, rng=rng))
    rule.reset(S, 3)
    S.check_point(rule.apply(S, Arrival(0, base, local, current, 2, 0.3, 20)))


def test_a_zero_update_against_a_drift_does_not_move_the_model():
    """OrthoDC's pi(., ., 0) = 0 (Licudi et al. 2025, Alg. 3): a zero update is orthogonal."""
    base, current = np.zeros(4), np.eye(4)[0]
    a = Arrival(0, base, base.copy(), current, 1, 0.5, 5)
    for rule in (OrthoStrict(alpha=0.0), OrthoStrict(alpha=1.0), FedOrtho(), FedGS()):
        np.testing.assert_array_equal(rule.apply(E, a), current)
    # below vartheta = 0 the base rule applies: FedAsync's pull back towards x_i = x^t
    np.testing.assert_allclose(OrthoCorrect(1.0, -0.5).apply(E, a), 0.5 * current)


def test_asyncfeded_warmup_includes_version_ten():
    rule = AsyncFedED(server_lr=1.0, gamma_bar=1.0, warmup=10, eps=1e-8)
    rule.reset(E, 3)
    at_ten = _arrival(version=10)
    u = at_ten.local - at_ten.base
    np.testing.assert_allclose(
        rule.apply(E, at_ten), at_ten.current + at_ten.weight / (1.0 + 1e-8) * u
    )
    assert rule.last_gamma == 1.0
    rule.apply(E, _arrival(version=11))
    assert rule.last_gamma != 1.0


def test_fedbuff_uses_the_local_reach_on_fixed_rank():
    """FixedRank has no uniform reach: FedBuff checks sigma_r(x)/sqrt 2 instead."""
    from riemfl.manifolds import FixedRank

    m = FixedRank(5, 4, 2)
    x = m.random_point(rng=0)
    reach = float(m.local_reach(x))
    u = m.random_tangent(x, rng=1)
    far = x + (2 * reach / np.linalg.norm(u)) * u  # an update twice the local reach away
    with pytest.raises(ProjectionError, match="proximal-smoothness radius"):
        FedBuff(buffer_size=1, server_lr=1.0).apply(m, Arrival(0, x, far, x, 0, 0.5, 0))
    shrunk = FedBuff(buffer_size=1, server_lr=1.0, outside_reach="shrink")
    m.check_point(shrunk.apply(m, Arrival(0, x, far, x, 0, 0.5, 0)))

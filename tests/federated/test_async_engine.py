"""The discrete-event simulator: special cases, determinism, staleness, memory, timing models."""

from __future__ import annotations

import numpy as np
import pytest
from _problems import QuadraticProblem
from hypothesis import given, settings
from hypothesis import strategies as st

import riemfl
from riemfl.errors import ParameterError
from riemfl.federated import RunOptions
from riemfl.federated.async_engine import VersionStore, run_async
from riemfl.federated.async_rules import ASGD, FedAsync, FedBuff, OrthoStrict
from riemfl.federated.async_scheduler import WaitingQueue
from riemfl.federated.history import History
from riemfl.federated.local import ProblemTrainer
from riemfl.federated.timing import ExponentialTime, LogNormalTime, ProportionalTime, TraceTime


@pytest.fixture
def euclid_trainer():
    problem = QuadraticProblem(riemfl.Euclidean(5, 2), n=4, p=6, seed=2, linear=1.0)
    return ProblemTrainer(problem, step_size=0.01, local_steps=3)


@pytest.fixture
def stiefel_trainer():
    return ProblemTrainer(QuadraticProblem(riemfl.Stiefel(6, 2), n=5, p=8, seed=1), 0.02, 3)


def test_fedbuff_with_zero_delays_and_k_equal_n_is_fedavg(euclid_trainer):
    """Equal compute times: every client trains on the same version, once per server step."""
    tr = euclid_trainer
    n = tr.n_clients
    x0 = np.random.default_rng(0).normal(size=(5, 2))
    h = run_async(tr, FedBuff(buffer_size=n), 6, x0=x0, options=RunOptions(record_every=None))
    x = x0
    for _ in range(6):
        x = np.mean([tr.train(i, x, None) for i in range(n)], axis=0)
    np.testing.assert_allclose(h.final_point, x, atol=1e-12)
    assert set(h.log["staleness"]) == {0}


def test_fedbuff_with_k_one_is_asynchronous_sgd(euclid_trainer):
    tr = euclid_trainer
    options = RunOptions(seed=3, record_every=None)
    kw = {"x0": np.ones((5, 2)), "timing": ExponentialTime(1.0), "options": options}
    buff = run_async(tr, FedBuff(buffer_size=1, server_lr=0.5), 30, **kw)
    asgd = run_async(tr, ASGD(server_lr=0.5 * tr.n_clients), 30, weights="uniform", **kw)
    np.testing.assert_allclose(buff.final_point, asgd.final_point, atol=1e-12)
    assert max(buff.log["staleness"]) > 0  # the runs really were asynchronous


def test_orthostrict_asgd_and_fedasync_coincide_in_a_run(euclid_trainer):
    options = RunOptions(seed=1, record_every=None)
    kw = {"x0": np.ones((5, 2)), "timing": ExponentialTime(1.0), "options": options}
    a = run_async(euclid_trainer, OrthoStrict(alpha=0.0, server_lr=2.0), 25, **kw)
    b = run_async(euclid_trainer, OrthoStrict(alpha=1.0, server_lr=2.0), 25, **kw)
    np.testing.assert_allclose(a.final_point, b.final_point, atol=1e-12)


def test_runs_are_reproducible_from_the_seed(stiefel_trainer):
    kw = {"workers": 3, "timing": LogNormalTime(1.0, 0.8)}
    a = run_async(stiefel_trainer, FedAsync(server_lr=3.0), 40, options=RunOptions(seed=5), **kw)
    b = run_async(stiefel_trainer, FedAsync(server_lr=3.0), 40, options=RunOptions(seed=5), **kw)
    c = run_async(stiefel_trainer, FedAsync(server_lr=3.0), 40, options=RunOptions(seed=6), **kw)
    assert a.log == b.log
    assert a.same_results(b)  # everything but the measured wall-clock column
    np.testing.assert_array_equal(a.final_point, b.final_point)
    assert a.log["client"] != c.log["client"]
    stiefel_trainer.manifold.check_point(a.final_point)


def test_version_store_holds_only_versions_in_use(stiefel_trainer):
    for workers in (1, 2, 5):
        h = run_async(
            stiefel_trainer,
            FedAsync(server_lr=3.0),
            60,
            workers=workers,
            timing=ExponentialTime([0.2, 1.0, 3.0, 5.0, 8.0]),
            options=RunOptions(seed=2, record_every=None),
        )
        assert h.peak_versions <= workers + 1
        if workers == 5:
            assert h.peak_versions > 2  # slow clients really held old versions


def test_version_store_unit():
    store = VersionStore("x0")
    v0 = store.acquire()
    store.advance("x1")
    assert len(store) == 2 and store.get(v0) == "x0"
    store.release(v0)
    assert len(store) == 1 and store.model == "x1"
    store.advance("x2")  # nobody holds version 1
    assert len(store) == 1 and store.current == 2


def test_max_staleness_drops_stale_updates(stiefel_trainer):
    h = run_async(
        stiefel_trainer,
        FedAsync(server_lr=3.0),
        60,
        timing=ExponentialTime([0.1, 0.1, 1, 5, 9]),
        max_staleness=2,
        options=RunOptions(seed=0),
    )
    applied = np.array(h.log["applied"])
    staleness = np.array(h.log["staleness"])
    assert (~applied).sum() == h.metrics["dropped"][-1] > 0
    assert staleness[applied].max() <= 2 and staleness[~applied].min() > 2


@settings(max_examples=60, deadline=None)
@given(
    tau=st.integers(0, 4),
    workers=st.integers(1, 5),
    buffer_size=st.integers(1, 3),
    means=st.lists(st.floats(0.05, 10.0), min_size=5, max_size=5),
    seed=st.integers(0, 2**16),
)
def test_block_policy_bounds_every_update_and_never_deadlocks(
    tau, workers, buffer_size, means, seed
):
    """The block rule keeps every update within tau, drops nothing and reaches the last step."""
    trainer = ProblemTrainer(QuadraticProblem(riemfl.Euclidean(3, 1), n=5, p=4, seed=0), 0.05, 2)
    h = run_async(
        trainer,
        FedBuff(buffer_size=buffer_size, server_lr=0.5),
        20,
        workers=workers,
        timing=ExponentialTime(means),
        max_staleness=tau,
        staleness_policy="block",
        options=RunOptions(seed=seed, record_every=20),
    )
    assert max(h.log["staleness"]) <= tau
    assert all(h.log["applied"]) and h.metrics["dropped"][-1] == 0
    assert h.metrics["step"][-1] == 20  # no deadlock: the run reached its last server step
    assert h.peak_versions <= min(workers, tau + 1) + 1


def test_block_policy_against_drop_and_the_unbounded_run(stiefel_trainer):
    kw = {"timing": ExponentialTime([0.1, 0.1, 1, 5, 9]), "options": RunOptions(record_every=10)}
    rule = FedAsync(server_lr=3.0)
    free = run_async(stiefel_trainer, rule, 60, **kw)
    drop = run_async(stiefel_trainer, rule, 60, max_staleness=2, **kw)
    block = run_async(stiefel_trainer, rule, 60, max_staleness=2, staleness_policy="block", **kw)
    assert max(free.log["staleness"]) > 2 and drop.metrics["dropped"][-1] > 0
    assert max(block.log["staleness"]) <= 2 and all(block.log["applied"])
    assert block.metrics["blocked_time"][-1] > 0 == drop.metrics["blocked_time"][-1]
    assert block.metrics["time"][-1] > free.metrics["time"][-1]  # waiting costs virtual time
    assert block.metrics["grad_norm"][-1] < block.metrics["grad_norm"][0]
    assert block.config["staleness_policy"] == "block"
    # a bound that (t - v_min) + |F| never reaches in 60 steps never blocks: the free run
    loose = run_async(stiefel_trainer, rule, 60, max_staleness=66, staleness_policy="block", **kw)
    assert loose.log == free.log and loose.metrics["blocked_time"][-1] == 0
    tau0 = run_async(stiefel_trainer, rule, 20, max_staleness=0, staleness_policy="block", **kw)
    assert set(tau0.log["staleness"]) == {0} and tau0.peak_versions <= 2  # sequential SGD


def test_theory_mode_uniform_arrivals_with_bounded_staleness(euclid_trainer):
    h = run_async(
        euclid_trainer,
        ASGD(server_lr=1.0),
        400,
        mode="theory",
        max_staleness=3,
        options=RunOptions(seed=0, record_every=None),
    )
    assert max(h.log["staleness"]) == 3 and min(h.log["staleness"]) == 0
    counts = np.bincount(h.log["client"], minlength=euclid_trainer.n_clients)
    assert counts.min() > 60  # 400 uniform draws over 4 clients
    assert h.peak_versions <= 4
    with pytest.raises(ParameterError, match="max_staleness"):
        run_async(euclid_trainer, ASGD(), 5, mode="theory")


def test_paper_scheduler_rank_probabilities():
    sched = WaitingQueue("paper", 2.0, np.random.default_rng(0))
    picks = []
    for _ in range(6000):
        for client, batches in enumerate((1, 2, 3)):  # keys 1, 2, 3: rank = client
            sched.push(client, 0.0, batches)
        picks.append(sched.pop())
        sched._items.clear()
    freq = np.bincount(picks, minlength=3) / len(picks)
    np.testing.assert_allclose(freq, [3 / 6, 2 / 6, 1 / 6], atol=0.02)


def test_paper_scheduler_runs(stiefel_trainer):
    h = run_async(stiefel_trainer, FedAsync(server_lr=3.0), 30, workers=2, scheduler="paper")
    assert h.metrics["step"][-1] == 30
    assert h.metrics["grad_norm"][-1] < h.metrics["grad_norm"][0]


def test_timing_models():
    rng = np.random.default_rng(0)
    assert ProportionalTime(speed=2.0).duration(0, 10, 3, rng) == 5.0
    assert ProportionalTime(slowdown=[1, 3, 1]).duration(1, 4, 3, rng) == 12.0
    draws = [ExponentialTime([1.0, 4.0]).duration(1, 1, 2, rng) for _ in range(4000)]
    assert np.mean(draws) == pytest.approx(4.0, rel=0.06)
    ln = [LogNormalTime(2.0, 0.5).duration(0, 1, 1, rng) for _ in range(4000)]
    assert np.mean(ln) == pytest.approx(2.0, rel=0.05)
    trace = TraceTime([[1.0, 2.0], [3.0]])
    assert [trace.duration(0, 1, 2, rng) for _ in range(3)] == [1.0, 2.0, 1.0]
    with pytest.raises(ParameterError):
        ProportionalTime(speed=0)
    with pytest.raises(ParameterError):
        ExponentialTime([1.0]).duration(0, 1, 2, rng)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"workers": 0},
        {"workers": 99},
        {"mode": "threads"},
        {"scheduler": "lifo"},
        {"max_staleness": -1},
        {"staleness_policy": "wait"},
        {"staleness_policy": "block"},
        {"staleness_policy": "block", "mode": "theory", "max_staleness": 2},
        {"weights": "equal"},
    ],
)
def test_bad_arguments(euclid_trainer, kwargs):
    with pytest.raises(ParameterError):
        run_async(euclid_trainer, FedAsync(), 3, **kwargs)


def test_history_round_trip_and_staleness_stats(tmp_path, stiefel_trainer):
    h = run_async(
        stiefel_trainer,
        FedBuff(buffer_size=2, server_lr=0.5),
        10,
        workers=3,
        timing=ExponentialTime(1.0),
        options=RunOptions(record_every=5),
    )
    back = History.from_json(h.to_json(tmp_path / "h.json"))
    np.testing.assert_equal(back.metrics, h.metrics)
    assert back.log == h.log
    assert h.metrics["step"] == [0.0, 5.0, 10.0]
    assert h.to_csv().splitlines()[0].startswith("step,time,updates,dropped")
    stats = h.staleness_stats()
    assert stats["max"] >= stats["mean"] >= 0


def test_trace_time_positions_are_run_state_not_settings():
    """TraceTime's positions: reset at a run's start, saved and restored, refused when they lie
    outside a trace, and no part of the run's fingerprint."""
    from riemfl.errors import CheckpointError
    from riemfl.federated.fingerprint import settings as fingerprint_settings

    rng = np.random.default_rng(0)
    trace = TraceTime([[1.0, 2.0, 4.0], [3.0]])
    before = fingerprint_settings(trace)
    assert trace.state_dict() == {"position": [0, 0]}
    assert [trace.duration(0, 1, 2, rng) for _ in range(2)] == [1.0, 2.0]
    saved = trace.state_dict()
    assert saved == {"position": [2, 0]}
    assert fingerprint_settings(trace) == before
    other = TraceTime([[1.0, 2.0, 4.0], [3.0]])
    other.load_state_dict(saved)
    assert other.duration(0, 1, 2, rng) == trace.duration(0, 1, 2, rng) == 4.0
    trace.reset(2)
    assert trace.state_dict() == {"position": [0, 0]}
    with pytest.raises(ParameterError, match="2 traces for 3 clients"):
        trace.reset(3)
    assert other.duration(0, 1, 2, rng) == 1.0 and other.state_dict() == {"position": [1, 0]}
    for bad, words in [
        ({"position": [0, 1]}, "entry 1 in 0..0"),
        ({"position": [3, 0]}, r"ints in \[0, 2\]"),
        ({"position": [0]}, "a list of 2 ints"),
        ({"position": [0, 0], "next": 1}, "unexpected state key 'next'"),
    ]:
        with pytest.raises(CheckpointError, match=words):
            other.load_state_dict(bad)
    assert other.state_dict() == {"position": [1, 0]}  # a refused state changes nothing
    assert ProportionalTime().state_dict() == {}

"""FedBuff with a robust aggregator of its buffer and a server optimiser of its step.

The defaults (no aggregator, ``PlainSum()``, ``ServerSGD(1.0)``) are today's FedBuff bit for
bit; FedBuff with ServerAdam is Reddi et al. 2021's FedAdam on the buffer's mean update (an
independent numpy implementation below); a robust aggregator resists a far outlier that moves
the plain sum; a checkpointed run resumes bit for bit with a stateful aggregator and optimiser.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from _fedbuff_runs import fedbuff_run, fedbuff_trainer, same_histories

import riemfl
from riemfl.errors import CheckpointError, ParameterError
from riemfl.federated import (
    Arrival,
    FedBuff,
)
from riemfl.federated.aggregation import Aggregator, PlainSum
from riemfl.federated.buffer_server import StackBuffer
from riemfl.federated.checkpoint import load_checkpoint
from riemfl.federated.privacy import DPSettings
from riemfl.federated.robust import (
    CenteredClipping,
    GeometricMedian,
    Krum,
    MultiKrum,
    TrimmedMean,
)
from riemfl.federated.server_optimizers import ServerAdam, ServerSGD, build_server_optimizer

pytestmark = pytest.mark.filterwarnings("ignore::riemfl.federated.ClientDroppedWarning")

E = riemfl.Euclidean(3, 2)


# ----------------------------------------------------------------------------- helpers
class ExactStackSum(Aggregator):
    """An aggregator that needs each update and returns their exact sum (the stack path)."""

    def aggregate(self, uploads, phase):
        return {k: v.sum(0) for k, v in uploads.items()}, len(next(iter(uploads.values())))


class Recording(GeometricMedian):
    """GeometricMedian that keeps the stacks it was given."""

    def __init__(self):
        super().__init__()
        self.stacks = []

    def aggregate(self, uploads, phase):
        self.stacks.append(uploads["d"].copy())
        return super().aggregate(uploads, phase)


def _arrivals(rng, current, k, scale=0.1, stale=None):
    """k arrivals against ``current``, each from a base near it, moved by about ``scale``."""
    out = []
    for i in range(k):
        base = current if stale is None else current + stale * rng.normal(size=current.shape)
        local = base + scale * rng.normal(size=current.shape)
        out.append(Arrival(i % 3, base, local, current, i % 3, 0.2, 0))
    return out


def _feed(rule, manifold, arrivals):
    """Apply ``arrivals`` (their ``current`` replaced by the rule's model); the models made."""
    models = []
    for a in arrivals:
        new = rule.apply(manifold, a)
        if new is not None:
            models.append(new)
    return models


# ----------------------------------------------------------------------------- bit for bit
DEFAULT_EQUIVALENTS = {
    "plain-sum": lambda **kw: FedBuff(3, aggregator=PlainSum(), **kw),
    "sgd": lambda **kw: FedBuff(3, server_optimizer=build_server_optimizer("sgd", 1.0), **kw),
    "plain-sum-and-sgd": lambda **kw: FedBuff(
        3, aggregator=PlainSum(), server_optimizer=ServerSGD(1.0), **kw
    ),
}


@pytest.mark.parametrize("name", sorted(DEFAULT_EQUIVALENTS))
def test_the_defaults_give_plain_fedbuff_bit_for_bit(name):
    make = DEFAULT_EQUIVALENTS[name]
    same_histories(fedbuff_run(make()), fedbuff_run(FedBuff(3)), rule_config=False)
    stiefel = fedbuff_trainer(riemfl.Stiefel(6, 2))
    kw = {"staleness_scaling": True, "outside_reach": "shrink", "server_lr": 2.0}
    shrunk = fedbuff_run(make(**kw), trainer=stiefel)
    same_histories(shrunk, fedbuff_run(FedBuff(3, **kw), trainer=stiefel), rule_config=False)
    private = {"privacy": DPSettings(clip=0.5, noise_multiplier=0.8)}
    same_histories(
        fedbuff_run(make(**private)), fedbuff_run(FedBuff(3, **private)), rule_config=False
    )


def test_the_stack_of_an_exact_sum_gives_plain_fedbuff_bit_for_bit():
    rule = FedBuff(3, aggregator=ExactStackSum())
    assert isinstance(rule.buffer, StackBuffer) and not rule.sum_only
    same_histories(fedbuff_run(rule), fedbuff_run(FedBuff(3)), rule_config=False)


def test_a_shrunk_step_is_the_plain_one_bit_for_bit():
    sphere = riemfl.Sphere(4)
    x = sphere.random_point(rng=np.random.default_rng(0))
    far = Arrival(0, x, -x, x, 0, 0.5, 0)  # an ambient step of length 2, beyond the radius
    plain = FedBuff(1, server_lr=1.0, outside_reach="shrink")
    sgd = FedBuff(1, server_lr=1.0, outside_reach="shrink", server_optimizer=ServerSGD(1.0))
    for rule in (plain, sgd):
        rule.reset(sphere, 1)
    np.testing.assert_array_equal(sgd.apply(sphere, far), plain.apply(sphere, far))


# ----------------------------------------------------------------------------- FedAdam
def fedadam(x, updates, lr, b1, b2, tau):
    """Reddi et al. 2021, Alg. 2 (FedAdam), on the server updates ``updates`` (one per round,
    the mean client update), from m = 0 and v = tau^2; the iterates after each round."""
    m, v, out = np.zeros_like(x), np.full_like(x, tau**2), []
    for delta in updates:
        m = b1 * m + (1 - b1) * delta
        v = b2 * v + (1 - b2) * delta**2
        x = x + lr * m / (np.sqrt(v) + tau)
        out.append(x)
    return out


def test_fedbuff_with_server_adam_is_fedadam_on_the_buffers_mean_update():
    rng = np.random.default_rng(7)
    k, rounds, lr, betas, tau = 4, 5, 0.3, (0.8, 0.95), 1e-2
    rule = FedBuff(k, server_optimizer=ServerAdam(lr, betas=betas, eps=tau))
    rule.reset(E, 3)
    x = rng.normal(size=E.point_shape)
    ours, means, start = [], [], x
    for _ in range(rounds):
        arrivals = _arrivals(rng, x, k, stale=0.05)  # stale bases: x_i - x^t, not x_i - x
        means.append(np.mean([a.local - a.base for a in arrivals], axis=0))
        (x,) = _feed(rule, E, arrivals)
        ours.append(x)
    expected = fedadam(start, means, lr, *betas, tau)
    np.testing.assert_allclose(np.array(ours), np.array(expected), rtol=1e-12, atol=1e-14)
    assert not np.allclose(ours[-1], start + np.sum(means, axis=0))  # not FedBuff's own steps


def test_server_adam_runs_in_the_engine_and_changes_the_run():
    adam = fedbuff_run(FedBuff(3, server_optimizer=ServerAdam(0.05)))
    plain = fedbuff_run(FedBuff(3))
    assert adam.step[-1] == plain.step[-1] == 12
    assert np.isfinite(adam.final_point).all()
    assert not np.array_equal(adam.final_point, plain.final_point)


# ----------------------------------------------------------------------------- robustness
ROBUST = {
    "median": GeometricMedian,
    "trimmed": lambda: TrimmedMean(0.2),
    "krum": lambda: Krum(1),
    "multikrum": lambda: MultiKrum(1),
    "clipped": lambda: CenteredClipping(0.05, iterations=60, center="zero"),
}


@pytest.mark.parametrize("name", sorted(ROBUST))
def test_a_robust_aggregator_ignores_a_far_outlier_that_moves_the_sum(name):
    rng = np.random.default_rng(3)
    x = rng.normal(size=E.point_shape)
    direction = rng.normal(size=E.point_shape)
    honest = [x + 0.5 * direction + 0.01 * rng.normal(size=x.shape) for _ in range(4)]
    outlier = x + 1e3 * rng.normal(size=x.shape)
    arrivals = [Arrival(i, x, local, x, 0, 0.2, 0) for i, local in enumerate([*honest, outlier])]
    robust = FedBuff(5, aggregator=ROBUST[name]())
    plain = FedBuff(5)
    for rule in (robust, plain):
        rule.reset(E, 5)
    (moved,) = _feed(robust, E, arrivals)
    (summed,) = _feed(plain, E, arrivals)
    target = np.mean(honest, axis=0)  # beta = 1/K: a robust centre of x_i - x, added to x
    assert np.linalg.norm(moved - target) < 0.05
    assert np.linalg.norm(summed - target) > 50.0
    assert robust.row()  # the aggregator's columns


def test_krum_needs_a_buffer_of_2f_plus_3_updates():
    with pytest.raises(ParameterError, match=r"m >= 2f \+ 3 = 7 updates, got buffer_size 6"):
        FedBuff(6, aggregator=Krum(2))
    with pytest.raises(ParameterError, match="n_selected = 5 > m - f = 4"):
        FedBuff(5, aggregator=MultiKrum(1, n_selected=5))
    assert FedBuff(7, aggregator=Krum(2)).buffer_size == 7


def test_staleness_weights_are_applied_before_aggregation():
    rng = np.random.default_rng(5)
    recording = Recording()
    rule = FedBuff(3, staleness_scaling=True, aggregator=recording)
    rule.reset(E, 3)
    x = rng.normal(size=E.point_shape)
    arrivals = _arrivals(rng, x, 3)
    _feed(rule, E, arrivals)
    weighted = [(1.0 / np.sqrt(1.0 + a.staleness)) * (a.base - a.local) for a in arrivals]
    np.testing.assert_array_equal(recording.stacks[0], np.stack(weighted))


# ----------------------------------------------------------------------------- state
def _stateful():
    return FedBuff(
        4,
        aggregator=CenteredClipping(0.05, iterations=2, center="previous"),
        server_optimizer=ServerAdam(0.05),
    )


def test_a_resumed_run_is_bit_for_bit_the_uninterrupted_one(tmp_path):
    ref = fedbuff_run(_stateful(), 24, record_every=3)
    assert max(ref.metrics["clipped"]) > 0  # the clipping acts; its column is recorded
    path = tmp_path / "run.ckpt"
    saved = {"record_every": 3, "checkpoint": path, "checkpoint_every": 4}
    first = fedbuff_run(_stateful(), 9, **saved)
    assert load_checkpoint(path)["step"] == 9 and first.step[-1] == 9
    resumed = fedbuff_run(_stateful(), 24, **saved)
    same_histories(resumed, ref)


def test_a_state_taken_mid_buffer_continues_bit_for_bit():
    rng = np.random.default_rng(11)
    x = rng.normal(size=E.point_shape)
    rule = _stateful()
    rule.reset(E, 3)
    for _ in range(2):  # two server steps: the centre and the moments are set
        (x,) = _feed(rule, E, _arrivals(rng, x, 4, scale=0.3))
    head = _arrivals(rng, x, 2, scale=0.3)
    _feed(rule, E, head)
    state = rule.state_dict()
    assert state["buffer"]["updates"].shape == (2, *E.point_shape)
    assert state["optimizer"]["t"] == 2 and "0" in state["aggregator"]["centres"]
    other = _stateful()
    other.reset(E, 3)
    other.load_state_dict(copy.deepcopy(state))
    tail = _arrivals(rng, x, 6, scale=0.3)
    for a, b in zip(_feed(rule, E, tail), _feed(other, E, tail), strict=True):
        np.testing.assert_array_equal(a, b)
    assert rule.row() == other.row()


def test_two_runs_of_one_rule_agree():
    rule = _stateful()
    first = fedbuff_run(rule, 8)
    same_histories(fedbuff_run(rule, 8), first)


def test_a_misshapen_optimizer_state_is_refused_and_nothing_changes():
    rng = np.random.default_rng(2)
    x = rng.normal(size=E.point_shape)
    rule = _stateful()
    rule.reset(E, 3)
    (x,) = _feed(rule, E, _arrivals(rng, x, 4))
    state = rule.state_dict()
    before = rule.state_dict()
    bad = copy.deepcopy(state)
    bad["optimizer"]["m"] = np.zeros(6)
    with pytest.raises(CheckpointError, match="optimizer.m"):
        rule.load_state_dict(bad)
    bad = copy.deepcopy(state)
    bad["optimizer"]["v"] = np.zeros((3, 3))
    with pytest.raises(CheckpointError, match="optimizer"):
        rule.load_state_dict(bad)
    bad = copy.deepcopy(state)
    bad["buffer"]["updates"] = np.zeros((4, *E.point_shape))  # a full buffer is never saved
    with pytest.raises(CheckpointError, match="buffer.updates"):
        rule.load_state_dict(bad)
    after = rule.state_dict()
    np.testing.assert_array_equal(after["optimizer"]["m"], before["optimizer"]["m"])
    np.testing.assert_array_equal(after["optimizer"]["v"], before["optimizer"]["v"])


# ----------------------------------------------------------------------------- settings
def test_describe_names_the_aggregator_and_the_optimiser_and_leaves_the_default_alone():
    plain = FedBuff(3).describe()
    assert "aggregator" not in plain and "server_optimizer" not in plain
    rule = FedBuff(5, aggregator=TrimmedMean(0.2), server_optimizer=ServerAdam(0.1))
    described = rule.describe()
    assert described["aggregator"] == {"kind": "TrimmedMean", **TrimmedMean(0.2).describe()}
    assert described["server_optimizer"]["kind"] == "ServerAdam"
    assert described["server_optimizer"]["lr"] == 0.1
    assert described != FedBuff(5, aggregator=GeometricMedian()).describe()
    assert rule.aggregator is not None and isinstance(rule.server_optimizer, ServerAdam)
    assert FedBuff(3, aggregator=PlainSum()).sum_only
    assert not FedBuff(5, aggregator=GeometricMedian()).sum_only


def test_refusals():
    dp = DPSettings(clip=1.0, noise_multiplier=1.0)
    with pytest.raises(ParameterError, match="must be an instance of"):
        FedBuff(3, aggregator="median")
    with pytest.raises(ParameterError, match="sum of clipped updates"):
        FedBuff(5, aggregator=GeometricMedian(), privacy=dp)
    with pytest.raises(ParameterError, match="sum of clipped updates"):
        FedBuff(5, aggregator=Krum(1), privacy=dp)
    with pytest.raises(ParameterError, match="server_optimizer must be a ServerOptimizer"):
        FedBuff(3, server_optimizer="adam")
    assert FedBuff(3, aggregator=PlainSum(), privacy=dp).privacy is not None
    assert FedBuff(3, aggregator=ExactStackSum(), privacy=dp).privacy is not None

"""FedBuff with compressed client uploads (``compressor=``).

No compressor is plain FedBuff bit for bit; a lossless top-k reproduces it; the error-feedback
recursion and the clients' random draws are the documented ones, on a hand case; a checkpointed
run resumes bit for bit; error feedback converges where plain top-k stays biased; the
refusals.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from _fedbuff_runs import fedbuff_run, fedbuff_trainer, same_histories

import riemfl
from riemfl.errors import CheckpointError, ParameterError, ShapeError
from riemfl.federated import (
    Arrival,
    FedBuff,
    ProblemTrainer,
    RunOptions,
    run_async,
)
from riemfl.federated.checkpoint import load_checkpoint
from riemfl.federated.compression import make_compressor
from riemfl.federated.privacy import DPSettings
from riemfl.federated.robust import GeometricMedian
from riemfl.federated.server_optimizers import ServerAdam
from riemfl.problems import FunctionProblem

pytestmark = pytest.mark.filterwarnings("ignore::riemfl.federated.ClientDroppedWarning")

E22 = riemfl.Euclidean(2, 2)


# ----------------------------------------------------------------------------- helpers
def _compressed(spec, **kw):
    return FedBuff(3, compressor=make_compressor(spec), **kw)


def _arrive(rule, client, delta, current=None):
    """Client ``client``'s arrival whose update is ``delta`` (x^t - x_i) from ``current``."""
    current = np.zeros_like(delta) if current is None else current
    return rule.apply(E22, Arrival(client, current, current - delta, current, 0, 0.25, 0))


# ----------------------------------------------------------------------------- bit for bit
def test_no_compressor_is_plain_fedbuff_bit_for_bit():
    plain = FedBuff(3)
    unset = FedBuff(3, compressor=None, error_feedback=None, compression_seed=7)
    assert unset.describe() == plain.describe() and "compression" not in plain.describe()
    assert unset.compression is None and unset.upload_nbytes((5, 2), np.float64) is None
    assert unset.sum_only
    same_histories(fedbuff_run(unset), fedbuff_run(plain))
    kw = {"staleness_scaling": True, "outside_reach": "shrink", "server_lr": 2.0}
    stiefel = fedbuff_trainer(riemfl.Stiefel(6, 2))
    same_histories(
        fedbuff_run(FedBuff(3, compressor=None, **kw), trainer=stiefel),
        fedbuff_run(FedBuff(3, **kw), trainer=stiefel),
    )
    unset.reset(E22, 3)
    assert set(unset.state_dict()) == {"buffer"}


@pytest.mark.parametrize("error_feedback", [None, False])
def test_a_lossless_top_k_reproduces_plain_fedbuff(error_feedback):
    """top-k with k = d sends every entry (and its index): the buffer receives each update as it
    is, and the residual stays zero."""
    lossless = _compressed("topk:1.0", error_feedback=error_feedback)
    ours, plain = fedbuff_run(lossless, 16), fedbuff_run(FedBuff(3), 16)
    assert np.abs(ours.final_point - plain.final_point).max() <= 1e-12
    for column in ("loss", "grad_norm"):
        np.testing.assert_allclose(ours.metrics[column], plain.metrics[column], rtol=1e-12)
    assert ours.config["rule"]["compression"]["name"] == "topk"
    kw = {"staleness_scaling": True, "outside_reach": "shrink", "server_lr": 2.0}
    stiefel = fedbuff_trainer(riemfl.Stiefel(6, 2))
    shrunk = fedbuff_run(_compressed("topk:1.0", **kw), trainer=stiefel)
    assert (
        np.abs(
            shrunk.final_point - fedbuff_run(FedBuff(3, **kw), trainer=stiefel).final_point
        ).max()
        <= 1e-12
    )


# ----------------------------------------------------------------------------- the recursion
def test_the_error_feedback_recursion_on_a_hand_case():
    """top-k keeping 1 of 4 entries: client 0 sends its largest entry and keeps the rest, which
    joins its next update; client 1's residual is its own."""
    rule = FedBuff(3, server_lr=1.0, compressor=make_compressor("topk:0.25"))
    rule.reset(E22, 3)
    d1 = np.array([[3.0, -1.0], [0.5, 2.0]])
    d2 = np.array([[1.0, 0.0], [0.0, 0.5]])
    d3 = np.array([[0.0, 4.0], [0.0, 0.0]])
    assert _arrive(rule, 0, d1) is None  # sends [[3, 0], [0, 0]], keeps [[0, -1], [0.5, 2]]
    state = rule.state_dict()["compression"]
    np.testing.assert_array_equal(state["residuals"][0], [[0.0, -1.0], [0.5, 2.0]])
    assert _arrive(rule, 1, d3) is None  # sends all of it, keeps nothing
    new = _arrive(rule, 0, d2)  # v = [[1, -1], [0.5, 2.5]]: sends [[0, 0], [0, 2.5]]
    np.testing.assert_array_equal(new, -np.array([[3.0, 4.0], [0.0, 2.5]]))
    state = rule.state_dict()["compression"]
    np.testing.assert_array_equal(state["residuals"][0], [[1.0, -1.0], [0.5, 0.0]])
    np.testing.assert_array_equal(state["residuals"][1:], 0.0)
    assert state["uploads"] == [2, 1, 0] and state["compressor"] == {}


def test_without_error_feedback_the_rest_is_lost():
    rule = FedBuff(2, server_lr=1.0, compressor=make_compressor("topk:0.25"), error_feedback=False)
    rule.reset(E22, 1)
    _arrive(rule, 0, np.array([[3.0, -1.0], [0.5, 2.0]]))
    new = _arrive(rule, 0, np.array([[1.0, 0.0], [0.0, 0.5]]))
    np.testing.assert_array_equal(new, -np.array([[4.0, 0.0], [0.0, 0.0]]))
    assert rule.state_dict()["compression"]["residuals"] is None


def test_the_kth_upload_of_client_i_draws_from_seed_k_i():
    compressor = make_compressor("qsgd:2")
    rule = FedBuff(1, server_lr=1.0, compressor=compressor, compression_seed=9)
    assert not rule.compression.error_feedback  # QSGD is unbiased
    rule.reset(E22, 3)
    rng = np.random.default_rng(0)
    for k, client in enumerate([2, 0, 2, 2]):
        delta = rng.normal(size=(2, 2))
        uploads = rule.state_dict()["compression"]["uploads"][client]
        payload, _ = compressor.encode(
            delta[None], {}, [np.random.default_rng([9, uploads, client])]
        )
        expected = compressor.decode(payload, (2, 2), np.float64)[0]
        np.testing.assert_array_equal(_arrive(rule, client, delta), -expected, err_msg=str(k))
    assert rule.state_dict()["compression"]["uploads"] == [1, 0, 3]


def test_powersgd_keeps_each_clients_factor():
    compressor = make_compressor("rank:1")
    rule = FedBuff(1, server_lr=1.0, compressor=compressor, error_feedback=False)
    rule.reset(E22, 2)
    delta = np.array([[1.0, 2.0], [3.0, -1.0]])
    _arrive(rule, 1, delta)
    factors = rule.state_dict()["compression"]["compressor"]["q"]
    _, expected = compressor.encode(delta[None], compressor.initial_state((2, 2), 1, float), [])
    np.testing.assert_array_equal(factors[1], expected["q"][0])
    np.testing.assert_array_equal(factors[0], compressor.initial_state((2, 2), 1, float)["q"][0])


def test_torch_updates_come_back_as_torch():
    torch = pytest.importorskip("torch")
    rule = FedBuff(1, server_lr=1.0, compressor=make_compressor("topk:0.5"))
    rule.reset(riemfl.Euclidean(4), 1)
    x = torch.zeros(4, dtype=torch.float32)
    local = torch.tensor([-1.0, 3.0, -0.5, 2.0])
    new = rule.apply(riemfl.Euclidean(4), Arrival(0, x, local, x, 0, 1.0, 0))
    assert isinstance(new, torch.Tensor) and new.dtype == torch.float32
    torch.testing.assert_close(new, torch.tensor([0.0, 3.0, 0.0, 2.0]))
    assert rule.state_dict()["compression"]["residuals"].dtype == np.float32


# ----------------------------------------------------------------------------- bytes, settings
@pytest.mark.parametrize("spec", ["topk:0.2", "rank:1", "qsgd:3", "fp16"])
def test_upload_nbytes_is_the_payload(spec):
    rule = _compressed(spec)
    compressor = make_compressor(spec)
    for dtype in (np.float32, np.float64):
        assert rule.upload_nbytes((5, 2), dtype) == compressor.payload_nbytes((5, 2), dtype)
    assert rule.upload_nbytes((5, 2), np.float64) < 5 * 2 * 8
    assert not rule.sum_only  # the server decodes each upload


def test_describe_names_the_compression():
    rule = FedBuff(3, compressor=make_compressor("topk:0.1"), compression_seed=5)
    described = rule.describe()
    assert described["compression"] == {
        "name": "topk",
        "fraction": 0.1,
        "error_feedback": True,
        "seed": 5,
    }
    assert described != FedBuff(3, compressor=make_compressor("topk:0.2")).describe()
    off = FedBuff(3, compressor=make_compressor("topk:0.1"), error_feedback=False).describe()
    assert off["compression"]["error_feedback"] is False
    assert (
        FedBuff(3, compressor=make_compressor("qsgd:2")).describe()["compression"]["error_feedback"]
        is False
    )


def test_compression_composes_with_an_aggregator_and_a_server_optimiser():
    rule = _compressed("rank:1", aggregator=GeometricMedian(), server_optimizer=ServerAdam(0.05))
    h = fedbuff_run(rule, 8)
    assert h.step[-1] == 8 and np.isfinite(h.final_point).all()
    assert h.config["rule"]["compression"]["name"] == "rank"


# ----------------------------------------------------------------------------- state
RESUMED = {
    "topk-ef": lambda: _compressed("topk:0.2"),
    "rank-1": lambda: _compressed("rank:1", server_optimizer=ServerAdam(0.05)),
    "qsgd": lambda: _compressed("qsgd:3"),
}


@pytest.mark.parametrize("name", sorted(RESUMED))
def test_a_resumed_run_is_bit_for_bit_the_uninterrupted_one(tmp_path, name):
    make = RESUMED[name]
    ref = fedbuff_run(make(), 24, record_every=3)
    path = tmp_path / "run.ckpt"
    saved = {"record_every": 3, "checkpoint": path, "checkpoint_every": 4}
    first = fedbuff_run(make(), 9, **saved)
    checkpoint = load_checkpoint(path)
    assert checkpoint["step"] == 9 and first.step[-1] == 9
    resumed = fedbuff_run(make(), 24, **saved)
    same_histories(resumed, ref)
    assert not np.array_equal(ref.final_point, fedbuff_run(FedBuff(3), 24).final_point)


def test_a_state_taken_mid_buffer_continues_bit_for_bit():
    rng = np.random.default_rng(11)

    def make():
        rule = FedBuff(4, compressor=make_compressor("rank:1"))
        rule.reset(E22, 3)
        return rule

    rule = make()
    x = rng.normal(size=(2, 2))
    for client in (0, 1, 2, 0, 1, 2):  # one server step and two arrivals
        out = _arrive(rule, client, 0.1 * rng.normal(size=(2, 2)), x)
        x = x if out is None else out
    state = rule.state_dict()
    other = make()
    other.load_state_dict(copy.deepcopy(state))
    for client in (1, 0, 0, 2, 1, 2, 0, 1):
        delta = 0.1 * rng.normal(size=(2, 2))
        a, b = _arrive(rule, client, delta, x), _arrive(other, client, delta, x)
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a, b)
            x = a
    later, again = rule.state_dict()["compression"], other.state_dict()["compression"]
    np.testing.assert_array_equal(later["residuals"], again["residuals"])
    np.testing.assert_array_equal(later["compressor"]["q"], again["compressor"]["q"])


def test_two_runs_of_one_rule_agree():
    rule = _compressed("topk:0.2")
    first = fedbuff_run(rule, 8)
    same_histories(fedbuff_run(rule, 8), first)


def test_a_wrong_state_is_refused_and_nothing_changes():
    rule = FedBuff(4, compressor=make_compressor("rank:1"))
    rule.reset(E22, 3)
    _arrive(rule, 0, np.array([[1.0, 2.0], [0.0, -1.0]]))
    good = rule.state_dict()
    wrong = {
        "compression.uploads": lambda s: s["compression"].__setitem__("uploads", [1, 0]),
        "compression.residuals": lambda s: s["compression"].__setitem__(
            "residuals", np.zeros((3, 4))
        ),
        "compression.compressor.q": lambda s: s["compression"]["compressor"].__setitem__(
            "q", np.zeros((3, 2, 2))
        ),
        "compression.compressor": lambda s: s["compression"]["compressor"].__setitem__(
            "q", np.zeros((3, 2, 1), dtype=np.float32)
        ),
    }
    for key, spoil in wrong.items():
        bad = copy.deepcopy(good)
        spoil(bad)
        with pytest.raises(CheckpointError, match=key.replace(".", r"\.")):
            rule.load_state_dict(bad)
    before = copy.deepcopy(good)
    empty = copy.deepcopy(good)
    empty["compression"]["uploads"] = [0, 0, 0]  # no upload, but residuals
    with pytest.raises(CheckpointError, match="None before any upload"):
        rule.load_state_dict(empty)
    after = rule.state_dict()
    assert after["compression"]["uploads"] == before["compression"]["uploads"]
    np.testing.assert_array_equal(
        after["compression"]["residuals"], before["compression"]["residuals"]
    )


# ----------------------------------------------------------------------------- convergence
def _centres_problem(n=4, shape=(6, 4), seed=0):
    """f_i(x) = |x - c_i|^2 / 2 on Euclidean space: the minimiser is the mean centre."""
    centres = np.random.default_rng(seed).normal(size=(n, *shape))
    losses = [lambda x, c=c: 0.5 * float(np.sum((x - c) ** 2)) for c in centres]
    egrads = [lambda x, c=c: x - c for c in centres]
    return FunctionProblem(riemfl.Euclidean(*shape), losses, egrads), centres.mean(0)


def test_error_feedback_converges_where_plain_top_k_stays_biased():
    problem, target = _centres_problem()
    x0 = np.zeros_like(target)

    def distance(rule):
        trainer = ProblemTrainer(problem, 0.05, 3)
        h = run_async(trainer, rule, 300, x0=x0, options=RunOptions(seed=1, record_every=None))
        return np.linalg.norm(h.final_point - target) / np.linalg.norm(target)

    assert distance(FedBuff(4)) < 1e-12
    with_ef = distance(FedBuff(4, compressor=make_compressor("topk:0.25")))
    without = distance(FedBuff(4, compressor=make_compressor("topk:0.25"), error_feedback=False))
    assert with_ef < 0.1 < 0.2 < without


# ----------------------------------------------------------------------------- refusals
def test_refusals():
    with pytest.raises(ParameterError, match="give a compressor"):
        FedBuff(3, error_feedback=True)
    with pytest.raises(ParameterError, match="compressor must be a"):
        FedBuff(3, compressor="topk:0.1")
    with pytest.raises(ParameterError, match="error_feedback must be True, False or None"):
        FedBuff(3, compressor=make_compressor("topk:0.1"), error_feedback=1)
    with pytest.raises(ParameterError, match="compression_seed"):
        FedBuff(3, compressor=make_compressor("topk:0.1"), compression_seed=-1)
    with pytest.raises(ShapeError, match="matrix updates"):
        FedBuff(3, compressor=make_compressor("rank:1")).validate(riemfl.Sphere(4))
    with pytest.raises(ParameterError, match="rank 3 exceeds"):
        fedbuff_run(_compressed("rank:3"))
    rule = _compressed("topk:0.5")
    with pytest.raises(ParameterError, match="reset the rule"):
        _arrive(rule, 0, np.ones((2, 2)))


@pytest.mark.parametrize("spec", [None, "qsgd:2", "topk:0.2"])
def test_the_engine_counts_the_applied_uploads_bytes(spec):
    """uplink_bytes per client: the applied uploads (updates - dropped) times one upload's
    bytes, the dense array's or the payload's."""
    rule = FedBuff(3) if spec is None else _compressed(spec)
    h = fedbuff_run(rule, steps=6)
    shape, dtype = (5, 2), np.dtype(np.float64)
    one = 10 * 8 if spec is None else make_compressor(spec).payload_nbytes(shape, dtype)
    applied = np.asarray(h.metrics["updates"]) - np.asarray(h.metrics["dropped"])
    np.testing.assert_allclose(h.metrics["uplink_bytes"], applied * one / 5, rtol=0, atol=1e-9)
    assert h.metrics["uplink_bytes"][-1] > 0


def test_a_private_compressed_fedbuff_keeps_the_accountant():
    """Clip, then compress: the epsilon column is the uncompressed private run's."""
    dp = DPSettings(0.05, 1.0)
    plain = fedbuff_run(FedBuff(3, privacy=dp), steps=6)
    packed = fedbuff_run(FedBuff(3, privacy=dp, compressor=make_compressor("qsgd:2")), steps=6)
    assert packed.metrics["epsilon"] == plain.metrics["epsilon"]
    assert not np.array_equal(packed.final_point, plain.final_point)


@pytest.mark.parametrize("mode", ["central", "local"])
def test_the_server_clips_decoded_updates_under_central_noise(mode):
    """With no noise (sigma 0) and one update per buffer, the step is beta times what entered
    the buffer: within C under central noise even though QSGD's decoded update is longer."""
    clip = 0.5
    dp = DPSettings(clip, 0.0, mode=mode)
    rule = FedBuff(1, server_lr=1.0, privacy=dp, compressor=make_compressor("qsgd:1"))
    rule.reset(E22, 2)
    rule.seed(np.random.SeedSequence(0))
    delta = np.array([[3.0, 0.1], [0.2, 0.05]])
    entered = -_arrive(rule, 0, delta).reshape(-1)  # x^t = 0: the new model is -total
    norm = float(np.linalg.norm(entered))
    if mode == "central":
        assert norm <= clip * (1 + 1e-12)
    else:
        assert norm > clip  # QSGD's 1-bit decode of the clipped update is longer than C

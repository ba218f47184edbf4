"""Compressed uploads on the synchronous engine: exact bytes, error feedback, resume, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from riemfl.errors import ParameterError
from riemfl.federated import (
    GeometricMedian,
    RFedAvg,
    RFedProj,
    RFedSVRG,
    RunInterrupted,
    RunOptions,
    ServerAdam,
    ServerOptimized,
    run_sync,
)
from riemfl.federated.algorithm import ClientContext
from riemfl.federated.compressed import PAYLOAD, RESIDUAL, Compressed
from riemfl.federated.compression import make_compressor
from riemfl.federated.interrupt import request_interrupt
from riemfl.federated.privacy import DPSettings
from riemfl.problems import KPCAProblem

ROUNDS = 6


@pytest.fixture(scope="module")
def kpca():
    return KPCAProblem.synthetic(n_clients=6, d=8, k=2, p=5, seed=0)


def _tangent():
    return RFedAvg(0.01, 3, upload="tangent")


def _run(problem, rule, steps=ROUNDS, **kw):
    return run_sync(problem, rule, steps, options=RunOptions(seed=1), **kw)


# ------------------------------------------------------------------ lossless and bytes
@pytest.mark.parametrize("rule", [_tangent, lambda: RFedProj(0.01, 3)], ids=["rfedavg", "rfedproj"])
def test_a_lossless_compressor_reproduces_the_rule(kpca, rule):
    """top-k with k = d sends every entry: the run is the uncompressed one (up to the projection
    of the decoded tangent vectors onto the tangent space, a rounding)."""
    plain = _run(kpca, rule())
    packed = _run(kpca, Compressed(rule(), make_compressor("topk:1")))
    assert np.abs(packed.final_point - plain.final_point).max() <= 1e-12
    assert packed.uplink_bytes[-1] > plain.uplink_bytes[-1]  # indices travel too


@pytest.mark.parametrize("spec", ["fp16", "bf16", "qsgd:4", "topk:0.1", "rank:1"])
def test_uplink_bytes_are_the_payloads(kpca, spec):
    compressor = make_compressor(spec)
    h = _run(kpca, Compressed(_tangent(), compressor), steps=3)
    per_round = compressor.payload_nbytes(tuple(kpca.manifold.point_shape), np.dtype(np.float64))
    assert h.uplink_bytes[-1] == pytest.approx(3 * per_round, rel=0, abs=1e-9)
    dense = _run(kpca, _tangent(), steps=3).uplink_bytes[-1]
    assert h.uplink_bytes[-1] < dense


# ------------------------------------------------------------------ error feedback
def test_the_client_keeps_the_residual(kpca):
    rule = Compressed(_tangent(), make_compressor("topk:0.25"))
    rule.validate(kpca)
    server, clients = rule.init(kpca, kpca.manifold.random_point(rng=0))
    rows = {k: v[:3] for k, v in clients.items()}
    rows[RESIDUAL] = 0.01 * np.random.default_rng(2).standard_normal(rows[RESIDUAL].shape)
    ctx = ClientContext(kpca, np.arange(3))
    message = rule.broadcast(server, 0)
    uploads, new = rule.client_step(ctx, 0, message, rows)
    inner, _ = _tangent().client_step(ctx, 0, {"x": message["x"]}, {})
    v = inner["u"] + rows[RESIDUAL]
    payload = {k[len(PAYLOAD) :]: p for k, p in uploads.items()}
    decoded = rule.compressor.decode(payload, v.shape[1:], v.dtype)
    np.testing.assert_allclose(decoded + new[RESIDUAL], v, rtol=0, atol=1e-15)
    kept = (decoded != 0).sum(axis=(1, 2))
    assert np.all(kept == 4)  # ceil(0.25 * 16)


def test_error_feedback_defaults_follow_the_bias():
    assert Compressed(_tangent(), make_compressor("topk:0.1")).error_feedback
    assert Compressed(_tangent(), make_compressor("rank:1")).error_feedback
    assert not Compressed(_tangent(), make_compressor("qsgd:2")).error_feedback
    forced = Compressed(_tangent(), make_compressor("qsgd:2"), error_feedback=True)
    assert forced.error_feedback


def test_error_feedback_converges_where_plain_top_k_stalls(kpca):
    plain = _run(kpca, _tangent(), steps=40)
    with_ef = _run(kpca, Compressed(_tangent(), make_compressor("topk:0.2")), steps=40)
    without = _run(
        kpca, Compressed(_tangent(), make_compressor("topk:0.2"), error_feedback=False), steps=40
    )
    gap = plain.loss[-1]
    assert abs(with_ef.loss[-1] - gap) < abs(without.loss[-1] - gap)
    assert with_ef.loss[-1] < with_ef.loss[0]


# ------------------------------------------------------------------ resume
@pytest.mark.parametrize("spec", ["topk:0.2", "rank:1", "qsgd:3"])
def test_a_resumed_compressed_run_equals_the_uninterrupted_one(kpca, tmp_path, spec):
    def rule():
        return Compressed(_tangent(), make_compressor(spec))

    full = _run(kpca, rule())
    fired = []

    def stop_at_2(step, history):
        if step == 2 and not fired:
            fired.append(step)
            request_interrupt()

    opts = RunOptions(seed=1, checkpoint=tmp_path / "c.ckpt", checkpoint_every=1, on_step=stop_at_2)
    with pytest.raises(RunInterrupted):
        run_sync(kpca, rule(), ROUNDS, options=opts)
    resumed = run_sync(kpca, rule(), ROUNDS, options=opts)
    assert resumed.same_results(full)
    np.testing.assert_array_equal(resumed.final_point, full.final_point)


# ------------------------------------------------------------------ composition
def test_compression_composes_with_a_robust_aggregator_and_a_server_optimiser(kpca):
    rule = Compressed(ServerOptimized(_tangent(), ServerAdam(0.02)), make_compressor("qsgd:4"))
    h = _run(kpca, rule, aggregator=GeometricMedian())
    kpca.manifold.check_point(h.final_point)
    assert h.config["algorithm"]["compression"]["name"] == "qsgd"
    assert h.config["algorithm"]["server_optimizer"]["name"] == "adam"


def test_rfedsvrg_compresses_its_model_phase_only(kpca):
    h = _run(kpca, Compressed(RFedSVRG(0.01, 3, upload="tangent"), make_compressor("fp16")), 3)
    assert h.loss[-1] < h.loss[0]


# ------------------------------------------------------------------ refusals
def test_point_uploads_are_refused_with_the_reason():
    with pytest.raises(ParameterError, match="compressed point is no longer on the manifold"):
        Compressed(RFedAvg(0.01, 3), make_compressor("fp16"))


def test_private_compressed_runs_keep_the_accountant(kpca):
    """Clip, then compress: the epsilon column is the uncompressed private run's."""
    settings = DPSettings(0.05, 1.0)
    plain = _run(kpca, _tangent(), privacy=settings, clients_per_round=3)
    packed = _run(
        kpca,
        Compressed(_tangent(), make_compressor("qsgd:4")),
        privacy=settings,
        clients_per_round=3,
    )
    assert packed.metrics["epsilon"] == plain.metrics["epsilon"]
    assert packed.config["algorithm"]["privacy"] == plain.config["algorithm"]["privacy"]
    assert packed.uplink_bytes[-1] < plain.uplink_bytes[-1]


def test_without_clipping_or_noise_a_private_compressed_run_is_the_compressed_run(kpca):
    rule = lambda: Compressed(_tangent(), make_compressor("topk:0.3"))  # noqa: E731
    off = DPSettings(float("inf"), 0.0)
    np.testing.assert_array_equal(
        _run(kpca, rule(), privacy=off).final_point, _run(kpca, rule()).final_point
    )


@pytest.mark.parametrize("mode", ["central", "local"])
def test_the_server_clips_decoded_updates_under_central_noise(kpca, mode):
    from riemfl.federated.privacy import privatize, update_norms

    clip = 0.01
    rule, _ = privatize(
        Compressed(_tangent(), make_compressor("qsgd:1")),
        DPSettings(clip, 1.0, mode=mode),
        population=kpca.n_clients,
        sample_size=None,
        seed=0,
    )
    rule.validate(kpca)
    server, clients = rule.init(kpca, kpca.manifold.random_point(rng=0))
    message = rule.broadcast(server, 0)
    ctx = ClientContext(kpca, np.arange(kpca.n_clients))
    uploads, _ = rule.client_step(ctx, 0, message, clients)
    decoded = rule.decode(message, uploads, 0)
    norms = np.asarray(update_norms(kpca.manifold, message["x"], decoded))
    if mode == "central":
        assert np.all(norms <= clip * (1 + 1e-12))
    else:  # local noise is post-processed as it is: sigma C per entry dwarfs C
        assert np.all(norms > clip)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((object(), "fp16"), "must be a SyncAlgorithm"),
        ((RFedAvg(0.01, 3, upload="tangent"), "fp16-not-a-compressor"), "must be a riemfl"),
    ],
)
def test_bad_arguments_are_refused(args, message):
    with pytest.raises(ParameterError, match=message):
        Compressed(*args)


def test_attacks_refuse_a_compressed_rule(kpca):
    from riemfl.federated.attacks import Byzantine

    with pytest.raises(ParameterError, match="does not declare"):
        _run(kpca, Compressed(_tangent(), make_compressor("fp16")), byzantine=Byzantine(0.2))

"""Client-level differential privacy on the Flower path (``SyncJob(privacy=...)``).

The nodes run the :class:`~riemfl.federated.privacy.PrivateAlgorithm` (clipping; local noise
from each client's own stream) and the server's round adds the central noise with
:class:`~riemfl.federated.privacy.GaussianSum`, also on a SecAgg+ sum. Fast part on the
in-process grid of ``test_flower_secagg`` (real ClientApps, Flower's real SecAgg+ workflow);
the identities: no clipping and no noise is the plain run bit for bit; central noise without
SecAgg+ is ``run_sync(privacy=...)`` (the same noise on the same sum); with SecAgg+ it is that
within the quantisation bound; the ``epsilon`` column is the in-process one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'riemfl[flower]')")

from riemfl.adapters.flower import SecAggSettings, SyncJob, make_client_app  # noqa: E402
from riemfl.adapters.flower import client as client_module  # noqa: E402
from riemfl.adapters.flower.checks import upload_kind  # noqa: E402
from riemfl.adapters.flower.deploy import job_from_run_config  # noqa: E402
from riemfl.adapters.flower.secure import contribute  # noqa: E402
from riemfl.adapters.flower.sync_server import run_sync_job  # noqa: E402
from test_flower_secagg import (  # noqa: E402
    KPCA,
    NODES,
    WEIGHT,
    InProcessGrid,
    task_identity,  # noqa: F401 - a fixture
)

from riemfl.errors import ParameterError  # noqa: E402
from riemfl.federated import RFedAvg, RFedProj, RFedSVRG, RunOptions, run_sync  # noqa: E402
from riemfl.federated.privacy import (  # noqa: E402
    DPSettings,
    PrivateAlgorithm,
    client_noise,
    noise_streams,
)

ETA = 4e-3
pytestmark = pytest.mark.usefixtures("task_identity")  # except where a test needs no grid


def flower(job: SyncJob):
    return run_sync_job(InProcessGrid(make_client_app([job])), job, range(NODES))


def test_no_clip_and_no_noise_is_the_plain_flower_run_bit_for_bit():
    job = SyncJob(
        KPCA,
        RFedProj(ETA, 2),
        2,
        name="id",
        privacy=DPSettings(math.inf, 0),
        options=RunOptions(seed=1),
    )
    history = flower(job)
    plain = flower(SyncJob(KPCA, RFedProj(ETA, 2), 2, name="plain", options=RunOptions(seed=1)))
    assert np.array_equal(history.final_point, plain.final_point)
    assert history.metrics["loss"] == plain.metrics["loss"]
    assert history.metrics["epsilon"][1:] == [math.inf, math.inf]
    assert history.summary["epsilon"] == math.inf and history.summary["dp_delta"] == 1e-5
    assert history.config["algorithm"]["privacy"]["clip"] == math.inf


@pytest.mark.parametrize(
    "make", [lambda: RFedProj(ETA, 2), lambda: RFedAvg(ETA, 2, upload="tangent")]
)
def test_central_noise_is_run_syncs(make):
    """The nodes clip as the in-process clients do and the server adds the same noise to the
    same sum (one draw per phase from the run's central stream); epsilon is the same."""
    settings = DPSettings(0.02, 0.7)
    job = SyncJob(
        KPCA,
        make(),
        2,
        name="central",
        clients_per_round=4,
        privacy=settings,
        options=RunOptions(seed=2),
    )
    history = flower(job)
    local = run_sync(
        KPCA.build(), make(), 2, clients_per_round=4, privacy=settings, options=RunOptions(seed=2)
    )
    np.testing.assert_allclose(history.final_point, local.final_point, rtol=0, atol=1e-10)
    assert history.metrics["epsilon"] == local.metrics["epsilon"]
    assert history.summary["epsilon"] == local.summary["epsilon"] < math.inf
    assert not np.allclose(
        history.final_point,
        run_sync(KPCA.build(), make(), 2, options=RunOptions(seed=2)).final_point,
    )


@pytest.fixture
def updates_in(monkeypatch):
    """Every client update that entered a SecAgg+ sum, seen on its node: (round, client) ->
    upload - P(x^r) (RFedProj's update)."""
    seen: dict[tuple[int, int], np.ndarray] = {}

    def spying(job, state, r, phase, message, uploads, clients):
        accepted, refused = contribute(job, state, r, phase, message, uploads, clients)
        for j, c in enumerate(clients):
            if c in accepted:
                seen[(r, c)] = np.asarray(uploads["x"])[j] - np.asarray(message["px"])
        return accepted, refused

    monkeypatch.setattr(client_module, "contribute", spying)
    return seen


def test_central_noise_after_secagg_is_run_syncs_within_the_bound(updates_in):
    """SecAgg+ then GaussianSum.from_total: round 1's iterate (RFedProj, eta_g = 1: the noisy
    sum over m) is run_sync(privacy=...)'s within the quantisation bound over m; every update
    that entered the sum was clipped on its node."""
    settings = DPSettings(0.02, 0.7)
    secure = SyncJob(
        KPCA,
        RFedProj(ETA, 2),
        1,
        name="dpsec",
        secagg=True,
        privacy=settings,
        options=RunOptions(seed=3),
    )
    history = flower(secure)
    local = run_sync(
        KPCA.build(), RFedProj(ETA, 2), 1, privacy=settings, options=RunOptions(seed=3)
    )
    gap = np.abs(history.final_point - local.final_point).max()
    assert 0 < gap < SecAggSettings().error_bound(NODES, WEIGHT) / 6
    assert history.metrics["epsilon"] == local.metrics["epsilon"]
    norms = [np.linalg.norm(u) for u in updates_in.values()]
    assert len(norms) == 6 and max(norms) <= 0.02 * (1 + 1e-12)
    assert min(norms) == pytest.approx(0.02)  # clipped: the local updates are longer than C


def test_local_noise_comes_from_each_clients_own_stream(updates_in):
    """Local mode: a node adds to each client's clipped update the noise of that client's
    stream (child (client, round, phase) of the run's local stream), whichever node hosts it;
    the server adds none; epsilon is the in-process local mode's."""
    settings = DPSettings(0.02, 0.5, mode="local")
    job = SyncJob(
        KPCA,
        RFedProj(ETA, 2),
        2,
        name="local",
        secagg=True,
        privacy=settings,
        options=RunOptions(seed=4),
    )
    history = flower(job)
    local = run_sync(
        KPCA.build(), RFedProj(ETA, 2), 2, privacy=settings, options=RunOptions(seed=4)
    )
    assert history.metrics["epsilon"] == local.metrics["epsilon"] < [math.inf] * 3
    shape = KPCA.build().manifold.point_shape
    for (r, c), update in updates_in.items():
        noise = client_noise(4, [c], r, 0).standard_normal((1, *shape))[0] * settings.std
        clipped = update - noise
        assert np.linalg.norm(clipped) <= 0.02 * (1 + 1e-9)  # the clipped update, then noise
    seq = noise_streams(4)[1]
    first = np.random.default_rng(np.random.SeedSequence(seq.entropy, spawn_key=(3, 5, 1, 0)))
    stack = client_noise(4, [2, 5], 1, 0).standard_normal((2, 3))
    assert np.array_equal(stack[1], first.standard_normal(3))  # independent of the stack


def test_settings_reach_the_job_and_the_checks():
    settings = DPSettings(1.0, 0.3, mode="local")
    job = SyncJob(KPCA, RFedSVRG(ETA, 2, upload="tangent"), 1, privacy=settings)
    assert isinstance(job.algorithm, PrivateAlgorithm) and job.algorithm.settings == settings
    assert upload_kind(job.algorithm, 0, "grad") == "ambient"  # + local noise: not tangent
    central = SyncJob(KPCA, RFedSVRG(ETA, 2, upload="tangent"), 1, privacy=DPSettings(1.0, 0.3))
    assert upload_kind(central.algorithm, 0, "grad") == "tangent"  # clipped: still tangent
    with pytest.raises(ParameterError, match="needs each upload"):
        SyncJob(KPCA, RFedAvg(ETA, 2), 1, privacy=settings)
    with pytest.raises(ParameterError, match="privacy must be a DPSettings"):
        SyncJob(KPCA, RFedProj(ETA, 2), 1, privacy={"clip": 1.0})
    with pytest.raises(ParameterError, match="but privacy"):
        SyncJob(KPCA, job.algorithm, 1)
    config = {"problem-clients": 6, "dp-clip": 0.5, "dp-noise": 1.2, "dp-mode": "local"}
    assert job_from_run_config(config).privacy == DPSettings(0.5, 1.2, 1e-5, "local")
    assert job_from_run_config({"problem-clients": 6}).privacy is None
    with pytest.raises(ParameterError, match="dp-clip"):
        job_from_run_config({**config, "engine": "async"})


@pytest.mark.slow
def test_private_jobs_in_flowers_simulation_engine():
    """Ray: central DP is run_sync(privacy=...) (to 1e-10, the same epsilon column); local DP
    with SecAgg+ runs and accounts as in process."""
    from riemfl.adapters.flower import simulate

    central = SyncJob(
        KPCA,
        RFedProj(ETA, 2),
        2,
        name="central",
        privacy=DPSettings(0.02, 0.7),
        options=RunOptions(seed=5),
    )
    local = SyncJob(
        KPCA,
        RFedProj(ETA, 2),
        2,
        name="local",
        secagg=True,
        privacy=DPSettings(0.02, 0.5, mode="local"),
        options=RunOptions(seed=5),
    )
    results = simulate([central, local], NODES)
    for job in (central, local):
        reference = run_sync(
            KPCA.build(), RFedProj(ETA, 2), 2, privacy=job.privacy, options=RunOptions(seed=5)
        )
        history = results[job.name]
        assert history.metrics["epsilon"] == reference.metrics["epsilon"]
        assert history.warnings == [] and history.participants[1:] == [6, 6]
        if job is central:
            np.testing.assert_allclose(
                history.final_point, reference.final_point, rtol=0, atol=1e-10
            )

"""Secure aggregation: sum-only rules through Flower's SecAgg+ (``SyncJob(secagg=...)``).

Fast part (no Ray): the synchronous loop on a stand-in for Flower's ``Grid`` whose nodes are
real ClientApps (``make_client_app``: Flower's ``secaggplus_mod`` on the SecAgg+ handler) called
in this process, and Flower's real ``SecAggPlusWorkflow`` on the server. Every message is
copied on its way, as the wire would (the workflow sends one content object to every node,
and the mod edits what it receives). Slow part: the same in Flower's simulation engine, with
a node process that dies during SecAgg+.

The bound checked: every entry of the sum the server obtains differs from the exact sum of the
contributed rows by less than ``N W 2c / Q`` (``SecAggSettings.error_bound``; N nodes, W the
weight scale, c the clipping range, Q the quantisation levels).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'riemfl[flower]')")

from riemfl.adapters.flower import (  # noqa: E402
    NotSumOnlyError,
    PingJob,
    ProblemSpec,
    ProtocolError,
    SecAggDropout,
    SecAggSettings,
    SyncJob,
    make_client_app,
    simulate,
)
from riemfl.adapters.flower import client as client_module  # noqa: E402
from riemfl.adapters.flower.deploy import job_from_run_config  # noqa: E402
from riemfl.adapters.flower.grid_io import CLIENT_APP_RAISED  # noqa: E402
from riemfl.adapters.flower.secure import Contribution, contribute, max_weight  # noqa: E402
from riemfl.adapters.flower.simulation import _with_timeouts  # noqa: E402
from riemfl.adapters.flower.sync_server import run_sync_job  # noqa: E402

from riemfl.errors import ClientFailureError, ParameterError  # noqa: E402
from riemfl.federated import (  # noqa: E402
    ClientDroppedWarning,
    RFedAvg,
    RFedProj,
    RFedSVRG,
    RunOptions,
    run_sync,
)

NODES = 3
KPCA = ProblemSpec("kpca-synthetic", clients=6, seed=1)
ETA = 4e-3
WEIGHT = max_weight(2)  # 6 clients on 3 nodes: 2 per node


def recording(cls):
    """``cls`` whose server step keeps every (sum, count) it receives in ``.sums``."""

    class Recording(cls):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.sums: list[tuple[np.ndarray, int]] = []

        def server_step_from_sum(self, manifold, server, phase, message, total, count):
            (value,) = total.values()
            self.sums.append((np.array(value), count))
            return super().server_step_from_sum(manifold, server, phase, message, total, count)

    return Recording


RecordingRFedProj = recording(RFedProj)
RecordingRFedAvg = recording(RFedAvg)


@pytest.fixture
def task_identity(monkeypatch):
    """What Flower's engine sets in its ServerApp process before messages can be created."""
    from flwr.supercore.task_identity import TaskIdentity

    for key, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, key, value)


class InProcessGrid:
    """Flower's ``Grid`` without its engine: node p (node id = partition-id) runs ``app`` on a
    copy of each message at once; an exception becomes Flower's error reply."""

    def __init__(self, app) -> None:
        from flwr.app import Context, RecordDict

        self.app, self.replies, self.pushed = app, {}, 0
        self.contexts = {
            p: Context(
                run_id=1,
                node_id=p,
                node_config={"partition-id": p, "num-partitions": NODES},
                state=RecordDict(),
                run_config={},
            )
            for p in range(NODES)
        }

    def get_node_ids(self) -> list[int]:
        return list(range(NODES))

    def _answer(self, message):
        from flwr.app import Message
        from flwr.app.error import Error

        try:
            return self.app(copy.deepcopy(message), self.contexts[message.metadata.dst_node_id])
        except Exception as exc:  # noqa: BLE001 - as Flower's engine reports it
            return Message(
                Error(CLIENT_APP_RAISED, f"{type(exc).__name__}: {exc}"), reply_to=message
            )

    def push_messages(self, messages) -> list[str]:
        ids = []
        for message in messages:
            mid = f"m{self.pushed}"
            self.pushed += 1
            message.metadata.__dict__["_message_id"] = mid  # as the SuperLink does
            self.replies[mid] = self._answer(message)
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids):
        return [self.replies.pop(i) for i in message_ids if i in self.replies]

    def send_and_receive(self, messages, *, timeout=None):
        return self.pull_messages(self.push_messages(messages))


@pytest.fixture
def rows_in(monkeypatch):
    """(round, phase) -> {client: its row} of the rows the nodes put into the secure sum (the
    test looks over the nodes' shoulders; the server never sees them)."""
    seen: dict[tuple[int, int], dict[int, np.ndarray]] = {}

    def spying(job, state, r, phase, message, uploads, clients):
        accepted, refused = contribute(job, state, r, phase, message, uploads, clients)
        (rows,) = uploads.values()
        mine = {c: np.asarray(rows)[j] for j, c in enumerate(clients) if c in accepted}
        seen.setdefault((r, phase), {}).update(mine)
        return accepted, refused

    monkeypatch.setattr(client_module, "contribute", spying)
    return seen


def run(job: SyncJob, mods=()):
    return run_sync_job(InProcessGrid(make_client_app([job], mods=list(mods))), job, range(NODES))


# --------------------------------------------------------------------------------- settings
def test_only_sum_only_rules_run_under_secure_aggregation():
    for algorithm in (RFedAvg(ETA, 2), RFedSVRG(ETA, 2)):  # upload="point": phase needs rows
        with pytest.raises(NotSumOnlyError, match="upload='tangent'") as info:
            SyncJob(KPCA, algorithm, 1, secagg=True)
        assert isinstance(info.value, ParameterError)
    for algorithm in (RFedProj(ETA, 2), RFedAvg(ETA, 2, upload="tangent")):
        assert SyncJob(KPCA, algorithm, 1, secagg=True).secagg == SecAggSettings()
    assert SyncJob(KPCA, RFedAvg(ETA, 2), 1, secagg=False).secagg is None
    with pytest.raises(ParameterError, match="secagg must be"):
        SyncJob(KPCA, RFedProj(ETA, 2), 1, secagg="yes")


def test_settings_are_checked_with_flowers_own_checks():
    assert SecAggSettings(clipping_range=2).clipping_range == 2.0  # Flower's mod needs a float
    for bad in (
        {"quantization_range": 3 * 2**20},  # weights k/W exact only on a power of two
        {"modulus_range": 2**33},
        {"clipping_range": float("inf")},
        {"num_shares": 2},  # Flower: an integer num_shares must exceed 2
        {"num_shares": 3, "reconstruction_threshold": 3},  # Flower: threshold < shares
        {"timeout": 0},
    ):
        with pytest.raises(ParameterError):
            SecAggSettings(**bad)
    with pytest.raises(ParameterError, match="overflow"):
        SecAggSettings(quantization_range=2**30).check_capacity(4, 1.0)
    assert max_weight(1) == 1.0 and max_weight(3) == 4.0 and max_weight(4) == 4.0


def test_simulate_sets_secure_aggregation_on_every_sync_job():
    ping = PingJob(repeats=1)
    jobs = _with_timeouts([SyncJob(KPCA, RFedProj(ETA, 2), 1), ping], secagg=True)
    assert jobs[0].secagg == SecAggSettings() and jobs[1] == ping
    with pytest.raises(NotSumOnlyError):
        _with_timeouts([SyncJob(KPCA, RFedAvg(ETA, 2), 1)], secagg=SecAggSettings())


def test_run_config_turns_secure_aggregation_on():
    config = {"problem-clients": 6, "upload": "tangent", "algorithm": "rfedavg"}
    job = job_from_run_config({**config, "secagg": True, "secagg-num-shares": 3.0})
    assert job.secagg.num_shares == 3 and isinstance(job.secagg.num_shares, int)
    assert job_from_run_config(config).secagg is None
    with pytest.raises(NotSumOnlyError):
        job_from_run_config({"problem-clients": 6, "algorithm": "rfedavg", "secagg": True})


def test_a_node_checks_its_rows_before_they_enter_the_sum():
    from flwr.app import RecordDict

    job = SyncJob(KPCA, RFedProj(ETA, 2), 1, name="n", secagg=SecAggSettings(clipping_range=2.0))
    rows = np.full((4, *job.resolved.manifold.point_shape), 0.5)
    rows[1, 0, 0] = np.nan
    rows[2, 0, 0] = -2.5  # beyond the clipping range: SecAgg+ would clip it
    state = RecordDict()
    accepted, refused = contribute(job, state, 3, 0, {}, {"x": rows}, [10, 11, 12, 13])
    assert accepted == [10, 13]
    assert "non-finite" in refused[11] and "clipping_range 2" in refused[12]
    mean, count = Contribution(state, "n").take(3, 0)
    assert count == 2 and np.array_equal(mean["x"], rows[[0, 3]].mean(0))
    with pytest.raises(ProtocolError, match="holds"):  # taken once only; other rounds refused
        Contribution(state, "n").take(3, 0)
    plain = SyncJob(KPCA, RFedProj(ETA, 2), 1, name="n")
    with pytest.raises(ProtocolError, match="no secagg settings"):
        contribute(plain, state, 3, 0, {}, {"x": rows}, [10, 11, 12, 13])
    with pytest.raises(ParameterError):
        SecAggDropout(0, stage="train")


# --------------------------------------------------------------------------------- in process
def test_secure_sums_are_the_exact_sums_within_the_quantisation_bound(task_identity, rows_in):
    """Every round's sum the server used is the exact sum of the nodes' accepted rows within
    N W 2c/Q; and round 1 (the same inputs as the plain run) gives the plain run's iterate
    x^1 = sum / m within that bound over m."""
    settings = SecAggSettings()
    secure = SyncJob(
        KPCA, RecordingRFedProj(ETA, 2), 3, name="sec", secagg=settings, options=RunOptions(seed=1)
    )
    history = run(secure)
    bound = settings.error_bound(NODES, WEIGHT)
    assert bound == NODES * 2 * 16 / 2**22
    assert history.warnings == [] and history.participants == [0, 6, 6, 6]
    assert [count for _, count in secure.algorithm.sums] == [6, 6, 6]
    for r, (total, _) in enumerate(secure.algorithm.sums, start=1):
        exact = sum(rows_in[(r, 0)].values())
        assert 0 < np.abs(total - exact).max() < bound  # quantised, within the bound
    plain = RecordingRFedProj(ETA, 2)
    run_sync(KPCA.build(), plain, 1, options=RunOptions(seed=1))
    x1_plain, x1_secure = plain.sums[0][0] / 6, secure.algorithm.sums[0][0] / 6
    assert 0 < np.abs(x1_secure - x1_plain).max() < bound / 6
    assert history.uplink_matrices[-1] == pytest.approx(3.0)  # as if each client sent its row


def test_a_two_phase_rule_runs_both_phases_securely(task_identity):
    """RFedSVRG with tangent uploads: anchor gradients (tangent at x, checked on the nodes),
    then tangent steps; round 1's sums equal the plain run's within the bound. The gradients
    reach 32 here: the default clipping range 8 would refuse them (the node says so)."""
    RecordingSVRG = recording(RFedSVRG)
    settings = SecAggSettings(clipping_range=64.0)
    algorithm = RecordingSVRG(ETA, 2, upload="tangent")
    secure = SyncJob(KPCA, algorithm, 2, name="svrg", secagg=settings)
    history = run(secure)
    assert history.warnings == [] and [c for _, c in secure.algorithm.sums] == [6] * 4
    plain = RecordingSVRG(ETA, 2, upload="tangent")
    run_sync(KPCA.build(), plain, 1, options=RunOptions(seed=0))
    gap = np.abs(secure.algorithm.sums[0][0] - plain.sums[0][0]).max()  # phase 0, same inputs
    assert 0 < gap < settings.error_bound(NODES, WEIGHT)


def test_a_node_that_drops_out_of_secagg_does_not_stop_the_round(task_identity, rows_in):
    """Node 1 fails while it would send its masked vector in round 2: SecAgg+ unmasks without
    it (2 of 3 nodes remain, threshold 2), its clients are dropped with the reason, the node
    is excluded afterwards, and each sum is the exact sum of the rows that entered it."""
    job = SyncJob(
        KPCA, RecordingRFedProj(ETA, 2), 3, name="drop", secagg=True, options=RunOptions(seed=1)
    )
    with pytest.warns(ClientDroppedWarning, match="dropped out of secure aggregation"):
        history = run(job, [SecAggDropout(1, rounds=[2])])
    assert history.participants == [0, 6, 4, 4]
    assert [(w["round"], w["client"]) for w in history.warnings] == [(2, 2), (2, 3), (3, 2), (3, 3)]
    assert "fault injected on node 1" in history.warnings[0]["reason"]
    assert [count for _, count in job.algorithm.sums] == [6, 4, 4]
    for r, (total, _) in enumerate(job.algorithm.sums, start=1):
        rows = rows_in[(r, 0)]
        if r == 2:  # node 1 had its rows ready, then dropped out: they are not in the sum
            assert sorted(rows) == list(range(6))
        exact = sum(v for c, v in rows.items() if r == 1 or c not in (2, 3))
        assert np.abs(total - exact).max() < SecAggSettings().error_bound(NODES, WEIGHT)


def test_too_many_dropouts_or_an_early_one_fail_the_phase(task_identity):
    """Two of three nodes failing leaves fewer live neighbours than the threshold; a node that
    fails at SecAgg+'s setup stage is one Flower 1.41's workflow cannot unmask without (the
    others hold no share of its key): both stop the round, every client failing with why."""
    for mods, name in (
        ([SecAggDropout(1), SecAggDropout(2)], "two"),
        ([SecAggDropout(1, stage="setup")], "setup"),
    ):
        job = SyncJob(KPCA, RFedProj(ETA, 2), 2, name=name, secagg=True, options=RunOptions(seed=1))
        with pytest.warns(ClientDroppedWarning), pytest.raises(ClientFailureError) as info:
            run(job, mods)
        assert "every participating client failed" in str(info.value)
        assert "SecAgg+ halted" in str(info.value)


# --------------------------------------------------------------------------------- simulation
@pytest.mark.slow
def test_secure_simulation_matches_the_plain_one_within_the_bound():
    """Flower's simulation engine (Ray): plain and secure RFedAvg with tangent uploads (round 1
    has the same inputs: its sums agree within the bound), and a secure run whose node 2
    process dies during SecAgg+ in round 2 and is excluded from then on."""
    plain = SyncJob(
        KPCA,
        RecordingRFedAvg(ETA, 2, upload="tangent"),
        3,
        name="plain",
        options=RunOptions(seed=2),
    )
    secure = SyncJob(
        KPCA,
        RecordingRFedAvg(ETA, 2, upload="tangent"),
        3,
        name="secure",
        secagg=True,
        options=RunOptions(seed=2),
    )
    dies = SyncJob(
        KPCA,
        RFedAvg(ETA, 2, upload="tangent"),
        3,
        name="dies",
        secagg=True,
        options=RunOptions(seed=2),
    )
    mods = [SecAggDropout(2, fault="die", rounds=[2], job="dies")]
    with pytest.warns(ClientDroppedWarning):
        results = simulate([plain, secure, dies], NODES, mods=mods)
    bound = SecAggSettings().error_bound(NODES, WEIGHT)
    sums = [total for total, _ in secure.algorithm.sums]
    assert 0 < np.abs(sums[0] - plain.algorithm.sums[0][0]).max() < bound
    assert results["secure"].warnings == [] and results["secure"].participants == [0, 6, 6, 6]
    gap = np.abs(results["secure"].final_point - results["plain"].final_point).max()
    assert gap > 0
    assert results["dies"].participants == [0, 6, 4, 4]
    reasons = [w["reason"] for w in results["dies"].warnings]
    assert len(reasons) == 4 and all("dropped out of secure aggregation" in w for w in reasons)

"""The Flower adapter in Flower's real simulation engine (``run_simulation``, Ray backend).

One simulation (one Ray start) runs every job of this module: RFedProj with client sampling and
mini-batches, RFedSVRG (two phases, tangent uploads) and FedAvg on a Euclidean problem, each
compared with ``run_sync`` to 1e-10; a run in which one node returns a NaN and an off-manifold
upload; FedAsync, FedBuff and AsyncBezier (curve uploads) through the asynchronous loop, with bad
local models and bad curves dropped; and a ping.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'riemfl[flower]')")
pytest.importorskip("ray", reason="Flower's simulation engine needs Ray (flwr[simulation])")

# seconds per test (simulations, reproductions, benchmark runs): part of the full run only
pytestmark = pytest.mark.slow

from riemfl.adapters.flower import (  # noqa: E402
    AsyncJob,
    CorruptReplies,
    PingJob,
    ProblemSpec,
    SyncJob,
    hosted_clients,
    simulate,
)

import riemfl  # noqa: E402
from riemfl.federated import (  # noqa: E402
    AsyncBezier,
    ClientDroppedWarning,
    FedAsync,
    FedBuff,
    RFedAvg,
    RFedProj,
    RFedSVRG,
    RunOptions,
    run_sync,
)
from riemfl.federated.compression import make_compressor  # noqa: E402
from riemfl.problems import FunctionProblem  # noqa: E402

NODES = 3
KPCA = ProblemSpec("kpca-synthetic", clients=6, seed=1)
KPCA_K2 = ProblemSpec("kpca-synthetic", clients=6, k=2, seed=1)
BAD_NODE = 1


def least_squares(n: int = 5, d: int = 4, seed: int = 0) -> FunctionProblem:
    """f_i(x) = |A_i x - b_i|^2 / 2 on R^(d, 2): FedAvg's setting (closures: picklable by value)."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, 6, d))
    b = rng.normal(size=(n, 6, 2))

    def loss(i):
        return lambda x: 0.5 * float(np.sum((a[i] @ x - b[i]) ** 2))

    def egrad(i):
        return lambda x: a[i].T @ (a[i] @ x - b[i])

    x_star = np.linalg.lstsq(a.reshape(-1, d), b.reshape(-1, 2), rcond=None)[0]
    optimum = np.mean([loss(i)(x_star) for i in range(n)])
    return FunctionProblem(
        riemfl.Euclidean(d, 2),
        [loss(i) for i in range(n)],
        [egrad(i) for i in range(n)],
        optimum=optimum,
        name="least-squares",
    )


EUCLIDEAN = least_squares()
ETA = 4e-3
SYNC_JOBS = [
    SyncJob(
        KPCA,
        RFedProj(ETA, 3),
        4,
        name="rfedproj",
        clients_per_round=4,
        batch_size=5,
        options=RunOptions(seed=3),
    ),
    SyncJob(KPCA, RFedSVRG(ETA, 3), 3, name="rfedsvrg", batch_size=5, options=RunOptions(seed=2)),
    SyncJob(EUCLIDEAN, RFedAvg(0.02, 3), 3, name="fedavg", options=RunOptions(seed=4)),
]
BAD = SyncJob(KPCA, RFedAvg(ETA, 2), 3, name="bad", options=RunOptions(seed=5))
CRASH = SyncJob(KPCA, RFedProj(ETA, 2), 2, name="crash", options=RunOptions(seed=6))
CRASH_NODE = 2
ASYNC_BAD = AsyncJob(KPCA, FedAsync(), 12, ETA, 2, name="async-bad")
FEDASYNC = AsyncJob(KPCA_K2, FedAsync(), 150, 1 / KPCA_K2.build().smoothness, 5, name="fedasync")
FEDBUFF = AsyncJob(KPCA, FedBuff(buffer_size=3), 10, ETA, 3, name="fedbuff")
# the nodes compress their clients' updates and keep their residuals in context.state
TOPK = FedBuff(buffer_size=3, compressor=make_compressor("topk:0.2"))
FEDBUFF_TOPK = AsyncJob(KPCA, TOPK, 10, ETA, 3, name="fedbuff-topk")
PING = PingJob(repeats=3, payload={"x": (20, 5)})
# AsyncBezier: the nodes run BezierProblemTrainer (3 warm-up + 3 curve steps) and upload curves
BEZIER_RULE = AsyncBezier(EUCLIDEAN.manifold, 1.0)
BEZIER = AsyncJob(EUCLIDEAN, BEZIER_RULE, 40, 0.05, 3, name="asyncbezier")
BEZIER_BAD = AsyncJob(EUCLIDEAN, AsyncBezier(EUCLIDEAN.manifold), 6, 0.05, 2, name="bezier-bad")
# on Stiefel (kPCA) the nodes learn geodesic Bezier curves (ManifoldBezierTrainer, in torch)
BEZIER_KPCA = AsyncJob(
    KPCA, AsyncBezier(KPCA.build().manifold, 1.0), 6, ETA, 2, name="asyncbezier-kpca"
)


@pytest.fixture(scope="module")
def results():
    jobs = [*SYNC_JOBS, BAD, CRASH, FEDASYNC, FEDBUFF, FEDBUFF_TOPK, ASYNC_BAD, BEZIER, BEZIER_BAD]
    jobs.append(BEZIER_KPCA)
    jobs.append(PING)
    mods = [
        CorruptReplies("bad", partition=BAD_NODE, faults=("nan", "off_manifold")),
        CorruptReplies("crash", partition=CRASH_NODE, faults=("raise",)),
        CorruptReplies("async-bad", partition=BAD_NODE, faults=("off_manifold",)),
        CorruptReplies("bezier-bad", partition=BAD_NODE, faults=("move_start",)),
        CorruptReplies("bezier-bad", partition=CRASH_NODE, faults=("nan",)),
    ]
    with pytest.warns(ClientDroppedWarning):
        return simulate(jobs, NODES, mods=mods)


@pytest.mark.parametrize("job", SYNC_JOBS, ids=lambda j: j.name)
def test_sync_iterates_equal_run_sync(results, job):
    history = results[job.name]
    reference = run_sync(
        job.resolved,
        job.algorithm,
        job.steps,
        clients_per_round=job.clients_per_round,
        batch_size=job.batch_size,
        options=job.options,
    )
    np.testing.assert_allclose(history.final_point, reference.final_point, rtol=0, atol=1e-10)
    for key in ("loss", "optimality_gap", "grad_norm", "uplink_matrices", "uplink_bytes"):
        np.testing.assert_allclose(getattr(history, key), getattr(reference, key), atol=1e-10)
    assert history.participants == reference.participants
    assert history.round == list(range(job.steps + 1))
    assert history.warnings == []
    assert history.config["engine"] == "flower"
    assert all(b > a for a, b in zip(history.wall_time, history.wall_time[1:], strict=False))
    assert all(b > a for a, b in zip(history.cpu_time, history.cpu_time[1:], strict=False))


def test_sampled_rounds_sent_work_to_a_subset(results):
    """RFedProj with 4 of 6 clients: the sampling was the engine's (participants = 4)."""
    assert results["rfedproj"].participants[1:] == [4] * 4


def test_bad_replies_are_dropped_with_their_reason(results):
    history = results["bad"]
    bad_clients = hosted_clients({"partition-id": BAD_NODE, "num-partitions": NODES}, 6)
    assert len(bad_clients) == 2
    dropped = [(w["round"], w["client"]) for w in history.warnings]
    assert dropped == [(r, c) for r in (1, 2, 3) for c in bad_clients]
    reasons = {w["client"]: w["reason"] for w in history.warnings}
    assert "non-finite" in reasons[bad_clients[0]]
    assert "NotOnManifoldError" in reasons[bad_clients[1]]
    assert history.participants[1:] == [4, 4, 4]
    # the survivors' run went on: a finite point on the manifold that improved the loss
    KPCA.build().manifold.check_point(history.final_point)
    assert history.loss[-1] < history.loss[0]


def test_a_failing_node_is_excluded_for_the_rest_of_the_job(results):
    history = results["crash"]
    lost = hosted_clients({"partition-id": CRASH_NODE, "num-partitions": NODES}, 6)
    assert [(w["round"], w["client"]) for w in history.warnings] == [
        (r, c) for r in (1, 2) for c in lost
    ]
    first, second = history.warnings[0]["reason"], history.warnings[-1]["reason"]
    assert "the ClientApp failed" in first and "fault injected" in first
    assert "excluded from the job" in second
    assert history.participants[1:] == [4, 4]


def test_async_bad_replies_are_logged_not_applied(results):
    history = results["async-bad"]
    log = history.log
    bad = set(hosted_clients({"partition-id": BAD_NODE, "num-partitions": NODES}, 6))
    for client, applied, reason in zip(log["client"], log["applied"], log["reason"], strict=True):
        assert applied == (client not in bad)
        assert ("NotOnManifoldError" in reason) == (client in bad)
    assert history.metrics["step"][-1] == 12
    assert history.metrics["dropped"][-1] == sum(not a for a in log["applied"]) > 0


def test_fedasync_records_staleness_and_converges(results):
    history = results["fedasync"]
    log = history.log
    assert len(log["staleness"]) == len(log["client"]) >= 150
    assert all(s >= 0 for s in log["staleness"])
    assert max(log["staleness"]) >= 1  # replies really overlapped
    assert all(log["applied"]) and set(log["reason"]) == {""}
    assert set(log["client"]) == set(range(6))
    gap = history.metrics["optimality_gap"]
    assert history.metrics["step"] == list(range(151))
    assert gap[-1] < gap[0] / 4  # in-process run_async on this problem: / 18
    KPCA_K2.build().manifold.check_point(history.final_point)


def test_fedbuff_steps_once_per_buffer(results):
    history = results["fedbuff"]
    assert history.metrics["step"][-1] == 10
    assert len(history.log["client"]) >= 30  # K = 3 updates per server step
    # a server step happens exactly when the third update of a buffer arrives
    versions = history.log["version"][:30]
    assert versions == [(j + 1) // 3 for j in range(30)]


def test_a_compressed_fedbuff_runs_on_the_simulation_engine(results):
    """Node-side compression on Ray's actors: every upload decoded and applied, its payload's
    bytes counted, and the model moves down the loss as the dense job's does."""
    history, dense = results["fedbuff-topk"], results["fedbuff"]
    assert history.metrics["step"][-1] == 10
    assert all(history.log["applied"]) and history.metrics["dropped"][-1] == 0
    per_upload = TOPK.upload_nbytes((20, 5), np.dtype(np.float64))
    n = KPCA.build().n_clients
    applied = history.metrics["updates"][-1]
    assert history.uplink_bytes[-1] * n == pytest.approx(applied * per_upload, rel=1e-12)
    dense_upload = dense.uplink_bytes[-1] * n / dense.metrics["updates"][-1]
    assert dense_upload == 20 * 5 * 8 and per_upload < dense_upload / 4
    assert history.metrics["loss"][-1] < history.metrics["loss"][0]


def test_asyncbezier_records_staleness_and_converges(results):
    history = results["asyncbezier"]
    log = history.log
    assert history.config["rule"]["name"] == "asyncbezier"
    assert len(log["staleness"]) == len(log["client"]) >= 40
    assert all(s >= 0 for s in log["staleness"]) and max(log["staleness"]) >= 1
    assert all(log["applied"]) and set(log["reason"]) == {""}
    assert set(log["client"]) == set(range(EUCLIDEAN.n_clients))
    assert "r" in BEZIER_RULE.last  # the curve rule's step ran on the uploaded curves
    gap = history.metrics["optimality_gap"]
    assert history.metrics["step"] == list(range(41))
    assert gap[-1] < gap[0] / 10  # in-process run_async on this problem: / 186
    assert np.all(np.isfinite(history.final_point))


def test_asyncbezier_on_a_curved_problem_steps_along_geodesic_curves(results):
    """The nodes' geodesic curves on Stiefel pass the server's checks (on the manifold, starting
    at the model each client received) and are stepped along; the model stays on the manifold
    and the gap falls."""
    history = results["asyncbezier-kpca"]
    log = history.log
    assert all(log["applied"]) and set(log["reason"]) == {""}
    assert history.metrics["step"][-1] == 6
    manifold = KPCA.build().manifold
    manifold.check_point(history.final_point)
    assert history.metrics["optimality_gap"][-1] < history.metrics["optimality_gap"][0]


def test_asyncbezier_bad_curves_are_dropped_with_their_reason(results):
    """Node BAD_NODE's curves start 1 away from the model they received; node CRASH_NODE's are
    NaN: both are logged and not applied; the good node's curves are."""
    history = results["bezier-bad"]
    log = history.log
    part = {
        c: p
        for p in range(NODES)
        for c in hosted_clients({"partition-id": p, "num-partitions": NODES}, EUCLIDEAN.n_clients)
    }
    expected = {0: "", BAD_NODE: "the curve starts 1 ", CRASH_NODE: "non-finite values"}
    seen = set()
    for client, applied, reason in zip(log["client"], log["applied"], log["reason"], strict=True):
        node = part[client]
        seen.add(node)
        assert applied == (node == 0)
        assert expected[node] in reason and bool(reason) == (node != 0)
    assert seen == {0, BAD_NODE, CRASH_NODE}
    assert history.metrics["step"][-1] == 6
    assert history.metrics["dropped"][-1] == sum(not a for a in log["applied"]) > 0
    assert history.metrics["optimality_gap"][-1] < history.metrics["optimality_gap"][0]


def test_ping_measures_round_trips(results):
    ping = results["ping"].to_dict()
    assert ping["nodes"] == NODES and ping["payload_bytes"] == 20 * 5 * 8
    assert len(ping["all_nodes_s"]) == len(ping["one_node_s"]) == 3
    assert all(t > 0 for t in ping["all_nodes_s"] + ping["one_node_s"])

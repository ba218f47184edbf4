"""Compressed uploads on the Flower synchronous path: the payloads travel packed, the server
decodes them, and the run equals ``run_sync``'s (iterates and ``uplink_bytes``).

On the in-process grid of ``test_flower_secagg`` (real ClientApps called in this process): the
bytes of the payload arrays in the nodes' replies equal the ``uplink_bytes`` the History counts.
"""

from __future__ import annotations

from collections import defaultdict, deque

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'riemfl[flower]')")

from riemfl.adapters.flower import (  # noqa: E402
    AsyncJob,
    NotSumOnlyError,
    ProtocolError,
    SyncJob,
    make_client_app,
)
from riemfl.adapters.flower.async_server import run_async_job  # noqa: E402
from riemfl.adapters.flower.node_compression import (  # noqa: E402
    NodeCompression,
    client_arrays,
    rows_of_clients,
)
from riemfl.adapters.flower.sync_server import run_sync_job  # noqa: E402
from riemfl.adapters.flower.wire import ARRAYS_KEY  # noqa: E402
from test_flower_secagg import (  # noqa: E402
    KPCA,
    NODES,
    InProcessGrid,
    task_identity,  # noqa: F401 - a fixture
)

from riemfl.errors import DTypeError, NonFiniteError, ParameterError, ShapeError  # noqa: E402
from riemfl.federated import (  # noqa: E402
    FedBuff,
    ProblemTrainer,
    RFedAvg,
    RFedProj,
    RunOptions,
    run_sync,
)
from riemfl.federated.async_rules import Arrival  # noqa: E402
from riemfl.federated.checkpoint import load_checkpoint  # noqa: E402
from riemfl.federated.compressed import PAYLOAD, Compressed  # noqa: E402
from riemfl.federated.compression import make_compressor  # noqa: E402
from riemfl.federated.interrupt import RunInterrupted, request_interrupt  # noqa: E402

STEPS = 3


class CountingGrid(InProcessGrid):
    """The in-process grid, adding up what the compressed payload arrays in the nodes' replies
    hold (``payload_bytes``), what Flower serialises for them (``serialised_bytes``: the same
    bytes and a .npy header per array) and their number."""

    def __init__(self, app) -> None:
        super().__init__(app)
        self.payload_bytes = self.serialised_bytes = self.arrays = 0

    def _answer(self, message):
        reply = super()._answer(message)
        if reply.has_content() and ARRAYS_KEY in reply.content:
            for name, array in reply.content[ARRAYS_KEY].items():
                if PAYLOAD in name:
                    self.payload_bytes += array.numpy().nbytes
                    self.serialised_bytes += len(array.data)
                    self.arrays += 1
        return reply


def _rule(kind, spec):
    inner = RFedAvg(0.01, 2, upload="tangent") if kind == "rfedavg" else RFedProj(0.01, 2)
    return Compressed(inner, make_compressor(spec))


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize(
    ("kind", "spec"),
    [("rfedavg", "qsgd:3"), ("rfedavg", "topk:0.2"), ("rfedproj", "rank:1"), ("rfedavg", "bf16")],
)
def test_a_compressed_job_equals_run_sync_and_moves_the_counted_bytes(kind, spec):
    job = SyncJob(KPCA, _rule(kind, spec), STEPS, name="packed", options=RunOptions(seed=2))
    grid = CountingGrid(make_client_app([job]))
    history = run_sync_job(grid, job, range(NODES))
    local = run_sync(KPCA.build(), _rule(kind, spec), STEPS, options=RunOptions(seed=2))
    np.testing.assert_allclose(history.final_point, local.final_point, rtol=0, atol=1e-10)
    np.testing.assert_allclose(history.uplink_bytes, local.uplink_bytes, rtol=0, atol=1e-9)
    n = KPCA.build().n_clients
    assert grid.payload_bytes == pytest.approx(history.uplink_bytes[-1] * n, rel=0, abs=1e-6)
    assert grid.payload_bytes > 0
    header = grid.serialised_bytes - grid.payload_bytes  # one .npy header per node's array
    assert 0 < header <= 256 * grid.arrays


@pytest.mark.usefixtures("task_identity")
def test_a_robust_aggregator_sees_the_decoded_updates_on_flower():
    from riemfl.federated.robust import GeometricMedian

    job = SyncJob(
        KPCA,
        _rule("rfedavg", "topk:0.2"),
        STEPS,
        name="median",
        aggregator=GeometricMedian(),
        options=RunOptions(seed=3),
    )
    history = run_sync_job(InProcessGrid(make_client_app([job])), job, range(NODES))
    local = run_sync(
        KPCA.build(),
        _rule("rfedavg", "topk:0.2"),
        STEPS,
        aggregator=GeometricMedian(),
        options=RunOptions(seed=3),
    )
    np.testing.assert_allclose(history.final_point, local.final_point, rtol=0, atol=1e-10)
    plain = run_sync(KPCA.build(), _rule("rfedavg", "topk:0.2"), STEPS, options=RunOptions(seed=3))
    assert not np.allclose(history.final_point, plain.final_point, rtol=0, atol=1e-8)


def test_secure_aggregation_refuses_compressed_payloads():
    with pytest.raises(NotSumOnlyError, match="compressed payloads"):
        SyncJob(KPCA, _rule("rfedavg", "fp16"), STEPS, secagg=True)


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize(
    ("spec", "mode"), [("topk:0.2", "central"), ("qsgd:3", "central"), ("rank:1", "local")]
)
def test_privacy_with_compression_on_flower_is_run_syncs(spec, mode):
    """The nodes clip (and in local mode noise), then compress; under central noise the server
    clips each decoded update again, then adds the noise: the run of run_sync(privacy=...) with
    the same compressed rule (to 1e-10), the same epsilon, and the compressed bytes."""
    from riemfl.federated.privacy import DPSettings

    settings = DPSettings(0.05, 0.3, mode=mode)
    job = SyncJob(
        KPCA, _rule("rfedavg", spec), STEPS, name="dp", privacy=settings, options=RunOptions(seed=2)
    )
    grid = CountingGrid(make_client_app([job]))
    history = run_sync_job(grid, job, range(NODES))
    local = run_sync(
        KPCA.build(), _rule("rfedavg", spec), STEPS, privacy=settings, options=RunOptions(seed=2)
    )
    if mode == "central":  # local noise: each client's own stream on Flower, one in process
        np.testing.assert_allclose(history.final_point, local.final_point, rtol=0, atol=1e-10)
    assert history.metrics["epsilon"] == local.metrics["epsilon"] < [np.inf] * (STEPS + 1)
    np.testing.assert_allclose(history.uplink_bytes, local.uplink_bytes, rtol=0, atol=1e-9)
    n = KPCA.build().n_clients
    assert grid.payload_bytes == pytest.approx(history.uplink_bytes[-1] * n, rel=0, abs=1e-6)
    assert history.config["algorithm"]["privacy"]["mode"] == mode


# ------------------------------------------------------------------ asynchronous FedBuff
BUFFER = 3


def _fedbuff(spec, **kwargs):
    return FedBuff(BUFFER, compressor=make_compressor(spec), compression_seed=5, **kwargs)


def _async_job(spec, steps, name="cbuff", options=None, **kwargs):
    return AsyncJob(
        KPCA,
        _fedbuff(spec),
        steps,
        0.01,
        2,
        name=name,
        max_poll=1e-3,
        options=options or RunOptions(seed=1),
        **kwargs,
    )


@pytest.fixture
def trainings(monkeypatch):
    """The local trainings the nodes run, per job run: (client, model received, local model)."""
    runs: list[list[tuple[int, np.ndarray, np.ndarray]]] = [[]]
    original = ProblemTrainer.train

    def train(trainer, client, start, rng, epochs=None):
        local = original(trainer, client, start, rng, epochs)
        runs[-1].append((int(client), np.array(start), np.array(local)))
        return local

    monkeypatch.setattr(ProblemTrainer, "train", train)
    return runs


def _replay(spec, log, runs, split, **kwargs):
    """The model an in-process FedBuff (its clients compress inside the rule) ends at when fed
    a Flower job's arrivals in the order of its log, each with the local model its node trained
    from the arrival's base (log entries before ``split`` from ``runs[0]``, the others from
    ``runs[1]``)."""
    problem = KPCA.build()
    rule = _fedbuff(spec, **kwargs)
    rule.reset(problem.manifold, problem.n_clients)
    pools = []
    for run in runs:
        pool = defaultdict(deque)
        for client, start, local in run:
            pool[client, start.tobytes()].append(local)
        pools.append(pool)
    versions = [runs[0][0][1]]  # every first dispatch sends x0
    entries = zip(log["client"], log["staleness"], log["weight"], log["applied"], strict=True)
    for i, (client, staleness, weight, applied) in enumerate(entries):
        current = len(versions) - 1
        base = versions[current - staleness]
        local = pools[i >= split][client, base.tobytes()].popleft()
        if applied:
            arrival = Arrival(client, base, local, versions[-1], staleness, weight, current)
            new = rule.apply(problem.manifold, arrival)
            if new is not None:
                versions.append(new)
    return versions[-1]


class PayloadGrid(CountingGrid):
    """The counting grid, for the payloads of asynchronous replies (``payload/<key>``)."""

    def _answer(self, message):
        reply = InProcessGrid._answer(self, message)
        if reply.has_content() and ARRAYS_KEY in reply.content:
            names = [n for n in reply.content[ARRAYS_KEY] if n.startswith("payload/")]
            self.payload_bytes += sum(reply.content[ARRAYS_KEY][n].numpy().nbytes for n in names)
            self.arrays += bool(names)  # replies that carry a payload
        return reply


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize(
    ("spec", "max_staleness"), [("topk:0.2", None), ("qsgd:4", None), ("rank:1", 0)]
)
def test_a_compressed_fedbuff_job_equals_the_rule_fed_its_arrivals(trainings, spec, max_staleness):
    """The nodes compress with the rows they keep; the server decodes: the model is the one the
    in-process rule reaches from the same local models, bit for bit, and the bytes the replies
    carry are the counted ones. Two messages per node make some uploads stale; with
    max_staleness=0 the server drops them, and the nodes discard their pending rows."""
    job = _async_job(spec, 6, max_staleness=max_staleness, node_workers=2)
    grid = PayloadGrid(make_client_app([job]))
    history = run_async_job(grid, job, list(range(NODES)))
    if max_staleness is not None:
        assert 0 < history.metrics["dropped"][-1] < history.metrics["updates"][-1]
    final = _replay(spec, history.log, trainings, split=len(history.log["client"]))
    np.testing.assert_array_equal(history.final_point, final)
    per_upload = job.rule.upload_nbytes((20, 5), np.dtype(np.float64))
    assert per_upload < 20 * 5 * 8
    assert grid.payload_bytes == per_upload * grid.arrays
    applied = sum(history.log["applied"])
    n = KPCA.build().n_clients
    assert history.uplink_bytes[-1] * n == pytest.approx(applied * per_upload, rel=1e-12)


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("spec", ["topk:0.2", "rank:1"])
def test_a_compressed_fedbuff_job_resumes_with_the_nodes_rows(trainings, tmp_path, spec):
    """Interrupted at server step 2, the job's checkpoint holds the nodes' residuals and
    PowerSGD factors; resumed on fresh nodes (their state lost), it continues as the rule with
    those rows would: the replay of both parts of the run ends at the resumed job's model."""
    checkpoint = tmp_path / "cbuff.ckpt"

    def stop_at_2(step, history):
        if step == 2:
            request_interrupt()

    first = RunOptions(seed=1, checkpoint=checkpoint, checkpoint_every=1, on_step=stop_at_2)
    job = _async_job(spec, 5, options=first)
    grid = PayloadGrid(make_client_app([job]))
    with pytest.raises(RunInterrupted):
        run_async_job(grid, job, list(range(NODES)))
    state = load_checkpoint(checkpoint)["state"]["rule"]
    assert state["compression"]["residuals"] is not None
    trainings.append([])
    resumed = _async_job(spec, 5, options=RunOptions(seed=1, checkpoint=checkpoint))
    history = run_async_job(PayloadGrid(make_client_app([resumed])), resumed, list(range(NODES)))
    assert history.metrics["step"][-1] == 5
    versions = np.asarray(history.log["version"])
    split = int(np.flatnonzero(versions == 2)[0]) + 1  # the entries before the checkpoint
    final = _replay(spec, history.log, trainings, split)
    np.testing.assert_array_equal(history.final_point, final)


@pytest.mark.usefixtures("task_identity")
def test_node_compression_rows_follow_the_servers_count():
    from flwr.app import RecordDict

    rows = NodeCompression(RecordDict(), "j")
    with pytest.raises(ProtocolError, match="train.riemfl_setup"):
        rows.rows_at(0, 0)
    rows.init([0, 1])
    assert rows.settle(0, 0) == {}
    rows.set_pending(0, {"residual": np.ones(3)})
    assert rows.rows_at(0, 0) == {}  # the server has not accepted it yet
    np.testing.assert_array_equal(rows.rows_at(0, 1)["residual"], np.ones(3))
    rows.set_pending(1, {"residual": np.full(3, 2.0)})
    assert rows.settle(1, 0) == {}  # dropped by the server: discarded
    with pytest.raises(ProtocolError, match="after 0"):
        rows.rows_at(1, 1)
    np.testing.assert_array_equal(rows.settle(0, 1)["residual"], np.ones(3))  # committed
    with pytest.raises(ProtocolError, match="lost its state"):
        rows.settle(0, 3)
    with pytest.raises(ProtocolError, match="not hosted"):
        rows.set_pending(7, {})
    rows.restore({1: 4}, {1: {"residual": np.zeros(3)}})
    np.testing.assert_array_equal(rows.rows_at(1, 4)["residual"], np.zeros(3))
    with pytest.raises(ProtocolError, match="does not host"):
        rows.restore({9: 0}, {})


def test_client_rows_travel_as_named_arrays():
    rows = {3: {"residual": np.ones(2), "state/q": np.zeros((2, 1))}, 5: {}}
    arrays = client_arrays(rows)
    assert sorted(arrays) == ["rows/3/residual", "rows/3/state/q"]
    back = rows_of_clients(arrays, [3, 5])
    assert sorted(back) == [3] and sorted(back[3]) == ["residual", "state/q"]
    for name in ("rows/4/residual", "rows/x/residual", "other/3/residual", "rows/3"):
        with pytest.raises(ProtocolError, match="is not a row"):
            rows_of_clients({name: np.ones(1)}, [3, 5])


def test_the_server_refuses_a_payload_that_does_not_decode():
    rule = _fedbuff("topk:0.2")
    rule.reset(KPCA.build().manifold, 6)
    codec = rule.compression
    payload, decoded, _ = codec.compress(0, 0, np.ones((20, 5)), {})
    np.testing.assert_array_equal(codec.decode(payload, np.float64), decoded)
    bad = {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in payload.items()}
    with pytest.raises(DTypeError):
        codec.decode(bad, np.float64)
    with pytest.raises(ShapeError, match="one row"):
        codec.decode({k: np.concatenate([v, v]) for k, v in payload.items()}, np.float64)
    nan = {k: np.full_like(v, np.nan) if v.dtype == np.float64 else v for k, v in payload.items()}
    with pytest.raises(NonFiniteError):
        codec.decode(nan, np.float64)


def test_privacy_with_a_compressed_fedbuff_is_refused_on_flower():
    from riemfl.federated.privacy import DPSettings

    rule = _fedbuff("fp16", privacy=DPSettings(1.0, 1.0))
    with pytest.raises(ParameterError, match="a Flower job takes one or the other"):
        AsyncJob(KPCA, rule, 2, step_size=0.01)

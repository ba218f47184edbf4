"""The Flower adapter's parts without the simulation engine: message format, checks, node
state, client isolation, hosting, jobs, the deployment app's configuration, the missing-Flower
error. Fast: no Ray, no processes beyond one interpreter for the import test."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: the backport Flower depends on
    import tomli as tomllib

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'riemfl[flower]')")

from riemfl.adapters.flower import (  # noqa: E402
    AsyncJob,
    CorruptReplies,
    NodeRegistrationError,
    PingJob,
    ProblemSpec,
    ProtocolError,
    SyncJob,
    TrainerMismatchError,
    deploy,
    hosted_clients,
    wire,
)
from riemfl.adapters.flower.async_server import GridAsyncSteps  # noqa: E402
from riemfl.adapters.flower.checks import (  # noqa: E402
    check_control_points,
    check_local_model,
    check_rows,
    check_upload_arrays,
    upload_kind,
)
from riemfl.adapters.flower.client import _Handlers, run_client_rule  # noqa: E402
from riemfl.adapters.flower.faults import FAULTS  # noqa: E402
from riemfl.adapters.flower.grid_io import check_cover, wait_for_nodes  # noqa: E402
from riemfl.adapters.flower.local import LocalDeployment  # noqa: E402
from riemfl.adapters.flower.node_state import NodeState  # noqa: E402

import riemfl  # noqa: E402
from riemfl.errors import ParameterError  # noqa: E402
from riemfl.experiments.registry import PROBLEMS  # noqa: E402
from riemfl.federated import (  # noqa: E402
    AsyncBezier,
    AsyncBezierED,
    AsyncManifold,
    BezierEmbedding,
    BezierProblemTrainer,
    Embedding,
    FedAsync,
    History,
    ProblemTrainer,
    RFedAvg,
    RFedProj,
    RFedProx,
    RFedSVRG,
)
from riemfl.problems import FunctionProblem  # noqa: E402

KPCA = ProblemSpec("kpca-synthetic", clients=6, seed=1)


# --------------------------------------------------------------------------------- laziness
def test_without_flower_import_works_and_use_names_the_extra():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["flwr"] = None  # any import of flwr fails
        import riemfl.errors
        import riemfl.adapters.flower as f
        from riemfl.federated import RFedProj
        job = f.SyncJob(f.ProblemSpec("kpca-synthetic", clients=4), RFedProj(1e-3, 2), 1)
        try:
            f.simulate([job], 2)
        except f.FlowerNotInstalledError as exc:
            assert isinstance(exc, riemfl.errors.MissingDependencyError)
            print("ERROR:", exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert 'pip install "riemfl[flower]"' in out.stdout


# --------------------------------------------------------------------------------- wire format
def test_encode_decode_round_trip_is_exact():
    x = np.random.default_rng(0).normal(size=(20, 5))
    batches = np.arange(12, dtype=np.intp).reshape(2, 3, 2)
    content = wire.encode(
        {"job": "a", "clients": [np.int64(1), 2], "finish": True, "eta": np.float64(0.5)},
        {**wire.prefixed("message", {"x": x}), "batches": batches, "s": 3.0},
    )
    config, arrays = wire.decode(content)
    assert config["clients"] == [1, 2] and config["finish"] is True and config["eta"] == 0.5
    assert config["protocol"] == wire.PROTOCOL
    got = wire.group("message", arrays)
    assert set(got) == {"x"} and got["x"].dtype == np.float64
    assert np.array_equal(got["x"], x)  # bit for bit
    assert arrays["batches"].dtype == batches.dtype and np.array_equal(arrays["batches"], batches)
    assert arrays["s"].shape == ()
    got["x"][0, 0] = 1.0  # writable


def test_decode_refuses_other_formats_and_versions():
    from flwr.app import ConfigRecord, RecordDict

    with pytest.raises(ProtocolError, match="riemfl.config"):
        wire.decode(RecordDict({"config": ConfigRecord({"a": 1})}))
    content = wire.encode({"job": "a"})
    content[wire.CONFIG_KEY]["protocol"] = 99
    with pytest.raises(ProtocolError, match="protocol 99"):
        wire.decode(content)
    with pytest.raises(ProtocolError, match="'bad' has type dict"):
        wire.encode({"bad": {"a": 1}})


def test_point_meta_must_match_the_problem():
    stiefel = riemfl.Stiefel(20, 5)
    wire.check_point_meta(stiefel, wire.point_meta(stiefel))
    with pytest.raises(ProtocolError, match="Stiefel"):
        wire.check_point_meta(riemfl.Stiefel(20, 4), wire.point_meta(stiefel))


# --------------------------------------------------------------------------------- hosting
@pytest.mark.parametrize(("n", "parts"), [(6, 3), (10, 10), (7, 3), (3, 5)])
def test_partitions_host_every_client_once(n, parts):
    hosting = {
        p: hosted_clients({"partition-id": p, "num-partitions": parts}, n) for p in range(parts)
    }
    check_cover("job", {p: c for p, c in hosting.items() if c}, n)
    assert sorted(c for cs in hosting.values() for c in cs) == list(range(n))


def test_hosting_errors_name_the_node_config():
    with pytest.raises(ProtocolError, match="partition-id=0 num-partitions=3"):
        hosted_clients({}, 4)
    with pytest.raises(ProtocolError, match="not in 0..1"):
        hosted_clients({"partition-id": 2, "num-partitions": 2}, 4)
    with pytest.raises(NodeRegistrationError, match=r"missing \[3\]"):
        check_cover("job", {1: [0, 1], 2: [2]}, 4)
    with pytest.raises(NodeRegistrationError, match=r"hosted twice .*\(1, 1, 2\)"):
        check_cover("job", {1: [0, 1], 2: [1, 2]}, 3)


class _Grid:
    def __init__(self, nodes):
        self.nodes = nodes

    def get_node_ids(self):
        return list(self.nodes)


def test_wait_for_nodes():
    assert wait_for_nodes(_Grid([5, 3]), 2, timeout=1.0) == [3, 5]
    with pytest.raises(NodeRegistrationError, match="1 node.* expected at least 2"):
        wait_for_nodes(_Grid([7]), 2, timeout=0.01)


# --------------------------------------------------------------------------------- checks
def test_upload_kinds_follow_the_algorithm():
    assert upload_kind(RFedProj(1e-3), 0, "x") == "ambient"  # the unprojected z-hat
    assert upload_kind(RFedAvg(1e-3), 0, "x") == "point"  # inherited from RFedProx
    assert upload_kind(RFedProx(1e-3), 0, "x") == "point"
    assert upload_kind(RFedSVRG(1e-3), 0, "grad") == "tangent"
    assert upload_kind(RFedSVRG(1e-3), 1, "x") == "point"
    assert upload_kind(RFedProj(1e-3), 1, "y") == "ambient"
    assert upload_kind(RFedProj(1e-3), 0, "x", {(0, "x"): "point"}) == "point"
    with pytest.raises(ProtocolError, match="expected one of"):
        upload_kind(RFedProj(1e-3), 0, "x", {(0, "x"): "vector"})


def test_check_rows_reasons():
    m = riemfl.Stiefel(6, 2)
    x = m.random_point(rng=np.random.default_rng(0))
    u = m.random_tangent(x, rng=np.random.default_rng(1))
    rows = np.stack([x, np.full_like(x, np.nan), 1.01 * x])
    got = check_rows(m, "point", rows, 1e-8)
    assert got[0] is None and got[1] == "non-finite values" and "NotOnManifoldError" in got[2]
    assert check_rows(m, "ambient", rows, 1e-8)[2] is None  # no manifold constraint
    tangent = check_rows(m, "tangent", np.stack([u, u + x]), 1e-8, base=x)
    assert tangent[0] is None and "not tangent" in tangent[1]


def test_check_upload_arrays():
    good = {"x": np.zeros((2, 6, 2))}
    assert check_upload_arrays(good, {"x": (6, 2)}, 2) is None
    assert "shape" in check_upload_arrays(good, {"x": (6, 2)}, 3)
    assert "instead of" in check_upload_arrays(good, {"grad": (6, 2)}, 2)
    ints = {"x": np.zeros((2, 6, 2), dtype=int)}
    assert "dtype" in check_upload_arrays(ints, {"x": (6, 2)}, 2)


def test_check_local_model():
    m = riemfl.Stiefel(6, 2)
    x = m.random_point(rng=np.random.default_rng(0))
    assert check_local_model(m, x, 1e-8) is None
    assert "has shape (2, 6, 2); expected (6, 2)" in check_local_model(m, np.stack([x, x]), 1e-8)
    assert "dtype int64" in check_local_model(m, np.zeros((6, 2), dtype=np.int64), 1e-8)
    assert check_local_model(m, 1.01 * x, 1e-8).startswith("local model: NotOnManifoldError")


def test_check_control_points_reasons():
    """An AsyncBezier upload: (degree + 1, *point_shape), finite, on the base manifold, and the
    curve starting at the model the client received."""
    base = riemfl.Stiefel(6, 2)
    emb = BezierEmbedding(base)
    rng = np.random.default_rng(0)
    received = base.random_point(rng=rng)
    phi = np.stack([received, base.random_point(rng=rng), base.random_point(rng=rng)])
    assert check_control_points(emb, phi, received, 1e-8) is None
    near = phi.copy()
    near[0] = base.retract(received, 1e-12 * base.random_tangent(received, rng=rng))
    assert check_control_points(emb, near, received, 1e-8) is None  # within atol
    assert "has shape (6, 2); expected (3, 6, 2)" in check_control_points(
        emb, received, received, 1e-8
    )  # a local model instead of a curve
    assert "expected (4, 6, 2)" in check_control_points(BezierEmbedding(base, 3), phi, received, 1)
    nan = phi.copy()
    nan[1, 0, 0] = np.nan
    assert check_control_points(emb, nan, received, 1e-8).endswith("non-finite values")
    off = phi.copy()
    off[2] *= 1.01  # the end point off the Stiefel manifold
    assert "NotOnManifoldError" in check_control_points(emb, off, received, 1e-8)
    moved = phi.copy()
    moved[0] = phi[1]  # on the manifold, but not the model the client received
    why = check_control_points(emb, moved, received, 1e-8)
    assert why.startswith("the curve starts") and "first control point" in why


def test_upload_meta_must_match_the_job():
    expected = wire.upload_meta("curve", (3, 4, 2))
    assert expected == {"upload": "curve", "upload_shape": [3, 4, 2]}
    wire.check_upload_meta({**expected, "job": "a"}, expected)
    point = wire.upload_meta("point", (4, 2))
    with pytest.raises(ProtocolError, match=r"announces upload 'point' of shape \(4, 2\).*'curve'"):
        wire.check_upload_meta(point, expected)
    with pytest.raises(ProtocolError, match="announces upload None"):
        wire.check_upload_meta({}, expected)
    config, _ = wire.decode(wire.encode(expected))  # travels as a list of ints
    wire.check_upload_meta(config, expected)
    payload = wire.upload_meta("payload", (4, 2))
    with pytest.raises(ProtocolError, match="announces upload 'payload'"):
        wire.check_upload_meta(payload, point)
    with pytest.raises(ProtocolError, match="upload kind must be one of"):
        wire.upload_meta("model", (4, 2))


# --------------------------------------------------------------------------------- node state
def test_node_state_commits_only_accepted_rows():
    from flwr.app import RecordDict

    state = NodeState(RecordDict(), "job")
    with pytest.raises(ProtocolError, match="train.riemfl_setup"):
        state.gather([0])
    rows = np.arange(3 * 2.0).reshape(3, 2)
    state.init([4, 5, 6], {"c": rows})
    assert np.array_equal(state.gather([6, 4])["c"], rows[[2, 0]])
    state.set_pending([4, 6], {"c": np.array([[10.0, 11.0], [12.0, 13.0]])})
    assert state.pending == [4, 6]
    state.commit([6])  # client 4's upload was dropped by the server: it keeps its old row
    assert state.pending == []
    assert np.array_equal(state.gather([4, 5, 6])["c"], [[0, 1], [2, 3], [12, 13]])
    with pytest.raises(ProtocolError, match="no pending rows"):
        state.commit([5])
    with pytest.raises(ProtocolError, match="not hosted"):
        state.gather([1])


def _raising_problem(bad: int) -> FunctionProblem:
    a = np.random.default_rng(0).normal(size=(3, 4, 3))

    def egrad(i):
        def g(x):
            if i == bad:
                raise FloatingPointError("client oracle failed")
            return a[i].T @ (a[i] @ x)

        return g

    losses = [lambda x, i=i: 0.5 * float(np.sum((a[i] @ x) ** 2)) for i in range(3)]
    return FunctionProblem(riemfl.Euclidean(3, 2), losses, [egrad(i) for i in range(3)])


def test_client_rule_isolates_a_failing_client():
    problem = _raising_problem(bad=1)
    algorithm = RFedAvg(0.1, 2)
    x = np.ones((3, 2))
    uploads, rows, ok, reasons = run_client_rule(
        algorithm, problem, 0, {"x": x}, {}, [0, 1, 2], None
    )
    assert ok == [True, False, True] and list(reasons) == [1]
    assert "FloatingPointError: client oracle failed" in reasons[1]
    assert uploads["x"].shape == (2, 3, 2) and rows == {}
    alone, *_ = run_client_rule(algorithm, problem, 0, {"x": x}, {}, [2], None)
    np.testing.assert_array_equal(uploads["x"][1], alone["x"][0])


# --------------------------------------------------------------------------------- jobs
def test_job_validation():
    with pytest.raises(ParameterError, match="job name"):
        SyncJob(KPCA, RFedProj(1e-3), 2, name="a/b")
    with pytest.raises(ParameterError, match="steps"):
        SyncJob(KPCA, RFedProj(1e-3), -1)
    with pytest.raises(ParameterError, match="clients_per_round must be an integer >= 1 and <= 6"):
        SyncJob(KPCA, RFedProj(1e-3), 2, clients_per_round=7)
    with pytest.raises(ParameterError, match="SyncAlgorithm"):
        SyncJob(KPCA, FedAsync(), 2)
    with pytest.raises(ParameterError, match="AsyncRule"):
        AsyncJob(KPCA, RFedProj(1e-3), 2, 1e-3)
    with pytest.raises(ParameterError, match="weights"):
        AsyncJob(KPCA, FedAsync(), 2, 1e-3, weights="equal")
    with pytest.raises(ParameterError, match="repeats"):
        PingJob(repeats=0)
    with pytest.raises(ParameterError, match="FederatedProblem or a ProblemSpec"):
        SyncJob("kpca", RFedProj(1e-3), 2)
    assert KPCA.build() is KPCA.build()  # built once per process
    job = AsyncJob(KPCA, FedAsync(), 2, 1e-3, weights="uniform")
    np.testing.assert_allclose(job.weight_vector(), np.full(6, 1 / 6))


def centres(n: int = 3, d: int = 4) -> FunctionProblem:
    """f_i(x) = |x - c_i|^2 / 2 on R^d (the LeastSquares of the AsyncBezier tests)."""
    c = np.random.default_rng(0).normal(size=(n, d))
    return FunctionProblem(
        riemfl.Euclidean(d),
        [lambda x, i=i: 0.5 * float(np.sum((x - c[i]) ** 2)) for i in range(n)],
        [lambda x, i=i: x - c[i] for i in range(n)],
        name="centres",
    )


CENTRES = centres()


def test_curve_job_builds_the_curve_client():
    m = CENTRES.manifold
    job = AsyncJob(CENTRES, AsyncBezier(m), 4, 0.1, 3, name="bezier")
    assert job.curve is True and job.upload_shape == (3, 4)
    trainer = job.trainer()
    assert isinstance(trainer, BezierProblemTrainer)
    assert (trainer.warmup_steps, trainer.curve_steps, trainer.degree) == (3, 3, 2)
    assert trainer.freeze_end and trainer.mu == 0.0
    job = AsyncJob(
        CENTRES,
        AsyncBezierED(m, degree=3),
        4,
        0.1,
        3,
        warmup_steps=1,
        curve_steps=0,
        mu=0.5,
        freeze_end=False,
    )
    trainer = job.trainer()
    assert job.upload_shape == (4, 4) and trainer.degree == 3
    assert (trainer.warmup_steps, trainer.curve_steps, trainer.mu) == (1, 0, 0.5)
    assert not trainer.freeze_end
    point = AsyncJob(CENTRES, FedAsync(), 4, 0.1, 3)
    assert point.curve is False and point.upload_shape == (4,)
    assert isinstance(point.trainer(), ProblemTrainer)


def test_curve_job_refuses_a_mismatched_client():
    m = CENTRES.manifold
    with pytest.raises(
        TrainerMismatchError,
        match=r"takes a curve's control points of shape "
        r"\(3, 4\), but curve=False",
    ):
        AsyncJob(CENTRES, AsyncBezier(m), 4, 0.1, curve=False)
    with pytest.raises(TrainerMismatchError, match="curve=True .* rule 'fedasync'"):
        AsyncJob(CENTRES, FedAsync(), 4, 0.1, curve=True)
    with pytest.raises(TrainerMismatchError, match="'warmup_steps': 2.*'freeze_end': False"):
        AsyncJob(CENTRES, FedAsync(), 4, 0.1, warmup_steps=2, freeze_end=False)
    with pytest.raises(TrainerMismatchError, match="'mu': 0.1"):
        AsyncJob(CENTRES, FedAsync(), 4, 0.1, mu=0.1)
    assert issubclass(TrainerMismatchError, ParameterError)

    class Flat(Embedding):
        base = parameters = m

        def point_parameters(self, theta):
            return theta

        def embed(self, phi, s):
            return phi

    with pytest.raises(TrainerMismatchError, match="learns a Flat; .* only for a BezierEmbedding"):
        AsyncJob(CENTRES, AsyncManifold(Flat(), 1.0), 4, 0.1)
    with pytest.raises(ParameterError, match="curve must be True, False or None"):
        AsyncJob(CENTRES, AsyncBezier(m), 4, 0.1, curve=1)
    with pytest.raises(ParameterError, match="curve_steps must be an integer >= 0"):
        AsyncJob(CENTRES, AsyncBezier(m), 4, 0.1, curve_steps=-1)
    # a curved problem: the nodes learn geodesic curves (ManifoldBezierTrainer)
    curved = AsyncJob(KPCA, AsyncBezier(KPCA.build().manifold), 4, 1e-3)
    assert type(curved.trainer()).__name__ == "ManifoldBezierTrainer"
    assert curved.upload_shape == (3, *KPCA.build().manifold.point_shape)


def _message(content, message_id="m1"):
    """A Flower message to a node, as the SuperLink delivers it (metadata set)."""
    from flwr.app import Message, Metadata

    meta = Metadata(
        run_id=1,
        message_id=message_id,
        src_node_id=0,
        dst_node_id=1,
        reply_to_message_id="",
        group_id="",
        created_at=time.time(),
        ttl=60.0,
        message_type=wire.ASYNC,
    )
    return Message(content, metadata=meta)


def test_curve_round_trip_node_to_server_checks():
    """Without Ray: the node's handler trains the curve client and the server's reply check
    accepts its upload, and drops a moved start, a NaN curve and a mislabelled reply."""
    from flwr.app import Context, RecordDict

    job = AsyncJob(CENTRES, AsyncBezier(CENTRES.manifold), 4, 0.2, 2, name="bezier")
    x = np.full(4, 2.0)
    history = History(config={"excluded": []})
    run = GridAsyncSteps(None, job, {1: [0, 1, 2]}, x, history)
    version = run.store.acquire()
    config = {
        "job": "bezier",
        "client": 1,
        "version": version,
        "seed": 0,
        "dispatch": 0,
        "epochs": -1,
        **run.meta,
    }
    context = Context(
        run_id=1,
        node_id=1,
        node_config={"partition-id": 0, "num-partitions": 1},
        state=RecordDict(),
        run_config={},
    )
    node = _Handlers([job])
    reply = node.train_async(_message(wire.encode(config, {"x": x})), context)
    reply_config, arrays = wire.decode(reply.content)
    assert reply_config["upload"] == "curve" and reply_config["upload_shape"] == [3, 4]
    phi = arrays["x"]
    assert phi.shape == (3, 4) and np.array_equal(phi[0], x)  # the curve starts at x
    assert not np.allclose(phi[2], x)  # the end point trained
    local, why = run._local_model(reply, 1, version)
    assert why is None and np.array_equal(local, phi)
    for fault, reason in (("move_start", "the curve starts 1 "), ("nan", "non-finite")):
        reply.content = wire.encode(reply_config, {"x": FAULTS[fault](phi)})
        local, why = run._local_model(reply, 1, version)
        assert local is None and reason in why
    reply.content = wire.encode({**reply_config, "upload": "point"}, {"x": phi})
    assert run._local_model(reply, 1, version)[1].startswith("malformed reply: message announces")
    # a node refuses a dispatch that expects a point upload from its curve job
    with pytest.raises(ProtocolError, match="announces upload 'point'"):
        point = {**config, **wire.upload_meta("point", (4,))}
        node.train_async(_message(wire.encode(point, {"x": x})), context)


def test_fault_and_deployment_arguments():
    with pytest.raises(ParameterError, match="unknown faults"):
        CorruptReplies("job", 0, faults=("zero",))
    with pytest.raises(ParameterError, match="supernodes"):
        LocalDeployment(0, ".")


# --------------------------------------------------------------------------------- deploy app
def test_run_config_builds_jobs():
    job = deploy.job_from_run_config({"problem-clients": 4, "steps": 2, "batch-size": 3})
    assert isinstance(job, SyncJob) and isinstance(job.algorithm, RFedProj)
    assert job.steps == 2 and job.batch_size == 3 and job.clients_per_round is None
    # the registry's default for kpca-synthetic at the run config's tau = 5
    default = PROBLEMS["kpca-synthetic"].default_step_size(job.resolved, 5)
    assert job.algorithm.step_size == default
    assert job.resolved.n_clients == 4
    assert deploy.job_from_run_config({"problem-clients": 4, "steps": 2, "batch-size": 3}) is job
    other = deploy.job_from_run_config(
        {"engine": "async", "rule": "fedbuff", "buffer-size": 3, "steps": 7}
    )
    assert isinstance(other, AsyncJob) and other.rule.buffer_size == 3
    with pytest.raises(ParameterError, match="unknown run-config keys"):
        deploy.job_from_run_config({"round": 2})
    with pytest.raises(ParameterError, match="engine"):
        deploy.job_from_run_config({"engine": "both"})


def test_run_config_builds_curve_rule_jobs():
    """AsyncBezier from a run config: the rule gets the problem's manifold, the nodes the curve
    client (BezierProblemTrainer) with the configured K1 and K - K1."""
    from riemfl.federated import AsyncManifold, BezierProblemTrainer

    config = {
        "engine": "async",
        "rule": "asyncbezier-ed",
        "problem": "logreg-digits",
        "problem-clients": 5,
        "warmup-steps": 2,
        "curve-steps": 4,
        "vartheta": 0.0,
    }
    job = deploy.job_from_run_config(config)
    assert isinstance(job.rule, AsyncManifold) and job.rule.name == "asyncbezier-ed"
    assert job.rule.embedding.base is job.resolved.manifold and job.rule.alpha == 1.0
    assert job.rule.server_lr == 0.25  # Licudi et al. 2025, Table 3, when unset
    assert job.rule.correction.vartheta == 0.0
    assert job.curve and job.upload_shape == (3, 65, 10)
    trainer = job.trainer()
    assert isinstance(trainer, BezierProblemTrainer)
    assert (trainer.warmup_steps, trainer.curve_steps) == (2, 4)
    default = deploy.job_from_run_config({**config, "warmup-steps": -1, "curve-steps": -1})
    assert (default.warmup_steps, default.curve_steps) == (5, 5)  # local-steps each
    assert default.node_workers == 1  # one message in flight per node unless the config says
    assert deploy.job_from_run_config({**config, "node-workers": 2}).node_workers == 2
    curved = deploy.job_from_run_config({**config, "problem": "kpca-synthetic"})
    assert type(curved.trainer()).__name__ == "ManifoldBezierTrainer"  # geodesic curves
    with pytest.raises(TrainerMismatchError, match="settings of the curve client"):
        deploy.job_from_run_config({**config, "rule": "fedasync", "vartheta": 1.0})
    with pytest.raises(ParameterError, match="'vartheta' sets the curve rules"):
        deploy.job_from_run_config({**config, "rule": "fedasync", "warmup-steps": -1})


def test_app_project_is_a_valid_flower_app(tmp_path):
    from flwr.common.config import validate_config

    path = deploy.write_app_project(tmp_path / "app", {"steps": 3, "output": "/tmp/r.json"})
    config = tomllib.loads(path.read_text())
    app = config["tool"]["flwr"]["app"]
    assert app["components"]["serverapp"] == "riemfl.adapters.flower.deploy:server_app"
    assert app["config"]["steps"] == 3 and app["config"]["output"] == "/tmp/r.json"
    assert set(app["config"]) == set(deploy.DEFAULTS)
    ok, errors, _ = validate_config(config, check_module=True, project_dir=path.parent)
    assert ok, errors

"""Faults in a Flower run: dead nodes, silent nodes, faulty and complex uploads, a failing job.

Fast part (no Ray): the asynchronous loop on a stand-in for Flower's ``Grid`` whose nodes are
real ClientApps (``make_client_app``, with ``CorruptReplies`` mods) called in this process, or
nodes that answer as a dead or silent node does (also behind a pool of two actors, as in a
simulation on a 2-core machine). Slow part: one Flower simulation with a node process that dies
(``os._exit``) in a synchronous and in an asynchronous job, complex uploads on both paths, and
a last job that cannot make progress, whose failure must keep the earlier jobs' results; and
one with two actors and a node that hangs in an asynchronous job.
"""

from __future__ import annotations

import ipaddress
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'riemfl[flower]')")

from riemfl.adapters.flower import (  # noqa: E402
    AsyncJob,
    CorruptReplies,
    FlowerAdapterError,
    JobFailedError,
    NoProgressError,
    PingJob,
    ProblemSpec,
    ReplyTimeoutError,
    SyncJob,
    default_backend_config,
    deploy,
    hosted_clients,
    make_client_app,
    simulate,
)
from riemfl.adapters.flower.async_server import run_async_job  # noqa: E402
from riemfl.adapters.flower.checks import (  # noqa: E402
    check_local_model,
    check_rows,
    check_upload_arrays,
)
from riemfl.adapters.flower.grid_io import CLIENT_APP_RAISED, node_lost  # noqa: E402
from riemfl.adapters.flower.simulation import (  # noqa: E402
    ACTOR_FAULT_TOLERANCE,
    _fault_tolerant,
    _with_timeouts,
)
from riemfl.adapters.flower.wire import ASYNC, PING  # noqa: E402

import riemfl  # noqa: E402
from riemfl.errors import ParameterError, RiemflError  # noqa: E402
from riemfl.federated import ClientDroppedWarning, FedAsync, RFedAvg, RFedProj, RunOptions  # noqa: E402

NODES = 3
KPCA = ProblemSpec("kpca-synthetic", clients=6, seed=1)
ETA = 4e-3
DEAD, COMPLEX, HANG = 1, 2, 1  # partition-ids of the faulty nodes


def clients_of(partition: int, n: int = 6) -> list[int]:
    return hosted_clients({"partition-id": partition, "num-partitions": NODES}, n)


# --------------------------------------------------------------------------------- checks
def test_complex_uploads_are_refused_by_every_check():
    """Complex values are finite and keep their shape: each check refuses them by dtype."""
    m = riemfl.Euclidean(3)
    rows = np.ones((2, 3)) + 1e-3j
    assert all("complex values" in why for why in check_rows(m, "ambient", rows, 1e-8))
    assert "complex values" in check_upload_arrays({"x": rows}, {"x": (3,)}, 2)
    assert "complex values" in check_local_model(m, rows[0], 1e-8)
    assert check_rows(m, "ambient", rows.real, 1e-8) == [None, None]


def test_fault_arguments():
    CorruptReplies("job", 0, faults=("die",))
    CorruptReplies("job", 0, faults=("complex", "nan"))
    with pytest.raises(ParameterError, match="alone"):
        CorruptReplies("job", 0, faults=("die", "nan"))
    with pytest.raises(ParameterError, match="unknown faults"):
        CorruptReplies("job", 0, faults=("zero",))
    assert CorruptReplies("job", 0, faults=("hang",), hang_for=2).hang_for == 2.0
    with pytest.raises(ParameterError, match="hang_for"):
        CorruptReplies("job", 0, faults=("hang",), hang_for=0)


def test_backend_config_restarts_actors_and_binds_to_loopback():
    config = default_backend_config(2)
    assert config["client_resources"]["max_restarts"] == -1
    assert config["client_resources"]["max_task_retries"] == 1
    assert config["init_args"]["_node_ip_address"] == "127.0.0.1"
    assert "_node_ip_address" not in default_backend_config(2, loopback=False)["init_args"]
    mine = {"client_resources": {"num_cpus": 2, "max_task_retries": 0}, "init_args": {}}
    merged = _fault_tolerant(mine)
    assert merged["client_resources"] == {
        **ACTOR_FAULT_TOLERANCE,
        "num_cpus": 2,
        "max_task_retries": 0,
    }
    assert mine["client_resources"] == {"num_cpus": 2, "max_task_retries": 0}  # not changed
    assert _fault_tolerant({})["client_resources"]["max_restarts"] == -1


def test_timeouts_and_failures_are_job_parameters():
    job = SyncJob(KPCA, RFedProj(ETA), 1, registration_timeout=30, reply_timeout=5)
    assert (job.registration_timeout, job.reply_timeout) == (30.0, 5.0)
    with pytest.raises(ParameterError, match="registration_timeout"):
        SyncJob(KPCA, RFedProj(ETA), 1, registration_timeout=0)
    with pytest.raises(ParameterError, match="max_failures"):
        AsyncJob(KPCA, FedAsync(), 2, ETA, max_failures=0)
    with pytest.raises(ParameterError, match="node_workers"):
        AsyncJob(KPCA, FedAsync(), 2, ETA, node_workers=0)
    config = {
        "engine": "async",
        "problem-clients": 6,
        "registration-timeout": 42.0,
        "reply-timeout": 7.0,
        "max-failures": 5,
    }
    job = deploy.job_from_run_config(config)
    assert (job.registration_timeout, job.reply_timeout, job.max_failures) == (42.0, 7.0, 5)
    # simulate(registration_timeout=, reply_timeout=) set them for every job that has them
    sync, ping = _with_timeouts(
        [SyncJob(KPCA, RFedProj(ETA), 1), PingJob()], registration_timeout=9.0, reply_timeout=3.0
    )
    assert (sync.registration_timeout, sync.reply_timeout, ping.reply_timeout) == (9.0, 3.0, 3.0)
    assert _with_timeouts([ping], registration_timeout=None, reply_timeout=None)[0] is ping


def test_node_lost_tells_a_dead_node_from_a_raising_clientapp():
    from flwr.common.constant import ErrorCode

    assert CLIENT_APP_RAISED == ErrorCode.CLIENT_APP_RAISED_EXCEPTION
    assert node_lost(None)


# --------------------------------------------------------------------------------- fake grid
@pytest.fixture
def task_identity(monkeypatch):
    """What Flower's engine sets in its ServerApp process before messages can be created."""
    from flwr.supercore.task_identity import TaskIdentity

    for key, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, key, value)


class FakeGrid:
    """Flower's ``Grid`` without its engine: node p (node id = partition-id) answers each pushed
    message at once with ``answer(p, message)``: a reply, or ``None`` (it stays silent).
    Raises when more than ``limit`` messages are pushed: a loop that spins fails the test.

    With ``actors``, the messages of every node are served in order by that many actors, as by
    Flower's simulation engine: a silent node's message holds its actor for good (a node that
    hangs), and the messages behind it wait for a free actor."""

    def __init__(self, answer, limit: int = 500, actors: int | None = None) -> None:
        self.answer, self.limit, self.actors = answer, limit, actors
        self.sent: list[tuple[int, str]] = []  # (node, message type) of every message
        self.replies: dict[str, object] = {}
        self.waiting: list[tuple[str, int, object]] = []  # (id, node, message) not yet served
        self.held = 0  # actors held by a silent node's message

    def serve(self) -> None:
        """Answer the waiting messages in order while an actor is free."""
        while self.waiting and self.held < self.actors:
            mid, node, message = self.waiting.pop(0)
            reply = self.answer(node, message)
            if reply is None:
                self.held += 1
            else:
                self.replies[mid] = reply

    def get_node_ids(self) -> list[int]:
        return list(range(NODES))

    def push_messages(self, messages):
        ids = []
        for message in messages:
            mid = f"m{len(self.sent)}"
            message.metadata.__dict__["_message_id"] = mid  # as the SuperLink does
            node = message.metadata.dst_node_id
            self.sent.append((node, message.metadata.message_type))
            if len(self.sent) > self.limit:
                raise AssertionError(f"{len(self.sent)} messages pushed: the loop spins")
            ids.append(mid)
            if self.actors is not None:
                self.waiting.append((mid, node, message))
                continue
            reply = self.answer(node, message)
            if reply is not None:
                self.replies[mid] = reply
        return ids

    def pull_messages(self, message_ids):
        if self.actors is not None:
            self.serve()
        return [self.replies.pop(i) for i in message_ids if i in self.replies]

    def dispatched(self, node: int) -> int:
        return sum(1 for n, kind in self.sent if n == node and kind == ASYNC)


def error_reply(message, code: int, reason: str):
    from flwr.app import Message
    from flwr.app.error import Error

    return Message(Error(code=code, reason=reason), reply_to=message)


def nodes(job, mods=(), dead=(), silent=()):
    """``answer`` of a FakeGrid: node p runs the job's real ClientApp (with ``mods``; an
    exception becomes Flower's error reply), a dead node answers as Flower's simulation does
    when the ClientApp's actor died, a silent node never answers its training messages."""
    from flwr.app import Context, RecordDict

    app = make_client_app([job], mods=list(mods))
    contexts = {}
    for p in range(NODES):
        config = {"partition-id": p, "num-partitions": NODES}
        contexts[p] = Context(
            run_id=1, node_id=p, node_config=config, state=RecordDict(), run_config={}
        )

    def answer(node, message):
        training = message.metadata.message_type == ASYNC
        if training and node in silent:
            return None
        if training and node in dead:
            reason = "<class 'ray.exceptions.ActorDiedError'>:<'The actor died unexpectedly'>"
            return error_reply(message, 0, reason)
        try:
            return app(message, contexts[node])
        except Exception as exc:  # noqa: BLE001 - as Flower's engine reports it
            return error_reply(message, CLIENT_APP_RAISED, f"{type(exc).__name__}: {exc}")

    return answer


def small_async(name: str, steps: int = 8, **kwargs) -> AsyncJob:
    return AsyncJob(KPCA, FedAsync(), steps, ETA, 1, name=name, max_poll=1e-3, **kwargs)


def excluded(history) -> dict[int, str]:
    return {e["client"]: e["reason"] for e in history.config["excluded"]}


def test_async_dead_node_is_excluded_and_the_run_goes_on(task_identity):
    job = small_async("dead")
    grid = FakeGrid(nodes(job, dead={DEAD}))
    with pytest.warns(ClientDroppedWarning) as caught:  # every drop warns; the last excludes
        history = run_async_job(grid, job, list(range(NODES)))
    assert any("excluded" in str(w.message) for w in caught)
    assert history.metrics["step"][-1] == 8
    assert grid.dispatched(DEAD) == 1  # one message in flight per node; never again
    reasons = excluded(history)
    assert sorted(reasons) == clients_of(DEAD)
    assert all("could not run the ClientApp" in w for w in reasons.values())
    assert all("ActorDiedError" in w for w in reasons.values())
    log = history.log
    for client, applied in zip(log["client"], log["applied"], strict=True):
        assert applied == (client not in clients_of(DEAD))


def test_async_faulty_client_is_excluded_after_max_failures(task_identity):
    job = small_async("complex", steps=10, max_failures=2)
    grid = FakeGrid(nodes(job, mods=[CorruptReplies("complex", COMPLEX, ("complex",))]))
    with pytest.warns(ClientDroppedWarning) as caught:  # every drop warns; the last excludes
        history = run_async_job(grid, job, list(range(NODES)))
    assert any("2 faulty updates in a row" in str(w.message) for w in caught)
    assert history.metrics["step"][-1] == 10
    bad = clients_of(COMPLEX)
    assert sorted(excluded(history)) == bad
    log = history.log
    for c in bad:  # each arrival dropped with its reason, the client dispatched again, twice
        reasons = [w for client, w in zip(log["client"], log["reason"], strict=True) if client == c]
        assert len(reasons) == 2 and all("complex values" in w for w in reasons)
    assert grid.dispatched(COMPLEX) == 2 * len(bad)
    assert all(a == (c not in bad) for c, a in zip(log["client"], log["applied"], strict=True))


def test_async_without_progress_raises_instead_of_spinning(task_identity):
    """Every node's ClientApp raises: each client fails max_failures times, then the run stops
    with NoProgressError (the old loop dispatched them again forever)."""
    job = small_async("stuck")
    mods = [CorruptReplies("stuck", p, ("raise",)) for p in range(NODES)]
    grid = FakeGrid(nodes(job, mods=mods))
    with pytest.warns(ClientDroppedWarning), pytest.raises(NoProgressError) as info:
        run_async_job(grid, job, list(range(NODES)))
    assert not isinstance(info.value, ReplyTimeoutError)
    assert isinstance(info.value, FlowerAdapterError) and isinstance(info.value, RiemflError)
    message = str(info.value)
    assert "no client can make progress" in message and "fault injected" in message
    assert all(f"client {c}:" in message for c in range(6))
    assert sum(grid.dispatched(p) for p in range(NODES)) == 6 * job.max_failures


def test_async_silent_nodes_are_excluded_after_the_reply_timeout(task_identity):
    job = small_async("silent", reply_timeout=0.2)
    grid = FakeGrid(nodes(job, silent=set(range(NODES))))
    with pytest.warns(ClientDroppedWarning), pytest.raises(ReplyTimeoutError) as info:
        run_async_job(grid, job, list(range(NODES)))
    assert isinstance(info.value, NoProgressError)
    assert "every client is excluded" in str(info.value)
    assert "no reply within the job's reply_timeout (0.2 s)" in str(info.value)
    assert all(grid.dispatched(p) == 1 for p in range(NODES))  # one message per node


def test_async_hanging_node_does_not_starve_the_others(task_identity):
    """Two actors serve every node's messages (Flower's simulation on a 2-core machine) and node
    HANG never answers: its message holds one actor for good. With one message in flight per
    node, the other actor serves the healthy nodes and the run ends; a loop that sends each of
    HANG's clients its own message lets them hold both actors: every node times out."""
    job = small_async("hang", reply_timeout=2.0, drain_timeout=0.1)
    grid = FakeGrid(nodes(job, silent={HANG}), actors=2)
    with warnings.catch_warnings():  # HANG is excluded if the run outlasts its reply_timeout
        warnings.simplefilter("ignore", ClientDroppedWarning)
        history = run_async_job(grid, job, list(range(NODES)))
    assert history.metrics["step"][-1] == 8
    assert grid.dispatched(HANG) == 1 and grid.held == 1
    assert set(excluded(history)) <= set(clients_of(HANG))
    assert not set(history.log["client"]) & set(clients_of(HANG))


# --------------------------------------------------------------------------------- simulation
class RecordRayAddress:
    """A ClientApp mod: on a ping, append the Ray node address of the process to ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, message, context, call_next):
        if message.metadata.message_type == PING:
            import ray

            with open(self.path, "a") as out:
                out.write(ray.util.get_node_ip_address() + "\n")
        return call_next(message, context)


DIE_SYNC = SyncJob(KPCA, RFedProj(ETA, 2), 3, name="die-sync", options=RunOptions(seed=1))
COMPLEX_SYNC = SyncJob(KPCA, RFedAvg(ETA, 2), 2, name="complex-sync", options=RunOptions(seed=2))
DIE_ASYNC = AsyncJob(KPCA, FedAsync(), 10, ETA, 2, name="die-async")
COMPLEX_ASYNC = AsyncJob(KPCA, FedAsync(), 10, ETA, 2, name="complex-async", max_failures=2)
LOOPBACK = PingJob(repeats=1, name="loopback")
STUCK = AsyncJob(KPCA, FedAsync(), 10, ETA, 1, name="stuck", max_failures=1)
FINISHED = [DIE_SYNC, COMPLEX_SYNC, DIE_ASYNC, COMPLEX_ASYNC, LOOPBACK]


@pytest.fixture(scope="module")
def failure(tmp_path_factory):
    """One simulation: every job above, the last of which cannot make progress."""
    addresses = tmp_path_factory.mktemp("ray") / "addresses.txt"
    mods = [
        RecordRayAddress(str(addresses)),
        CorruptReplies("die-sync", DEAD, ("die",)),
        CorruptReplies("complex-sync", COMPLEX, ("complex",)),
        CorruptReplies("die-async", DEAD, ("die",)),
        CorruptReplies("complex-async", COMPLEX, ("complex",)),
        *(CorruptReplies("stuck", p, ("raise",)) for p in range(NODES)),
    ]
    with pytest.warns(ClientDroppedWarning), pytest.raises(JobFailedError) as info:
        simulate([*FINISHED, STUCK], NODES, mods=mods)
    info.value.addresses = Path(addresses).read_text().split()
    return info.value


@pytest.mark.slow
def test_a_failing_job_keeps_the_finished_results(failure):
    assert failure.job == "stuck" and failure.skipped == []
    assert set(failure.results) == {job.name for job in FINISHED}
    assert isinstance(failure.cause, NoProgressError)
    assert failure.__cause__ is failure.cause
    assert "job 'stuck' failed (NoProgressError" in str(failure)


@pytest.mark.slow
def test_a_dying_node_does_not_take_the_others_down_sync(failure):
    history = failure.results["die-sync"]
    dead = clients_of(DEAD)
    assert [(w["round"], w["client"]) for w in history.warnings] == [
        (r, c) for r in (1, 2, 3) for c in dead
    ]
    assert "could not run the ClientApp" in history.warnings[0]["reason"]
    assert all("excluded from the job" in w["reason"] for w in history.warnings[len(dead) :])
    assert history.participants[1:] == [4, 4, 4]
    assert history.loss[-1] < history.loss[0]


@pytest.mark.slow
def test_a_dying_node_is_excluded_async(failure):
    history = failure.results["die-async"]
    dead = clients_of(DEAD)
    assert history.metrics["step"][-1] == 10
    reasons = excluded(history)
    assert sorted(reasons) == dead
    assert all("could not run the ClientApp" in w for w in reasons.values())
    log = history.log
    assert sum(c in dead for c in log["client"]) <= len(dead)  # never dispatched again
    assert all(a == (c not in dead) for c, a in zip(log["client"], log["applied"], strict=True))


@pytest.mark.slow
def test_complex_uploads_are_dropped_sync(failure):
    history = failure.results["complex-sync"]
    bad = clients_of(COMPLEX)
    assert [(w["round"], w["client"]) for w in history.warnings] == [
        (r, c) for r in (1, 2) for c in bad
    ]
    assert all("complex values" in w["reason"] for w in history.warnings)
    assert history.participants[1:] == [4, 4]


@pytest.mark.slow
def test_complex_uploads_are_dropped_async(failure):
    history = failure.results["complex-async"]
    bad = clients_of(COMPLEX)
    assert history.metrics["step"][-1] == 10
    log = history.log
    assert all(a == (c not in bad) for c, a in zip(log["client"], log["applied"], strict=True))
    reasons = excluded(history)
    for c in bad:  # dropped at each arrival; excluded at the max_failures-th (if the run lasted)
        dropped = [w for client, w in zip(log["client"], log["reason"], strict=True) if client == c]
        assert all("complex values" in w for w in dropped)
        assert len(dropped) <= COMPLEX_ASYNC.max_failures
        assert (c in reasons) == (len(dropped) == COMPLEX_ASYNC.max_failures)
    assert set(reasons) <= set(bad) and any(c in bad for c in log["client"])


@pytest.mark.slow
def test_ray_binds_to_loopback(failure):
    assert len(failure.addresses) == NODES + 1  # the ping: all nodes once, then one node
    assert all(ipaddress.ip_address(a).is_loopback for a in failure.addresses)


#: the hanging job's reply_timeout (s): far above a healthy round trip (about 0.1 s)
HANG_TIMEOUT = 4.0
#: FedAsync on 2 healthy nodes with one message in flight each: Flower's simulation hands each
#: node at most one message per 0.1 s, so 100 steps take at least 5 s, past HANG_TIMEOUT
HANG_ASYNC = AsyncJob(
    KPCA,
    FedAsync(),
    100,
    ETA,
    2,
    name="hang-async",
    reply_timeout=HANG_TIMEOUT,
    drain_timeout=1.0,
    options=RunOptions(record_every=50),
)


@pytest.mark.slow
def test_a_hanging_node_is_excluded_alone_async():
    """Flower's default backend with 2 CPUs (2 ClientApp actors, as on a 2-core machine) and a
    node that hangs on each message of the job (1.5 s past the reply timeout; the simulation
    ends once it returns): only its clients are excluded, by the reply timeout, and the healthy
    nodes finish the run. (Before one message per node, the hanging node's two messages held
    both actors and every node timed out at server step 3.)"""
    mods = [CorruptReplies("hang-async", HANG, ("hang",), hang_for=HANG_TIMEOUT + 1.5)]
    with pytest.warns(ClientDroppedWarning, match="reply_timeout"):
        results = simulate([HANG_ASYNC], NODES, backend_config=default_backend_config(2), mods=mods)
    history = results["hang-async"]
    assert history.metrics["step"][-1] == HANG_ASYNC.steps
    assert history.config["node_workers"] == 1
    reasons = excluded(history)
    assert sorted(reasons) == clients_of(HANG)
    assert all(f"reply_timeout ({HANG_TIMEOUT:g} s)" in w for w in reasons.values())
    assert all(e["time"] >= HANG_TIMEOUT for e in history.config["excluded"])
    log = history.log
    assert not set(log["client"]) & set(clients_of(HANG))  # its late reply is ignored
    assert all(log["applied"]) and set(log["client"]) == set(range(6)) - set(clients_of(HANG))

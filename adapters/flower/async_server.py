r"""An asynchronous riemfl server rule on a Flower grid: apply each reply as it arrives.

Flower's strategies are synchronous (``Grid.send_and_receive`` waits for a whole round), so the
ServerApp runs its own loop over ``Grid.push_messages`` / ``Grid.pull_messages``:

1. after the handshake, the clients are dispatched in queue order with the current global
   model, whose version is held in a :class:`riemfl.federated.VersionStore`: at most
   ``workers`` clients at a time, and at most ``node_workers`` (default 1) per node, so a
   client whose node is busy keeps its place in the queue until the node's reply arrives;
2. the loop pulls whatever replies have arrived (polling from 1 ms up to ``max_poll``); for
   each, in arrival order, it checks the upload (a local model: finite, on the manifold within
   ``atol``; a curve rule's control points: also starting at the model the client received),
   builds the :class:`~riemfl.federated.Arrival` (base = the version the client received,
   staleness = current version minus that one) and calls the rule's ``apply`` (FedAsync,
   FedBuff, AsyncBezier, ... - the same code as :func:`riemfl.federated.run_async`);
3. the client rejoins the queue and is dispatched again with the current model as soon as its
   node is free, until ``steps`` server steps have been taken;
4. the replies still in flight are awaited (up to ``drain_timeout``) and not applied; one that
   says its node is gone still excludes the node.

The queue is the one of :func:`riemfl.federated.run_async` (first in, first out; a handled
client rejoins at the back; at most ``workers`` in flight), with one more bound: the node.
A node's messages share that node's compute (in simulation, a pool of Ray actors that every
node shares, one message per actor at a time), so several messages to one node buy little
speed, and they let a node that hangs hold several of the simulation's actors: with two actors
(a 2-core machine) and two messages to a hanging node, both actors hang, the healthy nodes'
messages wait behind them, and every node times out. With one message per node, a hanging
node holds one actor, the others serve the healthy nodes, and only the hanging node is
excluded, ``reply_timeout`` seconds after its message was sent.

The loop is the run core's (:func:`riemfl.federated.run_steps`, with
:class:`GridAsyncSteps` as its steps): the rows every ``record_every`` server steps, the
progress bar, ``on_step``, interruption, and checkpoints every ``checkpoint_every`` server steps
that a job rerun with ``resume=True`` continues from after the ServerApp's process died (the
model, the rule's state, the counters, the queue and the exclusions; the messages that were in
flight are sent again, so the arrivals after a resume differ from an uninterrupted job's, as
any two Flower jobs' arrivals do).

Faults never stop the loop and never make it spin. A faulty reply (an exception the ClientApp
raised, an upload that fails the checks) is logged with its reason, not applied, and the client
is dispatched again; after ``max_failures`` faulty replies in a row the client is excluded
(:class:`~riemfl.federated.exclusion.ExclusionPolicy`, the policy of ``run_async`` too). A
node that is gone (a reply saying that its ClientApp process died, e.g. Ray's
``ActorDiedError``, or a message unanswered for ``reply_timeout`` seconds) is excluded with all
its clients at once; its late reply, if any, is ignored. Exclusions are recorded in
``history.config["excluded"]`` and emitted as a :class:`~riemfl.federated.ClientDroppedWarning`;
when no client is left the run raises :class:`~riemfl.adapters.flower.NoProgressError`.

Unlike the in-process simulator, the order of arrivals is the real one (compute and messaging
times), so a run is not reproducible arrival for arrival; the per-update log records what
happened (client, staleness, weight, wall time, version, applied, reason).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections import Counter, deque
from collections.abc import Sequence
from typing import Any

from riemfl.adapters.flower.checks import check_control_points, check_local_model
from riemfl.adapters.flower.errors import NoProgressError, ReplyTimeoutError
from riemfl.adapters.flower.grid_io import (
    Poller,
    exchange,
    install_on_nodes,
    node_lost,
    push,
    reply_error,
    setup_nodes,
)
from riemfl.adapters.flower.jobs import AsyncJob
from riemfl.adapters.flower.node_compression import client_arrays, rows_of_clients
from riemfl.adapters.flower.wire import (
    ASYNC,
    RESTORE,
    SNAPSHOT,
    check_point_meta,
    check_upload_meta,
    decode,
    encode,
    group,
    point_meta,
    to_numpy,
    upload_meta,
)

from riemfl.errors import RiemflError
from riemfl.federated.async_engine import VersionStore, uplink_bytes, upload_bytes
from riemfl.federated.async_rules import Arrival
from riemfl.federated.checkpoint import inconsistent, require_count, require_layout
from riemfl.federated.engine import ClientDroppedWarning
from riemfl.federated.exclusion import ExclusionPolicy
from riemfl.federated.faults import FaultRecorder
from riemfl.federated.fingerprint import data_digest, settings
from riemfl.federated.history import History
from riemfl.federated.privacy import summarise_privacy
from riemfl.federated.run_core import EngineSpec, run_steps
from riemfl.federated.seeds import SeedStreams

__all__ = ["run_async_job", "GridAsyncSteps"]

log = logging.getLogger("riemfl.adapters.flower")


class GridAsyncSteps:
    """One asynchronous job on the grid, as the run core's steps
    (:class:`riemfl.federated.run_core.Steps`): :meth:`advance` handles the replies as they
    arrive until the rule has taken one more server step.

    Its state (:meth:`state_dict`) is the current model and version, the rule's state, the
    counters, the queue and the exclusions. The messages in flight when a checkpoint is taken
    are not part of it: a job resumed from it sends their clients the current model again (they
    head the queue), so a resumed job continues from the same model, rule state and exclusions
    but not with the same arrivals, which a Flower job never repeats (they follow real compute
    and messaging times).
    """

    def __init__(
        self,
        grid: Any,
        job: AsyncJob,
        hosting: dict[int, list[int]],
        x0: Any,
        history: History,
    ) -> None:
        self.grid, self.job = grid, job
        self.problem = job.resolved
        self.manifold = self.problem.manifold
        self.hosting = hosting
        self.owner = {c: node for node, clients in hosting.items() for c in clients}
        self.weights = job.weight_vector()
        self.workers = job.workers or self.problem.n_clients
        self.store = VersionStore(x0)
        self.queue: deque[int] = deque(range(self.problem.n_clients))
        self.in_flight: dict[str, tuple[int, int, float]] = {}  # id -> client, version, sent
        self.arrived: deque[Any] = deque()  # replies pulled, not handled yet
        self.exclusion = ExclusionPolicy(self.problem.n_clients, job.max_failures)
        self.timed_out = False  # whether the last exclusion was a reply timeout
        self.dispatched = 0
        self.counters = {"updates": 0, "dropped": 0}
        self.upload_bytes = upload_bytes(job.rule, x0, tuple(job.upload_shape))
        self.upload = upload_meta(job.upload_kind, job.upload_shape)
        self.compression = job.compression
        self.meta = {**point_meta(self.manifold), **self.upload}
        self.start = time.perf_counter()
        self.poller = Poller(job.max_poll)
        self.history = history
        self.history.log["reason"] = []
        self.faults = FaultRecorder(self.history, label=f"job {job.name}, ")

    def now(self) -> float:
        return time.perf_counter() - self.start

    # ------------------------------------------------------------------ Steps
    def row(self) -> dict[str, Any]:
        n = self.problem.n_clients
        return {
            "step": self.store.current,
            "time": self.now(),
            **self.counters,
            "uplink_bytes": uplink_bytes(self.counters, self.upload_bytes, n),
        }

    def output(self) -> Any:
        return self.job.rule.output(self.store.model)  # e.g. an SWA average

    def advance(self, step: int) -> bool:
        """Handle replies (dispatching the waiting clients whenever none is left to handle)
        until the rule has taken server step ``step``.

        Raises
        ------
        NoProgressError
            When no message is in flight and none can be sent (every client excluded, or the
            grid accepts no message).
        """
        while self.store.current < step:
            if self.arrived:
                reply = self.arrived.popleft()
                key = reply.metadata.reply_to_message_id
                if key in self.in_flight:  # not forgotten with a node excluded meanwhile
                    client, version, _ = self.in_flight.pop(key)
                    self.arrive(reply, client, version)
                continue
            self.dispatch()
            self.expire()
            if not self.in_flight:
                raise self.no_progress()
            replies = list(self.grid.pull_messages(list(self.in_flight)))
            if replies:
                self.poller.reset()
                self.arrived.extend(replies)
            else:
                self.poller.wait()
        return True

    def validate(self, step: int) -> None:
        """Check a loaded state: the model's version is ``step``; counters, exclusions and the
        queue name existing clients; every client not excluded waits once."""
        if self.store.current != step:
            current = self.store.current
            raise inconsistent(
                "state key 'store.current'", current, f"{step}, the checkpoint's step"
            )
        for key, value in self.counters.items():
            require_count(f"state key 'counters.{key}'", value)
        self.exclusion.validate()
        expected = sorted(set(self.owner) - set(self.exclusion.excluded))
        if sorted(self.queue) != expected:
            shown = f"each client that is not excluded ({expected}) once"
            raise inconsistent("state key 'queue'", list(self.queue), shown)

    def state_dict(self) -> dict[str, Any]:
        """The run's state; with compressed uploads, the rule's compression rows are first
        brought up to date from the nodes (:meth:`gather_rows`)."""
        if self.compression is not None:
            self.gather_rows()
        waiting = [c for c, _, _ in self.in_flight.values()]  # sent again at resume
        waiting += [c for c in self.queue if c not in waiting]
        model = self.store.model
        return {
            "store": {
                "current": self.store.current,
                "versions": {self.store.current: model},
                "refs": {self.store.current: 0},
                "peak": self.store.peak,
            },
            "queue": waiting,
            "counters": dict(self.counters),
            "dispatched": self.dispatched,
            "elapsed": self.now(),
            "exclusion": self.exclusion.state_dict(),
            "rule": self.job.rule.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        x0 = {"x": self.store.model}
        for version, x in state["store"]["versions"].items():
            require_layout({"x": x}, x0, f"checkpoint: model version {version}")
        self.store.load_state_dict(state["store"])
        self.queue = deque(int(c) for c in state["queue"])
        self.counters = {k: int(state["counters"][k]) for k in self.counters}
        self.dispatched = int(state["dispatched"])
        self.start = time.perf_counter() - float(state["elapsed"])
        self.exclusion.load_state_dict(state["exclusion"])
        self.job.rule.load_state_dict(state["rule"])
        if self.compression is not None:
            self.install_rows()

    # ------------------------------------------------------------------ compression rows
    def _live_nodes(self) -> dict[int, list[int]]:
        """node -> its clients that are not excluded, for the nodes that have any."""
        live = {
            node: [c for c in clients if c not in self.exclusion]
            for node, clients in self.hosting.items()
        }
        return {node: clients for node, clients in live.items() if clients}

    def gather_rows(self) -> None:
        """Copy the nodes' compression rows (residuals, compressor state) of their clients
        into the rule, as of the uploads the server has accepted.

        The replies in flight are awaited first (and handled after the checkpoint, as any
        reply): a node runs one message at a time only if the server sends it one at a time,
        and the rows must not change while they are read. A node that does not answer within
        ``reply_timeout`` is excluded, as after any failed message.
        """
        deadline = time.monotonic() + self.job.reply_timeout
        poller = Poller(self.job.max_poll)
        while time.monotonic() < deadline:
            pulled = self._pulled()
            waiting = [mid for mid in self.in_flight if mid not in pulled]
            if not waiting:
                break
            got = list(self.grid.pull_messages(waiting))
            self.arrived.extend(got)
            if got:
                poller.reset()
            else:
                poller.wait()
        self.expire_unanswered()
        counts = {c: self.compression.count(c) for c in self.owner}
        contents = {
            node: encode(
                {"job": self.job.name, "clients": clients, "counts": [counts[c] for c in clients]}
            )
            for node, clients in self._live_nodes().items()
        }
        group_id = f"{self.job.name}:state"
        replies = exchange(
            self.grid, contents, SNAPSHOT, group_id, self.job.reply_timeout, self.job.max_poll
        )
        for node, reply in replies.items():
            clients = self._live_nodes().get(node, [])
            why = reply_error(reply)
            try:
                if why is None:
                    _, arrays = decode(reply.content)
                    rows = rows_of_clients(arrays, clients)
                    for client in clients:
                        self.compression.set_client_rows(client, rows.get(client, {}))
            except RiemflError as exc:
                why = f"malformed reply: {exc}"
            if why is not None:
                self.lose_node(node, f"its compression rows were not read: {why}")

    def _pulled(self) -> set[str]:
        """Ids of the messages whose replies were pulled but not handled yet."""
        return {reply.metadata.reply_to_message_id for reply in self.arrived}

    def expire_unanswered(self) -> None:
        """Exclude the nodes whose messages in flight have no reply yet (after
        :meth:`gather_rows` waited ``reply_timeout`` for them)."""
        pulled = self._pulled()
        late = {self.owner[c] for mid, (c, _, _) in self.in_flight.items() if mid not in pulled}
        for node in sorted(late):
            why = f"no reply within the job's reply_timeout ({self.job.reply_timeout:g} s)"
            self.lose_node(node, why, timed_out=True)

    def install_rows(self) -> None:
        """Send each node the compression rows and upload counts of its clients that a loaded
        checkpoint holds (``train.riemfl_state``).

        Raises
        ------
        ClientFailureError
            When a live node does not install them.
        """
        contents = {}
        for node, clients in self._live_nodes().items():
            config = {
                "job": self.job.name,
                "clients": clients,
                "counts": [self.compression.count(c) for c in clients],
                **point_meta(self.manifold),
            }
            rows = {c: self.compression.client_rows(c) for c in clients}
            contents[node] = encode(config, client_arrays(rows))
        install_on_nodes(self.grid, self.job, contents, RESTORE, "compression rows")

    # ------------------------------------------------------------------ messages
    def dispatch(self) -> None:
        """Send the current model to waiting clients, in queue order, while fewer than
        ``workers`` are busy; a client whose node has ``node_workers`` messages in flight keeps
        its place in the queue."""
        busy = Counter(self.owner[client] for client, _, _ in self.in_flight.values())
        items, sent, waiting = [], [], []
        while len(self.in_flight) + len(items) < self.workers and self.queue:
            client = self.queue.popleft()
            if busy[self.owner[client]] >= self.job.node_workers:
                waiting.append(client)
                continue
            busy[self.owner[client]] += 1
            version = self.store.acquire()
            epochs = self.job.rule.local_epochs(client)
            config = {
                "job": self.job.name,
                "client": client,
                "version": version,
                "seed": self.job.options.seed,
                "dispatch": self.dispatched,
                "epochs": -1 if epochs is None else int(epochs),
                **self.meta,
            }
            if self.compression is not None:
                config["uploads"] = self.compression.count(client)
            self.dispatched += 1
            items.append((self.owner[client], encode(config, {"x": self.store.model})))
            sent.append((client, version))
        self.queue.extendleft(reversed(waiting))
        if not items:
            return
        ids = push(self.grid, items, ASYNC, f"{self.job.name}:{self.dispatched}")
        now = time.monotonic()
        for mid, (client, version) in zip(ids, sent, strict=True):
            if mid:
                self.in_flight[mid] = (client, version, now)
            else:  # not accepted by the grid: back to the queue
                self.store.release(version)
                self.queue.append(client)

    def _local_model(self, reply: Any, client: int, version: int) -> tuple[Any, str | None]:
        """The checked upload of ``reply`` (a local model, a curve's control points, or a
        compressed FedBuff's decoded update), or ``(None, reason)``."""
        job = self.job
        why = reply_error(reply)
        if why is not None:
            return None, why
        try:
            config, arrays = decode(reply.content)
            check_point_meta(self.manifold, config)
            check_upload_meta(config, self.upload)
        except RiemflError as exc:
            return None, f"malformed reply: {exc}"
        if int(config.get("client", -1)) != client:
            return None, f"reply for client {config.get('client')!r}; expected {client}"
        if self.compression is not None:
            try:
                dtype = to_numpy(self.store.model).dtype
                return self.compression.decode(group("payload", arrays), dtype), None
            except RiemflError as exc:
                return None, f"malformed payload: {exc}"
        if "x" not in arrays:
            return None, f"reply for client {client} without 'x'"
        local = arrays["x"]
        if job.curve:
            received = self.store.get(version)
            why = check_control_points(job.rule.embedding, local, received, job.atol)
        else:
            why = check_local_model(self.manifold, local, job.atol)
        return (local, None) if why is None else (None, why)

    # ------------------------------------------------------------------ exclusions
    def exclude(self, clients: list[int], why: str, timed_out: bool = False) -> None:
        """Dispatch ``clients`` no more: forget their messages in flight; record why."""
        for client in clients:
            if self.exclusion.exclude(client, why):
                self._excluded(client, why)
        self._forget_excluded()
        self.timed_out = timed_out

    def _excluded(self, client: int, why: str) -> None:
        """Record that ``client`` is excluded (history, log, warning)."""
        self.history.config["excluded"].append(
            {"client": client, "node": self.owner[client], "time": self.now(), "reason": why}
        )
        log.warning("job %s: client %d excluded: %s", self.job.name, client, why)
        warnings.warn(
            f"job {self.job.name!r}: client {client} excluded: {why}",
            ClientDroppedWarning,
            stacklevel=3,
        )

    def _forget_excluded(self) -> None:
        for mid, (client, version, _) in list(self.in_flight.items()):
            if client in self.exclusion:
                del self.in_flight[mid]
                self.store.release(version)
        self.queue = deque(c for c in self.queue if c not in self.exclusion)

    def lose_node(self, node: int, why: str, timed_out: bool = False) -> None:
        """Exclude every client of a node that is gone."""
        self.exclude(self.hosting[node], f"node {node} excluded after: {why}", timed_out)

    def expire(self) -> None:
        """Exclude the nodes of the messages unanswered for longer than ``reply_timeout``."""
        now, limit = time.monotonic(), self.job.reply_timeout
        late = {self.owner[c] for c, _, sent in self.in_flight.values() if now - sent > limit}
        for node in sorted(late):
            why = f"no reply within the job's reply_timeout ({limit:g} s)"
            self.lose_node(node, why, timed_out=True)

    def no_progress(self) -> NoProgressError:
        """The error of a run with no message in flight (every client excluded)."""
        job = self.job
        where = f"job {job.name!r}, server step {self.store.current} of {job.steps}"
        if self.queue:  # clients left, but the grid accepted none of their messages
            return NoProgressError(
                f"{where}: the grid accepted no message to clients {sorted(self.queue)}"
            )
        reasons = self.exclusion.summary(limit=self.problem.n_clients)
        error = ReplyTimeoutError if self.timed_out else NoProgressError
        return error(f"{where}: no client can make progress, every client is excluded: {reasons}")

    # ------------------------------------------------------------------ updates
    def arrive(self, reply: Any, client: int, version: int) -> None:
        """Check and apply one reply; log it; release its version; queue the client again, or
        exclude it (its node is gone, or too many faulty replies in a row: the
        :class:`~riemfl.federated.exclusion.ExclusionPolicy` of every asynchronous engine)."""
        store, job = self.store, self.job
        self.counters["updates"] += 1
        staleness = store.current - version
        local, why = self._local_model(reply, client, version)
        faulty = why is not None
        if why is None and job.max_staleness is not None and staleness > job.max_staleness:
            why = f"staleness {staleness} > max_staleness {job.max_staleness}"
        if not faulty:
            self.exclusion.succeeded(client)
        if why is None:
            compressed = self.compression is not None  # then `local` is the decoded update
            arrival = Arrival(
                client,
                store.get(version),
                None if compressed else local,
                store.model,
                staleness,
                float(self.weights[client]),
                store.current,
            )
            if compressed:
                new = job.rule.apply_decoded(self.manifold, arrival, local)
            else:
                new = job.rule.apply(self.manifold, arrival)
            if new is not None:
                store.advance(new)
        else:
            self.counters["dropped"] += 1
            if faulty:  # recorded in History.warnings, as on every engine
                self.faults.drop(client, why, step=store.current, time=self.now())
            else:
                log.info("job %s: update of client %d dropped: %s", job.name, client, why)
        entry = {
            "client": client,
            "staleness": staleness,
            "weight": float(self.weights[client]),
            "time": self.now(),
            "version": store.current,
            "applied": why is None,
            "reason": why or "",
        }
        for key, value in entry.items():
            self.history.log[key].append(value)
        store.release(version)
        if node_lost(reply):
            self.lose_node(self.owner[client], why)
            return
        excluded = self.exclusion.failed(client, why) if faulty else None
        if excluded is not None:
            self._excluded(client, excluded)
            self._forget_excluded()
        else:
            self.queue.append(client)

    def late(self, reply: Any, client: int, version: int) -> None:
        """A reply after the last server step: not applied; its version released. One that
        says its node is gone still excludes the node (recorded as during the run)."""
        self.store.release(version)
        if node_lost(reply):
            self.lose_node(self.owner[client], reply_error(reply))

    def drain(self) -> None:
        """Wait (up to ``drain_timeout``) for the replies still in flight, the ones pulled but
        not handled included; handle each with :meth:`late`."""
        deadline = time.monotonic() + self.job.drain_timeout
        poller = Poller(self.job.max_poll)
        while self.in_flight and time.monotonic() < deadline:
            got = [*self.arrived, *self.grid.pull_messages(list(self.in_flight))]
            self.arrived.clear()
            for reply in got:
                key = reply.metadata.reply_to_message_id
                if key in self.in_flight:  # not forgotten with an excluded node
                    client, version, _ = self.in_flight.pop(key)
                    self.late(reply, client, version)
            if got:
                poller.reset()
            else:
                poller.wait()
        if self.in_flight:
            log.warning(
                "job %s: %d replies still in flight after %g s",
                self.job.name,
                len(self.in_flight),
                self.job.drain_timeout,
            )
        for _, version, _ in self.in_flight.values():
            self.store.release(version)
        self.in_flight.clear()


def run_async_job(grid: Any, job: AsyncJob, nodes: Sequence[int]) -> History:
    """Run ``job`` over ``grid`` with the registered ``nodes``; return its :class:`History`.

    ``metrics`` holds the global model's loss, optimality gap and gradient norm per evaluated
    server step (``time`` in wall-clock seconds); ``log`` holds one entry per update with its
    staleness, and a ``reason`` column (empty for an applied update); ``config["excluded"]``
    lists the clients excluded on the way (``client``, ``node``, ``time``, ``reason``).

    Raises
    ------
    NodeRegistrationError
        When a node does not answer the handshake within ``registration_timeout``.
    NoProgressError
        When every client is excluded (``ReplyTimeoutError`` when the last ones timed out).
    """
    problem = job.resolved
    manifold = problem.manifold
    rule, options = job.rule, job.options
    rule.validate(manifold)
    rule.reset(manifold, problem.n_clients)
    streams = SeedStreams(options.seed, "async")
    rule.seed(streams.sequence("rule"))
    x0 = (
        job.x0
        if job.x0 is not None
        else manifold.random_point(rng=streams.generator("initial_point"))
    )
    hosting = setup_nodes(
        grid,
        job.name,
        "async",
        manifold,
        nodes,
        problem.n_clients,
        job.registration_timeout,
        max_poll=job.max_poll,
    )
    config = {
        "rule": rule.describe(),
        "n_clients": problem.n_clients,
        "workers": job.workers or problem.n_clients,
        "node_workers": job.node_workers,
        "engine": "flower",
        "job": job.name,
        "seed": options.seed,
        "steps": job.steps,
        "weights": job.weights,
        "max_staleness": job.max_staleness,
        "time": "wall-clock seconds since the first dispatch",
        "max_failures": job.max_failures,
    }
    history = History(config={**config, "excluded": []})
    steps = GridAsyncSteps(grid, job, hosting, x0, history)
    fingerprint = {
        **{k: v for k, v in config.items() if k != "steps"},
        "nodes": len(hosting),
        "trainer": settings(job.trainer()),
        "data": data_digest(problem),
        "x0": data_digest(x0),
    }
    spec = EngineSpec(job.steps, label=f"job {job.name}", show=("loss",), columns=("step",))
    trainer = job.trainer()
    try:
        history = run_steps(steps, trainer.evaluate, history, fingerprint, options, spec)
    finally:
        steps.drain()
    history.peak_versions = steps.store.peak
    summarise_privacy(history, rule.privacy_delta())
    return history

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
   node is free, until ``server_steps`` server steps have been taken;
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

Faults never stop the loop and never make it spin. A faulty reply (an exception the ClientApp
raised, an upload that fails the checks) is logged with its reason, not applied, and the client
is dispatched again; after ``max_failures`` faulty replies in a row the client is excluded. A
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

from ...check_levels import raise_deferred
from ...errors import RiemflError
from ...federated.async_engine import AsyncHistory, VersionStore
from ...federated.async_rules import Arrival
from ...federated.engine import ClientDroppedWarning
from ...federated.faults import FaultRecorder
from ...federated.seeds import SeedStreams
from .checks import check_control_points, check_local_model
from .errors import NoProgressError, ReplyTimeoutError
from .grid_io import Poller, node_lost, push, reply_error, setup_nodes
from .jobs import AsyncJob
from .wire import (
    ASYNC,
    check_point_meta,
    check_upload_meta,
    decode,
    encode,
    point_meta,
    upload_meta,
)

__all__ = ["run_async_job"]

log = logging.getLogger("riemfl.adapters.flower")


class _AsyncRun:
    """State of one asynchronous job on the grid (the server's side)."""

    def __init__(self, grid: Any, job: AsyncJob, hosting: dict[int, list[int]], x0: Any) -> None:
        self.grid, self.job = grid, job
        self.problem = job.resolved
        self.manifold = self.problem.manifold
        self.hosting = hosting
        self.owner = {c: node for node, clients in hosting.items() for c in clients}
        self.trainer = job.trainer()
        self.weights = job.weight_vector()
        self.workers = job.workers or self.problem.n_clients
        self.store = VersionStore(x0)
        self.queue: deque[int] = deque(range(self.problem.n_clients))
        self.in_flight: dict[str, tuple[int, int, float]] = {}  # id -> client, version, sent
        self.failures = dict.fromkeys(range(self.problem.n_clients), 0)  # faults in a row
        self.excluded: dict[int, str] = {}
        self.timed_out = False  # whether the last exclusion was a reply timeout
        self.dispatched = 0
        self.counters = {"updates": 0, "dropped": 0}
        self.upload = upload_meta(job.curve, job.upload_shape)
        self.meta = {**point_meta(self.manifold), **self.upload}
        self.start = time.perf_counter()
        rule = job.rule
        self.history = AsyncHistory(
            config={
                "rule": rule.describe(),
                "n_clients": self.problem.n_clients,
                "workers": self.workers,
                "node_workers": job.node_workers,
                "engine": "flower",
                "job": job.name,
                "seed": job.options.seed,
                "steps": job.steps,
                "weights": job.weights,
                "max_staleness": job.max_staleness,
                "time": "wall-clock seconds since the first dispatch",
                "max_failures": job.max_failures,
                "excluded": [],
            }
        )
        self.history.log["reason"] = []
        self.faults = FaultRecorder(self.history, label=f"job {job.name}, ")
        self._epochs = getattr(rule, "local_epochs", None)

    def now(self) -> float:
        return time.perf_counter() - self.start

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
            epochs = self._epochs(client) if self._epochs is not None else None
            config = {
                "job": self.job.name,
                "client": client,
                "version": version,
                "seed": self.job.options.seed,
                "dispatch": self.dispatched,
                "epochs": -1 if epochs is None else int(epochs),
                **self.meta,
            }
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
        """The checked upload of ``reply`` (a local model or a curve's control points), or
        ``(None, reason)``."""
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
        if int(config.get("client", -1)) != client or "x" not in arrays:
            return None, f"reply for client {config.get('client')!r} without 'x'; expected {client}"
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
            if client in self.excluded:
                continue
            self.excluded[client] = why
            self.history.config["excluded"].append(
                {"client": client, "node": self.owner[client], "time": self.now(), "reason": why}
            )
            log.warning("job %s: client %d excluded: %s", self.job.name, client, why)
            warnings.warn(
                f"job {self.job.name!r}: client {client} excluded: {why}",
                ClientDroppedWarning,
                stacklevel=2,
            )
        for mid, (client, version, _) in list(self.in_flight.items()):
            if client in self.excluded:
                del self.in_flight[mid]
                self.store.release(version)
        self.queue = deque(c for c in self.queue if c not in self.excluded)
        self.timed_out = timed_out

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
        reasons = "; ".join(f"client {c}: {w}" for c, w in sorted(self.excluded.items()))
        error = ReplyTimeoutError if self.timed_out else NoProgressError
        return error(f"{where}: no client can make progress, every client is excluded: {reasons}")

    # ------------------------------------------------------------------ updates
    def evaluate(self) -> None:
        row = {"step": self.store.current, "time": self.now(), **self.counters}
        row.update(self.trainer.evaluate(self.store.model))
        self.history.record(row)

    def arrive(self, reply: Any, client: int, version: int) -> None:
        """Check and apply one reply; log it; release its version; queue the client again, or
        exclude it (its node is gone, or ``max_failures`` faulty replies in a row)."""
        store, job = self.store, self.job
        self.counters["updates"] += 1
        staleness = store.current - version
        local, why = self._local_model(reply, client, version)
        faulty = why is not None
        self.failures[client] = self.failures[client] + 1 if faulty else 0
        if why is None and job.max_staleness is not None and staleness > job.max_staleness:
            why = f"staleness {staleness} > max_staleness {job.max_staleness}"
        stepped = False
        if why is None:
            arrival = Arrival(
                client,
                store.get(version),
                local,
                store.model,
                staleness,
                float(self.weights[client]),
                store.current,
            )
            new = job.rule.apply(self.manifold, arrival)
            if new is not None:
                store.advance(new)
                stepped = True
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
        elif self.failures[client] >= job.max_failures:
            self.exclude([client], f"{self.failures[client]} faulty replies in a row; last: {why}")
        else:
            self.queue.append(client)
        every = job.options.record_every
        if stepped and every and store.current % every == 0:
            self.evaluate()

    def run(self) -> AsyncHistory:
        job = self.job
        self.evaluate()  # row 0, as every engine records it (RunOptions.record_every)
        self.dispatch()
        poller = Poller(job.max_poll)
        while self.store.current < job.steps:
            self.expire()
            if not self.in_flight:
                raise self.no_progress()
            replies = list(self.grid.pull_messages(list(self.in_flight)))
            if not replies:
                poller.wait()
                continue
            poller.reset()
            for reply in replies:
                key = reply.metadata.reply_to_message_id
                if key not in self.in_flight:  # e.g. from a node excluded meanwhile
                    continue
                client, version, _ = self.in_flight.pop(key)
                if self.store.current < job.steps:
                    self.arrive(reply, client, version)
                else:  # arrived with others after the last step: not applied
                    self.late(reply, client, version)
            raise_deferred()  # the server steps' deferred checks (riemfl.checks): one read
            if self.store.current < job.steps:
                self.dispatch()
        self.drain()
        h = self.history
        h.peak_versions = self.store.peak
        output = getattr(job.rule, "output", None)  # e.g. an SWA average (AsyncManifold)
        h.final_point = output(self.store.model) if callable(output) else self.store.model
        last_recorded = h.metrics["step"][-1] if h.metrics else None
        if last_recorded != self.store.current:  # the last step's row
            self.evaluate()
        return h

    def late(self, reply: Any, client: int, version: int) -> None:
        """A reply after the last server step: not applied; its version released. One that
        says its node is gone still excludes the node (recorded as during the run)."""
        self.store.release(version)
        if node_lost(reply):
            self.lose_node(self.owner[client], reply_error(reply))

    def drain(self) -> None:
        """Wait (up to ``drain_timeout``) for the replies still in flight; handle each with
        :meth:`late`."""
        deadline = time.monotonic() + self.job.drain_timeout
        poller = Poller(self.job.max_poll)
        while self.in_flight and time.monotonic() < deadline:
            got = list(self.grid.pull_messages(list(self.in_flight)))
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


def run_async_job(grid: Any, job: AsyncJob, nodes: Sequence[int]) -> AsyncHistory:
    """Run ``job`` over ``grid`` with the registered ``nodes``; return its :class:`AsyncHistory`.

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
    job.rule.validate(manifold)
    job.rule.reset(manifold, problem.n_clients)
    init_rng = SeedStreams(job.options.seed, "async").generator("initial_point")
    x0 = job.x0 if job.x0 is not None else manifold.random_point(rng=init_rng)
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
    return _AsyncRun(grid, job, hosting, x0).run()

r"""The asynchronous engine: a discrete-event simulator with a virtual clock and no threads.

:func:`run_async` is a configuration of the run core
(:func:`~riemfl.federated.run_core.run_steps`: rows, progress, checkpoints, interruption) with
the event loop :class:`EventLoop` as its steps, split the way FLSim splits its asynchronous
trainer: the waiting queue (:mod:`riemfl.federated.async_scheduler`), the staleness policy
(:mod:`riemfl.federated.staleness`), the store of global model versions
(:mod:`riemfl.federated.versions`) and the loop here.

* **Events.** A heap of training-end events keyed by (virtual end time, dispatch number): ties
  are broken by dispatch order, so a run is a deterministic function of its seed. All end events
  of one instant are processed before any client is dispatched again at that instant (FLSim's
  FINISHED < WAITING_FOR_START), so with equal compute times every client of a "round" receives
  the model that the whole round produced.
* **Workers.** At most ``workers`` clients train at a time; the others wait in the queue. A
  client whose update has been handled rejoins the queue at once and is dispatched with the
  *current* global model when a worker is free.
* **Lazy training.** At dispatch only the version of the global model is recorded; the local
  training runs at the end event, from that version, with the client's own random generator, so
  results are exact and reproducible.
* **Faults.** An arrival whose training raises, or whose upload is refused as on every engine
  (:mod:`riemfl.federated.faults`: the wrong shape, a complex or non-floating dtype, another
  floating dtype than the model's, a non-finite entry), is dropped (recorded in
  ``History.warnings`` and as a :class:`~riemfl.federated.faults.ClientDroppedWarning`; counted
  in ``dropped``; logged with ``applied`` False) and the client is dispatched again; after
  ``max_failures`` consecutive failures it is excluded. The run raises
  :class:`~riemfl.errors.ClientFailureError` only when every client is excluded.
* **Theory mode** (Toghani & Uribe 2022, Assumption 1, eq. (3)): no clock; each arrival is a
  client drawn uniformly from [n] whose base version is drawn uniformly among the last
  ``max_staleness + 1`` versions.
* **Checkpoints.** The event heap, the virtual clock, the queue, the version store (models
  included), the rule's state (:meth:`~riemfl.federated.AsyncRule.state_dict`), the timing
  model's (:class:`~riemfl.federated.timing.TraceTime`'s position in each trace), the trainer's
  state where it keeps one, every generator and the history: a resumed run is bit-identical to
  an uninterrupted one. A checkpoint is resumed only by a run of the same fingerprint (the
  engine's settings, the rule's, the trainer's settings
  (:func:`~riemfl.federated.fingerprint.settings`), ``record_every``, the timing model and a hash
  of the data), and only when its state agrees with itself (:meth:`EventLoop.validate`).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .._validation import integer, optional
from ..errors import ClientFailureError, ParameterError
from ..manifolds.base import Manifold
from ..manifolds.euclidean import Euclidean
from .async_manifold import AsyncManifold
from .async_rules import Arrival, AsyncRule
from .async_scheduler import WaitingQueue
from .checkpoint import inconsistent, require_amount, require_count, require_layout
from .exclusion import ExclusionPolicy
from .faults import FaultRecorder, failure_reason, upload_problem
from .fingerprint import data_digest, settings
from .history import LOG_COLUMNS, History
from .privacy import summarise_privacy
from .rule_state import has_state
from .run_core import EngineSpec, RunOptions, Stateful, run_steps
from .seeds import SeedStreams
from .staleness import StalenessPolicy
from .timing import ProportionalTime, TimingModel
from .versions import VersionStore

__all__ = [
    "VersionStore",
    "EventLoop",
    "run_async",
    "upload_shape",
    "Evaluates",
]


# --------------------------------------------------------------------------------------- hooks
@runtime_checkable
class Evaluates(Protocol):
    """A trainer that measures a global model (the rows' metrics)."""

    def evaluate(self, x: Any) -> dict[str, float]: ...


@runtime_checkable
class HasManifold(Protocol):
    """A trainer whose models are points of a manifold (else: flat Euclidean vectors)."""

    manifold: Manifold


@runtime_checkable
class InitialParameters(Protocol):
    """A trainer that proposes the initial flat parameter vector of seed ``seed``."""

    def initial_parameters(self, seed: int = 0) -> Any: ...


def upload_bytes(rule: AsyncRule, x0: Any, shape: tuple[int, ...]) -> int:
    """Bytes of one client's upload of ``shape`` in the model's dtype: what the rule declares
    (:meth:`~riemfl.federated.async_rules.AsyncRule.upload_nbytes`), else the dense array's."""
    dtype = np.dtype(str(x0.dtype).removeprefix("torch."))
    declared = rule.upload_nbytes(shape, dtype)
    return math.prod(shape) * dtype.itemsize if declared is None else int(declared)


def uplink_bytes(counters: dict[str, Any], upload: int, n_clients: int) -> float:
    """The ``uplink_bytes`` column: the bytes of the uploads that were applied (as the
    synchronous rounds count the accepted ones) per client."""
    return (counters["updates"] - counters["dropped"]) * upload / n_clients


def upload_shape(rule: AsyncRule, point_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Shape of one client's upload: a point of the embedding's parameter manifold for a rule
    on a learned manifold (the control points of AsyncBezier's, AsyncBezierED's and AsyncCurve's
    curve, of AsyncBezierTriangle's surface), else one model."""
    if isinstance(rule, AsyncManifold):
        return tuple(rule.embedding.parameters.point_shape)
    return tuple(point_shape)


def _weights(trainer: Any, kind: str) -> np.ndarray:
    n = trainer.n_clients
    if kind == "uniform":
        return np.full(n, 1.0 / n)
    if kind == "samples":
        sizes = np.array([trainer.n_samples(i) for i in range(n)], dtype=float)
        return sizes / sizes.sum()
    raise ParameterError(f"weights must be 'samples' or 'uniform', got {kind!r}")


# --------------------------------------------------------------------------------------- loop
class EventLoop:
    """The event loop of the simulator (module docstring); one :meth:`advance` = one server step.

    Parameters
    ----------
    trainer, rule, manifold, x0
        The clients' local training, the server rule, the model space and the initial model.
    history : History
        Receives the per-update log, the drops and the summary.
    streams : SeedStreams
        The run's named random streams (timing, scheduler, clients).
    workers : int
    timing : TimingModel
    weights : numpy.ndarray
        :math:`w_i` per client.
    scheduler : WaitingQueue kind, scheduler_k : float
    mode : {"events", "theory"}
    staleness : StalenessPolicy
    max_updates : int or None
        Stop after this many client updates.
    max_failures : int or None
        Exclude a client after this many consecutive failed arrivals (None: always retry).
    """

    def __init__(
        self,
        trainer: Any,
        rule: AsyncRule,
        manifold: Manifold,
        x0: Any,
        history: History,
        *,
        streams: SeedStreams,
        workers: int,
        timing: TimingModel,
        weights: np.ndarray,
        scheduler: str,
        scheduler_k: float,
        mode: str,
        staleness: StalenessPolicy,
        max_updates: int | None,
        max_failures: int | None,
    ) -> None:
        self.trainer, self.rule, self.manifold = trainer, rule, manifold
        self.n = trainer.n_clients
        self.history, self.faults = history, FaultRecorder(history)
        self.workers, self.timing = workers, timing
        self.w = [float(v) for v in weights]  # Python floats: read once per arrival
        self.mode, self.staleness = mode, staleness
        self.limit = math.inf if max_updates is None else max_updates
        self.time_rng = streams.generator("timing")
        self.sched_rng = streams.generator("scheduler")
        self.client_rngs = streams.per_client("clients", self.n)
        self.expected = {"x": upload_shape(rule, tuple(np.shape(x0)))}
        self.dtype = getattr(x0, "dtype", None)  # the model's: uploads of another are dropped
        self.curve = self.expected["x"] != tuple(np.shape(x0))
        self.store = VersionStore(x0)
        self.queue = WaitingQueue(scheduler, scheduler_k, self.sched_rng)
        self.heap: list[tuple[float, int, int, int]] = []
        self.holding: dict[int, int] = {}
        self.window: deque[tuple[int, Any]] = deque(maxlen=(staleness.bound or 0) + 1)
        self.dispatched = 0
        self.now = 0.0
        self.counters = {"updates": 0, "dropped": 0, "blocked_time": 0.0}
        self.upload_bytes = upload_bytes(rule, x0, self.expected["x"])
        self.exclusion = ExclusionPolicy(self.n, max_failures)
        for key in LOG_COLUMNS:
            history.log.setdefault(key, [])
        self._log = tuple(history.log[key].append for key in LOG_COLUMNS)  # in that order
        if mode == "events":
            for i in range(self.n):
                self.queue.push(i, 0.0, trainer.num_batches(i))

    # ------------------------------------------------------------------ Steps
    def row(self) -> dict[str, Any]:
        self.history.summary["peak_versions"] = self.peak  # rows are where the history is read
        row = {"step": self.store.current, "time": self.now, **self.counters}
        row["uplink_bytes"] = uplink_bytes(self.counters, self.upload_bytes, self.n)
        return {**row, **self.rule.row()}

    def output(self) -> Any:
        model = self.store.model
        return self.rule.output(model)

    def advance(self, step: int) -> bool:
        """Process arrivals until server step ``step`` is taken; False if none can be."""
        arrive = self._theory_arrival if self.mode == "theory" else self._next_event
        while self.store.current < step:
            if self.counters["updates"] >= self.limit or not arrive():
                return False
        return True

    @property
    def peak(self) -> int:
        return max(self.store.peak, len(self.window))

    # ------------------------------------------------------------------ events mode
    def _epochs_of(self, client: int) -> int | None:
        return self.rule.local_epochs(client)

    def _dispatch(self) -> None:
        blocking = self.staleness.kind == "block"
        while (
            len(self.holding) < self.workers
            and len(self.queue)
            and (not blocking or self.staleness.may_dispatch(self.store.current, self.holding))
        ):
            client = self.queue.pop()
            version = self.store.acquire()
            self.holding[client] = version
            batches = self.trainer.num_batches(client, self._epochs_of(client))
            end = self.now + self.timing.duration(client, batches, self.n, self.time_rng)
            heapq.heappush(self.heap, (end, self.dispatched, client, version))
            self.dispatched += 1

    def _next_event(self) -> bool:
        """Handle the next arrival (dispatching first when the instant is over)."""
        if not self.heap or self.heap[0][0] != self.now:
            self._dispatch()
            if not self.heap:
                self._no_progress()
                return False
            idle = min(self.workers - len(self.holding), len(self.queue))  # > 0 when blocked
            self.counters["blocked_time"] += idle * (self.heap[0][0] - self.now)
            self.now = self.heap[0][0]
        _, _, client, version = heapq.heappop(self.heap)
        self._arrive(client, version, self.store.get(version))
        del self.holding[client]
        self.store.release(version)
        if client not in self.exclusion:
            batches = self.trainer.num_batches(client, self._epochs_of(client))
            self.queue.push(client, self.now, batches)
        return True

    # ------------------------------------------------------------------ theory mode
    def _theory_arrival(self) -> bool:
        if self.exclusion.nobody_left:
            self._no_progress()
        store = self.store
        if not self.window or self.window[-1][0] != store.current:
            self.window.append((store.current, store.model))
        client = int(self.sched_rng.integers(self.n))
        version, base = self.window[-1 - int(self.sched_rng.integers(len(self.window)))]
        self.now = float(self.counters["updates"])
        if client not in self.exclusion:
            self._arrive(client, version, base)
        self.now = float(self.counters["updates"])  # rows show the updates so far as the time
        return True

    # ------------------------------------------------------------------ one arrival
    def _arrive(self, client: int, version: int, base: Any) -> None:
        """Train lazily from ``base`` (version ``version``), check the upload, apply the rule."""
        store = self.store
        staleness = store.current - version
        self.counters["updates"] += 1
        why = None
        try:
            local = self.trainer.train(
                client, base, self.client_rngs[client], self._epochs_of(client)
            )
            why = upload_problem({"x": local}, self.expected, self.dtype)
            if why is not None and self.curve:
                why += " (a curve rule takes a curve's control points: use a curve trainer, e.g. "
                why += "BezierProblemTrainer or BezierClientTrainer)"
        except Exception as exc:  # noqa: BLE001 - a client's failure must not end the run
            why = failure_reason(exc)
        applied = why is None and (self.mode == "theory" or self.staleness.admits(staleness))
        if why is not None:
            self._failed(client, why)
        else:
            self.exclusion.succeeded(client)
        weight = self.w[client]
        if applied:
            arrival = Arrival(client, base, local, store.model, staleness, weight, store.current)
            new = self.rule.apply(self.manifold, arrival)
            if new is not None:
                store.advance(new)
        else:
            self.counters["dropped"] += 1
        log_client, log_staleness, log_weight, log_time, log_version, log_applied = self._log
        log_client(client)
        log_staleness(staleness)
        log_weight(weight)
        log_time(self.now)
        log_version(store.current)
        log_applied(applied)

    def _failed(self, client: int, why: str) -> None:
        self.faults.drop(client, why, step=self.store.current, time=self.now)
        self.exclusion.failed(client, why)

    def _no_progress(self) -> None:
        """Raise when every client is excluded (otherwise running out of events is a stop)."""
        if self.exclusion.nobody_left:
            raise ClientFailureError(
                f"no client can make progress: all {self.n} clients were excluded at server "
                f"step {self.store.current} ({self.exclusion.summary()})"
            )

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        state = {
            "store": self.store.state_dict(),
            "queue": self.queue.state_dict(),
            "heap": [list(event) for event in self.heap],
            "holding": dict(self.holding),
            "window": [[v, x] for v, x in self.window],
            "dispatched": self.dispatched,
            "now": self.now,
            "counters": dict(self.counters),
            **self.exclusion.state_dict(),
            "rngs": {
                "time": self.time_rng.bit_generator.state,
                "scheduler": self.sched_rng.bit_generator.state,
                "clients": [g.bit_generator.state for g in self.client_rngs],
            },
            "rule": self.rule.state_dict(),
        }
        if has_state(self.timing):
            state["timing"] = self.timing.state_dict()
        if isinstance(self.trainer, Stateful):
            state["trainer"] = self.trainer.state_dict()
        return state

    def validate(self, step: int) -> None:
        """The loaded state agrees with a checkpoint of server step ``step``.

        The version store holds its current version, which is ``step``; the counters are
        non-negative with at least ``step`` applied updates, as many as the log holds; the
        virtual clock is finite; every event of the heap ends at or after it and names a client
        in ``0..n-1`` and a stored model version, the one its client holds; every client that is
        not excluded is either in flight or waiting, once; the timing model's state agrees with
        the durations drawn (:meth:`~riemfl.federated.timing.TimingModel.validate_state`).

        Raises
        ------
        CheckpointError
            Naming the first field that disagrees.
        """
        self.store.validate("store")
        if self.store.current != step:
            current = self.store.current
            raise inconsistent(
                "state key 'store.current'", current, f"{step}, the checkpoint's step"
            )
        self._validate_counters(step)
        self._validate_events()
        for client in (*self.exclusion.excluded, *self._waiting()):
            self._validate_client("a client of state key 'excluded' or 'queue'", client)
        self.exclusion.validate()
        if isinstance(self.timing, TimingModel):
            self.timing.validate_state("timing", self._drawn())

    def _drawn(self) -> list[int]:
        """The durations drawn per client so far: one per dispatch, that is per arrival logged
        and per event in flight (events mode; theory mode draws none)."""
        if self.mode != "events":
            return [0] * self.n
        counts = Counter(c for c in self.history.log.get("client", ()) if type(c) is int)
        counts.update(self.holding.keys())
        return [counts[i] for i in range(self.n)]

    def _validate_counters(self, step: int) -> None:
        updates = require_count("state key 'counters.updates'", self.counters["updates"])
        dropped = require_count("state key 'counters.dropped'", self.counters["dropped"])
        require_amount("state key 'counters.blocked_time'", self.counters["blocked_time"])
        if updates - dropped < step:
            shown = f"at least {step} applied updates ('updates' - 'dropped') for step {step}"
            raise inconsistent("state key 'counters.dropped'", dropped, shown)
        logged = len(self.history.log.get("client", ()))
        if updates != logged:
            shown = f"{logged}, the client updates its history logs"
            raise inconsistent("state key 'counters.updates'", updates, shown)
        now = require_amount("state key 'now' (the virtual clock)", self.now)
        if self.mode == "theory" and now != updates:
            raise inconsistent(
                "state key 'now' (theory mode)", now, f"{float(updates)}, the updates"
            )
        require_count("state key 'dispatched'", self.dispatched, len(self.heap))

    def _validate_events(self) -> None:
        """Every event of the heap: its end, dispatch number, client and model version."""
        for k, (end, dispatch, client, version) in enumerate(self.heap):
            field = f"state key 'heap' event {k}"
            require_amount(f"the end time of {field}", end, self.now)
            require_count(f"the dispatch number of {field}", dispatch, 0, self.dispatched - 1)
            self._validate_client(f"the client of {field}", client)
            if version not in self.store.refs:
                shown = f"a stored model version (stored: {sorted(self.store.refs)})"
                raise inconsistent(f"the model version of {field}", version, shown)
            if self.holding.get(client) != version:
                shown = f"the version its client {client} holds ({self.holding.get(client)})"
                raise inconsistent(f"the model version of {field}", version, shown)
        if len(self.holding) != len(self.heap):
            shown = f"the {len(self.heap)} clients of the heap's events"
            raise inconsistent("state key 'holding'", self.holding, shown)
        for version, count in self.store.refs.items():
            held = sum(v == version for v in self.holding.values())
            if count != held:
                shown = f"{held}, the clients in flight from it"
                raise inconsistent(f"state key 'store.refs.{version}'", count, shown)

    def _waiting(self) -> list[int]:
        """The clients of the waiting queue (each once), checked against those in flight."""
        waiting = [int(c) for c in self.queue.clients()]
        if self.mode != "events":
            return waiting
        idle = sorted([*waiting, *self.holding])
        expected = sorted(set(range(self.n)) - set(self.exclusion.excluded))
        if idle != expected:
            shown = f"each client that is not excluded ({expected}) once, waiting or in flight"
            raise inconsistent("state key 'queue' with 'holding'", idle, shown)
        return waiting

    def _validate_client(self, field: str, client: Any) -> None:
        if not (isinstance(client, int) and 0 <= client < self.n):
            raise inconsistent(field, client, f"a client index in 0..{self.n - 1}")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        x0 = {"x": self.store.model}
        for version, x in state["store"]["versions"].items():
            require_layout({"x": x}, x0, f"checkpoint: model version {version}")
        self.store.load_state_dict(state["store"])
        self.queue.load_state_dict(state["queue"])
        self.heap = [(float(t), int(d), int(c), int(v)) for t, d, c, v in state["heap"]]
        heapq.heapify(self.heap)
        self.holding = {int(c): int(v) for c, v in state["holding"].items()}
        self.window.clear()
        self.window.extend((int(v), x) for v, x in state["window"])
        self.dispatched = int(state["dispatched"])
        self.now = float(state["now"])
        self.counters = {k: type(self.counters[k])(state["counters"][k]) for k in self.counters}
        self.exclusion.load_state_dict(state)
        rngs = state["rngs"]
        self.time_rng.bit_generator.state = rngs["time"]
        self.sched_rng.bit_generator.state = rngs["scheduler"]
        if len(rngs["clients"]) != self.n:
            raise ValueError(f"generators of {len(rngs['clients'])} clients; expected {self.n}")
        for g, s in zip(self.client_rngs, rngs["clients"], strict=True):
            g.bit_generator.state = s
        self.rule.load_state_dict(state["rule"])
        if has_state(self.timing):  # none in checkpoints of runs before timing models had one
            self.timing.load_state_dict(state.get("timing", {}))
        if isinstance(self.trainer, Stateful):
            self.trainer.load_state_dict(state["trainer"])


# --------------------------------------------------------------------------------------- public
def run_async(
    trainer: Any,
    rule: AsyncRule,
    steps: int,
    *,
    options: RunOptions | None = None,
    workers: int | None = None,
    timing: TimingModel | None = None,
    x0: Any = None,
    weights: str = "samples",
    scheduler: str = "fifo",
    scheduler_k: float = 2.0,
    mode: str = "events",
    max_staleness: int | None = None,
    staleness_policy: str = "drop",
    max_updates: int | None = None,
    max_failures: int | None = 3,
) -> History:
    """Simulate asynchronous federated training until ``steps`` server steps.

    Parameters
    ----------
    trainer
        Local training (:class:`~riemfl.federated.local.ProblemTrainer`,
        :class:`riemfl.nn.TorchClientTrainer`, or any object with the trainer protocol of
        :mod:`riemfl.federated.local`). Its ``manifold`` attribute is the model space; without
        one the model is a flat vector in Euclidean space (``x0``, or the trainer's
        ``initial_parameters(seed)``).
    rule : AsyncRule
        The server rule (FedAsync, FedBuff, ...).
    steps : int
        Stop after this many server steps (global model versions; a step of an asynchronous
        run is a server step).
    options : RunOptions, optional
        Seed, recording cadence, checkpoint, resume, progress bar and callback
        (:class:`~riemfl.federated.run_core.RunOptions`; default ``RunOptions()``). Rows carry
        ``trainer.evaluate``'s metrics when the trainer has one. The seed gives the initial
        point, the timing, the scheduler, the clients' generators and the rule's randomness
        (:class:`~riemfl.federated.seeds.SeedStreams`, layout ``"async"``).
    workers : int, optional
        Clients training at once (default: all).
    timing : TimingModel
        Duration of a local run (default :class:`ProportionalTime`: one time unit per batch).
    x0 : array, optional
        Initial global model (default: a random point of the manifold from the seed).
    weights : {"samples", "uniform"}
        :math:`w_i`: dataset share (Licudi et al. 2025, App. B) or 1/n.
    scheduler : {"fifo", "paper"}
        The waiting queue (:mod:`riemfl.federated.async_scheduler`; ``"paper"`` is the scheduler
        of Licudi et al. 2025, App. B.0.1); ``scheduler_k`` is that paper's k.
    mode : {"events", "theory"}
        The discrete-event simulation, or iid-uniform arrivals with staleness uniform in
        ``0..max_staleness`` (Toghani & Uribe 2022, Assumption 1, eq. (3)).
    max_staleness : int, optional
        Events mode: the staleness bound tau enforced by ``staleness_policy``. Theory mode: the
        staleness bound of Assumption 1 (required).
    staleness_policy : {"drop", "block"}
        Events mode with ``max_staleness`` (:mod:`riemfl.federated.staleness`): ``"drop"``
        discards staler updates (counted in ``dropped``); ``"block"`` holds free workers idle so
        that no update is ever staler than ``max_staleness``; the idle worker-time it costs is
        the ``blocked_time`` column.
    max_updates : int, optional
        Safety stop after this many client updates.
    max_failures : int or None
        Exclude a client after this many consecutive failed arrivals (None: retry forever).

    Returns
    -------
    History
        ``metrics``: ``step``, ``time`` (virtual), ``updates``, ``dropped``, ``blocked_time``,
        the trainer's metrics and ``wall_time``; ``log``: one entry per client update;
        ``warnings``: every dropped arrival; ``summary["peak_versions"]``.
    """
    options = RunOptions() if options is None else options
    seed, streams = options.seed, SeedStreams(options.seed, "async")
    n = trainer.n_clients
    if isinstance(trainer, HasManifold) and trainer.manifold is not None:
        manifold = trainer.manifold
    else:  # a flat parameter vector (e.g. a torch model): Euclidean space
        if x0 is None and isinstance(trainer, InitialParameters):
            x0 = trainer.initial_parameters(seed)
        if x0 is None:
            raise ParameterError(
                "the trainer has no `manifold` attribute and no x0 was given: pass x0 (a flat "
                "parameter vector) or give the trainer a manifold"
            )
        manifold = Euclidean(*np.shape(x0))
    rule.validate(manifold)
    steps = integer(steps, "run_async: steps", minimum=0)
    workers = n if workers is None else integer(workers, "run_async: workers", minimum=1)
    if not 1 <= workers <= n:
        raise ParameterError(f"workers must be in 1..{n}, got {workers!r}")
    if mode not in ("events", "theory"):
        raise ParameterError(f"mode must be 'events' or 'theory', got {mode!r}")
    if mode == "theory" and max_staleness is None:
        raise ParameterError("theory mode needs max_staleness (the bound tau of Assumption 1)")
    if staleness_policy == "block" and mode != "events":
        raise ParameterError("staleness_policy='block' needs mode='events'")
    staleness = StalenessPolicy(max_staleness, staleness_policy)
    max_updates = optional(integer, max_updates, "run_async: max_updates", minimum=1)
    max_failures = optional(integer, max_failures, "run_async: max_failures", minimum=1)
    timing = ProportionalTime() if timing is None else timing
    if isinstance(timing, TimingModel):
        timing.reset(n)
    if x0 is None:
        x0 = manifold.random_point(rng=streams.generator("initial_point"))
    w = _weights(trainer, weights)
    rule.reset(manifold, n)
    rule.seed(streams.sequence("rule"))
    config = {
        "rule": rule.describe(),
        "n_clients": n,
        "workers": workers,
        "timing": type(timing).__name__,
        "scheduler": scheduler,
        "mode": mode,
        "max_staleness": max_staleness,
        "staleness_policy": staleness_policy,
        "seed": seed,
        "steps": steps,
        "weights": weights,
    }
    history = History(config=config)
    loop = EventLoop(
        trainer,
        rule,
        manifold,
        x0,
        history,
        streams=streams,
        workers=workers,
        timing=timing,
        weights=w,
        scheduler=scheduler,
        scheduler_k=scheduler_k,
        mode=mode,
        staleness=staleness,
        max_updates=max_updates,
        max_failures=max_failures,
    )
    history.summary["peak_versions"] = 1
    evaluate = trainer.evaluate if isinstance(trainer, Evaluates) else None
    spec = EngineSpec(
        steps,
        label=f"{rule.name} (async)",
        columns=("step", "time", "updates", "dropped", "blocked_time"),
    )
    fingerprint = {
        **{k: v for k, v in config.items() if k != "steps"},
        "scheduler_k": scheduler_k,
        "trainer": settings(trainer),
        "timing": {**settings(timing), "arrays": data_digest(timing)},
        "max_updates": max_updates,
        "max_failures": max_failures,
        "data": data_digest(trainer),
        "x0": data_digest(x0),
    }
    history = run_steps(loop, evaluate, history, fingerprint, options, spec)
    summarise_privacy(history, rule.privacy_delta())
    return history

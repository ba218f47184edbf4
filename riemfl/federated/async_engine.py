r"""The asynchronous engine: a discrete-event simulator with a virtual clock and no threads.

Design (after FLSim's event loop, anchors.md section 4.2):

* **Events.** A heap of training-end events keyed by (virtual end time, dispatch number): ties
  are broken by dispatch order, so a run is a deterministic function of its seed. All end events
  of one instant are processed before any client is dispatched again at that instant (FLSim's
  FINISHED < WAITING_FOR_START), so with equal compute times every client of a "round" receives
  the model that the whole round produced.
* **Workers.** At most ``workers`` clients train at a time; the others wait in a queue. A client
  whose update has been applied rejoins the queue at once and is dispatched with the *current*
  global model when a worker is free.
* **Lazy training.** At dispatch only the version of the global model is recorded (in the
  :class:`VersionStore`); the local training runs at the end event, from that version, with the
  client's own random generator, so results are exact and reproducible.
* **Scheduling.** ``"fifo"`` (arrival order) or ``"paper"``: the seeds' scheduler (digest-000-001
  section 3.4): queued clients are ranked by ``num_batches + k * t_push`` (t_push: the virtual
  time the client joined the queue; key / k is its completion time at k batches per time unit,
  so pair it with ``ProportionalTime(speed=k)``), and a free worker takes rank i (0 = front)
  with probability :math:`(N - i)/\sum_{j=1}^{N} j`.
* **Theory mode** (seed 002, Assumption 1): no clock; each arrival is a client drawn uniformly
  from [n] whose base version is drawn uniformly among the last ``max_staleness + 1`` versions.
* **Staleness.** Recorded per update (server steps since the client's version). With
  ``max_staleness`` = tau set, the ``"drop"`` policy discards a staler update (logged, the client
  re-dispatched with the current model); the ``"block"`` policy never lets an update become
  staler than tau: a free worker stays idle while dispatching could break the bound (the
  stale-synchronous-parallel idea of making fast clients wait for stragglers). Block rule: with
  F the clients in flight, v_min their oldest version and t the current version, a client is
  dispatched only if ``(t - v_min) + |F| <= tau`` (always when F is empty). Proof that no update
  exceeds tau: the quantity ``s_c = tau - (t - v_c) - (|F| - 1)`` is >= 0 for every c in F; an
  arrival of another client raises t by at most 1 (one server step per arrival at most) and
  lowers |F| by 1, so s_c does not decrease; a dispatch is allowed only when it keeps every
  s_c >= 0 (the newcomer's included); when c arrives its staleness is
  ``t - v_c <= tau - (|F| - 1) <= tau``. No deadlock: with no client in flight one is always
  dispatched, and a client in flight always arrives. No update is dropped.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ParameterError
from ..manifolds.euclidean import Euclidean
from ..progress import ProgressBar
from ._serialise import dump_json, json_float, load_json
from .async_rules import Arrival, AsyncRule
from .timing import ProportionalTime, TimingModel

__all__ = ["VersionStore", "AsyncHistory", "run_async"]


class VersionStore:
    """Global model versions, each kept only while some client holds it (or it is current).

    ``acquire()`` hands out the current version (reference counted), ``release(v)`` drops a
    reference, ``advance(x)`` makes x the new current version. The number of stored versions
    never exceeds the number of clients in flight + 1 (:attr:`peak` records the maximum).
    """

    def __init__(self, x0: Any) -> None:
        self.current = 0
        self._arrays: dict[int, Any] = {0: x0}
        self._refs: dict[int, int] = {0: 0}
        self.peak = 1

    def __len__(self) -> int:
        return len(self._arrays)

    def get(self, version: int) -> Any:
        return self._arrays[version]

    @property
    def model(self) -> Any:
        return self._arrays[self.current]

    def acquire(self) -> int:
        self._refs[self.current] += 1
        return self.current

    def release(self, version: int) -> None:
        self._refs[version] -= 1
        if self._refs[version] == 0 and version != self.current:
            del self._arrays[version], self._refs[version]

    def advance(self, x: Any) -> int:
        old = self.current
        self.current += 1
        self._arrays[self.current] = x
        self._refs[self.current] = 0
        if self._refs[old] == 0:
            del self._arrays[old], self._refs[old]
        self.peak = max(self.peak, len(self._arrays))
        return self.current


@dataclass(eq=False)
class AsyncHistory:
    """Metrics per evaluated server step, and a log of every client update.

    ``metrics`` columns: ``step`` (server version), ``time`` (virtual), ``updates`` (client
    updates received so far), ``dropped``, then the trainer's metrics (e.g. ``loss``,
    ``grad_norm``, ``optimality_gap``, ``accuracy``). ``log`` columns, one entry per update:
    ``client``, ``staleness``, ``weight``, ``time``, ``version`` (server version after it),
    ``applied`` (False when dropped for staleness).
    """

    config: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    log: dict[str, list[Any]] = field(
        default_factory=lambda: {
            k: [] for k in ("client", "staleness", "weight", "time", "version", "applied")
        }
    )
    peak_versions: int = 1
    final_point: Any = field(default=None, repr=False)

    def record(self, row: dict[str, float]) -> None:
        for key, value in row.items():
            self.metrics.setdefault(key, []).append(float(value))

    def staleness_stats(self) -> dict[str, float]:
        s = np.asarray(self.log["staleness"], dtype=float)
        if s.size == 0:
            return {"mean": math.nan, "std": math.nan, "max": math.nan}
        return {"mean": float(s.mean()), "std": float(s.std()), "max": float(s.max())}

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "metrics": {k: [json_float(v) for v in vs] for k, vs in self.metrics.items()},
            "log": self.log,
            "peak_versions": self.peak_versions,
            "staleness": self.staleness_stats(),
        }

    def to_json(self, path: str | Path | None = None) -> str:
        return dump_json(self.to_dict(), path)

    @classmethod
    def from_json(cls, source: str | Path) -> AsyncHistory:
        data = load_json(source)
        metrics = {k: [float(v) for v in vs] for k, vs in data["metrics"].items()}
        return cls(data["config"], metrics, data["log"], data.get("peak_versions", 1))

    def to_csv(self, path: str | Path | None = None) -> str:
        keys = list(self.metrics)
        lines = [",".join(keys)]
        for row in zip(*(self.metrics[k] for k in keys), strict=True):
            lines.append(",".join(repr(v) for v in row))
        text = "\n".join(lines) + "\n"
        if path is not None:
            Path(path).write_text(text)
        return text

    def plot(
        self,
        path: str | Path | None = None,
        *,
        y: tuple[str, ...] = ("grad_norm",),
        x: tuple[str, ...] = ("step", "time"),
    ):
        """Plot metric columns ``y`` (log scale) against ``x`` (server step, virtual time)."""
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        ys = [k for k in y if k in self.metrics]
        if not ys:
            raise ParameterError(f"no metric among {y}; recorded: {sorted(self.metrics)}")
        fig, axes = plt.subplots(len(ys), len(x), figsize=(4.2 * len(x), 3.2 * len(ys)),
                                 squeeze=False)  # fmt: skip
        label = str(self.config.get("rule", {}).get("name", "run"))
        for r, ykey in enumerate(ys):
            for c, xkey in enumerate(x):
                pts = [(a, b) for a, b in zip(self.metrics[xkey], self.metrics[ykey], strict=True)
                       if b == b and b > 0]  # fmt: skip
                if pts:
                    axes[r][c].semilogy(*zip(*pts, strict=True), label=label)
                axes[r][c].set_xlabel(xkey)
                axes[r][c].set_ylabel(ykey)
                axes[r][c].grid(True, which="both", alpha=0.3)
        axes[0][0].legend()
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=110)
            plt.close(fig)
        return fig


# --------------------------------------------------------------------------------------- engine
class _Scheduler:
    """The waiting queue: FIFO, or the seeds' rank-sampled priority queue."""

    def __init__(self, kind: str, k: float, rng: np.random.Generator) -> None:
        if kind not in ("fifo", "paper"):
            raise ParameterError(f"scheduler must be 'fifo' or 'paper', got {kind!r}")
        self.kind, self.k, self.rng = kind, float(k), rng
        self._fifo: deque[int] = deque()
        self._items: list[tuple[float, int]] = []  # (key, client) for "paper"

    def __len__(self) -> int:
        return len(self._fifo) if self.kind == "fifo" else len(self._items)

    def push(self, client: int, now: float, num_batches: int) -> None:
        if self.kind == "fifo":
            self._fifo.append(client)
        else:
            self._items.append((num_batches + self.k * now, client))

    def pop(self) -> int:
        if self.kind == "fifo":
            return self._fifo.popleft()
        self._items.sort()
        n = len(self._items)
        ranks = np.arange(n)
        p = (n - ranks) / (n * (n + 1) / 2)  # p_i = (N - i) / sum_{j=1}^N j, i = 0..N-1
        i = int(self.rng.choice(n, p=p))
        return self._items.pop(i)[1]


def _weights(trainer: Any, kind: str) -> np.ndarray:
    n = trainer.n_clients
    if kind == "uniform":
        return np.full(n, 1.0 / n)
    if kind == "samples":
        sizes = np.array([trainer.n_samples(i) for i in range(n)], dtype=float)
        return sizes / sizes.sum()
    raise ParameterError(f"weights must be 'samples' or 'uniform', got {kind!r}")


def run_async(
    trainer: Any,
    rule: AsyncRule,
    server_steps: int,
    *,
    workers: int | None = None,
    timing: TimingModel | None = None,
    x0: Any = None,
    seed: int = 0,
    weights: str = "samples",
    scheduler: str = "fifo",
    scheduler_k: float = 2.0,
    mode: str = "events",
    max_staleness: int | None = None,
    staleness_policy: str = "drop",
    eval_every: int | None = 1,
    max_updates: int | None = None,
    progress: bool = False,
) -> AsyncHistory:
    """Simulate asynchronous federated training until ``server_steps`` server steps.

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
    server_steps : int
        Stop after this many server steps (global model versions).
    workers : int, optional
        Clients training at once (default: all).
    timing : TimingModel
        Duration of a local run (default :class:`ProportionalTime`: one time unit per batch).
    x0 : array, optional
        Initial global model (default: a random point of the manifold from ``seed``).
    weights : {"samples", "uniform"}
        :math:`w_i`: dataset share (the seeds) or 1/n.
    scheduler : {"fifo", "paper"}
        The waiting queue (module docstring); ``scheduler_k`` is the paper's k.
    mode : {"events", "theory"}
        The discrete-event simulation, or seed 002's iid-uniform arrivals with staleness
        uniform in ``0..max_staleness``.
    max_staleness : int, optional
        Events mode: the staleness bound tau enforced by ``staleness_policy``. Theory mode: the
        staleness bound of Assumption 1 (required).
    staleness_policy : {"drop", "block"}
        Events mode with ``max_staleness``: ``"drop"`` discards staler updates (counted in the
        ``dropped`` metric); ``"block"`` holds free workers idle so that no update is ever staler
        than ``max_staleness`` (module docstring: the rule, the bound and why it cannot
        deadlock); the idle worker-time it costs is the ``blocked_time`` metric.
    eval_every : int or None
        Evaluate ``trainer.evaluate`` every this many server steps (None: never).
    max_updates : int, optional
        Safety stop after this many client updates.
    """
    n = trainer.n_clients
    manifold = getattr(trainer, "manifold", None)
    if manifold is None:  # a flat parameter vector (e.g. a torch model): Euclidean space
        if x0 is None and hasattr(trainer, "initial_parameters"):
            x0 = trainer.initial_parameters(seed)
        if x0 is None:
            raise ParameterError(
                "the trainer has no `manifold` attribute and no x0 was given: pass x0 (a flat "
                "parameter vector) or give the trainer a manifold"
            )
        manifold = Euclidean(*np.shape(x0))
    rule.validate(manifold)
    if int(server_steps) != server_steps or server_steps < 0:
        raise ParameterError(f"server_steps must be an integer >= 0, got {server_steps!r}")
    workers = n if workers is None else int(workers)
    if not 1 <= workers <= n:
        raise ParameterError(f"workers must be in 1..{n}, got {workers!r}")
    if mode not in ("events", "theory"):
        raise ParameterError(f"mode must be 'events' or 'theory', got {mode!r}")
    if max_staleness is not None and (int(max_staleness) != max_staleness or max_staleness < 0):
        raise ParameterError(f"max_staleness must be an integer >= 0, got {max_staleness!r}")
    if mode == "theory" and max_staleness is None:
        raise ParameterError("theory mode needs max_staleness (the bound tau of Assumption 1)")
    if staleness_policy not in ("drop", "block"):
        raise ParameterError(
            f"staleness_policy must be 'drop' or 'block', got {staleness_policy!r}"
        )
    if staleness_policy == "block" and (mode != "events" or max_staleness is None):
        raise ParameterError(
            "staleness_policy='block' needs mode='events' and a max_staleness bound to enforce"
        )
    blocking = staleness_policy == "block"
    timing = ProportionalTime() if timing is None else timing
    seqs = np.random.SeedSequence(seed).spawn(4)
    init_rng, time_rng, sched_rng = (np.random.default_rng(s) for s in seqs[:3])
    client_rngs = [np.random.default_rng(s) for s in seqs[3].spawn(n)]
    if x0 is None:
        x0 = manifold.random_point(rng=init_rng)
    w = _weights(trainer, weights)
    rule.reset(manifold, n)
    epochs_of = getattr(rule, "local_epochs", None)
    history = AsyncHistory(
        config={
            "rule": rule.describe(),
            "n_clients": n,
            "workers": workers,
            "timing": type(timing).__name__,
            "scheduler": scheduler,
            "mode": mode,
            "max_staleness": max_staleness,
            "staleness_policy": staleness_policy,
            "seed": seed,
            "server_steps": server_steps,
            "weights": weights,
        }
    )
    store = VersionStore(x0)
    counters = {"updates": 0, "dropped": 0, "blocked_time": 0.0}
    log = history.log

    def evaluate(now: float) -> None:
        row = {"step": store.current, "time": now, **counters}
        evaluator = getattr(trainer, "evaluate", None)
        if evaluator is not None:
            row.update(evaluator(store.model))
        history.record(row)

    def arrive(client: int, version: int, base: Any, now: float) -> bool:
        """Train lazily from ``base`` (version ``version``), apply the rule; True if it stepped."""
        epochs = epochs_of(client) if epochs_of is not None else None
        local = trainer.train(client, base, client_rngs[client], epochs)
        staleness = store.current - version
        counters["updates"] += 1
        applied = mode == "theory" or max_staleness is None or staleness <= max_staleness
        stepped = False
        if applied:
            arrival = Arrival(client, base, local, store.model, staleness, float(w[client]),
                              store.current)  # fmt: skip
            new = rule.apply(manifold, arrival)
            if new is not None:
                store.advance(new)
                stepped = True
        else:
            counters["dropped"] += 1
        log["client"].append(client)
        log["staleness"].append(staleness)
        log["weight"].append(float(w[client]))
        log["time"].append(now)
        log["version"].append(store.current)
        log["applied"].append(applied)
        return stepped

    if eval_every:
        evaluate(0.0)
    limit = max_updates if max_updates is not None else math.inf
    with ProgressBar(server_steps, f"{rule.name} (async)", enabled=progress) as bar:

        def after_step(now: float) -> None:
            bar.update(1)
            if eval_every and store.current % eval_every == 0:
                evaluate(now)

        if mode == "theory":
            window: deque[tuple[int, Any]] = deque(maxlen=max_staleness + 1)
            while store.current < server_steps and counters["updates"] < limit:
                if not window or window[-1][0] != store.current:
                    window.append((store.current, store.model))
                client = int(sched_rng.integers(n))
                version, base = window[-1 - int(sched_rng.integers(len(window)))]
                if arrive(client, version, base, float(counters["updates"])):
                    after_step(float(counters["updates"]))
            store.peak = max(store.peak, len(window))
        else:
            queue = _Scheduler(scheduler, scheduler_k, sched_rng)
            heap: list[tuple[float, int, int, int]] = []
            holding: dict[int, int] = {}
            dispatched = 0
            now = 0.0
            for i in range(n):
                queue.push(i, 0.0, trainer.num_batches(i))

            def may_dispatch() -> bool:
                """The block rule: ``(t - v_min) + |F| <= tau`` (module docstring)."""
                if not blocking or not holding:
                    return True
                return store.current - min(holding.values()) + len(holding) <= max_staleness

            def dispatch() -> None:
                nonlocal dispatched
                while len(holding) < workers and len(queue) and may_dispatch():
                    client = queue.pop()
                    version = store.acquire()
                    holding[client] = version
                    epochs = epochs_of(client) if epochs_of is not None else None
                    batches = trainer.num_batches(client, epochs)
                    end = now + timing.duration(client, batches, n, time_rng)
                    heapq.heappush(heap, (end, dispatched, client, version))
                    dispatched += 1

            dispatch()
            while store.current < server_steps and counters["updates"] < limit and heap:
                idle = min(workers - len(holding), len(queue))  # > 0 only when blocked
                counters["blocked_time"] += idle * (heap[0][0] - now)
                now = heap[0][0]
                while heap and heap[0][0] == now and store.current < server_steps:
                    _, _, client, version = heapq.heappop(heap)
                    stepped = arrive(client, version, store.get(version), now)
                    del holding[client]
                    store.release(version)
                    next_epochs = epochs_of(client) if epochs_of is not None else None
                    queue.push(client, now, trainer.num_batches(client, next_epochs))
                    if stepped:
                        after_step(now)
                dispatch()
            for version in holding.values():  # clients still in flight at the end
                store.release(version)
    history.peak_versions = store.peak
    output = getattr(rule, "output", None)  # e.g. an SWA average (AsyncManifold)
    history.final_point = output(store.model) if callable(output) else store.model
    if eval_every and (not history.metrics or history.metrics["step"][-1] != store.current):
        evaluate(log["time"][-1] if log["time"] else 0.0)
    return history

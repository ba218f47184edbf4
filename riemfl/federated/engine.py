"""The synchronous engine: rounds, client sampling, faults, metrics, accounting, checkpoints.

:func:`run_sync` runs any :class:`~riemfl.federated.algorithm.SyncAlgorithm` on any
:class:`~riemfl.problems.base.FederatedProblem`. Per round it

1. samples the participating clients (all by default; ``clients_per_round`` draws uniformly
   without replacement) and, in mini-batch mode, every client's batches for the round;
2. runs each phase of the algorithm: broadcast, the client rule on the *stack* of participating
   clients (one batched call), checks of every upload (shape, finite values), the server rule on
   the survivors;
3. delivers the new global model to the round's survivors (``client_finish``);
4. records the metrics at the algorithm's output point (excluded from the CPU time), the
   cumulative uplink and CPU time, and saves a checkpoint every ``checkpoint_every`` rounds.

Faults: when the stacked client call raises, the clients are rerun one at a time with exactly
their batches, so that only the failing ones are dropped; a client whose upload has the wrong
shape or a non-finite entry is dropped too. Each drop is recorded in ``History.warnings`` and
emitted as a :class:`ClientDroppedWarning`; dropped clients keep their state. The run stops with
:class:`~riemfl.errors.ClientFailureError` only when no client of a phase succeeds.

Reproducibility: all randomness (initial point, client sampling, mini-batches) comes from one
seed through :class:`numpy.random.SeedSequence`; a checkpoint stores the generator's state, so a
resumed run continues to exactly the result of an uninterrupted one.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError, ClientFailureError, ParameterError
from ..problems.base import FederatedProblem, sample_batches
from ..progress import ProgressBar
from .algorithm import ClientContext, State, SyncAlgorithm
from .checkpoint import load_checkpoint, save_checkpoint
from .history import History

__all__ = ["run_sync", "ClientDroppedWarning", "initial_point", "run_rng", "sample_round"]


class ClientDroppedWarning(UserWarning):
    """A client's contribution to a round was dropped (its reason is in the message)."""


def initial_point(problem: FederatedProblem, seed: int) -> Any:
    """The default starting point of seed ``seed``: shared by every algorithm run on it."""
    init_seq = np.random.SeedSequence(seed).spawn(2)[0]
    like = getattr(problem, "array_like", None)
    return problem.manifold.random_point(rng=np.random.default_rng(init_seq), like=like)


def run_rng(seed: int) -> np.random.Generator:
    """The generator of a run's client sampling and mini-batches (independent of its x0)."""
    return np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1])


def sample_round(
    rng: np.random.Generator,
    problem: FederatedProblem,
    local_steps: int,
    clients_per_round: int | None = None,
    batch_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """The participating clients of one round and their mini-batches: a round's only draws.

    Every engine that must reproduce :func:`run_sync` (e.g. the Flower adapter) draws with this
    function from :func:`run_rng`, so that the same seed gives the same clients and batches.

    Parameters
    ----------
    rng : numpy.random.Generator
    problem : FederatedProblem
    local_steps : int
        The algorithm's local steps (one batch per client and step).
    clients_per_round : int, optional
        Sample this many clients uniformly without replacement (default: all, no draw).
    batch_size : int, optional
        Mini-batch size (default: full local gradients, no draw).

    Returns
    -------
    active : numpy.ndarray of int
        The participating clients, sorted.
    batches : int array of shape (len(active), local_steps, batch_size), or None
    """
    n = problem.n_clients
    if clients_per_round is None or clients_per_round >= n:
        active = np.arange(n)
    else:
        active = np.sort(rng.choice(n, size=clients_per_round, replace=False))
    batches = None
    if batch_size is not None:
        flat = sample_batches(rng, problem.n_samples, np.repeat(active, local_steps), batch_size)
        batches = flat.reshape(len(active), local_steps, batch_size)
    return active, batches


# --------------------------------------------------------------------------------------- arrays
def _is_torch(a: Any) -> bool:
    return type(a).__module__.startswith("torch")


def _materialize(a: Any) -> Any:
    """A writable, contiguous copy (client-state rows are written in place)."""
    return a.clone().contiguous() if _is_torch(a) else np.array(a)


def _take(a: Any, rows: np.ndarray) -> Any:
    if _is_torch(a):
        import torch

        return a[torch.as_tensor(rows, dtype=torch.long, device=a.device)]
    return a[rows]


def _put(a: Any, rows: np.ndarray, values: Any) -> Any:
    """``a`` with ``a[rows] = values`` (in place when ``a`` is writable, else on a copy)."""
    if _is_torch(a):
        import torch

        a[torch.as_tensor(rows, dtype=torch.long, device=a.device)] = values
        return a
    if not a.flags.writeable:
        a = np.array(a)
    a[rows] = values
    return a


def _store(clients: State, rows: np.ndarray, new: State, n: int) -> None:
    """Write the rows of clients ``rows`` back into the client state (all clients: replace)."""
    full = len(rows) == n
    for k, v in new.items():
        clients[k] = v if full else _put(clients[k], rows, v)


def _gather(clients: State, rows: np.ndarray, n: int) -> State:
    if len(rows) == n:  # full participation, in order: no copy
        return dict(clients)
    return {k: _take(v, rows) for k, v in clients.items()}


def _finite_rows(a: Any) -> np.ndarray:
    m = a.shape[0]
    if _is_torch(a):
        import torch

        return torch.isfinite(a.detach().reshape(m, -1)).all(1).cpu().numpy()
    return np.isfinite(a.reshape(m, -1)).all(1)


def _row_nbytes(a: Any) -> int:
    n = math.prod(a.shape[1:])
    return int(n * (a.element_size() if _is_torch(a) else a.itemsize))


@dataclass
class _PhaseResult:
    uploads: State
    rows: State
    keep: np.ndarray  # bool over the stack
    reasons: dict[int, str]  # stack row -> why it was dropped
    compact: bool = False  # uploads/rows hold the survivors only (already filtered)


# --------------------------------------------------------------------------------------- engine
class _SyncRun:
    def __init__(
        self,
        problem: FederatedProblem,
        algorithm: SyncAlgorithm,
        *,
        seed: int,
        clients_per_round: int | None,
        batch_size: int | None,
    ) -> None:
        self.problem = problem
        self.algorithm = algorithm
        self.manifold = problem.manifold
        self.seed = seed
        self.clients_per_round = clients_per_round
        self.batch_size = batch_size
        self.rng = run_rng(seed)

    # ------------------------------------------------------------------ client calls
    def _client_phase(
        self, ctx: ClientContext, phase: int, message: State, rows: State
    ) -> _PhaseResult:
        m = len(ctx.clients)
        try:
            uploads, new_rows = self.algorithm.client_step(ctx, phase, message, rows)
            shape_error = self._shape_problem(uploads, phase, m)
        except Exception as exc:  # noqa: BLE001 - a client's failure must not end the run
            if m == 1:
                return _PhaseResult({}, {}, np.zeros(1, bool), {0: _reason(exc)})
            return self._one_by_one(ctx, phase, message, rows)
        if shape_error is not None:
            if m == 1:
                return _PhaseResult({}, {}, np.zeros(1, bool), {0: shape_error})
            return self._one_by_one(ctx, phase, message, rows)
        keep = np.ones(m, dtype=bool)
        reasons: dict[int, str] = {}
        for key, value in uploads.items():
            finite = _finite_rows(value)
            for j in np.flatnonzero(~finite & keep):
                reasons[int(j)] = f"non-finite upload {key!r}"
            keep &= finite
        return _PhaseResult(uploads, new_rows, keep, reasons)

    def _one_by_one(
        self, ctx: ClientContext, phase: int, message: State, rows: State
    ) -> _PhaseResult:
        """Rerun each client of the stack alone (same batches) to isolate the failing ones."""
        results = []
        for j in range(len(ctx.clients)):
            sub = ctx.subset([j])
            sub_rows = {k: v[j : j + 1] for k, v in rows.items()}
            results.append(self._client_phase(sub, phase, message, sub_rows))
        keep = np.array([bool(r.keep[0]) for r in results])
        reasons = {j: r.reasons[0] for j, r in enumerate(results) if not r.keep[0]}
        good = [r for r in results if r.keep[0]]
        if not good:
            return _PhaseResult({}, {}, keep, reasons)
        uploads = {k: _concat([r.uploads[k] for r in good]) for k in good[0].uploads}
        new_rows = {k: _concat([r.rows[k] for r in good]) for k in good[0].rows}
        return _PhaseResult(uploads, new_rows, keep, reasons, compact=True)

    def _shape_problem(self, uploads: State, phase: int, m: int) -> str | None:
        expected = self.algorithm.upload_shapes(self.problem, phase)
        if set(uploads) != set(expected):
            return f"uploads {sorted(uploads)} instead of {sorted(expected)}"
        for key, shape in expected.items():
            got = tuple(uploads[key].shape)
            if got != (m, *shape):
                return f"upload {key!r} has shape {got[1:]}; expected {shape}"
        return None

    # ------------------------------------------------------------------ one round
    def round(
        self, r: int, server: State, clients: State, history: History
    ) -> tuple[State, float, float, int]:
        n = self.problem.n_clients
        active, batches = sample_round(
            self.rng, self.problem, self.algorithm.local_steps, self.clients_per_round,
            self.batch_size,
        )  # fmt: skip
        matrices = 0.0
        nbytes = 0.0
        point_size = math.prod(self.manifold.point_shape)
        for phase in range(self.algorithm.n_phases):
            message = self.algorithm.broadcast(server, phase)
            rows = _gather(clients, active, n)
            ctx = ClientContext(self.problem, active, batches)
            res = self._client_phase(ctx, phase, message, rows)
            for j, why in sorted(res.reasons.items()):
                self._drop(history, r, int(active[j]), phase, why)
            if not res.keep.any():
                raise ClientFailureError(
                    f"round {r}, phase {phase}: every participating client failed: "
                    + "; ".join(f"client {active[j]}: {w}" for j, w in sorted(res.reasons.items()))
                )
            uploads, new_rows = res.uploads, res.rows
            if not res.compact and not res.keep.all():
                uploads = {k: _take(v, np.flatnonzero(res.keep)) for k, v in uploads.items()}
                new_rows = {k: _take(v, np.flatnonzero(res.keep)) for k, v in new_rows.items()}
            active = active[res.keep]
            if batches is not None:
                batches = batches[res.keep]
            _store(clients, active, new_rows, n)
            for v in uploads.values():
                matrices += v.shape[0] * math.prod(v.shape[1:]) / point_size
                nbytes += v.shape[0] * _row_nbytes(v)
            server = self.algorithm.server_step(self.manifold, server, phase, message, uploads)
        message = self.algorithm.broadcast(server, 0)
        finished = self.algorithm.client_finish(message, _gather(clients, active, n))
        _store(clients, active, finished, n)
        return server, matrices / n, nbytes / n, len(active)

    def _drop(self, history: History, r: int, client: int, phase: int, why: str) -> None:
        history.warnings.append({"round": r, "client": client, "phase": phase, "reason": why})
        warnings.warn(
            f"round {r}: client {client} dropped (phase {phase}): {why}",
            ClientDroppedWarning,
            stacklevel=4,
        )

    # ------------------------------------------------------------------ metrics
    def metrics(self, server: State) -> tuple[float, float, float]:
        x = self.algorithm.output(server)
        loss = self.problem.loss(x)
        gap = loss - self.problem.optimum if self.problem.optimum is not None else math.nan
        return loss, gap, self.problem.grad_norm(x)

    def fingerprint(self) -> dict[str, Any]:
        return {
            "problem": self.problem.describe(),
            "algorithm": self.algorithm.describe(),
            "seed": self.seed,
            "clients_per_round": self.clients_per_round,
            "batch_size": self.batch_size,
        }


def _concat(parts: list[Any]) -> Any:
    if _is_torch(parts[0]):
        import torch

        return torch.cat(parts, 0)
    return np.concatenate(parts, 0)


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------------------- public
def run_sync(
    problem: FederatedProblem,
    algorithm: SyncAlgorithm,
    rounds: int,
    *,
    x0: Any = None,
    seed: int = 0,
    clients_per_round: int | None = None,
    batch_size: int | None = None,
    checkpoint: str | Path | None = None,
    checkpoint_every: int = 10,
    resume: bool = True,
    progress: bool = False,
    desc: str | None = None,
    grad_tol: float | None = None,
    on_round: Callable[[int, History], None] | None = None,
) -> History:
    """Run ``rounds`` synchronous rounds of ``algorithm`` on ``problem``.

    Parameters
    ----------
    problem : FederatedProblem
    algorithm : SyncAlgorithm
        E.g. :class:`~riemfl.federated.RFedProj`.
    rounds : int
        R, the number of communication rounds.
    x0 : array, optional
        Initial global model (default: :func:`initial_point` of ``seed``, the same for every
        algorithm).
    seed : int
        Seed of the initial point, client sampling and mini-batches.
    clients_per_round : int, optional
        Sample this many clients per round uniformly without replacement (default: all).
    batch_size : int, optional
        Mini-batch size b of the local gradients (default: full local gradients).
    checkpoint : path, optional
        File for the full run state (server and client states, RNG state, history), written
        atomically every ``checkpoint_every`` rounds and at the end.
    resume : bool
        When ``checkpoint`` exists, continue from it (it must come from the same problem,
        algorithm and settings; :class:`~riemfl.errors.CheckpointError` otherwise).
    progress : bool
        Show a progress bar on stderr.
    desc : str, optional
        Label of the progress bar (default: algorithm and problem names).
    grad_tol : float, optional
        Stop after the first round whose Riemannian gradient norm is at most ``grad_tol``.
    on_round : callable, optional
        Called as ``on_round(r, history)`` after every round (e.g. an outer progress bar).

    Returns
    -------
    History
        Metrics of round 0 (the initial point) to ``rounds``.
    """
    if isinstance(rounds, bool) or int(rounds) != rounds or rounds < 0:
        raise ParameterError(f"rounds must be an integer >= 0, got {rounds!r}")
    if clients_per_round is not None and not 1 <= clients_per_round <= problem.n_clients:
        raise ParameterError(
            f"clients_per_round must be in 1..{problem.n_clients}, got {clients_per_round!r}"
        )
    if batch_size is not None:
        if problem.n_samples is None:
            raise ParameterError(
                f"{problem.name} has no per-sample losses, so batch_size must be None"
            )
        if int(batch_size) != batch_size or batch_size < 1:
            raise ParameterError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if int(checkpoint_every) != checkpoint_every or checkpoint_every < 1:
        raise ParameterError(f"checkpoint_every must be an integer >= 1, got {checkpoint_every!r}")
    algorithm.validate(problem)
    run = _SyncRun(
        problem, algorithm, seed=seed, clients_per_round=clients_per_round, batch_size=batch_size
    )
    fingerprint = run.fingerprint()
    if checkpoint is not None and resume and Path(checkpoint).exists():
        state = load_checkpoint(checkpoint)
        if state["fingerprint"] != fingerprint:
            raise CheckpointError(
                f"checkpoint {str(checkpoint)!r} was written by another run: "
                f"{state['fingerprint']} != {fingerprint}"
            )
        start = int(state["round"])
        server, clients = state["server"], state["clients"]
        run.rng.bit_generator.state = state["rng"]
        history = History.from_dict(state["history"])
        if start > rounds:
            raise CheckpointError(
                f"checkpoint {str(checkpoint)!r} is at round {start}, beyond rounds={rounds}"
            )
    else:
        if x0 is None:
            x0 = initial_point(problem, seed)
        server, clients = algorithm.init(problem, x0)
        clients = {k: _materialize(v) for k, v in clients.items()}
        start = 0
        history = History(config={**fingerprint, "rounds": rounds})
        loss, gap, gnorm = run.metrics(server)
        history.append(
            round=0,
            loss=loss,
            optimality_gap=gap,
            grad_norm=gnorm,
            uplink_matrices=0.0,
            uplink_bytes=0.0,
            cpu_time=0.0,
            wall_time=0.0,
            participants=0,
        )
    history.config["rounds"] = rounds
    label = desc if desc is not None else f"{algorithm.name} on {problem.name}"
    with ProgressBar(rounds, label, enabled=progress, start=start) as bar:
        wall0 = time.perf_counter() - history.last("wall_time")
        for r in range(start + 1, rounds + 1):
            t0 = time.process_time()
            server, up_m, up_b, m = run.round(r, server, clients, history)
            cpu = time.process_time() - t0
            loss, gap, gnorm = run.metrics(server)
            history.append(
                round=r,
                loss=loss,
                optimality_gap=gap,
                grad_norm=gnorm,
                uplink_matrices=history.last("uplink_matrices") + up_m,
                uplink_bytes=history.last("uplink_bytes") + up_b,
                cpu_time=history.last("cpu_time") + cpu,
                wall_time=time.perf_counter() - wall0,
                participants=m,
            )
            bar.update(1, grad_norm=gnorm)
            stop = grad_tol is not None and gnorm <= grad_tol
            if on_round is not None:
                on_round(r, history)
            if checkpoint is not None and (r % checkpoint_every == 0 or r == rounds or stop):
                save_checkpoint(
                    checkpoint,
                    {
                        "round": r,
                        "server": server,
                        "clients": clients,
                        "rng": run.rng.bit_generator.state,
                        "history": history.to_dict(),
                        "fingerprint": fingerprint,
                    },
                )
            if stop:
                break
    history.final_point = run.algorithm.output(server)
    return history

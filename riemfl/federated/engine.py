"""The synchronous engine in process: :func:`run_sync`.

:func:`run_sync` runs any :class:`~riemfl.federated.algorithm.SyncAlgorithm` on any
:class:`~riemfl.problems.base.FederatedProblem`. It is a configuration of the run core
(:func:`~riemfl.federated.run_core.run_steps`: rows, progress, checkpoints, interruption) with
synchronous rounds (:class:`~riemfl.federated.rounds.RoundSteps`: sampling, phases, checks of
every upload, accounting), the executor :class:`StackedClients` and the global objective as
evaluator (loss, optimality gap and Riemannian gradient norm at the algorithm's output point,
excluded from the CPU time).

:class:`StackedClients` runs the client rule of a phase on the *stack* of participating clients
(one batched call per block of consecutive clients, :mod:`~riemfl.federated.client_blocks`) and
holds the client state. When a block's call raises or returns uploads of the wrong keys or
shapes, it reruns that block's clients one at a time with exactly their batches, so that only the
failing ones are dropped; a dropped client keeps its previous state.

Reproducibility: all randomness (initial point, client sampling, mini-batches, the Byzantine
clients of :mod:`~riemfl.federated.attacks` and their draws) comes from one seed through
:class:`numpy.random.SeedSequence`; a checkpoint stores the generator's state, so a
resumed run continues to exactly the result of an uninterrupted one.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .._validation import integer
from ..backend import is_torch
from ..errors import ParameterError
from ..problems.base import FederatedProblem
from .aggregation import Aggregator, check_aggregator
from .algorithm import ClientContext, State, SyncAlgorithm
from .attacks import Byzantine
from .checkpoint import require_layout
from .client_blocks import BlockAssembler, StackOutcome, block_ranges, clients_per_block
from .faults import ClientDroppedWarning, FaultRecorder, failure_reason, stack_problem
from .fingerprint import data_digest, settings
from .history import METRICS, History
from .local import problem_metrics
from .privacy import DPSettings, privatize, summarise_privacy
from .rounds import PhaseReply, RoundSteps, sample_round, take_rows
from .run_core import EngineSpec, RunOptions, run_steps
from .seeds import SeedStreams

__all__ = [
    "run_sync",
    "StackedClients",
    "ClientDroppedWarning",
    "initial_point",
    "sample_round",
]


def initial_point(problem: FederatedProblem, seed: int) -> Any:
    """The default starting point of seed ``seed``: shared by every algorithm run on it."""
    rng = SeedStreams(seed).generator("initial_point")
    return problem.manifold.random_point(rng=rng, like=problem.array_like)


# --------------------------------------------------------------------------------------- arrays
def _materialize(a: Any) -> Any:
    """A writable, contiguous copy (client-state rows are written in place)."""
    return a.clone().contiguous() if is_torch(a) else np.array(a)


def _put(a: Any, rows: np.ndarray, values: Any) -> Any:
    """``a`` with ``a[rows] = values`` (in place when ``a`` is writable, else on a copy)."""
    if is_torch(a):
        import torch

        a[torch.as_tensor(rows, dtype=torch.long, device=a.device)] = values
        return a
    if not a.flags.writeable:
        a = np.array(a)
    a[rows] = values
    return a


def _concat(parts: list[Any]) -> Any:
    if is_torch(parts[0]):
        import torch

        return torch.cat(parts, 0)
    return np.concatenate(parts, 0)


# --------------------------------------------------------------------------------------- executor
class StackedClients:
    """The in-process executor: the client rule on the stack of participants (module docstring).

    Parameters
    ----------
    problem : FederatedProblem
    algorithm : SyncAlgorithm
    clients : dict of str to array
        The client state: arrays with leading axis ``n_clients``.
    dtype : dtype, optional
        The model's floating dtype (a stack of another dtype is rerun client by client).
    """

    def __init__(
        self, problem: FederatedProblem, algorithm: SyncAlgorithm, clients: State, dtype: Any = None
    ) -> None:
        self.problem, self.algorithm, self.dtype = problem, algorithm, dtype
        self.clients = dict(clients)
        # keys whose arrays this executor made (writable, aliasing nothing): rows are written in
        # place into those only; the others are copied at their first partial write (a full
        # round replaces every row, so full participation never copies the client state)
        self._owned: set[str] = set()
        self._new_rows: State = {}
        self._served = np.zeros(0, dtype=np.intp)

    def _gather(self, active: np.ndarray) -> State:
        if len(active) == self.problem.n_clients:  # full participation, in order: no copy
            return dict(self.clients)
        return {k: take_rows(v, active) for k, v in self.clients.items()}

    def _store(self, rows: np.ndarray, new: State) -> None:
        if len(rows) == self.problem.n_clients:
            for k, v in new.items():
                if v is not self.clients.get(k):
                    self._owned.discard(k)
                self.clients[k] = v
            return
        for k, v in new.items():
            if k not in self._owned:
                self.clients[k] = _materialize(self.clients[k])
                self._owned.add(k)
            self.clients[k] = _put(self.clients[k], rows, v)

    def _call(
        self, ctx: ClientContext, phase: int, message: State, rows: State
    ) -> tuple[State, State] | str:
        """The client rule on a stack: (uploads, new rows), or why it failed."""
        try:
            uploads, new_rows = self.algorithm.client_step(ctx, phase, message, rows)
        except Exception as exc:  # noqa: BLE001 - a client's failure must not end the run
            return failure_reason(exc)
        expected = self.algorithm.upload_shapes(self.problem, phase)
        why = stack_problem(
            uploads, expected, len(ctx.clients), self.dtype, self.algorithm.wire_dtypes(phase)
        )
        return (uploads, new_rows) if why is None else why

    def run_phase(
        self, r: int, phase: int, message: State, active: np.ndarray, batches: np.ndarray | None
    ) -> PhaseReply:
        ctx = ClientContext(self.problem, active, batches)
        rows = self._gather(active)
        size = clients_per_block(self.algorithm.upload_shapes(self.problem, phase), self._itemsize)
        if size >= len(active):
            outcome = self._run_stack(ctx, phase, message, rows)
        else:
            assembler = BlockAssembler(len(active), rows)
            for block in block_ranges(len(active), size):
                inputs = {k: v[block.start : block.stop] for k, v in rows.items()}
                outcome = self._run_stack(ctx.subset(block), phase, message, inputs)
                assembler.add(block, inputs, outcome)
            outcome = assembler.result()
        self._new_rows, self._served = outcome.rows, outcome.served
        return PhaseReply(outcome.uploads, outcome.served, outcome.reasons)

    @property
    def _itemsize(self) -> int:
        """Bytes of one entry of the model's dtype (8 when the dtype is not known)."""
        if self.dtype is None:
            return 8
        itemsize = getattr(self.dtype, "itemsize", None)  # a torch dtype has one
        return int(itemsize) if itemsize is not None else np.dtype(self.dtype).itemsize

    def _run_stack(
        self, ctx: ClientContext, phase: int, message: State, rows: State
    ) -> StackOutcome:
        """The client rule on one stack; on failure, each client of it alone."""
        out = self._call(ctx, phase, message, rows)
        if not isinstance(out, str):
            return StackOutcome(out[0], out[1], np.arange(len(ctx.clients)))
        if len(ctx.clients) == 1:
            return StackOutcome({}, {}, np.zeros(0, dtype=np.intp), {0: out})
        return self._one_by_one(ctx, phase, message, rows)

    def _one_by_one(
        self, ctx: ClientContext, phase: int, message: State, rows: State
    ) -> StackOutcome:
        """Rerun each client of the stack alone (same batches) to isolate the failing ones."""
        good: list[tuple[int, State, State]] = []
        reasons: dict[int, str] = {}
        for j in range(len(ctx.clients)):
            out = self._call(
                ctx.subset([j]), phase, message, {k: v[j : j + 1] for k, v in rows.items()}
            )
            if isinstance(out, str):
                reasons[j] = out
            else:
                good.append((j, *out))
        served = np.array([j for j, _, _ in good], dtype=np.intp)
        if not good:
            return StackOutcome({}, {}, served, reasons)
        uploads = {k: _concat([u[k] for _, u, _ in good]) for k in good[0][1]}
        new_rows = {k: _concat([nr[k] for _, _, nr in good]) for k in good[0][2]}
        return StackOutcome(uploads, new_rows, served, reasons)

    def accept(self, phase: int, active: np.ndarray, kept: np.ndarray) -> None:
        if not self._new_rows:
            return
        if len(kept) != len(self._served):
            index = np.searchsorted(self._served, kept)
            self._new_rows = {k: take_rows(v, index) for k, v in self._new_rows.items()}
        self._store(active[kept], self._new_rows)
        self._new_rows = {}

    def finish(self, message: State, survivors: np.ndarray) -> None:
        self._store(survivors, self.algorithm.client_finish(message, self._gather(survivors)))

    def state_dict(self) -> dict[str, Any]:
        return {"clients": self.clients}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        clients = require_layout(state["clients"], self.clients, "checkpoint: client state")
        self.clients = {k: _materialize(v) for k, v in clients.items()}
        self._owned = set(self.clients)


# --------------------------------------------------------------------------------------- public
def run_sync(
    problem: FederatedProblem,
    algorithm: SyncAlgorithm,
    steps: int,
    *,
    options: RunOptions | None = None,
    x0: Any = None,
    clients_per_round: int | None = None,
    batch_size: int | None = None,
    grad_tol: float | None = None,
    aggregator: Aggregator | None = None,
    privacy: DPSettings | None = None,
    byzantine: Byzantine | None = None,
) -> History:
    """Run ``steps`` synchronous rounds of ``algorithm`` on ``problem``.

    Parameters
    ----------
    problem : FederatedProblem
    algorithm : SyncAlgorithm
        E.g. :class:`~riemfl.federated.RFedProj`.
    steps : int
        R, the number of communication rounds (a step of a synchronous run is a round).
    options : RunOptions, optional
        Seed, recording cadence, checkpoint, resume, progress bar and callback
        (:class:`~riemfl.federated.run_core.RunOptions`; default ``RunOptions()``). The seed
        gives the initial point, the client sampling and mini-batches and the privacy noise
        (:class:`~riemfl.federated.seeds.SeedStreams`).
    x0 : array, optional
        Initial global model (default: :func:`initial_point` of the seed, the same for every
        algorithm).
    clients_per_round : int, optional
        Sample this many clients per round uniformly without replacement (default: all).
    batch_size : int, optional
        Mini-batch size b of the local gradients (default: full local gradients).
    grad_tol : float, optional
        Stop after the first round whose Riemannian gradient norm is at most ``grad_tol``.
    aggregator : Aggregator, optional
        What the server step of a sum-only phase receives: ``aggregate(uploads, phase)`` ->
        (sum per key, count) (default :class:`~riemfl.federated.aggregation.PlainSum`; see
        :mod:`riemfl.federated.aggregation`). Phases that need each upload ignore it.
    privacy : DPSettings, optional
        Client-level differential privacy (:mod:`riemfl.federated.privacy`): clients clip their
        updates, Gaussian noise is added to the sum (or by each client), and every row gets the
        column ``epsilon`` (at ``privacy.delta``, replace-one-client), also in
        ``history.summary``. Needs a rule whose every phase is sum-only. The noise comes from
        seed too (:func:`~riemfl.federated.privacy.noise_streams`) and is checkpointed.
    byzantine : Byzantine, optional
        Byzantine clients for robustness experiments (:mod:`riemfl.federated.attacks`): the
        seed chooses them once, and in every round the model phase's uploads of those that take
        part are forged. ``history.config["byzantine"]`` records the fraction, the attack and
        the clients, and every row gets the column ``attacked``. Needs a rule that declares its
        client update (``privacy_space``); refused with ``privacy``.

    Returns
    -------
    History
        Columns :data:`~riemfl.federated.history.METRICS` (and ``epsilon`` with ``privacy``)
        for round 0 (the initial point), every ``options.record_every`` rounds and round
        ``steps``; ``warnings`` lists every dropped client with its reason.

    Raises
    ------
    ClientFailureError
        When every participant of a phase failed.
    RunInterrupted
        On SIGINT/SIGTERM (after writing the checkpoint).
    ParameterError
        For ``byzantine`` with ``privacy`` or with a rule without ``privacy_space``.
    """
    options = RunOptions() if options is None else options
    seed = options.seed
    steps = integer(steps, "run_sync: steps", minimum=0)
    if clients_per_round is not None and not 1 <= clients_per_round <= problem.n_clients:
        raise ParameterError(
            f"clients_per_round must be in 1..{problem.n_clients}, got {clients_per_round!r}"
        )
    if batch_size is not None:
        if problem.n_samples is None:
            raise ParameterError(
                f"{problem.name} has no per-sample losses, so batch_size must be None"
            )
        integer(batch_size, "run_sync: batch_size", minimum=1)
    attackers = None
    if byzantine is not None:
        if privacy is not None:
            raise ParameterError(
                "run_sync: byzantine with privacy is not supported: the attackers would forge "
                "updates that clipping and noise are meant to bound, an experiment this engine "
                "does not model; run the attack without privacy="
            )
        attackers = byzantine.attackers(algorithm, problem.n_clients, seed)
    if privacy is not None:
        algorithm, aggregator = privatize(
            algorithm,
            privacy,
            population=problem.n_clients,
            sample_size=clients_per_round,
            seed=seed,
            aggregator=aggregator,
        )
    algorithm.validate(problem)
    fingerprint = {
        "problem": problem.describe(),
        "algorithm": algorithm.describe(),
        "seed": seed,
        "clients_per_round": clients_per_round,
        "batch_size": batch_size,
    }
    if aggregator is not None:  # a robust or private aggregator is a setting of the run
        fingerprint["aggregator"] = settings(check_aggregator(aggregator))
    if byzantine is not None:  # which clients attack, and how, is a setting of the run
        fingerprint["byzantine"] = byzantine.describe(problem.n_clients, seed)
    history = History(config={**fingerprint, "steps": steps})
    if x0 is None:
        x0 = initial_point(problem, seed)
    server, clients = algorithm.init(problem, x0)
    dtype = algorithm.output(server).dtype
    rounds = RoundSteps(
        algorithm,
        StackedClients(problem, algorithm, clients, dtype),
        problem,
        server,
        lambda phase: algorithm.upload_shapes(problem, phase),
        SeedStreams(seed).generator("rounds"),
        FaultRecorder(history),
        clients_per_round=clients_per_round,
        batch_size=batch_size,
        dtype=dtype,
        aggregator=aggregator,
        attack=attackers,
    )
    spec = EngineSpec(
        steps,
        label=f"{algorithm.name} on {problem.name}",
        show=("grad_norm",),
        columns=METRICS,
        stop=None if grad_tol is None else (lambda row: row["grad_norm"] <= grad_tol),
    )
    matched = {**fingerprint, "data": data_digest(problem), "x0": data_digest(x0)}
    evaluate = functools.partial(problem_metrics, problem)
    history = run_steps(rounds, evaluate, history, matched, options, spec)
    summarise_privacy(history, None if privacy is None else privacy.delta)
    return history

"""Synchronous rounds on any executor: sampling, phases, fault isolation, accounting.

:class:`RoundSteps` is the :class:`~riemfl.federated.run_core.Steps` of every synchronous
engine. Per round it

1. samples the participating clients and their mini-batches (:func:`sample_round`, from the
   run's ``rounds`` stream of :class:`~riemfl.federated.seeds.SeedStreams`: the same seed
   gives the same draws on every engine);
2. per phase of the server rule (a :class:`ServerRule`, e.g. any
   :class:`~riemfl.federated.SyncAlgorithm`): broadcasts the message, lets the *executor* run
   the client rule of the participants (:class:`ClientExecutor`: in process on a stack of
   clients, per-client torch trainers, or the nodes of a Flower grid), checks every upload
   (:mod:`riemfl.federated.faults`: keys, shapes, dtype, finite values), drops failing clients
   with their reason, tells the executor which clients were accepted, and runs the server rule
   on the survivors' uploads (stacked in client order). An executor that ran secure
   aggregation returns only the sum of a sum-only phase (:attr:`PhaseReply.total`): the round
   then checks the sum instead of each row. In experiments with Byzantine clients
   (:mod:`riemfl.federated.attacks`) the attackers' accepted uploads of the model phase are
   replaced by forged ones between the checks and the server step;
3. delivers the new model to the round's survivors (:meth:`ClientExecutor.finish`);
4. accounts the uplink per client (point-sized arrays and bytes) and the CPU time of the
   rules.

The run stops with :class:`~riemfl.errors.ClientFailureError` only when every participant of a
phase failed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..backend import is_torch
from ..errors import ClientFailureError, ParameterError
from ..problems.base import sample_batches
from .aggregation import (
    Aggregator,
    PlainSum,
    check_aggregator,
    check_aggregator_fits,
    server_update,
)
from .checkpoint import inconsistent, require_amount, require_count, require_layout
from .faults import FaultRecorder, row_problems, stack_problem
from .run_core import Stateful

if TYPE_CHECKING:
    from .attacks import Attackers

__all__ = [
    "ServerRule",
    "ClientExecutor",
    "PhaseReply",
    "RoundSteps",
    "sample_round",
    "take_rows",
]

State = dict[str, Any]


def sample_round(
    rng: np.random.Generator,
    population: Any,
    local_steps: int,
    clients_per_round: int | None = None,
    batch_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """The participating clients of one round and their mini-batches: a round's only draws.

    Parameters
    ----------
    rng : numpy.random.Generator
    population : FederatedProblem or trainer
        Anything with ``n_clients`` (and ``n_samples``, an array of per-client sample counts,
        when ``batch_size`` is given).
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
    n = population.n_clients
    if clients_per_round is None or clients_per_round >= n:
        active = np.arange(n)
    else:
        active = np.sort(rng.choice(n, size=clients_per_round, replace=False))
    batches = None
    if batch_size is not None:
        flat = sample_batches(rng, population.n_samples, np.repeat(active, local_steps), batch_size)
        batches = flat.reshape(len(active), local_steps, batch_size)
    return active, batches


def take_rows(a: Any, rows: np.ndarray) -> Any:
    """Rows ``rows`` of a stacked numpy array or torch tensor."""
    if is_torch(a):
        import torch

        return a[torch.as_tensor(rows, dtype=torch.long, device=a.device)]
    return a[rows]


def _row_nbytes(a: Any) -> int:
    n = math.prod(a.shape[1:])
    return int(n * (a.element_size() if is_torch(a) else a.itemsize))


class ServerRule(Protocol):
    """The server side of a synchronous algorithm (what :class:`SyncAlgorithm` provides)."""

    n_phases: int
    local_steps: int

    def broadcast(self, server: State, phase: int) -> State: ...

    def server_step(
        self, manifold: Any, server: State, phase: int, message: State, uploads: State
    ) -> State: ...

    def sum_only(self, phase: int) -> bool: ...

    def point_uploads(self, phase: int) -> str | None: ...

    def wire_dtypes(self, phase: int) -> dict[str, Any]: ...

    def decode(self, message: State, uploads: State, phase: int) -> State: ...

    def server_step_from_sum(
        self, manifold: Any, server: State, phase: int, message: State, total: State, count: int
    ) -> State: ...

    def output(self, server: State) -> Any: ...


@dataclass
class PhaseReply:
    """What an executor returns for one phase.

    Attributes
    ----------
    uploads : dict of str to array
        The stacked uploads of the clients that answered, in stack order.
    served : numpy.ndarray of int
        Their positions in the round's stack (increasing).
    reasons : dict of int to str
        Stack position -> why that client gave no upload (its computation failed).
    cpu_time : float or None
        CPU seconds the clients reported (remote executors); None: the round measures its own
        process's CPU time.
    total : dict of str to array, optional
        A *pre-aggregated* reply (an executor that ran secure aggregation): the sum per key of
        the uploads of the clients ``served``, which all contributed to it; ``uploads`` is then
        empty. Only a sum-only phase takes such a reply: the round checks the sum (keys, shape,
        dtype, finite values) instead of each row and hands it to
        :meth:`~riemfl.federated.SyncAlgorithm.server_step_from_sum` with ``len(served)``,
        after the aggregator's ``from_total`` (e.g. central DP noise,
        :meth:`~riemfl.federated.privacy.GaussianSum.from_total`).
    """

    uploads: State
    served: np.ndarray
    reasons: dict[int, str] = field(default_factory=dict)
    cpu_time: float | None = None
    total: State | None = None


class ClientExecutor(Stateful, Protocol):
    """Runs the client rule of each phase for the round's participants, wherever they are."""

    def run_phase(
        self, r: int, phase: int, message: State, active: np.ndarray, batches: np.ndarray | None
    ) -> PhaseReply:
        """Run the client rule of ``phase`` for the clients ``active`` (stack order)."""
        ...

    def accept(self, phase: int, active: np.ndarray, kept: np.ndarray) -> None:
        """The server accepted the uploads of stack positions ``kept``: those clients keep the
        state their client rule produced; the others keep their previous state."""
        ...

    def finish(self, message: State, survivors: np.ndarray) -> None:
        """The round's survivors (client ids) receive the new global model's message."""
        ...


class RoundSteps:
    """Synchronous rounds of a server rule over a client executor (module docstring).

    Parameters
    ----------
    rule : ServerRule
        The server side (broadcast, server step, output).
    executor : ClientExecutor
        Where the client rule runs.
    problem : FederatedProblem or trainer
        The population sampled from (``n_clients``, ``n_samples``) and, for the server rule,
        its ``manifold`` (None for flat vectors).
    server : dict
        The initial server state.
    upload_shapes : callable(phase) -> dict
        Shape of one client's upload per key.
    rng : numpy.random.Generator
        The run's generator (the ``rounds`` stream of
        :class:`~riemfl.federated.seeds.SeedStreams`).
    faults : FaultRecorder
    clients_per_round, batch_size : int, optional
        Partial participation and mini-batches (:func:`sample_round`).
    dtype : dtype, optional
        The model's floating dtype: uploads of another dtype are refused.
    aggregator : Aggregator, optional
        What a sum-only phase's server step sees of the accepted uploads (default
        :class:`~riemfl.federated.aggregation.PlainSum`; :mod:`riemfl.federated.aggregation`).
        One with a ``row()`` method adds its columns to every row (a private sum's
        ``epsilon``); one with a state (``state_dict``) is checkpointed with the round.
    clock : callable
        The CPU clock of the server's share (default :func:`time.process_time`).
    attack : Attackers, optional
        Byzantine clients (:meth:`riemfl.federated.attacks.Byzantine.attackers`): in the rule's
        ``model_phase`` their accepted uploads are forged before the server step, and every row
        gets the column ``attacked`` (their number in the last model phase). Checkpointed with
        the round. A pre-aggregated reply of that phase is refused (the attack forges rows).
    """

    def __init__(
        self,
        rule: ServerRule,
        executor: ClientExecutor,
        problem: Any,
        server: State,
        upload_shapes: Callable[[int], dict[str, tuple[int, ...]]],
        rng: np.random.Generator,
        faults: FaultRecorder,
        *,
        clients_per_round: int | None = None,
        batch_size: int | None = None,
        dtype: Any = None,
        aggregator: Aggregator | None = None,
        clock: Callable[[], float] = time.process_time,
        attack: Attackers | None = None,
    ) -> None:
        self.rule, self.executor, self.problem = rule, executor, problem
        self.manifold = problem.manifold
        self.server = server
        self.upload_shapes = upload_shapes
        self.rng, self.faults = rng, faults
        self.clients_per_round, self.batch_size = clients_per_round, batch_size
        self.dtype, self.clock = dtype, clock
        self.aggregator = PlainSum() if aggregator is None else check_aggregator(aggregator)
        check_aggregator_fits(rule, self.aggregator)
        self.attack = attack
        # uplink in points of the manifold, or in floats for flat vectors (no manifold)
        self.point_size = 1 if self.manifold is None else math.prod(self.manifold.point_shape)
        self.unit = "uplink_matrices" if self.manifold is not None else "uplink_floats"
        self.round = 0
        self.totals = {self.unit: 0.0, "uplink_bytes": 0.0, "cpu_time": 0.0}
        self.participants = 0

    # ------------------------------------------------------------------ Steps
    def row(self) -> dict[str, Any]:
        row = {"round": self.round, **self.totals, "participants": self.participants}
        if self.attack is not None:
            row["attacked"] = self.attack.attacked
        return {**row, **self.aggregator.row()}

    def output(self) -> Any:
        return self.rule.output(self.server)

    def advance(self, step: int) -> bool:
        self.round = step
        rule, n = self.rule, self.problem.n_clients
        active, batches = sample_round(
            self.rng, self.problem, rule.local_steps, self.clients_per_round, self.batch_size
        )
        matrices = nbytes = cpu = 0.0
        for phase in range(rule.n_phases):
            message = rule.broadcast(self.server, phase)
            t0 = self.clock()
            reply = self.executor.run_phase(step, phase, message, active, batches)
            t1 = self.clock()
            if reply.total is not None:  # pre-aggregated (secure aggregation)
                kept = self._advance_total(step, phase, message, active, reply)
                cpu += (t1 - t0 if reply.cpu_time is None else reply.cpu_time) + self.clock() - t1
                for v in reply.total.values():  # uplink as if each contributor sent its row
                    matrices += len(kept) * math.prod(v.shape) / self.point_size
                    nbytes += len(kept) * _row_nbytes(v[None])
                active = active[kept]
                batches = None if batches is None else batches[kept]
                continue
            kept, uploads = self._judge(step, phase, active, reply)
            self.executor.accept(phase, active, kept)
            for v in uploads.values():  # what travelled: before decoding
                matrices += v.shape[0] * math.prod(v.shape[1:]) / self.point_size
                nbytes += v.shape[0] * _row_nbytes(v)
            uploads = rule.decode(message, uploads, phase)
            if self.attack is not None and phase == self.attack.phase:
                uploads = self.attack.apply(
                    self.manifold, rule, message, phase, active[kept], uploads
                )
            self.server = server_update(
                rule, self.manifold, self.server, phase, message, uploads, self.aggregator
            )
            clients_cpu = t1 - t0 if reply.cpu_time is None else reply.cpu_time
            cpu += clients_cpu + self.clock() - t1
            active = active[kept]
            batches = None if batches is None else batches[kept]
            reply = uploads = v = None  # the uploads are spent: their memory is free for finish
        self.executor.finish(rule.broadcast(self.server, 0), active)
        self.totals[self.unit] += matrices / n
        self.totals["uplink_bytes"] += nbytes / n
        self.totals["cpu_time"] += cpu
        self.participants = len(active)
        return True

    def _judge(
        self, r: int, phase: int, active: np.ndarray, reply: PhaseReply
    ) -> tuple[np.ndarray, State]:
        """The accepted stack positions and their uploads; drops recorded."""
        reasons = dict(reply.reasons)
        served = np.asarray(reply.served, dtype=np.intp)
        uploads = reply.uploads
        bad: dict[int, str] = {}
        if served.size:
            why = stack_problem(
                uploads,
                self.upload_shapes(phase),
                len(served),
                self.dtype,
                self.rule.wire_dtypes(phase),
            )
            if why is not None:
                bad = dict.fromkeys(range(len(served)), why)
            else:
                bad = row_problems(uploads)
        for j, why in bad.items():
            reasons[int(served[j])] = why
        for j in sorted(reasons):
            self.faults.drop(int(active[j]), reasons[j], round=r, phase=phase)
        if len(reasons) == len(active):
            raise ClientFailureError(
                f"round {r}, phase {phase}: every participating client failed: "
                + "; ".join(f"client {active[j]}: {w}" for j, w in sorted(reasons.items()))
            )
        good = np.array([j not in bad for j in range(len(served))], dtype=bool)
        if not good.all():
            uploads = {k: take_rows(v, np.flatnonzero(good)) for k, v in uploads.items()}
        return served[good], uploads

    def _advance_total(
        self, r: int, phase: int, message: State, active: np.ndarray, reply: PhaseReply
    ) -> np.ndarray:
        """The server step of a pre-aggregated reply; its contributors (stack positions).

        The sum must pass the checks a row would (keys, shape, dtype, finite values); when it
        does not, every contributor is dropped with that reason. The aggregator acts on the sum
        through its ``from_total`` (:class:`~riemfl.federated.aggregation.PlainSum`: unchanged);
        one without it is refused.
        """
        if not self.rule.sum_only(phase):
            raise ParameterError(
                f"phase {phase} of the rule needs each upload, but the executor returned their "
                "sum (secure aggregation serves sum-only phases only)"
            )
        if self.attack is not None and phase == self.attack.phase:
            raise ParameterError(
                f"the executor aggregated phase {phase} itself, but the Byzantine attack forges "
                "individual uploads of that phase; run attacks without secure aggregation"
            )
        if not self.aggregator.takes_totals:  # it needs each upload, which the server never sees
            raise ParameterError(
                f"the executor aggregated phase {phase} itself; aggregator "
                f"{type(self.aggregator).__name__} cannot act on uploads the server never sees "
                "(its takes_totals is False)"
            )
        total = dict(reply.total or {})
        one = {k: v[None] for k, v in total.items()}
        why = stack_problem(
            one, self.upload_shapes(phase), 1, self.dtype, self.rule.wire_dtypes(phase)
        )
        why = row_problems(one).get(0) if why is None else why
        served = np.asarray(reply.served, dtype=np.intp)
        reasons = dict(reply.reasons)
        if why is not None:
            reasons.update(dict.fromkeys(served.tolist(), f"the aggregated sum: {why}"))
            served = served[:0]
        self._judge(r, phase, active, PhaseReply({}, served[:0], reasons))  # records the drops
        if not served.size:  # nothing contributed, yet some clients have no reason: an error
            raise ClientFailureError(
                f"round {r}, phase {phase}: the executor's sum has no contributor"
            )
        self.executor.accept(phase, active, served)
        total, count = self.aggregator.from_total(total, len(served), phase)  # e.g. DP noise
        self.server = self.rule.server_step_from_sum(
            self.manifold, self.server, phase, message, total, count
        )
        return served

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        state = {
            "round": self.round,
            "server": self.server,
            "rng": self.rng.bit_generator.state,
            "totals": dict(self.totals),
            "participants": self.participants,
            "executor": self.executor.state_dict(),
        }
        if isinstance(self.rule, Stateful):
            state["rule"] = self.rule.state_dict()
        if isinstance(self.aggregator, Stateful):  # e.g. a noise generator and an accountant
            state["aggregator"] = self.aggregator.state_dict()
        if self.attack is not None:
            state["attack"] = self.attack.state_dict()
        return state

    def validate(self, step: int) -> None:
        """The loaded state agrees with a checkpoint of step ``step``: its ``round`` is
        ``step``, its totals (uplink, CPU time) are finite and >= 0, and ``participants`` counts
        at most the population.

        Raises
        ------
        CheckpointError
            Naming the first field that disagrees.
        """
        if self.round != step:
            raise inconsistent("state key 'round'", self.round, f"{step}, the checkpoint's step")
        for key, value in self.totals.items():
            require_amount(f"state key 'totals.{key}'", value)
        n = self.problem.n_clients
        require_count("state key 'participants'", self.participants, 0, n)
        if self.attack is not None:
            require_count("state key 'attack.attacked'", self.attack.attacked, 0, n)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.round = int(state["round"])
        self.server = require_layout(state["server"], self.server, "checkpoint: server state")
        self.rng.bit_generator.state = state["rng"]
        self.totals = {k: float(state["totals"][k]) for k in self.totals}
        self.participants = int(state["participants"])
        self.executor.load_state_dict(state["executor"])
        if isinstance(self.rule, Stateful):
            self.rule.load_state_dict(state["rule"])
        if isinstance(self.aggregator, Stateful):
            self.aggregator.load_state_dict(state["aggregator"])
        if self.attack is not None:
            self.attack.load_state_dict(state["attack"])

"""Fault injection for testing a deployment's checks: a Flower mod that corrupts replies.

``make_client_app(jobs, mods=[CorruptReplies("sync", partition=1, faults=("nan",))])`` makes
node 1 return a NaN upload for its first client in every round of job ``"sync"``; the server
must drop that client with its reason (and only that client). Three faults act on the whole node
instead of a row: ``faults=("raise",)`` makes the node's ClientApp raise (Flower then returns an
error reply), ``faults=("die",)`` makes it kill its own process with ``os._exit(1)`` (in
simulation the Ray actor running it dies; Flower answers with an error reply such as
``ActorDiedError``), as a crash or the OOM killer would, and ``faults=("hang",)`` makes it
sleep ``hang_for`` seconds before it answers (in simulation it holds a Ray actor all that
time), as a node stuck in I/O or a deadlock would: the server excludes it after its
``reply_timeout`` and ignores the late reply.

``SecAggDropout(partition=1)`` makes node 1 fail inside Flower's SecAgg+ protocol instead (at
the stage that collects the masked vectors, by default): a node that drops out of a secure
aggregation after it joined it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from riemfl.adapters.flower.jobs import check_positive
from riemfl.adapters.flower.wire import ASYNC, SYNC, decode, encode

from riemfl.errors import ParameterError

__all__ = ["CorruptReplies", "SecAggDropout", "FAULTS", "NODE_FAULTS", "HANG_FOR"]

#: what a fault does to one uploaded row (a point or vector of the manifold's point shape)
FAULTS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "nan": lambda row: np.full_like(row, np.nan),
    "off_manifold": lambda row: 1.01 * row,  # a Stiefel point with columns of norm 1.01
    "inf": lambda row: np.full_like(row, np.inf),
    # adds 1 to row[0]: a curve's first control point (the curve no longer starts at the model
    # the client received); on a point, its first entry along the first axis
    "move_start": lambda row: np.concatenate([row[:1] + 1.0, row[1:]]),
    # finite, the right shape, but complex (the node's whole stacked upload becomes complex)
    "complex": lambda row: row + 1e-3j,
}


#: default seconds a hanging node (the ``"hang"`` fault) sleeps before it answers
HANG_FOR = 600.0


def _raise(job: str, partition: int, hang_for: float) -> None:
    raise RuntimeError(f"fault injected on node {partition} (job {job!r})")


def _die(job: str, partition: int, hang_for: float) -> None:
    os._exit(1)  # the ClientApp's process ends at once, as in a crash (no exception, no reply)


def _hang(job: str, partition: int, hang_for: float) -> None:
    time.sleep(hang_for)  # the ClientApp holds its process (a Ray actor in simulation)


#: faults of the whole node, each called as ``fault(job, partition, hang_for)``: the ClientApp
#: raises, its process dies, or it sleeps ``hang_for`` seconds before it answers
NODE_FAULTS: dict[str, Callable[[str, int, float], None]] = {
    "raise": _raise,
    "die": _die,
    "hang": _hang,
}


class CorruptReplies:
    """A ClientApp mod: node ``partition`` corrupts its replies for job ``job``.

    Parameters
    ----------
    job : str
        The job whose replies are corrupted.
    partition : int
        The ``partition-id`` of the faulty node.
    faults : sequence of str
        One fault of :data:`FAULTS` per uploaded row, in order (row j of the node's stacked
        uploads gets ``faults[j]``; rows beyond are left alone). Asynchronous replies have one
        row, the local model (or a curve rule's control points). Or a single fault of
        :data:`NODE_FAULTS`: ``("raise",)``, the ClientApp raises instead of answering;
        ``("die",)``, its process exits (``os._exit(1)``); ``("hang",)``, it sleeps
        ``hang_for`` seconds, then answers normally; on each training message of the job.
    hang_for : float
        Seconds a ``"hang"`` fault sleeps (default :data:`HANG_FOR`). A simulation ends only
        once every ClientApp call has returned, so a test keeps it short.
    """

    def __init__(
        self,
        job: str,
        partition: int,
        faults: Sequence[str] = ("nan",),
        hang_for: float = HANG_FOR,
    ) -> None:
        faults = tuple(faults)
        node_faults = [f for f in faults if f in NODE_FAULTS]
        unknown = [f for f in faults if f not in FAULTS and f not in NODE_FAULTS]
        if unknown or (node_faults and len(faults) != 1):
            raise ParameterError(
                f"faults must be some of {sorted(FAULTS)} or one of {sorted(NODE_FAULTS)} "
                f"alone; got {list(faults)} (unknown faults {unknown})"
            )
        self.job, self.partition, self.faults = job, int(partition), faults
        self.hang_for = check_positive("hang_for", hang_for)

    def __call__(self, message: Any, context: Any, call_next: Callable[..., Any]) -> Any:
        kind = message.metadata.message_type
        targeted = (
            kind in (SYNC, ASYNC)
            and int(context.node_config.get("partition-id", -1)) == self.partition
            and decode(message.content)[0].get("job") == self.job
        )
        if targeted and self.faults[0] in NODE_FAULTS:
            NODE_FAULTS[self.faults[0]](self.job, self.partition, self.hang_for)
            return call_next(message, context)  # after a hang: a late, unchanged reply
        reply = call_next(message, context)
        if not targeted or reply.has_error():
            return reply
        config, arrays = decode(reply.content)
        for key in sorted(arrays):
            stacked = arrays[key][None] if kind == ASYNC else arrays[key]
            if not len(stacked):
                continue
            rows = [FAULTS[f](row) for f, row in zip(self.faults, stacked, strict=False)]
            stacked = np.stack([*rows, *stacked[len(rows) :]])  # complex rows: all complex
            arrays[key] = stacked[0] if kind == ASYNC else stacked
        reply.content = encode(config, arrays)
        return reply


class SecAggDropout:
    """A ClientApp mod: node ``partition`` fails at a stage of Flower's SecAgg+ protocol.

    Parameters
    ----------
    partition : int
        The ``partition-id`` of the node that drops out.
    stage : str
        The SecAgg+ stage whose message it fails on: ``"setup"``, ``"share_keys"``,
        ``"collect_masked_vectors"`` (default: while it would send its masked upload) or
        ``"unmask"``.
    fault : {"raise", "die", "hang"}
        Raise in the ClientApp, kill its process, or sleep ``hang_for`` seconds before
        answering (:data:`NODE_FAULTS`).
    rounds : sequence of int, optional
        The rounds it fails in (default: every one).
    job : str, optional
        Fail only in the secure aggregations of this job (default: of every job): the node
        holds that job's contribution of that round (:class:`~riemfl.adapters.flower.secure.
        Contribution`) when its SecAgg+ run starts.
    hang_for : float
        Seconds a ``"hang"`` fault sleeps (default :data:`HANG_FOR`).
    """

    STAGES = ("setup", "share_keys", "collect_masked_vectors", "unmask")

    def __init__(
        self,
        partition: int,
        stage: str = "collect_masked_vectors",
        fault: str = "raise",
        rounds: Sequence[int] | None = None,
        job: str | None = None,
        hang_for: float = HANG_FOR,
    ) -> None:
        if stage not in self.STAGES or fault not in NODE_FAULTS:
            raise ParameterError(
                f"stage must be one of {list(self.STAGES)} and fault one of "
                f"{sorted(NODE_FAULTS)}; got {stage!r}, {fault!r}"
            )
        self.partition, self.stage, self.fault = int(partition), stage, fault
        self.rounds = None if rounds is None else {int(r) for r in rounds}
        self.job = job
        self.hang_for = check_positive("hang_for", hang_for)

    def _targets(self, message: Any, context: Any) -> bool:
        r = int(message.metadata.group_id)
        if self.rounds is not None and r not in self.rounds:
            return False
        if self.job is None:
            return True
        meta = context.state.config_records.get(f"riemfl.{self.job}.secagg.meta")
        return meta is not None and int(meta["round"]) == r

    def __call__(self, message: Any, context: Any, call_next: Callable[..., Any]) -> Any:
        configs = message.content.config_records.get("secaggplus_configs")
        if (
            message.metadata.message_type == "train"
            and configs is not None
            and configs.get("stage") == self.stage
            and int(context.node_config.get("partition-id", -1)) == self.partition
            and self._targets(message, context)
        ):
            NODE_FAULTS[self.fault](f"SecAgg+ {self.stage}", self.partition, self.hang_for)
        return call_next(message, context)

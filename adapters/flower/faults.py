"""Fault injection for testing a deployment's checks: a Flower mod that corrupts replies.

``make_client_app(jobs, mods=[CorruptReplies("sync", partition=1, faults=("nan",))])`` makes
node 1 return a NaN upload for its first client in every round of job ``"sync"``; the server
must drop that client with its reason (and only that client). Two faults act on the whole node
instead of a row: ``faults=("raise",)`` makes the node's ClientApp raise (Flower then returns an
error reply), ``faults=("die",)`` makes it kill its own process with ``os._exit(1)`` (in
simulation the Ray actor running it dies; Flower answers with an error reply such as
``ActorDiedError``), as a crash or the OOM killer would.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...errors import ParameterError
from .wire import ASYNC, SYNC, decode, encode

__all__ = ["CorruptReplies", "FAULTS", "NODE_FAULTS"]

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


def _raise(job: str, partition: int) -> None:
    raise RuntimeError(f"fault injected on node {partition} (job {job!r})")


def _die(job: str, partition: int) -> None:
    os._exit(1)  # the ClientApp's process ends at once, as in a crash (no exception, no reply)


#: faults of the whole node: the ClientApp raises, or its process dies, instead of answering
NODE_FAULTS: dict[str, Callable[[str, int], None]] = {"raise": _raise, "die": _die}


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
        ``("die",)``, its process exits (``os._exit(1)``) on each training message of the
        job.
    """

    def __init__(self, job: str, partition: int, faults: Sequence[str] = ("nan",)) -> None:
        faults = tuple(faults)
        node_faults = [f for f in faults if f in NODE_FAULTS]
        unknown = [f for f in faults if f not in FAULTS and f not in NODE_FAULTS]
        if unknown or (node_faults and len(faults) != 1):
            raise ParameterError(
                f"faults must be some of {sorted(FAULTS)} or one of {sorted(NODE_FAULTS)} "
                f"alone; got {list(faults)} (unknown faults {unknown})"
            )
        self.job, self.partition, self.faults = job, int(partition), faults

    def __call__(self, message: Any, context: Any, call_next: Callable[..., Any]) -> Any:
        kind = message.metadata.message_type
        targeted = (
            kind in (SYNC, ASYNC)
            and int(context.node_config.get("partition-id", -1)) == self.partition
            and decode(message.content)[0].get("job") == self.job
        )
        if targeted and self.faults[0] in NODE_FAULTS:
            NODE_FAULTS[self.faults[0]](self.job, self.partition)
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

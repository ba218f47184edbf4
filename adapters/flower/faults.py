"""Fault injection for testing a deployment's checks: a Flower mod that corrupts replies.

``make_client_app(jobs, mods=[CorruptReplies("sync", partition=1, faults=("nan",))])`` makes
node 1 return a NaN upload for its first client in every round of job ``"sync"``; the server
must drop that client with its reason (and only that client). ``faults=("raise",)`` makes the
node's ClientApp fail instead (Flower then returns an error reply).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...errors import ParameterError
from .wire import ASYNC, SYNC, decode, encode

__all__ = ["CorruptReplies", "FAULTS"]

#: what a fault does to one uploaded row (a point or vector of the manifold's point shape)
FAULTS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "nan": lambda row: np.full_like(row, np.nan),
    "off_manifold": lambda row: 1.01 * row,  # a Stiefel point with columns of norm 1.01
    "inf": lambda row: np.full_like(row, np.inf),
    # adds 1 to row[0]: a curve's first control point (the curve no longer starts at the model
    # the client received); on a point, its first entry along the first axis
    "move_start": lambda row: np.concatenate([row[:1] + 1.0, row[1:]]),
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
        row, the local model (or a curve rule's control points). ``("raise",)``: the ClientApp
        raises instead of answering.
    """

    def __init__(self, job: str, partition: int, faults: Sequence[str] = ("nan",)) -> None:
        unknown = [f for f in faults if f not in FAULTS and f != "raise"]
        if unknown:
            raise ParameterError(
                f"unknown faults {unknown}; expected 'raise' or some of {sorted(FAULTS)}"
            )
        self.job, self.partition, self.faults = job, int(partition), tuple(faults)

    def __call__(self, message: Any, context: Any, call_next: Callable[..., Any]) -> Any:
        kind = message.metadata.message_type
        targeted = (
            kind in (SYNC, ASYNC)
            and int(context.node_config.get("partition-id", -1)) == self.partition
            and decode(message.content)[0].get("job") == self.job
        )
        if targeted and self.faults == ("raise",):
            raise RuntimeError(f"fault injected on node {self.partition} (job {self.job!r})")
        reply = call_next(message, context)
        if not targeted or reply.has_error():
            return reply
        config, arrays = decode(reply.content)
        for key in sorted(arrays):
            stacked = arrays[key][None] if kind == ASYNC else arrays[key]
            for j, fault in enumerate(self.faults[: len(stacked)]):
                stacked[j] = FAULTS[fault](stacked[j])
        reply.content = encode(config, arrays)
        return reply

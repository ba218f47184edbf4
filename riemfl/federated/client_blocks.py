"""A client rule run on a stack of clients in blocks, so that its working memory stays bounded.

The in-process executor (:class:`~riemfl.federated.engine.StackedClients`) computes a phase for
all participating clients with one batched call of the algorithm's ``client_step``. With many
clients, the temporaries of that call (each local iterate, gradient and projection of the whole
stack) dominate a run's memory: at 10^4 kPCA clients (d = 100, k = 5) each is 40 MB, and a local
step makes about nine of them. Running the stack in blocks of consecutive clients bounds them by
the block, while the results (uploads and new client-state rows) are written into one array of
the whole stack each, allocated at the first block.

Blocks change no result: a client rule treats each row of its stack independently (the batched
linear algebra loops over the matrices of a stack), so every row is computed by the same
floating-point operations whichever block it is in; the tests compare blocked and unblocked runs
bit for bit. A block whose call fails is retried client by client by the executor, as a whole
stack would be, so a failing client is isolated within its block.

A state row that the client rule returns unchanged (the very array it was given, as RFedProj
does with its correction) is not copied: when every block returns its own input, the new rows
are the old array.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import tuning
from ..backend import is_torch
from .algorithm import State
from .rounds import take_rows

__all__ = ["StackOutcome", "block_ranges", "clients_per_block", "BlockAssembler"]


@dataclass
class StackOutcome:
    """The client rule's answer for a stack (or a block) of clients.

    Attributes
    ----------
    uploads, rows : dict of str to array
        Stacked uploads and new client-state rows of the clients that answered, in stack order.
    served : numpy.ndarray of int
        Their positions in the stack (increasing).
    reasons : dict of int to str
        Stack position -> why that client gave no answer.
    """

    uploads: State
    rows: State
    served: np.ndarray
    reasons: dict[int, str] = field(default_factory=dict)


def clients_per_block(shapes: dict[str, tuple[int, ...]], itemsize: int) -> int:
    """How many clients a block holds: :data:`riemfl.tuning.CLIENT_BLOCK_BYTES` divided by the
    bytes of one client's upload (at least one client)."""
    row_bytes = itemsize * sum(math.prod(s) for s in shapes.values())
    return max(1, tuning.CLIENT_BLOCK_BYTES // max(row_bytes, 1))


def block_ranges(m: int, size: int) -> Iterator[range]:
    """Consecutive ranges of at most ``size`` stack positions covering ``0..m-1``."""
    for start in range(0, m, size):
        yield range(start, min(start + size, m))


def _empty_like_rows(v: Any, m: int) -> Any:
    """An uninitialised stack of ``m`` rows shaped and typed as the rows of ``v``."""
    if is_torch(v):
        import torch

        return torch.empty((m, *v.shape[1:]), dtype=v.dtype, device=v.device)
    return np.empty((m, *v.shape[1:]), dtype=v.dtype)


def _write(out: Any, positions: np.ndarray, values: Any) -> None:
    """``out[positions] = values`` (a slice when the positions are consecutive)."""
    if positions.size and positions[-1] - positions[0] + 1 == positions.size:
        out[int(positions[0]) : int(positions[-1]) + 1] = values
    elif is_torch(out):
        import torch

        out[torch.as_tensor(positions, dtype=torch.long, device=out.device)] = values
    else:
        out[positions] = values


class BlockAssembler:
    """Collects the :class:`StackOutcome` of each block into the outcome of the whole stack.

    Parameters
    ----------
    m : int
        Size of the whole stack.
    given : dict of str to array
        The client-state rows of the whole stack, as handed to the blocks (row slices of these
        arrays are the blocks' inputs).
    """

    def __init__(self, m: int, given: State) -> None:
        self.m, self.given = m, given
        self.uploads: State = {}
        self.rows: State = {}
        # state keys every block so far returned unchanged (its own input slice)
        self.unchanged: set[str] | None = None
        self.served: list[np.ndarray] = []
        self.reasons: dict[int, str] = {}

    def add(self, block: range, inputs: State, outcome: StackOutcome) -> None:
        """Record the outcome of the block ``block`` of stack positions, whose state rows were
        ``inputs``."""
        start = block.start
        self.reasons.update({start + j: why for j, why in outcome.reasons.items()})
        if not outcome.served.size:
            return
        positions = start + outcome.served
        self.served.append(positions)
        for k, v in outcome.uploads.items():
            if k not in self.uploads:
                self.uploads[k] = _empty_like_rows(v, self.m)
            _write(self.uploads[k], positions, v)
        whole = outcome.served.size == len(block)
        same = {k for k, v in outcome.rows.items() if whole and v is inputs.get(k)}
        if self.unchanged is None:
            self.unchanged = same
        for k in self.unchanged - same:  # a key that stops being unchanged: copy the rows so far
            self.rows[k] = _empty_like_rows(self.given[k], self.m)
            self.rows[k][:start] = self.given[k][:start]
        self.unchanged &= same
        for k, v in outcome.rows.items():
            if k in self.unchanged:
                continue
            if k not in self.rows:
                self.rows[k] = _empty_like_rows(v, self.m)
            _write(self.rows[k], positions, v)

    def result(self) -> StackOutcome:
        """The outcome of the whole stack."""
        served = np.concatenate(self.served) if self.served else np.zeros(0, dtype=np.intp)
        rows = dict(self.rows)
        for k in self.unchanged or ():
            rows[k] = self.given[k]
        uploads = self.uploads
        if served.size < self.m:
            uploads = {k: take_rows(v, served) for k, v in uploads.items()}
            rows = {k: take_rows(v, served) for k, v in rows.items()}
        return StackOutcome(uploads, rows, served.astype(np.intp), self.reasons)

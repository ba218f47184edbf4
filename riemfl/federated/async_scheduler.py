r"""The asynchronous simulator's waiting queue: which idle client a free worker takes next.

``"fifo"``: the order in which clients became idle. ``"paper"``: the scheduler of Licudi et
al. (2025, Section 3.4): idle clients are ranked by ``num_batches + k * t_push`` (``t_push``: the
virtual time the client joined the queue; key / k is its completion time at k batches per time
unit, so pair it with ``ProportionalTime(speed=k)``), and a free worker takes rank i (0 = front)
with probability :math:`(N - i)/\sum_{j=1}^{N} j`.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from ..errors import ParameterError

__all__ = ["WaitingQueue", "SCHEDULERS"]

#: The queue disciplines :class:`WaitingQueue` knows.
SCHEDULERS = ("fifo", "paper")


class WaitingQueue:
    """Idle clients waiting for a worker (module docstring).

    Parameters
    ----------
    kind : {"fifo", "paper"}
    k : float
        The paper's k (batches per time unit) of the ``"paper"`` ranking.
    rng : numpy.random.Generator
        Draws the rank a free worker takes (``"paper"``).
    """

    def __init__(self, kind: str, k: float, rng: np.random.Generator) -> None:
        if kind not in SCHEDULERS:
            raise ParameterError(f"scheduler must be one of {SCHEDULERS}, got {kind!r}")
        self.kind, self.k, self.rng = kind, float(k), rng
        self._fifo: deque[int] = deque()
        self._items: list[tuple[float, int]] = []  # (key, client) for "paper"

    def __len__(self) -> int:
        return len(self._fifo) if self.kind == "fifo" else len(self._items)

    def clients(self) -> list[int]:
        """The waiting clients, in the queue's order."""
        return list(self._fifo) if self.kind == "fifo" else [c for _, c in self._items]

    def push(self, client: int, now: float, num_batches: int) -> None:
        """Client ``client`` becomes idle at virtual time ``now``."""
        if self.kind == "fifo":
            self._fifo.append(client)
        else:
            self._items.append((num_batches + self.k * now, client))

    def pop(self) -> int:
        """The client a free worker takes."""
        if self.kind == "fifo":
            return self._fifo.popleft()
        self._items.sort()
        n = len(self._items)
        ranks = np.arange(n)
        p = (n - ranks) / (n * (n + 1) / 2)  # p_i = (N - i) / sum_{j=1}^N j, i = 0..N-1
        i = int(self.rng.choice(n, p=p))
        return self._items.pop(i)[1]

    def state_dict(self) -> dict[str, Any]:
        """The waiting clients (and their keys); the generator is saved by its owner."""
        return {"fifo": list(self._fifo), "items": [[key, c] for key, c in self._items]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._fifo = deque(int(c) for c in state["fifo"])
        self._items = [(float(key), int(c)) for key, c in state["items"]]

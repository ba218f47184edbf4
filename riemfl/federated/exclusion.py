"""Which clients an asynchronous server still serves: one policy for every asynchronous engine.

A client is excluded after ``max_failures`` faulty updates in a row (an exception, an upload
that fails the checks), or at once when the server learns that it cannot be reached (its node
is gone: :meth:`ExclusionPolicy.exclude`). A good update resets the count. The in-process
simulator (:func:`~riemfl.federated.run_async`) and the Flower asynchronous server
(:mod:`riemfl.adapters.flower`) both keep an :class:`ExclusionPolicy`, so a client is excluded
for the same reasons, with the same message, on either, and the policy's state travels with
their checkpoints.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .checkpoint import require_count

__all__ = ["ExclusionPolicy"]


class ExclusionPolicy:
    """Counts each client's faulty updates in a row and excludes it at ``max_failures``.

    Parameters
    ----------
    n_clients : int
    max_failures : int or None
        Faulty updates in a row that exclude a client (None: a fault never excludes).

    Attributes
    ----------
    failures : numpy.ndarray of int64
        Faulty updates in a row, per client.
    excluded : dict of int to str
        The excluded clients and why, in the order they were excluded.
    """

    def __init__(self, n_clients: int, max_failures: int | None) -> None:
        self.n_clients = int(n_clients)
        self.max_failures = max_failures
        self.failures = np.zeros(self.n_clients, dtype=np.int64)
        self.excluded: dict[int, str] = {}

    def __contains__(self, client: int) -> bool:
        return client in self.excluded

    @property
    def nobody_left(self) -> bool:
        """Whether every client is excluded."""
        return len(self.excluded) == self.n_clients

    def succeeded(self, client: int) -> None:
        """A good update of ``client``: its count of faults in a row starts again."""
        self.failures[client] = 0

    def failed(self, client: int, why: str) -> str | None:
        """A faulty update of ``client`` (``why``); the reason it is excluded when this fault
        is its ``max_failures``-th in a row, else None."""
        self.failures[client] += 1
        count = int(self.failures[client])
        if self.max_failures is None or count < self.max_failures or client in self.excluded:
            return None
        reason = f"{count} faulty updates in a row; last: {why}"
        self.excluded[client] = reason
        return reason

    def exclude(self, client: int, why: str) -> bool:
        """Exclude ``client`` at once (e.g. its node is gone); False if it already was."""
        if client in self.excluded:
            return False
        self.excluded[client] = why
        return True

    def summary(self, limit: int = 5) -> str:
        """The first ``limit`` excluded clients and why, for an error message."""
        shown = "; ".join(f"client {c}: {w}" for c, w in list(self.excluded.items())[:limit])
        return shown + ("; ..." if len(self.excluded) > limit else "")

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {"failures": self.failures.copy(), "excluded": dict(self.excluded)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        failures = np.asarray(state["failures"], dtype=np.int64)
        if failures.shape != self.failures.shape:
            raise ValueError(f"failures of {failures.shape} clients; expected {self.n_clients}")
        self.failures = failures.copy()
        self.excluded = {int(c): str(w) for c, w in state["excluded"].items()}

    def validate(self, field: str = "state key") -> None:
        """Check a loaded state: client indices in range, counts >= 0."""
        for client in self.excluded:
            require_count(f"{field} 'excluded' entry", client, 0, self.n_clients - 1)
        require_count(f"{field} 'failures' (smallest)", int(self.failures.min(initial=0)))

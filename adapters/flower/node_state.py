"""A node's client state (the rows of the clients it hosts), kept in Flower's ``context.state``.

Flower keeps ``context.state`` (a ``RecordDict``) per node and run, across messages; the Flower
adapter stores there, per job, the algorithm's client state of the node's clients, stacked in
the order of the clients the node hosts (``riemfl.<job>.rows``), the rows of the last phase that
the server has not yet accepted (``riemfl.<job>.pending``), and which clients those are
(``riemfl.<job>.meta``). The server accepts rows in its next message to the node ("commit"),
because only the server knows which uploads passed its checks: a dropped client keeps its old
rows, as in the in-process engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from riemfl.adapters.flower._flwr import flwr
from riemfl.adapters.flower.errors import ProtocolError
from riemfl.adapters.flower.wire import to_numpy

__all__ = ["NodeState"]


class NodeState:
    """The client-state rows of one job on one node.

    Parameters
    ----------
    state : flwr.app.RecordDict
        ``context.state`` of the node.
    job : str
    """

    def __init__(self, state: Any, job: str) -> None:
        self._state = state
        self._rows_key = f"riemfl.{job}.rows"
        self._pending_key = f"riemfl.{job}.pending"
        self._meta_key = f"riemfl.{job}.meta"
        self.job = job

    # ------------------------------------------------------------------ records
    def _meta(self) -> dict[str, Any]:
        if self._meta_key not in self._state:
            raise ProtocolError(
                f"job {self.job!r}: this node has no state yet; the server must send "
                "train.riemfl_setup first"
            )
        return dict(self._state[self._meta_key])

    def _arrays(self, key: str) -> dict[str, np.ndarray]:
        return {k: np.array(v.numpy()) for k, v in self._state[key].items()}

    def _put(self, key: str, arrays: Mapping[str, Any]) -> None:
        f = flwr()
        self._state[key] = f.ArrayRecord({k: f.Array(to_numpy(v)) for k, v in arrays.items()})

    def _set_meta(self, hosted: Sequence[int], pending: Sequence[int]) -> None:
        f = flwr()
        self._state[self._meta_key] = f.ConfigRecord(
            {"hosted": [int(c) for c in hosted], "pending": [int(c) for c in pending]}
        )

    # ------------------------------------------------------------------ public
    @property
    def hosted(self) -> list[int]:
        """The clients this node hosts, in the order of the stored rows."""
        return list(self._meta()["hosted"])

    @property
    def pending(self) -> list[int]:
        """Clients whose rows of the last phase await the server's verdict."""
        return list(self._meta()["pending"])

    def init(self, hosted: Sequence[int], rows: Mapping[str, Any]) -> None:
        """Store the initial rows of the ``hosted`` clients (leading axis = ``hosted``)."""
        self._put(self._rows_key, rows)
        self._put(self._pending_key, {})
        self._set_meta(hosted, [])

    def _positions(self, order: Sequence[int], clients: Sequence[int], what: str) -> np.ndarray:
        """Where each of ``clients`` stands in ``order``; :class:`ProtocolError` if absent."""
        where = {int(c): j for j, c in enumerate(order)}
        missing = [int(c) for c in clients if int(c) not in where]
        if missing:
            raise ProtocolError(
                f"job {self.job!r}: clients {missing} {what} (this node has {list(order)})"
            )
        return np.array([where[int(c)] for c in clients], dtype=np.intp)

    def gather(self, clients: Sequence[int]) -> dict[str, np.ndarray]:
        """The rows of ``clients`` (in that order)."""
        index = self._positions(self.hosted, clients, "are not hosted by this node")
        return {k: v[index] for k, v in self._arrays(self._rows_key).items()}

    def write(self, clients: Sequence[int], rows: Mapping[str, Any]) -> None:
        """Replace the rows of ``clients`` by ``rows`` (leading axis = ``clients``)."""
        if not len(clients):
            return
        index = self._positions(self.hosted, clients, "are not hosted by this node")
        stored = self._arrays(self._rows_key)
        for k, v in rows.items():
            stored[k][index] = to_numpy(v)
        self._put(self._rows_key, stored)

    def set_pending(self, clients: Sequence[int], rows: Mapping[str, Any]) -> None:
        """Keep the new rows of ``clients`` until the server accepts them."""
        self._put(self._pending_key, rows)
        self._set_meta(self.hosted, clients)

    def snapshot(self) -> tuple[dict[str, np.ndarray], list[int], dict[str, np.ndarray]]:
        """The stored rows (leading axis: :attr:`hosted`), the pending clients and their rows
        (leading axis: :attr:`pending`): everything a checkpoint of the job needs of this node."""
        return self._arrays(self._rows_key), self.pending, self._arrays(self._pending_key)

    def restore(
        self,
        rows: Mapping[str, Any],
        pending: Sequence[int],
        pending_rows: Mapping[str, Any],
    ) -> None:
        """Install a checkpoint's rows of the :attr:`hosted` clients and its pending rows of
        ``pending`` (each hosted here) in place of the current ones."""
        hosted = self.hosted
        self._positions(hosted, pending, "are pending in the checkpoint but not hosted here")
        self._put(self._rows_key, rows)
        self._put(self._pending_key, pending_rows)
        self._set_meta(hosted, pending)

    def commit(self, accepted: Sequence[int]) -> None:
        """Store the pending rows of the ``accepted`` clients; forget the other pending rows."""
        take = self._positions(self.pending, accepted, "are accepted but have no pending rows")
        if len(accepted):
            rows = self._arrays(self._pending_key)
            self.write(accepted, {k: v[take] for k, v in rows.items()})
        self._put(self._pending_key, {})
        self._set_meta(self.hosted, [])

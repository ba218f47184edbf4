"""The compression rows of an asynchronous job's clients on their node, in ``context.state``.

A FedBuff job with a compressor (:class:`riemfl.federated.FedBuff`, ``compressor=``) compresses
each client's update on the client's node, so the node keeps what the client carries from one
upload to the next (:meth:`~riemfl.federated.buffer_compression.BufferCompression.compress`):
its error-feedback residual and its compressor state (PowerSGD's warm-started factor), one
:class:`flwr.app.ArrayRecord` per client (``riemfl.<job>.codec.<client>``), and the number of
its uploads those rows follow (``riemfl.<job>.codec.counts``).

Only the server knows whether it accepted an upload (it drops a stale or faulty one), so a new
upload's rows wait as *pending* rows (``riemfl.<job>.codec.<client>.pending``) until the server's
next message to that client says how many of its uploads it has accepted: one more than the
node's count commits them, the same count discards them (the server dropped that upload).
The server's count also seeds the client's draws, so a node and a server that disagree on it
fail loudly (:class:`~riemfl.adapters.flower.ProtocolError`) instead of drifting apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from riemfl.adapters.flower._flwr import flwr
from riemfl.adapters.flower.errors import ProtocolError
from riemfl.adapters.flower.wire import to_numpy

__all__ = ["NodeCompression", "client_arrays", "rows_of_clients"]


class NodeCompression:
    """The compression rows of one job's clients on one node (module docstring).

    Parameters
    ----------
    state : flwr.app.RecordDict
        ``context.state`` of the node.
    job : str
    """

    def __init__(self, state: Any, job: str) -> None:
        self._state = state
        self._prefix = f"riemfl.{job}.codec"
        self.job = job

    # ------------------------------------------------------------------ records
    def _key(self, client: int, pending: bool = False) -> str:
        return f"{self._prefix}.{int(client)}" + (".pending" if pending else "")

    def _counts(self) -> dict[int, int]:
        key = f"{self._prefix}.counts"
        if key not in self._state:
            raise ProtocolError(
                f"job {self.job!r}: this node has no compression rows yet; the server must send "
                "train.riemfl_setup first"
            )
        record = self._state[key]
        return dict(zip(record["clients"], record["counts"], strict=True))

    def _set_counts(self, counts: Mapping[int, int]) -> None:
        clients = sorted(counts)
        self._state[f"{self._prefix}.counts"] = flwr().ConfigRecord(
            {"clients": clients, "counts": [int(counts[c]) for c in clients]}
        )

    def _read(self, key: str) -> dict[str, np.ndarray] | None:
        if key not in self._state:
            return None
        return {k: np.array(v.numpy()) for k, v in self._state[key].items()}

    def _write(self, key: str, rows: Mapping[str, Any] | None) -> None:
        if rows is None:
            if key in self._state:
                del self._state[key]
            return
        f = flwr()
        self._state[key] = f.ArrayRecord({k: f.Array(to_numpy(v)) for k, v in rows.items()})

    def _count(self, client: int) -> int:
        counts = self._counts()
        if client not in counts:
            raise ProtocolError(
                f"job {self.job!r}: client {client} is not hosted by this node (it hosts "
                f"{sorted(counts)})"
            )
        return counts[client]

    # ------------------------------------------------------------------ public
    def init(self, hosted: Sequence[int]) -> None:
        """No upload yet for the ``hosted`` clients: no rows, no pending rows."""
        for client in hosted:
            self._write(self._key(client), {})
            self._write(self._key(client, pending=True), None)
        self._set_counts({int(c): 0 for c in hosted})

    def rows_at(self, client: int, count: int) -> dict[str, np.ndarray]:
        """Client ``client``'s rows after ``count`` accepted uploads: its stored rows, or its
        pending ones when ``count`` is one more than the node's (read only).

        Raises
        ------
        ProtocolError
            ``count`` is neither the node's count nor one more with rows pending.
        """
        have = self._count(client)
        pending = self._read(self._key(client, pending=True))
        if count == have:
            return self._read(self._key(client)) or {}
        if count == have + 1 and pending is not None:
            return pending
        raise ProtocolError(
            f"job {self.job!r}: the server has accepted {count} uploads of client {client}, but "
            f"this node holds its rows after {have}"
            + (" and one upload pending" if pending is not None else "")
            + " (the node lost its state, or another server runs the job)"
        )

    def settle(self, client: int, count: int) -> dict[str, np.ndarray]:
        """Commit or discard client ``client``'s pending rows as the server's ``count`` says;
        return its rows after ``count`` uploads (:meth:`rows_at`'s errors)."""
        rows = self.rows_at(client, count)
        if count != self._count(client):
            self._write(self._key(client), rows)
            self._set_counts({**self._counts(), int(client): int(count)})
        self._write(self._key(client, pending=True), None)
        return rows

    def set_pending(self, client: int, rows: Mapping[str, Any]) -> None:
        """Keep client ``client``'s rows after its new upload until the server's verdict."""
        self._count(client)
        self._write(self._key(client, pending=True), rows)

    def restore(self, counts: Mapping[int, int], rows: Mapping[int, Mapping[str, Any]]) -> None:
        """Install a checkpoint's counts and rows of this node's clients (those without rows
        in ``rows``: none yet); forget every pending row."""
        hosted = self._counts()
        unknown = sorted(set(counts) - set(hosted))
        if unknown:
            raise ProtocolError(
                f"job {self.job!r}: the checkpoint has compression rows of clients {unknown}, "
                f"which this node does not host (it hosts {sorted(hosted)})"
            )
        for client in counts:
            self._write(self._key(client), rows.get(client, {}))
            self._write(self._key(client, pending=True), None)
        self._set_counts({**hosted, **{int(c): int(k) for c, k in counts.items()}})


def client_arrays(rows: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """Clients' rows as a message's arrays: ``rows/<client>/<key>``."""
    return {f"rows/{int(c)}/{k}": v for c, own in rows.items() for k, v in own.items()}


def rows_of_clients(
    arrays: Mapping[str, np.ndarray], clients: Sequence[int]
) -> dict[int, dict[str, np.ndarray]]:
    """The rows of ``clients`` in a message's arrays (inverse of :func:`client_arrays`; a client
    without arrays has none yet).

    Raises
    ------
    ProtocolError
        Rows of a client not in ``clients``.
    """
    out: dict[int, dict[str, np.ndarray]] = {}
    for name, value in arrays.items():
        head, _, rest = name.partition("/")
        client, _, key = rest.partition("/")
        if head != "rows" or not client.isdigit() or int(client) not in clients or not key:
            raise ProtocolError(
                f"array {name!r} is not a row of clients {list(clients)} (rows/<client>/<key>)"
            )
        out.setdefault(int(client), {})[key] = value
    return out

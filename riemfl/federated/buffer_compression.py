r"""Compressed client uploads of FedBuff's buffer (:class:`BufferCompression`).

The asynchronous counterpart of :class:`~riemfl.federated.compressed.Compressed`: the same
compressors (:mod:`riemfl.federated.compression`), error feedback and per-client random draws,
applied to one arrival at a time. What client i compresses is FedBuff's ambient update
:math:`\Delta_i = x^t - x_i`; with error feedback (Stich, Cordonnier & Jaggi 2018; Karimireddy et
al. 2019) it compresses :math:`v = \Delta_i + e_i` and keeps :math:`e_i \leftarrow v - D(C(v))`,
without it :math:`v = \Delta_i`. The server's buffer receives the decoded :math:`D(C(v))`.

A client's k-th upload (k = 0, 1, ... counts the uploads of that client that the server applied)
draws its randomness (QSGD's stochastic rounding) from ``numpy.random.default_rng([seed, k,
i])``. The upload counters, the residuals and the compressor's own state (PowerSGD's
warm-started factor), one row per client, are the state of a checkpoint. An arrival the engine
drops (a failed client, one staler than the staleness bound) never reaches the rule: it changes
neither its client's residual nor its counter, as the synchronous wrapper keeps a residual only
when the server accepts the upload.

On a Flower grid the clients compress on their nodes (:mod:`riemfl.adapters.flower`): each node
keeps its clients' residuals and compressor state, the server decodes each payload
(:meth:`BufferCompression.decode`) and counts the uploads it accepts
(:meth:`BufferCompression.accept`), and the rows here are the nodes' as of the last checkpoint
(:meth:`BufferCompression.client_rows`, :meth:`BufferCompression.set_client_rows`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import to_like, to_numpy
from ..errors import NonFiniteError, ParameterError, ShapeError
from .compression import Compressor
from .compression.feedback import ClientCompression, client_rng
from .rule_state import Checkpointable, Commit, StateReader, copy_array, setter

__all__ = ["BufferCompression", "buffer_compression"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_MAX_UPLOADS = np.iinfo(np.int64).max


class BufferCompression(Checkpointable):
    """Per-client compression of FedBuff's updates, with error feedback (module docstring).

    Parameters
    ----------
    compressor : Compressor
        E.g. ``make_compressor("topk:0.1")``.
    error_feedback : bool, optional
        Keep each client's residual (default: on for a biased compressor, off for an unbiased
        one such as QSGD).
    seed : int
        Of the clients' random draws.

    Raises
    ------
    ParameterError
        ``compressor`` is not a Compressor, ``error_feedback`` not True, False or None, or
        ``seed`` negative.
    """

    def __init__(
        self, compressor: Compressor, error_feedback: bool | None = None, seed: int = 0
    ) -> None:
        self.codec = ClientCompression(
            compressor, error_feedback, seed, owner="FedBuff", seed_name="compression_seed"
        )
        self.compressor, self.error_feedback = compressor, self.codec.error_feedback
        self.seed = self.codec.seed
        self._shape: tuple[int, ...] = ()
        self.reset(0, ())

    def check(self, shape: tuple[int, ...]) -> None:
        """Refuse updates of ``shape`` that the compressor cannot compress (its own error, e.g.
        PowerSGD on a vector)."""
        self.compressor.payload_spec(tuple(shape), np.float64)

    def reset(self, n_clients: int, shape: tuple[int, ...]) -> None:
        """A new run of ``n_clients`` clients with updates of ``shape``: no upload yet, zero
        residuals and the compressor's initial state (allocated at the first upload, in its
        dtype)."""
        self._shape = tuple(shape)
        self._uploads = np.zeros(n_clients, dtype=np.int64)
        self._residuals: np.ndarray | None = None
        self._codec: dict[str, np.ndarray] = {}

    def upload_nbytes(self, shape: tuple[int, ...], dtype: Any) -> int:
        """Bytes of one client's upload of an update of ``shape`` and ``dtype``."""
        return self.compressor.payload_nbytes(tuple(shape), dtype)

    def describe(self) -> dict[str, Any]:
        """The compressor's settings, error feedback and the seed, JSON-ready."""
        return self.codec.describe()

    # ------------------------------------------------------------------ one upload
    def client_update(self, client: int, delta: Any) -> Any:
        """What the buffer receives from client ``client`` for its update ``delta``: the decoded
        upload, of the type, dtype and device of ``delta``; the client's residual, compressor
        state and upload counter move on."""
        client = self._index(client)
        update = to_numpy(delta)
        if tuple(update.shape) != self._shape:
            raise ShapeError(
                f"FedBuff: compressed updates must have the point's shape {self._shape}, got "
                f"{tuple(update.shape)}"
            )
        rows = self.client_rows(client)
        _, decoded, rows = self.compress(client, self.count(client), update, rows)
        self.set_client_rows(client, rows)
        self._uploads[client] += 1
        return to_like(decoded, delta)

    def compress(
        self, client: int, count: int, update: np.ndarray, rows: dict[str, np.ndarray]
    ) -> tuple[dict[str, np.ndarray], np.ndarray, dict[str, np.ndarray]]:
        """Client ``client``'s ``count``-th compression of ``update`` from its own ``rows``
        (:meth:`client_rows`; empty: zero residual and the compressor's initial state), as the
        client runs it, in process or on its node (a pure function of its arguments and the
        settings: nothing here changes).

        Returns
        -------
        payload : dict
            One row per key, as it travels.
        decoded : ndarray
            The server's decoding of it.
        rows : dict
            The client's rows after this upload.
        """
        shape = tuple(update.shape)
        if rows:
            state = {k[len("state/") :]: v[None] for k, v in rows.items() if k != "residual"}
        else:
            state = dict(self.compressor.initial_state(shape, 1, update.dtype))
        residual = None
        if self.error_feedback:
            residual = rows["residual"][None] if rows else np.zeros_like(update)[None]
        rng = client_rng(self.seed, count, client)
        payload, decoded, residual, state = self.codec.compress(
            update[None], residual, state, [rng]
        )
        new = {f"state/{k}": v[0] for k, v in state.items()}
        if self.error_feedback:
            new["residual"] = residual[0]
        return payload, decoded[0], new

    # ------------------------------------------------------------------ clients elsewhere
    def count(self, client: int) -> int:
        """How many of client ``client``'s uploads the server has accepted (k of its next
        upload's draws, :func:`~riemfl.federated.compression.feedback.client_rng`)."""
        return int(self._uploads[self._index(client)])

    def decode(self, payload: dict[str, np.ndarray], dtype: Any) -> np.ndarray:
        """One client's update decoded from the ``payload`` it compressed itself (one row, of
        the compressor's :meth:`~riemfl.federated.compression.Compressor.payload_spec` for
        updates of the point's shape and ``dtype``).

        Raises
        ------
        ShapeError, DTypeError
            A payload that does not match the spec (the compressor's checks), or of more than
            one row.
        NonFiniteError
            Non-finite entries in the decoded update.
        """
        rows = self.compressor.check_payload(payload, self._shape, dtype)
        if rows != 1:
            raise ShapeError(f"FedBuff: a client's payload has one row, got {rows}")
        decoded = self.compressor.decode(payload, self._shape, dtype)[0]
        if not np.isfinite(decoded).all():
            raise NonFiniteError("FedBuff: the decoded update has non-finite entries")
        return decoded

    def accept(self, client: int) -> None:
        """Count an upload of ``client`` that its node compressed and the server accepted (the
        node's residual and compressor state moved on there)."""
        self._uploads[self._index(client)] += 1

    def client_rows(self, client: int) -> dict[str, np.ndarray]:
        """Client ``client``'s residual (``"residual"``, error feedback) and compressor state
        (``"state/<key>"``); empty before the run's first upload."""
        c = self._index(client)
        rows = {f"state/{k}": s[c].copy() for k, s in self._codec.items()}
        if self._residuals is not None:
            rows["residual"] = self._residuals[c].copy()
        return rows

    def set_client_rows(self, client: int, rows: dict[str, np.ndarray]) -> None:
        """Install :meth:`client_rows` of ``client`` as a node reports them (empty: nothing
        yet), in their dtype; the checks of :meth:`load_state_dict` apply to the result."""
        if not rows:
            return
        c = self._index(client)
        expected = {f"state/{k}" for k in self.compressor.state_spec(self._shape)}
        if self.error_feedback:
            expected.add("residual")
        if set(rows) != expected:
            raise ShapeError(
                f"FedBuff: client {client}'s compression rows must have the keys "
                f"{sorted(expected)}, got {sorted(rows)}"
            )
        dtype = np.asarray(next(iter(rows.values()))).dtype
        self._allocate(dtype)
        for key, row in rows.items():
            target = self._residuals if key == "residual" else self._codec[key[len("state/") :]]
            if np.shape(row) != target.shape[1:]:
                raise ShapeError(
                    f"FedBuff: client {client}'s row {key!r} must have shape "
                    f"{target.shape[1:]}, got {np.shape(row)}"
                )
            target[c] = row

    def _index(self, client: int) -> int:
        if not 0 <= client < len(self._uploads):
            raise ParameterError(
                f"FedBuff: client {client} is not one of the run's {len(self._uploads)} clients "
                "(reset the rule with the run's manifold and number of clients first)"
            )
        return int(client)

    def _allocate(self, dtype: np.dtype) -> None:
        """The residuals (error feedback) and the compressor's state, at the run's first
        upload, in the updates' dtype."""
        n = len(self._uploads)
        if self.error_feedback and self._residuals is None:
            self._residuals = np.zeros((n, *self._shape), dtype=dtype)
        if not self._codec:
            self._codec = dict(self.compressor.initial_state(self._shape, n, dtype))

    # ------------------------------------------------------------------ state
    def _state(self) -> dict[str, Any]:
        return {
            "uploads": [int(k) for k in self._uploads],
            "residuals": copy_array(self._residuals),
            "compressor": {k: copy_array(s) for k, s in self._codec.items()},
        }

    def _read_state(self, reader: StateReader) -> Commit:
        """The upload counters (one per client), the residuals (error feedback: None exactly
        before the run's first upload) and the compressor's state (its
        :meth:`~riemfl.federated.compression.Compressor.state_spec`, one row per client; empty
        before the first upload), all in one float dtype."""
        n, shape = len(self._uploads), self._shape
        uploads = reader.integers("uploads", n, 0, _MAX_UPLOADS)
        started = any(uploads)
        residuals = reader.array("residuals", shape=(n, *shape), optional=True)
        if residuals is not None and not self.error_feedback:
            raise reader.error("residuals", "None (no error feedback)", residuals)
        if self.error_feedback and (residuals is None) == started:
            expected = "residuals after the first upload" if started else "None before any upload"
            raise reader.error("residuals", expected, residuals)
        section = reader.section("compressor")
        spec = self.compressor.state_spec(shape) if started else {}
        codec = {k: section.array(k, shape=(n, *s)) for k, s in spec.items()}
        arrays = {"residuals": residuals, **{f"compressor.{k}": a for k, a in codec.items()}}
        dtype = None
        for key, a in arrays.items():
            if a is None:
                continue
            other = dtype is not None and a.dtype != dtype  # numpy counts None equal to float64
            if not isinstance(a, np.ndarray) or a.dtype not in _FLOATS or other:
                expected = "a float32 or float64 numpy array, in the dtype of the other arrays"
                raise reader.error(key, expected, a)
            dtype = a.dtype
        return setter(
            self, _uploads=np.asarray(uploads, dtype=np.int64), _residuals=residuals, _codec=codec
        )


def buffer_compression(
    compressor: Compressor | None, error_feedback: bool | None, seed: int
) -> BufferCompression | None:
    """FedBuff's compression of its clients' uploads (None without a compressor).

    Raises
    ------
    ParameterError
        ``error_feedback`` without a compressor; :class:`BufferCompression`'s own refusals.
    """
    if compressor is None:
        if error_feedback is not None:
            raise ParameterError(
                f"FedBuff: error_feedback={error_feedback!r} is a setting of compressed uploads; "
                "give a compressor"
            )
        return None
    return BufferCompression(compressor, error_feedback, seed)

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
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import to_like, to_numpy
from ..errors import ParameterError, ShapeError
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
        if not 0 <= client < len(self._uploads):
            raise ParameterError(
                f"FedBuff: client {client} is not one of the run's {len(self._uploads)} clients "
                "(reset the rule with the run's manifold and number of clients first)"
            )
        update = to_numpy(delta)
        if tuple(update.shape) != self._shape:
            raise ShapeError(
                f"FedBuff: compressed updates must have the point's shape {self._shape}, got "
                f"{tuple(update.shape)}"
            )
        self._allocate(update.dtype)
        residual = self._residuals[client : client + 1] if self.error_feedback else None
        rng = client_rng(self.seed, self._uploads[client], client)
        rows = {k: s[client : client + 1] for k, s in self._codec.items()}
        _, decoded, residual, state = self.codec.compress(update[None], residual, rows, [rng])
        for k, s in state.items():
            self._codec[k][client] = s[0]
        if self.error_feedback:
            self._residuals[client] = residual[0]
        self._uploads[client] += 1
        return to_like(decoded[0], delta)

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

r"""PowerSGD: a rank-r approximation by one warm-started power iteration.

In PowerSGD (Vogels, Karimireddy & Jaggi 2019) each client compresses its matrix update
:math:`M \in \mathbb{R}^{p \times q}` with its own state :math:`Q \in \mathbb{R}^{q \times r}`,
once per round:

.. math::

    P = M Q, \qquad \hat P = \operatorname{orth}(P), \qquad Q' = M^\top \hat P, \qquad
    C(M) = \hat P Q'^\top = \hat P \hat P^\top M,

and keeps :math:`Q'` as the next round's :math:`Q` (the warm start: over rounds on a fixed
:math:`M` this is subspace iteration, converging to the best rank-r approximation). The payload
is :math:`(\hat P, Q')`, :math:`(p + q) r` numbers in the update's dtype, in place of :math:`pq`.
Vogels et al. average :math:`P` and :math:`Q'` over the workers before decoding (the map is
linear in :math:`M` for a shared :math:`Q`); here every client's payload is decoded on its own,
which is what a server that aggregates decoded updates needs.

:math:`\operatorname{orth}` is numpy's reduced QR (Householder), whose :math:`\hat P` always has
orthonormal columns, where the Gram-Schmidt of Vogels et al. divides by zero: when :math:`MQ` has
rank below :math:`r` (e.g. :math:`M = 0`) the extra columns complete the basis, the decode is
still the orthogonal projection of :math:`M`'s columns onto an r-dimensional subspace, a zero
:math:`M` decodes to zeros, and nothing is NaN. The state starts, for every client alike, from
``np.random.default_rng(seed).standard_normal((q, r))`` (Vogels et al. share one initial
:math:`Q`). PowerSGD is biased; Vogels et al. use it with error feedback (Karimireddy et al.
2019), which the caller keeps. The arithmetic is float64; the payload and the state are rounded
to the update's dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._validation import integer
from ...errors import ParameterError, ShapeError
from .base import Compressor, PayloadSpec, check_updates, float_dtype, row_size

__all__ = ["LowRank"]


class LowRank(Compressor):
    """Rank-``rank`` PowerSGD compression of matrix updates, warm-started from round to round.

    Parameters
    ----------
    rank : int
        :math:`r \\ge 1`; at most :math:`\\min(p, q)` for updates of shape (p, q).
    seed : int, default 0
        Seed of the initial :math:`Q`, shared by every client.

    Raises
    ------
    ParameterError
        ``rank`` or ``seed`` is out of range.
    """

    name = "rank"
    unbiased = False

    def __init__(self, rank: int, seed: int = 0) -> None:
        self.rank = integer(rank, "LowRank(rank): rank", 1)
        self.seed = integer(seed, "LowRank(seed): seed", 0)

    def _dims(self, shape: tuple[int, ...], where: str) -> tuple[int, int]:
        """(p, q) of a matrix update shape, checked against the rank."""
        shape = tuple(shape)
        if len(shape) != 2:
            raise ShapeError(
                f"{where}: PowerSGD (rank:R) compresses matrix updates of shape (p, q), got "
                f"shape {shape}; use qsgd:BITS, topk:FRACTION, fp16 or bf16 for this shape"
            )
        row_size(shape, where)
        p, q = shape
        if self.rank > min(p, q):
            raise ParameterError(
                f"{where}: rank {self.rank} exceeds min(p, q) = {min(p, q)} of updates of "
                f"shape {shape}"
            )
        return p, q

    def payload_spec(self, shape: tuple[int, ...], dtype: Any) -> PayloadSpec:
        dtype = float_dtype(dtype, "LowRank.payload_spec")
        p, q = self._dims(shape, "LowRank.payload_spec")
        return {"p": ((p, self.rank), dtype), "q": ((q, self.rank), dtype)}

    def state_spec(self, shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        _, q = self._dims(shape, "LowRank.state_spec")
        return {"q": (q, self.rank)}

    def initial_state(self, shape: tuple[int, ...], m: int, dtype: Any) -> dict[str, np.ndarray]:
        """Every client's :math:`Q`: ``default_rng(seed).standard_normal((q, r))``, stacked."""
        dtype = float_dtype(dtype, "LowRank.initial_state")
        _, q = self._dims(shape, "LowRank.initial_state")
        m = integer(m, "LowRank.initial_state: m", 1)
        start = np.random.default_rng(self.seed).standard_normal((q, self.rank)).astype(dtype)
        return {"q": np.broadcast_to(start, (m, q, self.rank)).copy()}

    def encode(
        self,
        updates: np.ndarray,
        state: dict[str, np.ndarray],
        rngs: list[np.random.Generator],
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        where = "LowRank.encode"
        updates = check_updates(updates, where)
        m = updates.shape[0]
        _, q = self._dims(updates.shape[1:], where)
        warm = state.get("q") if isinstance(state, dict) else None
        if not isinstance(warm, np.ndarray) or warm.shape != (m, q, self.rank):
            got = warm.shape if isinstance(warm, np.ndarray) else type(warm).__name__
            raise ShapeError(
                f"{where}: state['q'] must be an array of shape {(m, q, self.rank)} "
                f"(from initial_state, then the last encode), got {got}"
            )
        check_updates(warm, f"{where}: state['q']")
        matrices = updates.astype(np.float64, copy=False)
        basis, _ = np.linalg.qr(matrices @ warm.astype(np.float64, copy=False))
        factor = np.swapaxes(matrices, 1, 2) @ basis
        dtype = updates.dtype
        payload = {"p": basis.astype(dtype), "q": factor.astype(dtype)}
        return payload, {"q": payload["q"].copy()}

    def decode(
        self, payload: dict[str, np.ndarray], shape: tuple[int, ...], dtype: Any
    ) -> np.ndarray:
        dtype = float_dtype(dtype, "LowRank.decode")
        self.check_payload(payload, shape, dtype)
        basis = payload["p"].astype(np.float64, copy=False)
        factor = payload["q"].astype(np.float64, copy=False)
        return (basis @ np.swapaxes(factor, 1, 2)).astype(dtype, copy=False)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "rank": self.rank, "seed": self.seed}

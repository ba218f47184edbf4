r"""A compressor as a client runs it: its settings checked once, error feedback and the draws.

With error feedback (Stich, Cordonnier & Jaggi 2018; Karimireddy et al. 2019) a client
compresses :math:`v = u + e` and keeps :math:`e \leftarrow v - D(C(v))`; without it,
:math:`v = u`. The default is on for a biased compressor and off for an unbiased one (QSGD).
A client's random draws come from ``numpy.random.default_rng([seed, k, client])``, k a count
its engine keeps (the round, or the client's number of uploads).

Both the synchronous wrapper (:class:`~riemfl.federated.compressed.Compressed`) and FedBuff's
buffer (:class:`~riemfl.federated.buffer_compression.BufferCompression`) compress through
:class:`ClientCompression`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._validation import integer
from ...errors import ParameterError
from .base import Compressor

__all__ = ["ClientCompression", "client_rng"]


def client_rng(seed: int, count: int, client: int) -> np.random.Generator:
    """The generator of client ``client``'s ``count``-th compression (its draws)."""
    return np.random.default_rng([seed, int(count), int(client)])


class ClientCompression:
    """A compressor, whether the clients keep their residual, and the seed of their draws.

    Parameters
    ----------
    compressor : Compressor
    error_feedback : bool, optional
        None: on for a biased compressor, off for an unbiased one.
    seed : int
        >= 0.
    owner, seed_name : str
        Name the caller and its seed parameter in error messages.

    Raises
    ------
    ParameterError
        ``compressor`` not a Compressor, ``error_feedback`` not True, False or None, or
        ``seed`` negative.
    """

    def __init__(
        self,
        compressor: Compressor,
        error_feedback: bool | None = None,
        seed: int = 0,
        owner: str = "compression",
        seed_name: str = "seed",
    ) -> None:
        if not isinstance(compressor, Compressor):
            raise ParameterError(
                f"{owner}: compressor must be a riemfl.federated.compression.Compressor, got "
                f"{type(compressor).__name__}"
            )
        if error_feedback is not None and not isinstance(error_feedback, bool):
            raise ParameterError(
                f"{owner}: error_feedback must be True, False or None, got {error_feedback!r}"
            )
        self.compressor = compressor
        self.error_feedback = (
            (not compressor.unbiased) if error_feedback is None else error_feedback
        )
        self.seed = integer(seed, f"{owner}: {seed_name}", minimum=0)

    def compress(
        self,
        updates: np.ndarray,
        residuals: np.ndarray | None,
        state: dict[str, np.ndarray],
        rngs: list[np.random.Generator],
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray | None, dict[str, np.ndarray]]:
        """``(payload, decoded, new residuals, new compressor state)`` of the stacked
        ``updates`` (numpy, one row per client), with their ``residuals`` added first under
        error feedback (None without it)."""
        v = updates + residuals if self.error_feedback else updates
        payload, state = self.compressor.encode(v, state, rngs)
        decoded = self.compressor.decode(payload, v.shape[1:], v.dtype)
        return payload, decoded, (v - decoded if self.error_feedback else None), state

    def describe(self) -> dict[str, Any]:
        """The compressor's settings, the error feedback and the seed, JSON-ready."""
        return {
            **self.compressor.describe(),
            "error_feedback": self.error_feedback,
            "seed": self.seed,
        }

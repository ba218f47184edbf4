r"""Top-k sparsification (Stich, Cordonnier & Jaggi 2018): keep the k largest entries.

Each update :math:`v \in \mathbb{R}^d` (flattened in C order) is sent as the :math:`k` entries
of largest magnitude,

.. math::

    k = \max\big(1, \lceil f d \rceil\big), \qquad
    C(v)_i = v_i \,[i \in S], \qquad
    S = \{\text{the } k \text{ indices of largest } |v_i|\},

ties broken by the lower index (a stable sort of :math:`-|v|`). :math:`f d` is computed exactly
from the decimal form of :math:`f` (``repr``), so ``topk:0.07`` of 100 entries keeps 7, not the 8
that the float product :math:`0.07 \cdot 100 = 7.000000000000001` would give. Top-k is biased
(:math:`\|C(v) - v\|^2 \le (1 - k/d)\|v\|^2`); Stich et al. and Karimireddy et al. 2019 pair it
with error feedback, :math:`e' = (v + e) - C(v + e)`, which the caller keeps.

Payload of one client, :math:`k \cdot (\text{index bytes} + \text{value bytes})` bytes:

* ``indices``: :math:`S` in increasing order, in the smallest of uint8, uint16, uint32, uint64
  that holds :math:`d - 1`;
* ``values``: :math:`v_S` in the update's dtype.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from ..._validation import real
from ...errors import DataError
from .base import Compressor, PayloadSpec, check_updates, float_dtype, row_size

__all__ = ["TopK", "index_dtype"]


def index_dtype(d: int) -> np.dtype:
    """The smallest unsigned integer dtype holding the indices ``0 .. d - 1``."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if d - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.uint64)


class TopK(Compressor):
    """Keep the ``max(1, ceil(fraction * d))`` entries of largest magnitude of each update.

    Parameters
    ----------
    fraction : float
        In (0, 1]; 1 keeps every entry (and sends the indices too).

    Raises
    ------
    ParameterError
        ``fraction`` is out of range.
    """

    name = "topk"
    unbiased = False

    def __init__(self, fraction: float) -> None:
        self.fraction = real(fraction, "TopK(fraction): fraction", above=0, at_most=1)

    def kept(self, d: int) -> int:
        """:math:`k = \\max(1, \\lceil f d \\rceil)` for updates of ``d`` entries."""
        return max(1, math.ceil(Fraction(repr(self.fraction)) * d))

    def payload_spec(self, shape: tuple[int, ...], dtype: Any) -> PayloadSpec:
        dtype = float_dtype(dtype, "TopK.payload_spec")
        d = row_size(shape, "TopK.payload_spec")
        k = self.kept(d)
        return {"indices": ((k,), index_dtype(d)), "values": ((k,), dtype)}

    def encode(
        self,
        updates: np.ndarray,
        state: dict[str, np.ndarray],
        rngs: list[np.random.Generator],
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        updates = check_updates(updates, "TopK.encode")
        m = updates.shape[0]
        v = updates.reshape(m, -1)
        k = self.kept(v.shape[1])
        order = np.argsort(-np.abs(v), axis=1, kind="stable")
        kept = np.sort(order[:, :k], axis=1)
        payload = {
            "indices": kept.astype(index_dtype(v.shape[1])),
            "values": np.take_along_axis(v, kept, axis=1),
        }
        return payload, {}

    def decode(
        self, payload: dict[str, np.ndarray], shape: tuple[int, ...], dtype: Any
    ) -> np.ndarray:
        dtype = float_dtype(dtype, "TopK.decode")
        m = self.check_payload(payload, shape, dtype)
        d = row_size(shape, "TopK.decode")
        indices = payload["indices"]
        if indices.size and int(indices.max()) >= d:
            raise DataError(
                f"TopK.decode: payload['indices'] holds {int(indices.max())}, beyond the "
                f"{d} entries of an update of shape {tuple(shape)}"
            )
        out = np.zeros((m, d), dtype=dtype)
        np.put_along_axis(out, indices.astype(np.intp), payload["values"], axis=1)
        return out.reshape(m, *shape)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "fraction": self.fraction}

r"""QSGD: unbiased stochastic quantisation to :math:`s = 2^b - 1` levels (Alistarh et al. 2017).

Each update :math:`v \in \mathbb{R}^d` (flattened in C order) is sent as its norm, its signs and
one level per entry:

.. math::

    r_i = \min\Big(s, \frac{s |v_i|}{\|v\|_2}\Big), \qquad
    \xi_i = \min\big(s, \lfloor r_i + U_i \rfloor\big), \qquad
    Q(v)_i = \operatorname{sign}(v_i) \, \frac{\xi_i}{s} \, \|v\|_2,

:math:`U_i` uniform on :math:`[0, 1)`, so :math:`\xi_i` is :math:`\lceil r_i \rceil` with
probability :math:`r_i - \lfloor r_i \rfloor` and :math:`\lfloor r_i \rfloor` otherwise, and
:math:`\mathbb{E}[Q(v)] = v`. (The two clips to :math:`s` only act on rounding errors: exactly,
:math:`r_i \le s` and :math:`\lfloor s + U_i \rfloor = s`.) Alistarh et al., Lemma 3.1, bound
the variance: :math:`\mathbb{E}\|Q(v) - v\|^2 \le \min(d / s^2, \sqrt d / s) \, \|v\|^2`.

Payload of one client, :math:`8 + \lceil d/8 \rceil + \lceil d b / 8 \rceil` bytes:

* ``norm``: :math:`\|v\|_2` as a float64 scalar (computed in float64 with scaling by
  :math:`\max_i |v_i|`, so it neither overflows nor underflows);
* ``signs``: the bits :math:`[v_i < 0]`, packed 8 per byte;
* ``levels``: :math:`\xi_i`, packed ``bits`` per entry (every bit pattern is a level
  :math:`\le s`).

Both use the little-endian layout of :mod:`riemfl.federated.compression.packing`. The fixed-width
code is what is sent; Alistarh et al.'s Elias coding of the levels, which shortens sparse
levels further, is not used. A zero row has norm 0 and decodes to zeros. The uniforms of row
:math:`j` are ``rngs[j].random(d)``, one draw per call, in the entries' C order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._validation import integer
from .base import Compressor, PayloadSpec, check_rngs, check_updates, float_dtype, row_size
from .packing import pack_bits, packed_size, unpack_bits

__all__ = ["QSGD"]


class QSGD(Compressor):
    r"""Stochastic quantisation of Alistarh et al. 2017 with ``bits`` bits per level.

    Parameters
    ----------
    bits : int
        1 to 8; the number of levels is :math:`s = 2^{\text{bits}} - 1`.

    Raises
    ------
    ParameterError
        ``bits`` is out of range.
    """

    name = "qsgd"
    unbiased = True

    def __init__(self, bits: int) -> None:
        self.bits = integer(bits, "QSGD(bits): bits", 1, 8)
        self.levels = (1 << self.bits) - 1

    def payload_spec(self, shape: tuple[int, ...], dtype: Any) -> PayloadSpec:
        float_dtype(dtype, "QSGD.payload_spec")
        d = row_size(shape, "QSGD.payload_spec")
        return {
            "norm": ((), np.dtype(np.float64)),
            "signs": ((packed_size(d, 1),), np.dtype(np.uint8)),
            "levels": ((packed_size(d, self.bits),), np.dtype(np.uint8)),
        }

    def encode(
        self,
        updates: np.ndarray,
        state: dict[str, np.ndarray],
        rngs: list[np.random.Generator],
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        updates = check_updates(updates, "QSGD.encode")
        m = updates.shape[0]
        rngs = check_rngs(rngs, m, "QSGD.encode")
        v = updates.reshape(m, -1).astype(np.float64, copy=False)
        norm = _norms(v)
        s = float(self.levels)
        safe = np.where(norm > 0, norm, 1.0)[:, None]
        r = np.minimum(s, s * np.abs(v) / safe)
        uniforms = np.stack([rng.random(v.shape[1]) for rng in rngs])
        xi = np.minimum(s, np.floor(r + uniforms)).astype(np.uint8)
        payload = {
            "norm": norm,
            "signs": pack_bits((v < 0).astype(np.uint8), 1),
            "levels": pack_bits(xi, self.bits),
        }
        return payload, {}

    def decode(
        self, payload: dict[str, np.ndarray], shape: tuple[int, ...], dtype: Any
    ) -> np.ndarray:
        dtype = float_dtype(dtype, "QSGD.decode")
        m = self.check_payload(payload, shape, dtype)
        d = row_size(shape, "QSGD.decode")
        xi = unpack_bits(payload["levels"], self.bits, d).astype(np.float64)
        negative = unpack_bits(payload["signs"], 1, d).astype(bool)
        # xi / s <= 1 first, so that no decoded magnitude exceeds the norm (subnormal norms too)
        values = (xi / self.levels) * payload["norm"][:, None]
        values = np.where(negative, -values, values)
        return values.astype(dtype, copy=False).reshape(m, *shape)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "bits": self.bits}


def _norms(v: np.ndarray) -> np.ndarray:
    """The Euclidean norm of each row of ``v`` (float64), scaled by the row's largest entry."""
    scale = np.abs(v).max(axis=1)
    safe = np.where(scale > 0, scale, 1.0)
    return scale * np.sqrt(np.sum((v / safe[:, None]) ** 2, axis=1))

r"""Half-precision casts: float16 and bfloat16 payloads, rounded to nearest, ties to even.

Each entry :math:`x` is sent as the nearest number of the format, a tie going to the one whose
last significand bit is 0 (IEEE 754 roundTiesToEven), rounded once from the update's own dtype:

* ``fp16`` (IEEE binary16: 11 significant bits, normal exponents -14 to 15): numpy's
  ``astype(np.float16)``, which rounds float64 and float32 directly. Payload ``values``, float16.
* ``bf16`` (bfloat16: 8 significant bits, the exponent range of float32): bfloat16 is not a
  numpy dtype, so the payload ``values`` holds its bit pattern, the top 16 bits of the float32
  value, as uint16. With :math:`e = \lfloor \log_2 |x| \rfloor`, the spacing of the format at
  :math:`x` is :math:`u = 2^{\max(e, -126) - 7}` (subnormals below :math:`2^{-126}`) and

  .. math::

      \mathrm{bf16}(x) = u \cdot \operatorname{rint}(x / u),

  rint rounding half to even, computed in float64 where the scalings by :math:`u` are exact.
  For a float32 :math:`x` this is the usual round-to-nearest-even of the low 16 bits (torch's
  ``to(torch.bfloat16)``); a float64 :math:`x` is rounded once, not first to float32 and then
  again, which can differ from a cast through float32 (``1 + 2^{-8} + 2^{-30}`` rounds up to
  ``1 + 2^{-7}`` here, to 1 through float32).

Neither cast is unbiased (the rounding is deterministic). An entry whose rounding overflows, a
magnitude of at least the format's largest finite number plus half a spacing (65520 for float16,
:math:`2^{128} - 2^{119}` for bfloat16), is refused (:class:`~riemfl.errors.NonFiniteError`
naming the largest magnitude), rather than sent as infinity. Small entries round to subnormals
or to zero.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import NonFiniteError, ParameterError
from .base import Compressor, PayloadSpec, check_updates, float_dtype, row_size

__all__ = ["Cast", "bfloat16_bits", "bfloat16_values"]

#: precision -> (short name, payload dtype, largest finite magnitude)
_FORMATS = {
    "float16": ("fp16", np.dtype(np.float16), float(np.finfo(np.float16).max)),
    "bfloat16": ("bf16", np.dtype(np.uint16), float.fromhex("0x1.fep127")),
}


def bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """The bfloat16 bit patterns (uint16) of ``x`` rounded to nearest, ties to even.

    ``x`` must be finite; an entry that rounds beyond the largest bfloat16 gives the pattern of
    infinity (the callers refuse those first).
    """
    x = np.asarray(x, dtype=np.float64)
    _, exponent = np.frexp(x)  # |x| = f 2^exponent, 1/2 <= f < 1: floor(log2 |x|) = exponent - 1
    spacing = np.maximum(exponent - 1, -126) - 7
    rounded = np.ldexp(np.rint(np.ldexp(x, -spacing)), spacing)
    with np.errstate(over="ignore"):
        single = rounded.astype(np.float32)
    return (single.view(np.uint32) >> np.uint32(16)).astype(np.uint16)


def bfloat16_values(bits: np.ndarray) -> np.ndarray:
    """The float32 values of bfloat16 bit patterns (uint16); exact."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


class Cast(Compressor):
    """Send each entry rounded to float16 or bfloat16 (2 bytes an entry).

    Parameters
    ----------
    precision : {"float16", "bfloat16"}

    Raises
    ------
    ParameterError
        Another precision.
    """

    unbiased = False

    def __init__(self, precision: str) -> None:
        if precision not in _FORMATS:
            raise ParameterError(
                f"Cast(precision): precision must be 'float16' or 'bfloat16', got {precision!r}"
            )
        self.precision = precision
        self.name, self._payload_dtype, self._largest = _FORMATS[precision]

    def payload_spec(self, shape: tuple[int, ...], dtype: Any) -> PayloadSpec:
        float_dtype(dtype, f"Cast({self.precision!r}).payload_spec")
        row_size(shape, f"Cast({self.precision!r}).payload_spec")
        return {"values": (tuple(shape), self._payload_dtype)}

    def encode(
        self,
        updates: np.ndarray,
        state: dict[str, np.ndarray],
        rngs: list[np.random.Generator],
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        where = f"Cast({self.precision!r}).encode"
        updates = check_updates(updates, where)
        if self.precision == "float16":
            with np.errstate(over="ignore"):
                values = updates.astype(np.float16)
            overflow = ~np.isfinite(values)
        else:
            values = bfloat16_bits(updates)
            overflow = (values & np.uint16(0x7FFF)) == np.uint16(0x7F80)
        if overflow.any():
            row = int(np.argmax(overflow.reshape(updates.shape[0], -1).any(axis=1)))
            raise NonFiniteError(
                f"{where}: the largest magnitude {self.precision} holds is {self._largest:.9g}; "
                f"row {row} of the updates has an entry of magnitude "
                f"{float(np.abs(updates[row]).max()):.9g}, which rounds to infinity"
            )
        return {"values": values}, {}

    def decode(
        self, payload: dict[str, np.ndarray], shape: tuple[int, ...], dtype: Any
    ) -> np.ndarray:
        dtype = float_dtype(dtype, f"Cast({self.precision!r}).decode")
        self.check_payload(payload, shape, dtype)
        values = payload["values"]
        if self.precision == "bfloat16":
            values = bfloat16_values(values)
        return values.astype(dtype)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "precision": self.precision}

r"""Fixed-width bit packing of small unsigned integers into bytes, row by row.

A row of :math:`d` integers of ``bits`` bits each (:math:`0 \le x_j < 2^{\text{bits}}`) becomes
:math:`\lceil d \cdot \text{bits} / 8 \rceil` bytes. The layout is little-endian at both levels:
entry :math:`j` occupies the stream bits :math:`j \cdot \text{bits}, \dots, (j+1) \cdot
\text{bits} - 1`, least significant bit first, and stream bit :math:`t` is bit :math:`t \bmod 8`
(value :math:`2^{t \bmod 8}`) of byte :math:`\lfloor t / 8 \rfloor`. The unused high bits of the
last byte are zero. With ``bits = 8`` a row is its values as bytes; with ``bits = 1`` it is
``np.packbits(row, bitorder="little")``.

Both directions are vectorised over rows and entries through an intermediate array of one byte
per bit (:math:`m \cdot d \cdot \text{bits}` bytes).
"""

from __future__ import annotations

import numpy as np

from ..._validation import integer
from ...errors import DTypeError, ParameterError, ShapeError

__all__ = ["pack_bits", "unpack_bits", "packed_size"]


def packed_size(d: int, bits: int) -> int:
    """Bytes of one packed row: :math:`\\lceil d \\cdot \\text{bits} / 8 \\rceil`."""
    return -(-d * bits // 8)


def pack_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """Pack each row of ``values`` into ``bits`` bits per entry (layout in the module docstring).

    Parameters
    ----------
    values : numpy.ndarray of shape (m, d)
        Unsigned (or non-negative signed) integers below :math:`2^{\\text{bits}}`.
    bits : int
        Bits per entry, 1 to 8.

    Returns
    -------
    numpy.ndarray of uint8, shape (m, ceil(d * bits / 8))

    Raises
    ------
    ParameterError
        ``bits`` is out of range, or an entry is negative or needs more than ``bits`` bits.
    ShapeError, DTypeError
        ``values`` is not a 2-D integer array.
    """
    bits = integer(bits, "pack_bits: bits", 1, 8)
    values = np.asarray(values)
    if values.ndim != 2:
        raise ShapeError(f"pack_bits: values must have shape (m, d), got shape {values.shape}")
    if values.dtype.kind not in "ui":
        raise DTypeError(f"pack_bits: values must be integers, got dtype {values.dtype}")
    if values.size and (values.min() < 0 or values.max() >= 1 << bits):
        raise ParameterError(
            f"pack_bits: entries must lie in [0, {(1 << bits) - 1}] for bits={bits}, "
            f"got entries in [{values.min()}, {values.max()}]"
        )
    m, d = values.shape
    shifts = np.arange(bits, dtype=np.uint8)
    planes = (values.astype(np.uint8)[:, :, None] >> shifts) & np.uint8(1)
    return np.packbits(planes.reshape(m, d * bits), axis=1, bitorder="little")


def unpack_bits(packed: np.ndarray, bits: int, d: int) -> np.ndarray:
    """The ``(m, d)`` uint8 entries that :func:`pack_bits` packed into ``packed``.

    Parameters
    ----------
    packed : numpy.ndarray of uint8, shape (m, ceil(d * bits / 8))
    bits : int
        Bits per entry, 1 to 8.
    d : int
        Entries per row.

    Returns
    -------
    numpy.ndarray of uint8, shape (m, d)
        The padding bits of the last byte are ignored.

    Raises
    ------
    ParameterError
        ``bits`` or ``d`` is out of range.
    ShapeError, DTypeError
        ``packed`` is not a uint8 array of ``packed_size(d, bits)`` bytes per row.
    """
    bits = integer(bits, "unpack_bits: bits", 1, 8)
    d = integer(d, "unpack_bits: d", 0)
    packed = np.asarray(packed)
    if packed.dtype != np.uint8:
        raise DTypeError(f"unpack_bits: packed must be uint8, got dtype {packed.dtype}")
    width = packed_size(d, bits)
    if packed.ndim != 2 or packed.shape[1] != width:
        raise ShapeError(
            f"unpack_bits: packed must have shape (m, {width}) for d={d}, bits={bits}, "
            f"got shape {packed.shape}"
        )
    m = packed.shape[0]
    planes = np.unpackbits(packed, axis=1, count=d * bits, bitorder="little")
    weights = (np.uint8(1) << np.arange(bits, dtype=np.uint8)).astype(np.uint8)
    return (planes.reshape(m, d, bits) * weights).sum(axis=2, dtype=np.uint8)

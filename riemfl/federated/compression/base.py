r"""The interface of an upload compressor, and the checks every compressor shares.

A :class:`Compressor` turns the stacked updates of :math:`m` clients, an array of shape
``(m, *shape)``, into a payload: a dict of arrays stacked over the same :math:`m` rows, each row
of a shape and dtype fixed by the update's shape and dtype (:meth:`Compressor.payload_spec`), so
:meth:`Compressor.payload_nbytes` is exactly what one client uploads. :meth:`Compressor.decode`
returns what the server reads, :math:`C(v)`, row by row. A compressor holds no state of its own:
the per-client state (PowerSGD's warm start) is passed in and returned.

Compressors are pure maps. Error feedback, :math:`e' = (v + e) - C(v + e)` with the compressed
:math:`C(v + e)` uploaded (Stich, Cordonnier & Jaggi 2018; Karimireddy et al. 2019), is the
caller's recursion around them.
"""

from __future__ import annotations

import abc
import math
from typing import Any

import numpy as np

from ..._validation import is_int
from ...errors import DTypeError, NonFiniteError, ParameterError, ShapeError

__all__ = [
    "Compressor",
    "PayloadSpec",
    "float_dtype",
    "check_updates",
    "check_rngs",
    "row_size",
]

#: key -> (shape of one client's array, its dtype)
PayloadSpec = dict[str, tuple[tuple[int, ...], np.dtype]]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def float_dtype(dtype: Any, where: str) -> np.dtype:
    """``dtype`` as a numpy dtype, checked to be float32 or float64.

    Raises
    ------
    DTypeError
        Any other dtype; ``where`` names the caller.
    """
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise DTypeError(f"{where}: {dtype!r} is not a numpy dtype") from None
    if dtype not in _FLOATS:
        raise DTypeError(f"{where}: updates must be float32 or float64, got dtype {dtype}")
    return dtype


def row_size(shape: tuple[int, ...], where: str) -> int:
    """The number of entries :math:`d` of one update of shape ``shape`` (at least 1).

    Raises
    ------
    ShapeError
        ``shape`` has a negative or zero extent.
    """
    shape = tuple(shape)
    if not all(is_int(n) and n >= 1 for n in shape):
        raise ShapeError(f"{where}: an update needs a shape of positive extents, got {shape}")
    return math.prod(shape)


def check_updates(updates: Any, where: str) -> np.ndarray:
    """``updates`` checked to be a finite float32/float64 numpy array of shape ``(m, *shape)``.

    Raises
    ------
    ShapeError
        Not a numpy array, no row axis, no row, or an empty update shape.
    DTypeError
        Not float32 or float64.
    NonFiniteError
        A NaN or infinite entry (the message names the first row holding one).
    """
    if not isinstance(updates, np.ndarray):
        raise ShapeError(f"{where}: updates must be a numpy array, got {type(updates).__name__}")
    if updates.ndim < 1 or updates.shape[0] < 1:
        raise ShapeError(
            f"{where}: updates must have shape (m, *shape), m >= 1, got {updates.shape}"
        )
    float_dtype(updates.dtype, where)
    row_size(updates.shape[1:], where)
    finite = np.isfinite(updates).reshape(updates.shape[0], -1).all(axis=1)
    if not finite.all():
        raise NonFiniteError(
            f"{where}: row {int(np.argmin(finite))} of the updates has a NaN or infinite entry"
        )
    return updates


class Compressor(abc.ABC):
    """A lossy map of client updates to a fixed-size payload, and back.

    Attributes
    ----------
    name : str
        The name of :func:`~riemfl.federated.compression.make_compressor`'s form (``"qsgd"``,
        ``"topk"``, ``"rank"``, ``"fp16"``, ``"bf16"``).
    unbiased : bool
        Whether :math:`\\mathbb{E}[\\mathrm{decode}(\\mathrm{encode}(v))] = v` over the
        compressor's randomness.
    """

    name: str
    unbiased: bool

    @abc.abstractmethod
    def payload_spec(self, shape: tuple[int, ...], dtype: Any) -> PayloadSpec:
        """Key -> (shape of ONE client's payload array, its numpy dtype), for updates of
        ``shape`` and ``dtype``; stacked payloads add a leading axis of ``m`` rows."""

    def state_spec(self, shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        """Key -> shape of one client's persistent state; empty for a stateless compressor."""
        return {}

    def initial_state(self, shape: tuple[int, ...], m: int, dtype: Any) -> dict[str, np.ndarray]:
        """The state of ``m`` clients before their first upload, stacked; empty when
        stateless."""
        return {}

    @abc.abstractmethod
    def encode(
        self,
        updates: np.ndarray,
        state: dict[str, np.ndarray],
        rngs: list[np.random.Generator],
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The payload of each row of ``updates`` (shape ``(m, *shape)``) and the new state.

        Parameters
        ----------
        updates : numpy.ndarray of shape (m, *shape), float32 or float64
        state : dict of str to numpy.ndarray
            The stacked state of the ``m`` clients (:meth:`initial_state`, then what the last
            call returned); ``{}`` for a stateless compressor.
        rngs : list of numpy.random.Generator
            One generator per row, for a randomised compressor; the others ignore it.

        Returns
        -------
        payload : dict of str to numpy.ndarray
            Arrays of shape ``(m, *spec_shape)`` and the dtypes of :meth:`payload_spec`.
        state : dict of str to numpy.ndarray
            The stacked new state.
        """

    @abc.abstractmethod
    def decode(
        self, payload: dict[str, np.ndarray], shape: tuple[int, ...], dtype: Any
    ) -> np.ndarray:
        """The decoded updates, shape ``(m, *shape)`` in ``dtype``, of a stacked payload."""

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """The compressor's name and parameters, JSON-ready."""

    def payload_nbytes(self, shape: tuple[int, ...], dtype: Any) -> int:
        """Bytes of one client's payload: :math:`\\sum_k \\prod(\\text{shape}_k) \\cdot
        \\text{itemsize}_k` over :meth:`payload_spec`."""
        return sum(
            math.prod(s) * np.dtype(t).itemsize for s, t in self.payload_spec(shape, dtype).values()
        )

    def check_payload(self, payload: Any, shape: tuple[int, ...], dtype: Any) -> int:
        """The number of rows ``m`` of ``payload``, after checking it against
        :meth:`payload_spec`.

        Raises
        ------
        ShapeError
            Missing or extra keys, a non-array, row shapes that differ from the spec, or row
            counts that differ between keys.
        DTypeError
            An array of another dtype than the spec's.
        """
        where = f"{type(self).__name__}.decode"
        spec = self.payload_spec(shape, dtype)
        if not isinstance(payload, dict) or set(payload) != set(spec):
            keys = sorted(payload) if isinstance(payload, dict) else type(payload).__name__
            raise ShapeError(f"{where}: the payload must have the keys {sorted(spec)}, got {keys}")
        rows = set()
        for key, (row_shape, row_dtype) in spec.items():
            array = payload[key]
            if not isinstance(array, np.ndarray) or array.shape[1:] != row_shape:
                got = array.shape if isinstance(array, np.ndarray) else type(array).__name__
                raise ShapeError(
                    f"{where}: payload[{key!r}] must have shape (m, *{row_shape}), got {got}"
                )
            if array.dtype != row_dtype:
                raise DTypeError(
                    f"{where}: payload[{key!r}] must have dtype {np.dtype(row_dtype)}, "
                    f"got {array.dtype}"
                )
            rows.add(array.shape[0])
        if len(rows) != 1:
            raise ShapeError(f"{where}: the payload's arrays have different row counts {rows}")
        return rows.pop()

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.describe().items() if k != "name")
        return f"{type(self).__name__}({params})"


def check_rngs(rngs: Any, m: int, where: str) -> list[np.random.Generator]:
    """``rngs`` checked to be ``m`` numpy generators, one per row.

    Raises
    ------
    ParameterError
        Another count, or an entry that is not a :class:`numpy.random.Generator`.
    """
    rngs = list(rngs)
    if len(rngs) != m or not all(isinstance(g, np.random.Generator) for g in rngs):
        raise ParameterError(
            f"{where}: rngs must be {m} numpy.random.Generator objects (one per row), "
            f"got {len(rngs)} objects"
        )
    return rngs

"""The payload tree of a checkpoint: Python values <-> a JSON tree plus a list of numpy arrays.

The encoding (tags ``d``, ``D``, ``t``, ``f``, ``i``, ``a``, ``s``, ``T``) is documented with the
file layout in :mod:`riemfl.federated.checkpoint`. Decoding trusts nothing: every node is checked,
and anything unexpected is a :class:`PayloadError` naming where it is.
"""

from __future__ import annotations

import importlib
import math
import re
import reprlib
import struct
from typing import Any

import numpy as np

from ._tensors import as_tensor, tensor_to_numpy

__all__ = ["PayloadError", "encode_payload", "decode_payload"]

_NUMPY_KINDS = "biufc"  # bool, int, uint, float, complex
_BIG_INT_BITS = 4096  # beyond this an int is written in hex (str(int) has a digit limit)
_TORCH_INTS = frozenset(f"{s}int{b}" for s in ("", "u") for b in (8, 16, 32, 64))
_TAGS = frozenset("dDtfiasT")  # the one-key objects of a tree
_SUPPORTED = (
    "dict (str or int keys), list, tuple, None, bool, int, float, str, a numpy array or scalar "
    "of a bool/int/float/complex dtype, or a torch tensor"
)


def encode_payload(payload: Any) -> tuple[Any, list[np.ndarray]]:
    """The JSON tree of ``payload`` and its arrays (C-contiguous; shared with it where they can).

    Raises
    ------
    PayloadError
        If ``payload`` holds an unsupported object, key or dtype, or a cycle, or is nested too
        deeply; the message names where, e.g. ``payload['clients']['x']: object of type Foo``.
    """
    arrays: list[np.ndarray] = []
    try:
        return _encode(payload, "payload", arrays, set()), arrays
    except RecursionError:
        raise PayloadError("the payload is nested too deeply") from None


def decode_payload(tree: Any, arrays: list[np.ndarray]) -> Any:
    """The value that :func:`encode_payload` turned into ``tree`` and ``arrays``.

    Raises
    ------
    PayloadError
        If ``tree`` is malformed, or does not use each array exactly once.
    """
    decoder = _Decoder(arrays)
    payload = decoder.decode(tree, "payload")
    if len(decoder.used) != len(arrays):
        raise PayloadError(f"the tree uses {len(decoder.used)} of its {len(arrays)} arrays")
    return payload


class PayloadError(ValueError):
    """Something in a payload that a checkpoint cannot hold (message: where and what)."""


def _encode(obj: Any, where: str, arrays: list[np.ndarray], parents: set[int]) -> Any:
    """The JSON tree of ``obj``; its arrays are appended to ``arrays``."""
    kind = type(obj)
    if obj is None or kind is bool or kind is str:
        return obj
    if kind is int:
        return obj if obj.bit_length() <= _BIG_INT_BITS else {"i": format(obj, "x")}
    if kind is float:
        return obj if math.isfinite(obj) else {"f": struct.pack("<d", obj).hex()}
    if kind is np.ndarray or isinstance(obj, np.generic):
        if obj.dtype.kind not in _NUMPY_KINDS:
            raise PayloadError(
                f"{where}: numpy {'array' if kind is np.ndarray else 'scalar'} of dtype "
                f"{obj.dtype} is not supported; expected a bool/int/float/complex dtype"
            )
        array = np.asarray(obj)
        arrays.append(array if array.flags.c_contiguous else array.copy(order="C"))
        return {"a" if kind is np.ndarray else "s": len(arrays) - 1}
    if as_tensor(obj) is not None:
        return _encode_tensor(obj, where, arrays)
    if kind not in (list, tuple, dict):
        raise PayloadError(
            f"{where}: object of type {kind.__qualname__} is not supported; expected {_SUPPORTED}"
        )
    if id(obj) in parents:
        raise PayloadError(f"{where}: the payload contains itself (a reference cycle)")
    parents.add(id(obj))
    try:
        if kind is dict:
            return _encode_dict(obj, where, arrays, parents)
        items = [_encode(v, f"{where}[{i}]", arrays, parents) for i, v in enumerate(obj)]
        return items if kind is list else {"t": items}
    finally:
        parents.discard(id(obj))


def _encode_dict(obj: dict, where: str, arrays: list[np.ndarray], parents: set[int]) -> Any:
    for key in obj:
        if type(key) not in (str, int):
            raise PayloadError(
                f"{where}: key {reprlib.repr(key)} of type {type(key).__qualname__} is not "
                "supported; dict keys must be str or int"
            )
    values = [_encode(v, f"{where}[{k!r}]", arrays, parents) for k, v in obj.items()]
    if all(type(key) is str for key in obj):
        return {"d": dict(zip(obj, values, strict=True))}
    return {
        "D": [[_encode(k, where, arrays, parents), v] for k, v in zip(obj, values, strict=True)]
    }


def _torch_dtype_supported(torch: Any, dtype: Any) -> bool:
    name = str(dtype).removeprefix("torch.")
    plain = (
        dtype.is_floating_point or dtype.is_complex or dtype == torch.bool or name in _TORCH_INTS
    )
    return plain and dtype.itemsize in (1, 2, 4, 8, 16)


def _encode_tensor(tensor: Any, where: str, arrays: list[np.ndarray]) -> Any:
    import torch

    if not _torch_dtype_supported(torch, tensor.dtype):
        raise PayloadError(f"{where}: torch tensor of dtype {tensor.dtype} is not supported")
    try:
        array, name = tensor_to_numpy(tensor)
    except (ValueError, RuntimeError, TypeError) as exc:
        raise PayloadError(f"{where}: torch tensor cannot be saved: {exc}") from None
    arrays.append(array)
    return {"T": [len(arrays) - 1, name, str(tensor.device), bool(tensor.requires_grad)]}


class _Decoder:
    """Builds the value of a tree over its arrays."""

    def __init__(self, arrays: list[np.ndarray]) -> None:
        self.arrays = arrays
        self.used: set[int] = set()
        self.devices: dict[str, Any] = {}

    def decode(self, node: Any, where: str) -> Any:
        kind = type(node)
        if node is None or kind in (bool, str, int, float):
            return node
        if kind is list:
            return [self.decode(v, f"{where}[{i}]") for i, v in enumerate(node)]
        if kind is dict and len(node) == 1:
            ((tag, value),) = node.items()
            if tag in _TAGS:
                return getattr(self, f"_tag_{tag}")(value, where)
        raise PayloadError(f"{where}: unexpected node {reprlib.repr(node)}")

    def _tag_d(self, value: Any, where: str) -> dict[str, Any]:
        _expect(type(value) is dict, where, "a 'd' dict", value)
        return {k: self.decode(v, f"{where}[{k!r}]") for k, v in value.items()}

    def _tag_D(self, value: Any, where: str) -> dict[Any, Any]:
        _expect(type(value) is list, where, "a 'D' list of pairs", value)
        out: dict[Any, Any] = {}
        for pair in value:
            _expect(type(pair) is list and len(pair) == 2, where, "a [key, value] pair", pair)
            key = self.decode(pair[0], where)
            _expect(type(key) in (str, int), where, "a str or int key", key)
            out[key] = self.decode(pair[1], f"{where}[{key!r}]")
        return out

    def _tag_t(self, value: Any, where: str) -> tuple[Any, ...]:
        _expect(type(value) is list, where, "a 't' list", value)
        return tuple(self.decode(v, f"{where}[{i}]") for i, v in enumerate(value))

    def _tag_f(self, value: Any, where: str) -> float:
        ok = type(value) is str and re.fullmatch(r"[0-9a-f]{16}", value) is not None
        _expect(ok, where, "16 hex digits of a float", value)
        return struct.unpack("<d", bytes.fromhex(value))[0]

    def _tag_i(self, value: Any, where: str) -> int:
        ok = type(value) is str and re.fullmatch(r"-?[0-9a-f]+", value) is not None
        _expect(ok, where, "a hex int", value)
        return int(value, 16)

    def _tag_a(self, value: Any, where: str) -> np.ndarray:
        return self._array(value, where)

    def _tag_s(self, value: Any, where: str) -> np.generic:
        array = self._array(value, where)
        _expect(array.shape == (), where, "a 0-d array for a numpy scalar", array.shape)
        return array[()]

    def _tag_T(self, value: Any, where: str) -> Any:
        ok = type(value) is list and len(value) == 4 and type(value[1]) is str
        ok = ok and type(value[2]) is str and type(value[3]) is bool
        _expect(ok, where, "[array, dtype, device, requires_grad] of a tensor", value)
        try:
            torch = importlib.import_module("torch")
        except ImportError:
            raise PayloadError(
                f"{where} is a torch tensor, and torch is not installed (pip install "
                "'riemfl[torch]')"
            ) from None
        dtype = getattr(torch, value[1], None)
        ok = isinstance(dtype, torch.dtype) and _torch_dtype_supported(torch, dtype)
        _expect(ok, where, "a torch dtype", value[1])
        array = self._array(value[0], where)
        _expect(array.itemsize == dtype.itemsize, where, f"{dtype} data", array.dtype)
        tensor = torch.from_numpy(array)
        if tensor.dtype != dtype:
            tensor = tensor.view(dtype)
        tensor = tensor.to(self._device(torch, value[2]))
        return tensor.requires_grad_(True) if value[3] else tensor

    def _array(self, k: Any, where: str) -> np.ndarray:
        ok = type(k) is int and 0 <= k < len(self.arrays) and k not in self.used
        _expect(ok, where, f"the number of an unused array (0..{len(self.arrays) - 1})", k)
        self.used.add(k)
        return self.arrays[k]

    def _device(self, torch: Any, name: str) -> Any:
        """``name`` as a device when it exists here (a tiny allocation tells), else the CPU."""
        if name not in self.devices:
            try:
                device = torch.device(name)
                torch.empty(0, device=device)
            except (RuntimeError, AssertionError, ValueError, TypeError):
                device = torch.device("cpu")
            self.devices[name] = device
        return self.devices[name]


def _expect(ok: bool, where: str, what: str, found: Any) -> None:
    if not ok:
        raise PayloadError(f"{where}: expected {what}, found {reprlib.repr(found)}")

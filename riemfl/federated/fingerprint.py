"""A hash of the data behind a run, for the fingerprints that checkpoints are matched against.

:func:`data_digest` hashes, with SHA-256, every numpy array and torch tensor reachable from an
object (a problem, a trainer, a starting point): each one's bytes in C order, with its path from
the object (``.blocks[3]``, ``._data[0]['x_train']``), dtype and shape. Two clients' data
swapped, one entry changed, or a reshape all change the hash; the same data gives the same
hash in any process (nothing depends on addresses or ``id``).

Which objects are searched: the object itself (its ``vars()``, whatever its class), dicts, lists
and tuples, and objects of classes from riemfl (``riemfl.*`` modules, their subclasses
included). Not searched: torch modules and parameters (a model's weights are not data, and they
change as it trains), objects of other libraries (a torch tensor is hashed all the same),
callables, sets, scalars (a problem's ``describe()`` covers those), and the attributes and dict
keys named in ``exclude``. Each object is searched once, so cycles end.

Only the data should be reachable: state that changes during a run (e.g. a trainer's per-client
router logits, or a cache of the last evaluation) would make the hash of the same trainer
differ before and after training. A class names such attributes in its class attribute
``run_state_attributes`` (a tuple of names; e.g. :class:`~riemfl.nn.floral.FloralTrainer`'s
personal client state), and a caller can name more in ``exclude``.

Speed: an array that lies inside another reachable one (a view: e.g. the per-client blocks of a
padded stack, or ``torch.from_numpy`` of an array) is recorded as the container's path, its byte
offset and strides instead of being hashed again, so the data are read once; SHA-256 runs on the
arrays' memory without copying contiguous ones (about 2 GB/s on a core with SHA extensions). So
the hash also tells which reachable arrays share memory, which is the same whenever the object
is built the same way from the same data.

:func:`settings` is the other half of a fingerprint: the scalar configuration of an object that
has no fixed schema (e.g. the local trainer of an asynchronous run: its step size, local steps,
batch size, learning rates): its own and those of the riemfl objects it holds, with the same
exclusions (``run_state_attributes``).
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import ParameterError
from ._tensors import as_tensor, is_model_part, tensor_to_numpy
from .serialise import instance_attributes, public_attributes, public_scalars

__all__ = ["data_digest", "settings", "Describes", "HasRunState", "run_state_of"]


#: The class attribute that lists an object's run-state attributes (not searched).
@runtime_checkable
class Describes(Protocol):
    """An object that states its own settings (a rule, an aggregator, a trainer): ``describe()``
    is what :func:`settings` records for it, in place of its public scalar attributes."""

    def describe(self) -> dict[str, Any]: ...


@runtime_checkable
class HasRunState(Protocol):
    """An object with personal run state (e.g. a trainer's per-client router logits): the
    attributes named in ``run_state_attributes`` change during a run, so they are neither
    settings nor data and both :func:`settings` and :func:`data_digest` leave them out."""

    run_state_attributes: tuple[str, ...]


def run_state_of(obj: Any) -> tuple[str, ...]:
    """The names of ``obj``'s run-state attributes (none unless it is :class:`HasRunState`)."""
    return tuple(obj.run_state_attributes) if isinstance(obj, HasRunState) else ()


_VERSION = b"riemfl data digest 1\n"
_SLAB = 1 << 24  # bytes copied at a time from a non-contiguous array


@dataclass(frozen=True)
class _Leaf:
    path: str
    dtype: Any  # numpy's descr of the dtype, or "torch.<name>"
    array: np.ndarray  # CPU memory with the data (shared with the object's where it can be)


def data_digest(obj: Any, *, exclude: Collection[str] = ()) -> str:
    """SHA-256 (hex) of the arrays and tensors reachable from ``obj`` (module docstring).

    Parameters
    ----------
    obj : object
        E.g. a :class:`~riemfl.problems.KPCAProblem`, a
        :class:`~riemfl.nn.floral.FloralTrainer`, an array, a dict of arrays, or None.
    exclude : collection of str
        Attribute names and dict keys whose values are not searched, wherever they occur (e.g.
        ``("router_logits", "last_pi", "private")`` for a ``FloralTrainer``'s client state).

    Returns
    -------
    str
        64 hex digits; equal for equal data (same paths, dtypes, shapes and bytes).

    Raises
    ------
    ParameterError
        If a reachable torch tensor has no plain data (sparse layout, meta device).
    """
    leaves = _leaves(obj, frozenset(exclude))
    containers = _containers(leaves)
    hasher = hashlib.sha256(_VERSION)
    for i, leaf in enumerate(leaves):
        a = leaf.array
        record: list[Any] = [leaf.path, leaf.dtype, list(a.shape), a.nbytes]
        j = containers.get(i)
        if j is not None:  # a view into leaf j, hashed in full: where it lies is enough
            record += [leaves[j].path, _address(a) - _address(leaves[j].array), list(a.strides)]
        hasher.update(json.dumps(record).encode() + b"\n")
        if j is None:
            _hash_c_order(hasher, a)
    return hasher.hexdigest()


def settings(obj: Any, *, exclude: Collection[str] = ()) -> dict[str, Any]:
    """The configuration of ``obj``, JSON-ready: what a checkpoint of a run with it must match.

    ``{"kind": its class name}``, then its ``describe()`` when it has one (the settings it
    declares, as problems, algorithms and :class:`~riemfl.nn.floral.FloralTrainer` do), else
    its public scalar attributes (bool, int, float, str and None values, and nested lists and
    tuples of them, of names without a leading underscore); and, under their attribute names
    (unless ``describe()`` gave them), the settings of the objects of classes from riemfl among
    its public attributes, found the same way (e.g. the problem of a
    :class:`~riemfl.federated.ProblemTrainer`, the trainer a curve trainer wraps). Attributes
    named in the class's ``run_state_attributes`` or in ``exclude`` are left out: state that
    changes during a run (a counter, a cache) must be named there, or a checkpoint of the same
    run would not match. Arrays are left to :func:`data_digest`.

    Parameters
    ----------
    obj : object
        E.g. a trainer.
    exclude : collection of str
        Attribute names left out, wherever they occur.

    Returns
    -------
    dict
        Equal for objects built alike (the same classes and settings).
    """
    return _settings(obj, frozenset(exclude), {id(obj)})


def _settings(obj: Any, exclude: frozenset[str], seen: set[int]) -> dict[str, Any]:
    state = {*exclude, *run_state_of(obj)}
    out: dict[str, Any] = {"kind": type(obj).__qualname__}
    if isinstance(obj, Describes):
        out.update(obj.describe())
    else:
        out.update(public_scalars(obj, exclude=state, sequences=True))
    for name, value in public_attributes(obj, state):
        skip = isinstance(value, type) or is_model_part(value) or callable(value)
        if skip or name in out or not _from_riemfl(type(value)) or id(value) in seen:
            continue
        seen.add(id(value))
        out[name] = _settings(value, exclude, seen)
    return out


def _leaves(obj: Any, exclude: frozenset[str] = frozenset()) -> list[_Leaf]:
    """The arrays reachable from ``obj``, depth first in attribute / key / index order."""
    leaves: list[_Leaf] = []
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        path, node = stack.pop()
        children = _visit(path, node, path == "" and node is obj, leaves, seen)
        stack.extend((p, v) for p, name, v in reversed(children) if name not in exclude)
    return leaves


def _visit(
    path: str, node: Any, top: bool, leaves: list[_Leaf], seen: set[int]
) -> list[tuple[str, Any, Any]]:
    """Record ``node`` if it is an array; return its children to search: (path, name, value)."""
    if is_model_part(node) or id(node) in seen:
        return []
    if isinstance(node, np.ndarray):
        if node.dtype.hasobject:  # the pointers mean nothing: search the elements instead
            return [(f"{path}.flat[{i}]", i, v) for i, v in enumerate(node.flat)]
        leaves.append(_Leaf(path, np.lib.format.dtype_to_descr(node.dtype), node))
        return []
    if as_tensor(node) is not None:
        try:
            array, name = tensor_to_numpy(node)
        except ValueError as exc:
            raise ParameterError(f"data_digest: obj{path}: {exc}") from None
        leaves.append(_Leaf(path, f"torch.{name}", array))
        return []
    if isinstance(node, dict):
        seen.add(id(node))
        return [(f"{path}[{_key(k, i)}]", k, v) for i, (k, v) in enumerate(node.items())]
    if isinstance(node, list | tuple):
        seen.add(id(node))
        return [(f"{path}[{i}]", i, v) for i, v in enumerate(node)]
    if isinstance(node, type) or not (top or _from_riemfl(type(node))):
        return []
    if callable(node) and not _from_riemfl(type(node)):
        return []
    seen.add(id(node))
    state = run_state_of(node)
    return [
        (f"{path}.{name}", name, v) for name, v in instance_attributes(node) if name not in state
    ]


def _from_riemfl(cls: type) -> bool:
    return any(c.__module__.split(".")[0] == "riemfl" for c in cls.__mro__)


def _key(key: Any, i: int) -> str:
    """A dict key in a path: its repr when that is stable, else its type and position."""
    if isinstance(key, str | int | float | bytes | bool) or key is None:
        return repr(key)
    return f"<{type(key).__qualname__} #{i}>"


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _bounds(a: np.ndarray) -> tuple[int, int]:
    """The first and one-past-the-last byte address that ``a`` (not empty) touches."""
    lo = hi = _address(a)
    for n, s in zip(a.shape, a.strides, strict=True):
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi + a.itemsize


def _containers(leaves: list[_Leaf]) -> dict[int, int]:
    """``{i: j}``: leaf i lies inside the C-contiguous leaf j, which is hashed in full.

    Leaves are taken largest first (ties: path order), so a stack is hashed and the blocks that
    view it are not, whatever the order they are found in; which leaf contains which depends only
    on how the arrays share memory, not on where that memory is.
    """
    order = sorted(range(len(leaves)), key=lambda i: (-leaves[i].array.nbytes, i))
    starts: list[int] = []
    spans: list[tuple[int, int, int]] = []  # (lo, hi, leaf) of leaves hashed in full, by lo
    out: dict[int, int] = {}
    for i in order:
        a = leaves[i].array
        if a.size == 0:
            continue
        lo, hi = _bounds(a)
        k = bisect.bisect_right(starts, lo) - 1
        if k >= 0 and hi <= spans[k][1]:
            out[i] = spans[k][2]
        elif a.flags.c_contiguous:
            k = bisect.bisect_right(starts, lo)
            starts.insert(k, lo)
            spans.insert(k, (lo, hi, i))
    return out


def _hash_c_order(hasher: Any, a: np.ndarray) -> None:
    """Feed the bytes of ``a`` in C order to ``hasher`` (slab by slab when not contiguous)."""
    if a.size == 0:
        return
    if a.flags.c_contiguous:
        hasher.update(a.reshape(-1).view(np.uint8))
        return
    rows = max(1, _SLAB // a[0].nbytes)
    for start in range(0, a.shape[0], rows):
        hasher.update(np.ascontiguousarray(a[start : start + rows]).reshape(-1).view(np.uint8))

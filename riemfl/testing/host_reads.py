"""Count the calls that read a torch tensor's value back to the host.

A host read (``t.item()``, ``bool(t)``, ``t.tolist()``, ...) makes the Python process wait for
the device: on a GPU each one drains the launch queue, and under ``torch.compile`` each one is a
graph break. :class:`HostReadCounter` is a :class:`torch.overrides.TorchFunctionMode` that counts
them while it is active, per function and per source location::

    from riemfl.testing.host_reads import HostReadCounter

    with HostReadCounter() as reads:
        manifold.exp(x, u)
    print(reads.total, reads.by_function, reads.by_location.most_common(3))

What is counted (each reaches ``__torch_function__`` in torch 2.x, checked on 2.13; the names are
those of :data:`READ_FUNCTIONS`):

* the conversions to Python values: ``Tensor.item``, ``Tensor.tolist``, ``Tensor.__bool__``
  (``if t``, ``bool(t)``, ``t and ...``, ``max(t, 1.0)``), ``Tensor.__float__``,
  ``Tensor.__int__``, ``Tensor.__index__`` (``range(t)``, indexing a list with ``t``),
  ``Tensor.__complex__`` and ``Tensor.__format__`` (``f"{t:.3g}"``);
* the copies to numpy: ``Tensor.numpy`` and ``Tensor.__array__`` (``np.asarray(t)``);
* the calls whose result is a Python value or has a value-dependent shape: ``torch.equal``,
  ``torch.allclose``, ``torch.nonzero`` / ``Tensor.nonzero``, ``torch.argwhere``,
  ``torch.masked_select``, ``torch.unique`` and indexing with a boolean mask
  (``t[mask]``, counted as ``__getitem__[mask]``).

``torch.any`` and ``torch.all`` return a tensor and read nothing by themselves: the read is the
``bool`` that usually follows, counted as ``__bool__``. ``len(t)`` reads the shape, not a value,
and is not counted.

What is not seen this way: reads made inside a C++ kernel or a custom autograd function's
backward (never dispatched through Python), reads made by another ``TorchFunctionMode`` or
``__torch_function__`` override while it handles a call, ``Tensor.__repr__`` / ``__str__``
(deliberately left out: printing is for messages), and copies to the host made with
``.cpu()`` / ``.to("cpu")`` (no read for CPU tensors, which is what this counter runs on).

Counters nest: an inner counter and every enclosing one count the same read.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from ..extras import import_extra

__all__ = ["READ_FUNCTIONS", "HostRead", "HostReadCounter"]

#: Names of the torch functions and tensor methods counted as host reads.
READ_FUNCTIONS: frozenset[str] = frozenset(
    {
        "item",
        "tolist",
        "__bool__",
        "__float__",
        "__int__",
        "__index__",
        "__complex__",
        "__format__",
        "numpy",
        "__array__",
        "equal",
        "allclose",
        "nonzero",
        "argwhere",
        "masked_select",
        "unique",
        "_unique",
        "_unique2",
    }
)

_PACKAGE = Path(__file__).resolve().parents[1]  # .../riemfl
_ROOT = _PACKAGE.parent
_THIS = str(Path(__file__).resolve())
#: riemfl modules whose reads are charged to their caller (the array operations: the line to
#: change is the one that calls them)
_PLUMBING = frozenset({("backend.py",)})


@dataclass(frozen=True)
class HostRead:
    """One counted read.

    Attributes
    ----------
    function : str
        The function's name (``"item"``, ``"__bool__"``, ``"__getitem__[mask]"``, ...).
    location : str
        ``path:line`` of the first frame inside the riemfl package (outside this module and
        ``riemfl/backend.py``, the array operations, whose reads are charged to the line that
        calls them), the path relative to the directory holding ``riemfl``; the caller's frame
        where no riemfl frame is on the stack.
    """

    function: str
    location: str


def _func_name(func: Any) -> str:
    return getattr(func, "__name__", None) or str(func)


def _is_mask(index: Any, torch: Any) -> bool:
    """Whether an index (of ``t[index]``) holds a boolean tensor."""
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts)


def _location(frame: FrameType | None) -> str:
    """``path:line`` of the first riemfl frame above ``frame`` (see :class:`HostRead`)."""
    first: str | None = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename != _THIS and "torch" not in Path(filename).parts:
            path = Path(filename)
            try:
                rel = path.resolve().relative_to(_ROOT)
            except (ValueError, OSError):
                rel = None
            where = f"{rel if rel is not None else filename}:{frame.f_lineno}"
            if rel is not None and rel.parts[0] == _PACKAGE.name and rel.parts[1:] not in _PLUMBING:
                return where
            if first is None:
                first = where
        frame = frame.f_back
    return first if first is not None else "<unknown>"


class HostReadCounter:
    """Context manager counting the host reads of torch tensors made while it is active.

    Built on :class:`torch.overrides.TorchFunctionMode`; see the module docstring for what is
    counted and what cannot be seen. Needs torch (the ``torch`` extra).

    Attributes
    ----------
    total : int
        Number of reads counted.
    by_function : collections.Counter of str
        Reads per function name.
    by_location : collections.Counter of str
        Reads per ``path:line`` (see :class:`HostRead`).
    reads : list of HostRead
        Every read, in order.

    Raises
    ------
    MissingDependencyError
        At construction, if torch is not installed.

    Examples
    --------
    >>> import torch
    >>> with HostReadCounter() as reads:
    ...     _ = torch.ones(2).sum().item()
    >>> reads.total, dict(reads.by_function)
    (1, {'item': 1})
    """

    def __init__(self) -> None:
        torch = import_extra("torch", "HostReadCounter")
        self.by_function: Counter[str] = Counter()
        self.by_location: Counter[str] = Counter()
        self.reads: list[HostRead] = []
        self._mode = _make_mode(torch, self)

    @property
    def total(self) -> int:
        """Number of reads counted."""
        return len(self.reads)

    def reset(self) -> None:
        """Forget every read counted so far."""
        self.by_function.clear()
        self.by_location.clear()
        self.reads.clear()

    def _record(self, name: str, frame: FrameType | None) -> None:
        read = HostRead(name, _location(frame))
        self.reads.append(read)
        self.by_function[name] += 1
        self.by_location[read.location] += 1

    def __enter__(self) -> HostReadCounter:
        self._mode.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._mode.__exit__(exc_type, exc, tb)

    def __repr__(self) -> str:
        return f"HostReadCounter(total={self.total}, by_function={dict(self.by_function)})"


def _make_mode(torch: Any, counter: HostReadCounter) -> Any:
    """A fresh :class:`~torch.overrides.TorchFunctionMode` reporting to ``counter`` (built here
    so that this module imports without torch)."""

    class _Mode(torch.overrides.TorchFunctionMode):
        def __torch_function__(
            self,
            func: Any,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            name = _func_name(func)
            if name in READ_FUNCTIONS:
                counter._record(name, sys._getframe(1))
            elif name == "__getitem__" and len(args) > 1 and _is_mask(args[1], torch):
                counter._record("__getitem__[mask]", sys._getframe(1))
            return func(*args, **(kwargs or {}))

    return _Mode()

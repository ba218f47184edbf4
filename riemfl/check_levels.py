r"""Check levels of the manifold maps: when riemfl reads a value back to find bad input.

riemfl's maps refuse bad input with typed errors (:mod:`riemfl.errors`): a non-finite argument,
a point on the boundary of an open manifold, a rank-deficient matrix, an ambient point whose
nearest point is not unique. Finding one needs a value on the host, and on an accelerator each
such read (``bool(tensor)``, ``tensor.item()``) drains the launch queue; under
``torch.compile`` it ends the graph. The check level says when that read happens:

``"eager"``
    Every check reads its verdict at once: the call that received the bad input raises.
``"deferred"``
    No map reads anything back. Each check records its verdict as a tensor on the device (one
    boolean per check, one vector of argument sums per map call) with what it needs to write
    the error, and :func:`raise_deferred` reads all verdicts at once (one read per device) and
    raises the first violation as the typed error, with the message, that ``"eager"`` would
    have raised at the call. The exit of a ``with checks(...)`` block raises what the block
    recorded; the federated engines call :func:`raise_deferred` once per round or server step;
    a training loop calls it once per step.
``"off"``
    No checks: the bare maps, for data validated elsewhere.
``"auto"`` (the default setting)
    ``"eager"`` for numpy arrays and CPU tensors, ``"deferred"`` for tensors on an accelerator
    and while ``torch.compile`` traces.

The setting is process wide (every thread sees it); :func:`checks` sets it and, used in a
``with`` statement, restores the previous one on exit::

    import riemfl

    with riemfl.checks("deferred"):
        for batch in data:
            loss = f(manifold.exp(x, u))
            ...
            riemfl.raise_deferred()        # once per step: one read, typed error if any

    riemfl.checks("off")                   # global: from now on, no checks

What a deferred check keeps until the boundary: the verdict (a boolean tensor) and references to
the arguments it diagnoses (no copies; inside a compiled function, copies of the verdict and of
the tensors its message reads: :mod:`riemfl.check_levels_torch`). A diagnosis runs only for a
violated check, at the boundary, on the arguments as they are then; an argument changed in
place since the call is still named, with the entries it holds then. At most
:data:`MAX_PENDING` entries wait (a map call's check has two): the next check runs the boundary
first (one read per :data:`MAX_PENDING` entries), so a loop that never calls
:func:`raise_deferred` keeps bounded memory.

Why not a device-side assert (``torch._assert_async``): on CUDA a failed device assert ends the
CUDA context, and the process must restart; a typed error must leave the process usable. JAX's
``checkify`` returns the error value beside the result, which changes every map's signature;
riemfl keeps the signatures and holds the verdicts beside the call instead.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .backend import ops_for
from .errors import NonFiniteError, ParameterError

__all__ = [
    "LEVELS",
    "MAX_PENDING",
    "checks",
    "check_level",
    "level_of",
    "raise_deferred",
    "pending_checks",
    "discard_pending",
    "largest_entries",
    "refuse",
    "refuse_nonfinite",
    "record",
    "append_pending",
    "insert_pending",
    "make_room",
    "pending_position",
    "ArgumentsFirst",
    "compiling",
]

#: The settings :func:`checks` accepts.
LEVELS: tuple[str, ...] = ("auto", "eager", "deferred", "off")
#: The most entries of deferred checks kept before the boundary runs by itself (a map call's
#: check has two: its check of the arguments, before the map's own checks, and its full one).
MAX_PENDING = 4096

_setting = "auto"
#: deferred checks, oldest first: ``(verdict, diagnose, arguments, arguments_first)``;
#: ``verdict`` is True (a boolean array or tensor) where the check failed; ``diagnose(*arguments)``
#: raises its error; ``arguments_first``: the entry is a map call's check of its arguments
#: (:class:`ArgumentsFirst`), placed before the checks made inside the map
_pending: list[tuple[Any, Callable[..., None], tuple, bool]] = []


class ArgumentsFirst(NamedTuple):
    """A map call's check of its arguments, which eager mode makes before the map runs; the
    deferred level records it before the checks made inside the map (for :func:`record`).

    ``at``: :func:`pending_position` before the map ran; ``check``: ``(function, arguments)``
    raising for a non-finite argument (on the arguments); ``compiled``: ``(function,
    constants)``, the same from the verdict alone, ``function(verdict, *constants)``, inside a
    compiled function. The call's full diagnosis (its result too) goes after the map's checks.
    """

    at: int
    check: tuple[Callable[..., None], tuple]
    compiled: tuple[Callable[..., None], tuple]


_lock = threading.Lock()


class checks:  # noqa: N801 (a function-like context manager, as torch.set_grad_enabled)
    """Set the check level of riemfl's maps, process wide; as a context manager, for a block.

    Parameters
    ----------
    level : {"auto", "eager", "deferred", "off"}
        See the module documentation: when a check reads its verdict (``"eager"``: at the
        call; ``"deferred"``: at :func:`raise_deferred` or the block's exit; ``"off"``: never).

    Raises
    ------
    ParameterError
        An unknown level.

    Examples
    --------
    ``riemfl.checks("off")`` sets the level until the next call; ``with
    riemfl.checks("deferred"): ...`` sets it for the block, raises at the block's exit the first
    violation recorded inside it (when the block itself ends without an exception; after an
    exception the block's records are dropped), and restores the previous level.
    """

    def __init__(self, level: str) -> None:
        global _setting
        if level not in LEVELS:
            raise ParameterError(
                f"riemfl.checks: level {level!r} is unknown; expected one of {', '.join(LEVELS)}"
            )
        self.level = level
        self._previous = _setting
        self._start = 0
        _setting = level

    def __enter__(self) -> checks:
        self._start = len(_pending)
        return self

    def __exit__(self, kind: type | None, value: BaseException | None, tb: Any) -> None:
        global _setting
        _setting = self._previous
        records = _take(self._start)
        if kind is None:
            _raise_first(records)

    def __repr__(self) -> str:
        return f"riemfl.checks({self.level!r})"


def check_level() -> str:
    """The current setting: one of :data:`LEVELS`."""
    return _setting


def level_of(a: Any) -> str:
    """The level that applies to a map call on ``a``: ``"eager"``, ``"deferred"`` or ``"off"``.

    The setting, with ``"auto"`` resolved by ``a``: ``"deferred"`` for a torch tensor off the
    CPU or while ``torch.compile`` traces, ``"eager"`` otherwise.
    """
    if _setting != "auto":
        return _setting
    if type(a) is np.ndarray:
        return "eager"
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(a, torch.Tensor):
        return "eager"
    if a.is_cpu and not torch.compiler.is_compiling():
        return "eager"
    return "deferred"


def compiling() -> bool:
    """Whether ``torch.compile`` is tracing the calling code (False without torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


def refuse(bad: Any, error: type[Exception], message: Callable[..., str], *args: Any) -> None:
    """The check of a map: raise ``error(message(*args))`` where ``bad`` holds, at the level
    that applies.

    Parameters
    ----------
    bad : bool, numpy array or torch tensor of bool
        True where the check fails (any entry fails it).
    error : type
        The typed error (a :class:`~riemfl.errors.RiemflError` subclass).
    message : callable
        Writes the message from ``args``; called only when the error is raised (for a deferred
        check, at the boundary, on the values ``args`` hold then).
    *args
        What the message reads (arrays are kept by reference, not copied).
    """
    if isinstance(bad, bool):
        if bad:
            raise error(message(*args))
        return
    level = level_of(bad)
    if level == "eager":
        if bad.any():
            raise error(message(*args))
    elif level == "deferred":
        record(bad, _raise_message, (error, message, args), error, _check_name(message))


def refuse_nonfinite(
    a: Any, error: type[Exception], message: Callable[..., str], *args: Any
) -> None:
    """The check that ``a`` (an intermediate value of a map) has only finite entries: raise
    ``error(message(*args))`` where one is NaN or infinite, at the level that applies to ``a``.

    Eager, one reduction and one read (:meth:`~riemfl.backend.ArrayOps.all_finite`); deferred,
    the largest entry of ``a`` is recorded (:func:`largest_entries`) and read at the boundary.
    """
    level = level_of(a)
    if level == "eager":
        if not ops_for(a).all_finite(a):
            raise error(message(*args))
    elif level == "deferred" and 0 not in a.shape:
        record(
            largest_entries((a,)),
            _raise_message,
            (error, message, args),
            error,
            _check_name(message),
        )


def _raise_message(error: type[Exception], message: Callable[..., str], args: tuple) -> None:
    raise error(message(*args))


def record(
    verdict: Any,
    diagnose: Callable[..., None],
    arguments: tuple,
    error: type[Exception] = NonFiniteError,
    context: str = "a deferred check",
    compiled: tuple[Callable[..., None], tuple] | None = None,
    arguments_first: ArgumentsFirst | None = None,
) -> None:
    """Record a deferred check, read at the boundary.

    ``arguments_first``: for a map call's check, its check of the arguments
    (:class:`ArgumentsFirst`), recorded before the checks made inside the map; at the boundary
    it raises for a non-finite argument before them, and a failed check made inside the map
    first runs the nearest one before it (:func:`raise_deferred`), as eager mode refuses such
    arguments before the map runs. The full diagnosis comes after the map's checks.

    ``verdict``: booleans (the check failed where one is True) or floats (it failed where one
    is not finite), any shape. Where it failed, ``diagnose(*arguments)`` raises the typed error;
    a diagnosis that returns finds no violation after all, and the next failed check is
    diagnosed.

    Inside a function that ``torch.compile`` traces, the check becomes an operator of the graph
    (:mod:`riemfl.check_levels_torch`), which keeps a copy of the verdict and, where
    ``diagnose`` is a function and ``arguments`` hold only tensors and constants, copies of
    the tensors: the boundary then runs the same diagnosis. ``compiled``, ``(function,
    constants)``, is the diagnosis there from the verdict alone, ``function(verdict,
    *constants)``, for a ``diagnose`` that needs more (a manifold's method). Without either the
    boundary raises ``error`` naming ``context`` (the map or the check), without values.
    """
    if compiling():
        from .check_levels_torch import record_compiled

        record_compiled(verdict, diagnose, arguments, error, context, compiled, arguments_first)
        return
    make_room(1 + (arguments_first is not None))
    if arguments_first is not None:
        insert_pending(arguments_first.at, verdict, *arguments_first.check, True)
    append_pending(verdict, diagnose, arguments)


def make_room(entries: int) -> None:
    """Run the boundary first where ``entries`` more would pass :data:`MAX_PENDING`."""
    if len(_pending) + entries > MAX_PENDING:
        raise_deferred()


def insert_pending(
    position: int,
    verdict: Any,
    diagnose: Callable[..., None],
    arguments: tuple,
    arguments_first: bool = False,
) -> None:
    """Insert a check among the pending ones at ``position`` (the end where it is past it);
    ``arguments_first``: a map call's check of its arguments (:class:`ArgumentsFirst`)."""
    with _lock:
        _pending.insert(position, (verdict, diagnose, arguments, arguments_first))


def pending_position() -> int:
    """Where the next check goes among the pending ones: :func:`pending_checks`, or, while
    ``torch.compile`` traces, the count of checks traced so far (a constant of the graph:
    :func:`riemfl.check_levels_torch.traced_records`). For :func:`record`'s ``at``."""
    if compiling():
        from .check_levels_torch import traced_records

        return traced_records()
    return len(_pending)


def append_pending(verdict: Any, diagnose: Callable[..., None], arguments: tuple) -> None:
    """Append a check to the pending ones (no bound: :func:`record` keeps it)."""
    _pending.append((verdict, diagnose, arguments, False))


def _check_name(message: Callable[..., str]) -> str:
    """Words naming a check by its message function, for an error raised without values."""
    # (__name__ and __module__: dynamo reads __qualname__ as its descriptor; no str methods)
    return f"the check {message.__module__}.{message.__name__}"


def largest_entries(arrays: tuple) -> Any:
    r"""The verdict of a map call: :math:`\max_j |a_j|` of each array, as one vector.

    NaN where an array holds a NaN, inf where it holds an infinity, finite otherwise (no sum
    that finite entries could overflow). One fused reduction and one stack for torch tensors
    (one reduction for a single tensor), on their device and without a read; in a compiled
    function one reduction per array, which inductor fuses (it runs the fused one as a separate
    kernel).
    """
    first = arrays[0]
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(first, torch.Tensor):
        with torch.no_grad():  # a verdict, not a value to differentiate: no autograd record
            if len(arrays) == 1:
                return torch.linalg.vector_norm(first, float("inf"))
            if torch.compiler.is_compiling():  # reductions inductor fuses into the map's kernels
                return torch.stack([torch.linalg.vector_norm(a, float("inf")) for a in arrays])
            return torch.stack(torch._foreach_norm(list(arrays), float("inf")))
    return np.array([np.max(np.abs(a)) for a in arrays])


def pending_checks() -> int:
    """How many deferred checks wait for the boundary (a map call's check counts once, though
    its check of the arguments has an entry of its own: :class:`ArgumentsFirst`)."""
    return sum(not entry[3] for entry in _pending)


def discard_pending(start: int) -> None:
    """Drop the pending checks from position ``start`` on (those of a call that raised: its
    exception is the error to see)."""
    _take(start)


def raise_deferred() -> None:
    """The boundary: read every deferred check and raise the first violation, or return.

    One read per device holding verdicts (none when nothing was recorded). The first violated
    check, in the order of the calls, raises its typed error; the checks recorded after it are
    dropped with it. Call it once per training step (the federated engines call it at every
    round or server step).
    """
    _raise_first(_take(0))


def _take(start: int) -> list:
    """Remove and return the records from position ``start`` on."""
    with _lock:
        taken = _pending[start:]
        del _pending[start:]
    return taken


def _raise_first(records: list) -> None:
    for i in _failed(records):
        _, diagnose, arguments, arguments_first = records[i]
        if not arguments_first:
            _check_enclosing_call(records, i)
        diagnose(*arguments)


def _check_enclosing_call(records: list, i: int) -> None:
    """Before the failed check ``i`` raises, the map call around it checks its arguments: eager
    mode refuses a non-finite argument before the map runs (and a map that checks its arguments
    through its result may return a finite result from an infinite argument, while a guard
    inside it failed). A map call's check of its arguments is recorded before the checks made
    inside the map (:class:`ArgumentsFirst`), so the nearest one before ``i`` is the call
    around it; a check made outside every map meets an earlier call, whose arguments were
    checked already (the check passes again)."""
    for j in range(i - 1, -1, -1):
        _, diagnose, arguments, arguments_first = records[j]
        if arguments_first:
            diagnose(*arguments)
            return


def _failed(records: list) -> list[int]:
    """Positions of the failed checks, in order.

    A verdict of booleans fails where an entry is True; a verdict of floats (the argument sums
    of a map call) where an entry is not finite. The torch verdicts of one device and dtype are
    concatenated and read at once: one read per group, and a second (the failed positions)
    only when a check failed.
    """
    if not records:
        return []
    torch = sys.modules.get("torch")
    failed: list[int] = []
    groups: dict[tuple, list[int]] = {}
    for i, (verdict, _, _, _) in enumerate(records):
        if torch is not None and isinstance(verdict, torch.Tensor):
            groups.setdefault((verdict.device, verdict.dtype), []).append(i)
        elif _numpy_failed(np.asarray(verdict)):
            failed.append(i)
    for (_, dtype), positions in groups.items():
        flat = torch.cat([records[i][0].reshape(-1) for i in positions])
        bad = flat if dtype == torch.bool else ~flat.isfinite()
        if not bool(bad.any()):
            continue
        ends = np.cumsum([records[i][0].numel() for i in positions])
        hits = np.searchsorted(ends, bad.nonzero().reshape(-1).cpu().numpy(), side="right")
        failed.extend(positions[j] for j in sorted(set(hits.tolist())))
    return sorted(failed)


def _numpy_failed(verdict: np.ndarray) -> bool:
    if verdict.dtype == np.bool_:
        return bool(verdict.any())
    return not bool(np.isfinite(verdict).all())

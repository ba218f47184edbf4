"""How a deferred check is recorded inside a function that ``torch.compile`` traces.

Appending to riemfl's list of pending checks from traced code would make dynamo guard on the
list's length and recompile at every call. Inside a compiled function a check is therefore an
operator of the graph, ``riemfl::record_deferred``, registered as having an ordered side effect
(so that AOTAutograd and inductor keep it and keep its order): when the graph runs, its Python
body appends the verdict to the pending checks.

Only tensors and constants reach an operator. What the check needs to write its error is split
at trace time (:func:`record_compiled`): the constants (the message function, the manifold's
name, the roles of the arguments, the tolerances) are stored once per traced call site, in a
table that :func:`torch.compiler.assume_constant_result` turns into an integer constant of the
graph; the tensors the message reads are inputs of the operator. So the boundary raises the
error, with the message, that eager mode raises, where the check's message reads only
constants and tensors. Where it reads something else (an object that is not a constant, such
as a manifold's bound method), the boundary raises the check's typed error naming the map or
the check, without the values (:func:`raise_compiled`).

The operator copies what it keeps: inductor reuses the buffer of an intermediate tensor once
its last reader has run, and the verdict's last reader in the graph is this operator, so a
reference would see the buffer's next contents (a NaN verdict overwritten by a finite one: a
violation lost). The copies are the verdict (one entry per argument, or one boolean per point)
and the tensors the message reads (per-point values of the checks, such as a cosine or an
eigenvalue; a whole argument only for the checks that name its entries, and the point arguments
of a map that checks them through its result on a manifold with a boundary, for the diagnosis
of a point on that boundary).

:mod:`riemfl.check_levels` imports this module where a compiled function records a check
(``import riemfl`` does not import torch).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch

from . import errors
from .check_levels import (
    ArgumentsFirst,
    append_pending,
    insert_pending,
    make_room,
    pending_position,
)

__all__ = ["record_compiled", "record_deferred", "raise_compiled", "traced_records", "hold", "held"]

#: How many checks compiled code has recorded, counted at trace time (:func:`traced_records`)
_TRACED = [0]


@torch.compiler.assume_constant_result
def traced_records() -> int:
    """How many checks traced code has recorded so far: a constant of the graph, so that a map
    call's check knows how many checks the map recorded before it (the difference)."""
    return _TRACED[0]


@torch.compiler.assume_constant_result
def _count_traced_record() -> int:
    _TRACED[0] += 1
    return _TRACED[0]


#: The constants of each traced check, by site number: ``(function, structure, with_verdict)``.
#: ``structure`` is the check's arguments with ``...`` where a tensor goes; ``with_verdict``:
#: ``function(verdict, *arguments)`` (a diagnosis from the verdict), else
#: ``function(*arguments)``.
_SITES: list[tuple[Callable[..., None], tuple, bool]] = []
_SITE_NUMBERS: dict[tuple, int] = {}


@torch.compiler.assume_constant_result
def _site(function: Callable[..., None], structure: tuple, with_verdict: bool) -> int:
    """The number of a check's constants in :data:`_SITES` (registered at the first trace)."""
    key = (function, structure, with_verdict)
    try:
        return _SITE_NUMBERS[key]
    except TypeError:  # an unhashable constant: a site of its own
        pass
    except KeyError:
        _SITE_NUMBERS[key] = len(_SITES)
    _SITES.append(key)
    return len(_SITES) - 1


#: Objects that the boundary's diagnosis of a traced check reads and a graph cannot hold (a
#: manifold), by number (:func:`hold`). An object stays here for the life of the process, as the
#: graphs that name it may run again; one entry per object traced.
_HELD: list[Any] = []


@torch.compiler.assume_constant_result
def hold(value: Any) -> int:
    """The number under which ``value`` is kept for the diagnoses at the boundary
    (:func:`held`): a constant of the graph, for an object that dynamo passes as a constant but
    cannot put into a tuple of constants."""
    for number, kept in enumerate(_HELD):
        if kept is value:
            return number
    _HELD.append(value)
    return len(_HELD) - 1


def held(number: int) -> Any:
    """The object kept under ``number`` by :func:`hold`."""
    return _HELD[number]


def _constant(value: Any) -> bool:
    return value is None or isinstance(
        value, (str, int, float, bool, type, types.FunctionType, types.BuiltinFunctionType)
    )


def _split(value: Any, tensors: list) -> tuple[Any, bool]:
    """``value`` with ``...`` for each tensor (appended to ``tensors``), and whether every other
    part is a constant that a graph can hold."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return ..., True
    if isinstance(value, tuple):
        parts = [_split(v, tensors) for v in value]
        return tuple(p for p, _ in parts), all(ok for _, ok in parts)
    return value, _constant(value)


def _fill(structure: Any, tensors: Any) -> Any:
    """The inverse of :func:`_split`: the tensors, in order, where the structure holds ``...``."""
    if structure is ...:
        return next(tensors)
    if isinstance(structure, tuple):
        return tuple(_fill(s, tensors) for s in structure)
    return structure


def record_compiled(
    verdict: torch.Tensor,
    diagnose: Callable[..., None],
    arguments: tuple,
    error: type[Exception],
    context: str,
    compiled: tuple[Callable[..., None], tuple] | None = None,
    arguments_first: ArgumentsFirst | None = None,
) -> None:
    """Record a check from code that ``torch.compile`` traces (see the module documentation).

    ``compiled``: a diagnosis from the verdict, ``(function, constants)``:
    ``function(verdict, *constants)`` raises the error (or returns: no violation) at the
    boundary, on copies of the tensors among ``constants`` (an object that is neither goes by
    :func:`hold`'s number). Otherwise ``diagnose(*arguments)`` runs there, on copies of the
    tensors among ``arguments``, where ``diagnose`` and the rest of ``arguments`` are
    constants; else the boundary raises ``error`` naming ``context``, without values.
    ``arguments_first``: a map call's check of its arguments
    (:class:`~riemfl.check_levels.ArgumentsFirst`, whose ``at`` counts :func:`traced_records`),
    placed before the checks traced inside the map; its tensors follow those of the full check
    in the operator's list (both sites are registered in the same trace, so both are known or
    neither is).
    """
    tensors: list[torch.Tensor] = []
    site = -1
    if compiled is not None:  # (its constants are the caller's: any object dynamo holds)
        structure, _ = _split(compiled[1], tensors)
        site = _site(compiled[0], structure, True)
    elif isinstance(diagnose, types.FunctionType):
        structure, constant = _split(arguments, tensors)
        if constant:
            site = _site(diagnose, structure, False)
        else:
            tensors = []
    first, back = -1, 0
    if arguments_first is not None:  # (its tensors follow those of the full check)
        first_structure, _ = _split(arguments_first.compiled[1], tensors)
        first = _site(arguments_first.compiled[0], first_structure, True)
        back = traced_records() - arguments_first.at
    _count_traced_record()
    record_deferred(verdict, error.__name__, context, site, tensors, first, back)


@torch.library.custom_op("riemfl::record_deferred", mutates_args=())
def record_deferred(
    verdict: torch.Tensor,
    error: str,
    context: str,
    site: int,
    values: list[torch.Tensor],
    arguments_first: int = -1,
    back: int = 0,
) -> None:
    """Append a copy of ``verdict`` (booleans: failed where True; floats: failed where not
    finite) to the pending checks, with the diagnosis of the check ``site`` of :data:`_SITES`
    on copies of ``values`` (``site`` -1: the error class named ``error``, in
    :mod:`riemfl.errors`, with the words ``context``). ``arguments_first`` (a site, or -1): a
    map call's check of its arguments from the verdict, inserted ``back`` places before the
    end (before the checks the map recorded), on the copies of ``values`` that follow those of
    ``site``. A tensor that appears more than once among ``values`` is copied once."""
    verdict = verdict.clone()
    make_room(1 + (arguments_first >= 0))  # (a violation raises here, out of the graph)
    copies = iter(_copies(values))
    known = 0 <= site < len(_SITES)  # not: -1, or a graph traced in another process
    if known:
        function, structure, with_verdict = _SITES[site]
        arguments = _fill(structure, copies)
    if 0 <= arguments_first < len(_SITES):
        check, first_structure, _ = _SITES[arguments_first]
        first_arguments = (verdict, *_fill(first_structure, copies))
        insert_pending(pending_position() - back, verdict, check, first_arguments, True)
    if not known:
        append_pending(verdict, raise_compiled, (getattr(errors, error), context))
        return
    append_pending(verdict, function, (verdict, *arguments) if with_verdict else arguments)


def _copies(values: list[torch.Tensor]) -> list[torch.Tensor]:
    """A copy of each tensor of ``values``, in order; one copy per distinct tensor."""
    by_identity: dict[int, torch.Tensor] = {}
    for v in values:
        if id(v) not in by_identity:
            by_identity[id(v)] = v.clone()
    return [by_identity[id(v)] for v in values]


@record_deferred.register_fake
def _(*arguments: object) -> None:  # no output: nothing to describe while tracing
    return None


def raise_compiled(error: type[Exception], context: str) -> None:
    """The boundary's error for a check recorded inside a compiled function without values."""
    raise error(
        f"{context}: a check failed inside a function compiled with torch.compile (a deferred "
        f"check whose message reads values that the graph does not keep). Run the step "
        f"without compiling it, or under riemfl.checks('eager'), for the message that names "
        f"the values"
    )


try:  # an operator with a side effect: kept, and kept in order, by AOTAutograd and inductor
    from torch._higher_order_ops.effects import _EffectType, _register_effectful_op

    _register_effectful_op(torch.ops.riemfl.record_deferred.default, _EffectType.ORDERED)
except ImportError:  # pragma: no cover - torch versions without the registry
    pass

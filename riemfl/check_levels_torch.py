"""How a deferred check is recorded inside a function that ``torch.compile`` traces.

Appending to riemfl's list of pending checks from traced code would make dynamo guard on the
list's length and recompile at every call. Inside a compiled function a check is therefore an
operator of the graph, ``riemfl::record_deferred``, registered as having an ordered side effect
(so that AOTAutograd and inductor keep it and keep its order): when the graph runs, its Python
body appends the verdict to the pending checks. Only tensors and constants reach it, so the
boundary raises the check's typed error naming the map or the check, without the values eager
mode's message holds (:func:`riemfl.check_levels.record`). :mod:`riemfl.check_levels` imports
this module where a compiled function records a check (``import riemfl`` does not import torch).
"""

from __future__ import annotations

import torch

from . import errors
from .check_levels import append_pending

__all__ = ["record_deferred"]


@torch.library.custom_op("riemfl::record_deferred", mutates_args=())
def record_deferred(verdict: torch.Tensor, error: str, context: str) -> None:
    """Append ``verdict`` (booleans: failed where True; floats: failed where not finite) to the
    pending checks, with the name of its error class (in :mod:`riemfl.errors`) and the words
    naming the check."""
    append_pending(verdict, raise_compiled, (getattr(errors, error), context))


@record_deferred.register_fake
def _(verdict: torch.Tensor, error: str, context: str) -> None:
    return None


def raise_compiled(error: type[Exception], context: str) -> None:
    """The boundary's error for a check recorded inside a compiled function."""
    raise error(
        f"{context}: a check failed inside a function compiled with torch.compile (a deferred "
        f"check; no values are kept there). Run the step without compiling it, or under "
        f"riemfl.checks('eager'), for the message that names the values"
    )


try:  # an operator with a side effect: kept, and kept in order, by AOTAutograd and inductor
    from torch._higher_order_ops.effects import _EffectType, _register_effectful_op

    _register_effectful_op(torch.ops.riemfl.record_deferred.default, _EffectType.ORDERED)
except ImportError:  # pragma: no cover - torch versions without the registry
    pass

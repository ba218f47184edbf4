"""Client faults, judged and recorded the same way on every engine.

A client *fails* when its computation raises, or when its upload is not what the server expects:
another set of keys, another shape, a complex or non-floating dtype, another floating dtype than
the model's, or a non-finite entry. Every engine drops such a client for that round (synchronous
rounds) or that arrival (asynchronous runs), keeps going with the others, and records the drop
with :class:`FaultRecorder`: an entry in ``History.warnings`` (client, where, reason) and a
:class:`ClientDroppedWarning`. A run stops with :class:`~riemfl.errors.ClientFailureError` only
when no client can make progress.

:func:`stack_problem` judges a stacked upload as a whole (keys, shapes and dtype: a wrong one
means the batched client call itself misbehaved, so the in-process engine reruns its clients one
at a time to find the culprits); :func:`row_problems` judges each row (finite values).
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..backend import is_torch
from ..manifolds.inputs import all_finite

__all__ = [
    "ClientDroppedWarning",
    "FaultRecorder",
    "stack_problem",
    "row_problems",
    "upload_problem",
    "failure_reason",
]

log = logging.getLogger("riemfl.federated")


class ClientDroppedWarning(UserWarning):
    """A client's contribution to a round or an arrival was dropped (its reason is in the
    message)."""


def failure_reason(exc: BaseException) -> str:
    """A one-line reason for a client whose computation raised."""
    return f"{type(exc).__name__}: {exc}"


def _dtype_name(dtype: Any) -> str:
    """``float64`` for numpy's and torch's float64 alike (numpy types and dtypes too)."""
    text = str(dtype)
    if text.startswith("torch."):
        return text.removeprefix("torch.")
    return str(np.dtype(dtype))


def _dtype_problem(a: Any, expected: Any | None) -> str | None:
    """Why the dtype of ``a`` is not acceptable (None when it is)."""
    if is_torch(a):
        if a.is_complex():
            return f"complex dtype {_dtype_name(a.dtype)}; expected real floating point"
        if not a.is_floating_point():
            return f"dtype {_dtype_name(a.dtype)}; expected real floating point"
    else:
        kind = getattr(getattr(a, "dtype", None), "kind", "O")
        if kind == "c":
            return f"complex dtype {a.dtype}; expected real floating point"
        if kind != "f":
            return f"dtype {getattr(a, 'dtype', type(a).__name__)}; expected real floating point"
    if expected is not None and _dtype_name(a.dtype) != _dtype_name(expected):
        return f"dtype {_dtype_name(a.dtype)}; expected {_dtype_name(expected)}"
    return None


def _exact_dtype_problem(a: Any, expected: Any) -> str | None:
    """Why ``a`` does not have exactly the dtype ``expected`` (None when it has)."""
    got = _dtype_name(a.dtype)
    want = _dtype_name(np.dtype(expected))
    return None if got == want else f"dtype {got}; expected {want}"


def stack_problem(
    uploads: Mapping[str, Any],
    expected: Mapping[str, tuple[int, ...]],
    m: int,
    dtype: Any | None = None,
    dtypes: Mapping[str, Any] | None = None,
) -> str | None:
    """Why a stacked upload of ``m`` clients has the wrong keys, shapes or dtype (None when
    right).

    ``expected`` maps each key to the shape of one client's upload; ``dtype``, when given, is
    the model's floating dtype (uploads must be real floating point in any case), except for the
    keys of ``dtypes``, whose arrays must have exactly that dtype (a compressed payload's packed
    bytes, indices or half-precision values:
    :meth:`~riemfl.federated.algorithm.SyncAlgorithm.wire_dtypes`).
    """
    dtypes = dtypes or {}
    if set(uploads) != set(expected):
        return f"uploads {sorted(uploads)} instead of {sorted(expected)}"
    for key in sorted(expected):
        value, shape = uploads[key], tuple(expected[key])
        got = tuple(getattr(value, "shape", ()))
        if not hasattr(value, "shape") or got != (m, *shape):
            where = got[1:] if len(got) >= 1 else got
            return f"upload {key!r} has shape {where}; expected {shape}"
        why = (
            _exact_dtype_problem(value, dtypes[key])
            if key in dtypes
            else _dtype_problem(value, dtype)
        )
        if why is not None:
            return f"upload {key!r} has {why}"
    return None


def _finite_rows(a: Any) -> np.ndarray:
    m = a.shape[0]
    if is_torch(a):
        import torch

        return torch.isfinite(a.detach().reshape(m, -1)).all(1).cpu().numpy()
    return np.isfinite(a.reshape(m, -1)).all(1)


def row_problems(uploads: Mapping[str, Any]) -> dict[int, str]:
    """Stack row -> why its upload is refused, for rows with a non-finite entry.

    Keys, shapes and dtype must already be right (:func:`stack_problem`).
    """
    reasons: dict[int, str] = {}
    for key in sorted(uploads):
        for j in np.flatnonzero(~_finite_rows(uploads[key])):
            reasons.setdefault(int(j), f"non-finite upload {key!r}")
    return reasons


def upload_problem(
    upload: Mapping[str, Any], expected: Mapping[str, tuple[int, ...]], dtype: Any | None = None
) -> str | None:
    """Why one client's (unstacked) upload is refused, or None: keys, shapes, dtype, finite."""
    if _plainly_fine(upload, expected, dtype):
        return None
    stacked = {k: v[None] if hasattr(v, "shape") else v for k, v in upload.items()}
    why = stack_problem(stacked, expected, 1, dtype)
    if why is not None:
        return why
    return row_problems(stacked).get(0)


def _plainly_fine(
    upload: Mapping[str, Any], expected: Mapping[str, tuple[int, ...]], dtype: Any | None
) -> bool:
    """The common case in few operations (one asynchronous arrival costs a few microseconds):
    numpy float arrays of the expected shapes, all finite. False means "look closer"."""
    if upload.keys() != expected.keys():
        return False
    for key, shape in expected.items():
        v = upload[key]
        if type(v) is not np.ndarray or v.dtype.kind != "f" or v.shape != tuple(shape):
            return False
        if dtype is not None and v.dtype != dtype:
            return False
        if not all_finite(v):
            return False
    return True


class FaultRecorder:
    """Records dropped clients in a history's warnings, the log and Python's warnings.

    Parameters
    ----------
    history : History
        Where the drops are listed (``history.warnings``).
    label : str, optional
        A prefix for the messages (e.g. a Flower job's name).
    """

    def __init__(self, history: Any, label: str = "") -> None:
        self.history = history
        self.label = label

    def drop(self, client: int, reason: str, **where: Any) -> None:
        """Record that ``client`` was dropped ``where`` (round/phase or step/time) for
        ``reason``."""
        entry = {
            **{k: _json_value(v) for k, v in where.items()},
            "client": int(client),
            "reason": str(reason),
        }
        self.history.warnings.append(entry)
        place = ", ".join(f"{k} {_json_value(v)}" for k, v in where.items())
        text = f"{self.label}{place}: client {int(client)} dropped: {reason}"
        log.info(text)
        warnings.warn(text, ClientDroppedWarning, stacklevel=3)


def _json_value(v: Any) -> Any:
    v = v.item() if isinstance(v, np.generic) else v
    return v if not (isinstance(v, float) and not math.isfinite(v)) else str(v)

"""JSON helpers shared by the histories of the sync and async engines and the rules' configs,
and the walk over an object's public scalar attributes that configs and fingerprints share."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import numpy as np

from ..backend import is_torch

__all__ = [
    "json_float",
    "from_json_float",
    "dump_json",
    "json_ready",
    "load_json",
    "describe_parameters",
    "instance_attributes",
    "public_attributes",
    "public_scalars",
]


def json_float(v: Any) -> Any:
    """NaN/inf are not JSON: write them as strings that :func:`from_json_float` reads back."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def json_ready(obj: Any) -> Any:
    """``obj`` as plain JSON values: dict keys as strings, tuples as lists, numpy and torch
    arrays and scalars as (nested) lists and numbers, NaN/inf as strings (:func:`json_float`)."""
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_ready(v) for v in obj]
    if isinstance(obj, np.ndarray | np.generic) or is_torch(obj):
        return json_ready(obj.tolist())
    return json_float(obj)


def from_json_float(v: Any) -> Any:
    if isinstance(v, str) and v in ("nan", "inf", "-inf"):
        return float(v)
    return v


def _json_default(obj: Any) -> Any:
    """numpy scalars and arrays in configs become plain JSON values."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dump_json(data: dict[str, Any], path: str | Path | None = None) -> str:
    """``data`` as indented JSON text; also written to ``path`` when given."""
    text = json.dumps(data, indent=1, default=_json_default)
    if path is not None:
        Path(path).write_text(text)
    return text


def load_json(source: str | Path) -> Any:
    """Parse JSON text, or the file at ``source`` when it is not JSON text itself."""
    text = str(source)
    if not text.lstrip().startswith("{"):
        text = Path(source).read_text()
    return json.loads(text)


def describe_parameters(obj: Any) -> dict[str, Any]:
    """``{"name": obj.name}`` plus every public scalar attribute (operator sets by their kind)."""
    return {"name": obj.name, **public_scalars(obj, convert=lambda v: getattr(v, "kind", v))}


def instance_attributes(obj: Any) -> list[tuple[str, Any]]:
    """``vars(obj)`` and the filled ``__slots__`` of its classes, as (name, value) pairs."""
    out = list(getattr(obj, "__dict__", {}).items())
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                out.append((name, getattr(obj, name)))
    return out


def public_attributes(obj: Any, exclude: Collection[str] = ()) -> list[tuple[str, Any]]:
    """The :func:`instance_attributes` of ``obj`` whose names have no leading underscore and are
    not in ``exclude``."""
    return [
        (k, v) for k, v in instance_attributes(obj) if not k.startswith("_") and k not in exclude
    ]


def public_scalars(
    obj: Any,
    *,
    exclude: Collection[str] = (),
    sequences: bool = False,
    convert: Callable[[Any], Any] | None = None,
) -> dict[str, Any]:
    """The public scalar attributes of ``obj``: its settings, as JSON values.

    Parameters
    ----------
    obj : object
    exclude : collection of str
        Attribute names left out (:func:`public_attributes`).
    sequences : bool
        Also take (nested) lists and tuples of scalars.
    convert : callable, optional
        Applied to each value before it is judged (and kept).

    Returns
    -------
    dict
        ``{name: value}`` in attribute order, for the values that are a bool, int, float, str or
        None (or, with ``sequences``, a list or tuple of them).
    """
    out: dict[str, Any] = {}
    for key, value in public_attributes(obj, exclude):
        value = value if convert is None else convert(value)
        if _is_scalar(value, sequences):
            out[key] = value
    return out


def _is_scalar(value: Any, sequences: bool) -> bool:
    if sequences and isinstance(value, list | tuple):
        return all(_is_scalar(v, sequences) for v in value)
    return isinstance(value, int | float | str | bool) or value is None

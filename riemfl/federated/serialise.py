"""JSON helpers shared by the histories of the sync and async engines and the rules' configs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["json_float", "from_json_float", "dump_json", "load_json", "describe_parameters"]


def json_float(v: Any) -> Any:
    """NaN/inf are not JSON: write them as strings that :func:`from_json_float` reads back."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


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
    out: dict[str, Any] = {"name": obj.name}
    for key, value in vars(obj).items():
        if key.startswith("_"):
            continue
        value = getattr(value, "kind", value)  # Operators("exact") -> "exact"
        if isinstance(value, int | float | str | bool) or value is None:
            out[key] = value
    return out

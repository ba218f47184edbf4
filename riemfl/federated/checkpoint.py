"""Atomic checkpoint files for long federated runs.

A checkpoint is one pickle (protocol 5) written to a temporary file in the target's directory,
flushed to disk and renamed over the target (``os.replace`` is atomic on POSIX and Windows), so
that a process killed at any moment leaves either the previous checkpoint or the new one, never
a torn file.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

from ..errors import CheckpointError

__all__ = ["save_checkpoint", "load_checkpoint", "CHECKPOINT_FORMAT"]

CHECKPOINT_FORMAT = 1


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` (with a format tag) to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            pickle.dump({"format": CHECKPOINT_FORMAT, **payload}, fh, protocol=5)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`.

    Raises
    ------
    CheckpointError
        If the file cannot be unpickled or has another format version.
    """
    try:
        with open(path, "rb") as fh:
            payload = pickle.load(fh)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
        raise CheckpointError(f"cannot read checkpoint {str(path)!r}: {exc}") from exc
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointError(
            f"checkpoint {str(path)!r} has format {found!r}; expected {CHECKPOINT_FORMAT}"
        )
    return payload

"""Checkpoint files for long federated runs: no pickle, a SHA-256 hash, atomic writes.

File layout (format 2; all integers little-endian)::

    b"RIEMFL-CHECKPOINT 2\\n"  magic and format line (20 bytes)
    hash                      32 bytes: SHA-256 of every byte after it, to the end of the file
    n                         8 bytes: unsigned length of the header
    header                    n bytes of ASCII JSON: {"arrays": [[dtype, shape], ...],
                              "payload": tree}
    array bytes               each array's C-order bytes, in the order of "arrays", back to back

The file ends right after the last array. ``dtype`` is numpy's ``dtype.str`` (``"<f8"``,
``"|b1"``, ``">i4"``); ``shape`` a list of ints. In ``tree``, JSON strings, ``true``/``false``,
``null``, lists, integers and finite floats stand for themselves (floats are written with
``repr``, so they come back bit-exact); everything else is an object with one key, its tag:

===================================  ===========================================================
``{"d": {key: tree}}``               dict whose keys are all str
``{"D": [[key, tree], ...]}``        dict with an int key; each key comes back with its type
``{"t": [tree, ...]}``               tuple
``{"f": "7ff8000000000000"}``        NaN or infinite float: its 8 bytes (``<d``) in hex
``{"i": "-1f..."}``                  int of more than 4096 bits, in hex
``{"a": k}``                         numpy array number ``k`` of ``"arrays"``
``{"s": k}``                         numpy scalar, stored as the 0-d array ``k``
``{"T": [k, dtype, device, grad]}``  torch tensor: the bytes of array ``k``, the name of its
                                     torch dtype (``"bfloat16"``), its device, ``requires_grad``
===================================  ===========================================================

Loading checks the magic line, then the hash over the whole rest of the file, and only then
parses the JSON header and builds arrays with :func:`numpy.frombuffer`: no code from the file is
ever run, and any truncation or changed byte raises :class:`~riemfl.errors.CheckpointError`.

A save writes ``{name}.{pid}.{host}-{random}.tmp`` in the target's directory, fsyncs it, renames
it over the target (``os.replace`` is atomic on POSIX and Windows) and fsyncs the directory, so
that a process killed at any moment leaves the previous checkpoint or the new one. Saves and
loads delete the temporary files of the same checkpoint left by writers (of this host) that are
no longer running. On Windows, which has no harmless liveness probe, such files are kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import reprlib
import secrets
import socket
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError, ParameterError
from ._payload import PayloadError, decode_payload, encode_payload

__all__ = ["save_checkpoint", "load_checkpoint", "require", "require_layout", "CHECKPOINT_FORMAT"]

CHECKPOINT_FORMAT = 2

_MAGIC_PREFIX = b"RIEMFL-CHECKPOINT "
_MAGIC = _MAGIC_PREFIX + f"{CHECKPOINT_FORMAT}\n".encode()
_DIGEST_SIZE = 32
_LENGTH = struct.Struct("<Q")
_CHUNK = 1 << 24
_DTYPE_STR = re.compile(r"[<>|][biufc][0-9]{1,2}")
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_READ_ERRORS = (OSError, ValueError, TypeError, KeyError, IndexError, OverflowError)
_READ_ERRORS += (RecursionError, RuntimeError, struct.error)


# ----------------------------------------------------------------------------- validation
def require(
    mapping: Any,
    key: Any,
    types: type | None | tuple[type | None, ...],
    *,
    where: str = "checkpoint",
) -> Any:
    """``mapping[key]``, checked to exist and to be an instance of ``types``.

    Parameters
    ----------
    mapping : dict
        E.g. a loaded checkpoint or one of its nested dicts.
    key : str or int
    types : type, None or tuple of them
        Accepted types; ``None`` stands for ``type(None)``. A bool is accepted only where
        ``bool`` (or ``object``) is listed, not as an ``int``.
    where : str
        Names ``mapping`` in the error message, e.g. ``"checkpoint 'run.ckpt'['server']"``.

    Returns
    -------
    object
        The value.

    Raises
    ------
    CheckpointError
        If ``mapping`` is not a mapping, lacks ``key``, or holds a value of another type; the
        message names ``where``, the key, the expected types and what was found.
    """
    accepted = tuple(
        type(None) if t is None else t for t in (types if isinstance(types, tuple) else (types,))
    )
    if not accepted or not all(isinstance(t, type) for t in accepted):
        raise ParameterError(
            f"require: types must be a type, None or a tuple of them, got {types!r}"
        )
    expected = " or ".join("None" if t is type(None) else t.__qualname__ for t in accepted)
    if not isinstance(mapping, Mapping):
        raise CheckpointError(
            f"{where} must be a dict with {key!r} ({expected}), found {type(mapping).__name__}"
        )
    if key not in mapping:
        keys = ", ".join(reprlib.repr(k) for k in list(mapping)[:10])
        raise CheckpointError(f"{where} has no {key!r} (expected {expected}); its keys: {keys}")
    value = mapping[key]
    is_bool_for_int = isinstance(value, bool) and not {bool, object} & set(accepted)
    if not isinstance(value, accepted) or is_bool_for_int:
        raise CheckpointError(
            f"{where}[{key!r}] must be {expected}, found {type(value).__name__} "
            f"{reprlib.repr(value)}"
        )
    return value


def require_layout(saved: Any, fresh: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``saved``, checked to be a dict of arrays laid out like ``fresh``: the same keys, and
    for each array the same shape and dtype (numpy arrays or torch tensors alike).

    Engines call it on a restored server or client state against the state of the fresh run,
    so that a checkpoint whose hash is valid but whose content does not fit the run (written
    by hand, or by another version) is refused here rather than failing later.

    Raises
    ------
    CheckpointError
        Naming ``where``, the key, what was expected and what was found.
    """
    if not isinstance(saved, Mapping) or set(saved) != set(fresh):
        found = sorted(saved) if isinstance(saved, Mapping) else type(saved).__name__
        raise CheckpointError(f"{where} must have the keys {sorted(fresh)}, found {found}")
    for key, want in fresh.items():
        got = saved[key]
        if not hasattr(want, "shape"):
            continue
        if (
            not hasattr(got, "shape")
            or tuple(got.shape) != tuple(want.shape)
            or str(got.dtype).removeprefix("torch.") != str(want.dtype).removeprefix("torch.")
        ):
            shown = (tuple(got.shape), str(got.dtype)) if hasattr(got, "shape") else type(got)
            raise CheckpointError(
                f"{where}[{key!r}] must be an array of shape {tuple(want.shape)} and dtype "
                f"{want.dtype}, found {shown}"
            )
    return dict(saved)


# ----------------------------------------------------------------------------- saving
def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically (layout: module docstring).

    Parameters
    ----------
    path : str or Path
        The checkpoint file; its directory is created if needed.
    payload : dict
        Nested dicts (str or int keys), lists, tuples, None, bool, int, float, str, numpy arrays
        and scalars (bool, int, float, complex dtypes) and torch tensors (any dtype; strided,
        with data). :func:`load_checkpoint` gives back an equal structure: tuples as tuples,
        floats bit for bit, arrays C-contiguous and writable with the same dtype, tensors with
        the same dtype on the same device (CPU when that device is gone).

    Raises
    ------
    CheckpointError
        If ``payload`` holds anything else (or a cycle); the message names where, e.g.
        ``payload['clients']['x']: object of type Foo``. Nothing is written then.
    OSError
        If writing fails; the previous checkpoint at ``path`` is left as it was.
    """
    path = Path(path)
    if type(payload) is not dict:
        raise CheckpointError(
            f"cannot save checkpoint {str(path)!r}: the payload must be a dict, "
            f"got {type(payload).__name__}"
        )
    try:
        tree, arrays = encode_payload(payload)
    except PayloadError as exc:
        raise CheckpointError(f"cannot save checkpoint {str(path)!r}: {exc}") from None
    table = [[a.dtype.str, list(a.shape)] for a in arrays]
    header = json.dumps({"arrays": table, "payload": tree}, separators=(",", ":"), allow_nan=False)
    body = [_LENGTH.pack(len(header)), header.encode("ascii"), *map(_as_bytes, arrays)]
    hasher = hashlib.sha256()
    for part in body:
        hasher.update(part)

    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(path)
    tmp = _temporary_path(path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(_MAGIC)
            fh.write(hasher.digest())
            for part in body:
                fh.write(part)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_directory(path.parent)


def _as_bytes(array: np.ndarray) -> np.ndarray:
    """The bytes of a C-contiguous array, as a flat uint8 view (no copy)."""
    return array.reshape(-1).view(np.uint8)


# ----------------------------------------------------------------------------- loading
def load_checkpoint(
    path: str | Path, required: Mapping[str, type | None | tuple[type | None, ...]] | None = None
) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`.

    Parameters
    ----------
    path : str or Path
    required : mapping, optional
        ``{key: type or tuple of types}`` of the top-level entries the caller needs (checked
        with :func:`require`), e.g. ``{"round": int, "server": dict, "m": (np.ndarray, None)}``.

    Returns
    -------
    dict
        The payload, equal to the one saved.

    Raises
    ------
    CheckpointError
        If the file is missing, empty, truncated, changed in any byte, of another format (a
        pickle included: it is never unpickled), or lacks a required entry or has one of another
        type. Never another exception type.
    """
    path = Path(path)
    _remove_stale_temporaries(path)
    try:
        with open(path, "rb") as fh:
            payload = _read(fh, os.fstat(fh.fileno()).st_size)
    except _READ_ERRORS as exc:
        raise CheckpointError(f"cannot read checkpoint {str(path)!r}: {exc}") from exc
    if type(payload) is not dict:
        raise CheckpointError(
            f"cannot read checkpoint {str(path)!r}: its payload is a "
            f"{type(payload).__name__}, expected a dict"
        )
    for key, types in (required or {}).items():
        require(payload, key, types, where=f"checkpoint {str(path)!r}")
    return payload


def _read(fh: Any, size: int) -> Any:
    """The payload of the open file ``fh`` of ``size`` bytes (ValueError when it is not one)."""
    magic = fh.read(len(_MAGIC))
    if magic != _MAGIC:
        raise ValueError(_not_a_checkpoint(magic))
    expected = fh.read(_DIGEST_SIZE)
    start = fh.tell()
    hasher, buffer = hashlib.sha256(), bytearray(_CHUNK)
    view = memoryview(buffer)
    while n := fh.readinto(buffer):
        hasher.update(view[:n])
    if hasher.digest() != expected:
        raise ValueError("its content does not match its SHA-256 hash (truncated or corrupt)")
    fh.seek(start)
    (length,) = _LENGTH.unpack(_read_exact(fh, _LENGTH.size))
    if length > size - fh.tell():
        raise ValueError(f"its header length {length} exceeds the file size {size}")
    header = json.loads(_read_exact(fh, length).decode("ascii"), parse_constant=_no_constant)
    if type(header) is not dict or set(header) != {"arrays", "payload"}:
        raise ValueError("its header is not an object with 'arrays' and 'payload'")
    if type(header["arrays"]) is not list:
        raise ValueError("its header's 'arrays' is not a list")
    specs = [_array_spec(entry, k) for k, entry in enumerate(header["arrays"])]
    total = sum(dtype.itemsize * math.prod(shape) for dtype, shape in specs)
    if total != size - fh.tell():
        raise ValueError(f"its arrays need {total} bytes, the file has {size - fh.tell()} left")
    arrays = []
    for dtype, shape in specs:
        data = bytearray(dtype.itemsize * math.prod(shape))
        _read_exact_into(fh, data)
        arrays.append(np.frombuffer(data, dtype=dtype).reshape(shape))
    return decode_payload(header["payload"], arrays)


def _not_a_checkpoint(start: bytes) -> str:
    if not start:
        return "the file is empty"
    if _MAGIC.startswith(start):
        return f"the file is truncated ({len(start)} bytes)"
    if start.startswith(_MAGIC_PREFIX):
        found = start[len(_MAGIC_PREFIX) :].split(b"\n")[0].decode("ascii", "replace")
        return f"it has checkpoint format {found!r}; this riemfl reads format {CHECKPOINT_FORMAT}"
    if start[:1] == b"\x80":
        return (
            "it is a pickle (format 1 or not a checkpoint at all); pickles are refused because "
            f"unpickling can run arbitrary code. Expected format {CHECKPOINT_FORMAT}"
        )
    return f"it is not a riemfl checkpoint (it does not start with {_MAGIC!r})"


def _no_constant(name: str) -> Any:
    raise ValueError(f"its header holds the non-JSON constant {name}")


def _read_exact(fh: Any, n: int) -> bytes:
    data = bytearray(n)
    _read_exact_into(fh, data)
    return bytes(data)


def _read_exact_into(fh: Any, data: bytearray) -> None:
    view, pos = memoryview(data), 0
    while pos < len(data):
        n = fh.readinto(view[pos:])
        if not n:
            raise ValueError(f"the file ends early (read {pos} of {len(data)} bytes)")
        pos += n


def _array_spec(entry: Any, k: int) -> tuple[np.dtype, tuple[int, ...]]:
    ok = type(entry) is list and len(entry) == 2 and type(entry[0]) is str
    ok = ok and _DTYPE_STR.fullmatch(entry[0]) is not None and type(entry[1]) is list
    if not ok or not all(type(s) is int and s >= 0 for s in entry[1]):
        raise ValueError(f"its header's array {k} is not [dtype, shape]: {reprlib.repr(entry)}")
    dtype = np.dtype(entry[0])
    if dtype.str != entry[0]:
        raise ValueError(f"its header's array {k} has the non-canonical dtype {entry[0]!r}")
    return dtype, tuple(entry[1])


# ----------------------------------------------------------------------------- temporary files
def _temporary_path(path: Path, pid: int) -> Path:
    """Where the writer ``pid`` of this host writes ``path`` before renaming it."""
    return path.with_name(f"{path.name}.{pid}.{_HOST}-{secrets.token_hex(8)}.tmp")


def _remove_stale_temporaries(path: Path) -> None:
    """Delete ``path``'s temporary files whose writer (on this host) is no longer running."""
    pattern = re.compile(rf"{re.escape(path.name)}\.([0-9]{{1,10}})\.{_HOST}-[0-9a-f]{{16}}\.tmp")
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is not None and not _is_running(int(match.group(1))):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def _is_running(pid: int) -> bool:
    """Whether process ``pid`` exists (True when unsure: a file is never taken from a writer)."""
    if os.name != "posix" or pid <= 0:  # os.kill(pid, 0) would terminate it on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # PermissionError: it exists, owned by another user
        return True
    return True


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable where the OS lets a directory be opened (not on Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)

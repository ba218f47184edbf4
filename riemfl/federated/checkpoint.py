"""Checkpoint files for long federated runs: no pickle, SHA-256 hashes, appended records.

A run saves its checkpoint many times. Each save **appends one record** to the file: the rows the
run recorded since the previous save and the run's full state (small, and of a size that does not
grow with the run), so that the cost of a save does not grow with the length of the history. The
checkpoint is the state of the file's last complete record, with the rows of that record and of
every record before it.

File layout (format 3; all integers little-endian)::

    b"RIEMFL-CHECKPOINT 3\\n"  magic and format line (20 bytes)
    record, record, ...       back to back, to the end of the file

    a record:
    R, S                      8 bytes each: unsigned lengths of its rows part and its state part
    check                     8 bytes: the first 8 bytes of the SHA-256 of the 16 bytes of R, S
    chain hash                32 bytes: SHA-256 of the previous record's chain hash (32 zero bytes
                              for the first record), the 16 bytes of R, S and the R + S bytes
    rows part                 R bytes: row entries, each an 8-byte length and a tree
    state part                S bytes: one tree, the payload

    a tree:
    n                         8 bytes: unsigned length of the header
    header                    n bytes of ASCII JSON: {"arrays": [[dtype, shape], ...],
                              "payload": tree}
    array bytes               each array's C-order bytes, in the order of "arrays", back to back

A tree ends right after its last array. ``dtype`` is numpy's ``dtype.str`` (``"<f8"``,
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

**Reading** checks the magic line, then each record's check and chain hash, and only then parses
JSON and builds arrays with :func:`numpy.frombuffer`: no code from the file is ever run. A record
whose head or body runs past the end of the file is a *torn tail*, what a process killed while
appending leaves: it is dropped, and the record before it is the checkpoint. Any other damage (a
changed byte anywhere, a file with no complete record, a file of another kind or format) raises
:class:`~riemfl.errors.CheckpointError` naming it. The check tells a torn tail from a damaged
length: a length changed by damage fails its check instead of looking like a tail cut short.

**Writing.** :meth:`CheckpointFile.write` (and :func:`save_checkpoint`) makes a new file of one
record atomically: ``{name}.{pid}.{host}-{random}.tmp`` in the target's directory, fsynced,
renamed over the target (``os.replace`` is atomic on POSIX and Windows), the directory fsynced.
:meth:`CheckpointFile.save` cuts the file back to the end of the last record it wrote or read
(dropping a torn tail), appends one record and syncs its data (``fdatasync``; with
``background_sync``, in a thread, waited for by the next call): a process killed at any moment
leaves the previous checkpoint or the new one. The state parts of all records but the
last are superseded; when they would exceed both the live bytes (what a file of one record would
hold) and :data:`COMPACT_MIN_BYTES`, the save instead writes a new file (atomically, as above) of
one record: the rows parts of every record (kept by the writer, copied byte for byte) and the new
state. So a file holds at most twice its live bytes or its live bytes plus
:data:`COMPACT_MIN_BYTES`, and a save writes on average about twice the bytes of its own record,
however long the run.

Saves and loads delete the temporary files of the same checkpoint left by writers (of this host)
that are no longer running (:func:`remove_stale_temporaries`), so a writer killed inside the first
write of a run leaves a checkpoint that is simply not there yet. On Windows, which has no harmless
liveness probe, such files are kept.

**Consistency.** The hashes say that the bytes are the ones written, not that the state agrees
with itself. The run core checks, after the hashes, what it reads of a run's checkpoint (the step,
the clock, the history's rows) and each engine's state checks its own fields
(:meth:`~riemfl.federated.run_core.Steps.validate`); :func:`inconsistent`, :func:`require_count`
and :func:`require_amount` make their errors.
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
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError, ParameterError
from ._payload import PayloadError, decode_payload, encode_payload

__all__ = [
    "CheckpointFile",
    "save_checkpoint",
    "load_checkpoint",
    "require",
    "require_layout",
    "inconsistent",
    "require_count",
    "require_amount",
    "remove_stale_temporaries",
    "CHECKPOINT_FORMAT",
    "COMPACT_MIN_BYTES",
]

CHECKPOINT_FORMAT = 3

#: Dead bytes (superseded states) a file may hold before a save compacts it, whatever its size.
COMPACT_MIN_BYTES = 4 << 20

_MAGIC_PREFIX = b"RIEMFL-CHECKPOINT "
_MAGIC = _MAGIC_PREFIX + f"{CHECKPOINT_FORMAT}\n".encode()
_LENGTH = struct.Struct("<Q")
_LENGTHS = struct.Struct("<QQ")
_CHECK_SIZE = 8
_DIGEST_SIZE = 32
_HEAD_SIZE = _LENGTHS.size + _CHECK_SIZE + _DIGEST_SIZE
_NO_CHAIN = bytes(_DIGEST_SIZE)
_DTYPE_STR = re.compile(r"[<>|][biufc][0-9]{1,2}")
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_READ_ERRORS = (OSError, ValueError, TypeError, KeyError, IndexError, OverflowError)
_READ_ERRORS += (RecursionError, RuntimeError, struct.error)

#: Byte strings written one after the other (``bytes`` or flat ``uint8`` arrays).
_Chunks = list[Any]


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


# ----------------------------------------------------------------------------- consistency
def inconsistent(field: str, held: Any, expected: str) -> CheckpointError:
    """The error for a field of a loaded checkpoint that disagrees with the rest of it.

    The hashes of a checkpoint say that its bytes are the ones written; a state written by hand
    or by a faulty writer can still contradict itself. Engines check the state they loaded
    (:meth:`~riemfl.federated.run_core.Steps.validate`) and raise this error.

    Parameters
    ----------
    field : str
        What holds the value, e.g. ``"state key 'round'"``.
    held : object
        The value found there.
    expected : str
        What the rest of the checkpoint implies, e.g. ``"6, the checkpoint's step"``.

    Returns
    -------
    CheckpointError
        With the message ``"{field} holds {held}; expected {expected}"``.
    """
    return CheckpointError(f"{field} holds {reprlib.repr(held)}; expected {expected}")


def require_count(field: str, value: Any, minimum: int = 0, maximum: int | None = None) -> int:
    """``value``, checked to be an int (not a bool) in ``[minimum, maximum]``.

    Parameters
    ----------
    field : str
        What holds the value (:func:`inconsistent`).
    value : object
        A counter, an index, a step.
    minimum, maximum : int
        The bounds (``maximum`` None: none above).

    Returns
    -------
    int

    Raises
    ------
    CheckpointError
        :func:`inconsistent`, naming ``field``.
    """
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)
    if not ok or value < minimum or (maximum is not None and value > maximum):
        bound = "" if maximum is None else f" and <= {maximum}"
        raise inconsistent(field, value, f"an int >= {minimum}{bound}")
    return int(value)


def require_amount(field: str, value: Any, minimum: float = 0.0) -> float:
    """``value``, checked to be a finite real number >= ``minimum`` (a clock, a total).

    Parameters
    ----------
    field : str
        What holds the value (:func:`inconsistent`).
    value : object
        A clock, a total.
    minimum : float
        The smallest value accepted.

    Returns
    -------
    float

    Raises
    ------
    CheckpointError
        :func:`inconsistent`, naming ``field``.
    """
    ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < minimum:
        raise inconsistent(field, value, f"a finite number >= {minimum:g}")
    return float(value)


# ----------------------------------------------------------------------------- the file of a run
class CheckpointFile:
    """The checkpoint file of one run, saved again and again (layout: module docstring).

    :meth:`save` appends one record (the rows recorded since the previous save and the whole
    state) to the file that this object last wrote or read, so that a save costs the same at
    any length of the run, and compacts the file when half of it is superseded states;
    :meth:`write` makes a new file; :meth:`load` reads one. The object keeps the rows parts of
    the file's records (the bytes a compaction copies: about the size of the history as JSON),
    where the file ends and the chain hash of its last record.

    Parameters
    ----------
    path : str or Path
        The checkpoint file; its directory is created on the first write if needed.
    background_sync : bool
        Sync an appended record to disk (``fdatasync``) in a background thread, so that the
        caller computes on while the disk catches up (a sync can take longer than the rest
        of a save). The record is in the operating system's cache when :meth:`save` returns,
        so a killed process leaves it; the next call of any method, and :meth:`wait`, first
        waits for the sync (and raises its error). Default: sync before :meth:`save` returns.

    Attributes
    ----------
    path : Path
    dropped : int
        Bytes of a torn last record that :meth:`load` found and left out (what a process killed
        while appending leaves); the next :meth:`save` cuts them off.
    """

    def __init__(self, path: str | Path, *, background_sync: bool = False) -> None:
        self.path = Path(path)
        self.background_sync = background_sync
        self._syncing: threading.Thread | None = None
        self._sync_error: OSError | None = None
        self.dropped = 0
        self._end: int | None = None  # where the last record written or read ends
        self._chain = _NO_CHAIN
        self._identity: tuple[int, int] | None = None
        self._rows = bytearray()  # the rows parts of every record, back to back

    # ------------------------------------------------------------------ reading
    def load(
        self,
        required: Mapping[str, type | None | tuple[type | None, ...]] | None = None,
        *,
        rows: bool = True,
    ) -> tuple[dict[str, Any], list[Any]]:
        """The checkpoint: the last complete record's payload, and the row entries.

        Parameters
        ----------
        required : mapping, optional
            ``{key: type or tuple of types}`` of the top-level entries the caller needs
            (checked with :func:`require`), e.g. ``{"step": int, "state": dict}``.
        rows : bool
            Decode the row entries (False: the list is empty, the payload alone is decoded).

        Returns
        -------
        payload : dict
            Equal to the payload saved last.
        entries : list
            The row entries of every record up to the last, in the order they were saved.

        Raises
        ------
        CheckpointError
            If the file is missing, has no complete record, is changed in any byte, of another
            kind or format (a pickle included: it is never unpickled), or lacks a required entry
            or has one of another type; the message names the damage.
        OSError
            Only the error of this object's pending background sync (:meth:`wait`).
        """
        self.wait()
        remove_stale_temporaries(self.path)
        try:
            with open(self.path, "rb") as fh:
                stat = os.fstat(fh.fileno())
                scan = _scan(fh, stat.st_size)
            payload = _decode_tree(scan.state)
            entries = [
                entry
                for k, part in enumerate(scan.rows if rows else ())
                for entry in _decode_entries(part, k)
            ]
        except _READ_ERRORS as exc:
            raise CheckpointError(f"cannot read checkpoint {str(self.path)!r}: {exc}") from exc
        if type(payload) is not dict:
            raise CheckpointError(
                f"cannot read checkpoint {str(self.path)!r}: its payload is a "
                f"{type(payload).__name__}, expected a dict"
            )
        for key, types in (required or {}).items():
            require(payload, key, types, where=f"checkpoint {str(self.path)!r}")
        self._end, self._chain = scan.end, scan.chain
        self._identity = (stat.st_dev, stat.st_ino)
        self._rows = bytearray().join(scan.rows)
        self.dropped = stat.st_size - scan.end
        return payload, entries

    # ------------------------------------------------------------------ writing
    def write(self, payload: dict[str, Any], rows: Sequence[Any] = ()) -> None:
        """Replace the file, atomically, by one record of ``rows`` and ``payload``.

        Parameters
        ----------
        payload : dict
            Nested dicts (str or int keys), lists, tuples, None, bool, int, float, str, numpy
            arrays and scalars (bool, int, float, complex dtypes) and torch tensors (any dtype;
            strided, with data). :meth:`load` gives back an equal structure: tuples as tuples,
            floats bit for bit, arrays C-contiguous and writable with the same dtype, tensors
            with the same dtype on the same device (CPU when that device is gone).
        rows : sequence
            Row entries (each of the same kinds of values).

        Raises
        ------
        CheckpointError
            If ``payload`` or an entry holds anything else (or a cycle); the message names
            where, e.g. ``payload['clients']['x']: object of type Foo``. Nothing is written then.
        OSError
            If writing fails; the previous file at ``path`` is left as it was.
        """
        entries = b"".join(_entry_chunks(rows, self.path))
        state = _state_chunks(payload, self.path)
        self.wait()
        self._replace(entries, state)

    def save(self, payload: dict[str, Any], rows: Sequence[Any] = ()) -> None:
        """Add ``rows`` (the entries since the previous save) and the new ``payload``.

        Appends one record to the file this object wrote or read last. Writes a new file of
        one record instead (atomically, as :meth:`write`, with the rows of every record so far)
        when there is none yet, when the file is no longer the one it wrote or read (deleted,
        replaced or cut short since), and when the superseded states would exceed both the live
        bytes and :data:`COMPACT_MIN_BYTES` (a compaction).

        Parameters
        ----------
        payload, rows
            As for :meth:`write`.

        Raises
        ------
        CheckpointError
            If ``payload`` or an entry cannot be saved (nothing is written).
        OSError
            If writing fails (the file then still holds its previous checkpoint), or if the
            sync of this record or of the previous one does (the record is written).
        """
        entries = b"".join(_entry_chunks(rows, self.path))
        state = _state_chunks(payload, self.path)
        self.wait()
        if self._end is not None:
            size = _HEAD_SIZE + len(entries) + _size(state)
            live = len(_MAGIC) + len(self._rows) + size
            if self._end + size - live <= max(live, COMPACT_MIN_BYTES):
                if self._append(entries, state):
                    return
        self._replace(self._rows + entries, state)

    def wait(self) -> None:
        """Return once the last record appended is on disk (at once without
        ``background_sync``).

        Raises
        ------
        OSError
            The error of that record's sync, if it failed (the record may then be lost in a
            power cut, though not when the process is killed).
        """
        thread, self._syncing = self._syncing, None
        if thread is not None:
            thread.join()
        error, self._sync_error = self._sync_error, None
        if error is not None:
            raise error

    def _append(self, entries: bytes, state: _Chunks) -> bool:
        """Append one record; False (nothing written) when the file is not the one known."""
        record, chain = _record(self._chain, [entries], state)
        try:
            fd = os.open(self.path, os.O_RDWR | getattr(os, "O_BINARY", 0))
        except FileNotFoundError:
            return False
        ours = False
        try:
            stat = os.fstat(fd)
            ours = (stat.st_dev, stat.st_ino) == self._identity and stat.st_size >= self._end
            if ours:
                os.ftruncate(fd, self._end)  # a torn record left by a killed writer goes
                os.lseek(fd, self._end, os.SEEK_SET)
                _write_all(fd, record)
        except BaseException:
            if ours:  # the previous checkpoint stays the last record
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self._end)
            os.close(fd)
            raise
        if not ours:
            os.close(fd)
            return False
        self._end += _size(record)
        self._chain = chain
        self._rows += entries
        if self.background_sync:
            self._syncing = threading.Thread(target=self._sync, args=(fd,), name="riemfl-sync")
            self._syncing.start()
        else:
            self._sync(fd)
            self.wait()
        return True

    def _sync(self, fd: int) -> None:
        """Sync the data of ``fd`` to disk and close it; an error is kept for :meth:`wait`."""
        try:
            getattr(os, "fdatasync", os.fsync)(fd)
        except OSError as exc:
            self._sync_error = exc
        finally:
            os.close(fd)

    def _replace(self, entries: bytes | bytearray, state: _Chunks) -> None:
        """A new file of one record, written atomically."""
        record, chain = _record(_NO_CHAIN, [entries], state)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.path)
        tmp = _temporary_path(self.path, os.getpid())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        try:
            try:
                _write_all(fd, [_MAGIC, *record])
                os.fsync(fd)
                stat = os.fstat(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        _fsync_directory(self.path.parent)
        self._end, self._chain = len(_MAGIC) + _size(record), chain
        self._identity = (stat.st_dev, stat.st_ino)
        self._rows = bytearray(entries)
        self.dropped = 0


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically, as a file of one record without rows
    (:meth:`CheckpointFile.write`).

    Parameters
    ----------
    path : str or Path
        The checkpoint file; its directory is created if needed.
    payload : dict
        What :meth:`CheckpointFile.write` takes; :func:`load_checkpoint` gives it back.

    Raises
    ------
    CheckpointError
        If ``payload`` is not a dict or holds anything else than the supported values (or a
        cycle); the message names where. Nothing is written then.
    OSError
        If writing fails; the previous checkpoint at ``path`` is left as it was.
    """
    CheckpointFile(path).write(payload)


def load_checkpoint(
    path: str | Path, required: Mapping[str, type | None | tuple[type | None, ...]] | None = None
) -> dict[str, Any]:
    """The payload of the last complete record of ``path`` (:meth:`CheckpointFile.load`).

    Parameters
    ----------
    path : str or Path
    required : mapping, optional
        ``{key: type or tuple of types}`` of the top-level entries the caller needs (checked
        with :func:`require`), e.g. ``{"round": int, "server": dict, "m": (np.ndarray, None)}``.

    Returns
    -------
    dict
        The payload, equal to the one saved last.

    Raises
    ------
    CheckpointError
        As :meth:`CheckpointFile.load`. Never another exception type.
    """
    return CheckpointFile(path).load(required, rows=False)[0]


# ----------------------------------------------------------------------------- encoding
def _state_chunks(payload: Any, path: Path) -> _Chunks:
    if type(payload) is not dict:
        raise CheckpointError(
            f"cannot save checkpoint {str(path)!r}: the payload must be a dict, "
            f"got {type(payload).__name__}"
        )
    return _tree_chunks(payload, path, "")


def _entry_chunks(entries: Iterable[Any], path: Path) -> _Chunks:
    chunks: _Chunks = []
    for k, entry in enumerate(entries):
        tree = _tree_chunks(entry, path, f"row entry {k}: ")
        chunks += [_LENGTH.pack(_size(tree)), *tree]
    return chunks


def _tree_chunks(value: Any, path: Path, what: str) -> _Chunks:
    try:
        tree, arrays = encode_payload(value)
    except PayloadError as exc:
        raise CheckpointError(f"cannot save checkpoint {str(path)!r}: {what}{exc}") from None
    table = [[a.dtype.str, list(a.shape)] for a in arrays]
    header = json.dumps({"arrays": table, "payload": tree}, separators=(",", ":"), allow_nan=False)
    return [_LENGTH.pack(len(header)), header.encode("ascii"), *map(_as_bytes, arrays)]


def _as_bytes(array: np.ndarray) -> np.ndarray:
    """The bytes of a C-contiguous array, as a flat uint8 view (no copy)."""
    return array.reshape(-1).view(np.uint8)


def _size(chunks: _Chunks) -> int:
    return sum(len(chunk) for chunk in chunks)


def _check(lengths: bytes) -> bytes:
    return hashlib.sha256(lengths).digest()[:_CHECK_SIZE]


def _record(previous: bytes, entries: _Chunks, state: _Chunks) -> tuple[_Chunks, bytes]:
    """The chunks of a record after the one of chain hash ``previous``, and its chain hash."""
    lengths = _LENGTHS.pack(_size(entries), _size(state))
    hasher = hashlib.sha256(previous)
    hasher.update(lengths)
    for chunk in (*entries, *state):
        hasher.update(chunk)
    chain = hasher.digest()
    return [lengths + _check(lengths) + chain, *entries, *state], chain


def _write_all(fd: int, chunks: _Chunks) -> None:
    for chunk in chunks:
        view = memoryview(chunk)
        while view.nbytes:
            view = view[os.write(fd, view) :]


# ----------------------------------------------------------------------------- decoding
@dataclass
class _Scan:
    """The complete records of a file: where they end, the last chain hash, their parts."""

    end: int
    chain: bytes
    state: memoryview
    rows: list[bytes]  # the rows part of each record


def _scan(fh: Any, size: int) -> _Scan:
    """The complete records of the open file ``fh`` up to byte ``size`` (ValueError naming the
    damage when they are not a checkpoint)."""
    magic = fh.read(len(_MAGIC))
    if magic != _MAGIC:
        raise ValueError(_not_a_checkpoint(magic))
    pos, k, chain = len(_MAGIC), 0, _NO_CHAIN
    rows: list[bytes] = []
    state = memoryview(b"")
    while size - pos >= _HEAD_SIZE:
        head = _read_exact(fh, _HEAD_SIZE)
        lengths, check = head[: _LENGTHS.size], head[_LENGTHS.size : -_DIGEST_SIZE]
        if _check(lengths) != check:
            raise ValueError(f"the lengths of its record {k} (at byte {pos}) are damaged")
        r, s = _LENGTHS.unpack(lengths)
        if r + s > size - pos - _HEAD_SIZE:
            break  # a torn tail: the record was being appended when its writer stopped
        body = bytearray(r + s)
        _read_exact_into(fh, body)
        hasher = hashlib.sha256(chain)
        hasher.update(lengths)
        hasher.update(body)
        if hasher.digest() != head[-_DIGEST_SIZE:]:
            raise ValueError(
                f"its record {k} (bytes {pos} to {pos + _HEAD_SIZE + r + s}) does not match its "
                "SHA-256 hash (damaged)"
            )
        rows.append(bytes(body[:r]))
        state, chain = memoryview(body)[r:], hasher.digest()
        pos, k = pos + _HEAD_SIZE + r + s, k + 1
    if k == 0:
        raise ValueError(f"it holds no complete record (truncated to {size} bytes)")
    return _Scan(pos, chain, state, rows)


def _decode_entries(part: bytes, k: int) -> list[Any]:
    """The row entries of the rows part of record ``k``."""
    view, pos, entries = memoryview(part), 0, []
    while pos < len(view):
        n = _LENGTH.unpack_from(view, pos)[0] if len(view) - pos >= _LENGTH.size else -1
        if not 0 <= n <= len(view) - pos - _LENGTH.size:
            raise ValueError(f"its record {k}'s row entry {len(entries)} overruns the record")
        pos += _LENGTH.size
        try:
            entries.append(_decode_tree(view[pos : pos + n]))
        except _READ_ERRORS as exc:
            raise ValueError(f"its record {k}'s row entry {len(entries)}: {exc}") from exc
        pos += n
    return entries


def _decode_tree(view: memoryview) -> Any:
    """The value of a tree (ValueError when the bytes are not one)."""
    if len(view) < _LENGTH.size:
        raise ValueError(f"a tree of {len(view)} bytes has no header length")
    (length,) = _LENGTH.unpack_from(view)
    pos = _LENGTH.size + length
    if pos > len(view):
        raise ValueError(f"its header length {length} exceeds the {len(view)} bytes of its tree")
    text = bytes(view[_LENGTH.size : pos]).decode("ascii")
    header = json.loads(text, parse_constant=_no_constant)
    if type(header) is not dict or set(header) != {"arrays", "payload"}:
        raise ValueError("its header is not an object with 'arrays' and 'payload'")
    if type(header["arrays"]) is not list:
        raise ValueError("its header's 'arrays' is not a list")
    specs = [_array_spec(entry, k) for k, entry in enumerate(header["arrays"])]
    sizes = [dtype.itemsize * math.prod(shape) for dtype, shape in specs]
    if sum(sizes) != len(view) - pos:
        raise ValueError(f"its arrays need {sum(sizes)} bytes, the tree has {len(view) - pos} left")
    arrays = []
    for (dtype, shape), n in zip(specs, sizes, strict=True):
        data = bytearray(view[pos : pos + n])  # writable, aligned, owned by the array
        arrays.append(np.frombuffer(data, dtype=dtype).reshape(shape))
        pos += n
    return decode_payload(header["payload"], arrays)


def _not_a_checkpoint(start: bytes) -> str:
    if not start:
        return "the file is empty"
    if _MAGIC.startswith(start):
        return f"the file is truncated ({len(start)} bytes)"
    if start.startswith(_MAGIC_PREFIX):
        found = start[len(_MAGIC_PREFIX) :].split(b"\n")[0].decode("ascii", "replace")
        if found == "2":
            return (
                "it has checkpoint format '2', a single hashed copy of the whole run rewritten at "
                "every save (riemfl before format 3); this riemfl reads format 3, which appends a "
                "record per save. Start the run afresh: resume=False, or `riemfl run --overwrite`"
            )
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


def remove_stale_temporaries(path: str | Path) -> None:
    """Delete the temporary files of checkpoint ``path`` whose writer (on this host) is no
    longer running.

    What a writer killed inside :meth:`CheckpointFile.write` leaves (before the rename): a run
    started on ``path`` then finds no checkpoint, and none of the leftovers. Every load and save
    calls it; ``riemfl run`` calls it on its ``--out`` folder before judging what the folder
    holds. A temporary file of a running writer, or any file when liveness cannot be probed
    (Windows), is kept.

    Parameters
    ----------
    path : str or Path
        The checkpoint file (it need not exist); nothing happens when its folder cannot be read.
    """
    path = Path(path)
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

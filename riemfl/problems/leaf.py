r"""Readers for the LEAF FEMNIST and Shakespeare JSON files a user already has (no downloads).

LEAF (Caldas et al. 2018) stores a federated data set as JSON files of the form::

    {"users": ["f0000_14", ...],
     "num_samples": [154, ...],
     "user_data": {"f0000_14": {"x": [...], "y": [...]}, ...}}

(``hierarchies`` and other extra keys are ignored), usually several files per split under
``data/train/`` and ``data/test/``. The users are the natural clients (Licudi et al. 2025,
Sec. 4.1: writers for FEMNIST; for Shakespeare the speaking roles, which
:func:`riemfl.problems.partition.natural_partition` can group by play).

* FEMNIST: ``x`` is a list of 784 floats per sample (a 28 x 28 image row-major, LEAF's values are
  in [0, 1]), ``y`` an int label in 0..61 (10 digits, 26 upper-case, 26 lower-case letters).
* Shakespeare: ``x`` is a list of 80-character strings (LEAF's window), ``y`` the next character.
  Characters become ints with a vocabulary: LEAF's own 80 letters :data:`LEAF_LETTERS` (the
  ``ALL_LETTERS`` of LEAF's ``language_utils.py``, index = position in that string) by default,
  or one built from the data (sorted distinct characters of every x and y read), or a string
  given by the caller.

Every reader returns a dict ``user -> (x, y)`` of numpy arrays in file order (files sorted by
name, users in each file's ``users`` order), and raises :class:`~riemfl.errors.DataError` for a
missing path, invalid JSON, a missing key, counts that disagree, a user listed twice or a sample of
the wrong shape or value.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import is_int
from ..errors import DataError, ParameterError

__all__ = [
    "LEAF_LETTERS",
    "FEMNIST_CLASSES",
    "FEMNIST_PIXELS",
    "read_leaf_json",
    "load_femnist",
    "load_shakespeare",
    "leaf_client_datasets",
]

#: LEAF's Shakespeare vocabulary (``ALL_LETTERS`` in LEAF's ``models/utils/language_utils.py``):
#: 80 characters; a character's id is its position here.
LEAF_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"

#: FEMNIST's number of classes (labels 0..61) and pixels per image (28 x 28).
FEMNIST_CLASSES = 62
FEMNIST_PIXELS = 784

UserData = dict[str, tuple[list[Any], list[Any]]]


def _json_files(path: str | os.PathLike, split: str | None) -> list[Path]:
    p = Path(path)
    if split is not None:
        if split not in ("train", "test"):
            raise ParameterError(f"split must be None, 'train' or 'test', got {split!r}")
        if not p.is_dir():
            raise DataError(f"split={split!r} needs a directory holding {split}/, got {str(p)!r}")
        p = p / split
    if not p.exists():
        raise DataError(f"LEAF path {str(p)!r} does not exist")
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix == ".json" and f.is_file())
        if not files:
            raise DataError(f"no .json files in directory {str(p)!r}")
        return files
    return [p]


def read_leaf_json(path: str | os.PathLike, split: str | None = None) -> UserData:
    """The raw per-user ``(x, y)`` lists of LEAF JSON files, checked for consistency.

    Parameters
    ----------
    path : str or PathLike
        A LEAF JSON file, or a directory whose ``*.json`` files are all read (sorted by name).
    split : {"train", "test"}, optional
        Read ``path / split`` instead (``path`` being LEAF's ``data/`` directory).

    Returns
    -------
    dict
        ``user -> (x list, y list)``, in file order.

    Raises
    ------
    DataError
        A missing path or no JSON file; a file that is not JSON or not an object with
        ``users``, ``num_samples`` and ``user_data``; ``users`` and ``num_samples`` of different
        lengths; a user without data, whose ``x`` and ``y`` differ in length or disagree with
        ``num_samples``; a user present twice (in one file or across files).
    """
    out: UserData = {}
    for f in _json_files(path, split):
        try:
            with open(f, encoding="utf-8") as fh:
                blob = json.load(fh)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DataError(f"{f.name}: not valid JSON ({exc})") from None
        except OSError as exc:
            raise DataError(f"cannot read {str(f)!r}: {exc}") from None
        if not isinstance(blob, dict):
            raise DataError(f"{f.name}: expected a JSON object, got {type(blob).__name__}")
        missing = [k for k in ("users", "num_samples", "user_data") if k not in blob]
        if missing:
            raise DataError(f"{f.name}: missing LEAF key(s) {missing} (found {sorted(blob)})")
        users, counts, data = blob["users"], blob["num_samples"], blob["user_data"]
        if not isinstance(users, list) or not isinstance(counts, list):
            raise DataError(f"{f.name}: 'users' and 'num_samples' must be lists")
        if not isinstance(data, dict):
            raise DataError(f"{f.name}: 'user_data' must be an object keyed by user")
        if len(users) != len(counts):
            raise DataError(f"{f.name}: {len(users)} users but {len(counts)} num_samples entries")
        for user, count in zip(users, counts, strict=True):
            if not isinstance(user, str):
                raise DataError(f"{f.name}: user ids must be strings, got {user!r}")
            if user in out:
                raise DataError(f"{f.name}: user {user!r} appears twice")
            entry = data.get(user)
            if not isinstance(entry, dict) or "x" not in entry or "y" not in entry:
                raise DataError(f"{f.name}: user {user!r} has no {{'x': ..., 'y': ...}} data")
            x, y = entry["x"], entry["y"]
            if not isinstance(x, list) or not isinstance(y, list):
                raise DataError(f"{f.name}: user {user!r}: 'x' and 'y' must be lists")
            if len(x) != len(y):
                raise DataError(f"{f.name}: user {user!r} has {len(x)} x but {len(y)} y")
            if count != len(x):
                raise DataError(
                    f"{f.name}: user {user!r}: num_samples says {count!r}, data has {len(x)}"
                )
            out[user] = (x, y)
    return out


def load_femnist(
    path: str | os.PathLike, split: str | None = None, *, image_shape: bool = True
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """LEAF FEMNIST per writer.

    Parameters
    ----------
    path, split
        As in :func:`read_leaf_json`.
    image_shape : bool, default True
        Return images of shape (n, 1, 28, 28) (for :class:`riemfl.nn.SmallCNN` with
        ``image_size=28, n_classes=62``); False keeps LEAF's rows of 784.

    Returns
    -------
    dict
        ``writer -> (x, y)``: x float32 (FEMNIST has 805,263 images; float64 would double the
        3 GB), values as stored (LEAF's are in [0, 1]), y int64 in 0..61.

    Raises
    ------
    DataError
        As :func:`read_leaf_json`, and a sample that is not 784 finite numbers or a label that
        is not an int in 0..61.
    """
    out = {}
    for user, (xs, ys) in read_leaf_json(path, split).items():
        try:
            x = np.array(xs, dtype=np.float32)
        except (TypeError, ValueError):
            raise DataError(
                f"FEMNIST user {user!r}: every x must be a list of {FEMNIST_PIXELS} numbers "
                "(ragged or non-numeric x)"
            ) from None
        if x.shape != (len(xs), FEMNIST_PIXELS):
            raise DataError(
                f"FEMNIST user {user!r}: images have shape {x.shape[1:]}, expected "
                f"({FEMNIST_PIXELS},) each (28 x 28)"
            )
        if not np.isfinite(x).all():
            raise DataError(f"FEMNIST user {user!r}: images contain NaN or infinite values")
        y = _int_labels(ys, user)
        out[user] = (x.reshape(-1, 1, 28, 28) if image_shape else x, y)
    return out


def _int_labels(ys: list[Any], user: str) -> np.ndarray:
    if not all(is_int(v) for v in ys):
        bad = next(v for v in ys if not is_int(v))
        raise DataError(f"FEMNIST user {user!r}: labels must be ints, got {bad!r}")
    y = np.array(ys, dtype=np.int64)
    if y.size and (y.min() < 0 or y.max() >= FEMNIST_CLASSES):
        raise DataError(f"FEMNIST user {user!r}: labels span {y.min()}..{y.max()}; expected 0..61")
    return y


def load_shakespeare(
    path: str | os.PathLike,
    split: str | None = None,
    *,
    vocabulary: str = "leaf",
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], str]:
    """LEAF Shakespeare per role, characters mapped to ints.

    Parameters
    ----------
    path, split
        As in :func:`read_leaf_json`.
    vocabulary : str, default "leaf"
        ``"leaf"``: :data:`LEAF_LETTERS` (80 characters, LEAF's mapping); ``"data"``: the
        sorted distinct characters of everything read (so a test split read separately can get
        a different mapping: pass the train vocabulary explicitly to the test read); any other
        string: that string itself, as the ordered vocabulary (its characters must be
        distinct, and at least 2 of them, to tell it from the two keywords).

    Returns
    -------
    data : dict
        ``user -> (x, y)``: x int64 of shape (n, L) (L = 80 for LEAF), y int64 of shape (n,).
    vocabulary : str
        The vocabulary used (id = position).

    Raises
    ------
    DataError
        As :func:`read_leaf_json`, and an x that is not a string, windows of different lengths,
        a y that is not one character, or a character outside a given vocabulary.
    """
    raw = read_leaf_json(path, split)
    length: int | None = None
    for user, (xs, ys) in raw.items():
        for s in xs:
            if not isinstance(s, str):
                raise DataError(f"Shakespeare user {user!r}: x must be strings, got {s!r:.40}")
            if length is None:
                length = len(s)
            elif len(s) != length:
                raise DataError(
                    f"Shakespeare user {user!r}: a window of {len(s)} characters, earlier "
                    f"ones have {length} (LEAF's are 80)"
                )
        for c in ys:
            if not isinstance(c, str) or len(c) != 1:
                raise DataError(f"Shakespeare user {user!r}: y must be one character, got {c!r}")
    if vocabulary == "leaf":
        vocab = LEAF_LETTERS
    elif vocabulary == "data":
        chars: set[str] = set()
        for xs, ys in raw.values():
            chars.update(*xs, *ys)
        vocab = "".join(sorted(chars))
    elif isinstance(vocabulary, str) and len(vocabulary) >= 2:
        if len(set(vocabulary)) != len(vocabulary):
            raise ParameterError("load_shakespeare: the vocabulary repeats characters")
        vocab = vocabulary
    else:
        raise ParameterError(
            f"load_shakespeare: vocabulary must be 'leaf', 'data' or a string of >= 2 distinct "
            f"characters, got {vocabulary!r}"
        )
    table = np.full(max(map(ord, vocab), default=0) + 1, -1, dtype=np.int64)
    table[[ord(c) for c in vocab]] = np.arange(len(vocab))
    out = {}
    for user, (xs, ys) in raw.items():
        codes = np.array([ord(c) for s in xs for c in s] + [ord(c) for c in ys], dtype=np.int64)
        ids = np.where(codes < table.size, table[np.minimum(codes, table.size - 1)], -1)
        if (ids < 0).any():
            bad = chr(int(codes[np.flatnonzero(ids < 0)[0]]))
            raise DataError(
                f"Shakespeare user {user!r}: character {bad!r} is not in the vocabulary "
                f"({'LEAF_LETTERS' if vocabulary == 'leaf' else repr(vocab)}); use "
                "vocabulary='data' to build one from the files"
            )
        n = len(xs)
        x = ids[: n * (length or 0)].reshape(n, length or 0)
        out[user] = (x, ids[n * (length or 0) :])
    return out, vocab


def leaf_client_datasets(
    train: dict[str, tuple[np.ndarray, np.ndarray]],
    test: dict[str, tuple[np.ndarray, np.ndarray]],
) -> tuple[list[str], list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]]:
    """Pair LEAF's train and test reads per user into ``TorchClientTrainer`` datasets.

    Returns
    -------
    users : list of str
        The train users, in order (the natural partition: client k is ``users[k]``).
    datasets : list of (X_train, y_train, X_test, y_test)

    Raises
    ------
    DataError
        When the two reads do not have the same users (LEAF's sample-wise split keeps every
        user in both).
    """
    only_train = [u for u in train if u not in test]
    only_test = [u for u in test if u not in train]
    if only_train or only_test:
        raise DataError(
            f"train and test users differ: {len(only_train)} only in train "
            f"({only_train[:3]}), {len(only_test)} only in test ({only_test[:3]})"
        )
    users = list(train)
    return users, [(*train[u], *test[u]) for u in users]

r"""Data for the federated problems: the label-sorted split, an MNIST reader, scikit-learn's digits.

Nothing here downloads anything (riemfl is offline by design): :func:`load_mnist` reads files the
user already has, and :func:`load_digits` reads the 8 x 8 digits set that ships inside
scikit-learn, the default offline stand-in for MNIST.

Pixel scale (Zhang et al. 2024, App. A.4.1, leave it unstated): every loader returns float64
features scaled to [0, 1] (MNIST bytes / 255, digits / 16) and **not centred**, as the paper
mentions no centring. With the paper's step size :math:`\eta = 1/\beta` the kPCA iterates do not
depend on the scale; the plotted :math:`\|\operatorname{grad} f\|` and :math:`f - f^*` do.
"""

from __future__ import annotations

import gzip
import os
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import integer
from ..errors import DataError, ParameterError
from ..extras import import_extra
from .checks import float_matrix

__all__ = [
    "label_sorted_indices",
    "label_sorted_split",
    "load_mnist",
    "load_digits",
    "NPZ_KEYS",
]

#: (features key, labels key) pairs that :func:`load_mnist` accepts in an ``.npz`` archive, tried
#: in this order; ``{split}`` is ``train`` or ``test``.
NPZ_KEYS: tuple[tuple[str, str], ...] = (
    ("x_{split}", "y_{split}"),  # keras' mnist.npz
    ("{split}_images", "{split}_labels"),
    ("images", "labels"),
    ("X", "y"),
    ("x", "y"),
    ("data", "target"),  # scikit-learn's Bunch names
)

_IDX_IMAGES, _IDX_LABELS = 2051, 2049  # magic numbers: 0x00000803 and 0x00000801
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_IDX_PREFIX = {"train": "train", "test": "t10k"}


# ---------------------------------------------------------------------- splitting
def label_sorted_indices(labels: Any, n_clients: int) -> list[np.ndarray]:
    """Row indices of the label-sorted split (see :func:`label_sorted_split`).

    Parameters
    ----------
    labels : array-like, shape (N,)
        One label per row (any sortable dtype).
    n_clients : int
        n, with ``1 <= n <= N``.

    Returns
    -------
    list of numpy.ndarray of int
        n contiguous blocks of the stable argsort of ``labels``; the first ``N mod n`` blocks
        have ``N // n + 1`` rows, the others ``N // n``.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise DataError(f"labels must be a non-empty 1-D array, got shape {labels.shape}")
    # every client gets at least one row
    n_clients = integer(
        n_clients, "label_sorted_indices: n_clients (<= the number of rows)", 1, labels.size
    )
    order = np.argsort(labels, kind="stable")
    return np.array_split(order, n_clients)


def label_sorted_split(features: Any, labels: Any, n_clients: int) -> list[np.ndarray]:
    r"""Split rows among clients the way Zhang et al. (2024, App. A.4.1) split MNIST.

    "Sort the rows in increasing order of their associated digits and then split every N/n rows
    among each client": a **stable** sort by label (rows with equal labels keep their order),
    then n contiguous blocks of nearly equal size (sizes differ by at most one; with MNIST's
    60,000 rows and n = 10, exactly 6000 each, so neighbouring digits share a client because the
    digit counts are not exactly 6000). This gives the heterogeneous kPCA of Figs. 1-3 and 5.

    Parameters
    ----------
    features : array-like, shape (N, d)
    labels : array-like, shape (N,)
    n_clients : int
        n, with ``1 <= n <= N``.

    Returns
    -------
    list of numpy.ndarray
        n float64 arrays ``A_i`` of shape (p_i, d), in client order.

    Raises
    ------
    DataError
        When features and labels have different numbers of rows.
    ParameterError
        When ``n_clients`` is not an int in ``1..N``.
    """
    features = float_matrix(features, "features")
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != features.shape[0]:
        raise DataError(
            f"features have {features.shape[0]} rows but labels have shape {labels.shape}; "
            "expected one label per row"
        )
    return [features[idx] for idx in label_sorted_indices(labels, n_clients)]


# ---------------------------------------------------------------------- MNIST
def load_mnist(path: str | os.PathLike, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """Read MNIST (or any IDX/npz image set) from files the user has.

    Parameters
    ----------
    path : str or PathLike
        One of

        * an ``.npz`` archive holding a features array and a labels array under one of the key
          pairs of :data:`NPZ_KEYS`: ``x_train``/``y_train`` (keras' ``mnist.npz``; ``x_test``/
          ``y_test`` with ``split="test"``), ``train_images``/``train_labels``,
          ``images``/``labels``, ``X``/``y``, ``x``/``y``, ``data``/``target``;
        * the IDX images file ``train-images-idx3-ubyte`` (or ``t10k-...`` for the test split;
          gzipped ``.gz`` or raw; the ``train-images.idx3-ubyte`` spelling too); the labels file
          is found beside it by replacing ``images-idx3`` with ``labels-idx1`` (``.gz`` or not);
          the labels file's path works the same way in reverse;
        * a directory holding that IDX pair, or else ``mnist.npz``.
    split : {"train", "test"}
        Which part to read where the files name it (Zhang et al. use the 60,000 training images).

    Returns
    -------
    features : numpy.ndarray of float64, shape (N, rows * cols)
        Images flattened row-major (N x 784 for MNIST) and scaled to [0, 1]: integer pixels are
        divided by 255; floating pixels already in [0, 1] are kept, floating pixels in (1, 255]
        are divided by 255.
    labels : numpy.ndarray of int64, shape (N,)

    Raises
    ------
    DataError
        Missing files, a bad IDX magic number or dtype code, a truncated or corrupt file, image
        and label counts that differ, an npz archive without an accepted key pair, pixel values
        outside [0, 255] or non-integer labels.
    """
    if split not in _IDX_PREFIX:
        raise ParameterError(f"split must be 'train' or 'test', got {split!r}")
    p = Path(path)
    if p.is_dir():
        p = _find_in_directory(p, split)
    if not p.exists():
        raise DataError(f"MNIST file {str(p)!r} does not exist")
    if p.suffix == ".npz":
        return _load_npz(p, split)
    images, labels = _idx_pair(p)
    x = _read_idx(images, _IDX_IMAGES, 3, "images")
    y = _read_idx(labels, _IDX_LABELS, 1, "labels")
    return _finish(x, y, f"{images.name} / {labels.name}")


def _find_in_directory(d: Path, split: str) -> Path:
    """The IDX images file (or mnist.npz) of ``split`` in directory ``d``."""
    prefix = _IDX_PREFIX[split]
    candidates = [
        d / f"{prefix}-images{sep}idx3-ubyte{gz}" for sep in ("-", ".") for gz in ("", ".gz")
    ]
    candidates.append(d / "mnist.npz")
    for c in candidates:
        if c.exists():
            return c
    raise DataError(
        f"no MNIST files in directory {str(d)!r} (looked for {[c.name for c in candidates]})"
    )


def _idx_pair(p: Path) -> tuple[Path, Path]:
    """(images, labels) paths from either one of them."""
    name = p.name
    for a, b in (("images", "labels"), ("labels", "images")):
        for sep in ("-", "."):
            src = f"{a}{sep}idx{'3' if a == 'images' else '1'}-ubyte"
            dst = f"{b}{sep}idx{'3' if b == 'images' else '1'}-ubyte"
            if src in name:
                stem = name.replace(src, dst).removesuffix(".gz")
                for cand in (p.with_name(stem), p.with_name(stem + ".gz")):
                    if cand.exists():
                        return (p, cand) if a == "images" else (cand, p)
                raise DataError(
                    f"found {name!r} but not its {b} file {stem!r} (or {stem + '.gz'!r}) beside "
                    f"it in {str(p.parent)!r}"
                )
    raise DataError(
        f"cannot tell what {name!r} is: expected an .npz archive, an IDX file named like "
        "'train-images-idx3-ubyte[.gz]' / 'train-labels-idx1-ubyte[.gz]', or a directory"
    )


def _read_bytes(p: Path) -> bytes:
    try:
        if p.suffix == ".gz":
            with gzip.open(p, "rb") as fh:
                return fh.read()
        return p.read_bytes()
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise DataError(f"{p.name} is not a complete gzip file ({exc})") from None
    except OSError as exc:
        raise DataError(f"cannot read {str(p)!r}: {exc}") from None


def _read_idx(p: Path, magic: int, expected_ndim: int, what: str) -> np.ndarray:
    """Parse one IDX file: 2 zero bytes, a dtype code, ndim, ndim big-endian int32 sizes, data.

    MNIST's files use the unsigned-byte code (magic 2051 for images, 2049 for labels); the other
    IDX dtype codes are accepted too, as long as the rank is the expected one.
    """
    raw = _read_bytes(p)
    if len(raw) < 4:
        raise DataError(f"{p.name} is truncated: {len(raw)} bytes, not even the 4-byte header")
    code, ndim = raw[2], raw[3]
    if raw[:2] != b"\x00\x00" or code not in _IDX_DTYPES or ndim != expected_ndim:
        found = int.from_bytes(raw[:4], "big")
        raise DataError(
            f"{p.name}: bad magic number {found} (0x{found:08x}); expected {magic} "
            f"(0x{magic:08x}) for an IDX {what} file of rank {expected_ndim}"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{p.name} is truncated: {len(raw)} bytes, header needs {header}")
    shape = tuple(int.from_bytes(raw[4 + 4 * j : 8 + 4 * j], "big") for j in range(ndim))
    dtype = np.dtype(_IDX_DTYPES[code])
    need = header + int(np.prod(shape)) * dtype.itemsize
    if len(raw) < need:
        raise DataError(
            f"{p.name} is truncated: {len(raw)} bytes, but its header {shape} needs {need}"
        )
    if len(raw) > need:
        raise DataError(f"{p.name} has {len(raw) - need} bytes after the {shape} array it declares")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)


#: The first bytes of an npz archive (a zip file: a local file header, or an empty archive).
_ZIP_STARTS = (b"PK\x03\x04", b"PK\x05\x06")


def _load_npz(p: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(p, "rb") as fh:
            start = fh.read(4)
    except OSError as exc:
        raise DataError(f"cannot read {str(p)!r}: {exc}") from None
    if start not in _ZIP_STARTS:
        raise DataError(
            f"{str(p)!r} is not an npz archive: expected a zip file (starting with b'PK\\x03"
            f"\\x04', as numpy.savez writes), got a file starting with {start!r}"
        )
    try:
        archive = np.load(p, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"cannot read {str(p)!r} as an npz archive: {exc}") from None
    with archive:
        keys = set(archive.files)
        for fk, lk in NPZ_KEYS:
            fk, lk = fk.format(split=split), lk.format(split=split)
            if fk in keys and lk in keys:
                try:
                    x, y = archive[fk], archive[lk]
                except (OSError, ValueError, EOFError, zlib.error, zipfile.BadZipFile) as exc:
                    raise DataError(f"{p.name}: cannot read {fk!r}/{lk!r}: {exc}") from None
                return _finish(x, y, f"{p.name}[{fk!r}, {lk!r}]")
    pairs = [(a.format(split=split), b.format(split=split)) for a, b in NPZ_KEYS]
    raise DataError(f"{p.name} holds keys {sorted(keys)}; expected one of the pairs {pairs}")


def _finish(x: np.ndarray, y: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Flatten, check counts and values, scale to [0, 1]."""
    if x.ndim < 2 or y.ndim != 1:
        raise DataError(
            f"{what}: features of shape {x.shape} and labels of shape {y.shape}; expected "
            "(N, ...) images and (N,) labels"
        )
    if x.shape[0] != y.shape[0]:
        raise DataError(f"{what}: {x.shape[0]} images but {y.shape[0]} labels")
    if x.shape[0] == 0:
        raise DataError(f"{what}: the data set is empty")
    if not np.issubdtype(y.dtype, np.integer):
        if not (np.issubdtype(y.dtype, np.floating) and np.array_equal(y, np.round(y))):
            raise DataError(f"{what}: labels must be integers, got dtype {y.dtype}")
    features = x.reshape(x.shape[0], -1).astype(np.float64)
    if not np.isfinite(features).all():
        raise DataError(f"{what}: images contain NaN or infinite values")
    lo, hi = features.min(), features.max()
    if lo < 0 or hi > 255:
        raise DataError(f"{what}: pixel values span [{lo}, {hi}]; expected [0, 255] or [0, 1]")
    if np.issubdtype(x.dtype, np.integer) or hi > 1:
        features /= 255.0
    return features, y.astype(np.int64)


# ---------------------------------------------------------------------- digits
def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 8 x 8 handwritten digits, the offline stand-in for MNIST.

    Returns
    -------
    features : numpy.ndarray of float64, shape (1797, 64)
        Pixels (0..16 in the source) divided by 16, so in [0, 1].
    labels : numpy.ndarray of int64, shape (1797,)

    Raises
    ------
    MissingDependencyError
        When scikit-learn is not installed (``pip install 'riemfl[data]'``).
    """
    datasets = import_extra("sklearn.datasets", "load_digits (scikit-learn ships the digits)")
    x, y = datasets.load_digits(return_X_y=True)
    return np.asarray(x, dtype=np.float64) / 16.0, np.asarray(y, dtype=np.int64)

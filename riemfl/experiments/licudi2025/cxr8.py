"""Reader for the NIH ChestX-ray14 files a user already has (CXR8: Wang et al. 2017; no downloads),
and the per-patient clients of Licudi et al. 2025, Table 2.

The expected directory ``root`` holds

* ``Data_Entry_2017.csv``, the official label file: one row per image, read by its columns
  ``"Image Index"`` (the PNG's file name), ``"Finding Labels"`` (findings joined by ``"|"``, or
  ``"No Finding"``) and ``"Patient ID"``; other columns ("Follow-up #", "Patient Age", "Patient
  Gender", "View Position", ...) are ignored;
* the PNGs, in either layout: ``root/images/*.png``, or the official release's
  ``root/images_001/images/*.png`` ... ``root/images_012/images/*.png``.

Labels: the 14 findings of ChestX-ray14 in the fixed order :data:`FINDINGS` (the 8 of ChestX-ray8
first). Licudi et al. 2025 (App. B.3) train on the 8 conditions :data:`PAPER_CONDITIONS`
(Atelectasis, Cardiomegaly, Effusion, Infiltration, Mass, Nodule, Pneumonia, Pneumothorax), the
default here; ``conditions=FINDINGS`` gives all 14. A row whose findings are all outside the
chosen conditions (or "No Finding") gets an all-zero target.

Images: read with Pillow (a dependency of matplotlib: ``pip install "riemfl[data]"``), converted
to grey (the few RGBA files too), resized to ``size x size`` with Pillow's bilinear filter (the
paper's 128 x 128; smaller sizes for quick runs) and scaled to [0, 1] as float32 of shape
(n, channels, size, size) (``channels=3`` replicates the grey image, as the paper does to match
ImageNet's input). Pixels are read only when asked for (:func:`load_images`,
:func:`iter_images`): at 128 x 128 the 112,120 images take 7.3 GB as float32.

Clients (Licudi et al. 2025, App. B.3: "each [patient] assigned wholly to one of 30 clients";
the rule is not given): the patients, in a seeded random order, are dealt round-robin to the
clients (:func:`riemfl.problems.partition.natural_partition`), then within each client a share
``test_fraction`` of its patients (rounded) become its test patients, so no patient is in both a
training and a test split. :func:`cxr8_clients` reads a subset of whole patients by default
(``max_images``).

Every reader raises :class:`~riemfl.errors.DataError` for a missing directory, a missing or
malformed CSV (missing columns, an empty or repeated image name, an empty patient, an unknown
finding, "No Finding" together with a finding), missing image files and unreadable images.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..._validation import integer, optional, real
from ...errors import DataError, MissingDependencyError, ParameterError
from ...problems.checks import data_rng
from ...problems.partition import natural_partition

__all__ = [
    "CSV_NAME",
    "FINDINGS",
    "NO_FINDING",
    "PAPER_CLIENTS",
    "PAPER_CONDITIONS",
    "PAPER_IMAGE_SIZE",
    "CXR8Index",
    "cxr8_clients",
    "iter_images",
    "load_images",
    "patient_clients",
    "read_cxr8_index",
]

#: the label file of the NIH release
CSV_NAME = "Data_Entry_2017.csv"
#: the 14 findings of ChestX-ray14, in the order of the targets' columns
FINDINGS = (
    "Atelectasis",
    "Cardiomegaly",
    "Effusion",
    "Infiltration",
    "Mass",
    "Nodule",
    "Pneumonia",
    "Pneumothorax",
    "Consolidation",
    "Edema",
    "Emphysema",
    "Fibrosis",
    "Pleural_Thickening",
    "Hernia",
)
#: the label of an image without any finding
NO_FINDING = "No Finding"
#: the 8 conditions of Licudi et al. 2025, App. B.3 (ChestX-ray8's), the default targets
PAPER_CONDITIONS = FINDINGS[:8]
#: the image side and number of clients of Licudi et al. 2025, App. B.3 and Sec. 4.1
PAPER_IMAGE_SIZE = 128
PAPER_CLIENTS = 30
#: the columns read from the CSV
COLUMNS = ("Image Index", "Finding Labels", "Patient ID")


@dataclass(frozen=True)
class CXR8Index:
    """The rows kept from ``Data_Entry_2017.csv`` and their image files; no pixel is read.

    Attributes
    ----------
    names : tuple of str
        The image file names, in CSV order.
    paths : tuple of Path
        The file of each image.
    patients : numpy.ndarray of str, shape (n,)
        The patient of each image.
    targets : numpy.ndarray of float32, shape (n, K)
        Multi-hot targets over ``conditions``.
    conditions : tuple of str
        The K conditions, the targets' columns.
    """

    names: tuple[str, ...]
    paths: tuple[Path, ...]
    patients: np.ndarray
    targets: np.ndarray
    conditions: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.names)


def _conditions(conditions: Sequence[str]) -> tuple[str, ...]:
    chosen = tuple(conditions)
    unknown = [c for c in chosen if c not in FINDINGS]
    if not chosen or unknown or len(set(chosen)) != len(chosen):
        raise ParameterError(
            f"conditions must be distinct names of FINDINGS {FINDINGS}, got {chosen!r}"
        )
    return chosen


def _findings(field: str, where: str) -> set[str]:
    """The findings of one "Finding Labels" field."""
    parts = [p.strip() for p in field.split("|")]
    if not field.strip() or "" in parts:
        raise DataError(f"{where}: empty finding in 'Finding Labels' {field!r}")
    if NO_FINDING in parts:
        if len(parts) > 1:
            raise DataError(f"{where}: {NO_FINDING!r} together with findings in {field!r}")
        return set()
    unknown = [p for p in parts if p not in FINDINGS]
    if unknown:
        raise DataError(
            f"{where}: unknown finding(s) {unknown} in {field!r}; expected {NO_FINDING!r} or "
            f"names of {FINDINGS}"
        )
    return set(parts)


def _read_csv(path: Path) -> tuple[list[str], list[str], list[set[str]]]:
    """The image names, patients and findings of every row of the label file."""
    names: list[str] = []
    patients: list[str] = []
    findings: list[set[str]] = []
    seen: set[str] = set()
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in COLUMNS if c not in header]
            if missing:
                raise DataError(f"{path.name}: missing column(s) {missing} (found {header})")
            for row in reader:
                where = f"{path.name} line {reader.line_num}"
                name, labels, patient = ((row.get(c) or "").strip() for c in COLUMNS)
                if not name or not patient:
                    raise DataError(f"{where}: empty 'Image Index' or 'Patient ID'")
                if name in seen:
                    raise DataError(f"{where}: image {name!r} is listed twice")
                seen.add(name)
                names.append(name)
                patients.append(patient)
                findings.append(_findings(labels, where))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{path.name}: not a readable CSV file ({exc})") from None
    except OSError as exc:
        raise DataError(f"cannot read {str(path)!r}: {exc}") from None
    if not names:
        raise DataError(f"{path.name}: no image rows")
    return names, patients, findings


def _image_files(root: Path) -> dict[str, Path]:
    """File name -> path of every PNG under ``root/images`` and ``root/images_*/images``."""
    folders = [root / "images"] + sorted(root.glob("images_*/images"))
    folders = [f for f in folders if f.is_dir()]
    if not folders:
        raise DataError(
            f"no image folder under {str(root)!r}: expected images/ or images_001/images/, ..."
        )
    files: dict[str, Path] = {}
    for folder in folders:
        with os.scandir(folder) as entries:
            for entry in entries:
                if not entry.name.lower().endswith(".png"):
                    continue
                if entry.name in files:
                    raise DataError(
                        f"image {entry.name!r} is in both {str(files[entry.name].parent)!r} "
                        f"and {str(folder)!r}"
                    )
                files[entry.name] = Path(entry.path)
    return files


def _whole_patients(patients: np.ndarray, max_images: int, seed: int) -> np.ndarray:
    """The rows of the patients, in a seeded random order, whose running total of images stays
    within ``max_images`` (rows in their original order)."""
    ids, inverse, counts = np.unique(patients, return_inverse=True, return_counts=True)
    order = data_rng(seed, "cxr8-subset").permutation(ids.size)
    kept = order[np.cumsum(counts[order]) <= max_images]
    if kept.size == 0:
        raise ParameterError(
            f"max_images={max_images} is below the {counts[order[0]]} images of the first patient "
            "drawn; patients are never split"
        )
    return np.flatnonzero(np.isin(inverse, kept))


def read_cxr8_index(
    root: str | os.PathLike,
    *,
    conditions: Sequence[str] = PAPER_CONDITIONS,
    max_images: int | None = None,
    seed: int = 0,
    missing: str = "error",
) -> CXR8Index:
    """Read ``root/Data_Entry_2017.csv`` and find every row's image file.

    Parameters
    ----------
    root : str or PathLike
        The directory of the NIH files (module docstring).
    conditions : sequence of str, default PAPER_CONDITIONS
        The targets' columns, names of :data:`FINDINGS`.
    max_images : int, optional
        Keep whole patients, drawn in a random order (``seed``), while their images number at
        most this many. Default: every row.
    seed : int, default 0
        Seed of that draw.
    missing : {"error", "skip"}, default "error"
        What a row whose image file is absent does: raise, or be left out (a partial download:
        only some of the ``images_0NN`` folders). The subset of ``max_images`` is drawn after.

    Returns
    -------
    CXR8Index

    Raises
    ------
    DataError
        A missing directory, CSV or image folder, a malformed CSV (module docstring), a missing
        image file (``missing="error"``), or no row left.
    ParameterError
        An unknown condition, ``missing`` other than "error" or "skip", a ``max_images`` below
        one patient's images.
    """
    chosen = _conditions(conditions)
    max_images = optional(integer, max_images, "read_cxr8_index: max_images", minimum=1)
    if missing not in ("error", "skip"):
        raise ParameterError(f"missing must be 'error' or 'skip', got {missing!r}")
    base = Path(root)
    if not base.is_dir():
        raise DataError(f"CXR8 directory {str(base)!r} does not exist")
    if not (base / CSV_NAME).is_file():
        raise DataError(f"{CSV_NAME} not found in {str(base)!r}")
    names, patients, findings = _read_csv(base / CSV_NAME)
    files = _image_files(base)
    absent = [n for n in names if n not in files]
    if absent and missing == "error":
        raise DataError(
            f"{len(absent)} image file(s) listed in {CSV_NAME} not found under {str(base)!r} "
            f"(first: {absent[:3]}); pass missing='skip' to leave them out"
        )
    rows = np.array([i for i, n in enumerate(names) if n in files], dtype=np.int64)
    if rows.size == 0:
        raise DataError(f"none of the images listed in {CSV_NAME} is under {str(base)!r}")
    patient_ids = np.array(patients)[rows]
    if max_images is not None:
        keep = _whole_patients(patient_ids, max_images, seed)
        rows, patient_ids = rows[keep], patient_ids[keep]
    targets = np.array(
        [[c in findings[i] for c in chosen] for i in rows], dtype=np.float32
    ).reshape(rows.size, len(chosen))
    return CXR8Index(
        names=tuple(names[i] for i in rows),
        paths=tuple(files[names[i]] for i in rows),
        patients=patient_ids,
        targets=targets,
        conditions=chosen,
    )


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError as exc:
        raise MissingDependencyError(
            'reading CXR8 images needs Pillow, which is not installed: pip install "riemfl[data]"'
        ) from exc
    return Image


def _read_image(path: Path, size: int, image: Any) -> np.ndarray:
    """One image as grey float32 values in [0, 1], resized to (size, size)."""
    try:
        with image.open(path) as im:
            if im.mode in ("I", "I;16", "I;16B", "I;16L"):  # 16-bit grey
                grey, scale = im.convert("F"), 65535.0
            elif im.mode == "F":
                grey, scale = im, 1.0
            else:
                grey, scale = im.convert("L"), 255.0
            resized = grey.resize((size, size), image.Resampling.BILINEAR)
            return np.clip(np.asarray(resized, dtype=np.float32) / scale, 0.0, 1.0)
    except FileNotFoundError:
        raise DataError(f"image file {str(path)!r} not found") from None
    except (OSError, ValueError, SyntaxError) as exc:  # Pillow's errors for a broken file
        raise DataError(f"cannot read image {str(path)!r}: {exc}") from None


def load_images(
    index: CXR8Index,
    rows: Sequence[int] | np.ndarray | None = None,
    *,
    size: int = PAPER_IMAGE_SIZE,
    channels: int = 1,
) -> np.ndarray:
    """The pixels of some rows of ``index``.

    Parameters
    ----------
    index : CXR8Index
    rows : sequence of int, optional
        Row numbers of ``index``; default all (mind the memory: 65 kB per image at 128 x 128).
    size : int, default 128
        The side of the resized square image (the paper's 128).
    channels : int, default 1
        Copies of the grey image (3 as in the paper, for an ImageNet-shaped input).

    Returns
    -------
    numpy.ndarray of float32, shape (len(rows), channels, size, size)
        Values in [0, 1].

    Raises
    ------
    DataError
        A file that is gone or that Pillow cannot read.
    MissingDependencyError
        Without Pillow.
    """
    size = integer(size, "load_images: size", minimum=1)
    channels = integer(channels, "load_images: channels", minimum=1)
    picked = np.arange(len(index)) if rows is None else np.asarray(rows, dtype=np.int64)
    image = _pillow()
    out = np.empty((picked.size, channels, size, size), dtype=np.float32)
    for j, i in enumerate(picked):
        out[j] = _read_image(index.paths[i], size, image)
    return out


def iter_images(
    index: CXR8Index,
    rows: Sequence[int] | np.ndarray | None = None,
    *,
    chunk_size: int = 256,
    size: int = PAPER_IMAGE_SIZE,
    channels: int = 1,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`load_images` in chunks: ``(rows, x, y)`` of at most ``chunk_size`` rows each, so
    that a pass over the full data set holds one chunk of pixels at a time."""
    chunk_size = integer(chunk_size, "iter_images: chunk_size", minimum=1)
    picked = np.arange(len(index)) if rows is None else np.asarray(rows, dtype=np.int64)
    for start in range(0, picked.size, chunk_size):
        part = picked[start : start + chunk_size]
        yield part, load_images(index, part, size=size, channels=channels), index.targets[part]


def patient_clients(
    patients: Any,
    n_clients: int = PAPER_CLIENTS,
    *,
    test_fraction: float = 0.2,
    seed: int = 0,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Rows dealt to clients by patient, each client's patients split into train and test.

    The patients, in a random order, are dealt round-robin to ``min(n_clients, patients)``
    clients (:func:`riemfl.problems.partition.natural_partition`); in each client the first
    ``round(test_fraction * m)`` of its m patients, in a random order, are its test patients.

    Parameters
    ----------
    patients : array-like, shape (n,)
        The patient of each row.
    n_clients : int, default 30
    test_fraction : float, default 0.2
        In [0, 1).
    seed : int, default 0
        Seed of the deal and of the splits (``data_rng(seed, "cxr8-clients")``).

    Returns
    -------
    list of (train_rows, test_rows)
        Sorted int64 row numbers; every row is in exactly one array, every patient in one.
    """
    n_clients = integer(n_clients, "patient_clients: n_clients", minimum=1)
    test_fraction = real(test_fraction, "patient_clients: test_fraction", at_least=0, below=1)
    ids = np.asarray(patients)
    rng = data_rng(seed, "cxr8-clients")
    n_patients = np.unique(ids).size
    out = []
    for rows in natural_partition(ids, min(n_clients, n_patients), rng):
        own = rng.permutation(np.unique(ids[rows]))
        test = np.isin(ids[rows], own[: int(round(test_fraction * own.size))])
        out.append((rows[~test], rows[test]))
    return out


def cxr8_clients(
    root: str | os.PathLike,
    *,
    n_clients: int = PAPER_CLIENTS,
    conditions: Sequence[str] = PAPER_CONDITIONS,
    max_images: int | None = 2000,
    size: int = PAPER_IMAGE_SIZE,
    channels: int = 1,
    test_fraction: float = 0.2,
    seed: int = 0,
    missing: str = "error",
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """The clients' (X_train, y_train, X_test, y_test) of the NIH files under ``root``.

    :func:`read_cxr8_index`, then :func:`patient_clients`, then the pixels of the kept rows
    (:func:`load_images`). The arrays fit :class:`riemfl.nn.TorchClientTrainer` with
    ``loss="bce_multilabel"`` and :class:`riemfl.nn.ShuffleNetV2` (``num_classes=len(conditions),
    in_channels=channels``).

    Parameters
    ----------
    root, conditions, seed, missing
        As in :func:`read_cxr8_index` (``seed`` also seeds :func:`patient_clients`).
    n_clients : int, default 30
    max_images : int or None, default 2000
        Read at most this many images, of whole patients; **None reads all 112,120** (7.3 GB as
        float32 at 128 x 128, times ``channels``).
    size, channels
        As in :func:`load_images`.
    test_fraction : float, default 0.2
        The share of each client's patients in its test split.
    """
    index = read_cxr8_index(
        root, conditions=conditions, max_images=max_images, seed=seed, missing=missing
    )
    parts = patient_clients(index.patients, n_clients, test_fraction=test_fraction, seed=seed)
    x = load_images(index, size=size, channels=channels)
    y = index.targets
    return [(x[train], y[train], x[test], y[test]) for train, test in parts]

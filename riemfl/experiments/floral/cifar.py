r"""CIFAR-10 and CIFAR-100 for Table 1 of Almansoori et al. 2024: files, stand-in, clustered tasks.

**Files.** The loaders read the "python version" of CIFAR (Krizhevsky 2009) from a directory the
user provides; nothing is downloaded. CIFAR-10: ``data_batch_1`` .. ``data_batch_5``,
``test_batch`` and ``batches.meta``; CIFAR-100: ``train``, ``test`` and ``meta``. Each is a
pickled dict with ``b"data"`` (uint8, (N, 3072), the red, green then blue 32 x 32 planes
row-major) and ``b"labels"`` (CIFAR-10) or ``b"fine_labels"`` / ``b"coarse_labels"``
(CIFAR-100). The directory may be the one holding the files or the one holding the extracted
``cifar-10-batches-py/`` or ``cifar-100-python/`` folder. Images come back as float32
(N, 3, 32, 32) in [0, 1]; the paper states no normalisation (the authors' code, zeligism/FLoRAL,
standardises each channel and augments with random crops and flips: :func:`standardise` and
:func:`crop_flip`; CIFAR-100 also runs Adam on the server, :func:`cifar_aggregator`).

The files are pickles, which can run code when read. They are treated as trusted user files,
and read with a restricted unpickler all the same: it rebuilds only numpy arrays and dtypes
(and the byte-string helper of protocol-2 pickles), so a file asking for any other callable is
refused with a :class:`~riemfl.errors.DataError`, as is a dict without the expected keys, data
of the wrong shape or dtype, or labels out of range; each message names the file.

**Tasks** (Sec. 6 and App. G, Table 6). CIFAR-10: rotation or label-shift clusters, C = 4,
K = 20, every client in every round, the reduced regime keeping 5% of each client's rows, at
least 10 (:func:`riemfl.nn.floral.clustered_images`, as for MNIST). CIFAR-100: C = 10 clusters
of 10 disjoint labels each, every cluster split uniformly into K/C = 10 clients (K = 100),
50% of the clients per round (Table 6; the text says "25 clients every round", and the
authors' code samples 0.5). The paper does not say which labels form a cluster; riemfl takes
the authors' code's map, cluster c = {y : y mod 10 = c}, client k in cluster k mod 10, and the
model keeps all 100 outputs. Test rows: each client tests on its cluster's labels
(``evaluation="shard"``: its share of them; ``"full"``: all of them).

**Offline stand-in.** :func:`write_generated_cifar` writes small generated sets in the same
file format (one smooth random colour template per class, plus pixel noise) so the loader, the
task builders and the models run without the real files. It shows that the code paths work
end to end and that the cluster constructions behave as the paper describes; it cannot show
anything about the paper's accuracies, which depend on real images.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..._validation import integer
from ...errors import DataError, ParameterError
from .settings import (
    CIFAR_COLUMNS,
    CIFAR_PAPER_COLUMNS,
    PAPER_CIFAR,
    CifarSettings,
    Column,
    Settings,
    cifar_kind,
)

__all__ = [
    "cifar_aggregator",
    "crop_flip",
    "CIFAR_FOLDERS",
    "CifarData",
    "CifarSetup",
    "PAPER_SETUPS",
    "CIFAR_COLUMNS",
    "CIFAR_PAPER_COLUMNS",
    "PAPER_CIFAR",
    "find_cifar",
    "cifar_kinds",
    "load_cifar",
    "load_cifar10",
    "load_cifar100",
    "standardise",
    "subsample",
    "write_cifar",
    "write_generated_cifar",
    "write_standin",
    "cifar_settings",
    "cifar10_task",
    "cifar100_task",
    "cifar_task",
]

#: the extracted archives' folder names
CIFAR_FOLDERS: dict[str, str] = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}
_FILES: dict[str, dict[str, tuple[str, ...]]] = {
    "cifar10": {
        "train": tuple(f"data_batch_{i}" for i in range(1, 6)),
        "test": ("test_batch",),
        "meta": ("batches.meta",),
    },
    "cifar100": {"train": ("train",), "test": ("test",), "meta": ("meta",)},
}
_LABEL_KEY = {"cifar10": "labels", "cifar100": "fine_labels"}
_NAMES_KEY = {"cifar10": "label_names", "cifar100": "fine_label_names"}
_N_CLASSES = {"cifar10": 10, "cifar100": 100}
_PIXELS = 3 * 32 * 32
#: the only globals a CIFAR pickle may name: numpy's array and dtype reconstruction
_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


# ------------------------------------------------------------------------------------ reading
@dataclass(frozen=True)
class CifarData:
    """A CIFAR set as read: float32 images (N, 3, 32, 32) in [0, 1] and int64 labels.

    Attributes
    ----------
    name : {"cifar10", "cifar100"}
    x_train, y_train, x_test, y_test : numpy.ndarray
        CIFAR-100's labels are the fine labels (0..99).
    class_names : tuple of str
    source : str
        The directory the files were read from.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    class_names: tuple[str, ...]
    source: str

    @property
    def n_classes(self) -> int:
        """10 or 100."""
        return _N_CLASSES[self.name]


class _Unpickler(pickle.Unpickler):
    """Rebuilds dicts, lists, bytes, numbers and numpy arrays; refuses every other global."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def _check_kind(kind: str) -> str:
    if kind not in CIFAR_FOLDERS:
        raise ParameterError(f"CIFAR: kind must be one of {tuple(CIFAR_FOLDERS)}, got {kind!r}")
    return kind


def find_cifar(directory: str | Path, kind: str) -> Path | None:
    """The folder holding ``kind``'s files: ``directory`` itself or its extracted archive folder.

    Parameters
    ----------
    directory : path
    kind : {"cifar10", "cifar100"}

    Returns
    -------
    pathlib.Path or None
        None when neither holds the first training file.
    """
    kind = _check_kind(kind)
    first = _FILES[kind]["train"][0]
    d = Path(directory)
    for candidate in (d, d / CIFAR_FOLDERS[kind]):
        if (candidate / first).is_file():
            return candidate
    return None


def cifar_kinds(directory: str | Path) -> tuple[str, ...]:
    """The kinds whose files :func:`find_cifar` finds in ``directory`` (none for a file).

    Parameters
    ----------
    directory : path

    Returns
    -------
    tuple of str
        ``"cifar10"`` and/or ``"cifar100"``, in that order.
    """
    return tuple(kind for kind in CIFAR_FOLDERS if find_cifar(directory, kind) is not None)


def _unpickle(path: Path) -> dict[str, Any]:
    """The file's dict with str keys (bytes keys decoded), or a DataError naming the file."""
    if not path.is_file():
        raise DataError(f"CIFAR file {str(path)!r} is missing")
    try:
        with path.open("rb") as f:
            obj = _Unpickler(io.BytesIO(f.read()), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise DataError(f"CIFAR file {str(path)!r} is not a CIFAR pickle: {exc}") from exc
    if not isinstance(obj, dict):
        raise DataError(f"CIFAR file {str(path)!r} holds a {type(obj).__name__}, expected a dict")
    return {(k.decode("latin1") if isinstance(k, bytes) else str(k)): v for k, v in obj.items()}


def _field(d: dict[str, Any], key: str, path: Path) -> Any:
    if key not in d:
        raise DataError(
            f"CIFAR file {str(path)!r} has no key b{key!r} (keys: {sorted(d)}); expected "
            "the python-version CIFAR format"
        )
    return d[key]


def _labels(d: dict[str, Any], key: str, n: int, n_classes: int, path: Path) -> np.ndarray:
    raw = np.asarray(_field(d, key, path))
    if raw.shape != (n,) or not np.issubdtype(raw.dtype, np.integer):
        raise DataError(
            f"CIFAR file {str(path)!r}: b{key!r} must be {n} integer labels, got "
            f"shape {raw.shape} of dtype {raw.dtype}"
        )
    if n and (raw.min() < 0 or raw.max() >= n_classes):
        raise DataError(
            f"CIFAR file {str(path)!r}: b{key!r} must lie in 0..{n_classes - 1}, got "
            f"{int(raw.min())}..{int(raw.max())}"
        )
    return raw.astype(np.int64)


def _batch(path: Path, kind: str) -> tuple[np.ndarray, np.ndarray]:
    d = _unpickle(path)
    data = _field(d, "data", path)
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
        shape = data.shape if isinstance(data, np.ndarray) else type(data).__name__
        dtype = data.dtype if isinstance(data, np.ndarray) else "-"
        raise DataError(
            f"CIFAR file {str(path)!r}: b'data' must be a uint8 array (N, {_PIXELS}), got "
            f"{shape} of dtype {dtype}"
        )
    if data.shape[1] != _PIXELS:
        raise DataError(
            f"CIFAR file {str(path)!r}: b'data' must have {_PIXELS} columns (3 x 32 x 32), got "
            f"{data.shape[1]}"
        )
    n = data.shape[0]
    y = _labels(d, _LABEL_KEY[kind], n, _N_CLASSES[kind], path)
    if kind == "cifar100":
        _labels(d, "coarse_labels", n, 20, path)
    x = data.reshape(n, 3, 32, 32).astype(np.float32) / np.float32(255.0)
    return x, y


def _class_names(path: Path, kind: str) -> tuple[str, ...]:
    d = _unpickle(path)
    names = _field(d, _NAMES_KEY[kind], path)
    if not isinstance(names, list) or len(names) != _N_CLASSES[kind]:
        raise DataError(
            f"CIFAR file {str(path)!r}: b{_NAMES_KEY[kind]!r} must list {_N_CLASSES[kind]} names"
        )
    return tuple(n.decode("latin1") if isinstance(n, bytes) else str(n) for n in names)


def load_cifar(directory: str | Path, kind: str = "cifar10") -> CifarData:
    """Read CIFAR-10 or CIFAR-100 (python version) from the user's directory (module docstring).

    Parameters
    ----------
    directory : path
        The folder of the batch files, or the folder holding ``cifar-10-batches-py/`` or
        ``cifar-100-python/``.
    kind : {"cifar10", "cifar100"}

    Returns
    -------
    CifarData

    Raises
    ------
    DataError
        A missing directory or file, a file that is not a CIFAR pickle (not a dict, a refused
        global, missing keys), data that is not uint8 (N, 3072), labels of the wrong count or
        out of range, or class names of the wrong count; the message names the file.
    """
    kind = _check_kind(kind)
    d = Path(directory)
    if not d.is_dir():
        raise DataError(f"CIFAR directory {str(d)!r} does not exist")
    folder = find_cifar(d, kind)
    if folder is None:
        files = ", ".join(f for part in _FILES[kind].values() for f in part)
        raise DataError(
            f"CIFAR directory {str(d)!r} holds neither {_FILES[kind]['train'][0]!r} nor "
            f"{CIFAR_FOLDERS[kind]}/; expected the python-version files {files}"
        )
    train = [_batch(folder / f, kind) for f in _FILES[kind]["train"]]
    x_te, y_te = _batch(folder / _FILES[kind]["test"][0], kind)
    names = _class_names(folder / _FILES[kind]["meta"][0], kind)
    return CifarData(
        kind,
        np.concatenate([x for x, _ in train]),
        np.concatenate([y for _, y in train]),
        x_te,
        y_te,
        names,
        str(folder),
    )


def load_cifar10(directory: str | Path) -> CifarData:
    """:func:`load_cifar` with ``kind="cifar10"``."""
    return load_cifar(directory, "cifar10")


def load_cifar100(directory: str | Path) -> CifarData:
    """:func:`load_cifar` with ``kind="cifar100"`` (fine labels)."""
    return load_cifar(directory, "cifar100")


def _channel_stats(data: CifarData) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and standard deviation of the training images, shape (1, 3, 1, 1)."""
    mean = data.x_train.mean(axis=(0, 2, 3), keepdims=True)
    return mean, data.x_train.std(axis=(0, 2, 3), keepdims=True) + np.float32(1e-8)


def standardise(data: CifarData) -> CifarData:
    """Each channel minus the training set's mean, over its standard deviation (train and test)."""
    mean, std = _channel_stats(data)
    return replace(
        data,
        x_train=((data.x_train - mean) / std).astype(np.float32),
        x_test=((data.x_test - mean) / std).astype(np.float32),
    )


def crop_flip(data: CifarData) -> Any:
    """The authors' code's training augmentation for images :func:`standardise` will scale:
    random 32 x 32 crops after padding by 4 with black, and horizontal flips.

    Parameters
    ----------
    data : CifarData
        The images before standardisation (their channel statistics give the standardised
        black, :math:`-\\mu_c / \\sigma_c`, that the padding takes).

    Returns
    -------
    riemfl.nn.augment.CropFlip
    """
    from ...nn.augment import CropFlip

    mean, std = _channel_stats(data)
    return CropFlip(padding=4, fill=(-mean / std).ravel().tolist(), flip=True)


def cifar_aggregator(trainer: Any, kind: str, cifar: CifarSettings) -> Any:
    """The server of a CIFAR run: Algorithm 1's averages, followed on CIFAR-100 by Adam on the
    pseudo-gradient when ``cifar.cifar100_server_adam`` is set (the authors' code).

    Parameters
    ----------
    trainer : riemfl.nn.floral.FloralTrainer
        The run's trainer (its parameter layout).
    kind : {"cifar10", "cifar100"}
    cifar : CifarSettings

    Returns
    -------
    riemfl.nn.floral.FloralAggregator
    """
    from ...nn.floral import FloralAggregator, ServerOptimizer

    lr = cifar.cifar100_server_adam if _check_kind(kind) == "cifar100" else None
    server = None if lr is None else ServerOptimizer("adam", lr)
    return FloralAggregator(trainer.layout, server_optimizer=server)


def subsample(data: CifarData, rows: tuple[int, int] | None) -> CifarData:
    """The first ``train // n_classes`` training and ``test // n_classes`` test rows of each class.

    Parameters
    ----------
    data : CifarData
    rows : (int, int) or None
        Training and test rows to keep in all, evenly over the classes (at least one per
        class); None keeps everything.

    Returns
    -------
    CifarData
        A copy, rows in their order in the files.
    """
    if rows is None:
        return data

    def keep(y: np.ndarray, total: int) -> np.ndarray:
        per_class = max(1, total // data.n_classes)
        return np.sort(
            np.concatenate([np.flatnonzero(y == c)[:per_class] for c in range(data.n_classes)])
        )

    tr, te = keep(data.y_train, rows[0]), keep(data.y_test, rows[1])
    return replace(
        data,
        x_train=data.x_train[tr],
        y_train=data.y_train[tr],
        x_test=data.x_test[te],
        y_test=data.y_test[te],
    )


# ------------------------------------------------------------------------------------ writing
def _dump(path: Path, obj: dict[bytes, Any]) -> None:
    with path.open("wb") as f:
        pickle.dump(obj, f, protocol=2)


def write_cifar(
    directory: str | Path,
    kind: str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
) -> Path:
    """Write uint8 images (N, 3072) and labels in the python-version CIFAR format.

    CIFAR-10's training rows are split over the five ``data_batch_*`` files; CIFAR-100's coarse
    labels are written as ``fine // 5`` (not the real superclass map: the loader only checks
    their range).

    Parameters
    ----------
    directory : path
        Created if needed.
    kind : {"cifar10", "cifar100"}
    x_train, y_train, x_test, y_test : numpy.ndarray

    Returns
    -------
    pathlib.Path
        ``directory``.
    """
    kind = _check_kind(kind)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    n_cls = _N_CLASSES[kind]

    def record(x: np.ndarray, y: np.ndarray) -> dict[bytes, Any]:
        labels = [int(v) for v in y]
        if kind == "cifar10":
            return {b"data": np.asarray(x, np.uint8), b"labels": labels}
        coarse = [v // 5 for v in labels]
        return {b"data": np.asarray(x, np.uint8), b"fine_labels": labels, b"coarse_labels": coarse}

    parts = np.array_split(np.arange(len(y_train)), len(_FILES[kind]["train"]))
    for name, idx in zip(_FILES[kind]["train"], parts, strict=True):
        _dump(d / name, record(x_train[idx], y_train[idx]))
    _dump(d / _FILES[kind]["test"][0], record(x_test, y_test))
    names = [f"class{c}".encode() for c in range(n_cls)]
    meta = {_NAMES_KEY[kind].encode(): names}
    if kind == "cifar100":
        meta[b"coarse_label_names"] = [f"super{c}".encode() for c in range(20)]
    _dump(d / _FILES[kind]["meta"][0], meta)
    return d


def write_generated_cifar(
    directory: str | Path,
    kind: str = "cifar10",
    *,
    train_per_class: int = 60,
    test_per_class: int = 20,
    noise: float = 0.15,
    seed: int = 0,
) -> Path:
    """Write a generated stand-in in the CIFAR file format (module docstring: what it shows).

    Class j's images are a smooth random colour template (a 4 x 4 x 3 grid of uniform values,
    enlarged to 32 x 32; not symmetric under rotation) plus Gaussian pixel noise of standard
    deviation ``noise``, clipped to [0, 1] and stored as uint8.

    Parameters
    ----------
    directory : path
    kind : {"cifar10", "cifar100"}
    train_per_class, test_per_class : int
    noise : float
    seed : int

    Returns
    -------
    pathlib.Path
        ``directory``; read it back with :func:`load_cifar`.
    """
    kind = _check_kind(kind)
    integer(train_per_class, "write_generated_cifar: train_per_class", minimum=1)
    integer(test_per_class, "write_generated_cifar: test_per_class", minimum=1)
    n_cls = _N_CLASSES[kind]
    rng = np.random.default_rng(seed)
    templates = np.kron(rng.uniform(size=(n_cls, 3, 4, 4)), np.ones((1, 1, 8, 8)))

    def draw(per_class: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.repeat(np.arange(n_cls), per_class)
        x = templates[y] + noise * rng.standard_normal((y.size, 3, 32, 32))
        pixels = np.round(255 * np.clip(x, 0.0, 1.0)).astype(np.uint8).reshape(y.size, _PIXELS)
        order = rng.permutation(y.size)
        return pixels[order], y[order]

    x_tr, y_tr = draw(train_per_class)
    x_te, y_te = draw(test_per_class)
    return write_cifar(directory, kind, x_tr, y_tr, x_te, y_te)


def write_standin(directory: str | Path, cifar: CifarSettings) -> Path:
    """The generated stand-in of every kind ``cifar.columns`` needs, in its archive folder.

    Parameters
    ----------
    directory : path
        Gets ``cifar-10-batches-py/`` and/or ``cifar-100-python/``.
    cifar : CifarSettings
        The columns and ``standin_per_class``.

    Returns
    -------
    pathlib.Path
        ``directory``, ready for :func:`load_cifar`.
    """
    d = Path(directory)
    kinds = {cifar_kind(c) for c in CIFAR_COLUMNS if c.label in cifar.columns}
    for kind in (k for k in CIFAR_FOLDERS if k in kinds):
        train, test = cifar.standin_per_class[kind]
        write_generated_cifar(
            d / CIFAR_FOLDERS[kind], kind, train_per_class=train, test_per_class=test
        )
    return d


# -------------------------------------------------------------------------------------- tasks
@dataclass(frozen=True)
class CifarSetup:
    """A CIFAR task's clients as Table 6 of the paper gives them: K, C, participation, model."""

    n_clients: int
    n_clusters: int
    participation: float
    model: str


#: Almansoori et al. 2024, Table 6 (CIFAR-100's 50%: the table; the text says 25 clients)
PAPER_SETUPS: dict[str, CifarSetup] = {
    "cifar10": CifarSetup(20, 4, 1.0, "Cifar10CNN"),
    "cifar100": CifarSetup(100, 10, 0.5, "VGG8"),
}


def cifar_settings(s: Settings, kind: str, *, n_clients: int | None = None) -> Settings:
    """``s`` with a CIFAR task's clients, clusters and participation (:data:`PAPER_SETUPS`).

    The paper gives no learning rates, batch sizes or rounds; those of ``s`` are kept. The
    authors' code uses batch 64, learning rate 0.03 (CIFAR-10) or 0.001 with a server Adam
    (CIFAR-100), router learning rate 0.1 and 500 rounds.

    Parameters
    ----------
    s : Settings
    kind : {"cifar10", "cifar100"}
    n_clients : int, optional
        A scaled-down K (the offline stand-in), a multiple of C; default the paper's.

    Returns
    -------
    Settings
        A copy; ``clients_per_round`` is the paper's share of K, at least one.
    """
    setup = PAPER_SETUPS[_check_kind(kind)]
    k = setup.n_clients if n_clients is None else n_clients
    integer(k, f"cifar_settings: n_clients (a multiple of {setup.n_clusters})", minimum=1)
    if k % setup.n_clusters:
        raise ParameterError(
            f"cifar_settings: n_clients must be a multiple of C = {setup.n_clusters}, got {k}"
        )
    per_round = max(1, int(round(setup.participation * k)))
    return replace(s, n_clients=k, n_clusters=setup.n_clusters, clients_per_round=per_round)


def cifar10_task(column: Column, seed: int, s: Settings, data: CifarData) -> Any:
    """CIFAR-10 rotation or label-shift clusters of a Table 1 column (as :func:`digits_task`).

    Parameters
    ----------
    column : Column
        ``"rotation"`` or ``"label_shift"``, full or reduced.
    seed : int
        Seed of the split.
    s : Settings
        K, C and the evaluation (:func:`cifar_settings`).
    data : CifarData
        CIFAR-10 (or its stand-in).

    Returns
    -------
    riemfl.nn.floral.ClusteredTask
    """
    from ...nn.floral import clustered_images

    if data.name != "cifar10":
        raise ParameterError(f"cifar10_task: needs CIFAR-10 data, got {data.name!r}")
    return clustered_images(
        data.x_train,
        data.y_train,
        transform=column.transform,
        n_clients=s.n_clients,
        n_clusters=s.n_clusters,
        test_images=data.x_test,
        test_labels=data.y_test,
        reduced=column.reduced,
        keep_fraction=column.keep or 1.0,
        min_rows=column.min_rows,
        evaluation=s.evaluation,
        n_classes=10,
        seed=seed,
    )


def cifar100_task(column: Column, seed: int, s: Settings, data: CifarData) -> Any:
    """CIFAR-100's disjoint-label clusters (module docstring), full or reduced.

    Cluster c holds the labels ``y mod C == c`` (10 labels for C = 10); its training rows are
    shuffled and split uniformly among its K/C clients (client k in cluster k mod C), which
    keep ``max(min_rows, round(keep N^k))`` of them when ``column`` is reduced. Labels are
    left as they are (100 classes).

    Parameters
    ----------
    column : Column
        Full or reduced; its transform must be ``"disjoint_labels"``.
    seed : int
    s : Settings
        K (a multiple of C), C (dividing 100) and the evaluation.
    data : CifarData
        CIFAR-100 (or its stand-in).

    Returns
    -------
    riemfl.nn.floral.ClusteredTask

    Raises
    ------
    ParameterError
        For another transform, C not dividing 100 or K not a multiple of C.
    DataError
        If a client would get no training rows (or, with ``"shard"``, no test rows).
    """
    from ...nn.floral import ClusteredTask, reduce_rows
    from ...problems.checks import data_rng

    name = "cifar100_task"
    if data.name != "cifar100":
        raise ParameterError(f"{name}: needs CIFAR-100 data, got {data.name!r}")
    if column.transform != "disjoint_labels":
        raise ParameterError(f"{name}: column transform must be 'disjoint_labels'")
    k_all, c_all = s.n_clients, s.n_clusters
    if 100 % c_all or k_all % c_all:
        raise ParameterError(
            f"{name}: need C dividing 100 and K a multiple of C, got {k_all}, {c_all}"
        )
    if s.evaluation not in ("full", "shard"):
        raise ParameterError(f"{name}: evaluation must be 'full' or 'shard', got {s.evaluation!r}")
    rng = data_rng(seed, name)
    clusters = np.arange(k_all) % c_all
    train_parts: list[np.ndarray] = [np.empty(0, np.int64)] * k_all
    test_parts: list[np.ndarray] = [np.empty(0, np.int64)] * k_all
    for c in range(c_all):
        members = np.flatnonzero(clusters == c)
        tr = rng.permutation(np.flatnonzero(data.y_train % c_all == c))
        te = rng.permutation(np.flatnonzero(data.y_test % c_all == c))
        if tr.size < members.size or (s.evaluation == "shard" and te.size < members.size):
            raise DataError(
                f"{name}: cluster {c} has {tr.size} training / {te.size} test rows for "
                f"{members.size} clients"
            )
        for k, part_tr, part_te in zip(
            members, np.array_split(tr, members.size), np.array_split(te, members.size), strict=True
        ):
            train_parts[k] = part_tr
            test_parts[k] = part_te if s.evaluation == "shard" else te
    available = [int(p.size) for p in train_parts]
    if column.reduced:
        keep, minimum = column.keep or 1.0, column.min_rows
        train_parts = [p[: reduce_rows(p.size, keep, minimum)] for p in train_parts]
    clients = [
        (data.x_train[tr], data.y_train[tr], data.x_test[te], data.y_test[te])
        for tr, te in zip(train_parts, test_parts, strict=True)
    ]
    description = {
        "transform": "disjoint_labels",
        "n_clients": k_all,
        "n_clusters": c_all,
        "reduced": column.reduced,
        "keep_fraction": column.keep or 1.0,
        "min_rows": column.min_rows,
        "evaluation": s.evaluation,
        "train_rows": [int(p.size) for p in train_parts],
        "available_rows": available,
        "test_rows": int(data.y_test.size),
        "n_classes": 100,
        "seed": seed,
    }
    return ClusteredTask(clients, clusters, c_all, 100, (3, 32, 32), description)


def cifar_task(column: Column, seed: int, s: Settings, data: CifarData) -> Any:
    """:func:`cifar100_task` for a ``"disjoint_labels"`` column, else :func:`cifar10_task`."""
    if column.transform == "disjoint_labels":
        return cifar100_task(column, seed, s, data)
    return cifar10_task(column, seed, s, data)

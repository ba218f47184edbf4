r"""Clustered image tasks: rotation and label-shift clusters, full or reduced data.

The tasks of Almansoori et al. 2024, Sec. 6 ("MNIST and CIFAR-10"), after Ghosh et al. 2020 and
Werner et al. 2023. Client k belongs to cluster :math:`c = k \bmod C` and sees its data through
the cluster's transform:

* ``"rotation"``: images rotated by :math:`360\,c/C` degrees. The paper's "2 pi c / C degrees"
  mixes units; riemfl uses degrees, c = 0..C-1, as the authors' public code (zeligism/FLoRAL)
  does with :math:`(360 // C)\,c`, i.e. 0, 90, 180, 270 for C = 4. Multiples of 90 degrees are
  exact (``numpy.rot90``); other angles use a bilinear ``scipy.ndimage.rotate`` of the same
  size;
* ``"label_shift"``: labels :math:`y \mapsto (y + c) \bmod n_{classes}` (Sec. 6, with 10
  classes).

The paper does not say how the rows are split among the clients nor which client is in which
cluster; riemfl splits the training rows IID among the K clients and puts client k in cluster
k mod C, as the public code does (and as App. G.1 does for the synthetic tasks). The
**reduced** regime keeps :math:`\max(10, \lfloor 0.05 N^k \rceil)` rows of each client (5%,
at least 10; Sec. 6); ``min_rows=1`` keeps the plain 5% (at least one row), which on a small
set such as digits (~72 rows per client) is far fewer rows than the 10-row minimum.

Test data: the paper does not say how the clients' test sets are built. ``evaluation="shard"``
splits the test rows IID among the clients, each with its cluster's transform, as the public
code does; ``evaluation="full"`` (riemfl's) gives every client the **whole** test set under its
cluster's transform. Both estimate the same personal accuracy; "full" has a much smaller
variance when the test set is small (scikit-learn's digits: 360 test images), so the
reproduction uses it.

:func:`digits_clusters` builds the offline MNIST stand-in from scikit-learn's 8 x 8 digits, or
from the user's MNIST file (``data=``, read with :func:`riemfl.problems.load_mnist`);
:func:`clustered_images` takes any arrays (a user's CIFAR-10 as (N, 3, 32, 32), channels
first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._validation import integer
from ...errors import DataError, ParameterError
from ...problems.checks import data_rng

__all__ = [
    "ClusteredTask",
    "clustered_images",
    "digits_clusters",
    "rotate_images",
    "shift_labels",
    "reduce_rows",
    "TRANSFORMS",
]

TRANSFORMS = ("rotation", "label_shift")


@dataclass
class ClusteredTask:
    """Clients of a clustered image task.

    Attributes
    ----------
    clients : list of (X_train, y_train, X_test, y_test)
        Images (n, channels, H, W) float32 and int64 labels.
    clusters : numpy.ndarray of int, shape (K,)
    n_clusters, n_classes : int
    input_shape : tuple of int
        (channels, H, W).
    description : dict
        The settings (JSON-ready).
    """

    clients: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    clusters: np.ndarray
    n_clusters: int
    n_classes: int
    input_shape: tuple[int, ...]
    description: dict[str, Any]


def rotate_images(images: np.ndarray, degrees: float) -> np.ndarray:
    """Rotate (..., H, W) images counter-clockwise by ``degrees`` (exact for multiples of 90)."""
    images = np.asarray(images)
    quarter = degrees / 90.0
    if float(quarter).is_integer():
        return np.ascontiguousarray(np.rot90(images, int(quarter) % 4, axes=(-2, -1)))
    if images.shape[-1] != images.shape[-2]:
        raise DataError(
            f"rotate_images: non-square images {images.shape[-2:]} need a multiple of 90"
        )
    from scipy.ndimage import rotate

    return rotate(images, degrees, axes=(-1, -2), reshape=False, order=1, mode="constant")


def shift_labels(labels: np.ndarray, shift: int, n_classes: int) -> np.ndarray:
    """:math:`y \\mapsto (y + \\text{shift}) \\bmod n_{classes}`."""
    return (np.asarray(labels) + int(shift)) % int(n_classes)


def reduce_rows(n: int, fraction: float = 0.05, minimum: int = 10) -> int:
    """Rows kept by the reduced regime: ``max(minimum, round(fraction n))``, at most n.

    Raises
    ------
    ParameterError
        If ``minimum < 1`` (a client would be left without rows) or ``fraction`` is not in
        (0, 1].
    """
    integer(minimum, "reduce_rows: minimum (rows kept per client)", minimum=1)
    if not 0 < fraction <= 1:
        raise ParameterError(f"reduce_rows: fraction must be in (0, 1], got {fraction!r}")
    return min(n, max(minimum, int(round(fraction * n))))


def _as_images(x: np.ndarray, channels: int | None, what: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 2:  # flattened square images
        ch = channels or 1
        side = math.isqrt(x.shape[1] // ch)
        if ch * side * side != x.shape[1]:
            raise DataError(
                f"{what}: rows of {x.shape[1]} features are not {ch}-channel square images; pass "
                "(N, H, W) or (N, C, H, W) arrays"
            )
        return x.reshape(-1, ch, side, side)
    if x.ndim == 3:
        return x[:, None]
    if x.ndim == 4:
        return x
    raise DataError(f"{what}: images must be (N, d), (N, H, W) or (N, C, H, W), got {x.shape}")


def _transform(x: np.ndarray, y: np.ndarray, c: int, kind: str, n_clusters: int, n_classes: int):
    if kind == "rotation":
        return rotate_images(x, 360.0 * c / n_clusters).astype(np.float32), y
    return x, shift_labels(y, c, n_classes)


def clustered_images(
    images: Any,
    labels: Any,
    *,
    transform: str = "rotation",
    n_clients: int = 20,
    n_clusters: int = 4,
    test_images: Any = None,
    test_labels: Any = None,
    test_fraction: float = 0.2,
    reduced: bool = False,
    keep_fraction: float = 0.05,
    min_rows: int = 10,
    evaluation: str = "full",
    channels: int | None = None,
    n_classes: int | None = None,
    seed: int = 0,
) -> ClusteredTask:
    """Rotation or label-shift clusters of an image set (module docstring).

    Parameters
    ----------
    images, labels : arrays
        Training images ((N, d) flattened square, (N, H, W) or (N, C, H, W)) and int labels.
    transform : {"rotation", "label_shift"}
    n_clients, n_clusters : int
        K and C; client k is in cluster k mod C.
    test_images, test_labels : arrays, optional
        A separate test set; else ``test_fraction`` of the rows are held out (seeded).
    reduced : bool
        Keep ``max(min_rows, round(keep_fraction N^k))`` training rows per client
        (:func:`reduce_rows`; ``min_rows >= 1``: no client is left without rows).
    evaluation : {"full", "shard"}
        With ``"shard"`` every client needs at least one test row.
    channels : int, optional
        Channels of flattened rows (default 1).
    n_classes : int, optional
        Default: ``labels.max() + 1``.
    seed : int

    Raises
    ------
    DataError
        For inconsistent arrays, fewer training rows than clients, or (``"shard"``) fewer
        test rows than clients.
    ParameterError
        For unknown ``transform`` / ``evaluation`` or bad counts.
    """
    name = "clustered_images"
    if transform not in TRANSFORMS:
        raise ParameterError(f"{name}: transform must be one of {TRANSFORMS}, got {transform!r}")
    if evaluation not in ("full", "shard"):
        raise ParameterError(f"{name}: evaluation must be 'full' or 'shard', got {evaluation!r}")
    integer(n_clients, f"{name}: n_clients", minimum=1)
    integer(n_clusters, f"{name}: n_clusters (<= n_clients)", minimum=1, maximum=n_clients)
    x = _as_images(images, channels, name)
    y = np.asarray(labels).astype(np.int64)
    if y.shape != (x.shape[0],):
        raise DataError(f"{name}: {x.shape[0]} images but labels of shape {y.shape}")
    rng = data_rng(seed, name)
    if test_images is None:
        if not 0 < test_fraction < 1:
            raise ParameterError(f"{name}: test_fraction must be in (0, 1), got {test_fraction!r}")
        order = rng.permutation(x.shape[0])
        k = int(round(test_fraction * x.shape[0]))
        x_te, y_te, x, y = x[order[:k]], y[order[:k]], x[order[k:]], y[order[k:]]
    else:
        x_te = _as_images(test_images, channels, f"{name} (test)")
        y_te = np.asarray(test_labels).astype(np.int64)
        if y_te.shape != (x_te.shape[0],) or x_te.shape[1:] != x.shape[1:]:
            raise DataError(f"{name}: test set {x_te.shape}/{y_te.shape} does not match {x.shape}")
    if x.shape[0] < n_clients:
        raise DataError(f"{name}: {x.shape[0]} training rows for {n_clients} clients")
    if evaluation == "shard" and x_te.shape[0] < n_clients:
        raise DataError(
            f"{name}: {x_te.shape[0]} test rows for {n_clients} clients leave a client without "
            "test rows; pass evaluation='full' or fewer clients"
        )
    n_cls = int(max(y.max(), y_te.max()) + 1) if n_classes is None else int(n_classes)
    train_parts = np.array_split(rng.permutation(x.shape[0]), n_clients)
    test_parts = np.array_split(rng.permutation(x_te.shape[0]), n_clients)
    clients = []
    clusters = np.arange(n_clients) % n_clusters
    for k in range(n_clients):
        c = int(clusters[k])
        idx = train_parts[k]
        if reduced:
            idx = idx[: reduce_rows(idx.size, keep_fraction, min_rows)]
        tr = _transform(x[idx], y[idx], c, transform, n_clusters, n_cls)
        te_idx = test_parts[k] if evaluation == "shard" else np.arange(x_te.shape[0])
        te = _transform(x_te[te_idx], y_te[te_idx], c, transform, n_clusters, n_cls)
        clients.append((*tr, *te))
    description = {
        "transform": transform,
        "n_clients": n_clients,
        "n_clusters": n_clusters,
        "reduced": reduced,
        "keep_fraction": keep_fraction,
        "min_rows": min_rows,
        "evaluation": evaluation,
        "train_rows": [int(c[1].size) for c in clients],
        "available_rows": [int(part.size) for part in train_parts],
        "test_rows": int(x_te.shape[0]),
        "n_classes": n_cls,
        "seed": seed,
    }
    return ClusteredTask(clients, clusters, n_clusters, n_cls, tuple(x.shape[1:]), description)


def digits_clusters(
    transform: str = "rotation",
    *,
    data: str | None = None,
    **kwargs: Any,
) -> ClusteredTask:
    """:func:`clustered_images` on scikit-learn's digits (8 x 8), or on the user's MNIST file.

    Parameters
    ----------
    transform : {"rotation", "label_shift"}
    data : path, optional
        An MNIST idx/npz file or folder (:func:`riemfl.problems.load_mnist`); its test split is
        used when present. Default: scikit-learn's digits with 20% held out.
    **kwargs
        Passed to :func:`clustered_images`.
    """
    from ...problems.data import load_digits, load_mnist

    if data is None:
        x, y = load_digits()
        return clustered_images(x, y, transform=transform, **kwargs)
    x, y = load_mnist(data, "train")
    try:
        x_te, y_te = load_mnist(data, "test")
    except DataError:
        x_te = y_te = None
    return clustered_images(x, y, transform=transform, test_images=x_te, test_labels=y_te, **kwargs)

"""Boundary checks shared by the vectorised problems (client indices, point stacks, batches)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._validation import integer, is_int
from ..backend import is_torch
from ..errors import ParameterError, ShapeError

__all__ = [
    "client_index",
    "point_stack",
    "batch_array",
    "check_k",
    "float_matrix",
    "data_rng",
    "matrix_blocks",
]


def client_index(
    clients: Sequence[int], n_clients: int, name: str
) -> tuple[np.ndarray | slice, np.ndarray]:
    """Validate client indices.

    Returns ``(index, ids)``: ``index`` is a slice when ``clients`` is a ``range`` of step 1
    inside ``0..n_clients-1`` (the engine passes its blocks of consecutive clients that way) or
    exactly ``0..n_clients-1`` in order, so stacked per-client arrays are used as views, without
    a gather copy; otherwise it is the intp array ``ids``. ``ids`` is always the intp array.
    """
    if isinstance(clients, range) and clients.step == 1 and 0 <= clients.start:
        if clients.stop <= n_clients or not len(clients):
            return slice(clients.start, clients.stop), np.arange(clients.start, clients.stop)
    ids = np.asarray(clients)
    if ids.ndim != 1 or not (ids.size == 0 or np.issubdtype(ids.dtype, np.integer)):
        raise ParameterError(
            f"{name}: clients must be a 1-D sequence of int client indices, got "
            f"{type(clients).__name__} of shape {ids.shape} and dtype {ids.dtype}"
        )
    ids = ids.astype(np.intp, copy=False)
    if ids.size and (ids.min() < 0 or ids.max() >= n_clients):
        bad = ids[(ids < 0) | (ids >= n_clients)]
        raise ParameterError(
            f"{name}: client indices {bad[:5].tolist()} out of range (expected 0..{n_clients - 1})"
        )
    if ids.size == n_clients and np.array_equal(ids, np.arange(n_clients)):
        return slice(None), ids
    return ids, ids


def point_stack(
    xs: Any, m: int, point_shape: tuple[int, ...], name: str, *, single: bool = False
) -> np.ndarray:
    """``xs`` as a float64 numpy array of shape ``(m, *point_shape)`` (no copy when it is one).

    With ``single=True``, ``xs`` is one point of shape ``point_shape`` instead.
    """
    if is_torch(xs):
        raise ParameterError(
            f"{name} evaluates numpy arrays; got a torch tensor (use xs.detach().cpu().numpy(), "
            "or FunctionProblem(..., differentiation='torch') for a torch objective)"
        )
    xs = np.asarray(xs, dtype=np.float64)
    expected = point_shape if single else (m, *point_shape)
    if xs.shape != expected:
        what = "one point" if single else f"one point of shape {point_shape} per listed client"
        raise ShapeError(f"{name}: xs has shape {xs.shape}; expected {expected} ({what})")
    return xs


def batch_array(batches: Any, ids: np.ndarray, n_samples: np.ndarray, name: str) -> np.ndarray:
    """Validate mini-batch indices: ints of shape (len(ids), b), row j within client ids[j]."""
    batches = np.asarray(batches)
    if batches.ndim != 2 or batches.shape[0] != ids.size or batches.shape[1] < 1:
        raise ShapeError(
            f"{name}: batches has shape {batches.shape}; expected ({ids.size}, b) with b >= 1 "
            "(one row of sample indices per listed client)"
        )
    if not np.issubdtype(batches.dtype, np.integer):
        raise ParameterError(
            f"{name}: batches must hold integer sample indices, got dtype {batches.dtype}"
        )
    sizes = n_samples[ids]
    bad = (batches.min(axis=1) < 0) | (batches.max(axis=1) >= sizes)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise ParameterError(
            f"{name}: batch row {j} (client {int(ids[j])}) has indices outside "
            f"0..{int(sizes[j]) - 1}: {batches[j][:8].tolist()}"
        )
    return batches.astype(np.intp, copy=False)


def check_k(k: Any, d: int, name: str) -> int:
    """The number of components: an int with 1 <= k <= d."""
    return integer(k, f"{name}: k (k <= d = {d})", minimum=1, maximum=d)


def float_matrix(a: Any, what: str, *, allow_nan: bool = False) -> np.ndarray:
    """A finite 2-D float64 array (a copy only when the input is not one already)."""
    try:
        arr = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"{what} must be a 2-D array of real numbers ({exc})") from None
    if arr.ndim != 2 or 0 in arr.shape:
        raise ShapeError(f"{what} must be a non-empty 2-D array, got shape {arr.shape}")
    if not allow_nan and not np.isfinite(arr).all():
        raise ParameterError(f"{what} contains NaN or infinite entries")
    return arr


def data_rng(seed: Any, tag: str) -> np.random.Generator:
    """The generator of a synthetic data set: ``seed`` mixed with the generator's ``tag``.

    An int seed is combined with a fixed word derived from ``tag`` (a
    :class:`numpy.random.SeedSequence` of both), so data drawn with seed s is independent of a
    random initial point drawn with ``default_rng(s)`` (with a plain ``default_rng(0)`` for both,
    the first Gaussian draws would coincide: LRMC's factor L *is* the first random Stiefel point's
    Gaussian). A Generator is used as given.
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or is_int(seed):
        word = int.from_bytes(tag.encode()[:8].ljust(8, b"\0"), "little")
        return np.random.default_rng(None if seed is None else [int(seed), word])
    raise ParameterError(f"seed must be None, an int or a numpy.random.Generator, got {seed!r}")


def matrix_blocks(blocks: Any, name: str, what: str, *, min_n: int = 1) -> list[np.ndarray]:
    """Per-client stacks of square matrices: finite float64 arrays of shapes (m_i, n, n).

    ``blocks`` is a non-empty sequence (or a 4-D array) of ``(m_i, n, n)`` array-likes with
    ``m_i >= 1`` and one n >= ``min_n`` for every client. ``what`` names the matrices in messages
    ("rotations").
    """
    if isinstance(blocks, np.ndarray) and blocks.ndim == 4:
        blocks = list(blocks)
    if not isinstance(blocks, Sequence) or len(blocks) == 0:
        raise ParameterError(
            f"{name}: {what} must be a non-empty sequence of (m_i, n, n) arrays, got "
            f"{type(blocks).__name__}"
        )
    out: list[np.ndarray] = []
    for i, a in enumerate(blocks):
        try:
            b = np.asarray(a, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ParameterError(
                f"{name}: client {i}'s {what} are not real numbers ({exc})"
            ) from None
        if b.ndim != 3 or b.shape[0] < 1 or b.shape[1] != b.shape[2] or b.shape[1] < min_n:
            raise ShapeError(
                f"{name}: client {i}'s {what} have shape {b.shape}; expected (m_i, n, n) with "
                f"m_i >= 1 and n >= {min_n}"
            )
        if out and b.shape[1] != out[0].shape[1]:
            n = out[0].shape[1]
            raise ShapeError(
                f"{name}: client {i} holds {b.shape[1]}x{b.shape[1]} {what}, client 0 holds "
                f"{n}x{n}; every client's matrices must have the same size"
            )
        if not np.isfinite(b).all():
            raise ParameterError(f"{name}: client {i}'s {what} contain NaN or inf")
        out.append(b)
    return out

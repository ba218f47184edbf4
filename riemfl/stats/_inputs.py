"""The checks shared by :func:`~riemfl.stats.frechet_mean` and
:func:`~riemfl.stats.geometric_median`: the maps a manifold must have, the stack of points, the
weights, the start point, and the repeated base point of a batched map.

Every check raises a typed error (:mod:`riemfl.errors`) whose message starts with the caller's
name, says what was wrong and what was expected.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Array, is_torch, ops_for, to_like, to_numpy, widen
from ..errors import NotOnManifoldError, ParameterError, RiemflError, ShapeError
from ..manifolds.base import Manifold

__all__ = [
    "prepare",
    "require_maps",
    "point_stack",
    "normalised_weights",
    "start_point",
    "working",
    "repeat",
    "returned",
]


def require_maps(manifold: Any, maps: tuple[str, ...], where: str, hint: str = "") -> None:
    """Refuse a manifold that lacks one of ``maps`` (``ParameterError`` naming the map, the
    manifold's reason and ``hint``)."""
    if not isinstance(manifold, Manifold):
        raise ParameterError(
            f"{where}: manifold must be a riemfl Manifold, got {type(manifold).__name__}"
        )
    for name in maps:
        ok, reason = manifold.supports(name)
        if not ok:
            raise ParameterError(
                f"{where}: {manifold.name} has no {name} map ({reason}); "
                f"expected a manifold with {' and '.join(maps)}{hint}"
            )


def point_stack(manifold: Manifold, points: Any, where: str) -> Array:
    """``points`` as an array (numpy or torch) of shape ``(n, *point_shape)``, n >= 1, every
    point on the manifold (checked point by point only when the stack fails, to name the first
    point off it)."""
    if not is_torch(points):
        try:
            points = np.asarray(points)
        except (TypeError, ValueError) as exc:  # ragged nested lists
            raise ShapeError(f"{where}: points is not an array ({exc})") from exc
        if points.dtype.kind in "iu":
            points = points.astype(np.float64)
    ps = manifold.point_shape
    expected = ", ".join(["n"] + [str(s) for s in ps])
    if points.ndim != len(ps) + 1 or tuple(points.shape[1:]) != tuple(ps):
        raise ShapeError(
            f"{where}: points has shape {tuple(points.shape)}; expected ({expected}): n points "
            f"of {manifold.name}, each of shape {tuple(ps)}"
        )
    if points.shape[0] == 0:
        raise ShapeError(f"{where}: points is empty (shape {tuple(points.shape)}); expected n >= 1")
    try:
        manifold.check_point(points)
    except NotOnManifoldError as exc:
        for i in range(points.shape[0]):
            try:
                manifold.check_point(points[i])
            except NotOnManifoldError as one:
                raise type(exc)(f"{where}: points[{i}] is not on {manifold.name}: {one}") from exc
        raise
    return points


def normalised_weights(weights: Any, n: int, where: str) -> np.ndarray:
    """``weights`` as float64 numbers summing to 1 (uniform for ``None``).

    Raises
    ------
    ParameterError
        Not n real numbers, a NaN or infinity, a negative weight, or a zero sum.
    """
    if weights is None:
        return np.full(n, 1.0 / n)
    w = to_numpy(weights) if is_torch(weights) else np.asarray(weights)
    if w.dtype.kind not in "iuf":
        raise ParameterError(
            f"{where}: weights must be real numbers, got an array of dtype {w.dtype}"
        )
    if w.shape != (n,):
        raise ParameterError(
            f"{where}: weights has shape {w.shape}; expected ({n},), one weight per point"
        )
    w = w.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(w))
    if bad.size:
        raise ParameterError(
            f"{where}: weights[{bad[0]}] is {w[bad[0]]}; expected finite non-negative numbers"
        )
    bad = np.flatnonzero(w < 0)
    if bad.size:
        raise ParameterError(
            f"{where}: weights[{bad[0]}] = {w[bad[0]]} is negative; expected non-negative numbers"
        )
    top = float(w.max())
    if top == 0.0:
        raise ParameterError(f"{where}: the weights sum to 0; expected a positive sum")
    w = w / top  # no overflow in the sum
    return w / w.sum()


def start_point(manifold: Manifold, x0: Any, points: Array, where: str) -> Array | None:
    """``x0`` checked and in the type of ``points``; None for None (the caller starts at the
    first point of largest weight)."""
    if x0 is None:
        return None
    x0 = to_like(to_numpy(x0), points)
    if tuple(x0.shape) != tuple(manifold.point_shape):
        raise ShapeError(
            f"{where}: x0 has shape {tuple(x0.shape)}; expected {tuple(manifold.point_shape)}, "
            f"one point of {manifold.name}"
        )
    try:
        manifold.check_point(x0)
    except NotOnManifoldError as exc:
        raise type(exc)(f"{where}: x0 is not on {manifold.name}: {exc}") from exc
    return x0


def working(manifold: Manifold, points: Array, keep: np.ndarray | None = None) -> Array:
    """The points the iteration runs on (those of ``keep``, a boolean mask, if given):
    detached, and float32 widened to float64 and projected onto the manifold (on it within
    float32's tolerance, a float32 point is off it by about 1e-7 in float64: the logarithm of
    two copies of it would not be 0)."""
    if keep is not None and not keep.all():
        points = points[np.flatnonzero(keep).tolist()]
    wide = widen(ops_for(points).detach(points))
    if wide.dtype != points.dtype and manifold.supports("project")[0]:
        try:
            wide = manifold.project(wide)
        except RiemflError:  # no unique projection: keep the widened points
            pass
    return wide


def prepare(
    manifold: Any,
    points: Any,
    weights: Any,
    x0: Any,
    where: str,
    maps: tuple[str, ...],
    hint: str = "",
) -> tuple[Array, Array, np.ndarray, Array]:
    """The checked inputs of a statistic: ``points`` as given (a stack), working copies of the
    points of positive weight, their normalised weights, and the start point (a working copy
    of ``x0``, or else of the first point of largest weight).

    Raises what :func:`require_maps`, :func:`point_stack`, :func:`normalised_weights` and
    :func:`start_point` raise."""
    require_maps(manifold, maps, where, hint)
    points = point_stack(manifold, points, where)
    w = normalised_weights(weights, points.shape[0], where)
    start = start_point(manifold, x0, points, where)
    with ops_for(points).no_grad():
        keep = w > 0
        p = working(manifold, points, keep)
        m = p[int(np.argmax(w[keep]))] if start is None else working(manifold, start)
    return points, p, w[keep], m


def returned(m: Array, like: Array) -> Array:
    """The result ``m`` as a new array in the dtype of ``like`` (float64 rounded once)."""
    if is_torch(m):
        return m.to(like.dtype).clone()
    return np.array(m, dtype=like.dtype)


def repeat(m: Array, shape: tuple[int, ...]) -> Array:
    """``m`` repeated to ``shape`` = ``(n, *point_shape)``, as a new (writable) array."""
    return ops_for(m).zeros(shape, m) + m

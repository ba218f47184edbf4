r"""The ``out=`` buffers of :class:`~riemfl.manifolds.bezier.BezierCurve`: checks and views.

A curve evaluated at every step of a training loop can write its points (``out``) and the
gradient of its control points (``grad_out``, torch's ``grad_buffer``) into arrays the caller
allocated once. Such a buffer must have the result's shape, the control points' array type,
dtype and device, be C-contiguous and writeable, and share no memory with what the same call
reads (the control points, the incoming gradient) or writes elsewhere; otherwise a typed error
(:class:`~riemfl.errors.ShapeError` or :class:`~riemfl.errors.ParameterError`) is raised before
anything is written. Overlap is decided by :func:`numpy.shares_memory` for numpy arrays and by
the storage and byte range of each tensor (:func:`tensors_overlap`) for torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..backend import Array, is_torch
from ..errors import ParameterError, ShapeError

if TYPE_CHECKING:
    from .bezier import BezierCurve

__all__ = [
    "check_buffer",
    "check_call_buffers",
    "check_shape_dtype",
    "flat_alias",
    "tensors_overlap",
]


def check_buffer(
    control_points: Array, name: str, buf: Array, shape: tuple[int, ...], *others: Array
) -> None:
    """Raise a typed error unless ``buf`` can receive a result of ``shape`` in place.

    ``buf`` must be of the control points' array type, dtype and device, C-contiguous and
    writeable (torch: not a leaf that requires grad), and must share no memory with the control
    points or any of ``others`` (None entries are skipped): numpy decides that exactly with
    :func:`numpy.shares_memory`, torch with :func:`tensors_overlap`.
    """
    cp = control_points
    if type(cp) is not np.ndarray:
        _check_torch_buffer(cp, name, buf, shape, others)
        return
    if not isinstance(buf, np.ndarray):
        raise ParameterError(
            f"BezierCurve: {name} must be a ndarray like the control points, got "
            f"{type(buf).__name__}"
        )
    check_shape_dtype(cp, name, buf, shape)
    if not (buf.flags.c_contiguous and buf.flags.writeable):
        raise ParameterError(f"BezierCurve: {name} must be C-contiguous and writeable")
    for other in (cp, *others):
        if other is not None and np.shares_memory(buf, other):
            raise ParameterError(
                f"BezierCurve: {name} overlaps an input or another output in memory"
            )


def check_shape_dtype(control_points: Array, name: str, buf: Array, shape: tuple[int, ...]) -> None:
    """Raise ShapeError or ParameterError unless ``buf`` has ``shape`` and the control points'
    dtype."""
    if tuple(buf.shape) != tuple(shape):
        raise ShapeError(
            f"BezierCurve: {name} has shape {tuple(buf.shape)}; expected {tuple(shape)}"
        )
    if buf.dtype != control_points.dtype:
        raise ParameterError(
            f"BezierCurve: {name} has dtype {buf.dtype}; expected "
            f"{control_points.dtype} (that of the control points)"
        )


def _check_torch_buffer(
    control_points: Array, name: str, buf: Array, shape: tuple[int, ...], others: tuple[Array, ...]
) -> None:
    """The torch half of :func:`check_buffer`, in few tensor-attribute reads: it runs on
    every call of a training loop that passes buffers, where D may be small."""
    cp = control_points
    if not is_torch(buf):
        raise ParameterError(
            f"BezierCurve: {name} must be a {type(cp).__name__} like the control points, "
            f"got {type(buf).__name__}"
        )
    if buf.shape != shape or buf.dtype is not cp.dtype:
        check_shape_dtype(cp, name, buf, shape)
    if not buf.is_contiguous() or buf.device != cp.device:
        raise ParameterError(
            f"BezierCurve: {name} must be a contiguous tensor on {cp.device}, like the "
            f"control points"
        )
    if buf.requires_grad and buf.is_leaf:
        raise ParameterError(
            f"BezierCurve: {name} is a leaf tensor that requires grad; it cannot be written "
            f"in place"
        )
    for other in (cp, *others):
        if other is not None and tensors_overlap(buf, other):
            raise ParameterError(
                f"BezierCurve: {name} overlaps an input or another output in memory"
            )


def check_call_buffers(
    curve: BezierCurve, t_shape: tuple[int, ...], out: Array | None, grad_buffer: Array | None
) -> None:
    """The checks of ``curve(t, out=..., grad_buffer=...)`` (see :func:`check_buffer`)."""
    cp = curve.control_points
    if out is not None:
        check_buffer(cp, "out", out, t_shape + curve.point_shape)
    if grad_buffer is not None:
        if not is_torch(cp):
            raise ParameterError(
                "BezierCurve: grad_buffer is for torch control points (autograd); with numpy "
                "use point_and_grad(t, g, out=..., grad_out=...)"
            )
        if not curve.euclidean:
            raise ParameterError("BezierCurve: grad_buffer needs a Euclidean base")
        check_buffer(cp, "grad_buffer", grad_buffer, tuple(cp.shape), out)


def flat_alias(buf: Array, shape: tuple[int, ...]) -> Array:
    """A tensor sharing ``buf``'s (contiguous) memory, of ``shape``, without autograd history."""
    alias = buf.detach()
    return alias if alias.shape == shape else alias.view(shape)


def tensors_overlap(a: Array, b: Array) -> bool:
    r"""Whether two torch tensors on one device share memory.

    Two tensors can overlap only if they are views of one storage (one allocation, identified by
    ``untyped_storage().data_ptr()``); then they overlap where their byte ranges in it,

    .. math::
        [\,o\,s,\ (o + 1 + \textstyle\sum_k (n_k - 1)\,\sigma_k)\,s\,) \quad
        (o = \text{storage offset},\ n_k,\ \sigma_k = \text{sizes, strides},\ s =
        \text{element size}),

    intersect (empty for an empty tensor). Exact for contiguous tensors (every buffer checked is
    one); for a strided one the range also covers the gaps between its elements, so an interleaved
    view that shares no element is reported as overlapping: the safe side. Strides are
    non-negative (torch has no negative strides). Tensors made by ``torch.from_numpy`` of two
    overlapping views of one numpy array are two storages and are not detected.
    """
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    lo, hi = _storage_span(a)
    olo, ohi = _storage_span(b)
    return lo < ohi and olo < hi


def _storage_span(x: Array) -> tuple[int, int]:
    """Half-open byte range ``[lo, hi)`` of tensor ``x``'s elements within its storage."""
    size = x.element_size()
    lo = x.storage_offset() * size
    if x.is_contiguous():
        return lo, lo + x.numel() * size
    extent = 1 + sum((n - 1) * st for n, st in zip(x.shape, x.stride(), strict=True) if n > 0)
    return lo, lo + (extent if x.numel() else 0) * size

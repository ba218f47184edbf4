r"""The input policy of every public manifold map, applied once at the boundary.

:class:`~riemfl.manifolds.base.Manifold`'s public maps pass their array arguments through
:func:`common_shape` (or, off the fast path, :func:`coerce`) and :func:`all_finite` before or
after any private map sees them (the policy is written down in ``docs/manifolds.md``, section
"Input policy"):

* **array likes** (lists, tuples, scalars, numpy scalars, anything ``numpy.asarray`` takes) become
  arrays;
* **dtypes**: float32 and float64 are computed as given; arguments of both kinds are computed in
  float64 (numpy's promotion). Integer and boolean arguments, and array likes, take the floating
  dtype of the floating arguments (float64 when there is none). float16, bfloat16 and other
  low-precision floats are refused (:class:`~riemfl.errors.DTypeError`): their precision
  (:math:`\varepsilon = 10^{-3}` for float16) is coarser than the tolerances the manifold
  constraints are checked to; cast to float32 first. Complex arguments are refused unless the
  manifold sets ``supports_complex``; strings, objects and dates are refused;
* **backends**: if any argument is a torch tensor the call is a torch call: numpy arrays and array
  likes are converted to tensors of the tensors' dtype on the device of the first tensor (torch
  arguments keep their autograd graph; converting them to numpy would drop it). Tensors on two
  devices are refused;
* **non-finite values**: NaN or infinite entries in any argument raise
  :class:`~riemfl.errors.NonFiniteError` naming the argument, either from a check of the
  arguments before the map or, for the maps a manifold lists in ``_result_checked``, from a
  check of the map's result followed by a diagnosis of the arguments (see
  :meth:`~riemfl.manifolds.base.Manifold._run_map`);
* **points on the boundary** of an open manifold (finite points that ``check_point`` refuses
  there, where the metric blows up): :class:`~riemfl.errors.NotOnManifoldError` naming the map,
  traced from a non-finite result or a failure of the map, never NaN or inf (see
  :meth:`~riemfl.manifolds.base.Manifold._refuse_boundary`). The maps read such points through
  :func:`nan_unless` (:func:`positive_or_nan`), and the diagnoses locate them with
  :func:`first_nonpositive` and :func:`first_rank_deficient`.

The fast path (every argument a numpy array, or every one a torch tensor, of one float32 or
float64 dtype, one device and one shape: :func:`common_shape`) returns the arguments untouched:
one type, one dtype and one shape comparison per argument. :func:`all_finite` costs one
reduction (a BLAS dot in numpy).
"""

from __future__ import annotations

import cmath
import math
import sys
from collections.abc import Sequence

import numpy as np

from ..backend import Array, is_torch, to_numpy
from ..check_levels import check_level
from ..errors import DTypeError, NonFiniteError
from ..linalg import singular_values

__all__ = [
    "coerce",
    "common_shape",
    "all_finite",
    "check_finite",
    "first_nonfinite",
    "nan_unless",
    "positive_or_nan",
    "first_nonpositive",
    "first_rank_deficient",
]

_NUMPY_REAL = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)


def _torch_real():
    import torch

    return (torch.float32, torch.float64)


def common_shape(arrays: Sequence) -> tuple | None:
    """The shape of arguments that need no conversion, or ``None`` (take :func:`coerce`).

    No conversion is needed when every argument is a numpy array, or every one a torch tensor
    on one device (the CPU or an accelerator), of one float32 or float64 dtype and of one
    shape. Identity comparisons for the types and dtypes (a dtype equal to float64 but not
    numpy's own float64 object takes the slow path); the devices of accelerator tensors compare
    by value (``torch.device`` objects are made per call), which reads nothing from the device.
    """
    first = arrays[0]
    kind = type(first)
    if kind is np.ndarray:
        dt = first.dtype
        if dt is not _F64 and dt is not _F32:
            return None
        shape = first.shape
        for a in arrays:  # (the first compares with itself: cheaper than a slice)
            if type(a) is not kind or a.dtype is not dt or a.shape != shape:
                return None
        return shape
    torch = sys.modules.get("torch")
    if torch is None or kind is not torch.Tensor:
        return None
    dt = first.dtype
    if dt is not torch.float64 and dt is not torch.float32:
        return None
    shape = first.shape
    on_cpu = first.is_cpu
    device = None if on_cpu else first.device
    for a in arrays[1:]:
        if type(a) is not kind or a.dtype is not dt or a.shape != shape:
            return None
        if not a.is_cpu if on_cpu else a.device != device:
            return None
    return shape


def coerce(name: str, arrays: Sequence, roles: Sequence[str], complex_ok: bool = False) -> tuple:
    """Apply the input policy (array type, dtype, backend) to the arguments of one map call.

    Parameters
    ----------
    name : str
        ``"Manifold.method"``, for messages.
    arrays : sequence
        The arguments as given.
    roles : sequence of str
        Their roles (``"point x"``), for messages.
    complex_ok : bool
        Whether complex dtypes are accepted (a manifold's ``supports_complex``).

    Returns
    -------
    tuple
        The arguments as arrays of one backend, dtype and device.
    """
    first = arrays[0]
    if type(first) is np.ndarray:
        dt = first.dtype
        if dt in _NUMPY_REAL and all(
            type(a) is np.ndarray and a.dtype == dt for a in arrays[1:]
        ):  # the common case: no conversion at all
            return tuple(arrays)
    elif is_torch(first):
        dt, dev = first.dtype, first.device
        if dt in _torch_real() and all(
            is_torch(a) and a.dtype == dt and a.device == dev for a in arrays[1:]
        ):
            return tuple(arrays)
    return _convert(name, arrays, roles, complex_ok)


def _convert(name, arrays, roles, complex_ok) -> tuple:
    pairs = [_classify(name, a, role) for a, role in zip(arrays, roles, strict=True)]
    for (a, kind), role in zip(pairs, roles, strict=True):
        if kind not in ("float32", "float64", "data") and not (kind == "complex" and complex_ok):
            raise DTypeError(_refusal(name, role, a, kind))
    arrays = [a for a, _ in pairs]
    tensors = [a for a in arrays if is_torch(a)]
    if tensors:  # the tensors set dtype and device; numpy arguments are data
        wide = [kind for a, kind in pairs if kind != "data" and is_torch(a)]
        return _to_torch(name, arrays, roles, tensors, wide)
    wide = [kind for _, kind in pairs if kind != "data"]
    target = np.result_type(*[a.dtype for a, k in pairs if k != "data"]) if wide else np.float64
    return tuple(np.asarray(a, dtype=target) for a in arrays)


def _classify(name: str, a, role: str) -> tuple:
    """``(array, kind)``; array likes become numpy arrays of kind ``data`` (if numeric)."""
    if isinstance(a, np.ndarray) or is_torch(a):
        return a, _kind(a)
    try:
        out = np.asarray(a)
    except Exception as exc:  # ragged nested lists, objects numpy cannot read
        raise DTypeError(
            f"{name}: {role} is a {type(a).__name__} that does not convert to an array ({exc}); "
            f"expected a numpy array, a torch tensor or a (nested) list of numbers"
        ) from exc
    kind = _kind(out)
    return out, ("data" if kind in ("float32", "float64", "data") else kind)


def _kind(a) -> str:
    """``float32``, ``float64``, ``data`` (integers, booleans), ``complex``, ``half``, ``other``."""
    if is_torch(a):
        import torch

        dt = a.dtype
        if dt == torch.float64:
            return "float64"
        if dt == torch.float32:
            return "float32"
        if dt.is_complex:
            return "complex"
        if dt.is_floating_point:
            return "half"
        return "data"
    dt = a.dtype
    if dt.kind == "f":
        return {4: "float32", 8: "float64", 2: "half"}.get(dt.itemsize, "other")
    if dt.kind in "iub":
        return "data"
    if dt.kind == "c":
        return "complex"
    return "other"


_WHY = {
    "half": (
        "low-precision floats are refused: their rounding error is above the tolerances the "
        "manifold's constraints are checked to; cast to float32 first"
    ),
    "complex": "complex input is refused: this manifold is real (it does not set supports_complex)",
    "other": "expected real numbers (float32 or float64; integers and booleans are promoted)",
}


def _refusal(name: str, role: str, a, kind: str) -> str:
    return f"{name}: {role} has dtype {a.dtype}; {_WHY.get(kind, _WHY['other'])}"


def _to_torch(name, arrays, roles, tensors, wide_kinds) -> tuple:
    import torch

    device = tensors[0].device
    for t, role in zip(arrays, roles, strict=True):
        if is_torch(t) and t.device != device:
            raise DTypeError(
                f"{name}: {role} is on device {t.device} but an earlier argument is on {device}; "
                f"expected every tensor on one device"
            )
    if "complex" in wide_kinds:
        dtype = torch.complex128
    else:
        dtype = torch.float32 if wide_kinds and "float64" not in wide_kinds else torch.float64
    return tuple(
        (a if a.dtype == dtype else a.to(dtype))
        if is_torch(a)
        else torch.as_tensor(np.asarray(a), dtype=dtype, device=device)
        for a in arrays
    )


def all_finite(a: Array) -> bool:
    r"""Whether every entry of ``a`` (a numpy or torch array, or a scalar) is finite.

    One reduction: NaN and infinities reach :math:`\sum_i a_i^2` (a BLAS dot in numpy, where
    the squares cannot cancel an infinity) or, in torch, :math:`\sum_i a_i` (a dot for vectors;
    ``inf - inf`` is NaN), and only a non-finite value, which may also be an overflow of finite
    entries, needs the entrywise test. A scalar costs one comparison.
    """
    kind = type(a)
    if kind is np.ndarray:
        if a.ndim == 1:
            s = np.dot(a, a)
        elif a.ndim:
            s = np.vdot(a, a)
        else:
            s = a[()]
        return cmath.isfinite(s) or bool(np.isfinite(a).all())
    if kind is np.float64 or kind is np.float32:  # what numpy reductions to a scalar return
        return cmath.isfinite(a)
    if is_torch(a):
        if a.requires_grad:
            a = a.detach()
        if a.ndim == 1:
            s = a.dot(a).item()
        elif a.ndim:
            s = a.sum().item()
        else:
            return cmath.isfinite(a.item())
        return cmath.isfinite(s) or bool(a.isfinite().all())
    if isinstance(a, (float, complex, np.floating, np.complexfloating)):  # np.float64 is a float
        return cmath.isfinite(a)
    return bool(np.isfinite(np.asarray(a)).all())


def nan_unless(inside: Array, a: Array) -> Array:
    r"""``a`` where ``inside`` holds and NaN elsewhere: the boundary guard of open manifolds.

    A map of an open manifold (the Poincare ball, the open simplex, the positive orthant) whose
    formula stays finite at a point on or beyond the boundary, where the metric is infinite
    (:math:`g/\lambda_x^2 = 0` at :math:`\lambda_x = \infty`, say), reads the point, or its
    conformal factor, through this guard: its result is then non-finite there, and the result
    check of the input policy traces it to the point
    (:meth:`~riemfl.manifolds.base.Manifold._refuse_boundary`). Elementwise, on the device, with
    no host synchronisation; where ``inside`` holds the entries are ``a``'s bit for bit, with
    their autograd graph.

    Parameters
    ----------
    inside : array of bool
        Where ``a`` is valid (``sigma > 0``, ``x > 0``); broadcasts against ``a``.
    a : array
        numpy array or torch tensor.

    Returns
    -------
    array
        ``a``'s type and dtype.
    """
    if is_torch(a):
        return a.where(inside, math.nan)
    return np.where(inside, a, np.nan)  # (a Python float keeps a float32 array float32)


def positive_or_nan(x: Array) -> Array:
    """``x``, NaN where an entry is not positive: :func:`nan_unless` for the open sets bounded
    by :math:`x_i = 0` (the simplex, the positive orthant, the Birkhoff polytope), whose maps
    read their points through it.

    At the check level ``"off"`` it is ``x`` itself: the guard exists only for the checks to
    find a boundary point, and ``"off"`` runs the bare maps (a point on the boundary then gives
    the formula's value, as in a library without checks).
    """
    if check_level() == "off":
        return x
    if type(x) is np.ndarray and x.size and x.min() > 0:  # one read-only pass (NaN: False)
        return x
    return nan_unless(x > 0, x)


def first_nonpositive(x: Array, ndim: int) -> tuple[tuple[int, ...], tuple[int, ...], float] | None:
    """The first point of ``x`` with an entry <= 0, for the open sets bounded by :math:`x_i = 0`.

    Parameters
    ----------
    x : array
        A batch of points, numpy or torch.
    ndim : int
        The number of point axes (the trailing ones).

    Returns
    -------
    tuple or None
        ``(i, k, value)``: the batch index i of the first point with an entry <= 0, the index k
        of its smallest entry within the point, and that entry; None where every entry of x is
        positive.
    """
    values = to_numpy(x, np.float64)
    point = values.shape[values.ndim - ndim :]
    flat = values.reshape(values.shape[: values.ndim - ndim] + (-1,))
    low = flat.min(axis=-1)
    if not np.any(low <= 0):
        return None
    i = tuple(int(j) for j in np.argwhere(np.atleast_1d(low <= 0))[0]) if low.ndim else ()
    k = int(np.argmin(flat[i]))
    return i, tuple(int(j) for j in np.unravel_index(k, point)), float(flat[i][k])


def first_rank_deficient(x: Array, rank: int, tol: float) -> tuple[tuple[int, ...], float] | None:
    r"""The first matrix of ``x`` of numerical rank below ``rank``, for the manifolds bounded
    by the matrices of lower rank: :math:`\sigma_{\text{rank}}/\sigma_1 \le` ``tol``.

    Returns
    -------
    tuple or None
        ``(i, ratio)``: the batch index i of the first such matrix and its
        :math:`\sigma_{\text{rank}}/\sigma_1` (0 for a zero matrix); None where every matrix
        of x has numerical rank ``rank`` or more.
    """
    s = singular_values(x)
    ratio = s[..., rank - 1] / np.where(s[..., 0] > 0, s[..., 0], 1.0)
    if not np.any(ratio <= tol):
        return None
    i = tuple(int(j) for j in np.argwhere(np.atleast_1d(ratio <= tol))[0]) if ratio.ndim else ()
    return i, float(ratio[i])


def first_nonfinite(arrays: Sequence) -> int | None:
    """Index of the first argument with a NaN or infinite entry, or ``None``."""
    for i, a in enumerate(arrays):
        if not all_finite(a):
            return i
    return None


def check_finite(name: str, a: Array, role: str) -> None:
    """Raise :class:`~riemfl.errors.NonFiniteError` if ``a`` has a NaN or infinite entry."""
    if not all_finite(a):
        raise NonFiniteError(
            f"{name}: {role} contains NaN or infinite entries ({_first_bad(a)}); expected finite "
            f"values"
        )


def _first_bad(a: Array) -> str:
    values = to_numpy(a)
    bad = np.argwhere(~np.isfinite(values))
    count = len(bad)
    first = tuple(int(i) for i in bad[0]) if count else ()
    value = values[first] if count else math.nan
    return f"{count} of {values.size}, the first {value} at index {first}"

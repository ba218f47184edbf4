"""Array-namespace dispatch: one code path for numpy arrays and torch tensors.

Every map in :mod:`riemfl.manifolds` is written once against the small namespace returned by
:func:`ops_for`. For numpy input it uses numpy and scipy; for torch input it uses torch (imported
lazily, only when a tensor is seen), so results keep the input's type, dtype and device and torch
autograd flows through every map.

The namespace is deliberately small: the elementwise functions, reductions and the few dense
linear-algebra kernels the manifolds need, plus the ones numpy and torch spell differently
(``mT``, ``expm``, ``sum(..., keepdims)``).

Three questions every module asks get one answer each here: :func:`is_torch` (is this a torch
tensor?), :func:`to_numpy` (this array or tensor as numpy) and :func:`as_generator` (this seed or
generator as a :class:`numpy.random.Generator`).
"""

from __future__ import annotations

import cmath
import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from ._validation import is_int
from .errors import ParameterError

Array = Any  # numpy.ndarray or torch.Tensor
RandomState = Any  # None, int seed or numpy.random.Generator

if hasattr(np, "vecdot"):  # numpy >= 2.0

    def _vecdot(u, v):
        return np.vecdot(u, v)

else:  # pragma: no cover - numpy 1.x

    def _vecdot(u, v):
        return np.einsum("...i,...i->...", u, v)


__all__ = [
    "Array",
    "RandomState",
    "ops_for",
    "is_torch",
    "to_numpy",
    "as_generator",
    "to_like",
    "widen",
    "cast_like",
    "NUMPY",
]


def is_torch(a: object) -> bool:
    """Return True when ``a`` is a torch tensor, a subclass (a ``Parameter``) included.

    torch is looked up in :data:`sys.modules`, never imported: a tensor can only exist once torch
    has been imported, so ``import riemfl`` needs numpy alone.
    """
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(a, torch.Tensor)


def to_numpy(a: Any, dtype: Any = None) -> np.ndarray:
    """``a`` as a numpy array: a torch tensor detached and moved to the CPU, anything else through
    :func:`numpy.asarray`.

    Parameters
    ----------
    a : numpy.ndarray, torch.Tensor, scalar or sequence
        A numpy array passes through (no copy unless ``dtype`` differs); a Python or numpy scalar
        becomes a 0-d array and a (nested) list or tuple of numbers an array, as
        :func:`numpy.asarray` makes them. A sequence of tensors that need a gradient is not
        unpacked (numpy raises, as it does for such a tensor itself).
    dtype : numpy dtype, optional
        Convert to it (``numpy.float64`` for the callers that compute in double precision); by
        default the data's own dtype is kept.

    Returns
    -------
    numpy.ndarray
        It may share memory with ``a`` (the numpy array itself, or a CPU tensor's storage, as
        ``Tensor.numpy()`` does): copy it before writing into it or keeping it beyond changes of
        ``a``.
    """
    if is_torch(a):
        a = a.detach().cpu().numpy()
    return np.asarray(a, dtype=dtype)


def as_generator(seed_or_rng: RandomState, *, name: str = "") -> np.random.Generator:
    """``seed_or_rng`` as a :class:`numpy.random.Generator`.

    * a Generator is returned as it is (its state is shared with the caller);
    * an int (Python or numpy, not a bool) seeds ``numpy.random.default_rng(seed)``;
    * ``None`` gives a fresh generator seeded from the operating system's entropy (not
      reproducible), as ``numpy.random.default_rng(None)`` does.

    ``None`` follows numpy's own convention because every ``rng=None`` default in riemfl
    (``Manifold.random_point``, ``BezierCurve.sample``, ``EpsilonTunnel.sample``, the pymanopt
    adapter) documents "fresh randomness" and relies on it; the partitioners of
    :mod:`riemfl.problems.partition`, the only other users, never pass ``None`` (their ``rng`` is
    a required Generator or seed; :func:`~riemfl.problems.partition.natural_partition` reads
    ``None`` as "do not shuffle" before it gets here). riemfl never touches numpy's or torch's
    global random state.

    Parameters
    ----------
    seed_or_rng : None, int or numpy.random.Generator
    name : str, optional
        The caller, named at the start of the error message.

    Raises
    ------
    ParameterError
        For anything else (a float, a string, a bool, a legacy ``RandomState``).
    """
    if isinstance(seed_or_rng, np.random.Generator):
        return seed_or_rng
    if seed_or_rng is None or is_int(seed_or_rng):
        return np.random.default_rng(seed_or_rng)
    prefix = f"{name}: " if name else ""
    raise ParameterError(
        f"{prefix}rng must be None, an int seed or a numpy.random.Generator, got "
        f"{type(seed_or_rng).__name__}"
    )


_NUMPY_EPS: dict = {}


class _NumpyOps:
    """numpy/scipy implementation of the backend namespace."""

    name = "numpy"
    is_torch = False

    # elementwise -------------------------------------------------------------------------
    sqrt = staticmethod(np.sqrt)
    sin = staticmethod(np.sin)
    cos = staticmethod(np.cos)
    sinh = staticmethod(np.sinh)
    cosh = staticmethod(np.cosh)
    arctan = staticmethod(np.arctan)
    arcsinh = staticmethod(np.arcsinh)
    arctan2 = staticmethod(np.arctan2)
    exp = staticmethod(np.exp)
    log = staticmethod(np.log)
    log1p = staticmethod(np.log1p)
    tanh = staticmethod(np.tanh)
    arctanh = staticmethod(np.arctanh)
    abs = staticmethod(np.abs)
    where = staticmethod(np.where)
    maximum = staticmethod(np.maximum)
    concatenate = staticmethod(np.concatenate)
    stack = staticmethod(np.stack)
    einsum = staticmethod(np.einsum)
    zeros_like = staticmethod(np.zeros_like)
    ones_like = staticmethod(np.ones_like)

    @staticmethod
    def safe_sqrt(a):
        r""":math:`\sqrt{\max(a, 0)}`; in torch its derivative is 0 where :math:`a \le 0`
        (see :meth:`_TorchOps.safe_sqrt`)."""
        return np.sqrt(np.maximum(a, 0.0))

    @staticmethod
    def sum(a, axis=None, keepdims=False):
        return np.sum(a, axis=axis, keepdims=keepdims)

    @staticmethod
    def amax(a, axis=None, keepdims=False):
        return np.max(a, axis=axis, keepdims=keepdims)

    @staticmethod
    def mT(a):
        return np.swapaxes(a, -1, -2)

    @staticmethod
    def reshape(a, shape):
        return np.reshape(a, shape)

    @staticmethod
    def broadcast_to(a, shape):
        return np.broadcast_to(a, shape)

    @staticmethod
    def diagonal(a):
        return np.diagonal(a, axis1=-2, axis2=-1)

    # construction ------------------------------------------------------------------------
    @staticmethod
    def eye(n, like):
        return np.eye(n, dtype=like.dtype)

    @staticmethod
    def asarray(a, like):
        return np.asarray(a, dtype=like.dtype)

    @staticmethod
    def zeros(shape, like):
        return np.zeros(shape, dtype=like.dtype)

    @staticmethod
    def from_numpy(a, like):
        return np.asarray(a, dtype=like.dtype if like is not None else None)

    # linear algebra ----------------------------------------------------------------------
    @staticmethod
    def qr(a):
        return np.linalg.qr(a, mode="reduced")

    @staticmethod
    def expm(a):
        import scipy.linalg  # on first use: scipy adds ~30 MB to every process that imports it

        if a.dtype == np.float32:  # in float64, rounded once (see _TorchOps.expm)
            return scipy.linalg.expm(a.astype(np.float64)).astype(np.float32)
        return scipy.linalg.expm(a)

    @staticmethod
    def cholesky(a):
        return np.linalg.cholesky(a)

    @staticmethod
    def solve(a, b):
        return np.linalg.solve(a, b)

    @staticmethod
    def solve_triangular_upper(r, b, *, left=False):
        """Solve ``r x = b`` (``left=True``) or ``x r = b`` for small upper-triangular ``r``."""
        if left:
            return np.linalg.solve(r, b)
        return b @ np.linalg.inv(r)  # p x p inverse, then one n x p by p x p product

    @staticmethod
    def all_finite(a) -> bool:
        # NaN and inf reach the sum (no temporary array); only a non-finite sum needs the full test
        if cmath.isfinite(a.sum()):
            return True
        return bool(np.isfinite(a).all())

    @staticmethod
    def vecdot(u, v):
        """Inner product over the last axis, keeping it (shape ``(..., 1)``)."""
        return _vecdot(u, v)[..., None]

    @staticmethod
    def any(a) -> bool:
        return bool(np.any(a))

    @staticmethod
    def to_float(a) -> float:
        return float(np.max(a)) if np.ndim(a) else float(a)

    @staticmethod
    def eps(a) -> float:
        dt = a.dtype
        try:
            return _NUMPY_EPS[dt]
        except KeyError:
            value = float(np.finfo(dt if np.issubdtype(dt, np.floating) else np.float64).eps)
            _NUMPY_EPS[dt] = value
            return value

    @staticmethod
    def tiny(a) -> float:
        """The smallest positive normal number of ``a``'s floating dtype (float64's else)."""
        dt = a.dtype
        return float(np.finfo(dt if np.issubdtype(dt, np.floating) else np.float64).tiny)

    @staticmethod
    def detach(a):
        return a

    @staticmethod
    @contextlib.contextmanager
    def no_grad() -> Iterator[None]:
        yield


class _TorchOps:
    """torch implementation of the backend namespace (imported on first use)."""

    name = "torch"
    is_torch = True

    def __init__(self) -> None:
        import torch

        t = torch
        self.t = t
        self.sqrt = t.sqrt
        self.sin = t.sin
        self.cos = t.cos
        self.sinh = t.sinh
        self.cosh = t.cosh
        self.arctan = t.atan
        self.arcsinh = t.asinh
        self.arctan2 = t.atan2
        self.exp = t.exp
        self.log = t.log
        self.log1p = t.log1p
        self.tanh = t.tanh
        self.arctanh = t.atanh
        self.abs = t.abs
        self.einsum = t.einsum
        self.zeros_like = t.zeros_like
        self.ones_like = t.ones_like
        self._eps: dict = {}

    def where(self, c, a, b):
        return self.t.where(c, a, b)

    def safe_sqrt(self, a):
        r""":math:`\sqrt{\max(a, 0)}` with the derivative 0 (not :math:`\infty`) where
        :math:`a \le 0`: the distance and norm of riemfl's maps at coincident points.

        :math:`\frac{d}{da}\sqrt a = 1/(2\sqrt a)` is infinite at 0, and the chain rule then
        multiplies it by the derivative of the argument, which is 0 there (a squared norm has a
        zero gradient at 0): ``0 * inf = NaN``. Here the square root is taken of
        ``where(a <= 0, 1, a)`` and replaced by 0 where :math:`a \le 0`, so both branches of
        the ``where`` have finite derivatives and the gradient at 0 is the zero subgradient
        (higher derivatives stay finite too). NaN propagates (``NaN <= 0`` is false), and no
        value leaves the device (no host synchronisation).
        """
        t = self.t
        zero = a <= 0
        root = t.sqrt(t.where(zero, t.ones_like(a), a))
        return t.where(zero, t.zeros_like(a), root)

    def maximum(self, a, b):
        if not isinstance(b, self.t.Tensor):
            return self.t.clamp(a, min=b)
        return self.t.maximum(a, b)

    def stack(self, arrays, axis=0):
        return self.t.stack(list(arrays), dim=axis)

    def concatenate(self, arrays, axis=0):
        return self.t.cat(list(arrays), dim=axis)

    def sum(self, a, axis=None, keepdims=False):
        if axis is None:
            return a.sum()
        return a.sum(dim=axis, keepdim=keepdims)

    def amax(self, a, axis=None, keepdims=False):
        if axis is None:
            return a.max()
        return self.t.amax(a, dim=axis, keepdim=keepdims)

    @staticmethod
    def mT(a):
        return a.transpose(-1, -2)

    @staticmethod
    def reshape(a, shape):
        return a.reshape(shape)

    @staticmethod
    def broadcast_to(a, shape):
        return a.expand(shape)

    @staticmethod
    def diagonal(a):
        return a.diagonal(dim1=-2, dim2=-1)

    def eye(self, n, like):
        return self.t.eye(n, dtype=like.dtype, device=like.device)

    def asarray(self, a, like):
        return self.t.as_tensor(a, dtype=like.dtype, device=like.device)

    def zeros(self, shape, like):
        return self.t.zeros(shape, dtype=like.dtype, device=like.device)

    def from_numpy(self, a, like):
        return self.t.as_tensor(np.asarray(a), dtype=like.dtype, device=like.device)

    def qr(self, a):
        return self.t.linalg.qr(a, mode="reduced")

    def expm(self, a):
        # float32 is exponentiated in float64 and rounded once: torch's float32 matrix_exp is off
        # by hundreds of ulp for small skew-symmetric arguments (the Stiefel exponential's)
        if a.dtype == self.t.float32:
            return self.t.linalg.matrix_exp(a.to(self.t.float64)).to(a.dtype)
        return self.t.linalg.matrix_exp(a)

    def cholesky(self, a):
        return self.t.linalg.cholesky(a)

    def solve(self, a, b):
        return self.t.linalg.solve(a, b)

    def solve_triangular_upper(self, r, b, *, left=False):
        return self.t.linalg.solve_triangular(r, b, upper=True, left=left)

    def all_finite(self, a) -> bool:
        # NaN and inf reach the sum; only a non-finite sum (or an overflow) needs the full test.
        # detach() and item() cost a third of no_grad() and bool(isfinite(...)) per call
        a = a.detach()
        if cmath.isfinite(a.sum().item()):
            return True
        return bool(self.t.isfinite(a).all())

    def vecdot(self, u, v):
        """Inner product over the last axis, keeping it (shape ``(..., 1)``)."""
        return (u * v).sum(dim=-1, keepdim=True)

    def any(self, a) -> bool:
        return bool(a.any())

    @staticmethod
    def to_float(a) -> float:
        a = a.detach()
        return float(a.max()) if a.ndim else float(a)

    def eps(self, a) -> float:
        try:
            return self._eps[a.dtype]
        except KeyError:
            value = float(self.t.finfo(a.dtype).eps) if a.is_floating_point() else 2.0**-52
            self._eps[a.dtype] = value
            return value

    def tiny(self, a) -> float:
        """The smallest positive normal number of ``a``'s floating dtype (float64's else)."""
        return float(self.t.finfo(a.dtype if a.is_floating_point() else self.t.float64).tiny)

    @staticmethod
    def detach(a):
        return a.detach()

    def no_grad(self):
        return self.t.no_grad()


NUMPY = _NumpyOps()
_TORCH: _TorchOps | None = None


def ops_for(*arrays: Array):
    """Return the backend namespace for the given arrays (torch if any is a tensor)."""
    for a in arrays:
        if type(a) is np.ndarray:
            continue
        if is_torch(a):
            global _TORCH
            if _TORCH is None:
                _TORCH = _TorchOps()
            return _TORCH
    return NUMPY


def to_like(a: Array, like: Array) -> Array:
    """Convert ``a`` (numpy or python data) to the type, dtype and device of ``like``."""
    return ops_for(like).from_numpy(a, like) if is_torch(like) else np.asarray(a, dtype=like.dtype)


def widen(a: Array) -> Array:
    """``a`` in float64 if it is float32 (an exact conversion), else ``a`` itself.

    For maps that compute a float32 result in double precision and round it once (with
    :func:`cast_like`), as ``expm`` does; differentiable in torch.
    """
    if is_torch(a):
        torch = sys.modules["torch"]
        return a.to(torch.float64) if a.dtype == torch.float32 else a
    return a.astype(np.float64) if a.dtype == np.float32 else a


def cast_like(a: Array, like: Array) -> Array:
    """``a`` in the dtype of ``like`` (same backend; differentiable in torch)."""
    if is_torch(a):
        return a if a.dtype == like.dtype else a.to(like.dtype)
    return a.astype(like.dtype, copy=False)

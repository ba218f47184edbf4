r"""The plane rotation of AsyncCurve (Licudi 2025 (TR), eq. (17)), in O(D).

AsyncCurve corrects a stale client's learned control point by rotating its offset from the chord
midpoint with the rotation R that takes the stale update direction ``u`` to the corrected one
``w``, performed "by first projecting displacements into the plane spanned by the two
pseudo-gradients, performing the rotation in 2D, and finally adding back the orthogonal
complement" (Licudi 2025 (TR), Sec. 4): :class:`PlaneRotation` acts only in the plane spanned by
u and w and is the identity on its orthogonal complement, applied in O(D) time and memory, never
forming a D x D matrix. *A choice where the report is open:* the degenerate cases (parallel,
antiparallel or zero vectors), fixed in :class:`PlaneRotation`.
"""

from __future__ import annotations

import math

import numpy as np

from ..backend import Array, ops_for, to_numpy
from ..check_levels import level_of
from ..errors import ShapeError

__all__ = ["PlaneRotation"]


class PlaneRotation:
    r"""Rotation of :math:`\mathbb{R}^D` taking the direction of ``u`` to the direction of ``w``.

    With :math:`e_1 = u/\|u\|`, :math:`r = w - \langle w, e_1\rangle e_1`, :math:`e_2 =
    r/\|r\|`, :math:`c = \cos\angle(u, w)`, :math:`s = \sin\angle(u, w) \ge 0`:

    .. math::
        R(x) = (c x_1 - s x_2)\,e_1 + (s x_1 + c x_2)\,e_2 + x_\perp,\qquad
        x_1 = \langle x, e_1\rangle,\ x_2 = \langle x, e_2\rangle.

    Degenerate cases (defined here, the report leaves them open):

    * ``w`` parallel to ``u`` (angle 0), or ``u`` or ``w`` zero: the identity (no direction to
      rotate from or to);
    * ``w`` antiparallel to ``u`` (angle pi): the rotation by pi in the plane of :math:`e_1` and
      the deterministic :math:`e_2` obtained by orthogonalising the coordinate axis least aligned
      with :math:`e_1` (a proper rotation, determinant +1, not the reflection
      :math:`x - 2x_1e_1`).

    ``R`` is orthogonal, maps :math:`u/\|u\|` to :math:`w/\|w\|`, does not rescale (no factor
    :math:`\|w\|/\|u\|`, as in the report), and :meth:`inverse` is the rotation back. Vectors are
    the last axis; ``x`` may have leading batch dimensions. numpy and torch alike (differentiable
    in torch with respect to x, u and w away from the degenerate cases).

    At the check level ``"eager"`` the degenerate cases are told apart by reading the norms; at
    ``"deferred"`` and ``"off"`` (:mod:`riemfl.check_levels`) nothing is read: every case is
    computed and the one that holds selected elementwise (the identity as the angle 0, with
    ``identity`` False), with the same values.
    """

    def __init__(self, u: Array, w: Array, *, tol: float | None = None) -> None:
        if u.shape != w.shape or u.ndim != 1:
            raise ShapeError(
                f"PlaneRotation needs two vectors of the same length D; got shapes "
                f"{tuple(u.shape)} and {tuple(w.shape)}"
            )
        ops = ops_for(u, w)
        tol = 1e2 * ops.eps(u) if tol is None else tol
        self.dim = int(u.shape[0])
        if level_of(u) != "eager":
            self._select(ops, u, w, tol)
            return
        nu = ops.sqrt(ops.sum(u * u))
        nw = ops.sqrt(ops.sum(w * w))
        self.identity = ops.to_float(nu) <= tol or ops.to_float(nw) <= tol
        if self.identity:
            self.cos, self.sin = 1.0, 0.0
            return
        e1 = u / nu
        cos = ops.sum(w * e1) / nw
        r = w / nw - cos * e1
        nr = ops.sqrt(ops.sum(r * r))
        if ops.to_float(nr) <= tol:
            if ops.to_float(cos) > 0:
                self.identity = True
                self.cos, self.sin = 1.0, 0.0
                return
            axis = int(np.argmin(np.abs(to_numpy(e1))))
            r = -e1[axis] * e1
            r = _add_unit(ops, r, axis)
            nr = ops.sqrt(ops.sum(r * r))
            cos = -ops.ones_like(cos)
        self.e1, self.e2 = e1, r / nr
        self.cos = cos
        self.sin = ops.sqrt(ops.maximum(1.0 - cos * cos, 0.0))

    def _select(self, ops, u: Array, w: Array, tol: float) -> None:
        """The rotation without a read: each degenerate case selected where it holds, its
        unused inputs replaced by harmless values (no NaN reaches the gradient)."""
        self.identity = False
        nu, nw = ops.safe_sqrt(ops.sum(u * u)), ops.safe_sqrt(ops.sum(w * w))
        one = ops.ones_like(nu)
        zero = (nu <= tol) | (nw <= tol)
        e1 = u / ops.where(zero, one, nu)
        nw = ops.where(zero, one, nw)
        cos = ops.sum(w * e1) / nw
        r = w / nw - cos * e1
        degenerate = ops.safe_sqrt(ops.sum(r * r)) <= tol
        parallel = degenerate & (cos > 0)
        anti = degenerate & ~(cos > 0)
        # antiparallel: e2 from the coordinate axis least aligned with e1
        if ops.is_torch:
            lib = ops.t
            unit = lib.arange(self.dim, device=u.device) == lib.argmin(lib.abs(e1))
        else:
            unit = np.arange(self.dim) == np.argmin(np.abs(e1))
        unit = ops.where(unit, ops.ones_like(e1), ops.zeros_like(e1))
        r = ops.where(anti, unit - ops.sum(e1 * unit) * e1, r)
        identity = zero | parallel
        self.e1, self.e2 = e1, r / ops.where(identity, one, ops.safe_sqrt(ops.sum(r * r)))
        self.cos = ops.where(identity, one, ops.where(anti, -one, cos))
        self.sin = ops.safe_sqrt(1.0 - self.cos * self.cos)

    @property
    def angle(self) -> float:
        """Rotation angle in [0, pi]."""
        return math.atan2(float(to_numpy(self.sin)), float(to_numpy(self.cos)))

    def _apply(self, x: Array, sin) -> Array:
        if x.shape[-1] != self.dim:
            raise ShapeError(f"PlaneRotation acts on vectors of length {self.dim}; got {x.shape}")
        if self.identity:
            return x + 0.0 * x
        ops = ops_for(x)
        x1 = ops.sum(x * self.e1, axis=-1, keepdims=True)
        x2 = ops.sum(x * self.e2, axis=-1, keepdims=True)
        c = self.cos
        return x + (c * x1 - sin * x2 - x1) * self.e1 + (sin * x1 + c * x2 - x2) * self.e2

    def __call__(self, x: Array) -> Array:
        """R(x)."""
        return self._apply(x, self.sin)

    def inverse(self, x: Array) -> Array:
        """R^{-1}(x) = R^T(x), the rotation by the opposite angle."""
        return self._apply(x, -self.sin)

    def matrix(self) -> np.ndarray:
        """The D x D matrix (numpy, for tests and small D only)."""
        return np.stack([to_numpy(self(_unit(self.dim, i, self))) for i in range(self.dim)], axis=1)


def _add_unit(ops, r, axis):
    one_hot = ops.zeros_like(r)
    one_hot[axis] = 1.0
    return r + one_hot


def _unit(dim, i, rot):
    like = rot.e1 if not rot.identity else np.zeros(dim)
    v = ops_for(like).zeros_like(like) if hasattr(like, "shape") else np.zeros(dim)
    v[i] = 1.0
    return v

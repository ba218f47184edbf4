r"""The linear spaces of symmetric and of skew-symmetric n x n matrices,
:math:`\mathrm{Sym}(n) = \{X = X^\top\}` and :math:`\mathrm{Skew}(n) = \{X = -X^\top\}`, flat
manifolds with the Frobenius metric of :math:`\mathbb{R}^{n\times n}`.

They are orthogonal complements of each other in :math:`\mathbb{R}^{n\times n}`: the metric
projection onto one is the orthogonal projection :math:`\mathrm{sym}(A) = (A + A^\top)/2` or
:math:`\mathrm{skew}(A) = (A - A^\top)/2`, and the distance of A to one is the norm of its part in
the other. The flat maps (``retract``, ``exp``, ``log``, the transports) are
:class:`~riemfl.manifolds.euclidean.Euclidean`'s.
"""

from __future__ import annotations

import math
from abc import abstractmethod

from .._validation import integer
from ..backend import Array, ops_for
from ..linalg import skew, sym
from .base import Manifold
from .euclidean import Euclidean

__all__ = ["Symmetric", "SkewSymmetric"]


class _LinearSubspace(Manifold):
    r"""A linear subspace L of :math:`\mathbb{R}^{n\times n}` with the Frobenius metric: every map
    is exact (flat), ``project`` and ``to_tangent`` are the orthogonal projection onto L, and the
    constants are infinite. Subclasses give the projection (:meth:`_part`) and the words of
    the constraint."""

    #: "X = X^T" or "X = -X^T", for the messages
    constraint: str
    #: the size of the smallest matrix of the family
    smallest: int = 1

    def __init__(self, n: int) -> None:
        kind = type(self).__name__
        self.n = integer(n, f"{kind}(n): n", minimum=self.smallest)
        self.point_shape = (self.n, self.n)
        self.name = f"{kind}({self.n})"

    @staticmethod
    @abstractmethod
    def _part(a: Array) -> Array:
        """The orthogonal projection of ``a`` onto the subspace."""

    reach = math.inf
    diameter = math.inf
    injectivity_radius = math.inf

    # Euclidean's table holds (see Manifold._result_checked): to_tangent and egrad_to_rgrad are
    # sym/skew of their argument (a NaN or infinity stays non-finite: inf - inf is NaN); and
    # ehess_to_rhess, the part of h in the subspace, reads neither x, g nor u
    _result_checked = {**Euclidean._result_checked, "ehess_to_rhess": (0, 1, 3)}

    def _project(self, a):
        return self._part(a)

    def _to_tangent(self, x, a):
        return self._part(a)

    def _egrad_to_rgrad(self, x, g):
        return self._part(g)

    def _ehess_to_rhess(self, x, g, h, u):
        return self._part(h)

    _retract = Euclidean._retract
    _dist = Euclidean._dist
    _squared_dist = Euclidean._squared_dist
    _inverse_retract = Euclidean._inverse_retract
    _exp = Euclidean._exp
    _log = Euclidean._log
    _transport = Euclidean._transport
    _parallel_transport = Euclidean._parallel_transport

    def _random_point(self, batch_shape, rng):
        """The projection of a standard Gaussian matrix."""
        return self._part(rng.standard_normal(batch_shape + self.point_shape))

    def _violation(self, a) -> float:
        """Largest Frobenius norm of the part of ``a`` outside the subspace (its distance)."""
        ops = ops_for(a)
        d = a - self._part(a)
        return ops.to_float(ops.sqrt(ops.sum(d * d, axis=(-2, -1))))

    def _point_violation(self, x):
        return self.constraint, self._violation(x)

    def _tangent_violation(self, x, u):
        return self.constraint.replace("X", "U"), self._violation(u)


class Symmetric(_LinearSubspace):
    r"""Symmetric n x n matrices :math:`\mathrm{Sym}(n)`, a flat manifold of dimension
    :math:`n(n+1)/2` with the Frobenius metric.

    Sizes: ``n`` is the ambient matrix size (points are n x n); ``dim`` is :math:`n(n+1)/2`.

    * ``project`` and ``to_tangent`` (also ``egrad_to_rgrad``): :math:`\mathrm{sym}(A) = (A +
      A^\top)/2`, the orthogonal projection (the nearest symmetric matrix);
      ``ehess_to_rhess``: :math:`\mathrm{sym}(H)`;
    * ``exp`` = ``retract``: :math:`X + U`; ``log`` = ``inverse_retract``: :math:`Y - X`;
      ``dist``: :math:`\|Y - X\|_F`; both transports are the identity (every tangent space is
      Sym(n));
    * ``point_violation``: the asymmetry :math:`\|\mathrm{skew}(X)\|_F`, the distance of X
      to Sym(n).

    Constants: reach, diameter and injectivity radius are infinite (a linear space).

    Parameters
    ----------
    n : int
        Matrix size, ``n >= 1``.
    """

    def curvature_bound(self) -> tuple[float | None, str]:
        return 0.0, "flat"

    constraint = "X = X^T"
    _part = staticmethod(sym)
    # a subclass does not inherit the table (Manifold.__init_subclass__): the same maps
    _result_checked = _LinearSubspace._result_checked

    @property
    def dim(self) -> int:
        return self.n * (self.n + 1) // 2


class SkewSymmetric(_LinearSubspace):
    r"""Skew-symmetric n x n matrices :math:`\mathrm{Skew}(n) = \mathfrak{so}(n)`, a flat
    manifold of dimension :math:`n(n-1)/2` with the Frobenius metric.

    Sizes: ``n`` is the ambient matrix size (points are n x n); ``dim`` is :math:`n(n-1)/2`.

    * ``project`` and ``to_tangent`` (also ``egrad_to_rgrad``): :math:`\mathrm{skew}(A) = (A -
      A^\top)/2`, the orthogonal projection; ``ehess_to_rhess``: :math:`\mathrm{skew}(H)`;
    * ``exp`` = ``retract``: :math:`X + U`; ``log`` = ``inverse_retract``: :math:`Y - X`;
      ``dist``: :math:`\|Y - X\|_F`; both transports are the identity;
    * ``point_violation``: :math:`\|\mathrm{sym}(X)\|_F`, the distance of X to Skew(n).

    Constants: reach, diameter and injectivity radius are infinite (a linear space).

    Parameters
    ----------
    n : int
        Matrix size, ``n >= 2`` (Skew(1) is the point 0).
    """

    def curvature_bound(self) -> tuple[float | None, str]:
        return 0.0, "flat"

    constraint = "X = -X^T"
    smallest = 2
    _part = staticmethod(skew)
    _result_checked = _LinearSubspace._result_checked

    @property
    def dim(self) -> int:
        return self.n * (self.n - 1) // 2

r"""Quotients of n x k factors by the orthogonal group: points :math:`Y \sim YQ`,
:math:`Q \in O(k)`, standing for :math:`C = YY^\top`
(:class:`~riemfl.manifolds.elliptope.Elliptope`,
:class:`~riemfl.manifolds.psd_fixed_rank.PSDFixedRank`).

The vertical space at Y is :math:`\{Y\Omega : \Omega^\top = -\Omega\}`; with a total-space
metric that is Frobenius, the horizontal vectors are those with :math:`Y^\top U` symmetric.
"""

from __future__ import annotations

import numpy as np

from .._validation import integer
from ..backend import Array, ops_for
from ..errors import NotOnManifoldError
from ..linalg import solve_lyapunov
from .base import Manifold
from .inputs import first_rank_deficient

__all__ = ["FactorQuotient", "horizontal_projection"]


def horizontal_projection(y: Array, b: Array) -> Array:
    r"""Remove the vertical part :math:`Y\Omega` (:math:`\Omega` skew) of b at the factor Y.

    Returns :math:`B - Y\Omega`, with :math:`\Omega` the solution of the Lyapunov equation
    :math:`Y^\top Y\,\Omega + \Omega\,Y^\top Y = Y^\top B - B^\top Y` (skew, and unique
    since :math:`Y^\top Y \succ 0` for Y of full column rank), so that :math:`Y^\top(B -
    Y\Omega)` is symmetric: the Frobenius-orthogonal projection onto the complement of the
    vertical space :math:`\{Y\Omega\}` of a quotient by O(k). In numpy one k x k
    eigendecomposition of :math:`Y^\top Y` (:func:`_gram_lyapunov`), in torch one dense solve
    of size :math:`k^2` (:func:`riemfl.linalg.solve_lyapunov`); batched, b's batch may be
    larger than y's.
    """
    ops = ops_for(y, b)
    yt = ops.mT(y)
    ytb = yt @ b
    rhs = ytb - ops.mT(ytb)
    gram = ops.broadcast_to(yt @ y, tuple(rhs.shape))
    if type(gram) is np.ndarray and type(rhs) is np.ndarray:
        return b - y @ _gram_lyapunov(gram, rhs)
    return b - y @ solve_lyapunov(gram, rhs)


def _gram_lyapunov(m: np.ndarray, c: np.ndarray) -> np.ndarray:
    r"""Solve :math:`MS + SM = C` for a symmetric positive-definite M (numpy): with
    :math:`M = Q\Lambda Q^\top`, :math:`S = Q\,[(Q^\top C Q)_{ij}/(\lambda_i + \lambda_j)]\,Q^\top`
    (one k x k eigendecomposition instead of the dense solve of size :math:`k^2`, 5 to 10 times
    faster from k = 10). Where some :math:`\lambda_i + \lambda_j \le 0` (a factor of rank below
    k) it is the dense solve of :func:`~riemfl.linalg.solve_lyapunov`, which raises. Not used
    for torch, whose eigh has no finite derivative at repeated eigenvalues (:math:`Y^\top Y = I`).
    """
    lam, q = np.linalg.eigh(m)
    denom = lam[..., :, None] + lam[..., None, :]
    if not np.all(denom > 0):
        return solve_lyapunov(m, c)
    qt = np.swapaxes(q, -1, -2)
    return q @ ((qt @ c @ q) / denom) @ qt


class FactorQuotient(Manifold):
    """What the quotients of n x k factors by O(k) share: the sizes (integers ``n >= k >=
    minimum_k``, else :class:`~riemfl.errors.ParameterError`), the name, the
    representative-free :meth:`point_gap` and the horizontality measure of tangent vectors.
    ``transport`` is the base class's: ``to_tangent`` at the new representative."""

    minimum_k = 1

    def __init__(self, n: int, k: int) -> None:
        family = type(self).__name__
        self.k = integer(k, f"{family}(n, k): k", minimum=self.minimum_k)
        self.n = integer(n, f"{family}(n, k): n (n >= k)", minimum=self.k)
        self.point_shape = (self.n, self.k)
        self.name = f"{family}({self.n}, {self.k})"

    def _first_rank_deficient(self, x, tol: float) -> tuple[float, str] | None:
        r"""``(ratio, at)`` for the first factor with :math:`\sigma_k/\sigma_1 \le` ``tol``
        (``at``: " (batch element i)", or "" for a single point), or None."""
        found = first_rank_deficient(x, self.k, tol)
        if found is None:
            return None
        i, ratio = found
        return ratio, f" (batch element {i})" if i else ""

    def _check_rank(self, x, tol: float) -> None:
        """Raise :class:`~riemfl.errors.NotOnManifoldError` unless every factor has numerical
        rank k (:math:`\\sigma_k/\\sigma_1 >` ``tol``), naming the ratio and the batch element."""
        found = self._first_rank_deficient(x, tol)
        if found is not None:
            ratio, at = found
            raise NotOnManifoldError(
                f"{self.name}: point is not on the manifold: constraint rank Y = {self.k} "
                f"(sigma_{self.k}/sigma_1 > atol) is violated: sigma_{self.k}/sigma_1 = "
                f"{ratio:.3e} <= atol {tol:.1e}{at}"
            )

    def _boundary_violation(self, x: Array, name: str = "x") -> tuple[str, str] | None:
        r"""The first factor of rank below k, as ``check_point`` measures it (see
        :meth:`~riemfl.manifolds.base.Manifold._boundary_violation`): there :math:`Y^\top Y`
        is singular, so the vertical space, the horizontal projection and the quotient maps
        are not defined."""
        tol = self.default_atol(x)
        found = self._first_rank_deficient(x, tol)
        if found is None:
            return None
        ratio, at = found
        return (
            f"sigma_{self.k}/sigma_1 = {ratio:.3e} <= atol {tol:.1e}{at}: the factor has "
            f"numerical rank below {self.k}, on the boundary of the quotient, where {name}^T "
            f"{name} is singular and the horizontal space is not defined",
            f"a factor {name} of rank {self.k}",
        )

    def _skew_violation(self, x, u) -> float:
        r"""Largest :math:`\|Y^\top U - U^\top Y\|_F` over the batch (0 for horizontal U)."""
        ops = ops_for(x, u)
        xtu = ops.mT(x) @ u
        d = xtu - ops.mT(xtu)
        return ops.to_float(ops.amax(ops.sqrt(ops.sum(d * d, axis=(-2, -1)))))

    def _point_gap(self, x: Array, y: Array) -> Array:
        r""":math:`\|XX^\top - YY^\top\|_F` (independent of the representatives)."""
        ops = ops_for(x, y)
        d = x @ ops.mT(x) - y @ ops.mT(y)
        return ops.sqrt(ops.sum(d * d, axis=(-2, -1)))

r"""The manifold :math:`\mathcal S_+(k, n) = \{C \in \mathbb{R}^{n\times n} : C = C^\top
\succeq 0,\ \operatorname{rank} C = k\}` of positive-semidefinite matrices of rank k, as the
quotient :math:`\mathbb{R}_*^{n\times k}/O(k)` of the full-rank factors Y (:math:`C = YY^\top`,
:math:`Y \sim YQ`) with the Euclidean metric on horizontal vectors (Journée, Bach, Absil &
Sepulchre 2010; Massart & Absil 2020, whose geodesics are the horizontal straight lines), as
pymanopt's ``PSDFixedRank``.
"""

from __future__ import annotations

import numpy as np

from ..backend import Array, is_torch, ops_for, to_numpy, widen
from ..check_levels import level_of, refuse
from ..errors import CutLocusError, NotOnManifoldError, ProjectionError
from ..linalg import factorisable, polar, qr_positive, singular_values
from .factor_quotient import FactorQuotient, horizontal_projection
from .fixedrank import device_singular_values

__all__ = ["PSDFixedRank"]


def _first(mask: np.ndarray) -> str:
    index = tuple(int(i) for i in np.argwhere(np.atleast_1d(mask))[0]) if mask.ndim else ()
    return f" (batch element {index})" if index else ""


def _device_eigvalsh(a: Array) -> Array:
    """Eigenvalues (ascending) of symmetric matrices, in ``a``'s type and on its device."""
    if is_torch(a):
        import torch

        return torch.linalg.eigvalsh(factorisable(a))
    return np.linalg.eigvalsh(a)


def _low_rank_message(name: str, k: int, what: str, expected: str, ratio: Array, low: Array) -> str:
    """The error of a factor of numerical rank below k (``ratio``: sigma_k/sigma_1 of each
    factor, ``low`` where it is at most the tolerance)."""
    ratio = to_numpy(ratio, np.float64)
    return (
        f"{name}: {what} has numerical rank below {k} (sigma_{k}/sigma_1 = "
        f"{float(np.min(ratio)):.3e}){_first(to_numpy(low))}; {expected}"
    )


def _exp_domain_message(name: str, k: int, low: Array, out: Array) -> str:
    """The CutLocusError of exp where Y^T (Y + U) is not positive definite (``low``: its
    smallest eigenvalues, ``out`` where they are below the tolerance)."""
    return (
        f"{name}: exp is defined where Y^T (Y + U) is positive definite (the segment Y + tU then "
        f"keeps rank {k}); its smallest eigenvalue is {float(np.min(to_numpy(low))):.3e}"
        f"{_first(to_numpy(out))}. Expected a shorter U (|U|_2 < sigma_{k}(Y) is always inside)"
    )


class PSDFixedRank(FactorQuotient):
    r"""Positive-semidefinite n x n matrices of rank k, :math:`C = YY^\top`, represented by
    n x k factors Y of full column rank modulo :math:`Y \sim YQ`, :math:`Q \in O(k)`.

    Sizes: ``n`` and ``k`` are ambient sizes (factors are n x k, the matrices C n x n), ``k``
    the rank; ``dim`` is :math:`nk - k(k-1)/2`.

    Total space :math:`\mathbb{R}_*^{n\times k}` (an open subset of :math:`\mathbb{R}^{n\times
    k}`) with the Frobenius metric; vertical space :math:`\{Y\Omega : \Omega^\top =
    -\Omega\}`; horizontal space :math:`\{U : Y^\top U = U^\top Y\}`. O(k) acts by isometries,
    so the quotient is Riemannian and (Journée et al. 2010; Massart & Absil 2020):

    * ``to_tangent`` (also ``egrad_to_rgrad``): the horizontal projection :math:`P^h_Y(A) =
      A - Y\Omega`, :math:`Y^\top Y\,\Omega + \Omega\,Y^\top Y = Y^\top A - A^\top Y` (see
      :func:`~riemfl.manifolds.elliptope.horizontal_projection`); ``inner``: Frobenius;
    * ``retract`` = ``exp``: :math:`Y + U`. A horizontal line stays horizontal
      (:math:`(Y + tU)^\top U = Y^\top U + tU^\top U` is symmetric), so while it has full rank
      it is a geodesic of the total space that projects to a geodesic of the quotient (a
      Riemannian submersion). riemfl's ``exp`` is defined on :math:`D_Y = \{U : Y^\top(Y + U)
      \succ 0\}`, where :math:`Y^\top(Y + tU) = (1 - t)Y^\top Y + tY^\top(Y + U) \succ 0` keeps
      the segment of rank k; it contains the ball :math:`\|U\|_2 < \sigma_k(Y)`. Outside
      :math:`D_Y` ``exp`` raises ``CutLocusError`` (the line may still stay of rank k there;
      riemfl does not decide it). ``retract`` is :math:`Y + U` for every U and raises
      ``NotOnManifoldError`` where :math:`Y + U` has numerical rank below k;
    * ``log`` = ``inverse_retract``: :math:`ZQ - Y` with :math:`Q = \mathrm{polar}(Z^\top Y)`
      the Procrustes alignment of Z to Y (Massart & Absil 2020); :math:`Y^\top ZQ` is then
      symmetric positive definite, so the result is horizontal, in :math:`D_Y`, and ``exp``
      inverts it. ``dist`` = :math:`\min_Q\|ZQ - Y\|_F` (the length of the segment, minimal
      among all curves between the fibres). ``CutLocusError`` where :math:`Z^\top Y` is
      singular (Q not unique);
    * ``ehess_to_rhess``: :math:`P^h_Y(H)` (the total space is flat; the Hessian of a function
      with :math:`\bar f(YQ) = \bar f(Y)`, as in pymanopt);
    * ``transport``: :math:`P^h_{Y'}(U)`; ``parallel_transport``: unsupported;
    * ``project``: the identity on full-rank matrices (the total space is open: each of its
      points is its own nearest point); ``ProjectionError`` below rank k, where none is nearest.

    Points are compared with :meth:`point_gap`, :math:`\|XX^\top - YY^\top\|_F`.

    Constants: ``diameter`` infinite (a cone). ``reach`` and
    ``injectivity_radius`` have no positive uniform value (see ``unsupported``);
    :meth:`local_reach` is :math:`\sigma_k(Y)`.

    Parameters
    ----------
    n, k : int
        The matrices are n x n of rank k, ``n >= k >= 1``; a factor Y is n x k.
    """

    unsupported = {
        "parallel_transport": (
            "the parallel transport of the PSDFixedRank quotient is not the Euclidean one "
            "(the O'Neill tensor of the submersion adds a term) and has no closed form in riemfl; "
            "use transport (horizontal projection)"
        ),
        "reach": (
            "the total space of full-rank factors is open: the projection (the identity) is "
            "single-valued on the ball of radius sigma_k(Y) around Y, which tends to 0 near "
            "rank-deficient factors, so the uniform constant is 0; use local_reach(x)"
        ),
        "injectivity_radius": (
            "the PSDFixedRank quotient is not complete (the geodesic t -> (1 - t) Y reaches rank "
            "0 at t = 1), so its injectivity radius has no positive lower bound; exp is defined "
            "on the ball |U|_2 < sigma_k(Y) and beyond"
        ),
    }

    @property
    def dim(self) -> int:
        return self.n * self.k - self.k * (self.k - 1) // 2

    diameter = float("inf")

    def local_reach(self, x: Array) -> Array:
        r""":math:`\sigma_k(Y)`, the distance from Y to the rank-deficient factors (on that ball
        the projection, the identity, is single-valued). One value per point, in x's type."""
        self._shape(x, "point x")
        if is_torch(x):
            import torch

            return torch.linalg.svdvals(factorisable(x))[..., self.k - 1]
        return np.linalg.svd(x, compute_uv=False)[..., self.k - 1]

    # ------------------------------------------------------------------ helpers
    def _rtol(self, a) -> float:
        return self.n * ops_for(a).eps(a)

    def _low_rank(self, a) -> tuple[np.ndarray, np.ndarray]:
        """Mask of the factors of numerical rank below k, and sigma_k/sigma_1."""
        s = singular_values(a)
        ratio = s[..., self.k - 1] / np.where(s[..., 0] > 0, s[..., 0], 1.0)
        return ratio <= self._rtol(a), ratio

    # ------------------------------------------------------------------ maps
    def _to_tangent(self, x, a):
        return horizontal_projection(x, a)

    def _ehess_to_rhess(self, x, g, h, u):
        return horizontal_projection(x, h)

    def _full_rank(self, a, error: type[Exception], what: str, expected: str):
        """a itself, or ``error`` where a factor of a has numerical rank below k (at the
        check level of a: sigma_k/sigma_1 in float64 on the device at ``"deferred"``)."""
        level = level_of(a)
        if level == "off":
            return a
        if level == "eager":
            low, ratio = self._low_rank(a)
        else:
            s = widen(device_singular_values(a))
            ops = ops_for(s)
            top = s[..., 0]
            ratio = s[..., self.k - 1] / ops.where(top > 0, top, ops.ones_like(top))
            low = ratio <= self._rtol(a)
        refuse(low, error, _low_rank_message, self.name, self.k, what, expected, ratio, low)
        return a

    def _project(self, a):
        why = (
            f"full-rank factors come arbitrarily close but none is nearest. Expected rank {self.k}"
        )
        return self._full_rank(a + 0.0, ProjectionError, "the ambient matrix", why)

    def _retract(self, x, u):
        why = f"expected a shorter U (|U|_2 < sigma_{self.k}(Y) is always safe)"
        return self._full_rank(x + u, NotOnManifoldError, "Y + U", why)

    def _exp(self, x, u):
        ops = ops_for(x, u)
        level = level_of(x)
        if level == "off":
            return x + u
        m = ops.mT(x) @ (x + u)
        if level == "eager":  # numpy float64 (one read)
            m = to_numpy(m).astype(np.float64)
            lam = np.linalg.eigvalsh(0.5 * (m + np.swapaxes(m, -1, -2)))
        else:  # float64 on the device, outside autograd (no read)
            m = widen(ops.detach(m))
            lam = _device_eigvalsh(0.5 * (m + ops.mT(m)))
        lops = ops_for(lam)
        top = lops.amax(lops.abs(lam), axis=-1)
        out = lam[..., 0] <= self._rtol(x) * lops.where(top > 0, top, lops.ones_like(top))
        refuse(out, CutLocusError, _exp_domain_message, self.name, self.k, lam[..., 0], out)
        return x + u

    def _log(self, x, y):
        ops = ops_for(x, y)
        try:
            q = polar(ops.mT(y) @ x, what=f"matrix Z^T Y of {self.name}.log")
        except ProjectionError as exc:
            raise CutLocusError(
                f"{self.name}: Z^T Y is singular, so the Procrustes alignment of Z to Y is not "
                f"unique and log is not defined ({exc})"
            ) from exc
        return y @ q - x

    def _inverse_retract(self, x, y):
        return self._log(x, y)

    # ------------------------------------------------------------------ sampling and checks
    def _random_point(self, batch_shape, rng):
        """``U diag(s) V^T`` with Haar frames and :math:`s_i \\sim U[1, 2]`: :math:`\\sigma_k
        \\ge 1`, so every tangent vector of norm below 1 is in the domain of exp."""
        u = qr_positive(rng.standard_normal(batch_shape + (self.n, self.k)))
        v = qr_positive(rng.standard_normal(batch_shape + (self.k, self.k)))
        s = rng.uniform(1.0, 2.0, size=batch_shape + (self.k,))
        return (u * s[..., None, :]) @ np.swapaxes(v, -1, -2)

    def _point_violation(self, x):
        """Rank is discrete: 1.0 where some factor has numerical rank below k, else 0.0
        (:meth:`_check_point` measures sigma_k/sigma_1 against atol instead)."""
        low, _ = self._low_rank(x)
        return f"rank Y = {self.k} (sigma_{self.k}/sigma_1 > 0)", float(np.any(low))

    def _check_point(self, x: Array, tol: float) -> None:
        """Raise :class:`~riemfl.errors.NotOnManifoldError` unless Y has numerical rank k
        (:math:`\\sigma_k/\\sigma_1 >` ``tol``), naming the ratio and the batch element."""
        self._check_rank(x, tol)

    def _tangent_violation(self, x, u):
        return "Y^T U symmetric (horizontal)", self._skew_violation(x, u)

r"""The elliptope of rank-k correlation matrices, :math:`\mathcal E(n, k) = \{C = YY^\top :
Y \in \mathbb{R}^{n\times k},\ \|Y_{i,:}\| = 1,\ \operatorname{rank} Y = k\}`, as the quotient
of the n x k matrices with unit-norm rows and full column rank by the orthogonal group O(k)
(:math:`Y \sim YQ`), following Journée, Bach, Absil & Sepulchre (2010) and pymanopt's
``Elliptope``.

A point is a representative factor Y; tangent vectors are horizontal lifts at Y. The total
space is the product of n unit spheres :math:`S^{k-1}` (the rows) with the Frobenius metric,
and the quotient metric is the Frobenius metric on horizontal vectors.
"""

from __future__ import annotations

import math

import numpy as np

from ..backend import ops_for
from ..check_levels import refuse
from ..errors import ProjectionError
from .factor_quotient import FactorQuotient, horizontal_projection
from .sphere import Sphere, ambient_norm

__all__ = ["Elliptope"]


def _zero_row_message(name: str, what: str) -> str:
    return (
        f"{name}: a row of the {what} is zero (to rounding), so every unit vector is nearest to "
        f"it and the projection is not unique; expected nonzero rows"
    )


class Elliptope(FactorQuotient):
    r"""Elliptope :math:`\mathcal E(n, k)`: n x n correlation matrices :math:`C = YY^\top` of
    rank k, represented by n x k factors Y with unit-norm rows, modulo :math:`Y \sim YQ`,
    :math:`Q \in O(k)`.

    Sizes: ``n`` and ``k`` are ambient sizes (factors are n x k, the matrices C n x n); ``dim``
    is :math:`nk - n - k(k-1)/2`.

    Total space :math:`\overline{\mathcal M} = \{Y : \|y_i\| = 1\}` (the rows :math:`y_i`),
    an oblique manifold of rows, with the Frobenius metric. Vertical space at Y:
    :math:`\{Y\Omega : \Omega^\top = -\Omega\}`; horizontal space: the tangent vectors U
    (:math:`\langle y_i, u_i\rangle = 0`) with :math:`Y^\top U` symmetric. The quotient is a
    Riemannian quotient (O(k) acts by isometries), so (Journée, Bach, Absil & Sepulchre 2010;
    Absil, Mahony & Sepulchre 2008, sec. 3.6 and 5.3.4):

    * ``to_tangent`` (also ``egrad_to_rgrad``): the horizontal projection
      :math:`P^h_Y(A) = B - Y\Omega`, with :math:`B = A - \mathrm{diag}(\langle y_i,
      a_i\rangle)Y` the row-wise tangent projection and :math:`\Omega` the skew solution of the
      Lyapunov equation :math:`Y^\top Y\,\Omega + \Omega\,Y^\top Y = Y^\top B - B^\top Y`
      (unique since :math:`Y^\top Y \succ 0`; one k x k eigendecomposition of :math:`Y^\top Y`
      in numpy, a dense solve of size :math:`k^2` in torch);
      ``inner``: Frobenius;
    * ``retract``: row normalisation of Y + U, the metric projection of the total space, so a
      second-order retraction there (:math:`\ddot c(0)` is normal to the total space) and on the
      quotient (the normal space is orthogonal to the horizontal space);
    * ``project``: row normalisation :math:`a_i/\|a_i\|`, the metric projection onto the total
      space (a nearest representative, unique on the tube of radius 1, as for
      :class:`~riemfl.manifolds.oblique.Oblique`); it commutes with :math:`A \mapsto AQ`, so it
      is well defined on the classes. ``ProjectionError`` at a zero row;
    * ``ehess_to_rhess``: the horizontal projection of the total-space Hessian,
      :math:`P^h_Y\big(H - \mathrm{diag}(\langle y_i, g_i\rangle)\,U\big)` (the Hessian of a
      function with :math:`\bar f(YQ) = \bar f(Y)`, as in pymanopt's ``Elliptope``);
    * ``transport``: :math:`P^h_{Y'}(U)` (projection onto the horizontal space at the new
      representative);
    * exp, log, dist, parallel transport and ``inverse_retract``: unsupported (no closed form;
      see ``unsupported``).

    Points are compared with :meth:`point_gap`, :math:`\|XX^\top - YY^\top\|_F`, which does not
    depend on the representatives.

    Constants: ``reach`` 1 (that of the total space: within 1 of it no row is 0);
    ``diameter`` :math:`\sqrt2\,n`, a bound on :math:`\|C_1 - C_2\|_F` over correlation
    matrices (:math:`\|C\|_F \le \mathrm{tr}\,C = n` and :math:`\langle C_1, C_2\rangle \ge 0`),
    attained where two orthogonal sign vectors exist (a Hadamard matrix of order n: n = 2, 4,
    ...) and k >= 1, an upper bound otherwise; ``injectivity_radius`` unsupported (no exp).

    Parameters
    ----------
    n : int
        Size of the correlation matrices (rows of Y), ``n >= k``.
    k : int
        The rank (columns of Y), ``k >= 2``.
    """

    unsupported = {
        "exp": (
            "the geodesics of the elliptope quotient have no closed form (the retraction, row "
            "normalisation of Y + U, is second order)"
        ),
        "log": "the elliptope quotient has no closed-form exp, and no log either",
        "dist": "the geodesic distance of the elliptope quotient has no closed form",
        "parallel_transport": (
            "the elliptope quotient has no closed-form geodesics, so no parallel transport; use "
            "transport (horizontal projection)"
        ),
        "inverse_retract": (
            "inverting the row-normalisation retraction on the quotient means finding the "
            "horizontal U and Q in O(k) with normalise_rows(Y + U) = Y'Q, a nonlinear problem "
            "with no closed form"
        ),
        "injectivity_radius": (
            "the elliptope quotient provides no exp (its geodesics have no closed form), and no "
            "bound on its injectivity radius is known to riemfl"
        ),
    }

    minimum_k = 2

    def __init__(self, n: int, k: int) -> None:
        super().__init__(n, k)
        self._sphere = Sphere(self.k)

    @property
    def dim(self) -> int:
        return self.n * (self.k - 1) - self.k * (self.k - 1) // 2

    reach = 1.0

    @property
    def diameter(self) -> float:
        return math.sqrt(2.0) * self.n

    # ------------------------------------------------------------------ helpers
    def _rows_tangent(self, x, a):
        """Row-wise tangent projection :math:`a_i - \\langle y_i, a_i\\rangle y_i`."""
        return a - x * ops_for(x, a).sum(x * a, axis=-1, keepdims=True)

    # ------------------------------------------------------------------ maps
    def _to_tangent(self, x, a):
        return horizontal_projection(x, self._rows_tangent(x, a))

    def _ehess_to_rhess(self, x, g, h, u):
        ops = ops_for(x, g, h, u)
        return self._to_tangent(x, h - u * ops.sum(x * g, axis=-1, keepdims=True))

    def _normalise_rows(self, a, what: str):
        """:math:`a_i/\\|a_i\\|` per row (the sphere's projection with the rows as a batch:
        its norm, overflow-safe, and a check of zero rows at the check level of a)."""
        nrm = ambient_norm(a)
        refuse(nrm <= ops_for(a).eps(a) * 10, ProjectionError, _zero_row_message, self.name, what)
        return a / nrm

    def _project(self, a):
        return self._normalise_rows(a, "ambient matrix")

    def _retract(self, x, u):
        return self._normalise_rows(x + u, "matrix Y + U of retract")

    def _random_point(self, batch_shape, rng):
        """Independent uniform rows (normalised Gaussian vectors); full rank almost surely."""
        y = rng.standard_normal(batch_shape + self.point_shape)
        return y / np.linalg.norm(y, axis=-1, keepdims=True)

    def _point_violation(self, x):
        ops = ops_for(x)
        norms = ops.sqrt(ops.sum(x * x, axis=-1))
        return "|y_i| = 1 for every row y_i", ops.to_float(ops.amax(ops.abs(norms - 1.0)))

    def _check_point(self, x, tol: float) -> None:
        """Unit rows within ``atol`` (:meth:`_point_violation`), and rank k: a factor of
        numerical rank below k (:math:`\\sigma_k/\\sigma_1 \\le` ``atol``) is on the boundary
        of the quotient, where :math:`Y^\\top Y` is singular and the horizontal projection is
        not defined."""
        super()._check_point(x, tol)
        self._check_rank(x, tol)

    def _tangent_violation(self, x, u):
        ops = ops_for(x, u)
        rows = ops.to_float(ops.amax(ops.abs(ops.sum(x * u, axis=-1))))
        skew = self._skew_violation(x, u)
        return "<y_i, u_i> = 0 for every row and Y^T U symmetric (horizontal)", max(rows, skew)

r"""The Grassmann manifold :math:`\mathrm{Gr}(n, p)` of p-dimensional subspaces of
:math:`\mathbb{R}^n`, represented by orthonormal bases (points of St(n, p)), with the quotient
geometry :math:`\mathrm{St}(n,p)/O(p)`.

Tangent vectors are horizontal lifts at the representative X: :math:`X^\top U = 0`.
All maps are written as symmetric-matrix functions of :math:`G = U^\top U` (or of
:math:`M^\top M`), evaluated through :func:`riemfl.linalg.sym_function`; no SVD is taken, so
torch gradients stay finite at coincident points and repeated principal angles.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import integer
from ..backend import Array, ops_for
from ..check_levels import level_of, refuse, refuse_nonfinite
from ..errors import CutLocusError
from ..linalg import polar, require_finite, sym_function
from .base import Manifold, dist_from_squared, result_checked
from .elementary import (
    atan_sqrt_over,
    cos_sqrt,
    cosm1_over,
    d_atan_sqrt_over,
    d_cos_sqrt,
    d_cosm1_over,
    d_sinc_sqrt,
    sinc_sqrt,
)
from .stiefel import Stiefel

__all__ = ["Grassmann"]


def _singular_message(name: str) -> str:
    return (
        f"{name}: X^T Y is singular (a principal angle is pi/2), so Y is on the cut locus of X; "
        f"log and inverse_retract are not defined there"
    )


def _nonfinite_inverse_message(name: str) -> str:
    return f"{name}: X^T Y is singular (a principal angle is pi/2)"


class Grassmann(Manifold):
    r"""Grassmann manifold :math:`\mathrm{Gr}(n, p)`, points as n x p orthonormal bases.

    Sizes: ``n`` and ``p`` are ambient sizes of the bases (points are n x p); ``dim`` is
    :math:`p(n - p)`.

    Quotient geometry of :math:`\mathrm{St}(n,p)/O(p)` (Edelman, Arias, Smith 1998; Bendokat,
    Zimmermann, Absil 2024, "A Grassmann manifold handbook"). With :math:`G = U^\top U`:

    * horizontal projection :math:`P_X(A) = A - X X^\top A` (also the Riemannian gradient);
    * :math:`\mathrm{Exp}_X(U) = X\cos(\sqrt G) + U\,\mathrm{sinc}(\sqrt G)` (the SVD form
      :math:`XV\cos\Sigma V^\top + \hat U\sin\Sigma V^\top` of Edelman et al., Thm 2.3);
    * :math:`\mathrm{Log}_X(Y) = M\,\arctan(\sqrt{M^\top M})(M^\top M)^{-1/2}` with
      :math:`M = (I - XX^\top)Y(X^\top Y)^{-1}` (Edelman et al. sec. 2.5.1); undefined where
      :math:`X^\top Y` is singular (a principal angle of :math:`\pi/2`: ``CutLocusError``);
    * ``dist``: :math:`\|\theta\|_2`, principal angles :math:`\theta_i =
      \arctan\sqrt{\lambda_i(M^\top M)}`; ``squared_dist`` :math:`\sum_i \theta_i^2 =
      \sum_i\lambda_i(\arctan\sqrt{\lambda_i}/\sqrt{\lambda_i})^2` (no square root of the
      eigenvalues, which all vanish at :math:`Y = X`);
    * parallel transport along the geodesic (Edelman et al. Thm 2.4), written without SVD as
      :math:`\tau V = V - X\,\mathrm{sinc}(\sqrt G)\,U^\top V + U\,h(G)\,U^\top V` with
      :math:`h(\lambda) = (\cos\sqrt\lambda - 1)/\lambda`, then moved to the representative Y;
    * Riemannian Hessian, horizontally lifted (the Riemannian quotient connection: Absil,
      Mahony & Sepulchre 2008; Boumal 2023, Ch. 9): :math:`\operatorname{Hess} f(X)[U] =
      P_X\big(\nabla^2\bar f(X)[U] - U\,\mathrm{sym}(X^\top\nabla\bar f(X))\big)`. For a
      function of the subspace (:math:`\bar f(XQ) = \bar f(X)` for orthogonal Q),
      :math:`X^\top\nabla\bar f(X)` is symmetric and this is the textbook
      :math:`P_X(\nabla^2\bar f(X)[U]) - U X^\top\nabla\bar f(X)`; the symmetric part keeps the
      map self-adjoint for any :math:`\bar f`, and it is then the second derivative of
      :math:`\bar f` along the retraction and along exp (:math:`\tfrac{d^2}{dt^2}\bar f(c(t)) =
      \langle\nabla^2\bar f[U], U\rangle - \langle\nabla\bar f, X U^\top U\rangle` at t = 0);
    * ``project``: the polar factor (an orthonormal basis of span(A), the nearest representative),
      ``retract``: :math:`\mathrm{span}(X + U)` via the polar factor; its exact inverse is
      :math:`Y (X^\top Y)^{-1} - X`.

    Points are compared with :meth:`point_gap`, :math:`\|XX^\top - YY^\top\|_F =
    \sqrt2\,\|(I - XX^\top) Y\|_F`, which does not depend on the representatives.

    Constants: proximal smoothness 1 (that of the representatives in St(n, p), where the polar
    factor is unique); ``diameter`` is the geodesic diameter :math:`\frac\pi2\sqrt{\min(p, n-p)}`
    (the quotient has no ambient embedding in this representation); injectivity radius
    :math:`\pi/2`.
    """

    def curvature_bound(self) -> tuple[float | None, str]:
        return 2.0, "sectional curvature in [0, 2] (Zimmermann and Stoye 2024b, arXiv:2403.01879)"

    def __init__(self, n: int, p: int) -> None:
        self.n = integer(n, "Grassmann(n, p): n", minimum=2)
        self.p = integer(p, "Grassmann(n, p): p (p < n)", minimum=1, maximum=self.n - 1)
        self.point_shape = (self.n, self.p)
        self.name = f"Grassmann({self.n}, {self.p})"
        self._stiefel = Stiefel(self.n, self.p)

    @property
    def dim(self) -> int:
        return self.p * (self.n - self.p)

    reach = 1.0
    injectivity_radius = math.pi / 2

    # the cheap maps (see Manifold._result_checked): to_tangent is a polynomial in X and A, the
    # retraction and transport reach guarded polar factors; x is not read by the metric
    _result_checked = result_checked(
        "to_tangent", "egrad_to_rgrad", "retract", "transport", inner=(0,), norm=(0,)
    )

    @property
    def diameter(self) -> float:
        return 0.5 * math.pi * math.sqrt(min(self.p, self.n - self.p))

    def _project(self, a):
        return polar(a, what=f"ambient matrix given to {self.name}.project")

    def _to_tangent(self, x, a):
        return a - x @ (ops_for(x, a).mT(x) @ a)

    def _retract(self, x, u):
        return polar(x + u, what=f"matrix X + U of {self.name}.retract")

    def _ehess_to_rhess(self, x, g, h, u):
        ops = ops_for(x, g, h, u)
        xtg = ops.mT(x) @ g
        return self._to_tangent(x, h - u @ (0.5 * (xtg + ops.mT(xtg))))

    def _gram_inverse(self, x, y):
        r""":math:`(X^\top Y)^{-1}`, refused (CutLocusError) where it is singular; torch at the
        check levels ``"deferred"`` and ``"off"``: ``solve_ex``, which neither raises nor
        synchronises, and the two verdicts deferred."""
        ops = ops_for(x, y)
        m = ops.mT(x) @ y
        eye = ops.broadcast_to(ops.eye(self.p, m), m.shape)
        if ops.is_torch and level_of(m) != "eager":
            inv, info = ops.t.linalg.solve_ex(m, eye)
            refuse(info != 0, CutLocusError, _singular_message, self.name)
        else:
            try:
                inv = ops.solve(m, eye)
            except Exception as exc:
                raise CutLocusError(_singular_message(self.name)) from exc
        refuse_nonfinite(inv, CutLocusError, _nonfinite_inverse_message, self.name)
        return inv

    def _inverse_retract(self, x, y):
        return y @ self._gram_inverse(x, y) - x

    def _exp(self, x, u):
        g = ops_for(u).mT(u) @ u
        return x @ sym_function(g, cos_sqrt, d_cos_sqrt) + u @ sym_function(
            g, sinc_sqrt, d_sinc_sqrt
        )

    def _tan_direction(self, x, y):
        """M = (I - X X^T) Y (X^T Y)^{-1}, whose singular values are tan(principal angles)."""
        return self._to_tangent(x, y @ self._gram_inverse(x, y))

    def _log(self, x, y):
        m = self._tan_direction(x, y)
        g = ops_for(m).mT(m) @ m
        return m @ sym_function(g, atan_sqrt_over, d_atan_sqrt_over)

    def _squared_dist(self, x, y):
        ops = ops_for(x, y)
        m = self._tan_direction(x, y)
        m = require_finite(m, f"tangent of the principal angles in {self.name}.dist")
        if ops.is_torch:
            import torch

            lam = torch.linalg.eigvalsh(ops.mT(m) @ m)
        else:
            lam = np.linalg.eigvalsh(np.swapaxes(m, -1, -2) @ m)
        lam = ops.maximum(lam, 0.0)
        ratio = atan_sqrt_over(lam)  # theta_i / tan(theta_i)
        return ops.sum(lam * ratio * ratio, axis=-1)

    _dist = dist_from_squared

    def _parallel_transport(self, x, y, v):
        ops = ops_for(x, y, v)
        u = self._log(x, y)
        g = ops.mT(u) @ u
        utv = ops.mT(u) @ v
        moved = (
            v
            - x @ (sym_function(g, sinc_sqrt, d_sinc_sqrt) @ utv)
            + u @ (sym_function(g, cosm1_over, d_cosm1_over) @ utv)
        )
        # the geodesic ends at the representative exp(x, u) = y Q; the lift at y is moved Q^T
        end = self._exp(x, u)
        return moved @ (ops.mT(end) @ y)

    def _transport(self, x, y, u):
        # projection transport; align representatives first so that the result does not depend
        # on which orthonormal basis of span(y) is given (Q = polar(y^T x)).
        ops = ops_for(x, y, u)
        q = polar(ops.mT(y) @ x, check_rank=False)
        return self._to_tangent(y, u @ ops.mT(q))

    def _random_point(self, batch_shape, rng):
        return self._stiefel._random_point(batch_shape, rng)

    def _point_violation(self, x):
        return self._stiefel._point_violation(x)

    def _tangent_violation(self, x, u):
        ops = ops_for(x, u)
        d = ops.mT(x) @ u
        return "X^T U = 0 (horizontal)", ops.to_float(ops.sqrt(ops.sum(d * d, axis=(-2, -1))))

    def _point_gap(self, x: Array, y: Array) -> Array:
        r""":math:`\|XX^\top - YY^\top\|_F = \sqrt 2\,\|(I - XX^\top)Y\|_F` (basis-independent)."""
        ops = ops_for(x, y)
        d = y - x @ (ops.mT(x) @ y)
        return ops.sqrt(2.0 * ops.sum(d * d, axis=(-2, -1)))

r"""The manifold :math:`\mathcal M_r = \{X \in \mathbb{R}^{m\times n} : \operatorname{rank} X = r\}`
of fixed-rank matrices with the embedded (Frobenius) metric.

**Representation.** A point is the ambient m x n matrix X itself, not a factorisation. The
manifold contract (one point is one array of shape ``point_shape``; federated engines average,
subtract and send points as single arrays; the conformance kit draws and compares them as such)
is met as is, and every map is a function of X alone, so nothing depends on the gauge of a
factorisation (:math:`X = UV^\top` is unchanged by :math:`(U, V) \mapsto (UM, VM^{-\top})`).
The price is one small SVD per call (:math:`O(mn\min(m, n))`) where a factored representation
would keep :math:`O((m + n) r^2)` maps; riemfl's uses (LoRA adaptors, LRMC) have small m and n, and
:meth:`FixedRank.to_factors` / :meth:`FixedRank.from_factors` convert to and from factors.
Tangent vectors are ambient m x n matrices of

.. math::
    T_X\mathcal M_r = \{U M V^\top + U_p V^\top + U V_p^\top : M \in \mathbb{R}^{r\times r},\
    U^\top U_p = 0,\ V^\top V_p = 0\},\qquad X = U S V^\top \text{ (thin SVD)},

of dimension :math:`(m + n - r) r` (Vandereycken 2013, Absil and Oseledets 2015).

Pure maps (functions of arrays) come first; :class:`FixedRank` is a thin class over them.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import integer, optional, real
from ..backend import Array, is_torch, ops_for, to_numpy, widen
from ..check_levels import level_of, refuse
from ..errors import CutLocusError, NotOnManifoldError, ProjectionError, ShapeError
from ..linalg import factorisable, qr_positive, require_finite, singular_values
from .base import Manifold, result_checked
from .inputs import first_rank_deficient, nan_unless

__all__ = ["FixedRank", "truncated_svd_derivative"]


# --------------------------------------------------------------------------- array helpers
def _svd(a: Array):
    """Thin SVD ``(U, s, Vh)`` of a stack of matrices, outside any autograd graph."""
    a = require_finite(a, "matrix whose SVD FixedRank takes")
    if is_torch(a):
        import torch

        with torch.no_grad():
            return torch.linalg.svd(a.detach(), full_matrices=False)
    return np.linalg.svd(a, full_matrices=False)


def device_singular_values(a: Array) -> Array:
    """Singular values of (a batch of) matrices ``a``, descending, in ``a``'s type and on its
    device, outside autograd: :func:`~riemfl.linalg.singular_values` without the read, for the
    checks of the check levels ``"deferred"`` and ``"off"`` (:mod:`riemfl.check_levels`)."""
    if is_torch(a):
        import torch

        return torch.linalg.svdvals(factorisable(a.detach()))
    return np.linalg.svd(a, compute_uv=False)


def _finite_singular_values(a: Array, fill: float) -> Array:
    """:func:`device_singular_values` of the finite matrices of ``a``, and ``fill`` for those
    with a non-finite entry (which come from a point on the boundary, named through the map's
    result; a factorisation of them raises at once on the CPU): the value chosen so that the
    map's check passes there."""
    ops = ops_for(a)
    if is_torch(a):
        finite = a.isfinite().flatten(-2).all(-1)
    else:
        finite = np.isfinite(a).all(axis=(-2, -1))
    s = device_singular_values(ops.where(finite[..., None, None], a, ops.zeros_like(a)))
    return ops.where(finite[..., None], s, fill + ops.zeros_like(s))


def _solve(a: Array, b: Array) -> Array:
    """:math:`A^{-1}B`; torch at the check levels ``"deferred"`` and ``"off"``: ``solve_ex``,
    which neither raises nor synchronises (an exactly singular A gives non-finite entries,
    which the map's own check has refused before)."""
    if is_torch(a) and level_of(a) != "eager":
        import torch

        return torch.linalg.solve_ex(a, b)[0]
    return ops_for(a, b).solve(a, b)


def _needs_grad(a: Array) -> bool:
    if not is_torch(a):
        return False
    import torch

    return bool(a.requires_grad) and torch.is_grad_enabled()


def _first(mask: np.ndarray) -> tuple[int, ...]:
    """Index (in the batch) of the first True entry of ``mask``."""
    return tuple(int(i) for i in np.argwhere(np.atleast_1d(mask))[0]) if mask.ndim else ()


def _where(batch_index: tuple[int, ...]) -> str:
    return f" (batch element {batch_index})" if batch_index else ""


def _no_truncation_message(name: str, r: int, what: str, s: Array, rtol: float) -> str:
    """The ProjectionError of a truncation where :math:`\\sigma_r \\le` rtol :math:`\\sigma_1`."""
    s = to_numpy(s, np.float64)
    top, sr = s[..., 0], s[..., r - 1]
    i = _first(sr <= rtol * top)
    return (
        f"{name}: the {what} does not exist: the matrix has numerical rank below {r} "
        f"(sigma_{r} = {float(sr[i]):.3e} <= {rtol:.1e} * sigma_1 = {rtol * float(top[i]):.3e})"
        f"{_where(i)}; rank-{r} matrices come arbitrarily close to it but none is nearest. "
        f"Expected rank >= {r}"
    )


def _tied_truncation_message(name: str, r: int, what: str, s: Array, rtol: float) -> str:
    """The ProjectionError of a truncation where :math:`\\sigma_r - \\sigma_{r+1} \\le` rtol
    :math:`\\sigma_1`."""
    s = to_numpy(s, np.float64)
    top, sr, nxt = s[..., 0], s[..., r - 1], s[..., r]
    i = _first(sr - nxt <= rtol * top)
    return (
        f"{name}: the {what} is not unique: sigma_{r} = {float(sr[i]):.9e} and "
        f"sigma_{r + 1} = {float(nxt[i]):.9e} are equal within the relative tolerance "
        f"{rtol:.1e} * sigma_1{_where(i)}, so the rank-{r} truncation depends on an "
        f"arbitrary choice of singular vectors. Expected sigma_{r} > sigma_{r + 1}"
    )


def _right_angle_message(name: str, cosine: Array) -> str:
    """The CutLocusError of inverse_retract at a principal angle pi/2."""
    return (
        f"{name}: the inverse retraction is not defined: the column or row spaces of X and Y "
        f"have a principal angle of pi/2 (smallest cosine {float(to_numpy(cosine)):.2e}); "
        "expected Y closer to X"
    )


def _far_message(name: str, r: int, far: Array, normal: Array, reach: Array) -> str:
    """The CutLocusError of inverse_retract where the normal residual reaches sigma_r(Y)."""
    i = _first(to_numpy(far))
    normal, reach = to_numpy(normal, np.float64), to_numpy(reach, np.float64)
    return (
        f"{name}: Y is not R_X(xi) for any tangent xi: the only candidate leaves a normal "
        f"residual of spectral norm {float(normal[i]):.3e} >= sigma_{r}(Y) = "
        f"{float(reach[i]):.3e}{_where(i)}, so P_r(X + xi) is not Y"
    )


def truncated_svd_derivative(u: Array, s: Array, vh: Array, r: int, d: Array) -> Array:
    r"""Derivative of the rank-r truncation :math:`P_r(Y) = U_r S_r V_r^\top` in direction D.

    With the thin SVD :math:`Y = U\Sigma V^\top` (k = min(m, n) singular values) and
    :math:`E = U^\top D V`, the derivative :math:`G = U^\top\,\mathrm{D}P_r(Y)[D]\,V` is, for
    kept indices :math:`i \le r` and discarded :math:`j > r`,

    .. math::
        G_{ii'} = E_{ii'},\quad
        G_{ij} = \frac{\sigma_i(\sigma_i E_{ij} + \sigma_j E_{ji})}{\sigma_i^2 - \sigma_j^2},\quad
        G_{ji} = \frac{\sigma_i(\sigma_i E_{ji} + \sigma_j E_{ij})}{\sigma_i^2 - \sigma_j^2},\quad
        G_{jj'} = 0,

    from the first-order perturbation of the singular vectors
    (:math:`U^\top dU = \Omega_U`, :math:`(\Omega_U)_{ij} = (\sigma_j E_{ij} + \sigma_i
    E_{ji})/(\sigma_j^2 - \sigma_i^2)`, and likewise :math:`\Omega_V`); components outside the
    thin factors (m != n) pass through as in the tangent projection: :math:`(I - UU^\top) D V_r
    V_r^\top + U_r U_r^\top D (I - VV^\top)`. Only kept-versus-discarded differences are divided
    by, so the map is finite wherever :math:`\sigma_r > \sigma_{r+1}` (where :math:`P_r` is
    smooth), including at rank-r Y, where it equals the tangent projection :math:`P_{T_Y}`,
    and at repeated kept or repeated discarded singular values (where the generic SVD backward
    divides by zero). The map is self-adjoint in the Frobenius inner product (it is
    :math:`I - \nabla^2 \tfrac12 d^2(\cdot, \mathcal M_r)`), so it is also the backward pass.
    """
    ops = ops_for(u, d)
    v = ops.mT(vh)
    k = s.shape[-1]
    e = ops.mT(u) @ d @ v
    ur, vr = u[..., :, :r], v[..., :, :r]
    out = (d @ vr - u @ e[..., :, :r]) @ ops.mT(vr) + ur @ (ops.mT(ur) @ d - e[..., :r, :] @ vh)
    if k == r:
        return out + u @ e @ vh
    kept, dropped = s[..., :r, None], s[..., None, r:]
    den = kept * kept - dropped * dropped
    c, w = kept * kept / den, kept * dropped / den
    top_right = c * e[..., :r, r:] + w * ops.mT(e[..., r:, :r])
    bottom_left = ops.mT(c) * e[..., r:, :r] + ops.mT(w) * ops.mT(e[..., :r, r:])
    top = ops.concatenate([e[..., :r, :r], top_right], axis=-1)
    bottom = ops.concatenate([bottom_left, ops.zeros_like(e[..., r:, r:])], axis=-1)
    return out + u @ ops.concatenate([top, bottom], axis=-2) @ vh


# --------------------------------------------------------------------------- the manifold
_NO_GEODESICS = (
    "the geodesics of the fixed-rank manifold with the embedded metric have no known closed "
    "form (they solve an ODE with the Weingarten map; Vandereycken 2013, Absil and Oseledets "
    "2015), so {what} is not provided; use retract (truncated SVD, a second-order retraction) "
    "and inverse_retract (exact, closed form)"
)


class FixedRank(Manifold):
    r"""Fixed-rank matrices :math:`\mathcal M_r \subset \mathbb{R}^{m\times n}`, embedded metric.

    Sizes: ``m`` and ``n`` are ambient sizes (points are m x n), ``r`` the rank; ``dim`` is
    :math:`(m + n - r)r`.

    Points are ambient m x n matrices of rank exactly r (see the module docstring for the
    choice of representation); the metric is :math:`\langle \xi, \eta\rangle_X =
    \mathrm{tr}(\xi^\top\eta)`. With :math:`P_U = UU^\top`, :math:`P_V = VV^\top` the
    projectors onto the column and row spaces of X:

    * ``to_tangent`` (and ``egrad_to_rgrad``, the embedded metric's gradient):
      :math:`P_{T_X}(A) = P_U A P_V + (I - P_U) A P_V + P_U A (I - P_V) = P_U A + A P_V - P_U A
      P_V`, computed with the r-column bases in :math:`O(mnr)`;
    * ``project``: :math:`P_r(A) = U_r S_r V_r^\top`, the truncated SVD, which is the metric
      projection (Eckart-Young-Mirsky). It is unique iff :math:`\sigma_r(A) > \sigma_{r+1}(A)`
      and exists iff :math:`\operatorname{rank} A \ge r`; otherwise ``ProjectionError`` naming
      the singular values (ties within the relative tolerance ``rtol``, default
      :math:`\max(m, n)\,\varepsilon` of the dtype, times :math:`\sigma_1(A)`);
    * ``retract``: :math:`R_X(\xi) = P_r(X + \xi)`, the projective retraction. It is second
      order (Absil and Malick 2012): :math:`R_X(t\xi) = X + t\xi + \tfrac{t^2}{2}\,
      \mathrm{II}(\xi, \xi) + O(t^3)` with the normal second fundamental form
      :math:`\mathrm{II}(\xi,\xi) = 2(I - P_U)\,\xi X^{+}\xi\,(I - P_V)`. torch gradients go
      through :func:`truncated_svd_derivative` (finite at :math:`\xi = 0`);
    * ``inverse_retract``: exact and closed form. :math:`P_r(X + \xi) = Y` iff
      :math:`X + \xi = Y + N` with N in the normal space :math:`N_Y = \{N : U_Y^\top N = 0,\
      N V_Y = 0\}` and :math:`\|N\|_2 < \sigma_r(Y)`. Splitting :math:`D = Y - X` along
      :math:`T_X \oplus N_Y` gives

      .. math::
          \xi = U_X (U_Y^\top U_X)^{-1} U_Y^\top D\,\Pi + D V_Y (V_X^\top V_Y)^{-1} V_X^\top,
          \qquad \Pi = I - V_Y (V_X^\top V_Y)^{-1} V_X^\top,

      (invariant under a change of the bases U, V). ``CutLocusError`` when a principal angle
      between the column (or row) spaces of X and Y reaches :math:`\pi/2` or when
      :math:`\|N\|_2 \ge \sigma_r(Y)` (then no tangent vector retracts to Y);
    * ``transport``: projection onto :math:`T_Y`; ``exp``, ``log``, ``dist``,
      ``parallel_transport`` raise (no closed form for the embedded metric);
    * ``ehess_to_rhess``: the projected Euclidean Hessian plus the Weingarten map of the normal
      part :math:`N = (I - P_U)\nabla\bar f(X)(I - P_V)` of the gradient (Vandereycken 2013;
      Absil, Mahony & Trumpf 2013),

      .. math::
          \operatorname{Hess} f(X)[\xi] = P_{T_X}\big(\nabla^2\bar f(X)[\xi]\big)
          + N\xi^\top (X^{+})^\top + (X^{+})^\top\xi^\top N,

      with the pseudo-inverse :math:`X^+ = V S^{-1} U^\top`, computed as :math:`(X^+)^\top =
      Q_U R^{-\top} Q_V^\top` from orthonormal bases of the column and row spaces and the r x r
      :math:`R = Q_U^\top X Q_V` (no r x r inverse is formed; :math:`O(mnr)`). The two terms
      are tangent for every :math:`\xi` (:math:`(I - P_U)\,\cdot\,P_V` and :math:`P_U\,\cdot\,
      (I - P_V)`), and :math:`\langle \mathrm{W}_X(\xi, N), \xi\rangle = \langle N,
      \mathrm{II}(\xi, \xi)\rangle` with the second fundamental form of the retraction above.

    **Proximal smoothness.** :math:`\mathcal M_r` is not closed (its closure adds the matrices
    of rank < r), and its reach is 0: the local reach shrinks with :math:`\sigma_r(X)`.
    Exactly (:meth:`local_reach`), for r < min(m, n):

    * *ball radius* :math:`\sigma_r(X)/\sqrt2`: every A with :math:`\|A - X\|_F <
      \sigma_r(X)/\sqrt2` has a unique nearest point in :math:`\mathcal M_r` (it exists:
      :math:`\sigma_r(A) \ge \sigma_r(X) - \|A - X\|_2 > 0`). By Mirsky's
      inequality :math:`\sum_i(\sigma_i(A) - \sigma_i(X))^2 \le \|A - X\|_F^2`, a tie
      :math:`\sigma_r(A) = \sigma_{r+1}(A) = c` needs :math:`(\sigma_r(X) - c)^2 + c^2 \ge
      \sigma_r(X)^2/2`, and :math:`A = X - \tfrac{\sigma_r}{2}u_r v_r^\top +
      \tfrac{\sigma_r}{2}u_{r+1}v_{r+1}^\top` attains it (this is Federer's local reach);
    * *normal fibres* :math:`\sigma_r(X)`: :math:`P_r(X + N) = X` for every normal
      :math:`N = (I - P_U) N (I - P_V)` with :math:`\|N\|_2 < \sigma_r(X)` (so for all
      :math:`\|N\|_F < \sigma_r(X)`): the singular values of X + N are those of X and of N;
      a rank-one normal of norm :math:`\sigma_r(X)` gives a tie;
    * :math:`\sigma_r(X)` is also the distance from X to the matrices of rank < r
      (Eckart-Young), which is the ball radius for r = min(m, n), where
      :math:`\mathcal M_r` is the open set of full-rank matrices.

    The uniform constant (the infimum over :math:`\mathcal M_r`) is 0, so
    ``reach`` raises ``NotImplementedError`` with this reason (the conformance
    kit skips its tube tests) instead of returning a 0 that would make every tube-based test
    and step rule vacuous; use :meth:`local_reach`. Likewise
    ``injectivity_radius`` (geodesics reach lower rank in finite time). ``diameter`` is
    infinite (:math:`\mathcal M_r` is a cone).

    Parameters
    ----------
    m, n : int
        Matrix shape.
    r : int
        The rank, ``1 <= r <= min(m, n)`` (r = min(m, n): the open set of full-rank matrices).
    rtol : float, optional
        Relative tolerance (times :math:`\sigma_1`) below which ``project``/``retract`` treat
        :math:`\sigma_r - \sigma_{r+1}` as a tie and :math:`\sigma_r` as zero. Default
        :math:`\max(m, n)\,\varepsilon` of the input's dtype.
    """

    unsupported = {
        "exp": _NO_GEODESICS.format(what="exp"),
        "log": _NO_GEODESICS.format(what="log"),
        "dist": _NO_GEODESICS.format(what="the geodesic distance"),
        "parallel_transport": _NO_GEODESICS.format(what="parallel transport"),
        "reach": (
            "the fixed-rank manifold is not uniformly proximally smooth: the projection is unique "
            "on the ball of radius sigma_r(X)/sqrt(2) around X, which tends to 0 near matrices of "
            "lower rank, so the uniform constant is 0; use local_reach(x)"
        ),
        "injectivity_radius": (
            "the fixed-rank manifold is not complete (geodesics reach matrices of lower rank in "
            "finite time, as t -> (1 - t) X does at t = 1 from any X), so its injectivity radius "
            "has no positive lower bound; exp is not provided either"
        ),
    }

    def __init__(self, m: int, n: int, r: int, *, rtol: float | None = None) -> None:
        self.m = integer(m, "FixedRank(m, n, r): m", minimum=1)
        self.n = integer(n, "FixedRank(m, n, r): n", minimum=1)
        self.r = integer(r, "FixedRank(m, n, r): r (r <= min(m, n))", 1, min(self.m, self.n))
        self.rtol = optional(real, rtol, "FixedRank: rtol", above=0, below=1)
        self.point_shape = (self.m, self.n)
        self.name = f"FixedRank({self.m}, {self.n}, {self.r})"

    @property
    def dim(self) -> int:
        return (self.m + self.n - self.r) * self.r

    diameter = math.inf

    # ------------------------------------------------------------------ local constants
    def local_reach(self, x: Array) -> Array:
        r"""Federer's local reach at X: the largest radius of a ball around X on which the
        metric projection is single-valued.

        :math:`\sigma_r(X)/\sqrt2` for r < min(m, n) and :math:`\sigma_r(X)` for r = min(m,
        n) (derivation in the class docstring); along normal directions alone the radius is
        :math:`\sigma_r(X)`. Returns one value per point, in x's type; differentiable in torch.
        """
        self._shape(x, "point x")
        if is_torch(x):
            import torch

            sigma = torch.linalg.svdvals(factorisable(x))[..., self.r - 1]
        else:
            sigma = np.linalg.svd(x, compute_uv=False)[..., self.r - 1]
        return sigma if self.r == min(self.m, self.n) else sigma / math.sqrt(2.0)

    # ------------------------------------------------------------------ factors (FLoRAL)
    def from_factors(self, a: Array, b: Array) -> Array:
        r"""The point :math:`X = A B^\top` from factors A (m x r) and B (n x r).

        X has rank r iff A and B have full column rank (``check_point`` tells). The factors
        are not unique: :math:`(A G, B G^{-\top})` gives the same X for every invertible r x r
        G (the GL(r) gauge of a factorisation), so averaging factors is not averaging
        points: :math:`\sum_k p_k A_k B_k^\top \ne (\sum_k p_k A_k)(\sum_k p_k B_k)^\top`.
        """
        for arr, rows, role in ((a, self.m, "factor A"), (b, self.n, "factor B")):
            if arr.ndim < 2 or tuple(arr.shape[-2:]) != (rows, self.r):
                raise ShapeError(
                    f"{self.name}: {role} has shape {tuple(arr.shape)}; expected "
                    f"(..., {rows}, {self.r})"
                )
        return a @ ops_for(a, b).mT(b)

    def to_factors(self, x: Array) -> tuple[Array, Array]:
        r"""Balanced factors :math:`A = U\sqrt S`, :math:`B = V\sqrt S` with :math:`X = AB^\top`.

        From the thin SVD :math:`X = USV^\top` (top r triplets), so :math:`A^\top A = B^\top B
        = S`: the p = q = 2 split :math:`U\Sigma^{1/p}, V\Sigma^{1/q}` of FLoRAL's LoRA
        centering (Almansoori et al. 2024, App. E, eq. (37)). It is one representative of the
        GL(r) orbit of factorisations, fixed up to the signs of the singular vectors (and a rotation
        within repeated singular values): the factors are *not* gauge-invariant, only their
        product is. In torch, gradients flow (through QR factors and an r x r SVD, never the
        SVD of the full matrix, whose backward divides by the zero singular values); they are
        finite when the r singular values are distinct, as for any SVD.
        """
        self._shape(x, "point x")
        u, s, v = self._svd_r(x)
        root = ops_for(x).sqrt(s)[..., None, :]
        return u * root, v * root

    # ------------------------------------------------------------------ bases
    def _top(self, x):
        """Detached top-r singular triplets ``(U_r, s, V_r)`` (s: all min(m, n) values)."""
        u, s, vh = _svd(x)
        return u[..., :, : self.r], s, ops_for(x).mT(vh[..., : self.r, :])

    def _frames(self, x, guard: bool = False):
        r"""Orthonormal bases ``(Q_U, Q_V)`` of the column and row spaces of x.

        numpy, or torch without gradient: the singular vectors. torch with gradient: the Q
        factors of :math:`X V_r` and :math:`X^\top U_r` (the singular vectors held constant),
        which span the same spaces along :math:`\mathcal M_r`, so their derivatives are those
        of the spaces (the spans are all the maps use). ``guard``: NaN for a point of numerical
        rank below r (:math:`\sigma_r \le` ``rtol`` :math:`\sigma_1`, on the boundary, where
        the r-th singular vectors are arbitrary; :func:`~riemfl.manifolds.inputs.nan_unless`,
        on the device), so that the map's result is NaN there and the input policy traces it
        to the point.
        """
        u, s, v = self._top(x)
        if guard:
            ok = (s[..., self.r - 1] > self._tol(x) * s[..., 0])[..., None, None]
            u, v = nan_unless(ok, u), nan_unless(ok, v)
        if not _needs_grad(x):
            return u, v
        ops = ops_for(x)
        return ops.qr(x @ v)[0], ops.qr(ops.mT(x) @ u)[0]

    def _svd_r(self, x):
        r"""Top-r singular triplets ``(U, s, V)``; differentiable in torch (see to_factors)."""
        u0, s0, v0 = self._top(x)
        if not _needs_grad(x):
            return u0, s0[..., : self.r], v0
        import torch

        ops = ops_for(x)
        qu = ops.qr(x @ v0)[0]
        qv, rv = ops.qr(ops.mT(x) @ qu)  # x = qu rv^T qv^T on M_r
        uc, sc, vch = torch.linalg.svd(factorisable(ops.mT(rv)))
        u, v = qu @ uc, qv @ ops.mT(vch)
        sign = torch.sign((u0 * u.detach()).sum(dim=-2, keepdim=True))  # the numpy path's signs
        sign = torch.where(sign == 0, torch.ones_like(sign), sign)
        return u * sign, sc, v * sign

    # ------------------------------------------------------------------ the boundary
    # the maps through the tangent space check every argument first and their result too (see
    # Manifold._result_checked): they read the frames of their point through the guard of
    # _frames, NaN at a point of rank below r, which Manifold._refuse_boundary then names
    _result_checked = result_checked(
        to_tangent=(0, 1),
        egrad_to_rgrad=(0, 1),
        ehess_to_rhess=(0, 1, 2, 3),
        inverse_retract=(0, 1),
        transport=(0, 1, 2),
    )

    def _boundary_violation(self, x: Array, name: str = "x") -> tuple[str, str] | None:
        r"""The first point of x of numerical rank below r, as ``check_point`` measures it
        (:math:`\sigma_r/\sigma_1 \le` ``atol``; see
        :meth:`~riemfl.manifolds.base.Manifold._boundary_violation`): there the tangent space
        and the curvature (:math:`X^+`) are not defined."""
        tol = self.default_atol(x)
        found = first_rank_deficient(x, self.r, tol)
        if found is None:
            return None
        i, ratio = found
        return (
            f"sigma_{self.r}/sigma_1 = {ratio:.3e} <= atol {tol:.1e}{_where(i)}: "
            f"{name} has numerical rank below {self.r}, on the boundary of the manifold (the "
            f"matrices of lower rank), where its tangent space and its curvature, through "
            f"{name}^+, are not defined",
            f"a matrix {name} of rank {self.r}",
        )

    # ------------------------------------------------------------------ maps
    def _to_tangent(self, x, a):
        qu, qv = self._frames(x, guard=True)
        mt = ops_for(x, a).mT
        ua = mt(qu) @ a
        return qu @ ua + (a @ qv - qu @ (ua @ qv)) @ mt(qv)

    def _ehess_to_rhess(self, x, g, h, u):
        ops = ops_for(x, g, h, u)
        mt = ops.mT
        qu, qv = self._frames(x, guard=True)
        normal = g - qu @ (mt(qu) @ g)
        normal = normal - (normal @ qv) @ mt(qv)
        r = mt(qu) @ x @ qv  # X = Q_U R Q_V^T, so (X^+)^T = Q_U R^{-T} Q_V^T
        left = normal @ (mt(u) @ qu)  # N xi^T Q_U, m x r
        right = mt(u @ qv) @ normal  # Q_V^T xi^T N, r x n
        weingarten = mt(ops.solve(r, mt(left))) @ mt(qv) + qu @ ops.solve(mt(r), right)
        return self._to_tangent(x, h) + weingarten

    def _tangent_violation(self, x, u):
        ops = ops_for(x, u)
        qu, qv = self._frames(x)
        w = u - qu @ (ops.mT(qu) @ u)
        w = w - (w @ qv) @ ops.mT(qv)
        return "(I - P_U) U (I - P_V) = 0", ops.to_float(ops.sqrt(ops.sum(w * w, axis=(-2, -1))))

    def _tol(self, dtype_of) -> float:
        if self.rtol is not None:
            return self.rtol
        return max(self.m, self.n) * ops_for(dtype_of).eps(dtype_of)

    def _check_truncation(self, s, what: str, like) -> None:
        """Raise ProjectionError unless P_r is unique (sigma_r > sigma_{r+1}) and exists (at
        the check level of s: on the device, in float64, at ``"deferred"``)."""
        level = level_of(s)
        if level == "off":
            return
        s = to_numpy(s).astype(np.float64) if level == "eager" else widen(s)
        rtol, r = self._tol(like), self.r
        top, sr = s[..., 0], s[..., r - 1]
        low = sr <= rtol * top
        refuse(low, ProjectionError, _no_truncation_message, self.name, r, what, s, rtol)
        if r < s.shape[-1]:
            tie = sr - s[..., r] <= rtol * top
            refuse(tie, ProjectionError, _tied_truncation_message, self.name, r, what, s, rtol)

    def _truncate(self, a, what: str):
        if _needs_grad(a):
            from .fixedrank_torch import Truncate

            return Truncate.apply(a, self.r, lambda s: self._check_truncation(s, what, a))
        u, s, vh = _svd(a)
        self._check_truncation(s, what, a)
        r = self.r
        return (u[..., :, :r] * s[..., None, :r]) @ vh[..., :r, :]

    def _project(self, a):
        return self._truncate(a, "metric projection P_r(A) (truncated SVD)")

    def _retract(self, x, u):
        return self._truncate(x + u, "retraction P_r(X + xi) (truncated SVD of X + xi)")

    def _inverse_retract(self, x, y):
        ops = ops_for(x, y)
        ux, vx = self._frames(x, guard=True)
        uy, vy = self._frames(y, guard=True)
        p, q = ops.mT(uy) @ ux, ops.mT(vx) @ vy
        # the checks' singular values: numpy float64 at the level "eager" (one read each, as
        # the checks need), on the device when deferred (no read), none when off
        level = level_of(x)
        if level != "off":
            eager = level == "eager"
            sp = singular_values(p) if eager else _finite_singular_values(p, 1.0)
            sq = singular_values(q) if eager else _finite_singular_values(q, 1.0)
            vops = ops_for(sp)
            cosine = -vops.maximum(vops.amax(-sp), vops.amax(-sq))  # the smallest of all
            right = cosine <= math.sqrt(ops.eps(x))
            refuse(right, CutLocusError, _right_angle_message, self.name, cosine)
        d = y - x
        qt = ops.mT(q)
        a = _solve(p, ops.mT(uy) @ d)  # (U_Y^T U_X)^{-1} U_Y^T D
        a = a - ops.mT(_solve(qt, ops.mT(a @ vy))) @ ops.mT(vx)  # ... Pi
        xi = ux @ a + ops.mT(_solve(qt, ops.mT(d @ vy))) @ ops.mT(vx)
        if level == "eager":
            normal = singular_values(xi - d)[..., 0]  # X + xi = Y + N, |N|_2
            reach = singular_values(y)[..., self.r - 1]
        elif level == "deferred":
            normal = _finite_singular_values(xi - d, 0.0)[..., 0]
            reach = _finite_singular_values(y, math.inf)[..., self.r - 1]
        if level != "off":
            far = normal >= reach * (1 - self._tol(x))
            refuse(far, CutLocusError, _far_message, self.name, self.r, far, normal, reach)
        return xi

    # ------------------------------------------------------------------ sampling and checks
    def _random_point(self, batch_shape, rng):
        """``U diag(s) V^T`` with Haar-distributed frames and :math:`s_i \\sim U[1, 2]`.

        So :math:`\\sigma_r(X) \\ge 1` (local reach at least :math:`1/\\sqrt2`) and the
        condition number is at most 2.
        """
        u = qr_positive(rng.standard_normal(batch_shape + (self.m, self.r)))
        v = qr_positive(rng.standard_normal(batch_shape + (self.n, self.r)))
        s = rng.uniform(1.0, 2.0, size=batch_shape + (self.r,))
        return (u * s[..., None, :]) @ np.swapaxes(v, -1, -2)

    def _point_violation(self, x):
        s = singular_values(x)
        constraint = f"rank X <= {self.r} (sigma_{self.r + 1}(X)/sigma_1(X) = 0)"
        if self.r == s.shape[-1]:
            return constraint, 0.0
        top = np.where(s[..., 0] > 0, s[..., 0], 1.0)
        return constraint, float(np.max(s[..., self.r] / top))

    def _check_point(self, x: Array, tol: float) -> None:
        r"""Raise :class:`~riemfl.errors.NotOnManifoldError` unless x has rank r within ``tol``.

        Both rank constraints are measured relative to :math:`\sigma_1(X)` (the manifold is a
        cone, so absolute sizes mean nothing): rank >= r needs :math:`\sigma_r/\sigma_1 >`
        ``atol``, rank <= r needs :math:`\sigma_{r+1}/\sigma_1 \le` ``atol``. The message
        names the constraint, the measured ratio and the batch element.
        """
        found = first_rank_deficient(x, self.r, tol)
        if found is not None:
            i, ratio = found
            raise NotOnManifoldError(
                f"{self.name}: point is not on the manifold: constraint rank X >= {self.r} "
                f"(sigma_{self.r}/sigma_1 > atol) is violated: sigma_{self.r}/sigma_1 = "
                f"{ratio:.3e} <= atol {tol:.1e}{_where(i)}"
            )
        super()._check_point(x, tol)  # rank X <= r, through _point_violation

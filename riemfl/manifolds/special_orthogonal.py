r"""The special orthogonal group :math:`\mathrm{SO}(n) = \{X \in \mathbb{R}^{n\times n} :
X^\top X = I,\ \det X = 1\}` with the bi-invariant (embedded Frobenius) metric.

Tangent vectors are stored in the ambient form :math:`U = X\Omega` with :math:`\Omega =
X^\top U` skew-symmetric (not as the Lie-algebra element :math:`\Omega` itself, as pymanopt
does), so that the contract's ambient arrays, ``project`` and the Euclidean gradient apply
unchanged. The metric :math:`\langle U, V\rangle_X = \mathrm{tr}(U^\top V) = \mathrm{tr}
(\Omega_U^\top\Omega_V)` is the one induced by :math:`\mathbb{R}^{n\times n}`, and it is
bi-invariant; a rotation by the angle :math:`\theta` in one plane, :math:`\Omega = \theta(e_1
e_2^\top - e_2 e_1^\top)`, has norm :math:`\sqrt2\,\theta`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .._validation import integer
from ..backend import Array, is_torch, ops_for, to_numpy
from ..check_levels import level_of, refuse
from ..errors import CutLocusError, ProjectionError
from ..linalg import (
    polar,
    qr_positive,
    skew,
    special_polar,
    special_polar_message,
    special_polar_parts,
    sym,
    sym_function,
)
from .base import Manifold, result_checked
from .elementary import angle_over_sine, cosm1_over, sinc_sqrt, squared_angle
from .stiefel import Stiefel

__all__ = ["SpecialOrthogonal"]


def _lib(a: Array):
    """numpy, or torch for a tensor (for the functions the backend namespace lacks)."""
    if is_torch(a):
        import torch

        return torch
    return np


def _where(mask: np.ndarray) -> tuple[tuple[int, ...], str]:
    """The first batch index where ``mask`` holds, and the words naming it."""
    index = tuple(int(i) for i in np.argwhere(np.atleast_1d(mask))[0]) if mask.ndim else ()
    return index, (f" (batch element {index})" if index else "")


def _cut_locus_message(name: str, cut, details, wrap: Callable[[str], str] | None = None) -> str:
    """The message of the :class:`~riemfl.errors.CutLocusError` of log and parallel transport:
    ``cut`` holds where X^T Y is a rotation by pi (None: the batch element is not named); with
    ``wrap``, ``wrap(message)`` (a caller's error about the same rotation)."""
    where = "" if cut is None else _where(to_numpy(cut))[1]
    message = (
        f"{name}: X^T Y is a rotation by pi{where}: its principal logarithm is not unique, nor is "
        f"the minimising geodesic (the cut locus), so log and parallel transport are not "
        f"defined. Expected rotation angles below pi ({details})"
    )
    return message if wrap is None else wrap(message)


#: what :meth:`SpecialOrthogonal._sqrtm` projects, in the words of its errors
_SHIFTED = "matrix I + X^T Y"


def _sqrtm_cut_message(name: str, s: Array, tol: float, wrap: Callable[[str], str] | None) -> str:
    """The cut-locus message of :meth:`SpecialOrthogonal._sqrtm`, with the details of
    :func:`~riemfl.linalg.special_polar`'s error on I + X^T Y (signed singular values ``s``)."""
    found = f"found as: {special_polar_message(s, tol, _SHIFTED)}"
    return _cut_locus_message(name, None, found, wrap)


def _inverse_retract_message(name: str) -> str:
    return (
        f"{name}: the inverse polar retraction is defined where every rotation angle of X^T Y "
        f"is below pi/2 (its symmetric part positive definite): no tangent U has polar(X + U) "
        f"= Y otherwise. Expected Y closer to X"
    )


# ------------------------------------------------------------------ theta / sin(theta) of 1 - cos
def _series(e, coeffs):
    out = 0.0 * e + coeffs[-1]
    for c in reversed(coeffs[:-1]):
        out = out * e + c
    return out


def _theta_over_sine(e):
    r""":math:`\theta/\sin\theta` as a function of :math:`e = 1 - \cos\theta \in [0, 2)`:
    :math:`2\arcsin\sqrt{e/2}/\sqrt{e(2 - e)}`; series :math:`1 + e/3 + 2e^2/15 + 2e^3/35`
    below :math:`10^{-4}`. e is clamped to :math:`[0, 2)`; ``_logm`` uses it for
    :math:`e \le 1` (the square root's angles, at most :math:`\pi/2`), where it is well
    conditioned."""
    ops = ops_for(e)
    e = ops.maximum(e, 0.0)
    e = -ops.maximum(-e, -(2.0 - 4.0 * ops.eps(e)))
    small = e < 1e-4
    safe = ops.where(small, ops.ones_like(e), e)
    direct = 2.0 * _lib(e).arcsin(ops.sqrt(0.5 * safe)) / ops.sqrt(safe * (2.0 - safe))
    return ops.where(small, _series(e, (1.0, 1 / 3, 2 / 15, 2 / 35)), direct)


def _d_theta_over_sine(e):
    r"""Derivative of :func:`_theta_over_sine`: :math:`(\sin\theta - \theta\cos\theta) /
    \sin^3\theta`; series :math:`1/3 + 4e/15 + 6e^2/35 + 32e^3/315` below :math:`10^{-3}`."""
    ops = ops_for(e)
    e = ops.maximum(e, 0.0)
    e = -ops.maximum(-e, -(2.0 - 4.0 * ops.eps(e)))
    small = e < 1e-3
    safe = ops.where(small, ops.ones_like(e), e)
    sine = ops.sqrt(safe * (2.0 - safe))
    theta = 2.0 * _lib(e).arcsin(ops.sqrt(0.5 * safe))
    direct = (sine - theta * (1.0 - safe)) / (sine * sine * sine)
    return ops.where(small, _series(e, (1 / 3, 4 / 15, 6 / 35, 32 / 315)), direct)


#: the Levi-Civita symbol: hat(a)_ij = -eps_ijk a_k is the skew matrix of the cross product a x .
_LEVI_CIVITA = np.zeros((3, 3, 3))
for _i, _j, _k in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
    _LEVI_CIVITA[_i, _j, _k], _LEVI_CIVITA[_j, _i, _k] = 1.0, -1.0


class SpecialOrthogonal(Manifold):
    r"""The rotation group :math:`\mathrm{SO}(n)` with the bi-invariant metric
    :math:`\langle U, V\rangle_X = \mathrm{tr}(U^\top V)`.

    Sizes: ``n`` is the ambient matrix size (points are n x n); ``dim`` is :math:`n(n-1)/2`.

    Tangent vectors are ambient: :math:`T_X = \{X\Omega : \Omega^\top = -\Omega\}`. With
    :math:`\Omega = X^\top U` and :math:`R = X^\top Y`:

    * ``to_tangent``: :math:`X\,\mathrm{skew}(X^\top A)` (also ``egrad_to_rgrad``);
    * ``exp``: :math:`X\exp(\Omega)` (for a bi-invariant metric the geodesics through I are
      the one-parameter subgroups; Milnor 1976); for n = 2, 3 by the Rodrigues formula
      :math:`\exp\Omega = I + \frac{\sin\theta}\theta\Omega + \frac{1 - \cos\theta}
      {\theta^2}\Omega^2`, :math:`\theta^2 = \|\Omega\|_F^2/2` (it holds for n = 2 too, where
      :math:`\Omega^2 = -\theta^2 I`), elsewhere the matrix exponential;
    * ``log``: :math:`X\log(R)`, the principal logarithm (rotation angles in :math:`[0, \pi)`;
      Hall 2015); ``CutLocusError`` where R has a rotation angle :math:`\pi` (eigenvalue -1),
      where the logarithm and the minimising geodesic are not unique. With :math:`C, S` the
      symmetric and skew parts of R (they commute) and :math:`h(1 - \cos\theta) =
      \theta/\sin\theta`, :math:`\log R = h(I - C)\,S`. For n = 2, 3 (one plane) the closed
      form: :math:`\cos\theta = (\mathrm{tr}R - n + 2)/2`, :math:`\theta = \mathrm{atan2}(
      \|S\|_F/\sqrt2, \cos\theta)`, :math:`\log R = (\theta/\sin\theta) S`, and for n = 3 and
      :math:`\theta > 2\pi/3` :math:`\theta\,\widehat{a}` with the axis a the normalised
      :math:`B\,\mathrm{vee}(S)`, :math:`B = (C - \cos\theta I)/(1 - \cos\theta) = aa^\top`:
      exact to rounding up to the cut locus, which is refused where :math:`\sin\theta \le
      10^3\varepsilon` and :math:`\cos\theta < 0`. For n >= 4, :math:`\log R = 2\log
      R^{1/2}`: the principal square root is the nearest rotation to :math:`I + R` (the
      special polar factor of a normal matrix with eigenvalues :math:`2\cos(\theta/2)
      e^{i\theta/2}`), whose angles are at most :math:`\pi/2`, where h is well conditioned
      (:func:`~riemfl.linalg.sym_function`: Daleckii-Krein derivative in torch). The error
      grows like :math:`\varepsilon/(\pi - \theta_{\max})` towards the cut locus, which is
      refused where the two smallest singular values of :math:`I + R`, :math:`2\sin((\pi -
      \theta)/2)`, sum to at most :math:`10^3\varepsilon\,\sigma_1`;
    * ``dist``: :math:`\|\log R\|_F = \sqrt{2\sum_k\theta_k^2}`; for n = 2, 3 the closed form
      :math:`\sqrt2\,\mathrm{atan2}(\|S\|_F/\sqrt2, \cos\theta)`, defined at the cut locus too;
      ``squared_dist`` :math:`\|\log R\|_F^2`, for n = 2, 3 :math:`2\theta^2` without the square
      root of :math:`\|S\|_F^2` (:func:`~riemfl.manifolds.elementary.squared_angle`);
    * ``parallel_transport`` along the geodesic :math:`X\exp(tL)`, :math:`L = \log R`:
      :math:`\Gamma(X\Omega) = X E\,\Omega\,E = Y E^\top\Omega E` with :math:`E = \exp(L/2)`.
      (Left-trivialised, :math:`V(t) = \gamma(t)B(t)`; the Levi-Civita connection of a
      bi-invariant metric is :math:`\nabla_{\tilde A}\tilde B = \frac12[A, B]` on left-invariant
      fields, so :math:`B' = -\frac12[L, B]`, :math:`B(t) = e^{-tL/2}B_0e^{tL/2}`, and
      :math:`V(1) = Xe^{L}e^{-L/2}\Omega e^{L/2}`.) Tests check it against the ambient
      equation :math:`V' = -(\gamma' V^\top\gamma + \gamma V^\top\gamma')/2`;
    * ``project``: :func:`~riemfl.linalg.special_polar`, the polar factor with the sign of the
      last singular vector flipped where :math:`\det < 0`; ``ProjectionError`` where it is not
      unique;
    * ``retract``: the polar factor of :math:`X + U` (for tangent U, :math:`\det(X + U) =
      \det(I + \Omega) > 0`, so it is :math:`P_M(X + U)`: a second-order retraction);
      ``inverse_retract``: :math:`X\,C^{-1}S` with :math:`C, S` the symmetric and skew parts
      of R. (In the eigenbasis of :math:`\Omega`, :math:`\mathrm{polar}(I + \Omega) = (I +
      \Omega)(I - \Omega^2)^{-1/2}`, whose symmetric part is :math:`(I - \Omega^2)^{-1/2}` and
      skew part :math:`\Omega(I - \Omega^2)^{-1/2}`.) One n x n solve, where the Stiefel
      manifold's Lyapunov equation costs an :math:`n^2 \times n^2` one; defined where C is
      positive definite (every angle of R below :math:`\pi/2`, the image of the retraction),
      ``CutLocusError`` elsewhere;
    * ``ehess_to_rhess``: :math:`P_X(H - U\,\mathrm{sym}(X^\top G))`, the Hessian of the
      Stiefel manifold St(n, n) = O(n), of which SO(n) is an open subset (Boumal 2023;
      Absil, Mahony & Trumpf 2013).

    Constants (Frobenius norm; :math:`\sigma'` the signed singular values of
    :func:`~riemfl.linalg.special_polar`: :math:`A = U\Sigma'V^\top` with :math:`U, V \in
    \mathrm{SO}(n)` and :math:`\sigma'_n < 0` iff :math:`\det A < 0`):

    * ``reach`` :math:`\sqrt2`: for :math:`X \in \mathrm{SO}(n)`,
      :math:`\|A - X\|_F^2 \ge n - 2\sum_i\sigma'_i + \sum_i\sigma_i'^2 = \sum_i (1 -
      \sigma'_i)^2` (since :math:`\mathrm{tr}(X^\top A) \le \sum_i\sigma'_i`), and
      :math:`\sigma'_{n-1} + \sigma'_n \le 0` forces :math:`(1 - \sigma'_{n-1})^2 + (1 -
      \sigma'_n)^2 \ge 2`; so within :math:`\sqrt2` of SO(n) the nearest point is unique. The
      bound is attained at :math:`X\,\mathrm{diag}(1, \dots, 1, 0, 0)`, at distance
      :math:`\sqrt2` and of rank n - 2. (O(n) has reach 1: zeroing one column already makes
      its polar factor ambiguous, while SO(n) fixes the last column by the orientation.)
    * ``diameter`` :math:`2\sqrt{2\lfloor n/2\rfloor}`: :math:`\|X - Y\|_F^2 = 2n -
      2\,\mathrm{tr}(X^\top Y)`, and the smallest trace in SO(n) is -n for even n (at -I) and
      -(n - 2) for odd n (one eigenvalue must be 1).
    * ``injectivity_radius`` :math:`\sqrt2\,\pi`: the nearest cut point of I is a rotation by
      :math:`\pi` in one plane, at geodesic distance :math:`\|\pi(e_1e_2^\top -
      e_2e_1^\top)\|_F = \sqrt2\,\pi` (with the metric :math:`\frac12\mathrm{tr}(U^\top V)`
      this is the familiar :math:`\pi`); for n >= 3 conjugate points come later (at
      :math:`2\sqrt2\,\pi` along a one-plane geodesic), and SO(2) is a flat circle of length
      :math:`2\sqrt2\,\pi`.

    Parameters
    ----------
    n : int
        Matrix size, ``n >= 2``.
    """

    def curvature_bound(self) -> tuple[float | None, str]:
        return 0.5, (
            "sectional curvature <= 1/2 (bi-invariant metric, Milnor 1976; Böttcher and Wenzel "
            "2008)"
        )

    def __init__(self, n: int) -> None:
        self.n = integer(n, "SpecialOrthogonal(n): n", minimum=2)
        self.point_shape = (self.n, self.n)
        self.name = f"SpecialOrthogonal({self.n})"
        self._stiefel = Stiefel(self.n, self.n)  # O(n): SO(n) is its component of det 1

    @property
    def dim(self) -> int:
        return self.n * (self.n - 1) // 2

    reach = math.sqrt(2.0)
    injectivity_radius = math.sqrt(2.0) * math.pi

    @property
    def diameter(self) -> float:
        return 2.0 * math.sqrt(2 * (self.n // 2))

    # the cheap maps (see Manifold._result_checked), as for Stiefel: to_tangent is a polynomial
    # in X and A, the retraction reaches a guarded polar factor; x is not read by the metric nor
    # by transport. The other maps check their arguments first
    _result_checked = result_checked(
        "to_tangent", "egrad_to_rgrad", "retract", inner=(0,), norm=(0,), transport=(0,)
    )

    # ------------------------------------------------------------------ Lie-algebra helpers
    def _expm(self, w):
        """exp of skew matrices w: Rodrigues for n <= 3, else the matrix exponential."""
        ops = ops_for(w)
        if self.n > 3:
            return ops.expm(w)
        t2 = 0.5 * ops.sum(w * w, axis=(-2, -1), keepdims=True)
        return ops.eye(self.n, w) + sinc_sqrt(t2) * w - cosm1_over(t2) * (w @ w)

    def _sqrtm(self, r, error: type[Exception] = CutLocusError, wrap=None):
        """The principal square root of rotations R with n >= 4: the nearest rotation to I + R
        (the polar factor of a normal matrix with eigenvalues 2 cos(t/2) e^(it/2)), refused
        where R has an angle within 1e3 eps of pi, where I + R is singular: ``error`` (a
        CutLocusError by default) with the message of :func:`_cut_locus_message` (``wrap``)."""
        ops = ops_for(r)
        shifted = ops.eye(self.n, r) + r
        rtol = 1e3 * ops.eps(r)
        if level_of(r) != "eager":
            half, s, tol, cut = special_polar_parts(shifted, rtol)
            refuse(cut, error, _sqrtm_cut_message, self.name, s, tol, wrap)
            return half
        try:
            return special_polar(shifted, rtol=rtol, what=_SHIFTED)
        except ProjectionError as exc:
            raise error(_cut_locus_message(self.name, None, f"found as: {exc}", wrap)) from exc

    def _plane_parts(self, r):
        """(ops, cos theta, S = skew(R), sin^2 theta) of rotations R for n <= 3 (one plane)."""
        ops = ops_for(r)
        c = 0.5 * (ops.sum(ops.diagonal(r), axis=-1)[..., None, None] - (self.n - 2))
        s = skew(r)
        return ops, c, s, 0.5 * ops.sum(s * s, axis=(-2, -1), keepdims=True)

    def _logm(self, r, error: type[Exception] = CutLocusError, wrap=None):
        """The principal logarithm of rotations R (skew); at angle pi ``error`` (a
        CutLocusError by default) with the message of :func:`_cut_locus_message` (``wrap``).

        At the check level ``"eager"`` the axis formula of n = 3 beyond 2 pi/3 runs only where
        a rotation needs it; at the others always (no read), its inputs replaced by harmless
        values where it is not used, so that no NaN reaches the gradient."""
        if self.n > 3:  # log R = 2 log R^(1/2), whose angles are at most pi/2
            half = self._sqrtm(r, error, wrap)
            e = ops_for(half).eye(self.n, half) - sym(half)
            return 2.0 * skew(sym_function(e, _theta_over_sine, _d_theta_over_sine) @ skew(half))
        ops, c, s, s2 = self._plane_parts(r)
        tol = 1e3 * ops.eps(r)
        cut = ((c < 0) & (s2 <= tol * tol))[..., 0, 0]
        details = "sin(theta) <= 1e3 eps and cos(theta) < 0"
        refuse(cut, error, _cut_locus_message, self.name, cut, details, wrap)
        out = angle_over_sine(c, s2) * s
        if self.n == 2:  # theta/sin(theta) * S = theta J exactly: J is the only direction
            return out
        # n = 3 beyond 2 pi/3: the axis from the symmetric part, B = (C - cI)/(1 - c) = a a^T
        near = c < -0.5
        if level_of(r) == "eager" and not ops.any(near):
            return out
        one = ops.ones_like(c)
        vee = ops.stack([s[..., 2, 1], s[..., 0, 2], s[..., 1, 0]], axis=-1)[..., None]
        b = (sym(r) - c * ops.eye(3, r)) / ops.where(near, 1.0 - c, one)
        axis = b @ vee
        squared = ops.sum(axis * axis, axis=(-2, -1), keepdims=True)
        axis = axis / ops.sqrt(ops.where(near, squared, one))
        theta = ops.arctan2(ops.sqrt(ops.where(near, s2, one)), c)
        hat = ops.einsum("ijk,...k->...ij", ops.asarray(-_LEVI_CIVITA, r), axis[..., 0])
        return ops.where(near, theta * hat, out)

    # ------------------------------------------------------------------ maps
    def _project(self, a):
        return special_polar(a, what=f"ambient matrix given to {self.name}.project")

    def _to_tangent(self, x, a):
        return x @ skew(ops_for(x, a).mT(x) @ a)

    def _ehess_to_rhess(self, x, g, h, u):
        return self._to_tangent(x, h - u @ sym(ops_for(x, g).mT(x) @ g))

    def _retract(self, x, u):
        return polar(x + u, what=f"matrix X + U of {self.name}.retract")

    def _inverse_retract(self, x, y):
        ops = ops_for(x, y)
        r = ops.mT(x) @ y
        c = sym(r)
        if ops.is_torch and level_of(c) != "eager":  # the _ex forms: no raise, no synchronisation
            torch = ops.t
            info = torch.linalg.cholesky_ex(c.detach())[1]
            refuse(info != 0, CutLocusError, _inverse_retract_message, self.name)
            return x @ skew(torch.linalg.solve_ex(c, skew(r))[0])
        try:
            ops.cholesky(c)
        except Exception as exc:  # numpy's or torch's LinAlgError: C is not positive definite
            raise CutLocusError(_inverse_retract_message(self.name)) from exc
        return x @ skew(ops.solve(c, skew(r)))

    def _exp(self, x, u):
        return x @ self._expm(skew(ops_for(x, u).mT(x) @ u))

    def _log(self, x, y):
        return x @ self._logm(ops_for(x, y).mT(x) @ y)

    def _dist(self, x, y):
        if self.n > 3:
            return self._norm(x, self._log(x, y))
        ops, c, _, s2 = self._plane_parts(ops_for(x, y).mT(x) @ y)
        return math.sqrt(2.0) * ops.arctan2(ops.safe_sqrt(s2), c)[..., 0, 0]

    def _squared_dist(self, x, y):
        if self.n > 3:
            return self._squared_log_norm(x, y)
        _, c, _, s2 = self._plane_parts(ops_for(x, y).mT(x) @ y)
        return 2.0 * squared_angle(c, s2)[..., 0, 0]

    def _parallel_transport(self, x, y, u):
        ops = ops_for(x, y, u)
        r = ops.mT(x) @ y
        half = self._sqrtm(r) if self.n > 3 else self._expm(0.5 * self._logm(r))
        return x @ (half @ (ops.mT(x) @ u) @ half)

    def _random_point(self, batch_shape, rng):
        """Haar-distributed rotations: the Q factor (diag R > 0) of a Gaussian matrix is Haar
        on O(n); negating the first column where det = -1 maps it onto SO(n), preserving Haar
        measure."""
        q = qr_positive(rng.standard_normal(batch_shape + self.point_shape))
        q[..., :, 0] *= np.sign(np.linalg.det(q))[..., None]
        return q

    def _point_violation(self, x):
        orthogonal = self._stiefel._point_violation(x)
        det = ops_for(x).to_float(ops_for(x).abs(_lib(x).linalg.det(x) - 1.0))
        return orthogonal if orthogonal[1] >= det else ("det X = 1", det)

    def _tangent_violation(self, x, u):
        return self._stiefel._tangent_violation(x, u)

r"""The canonical metric of the Stiefel manifold (Edelman et al. 1998, Sec. 2.4):

.. math::
    \langle U, V\rangle_X = \mathrm{tr}\big(U^\top (I - \tfrac12 XX^\top) V\big)
    = \mathrm{tr}(U^\top V) - \tfrac12\,\mathrm{tr}\big((X^\top U)^\top X^\top V\big),

the metric of :math:`\mathrm{St}(n, p) = O(n)/O(n - p)` as a normal homogeneous space. A tangent
vector :math:`U = XA + K` (:math:`A = X^\top U` skew, :math:`X^\top K = 0`) has
:math:`\|U\|_X^2 = \tfrac12\|A\|_F^2 + \|K\|_F^2`: the rotation within the span of X counts
once, not twice as in the embedded metric.

Pure maps (functions of arrays, numpy and torch, batched over leading axes) for
:class:`~riemfl.manifolds.stiefel.Stiefel` with ``metric="canonical"``. Every map costs
:math:`O(np^2 + p^3)`: the n x n skew matrix :math:`W = \hat U X^\top - X\hat U^\top`
(:math:`\hat U = (I - \tfrac12 XX^\top)U`) of the geodesics and of the Cayley retraction is never
formed.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..backend import Array, cast_like, ops_for, widen
from ..check_levels import level_of, refuse
from ..errors import ConvergenceError, CutLocusError
from ..linalg import factorisable, sym

__all__ = [
    "canonical_inner",
    "canonical_egrad_to_rgrad",
    "canonical_ehess_to_rhess",
    "canonical_exp",
    "canonical_log",
    "cayley_retraction",
    "cayley_transport",
    "inverse_cayley_retraction",
    "FIXED_LOG_ITERATIONS",
]

#: Iterations of :func:`canonical_log` at the check levels ``"deferred"`` and ``"off"`` (at most
#: ``max_iter``), where no :math:`\|C_k\|` is read to stop. Zimmermann's iteration converges
#: linearly, the slower the farther apart the points: on random pairs of St(n, p) ((n, p) up to
#: (20, 5), 200 batches of 8) :math:`\|C_k\|` reaches the tolerance 1e3 eps by k = 11 at the
#: distance 1 (the conformance kit's largest), 30 at 2 and 74 at 2.5, the end of the solver's
#: documented range (``max_iter`` iterations test :math:`C_0, \dots, C_{max\_iter - 1}`).
FIXED_LOG_ITERATIONS = 80


def canonical_inner(x: Array, u: Array, v: Array) -> Array:
    r""":math:`\langle U, V\rangle_X = \mathrm{tr}(U^\top V) - \tfrac12\mathrm{tr}((X^\top U)^\top
    X^\top V)` (Edelman et al. 1998, Sec. 2.4); reduces the point axes."""
    ops = ops_for(x, u, v)
    xtu, xtv = ops.mT(x) @ u, ops.mT(x) @ v
    return ops.sum(u * v, axis=(-2, -1)) - 0.5 * ops.sum(xtu * xtv, axis=(-2, -1))


def canonical_egrad_to_rgrad(x: Array, g: Array) -> Array:
    r"""Riemannian gradient of the canonical metric, :math:`G - XG^\top X` (Edelman et al.
    1998, Sec. 2.4).

    It is the tangent vector with :math:`\langle G - XG^\top X, V\rangle_X = \mathrm{tr}(G^\top
    V)` for every tangent V: the Riesz map of the canonical metric applied to any ambient
    matrix (not a projection: it doubles the skew part :math:`X^\top G` of tangent G's
    span-of-X component).
    """
    ops = ops_for(x, g)
    return g - x @ (ops.mT(g) @ x)


def canonical_ehess_to_rhess(x: Array, g: Array, h: Array, u: Array) -> Array:
    r"""Riemannian Hessian of the canonical metric from the Euclidean gradient and Hessian.

    .. math::
        \operatorname{Hess} f(X)[U] = \Phi_X\Big(H - \tfrac12(XG^\top + GX^\top)U
        - (I - XX^\top)U\,\mathrm{sym}(X^\top G)\Big),\qquad \Phi_X(B) = B - XB^\top X,

    with :math:`G = \nabla\bar f(X)`, :math:`H = \nabla^2\bar f(X)[U]`. Derivation: along a
    geodesic, :math:`\tfrac{d^2}{dt^2} f = \nabla^2\bar f[\dot Y, \dot Y] - \mathrm{tr}(G^\top
    \Gamma_c(\dot Y, \dot Y))` with the Christoffel function of the canonical metric
    :math:`\Gamma_c(U, V) = \tfrac12(UV^\top + VU^\top)X + \tfrac12 X(U^\top(I - XX^\top)V +
    V^\top(I - XX^\top)U)` (Edelman et al. 1998, Secs. 2.4 and 2.5). Polarised, the Hessian
    form is :math:`\mathrm{tr}(V^\top B)` with B the argument of :math:`\Phi_X` above, and
    :math:`\Phi_X` (:func:`canonical_egrad_to_rgrad`) turns a Euclidean pairing into the
    canonical one. :math:`O(np^2)`.
    """
    ops = ops_for(x, g, h, u)
    xt = ops.mT(x)
    xtu, xtg = xt @ u, xt @ g
    normal_u = u - x @ xtu
    b = h - 0.5 * (x @ (ops.mT(g) @ u) + g @ xtu) - normal_u @ (0.5 * (xtg + ops.mT(xtg)))
    return canonical_egrad_to_rgrad(x, b)


def canonical_exp(x: Array, u: Array) -> Array:
    r"""Exact exponential map of the canonical metric.

    Edelman et al. 1998, Sec. 2.4.2: with :math:`A = X^\top U` and the compact QR
    decomposition :math:`QR = (I - XX^\top)U`,

    .. math::
        \mathrm{Exp}_X(U) = [X,\ Q]\,\exp\!\begin{pmatrix} A & -R^\top \\ R & 0\end{pmatrix}
        \begin{pmatrix} I_p \\ 0\end{pmatrix}.

    riemfl uses the same formula without the QR decomposition: with :math:`K = (I - XX^\top)U`,
    :math:`S = K^\top K = R^\top R` and a balancing scalar :math:`c > 0`, the matrix
    :math:`Z_c = \begin{pmatrix} A & -S/c \\ cI & 0\end{pmatrix}` is similar to
    :math:`\begin{pmatrix} A & -R^\top \\ R & 0\end{pmatrix}` through
    :math:`\mathrm{diag}(I, R/c)` where R is invertible, so

    .. math::
        \mathrm{Exp}_X(U) = X E_{11} + K E_{21}/c,\qquad E = \exp(Z_c),

    an entire function of (X, U): exact also where K is rank-deficient (p > n/2, or U in the
    span of X), where the QR factor Q is not unique and torch's QR has no derivative. The
    result does not depend on c; riemfl takes :math:`c = \max(1, \|K\|_F)` (held constant under
    autograd) so that the blocks of :math:`Z_c` stay of the size of U. One 2p x 2p matrix
    exponential and two n x p by p x p products.
    """
    ops = ops_for(x, u)
    p = x.shape[-1]
    a = ops.mT(x) @ u
    k = u - x @ a
    s = ops.mT(k) @ k  # k has the batch of x and u, and so have a and s
    c = ops.maximum(ops.sqrt(ops.detach(ops.sum(ops.diagonal(s), axis=-1))), 1.0)[..., None, None]
    eye = ops.broadcast_to(ops.eye(p, a), a.shape)
    top = ops.concatenate([a, -s / c], axis=-1)
    bottom = ops.concatenate([c * eye, 0.0 * a], axis=-1)
    e = ops.expm(ops.concatenate([top, bottom], axis=-2))
    return x @ e[..., :p, :p] + k @ (e[..., p:, :p] / c)


def _cayley_factors(x: Array, u: Array) -> tuple[Array, Array, Array]:
    r"""The parts of the Cayley transform of :math:`W = \hat U X^\top - X\hat U^\top = LR^\top`,
    :math:`L = [\hat U,\ X]`, :math:`R = [X,\ -\hat U]`: :math:`\hat U = (I - \tfrac12 XX^\top)U`,
    :math:`A = X^\top U` and the 2p x 2p matrix

    .. math::
        I_{2p} - \tfrac12 R^\top L = \begin{pmatrix} I - A/4 & -I/2 \\ \hat U^\top\hat U/2 &
        I - A/4\end{pmatrix}

    (:math:`X^\top\hat U = A/2` and :math:`-\hat U^\top X = A/2` for skew A), through which
    :math:`(I_n - \tfrac12 W)^{-1} = I_n + \tfrac12 L(I_{2p} - \tfrac12 R^\top L)^{-1}R^\top`
    (Sherman-Morrison-Woodbury, as in Wen and Yin 2013)."""
    ops = ops_for(x, u)
    p = x.shape[-1]
    a = ops.mT(x) @ u
    uhat = u - 0.5 * (x @ a)
    s = ops.mT(uhat) @ uhat  # the batch of x and u, as a's
    eye = ops.broadcast_to(ops.eye(p, a), a.shape)
    system = ops.concatenate(
        [
            ops.concatenate([eye - 0.25 * a, -0.5 * eye], axis=-1),
            ops.concatenate([0.5 * s, eye - 0.25 * a], axis=-1),
        ],
        axis=-2,
    )
    return uhat, a, system


def _solve_cayley(ops, system: Array, b: Array) -> Array:
    """:math:`S^{-1}B` for the Cayley system S of :func:`_cayley_factors`, invertible for every U;
    torch at the check levels ``"deferred"`` and ``"off"``: ``solve_ex``, which does not
    synchronise to check for a singular matrix."""
    if ops.is_torch and level_of(system) != "eager":
        return ops.t.linalg.solve_ex(system, b)[0]
    return ops.solve(system, b)


def _cayley_point(x: Array, uhat: Array, a: Array, system: Array) -> Array:
    r""":math:`R_X(U) = X + [\hat U,\ X](I_{2p} - \tfrac12 R^\top L)^{-1}(I;\ A/2)` from the
    parts of :func:`_cayley_factors`."""
    ops = ops_for(x, uhat)
    p = x.shape[-1]
    eye = ops.broadcast_to(ops.eye(p, a), a.shape)
    coef = _solve_cayley(ops, system, ops.concatenate([eye, 0.5 * a], axis=-2))
    return x + uhat @ coef[..., :p, :] + x @ coef[..., p:, :]


def cayley_retraction(x: Array, u: Array) -> Array:
    r"""The Cayley retraction :math:`R_X(U) = (I - \tfrac12 W)^{-1}(I + \tfrac12 W)X` with
    :math:`W = \hat U X^\top - X\hat U^\top`, :math:`\hat U = (I - \tfrac12 XX^\top)U` (Wen and
    Yin 2013, with their W built from a tangent vector; Zhu 2017).

    :math:`WX = U` for tangent U, and :math:`\exp(tW)X` is the canonical geodesic, so
    :math:`R_X(tU) - \mathrm{Exp}_X(tU) = \tfrac{t^3}{12}W^3X + O(t^4)`: a second-order
    retraction for the canonical metric (first order for the embedded one: its acceleration
    :math:`W^2X` has the tangential part :math:`(I - XX^\top)U\,X^\top U`). W has rank 2p, so
    by the Sherman-Morrison-Woodbury formula (as in Wen and Yin 2013), with
    :math:`A = X^\top U`,

    .. math::
        R_X(U) = X + [\hat U,\ X]\Big(I_{2p} - \tfrac12
        \begin{pmatrix} A/2 & I \\ -\hat U^\top\hat U & A/2\end{pmatrix}\Big)^{-1}
        \begin{pmatrix} I \\ A/2\end{pmatrix}:

    one 2p x 2p solve, :math:`O(np^2)`. The matrix is invertible for every U (W is skew).
    """
    return _cayley_point(x, *_cayley_factors(x, u))


def cayley_transport(x: Array, u: Array, v: Array) -> Array:
    r"""The differential of the Cayley retraction, :math:`\mathcal T_U(V) = \mathrm{D}R_X(U)[V]
    = \tfrac{d}{dt}R_X(U + tV)\big|_{t=0}`: the vector transport by differentiated retraction
    (Absil, Mahony & Sepulchre 2008, Sec. 8.1.2) of :func:`cayley_retraction` (Wen and Yin
    2013).

    W is linear in U and :math:`Q(W) = (I - \tfrac12 W)^{-1}(I + \tfrac12 W)` has the
    derivative :math:`\mathrm{D}Q(W)[W_V] = (I - \tfrac12 W)^{-1}\,\tfrac12 W_V\,(I + Q(W))`,
    so with :math:`Y = R_X(U)` and :math:`W_V = \hat V X^\top - X\hat V^\top`,
    :math:`\hat V = (I - \tfrac12 XX^\top)V`,

    .. math::
        \mathcal T_U(V) = (I - \tfrac12 W)^{-1} Z,\qquad Z = \tfrac12 W_V(X + Y)
        = \tfrac12\big(\hat V X^\top(X + Y) - X\hat V^\top(X + Y)\big),

    tangent at Y for tangent U and V. Along the retraction curve,
    :math:`\tfrac{d}{dt}R_X(tU) = \mathcal T_{tU}(U)`, so a line search that pairs the gradient
    at :math:`R_X(tU)` with :math:`\mathcal T_{tU}(U)` gets the derivative of
    :math:`t \mapsto f(R_X(tU))` (the projection transport gives another number). The inverse
    is applied by the Sherman-Morrison-Woodbury formula of :func:`cayley_retraction`:
    :math:`Z + \tfrac12 L(I_{2p} - \tfrac12 R^\top L)^{-1}R^\top Z` with :math:`L = [\hat U,
    X]`, :math:`R = [X, -\hat U]`. Two 2p x 2p solves (the retraction's and this one),
    :math:`O(np^2)`; :math:`\mathcal T_0` is the identity on :math:`T_X\mathrm{St}`.
    """
    ops = ops_for(x, u, v)
    p = x.shape[-1]
    uhat, a, system = _cayley_factors(x, u)
    both = x + _cayley_point(x, uhat, a, system)  # X + R_X(U)
    vhat = v - 0.5 * (x @ (ops.mT(x) @ v))
    z = 0.5 * (vhat @ (ops.mT(x) @ both) - x @ (ops.mT(vhat) @ both))
    rhs = ops.concatenate([ops.mT(x) @ z, -(ops.mT(uhat) @ z)], axis=-2)
    coef = _solve_cayley(ops, system, rhs)
    return z + 0.5 * (uhat @ coef[..., :p, :] + x @ coef[..., p:, :])


def inverse_cayley_retraction(x: Array, y: Array) -> Array:
    r"""Inverse of :func:`cayley_retraction`, in closed form.

    :math:`(I - \tfrac12 W)Y = (I + \tfrac12 W)X` reads :math:`Y - X = \tfrac12 W(X + Y)`. With
    :math:`\hat U = X\Omega + K` (:math:`\Omega = \tfrac12 X^\top U` skew, :math:`X^\top K = 0`)
    and :math:`M = X^\top Y`, its parts normal to and along the span of X give

    .. math::
        K = 2(Y - XM)(I + M)^{-1},\qquad \Omega = (M - I + \tfrac12 K^\top Y)(I + M)^{-1},
        \qquad U = 2X\Omega + K,

    defined where :math:`I + X^\top Y` is invertible: the Cayley retraction maps
    :math:`T_X\mathrm{St}` onto those Y (where :math:`I + X^\top Y` is singular, Y is not
    :math:`R_X(U)` for any U, as :math:`I + M = 2X^\top(I - \tfrac12W)^{-1}X` shows). Two p x p
    solves, :math:`O(np^2)`.
    """
    ops = ops_for(x, y)
    m = ops.mT(x) @ y
    shifted = ops.mT(ops.eye(x.shape[-1], m) + m)
    k = 2.0 * ops.mT(ops.solve(shifted, ops.mT(y - x @ m)))
    rhs = m - ops.eye(x.shape[-1], m) + 0.5 * (ops.mT(k) @ y)
    omega = ops.mT(ops.solve(shifted, ops.mT(rhs)))
    return 2.0 * (x @ omega) + k


# --------------------------------------------------------------------------- the logarithm
def canonical_log(x: Array, y: Array, *, tol: float | None = None, max_iter: int = 200) -> Array:
    r"""Logarithm of the canonical metric by Zimmermann's algorithm (Zimmermann 2017).

    With :math:`M = X^\top Y` and an orthonormal basis Q of a complement of span(X) holding
    :math:`(I - XX^\top)Y = QN` (r = min(p, n - p) columns, from a QR decomposition of
    :math:`[X, Y - XM]`), complete :math:`\begin{pmatrix} M \\ N\end{pmatrix}` to a rotation
    :math:`V_0 \in \mathrm{SO}(p + r)` and iterate

    .. math::
        \begin{pmatrix} A_k & -B_k^\top \\ B_k & C_k\end{pmatrix} = \log V_k,\qquad
        V_{k+1} = V_k \begin{pmatrix} I & 0 \\ 0 & \exp(-C_k)\end{pmatrix}

    until :math:`\|C_k\|_F \le` ``tol``; then :math:`\mathrm{Log}_X(Y) = XA_k + QB_k`
    (:math:`[X, Q]\exp\begin{pmatrix} A & -B^\top \\ B & 0\end{pmatrix}` has first block column
    :math:`[X, Q]V_k[:, :p] = Y`). The completion is the Procrustes-aligned one, its lower block
    nearest to I (following the Procrustes preprocessing of Zimmermann and Hüper 2022), among
    those of determinant +1 (so that :math:`V_0` has a real logarithm): it starts the iteration
    near the answer. The iteration converges
    linearly, the faster the closer the points (Zimmermann 2017). The matrix logarithm of the
    rotations is :class:`~riemfl.manifolds.special_orthogonal.SpecialOrthogonal`'s.

    The iteration runs in float64 (float32 input is converted and the result rounded once) and
    is verified at the end: :math:`\|\mathrm{Exp}_X(\xi) - Y\|_F` must be small.
    :class:`~riemfl.errors.ConvergenceError` is raised when the iteration limit is reached,
    when a :math:`V_k` has a rotation angle :math:`\pi` (no principal logarithm), or when the
    check fails: in each case the points are too far apart for the solver.

    In torch the derivative is that of the implicit function :math:`\mathrm{Exp}_X(\xi) = Y`
    (not of the iteration): the backward pass solves the adjoint system of the fixed point
    :math:`\xi = P_X(\xi + Y - \mathrm{Exp}_X(\xi))` (:math:`P_X` the projection onto the
    tangent space; the Jacobian J in :math:`\xi` is :math:`O(\|\xi\|)`),
    :math:`(I - J^\top)w = \bar\xi`, by GMRES (Saad and Schultz 1986) to the relative residual
    ``tol``, within ``max_iter`` Krylov vectors (else ConvergenceError).

    At the check levels ``"deferred"`` and ``"off"`` (:mod:`riemfl.check_levels`) nothing is
    read: the iteration tests :math:`C_k` for k = ``min(max_iter, FIXED_LOG_ITERATIONS) - 1``
    only, the errors above are deferred (a last :math:`\|C_k\|` above ``100 * tol``, the
    stalling bound, is the convergence failure), and the adjoint's GMRES has a fixed size
    (:func:`~riemfl.manifolds.implicit_log.fixed_gmres`).

    Parameters
    ----------
    tol : float, optional
        Stop when the largest :math:`\|C_k\|_F` over the batch is below ``tol`` (default
        ``1e3 * eps`` of float64 for float64 input, ``10 * eps`` of float32 for float32), or
        when it has stopped shrinking for three iterations while below ``100 * tol``.
    max_iter : int
        Iteration limit of the solver (and of the adjoint's Neumann series in torch).
    """
    ops = ops_for(x, y)
    eps = ops.eps(x)
    tol = (10 * eps if eps > 1e-10 else 1e3 * eps) if tol is None else tol
    if ops.is_torch:
        import torch

        if torch.is_grad_enabled() and (x.requires_grad or y.requires_grad):
            return _implicit_log(x, y, tol, max_iter)
    return _zimmermann(x, y, tol, max_iter)


def _zimmermann(x, y, tol, max_iter):
    """Zimmermann's algorithm in float64 without autograd; the result in x's dtype.

    At the check levels ``"deferred"`` and ``"off"``: ``min(max_iter, FIXED_LOG_ITERATIONS)``
    iterations and no read (:func:`_fixed_iterations`), the verdicts deferred."""
    ops = ops_for(x, y)
    eager = level_of(x) == "eager"
    with ops.no_grad():
        x64, y64 = widen(ops.detach(x)), widen(ops.detach(y))
        shape = tuple(np.broadcast_shapes(tuple(x64.shape), tuple(y64.shape)))
        x64, y64 = ops.broadcast_to(x64, shape), ops.broadcast_to(y64, shape)
        n, p = shape[-2:]
        r = min(p, n - p)
        m = ops.mT(x64) @ y64
        q = ops.qr(ops.concatenate([x64, y64 - x64 @ m], axis=-1))[0][..., p : p + r]
        if r == 0:  # St(p, p) = O(p): the log is X log(X^T Y), within the component of X
            _require_same_component(ops, m)
        v = _aligned_completion(ops, ops.concatenate([m, ops.mT(q) @ (y64 - x64 @ m)], axis=-2))
        if eager:
            log_v, step = _adaptive_iterations(ops, v, p, tol, max_iter)
        else:  # (for n = p, C is empty: nothing to iterate)
            iterations = min(max_iter, FIXED_LOG_ITERATIONS) if r else 0
            log_v, step = _fixed_iterations(ops, v, p, tol, iterations)
        xi = x64 @ log_v[..., :p, :p] + q @ log_v[..., p:, :p]
        gap = canonical_exp(x64, xi) - y64
        miss = _largest(ops, gap)
        if eager:
            if miss > max(math.sqrt(tol), 10 * step):
                raise ConvergenceError(_missed_message(miss))
        else:
            bound = ops.maximum(10 * step, math.sqrt(tol))
            refuse(miss > bound, ConvergenceError, _missed_message, miss)
        return cast_like(xi, x)


def _largest(ops, a):
    """The largest Frobenius norm of a stack of matrices: a float at the check level
    ``"eager"``, else an array of no dimension (no read)."""
    norms = ops.sqrt(ops.sum(a * a, axis=(-2, -1)))
    return ops.to_float(norms) if level_of(a) == "eager" else ops.amax(norms)


def _adaptive_iterations(ops, v, p, tol, max_iter):
    r"""Iterate until the largest :math:`\|C_k\|` is below ``tol`` (or stalls below ``100
    tol``); ``(log V_k, |C_k|)``."""
    log_v = _rotation_log(v)
    step, best, stalled = math.inf, math.inf, 0
    for _ in range(max_iter):
        c = log_v[..., p:, p:]
        step = _largest(ops, c)
        if step <= tol or (stalled >= 3 and step <= 100 * tol):
            return log_v, step
        if not math.isfinite(step):
            raise ConvergenceError(_diverged_message(step))
        v = ops.concatenate([v[..., :, :p], v[..., :, p:] @ ops.expm(-c)], axis=-1)
        log_v = _rotation_log(v)
        stalled = stalled + 1 if step >= 0.9 * best else 0  # linear rates reach 0.8
        best = min(best, step)
    raise ConvergenceError(_not_converged_message(max_iter, step, tol))


def _fixed_iterations(ops, v, p, tol, iterations):
    r"""The iteration without a read, ``(log V_k, |C_k|)`` for k = ``iterations - 1`` (the
    adaptive loop tests :math:`C_0, \dots, C_{m-1}` in ``max_iter = m`` iterations), with the
    verdicts deferred: a non-finite :math:`\|C_k\|` on the way (the first one is named), and
    the last one above ``100 tol`` (the adaptive loop's stalling bound)."""
    log_v = _rotation_log(v)
    c = log_v[..., p:, p:]
    step = _largest(ops, c)
    # the first non-finite step (NaN propagates: a later one is NaN whatever the first was)
    first, diverged = step, ~(ops.abs(step) < math.inf)
    for _ in range(iterations - 1):
        v = ops.concatenate([v[..., :, :p], v[..., :, p:] @ ops.expm(-c)], axis=-1)
        log_v = _rotation_log(v)
        c = log_v[..., p:, p:]
        step = _largest(ops, c)
        first = ops.where(diverged, first, step)
        diverged = diverged | ~(ops.abs(step) < math.inf)
    refuse(diverged, ConvergenceError, _diverged_message, first)
    refuse(~(step <= 100 * tol), ConvergenceError, _not_converged_message, iterations, step, tol)
    return log_v, step


def _far_apart_message(what: str) -> str:
    return (
        f"Stiefel log (canonical metric): {what}; the points are too far apart for Zimmermann's "
        f"algorithm (expected a distance below about 2.5 = 0.8 pi; the injectivity radius is at "
        f"least 0.89 pi)"
    )


def _far_apart(what: str) -> ConvergenceError:
    return ConvergenceError(_far_apart_message(what))


def _diverged_message(step) -> str:
    return _far_apart_message(f"the iteration diverged (|C| = {float(step):.3e})")


def _not_converged_message(iterations: int, step, tol: float) -> str:
    return _far_apart_message(
        f"the iteration did not converge in {iterations} iterations (last |C| = "
        f"{float(step):.3e} > tol {tol:.1e})"
    )


def _missed_message(miss) -> str:
    return _far_apart_message(f"the tangent vector found misses Y by {float(miss):.3e}")


def _rotation_at_pi(what: str) -> str:
    """The message of a rotation of the iteration at angle pi, from the cut-locus message
    ``what`` of :class:`~riemfl.manifolds.special_orthogonal.SpecialOrthogonal`."""
    return _far_apart_message(f"a rotation of the iteration has an angle pi ({what})")


def _require_same_component(ops, m):
    """CutLocusError unless every X^T Y (n = p) is a rotation: O(p) has two components and no
    geodesic joins them."""
    det = (ops.t.linalg.det(m) if ops.is_torch else np.linalg.det(m)) if m.shape[-1] > 1 else m
    refuse(det < 0, CutLocusError, _other_component_message)


def _other_component_message() -> str:
    return (
        "Stiefel log (canonical metric): for n = p the points X, Y lie in the two components "
        "of O(p) (det X^T Y = -1), which no geodesic joins; expected det X^T Y = 1"
    )


def _complete(ops, top):
    """An orthogonal (p + r) x (p + r) matrix whose first p columns are ``top`` (orthonormal)."""
    if ops.is_torch:
        q = ops.t.linalg.qr(top, mode="complete")[0]
    else:
        q = np.linalg.qr(top, mode="complete")[0]
    return ops.concatenate([top, q[..., :, top.shape[-1] :]], axis=-1)


def _aligned_completion(ops, top):
    r"""The completion :math:`V_0 = [\,\mathrm{top},\ [X_0; Y_0]R\,] \in \mathrm{SO}(p + r)` with
    R in O(r) maximising :math:`\mathrm{tr}(Y_0 R)` among those of the right determinant (the
    special Procrustes problem: :math:`R = V D U^\top` from :math:`Y_0 = U\Sigma V^\top`, D
    flipping the last singular direction where needed)."""
    p = top.shape[-1]
    v = _complete(ops, top)
    if v.shape[-1] == p:  # n = p: V = X^T Y itself
        return v
    lower = v[..., p:, p:]
    lib = ops.t if ops.is_torch else np
    w, _, zt = lib.linalg.svd(factorisable(lower))
    sign = lib.linalg.det(v) * lib.linalg.det(w) * lib.linalg.det(zt)
    flip = ops.ones_like(lower[..., 0, :])
    flip = ops.concatenate([flip[..., :-1], flip[..., -1:] * sign[..., None]], axis=-1)
    rot = (ops.mT(zt) * flip[..., None, :]) @ ops.mT(w)
    return ops.concatenate([top, v[..., :, p:] @ rot], axis=-1)


@functools.lru_cache(maxsize=16)
def _rotations(size: int):
    from .special_orthogonal import SpecialOrthogonal  # imports stiefel: not at module level

    return SpecialOrthogonal(size)


def _rotation_log(v):
    """The principal logarithm of rotations (skew), as ConvergenceError where it is undefined
    (at the check levels ``"deferred"`` and ``"off"`` by the private map, whose verdict is
    deferred, rather than by the public one, which would record a call at every iteration)."""
    size = v.shape[-1]
    if size == 1:  # St(1, 1) = {1, -1}: V = [[1]] after the completion
        return 0.0 * v
    ops = ops_for(v)
    if level_of(v) != "eager":
        return _rotations(size)._logm(v, ConvergenceError, _rotation_at_pi)
    try:
        return _rotations(size).log(ops.eye(size, v), v)
    except CutLocusError as exc:
        raise ConvergenceError(_rotation_at_pi(str(exc))) from exc


def _canonical_fixed_point(xa, ya, xi):
    r"""The map whose fixed point the log is: :math:`P_{T_X}(\xi + Y - \mathrm{Exp}_X(\xi))`."""
    d = xi + ya - canonical_exp(xa, xi)
    return d - xa @ sym(xa.mT @ d)


def _implicit_log(x, y, tol, max_iter):
    """canonical_log with the derivative of the implicit function Exp_X(xi) = Y (torch)."""
    from .implicit_log import implicit_log  # imports torch

    return implicit_log(
        lambda xa, ya: _zimmermann(xa, ya, tol, max_iter),
        _canonical_fixed_point,
        x,
        y,
        tol,
        max_iter,
        _far_apart,
    )

r"""Dense linear-algebra kernels shared by the matrix manifolds, for numpy and torch alike.

All functions take stacks of matrices (leading batch dimensions) and use the backend of their
input. The torch versions are differentiable; :func:`spd_inv_sqrt` has its own backward (the
Daleckii-Krein divided-difference formula) so that gradients stay finite at repeated eigenvalues,
where ``torch.linalg.eigh``'s generic backward divides by zero (e.g. at ``x + 0`` for the polar
retraction, whose Gram matrix is the identity).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np

from .backend import Array, is_torch, ops_for, to_numpy
from .check_levels import compiling, level_of, refuse, refuse_nonfinite
from .errors import CutLocusError, NonFiniteError, ProjectionError

__all__ = [
    "signed_svd",
    "generic_divided_differences",
    "sym",
    "skew",
    "spd_inv_sqrt",
    "polar",
    "special_polar",
    "special_polar_parts",
    "special_polar_message",
    "require_finite",
    "factorisable",
    "qr_positive",
    "solve_inverse_qr",
    "solve_lyapunov",
    "sym_function",
    "daleckii_krein",
    "second_divided_differences",
]


def sym(a: Array) -> Array:
    r"""Symmetric part :math:`(A + A^\top)/2` of a stack of square matrices (numpy: halved in
    place in the new array of the sum, one temporary fewer, the same values bit for bit)."""
    if type(a) is np.ndarray:
        out = a + a.swapaxes(-1, -2)
        out *= 0.5
        return out
    return 0.5 * (a + ops_for(a).mT(a))


def skew(a: Array) -> Array:
    r"""Skew-symmetric part :math:`(A - A^\top)/2` of a stack of square matrices (numpy: halved
    in place, as :func:`sym`)."""
    if type(a) is np.ndarray:
        out = a - a.swapaxes(-1, -2)
        out *= 0.5
        return out
    return 0.5 * (a - ops_for(a).mT(a))


def _inv_sqrt(lam):
    r"""Elementwise :math:`\lambda^{-1/2}` (clamped at the smallest normal number)."""
    ops = ops_for(lam)
    return 1.0 / ops.sqrt(ops.maximum(lam, ops.tiny(lam)))


def _inv_sqrt_divided_differences(lam, f_lam):
    r"""Exact divided differences of :math:`\lambda^{-1/2}`: with :math:`s = \sqrt\lambda`,
    :math:`f^{[1]}(\lambda_i,\lambda_j) = -1/(s_i s_j (s_i + s_j))`, which is also the limit
    :math:`-\tfrac12\lambda^{-3/2}` at ties (no cancellation, no threshold)."""
    s = 1.0 / f_lam
    si, sj = s[..., :, None], s[..., None, :]
    return -1.0 / (si * sj * (si + sj))


def spd_inv_sqrt(g: Array) -> tuple[Array, Array]:
    r"""Inverse square root :math:`G^{-1/2}` of symmetric positive-definite matrices.

    Returns ``(G^{-1/2}, eigenvalues of G)``; the eigenvalues (ascending) let callers test for
    rank deficiency without a second factorisation. A :func:`sym_function` with the exact divided
    differences :math:`F_{ij} = -1/(s_i s_j (s_i + s_j))` in the torch backward pass.
    """
    return sym_function(
        g, _inv_sqrt, None, divided_differences=_inv_sqrt_divided_differences, eigenvalues=True
    )


def polar(a: Array, *, check_rank: bool = True, what: str = "matrix") -> Array:
    r"""Orthonormal polar factor :math:`Q = A (A^\top A)^{-1/2} = UV^\top` of tall matrices A.

    Q is the nearest matrix with orthonormal columns to A (n x p) in the Frobenius norm and is
    unique iff rank A = p. In general it is computed from the thin SVD :math:`A = U\Sigma
    V^\top`, which is accurate to :math:`\varepsilon\,\kappa(A)` (the eigendecomposition of
    :math:`A^\top A` squares the condition number, and cannot see a smallest singular value
    below :math:`\sqrt\varepsilon\,\sigma_1`). Two cheaper paths are taken where they are as
    accurate: numpy float64 stacks near orthonormal (:math:`\|A^\top A - I\|_F < 1/4`, every
    iterate of a retraction) take the Newton-Schulz iteration, and in torch every matrix whose
    Gram matrix :math:`G = A^\top A = V\Lambda V^\top` is well conditioned
    (:math:`\lambda_{\min} > c\,\lambda_{\max}`, see :data:`_GRAM_CONDITION`; G formed and
    factorised in float64 for float32 input) takes :math:`Q = A V \Lambda^{-1/2} V^\top`,
    whose error :math:`\approx \varepsilon\,\kappa(A)^2 \le \varepsilon\,\kappa(A) /
    \sqrt c` stays within a small multiple of the SVD's. The other matrices of a stack take the
    SVD. In torch the backward pass of both paths is the derivative of the polar factor (Higham,
    *Functions of Matrices*, 2008, sec. 8.1): with :math:`K = U^\top\bar Q V`, :math:`\bar A
    = U\,[(K - K^\top)_{ij}/(\sigma_i + \sigma_j)]\,V^\top + (I - UU^\top) \bar Q
    V\Sigma^{-1}V^\top`, finite at repeated singular values (where the generic SVD and eigh
    backward passes divide by zero).

    With ``check_rank`` a :class:`~riemfl.errors.ProjectionError` is raised when
    :math:`\sigma_p \le \max(n, p)\,\varepsilon\,\sigma_1` (numerical rank below p; the
    message states both numbers). A matrix that passes the condition test above has
    :math:`\sigma_p > \sqrt c\,\sigma_1` and needs no further test.
    """
    ops = ops_for(a)
    if isinstance(a, np.ndarray) and a.dtype == np.float64:
        h = _near_identity_inv_sqrt(ops.mT(a) @ a)
        if h is not None:  # ||G - I|| < 1/4: every singular value in (0.86, 1.12), full rank
            return a @ h
    a = require_finite(a, what)
    if ops.is_torch:
        return _torch_polar_dispatch(ops, a, check_rank, what)
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    if check_rank:
        _check_polar_rank(ops, a, s, what)
    return u @ vh


#: Smallest ratio :math:`\lambda_{\min}/\lambda_{\max}` of the Gram matrix (i.e.
#: :math:`1/\kappa(A)^2`) for which torch's :func:`polar` uses the eigendecomposition of
#: :math:`A^\top A` instead of the SVD: :math:`\kappa(A) < 10`, so the squared condition number
#: costs at most a factor 10 over the SVD's error :math:`\varepsilon\,\kappa(A)`. Random and
#: near-orthonormal matrices (projections, retraction steps) are far inside.
_GRAM_CONDITION = 1e-2


def _torch_polar_dispatch(ops, a, check_rank: bool, what: str):
    """Torch polar factor: the Gram eigendecomposition where well conditioned, else the SVD."""
    import torch

    if a.shape[-1] == 0 or a.shape[-2] < a.shape[-1] or a.numel() == 0 or level_of(a) != "eager":
        # (deferred and unchecked calls take the SVD everywhere: no branch on a value)
        out, s = _torch_polar(a)
        if check_rank and a.numel():
            _check_polar_rank(ops, a, s, what)
        return out
    with torch.no_grad():
        a_gram = a.detach().double() if a.dtype == torch.float32 else a.detach()
        lam, v = torch.linalg.eigh(a_gram.mT @ a_gram)
    if lam.ndim == 1:  # one matrix: two Python floats
        low, high = lam[0 :: lam.shape[-1] - 1].tolist() if lam.shape[-1] > 1 else lam.tolist() * 2
        good_all = low > _GRAM_CONDITION * high
        good = None
    else:
        good = lam[..., 0] > _GRAM_CONDITION * lam[..., -1]
        good_all = bool(good.all())
    if good_all:
        return _torch_polar_eigh(a, v.to(a.dtype), lam.to(a.dtype))
    batch = tuple(a.shape[:-2])
    if good is None or not bool(good.any()):
        out, s = _torch_polar(a)
        if check_rank:
            _check_polar_rank(ops, a, s, what)
        return out
    # mixed stack: the eigendecomposition for the well-conditioned matrices, the SVD for the rest
    flat = a.reshape((-1,) + tuple(a.shape[-2:]))
    good_flat = good.reshape(-1)
    idx_good = torch.nonzero(good_flat).reshape(-1)
    idx_bad = torch.nonzero(~good_flat).reshape(-1)
    lam_flat = lam.reshape((-1, lam.shape[-1]))
    v_flat = v.reshape((-1,) + tuple(v.shape[-2:]))
    q_good = _torch_polar_eigh(
        flat[idx_good], v_flat[idx_good].to(a.dtype), lam_flat[idx_good].to(a.dtype)
    )
    q_bad, s_bad = _torch_polar(flat[idx_bad])
    if check_rank:
        s_all = torch.ones(lam_flat.shape, dtype=s_bad.dtype)
        s_all[idx_bad.cpu()] = s_bad.detach().cpu()
        _check_polar_rank(ops, a, s_all.reshape(batch + (lam.shape[-1],)), what)
    order = torch.argsort(torch.cat([idx_good, idx_bad]))
    return torch.cat([q_good, q_bad])[order].reshape(a.shape)


def _first_where(mask: np.ndarray) -> tuple[tuple[int, ...], str]:
    """The first batch index where ``mask`` holds, and the words naming it in a message."""
    i = tuple(int(k) for k in np.argwhere(np.atleast_1d(mask))[0]) if mask.ndim else ()
    return i, (f" (batch element {i})" if i else "")


def _check_polar_rank(ops, a, s, what: str) -> None:
    """Raise ProjectionError where sigma_p <= max(n, p) eps sigma_1 (s: descending values)."""
    tol = max(a.shape[-2:]) * ops.eps(a)
    if s.ndim == 1 and level_of(s) == "eager":  # one matrix (a retraction's step): two floats
        single = s.tolist() if ops.is_torch else s
        if single[-1] > tol * single[0]:
            return
    refuse(s[..., -1] <= tol * s[..., 0], ProjectionError, _polar_rank_message, s, tol, what)


def _polar_rank_message(s: Array, tol: float, what: str) -> str:
    values = to_numpy(s)
    i, where = _first_where(values[..., -1] <= tol * values[..., 0])
    return (
        f"the polar factor of the {what} is not unique: its smallest singular value "
        f"{float(values[i][-1]):.3e} is not above {tol:.1e} * sigma_1 = "
        f"{tol * float(values[i][0]):.3e}{where}, so its numerical rank is below "
        f"{values.shape[-1]} (expected full column rank)"
    )


def signed_svd(a: Array) -> tuple[Array, Array, Array]:
    r""":math:`A = U\Sigma' V^\top` of square matrices with :math:`\det U \det V = 1`: the last
    singular vector of U and the last singular value change sign where the plain SVD has
    :math:`\det(UV^\top) = -1` (so :math:`\sigma'_n < 0` exactly where :math:`\det A < 0`)."""
    if is_torch(a):
        import torch as lib
    else:
        lib = np
    u, s, vh = lib.linalg.svd(a)
    ops = ops_for(a)
    negative = (lib.linalg.det(u) * lib.linalg.det(vh)) < 0
    ones = lib.ones_like(s)
    last = ops.where(negative, -ones[..., -1], ones[..., -1])
    signs = ops.concatenate([ones[..., :-1], last[..., None]], axis=-1)
    return u * signs[..., None, :], s * signs, vh


def _torch_polar(a, signed: bool = False):
    """The torch polar factor and singular values (:class:`~riemfl.linalg_torch.Polar`)."""
    from .linalg_torch import Polar

    return Polar.apply(a, signed)


def _torch_polar_eigh(a, v, lam):
    """The torch polar factor from the Gram eigenpairs
    (:class:`~riemfl.linalg_torch.PolarEigh`)."""
    from .linalg_torch import PolarEigh

    return PolarEigh.apply(a, v, lam)


def special_polar(a: Array, *, rtol: float | None = None, what: str = "matrix") -> Array:
    r"""The nearest rotation :math:`P_{\mathrm{SO}(n)}(A) = U\,\mathrm{diag}(1, \dots, 1,
    \det UV^\top)\,V^\top` to square matrices A (SVD :math:`A = U\Sigma V^\top`) in the
    Frobenius norm, the solution of the special orthogonal Procrustes problem (Umeyama 1991).

    With the signed SVD :math:`A = U\Sigma'V^\top`, :math:`U, V \in \mathrm{SO}(n)`,
    :math:`\sigma'_1 \ge \dots \ge \sigma'_{n-1} \ge |\sigma'_n|` (:math:`\sigma'_n < 0` iff
    :math:`\det A < 0`), :math:`\max_{R\in\mathrm{SO}(n)}\mathrm{tr}(R^\top A) = \sum_i
    \sigma'_i` is attained at :math:`UV^\top`, uniquely iff :math:`\sigma'_{n-1} + \sigma'_n >
    0`. So the factor is not unique exactly where the rank is at most n - 2, or where
    :math:`\det A < 0` and the smallest singular value is repeated; a matrix of rank n - 1 has a
    unique nearest rotation (unlike its nearest orthogonal matrix).

    Raises :class:`~riemfl.errors.ProjectionError` where :math:`\sigma'_{n-1} + \sigma'_n \le
    r\sigma_1` with ``rtol`` :math:`r` (default :math:`n\varepsilon` of the dtype; the message
    states both numbers). numpy or torch; in torch the backward pass is the derivative of the
    factor (that of :func:`polar` with the signed values), :math:`\bar A = U[(K -
    K^\top)_{ij}/(\sigma'_i + \sigma'_j)]V^\top` with :math:`K = U^\top\bar Q V`: for
    :math:`dR = U\Omega V^\top`, :math:`R^\top dA - dA^\top R = V(\Omega\Sigma' +
    \Sigma'\Omega)V^\top`, finite wherever the factor is unique.
    """
    q, s, tol, low = special_polar_parts(a, rtol)
    refuse(low, ProjectionError, special_polar_message, s, tol, what)
    return q


def special_polar_parts(a: Array, rtol: float | None = None) -> tuple[Array, Array, float, Array]:
    r"""The parts of :func:`special_polar`, unchecked: the factor :math:`UV^\top`, the signed
    singular values :math:`\sigma'`, the tolerance :math:`r` and where the factor is not unique,
    :math:`\sigma'_{n-1} + \sigma'_n \le r\sigma_1` (booleans, no read), for a caller that
    refuses the last with its own error (:func:`special_polar_message` writes its details)."""
    if is_torch(a):
        q, s = _torch_polar(factorisable(a), signed=True)
    else:
        u, s, vh = signed_svd(a)
        q = u @ vh
    tol = a.shape[-1] * ops_for(a).eps(a) if rtol is None else rtol
    return q, s, tol, s[..., -2] + s[..., -1] <= tol * s[..., 0]


def special_polar_message(s: Array, tol: float, what: str) -> str:
    """The message of :func:`special_polar`'s error, from the signed singular values ``s`` of
    the ``what`` and the tolerance."""
    values = to_numpy(s).astype(np.float64)
    pair = values[..., -2] + values[..., -1]
    i, where = _first_where(pair <= tol * values[..., 0])
    return (
        f"the nearest rotation to the {what} is not unique: the sum of its two smallest "
        f"signed singular values (the last one negative where det < 0) is "
        f"{float(pair[i]):.3e}, not above {tol:.1e} * sigma_1 = "
        f"{tol * float(values[i][0]):.3e}{where}: its rank is at most n - 2, or its "
        f"determinant is negative and its smallest singular value repeated. Expected "
        f"sigma'_(n-1) + sigma'_n > 0"
    )


def require_finite(a: Array, what: str) -> Array:
    """Raise :class:`~riemfl.errors.NonFiniteError` before a factorisation of non-finite input;
    return the input the factorisation takes.

    The public maps refuse non-finite arguments, so this meets only intermediate values that
    overflowed (finite arguments near the dtype's largest number); numpy's SVD does not return
    on infinite entries, and LAPACK raises untyped errors on NaN.

    Returns :func:`factorisable` of ``a``: ``a`` itself, or inside a compiled function at the
    level ``"deferred"`` (where the check is recorded and the map runs on), ``a`` with its
    non-finite entries replaced by zeros.
    """
    refuse_nonfinite(a, NonFiniteError, _overflow_message, what)
    return factorisable(a)


def factorisable(a: Array) -> Array:
    """``a`` as a factorisation takes it at the check level that applies: ``a`` itself, except
    inside a function that ``torch.compile`` traces at the level ``"deferred"``, where its NaN
    and infinite entries are replaced by zeros (``nan_to_num``, one elementwise operation that
    inductor fuses).

    Torch's SVD and ``eigh`` raise on such entries on the CPU, and inside a compiled graph
    riemfl cannot turn that exception into its typed error. With the zeros the factorisation
    returns a finite, meaningless value, and the boundary raises the error recorded for the
    entries: a non-finite argument's :class:`~riemfl.errors.NonFiniteError`, first, as in eager
    mode, or :func:`require_finite`'s for an intermediate value that overflowed. Every
    factorisation of a torch map takes its input through this function. Uncompiled, such an
    exception is translated at the call instead (the map call's wrapper), at no cost to the
    common path.
    """
    if compiling() and level_of(a) == "deferred":
        return a.nan_to_num(0.0, 0.0, 0.0)
    return a


def _overflow_message(what: str) -> str:
    return (
        f"the {what} has NaN or infinite entries although the arguments are finite (an "
        f"intermediate value overflowed); expected arguments of moderate size"
    )


#: Largest ||G - I||_F for which :func:`_near_identity_inv_sqrt` is used (5 steps at most).
_NEAR_IDENTITY = 0.25


def _near_identity_inv_sqrt(gram: np.ndarray) -> np.ndarray | None:
    r""":math:`G^{-1/2}` by the coupled Newton-Schulz iteration when every G is near I.

    With :math:`Y_0 = G`, :math:`Z_0 = I` and :math:`T_j = (3I - Z_j Y_j)/2`,
    :math:`Y_{j+1} = Y_j T_j \to G^{1/2}` and :math:`Z_{j+1} = T_j Z_j \to G^{-1/2}`
    (Higham, *Functions of Matrices*, eq. (6.35)). All iterates are polynomials in
    :math:`E = G - I`, and :math:`I - Z_{j+1}Y_{j+1} = \tfrac34 E_j^2 - \tfrac14 E_j^3` for
    :math:`E_j = I - Z_jY_j`, so the number of steps that takes :math:`\|E\|_F` below rounding
    is known in advance and no convergence test is needed. For the iterates of an optimiser near a
    Stiefel point (:math:`\|E\|` of the order of the step) that is 2-4 batched k x k products
    instead of one eigendecomposition per matrix, with the same result to rounding.

    Returns ``None`` (the caller uses the eigendecomposition) unless :math:`\|E\|_F < 1/4` for
    every matrix of the stack. numpy float64 only: torch keeps the Daleckii-Krein backward of
    :func:`spd_inv_sqrt`.
    """
    k = gram.shape[-1]
    eye = np.eye(k)
    e_mat = gram - eye
    if e_mat.size == 0:
        return None
    e = float(np.sqrt(np.max(np.einsum("...ij,...ij->...", e_mat, e_mat))))
    if not e < _NEAR_IDENTITY:
        return None
    t = eye - 0.5 * e_mat  # first step in closed form: Z_0 Y_0 = G
    y, z = gram @ t, t
    e = 0.75 * e * e + 0.25 * e**3
    while e > 1e-17:
        t = 1.5 * eye - 0.5 * (z @ y)
        e = 0.75 * e * e + 0.25 * e**3
        z = t @ z
        if e > 1e-17:
            y = y @ t
    return z


def qr_positive(a: Array) -> Array:
    r"""Q factor of the thin QR decomposition with :math:`\operatorname{diag}(R) > 0` (``qf``)."""
    ops = ops_for(a)
    q, r = ops.qr(a)
    d = ops.diagonal(r)
    signs = ops.where(d < 0, -ops.ones_like(d), ops.ones_like(d))
    return q * signs[..., None, :]


@lru_cache(maxsize=32)
def _upper_index(p: int):
    rows, cols = np.triu_indices(p)
    m = rows.size
    select = np.zeros((m, p * p))
    select[np.arange(m), rows * p + cols] = 1.0
    return rows, cols, select


def solve_inverse_qr(m: Array) -> Array:
    r"""Upper-triangular R solving :math:`M R + R^\top M^\top = 2 I` (inverse QR retraction).

    This is the linear system of Kaneko, Fiori and Tanaka (2013) for the inverse of the QR
    retraction on the Stiefel manifold, with :math:`M = X^\top Y`: then :math:`R_X^{-1}(Y) = Y R
    - X`. The p(p+1)/2 unknowns (the upper triangle of R) are found from the p(p+1)/2 independent
    equations (the upper triangle of the symmetric left-hand side) by one dense solve.
    Raises :class:`~riemfl.errors.CutLocusError` when the system is singular.
    """
    ops = ops_for(m)
    p = m.shape[-1]
    rows, cols, select = _upper_index(p)
    # L[(i,j),(a,b)] = M[i,a] [b == j] + M[j,a] [b == i]  for equations i<=j, unknowns a<=b
    eq_i, eq_j = rows[:, None], cols[:, None]
    un_a, un_b = rows[None, :], cols[None, :]
    lhs = m[..., eq_i, un_a] * ops.asarray(un_b == eq_j, m) + m[..., eq_j, un_a] * ops.asarray(
        un_b == eq_i, m
    )
    rhs = ops.asarray((rows == cols) * 2.0, m)
    rhs = ops.broadcast_to(rhs, lhs.shape[:-1])[..., None]
    try:
        sol = ops.solve(lhs, rhs)[..., 0]
    except Exception as exc:  # numpy LinAlgError / torch RuntimeError
        raise CutLocusError(
            "the inverse QR retraction is not defined here: the triangular system "
            "X^T Y R + R^T Y^T X = 2I is singular (Y is too far from X)"
        ) from exc
    flat = sol @ ops.asarray(select, m)
    return ops.reshape(flat, tuple(m.shape[:-2]) + (p, p))


def solve_lyapunov(m: Array, c: Array) -> Array:
    r"""Solve :math:`M S + S M^\top = C` for S, by one dense solve of size p^2.

    Used by the inverse polar retraction on the Stiefel manifold (:math:`M = X^\top Y`,
    :math:`C = 2I`). Row-major vectorisation gives :math:`(M \otimes I + I \otimes M)
    \operatorname{vec}(S) = \operatorname{vec}(C)`. Raises
    :class:`~riemfl.errors.CutLocusError` when the system is singular (M and -M share an
    eigenvalue).
    """
    ops = ops_for(m, c)
    p = m.shape[-1]
    eye = ops.eye(p, m)
    kron = ops.einsum("...ij,kl->...ikjl", m, eye) + ops.einsum("ij,...kl->...ikjl", eye, m)
    batch = tuple(kron.shape[:-4])
    kron = ops.reshape(kron, batch + (p * p, p * p))
    rhs = ops.reshape(ops.broadcast_to(c, batch + (p, p)), batch + (p * p, 1))
    try:
        sol = ops.solve(kron, rhs)
    except Exception as exc:
        raise CutLocusError(
            "the inverse polar retraction is not defined here: the Lyapunov equation "
            "X^T Y S + S Y^T X = 2I is singular (Y is too far from X)"
        ) from exc
    return ops.reshape(sol, batch + (p, p))


def generic_divided_differences(lam: Array, f_lam: Array, df: Callable[[Array], Array]) -> Array:
    r"""First divided differences :math:`f^{[1]}(\lambda_i, \lambda_j) = (f(\lambda_i) -
    f(\lambda_j)) / (\lambda_i - \lambda_j)`, and :math:`f'` at the mean where
    :math:`|\lambda_i - \lambda_j| \le 10^{-6}\max(|\lambda_i|, |\lambda_j|, 1)`, from the
    eigenvalues ``lam``, ``f_lam`` :math:`= f(\lambda)` and ``df`` :math:`= f'`."""
    ops = ops_for(lam)
    li = lam[..., :, None]
    lj = lam[..., None, :]
    diff = li - lj
    scale = ops.maximum(ops.maximum(ops.abs(li), ops.abs(lj)), 1.0)
    close = ops.abs(diff) <= 1e-6 * scale
    safe = ops.where(close, ops.ones_like(diff), diff)
    quotient = (f_lam[..., :, None] - f_lam[..., None, :]) / safe
    return ops.where(close, df(0.5 * (li + lj)), quotient)


def sym_function(
    g: Array,
    f: Callable[[Array], Array],
    df: Callable[[Array], Array] | None,
    *,
    divided_differences: Callable[[Array, Array], Array] | None = None,
    eigenvalues: bool = False,
) -> Array | tuple[Array, Array]:
    r"""Matrix function :math:`f(G) = V f(\Lambda) V^\top` of symmetric matrices G.

    ``f`` and ``df`` (its derivative) are elementwise functions written with the backend namespace
    (module-level functions, so that the torch function built for them is cached). In torch the
    backward pass is the Daleckii-Krein formula :math:`\bar G = V (F \circ V^\top
    \operatorname{sym}(\bar Y) V) V^\top` with :math:`F_{ij} = f^{[1]}(\lambda_i,
    \lambda_j)` (``df`` at ties), which stays finite at repeated eigenvalues, where the generic
    eigh backward divides by zero. ``divided_differences(lam, f_lam)`` replaces the generic
    :math:`F` where a closed form is known. With ``eigenvalues`` the eigenvalues of G (ascending)
    are returned too.
    """
    g = require_finite(g, "symmetric matrix of a matrix function")
    if is_torch(g):
        from .linalg_torch import SymFunction

        out, lam = SymFunction.apply(g, f, df, divided_differences)
    else:
        lam, v = np.linalg.eigh(g)
        out = (v * f(lam)[..., None, :]) @ np.swapaxes(v, -1, -2)
    return (out, lam) if eigenvalues else out


def daleckii_krein(
    g: Array,
    e: Array,
    weights: Callable[[Array], Array],
    weight_differences: Callable[[Array], Array],
) -> Array:
    r"""The linear map :math:`E \mapsto V (W \circ V^\top E V) V^\top` at a symmetric
    :math:`G = V \Lambda V^\top`, with :math:`W_{ij} = w(\lambda_i, \lambda_j)` for a symmetric
    function w.

    With :math:`w = f^{[1]}`, the first divided difference of f, it is the Frechet derivative
    :math:`\mathrm{D}f(G)[E]` of the matrix function :math:`f(G)` (the Daleckii-Krein formula;
    Higham, *Functions of Matrices*, 2008, ch. 3); with :math:`w(a, b) = 1/(a + b)` it is
    the solution L of the Lyapunov equation :math:`GL + LG = E` (G positive definite).

    ``weights(lam)`` returns the grid W (shape ``(..., n, n)``) and ``weight_differences(lam)``
    the grid :math:`\Omega_{abj} = (w(\lambda_a, \lambda_j) - w(\lambda_b, \lambda_j)) /
    (\lambda_a - \lambda_b)` (shape ``(..., n, n, n)``; the limit :math:`\partial_1
    w(\lambda_a, \lambda_j)` where :math:`\lambda_a = \lambda_b`), both module-level functions
    written with the backend namespace (the torch function built for a pair is cached). For
    :math:`w = f^{[1]}`, :math:`\Omega` is the second divided difference :math:`f^{[2]}`
    (:func:`second_divided_differences`).

    In torch the backward pass is exact in both arguments and finite at repeated eigenvalues
    (where differentiating ``torch.linalg.eigh`` divides by zero). The map is linear in E with
    a symmetric W, so :math:`\bar E = V (W \circ V^\top \bar Y V) V^\top`. In G, with
    :math:`\tilde E = V^\top E V` and :math:`\tilde Y = V^\top \bar Y V`, :math:`\bar G = V
    \operatorname{sym}(H) V^\top` with :math:`H_{ab} = \sum_j \Omega_{abj}(\tilde Y_{aj}\tilde
    E_{bj} + \tilde E_{ja}\tilde Y_{jb})`: the first-order perturbation of the eigenpairs, in
    which every division by :math:`\lambda_a - \lambda_b` meets a difference of w and becomes
    :math:`\Omega`. (For :math:`w = f^{[1]}` and symmetric E, :math:`\bar Y` this is
    :math:`\mathrm{D}^2 f(G)[E, \bar Y]`.) Batch dimensions of g and e broadcast.
    """
    g = require_finite(g, "symmetric matrix of a Daleckii-Krein map")
    if is_torch(g) or is_torch(e):
        from .linalg_torch import DaleckiiKrein

        return DaleckiiKrein.apply(g, e, weights, weight_differences)
    lam, v = np.linalg.eigh(g)
    vt = np.swapaxes(v, -1, -2)
    return v @ (weights(lam) * (vt @ e @ v)) @ vt


def second_divided_differences(
    lam: Array,
    first: Callable[[Array, Array], Array],
    near: Callable[[Array, Array], Array],
    relative: bool,
) -> Array:
    r"""The grid :math:`f^{[2]}(\lambda_a, \lambda_b, \lambda_j)` (shape ``(..., n, n, n)``).

    Each triple sorted as :math:`l \le m \le h`, :math:`f^{[2]} = (f^{[1]}(m, h) - f^{[1]}(l,
    m))/(h - l)` from ``first(a, b)``, a first divided difference that is accurate for close
    arguments (elementwise, broadcasting). Where :math:`h - l \le \tau s`, with :math:`\tau =
    \varepsilon^{1/4}` of the dtype and the scale :math:`s = |\bar\lambda|` (``relative``) or
    1, that quotient would cancel, and ``near(mean, q)`` is used instead: the Taylor expansion
    :math:`\tfrac12 f''(\bar\lambda) + \tfrac1{48} f^{(4)}(\bar\lambda)\,q` about the mean
    :math:`\bar\lambda` of the triple, :math:`q = \sum (\lambda - \bar\lambda)^2` (the odd
    term vanishes about the mean). Either branch is accurate to about :math:`\varepsilon^{3/4}`
    relative. Used for the torch backward of :func:`daleckii_krein`.
    """
    ops = ops_for(lam)
    a = lam[..., :, None, None]
    b = lam[..., None, :, None]
    c = lam[..., None, None, :]
    low_ab, high_ab = -ops.maximum(-a, -b), ops.maximum(a, b)
    low = -ops.maximum(-low_ab, -c)
    high = ops.maximum(high_ab, c)
    mid = ops.maximum(low_ab, -ops.maximum(-high_ab, -c))
    mean = (a + b + c) / 3.0
    gap = high - low
    tau = ops.eps(lam) ** 0.25
    scale = ops.abs(mean) if relative else 1.0
    close = gap <= tau * scale
    safe = ops.where(close, ops.ones_like(gap), gap)
    far = (first(mid, high) - first(low, mid)) / safe
    q = (a - mean) ** 2 + (b - mean) ** 2 + (c - mean) ** 2
    return ops.where(close, near(mean, q), far)


def singular_values(a: Array) -> np.ndarray:
    """Singular values of (a batch of) matrices ``a``, descending, shape
    ``batch + (min(m, n),)``, as numpy float64 (no gradient flows through them).

    Raises
    ------
    NonFiniteError
        When ``a`` has a NaN or infinite entry.
    """
    a = require_finite(a, "matrix whose singular values are taken")
    if is_torch(a):
        import torch

        with torch.no_grad():
            return torch.linalg.svdvals(a.detach()).cpu().numpy().astype(np.float64)
    return np.linalg.svd(a, compute_uv=False).astype(np.float64)

r"""Symmetric positive-definite matrices :math:`\mathcal S^n_{++} = \{X \in \mathbb{R}^{n\times n} :
X = X^\top,\ X \succ 0\}` with three Riemannian metrics.

The cone is an open subset of the symmetric matrices, so every tangent space is
:math:`\mathrm{Sym}(n)` and the metrics differ only in how they measure a symmetric U at X:

* **affine-invariant** (Pennec, Fillard & Ayache 2006; Bhatia 2007):
  :math:`\langle U, V\rangle_X = \operatorname{tr}(X^{-1} U X^{-1} V)`; complete, of
  non-positive curvature, every map closed form;
* **log-Euclidean** (Arsigny et al. 2007): the pullback of the Frobenius metric by the matrix
  logarithm, :math:`\langle U, V\rangle_X = \langle \mathrm{D}\log(X)[U], \mathrm{D}\log(X)[V]
  \rangle_F`; flat and complete, every map closed form through :math:`\log` and :math:`\exp`;
* **Bures-Wasserstein** (Bhatia, Jain & Lim 2019): :math:`\langle U, V\rangle_X = \tfrac12
  \operatorname{tr}(\mathcal L_X[U]\,V)` with the Lyapunov operator :math:`X\mathcal L_X[U] +
  \mathcal L_X[U] X = U`; the distance is the 2-Wasserstein distance of centred Gaussians; not
  complete (geodesics reach singular matrices in finite time).

Matrix functions are eigendecomposition based: :func:`riemfl.linalg.sym_function` for
:math:`\log`, :math:`\exp` and :math:`\sqrt{\cdot}`, and :func:`riemfl.linalg.daleckii_krein`
for their derivatives and the Lyapunov operator, whose torch backward passes are finite at
repeated eigenvalues (at X = I, say). The affine-invariant maps whiten by the Cholesky factor
:math:`X = R^\top R` (the congruence :math:`W = R^{-\top} U R^{-1}` maps X to I), which is
cheaper and better conditioned than :math:`X^{\pm 1/2}`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .._validation import integer
from ..backend import Array, cast_like, is_torch, ops_for, to_numpy, widen
from ..check_levels import check_level, level_of, refuse
from ..errors import CutLocusError, NotOnManifoldError, ParameterError, ProjectionError
from ..linalg import (
    daleckii_krein,
    factorisable,
    qr_positive,
    second_divided_differences,
    sym,
    sym_function,
)
from .base import Manifold, delegated_map, dist_from_squared, linalg_errors, result_checked
from .elementary import artanh_sqrt_over, sinhc_sqrt
from .inputs import nan_unless

__all__ = [
    "SPD",
    "METRICS",
    "logm",
    "expm",
    "sqrtm",
    "dlogm",
    "dexpm",
    "lyapunov",
    "exp_divided_difference",
    "log_divided_difference",
    "exp_second_divided_differences",
    "log_second_divided_differences",
]

#: the metrics of :class:`SPD`
METRICS = ("affine-invariant", "log-euclidean", "bures-wasserstein")


# --------------------------------------------------------------------------- scalar functions
def _exp(lam):
    return ops_for(lam).exp(lam)


def _log(lam):
    return ops_for(lam).log(lam)


def _sqrt(lam):
    ops = ops_for(lam)
    return ops.sqrt(ops.maximum(lam, 0.0))


def exp_divided_difference(a: Array, b: Array) -> Array:
    r""":math:`\exp^{[1]}(a, b) = (e^a - e^b)/(a - b) = e^{(a+b)/2}\,\sinh(d)/d`,
    :math:`d = (a - b)/2`: accurate for close arguments (elementwise, broadcasting)."""
    d = 0.5 * (a - b)
    return ops_for(a, b).exp(0.5 * (a + b)) * sinhc_sqrt(d * d)


def log_divided_difference(a: Array, b: Array) -> Array:
    r""":math:`\log^{[1]}(a, b) = (\log a - \log b)/(a - b)` for a, b > 0 (elementwise).

    For :math:`|z| < 1/2`, :math:`z = (a - b)/(a + b)`: :math:`2\operatorname{artanh}(z)/(z(a +
    b))` (accurate for close arguments, :math:`1/a` at a = b); otherwise the quotient itself,
    which does not cancel there.
    """
    ops = ops_for(a, b)
    total = a + b
    z = (a - b) / total
    close = ops.abs(z) < 0.5
    z2 = ops.where(close, z * z, 0.0 * z)
    direct = (ops.log(a) - ops.log(b)) / ops.where(close, ops.ones_like(z), a - b)
    return ops.where(close, 2.0 / total * artanh_sqrt_over(z2), direct)


def _grid(first, lam):
    return first(lam[..., :, None], lam[..., None, :])


def _exp_dd(lam, _f_lam):
    return _grid(exp_divided_difference, lam)


def _log_dd(lam, _f_lam):
    return _grid(log_divided_difference, lam)


def _sqrt_dd(_lam, f_lam):
    return 1.0 / (f_lam[..., :, None] + f_lam[..., None, :])


def _exp_near(mean, q):
    return ops_for(mean).exp(mean) * (0.5 + q / 48.0)


def _log_near(mean, q):
    m2 = mean * mean
    return -(1.0 + q / (4.0 * m2)) / (2.0 * m2)


def _exp_weights(lam):
    return _grid(exp_divided_difference, lam)


def exp_second_divided_differences(lam: Array) -> Array:
    r"""The grid :math:`\exp^{[2]}(\lambda_a, \lambda_b, \lambda_j)` (shape ``(..., n, n, n)``)
    of the torch backward of :func:`dexpm` (:func:`riemfl.linalg.second_divided_differences`)."""
    return second_divided_differences(lam, exp_divided_difference, _exp_near, relative=False)


def _log_weights(lam):
    return _grid(log_divided_difference, lam)


def log_second_divided_differences(lam: Array) -> Array:
    r"""The grid :math:`\log^{[2]}(\lambda_a, \lambda_b, \lambda_j)` (shape ``(..., n, n, n)``)
    of the torch backward of :func:`dlogm`, for positive :math:`\lambda`."""
    return second_divided_differences(lam, log_divided_difference, _log_near, relative=True)


def _lyapunov_weights(lam):
    return 1.0 / (lam[..., :, None] + lam[..., None, :])


def _lyapunov_differences(lam):
    # w(a, b) = 1/(a + b): (w(a, j) - w(b, j))/(a - b) = -1/((a + j)(b + j)), no division by a - b
    return -1.0 / (
        (lam[..., :, None, None] + lam[..., None, None, :])
        * (lam[..., None, :, None] + lam[..., None, None, :])
    )


# --------------------------------------------------------------------------- matrix functions
def logm(x: Array) -> Array:
    r"""Matrix logarithm :math:`\log X = V \log(\Lambda) V^\top` of (the symmetric part of)
    SPD matrices."""
    return cast_like(sym_function(sym(widen(x)), _log, None, divided_differences=_log_dd), x)


def expm(s: Array) -> Array:
    r"""Matrix exponential :math:`\exp S = V e^{\Lambda} V^\top` of (the symmetric part of)
    symmetric matrices."""
    return cast_like(sym_function(sym(widen(s)), _exp, None, divided_differences=_exp_dd), s)


def sqrtm(x: Array) -> Array:
    r"""Principal square root :math:`X^{1/2} = V \Lambda^{1/2} V^\top` of (the symmetric part
    of) SPD matrices."""
    return cast_like(sym_function(sym(widen(x)), _sqrt, None, divided_differences=_sqrt_dd), x)


def dlogm(x: Array, u: Array) -> Array:
    r"""Derivative :math:`\mathrm{D}\log(X)[U] = V (\log^{[1]}(\lambda_i, \lambda_j) \circ V^\top
    U V) V^\top` (Daleckii-Krein; :func:`riemfl.linalg.daleckii_krein`)."""
    return cast_like(
        daleckii_krein(widen(x), widen(u), _log_weights, log_second_divided_differences), u
    )


def dexpm(s: Array, v: Array) -> Array:
    r"""Derivative :math:`\mathrm{D}\exp(S)[V] = Q (\exp^{[1]}(\mu_i, \mu_j) \circ Q^\top V Q)
    Q^\top`, :math:`S = Q\,\mathrm{diag}(\mu) Q^\top`; the inverse of :func:`dlogm` at
    :math:`X = \exp S`."""
    return cast_like(
        daleckii_krein(widen(s), widen(v), _exp_weights, exp_second_divided_differences), v
    )


def lyapunov(x: Array, u: Array) -> Array:
    r"""The Lyapunov operator :math:`\mathcal L_X[U]`: the symmetric L with :math:`XL + LX = U`,
    :math:`L = V (U_{ij}' / (\lambda_i + \lambda_j)) V^\top`, :math:`U' = V^\top U V`."""
    return cast_like(
        daleckii_krein(widen(x), widen(u), _lyapunov_weights, _lyapunov_differences), u
    )


def _expm_second_derivative(s, v, g):
    r""":math:`\mathrm{D}^2\exp(S)[V, G]` from the (1, 3) block B of :math:`\exp` of the block
    upper-triangular :math:`[[S, V, 0], [0, S, G], [0, 0, S]]`: :math:`B + B^\top` (the block
    carries the terms of the second derivative in which V comes before G; Higham, *Functions of
    Matrices*, 2008, ch. 3). V and G are scaled to unit norm first (the block is bilinear), so
    the accuracy does not depend on their size. Differentiable (``ops.expm``)."""
    ops = ops_for(s, v, g)
    n = s.shape[-1]
    zero = 0.0 * (s + v + g)
    nv = ops.sqrt(ops.sum(v * v, axis=(-2, -1), keepdims=True))
    ng = ops.sqrt(ops.sum(g * g, axis=(-2, -1), keepdims=True))
    nv = ops.where(nv > 0, nv, ops.ones_like(nv))
    ng = ops.where(ng > 0, ng, ops.ones_like(ng))
    rows = (
        ops.concatenate([s + zero, v / nv + zero, zero], axis=-1),
        ops.concatenate([zero, s + zero, g / ng + zero], axis=-1),
        ops.concatenate([zero, zero, s + zero], axis=-1),
    )
    block = ops.expm(ops.concatenate(rows, axis=-2))[..., :n, 2 * n :]
    return (nv * ng) * (block + ops.mT(block))


def _eigvalsh(a: Array) -> np.ndarray:
    """Eigenvalues (ascending) of symmetric matrices, as numpy float64, outside autograd."""
    return np.linalg.eigvalsh(to_numpy(a, np.float64))


def _lowest_eigenvalues(a: Array) -> Array:
    """The smallest eigenvalue of each symmetric matrix of ``a``, for a map's check: numpy
    float64 at the check level ``"eager"`` (:func:`_eigvalsh`, the read the check makes
    anyway), else on ``a``'s device (float32 in float64, outside autograd; no read)."""
    if not is_torch(a) or level_of(a) == "eager":
        return _eigvalsh(a)[..., 0]
    import torch

    return torch.linalg.eigvalsh(factorisable(widen(a.detach())))[..., 0]


def _refuse_eigenvalue(
    low: Array, bound: float, error: type[Exception], message: Callable[..., str], *args
) -> None:
    """A map's check that the smallest eigenvalues ``low`` (one per batch element) are above
    ``bound``, at the check level of ``low`` (:func:`~riemfl.check_levels.refuse`): else
    ``error(message(*args, value, at))`` for the first batch element with ``low <= bound``
    (``value`` its eigenvalue, ``at`` " (batch element i)" or "" for a single point)."""
    refuse(low <= bound, error, _eigenvalue_message, low, bound, message, args)


def _eigenvalue_message(low: Array, bound: float, message: Callable[..., str], args: tuple) -> str:
    low = to_numpy(low, np.float64)
    i, at = _first_bad(low <= bound)
    return message(*args, float(low[i]), at)


def _refuse(
    bad: np.ndarray, error: type[Exception], message: Callable[[tuple[int, ...], str], str]
) -> None:
    """Raise ``error(message(i, at))`` for the first batch index i where the mask ``bad`` holds
    (``at``: " (batch element i)", or "" for a single point)."""
    found = _first_bad(bad)
    if found is not None:
        raise error(message(*found))


def _first_bad(bad: np.ndarray) -> tuple[tuple[int, ...], str] | None:
    """``(i, at)`` for the first batch index i where the mask ``bad`` holds, or None."""
    if not np.any(bad):
        return None
    i = tuple(int(k) for k in np.argwhere(np.atleast_1d(bad))[0]) if bad.ndim else ()
    return i, f" (batch element {i})" if i else ""


def _cholesky_frame(x, name: str):
    """``(R, R^{-1})`` with :math:`X = R^\top R` (R upper triangular); differentiable in torch.

    Where the factorisation fails (x not numerically positive definite): ``NotOnManifoldError``
    at the check level ``"eager"``; for torch at ``"deferred"`` and ``"off"``, ``cholesky_ex``
    (no host synchronisation) and NaN factors there, so the map's result is NaN and the
    boundary of the level traces it to the point, as eager mode's translation of the error
    does (:meth:`~riemfl.manifolds.base.Manifold._refuse_boundary`)."""
    ops = ops_for(x)
    if ops.is_torch and level_of(x) != "eager":
        import torch

        lower, info = torch.linalg.cholesky_ex(x)
        lower = nan_unless((info == 0)[..., None, None], lower)
    else:
        try:
            lower = ops.cholesky(x)
        except linalg_errors() as exc:
            raise NotOnManifoldError(
                f"{name}: the Cholesky factorisation of the point x failed: x is not "
                f"(numerically) positive definite; check_point(x) names the violation"
            ) from exc
    r = ops.mT(lower)
    if type(r) is np.ndarray:  # numpy has no triangular solve: R^{-1} by one inversion
        return r, np.linalg.inv(r)
    eye = ops.broadcast_to(ops.eye(r.shape[-1], r), tuple(r.shape))
    return r, ops.solve_triangular_upper(r, eye, left=True)


def _definite(x):
    """x, after a test of positive definiteness by a Cholesky factorisation (discarded): the
    guard of the maps whose formula stays finite at a singular or indefinite point (X sym(G) X,
    the logarithm of a whitened Y with a rounded eigenvalue above 0). numpy: the factorisation
    raises ``LinAlgError`` there, which the input policy traces to the point
    (:meth:`~riemfl.manifolds.base.Manifold._refuse_boundary`); torch: ``cholesky_ex``, with
    no host synchronisation, and x is NaN where it failed
    (:func:`~riemfl.manifolds.inputs.nan_unless`), so the map's result is. At the check level
    ``"off"`` (the bare maps) there is no test: x itself."""
    if check_level() == "off":
        return x
    if not is_torch(x):
        np.linalg.cholesky(x)
        return x
    import torch

    info = torch.linalg.cholesky_ex(x.detach())[1]
    return nan_unless((info == 0)[..., None, None], x)


def _inverse_retract_message(name: str, value: float, at: str) -> str:
    return (
        f"{name}: Y is not R_X(U) for any U with I + W positive definite (W = R^-T U R^-1, "
        f"X = R^T R): 2 R^-T Y R^-1 - I has the eigenvalue {value:.3e} <= 0{at}; the inverse "
        f"retraction needs Y > X/2 in the Loewner order"
    )


def _bw_exp_message(name: str, value: float, at: str) -> str:
    return (
        f"{name}: exp leaves the cone: the geodesic (I + t L) X (I + t L), L = L_X[U], is "
        f"singular at t = {-1.0 / value:.4g} <= 1 (lambda_min(L) = {value:.4g} <= -1){at}; "
        f"expected I + L_X[U] positive definite (every U with |U|_X < "
        f"local_injectivity_radius(X) = sqrt(lambda_min(X)))"
    )


def _project_message(name: str, value: float, at: str) -> str:
    return (
        f"{name}: a has no nearest point in the open cone of positive-definite matrices{at}: "
        f"sym(a) has the eigenvalue {value:.3e} <= 0, so the nearest point of the closed cone "
        f"(eigenvalues clipped at 0) is singular, which the open cone does not contain. "
        f"Expected lambda_min(sym(a)) > 0"
    )


# --------------------------------------------------------------------------- the three metrics
class _AffineInvariant:
    r"""Affine-invariant maps in the whitened coordinates :math:`W = R^{-\top} U R^{-1}`,
    :math:`X = R^\top R` (Cholesky): the congruence by :math:`R^{-\top}` is an isometry taking
    X to I, where :math:`\langle U, V\rangle_I = \langle U, V\rangle_F` and
    :math:`\mathrm{Exp}_I = \exp`."""

    unsupported: dict[str, str] = {}
    injectivity_radius = math.inf
    #: the maps checked through their result (see Manifold._result_checked): the gradient and
    #: Hessian maps are matrix products and sums of their arguments (inf * 0 is NaN), and
    #: transport, sym(U), does not read X and Y
    result_checked = result_checked("egrad_to_rgrad", "ehess_to_rhess", transport=(0, 1))

    def __init__(self, name: str) -> None:
        self.name = name

    @staticmethod
    def _whiten(rinv, u):
        return ops_for(rinv, u).mT(rinv) @ u @ rinv

    @staticmethod
    def _unwhiten(r, w):
        return sym(ops_for(r, w).mT(r) @ w @ r)

    def inner(self, x, u, v):
        _, rinv = _cholesky_frame(x, self.name)
        return ops_for(u, v).sum(self._whiten(rinv, u) * self._whiten(rinv, v), axis=(-2, -1))

    def norm(self, x, u):
        _, rinv = _cholesky_frame(x, self.name)
        w = self._whiten(rinv, u)
        ops = ops_for(w)
        return ops.safe_sqrt(ops.sum(w * w, axis=(-2, -1)))

    # X sym(G) X = sym(X G X) for symmetric X: one symmetrisation instead of two
    def egrad_to_rgrad(self, x, g):
        x = _definite(x)
        return sym(x @ g @ x)

    def ehess_to_rhess(self, x, g, h, u):
        x = _definite(x)
        return sym(x @ h @ x + u @ sym(g) @ x)

    def exp(self, x, u):
        r, rinv = _cholesky_frame(x, self.name)
        return self._unwhiten(r, expm(self._whiten(rinv, u)))

    def retract(self, x, u):
        _, rinv = _cholesky_frame(x, self.name)
        p = u @ rinv  # U X^{-1} U = P P^T
        return sym(x + u + 0.5 * (p @ ops_for(p).mT(p)))

    def inverse_retract(self, x, y):
        r, rinv = _cholesky_frame(x, self.name)
        m = self._whiten(rinv, y)
        ops = ops_for(m)
        eye = ops.eye(m.shape[-1], m)
        root, lam = sym_function(
            sym(2.0 * m) - eye, _sqrt, None, divided_differences=_sqrt_dd, eigenvalues=True
        )
        # (the eigenvalues are at hand: the check costs no factorisation, also when deferred)
        low = to_numpy(lam, np.float64)[..., 0] if level_of(lam) == "eager" else lam[..., 0]
        _refuse_eigenvalue(low, 0.0, CutLocusError, _inverse_retract_message, self.name)
        return self._unwhiten(r, root - eye)

    def log(self, x, y):
        r, rinv = _cholesky_frame(x, self.name)
        return self._unwhiten(r, logm(self._whiten(rinv, _definite(y))))

    def squared_dist(self, x, y):
        _, rinv = _cholesky_frame(x, self.name)
        w = logm(self._whiten(rinv, _definite(y)))
        return ops_for(w).sum(w * w, axis=(-2, -1))

    def transport(self, x, y, u):
        return sym(u)

    def parallel_transport(self, x, y, u):
        r, rinv = _cholesky_frame(x, self.name)
        root = sqrtm(self._whiten(rinv, _definite(y)))
        return self._unwhiten(r, root @ self._whiten(rinv, u) @ root)


class _LogEuclidean:
    r"""Log-Euclidean maps: :math:`\log` is an isometry onto the flat :math:`\mathrm{Sym}(n)`,
    with differential :func:`dlogm` and inverse differential :func:`dexpm`."""

    unsupported: dict[str, str] = {}
    injectivity_radius = math.inf
    #: every map is checked through its arguments (none through its result only)
    result_checked: dict[str, tuple[int, ...]] = {}

    def __init__(self, name: str) -> None:
        self.name = name

    def inner(self, x, u, v):
        return ops_for(u, v).sum(dlogm(x, u) * dlogm(x, v), axis=(-2, -1))

    def norm(self, x, u):
        w = dlogm(x, u)
        ops = ops_for(w)
        return ops.safe_sqrt(ops.sum(w * w, axis=(-2, -1)))

    def egrad_to_rgrad(self, x, g):
        s = logm(x)
        return sym(dexpm(s, dexpm(s, sym(g))))

    def ehess_to_rhess(self, x, g, h, u):
        s = logm(x)
        v = dlogm(x, u)
        inner = _expm_second_derivative(s, v, sym(g)) + dexpm(s, sym(h))
        return sym(dexpm(s, inner))

    def exp(self, x, u):
        return expm(logm(x) + dlogm(x, u))

    retract = exp

    def log(self, x, y):
        s = logm(x)
        return sym(dexpm(s, logm(y) - s))

    inverse_retract = log

    def squared_dist(self, x, y):
        d = logm(y) - logm(x)
        return ops_for(d).sum(d * d, axis=(-2, -1))

    def transport(self, x, y, u):
        return sym(u)

    def parallel_transport(self, x, y, u):
        return sym(dexpm(logm(y), dlogm(x, u)))


_BW_NO_TRANSPORT = (
    "riemfl has no closed form of the parallel transport of the Bures-Wasserstein metric (it "
    "solves a linear ODE along the geodesic); use transport, the parallel transport to first "
    "order, V + Gamma_Y(X - Y, V)"
)


class _BuresWasserstein:
    r"""Bures-Wasserstein maps, written with :math:`\mathcal L_X` (:func:`lyapunov`) and, for log
    and dist, the Cholesky factor :math:`X = R^\top R`."""

    #: every map is checked through its arguments (none through its result only)
    result_checked: dict[str, tuple[int, ...]] = {}

    unsupported = {
        "parallel_transport": _BW_NO_TRANSPORT,
        "injectivity_radius": (
            "the Bures-Wasserstein metric is not complete: exp_X is defined on the tangent ball "
            "of radius sqrt(lambda_min(X)) (and on all U with I + L_X[U] positive definite), "
            "which tends to 0 at the boundary of the cone; use local_injectivity_radius(X)"
        ),
    }

    def __init__(self, name: str) -> None:
        self.name = name

    # the Lyapunov operator is finite at an indefinite X (where no eigenvalue sum is 0): the
    # maps that read X only through it test X first (_definite)
    def inner(self, x, u, v):
        return 0.5 * ops_for(u, v).sum(lyapunov(_definite(x), u) * v, axis=(-2, -1))

    def norm(self, x, u):
        return ops_for(x, u).safe_sqrt(self.inner(x, u, u))

    def egrad_to_rgrad(self, x, g):
        return 4.0 * sym(sym(g) @ _definite(x))

    def ehess_to_rhess(self, x, g, h, u):
        x = _definite(x)
        return 4.0 * sym(sym(h) @ x) + 4.0 * sym(sym(g) @ lyapunov(x, u) @ x)

    def exp(self, x, u):
        x = _definite(x)
        ell = lyapunov(x, u)
        if level_of(ell) != "off":
            low = _lowest_eigenvalues(ell)
            _refuse_eigenvalue(low, -1.0, CutLocusError, _bw_exp_message, self.name)
        return sym(x + u + ell @ x @ ell)

    retract = exp

    def _transport_map_minus_identity(self, x, y):
        r"""(R, T - I) with :math:`T = X^{-1} \# Y = R^{-1} (R Y R^\top)^{1/2} R^{-\top}` (the
        optimal transport map, :math:`TXT = Y`), X = R^T R."""
        r, rinv = _cholesky_frame(x, self.name)
        ops = ops_for(r, y)
        root = sqrtm(r @ _definite(y) @ ops.mT(r))
        eye = ops.eye(r.shape[-1], r)
        return r, sym(rinv @ root @ ops.mT(rinv)) - eye

    def log(self, x, y):
        _, a = self._transport_map_minus_identity(x, y)
        return 2.0 * sym(a @ x)

    inverse_retract = log

    def squared_dist(self, x, y):
        r, a = self._transport_map_minus_identity(x, y)
        ra = r @ a
        return ops_for(ra).sum(ra * ra, axis=(-2, -1))

    def christoffel(self, x, u, v):
        r""":math:`\Gamma_X(U, V) = -(\mathcal L_X[U] X \mathcal L_X[V] + \mathcal L_X[V] X
        \mathcal L_X[U])` (:math:`\nabla_U V = \mathrm{D}V[U] + \Gamma_X(U, V)`)."""
        cross = lyapunov(x, u) @ x @ lyapunov(x, v)
        return -(cross + ops_for(cross).mT(cross))

    def transport(self, x, y, u):
        y = _definite(y)
        return sym(u + self.christoffel(y, _definite(x) - y, u))

    def parallel_transport(self, x, y, u):
        raise NotImplementedError(_BW_NO_TRANSPORT)


_GEOMETRIES = {
    "affine-invariant": _AffineInvariant,
    "log-euclidean": _LogEuclidean,
    "bures-wasserstein": _BuresWasserstein,
}


# --------------------------------------------------------------------------- the manifold


class SPD(Manifold):
    r"""Symmetric positive-definite n x n matrices with the affine-invariant, log-Euclidean or
    Bures-Wasserstein metric.

    Sizes: ``n`` is the ambient matrix size (points are n x n); ``dim`` is :math:`n(n+1)/2`.

    Points are symmetric positive-definite n x n arrays; tangent vectors are symmetric n x n
    arrays (:math:`T_X = \mathrm{Sym}(n)` for every X; dimension :math:`n(n+1)/2`).
    ``to_tangent(x, a) = sym(a)`` (orthogonal for all three metrics: each pairs a skew matrix
    with a symmetric one to 0).

    **affine-invariant** (the default). :math:`\langle U, V\rangle_X = \operatorname{tr}(X^{-1}U
    X^{-1}V)`. With :math:`X = R^\top R` and :math:`M = R^{-\top} Y R^{-1}`:

    * :math:`\mathrm{Exp}_X(U) = X^{1/2}\exp(X^{-1/2}UX^{-1/2})X^{1/2} = R^\top \exp(R^{-\top} U
      R^{-1}) R`, :math:`\mathrm{Log}_X(Y) = R^\top \log(M) R`, :math:`d(X, Y) = \|\log(X^{-1/2}
      Y X^{-1/2})\|_F = \|\log M\|_F` (Pennec, Fillard & Ayache 2006);
    * parallel transport :math:`E U E^\top`, :math:`E = (YX^{-1})^{1/2} = R^\top M^{1/2}
      R^{-\top}`;
    * ``egrad_to_rgrad`` :math:`X \operatorname{sym}(G) X`; ``ehess_to_rhess`` :math:`X
      \operatorname{sym}(H) X + \operatorname{sym}(U \operatorname{sym}(G) X)` (the connection
      is :math:`\nabla_U V = \mathrm{D}V[U] - \operatorname{sym}(U X^{-1} V)`);
    * ``retract``: the second-order retraction :math:`X + U + \tfrac12 U X^{-1} U = R^\top(I + W
      + \tfrac12 W^2)R`, :math:`W = R^{-\top}UR^{-1}` (it agrees with :math:`\mathrm{Exp}_X(tU)`
      to :math:`O(t^3)`; it is :math:`R^\top(\tfrac12(I + W)^2 + \tfrac12 I)R`, positive
      definite for every U); ``inverse_retract`` :math:`R^\top((2M - I)^{1/2} - I)R`, the
      preimage with :math:`I + W \succ 0`, defined for :math:`Y \succ X/2`
      (``CutLocusError`` otherwise); ``transport``: the identity of :math:`\mathrm{Sym}(n)`
      (also for log-Euclidean).
    * complete (a Hadamard manifold): injectivity radius :math:`\infty`.

    **log-Euclidean**. :math:`\log` is an isometry onto :math:`(\mathrm{Sym}(n), \langle\cdot,
    \cdot\rangle_F)` (Arsigny et al. 2007). With :math:`S = \log X`, :math:`\mathrm{D}\log(X)`
    (:func:`dlogm`) and its inverse :math:`\mathrm{D}\exp(S)` (:func:`dexpm`), both
    Daleckii-Krein maps with the divided differences :math:`\log^{[1]}` and :math:`\exp^{[1]}`:

    * :math:`\langle U, V\rangle_X = \langle \mathrm{D}\log(X)[U], \mathrm{D}\log(X)[V]\rangle_F`;
    * :math:`\mathrm{Exp}_X(U) = \exp(S + \mathrm{D}\log(X)[U])` (also ``retract``),
      :math:`\mathrm{Log}_X(Y) = \mathrm{D}\exp(S)[\log Y - S]` (also ``inverse_retract``),
      :math:`d(X, Y) = \|\log Y - \log X\|_F`;
    * parallel transport :math:`\mathrm{D}\exp(\log Y)[\mathrm{D}\log(X)[U]]` (path independent:
      the metric is flat);
    * ``egrad_to_rgrad`` :math:`\mathrm{D}\exp(S)[\mathrm{D}\exp(S)[\operatorname{sym} G]]`
      (:math:`\mathrm{D}\log(X)` is self-adjoint for the Frobenius product);
      ``ehess_to_rhess`` :math:`\mathrm{D}\exp(S)[\mathrm{D}^2\exp(S)[V,
      \operatorname{sym}G] + \mathrm{D}\exp(S)[\operatorname{sym} H]]`, :math:`V =
      \mathrm{D}\log(X)[U]` (the Euclidean Hessian of :math:`f \circ \exp` at S, carried back);
    * complete and flat: injectivity radius :math:`\infty`.

    **Bures-Wasserstein**. :math:`\langle U, V\rangle_X = \tfrac12\operatorname{tr}(\mathcal
    L_X[U] V)`, :math:`X \mathcal L_X[U] + \mathcal L_X[U] X = U` (:func:`lyapunov`); the
    Riemannian quotient of :math:`(GL(n), \langle\cdot,\cdot\rangle_F)` by :math:`A \mapsto
    AA^\top` (Bhatia, Jain & Lim 2019):

    * :math:`\mathrm{Exp}_X(U) = X + U + \mathcal L_X[U] X \mathcal L_X[U] = (I + L) X (I + L)`,
      :math:`L = \mathcal L_X[U]`. **Domain**: the geodesic :math:`t \mapsto (I + tL)X(I + tL)`
      stays in the cone up to t = 1 iff :math:`I + L \succ 0`; ``exp`` (and ``retract``, which
      is exp) raise ``CutLocusError`` otherwise. The domain holds the tangent ball of radius
      :math:`\sqrt{\lambda_{\min}(X)}` (:math:`\|L\|_2^2\lambda_{\min}(X) \le \operatorname{tr}
      (L^2 X) = \|U\|_X^2`), and :math:`U = -2\lambda_{\min} e e^\top` on its boundary leaves
      the cone, so :meth:`local_injectivity_radius` is :math:`\sqrt{\lambda_{\min}(X)}` exactly
      (on the domain exp is injective: Log inverts it);
    * :math:`\mathrm{Log}_X(Y) = (XY)^{1/2} + (YX)^{1/2} - 2X = (T - I)X + X(T - I)`, with the
      optimal transport map :math:`T = X^{-1}\#Y = R^{-1}(RYR^\top)^{1/2}R^{-\top}`
      (:math:`TXT = Y`), defined everywhere (also ``inverse_retract``);
    * :math:`d(X, Y)^2 = \operatorname{tr}X + \operatorname{tr}Y - 2\operatorname{tr}(X^{1/2} Y
      X^{1/2})^{1/2}`, evaluated as :math:`\|R(T - I)\|_F = \|\mathrm{Log}_X(Y)\|_X` (no
      cancellation for close points);
    * ``egrad_to_rgrad`` :math:`2(GX + XG)`, :math:`G = \operatorname{sym}(\nabla f)`;
      ``ehess_to_rhess`` :math:`2(HX + XH) + 2(GLX + XLG)`, :math:`L = \mathcal L_X[U]` (the
      horizontal lift of :math:`\nabla^2 (f(AA^\top))` pushed down, Boumal 2023, ch. 9);
    * the Christoffel map :math:`\Gamma_X(U, V) = -(\mathcal L_X[U] X \mathcal L_X[V] +
      \mathcal L_X[V] X \mathcal L_X[U])` (:math:`\nabla_U V = \mathrm{D}V[U] + \Gamma_X(U,
      V)`; the geodesic equation :math:`\gamma'' = 2\mathcal L\,X\mathcal L` at t = 0);
      ``parallel_transport`` is not provided (no closed form in riemfl); ``transport(X, Y, V) =
      V + \Gamma_Y(X - Y, V)`` is the parallel transport to first order in :math:`X - Y` (its
      derivative along a curve is the connection, so the derivative of the transported
      gradient is the Hessian).

    For every metric ``squared_dist`` is the squared Frobenius norm above (:math:`\|\log M\|_F^2`,
    :math:`\|\log Y - \log X\|_F^2`, :math:`\|R(T - I)\|_F^2`), smooth at :math:`Y = X`, and
    ``dist`` is its square root (with a zero subgradient at :math:`Y = X` in torch).

    **Positive definite in floating point.** ``exp`` (every metric), ``retract`` and
    ``inverse_retract`` return positive-definite matrices in exact arithmetic. The rounded
    result :math:`\hat Y` differs from it by :math:`\|\hat Y - Y\|_2 \le c\,n\varepsilon\|Y\|_2`
    (backward-stable eigendecompositions and products; c a small constant), so by Weyl's
    inequality it is positive definite, for every summation order, while :math:`\kappa(Y) <
    1/(c\,n\varepsilon)`. No pull-back can do better: a matrix of larger condition number is not
    positive definite to working precision (its smallest eigenvalue is below the rounding of its
    largest). For ``exp`` (affine-invariant) :math:`\kappa(Y) \le \kappa(X)\,e^{2\|W\|_2}`,
    :math:`\|W\|_2 \le \|U\|_X`: steps up to :math:`\|U\|_X \approx 15` from a well-conditioned
    X in float64 (6 in float32, computed in float64 and rounded once). The second-order
    ``retract`` has :math:`\lambda_{\min}(Y) \ge \lambda_{\min}(X)/2`, and stays positive definite
    for :math:`\|U\|_X` up to about :math:`(\kappa(X) n\varepsilon)^{-1/2}`. Beyond, the result
    can fail ``check_point`` (which says so), and a step whose exponential overflows returns
    infinities (an overflow; the input policy returns it as computed).

    **The open cone: projection and proximal smoothness.** ``project(a)`` is the Frobenius
    nearest point in the open cone. The closed cone is convex and its nearest point to a is
    :math:`\operatorname{sym}(a)` with negative eigenvalues set to 0 (Higham 1988); it lies in
    the open cone iff :math:`\lambda_{\min}(\operatorname{sym} a) > 0`, and then
    ``project(a) = sym(a)``. Otherwise the nearest point of the closure is singular, the open
    cone has none, and ``project`` raises ``ProjectionError`` naming the eigenvalue (it does not
    clip to a floor, which is no nearest point). For an open set the tube
    :math:`\{a : d(a, M) < \gamma\}` of the reach contains, for every :math:`\gamma > 0`, points
    outside the cone without a nearest point, so the uniform proximal smoothness is 0:
    ``reach`` raises ``NotImplementedError`` with this reason (the kit skips its
    tube tests). The local value, :meth:`local_reach`, is
    :math:`\lambda_{\min}(X)`: every a with :math:`\|a - X\|_F < \lambda_{\min}(X)` has
    :math:`\operatorname{sym}(a)` positive definite (Weyl), and :math:`X - \lambda_{\min} e
    e^\top` at that distance is singular. The metric does not enter (the projection is
    Euclidean). ``diameter`` is :math:`\infty` (a cone).

    ``check_point`` requires :math:`\|X - X^\top\|_F \le` ``atol`` :math:`\|X\|_F` and
    :math:`\lambda_{\min}(\operatorname{sym}X) > 0` strictly (no tolerance: a singular matrix is
    on the boundary); ``random_point`` draws :math:`Q\,\mathrm{diag}(\lambda)Q^\top` with a
    Haar-distributed Q and :math:`\lambda_i = 2^{s_i}`, :math:`s_i \sim U[-1, 1]` (condition
    number at most 4).

    Parameters
    ----------
    n : int
        Matrix size, ``n >= 1``.
    metric : {"affine-invariant", "log-euclidean", "bures-wasserstein"}
        The Riemannian metric.
    """

    def curvature_bound(self) -> tuple[float | None, str]:
        if self.metric == "affine-invariant":
            return 0.0, "non-positive curvature (affine-invariant metric, a Hadamard manifold)"
        if self.metric == "log-euclidean":
            return 0.0, "flat (log-Euclidean metric)"
        return super().curvature_bound()

    def __init__(self, n: int, metric: str = "affine-invariant") -> None:
        n = integer(n, "SPD(n): n", minimum=1)
        if metric not in METRICS:
            raise ParameterError(
                f"SPD metric must be one of {', '.join(repr(m) for m in METRICS)}, got {metric!r}"
            )
        self.n = int(n)
        self.metric = metric
        self.point_shape = (self.n, self.n)
        suffix = "" if metric == "affine-invariant" else f', metric="{metric}"'
        self.name = f"SPD({self.n}{suffix})"
        self._geometry = _GEOMETRIES[metric](self.name)
        # to_tangent, sym(A), does not read X (every metric); the metric's own cheap maps; the
        # other maps check every argument first and their result as well: a non-finite result
        # (or a failed factorisation) from finite arguments is traced to a point on or beyond
        # the boundary of the cone (Manifold._refuse_boundary)
        self._result_checked = {
            **_EVERY_ARGUMENT_FIRST,
            "to_tangent": (0,),
            **self._geometry.result_checked,
        }
        self.unsupported = {**_OPEN_CONE, **self._geometry.unsupported}

    @property
    def dim(self) -> int:
        return self.n * (self.n + 1) // 2

    diameter = math.inf

    @property
    def injectivity_radius(self) -> float:
        if "injectivity_radius" in self.unsupported:
            return self._not_implemented("injectivity_radius")
        return self._geometry.injectivity_radius

    _euclidean_norm_ok = False

    # ------------------------------------------------------------------ local constants
    def local_reach(self, x: Array) -> Array:
        r""":math:`\lambda_{\min}(X)`: every ambient a with :math:`\|a - X\|_F <` this has a
        (unique) nearest point in the open cone, and a singular matrix is that far from X.

        One value per point, in x's type; differentiable in torch (where the smallest
        eigenvalue is simple).
        """
        self._shape(x, "point x")
        if is_torch(x):
            import torch

            return torch.linalg.eigvalsh(factorisable(sym(x)))[..., 0]
        return np.linalg.eigvalsh(sym(x))[..., 0]

    def local_injectivity_radius(self, x: Array) -> Array:
        r"""The radius of the tangent ball at X on which ``exp`` is defined and injective:
        :math:`\sqrt{\lambda_{\min}(X)}` for Bures-Wasserstein, :math:`\infty` for the complete
        affine-invariant and log-Euclidean metrics (one value per point, in x's type)."""
        low = self.local_reach(x)
        if self.metric != "bures-wasserstein":
            return low * 0.0 + math.inf
        return ops_for(low).sqrt(low)

    # ------------------------------------------------------------------ the open cone
    def _project(self, a):
        p = sym(a)
        if level_of(p) != "off":
            low = _lowest_eigenvalues(p)
            _refuse_eigenvalue(low, 0.0, ProjectionError, _project_message, self.name)
        return p

    def _to_tangent(self, x, a):
        return sym(a)

    def _random_point(self, batch_shape, rng):
        q = qr_positive(rng.standard_normal(batch_shape + (self.n, self.n)))
        lam = 2.0 ** rng.uniform(-1.0, 1.0, size=batch_shape + (self.n,))
        return sym((q * lam[..., None, :]) @ np.swapaxes(q, -1, -2))

    @staticmethod
    def _asymmetry(a):
        ops = ops_for(a)
        d = a - ops.mT(a)
        num = ops.sqrt(ops.sum(d * d, axis=(-2, -1)))
        den = ops.sqrt(ops.sum(a * a, axis=(-2, -1)))
        return ops.to_float(num / ops.where(den > 0, den, ops.ones_like(den)))

    def _point_violation(self, x):
        if np.any(_eigvalsh(sym(x))[..., 0] <= 0):
            return "X positive definite (lambda_min(X) > 0)", math.inf
        return "X = X^T (|X - X^T|_F / |X|_F)", self._asymmetry(x)

    def _boundary_violation(self, x: Array, name: str = "x") -> tuple[str, str] | None:
        """The first point of x whose symmetric part is not positive definite (see
        :meth:`~riemfl.manifolds.base.Manifold._boundary_violation`): singular (on the
        boundary of the cone, where the metric, through :math:`X^{-1}`, :math:`\\log X` or
        :math:`\\mathcal L_X`, is infinite) or indefinite (beyond it)."""
        low = _eigvalsh(sym(x))[..., 0]
        found = _first_bad(low <= 0)
        if found is None:
            return None
        i, at = found
        value = float(low[i])
        where = "singular: on" if value == 0 else "not positive definite: on or beyond"
        return (
            f"lambda_min(sym {name}) = {value:.3e} <= 0{at}: the matrix is {where} the boundary "
            f"of the cone, where the metric is infinite",
            f"a symmetric positive-definite {name}, lambda_min > 0",
        )

    def _check_point(self, x: Array, tol: float) -> None:
        r"""Raise :class:`~riemfl.errors.NotOnManifoldError` unless x is symmetric (relative
        to :math:`\|X\|_F`, within ``atol``) and positive definite (strictly)."""
        asymmetry = self._asymmetry(x)
        if asymmetry > tol:
            raise NotOnManifoldError(
                f"{self.name}: point is not on the manifold: constraint X = X^T is violated by "
                f"|X - X^T|_F / |X|_F = {asymmetry:.3e} > atol {tol:.1e}"
            )
        low = _eigvalsh(sym(x))[..., 0]
        _refuse(
            low <= 0,
            NotOnManifoldError,
            lambda i, at: (
                f"{self.name}: point is not on the manifold: constraint X positive definite is "
                f"violated: lambda_min(sym X) = {float(low[i]):.3e} <= 0{at}"
            ),
        )

    def _tangent_violation(self, x, u):
        return "U = U^T (|U - U^T|_F / |U|_F)", self._asymmetry(u)

    # ------------------------------------------------------------------ the metric's maps
    def _wide(self, method: str, *args):
        """The geometry's map on float64 copies of float32 arguments, rounded once to the
        dtype of the first argument (chains of eigendecompositions in float32 lose up to 20
        float32 eps in torch's float32 eigh; in float64 they are exact to the final rounding)."""
        return cast_like(getattr(self._geometry, method)(*(widen(a) for a in args)), args[0])

    _inner = delegated_map("inner", "_wide")
    _norm = delegated_map("norm", "_wide")
    _egrad_to_rgrad = delegated_map("egrad_to_rgrad", "_wide")
    _ehess_to_rhess = delegated_map("ehess_to_rhess", "_wide")
    _retract = delegated_map("retract", "_wide")
    _inverse_retract = delegated_map("inverse_retract", "_wide")
    _exp = delegated_map("exp", "_wide")
    _log = delegated_map("log", "_wide")
    _squared_dist = delegated_map("squared_dist", "_wide")
    _dist = dist_from_squared
    _transport = delegated_map("transport", "_wide")
    _parallel_transport = delegated_map("parallel_transport", "_wide")


#: the maps of every metric that check each argument before they run, and their result after
_EVERY_ARGUMENT_FIRST = result_checked(
    egrad_to_rgrad=(0, 1),
    ehess_to_rhess=(0, 1, 2, 3),
    inner=(0, 1, 2),
    norm=(0, 1),
    retract=(0, 1),
    inverse_retract=(0, 1),
    exp=(0, 1),
    log=(0, 1),
    dist=(0, 1),
    squared_dist=(0, 1),
    transport=(0, 1, 2),
    parallel_transport=(0, 1, 2),
)

_OPEN_CONE = {
    "reach": (
        "the cone of positive-definite matrices is open: a matrix with a non-positive "
        "eigenvalue in its symmetric part has no nearest point in it, and such matrices lie "
        "within lambda_min(X) of X, which tends to 0 at the boundary, so the uniform constant "
        "is 0; use local_reach(X) = lambda_min(X)"
    ),
}

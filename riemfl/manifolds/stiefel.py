r"""The Stiefel manifold :math:`\mathrm{St}(n, p) = \{X \in \mathbb{R}^{n\times p} : X^\top X =
I_p\}` with the embedded (Euclidean) metric or the canonical one.

Pure maps (functions of arrays) of the embedded metric come first; those of the canonical metric
and the Cayley retraction are in :mod:`riemfl.manifolds.stiefel_canonical`. :class:`Stiefel` is
a thin class over them. Every map costs :math:`O(np^2 + p^3)`; nothing forms an n x n matrix.
"""

from __future__ import annotations

import math

import numpy as np

from .. import tuning
from .._validation import integer
from ..backend import Array, is_torch, ops_for
from ..check_levels import level_of, refuse
from ..errors import ConvergenceError, ParameterError
from ..linalg import polar, qr_positive, solve_inverse_qr, solve_lyapunov
from .base import Manifold, result_checked
from .stiefel_canonical import (
    canonical_egrad_to_rgrad,
    canonical_ehess_to_rhess,
    canonical_exp,
    canonical_inner,
    canonical_log,
    cayley_retraction,
    cayley_transport,
    inverse_cayley_retraction,
)

__all__ = [
    "Stiefel",
    "stiefel_to_tangent",
    "stiefel_ehess_to_rhess",
    "stiefel_exp",
    "stiefel_log",
    "FIXED_LOG_ITERATIONS",
    "inverse_polar_retraction",
    "inverse_qr_retraction",
    "qr_retraction",
]


def stiefel_to_tangent(x: Array, a: Array) -> Array:
    r"""Orthogonal projection onto :math:`T_X\mathrm{St}`: :math:`A - X\,\mathrm{sym}(X^\top A)`.

    Zhang et al. 2024, Sec. 2.1 (via Boumal 2023, Prop. 3.61); also the Riemannian gradient of
    the embedded metric.
    numpy stacks are computed in place and, above a few MiB, in cache-sized chunks: the map is
    memory-bound, and a whole stack streamed through main memory twice is slower than a loop.
    """
    if type(x) is np.ndarray and type(a) is np.ndarray:
        if a.ndim > 2 and x.shape == a.shape and a.nbytes > tuning.STIEFEL_BLOCK_BYTES:
            return _chunked(_numpy_to_tangent, x, a)
        return _numpy_to_tangent(x, a)
    ops = ops_for(x, a)
    xta = ops.mT(x) @ a
    return a - x @ (0.5 * (xta + ops.mT(xta)))


def _numpy_to_tangent(x, a, out=None):
    xta = np.swapaxes(x, -1, -2) @ a
    s = xta + np.swapaxes(xta, -1, -2)
    s *= 0.5
    out = np.matmul(x, s, out=out)
    return np.subtract(a, out, out=out)


def _chunked(fn, x, a):
    """Apply ``fn(x, a, out=...)`` to chunks of equally shaped numpy stacks."""
    n, p = x.shape[-2:]
    out = np.empty(a.shape, dtype=np.result_type(x, a))
    xs, as_, outs = (np.reshape(v, (-1, n, p)) for v in (x, a, out))
    step = max(1, tuning.STIEFEL_BLOCK_BYTES // (n * p * out.itemsize))
    for i in range(0, xs.shape[0], step):
        fn(xs[i : i + step], as_[i : i + step], out=outs[i : i + step])
    return out


def stiefel_ehess_to_rhess(x: Array, g: Array, h: Array, u: Array) -> Array:
    r"""Riemannian Hessian of the embedded metric from the Euclidean gradient and Hessian.

    .. math::
        \operatorname{Hess} f(X)[U] = P_{T_X}\big(\nabla^2 \bar f(X)[U]
        - U\,\mathrm{sym}(X^\top \nabla \bar f(X))\big),\qquad
        \mathrm{sym}(A) = \tfrac12(A + A^\top)

    (Boumal 2023, Sec. 7.3; Absil, Mahony & Trumpf 2013): the projected Euclidean Hessian plus
    the Weingarten map :math:`\mathrm{W}_X(U, N) = -P_{T_X}(U\,\mathrm{sym}(X^\top N))` of the
    normal part N of the gradient (the tangent part drops out: :math:`X^\top \xi` is skew for
    tangent :math:`\xi`). :math:`O(np^2)`.
    """
    ops = ops_for(x, g, h, u)
    xtg = ops.mT(x) @ g
    return stiefel_to_tangent(x, h - u @ (0.5 * (xtg + ops.mT(xtg))))


def stiefel_exp(x: Array, u: Array) -> Array:
    r"""Exact exponential map of the embedded metric (Edelman, Arias, Smith 1998, eq. 2.45).

    .. math::
        \mathrm{Exp}_X(U) = [X,\ U]\ \exp\!\begin{pmatrix} A & -S \\ I & A \end{pmatrix}
        \begin{pmatrix} \exp(-A) \\ 0 \end{pmatrix},\quad A = X^\top U,\ S = U^\top U.

    Cost: one 2p x 2p and one p x p matrix exponential plus two n x p by p x p products (the
    p x p factors are multiplied first).
    """
    ops = ops_for(x, u)
    p = x.shape[-1]
    a = ops.mT(x) @ u
    s = ops.mT(u) @ u
    a, s = _broadcast_pair(ops, a, s)
    eye = ops.broadcast_to(ops.eye(p, a), a.shape)
    top = ops.concatenate([a, -s], axis=-1)
    bottom = ops.concatenate([eye, a], axis=-1)
    e = ops.expm(ops.concatenate([top, bottom], axis=-2))
    f = ops.expm(-a)
    if type(e) is np.ndarray:
        out = x @ (e[..., :p, :p] @ f)
        out += u @ (e[..., p:, :p] @ f)
        return out
    return x @ (e[..., :p, :p] @ f) + u @ (e[..., p:, :p] @ f)


def qr_retraction(x: Array, u: Array) -> Array:
    r"""QR retraction :math:`\mathrm{qf}(X + U)` (Q factor with positive diagonal of R).

    For tangent U, :math:`A = X + U` has :math:`A^\top A = I + U^\top U`, whose eigenvalues are
    at least 1, so the Cholesky-QR :math:`R = \mathrm{chol}(A^\top A)^\top`, :math:`Q = A
    R^{-1}` is as accurate as Householder QR here and several times faster (two n x p by p x p
    products). R has a positive diagonal, so Q is exactly :math:`\mathrm{qf}(A)`. Householder
    QR is the fallback if the Cholesky factorisation fails (U far from tangent). torch at the
    check levels ``"deferred"`` and ``"off"`` takes Householder QR alone: no branch on the
    factorisation's failure, no synchronisation (and, in torch, no slower than Cholesky-QR).
    """
    ops = ops_for(x, u)
    a = x + u
    if ops.is_torch and level_of(a) != "eager":
        return qr_positive(a)
    try:
        lower = ops.cholesky(ops.mT(a) @ a)
    except Exception:  # not positive definite: rank-deficient A
        return qr_positive(a)
    return ops.solve_triangular_upper(ops.mT(lower), a, left=False)


#: Iterations of :func:`stiefel_log` at the check levels ``"deferred"`` and ``"off"`` (at most
#: ``max_iter``), where no residual is read to stop. Anderson acceleration without restarts
#: reaches the tolerance 1e3 eps in at most 11 iterations on the conformance kit's logs (random
#: points of St(n, p) for (n, p) up to (20, 5), distances up to 1: 270 batches of 8), 18 up to
#: a distance of 1.5 and 33 up to pi/2, the solver's documented range (the adaptive loop takes
#: up to 19 below 1.5, and fails on some pairs near pi/2 that these iterations solve).
FIXED_LOG_ITERATIONS = 40


def _broadcast_pair(ops, a, b):
    if a.shape == b.shape:
        return a, b
    shape = np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
    return ops.broadcast_to(a, shape), ops.broadcast_to(b, shape)


def stiefel_log(
    x: Array, y: Array, *, tol: float | None = None, max_iter: int = 200, memory: int = 5
) -> Array:
    r"""Logarithm of the embedded metric by an Anderson-accelerated fixed-point iteration.

    Solves :math:`\mathrm{Exp}_X(\xi) = Y` for :math:`\xi \in T_X\mathrm{St}`. The plain
    iteration is

    .. math::
        \xi_0 = P_{T_X}(Y - X),\qquad
        \xi_{k+1} = \xi_k + P_{T_X}\big(Y - \mathrm{Exp}_X(\xi_k)\big).

    Because the orthographic retraction agrees with Exp to second order,
    :math:`P_{T_X}(\mathrm{Exp}_X(\xi) - X) = \xi + O(\|\xi\|^3)`: the map is a contraction
    with rate :math:`O(\|\xi\|^2)` near X. Anderson acceleration (type II, Walker and Ni 2011)
    with ``memory`` past residuals, restarted whenever a residual grows, cuts the iteration count
    several-fold at distances near 1. There is no closed form (Zimmermann and Hueper 2022 survey
    the iterative methods).

    The fixed point only says that :math:`Y - \mathrm{Exp}_X(\xi)` is normal at X; far apart a
    wrong :math:`\xi` can satisfy that. So the full residual :math:`\|\mathrm{Exp}_X(\xi) -
    Y\|_F` is verified at the end and a :class:`~riemfl.errors.ConvergenceError` is raised rather
    than a wrong answer returned. In practice the solver converges for geodesic distances up to
    about :math:`\pi/2`.

    Inputs in float32 (or lower) are iterated in float64 (the small Anderson least-squares
    problems are fragile in single precision) and the result is returned in the input's dtype.

    At the check levels ``"deferred"`` and ``"off"`` (:mod:`riemfl.check_levels`) no residual
    is read: Anderson acceleration runs from the second step, without restarts, for
    ``min(max_iter, FIXED_LOG_ITERATIONS)`` iterations, and the two verdicts are deferred: the
    largest residual above ``100 * tol`` (the stalling bound of the adaptive loop) and the miss
    of the verification. The torch derivative's adjoint solve has a fixed size too
    (:func:`~riemfl.manifolds.implicit_log.fixed_gmres`).

    Parameters
    ----------
    tol : float, optional
        Stop when the largest residual :math:`\|P_{T_X}(Y - \mathrm{Exp}_X(\xi))\|_F` over the
        batch is below ``tol`` (default ``1e3 * eps`` of the dtype), or when it has stopped
        shrinking for three iterations while below ``100 * tol`` (the rounding floor of slightly
        perturbed inputs).
    max_iter : int
        Iteration limit; :class:`~riemfl.errors.ConvergenceError` is raised when it is reached.
    memory : int
        Number of past residuals Anderson acceleration mixes (0: the plain iteration).
    """
    ops = ops_for(x, y)
    eps = ops.eps(x)
    if eps > 1e-10:  # float32 and lower: iterate in float64, return in the input's dtype
        x64, y64 = _float64(x), _float64(y)
        xi = stiefel_log(
            x64, y64, tol=10 * eps if tol is None else tol, max_iter=max_iter, memory=memory
        )
        return xi.to(x.dtype) if ops.is_torch else xi.astype(x.dtype)
    tol = 1e3 * eps if tol is None else tol
    if ops.is_torch and _wants_gradient(x, y):
        from .implicit_log import implicit_log  # imports torch

        return implicit_log(
            lambda xa, ya: _anderson_log(ops, xa, ya, tol, max_iter, memory),
            _embedded_fixed_point,
            x,
            y,
            tol,
            max_iter,
            _adjoint_failed,
        )
    return _anderson_log(ops, x, y, tol, max_iter, memory)


def _wants_gradient(x, y) -> bool:
    import torch

    return torch.is_grad_enabled() and (x.requires_grad or y.requires_grad)


def _embedded_fixed_point(x, y, xi):
    r"""The map whose fixed point the log is: :math:`P_{T_X}(\xi + Y - \mathrm{Exp}_X(\xi))`."""
    return stiefel_to_tangent(x, xi + y - stiefel_exp(x, xi))


def _adjoint_failed(what: str) -> ConvergenceError:
    return ConvergenceError(f"Stiefel log: {what}; the points are probably too far apart")


def _anderson_log(ops, x, y, tol, max_iter, memory):
    """The iteration of :func:`stiefel_log` (float64 or wider inputs): adaptive at the check
    level ``"eager"``, :func:`_fixed_anderson_log` at the others."""
    if level_of(x) != "eager":
        iterations = min(max_iter, FIXED_LOG_ITERATIONS)
        return _fixed_anderson_log(ops, x, y, tol, iterations, memory)
    shape = tuple(np.broadcast_shapes(tuple(x.shape), tuple(y.shape)))
    flat = shape[:-2] + (shape[-2] * shape[-1], 1)

    def largest(a):
        return ops.to_float(_residuals(ops, a))

    xi = stiefel_to_tangent(x, y - x) + ops.zeros_like(y)
    gap = y - stiefel_exp(x, xi)
    f = stiefel_to_tangent(x, gap)
    xs, fs = [], []
    accelerate = False
    step, best, stalled = largest(f), math.inf, 0
    for _ in range(max_iter):
        if step <= tol or (stalled >= 3 and step <= 100 * tol):
            return _verified_log(ops, xi, gap, tol, step)
        if not math.isfinite(step):
            break
        xs.append(ops.reshape(xi, flat))
        fs.append(ops.reshape(f, flat))
        xs, fs = xs[-(memory + 1) :], fs[-(memory + 1) :]
        nxt = xi + f
        if accelerate and len(fs) > 1:
            nxt = _anderson_step(ops, nxt, xs, fs, shape)
        xi = stiefel_to_tangent(x, nxt)
        gap = y - stiefel_exp(x, xi)
        f = stiefel_to_tangent(x, gap)
        previous, step = step, largest(f)
        # plain steps contract at a rate O(|xi|^2): accelerate only where they are slow
        accelerate = accelerate or (memory > 0 and step > 0.25 * previous)
        if step > previous:  # an accelerated step overshot: restart the history
            xs, fs = [], []
        stalled = stalled + 1 if step >= 0.5 * best else 0
        best = min(best, step)
    raise ConvergenceError(_not_converged_message(max_iter, step, tol))


def _fixed_anderson_log(ops, x, y, tol, iterations, memory):
    """``iterations`` steps of the iteration of :func:`stiefel_log`, Anderson-accelerated from
    the second on and never restarted, with its two verdicts deferred (no read)."""
    shape = tuple(np.broadcast_shapes(tuple(x.shape), tuple(y.shape)))
    flat = shape[:-2] + (shape[-2] * shape[-1], 1)
    xi = stiefel_to_tangent(x, y - x) + ops.zeros_like(y)
    gap = y - stiefel_exp(x, xi)
    f = stiefel_to_tangent(x, gap)
    xs, fs = [], []
    for _ in range(iterations):
        xs.append(ops.reshape(xi, flat))
        fs.append(ops.reshape(f, flat))
        xs, fs = xs[-(memory + 1) :], fs[-(memory + 1) :]
        nxt = xi + f
        if len(fs) > 1:
            nxt = _anderson_step(ops, nxt, xs, fs, shape, eager=False)
        xi = stiefel_to_tangent(x, nxt)
        gap = y - stiefel_exp(x, xi)
        f = stiefel_to_tangent(x, gap)
    step = ops.amax(_residuals(ops, f))
    # the adaptive loop accepts a residual that stalls below 100 tol (the rounding floor of
    # slightly perturbed inputs); NaN fails
    refuse(~(step <= 100 * tol), ConvergenceError, _not_converged_message, iterations, step, tol)
    miss = ops.amax(_residuals(ops, gap))
    refuse(miss > ops.maximum(10 * step, math.sqrt(tol)), ConvergenceError, _missed_message, miss)
    return xi


def _residuals(ops, a):
    """The Frobenius norms of a stack of matrices."""
    return ops.sqrt(ops.sum(a * a, axis=(-2, -1)))


def _not_converged_message(iterations: int, step, tol: float) -> str:
    return (
        f"Stiefel log: the fixed-point iteration did not converge in {iterations} iterations "
        f"(last residual {float(step):.3e} > tol {tol:.1e}); the points are probably too far "
        f"apart (it converges for geodesic distances below about pi/2)"
    )


def _missed_message(miss) -> str:
    return (
        f"Stiefel log: the iteration reached a tangent vector whose exponential misses Y by "
        f"{float(miss):.3e} (a spurious fixed point: Y - Exp_X(xi) is normal at X); the points "
        f"are too far apart for the solver (it converges below a distance of about pi/2)"
    )


def _float64(a):
    if is_torch(a):
        import torch

        return a.to(dtype=torch.float64)
    return a.astype(np.float64)


def _anderson_step(ops, nxt, xs, fs, shape, eager=True):
    """Type-II Anderson mixing of the last iterates; the plain step if the history is singular
    (of the whole batch where ``eager`` or in numpy; in torch at the other check levels, of the
    elements whose mixing weights are not finite: ``solve_ex`` neither raises nor
    synchronises)."""
    d_f = ops.concatenate([b - a for a, b in zip(fs[:-1], fs[1:], strict=True)], axis=-1)
    d_x = ops.concatenate([b - a for a, b in zip(xs[:-1], xs[1:], strict=True)], axis=-1)
    gram = ops.mT(d_f) @ d_f
    eye = ops.eye(gram.shape[-1], gram)
    reg = 1e-10 * ops.amax(ops.diagonal(gram), axis=-1, keepdims=True)[..., None] + 1e-300
    if eager or not ops.is_torch:
        try:
            gamma = ops.solve(gram + reg * eye, ops.mT(d_f) @ fs[-1])
        except Exception:
            return nxt
    else:
        torch = ops.t
        gamma = torch.linalg.solve_ex(gram + reg * eye, ops.mT(d_f) @ fs[-1])[0]
        finite = torch.isfinite(gamma).all(dim=-2, keepdim=True).all(dim=-1, keepdim=True)
        gamma = torch.where(finite, gamma, torch.zeros_like(gamma))
    return nxt - ops.reshape((d_x + d_f) @ gamma, shape)


def _verified_log(ops, xi, gap, tol, step):
    """Return xi if Exp_X(xi) really is Y (``gap = Y - Exp_X(xi)``), else raise."""
    miss = ops.to_float(_residuals(ops, gap))
    if miss > max(math.sqrt(tol), 10 * step):
        raise ConvergenceError(_missed_message(miss))
    return xi


def inverse_polar_retraction(x: Array, y: Array) -> Array:
    r"""Inverse of the polar retraction :math:`R_X(\xi) = (X + \xi)(I + \xi^\top\xi)^{-1/2}`.

    :math:`X + \xi = Y S` with S symmetric; tangency of :math:`\xi` gives the Lyapunov equation
    :math:`X^\top Y S + S Y^\top X = 2I`, then :math:`\xi = Y S - X`.
    """
    ops = ops_for(x, y)
    m = ops.mT(x) @ y
    s = solve_lyapunov(m, 2.0 * ops.eye(x.shape[-1], m))
    return y @ s - x


def inverse_qr_retraction(x: Array, y: Array) -> Array:
    r"""Inverse of the QR retraction :math:`R_X(\xi) = \mathrm{qf}(X + \xi)`.

    Kaneko, Fiori and Tanaka (2013), as used by Li and Ma (2022): :math:`X + \xi = Y R` with R
    upper triangular, and tangency gives :math:`X^\top Y R + R^\top Y^\top X = 2I`; then
    :math:`\xi = Y R - X`.
    """
    r = solve_inverse_qr(ops_for(x, y).mT(x) @ y)
    return y @ r - x


#: the metrics of :class:`Stiefel`, with their default retractions
METRICS = {"embedded": "polar", "canonical": "cayley"}
#: the retractions of :class:`Stiefel` (each with its closed-form inverse)
RETRACTIONS = ("polar", "qr", "cayley")

# --------------------------------------------------------------------------- the variants
# Stiefel binds one metric object and one retraction object in __init__; its private maps
# delegate to them, so a call tests no string and a new variant is one more class here. Each
# object's ``unsupported`` names the maps it lacks, with the reason supports() gives.


class _EmbeddedMetric:
    r"""The maps of the embedded metric :math:`\langle U, V\rangle_X = \mathrm{tr}(U^\top V)`."""

    unsupported = {
        "parallel_transport": (
            "Stiefel with the embedded metric has no closed-form parallel transport (it solves "
            "a linear ODE, Edelman et al. 1998); use transport() (projection) instead"
        )
    }

    @staticmethod
    def inner(x, u, v):
        return ops_for(u, v).sum(u * v, axis=(-2, -1))

    egrad_to_rgrad = staticmethod(stiefel_to_tangent)
    ehess_to_rhess = staticmethod(stiefel_ehess_to_rhess)
    exp = staticmethod(stiefel_exp)
    log = staticmethod(stiefel_log)

    @staticmethod
    def injectivity_radius(n: int, p: int) -> float:
        return math.pi


class _CanonicalMetric:
    """The maps of the canonical metric (:mod:`riemfl.manifolds.stiefel_canonical`)."""

    unsupported = {
        "parallel_transport": (
            "Stiefel with the canonical metric has no closed-form parallel transport (along a "
            "geodesic it solves a linear ODE, Edelman et al. 1998); use transport() "
            "(projection) instead"
        )
    }
    inner = staticmethod(canonical_inner)
    egrad_to_rgrad = staticmethod(canonical_egrad_to_rgrad)
    ehess_to_rhess = staticmethod(canonical_ehess_to_rhess)
    exp = staticmethod(canonical_exp)
    log = staticmethod(canonical_log)

    @staticmethod
    def injectivity_radius(n: int, p: int) -> float:
        if p == 1 or n == p:  # the sphere's metric, or half the embedded one of O(p)
            return math.pi
        return math.sqrt(0.8) * math.pi


class _WithoutTransport:
    """A retraction without a differentiated-retraction transport in riemfl."""

    kind = ""

    def __init__(self, name: str) -> None:
        self.unsupported = {
            "retraction_transport": (
                f"Stiefel's {self.kind} retraction has no differentiated-retraction transport "
                "in riemfl; the Cayley retraction has one (retraction='cayley')"
            )
        }

    def transport(self, x, u, v):
        raise NotImplementedError(self.unsupported["retraction_transport"])


class _PolarRetraction(_WithoutTransport):
    r""":math:`R_X(U) = P_M(X + U)` and its inverse."""

    kind = "polar"

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.what = f"matrix X + U of {name}.retract"

    def retract(self, x, u):
        return polar(x + u, what=self.what)

    inverse_retract = staticmethod(inverse_polar_retraction)


class _QRRetraction(_WithoutTransport):
    r""":math:`R_X(U) = \mathrm{qf}(X + U)` and its inverse."""

    kind = "qr"
    retract = staticmethod(qr_retraction)
    inverse_retract = staticmethod(inverse_qr_retraction)


class _CayleyRetraction:
    """The Cayley retraction, its inverse and its differential."""

    unsupported: dict[str, str] = {}

    def __init__(self, name: str) -> None:
        pass

    retract = staticmethod(cayley_retraction)
    inverse_retract = staticmethod(inverse_cayley_retraction)
    transport = staticmethod(cayley_transport)


#: the maps of each metric and of each retraction of :class:`Stiefel`
_METRIC_MAPS = {"embedded": _EmbeddedMetric, "canonical": _CanonicalMetric}
_RETRACTION_MAPS = {"polar": _PolarRetraction, "qr": _QRRetraction, "cayley": _CayleyRetraction}


class Stiefel(Manifold):
    r"""Stiefel manifold :math:`\mathrm{St}(n, p)` of n x p matrices with orthonormal columns.

    Two metrics (``metric=``) on the same tangent spaces :math:`T_X = \{U : X^\top U + U^\top X
    = 0\}`:

    * ``"embedded"`` (default): :math:`\langle U, V\rangle_X = \mathrm{tr}(U^\top V)`;
    * ``"canonical"``: :math:`\langle U, V\rangle_X = \mathrm{tr}(U^\top(I - \tfrac12 XX^\top)V)`
      (Edelman et al. 1998, Sec. 2.4), the maps of :mod:`riemfl.manifolds.stiefel_canonical`.

    Shared by both metrics (properties of the embedded set):

    * ``project``: polar factor :math:`P_M(A) = A(A^\top A)^{-1/2} = UV^\top` (thin SVD
      :math:`A = U\Sigma V^\top`); unique iff rank A = p, else ``ProjectionError``.
    * ``to_tangent``: :math:`A - X\,\mathrm{sym}(X^\top A)`, the orthogonal projection in the
      Frobenius inner product and also in :math:`\mathrm{tr}(A^\top(I - \tfrac12 XX^\top)B)`,
      the canonical metric extended to the ambient space: both make the normal space
      :math:`\{XS : S = S^\top\}`.
    * ``retract``: ``"polar"`` (:math:`P_M(X + \xi)`), ``"qr"`` (:math:`\mathrm{qf}(X+\xi)`) or
      ``"cayley"`` (:func:`~riemfl.manifolds.stiefel_canonical.cayley_retraction`), the default
      being the metric's second-order one: polar for the embedded metric, Cayley for the
      canonical. QR is first order for both, polar first order for the canonical metric and
      Cayley first order for the embedded one. ``inverse_retract`` inverts whichever is chosen
      (:func:`inverse_polar_retraction`, :func:`inverse_qr_retraction`,
      :func:`~riemfl.manifolds.stiefel_canonical.inverse_cayley_retraction`).
    * ``transport``: projection onto :math:`T_Y` (a vector transport for both metrics); exact
      parallel transport has no closed form for either metric (it solves a linear ODE), so
      ``parallel_transport`` raises.
    * ``retraction_transport``: for ``retraction="cayley"``, the differential of the Cayley
      retraction, :math:`\mathrm{D}R_X(U)[V]`
      (:func:`~riemfl.manifolds.stiefel_canonical.cayley_transport`), the transport whose
      pairing with the gradient at :math:`R_X(tU)` is the derivative of :math:`f(R_X(tU))`
      (what a line search needs; the projection transport is not); the polar and QR
      retractions do not provide it.

    Per metric: ``inner``/``norm``; ``egrad_to_rgrad`` (embedded: ``to_tangent``; canonical
    :math:`G - XG^\top X`); ``exp``, exact (:func:`stiefel_exp`,
    :func:`~riemfl.manifolds.stiefel_canonical.canonical_exp`); ``log``, iterative
    (:func:`stiefel_log`; Zimmermann's algorithm,
    :func:`~riemfl.manifolds.stiefel_canonical.canonical_log`); ``dist`` = norm of log;
    ``ehess_to_rhess`` (:func:`stiefel_ehess_to_rhess`,
    :func:`~riemfl.manifolds.stiefel_canonical.canonical_ehess_to_rhess`).

    Sizes: ``n`` and ``p`` are the ambient matrix shape (points are n x p matrices); ``dim`` is
    :math:`np - p(p+1)/2`.

    Constants: the reach :math:`\hat\gamma = 1` (of the set, for both metrics): if
    :math:`\|A - X\|_F < 1` for some X on St then :math:`\sigma_{\min}(A) > 0`, so the polar
    factor is unique, and the bound is attained by zeroing a column of X (Zhang et al. 2024
    write :math:`2\gamma = 1`). Ambient diameter :math:`2\sqrt p` (attained at X and -X; the
    library's ``diameter`` is the ambient one for every metric). Injectivity radius: embedded
    :math:`\pi` (Zimmermann and Stoye 2024; p = 1 is the sphere); canonical
    :math:`\sqrt{4/5}\,\pi \approx 0.894\pi`, a lower bound (Rentmeesters 2013: Klingenberg's
    estimate with the sectional curvature bound 5/4; the exact value is conjectured to be about
    :math:`0.914\pi`, Absil and Mataigne 2024), and :math:`\pi` where the canonical metric is
    the sphere's (p = 1) or half the embedded one of O(p) (n = p).

    Parameters
    ----------
    n, p : int
        Matrix shape, ``n >= p >= 1``.
    retraction : {"polar", "qr", "cayley"}, optional
        The default retraction (default: the metric's second-order one, ``"polar"`` for the
        embedded metric and ``"cayley"`` for the canonical one).
    metric : {"embedded", "canonical"}
        The Riemannian metric.
    log_tol, log_max_iter
        Tolerance and iteration limit of the logarithm's solver.
    """

    def curvature_bound(self) -> tuple[float | None, str]:
        source = "Zimmermann and Stoye 2024b, arXiv:2403.01879"
        if self.metric == "embedded":
            return 1.0, f"sectional curvature <= 1 (embedded metric; {source})"
        return 1.25, f"sectional curvature <= 5/4 (canonical metric; {source})"

    def __init__(
        self,
        n: int,
        p: int,
        retraction: str | None = None,
        *,
        metric: str = "embedded",
        log_tol: float | None = None,
        log_max_iter: int = 200,
    ) -> None:
        n = integer(n, "Stiefel(n, p): n", minimum=1)
        p = integer(p, "Stiefel(n, p): p (p <= n)", minimum=1, maximum=n)
        if metric not in METRICS:
            raise ParameterError(
                f"Stiefel metric must be one of {', '.join(repr(m) for m in METRICS)}, "
                f"got {metric!r}"
            )
        default = METRICS[metric]
        retraction = default if retraction is None else retraction
        if retraction not in RETRACTIONS:
            raise ParameterError(
                f"Stiefel retraction must be one of {', '.join(repr(r) for r in RETRACTIONS)}, "
                f"got {retraction!r}"
            )
        self.n, self.p = int(n), int(p)
        self.metric = metric
        self.retraction = retraction
        self.log_tol = log_tol
        self.log_max_iter = int(log_max_iter)
        self.point_shape = (self.n, self.p)
        suffix = "" if metric == "embedded" else f", metric='{metric}'"
        suffix += "" if retraction == default else f", retraction='{retraction}'"
        name = f"Stiefel({self.n}, {self.p}{suffix})"
        # the variants, bound once: the private maps below delegate to them
        self._metric_maps = _METRIC_MAPS[metric]()
        self._retraction_maps = _RETRACTION_MAPS[retraction](name)
        self.unsupported = {**self._metric_maps.unsupported, **self._retraction_maps.unsupported}
        self.name = name

    @property
    def dim(self) -> int:
        return self.n * self.p - self.p * (self.p + 1) // 2

    reach = 1.0

    @property
    def injectivity_radius(self) -> float:
        return self._metric_maps.injectivity_radius(self.n, self.p)

    # the cheap maps (see Manifold._result_checked): to_tangent and the canonical gradient are
    # polynomials in X and A; the retractions reach a guarded polar factor, a Cholesky factor
    # whose failure falls back on Householder QR, a triangular solve or (Cayley) a dense solve,
    # each of which returns NaN or raises on non-finite input; x is not read by the embedded
    # metric nor by transport (the canonical metric reads it, and is checked first all the
    # same). exp, log and inverse_retract (matrix exponentials, iterations, dense solves) check
    # their arguments first
    _result_checked = result_checked(
        "to_tangent", "egrad_to_rgrad", "retract", inner=(0,), norm=(0,), transport=(0,)
    )

    @property
    def diameter(self) -> float:
        return 2.0 * math.sqrt(self.p)

    def _project(self, a):
        return polar(a, what=f"ambient matrix given to {self.name}.project")

    _to_tangent = staticmethod(stiefel_to_tangent)

    def _egrad_to_rgrad(self, x, g):
        return self._metric_maps.egrad_to_rgrad(x, g)

    def _inner(self, x, u, v):
        return self._metric_maps.inner(x, u, v)

    def _retract(self, x, u):
        return self._retraction_maps.retract(x, u)

    def _retraction_transport(self, x, u, v):
        return self._retraction_maps.transport(x, u, v)

    def _inverse_retract(self, x, y):
        return self._retraction_maps.inverse_retract(x, y)

    def _exp(self, x, u):
        return self._metric_maps.exp(x, u)

    def _ehess_to_rhess(self, x, g, h, u):
        return self._metric_maps.ehess_to_rhess(x, g, h, u)

    def _log(self, x, y):
        return self._metric_maps.log(x, y, tol=self.log_tol, max_iter=self.log_max_iter)

    def _random_point(self, batch_shape, rng):
        return qr_positive(rng.standard_normal(batch_shape + self.point_shape))

    def _point_violation(self, x):
        ops = ops_for(x)
        d = ops.mT(x) @ x - ops.eye(self.p, x)
        return "X^T X = I", ops.to_float(ops.sqrt(ops.sum(d * d, axis=(-2, -1))))

    def _tangent_violation(self, x, u):
        ops = ops_for(x, u)
        xtu = ops.mT(x) @ u
        d = xtu + ops.mT(xtu)
        return "X^T U + U^T X = 0", ops.to_float(ops.sqrt(ops.sum(d * d, axis=(-2, -1))))

r"""The point of a Bezier curve closest to a query: three solvers.

For a query :math:`\theta` the closest parameter minimises :math:`f(t) = \|c(t) - \theta\|^2`
over [0, 1] (or over the real line for the extended curve). Which solver runs depends on the
curve:

* a Euclidean quadratic: the stationary points are the real roots of a cubic, found in closed
  form by :func:`real_polynomial_roots`, with everything computed from inner products of the
  data (:func:`quadratic_closest`);
* a Euclidean curve of another degree n: the real roots of the degree-(2n - 1) polynomial
  :math:`f'`, the eigenvalues of its companion matrix, batched over the queries
  (:func:`polynomial_closest`);
* a curve on a manifold: safeguarded Newton iterations from several starting points
  (:func:`newton_closest`).

:func:`closest_point` dispatches among them; :func:`closest_parameter` adds the implicit
derivative for torch. :class:`~riemfl.manifolds.bezier.BezierCurve`'s methods of the same names
call these.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..backend import Array, is_torch, ops_for, to_like, to_numpy
from ..errors import ShapeError
from .bezier_eval import bernstein_weights, power_basis_matrix, scalar_bernstein_weights

if TYPE_CHECKING:
    from .bezier import BezierCurve

__all__ = [
    "closest_parameter",
    "closest_point",
    "horner_rows",
    "implicit_closest_step",
    "newton_closest",
    "polynomial_closest",
    "quadratic_closest",
    "real_polynomial_roots",
]


def closest_point(
    curve: BezierCurve, a: Array, extended: bool = False, starts: int = 9
) -> tuple[np.ndarray, Array]:
    """The parameters and distances of :meth:`BezierCurve.closest_point`: the quadratic's cubic
    (:func:`quadratic_closest`), the companion matrix of any other Euclidean degree
    (:func:`polynomial_closest`) or Newton on a manifold base (:func:`newton_closest`)."""
    ops = ops_for(curve.control_points)
    a = a if hasattr(a, "shape") else np.asarray(a)
    a = to_like(a, curve.control_points) if ops.is_torch != is_torch(a) else a
    ps = curve.point_shape
    if tuple(a.shape[len(a.shape) - len(ps) :]) != ps:
        raise ShapeError(
            f"BezierCurve.closest_point: a has shape {tuple(a.shape)}; expected (..., "
            f"{', '.join(map(str, ps))})"
        )
    batch = tuple(a.shape[: len(a.shape) - len(ps)])
    if curve.euclidean and curve.degree == 2:
        thetas = ops.reshape(a, (-1, math.prod(ps)))
        cp_view, theta_view = _numpy_views(curve.control_points, thetas)
        if cp_view is not None:  # CPU tensors, no graph: the same memory through numpy
            t, dist = quadratic_closest(curve, theta_view, extended, cp_view)
            return t.reshape(batch), to_like(dist, a).reshape(batch)
        t, dist = quadratic_closest(curve, thetas, extended)
        return t.reshape(batch), ops.reshape(dist, batch)
    flat = np.reshape(to_numpy(a, np.float64), (-1, math.prod(ps)))
    if curve.euclidean:
        t = polynomial_closest(curve, flat, extended)
    else:
        t = np.array([newton_closest(curve, row, extended, starts) for row in flat])
    t = t.reshape(batch)
    diff = curve(t) - a
    axes = tuple(range(-len(ps), 0))
    return t, ops_for(diff).sqrt(ops_for(diff).sum(diff * diff, axis=axes))


def closest_parameter(curve: BezierCurve, a: Array, extended: bool = False) -> Array:
    r""":math:`t^*(a)` of :meth:`BezierCurve.closest_parameter`: :func:`closest_point`, then (torch,
    gradient wanted) one Newton step on :math:`g(t) = \langle c'(t), c(t) - a\rangle` at the
    solution, :math:`t - g/g'`, whose derivative is the implicit one :math:`dt^*/da = -\partial_a
    g / g'`."""
    t_np, _ = closest_point(curve, to_numpy(a, np.float64), extended)
    local = curve.like(a)
    return implicit_closest_step(local, a, local._t(t_np), extended)


def implicit_closest_step(curve: BezierCurve, a: Array, t: Array, extended: bool) -> Array:
    r"""``t`` (the closest parameters of the queries ``a``, found without a gradient), with one
    Newton step on :math:`g(t) = \langle c'(t), c(t) - a\rangle` where ``a`` is a torch tensor
    that requires a gradient: :math:`t - g/g'` has the value t at a stationary point and the
    derivative :math:`dt^*/da = -\partial_a g / g'` of the implicit function theorem (applied
    where t is interior unless ``extended``: at a clipped end point the derivative is 0).
    ``curve`` holds control points of a's array type."""
    if is_torch(a) and a.requires_grad:
        ops = ops_for(a)
        axes = tuple(range(-len(curve.point_shape), 0))
        c, v, acc = curve(t), curve.velocity(t), curve.acceleration(t)
        g = ops.sum(v * (c - a), axis=axes)
        h = ops.sum(v * v, axis=axes) + ops.sum(acc * (c - a), axis=axes)
        step = t - g / h
        if not extended:
            interior = (t > 0) & (t < 1)
            step = ops.where(interior, step, t)
        t = step
    return t


def quadratic_closest(
    curve: BezierCurve, thetas: Array, extended: bool, control_points: Array | None = None
) -> tuple[np.ndarray, Array]:
    r"""Closest parameters and distances of a quadratic for the rows of ``thetas`` (m, D).

    Everything comes from inner products of D-vectors, computed in the data's own backend and
    dtype by :func:`_gram_products`, without forming :math:`u = B - A`, :math:`v = A - 2B +
    C` or :math:`d = A - \theta` (each would be another pass over D values): the Gram matrix
    :math:`G = P P^\top` of the control points, the products :math:`P\theta` and
    :math:`\theta^\top\theta`. With the fixed coefficient vectors :math:`\alpha = (-1, 1,
    0)` and :math:`\beta = (1, -2, 1)` (:math:`u = \alpha^\top P`, :math:`v = \beta^\top
    P`),

    .. math::
        u\cdot u = \alpha^\top G\alpha,\quad u\cdot v = \alpha^\top G\beta,\quad
        v\cdot v = \beta^\top G\beta,\quad d\cdot u = G_0\alpha - \alpha^\top P\theta,
        \quad d\cdot v = G_0\beta - \beta^\top P\theta,

    and the stationary points of :math:`\|c(t) - \theta\|^2` are the real roots of
    :math:`(v\cdot v)t^3 + 3(u\cdot v)t^2 + (2u\cdot u + d\cdot v)t + d\cdot u`; the cubic
    and the choice among its roots are small float64 algebra. The distance is
    :math:`\sqrt{w^\top G w - 2 w^\top P\theta + \theta^\top\theta}`, recomputed
    explicitly from :math:`c(t) - \theta` where that difference of squares would cancel
    (below 1e-6 of :math:`\theta^\top\theta`). Differentiable in torch (the distance's
    derivative with respect to t vanishes at the optimum).
    """
    cp = curve.control_points if control_points is None else control_points
    ops = ops_for(thetas, cp)
    flat = ops.reshape(cp, (3, -1))
    gram_t, cross_t, norms_t = _gram_products(flat, thetas)
    gram, cross = to_numpy(gram_t, np.float64), to_numpy(cross_t, np.float64)
    alpha = np.array([-1.0, 1.0, 0.0])  # a = B - A
    beta = np.array([1.0, -2.0, 1.0])  # b = A - 2B + C
    bb, ab, aa = beta @ gram @ beta, alpha @ gram @ beta, alpha @ gram @ alpha
    db = gram[0] @ beta - beta @ cross  # (A - theta) . b
    da = gram[0] @ alpha - alpha @ cross  # (A - theta) . a
    gl = gram.tolist()
    ts = np.empty(thetas.shape[0])
    best_d2 = np.empty(thetas.shape[0])
    for k in range(thetas.shape[0]):
        coeffs = np.array([bb, 3 * ab, 2 * aa + db[k], da[k]])
        scale = np.max(np.abs(coeffs)) or 1.0
        lead = int(np.argmax(np.abs(coeffs) > 1e-13 * scale))
        cands = real_polynomial_roots(coeffs[lead:].tolist()) if lead < 3 else []
        if not extended:
            cands = [min(max(c, 0.0), 1.0) for c in cands] + [0.0, 1.0]
        ck = cross[:, k].tolist()
        best_d2[k] = np.inf
        for c in cands or [0.0]:  # |c(t) - theta|^2 - |theta|^2 = w.G.w - 2 w.(P theta)
            w = scalar_bernstein_weights(2, float(c))
            d2 = sum(w[i] * (sum(gl[i][j] * w[j] for j in range(3)) - 2 * ck[i]) for i in range(3))
            if d2 < best_d2[k]:
                ts[k], best_d2[k] = c, d2
    if ops.is_torch:
        return ts, _closest_distance_torch(ts, flat, thetas, gram_t, cross_t, norms_t)
    norms = norms_t.astype(np.float64)
    d2 = best_d2 + norms
    bad = d2 <= 1e-6 * norms
    if bad.any():  # cancellation: recompute those explicitly (one pass each, in place)
        weights = np.asarray(bernstein_weights(2, ts[bad]))
        for k, row in zip(np.flatnonzero(bad), weights, strict=True):
            diff = np.matmul(row.astype(flat.dtype), flat)
            diff -= thetas[k]
            d2[k] = float(np.dot(diff, diff))
    return ts, np.sqrt(np.maximum(d2, 0.0)).astype(thetas.dtype)


def _closest_distance_torch(ts, flat, thetas, gram_t, cross_t, norms_t):
    """Distances at the parameters ``ts`` in torch ops (differentiable in the data)."""
    ops = ops_for(thetas)
    weights = ops.asarray(np.asarray(bernstein_weights(2, ts)), thetas)  # (m, 3)
    quad = ops.sum((weights @ gram_t) * weights, axis=-1)
    lin = ops.sum(weights * ops.mT(cross_t), axis=-1)
    d2 = quad - 2 * lin + norms_t
    bad = d2 <= 1e-6 * norms_t
    if ops.any(bad):  # cancellation: recompute those explicitly
        import torch

        diff = torch.addmm(thetas, weights, flat, beta=-1.0)  # c(t_k) - theta_k, one pass
        if diff.shape[0] <= _GEMV_ROWS:
            exact = torch.stack([torch.dot(row, row) for row in diff])
        else:
            exact = ops.sum(diff * diff, axis=-1)
        d2 = ops.where(bad, exact, d2)
    return ops.sqrt(ops.maximum(d2, 0.0))


def polynomial_closest(curve: BezierCurve, thetas: np.ndarray, extended: bool) -> np.ndarray:
    r"""Global closest parameters of a Euclidean curve of any degree for the rows of
    ``thetas`` (m, D), all rows at once.

    With the power-basis coefficients :math:`a_j` (:func:`power_basis_matrix`) and
    :math:`e = P_0 - \theta`, the squared distance is the polynomial

    .. math::
        f(t) = \|c(t) - \theta\|^2 = \sum_{s=0}^{2n} t^s \sum_{j+l=s} H_{jl},
        \qquad H = \begin{pmatrix} e\cdot e & e\cdot a_l \\ a_j\cdot e & a_j\cdot a_l
        \end{pmatrix}_{j,l\ge1}

    (only the first row and column depend on the query; :math:`e` is formed explicitly, so
    nothing cancels however far :math:`\theta` is from the origin). The stationary points
    are the roots of :math:`f'`, of degree 2n - 1 (the trailing zero coefficients of a
    curve of lower true degree removed): the eigenvalues of its companion matrix, batched
    over the queries. The real ones (up to a relative imaginary part of 1e-6: rounding splits
    a double root into a close complex pair) and, on [0, 1], the endpoints are the
    candidates; each is clipped to the range, polished by guarded Newton steps on
    :math:`f'` to convergence and scored by f; the best is returned. Global for every
    degree, unlike a multi-start local search, and O(k^2) per query after one pass over
    the query (the quadratic has its own cheaper path)."""
    k = curve.degree + 1
    flat = np.reshape(to_numpy(curve.control_points, np.float64), (k, -1))
    coef = power_basis_matrix(curve.degree) @ flat
    norms = np.sqrt(np.einsum("ij,ij->i", coef[1:], coef[1:]))
    # the curve's true degree: drop power coefficients at the rounding level of the control
    # points (a degree-elevated curve, a segment at uniform speed, a single point)
    scale = float(np.sqrt(np.einsum("ij,ij->i", flat, flat)).max())
    top = k - 1
    while top > 0 and norms[top - 1] <= 64 * np.finfo(float).eps * scale:
        top -= 1
    m = thetas.shape[0]
    if top == 0:  # every point of the curve is the same: any parameter is closest
        return np.zeros(m)
    gram = coef[1 : top + 1] @ coef[1 : top + 1].T
    ts = np.empty(m)
    chunk = max(1, (1 << 22) // max(1, thetas.shape[1]))  # bound the (rows, D) temporary
    for lo in range(0, m, chunk):
        e = coef[0] - thetas[lo : lo + chunk]
        rows = e.shape[0]
        h = np.empty((rows, top + 1, top + 1))
        h[:, 0, 0] = np.einsum("ij,ij->i", e, e)
        h[:, 0, 1:] = e @ coef[1 : top + 1].T
        h[:, 1:, 0] = h[:, 0, 1:]
        h[:, 1:, 1:] = gram
        ts[lo : lo + rows] = _minimise_quadratic_form_polynomial(h, extended)
    return ts


def newton_closest(curve: BezierCurve, theta: np.ndarray, extended: bool, starts: int) -> float:
    r"""The closest parameter to the flat query ``theta`` on any base: safeguarded Newton steps on
    :math:`f(t) = \tfrac12\|c(t) - \theta\|^2`, :math:`t \leftarrow t - f'/f''` with
    :math:`f' = c'\cdot(c - \theta)`, :math:`f'' = c'\cdot c' + c''\cdot(c - \theta)` (a
    gradient step scaled by :math:`1/\|c'\|^2` where :math:`f'' \le 0`), kept in [0, 1] unless
    ``extended``, from ``starts`` equally spaced points (and the end points); the candidate
    nearest to ``theta`` wins. Local: used for manifold bases, where no polynomial describes
    the distance."""
    numpy_curve = (
        type(curve)(to_numpy(curve.control_points, np.float64), curve.manifold)
        if is_torch(curve.control_points)
        else curve
    )

    def parts(t):
        c = np.reshape(np.asarray(numpy_curve(t)), -1) - theta
        v = np.reshape(np.asarray(numpy_curve.velocity(t)), -1)
        acc = np.reshape(np.asarray(numpy_curve.acceleration(t)), -1)
        return c, v, acc

    lo, hi = (-np.inf, np.inf) if extended else (0.0, 1.0)
    best_t, best = 0.0, np.inf
    candidates = list(np.linspace(0.0, 1.0, starts)) + ([] if extended else [0.0, 1.0])
    for t in candidates:
        for _ in range(50):
            c, v, acc = parts(t)
            g, h = c @ v, v @ v + c @ acc
            step = g / h if h > 0 else g / max(v @ v, 1e-300)
            new = min(max(t - step, lo), hi)
            if abs(new - t) <= 1e-14 * max(1.0, abs(t)):
                t = new
                break
            t = new
        c = np.reshape(np.asarray(numpy_curve(t)), -1) - theta
        if c @ c < best:
            best_t, best = float(t), float(c @ c)
    return best_t


def real_polynomial_roots(coeffs: list[float]) -> list[float]:
    r"""Real roots of a real polynomial of degree <= 3 (coefficients, highest first; the leading
    one nonzero), in closed form, each polished by Newton steps on the polynomial itself.

    Degree 2: the cancellation-free pair :math:`q/a, c/q`, :math:`q = -\tfrac12(b +
    \operatorname{sign}(b)\sqrt{b^2 - 4ac})`. Degree 3: the real root of largest magnitude from
    the depressed cubic (Cardano when it has one real root, the trigonometric formula when
    three), polished, then deflation to a quadratic: *backward*, :math:`P(t) = (1 - t/r)(e_0 +
    e_1 t + e_2 t^2)` (:math:`e_0 = d`, :math:`e_1 = c + e_0/r`, :math:`e_2 = b + e_1/r`), when r
    is large (:math:`|r|^3 \ge |d/a|`), so the small roots of a nearly quadratic cubic stay
    accurate; *forward* (:math:`P(t) = (t - r)(a t^2 + \dots)`) when r is the small real root
    beside a complex pair. Each deflation is the stable one for its root. About 50 times cheaper
    than ``numpy.roots`` (a companion-matrix eigenvalue problem) for the one cubic of every
    closest-point query; agreement with it is tested.
    """
    degree = len(coeffs) - 1
    if degree <= 0:
        return []
    if degree == 1:
        return [-coeffs[1] / coeffs[0]]
    if degree == 2:
        return _quadratic_roots(*coeffs)
    a, b, c, d = coeffs

    def newton(t: float) -> float:
        for _ in range(3):
            f = ((a * t + b) * t + c) * t + d
            df = (3 * a * t + 2 * b) * t + c
            if df == 0 or not math.isfinite(f / df):
                break
            t -= f / df
        return t

    bn, cn, dn = b / a, c / a, d / a
    p = cn - bn * bn / 3
    q = 2 * bn**3 / 27 - bn * cn / 3 + dn
    delta = (q / 2) ** 2 + (p / 3) ** 3
    if delta > 0:
        u = -q / 2 - math.copysign(math.sqrt(delta), q)
        u = math.copysign(abs(u) ** (1 / 3), u)
        candidates = [u - p / (3 * u) - bn / 3 if u != 0 else -bn / 3]
    elif p == 0:
        candidates = [-bn / 3]
    else:
        r = 2 * math.sqrt(-p / 3)
        phi = math.acos(max(-1.0, min(1.0, 3 * q / (p * r)))) / 3
        candidates = [r * math.cos(phi - 2 * math.pi * k / 3) - bn / 3 for k in range(3)]
    root = newton(max(candidates, key=abs))
    if root == 0:
        return [0.0] + [newton(t) for t in _quadratic_roots(a, b, c) if t != 0]
    if abs(root) ** 3 >= abs(dn):  # a large root (|r|^3 >= |product of roots|): backward
        e0, e1 = d, c + d / root
        e2 = b + e1 / root
    else:  # the one real root is small beside a complex pair: forward deflation
        e2, e1 = a, b + a * root
        e0 = c + e1 * root
    rest = _quadratic_roots(e2, e1, e0) if e2 != 0 else ([-e0 / e1] if e1 != 0 else [])
    return [root] + [newton(t) for t in rest]


def _quadratic_roots(a: float, b: float, c: float) -> list[float]:
    disc = b * b - 4 * a * c
    if disc < 0:
        return []
    q = -0.5 * (b + math.copysign(math.sqrt(disc), b))
    return [q / a, c / q] if q != 0 else [0.0]


#: most Newton steps polishing the closest-point candidates (the loop stops as soon as none
#: moves). A root of f' a real part 1e-2 off is exact in four (quadratic convergence), but an
#: end point of [0, 1] is a candidate too and may start far from the stationary point its Newton
#: steps reach: left half-way, it can tie with that point in f to rounding and be ranked first
#: while not stationary (found by the thorough hypothesis profile: slope 3.7e-8 after 8 steps)
_POLISH_STEPS = 64
#: largest |imaginary part| / max(1, |real part|) of an eigenvalue taken as a real root of f'
REAL_ROOT_TOL = 1e-6


def _minimise_quadratic_form_polynomial(h: np.ndarray, extended: bool) -> np.ndarray:
    r"""Global minimisers of :math:`f_r(t) = T^\top H_r T`, :math:`T = (1, t, \dots, t^q)`, for
    each of the (r, q + 1, q + 1) symmetric positive semidefinite ``h``; over [0, 1], or the real
    line with ``extended`` (f has positive leading coefficient :math:`H_{qq}`, so a minimiser
    exists). See :func:`polynomial_closest`.
    """
    rows, q1 = h.shape[0], h.shape[1]
    q = q1 - 1
    # f's coefficients, lowest first: sums of the anti-diagonals of H
    f = np.zeros((rows, 2 * q + 1))
    for j in range(q1):
        f[:, j : j + q1] += h[:, j, :]
    df = f[:, 1:] * np.arange(1, 2 * q + 1)  # f', degree 2q - 1, leading coefficient > 0
    d2f = df[:, 1:] * np.arange(1, 2 * q)
    deg = 2 * q - 1
    companion = np.zeros((rows, deg, deg))
    if deg > 1:
        companion[:, np.arange(1, deg), np.arange(deg - 1)] = 1.0
    companion[:, :, -1] = -df[:, :deg] / df[:, deg : deg + 1]
    roots = np.linalg.eigvals(companion)
    # a root is real up to rounding (a double root of f' splits into a pair about sqrt(eps)
    # apart); a pair further off the axis is not a stationary point at all and is left out
    real = np.abs(roots.imag) <= REAL_ROOT_TOL * np.maximum(1.0, np.abs(roots.real))
    cands = roots.real
    lo, hi = (-np.inf, np.inf) if extended else (0.0, 1.0)
    if not extended:
        cands = np.clip(np.concatenate([cands, np.zeros((rows, 1)), np.ones((rows, 1))], 1), 0, 1)
        real = np.concatenate([real, np.ones((rows, 2), dtype=bool)], 1)
    # f' has odd degree, so every row keeps a real root; a left-out slot repeats the row's
    # first kept candidate (harmless in the ranking below)
    first = cands[np.arange(rows), np.argmax(real, axis=1)]
    cands = np.where(real, cands, first[:, None])
    # polish: Newton on f' where f is convex, kept in range, to convergence (quadratic: a few
    # steps) so that f ranks exact stationary points
    for _ in range(_POLISH_STEPS):
        g, curv = horner_rows(df, cands), horner_rows(d2f, cands)
        with np.errstate(divide="ignore", invalid="ignore"):
            stepped = np.clip(cands - g / curv, lo, hi)
        new = np.where((curv > 0) & np.isfinite(stepped), stepped, cands)
        moved = np.abs(new - cands) > 4 * np.finfo(float).eps * np.maximum(1.0, np.abs(cands))
        cands = new
        if not moved.any():
            break
    best = np.argmin(horner_rows(f, cands), axis=1)
    return cands[np.arange(rows), best]


def horner_rows(coefficients: Array, t: Array) -> Array:
    """Row r of the polynomials ``coefficients`` ((rows, degree + 1), lowest first) at the
    (rows, c) points ``t[r]``, by Horner's scheme (numpy or torch)."""
    out = coefficients[:, -1:] + 0 * t
    for j in range(coefficients.shape[-1] - 2, -1, -1):
        out = out * t + coefficients[:, j : j + 1]
    return out


def _gram_products(flat: Array, thetas: Array) -> tuple[Array, Array, Array]:
    r"""Inner products for the closest-point query: :math:`G = P P^\top` (k, k), :math:`P
    \Theta^\top` (k, m) and the squared norms of the rows of :math:`\Theta` (m,).

    ``flat`` is (k, D), ``thetas`` (m, D). The k(k+1)/2 distinct entries of G are dot products of
    rows (each reads two D-vectors at the speed of the memory, where a BLAS ``syrk``/``gemm`` of
    such flat matrices is several times slower than a memory pass), :math:`P\theta` one
    matrix-vector product per query row (a product with an (D, 1) matrix would go through
    ``gemm`` too), the norms dot products. Nothing of size D is allocated. Differentiable in torch.
    """
    k, m = flat.shape[0], thetas.shape[0]
    entries = {(i, j): flat[i] @ flat[j] for i in range(k) for j in range(i, k)}
    rows = [[entries[min(i, j), max(i, j)] for j in range(k)] for i in range(k)]
    if type(flat) is np.ndarray and type(thetas) is np.ndarray:
        gram = np.array(rows)
        if m <= _GEMV_ROWS:
            cross = np.stack([flat @ row for row in thetas], axis=-1)
            norms = np.array([row @ row for row in thetas])
        else:
            cross = flat @ thetas.T
            norms = np.einsum("ij,ij->i", thetas, thetas)
        return gram, cross, norms
    import torch

    gram = torch.stack([torch.stack(r) for r in rows])
    if m <= _GEMV_ROWS:
        cross = torch.stack([torch.mv(flat, row) for row in thetas], dim=-1)
        norms = torch.stack([torch.dot(row, row) for row in thetas])
    else:
        cross = flat @ thetas.T
        norms = torch.sum(thetas * thetas, dim=-1)
    return gram, cross, norms


# up to this many closest-point queries at once, one matrix-vector product per query
_GEMV_ROWS = 8


def _numpy_views(cp: Array, thetas: Array) -> tuple[np.ndarray | None, np.ndarray | None]:
    """numpy views of CPU torch tensors that need no autograd graph (no copy), else Nones.

    Lets the closest-point query of such tensors run its many small steps at numpy's (lower)
    per-call cost; numpy inputs come back as they are.
    """
    if type(cp) is np.ndarray:
        return cp, thetas
    import torch

    needs_graph = torch.is_grad_enabled() and (cp.requires_grad or thetas.requires_grad)
    if (
        needs_graph
        or cp.device.type != "cpu"
        or thetas.device.type != "cpu"
        or cp.dtype not in (torch.float32, torch.float64)
        or thetas.dtype != cp.dtype
    ):
        return None, None
    return to_numpy(cp), to_numpy(thetas)

r"""Bezier curves in a Euclidean space or on a manifold.

A Bezier curve of degree n with control points :math:`P_0, \dots, P_n` is

.. math::
    c(t) = \sum_{i=0}^n B_i^n(t)\,P_i,\qquad B_i^n(t) = \binom{n}{i} t^i (1-t)^{n-i},

the quadratic case :math:`c(t) = (1-t)^2 A + 2t(1-t) B + t^2 C` being the curve of AsyncBezier
([P] eq. of section 3; digest-000-001 section 2.3, which also explains why the ``t(1-t)`` variant
of [TR] eq. 28 is read as this Bernstein form). On a manifold the curve is defined by the geodesic
de Casteljau construction (the one of Manopt.jl's ``bezier_curves``): every linear interpolation
:math:`(1-t)P + tQ` becomes :math:`\mathrm{Exp}_P(t\,\mathrm{Log}_P Q)`.

Any real t is allowed: the polynomial extends beyond [0, 1] ([P]'s footnote allows extrapolation
past the local endpoint).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..backend import Array, ops_for, to_like
from ..errors import ParameterError, ShapeError
from .base import Manifold, RandomState, as_generator
from .euclidean import Euclidean

__all__ = ["BezierCurve", "bernstein_weights"]


def bernstein_weights(degree: int, t: Array) -> Array:
    r"""Bernstein basis :math:`B_0^n(t), \dots, B_n^n(t)` by de Casteljau's recursion.

    Returns an array of shape ``t.shape + (degree + 1,)``. The recursion is de Casteljau's
    algorithm applied to the unit control points: for t in [0, 1] every step is a convex
    combination, which is what makes de Casteljau evaluation numerically stable; contracting these
    weights with the control points is then exactly de Casteljau's result in one pass over them.
    """
    ops = ops_for(t)
    one_minus = 1.0 - t
    weights = [ops.ones_like(t)]
    for r in range(1, degree + 1):
        nxt = [one_minus * weights[0]]
        for i in range(1, r):
            nxt.append(t * weights[i - 1] + one_minus * weights[i])
        nxt.append(t * weights[r - 1])
        weights = nxt
    return _stack_last(ops, weights)


def _scalar_weights(degree: int, t: float) -> list[float]:
    """Bernstein weights at one Python-float t, by the same de Casteljau recursion."""
    s = 1.0 - t
    w = [1.0]
    for r in range(1, degree + 1):
        w = [s * w[0]] + [t * w[i - 1] + s * w[i] for i in range(1, r)] + [t * w[r - 1]]
    return w


def _stack_last(ops, arrays):
    return ops.concatenate([a[..., None] for a in arrays], axis=-1)


def _difference_weights(weights: Array, degree: int) -> Array:
    r"""Weights of the derivative: :math:`c' = \sum_i P_i\, n (B^{n-1}_{i-1} - B^{n-1}_i)`."""
    ops = ops_for(weights)
    zero = ops.zeros_like(weights[..., :1])
    padded_left = ops.concatenate([zero, weights], axis=-1)
    padded_right = ops.concatenate([weights, zero], axis=-1)
    return degree * (padded_left - padded_right)


class BezierCurve:
    r"""A Bezier curve of any degree >= 1, in Euclidean space or on a manifold.

    Parameters
    ----------
    control_points : array, shape (degree + 1, *point_shape)
        numpy array or torch tensor; with torch, every quantity below is differentiable with
        respect to the control points (train a curve of network parameter vectors with any torch
        optimiser).
    manifold : Manifold, optional
        Base manifold (default: the Euclidean space of the control points' shape). The control
        points must lie on it.

    Notes
    -----
    *Euclidean base.* Evaluation contracts the control points with the Bernstein weights computed
    by de Casteljau's recursion (:func:`bernstein_weights`): one pass over the control points,
    stable for t in [0, 1]. Derivatives use the hodograph (the derivative of a degree-n Bezier
    curve is the degree n-1 curve of the scaled differences :math:`n(P_{i+1} - P_i)`). The arc
    length of a quadratic is in closed form; other degrees use composite Gauss-Legendre.

    *Manifold base.* Evaluation is the geodesic de Casteljau construction with the base manifold's
    ``exp`` and ``log``. Derivatives are taken by central differences of the ambient coordinates
    (step :math:`\epsilon^{1/3}`, error :math:`O(\epsilon^{2/3})`) and projected onto the tangent
    space; the speed is their Riemannian norm.
    """

    def __init__(self, control_points: Array, manifold: Manifold | None = None) -> None:
        cp = control_points if hasattr(control_points, "shape") else np.asarray(control_points)
        if cp.ndim < 2 or cp.shape[0] < 2:
            raise ShapeError(
                f"BezierCurve needs control points of shape (degree + 1, *point_shape) with "
                f"degree >= 1; got shape {tuple(cp.shape)}"
            )
        if not ops_for(cp).all_finite(cp):
            raise ParameterError("BezierCurve: control points contain NaN or infinite entries")
        if manifold is None:
            manifold = Euclidean(*cp.shape[1:])
        if tuple(cp.shape[1:]) != tuple(manifold.point_shape):
            expected = ", ".join(map(str, manifold.point_shape))
            raise ShapeError(
                f"BezierCurve: control points of shape {tuple(cp.shape)} do not match "
                f"{manifold.name} (expected (degree + 1, {expected}))"
            )
        self.control_points = cp
        self.manifold = manifold
        self.euclidean = isinstance(manifold, Euclidean)
        if not self.euclidean:
            manifold.check_point(cp)

    # ------------------------------------------------------------------ basics
    @property
    def degree(self) -> int:
        return int(self.control_points.shape[0]) - 1

    @property
    def point_shape(self) -> tuple[int, ...]:
        return tuple(self.manifold.point_shape)

    def __repr__(self) -> str:
        return f"BezierCurve(degree={self.degree}, manifold={self.manifold.name})"

    def _t(self, t: Any) -> Array:
        """Parameters as an array of the control points' type, dtype and device."""
        if hasattr(t, "shape") and ops_for(t).is_torch == ops_for(self.control_points).is_torch:
            return (
                t.to(self.control_points.dtype)
                if hasattr(t, "to")
                else t.astype(self.control_points.dtype)
            )
        return to_like(np.asarray(t, dtype=np.float64), self.control_points)

    def _contract(self, weights: Array) -> Array:
        """sum_i weights[..., i] * P_i, shaped ``weights.shape[:-1] + point_shape``."""
        ops = ops_for(weights, self.control_points)
        flat = ops.reshape(self.control_points, (self.degree + 1, -1))
        out = weights @ flat
        return ops.reshape(out, tuple(weights.shape[:-1]) + self.point_shape)

    def _contract_scalar(self, weights: list[float]) -> Array:
        """One point from Python-float weights: a single vector-matrix product, no other pass."""
        cp = self.control_points
        flat = cp.reshape(self.degree + 1, -1)
        if type(cp) is np.ndarray:
            return np.dot(np.asarray(weights, dtype=cp.dtype), flat).reshape(self.point_shape)
        import torch

        w = torch.tensor(weights, dtype=cp.dtype, device=cp.device)
        return (w @ flat).reshape(self.point_shape)

    # ------------------------------------------------------------------ evaluation
    def __call__(self, t: Any) -> Array:
        """Curve points at parameters ``t`` (scalar or array); shape ``t.shape + point_shape``."""
        if self.euclidean and isinstance(t, (int, float, np.floating)):
            return self._contract_scalar(_scalar_weights(self.degree, float(t)))
        t = self._t(t)
        if self.euclidean:
            return self._contract(bernstein_weights(self.degree, t))
        return self._geodesic_de_casteljau(t)

    def _geodesic_de_casteljau(self, t: Array) -> Array:
        m = self.manifold
        ops = ops_for(t, self.control_points)
        tt = ops.reshape(t, tuple(t.shape) + (1,) * m.ndim)
        points = [self.control_points[i] for i in range(self.degree + 1)]
        for _ in range(self.degree):
            points = [
                m.exp(p, tt * m.log(p, q)) for p, q in zip(points[:-1], points[1:], strict=True)
            ]
        return points[0] + ops.zeros_like(tt)  # broadcast to t's shape when t is not batched

    def derivative(self, t: Any, order: int = 1) -> Array:
        r""":math:`c^{(k)}(t)` for ``order`` k in {1, 2} (ambient coordinates)."""
        if order not in (1, 2):
            raise ParameterError(f"BezierCurve.derivative: order must be 1 or 2, got {order!r}")
        t = self._t(t)
        if self.euclidean:
            n = self.degree
            if order > n:
                return ops_for(t).zeros_like(self(t))
            weights = bernstein_weights(n - order, t)
            for k in range(order):
                weights = _difference_weights(weights, n - order + k + 1)
            return self._contract(weights)
        return self._numerical_derivative(t, order)

    def _numerical_derivative(self, t: Array, order: int) -> Array:
        ops = ops_for(t)
        m = self.manifold
        eps = ops.eps(t)
        h = eps ** (1 / 3) if order == 1 else eps ** (1 / 4)
        plus, mid, minus = self(t + h), self(t), self(t - h)
        if order == 1:
            return m.to_tangent(mid, (plus - minus) / (2 * h))
        return (plus - 2 * mid + minus) / (h * h)

    def velocity(self, t: Any) -> Array:
        """First derivative :math:`c'(t)`."""
        return self.derivative(t, 1)

    def acceleration(self, t: Any) -> Array:
        """Second derivative :math:`c''(t)` (ambient)."""
        return self.derivative(t, 2)

    def speed(self, t: Any) -> Array:
        r""":math:`\|c'(t)\|` in the base manifold's metric."""
        t = self._t(t)
        v = self.velocity(t)
        return self.manifold.norm(self(t), v)

    # ------------------------------------------------------------------ arc length
    def _quadratic_coefficients(self):
        """a = B - A, b = A - 2B + C (c(t) = A + 2t a + t^2 b), flattened."""
        ops = ops_for(self.control_points)
        flat = ops.reshape(self.control_points, (3, -1))
        return flat[0], flat[1] - flat[0], flat[0] - 2 * flat[1] + flat[2]

    def arc_length(self, t0: float = 0.0, t1: float = 1.0, *, panels: int = 16) -> Array:
        r"""Arc length :math:`\int_{t_0}^{t_1}\|c'(t)\|\,dt` (negative if ``t1 < t0``).

        Euclidean quadratic: closed form of :math:`\int 2\sqrt{|b|^2u^2 + 2(a\cdot b)u +
        |a|^2}\,du` (digest section 2.3); otherwise ``panels`` panels of 8-point Gauss-Legendre,
        exact to rounding for smooth speeds (polynomial of degree < 16 per panel).
        """
        if self.euclidean and self.degree == 2:
            closed = self._quadratic_arc_length(t0, t1)
            if closed is not None:
                return closed
        return self._gauss_legendre_length(t0, t1, panels)

    def _quadratic_arc_length(self, t0: float, t1: float):
        ops = ops_for(self.control_points)
        _, a, b = self._quadratic_coefficients()
        qa = ops.sum(b * b)  # speed/2 = sqrt(qa t^2 + qb t + qc)
        qb = 2 * ops.sum(a * b)
        qc = ops.sum(a * a)
        scale = ops.to_float(qa) + ops.to_float(qc) + 1e-300
        disc = 4 * qa * qc - qb * qb
        if ops.to_float(qa) <= 1e-12 * scale or ops.to_float(disc) <= 1e-8 * scale * scale:
            return None  # straight (or nearly) curves: Gauss-Legendre is exact and safe there

        def antiderivative(t):
            # int sqrt(qa t^2 + qb t + qc) dt, valid for a positive discriminant 4 qa qc - qb^2
            q = ops.sqrt(qa * t * t + qb * t + qc)
            root = ops.sqrt(qa)
            return (2 * qa * t + qb) * q / (4 * qa) + disc / (8 * qa * root) * ops.arcsinh(
                (2 * qa * t + qb) / ops.sqrt(disc)
            )

        return 2 * (antiderivative(self._t(t1)) - antiderivative(self._t(t0)))

    def _gauss_legendre_length(self, t0: float, t1: float, panels: int) -> Array:
        nodes, weights = np.polynomial.legendre.leggauss(8)
        edges = np.linspace(t0, t1, panels + 1)
        half = 0.5 * (edges[1:] - edges[:-1])
        centre = 0.5 * (edges[1:] + edges[:-1])
        ts = (centre[:, None] + half[:, None] * nodes[None, :]).ravel()
        ws = (half[:, None] * weights[None, :]).ravel()
        speeds = self.speed(ts)
        ops = ops_for(speeds)
        return ops.sum(speeds * self._t(ws))

    def arc_length_at(self, t: Any, *, panels: int = 16) -> Array:
        r""":math:`s(t) = \int_0^t \|c'\|`, elementwise and batched over t (differentiable in
        torch with respect to t and the control points); negative for t < 0."""
        t = self._t(t)
        if self.euclidean and self.degree == 2:
            closed = self._quadratic_arc_length(0.0, t)
            if closed is not None:
                return closed
        nodes, weights = np.polynomial.legendre.leggauss(8)
        edges = np.linspace(0.0, 1.0, panels + 1)
        half = 0.5 * (edges[1:] - edges[:-1])
        taus = (0.5 * (edges[1:] + edges[:-1])[:, None] + half[:, None] * nodes).ravel()
        ws = (half[:, None] * weights).ravel()
        ops = ops_for(t)
        tt = t[..., None] * self._t(taus)
        return t * ops.sum(self.speed(tt) * self._t(ws), axis=-1)

    def parameter_at_arc_length(self, s: Any, *, tol: float = 1e-15) -> np.ndarray:
        """Inverse of :meth:`arc_length_at`: the t with s(t) = s (numpy float64).

        Safeguarded Newton (:math:`ds/dt = \\|c'(t)\\|`) within a bracket grown until it contains
        the target, so values beyond [0, length] extrapolate along the extended curve.
        """
        s_np = np.asarray(s, dtype=np.float64)
        out = np.empty(s_np.shape)
        length = float(_as_float(self.arc_length()))
        if length <= 0:
            raise ParameterError("BezierCurve: the curve has zero length; no arc-length inverse")
        for idx, target in np.ndenumerate(s_np):
            out[idx] = self._invert_length(float(target), length, tol)
        return out

    def _invert_length(self, target: float, length: float, tol: float) -> float:
        def s_of(t):
            return float(_as_float(self.arc_length(0.0, t)))

        lo, hi = 0.0, 1.0
        while s_of(lo) > target:
            lo -= max(1.0, hi - lo)
        while s_of(hi) < target:
            hi += max(1.0, hi - lo)
        t = lo + (hi - lo) * (target - s_of(lo)) / max(s_of(hi) - s_of(lo), 1e-300)
        for _ in range(100):
            f = s_of(t) - target
            if abs(f) <= tol * max(1.0, length, abs(target)):
                return t
            if f > 0:
                hi = t
            else:
                lo = t
            speed = float(_as_float(self.speed(t)))
            step = t - f / speed if speed > 0 else 0.5 * (lo + hi)
            t = step if lo < step < hi else 0.5 * (lo + hi)
        return t

    def sample(
        self, n: int, rng: RandomState = None, *, uniform: str = "parameter"
    ) -> tuple[np.ndarray, Array]:
        """``n`` random curve points: ``(t, c(t))`` with t uniform in the parameter (default) or
        in arc length (``uniform="arc_length"``, density proportional to the speed)."""
        gen = as_generator(rng)
        if uniform == "parameter":
            t = gen.uniform(0.0, 1.0, size=n)
        elif uniform == "arc_length":
            t = self.parameter_at_arc_length(
                gen.uniform(0.0, 1.0, size=n) * float(_as_float(self.arc_length()))
            )
        else:
            raise ParameterError(f"uniform must be 'parameter' or 'arc_length', got {uniform!r}")
        return t, self(t)

    # ------------------------------------------------------------------ closest point
    def closest_point(
        self, a: Array, *, extended: bool = False, starts: int = 9
    ) -> tuple[np.ndarray, Array]:
        r"""Parameter :math:`t^*(a)` of the curve point nearest to ``a`` (ambient norm), and the
        distance.

        ``a`` may carry leading batch dimensions. The search runs over [0, 1], or over the whole
        real line with ``extended`` (the extrapolated curve). Euclidean quadratic: the stationary
        points are the real roots of the cubic :math:`(b\cdot b)t^3 + 3(a\cdot b)t^2 + (2a\cdot a +
        (A-\theta)\cdot b)t + (A-\theta)\cdot a` (digest section 2.3), compared with the
        endpoints. Otherwise: a safeguarded Newton iteration on :math:`\tfrac12\|c(t)-a\|^2` from
        ``starts`` equally spaced starting points. Returns ``(t, distance)``; t as numpy float64,
        the distance in the control points' array type.
        """
        ops = ops_for(self.control_points)
        a = a if hasattr(a, "shape") else np.asarray(a)
        a = to_like(a, self.control_points) if ops.is_torch != ops_for(a).is_torch else a
        ps = self.point_shape
        if tuple(a.shape[len(a.shape) - len(ps) :]) != ps:
            raise ShapeError(
                f"BezierCurve.closest_point: a has shape {tuple(a.shape)}; expected (..., "
                f"{', '.join(map(str, ps))})"
            )
        batch = tuple(a.shape[: len(a.shape) - len(ps)])
        if self.euclidean and self.degree == 2:
            t, dist = self._quadratic_closest(ops.reshape(a, (-1, math.prod(ps))), extended)
            return t.reshape(batch), ops.reshape(dist, batch)
        flat = np.reshape(_numpy(a), (-1, math.prod(ps)))
        t = np.array([self._newton_closest(row, extended, starts) for row in flat])
        t = t.reshape(batch)
        diff = self(t) - a
        axes = tuple(range(-len(ps), 0))
        return t, ops_for(diff).sqrt(ops_for(diff).sum(diff * diff, axis=axes))

    def like(self, x: Array) -> BezierCurve:
        """This curve with control points of x's array type, dtype and device (self if same)."""
        cp = self.control_points
        same = ops_for(x).is_torch == ops_for(cp).is_torch and x.dtype == cp.dtype
        if same and (not hasattr(x, "device") or x.device == cp.device):
            return self
        return BezierCurve(to_like(_numpy(cp), x), self.manifold)

    def closest_parameter(self, a: Array, *, extended: bool = False) -> Array:
        r""":math:`t^*(a)` as an array of a's type; differentiable in torch.

        The parameter is found by :meth:`closest_point`; with torch inputs one Newton step on
        :math:`g(t) = \langle c'(t), c(t) - a\rangle` at the solution then gives the exact first
        derivative :math:`dt^*/da = -\partial_a g / g'` (implicit function theorem), applied
        where :math:`t^*` is interior (at a clipped endpoint the derivative is 0).
        """
        t_np, _ = self.closest_point(_numpy(a), extended=extended)
        curve = self.like(a)
        t = curve._t(t_np)
        if ops_for(a).is_torch and a.requires_grad:
            ops = ops_for(a)
            axes = tuple(range(-len(self.point_shape), 0))
            c, v, acc = curve(t), curve.velocity(t), curve.acceleration(t)
            g = ops.sum(v * (c - a), axis=axes)
            h = ops.sum(v * v, axis=axes) + ops.sum(acc * (c - a), axis=axes)
            step = t - g / h
            if not extended:
                interior = (t > 0) & (t < 1)
                step = ops.where(interior, step, t)
            t = step
        return t

    def _quadratic_closest(self, thetas: Array, extended: bool) -> tuple[np.ndarray, Array]:
        """Closest parameters and distances of a quadratic for the rows of ``thetas`` (m, D).

        Everything comes from six dot products of the control points (their Gram matrix), the
        three products with each query and its squared norm, computed in the data's own backend
        and dtype (about two passes over the D-dimensional data, no copies); the cubic and the
        choice among its roots are small float64 algebra. The distance is
        :math:`\\sqrt{w^\top G w - 2 w^\top P\theta + \theta^\top\theta}`, recomputed
        explicitly from :math:`c(t) - \theta` where that difference of squares would cancel
        (below 1e-6 of :math:`\theta^\top\theta`). Differentiable in torch (the distance's
        derivative with respect to t vanishes at the optimum).
        """
        ops = ops_for(thetas, self.control_points)
        flat = ops.reshape(self.control_points, (3, -1))
        rows = [[flat[i] @ flat[j] for j in range(3)] for i in range(3)]
        gram_t = ops.stack([ops.stack(r) for r in rows]) if ops.is_torch else np.array(rows)
        cross_t = flat @ ops.mT(thetas)  # (3, m): one gemv per query
        norms_t = ops.sum(thetas * thetas, axis=-1)
        gram, cross = _numpy(gram_t), _numpy(cross_t)
        alpha = np.array([-1.0, 1.0, 0.0])  # a = B - A
        beta = np.array([1.0, -2.0, 1.0])  # b = A - 2B + C
        bb, ab, aa = beta @ gram @ beta, alpha @ gram @ beta, alpha @ gram @ alpha
        db = gram[0] @ beta - beta @ cross  # (A - theta) . b
        da = gram[0] @ alpha - alpha @ cross  # (A - theta) . a
        ts = np.empty(thetas.shape[0])
        for k in range(thetas.shape[0]):
            coeffs = np.array([bb, 3 * ab, 2 * aa + db[k], da[k]])
            scale = np.max(np.abs(coeffs)) or 1.0
            lead = int(np.argmax(np.abs(coeffs) > 1e-13 * scale))
            roots = np.roots(coeffs[lead:]) if lead < 3 else np.array([])
            cands = [r.real for r in roots if abs(r.imag) <= 1e-9 * max(1.0, abs(r.real))]
            if not extended:
                cands = [min(max(c, 0.0), 1.0) for c in cands] + [0.0, 1.0]
            cands = np.array(cands or [0.0])
            w = np.asarray(bernstein_weights(2, cands))  # (k, 3)
            dist2 = np.einsum("ki,ij,kj->k", w, gram, w) - 2 * w @ cross[:, k]
            ts[k] = cands[int(np.argmin(dist2))]
        weights = ops.asarray(np.asarray(bernstein_weights(2, ts)), thetas)  # (m, 3)
        quad = ops.sum((weights @ gram_t) * weights, axis=-1)
        lin = ops.sum(weights * ops.mT(cross_t), axis=-1)
        d2 = quad - 2 * lin + norms_t
        if ops.any(d2 <= 1e-6 * norms_t):  # cancellation: recompute those explicitly
            diff = weights @ flat - thetas
            d2 = ops.where(d2 <= 1e-6 * norms_t, ops.sum(diff * diff, axis=-1), d2)
        return ts, ops.sqrt(ops.maximum(d2, 0.0))

    def _newton_closest(self, theta: np.ndarray, extended: bool, starts: int) -> float:
        curve = self if not ops_for(self.control_points).is_torch else self._numpy_copy()

        def parts(t):
            c = np.reshape(np.asarray(curve(t)), -1) - theta
            v = np.reshape(np.asarray(curve.velocity(t)), -1)
            acc = np.reshape(np.asarray(curve.acceleration(t)), -1)
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
            c = np.reshape(np.asarray(curve(t)), -1) - theta
            if c @ c < best:
                best_t, best = float(t), float(c @ c)
        return best_t

    def _numpy_copy(self) -> BezierCurve:
        return BezierCurve(_numpy(self.control_points), self.manifold)


def _numpy(a) -> np.ndarray:
    if hasattr(a, "detach"):
        return a.detach().cpu().numpy().astype(np.float64)
    return np.asarray(a, dtype=np.float64)


def _as_float(a) -> float:
    return float(a.detach()) if hasattr(a, "detach") else float(a)

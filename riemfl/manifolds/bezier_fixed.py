r"""A fixed Euclidean Bezier curve's closest parameter and inverse arc length at every check level.

:class:`~riemfl.manifolds.bezier_graph.BezierGraph` and
:class:`~riemfl.manifolds.tunnel.EpsilonTunnel` hold a fixed curve (float64 numpy control
points). Their maps need two solves: the parameter :math:`t^*(a)` of the curve point nearest to
a query, and the parameter at a given arc length. :class:`FixedCurve` computes, once and on the
host, every constant of the curve that needs a decision (the true degree, the polynomial of the
squared speed, the least speed over the real line, whether the quadratic's arc length has its
closed form); then it runs the solves

* on the host, exactly, for numpy arrays and at the check level ``"eager"``
  (:func:`~riemfl.manifolds.bezier_closest.closest_point`,
  :func:`~riemfl.manifolds.bezier_arclength.parameter_at_arc_length`: a polynomial's real roots
  and a bracketed Newton iteration run to convergence, each reading values);
* for torch tensors at ``"deferred"`` and ``"off"`` (:mod:`riemfl.check_levels`), in a fixed
  number of float64 tensor operations that read nothing back (:meth:`FixedCurve.fixed_closest`,
  :meth:`FixedCurve.fixed_parameter_at_arc_length`), so that they run on an accelerator without
  stalling it and compile into one graph. At ``"deferred"`` a solve that did not converge in its
  fixed iterations raises :class:`~riemfl.errors.ConvergenceError` at the boundary.

Either way torch gets one differentiable Newton step at the solution, whose derivative is the
exact one by the implicit function theorem.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend import Array, cast_like, is_torch, ops_for, to_like, to_numpy, widen
from ..check_levels import compiling, level_of, refuse
from ..errors import ConvergenceError
from .bezier import BezierCurve
from .bezier_arclength import (
    gauss_legendre_rule,
    quadratic_length_between,
    quadratic_speed_constants,
)
from .bezier_closest import REAL_ROOT_TOL, closest_point, horner_rows, implicit_closest_step
from .bezier_eval import power_basis_matrix

__all__ = ["FixedCurve", "aberth_iterations", "arc_length_steps"]

#: Newton steps on f' polishing the closest-point candidates of the fixed form (each candidate
#: starts at a closed-form or Aberth root, already exact to a few ulps where it converged)
_POLISH_STEPS = 3
#: relative backward error |p(z)| / sum_k |p_k| |z|^k of every Aberth root that counts as
#: converged (rounding gives about m * 1e-16; a double root, approached linearly, passes at an
#: error of its square)
_ROOT_RESIDUAL = 1e-10
#: relative residual |s(t) - target| / (1 + |target| + |s(1)|) of the inverse arc length that
#: counts as converged
_ARC_RESIDUAL = 1e-10


def arc_length_steps(degree: int) -> int:
    """Safeguarded Newton steps of the inverse arc length at ``"deferred"`` and ``"off"`` for a
    curve of true degree ``degree``: 8 + 4 degree (16 for a quadratic).

    Each step at least halves the bracket (a bisection where Newton would leave it), whose
    first width is 2|shift| / (least speed); Newton converges quadratically once near.
    Measured on 200 random curves per degree, 64 start points in [-1, 2] and shifts from 1e-3
    to 30 times the curve's size, the steps until the residual is below 1e-13 relative: at
    most 10 for degree 2, 14 for 3, 18 for 4 (medians 6, 9, 11).
    """
    return 8 + 4 * degree


def aberth_iterations(m: int) -> int:
    """Aberth-Ehrlich iterations for the m roots of f' in the fixed form (curves of degree 3
    and more; a quadratic's cubic has its closed form): 12 + 3m.

    Measured on random curves of degrees 2 to 5 with queries from 1e-2 to 1e3 times the curve's
    size, the iterations until every correction is below 1e-12 relative: at most 14 for m = 3
    (a quadratic), 16 for m = 5, 20 for m = 7, 21 for m = 9 (99th percentiles 11, 15, 20, 20).
    """
    return 12 + 3 * m


class FixedCurve:
    r"""The closest-parameter and inverse-arc-length solves of a fixed Euclidean Bezier curve.

    Parameters
    ----------
    curve : BezierCurve
        Euclidean, float64 numpy control points, an immersion (its speed never vanishes: the
        manifolds that hold it check that first).
    what : str
        The holder's name, for error messages.

    Notes
    -----
    With the power-basis coefficients :math:`a_0, \dots, a_q` of the curve (q its true degree),
    the squared speed is the polynomial :math:`\|c'(t)\|^2 = \sum_{j,l\ge1} jl\,(a_j\cdot a_l)
    \,t^{j+l-2}`; :attr:`least_speed` is the square root of its minimum over the real line
    (at a real root of its derivative, found here once). The arc length :math:`s(t) = \int_0^t
    \|c'\|` is the closed form of a quadratic (Licudi et al. 2025's curves; see
    :func:`~riemfl.manifolds.bezier_arclength.quadratic_arc_length`) or 16 panels of 8-point
    Gauss-Legendre quadrature of the square root of that polynomial: no pass over the ambient
    dimension either way.
    """

    def __init__(self, curve: BezierCurve, what: str) -> None:
        self.curve = curve
        self.what = what
        #: torch copies of the constants and of the curve, by (name, device, dtype)
        self._device_constants: dict[tuple[Any, ...], Any] = {}
        flat = np.reshape(np.asarray(curve.control_points, np.float64), (curve.degree + 1, -1))
        coef = power_basis_matrix(curve.degree) @ flat
        norms = np.sqrt(np.einsum("ij,ij->i", coef[1:], coef[1:]))
        # the true degree, as the host solver drops it: power coefficients at the rounding
        # level of the control points (a degree-elevated curve, a segment at uniform speed)
        scale = float(np.sqrt(np.einsum("ij,ij->i", flat, flat)).max())
        top = curve.degree
        while top > 1 and norms[top - 1] <= 64 * np.finfo(float).eps * scale:
            top -= 1
        self.degree = top
        self._origin = coef[0]  # a_0 = P_0
        self._coefficients = coef[1 : top + 1]  # a_1 .. a_q, (q, D)
        gram = self._coefficients @ self._coefficients.T
        q = np.arange(1, top + 1)
        # ||c(t) - a||^2 = |e|^2 + 2 sum_j (e . a_j) t^j + sum_{j,l} (a_j . a_l) t^(j + l),
        # e = a_0 - a: the part of each coefficient that does not depend on the query
        self._distance_constant = _antidiagonal_sums(gram, offset=2)
        speed2 = _antidiagonal_sums(gram * np.outer(q, q), offset=0)
        # Python floats: a traced function reads them as constants (dynamo mistraces a
        # reversed slice of a numpy array)
        self._speed2 = tuple(float(c) for c in speed2)
        stationary = (
            np.polynomial.polynomial.polyroots(np.polynomial.polynomial.polyder(speed2))
            if speed2.size > 1
            else np.zeros(0)
        )
        # the speed at the stationary points from the curve's velocity (the polynomial would
        # lose the least speed to cancellation where it nearly vanishes)
        candidates = np.concatenate([np.real(stationary), [0.0]])
        self.least_speed = float(np.min(np.asarray(curve.speed(candidates))))
        self._closed_form = quadratic_speed_constants(flat) if curve.degree == 2 else None
        if self._closed_form is not None:
            self._closed_form = tuple(float(v) for v in self._closed_form)
        self._nodes, self._weights = gauss_legendre_rule(0.0, 1.0, 16)
        self.length = float(self.arc_length_at(np.ones(())))

    # ------------------------------------------------------------------ which form runs
    @staticmethod
    def fixed_form(a: Array) -> bool:
        """Whether the solves for ``a`` run in fixed iterations (torch tensors at the check
        levels ``"deferred"`` and ``"off"``) rather than on the host."""
        return is_torch(a) and level_of(a) != "eager"

    def like(self, a: Array) -> BezierCurve:
        """The curve in a's array type, dtype and device (unchecked in the fixed form: the
        control points were checked once, and a check would read from the device; there the
        converted curve is kept per device and dtype, see :meth:`_constant`)."""
        if not self.fixed_form(a):
            return self.curve.like(a)
        return self._kept(("curve", a.device, a.dtype), lambda: self.curve.like(a, validate=False))

    def _constant(self, name: str, like: Array) -> Array:
        """The numpy constant ``self.<name>`` as an array like ``like`` (torch: kept, see
        :meth:`_kept`)."""
        if not is_torch(like):
            return to_like(getattr(self, name), like)
        key = (name, like.device, like.dtype)
        return self._kept(key, lambda: to_like(getattr(self, name), like))

    def _kept(self, key: tuple[Any, ...], convert: Callable[[], Any]) -> Any:
        """``convert()``, made once per key (name, device, dtype) and kept: a copy from host
        memory to a device synchronises the device's stream, so it happens at the first call
        on a device, not at every call. Inside a traced function a value not yet kept is
        converted in the graph and not kept (storing it would be a side effect of the trace)."""
        value = self._device_constants.get(key)
        if value is None:
            value = convert()
            if not compiling():
                self._device_constants[key] = value
        return value

    # ------------------------------------------------------------------ arc length
    def speed(self, t: Array) -> Array:
        r""":math:`\|c'(t)\| = \sqrt{\sum_s \sigma_s t^s}` from the squared speed's polynomial,
        elementwise in t (any array type; differentiable in torch)."""
        ops = ops_for(t)
        return ops.sqrt(ops.maximum(_polyval(self._speed2, t), 0.0))

    def arc_length_at(self, t: Array) -> Array:
        r""":math:`s(t) = \int_0^t\|c'\|`, elementwise in t: the closed form of a quadratic, else
        :math:`t\sum_i w_i \|c'(t\tau_i)\|` over the Gauss-Legendre nodes :math:`\tau_i` of
        [0, 1]. Reads nothing; differentiable in torch."""
        if self._closed_form is not None:
            return quadratic_length_between(self._closed_form, 0.0 * t, t)
        taus, weights = self._constant("_nodes", t), self._constant("_weights", t)
        return t * (self.speed(t[..., None] * taus) * weights).sum(-1)

    def parameter_at_arc_length(self, t: Array, shift: Array) -> Array:
        r"""The parameter :math:`t'` with :math:`s(t') = s(t) + \text{shift}`, elementwise, in
        t's array type (torch: one differentiable Newton step at the solution).

        Host, numpy float64, at ``"eager"`` and for numpy arrays
        (:meth:`BezierCurve.parameter_at_arc_length`); fixed iterations otherwise
        (:meth:`fixed_parameter_at_arc_length`).
        """
        target = self.arc_length_at(t) + shift
        if self.fixed_form(t):
            solved = cast_like(self.fixed_parameter_at_arc_length(t.detach(), shift.detach()), t)
        else:
            solved = self.curve.parameter_at_arc_length(to_numpy(target, np.float64))
            solved = to_like(solved, t) if is_torch(t) else solved
        if is_torch(t):  # the implicit derivative: ds/dt' = |c'(t')|
            solved = solved - (self.arc_length_at(solved) - target) / self.speed(solved)
        return solved

    def fixed_parameter_at_arc_length(self, t: Array, shift: Array) -> Array:
        r"""The inverse arc length in :func:`arc_length_steps` safeguarded Newton steps, float64.

        The speed is at least :attr:`least_speed` :math:`v` everywhere, so :math:`t'` lies in
        the bracket :math:`t \pm |\text{shift}|/v`. Each step evaluates :math:`f = s(x) -
        \text{target}`, shrinks the bracket to the side that keeps the sign change and takes
        the Newton step :math:`x - f/\|c'(x)\|` if it stays inside, the bracket's midpoint if
        not. A final residual above :data:`_ARC_RESIDUAL` relative is a deferred
        :class:`~riemfl.errors.ConvergenceError`.
        """
        t, shift = widen(t), widen(shift)
        target = self.arc_length_at(t) + shift
        half = shift.abs() / self.least_speed * (1 + 1e-9) + 1e-300
        lo, hi = t - half, t + half
        x = (t + shift / self.speed(t)).clamp(lo, hi)
        steps = arc_length_steps(self.degree)
        for _ in range(steps):
            f = self.arc_length_at(x) - target
            above = f > 0
            hi, lo = x.where(above, hi), lo.where(above, x)
            newton = x - f / self.speed(x)
            x = newton.where((newton >= lo) & (newton <= hi), 0.5 * (lo + hi))
        residual = (self.arc_length_at(x) - target).abs() / (1 + target.abs() + self.length)
        refuse(
            ~(residual <= _ARC_RESIDUAL),
            ConvergenceError,
            self._unconverged_message,
            "the inverse arc length",
            "relative residual |s(t) - target| =",
            residual,
            _ARC_RESIDUAL,
            steps,
            "safeguarded Newton steps",
            "a moderate arc length (the level 'eager' solves to convergence on the host)",
        )
        return x

    # ------------------------------------------------------------------ closest parameter
    def closest(self, a: Array, extended: bool) -> tuple[BezierCurve, Array]:
        """The curve in a's array type and :math:`t^*(a)` there (batch shape of ``a``; over the
        real line with ``extended``, else [0, 1]): the host solve at ``"eager"`` and for numpy
        arrays, :meth:`fixed_closest` otherwise, then torch's implicit Newton step
        (:func:`~riemfl.manifolds.bezier_closest.implicit_closest_step`)."""
        local = self.like(a)
        if self.fixed_form(a):
            t = cast_like(self.fixed_closest(a.detach(), extended), a)
        else:
            t = local._t(closest_point(self.curve, to_numpy(a, np.float64), extended)[0])
        return local, implicit_closest_step(local, a, t, extended)

    def fixed_closest(self, a: Array, extended: bool) -> Array:
        r""":math:`t^*(a)` in a fixed number of float64 torch operations (batch shape of ``a``).

        With :math:`e = a_0 - a`, the squared distance :math:`f(t) = \|c(t) - a\|^2` has the
        coefficients :math:`f_0 = e\cdot e`, :math:`f_s = 2[s \le q]\,e\cdot a_s + \sum_{j+l=s}
        a_j\cdot a_l` (one pass over the query; the rest is constant). The stationary points are
        the real roots of :math:`f'`, of odd degree m = 2q - 1 and constant leading
        coefficient :math:`2q\|a_q\|^2 > 0`: in closed form for a quadratic (m = 3:
        :func:`_cubic_real_roots`, the host's formulas) and a line, else by
        :meth:`_iterated_real_roots`. The roots are polished by :data:`_POLISH_STEPS` Newton
        steps on f' where :math:`f'' > 0`, then (unless ``extended``) clipped to [0, 1] and
        joined by both end points; the candidate of least f wins.
        """
        import torch

        batch = tuple(a.shape[: a.ndim - len(self.curve.point_shape)])
        query = a.reshape(-1, math.prod(self.curve.point_shape)).to(torch.float64)
        q = self.degree
        e = self._constant("_origin", query) - query
        cross = e @ self._constant("_coefficients", query).T  # e . a_s, (rows, q)
        f = torch.cat([(e * e).sum(-1, keepdim=True), 2 * cross, 0 * cross], -1)
        f = f + self._constant("_distance_constant", f)  # (rows, 2q + 1), lowest first
        powers = torch.arange(1, 2 * q + 1, dtype=f.dtype, device=f.device)
        df = f[:, 1:] * powers
        d2f = df[:, 1:] * powers[: 2 * q - 1]
        monic = df / df[:, -1:]
        candidates = _cubic_real_roots(monic) if q <= 2 else self._iterated_real_roots(monic)
        for _ in range(_POLISH_STEPS):
            curvature = horner_rows(d2f, candidates)
            step = candidates - horner_rows(df, candidates) / curvature
            candidates = step.where((curvature > 0) & torch.isfinite(step), candidates)
        if not extended:  # the end points as they are: polished, one would stop short of the
            # stationary point its steps head for and could tie with it in f to rounding
            ends = torch.cat([0 * candidates[:, :1], 0 * candidates[:, :1] + 1], -1)
            candidates = torch.cat([candidates.clamp(0.0, 1.0), ends], -1)
        best = torch.argmin(horner_rows(f, candidates), dim=-1, keepdim=True)
        return candidates.gather(-1, best).reshape(batch)

    def _iterated_real_roots(self, p: Any) -> Any:
        r"""The real roots of the monic ``p`` ((rows, m + 1), lowest first; m odd) by
        :func:`aberth_iterations` (m) Aberth-Ehrlich iterations (Aberth 1973; Ehrlich 1967),

        .. math::
            z_j \leftarrow z_j - \frac{N_j}{1 - N_j\sum_{k\ne j}(z_j - z_k)^{-1}}, \qquad
            N_j = p(z_j)/p'(z_j),

        from a circle of radius :math:`\max_k |p_k|^{1/(m-k)}` (every root lies within twice
        it), complex numbers held as pairs of real tensors. A root is real up to an imaginary
        part of ``1e-6 max(1, |z|)``, as on the host (rounding splits a double root into a close
        pair); a complex root's slot repeats the row's first real root (p has odd degree: each
        row has one): its real part is not stationary, yet it could tie with the minimiser in f
        to rounding and be ranked first. A root whose backward error stays above
        :data:`_ROOT_RESIDUAL` is a deferred :class:`~riemfl.errors.ConvergenceError`.
        """
        import torch

        iterations = aberth_iterations(p.shape[-1] - 1)
        roots, imaginary, residual = _aberth(p, iterations)
        real = imaginary.abs() <= REAL_ROOT_TOL * roots.abs().clamp_min(1.0)
        first = roots.gather(-1, real.to(torch.int8).argmax(-1, keepdim=True))
        refuse(
            ~(residual <= _ROOT_RESIDUAL),
            ConvergenceError,
            self._unconverged_message,
            "the closest parameter",
            "a root of d/dt |c(t) - a|^2 has relative backward error",
            residual,
            _ROOT_RESIDUAL,
            iterations,
            "Aberth-Ehrlich iterations",
            "a query at a moderate distance from the curve (the level 'eager' finds the roots "
            "on the host)",
        )
        return roots.where(real, first)

    # ------------------------------------------------------------------ messages
    def _unconverged_message(
        self,
        solve: str,
        measure: str,
        residual: Any,
        bound: float,
        count: int,
        steps: str,
        expected: str,
    ) -> str:
        """The deferred ConvergenceError of a fixed-iteration solve (written at the boundary:
        nothing is formatted while the solve runs)."""
        worst = float(np.max(to_numpy(residual), initial=0.0))
        return (
            f"{self.what}: {solve} did not converge in the fixed iterations of the check level "
            f"'deferred': {measure} {worst:.3e} > {bound:.0e} after {count} {steps}; expected "
            f"{expected}"
        )


def _antidiagonal_sums(matrix: np.ndarray, offset: int) -> np.ndarray:
    """Coefficients, lowest first, of :math:`\\sum_{j,l} M_{jl} t^{j + l + \\text{offset}}`
    (j, l from 0): sums of the anti-diagonals of M, shifted by ``offset``."""
    size = matrix.shape[0]
    out = np.zeros(2 * size - 1 + offset)
    for j in range(size):
        out[offset + j : offset + j + size] += matrix[j]
    return out


def _cubic_real_roots(p: Any) -> Any:
    r"""The real roots of the monic ``p`` ((rows, m + 1), lowest first, m = 1 or 3) in closed
    form, by the steps of the host's :func:`~riemfl.manifolds.bezier_closest.real_polynomial_roots`,
    every case computed and one selected by mask: (rows, m), a missing root's slot repeating
    the first.

    With :math:`t^3 + bt^2 + ct + d`, :math:`p = c - b^2/3`, :math:`q = 2b^3/27 - bc/3 + d` and
    :math:`\Delta = (q/2)^2 + (p/3)^3`, the real root of largest magnitude: Cardano's :math:`u -
    p/(3u) - b/3`, :math:`u = \sqrt[3]{-q/2 - \operatorname{sign}(q)\sqrt\Delta}`, where
    :math:`\Delta > 0`, else the largest of the trigonometric form's :math:`r\cos(\varphi -
    2\pi k/3) - b/3`, :math:`r = 2\sqrt{-p/3}`, :math:`\varphi = \tfrac13\arccos(3q/(pr))`;
    three Newton steps on p; then the deflated quadratic's pair (backward deflation for a large
    root, forward for a small one, as on the host), where its discriminant is not negative. So
    two close roots are found where rounding puts :math:`\Delta` above 0.
    """
    import torch

    if p.shape[-1] == 2:
        return -p[:, :1]
    b, c, d = p[:, 2:3], p[:, 1:2], p[:, 0:1]
    shift = b / 3
    depressed_p = c - b * shift
    depressed_q = (2 * shift * shift - c) * shift + d
    delta = (depressed_q / 2) ** 2 + (depressed_p / 3) ** 3
    u = -depressed_q / 2 - delta.clamp_min(0.0).sqrt().copysign(depressed_q)
    u = u.abs().pow(1.0 / 3.0).copysign(u)
    nonzero = u != 0
    cardano = (u - depressed_p / (3 * u.where(nonzero, 1.0))).where(nonzero, 0.0) - shift
    r = 2 * (-depressed_p / 3).clamp_min(0.0).sqrt()
    scale = depressed_p * r
    cosine = (3 * depressed_q / scale.where(scale != 0, 1.0)).clamp(-1.0, 1.0)
    k = torch.arange(3, dtype=p.dtype, device=p.device)
    trigonometric = r * (cosine.acos() / 3 - 2 * math.pi / 3 * k).cos() - shift
    largest = trigonometric.gather(-1, trigonometric.abs().argmax(-1, keepdim=True))
    root = cardano.where(delta > 0, largest)
    for _ in range(3):
        value = ((root + b) * root + c) * root + d
        slope = (3 * root + 2 * b) * root + c
        stepped = root - value / slope
        root = stepped.where(stepped.isfinite(), root)
    # deflation: backward, p = (1 - t/r)(e0 + e1 t + e2 t^2), for a large root; forward,
    # p = (t - r)(t^2 + e1 t + e0), for the small real root beside a complex pair
    safe = root.where(root != 0, 1.0)
    backward = root.abs() ** 3 >= d.abs()
    e1 = (c + d / safe).where(backward, b + root)
    e2 = (b + e1 / safe).where(backward, 1.0 + 0 * root)
    e0 = d.where(backward, c + e1 * root)
    zero_root = root == 0  # t (t^2 + b t + c)
    e2, e1, e0 = e2.where(~zero_root, 1.0), e1.where(~zero_root, b), e0.where(~zero_root, c)
    return torch.cat([root, *_quadratic_real_roots(e2, e1, e0, root)], -1)


def _quadratic_real_roots(a: Any, b: Any, c: Any, fallback: Any) -> tuple[Any, Any]:
    r"""The real roots of :math:`at^2 + bt + c` (columns of (rows, 1)) by the cancellation-free
    pair :math:`q/a, c/q`, :math:`q = -(b + \operatorname{sign}(b)\sqrt{b^2 - 4ac})/2`;
    ``fallback`` where the discriminant is negative (or a root is not finite)."""
    disc = b * b - 4 * a * c
    q = -0.5 * (b + disc.clamp_min(0.0).sqrt().copysign(b))
    pair = (q / a, c / q.where(q != 0, 1.0))
    first, second = (x.where((disc >= 0) & x.isfinite(), fallback) for x in pair)
    return first, second


def _aberth(p: Any, iterations: int) -> tuple[Any, Any, Any]:
    r"""The m complex roots of the monic polynomials ``p`` ((rows, m + 1), lowest first, float64
    torch) by ``iterations`` Aberth-Ehrlich steps: returns their real and imaginary parts (rows,
    m each) and the largest relative backward error of each row's roots (rows,). Complex
    numbers are pairs of real tensors (one fused elementwise graph under ``torch.compile``)."""
    import torch

    m = p.shape[-1] - 1
    k = torch.arange(m, dtype=p.dtype, device=p.device)
    radius = (p[:, :m].abs() ** (1.0 / (m - k))).amax(-1, keepdim=True).clamp_min(1e-150)
    angle = 2 * math.pi / m * k + 0.5  # off the real axis: no pair starts conjugate
    zr, zi = radius * angle.cos(), radius * angle.sin()
    off_diagonal = ~torch.eye(m, dtype=torch.bool, device=p.device)
    for _ in range(iterations):
        pr, pi, dr, di, _ = _horner_complex(p, zr, zi)
        nr, ni = _divide(pr, pi, dr, di)  # Newton's correction p / p'
        gr, gi = zr[..., :, None] - zr[..., None, :], zi[..., :, None] - zi[..., None, :]
        inverse = gr * gr + gi * gi
        inverse = inverse.where(off_diagonal, 1.0)
        sr = (gr / inverse).where(off_diagonal, 0.0).sum(-1)  # sum_k 1 / (z_j - z_k)
        si = (-gi / inverse).where(off_diagonal, 0.0).sum(-1)
        wr, wi = _divide(nr, ni, 1 - (nr * sr - ni * si), -(nr * si + ni * sr))
        finite = torch.isfinite(wr) & torch.isfinite(wi)
        zr, zi = zr - wr.where(finite, 0.0), zi - wi.where(finite, 0.0)
    pr, pi, _, _, size = _horner_complex(p, zr, zi)
    return zr, zi, ((pr * pr + pi * pi).sqrt() / size).amax(-1)


def _horner_complex(p: Any, zr: Any, zi: Any) -> tuple[Any, Any, Any, Any, Any]:
    """The monic ``p`` and its derivative at z = zr + i zi (rows of p against rows of z), and
    :math:`\\sum_k |p_k||z|^k`, the scale of p's value for its backward error."""
    m = p.shape[-1] - 1
    modulus = (zr * zr + zi * zi).sqrt()
    pr, pi = 1 + 0 * zr, 0 * zi
    dr, di = 0 * zr, 0 * zi
    size = 1 + 0 * zr
    for c in range(m - 1, -1, -1):
        coefficient = p[:, c : c + 1]
        dr, di = dr * zr - di * zi + pr, dr * zi + di * zr + pi
        pr, pi = pr * zr - pi * zi + coefficient, pr * zi + pi * zr
        size = size * modulus + coefficient.abs()
    return pr, pi, dr, di, size


def _divide(ar: Any, ai: Any, br: Any, bi: Any) -> tuple[Any, Any]:
    """(ar + i ai) / (br + i bi) as a pair (infinite or NaN where b = 0: the caller masks)."""
    denominator = br * br + bi * bi
    return (ar * br + ai * bi) / denominator, (ai * br - ar * bi) / denominator


def _polyval(coefficients: tuple[float, ...], t: Array) -> Array:
    """The polynomial of the (lowest first) constant ``coefficients`` at t, by Horner."""
    out = 0 * t + coefficients[-1]
    for c in reversed(coefficients[:-1]):
        out = out * t + c
    return out

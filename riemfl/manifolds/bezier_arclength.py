r"""Arc length of Bezier curves and its inverse.

The arc length of a curve from :math:`t_0` to :math:`t_1` is :math:`\int_{t_0}^{t_1}\|c'(t)\|\,dt`
(the speed measured in the base manifold's metric). For a Euclidean quadratic it has a closed form
(:func:`quadratic_arc_length`); every other curve is integrated by composite Gauss-Legendre
quadrature (:func:`gauss_legendre_length`). :func:`parameter_at_arc_length` inverts
:math:`s(t) = \int_0^t\|c'\|` by safeguarded Newton steps. The functions take the
:class:`~riemfl.manifolds.bezier.BezierCurve` whose methods of the same names call them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..backend import Array, ops_for, to_numpy
from ..errors import ParameterError

if TYPE_CHECKING:
    from .bezier import BezierCurve

__all__ = [
    "arc_length",
    "arc_length_at",
    "gauss_legendre_length",
    "parameter_at_arc_length",
    "gauss_legendre_rule",
    "quadratic_arc_length",
    "quadratic_coefficients",
    "quadratic_length_between",
    "quadratic_speed_constants",
]


def quadratic_coefficients(control_points: Array) -> tuple[Array, Array, Array]:
    r"""The quadratic Bezier curve :math:`c(t) = (1-t)^2 A + 2t(1-t) B + t^2 C` as :math:`c(t) = A +
    2t\,a + t^2 b`: returns ``(A, a, b)``, :math:`a = B - A`, :math:`b = A - 2B + C`, each
    flattened to a vector."""
    ops = ops_for(control_points)
    flat = ops.reshape(control_points, (3, -1))
    return flat[0], flat[1] - flat[0], flat[0] - 2 * flat[1] + flat[2]


def arc_length(curve: BezierCurve, t0: float = 0.0, t1: float = 1.0, panels: int = 16) -> Array:
    r""":math:`\int_{t_0}^{t_1}\|c'(t)\|\,dt`: in closed form for a Euclidean quadratic
    (:func:`quadratic_arc_length`), else by :func:`gauss_legendre_length`."""
    if curve.euclidean and curve.degree == 2:
        closed = quadratic_arc_length(curve, t0, t1)
        if closed is not None:
            return closed
    return gauss_legendre_length(curve, t0, t1, panels)


def quadratic_arc_length(curve: BezierCurve, t0: Any, t1: Any) -> Array | None:
    r"""Arc length of a Euclidean quadratic in closed form, or None for a (nearly) straight one.

    With :math:`c(t) = A + 2ta + t^2b` the speed is :math:`\|c'(t)\| = 2\sqrt{q_a t^2 + q_b t +
    q_c}`, :math:`q_a = b\cdot b`, :math:`q_b = 2a\cdot b`, :math:`q_c = a\cdot a`, and for a
    positive discriminant :math:`\Delta = 4q_aq_c - q_b^2`

    .. math::
        \int \sqrt{q_a t^2 + q_b t + q_c}\,dt = \frac{(2q_at + q_b)\sqrt{q_a t^2 + q_b t +
        q_c}}{4q_a} + \frac{\Delta}{8q_a^{3/2}}\operatorname{arsinh}\frac{2q_at +
        q_b}{\sqrt\Delta}

    (derived here). ``t0`` and ``t1`` may be arrays (then elementwise). None where :math:`q_a`
    or :math:`\Delta` is at the rounding level of the coefficients (a straight or nearly
    straight curve), where Gauss-Legendre is exact and the formula would cancel.
    """
    constants = quadratic_speed_constants(curve.control_points)
    if constants is None:
        return None
    return quadratic_length_between(constants, curve._t(t0), curve._t(t1))


def quadratic_speed_constants(control_points: Array) -> tuple[Any, Any, Any, Any] | None:
    r"""The constants :math:`(q_a, q_b, q_c, \Delta)` of the closed-form arc length of a
    Euclidean quadratic (:func:`quadratic_arc_length`), or None where :math:`q_a` or
    :math:`\Delta` is at the rounding level of the coefficients (a straight or nearly straight
    curve, where Gauss-Legendre is exact and the formula would cancel). Scalars of the control
    points' array type (the decision reads two of them: on the host once for a fixed curve)."""
    ops = ops_for(control_points)
    _, a, b = quadratic_coefficients(control_points)
    qa = ops.sum(b * b)  # speed/2 = sqrt(qa t^2 + qb t + qc)
    qb = 2 * ops.sum(a * b)
    qc = ops.sum(a * a)
    scale = ops.to_float(qa) + ops.to_float(qc) + 1e-300
    disc = 4 * qa * qc - qb * qb
    if ops.to_float(qa) <= 1e-12 * scale or ops.to_float(disc) <= 1e-8 * scale * scale:
        return None  # straight (or nearly) curves: Gauss-Legendre is exact and safe there
    return qa, qb, qc, disc


def quadratic_length_between(constants: tuple[Any, Any, Any, Any], t0: Any, t1: Any) -> Array:
    r""":math:`2\int_{t_0}^{t_1}\sqrt{q_a t^2 + q_b t + q_c}\,dt` in closed form (see
    :func:`quadratic_arc_length`), elementwise in ``t0`` and ``t1`` (arrays of one backend);
    the constants are Python floats or scalars of that backend."""
    qa, qb, qc, disc = constants
    ops = ops_for(t1)

    def antiderivative(t):
        # int sqrt(qa t^2 + qb t + qc) dt, valid for a positive discriminant 4 qa qc - qb^2
        q = ops.sqrt(qa * t * t + qb * t + qc)
        return (2 * qa * t + qb) * q / (4 * qa) + disc / (8 * qa * qa**0.5) * ops.arcsinh(
            (2 * qa * t + qb) / disc**0.5
        )

    return 2 * (antiderivative(t1) - antiderivative(t0))


def gauss_legendre_length(curve: BezierCurve, t0: float, t1: float, panels: int) -> Array:
    r""":math:`\int_{t_0}^{t_1}\|c'(t)\|\,dt` by ``panels`` equal panels of 8-point
    Gauss-Legendre quadrature (exact for a polynomial speed of degree < 16 per panel)."""
    ts, ws = gauss_legendre_rule(t0, t1, panels)
    speeds = curve.speed(ts)
    ops = ops_for(speeds)
    return ops.sum(speeds * curve._t(ws))


def gauss_legendre_rule(t0: float, t1: float, panels: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of ``panels`` equal panels of 8-point Gauss-Legendre quadrature on
    [t0, t1] (numpy float64, ``8 * panels`` each)."""
    nodes, weights = np.polynomial.legendre.leggauss(8)
    edges = np.linspace(t0, t1, panels + 1)
    half = 0.5 * (edges[1:] - edges[:-1])
    centre = 0.5 * (edges[1:] + edges[:-1])
    return (centre[:, None] + half[:, None] * nodes).ravel(), (half[:, None] * weights).ravel()


def arc_length_at(curve: BezierCurve, t: Any, panels: int = 16) -> Array:
    r""":math:`s(t) = \int_0^t \|c'\| = t\int_0^1 \|c'(t\tau)\|\,d\tau`, elementwise in t: closed
    form for a Euclidean quadratic, else Gauss-Legendre in :math:`\tau` (see
    :meth:`BezierCurve.arc_length_at`)."""
    t = curve._t(t)
    if curve.euclidean and curve.degree == 2:
        closed = quadratic_arc_length(curve, 0.0, t)
        if closed is not None:
            return closed
    taus, ws = gauss_legendre_rule(0.0, 1.0, panels)
    ops = ops_for(t)
    tt = t[..., None] * curve._t(taus)
    return t * ops.sum(curve.speed(tt) * curve._t(ws), axis=-1)


def parameter_at_arc_length(curve: BezierCurve, s: Any, tol: float = 1e-15) -> np.ndarray:
    r"""The t with :math:`s(t) = s` for every target s (numpy float64, shape of ``s``).

    Safeguarded Newton on :math:`s(t) - s` (:math:`ds/dt = \|c'(t)\|`) inside a bracket grown
    until it contains the target, all targets together (see
    :meth:`BezierCurve.parameter_at_arc_length`).
    """
    targets = np.asarray(s, dtype=np.float64)
    length = float(to_numpy(arc_length(curve)))
    if length <= 0:
        raise ParameterError("BezierCurve: the curve has zero length; no arc-length inverse")
    flat = targets.ravel()
    if flat.size == 0:
        return np.empty(targets.shape)

    def s_of(t: np.ndarray) -> np.ndarray:
        return to_numpy(arc_length_at(curve, t), np.float64)

    lo, hi = np.zeros_like(flat), np.ones_like(flat)
    s_lo, s_hi = s_of(lo), s_of(hi)
    while np.any(grow := s_lo > flat):
        lo = np.where(grow, lo - np.maximum(1.0, hi - lo), lo)
        s_lo = s_of(lo)
    while np.any(grow := s_hi < flat):
        hi = np.where(grow, hi + np.maximum(1.0, hi - lo), hi)
        s_hi = s_of(hi)
    t = lo + (hi - lo) * (flat - s_lo) / np.maximum(s_hi - s_lo, 1e-300)
    threshold = tol * np.maximum(max(1.0, length), np.abs(flat))
    for _ in range(100):
        f = s_of(t) - flat
        active = np.abs(f) > threshold
        if not active.any():
            break
        hi = np.where(active & (f > 0), t, hi)
        lo = np.where(active & (f <= 0), t, lo)
        speed = to_numpy(curve.speed(t), np.float64)
        mid = 0.5 * (lo + hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = np.where(speed > 0, t - f / speed, mid)
        step = np.where((lo < step) & (step < hi), step, mid)
        t = np.where(active, step, t)
    return t.reshape(targets.shape)

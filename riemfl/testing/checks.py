r"""One reusable check per geometric identity of the manifold contract.

Every check takes a manifold, concrete arrays (numpy or torch) and a
:class:`~riemfl.testing.config.Tolerance`, and raises :class:`AssertionError` with the manifold,
the identity and the measured discrepancy when the identity fails. They are plain functions so
they can be used from any test runner; :class:`riemfl.testing.ManifoldTests` wires them to
hypothesis.

Identities checked (the conformance kit's list, also in ``docs/custom-manifold.md``):

* points: ``random_point`` on M; ``project`` idempotent and fixing points of M;
* tangent spaces: ``to_tangent`` idempotent with tangent output; ``zero_tangent``;
* metric: symmetric, bilinear, positive, ``norm**2 == inner(u, u)``;
* retraction: :math:`R_x(0) = x`, :math:`R_x(u) \in M`, first order (Taylor slope >= 2 of
  :math:`\|R_x(tu) - x - tu\|`); ``exp`` second order (slope >= 3 of the tangential part);
  ``inverse_retract`` inverts ``retract``;
* exp/log inverse within the injectivity radius, ``dist = norm(log)``, symmetry of ``dist``;
  ``squared_dist = dist**2``; torch gradients of ``dist`` and ``squared_dist`` at coincident
  points finite, and that of ``squared_dist`` zero (to the rounding of the computed distance);
* transports tangent and linear; parallel transport isometric;
* ``egrad_to_rgrad`` against central finite differences along retraction curves;
* ``ehess_to_rhess`` (for a quadratic test function, :func:`quadratic_function`): self-adjoint
  in the metric, tangent and linear; second-order Taylor slope >= 3 along exp (or the
  retraction); the derivative of the transported Riemannian gradient by central differences;
* ``project`` returns the nearest point inside the proximal-smoothness tube (exactly for normal
  offsets, and compared against perturbed manifold points) and is 2-Lipschitz on the half tube;
* batch = loop, numpy = torch, torch autograd against finite differences, types preserved.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..backend import is_torch
from ..manifolds.base import Manifold
from .config import Tolerance, to_numpy
from .strategies import scaled_tangent, unit_ambient

__all__ = [
    "assert_close",
    "assert_same_point",
    "taylor_slope",
    "tangent_basis",
    "check_point_on_manifold",
    "check_projection",
    "check_to_tangent",
    "check_zero_tangent",
    "check_metric",
    "check_retraction",
    "check_retraction_first_order",
    "check_exp_second_order",
    "check_inverse_retraction",
    "check_exp_log",
    "check_squared_dist",
    "check_distance_gradients_at_coincident_points",
    "check_transport",
    "check_parallel_transport",
    "check_egrad_to_rgrad",
    "QuadraticFunction",
    "quadratic_function",
    "check_ehess_to_rhess_symmetric",
    "check_ehess_to_rhess_taylor",
    "check_ehess_to_rhess_gradient",
    "check_nearest_point",
    "check_projection_lipschitz",
    "check_batch_equals_loop",
    "check_backends_agree",
    "check_autograd",
    "check_autograd_at_zero",
    "check_types_preserved",
    "check_diameter",
    "check_broadcast_batch_point",
    "float32_error",
    "check_float32_accuracy",
]


# --------------------------------------------------------------------------- comparison helpers
def assert_close(actual, expected, tol: Tolerance, what: str, manifold: Manifold) -> None:
    """Assert ``|actual - expected| <= atol + rtol * max(1, |expected|)`` elementwise-max."""
    a, e = to_numpy(actual), to_numpy(expected)
    if a.shape != e.shape:
        a, e = np.broadcast_arrays(a, e)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(e))):
        raise AssertionError(f"{manifold.name}: {what}: non-finite values")
    err = float(np.max(np.abs(a - e))) if a.size else 0.0
    bound = tol.atol + tol.rtol * max(1.0, float(np.max(np.abs(e))) if e.size else 0.0)
    if err > bound:
        raise AssertionError(f"{manifold.name}: {what}: max deviation {err:.3e} > {bound:.3e}")


def assert_same_point(x, y, tol: Tolerance, what: str, manifold: Manifold) -> None:
    """Assert that two point representations are the same point (``manifold.point_gap``)."""
    gap = to_numpy(manifold.point_gap(x, y))
    scale = max(1.0, float(np.max(np.abs(to_numpy(y)))))
    bound = tol.atol + tol.rtol * scale
    if not np.all(np.isfinite(gap)) or float(np.max(gap)) > bound:
        raise AssertionError(
            f"{manifold.name}: {what}: points differ by {float(np.max(gap)):.3e} > {bound:.3e}"
        )


def _expand(values, manifold: Manifold):
    return np.reshape(values, np.shape(values) + (1,) * manifold.ndim)


def _ambient_norm(a, manifold: Manifold) -> np.ndarray:
    a = to_numpy(a)
    return np.sqrt(np.sum(a * a, axis=tuple(range(-manifold.ndim, 0))))


def taylor_slope(ts: np.ndarray, errors: np.ndarray, floor: float) -> float | None:
    """Slope of ``log(error)`` against ``log(t)``, fitted where the error is above ``floor``.

    Returns None when fewer than three errors are above the noise floor (the map is exact to
    rounding along this curve, i.e. of higher order than any slope test could show).
    """
    mask = errors > floor
    if mask.sum() < 3:
        return None
    return float(np.polyfit(np.log(ts[mask]), np.log(errors[mask]), 1)[0])


def tangent_basis(manifold: Manifold, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Euclidean-orthonormal basis of :math:`T_xM` as rows of flat vectors, shape (dim, N).

    Built from ``dim + 8`` random tangent vectors; also asserts that they span a space of
    exactly ``manifold.dim`` dimensions (so it checks the ``dim`` property).
    """
    x = to_numpy(x)
    k = manifold.dim + 8
    samples = np.stack([to_numpy(manifold.random_tangent(x, rng=rng)).ravel() for _ in range(k)])
    _, s, vt = np.linalg.svd(samples, full_matrices=False)
    rank = int(np.sum(s > 1e-8 * s[0]))
    if rank != manifold.dim:
        raise AssertionError(
            f"{manifold.name}: random tangent vectors span {rank} dimensions; dim says "
            f"{manifold.dim}"
        )
    return vt[: manifold.dim]


# --------------------------------------------------------------------------- points and tangents
def check_point_on_manifold(manifold: Manifold, x, tol: Tolerance) -> None:
    """``x`` passes ``check_point`` (used on every map's output)."""
    manifold.check_point(x, atol=max(tol.atol, manifold.default_atol(x)))


def check_projection(manifold: Manifold, a, x, tol: Tolerance) -> None:
    """``project(a)`` is on M, ``project`` is idempotent and fixes points of M."""
    p = manifold.project(a)
    check_point_on_manifold(manifold, p, tol)
    assert_same_point(manifold.project(p), p, tol, "project(project(a)) = project(a)", manifold)
    assert_same_point(manifold.project(x), x, tol, "project(x) = x for x on M", manifold)


def check_to_tangent(manifold: Manifold, x, a, tol: Tolerance) -> None:
    """``to_tangent(x, a)`` is tangent and ``to_tangent`` is idempotent."""
    t = manifold.to_tangent(x, a)
    manifold.check_tangent(x, t, atol=max(tol.atol, manifold.default_atol(x)))
    assert_close(manifold.to_tangent(x, t), t, tol, "to_tangent idempotent", manifold)
    r = manifold.random_tangent(x, rng=0)
    manifold.check_tangent(x, r, atol=max(tol.atol, manifold.default_atol(x)))


def check_zero_tangent(manifold: Manifold, x, tol: Tolerance) -> None:
    """``zero_tangent(x)`` is tangent, of norm 0, and ``R_x(0) = x``."""
    z = manifold.zero_tangent(x)
    manifold.check_tangent(x, z)
    assert_close(manifold.norm(x, z), 0.0 * to_numpy(manifold.norm(x, z)), tol, "|0|", manifold)


def check_metric(manifold: Manifold, x, u, v, w, tol: Tolerance) -> None:
    """Symmetry, bilinearity and positivity of the metric; ``norm**2 = inner(u, u)``."""
    uv, vu = manifold.inner(x, u, v), manifold.inner(x, v, u)
    assert_close(uv, vu, tol, "<u, v> = <v, u>", manifold)
    lin = manifold.inner(x, u, 2.0 * v - 3.0 * w)
    assert_close(lin, 2.0 * uv - 3.0 * manifold.inner(x, u, w), tol, "bilinearity", manifold)
    uu = to_numpy(manifold.inner(x, u, u))
    if np.any(uu < -tol.atol):
        raise AssertionError(f"{manifold.name}: <u, u> negative: {uu.min():.3e}")
    assert_close(to_numpy(manifold.norm(x, u)) ** 2, uu, tol, "|u|^2 = <u, u>", manifold)


# --------------------------------------------------------------------------- retractions, exp/log
def check_retraction(manifold: Manifold, x, u, tol: Tolerance) -> None:
    """:math:`R_x(0) = x` and :math:`R_x(u) \\in M`."""
    assert_same_point(manifold.retract(x, manifold.zero_tangent(x)), x, tol, "R_x(0)", manifold)
    check_point_on_manifold(manifold, manifold.retract(x, u), tol)


_TAYLOR_TS = np.logspace(-3.5, -1.5, 9)


def _fitted_slope(errors, x, scale: float = 0.0, window: int = 0) -> float | None:
    """:func:`taylor_slope` over :data:`_TAYLOR_TS` above the rounding floor, which the size of
    ``x`` or ``scale`` sets (whichever is larger); with ``window``, over that many of the
    smallest steps above the floor only."""
    size = max(1.0, float(np.max(np.abs(to_numpy(x)))), scale)
    floor = 1e3 * np.finfo(np.float64).eps * size
    ts = _TAYLOR_TS
    if window:
        kept = np.flatnonzero(errors > floor)[:window]
        ts, errors = ts[kept], errors[kept]
    return taylor_slope(ts, errors, floor)


def _norms(vectors: Sequence[np.ndarray]) -> np.ndarray:
    return np.array([float(np.sqrt(np.sum(v * v))) for v in vectors])


def _check_slope(
    manifold: Manifold, remainder: Callable[[float], np.ndarray], x, order: float, what: str
) -> None:
    r"""Assert that the Taylor remainder :math:`r(t)` (a vector) is :math:`O(t^p)`, p = ``order``.

    First the slope of :math:`\|r(t)\|` over :data:`_TAYLOR_TS`, which passes at >= p - 0.25
    (the fit's noise). That fit assumes the lowest term dominates over all the steps, which fails
    where its coefficient is small beside the next one's. Beside the inflection point of a
    curve, the normal remainder of its exp, :math:`\tfrac12\kappa t^2 + \tfrac16\kappa' t^3 +
    \dots` (unit speed), vanishes near :math:`t = -3\kappa/\kappa'`, inside the steps, and the
    tangential one, :math:`-\tfrac16\kappa^2 t^3 - \tfrac18\kappa\kappa' t^4 - \tfrac1{40}
    \kappa'^2 t^5 + \dots` (to leading order in a small :math:`\kappa`, with :math:`\kappa''`
    neglected), dips 16-fold near :math:`t = -2.5\kappa/\kappa'`: the fit gives a slope below
    p for remainders exact to rounding. Terms of consecutive degree have opposite parity, so the
    check then splits r into its even and odd parts, :math:`(r(t) \pm r(-t))/2`, each a series
    in every other power of t (the terms that cancelled sit in different parts), and passes if
    each part's slope, fitted over the four smallest steps above rounding, is >= p - 0.25. A
    term of degree k < p lies in the part of k's parity and gives it slope k, so a map that is
    not of order p fails the fit of the part as it fails that of the whole. A part can cancel
    within itself only where its lowest coefficient is below :math:`t^2 \le 10^{-3}` times the
    next over the steps.

    The floor of :func:`_fitted_slope`, :math:`10^3\,\varepsilon\max(1, |x|)`: each
    :math:`r(\pm t)` is a difference of computed points, accurate to a few
    :math:`\varepsilon\,|x|` for a backward-stable map (the cubic Bezier graph's: 4
    :math:`\varepsilon\,|x|` against a 40-digit reference), and so are the half sum and
    difference; the floor leaves a margin of 100 or more above that.
    """
    plus = [remainder(t) for t in _TAYLOR_TS]
    errors = _norms(plus)
    slope = _fitted_slope(errors, x)
    if slope is None or slope >= order - 0.25:
        return
    minus = [remainder(-t) for t in _TAYLOR_TS]
    parts = {
        "even": _norms([(p + m) / 2 for p, m in zip(plus, minus, strict=True)]),
        "odd": _norms([(p - m) / 2 for p, m in zip(plus, minus, strict=True)]),
    }
    slopes = {name: _fitted_slope(part, x, window=4) for name, part in parts.items()}
    failed = {name: s for name, s in slopes.items() if s is not None and s < order - 0.25}
    if failed:
        raise AssertionError(
            f"{manifold.name}: {what}: Taylor slope {slope:.2f} < {order} "
            f"(errors {errors[0]:.2e} .. {errors[-1]:.2e}); slope of its "
            + ", ".join(f"{name} part {s:.2f}" for name, s in failed.items())
        )


def check_retraction_first_order(manifold: Manifold, x: np.ndarray, u: np.ndarray) -> None:
    """:math:`R_x(tu) - x - tu = O(t^2)` (slope >= 2 on a log-log plot, see
    :func:`_check_slope`; float64 only)."""

    def remainder(t):
        return to_numpy(manifold.retract(x, t * u)) - x - t * u

    _check_slope(manifold, remainder, x, 2.0, "retraction is not first order")


def check_exp_second_order(manifold: Manifold, x: np.ndarray, u: np.ndarray) -> None:
    r"""Tangential part of :math:`\mathrm{Exp}_x(tu) - x - tu` is :math:`O(t^3)` (zero
    acceleration: exp is a second-order retraction), and the whole is :math:`O(t^2)` (see
    :func:`_check_slope`; float64 only)."""

    def remainder(t):
        return to_numpy(manifold.exp(x, t * u)) - x - t * u

    def tangential(t):
        return to_numpy(manifold.to_tangent(x, remainder(t)))

    _check_slope(manifold, tangential, x, 3.0, "exp is not second order")
    _check_slope(manifold, remainder, x, 2.0, "exp is not first order")


def check_inverse_retraction(manifold: Manifold, x, u, tol: Tolerance) -> None:
    """``inverse_retract(x, retract(x, u)) = u`` and ``retract(x, inverse_retract(x, y)) = y``."""
    y = manifold.retract(x, u)
    back = manifold.inverse_retract(x, y)
    manifold.check_tangent(x, back, atol=max(tol.atol, manifold.default_atol(x)) * 10)
    assert_close(back, u, tol, "inverse_retract(x, retract(x, u)) = u", manifold)
    assert_same_point(manifold.retract(x, back), y, tol, "retract(x, inverse_retract)", manifold)


def check_exp_log(manifold: Manifold, x, u, tol: Tolerance) -> None:
    """Exp and log are inverse within the injectivity radius; dist is the norm of log."""
    y = manifold.exp(x, u)
    check_point_on_manifold(manifold, y, tol)
    v = manifold.log(x, y)
    assert_close(v, u, tol, "log(x, exp(x, u)) = u", manifold)
    assert_same_point(manifold.exp(x, v), y, tol, "exp(x, log(x, y)) = y", manifold)
    assert_close(manifold.log(x, x), 0.0 * to_numpy(u), tol, "log(x, x) = 0", manifold)
    d = manifold.dist(x, y)
    assert_close(d, manifold.norm(x, u), tol, "dist(x, exp(x, u)) = |u|", manifold)
    assert_close(manifold.dist(y, x), d, tol, "dist symmetric", manifold)
    assert_close(d, manifold.norm(x, v), tol, "dist = |log|", manifold)


def check_squared_dist(manifold: Manifold, x, y, tol: Tolerance) -> None:
    """``squared_dist(x, y) = dist(x, y)**2`` (within ``tol``), symmetric, non-negative, and
    ``squared_dist(x, x) = 0``."""
    d = to_numpy(manifold.dist(x, y))
    sd = manifold.squared_dist(x, y)
    assert_close(sd, d * d, tol, "squared_dist(x, y) = dist(x, y)^2", manifold)
    assert_close(manifold.squared_dist(y, x), sd, tol, "squared_dist symmetric", manifold)
    if np.any(to_numpy(sd) < 0):
        raise AssertionError(f"{manifold.name}: squared_dist negative: {to_numpy(sd).min():.3e}")
    zero = manifold.squared_dist(x, x)
    assert_close(zero, 0.0 * to_numpy(zero), tol, "squared_dist(x, x) = 0", manifold)


def _gradients_at_coincident_points(manifold: Manifold, x: np.ndarray, method: str):
    """(value, gradient in x, gradient in y) of ``method(x, y)`` at ``y = x`` (torch float64,
    as numpy; an argument the map does not read has gradient 0)."""
    import torch

    first = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    second = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    out = getattr(manifold, method)(first, second)
    grads = torch.autograd.grad(out.sum(), (first, second), allow_unused=True)
    gx, gy = (np.zeros(x.shape) if g is None else g.numpy() for g in grads)
    if not (np.all(np.isfinite(gx)) and np.all(np.isfinite(gy))):
        raise AssertionError(
            f"{manifold.name}.{method}: the torch gradient is not finite at y = x (a square "
            f"root of a vanishing argument: use ops.safe_sqrt, or a form without the root)"
        )
    return np.asarray(out.detach().numpy(), dtype=np.float64), gx, gy


def check_distance_gradients_at_coincident_points(
    manifold: Manifold, x: np.ndarray, rng: np.random.Generator
) -> None:
    r"""torch gradients of ``dist`` and ``squared_dist`` at :math:`y = x` (float64).

    * Both are finite (:math:`d` is not differentiable at :math:`y = x`, where a square root
      of a vanishing argument gives ``0 * inf = NaN`` unless guarded).
    * :math:`d^2` has the zero gradient there. The computed distance of x to itself is a
      rounding residual :math:`\rho` (often exactly 0), and :math:`d^2` is smooth, so along
      tangent directions :math:`(v, w)` of x and y its derivative is :math:`2\rho\,
      \mathrm{D}d[(v, w)]`, at most :math:`2\rho(\|v\|_x + \|w\|_x)` (d is 1-Lipschitz in the
      Riemannian norm); the check allows twice that (the rounding of :math:`\rho` and of the
      derivative), which is 0 where :math:`\rho = 0`. (Normal directions of an embedded
      manifold are not constrained: the map need not be defined off M.)
    * :math:`d` has the zero subgradient wherever the computed distance is exactly 0.
    """
    x = np.asarray(x, dtype=np.float64)
    axes = tuple(range(-manifold.ndim, 0))
    sd, gx, gy = _gradients_at_coincident_points(manifold, x, "squared_dist")
    v, w = (to_numpy(manifold.random_tangent(x, rng=rng)) for _ in range(2))
    derivative = np.abs(np.sum(gx * v, axis=axes) + np.sum(gy * w, axis=axes))
    lengths = to_numpy(manifold.norm(x, v)) + to_numpy(manifold.norm(x, w))
    bound = 4.0 * np.sqrt(np.maximum(sd, 0.0)) * lengths
    if np.any(derivative > bound):
        worst = int(np.argmax(derivative - bound))
        raise AssertionError(
            f"{manifold.name}.squared_dist: the torch gradient at y = x is not 0: its derivative "
            f"along tangent directions (v, w) is {float(derivative.flat[worst]):.3e} > "
            f"4 sqrt(squared_dist(x, x)) (|v| + |w|) = {float(bound.flat[worst]):.3e}"
        )
    d, gx, gy = _gradients_at_coincident_points(manifold, x, "dist")
    zero = np.reshape(d == 0, d.shape + (1,) * manifold.ndim)
    if np.any(zero & ((gx != 0) | (gy != 0))):
        raise AssertionError(
            f"{manifold.name}.dist: the computed distance of x to itself is 0 but its torch "
            f"gradient is not (the zero subgradient expected)"
        )


def check_transport(manifold: Manifold, x, y, u, v, tol: Tolerance) -> None:
    """Vector transport lands in :math:`T_yM` and is linear."""
    tu = manifold.transport(x, y, u)
    manifold.check_tangent(y, tu, atol=max(tol.atol, manifold.default_atol(y)) * 10)
    lin = manifold.transport(x, y, 2.0 * u - 3.0 * v)
    assert_close(
        lin,
        2.0 * to_numpy(tu) - 3.0 * to_numpy(manifold.transport(x, y, v)),
        tol,
        "transport linear",
        manifold,
    )


def check_parallel_transport(manifold: Manifold, x, y, u, v, tol: Tolerance) -> None:
    """Parallel transport: tangent at y, isometric, identity from x to x."""
    pu, pv = manifold.parallel_transport(x, y, u), manifold.parallel_transport(x, y, v)
    manifold.check_tangent(y, pu, atol=max(tol.atol, manifold.default_atol(y)) * 10)
    assert_close(
        manifold.inner(y, pu, pv),
        manifold.inner(x, u, v),
        tol,
        "<P u, P v>_y = <u, v>_x (isometry)",
        manifold,
    )
    assert_close(manifold.parallel_transport(x, x, u), u, tol, "P_{x->x} = id", manifold)


def check_retraction_transport(manifold: Manifold, x, u, v, tol: Tolerance) -> None:
    r"""Vector transport by differentiated retraction, :math:`\mathcal T_u(v) = \mathrm D
    R_x(u)[v]`: tangent at :math:`R_x(u)`, linear in v, and :math:`\mathcal T_0 = \mathrm{id}`
    (:math:`R_x(tv) = x + tv + O(t^2)`)."""
    y = manifold.retract(x, u)
    tv = manifold.retraction_transport(x, u, v)
    manifold.check_tangent(y, tv, atol=max(tol.atol, manifold.default_atol(y)) * 10)
    assert_close(
        manifold.retraction_transport(x, u, 2.0 * v - 3.0 * u),
        2.0 * to_numpy(tv) - 3.0 * to_numpy(manifold.retraction_transport(x, u, u)),
        tol,
        "retraction_transport linear",
        manifold,
    )
    zero = manifold.zero_tangent(x)
    assert_close(manifold.retraction_transport(x, zero, v), v, tol, "T_0 = id", manifold)


def check_retraction_transport_first_order(
    manifold: Manifold, x: np.ndarray, u: np.ndarray, v: np.ndarray
) -> None:
    r""":math:`R_x(u + tv) - R_x(u) - t\,\mathcal T_u(v) = O(t^2)`: the transport is the
    derivative of the retraction along v (slope >= 2, see :func:`_check_slope`; float64)."""
    y = to_numpy(manifold.retract(x, u))
    tv = to_numpy(manifold.retraction_transport(x, u, v))

    def remainder(t):
        return to_numpy(manifold.retract(x, u + t * v)) - y - t * tv

    _check_slope(manifold, remainder, y, 2.0, "retraction_transport is not D R_x(u)")


# --------------------------------------------------------------------------- gradients
def check_egrad_to_rgrad(manifold: Manifold, x: np.ndarray, v: np.ndarray, rng) -> None:
    """Riemannian gradient of a random smooth function against finite differences.

    :math:`f(a) = \\langle C, a\\rangle + \\tfrac12\\langle D \\circ a, a\\rangle`; then
    :math:`\\frac{d}{dt} f(R_x(tv))|_{t=0} = \\langle \\mathrm{grad} f(x), v\\rangle_x`, the
    derivative taken by central differences (float64).
    """
    c = rng.standard_normal(x.shape)
    d = rng.standard_normal(x.shape)

    def f(a):
        a = to_numpy(a)
        return float(np.sum(c * a) + 0.5 * np.sum(d * a * a))

    rgrad = manifold.egrad_to_rgrad(x, c + d * x)
    manifold.check_tangent(x, rgrad)
    h = 1e-5
    fd = (f(manifold.retract(x, h * v)) - f(manifold.retract(x, -h * v))) / (2 * h)
    exact = float(to_numpy(manifold.inner(x, rgrad, v)))
    scale = float(np.sqrt(np.sum(c * c)) + np.sqrt(np.sum((d * x) ** 2))) * float(
        np.sqrt(np.sum(v * v))
    )
    if abs(fd - exact) > 1e-6 * max(1.0, scale):
        raise AssertionError(
            f"{manifold.name}: <egrad_to_rgrad(x, g), v> = {exact:.8e} but the finite-difference "
            f"derivative along R_x(tv) is {fd:.8e}"
        )


# --------------------------------------------------------------------------- second order
@dataclass(frozen=True)
class QuadraticFunction:
    r"""The test function of the Hessian checks, :math:`\bar f(a) = \langle c, a\rangle +
    \tfrac12\langle a, B a\rangle` on the ambient space, B symmetric on the flattened
    coordinates: :math:`\nabla\bar f(a) = c + Ba` and :math:`\nabla^2\bar f(a)[u] = Bu` in
    closed form. numpy float64, batched over leading dimensions (:func:`quadratic_function`
    draws one).

    Attributes
    ----------
    c : numpy.ndarray
        Shape ``point_shape``.
    b : numpy.ndarray
        Symmetric, shape ``(N, N)`` with N the number of ambient coordinates.
    """

    c: np.ndarray
    b: np.ndarray

    def _flat(self, a) -> np.ndarray:
        a = to_numpy(a)
        return np.reshape(a, a.shape[: a.ndim - self.c.ndim] + (self.c.size,))

    def _shaped(self, flat: np.ndarray) -> np.ndarray:
        return np.reshape(flat, flat.shape[:-1] + self.c.shape)

    def cost(self, a) -> np.ndarray:
        r""":math:`\bar f(a)`, one value per point."""
        fa = self._flat(a)
        return fa @ self.c.ravel() + 0.5 * np.sum(fa * (fa @ self.b), axis=-1)

    def egrad(self, a) -> np.ndarray:
        """The Euclidean gradient :math:`c + Ba`."""
        return self._shaped(self.c.ravel() + self._flat(a) @ self.b)

    def ehess(self, a, u) -> np.ndarray:
        """The Euclidean Hessian-vector product :math:`Bu` (the same at every a)."""
        return self._shaped(self._flat(u) @ self.b) + 0.0 * to_numpy(a)


def quadratic_function(
    shape: tuple[int, ...], rng: np.random.Generator, *, rotation_invariant: bool = False
) -> QuadraticFunction:
    r"""A random :class:`QuadraticFunction` on the ambient space of points of ``shape``.

    Gaussian c and :math:`B = (W + W^\top)/2`, W Gaussian. With ``rotation_invariant`` (points
    that are n x p matrices): :math:`\bar f(X) = \tfrac12\mathrm{tr}(X^\top S X)`, S symmetric
    n x n, unchanged by :math:`X \mapsto XQ` for orthogonal Q, so a function of the column
    space (of a point of the Grassmann quotient); the Hessian of a quotient is only defined for
    such functions.
    """
    shape = tuple(int(s) for s in shape)
    size = math.prod(shape)
    if rotation_invariant:
        if len(shape) != 2:
            raise ValueError(f"rotation_invariant needs matrix points, got shape {shape}")
        w = rng.standard_normal((shape[0], shape[0]))
        return QuadraticFunction(np.zeros(shape), np.kron(0.5 * (w + w.T), np.eye(shape[1])))
    w = rng.standard_normal((size, size))
    return QuadraticFunction(rng.standard_normal(shape), 0.5 * (w + w.T))


def check_ehess_to_rhess_symmetric(manifold: Manifold, x, u, v, g, hu, hv, tol: Tolerance) -> None:
    r"""The Riemannian Hessian of a function is self-adjoint in the metric, tangent and linear.

    ``g`` is the Euclidean gradient :math:`\nabla\bar f(x)` and ``hu``, ``hv`` the Euclidean
    Hessian-vector products :math:`\nabla^2\bar f(x)[u]`, :math:`\nabla^2\bar f(x)[v]` of
    one function (e.g. a :class:`QuadraticFunction`). Checks :math:`\langle \operatorname{Hess}
    f(x)[u], v\rangle_x = \langle u, \operatorname{Hess} f(x)[v]\rangle_x`, that the result
    is tangent, and that the map is linear in :math:`(h, u)`.
    """
    hess_u = manifold.ehess_to_rhess(x, g, hu, u)
    hess_v = manifold.ehess_to_rhess(x, g, hv, v)
    manifold.check_tangent(x, hess_u, atol=max(tol.atol, manifold.default_atol(x)) * 10)
    left, right = manifold.inner(x, hess_u, v), manifold.inner(x, u, hess_v)
    assert_close(left, right, tol, "<Hess[u], v> = <u, Hess[v]> (self-adjoint)", manifold)
    both = manifold.ehess_to_rhess(x, g, 2.0 * hu - 3.0 * hv, 2.0 * u - 3.0 * v)
    expected = 2.0 * to_numpy(hess_u) - 3.0 * to_numpy(hess_v)
    assert_close(both, expected, tol, "Hess f(x) linear", manifold)


def _second_order_curve(manifold: Manifold) -> tuple[Callable, str]:
    if manifold.supports("exp")[0]:
        return manifold.exp, "exp"
    return manifold.retract, "the retraction (no exp: it must be second order)"


def check_ehess_to_rhess_taylor(
    manifold: Manifold, x: np.ndarray, u: np.ndarray, function: QuadraticFunction
) -> None:
    r"""The second-order Taylor expansion of f along exp holds to :math:`O(t^3)` (float64).

    With :math:`c(t) = \mathrm{Exp}_x(tu)` (or :math:`R_x(tu)` where the manifold has no exp;
    the retraction must then be second order), the error

    .. math::
        e(t) = \big|f(c(t)) - f(x) - t\langle \operatorname{grad} f(x), u\rangle_x
        - \tfrac{t^2}{2}\langle \operatorname{Hess} f(x)[u], u\rangle_x\big|

    has Taylor slope 3 on a log-log plot (pymanopt's ``check_hessian`` fits the same slope
    along its retraction), fitted over the four smallest steps above rounding; the check accepts
    >= 2.75 (the fit's noise). A wrong Hessian
    leaves a :math:`t^2` term: slope 2. Where the :math:`t^3` coefficient happens to be small, the
    :math:`t^4` term can cancel it within the steps (or rounding hide the small steps) and bend the
    fit below 3. The check then looks at the even part :math:`|f(c(t)) + f(c(-t)) - 2f(x) -
    t^2\langle \operatorname{Hess} f(x)[u], u\rangle_x|`, which has no odd terms (the gradient
    drops out): :math:`O(t^4)` for the right Hessian, :math:`t^2` times the error of a wrong one.
    It passes if that slope is >= 3.5.
    """
    curve, along = _second_order_curve(manifold)
    g = function.egrad(x)
    f0 = float(function.cost(x))
    slope1 = float(to_numpy(manifold.inner(x, manifold.egrad_to_rgrad(x, g), u)))
    hess_u = manifold.ehess_to_rhess(x, g, function.ehess(x, u), u)
    slope2 = float(to_numpy(manifold.inner(x, hess_u, u)))

    def f(t: float) -> float:
        return float(function.cost(to_numpy(curve(x, t * u))))

    ts = _TAYLOR_TS
    errors = np.array([abs(f(t) - f0 - t * slope1 - 0.5 * t * t * slope2) for t in ts])
    scale = max(abs(f0), abs(slope1), abs(slope2))
    slope = _fitted_slope(errors, x, scale, window=4)
    if slope is None or slope >= 2.75:
        return
    even = np.array([abs(f(t) + f(-t) - 2.0 * f0 - t * t * slope2) for t in ts])
    even_slope = _fitted_slope(even, x, scale, window=4)
    if even_slope is None or even_slope >= 3.5:
        return
    raise AssertionError(
        f"{manifold.name}: f(c(t)) - (f(x) + t <grad, u> + t^2/2 <Hess[u], u>) along {along} is "
        f"not O(t^3): Taylor slope {slope:.2f} < 3 (errors {errors[0]:.2e} .. {errors[-1]:.2e}); "
        f"its even part has slope {even_slope if even_slope is None else round(even_slope, 2)} "
        "(4 expected)"
    )


def check_ehess_to_rhess_gradient(
    manifold: Manifold, x: np.ndarray, u: np.ndarray, function: QuadraticFunction
) -> None:
    r""":math:`\operatorname{Hess} f(x)[u] = \frac{d}{dt}\mathcal T_{c(t)\to x}
    \operatorname{grad} f(c(t))\big|_{t=0}`, by central differences (float64).

    Where the manifold has exp and parallel transport, :math:`c(t) = \mathrm{Exp}_x(tu)` and
    :math:`\mathcal T` the parallel transport back to x: this is the definition of the
    Levi-Civita connection, for any metric. Otherwise c is the retraction and
    :math:`\mathcal T` the manifold's ``transport``, which is right when the transport's
    derivative at t = 0 is the connection: the projection onto :math:`T_xM` of a Riemannian
    submanifold of a Euclidean space (the covariant derivative is the projected derivative,
    whatever the curve). The finite-difference Hessian of Boumal 2015 is the one-sided version of
    this quotient.
    """
    if manifold.supports("exp")[0] and manifold.supports("parallel_transport")[0]:
        curve, back, how = manifold.exp, manifold.parallel_transport, "exp, parallel transport"
    else:
        curve, back, how = manifold.retract, manifold.transport, "retraction, transport"

    def transported_gradient(s: float) -> np.ndarray:
        y = curve(x, s * u)
        return to_numpy(back(y, x, manifold.egrad_to_rgrad(y, function.egrad(y))))

    h = 1e-5
    fd = (transported_gradient(h) - transported_gradient(-h)) / (2 * h)
    exact = to_numpy(manifold.ehess_to_rhess(x, function.egrad(x), function.ehess(x, u), u))
    err = float(np.max(np.abs(fd - exact)))
    scale = max(1.0, float(np.max(np.abs(exact))), float(np.max(np.abs(function.egrad(x)))))
    if err > 1e-6 * scale:
        raise AssertionError(
            f"{manifold.name}: ehess_to_rhess differs from the derivative of the transported "
            f"Riemannian gradient ({how}; central differences) by {err:.3e} > {1e-6 * scale:.1e}"
        )


# --------------------------------------------------------------------------- metric projection
def check_nearest_point(manifold: Manifold, x: np.ndarray, fraction: float, rng) -> None:
    """P_M returns the nearest point inside the proximal-smoothness tube (float64).

    1. Normal offsets: with :math:`\\nu` a unit Euclidean normal at x and
       :math:`s = ` ``fraction`` :math:`\\cdot \\hat\\gamma < \\hat\\gamma`,
       :math:`P_M(x + s\\nu) = x`.
    2. For a random ambient point a in the tube, :math:`\\|a - P_M(a)\\| \\le \\|a - y\\|` for
       manifold points y near :math:`P_M(a)` (retractions of small tangent vectors) and random y.
    """
    tol = Tolerance(1e-8, 1e-8)
    gamma = manifold.reach
    reach = gamma if math.isfinite(gamma) else 1.0
    basis = tangent_basis(manifold, x, rng)
    n_ambient = basis.shape[1]
    if manifold.dim < n_ambient:
        w = rng.standard_normal(n_ambient)
        nu = w - basis.T @ (basis @ w)
        nu = np.reshape(nu / np.linalg.norm(nu), x.shape)
        a = x + fraction * reach * nu
        what = "P_M(x + s nu) = x for a normal offset inside the tube"
        assert_same_point(manifold.project(a), x, tol.scaled(1 / (1 - fraction)), what, manifold)
    a = x + fraction * reach * unit_ambient(manifold, (), rng)
    p = to_numpy(manifold.project(a))
    d_p = float(_ambient_norm(a - p, manifold))
    for k in range(24):
        if k < 16:
            radius = rng.uniform(0.0, 0.5) * min(reach, 1.0)
            y = to_numpy(manifold.retract(p, scaled_tangent(manifold, p, radius, rng)))
        else:
            y = manifold.random_point(rng=rng)
        d_y = float(_ambient_norm(a - y, manifold))
        if d_y < d_p - 1e-10 * max(1.0, d_p):
            raise AssertionError(
                f"{manifold.name}: P_M(a) is not the nearest point: |a - P_M(a)| = {d_p:.10e} but "
                f"a manifold point is at {d_y:.10e}"
            )


def check_projection_lipschitz(manifold: Manifold, a, b) -> None:
    """:math:`\\|P_M(a) - P_M(b)\\| \\le 2\\|a - b\\|` for a, b in the half tube (float64)."""
    pa, pb = to_numpy(manifold.project(a)), to_numpy(manifold.project(b))
    lhs = float(_ambient_norm(pa - pb, manifold))
    rhs = 2.0 * float(_ambient_norm(to_numpy(a) - to_numpy(b), manifold))
    if lhs > rhs * (1 + 1e-9) + 1e-12:
        raise AssertionError(
            f"{manifold.name}: P_M is not 2-Lipschitz on the half tube: |P(a) - P(b)| = "
            f"{lhs:.6e} > 2|a - b| = {rhs:.6e}"
        )


# --------------------------------------------------------------------------- implementation checks
def _stack_like(items: Sequence, like):
    if is_torch(like):
        import torch

        return torch.stack(list(items))
    return np.stack(items)


def check_batch_equals_loop(
    manifold: Manifold, method: str, args: Sequence, batched: Sequence[bool], tol: Tolerance
) -> None:
    """A batched call equals the stack of per-element calls.

    ``batched[i]`` says whether ``args[i]`` carries the leading batch axis (others broadcast).
    """
    fn = getattr(manifold, method)
    out = fn(*args)
    size = next(a.shape[0] for a, b in zip(args, batched, strict=True) if b)
    loop = [
        fn(*(a[i] if b else a for a, b in zip(args, batched, strict=True))) for i in range(size)
    ]
    assert_close(out, _stack_like(loop, out), tol, f"batched {method} = loop", manifold)


def check_backends_agree(manifold: Manifold, method: str, args: Sequence, tol: Tolerance) -> None:
    """numpy float64 and torch float64 give the same result."""
    import torch

    out_np = getattr(manifold, method)(*[np.asarray(a, dtype=np.float64) for a in args])
    out_t = getattr(manifold, method)(*[torch.as_tensor(np.asarray(a)) for a in args])
    if not is_torch(out_t) or not isinstance(out_np, np.ndarray | np.floating):
        raise AssertionError(f"{manifold.name}.{method}: output type does not follow the input")
    assert_close(out_t, out_np, tol, f"{method}: torch = numpy", manifold)


def check_autograd(
    manifold: Manifold, method: str, args: Sequence, roles: Sequence[str], rng
) -> None:
    r"""torch autograd through ``method`` matches central finite differences (float64).

    A random linear functional of the output is differentiated by autograd and compared with its
    central finite-difference derivative along a random direction in every input. Arguments with
    role ``"point"`` move along retraction curves :math:`R_x(\pm h d)` with d tangent (the maps
    are only defined on M); the others move in straight lines.
    """
    import torch

    inputs = [torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=True) for a in args]
    out = getattr(manifold, method)(*inputs)
    weights = torch.as_tensor(rng.standard_normal(tuple(out.shape)))
    grads = torch.autograd.grad((weights * out).sum(), inputs, allow_unused=True)
    for g in grads:
        if g is not None and not bool(torch.isfinite(g).all()):
            raise AssertionError(f"{manifold.name}.{method}: autograd gradient is not finite")
    directions = [
        np.asarray(manifold.random_tangent(a, rng=rng))
        if role == "point"
        else rng.standard_normal(np.shape(a))
        for a, role in zip(args, roles, strict=True)
    ]
    auto = sum(
        float((g * torch.as_tensor(d)).sum())
        for g, d in zip(grads, directions, strict=True)
        if g is not None
    )

    def value(step):
        moved = [
            manifold.retract(a, step * d) if role == "point" else np.asarray(a) + step * d
            for a, d, role in zip(args, directions, roles, strict=True)
        ]
        with torch.no_grad():
            res = getattr(manifold, method)(*[torch.as_tensor(m) for m in moved])
        return float((weights * res).sum())

    # Central differences err by O(h^2) (truncation) plus e / h, where e is the accuracy of the
    # map's value: rounding for closed forms, but the solver's tolerance for iterative maps
    # (Stiefel's log stops within ~1e-11, so at h = 1e-6 the quotient is off by ~1e-5, and where
    # it lands depends on the BLAS kernel). The derivative is right when it matches at either of
    # two steps, one small (truncation-bound) and one larger (noise-bound); a wrong derivative
    # matches at neither.
    fds = [(value(h) - value(-h)) / (2 * h) for h in (1e-6, 1e-4)]
    if all(abs(fd - auto) > 1e-5 * max(1.0, abs(fd)) for fd in fds):
        raise AssertionError(
            f"{manifold.name}.{method}: autograd directional derivative {auto:.8e} differs from "
            f"the finite differences {fds[0]:.8e} (h = 1e-6) and {fds[1]:.8e} (h = 1e-4)"
        )


def check_autograd_at_zero(manifold: Manifold, x: np.ndarray) -> None:
    """Gradients are finite where the textbook formulas divide by zero.

    ``retract``/``exp`` at ``u = 0`` and ``inverse_retract``/``log`` at ``y = x`` (``sqrt`` of a
    zero norm inside ``where`` gives ``0 * inf = NaN`` gradients unless guarded).
    """
    import torch

    for method, second in (
        ("retract", "zero"),
        ("exp", "zero"),
        ("inverse_retract", "x"),
        ("log", "x"),
    ):
        if not manifold.supports(method)[0]:
            continue
        base = torch.as_tensor(x)
        arg = torch.zeros_like(base) if second == "zero" else base.clone()
        arg.requires_grad_(True)
        out = getattr(manifold, method)(base, arg)
        (grad,) = torch.autograd.grad(out.sum(), arg)
        if not bool(torch.isfinite(grad).all()):
            raise AssertionError(
                f"{manifold.name}.{method}: gradient is not finite at "
                f"{'u = 0' if second == 'zero' else 'y = x'}"
            )


def check_types_preserved(manifold: Manifold, method: str, args: Sequence) -> None:
    """The output has the input's array type and dtype (and torch device)."""
    out = getattr(manifold, method)(*args)
    ref = args[0]
    same_type = type(out) is type(ref) or (
        isinstance(ref, np.ndarray) and isinstance(out, np.ndarray | np.floating)
    )
    if not same_type or str(out.dtype) != str(ref.dtype):
        raise AssertionError(
            f"{manifold.name}.{method}: input {type(ref).__name__}[{ref.dtype}] gave "
            f"{type(out).__name__}[{out.dtype}]"
        )
    if hasattr(ref, "device") and out.device != ref.device:
        raise AssertionError(f"{manifold.name}.{method}: device {ref.device} -> {out.device}")


def check_diameter(manifold: Manifold, x, y) -> None:
    """Point gaps never exceed the declared diameter."""
    gap = float(np.max(to_numpy(manifold.point_gap(x, y))))
    if gap > manifold.diameter * (1 + 1e-9):
        raise AssertionError(
            f"{manifold.name}: two points are {gap:.6e} apart, beyond diameter {manifold.diameter}"
        )


def check_broadcast_batch_point(manifold: Manifold, method: str, args: Sequence, tol) -> None:
    """A batch of base points against single other arguments: the result has the broadcast
    batch shape and equals the per-point calls (``args`` single, unbatched arguments)."""
    batch = _stack_like([args[0]] * 3, args[0])
    fn = getattr(manifold, method)
    out = fn(batch, *args[1:])
    single = fn(*args)
    shape = (3,) + tuple(single.shape)
    if tuple(out.shape) != shape:
        raise AssertionError(
            f"{manifold.name}.{method}: a batch of 3 base points against single other arguments "
            f"gave shape {tuple(out.shape)}; expected {shape}"
        )
    assert_close(out, _stack_like([single] * 3, single), tol, f"broadcast {method}", manifold)


def float32_error(manifold: Manifold, method: str, args: Sequence, backend: str) -> float:
    """Error of ``method`` in float32, in units of float32's eps, relative to max(1, |result|).

    The reference is the float64 call on the float32-rounded arguments, so only the map's own
    rounding is measured (not the conditioning of the rounded input).
    """
    from .config import Config

    low, high = Config(backend, "float32"), Config(backend, "float64")
    rounded = [np.asarray(a, dtype=np.float32) for a in args]
    out = to_numpy(getattr(manifold, method)(*[low.convert(a) for a in rounded]))
    ref = to_numpy(getattr(manifold, method)(*[high.convert(a) for a in rounded]))
    scale = max(1.0, float(np.max(np.abs(ref))) if ref.size else 0.0)
    err = float(np.max(np.abs(out - ref))) if ref.size else 0.0
    return err / (scale * float(np.finfo(np.float32).eps))


def check_float32_accuracy(
    manifold: Manifold, method: str, args: Sequence, backend: str, ulps: float
) -> None:
    """``method`` in float32 agrees with float64 to ``ulps`` float32 eps (see
    :func:`float32_error`; the kit's table :data:`riemfl.testing.config.FLOAT32_EPS_MULTIPLES`)."""
    err = float32_error(manifold, method, args, backend)
    if not err <= ulps:
        raise AssertionError(
            f"{manifold.name}.{method} ({backend} float32) is off the float64 result by "
            f"{err:.1f} float32 eps (relative to max(1, |result|)); the kit allows {ulps:g}"
        )

r"""Elementary functions of a squared argument :math:`\lambda = t^2 \ge 0`, autograd-safe.

The exponential and logarithm maps of the sphere, the Grassmannian and the hyperboloid are
analytic in :math:`t^2`, but the textbook formulas go through :math:`t = \sqrt{\lambda}`, whose
derivative is infinite at 0; torch then produces ``0 * inf = NaN`` gradients at ``u = 0`` or
``y = x`` even through a ``where`` that selects a Taylor branch. Every function here evaluates the
Taylor series below a threshold and feeds the direct formula a *safe* argument there, so values
are accurate to rounding and gradients are finite everywhere, including at 0.

Each function takes an array of :math:`\lambda` (numpy or torch) and has a derivative companion
``d_<name>`` (used by :func:`riemfl.linalg.sym_function` for matrix arguments). They are public:
use them in your own manifolds (see ``docs/custom-manifold.md``).
"""

from __future__ import annotations

from ..backend import NUMPY, Array, ops_for

__all__ = [
    "cos_sqrt",
    "sinc_sqrt",
    "cosh_sqrt",
    "sinhc_sqrt",
    "cosm1_over",
    "atan_sqrt_over",
    "acosh1p_over_sinh",
    "angle_over_sine",
    "squared_angle",
    "tanh_sqrt_over",
    "artanh_sqrt_over",
    "asinh_sqrt_over",
    "nonzero",
    "d_cos_sqrt",
    "d_sinc_sqrt",
    "d_cosm1_over",
    "d_atan_sqrt_over",
]

_VALUE_SMALL = 1e-5  # series to lambda^2: truncation ~ lambda^3/5040 < 1e-18
_DERIV_SMALL = 1e-3  # derivative series to lambda^3: truncation < 1e-12


def _series(lam, coeffs):
    out = 0.0 * lam + coeffs[-1]
    for c in reversed(coeffs[:-1]):
        out = out * lam + c
    return out


def _split(lam, threshold, fast=False):
    """(ops, clamped lambda, mask of the series branch, safe sqrt for the direct branch).

    ``fast``: in numpy (no autograd, so the safe argument only guards values), the mask is None
    where no entry is small, and the square root is taken directly (see :func:`_where`)."""
    ops = ops_for(lam)
    lam = ops.maximum(lam, 0.0)
    small = lam < threshold
    if fast and ops is NUMPY and not small.any():
        return ops, lam, None, ops.sqrt(lam)
    return ops, lam, small, ops.sqrt(ops.where(small, ops.ones_like(lam), lam))


def _where(ops, small, lam, coeffs, direct):
    """The series with ``coeffs`` where ``small``, else ``direct`` (just ``direct`` where the
    mask of :func:`_split` with ``fast`` is None: the series is not evaluated)."""
    if small is None:
        return direct
    return ops.where(small, _series(lam, coeffs), direct)


def cos_sqrt(lam: Array) -> Array:
    r""":math:`\cos\sqrt\lambda`."""
    ops, lam, small, s = _split(lam, _VALUE_SMALL, fast=True)
    return _where(ops, small, lam, (1.0, -1 / 2, 1 / 24), ops.cos(s))


def sinc_sqrt(lam: Array) -> Array:
    r""":math:`\sin(\sqrt\lambda)/\sqrt\lambda`."""
    ops, lam, small, s = _split(lam, _VALUE_SMALL, fast=True)
    return _where(ops, small, lam, (1.0, -1 / 6, 1 / 120), ops.sin(s) / s)


def cosh_sqrt(lam: Array) -> Array:
    r""":math:`\cosh\sqrt\lambda`."""
    ops, lam, small, s = _split(lam, _VALUE_SMALL, fast=True)
    return _where(ops, small, lam, (1.0, 1 / 2, 1 / 24), ops.cosh(s))


def sech2_sqrt(lam: Array) -> Array:
    r""":math:`1/\cosh^2\sqrt\lambda = 4e^{-2s}/(1 + e^{-2s})^2`, :math:`s = \sqrt\lambda`:
    no overflow for large :math:`\lambda` (where :math:`\cosh` itself overflows to inf and the
    result is 0), the series :math:`1 - \lambda + \tfrac23\lambda^2 - \tfrac{17}{45}\lambda^3`
    near 0."""
    ops, lam, small, s = _split(lam, _VALUE_SMALL, fast=True)
    e = ops.exp(-2.0 * s)
    return _where(ops, small, lam, (1.0, -1.0, 2 / 3, -17 / 45), 4.0 * e / ((1.0 + e) * (1.0 + e)))


def sinhc_sqrt(lam: Array) -> Array:
    r""":math:`\sinh(\sqrt\lambda)/\sqrt\lambda`."""
    ops, lam, small, s = _split(lam, _VALUE_SMALL, fast=True)
    return _where(ops, small, lam, (1.0, 1 / 6, 1 / 120), ops.sinh(s) / s)


def cosm1_over(lam: Array) -> Array:
    r""":math:`(\cos\sqrt\lambda - 1)/\lambda = -2\sin^2(\sqrt\lambda/2)/\lambda`."""
    ops, lam, small, s = _split(lam, _VALUE_SMALL)
    half = ops.sin(0.5 * s)
    return ops.where(small, _series(lam, (-0.5, 1 / 24, -1 / 720)), -2.0 * half * half / (s * s))


def atan_sqrt_over(lam: Array) -> Array:
    r""":math:`\arctan(\sqrt\lambda)/\sqrt\lambda`."""
    ops, lam, small, s = _split(lam, _VALUE_SMALL, fast=True)
    return _where(ops, small, lam, (1.0, -1 / 3, 1 / 5), ops.arctan(s) / s)


def acosh1p_over_sinh(e: Array) -> Array:
    r""":math:`\theta/\sinh\theta` as a function of :math:`e = \cosh\theta - 1 \ge 0`.

    :math:`\theta = 2\,\mathrm{arcsinh}\sqrt{e/2}` (no cancellation) and
    :math:`\sinh\theta = \sqrt{e(2 + e)}`; series :math:`1 - e/3 + 2e^2/15` near 0.
    """
    ops, e, small, _ = _split(e, 1e-6)
    safe = ops.where(small, ops.ones_like(e), e)
    theta = 2.0 * ops.arcsinh(ops.sqrt(0.5 * safe))
    return ops.where(small, _series(e, (1.0, -1 / 3, 2 / 15)), theta / ops.sqrt(safe * (2 + safe)))


def angle_over_sine(c: Array, s2: Array) -> Array:
    r""":math:`\theta/\sin\theta` with :math:`\theta = \operatorname{atan2}(\sqrt{s^2}, c)`.

    The logarithm of the sphere is :math:`(\theta/\sin\theta)\,w` with :math:`w = y - \langle
    x, y\rangle x`, :math:`c = \langle x, y\rangle = \cos\theta` and :math:`s^2 = \|w\|^2 =
    \sin^2\theta`. Near :math:`y = x` (:math:`s^2 < 10^{-12}` and :math:`c > 0`) the series
    :math:`1 + s^2/6` is used, so gradients are finite at :math:`y = x`. Near the antipode
    (:math:`c < 0`, :math:`\theta \to \pi`) the direct formula is used however small
    :math:`s^2` is: the value grows like :math:`\pi/s`, and :math:`s = 0` with :math:`c < 0`
    (the cut locus, which callers refuse) gives ``inf``.
    """
    ops = ops_for(c, s2)
    s2 = ops.maximum(s2, 0.0)
    small = (s2 < 1e-12) & (c > 0)
    s = ops.sqrt(ops.where(small, ops.ones_like(s2), s2))
    return ops.where(small, 1.0 + s2 / 6.0, ops.arctan2(s, c) / s)


def squared_angle(c: Array, s2: Array) -> Array:
    r""":math:`\theta^2` with :math:`\theta = \operatorname{atan2}(\sqrt{s^2}, c)`, smooth
    where :math:`\theta` is (for :math:`\theta < \pi`).

    For :math:`c > 0` (:math:`\theta < \pi/2`) it is :math:`s^2\,(\theta/\sin\theta)^2` with
    :func:`angle_over_sine` (no square root of :math:`s^2`, so the derivative at
    :math:`s^2 = 0` is finite); the obtuse branch is fed :math:`s^2 = 0, c = 1` there, so that
    its derivatives are finite too. For :math:`c \le 0` it is the square of the ``atan2``, with
    the square root of :math:`s^2` taken by ``safe_sqrt`` (a zero subgradient at the antipode
    :math:`s^2 = 0`, where :math:`\theta = \pi` is a maximum).
    """
    ops = ops_for(c, s2)
    s2 = ops.maximum(s2, 0.0)
    acute = c > 0
    sa = ops.where(acute, s2, 0.0 * s2)
    ratio = angle_over_sine(ops.where(acute, c, ops.ones_like(c)), sa)
    far = ops.arctan2(ops.safe_sqrt(s2), c)
    return ops.where(acute, sa * ratio * ratio, far * far)


def tanh_sqrt_over(lam: Array) -> Array:
    r""":math:`\tanh(\sqrt\lambda)/\sqrt\lambda` (the Poincare ball's exponential map)."""
    ops, lam, small, s = _split(lam, _VALUE_SMALL, fast=True)
    return _where(ops, small, lam, (1.0, -1 / 3, 2 / 15), ops.tanh(s) / s)


def artanh_sqrt_over(lam: Array) -> Array:
    r""":math:`\operatorname{artanh}(\sqrt\lambda)/\sqrt\lambda` for :math:`0 \le \lambda < 1`.

    Direct for :math:`\lambda` away from 1 only: near 1 the argument :math:`\sqrt\lambda` has
    lost the digits of :math:`1 - \sqrt\lambda` (the Poincare ball computes
    :math:`\operatorname{artanh}` from :math:`1 - c\|x\|^2` instead).
    """
    ops, lam, small, _ = _split(lam, _VALUE_SMALL)
    s = ops.sqrt(ops.where(small, 0.25 + 0.0 * lam, lam))  # artanh(1) is infinite: not 1 here
    return ops.where(small, _series(lam, (1.0, 1 / 3, 1 / 5)), ops.arctanh(s) / s)


def asinh_sqrt_over(lam: Array) -> Array:
    r""":math:`\operatorname{arsinh}(\sqrt\lambda)/\sqrt\lambda` (the Poincare ball's logarithm)."""
    ops, lam, small, s = _split(lam, _VALUE_SMALL, fast=True)
    return _where(ops, small, lam, (1.0, -1 / 6, 3 / 40), ops.arcsinh(s) / s)


def nonzero(a: Array) -> Array:
    r"""``a`` with its exact zeros replaced by the smallest positive normal number of its dtype.

    For maps onto open sets bounded by :math:`a_i = 0` (the positive orthant, the simplex, the
    Birkhoff polytope) whose entries are positive in exact arithmetic, such as :math:`x
    e^{u/x}` or a softmax: an entry whose exact value is below the underflow threshold
    rounds to 0, on the boundary. Only such entries change (by less than the smallest normal
    number); NaN and infinities pass unchanged, and so does every other entry, bit for bit
    (in numpy the array itself is returned when it has no zero). Not a function of
    :math:`\lambda` like the others here: a guard for their results. In torch the replaced
    entries have a zero derivative (the exact value's is below the underflow threshold too).
    """
    ops = ops_for(a)
    if not ops.is_torch and a.all():
        return a
    return ops.where(a == 0, ops.ones_like(a) * ops.tiny(a), a)


def d_cos_sqrt(lam: Array) -> Array:
    return -0.5 * sinc_sqrt(lam)


def d_sinc_sqrt(lam: Array) -> Array:
    ops, lam, small, s = _split(lam, _DERIV_SMALL)
    direct = (s * ops.cos(s) - ops.sin(s)) / (2 * s**3)
    return ops.where(small, _series(lam, (-1 / 6, 1 / 60, -1 / 1680, 1 / 90720)), direct)


def d_cosm1_over(lam: Array) -> Array:
    ops, lam, small, s = _split(lam, 1e-2)
    direct = (1.0 - ops.cos(s) - 0.5 * s * ops.sin(s)) / s**4
    return ops.where(small, _series(lam, (1 / 24, -1 / 360, 3 / 40320, -4 / 3628800)), direct)


def d_atan_sqrt_over(lam: Array) -> Array:
    ops, lam, small, s = _split(lam, _DERIV_SMALL)
    direct = (s / (1 + s * s) - ops.arctan(s)) / (2 * s**3)
    return ops.where(small, _series(lam, (-1 / 3, 2 / 5, -3 / 7, 4 / 9)), direct)

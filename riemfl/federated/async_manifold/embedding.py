r"""The learned manifold: :class:`Embedding`, :class:`BezierEmbedding` and the eq. (12) step.

Licudi et al. 2025, Sec. 3, eqs. (8) and (12): the embedding
:math:`\iota: M_\Phi \times M \to M_\Theta`, its point parametrisation, and the search for the
path point at a given step length (:func:`chordal_root` in closed form for Bezier curves on a
Euclidean base, a bracketed root search otherwise).
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

from ..._validation import integer
from ...backend import Array
from ...errors import ParameterError
from ...manifolds.base import Manifold
from ...manifolds.bezier import BezierCurve, power_basis_matrix
from ...manifolds.control_points import ControlPoints
from ...manifolds.euclidean import Euclidean

#: Readings of Licudi et al. 2025, eq. (12): chordal distance (default), arc length, raw parameter.
STEP_MODES = ("chordal", "arc_length", "parameter")


class Embedding(abc.ABC):
    r"""An embedding :math:`\iota: M_\Phi \times M \to M_\Theta` of a latent manifold M.

    Subclasses give the base manifold ``base`` (:math:`M_\Theta`), the parameter manifold
    ``parameters`` (:math:`M_\Phi`), :meth:`point_parameters` (:math:`\phi_\Theta`, with
    :math:`\iota_{\phi_\Theta}(M) = \{\Theta\}`) and :meth:`embed`. The latent path used by the
    server is the segment from ``start`` (the preimage of the global model) to ``omega`` (the
    local model): :meth:`latent` maps :math:`r \in [0, 1]` (and beyond, when the latent manifold
    extends) onto it; the default is the straight segment :math:`(1 - r)\,s_0 + r\,\omega` of a
    latent vector space, which covers curves (M = [0, 1] extended to R) and flat latent disks.
    """

    base: Manifold
    parameters: Manifold
    start: Any = 0.0
    omega: Any = 1.0

    @abc.abstractmethod
    def point_parameters(self, theta: Array) -> Array:
        r""":math:`\phi_\Theta`: the parameters of the degenerate manifold :math:`\{\Theta\}`."""

    @abc.abstractmethod
    def embed(self, phi: Array, s: Any) -> Array:
        r""":math:`\iota_\phi(s)`: the point of :math:`M_\Theta` at latent coordinate s."""

    def latent(self, r: float) -> Any:
        """The latent point at fraction r of the path from ``start`` to ``omega``."""
        return (1.0 - r) * np.asarray(self.start, dtype=float) + r * np.asarray(
            self.omega, dtype=float
        )

    def path_point(self, phi: Array, r: float) -> Array:
        r""":math:`\iota_\phi` at fraction r of the latent path (r = 0: start, r = 1: omega)."""
        return self.embed(phi, self.latent(r))

    def arc_length(self, phi: Array, r: float, *, panels: int = 64) -> float:
        r"""Length in :math:`M_\Theta` of the image of the latent path over [0, r].

        Generic: the sum of :math:`d(\iota(r_k), \iota(r_{k+1}))` over ``panels`` equal steps
        (a lower bound converging as :math:`O(h^2)`); :class:`BezierEmbedding` is exact.
        """
        rs = np.linspace(0.0, r, panels + 1)
        pts = [self.path_point(phi, float(x)) for x in rs]
        return float(sum(float(self.base.dist(p, q)) for p, q in zip(pts, pts[1:], strict=False)))

    def step_point(
        self, phi: Array, fraction: float, mode: str = "chordal", beyond: str = "extend"
    ) -> tuple[Array, float]:
        r"""The server's new model: the point of the learned path at step ``fraction``.

        Licudi et al. 2025, eq. (12), asks that the step taken on the path be as long, in the
        metric of :math:`M_\Theta`, as ``fraction`` times the path's end; its right-hand side is
        partly garbled in the available text, and it does not say whether "as long" is a
        distance or an arc length. riemfl offers three readings: ``"chordal"`` (default): the
        first r >= 0 with :math:`d(\iota(r), \iota(0)) = f\, d(\iota(1), \iota(0))`;
        ``"arc_length"``: the r whose arc length is f times that of [0, 1]; ``"parameter"``:
        r = f (Licudi 2025 (TR), eq. (31)). For f > 1, ``beyond="extend"`` continues the path
        past the local model (the paper's footnote to Sec. 3: M "can be sensibly extended to
        R"), ``"clip"`` stops at r = 1.

        Returns
        -------
        point, r
            :math:`\iota_\phi(r)` and the latent fraction r used.
        """
        f = float(fraction)
        if beyond == "clip":
            f = min(f, 1.0)
        if f <= 0.0:
            return self.path_point(phi, 0.0), 0.0
        if mode == "parameter":
            r = f
        elif mode == "chordal":
            r = self._chordal_fraction(phi, f)
        elif mode == "arc_length":
            r = self._arc_fraction(phi, f)
        else:
            raise ParameterError(f"step mode must be one of {STEP_MODES}, got {mode!r}")
        return self.path_point(phi, r), r

    def _chordal_fraction(self, phi: Array, f: float) -> float:
        origin = self.path_point(phi, 0.0)

        def gap(r: float) -> float:
            return float(self.base.dist(self.path_point(phi, r), origin))

        return _first_crossing(gap, f * gap(1.0))

    def _arc_fraction(self, phi: Array, f: float) -> float:
        total = self.arc_length(phi, 1.0)
        return _first_crossing(lambda r: self.arc_length(phi, r), f * total)


def chordal_root(power_gram: np.ndarray, f: float) -> float:
    r"""The first s > 0 with :math:`\|\sum_k s^k c_k\| = f\,\|\sum_k c_k\|` from the Gram matrix
    :math:`G_{jk} = \langle c_j, c_k\rangle` of the power-basis coefficients c_1..c_n.

    :math:`\|\sum_k s^k c_k\|^2 = \sum_{j,k} s^{j+k} G_{jk}` is a polynomial in s; its roots at
    the target value come from ``numpy.roots`` (0 for a degenerate curve).
    """
    n = power_gram.shape[0]
    poly = np.zeros(2 * n + 1)  # coefficients of s^0 .. s^2n
    for j in range(n):
        for k in range(n):
            poly[j + k + 2] += power_gram[j, k]
    end = float(poly.sum())  # the squared distance at s = 1
    if end <= 0.0 or f <= 0.0:
        return 0.0
    poly[0] -= f * f * end
    roots = np.roots(poly[::-1])
    real = roots[np.abs(roots.imag) <= 1e-7 * (1.0 + np.abs(roots.real))].real
    positive = real[real > 0.0]
    if positive.size == 0:  # pragma: no cover - the polynomial goes from -f^2 end to +inf
        raise ParameterError("chordal_root: no positive root (degenerate Gram matrix)")
    return float(positive.min())


def power_coefficient_matrix(degree: int) -> np.ndarray:
    r"""W with :math:`c_j = \sum_i W_{j-1,i} P_i`, j = 1..n: the power-basis coefficients
    :math:`c_j = \binom{n}{j}\Delta^j P_0 = \binom{n}{j}\sum_i (-1)^{j-i}\binom{j}{i} P_i` of a
    Bezier curve :math:`c(s) = P_0 + \sum_j s^j c_j` (rows 1..n of
    :func:`~riemfl.manifolds.bezier.power_basis_matrix`)."""
    return power_basis_matrix(degree)[1:]


def _first_crossing(fn, target: float, *, grow: float = 2.0, r_max: float = 2.0**20) -> float:
    """The first r > 0 with fn(r) = target, for fn(0) = 0, fn continuous (bracket + Brent)."""
    if target <= 0.0:
        return 0.0
    lo, hi = 0.0, 1.0
    while fn(hi) < target:
        lo, hi = hi, hi * grow
        if hi > r_max:
            raise ParameterError(
                f"the learned path never reaches the requested step (distance {target:.3g})"
            )
    # first crossing: scan the bracket on a grid so a non-monotone distance picks its first root
    grid = np.linspace(lo, hi, 17)
    values = [fn(float(r)) - target for r in grid]
    for a, b, fa, fb in zip(grid, grid[1:], values, values[1:], strict=False):
        if fa <= 0.0 <= fb:
            from scipy.optimize import brentq  # on first use (scipy.optimize is ~20 MB)

            return float(brentq(lambda r: fn(r) - target, a, b, xtol=1e-14, rtol=1e-13))
    return float(hi)  # pragma: no cover - the loop above always brackets a root


class BezierEmbedding(Embedding):
    r"""Bezier curves of degree n as the learned manifold (M = [0, 1], extended to R).

    Licudi et al. 2025, eq. (8) (quadratic; degree n and de Casteljau are also in their Sec. 3).

    .. math::  \iota(P_0, \dots, P_n; s) = \sum_{k=0}^n B_k^n(s)\, P_k,

    evaluated by :class:`~riemfl.manifolds.bezier.BezierCurve` (de Casteljau; geodesic de
    Casteljau on a non-Euclidean base). :math:`M_\Phi = (M_\Theta)^{n+1}`
    (:class:`~riemfl.manifolds.ControlPoints`), :math:`\phi_\Theta = (\Theta, \dots, \Theta)`,
    start s = 0 (the global model), :math:`\omega = 1` (the local model).

    On a Euclidean base the step of eq. (12) is exact and costs one Gram matrix of the curve's
    power-basis coefficients: :math:`\iota(s) - \iota(0) = \sum_{k=1}^n s^k c_k`, so
    :math:`\|\iota(s) - \iota(0)\|^2 = \sum_{j,k} s^{j+k} \langle c_j, c_k\rangle` is a polynomial
    in s whose first positive root at the target distance is found by ``numpy.roots``; the arc
    length of a quadratic is in closed form.
    """

    def __init__(self, base: Manifold, degree: int = 2) -> None:
        if not isinstance(base, Manifold):
            raise ParameterError("BezierEmbedding(base, degree) needs a Manifold base")
        self.base = base
        self.degree = integer(degree, "BezierEmbedding: degree", minimum=1)
        self.parameters = ControlPoints(base, self.degree + 1)
        self.euclidean = isinstance(base, Euclidean)

    def point_parameters(self, theta: Array) -> Array:
        return self.parameters.phi(theta)

    def curve(self, phi: Array) -> BezierCurve:
        return BezierCurve(phi, self.base)

    def embed(self, phi: Array, s: Any) -> Array:
        return self.curve(phi)(float(s) if np.ndim(s) == 0 else s)

    def path_point(self, phi: Array, r: float) -> Array:
        return self.curve(phi)(float(r))

    def arc_length(self, phi: Array, r: float, *, panels: int = 64) -> float:
        if self.euclidean:
            return float(self.curve(phi).arc_length(0.0, float(r)))
        return super().arc_length(phi, r, panels=panels)

    def _power_gram(self, phi: Array) -> np.ndarray:
        r"""Gram matrix :math:`G_{jk} = \langle c_j, c_k\rangle` of the power-basis coefficients
        (:func:`power_coefficient_matrix`; one pass over the control points)."""
        flat = np.asarray(phi, dtype=np.float64).reshape(self.degree + 1, -1)
        coeffs = power_coefficient_matrix(self.degree) @ flat
        return coeffs @ coeffs.T

    def _chordal_fraction(self, phi: Array, f: float) -> float:
        if not self.euclidean:
            return super()._chordal_fraction(phi, f)
        return chordal_root(self._power_gram(phi), f)

    def _arc_fraction(self, phi: Array, f: float) -> float:
        if self.euclidean:
            curve = self.curve(phi)
            total = float(curve.arc_length())
            if total <= 0.0:
                return 0.0
            return float(curve.parameter_at_arc_length(f * total))
        return super()._arc_fraction(phi, f)

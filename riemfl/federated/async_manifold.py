r"""AsyncManifold: asynchronous aggregation along a learned manifold.

Licudi et al. 2025, Sec. 3 and App. C; Licudi 2025 (TR), Sec. 5.1.

A client does not send a point but the parameters :math:`\phi` of a small manifold
:math:`\iota_\phi(M) \subset M_\Theta` that it learned through the global model it received and
its own local model (a quadratic Bezier curve for AsyncBezier). The server corrects the learned
manifold for the staleness, then moves the global model *along* it instead of along the straight
line to the local model.

The pieces, each replaceable:

* :class:`Embedding` -- :math:`\iota: M_\Phi \times M \to M_\Theta` with its point
  parametrisation :math:`\phi_\Theta` (the compression requirement (i) of Licudi et al. 2025,
  Sec. 3), the latent start :math:`\iota^{-1}_\phi(\Theta^t)` and the local-model location
  :math:`\omega`. :class:`BezierEmbedding` is eq. (8) of that paper (degree n, control points on
  any base manifold).
* the correction map :math:`\pi` (:class:`OrthoDCCorrection`, Licudi et al. 2025, App. C,
  Alg. 3, on tangents of :math:`M_\Phi`);
* the staleness penalty :func:`staleness_penalty` (Licudi et al. 2025, eq. (10));
* the step-length reparametrisation (Licudi et al. 2025, eq. (12), :meth:`Embedding.step_point`);
* :class:`AsyncManifold`, the server rule (Licudi et al. 2025, App. C, Alg. 1, for any
  embedding), with optional server momentum, the dominance penalty of Licudi 2025 (TR), Sec. 5.1,
  and (periodic) SWA.

:func:`AsyncBezier` and :func:`AsyncBezierED` are the two settings of the experiments of
Licudi et al. 2025 (:math:`\alpha = 0` and :math:`\alpha = 1`, Sec. 4.1).
"""

from __future__ import annotations

import abc
import math
from typing import Any

import numpy as np

from .. import tuning
from ..backend import Array, is_torch
from ..errors import ParameterError, ShapeError
from ..manifolds.base import Manifold
from ..manifolds.bezier import BezierCurve, power_basis_matrix, scalar_bernstein_weights
from ..manifolds.control_points import ControlPoints
from ..manifolds.euclidean import Euclidean
from ..manifolds.rotation import PlaneRotation
from .async_rules import Arrival, AsyncRule, check_vartheta
from .rule_state import Checkpointable, Commit, StateReader, copy_array, setter

__all__ = [
    "Embedding",
    "BezierEmbedding",
    "OrthoDCCorrection",
    "staleness_penalty",
    "AsyncManifold",
    "AsyncBezier",
    "AsyncBezierED",
    "AsyncCurve",
    "STEP_MODES",
    "chordal_root",
    "power_coefficient_matrix",
]

#: Readings of Licudi et al. 2025, eq. (12): chordal distance (default), arc length, raw parameter.
STEP_MODES = ("chordal", "arc_length", "parameter")


# ------------------------------------------------------------------------------------ embeddings
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
        if int(degree) != degree or degree < 1:
            raise ParameterError(f"BezierEmbedding: degree must be an integer >= 1, got {degree!r}")
        self.base = base
        self.degree = int(degree)
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


# ------------------------------------------------------------------------------------ correction
class OrthoDCCorrection(Checkpointable):
    r"""OrthoDC(:math:`\vartheta`) on a tangent vector of :math:`M_\Phi`.

    Licudi et al. 2025, Sec. 3 and App. C, Alg. 3.

    With v the client's reparametrisation vector and :math:`\Delta^g =
    \exp^{-1}_{\phi_{\Theta^t}}(\phi_{\Theta^\tau})` the global drift in :math:`M_\Phi`:
    :math:`\pi(v) = v - \mathrm{proj}_{\Delta^g}(v)` when :math:`\cos(v, \Delta^g) \le
    \vartheta`, else v (the "trusted update" base: Alg. 1 re-applies the curve at
    :math:`\phi_{\Theta^\tau}`, eq. (9)).

    ``variant``: the paper projects "a tangent vector of :math:`M_\Phi`" and does not say how on
    stacked control points. Projecting the whole stack moves the first control point off
    :math:`\Theta^\tau`, which contradicts its requirement that the corrected manifold contain
    :math:`\Theta^\tau` (Sec. 3, correction step), so riemfl offers:

    * ``"per_point"`` (default, faithful in spirit): the test and projection act on each control
      point's displacement separately against the drift of that point. The client's first
      control point is the global model it received and stays frozen (displacement 0), and the
      zero vector is orthogonal to everything, so the corrected curve still starts at
      :math:`\Theta^\tau`, as the paper requires of :math:`\pi`;
    * ``"stacked"`` (literal): one test and one projection of the whole stacked vector against
      :math:`(d, \dots, d)` with the product metric; the first control point then moves off
      :math:`\Theta^\tau` when the update conflicts.

    ``vartheta = -1`` disables the correction only for exactly opposite updates; use
    ``correction=None`` in :class:`AsyncManifold` for none at all. ``projections`` counts the
    projections made (its state for a checkpoint).
    """

    _state_counters = ("projections",)

    def __init__(self, vartheta: float = 1.0, variant: str = "per_point") -> None:
        if variant not in ("per_point", "stacked"):
            raise ParameterError(f"variant must be 'per_point' or 'stacked', got {variant!r}")
        self.vartheta = check_vartheta(vartheta)
        self.variant = variant
        self.projections = 0

    def __call__(self, parameters: Manifold, phi_t: Array, v: Array, drift: Array) -> Array:
        if self.variant == "stacked" or not isinstance(parameters, ControlPoints):
            return self._project(parameters, phi_t, v, drift)
        base = parameters.base
        parts = [self._project(base, phi_t[k], v[k], drift[k]) for k in range(parameters.n_points)]
        return np.stack(parts) if isinstance(v, np.ndarray) else _stack_like(parts, v)

    def coefficient(self, vv: float, vg: float, gg: float) -> float:
        r"""c with :math:`\pi(v) = v - c\,g` from :math:`\langle v,v\rangle`, :math:`\langle
        v,g\rangle`, :math:`\langle g,g\rangle` (0: no projection; counted in ``projections``)."""
        if gg <= 0.0:
            return 0.0  # no drift: nothing to correct
        cosine = vg / math.sqrt(vv * gg) if vv > 0 else 0.0  # the zero vector: cos = 0
        if cosine <= self.vartheta:
            self.projections += 1
            return vg / gg if vv > 0 else 0.0
        return 0.0

    def coefficients(self, gram: np.ndarray) -> np.ndarray:
        r"""The :math:`c_k` of all control points from the Gram matrix of
        :math:`(v_0, \dots, v_n, d)` on a Euclidean base (:math:`\Delta^g = (d, \dots, d)`)."""
        n1 = gram.shape[0] - 1
        gg = float(gram[n1, n1])
        if self.variant == "stacked":
            c = self.coefficient(
                float(np.trace(gram[:n1, :n1])), float(gram[:n1, n1].sum()), n1 * gg
            )
            return np.full(n1, c)
        return np.array(
            [self.coefficient(float(gram[k, k]), float(gram[k, n1]), gg) for k in range(n1)]
        )

    def _project(self, m: Manifold, x: Array, v: Array, g: Array) -> Array:
        gg = float(m.inner(x, g, g))
        vv = float(m.inner(x, v, v))
        vg = float(m.inner(x, v, g)) if vv > 0 and gg > 0 else 0.0
        c = self.coefficient(vv, vg, gg)
        return v - c * g if c else v

    def describe(self) -> dict[str, Any]:
        return {"name": "orthodc", "vartheta": self.vartheta, "variant": self.variant}


def _stack_like(parts: list[Any], like: Any) -> Any:
    if is_torch(like):
        import torch

        return torch.stack(parts)
    return np.stack(parts)


# ------------------------------------------------------------------------------------ penalty
def staleness_penalty(
    alpha: float, local_distance: float, drift_distance: float, eps: float = 0.1
) -> float:
    r"""Licudi et al. 2025, eq. (10): the staleness penalty, with the zero-drift case made finite.

    :math:`S^{t,\tau} = 1 + \alpha\,(\|\Theta^\tau - \hat\Theta^\tau\| / \|\Theta^t -
    \Theta^\tau\| - 1)` (printed :math:`S^{\tau,\tau}` in eq. (10), :math:`S^{t,\tau}` in eq.
    (11)).

    The ratio is :math:`1/\gamma` with AsyncFedED's staleness :math:`\gamma = \|\Theta^t -
    \Theta^\tau\| / \|\Theta^\tau - \hat\Theta^\tau\|` (Wang et al. 2022; the paper says eq. (10)
    is "inspired by" it, Sec. 3). As riemfl's
    AsyncFedED, the rate is bounded by using :math:`1/(\gamma + \varepsilon)`:

    .. math::  S = 1 + \alpha\left(\frac{1}{\gamma + \varepsilon} - 1\right),

    which is eq. 10 up to :math:`O(\varepsilon\gamma^{-2})` for stale updates and
    :math:`1 + \alpha(1/\varepsilon - 1)` (not infinity) with no drift, where eq. (10) divides by
    zero and the paper does not say what to do. A zero
    update (:math:`\hat\Theta^\tau = \Theta^\tau`) gives :math:`S = 1 - \alpha`. ``alpha = 0``
    gives S = 1 (AsyncBezier), ``alpha = 1`` the AsyncFedED-style rate (AsyncBezierED).
    """
    if not 0.0 <= alpha <= 1.0:
        raise ParameterError(f"staleness decay alpha must be in [0, 1], got {alpha!r}")
    if alpha == 0.0:
        return 1.0
    if local_distance <= 0.0:
        return 1.0 - alpha
    gamma = drift_distance / local_distance
    return 1.0 + alpha * (1.0 / (gamma + eps) - 1.0)


# ------------------------------------------------------------------------------------ the rule
class AsyncManifold(AsyncRule):
    r"""The AsyncManifold server (Licudi et al. 2025, App. C, Alg. 1, over any :class:`Embedding`).

    The client's upload ``local`` is its learned parameters :math:`\phi^K \in M_\Phi` (for a
    Bezier curve: the control points, shape ``(n + 1, *point_shape)``) trained from
    :math:`\phi_{\Theta^t}`. On arrival at server version :math:`\tau`:

    1. :math:`v = \exp^{-1}_{\phi_{\Theta^t}}(\phi^K)` (eq. (7)) and the drift
       :math:`\Delta^g = \exp^{-1}_{\phi_{\Theta^t}}(\phi_{\Theta^\tau})`;
    2. :math:`\psi = \exp_{\phi_{\Theta^\tau}}(\Gamma\,\pi(v))` (correction, then transport to
       :math:`\phi_{\Theta^\tau}`; the identity on Euclidean space);
    3. :math:`\hat\Theta = \iota_\psi(\omega)`, :math:`S^{t,\tau}` by :func:`staleness_penalty`
       (eq. (10)) from :math:`d(\Theta^\tau, \hat\Theta)` and :math:`d(\Theta^t, \Theta^\tau)`;
    4. :math:`\Theta^{\tau+1}` = the path point at step :math:`f = S\,w_i\,\eta_g`
       (:meth:`Embedding.step_point`, eqs. (11)-(12)), :math:`\eta_g` divided by
       :math:`N p_i` with the dominance penalty of Licudi 2025 (TR), Sec. 5.1, on;
    5. optional server momentum :math:`m \leftarrow \beta\,\Gamma m + \exp^{-1}_{\Theta^\tau}
       (\Theta^{\tau+1})`, :math:`\Theta^{\tau+1} = \exp_{\Theta^\tau}(m)`;
    6. optional SWA: every ``swa_every`` steps from ``swa_start`` on, the running geodesic mean
       :math:`\Theta^{SWA} \leftarrow \exp_{\Theta^{SWA}}(\frac{1}{n+1}
       \exp^{-1}_{\Theta^{SWA}}(\Theta^{\tau+1}))` (exact on Euclidean space), returned by
       :meth:`output`; with ``swa_cycle`` (periodic SWA, Licudi 2025 (TR), Sec. 5.1) the global
       model is replaced
       by it every ``swa_cycle`` steps.

    Parameters
    ----------
    embedding : Embedding
    server_lr : float
        :math:`\eta_g` (constant).
    alpha : float in [0, 1]
        Staleness decay of eq. 10 (0: AsyncBezier, 1: AsyncBezierED).
    correction : callable or None
        :math:`\pi(M_\Phi, \phi_{\Theta^t}, v, \Delta^g)`, default :class:`OrthoDCCorrection`.
    step_mode : {"chordal", "arc_length", "parameter"}
        The reading of eq. 12 (default chordal).
    beyond : {"extend", "clip"}
        Steps f > 1: continue the path past the local model, or stop there.
    eps : float
        Zero-drift guard of the penalty (as AsyncFedED's).
    dominance : bool
        Divide :math:`\eta_g` by :math:`N p_i` (Licudi 2025 (TR), Sec. 5.1, after Leconte et al.
        2024). The report leaves the estimator of :math:`p_i` open ("dependent on the time since
        the last update"); riemfl uses the share of arrivals so far from client i.
    momentum : float
        Server momentum :math:`\beta \in [0, 1)` (0: off).
    swa_start, swa_every, swa_cycle : int or None
        SWA from server version ``swa_start``, averaging every ``swa_every`` versions; periodic
        SWA overwrite every ``swa_cycle`` versions (None: off).

    Notes
    -----
    The run state (:meth:`state_dict`) is the per-client arrival counts, the momentum, the SWA
    point and its number of models, the diagnostics ``last``, and the state of the correction
    and the embedding when they have one (``state_dict`` and ``load_state_dict``).
    """

    name = "asyncmanifold"
    _state_counters = ("swa_models",)
    _state_helpers: tuple[str, ...] = ("correction", "embedding")

    def __init__(
        self,
        embedding: Embedding,
        server_lr: float = 1.0,
        *,
        alpha: float = 0.0,
        correction: Any = "default",
        step_mode: str = "chordal",
        beyond: str = "extend",
        eps: float = 0.1,
        dominance: bool = False,
        momentum: float = 0.0,
        swa_start: int | None = None,
        swa_every: int = 1,
        swa_cycle: int | None = None,
        operators: str = "exact",
    ) -> None:
        super().__init__(server_lr, operators)
        if not isinstance(embedding, Embedding):
            raise ParameterError("AsyncManifold needs an Embedding (e.g. BezierEmbedding)")
        if not 0.0 <= float(alpha) <= 1.0:
            raise ParameterError(f"alpha must be in [0, 1], got {alpha!r}")
        if step_mode not in STEP_MODES:
            raise ParameterError(f"step_mode must be one of {STEP_MODES}, got {step_mode!r}")
        if beyond not in ("extend", "clip"):
            raise ParameterError(f"beyond must be 'extend' or 'clip', got {beyond!r}")
        if not float(eps) > 0.0:
            raise ParameterError(f"eps must be > 0, got {eps!r}")
        if not 0.0 <= float(momentum) < 1.0:
            raise ParameterError(f"momentum must be in [0, 1), got {momentum!r}")
        for key, value in (("swa_start", swa_start), ("swa_cycle", swa_cycle)):
            if value is not None and (int(value) != value or value < 0):
                raise ParameterError(f"{key} must be an integer >= 0 or None, got {value!r}")
        if int(swa_every) != swa_every or swa_every < 1:
            raise ParameterError(f"swa_every must be an integer >= 1, got {swa_every!r}")
        if swa_cycle is not None and swa_start is None:
            raise ParameterError("swa_cycle (periodic SWA) needs swa_start")
        self.embedding = embedding
        self.alpha = float(alpha)
        self.correction = OrthoDCCorrection() if correction == "default" else correction
        self.step_mode = step_mode
        self.beyond = beyond
        self.eps = float(eps)
        self.dominance = bool(dominance)
        self.momentum = float(momentum)
        self.swa_start, self.swa_every, self.swa_cycle = swa_start, int(swa_every), swa_cycle
        self.reset(embedding.base, 1)

    def validate(self, manifold: Manifold) -> None:
        base = self.embedding.base
        if tuple(manifold.point_shape) != tuple(base.point_shape) or type(manifold) is not type(
            base
        ):
            raise ParameterError(
                f"AsyncManifold: the run's model space {manifold.name} is not the embedding's "
                f"base {base.name}"
            )

    def reset(self, manifold: Manifold, n_clients: int) -> None:
        self.n_clients = int(n_clients)
        self.counts = np.zeros(self.n_clients)
        self.velocity: Any = None
        self.swa_point: Any = None
        self.swa_models = 0
        self.last: dict[str, float] = {}
        if self.correction is not None and hasattr(self.correction, "projections"):
            self.correction.projections = 0

    def _state(self) -> dict[str, Any]:
        velocity = None
        if self.velocity is not None:
            previous, step = self.velocity
            velocity = {"previous": copy_array(previous), "step": copy_array(step)}
        return {
            "counts": copy_array(self.counts),
            "velocity": velocity,
            "swa_point": copy_array(self.swa_point),
            "last": {key: float(value) for key, value in self.last.items()},
        }

    def _read_state(self, reader: StateReader) -> Commit:
        shape = tuple(self.embedding.base.point_shape)
        section = reader.section("velocity", optional=True)
        velocity = None
        if section is not None:
            velocity = (section.array("previous", shape=shape), section.array("step", shape=shape))
        return setter(
            self,
            counts=reader.array("counts", like=self.counts),
            velocity=velocity,
            swa_point=reader.array("swa_point", shape=shape, optional=True),
            last=reader.reals("last"),
        )

    def describe(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "server_lr": self.server_lr,
            "alpha": self.alpha,
            "step_mode": self.step_mode,
            "beyond": self.beyond,
            "eps": self.eps,
            "dominance": self.dominance,
            "momentum": self.momentum,
            "swa_start": self.swa_start,
            "swa_every": self.swa_every,
            "swa_cycle": self.swa_cycle,
            "embedding": type(self.embedding).__name__,
        }
        describe = getattr(self.correction, "describe", None)
        out["correction"] = describe() if describe else repr(self.correction)
        return out

    # -------------------------------------------------------------- the server step
    def corrected_parameters(self, a: Arrival) -> Array:
        r""":math:`\psi^\tau = \exp_{\phi_{\Theta^\tau}}(\Gamma\,\pi(v))` (steps 1-2)."""
        emb = self.embedding
        P = emb.parameters
        if tuple(np.shape(a.local)) != tuple(P.point_shape):
            raise ShapeError(
                f"{self.name}: a client uploaded an array of shape {tuple(np.shape(a.local))}; "
                f"expected the learned parameters of shape {tuple(P.point_shape)} (the trainer "
                f"must be a curve trainer, e.g. BezierProblemTrainer or BezierClientTrainer)"
            )
        phi_t = emb.point_parameters(a.base)
        phi_tau = emb.point_parameters(a.current)
        v = P.log(phi_t, a.local)
        if self.correction is not None:
            drift = P.log(phi_t, phi_tau)
            v = self.correction(P, phi_t, v, drift)
        return P.exp(phi_tau, P.transport(phi_t, phi_tau, v))

    def step_fraction(self, a: Arrival, psi: Array) -> float:
        r""":math:`f = S^{t,\tau} w_i \eta_g` (with the dominance penalty when on)."""
        m = self.embedding.base
        hat = self.embedding.embed(psi, self.embedding.omega)
        return self._fraction(a, float(m.dist(a.current, hat)), float(m.dist(a.base, a.current)))

    def _fraction(self, a: Arrival, local_distance: float, drift_distance: float) -> float:
        s = staleness_penalty(self.alpha, local_distance, drift_distance, self.eps)
        rate = self.server_lr * a.weight
        if self.dominance:
            share = self.counts[a.client] / self.counts.sum()
            rate /= self.n_clients * share
        self.last = {"penalty": s, "local_distance": local_distance, "drift": drift_distance}
        return float(s * rate)

    def apply(self, manifold: Manifold, a: Arrival) -> Array:
        if self.dominance:
            self.counts[a.client] += 1
        if self._has_fast_path(a):
            new, fraction, r = self._euclidean_bezier_step(a)
        else:
            psi = self.corrected_parameters(a)
            fraction = self.step_fraction(a, psi)
            new, r = self.embedding.step_point(psi, fraction, self.step_mode, self.beyond)
        self.last.update({"fraction": fraction, "r": r})
        if self.momentum:
            new = self._momentum(manifold, a.current, new)
        return self._swa(manifold, a.version + 1, new)

    def _has_fast_path(self, a: Arrival) -> bool:
        emb = self.embedding
        return (
            isinstance(emb, BezierEmbedding)
            and emb.euclidean
            and self.step_mode in ("chordal", "parameter")
            and (self.correction is None or type(self.correction) is OrthoDCCorrection)
            and all(type(x) is np.ndarray for x in (a.local, a.base, a.current))
            and tuple(a.local.shape) == tuple(emb.parameters.point_shape)
        )

    def _euclidean_bezier_step(self, a: Arrival) -> tuple[np.ndarray, float, float]:
        r"""Steps 1-4 on a Euclidean base in three passes over the data, without forming
        :math:`\psi` (the generic path gives the same point; tested).

        With :math:`v_k = P_k - \Theta^t`, :math:`d = \Theta^\tau - \Theta^t` and the
        correction :math:`\pi(v)_k = v_k - c_k d`: :math:`\psi_k = \Theta^\tau + v_k - c_k d`,
        so every quantity of the step is a function of the Gram matrix of
        :math:`(v_0, \dots, v_n, d)`, and the new model is
        :math:`\sum_k B_k(r) P_k + (\kappa - 1)\Theta^t + (1 - \kappa)\Theta^\tau`,
        :math:`\kappa = \sum_k B_k(r) c_k`.
        """
        n = self.embedding.degree
        shape = a.base.shape
        P = a.local.reshape(n + 1, -1)
        start, current = a.base.reshape(-1), a.current.reshape(-1)
        gram = _difference_gram(P, start, current)
        c = np.zeros(n + 1) if self.correction is None else self.correction.coefficients(gram)
        E = np.hstack([np.eye(n + 1), -c[:, None]])  # psi_k - Theta^tau = E_k . (v, d)
        psi_gram = E @ gram @ E.T
        fraction = self._fraction(
            a, math.sqrt(max(psi_gram[n, n], 0.0)), math.sqrt(max(gram[n + 1, n + 1], 0.0))
        )
        f = min(fraction, 1.0) if self.beyond == "clip" else fraction
        if f <= 0.0:
            r = 0.0
        elif self.step_mode == "parameter":
            r = f
        else:
            W = power_coefficient_matrix(n)
            r = chordal_root(W @ psi_gram @ W.T, f)
        weights = np.asarray(scalar_bernstein_weights(n, r))
        kappa = float(weights @ c)
        new = _combine(weights, P, kappa - 1.0, start, 1.0 - kappa, current)
        return new.reshape(shape), fraction, r

    def _momentum(self, m: Manifold, current: Array, new: Array) -> Array:
        step = m.log(current, new)
        if self.velocity is not None:
            previous, v = self.velocity
            step = step + self.momentum * m.transport(previous, current, v)
        self.velocity = (current, step)
        return m.exp(current, step)

    def _swa(self, m: Manifold, version: int, new: Array) -> Array:
        if self.swa_start is None or version < self.swa_start:
            return new
        if (version - self.swa_start) % self.swa_every == 0:
            if self.swa_point is None:
                self.swa_point = new
            else:
                self.swa_point = m.exp(
                    self.swa_point, m.log(self.swa_point, new) / (self.swa_models + 1)
                )
            self.swa_models += 1
        if self.swa_cycle and version % self.swa_cycle == 0 and self.swa_point is not None:
            return self.swa_point
        return new

    def output(self, current: Array) -> Array:
        """The model a run returns: the SWA average when SWA has started, else ``current``."""
        return current if self.swa_point is None else self.swa_point


class AsyncCurve(AsyncManifold):
    r"""AsyncCurve server of Licudi 2025 (TR), Sec. 5.2, Algorithm 1 (its ordering bug fixed).

    The client (:class:`riemfl.nn.CurveClientTrainer`) uploads :math:`(\Theta^t, \phi_i,
    \Theta_i^t)`. On arrival:

    1. the corrected end point :math:`\hat\Theta_i^\tau = \Theta^\tau +
       \mathrm{dir}` from the ``endpoint`` rule's corrected update (default
       :class:`~riemfl.federated.OrthoDyn`; the report's Alg. 1 uses it *before* computing it:
       riemfl computes it first);
    2. the rotated control point (Licudi 2025 (TR), eq. (17)): :math:`\hat\phi = (\Theta^\tau +
       \hat\Theta)/2 + R(\phi - (\Theta^t + \Theta_i^t)/2)`, R the plane rotation taking
       :math:`\Theta_i^t - \Theta^t` to :math:`\hat\Theta - \Theta^\tau`
       (:class:`~riemfl.manifolds.PlaneRotation`; the identity when the correction keeps the
       direction, i.e. a pure translation, as the report says);
    3. :math:`\Theta^{\tau+1}` = the quadratic through
       :math:`(\Theta^\tau, \hat\phi, \hat\Theta)` at :math:`\alpha`, with
       ``weighting="dominance"``: :math:`\alpha = \eta(\tau) / (N p_i)` (the report's Alg. 1;
       :math:`p_i` the share of arrivals so far from client i, an estimator the report leaves
       open) or ``"weight"``: :math:`\alpha = w_i \eta(\tau)` (its eq. (32)); :math:`\eta(\tau)`
       is ``server_lr`` or ``schedule(version)``. ``step_mode="parameter"`` (default, eq. (31))
       evaluates the curve at :math:`\alpha`; ``beyond="clip"`` (default) stops at the local
       end point.
    4. periodic SWA (``swa_start``, ``swa_every``, ``swa_cycle``) as in :class:`AsyncManifold`;
       the version counter advances only on arrivals (the report's Alg. 1 increments it on
       every loop iteration, received or not).

    The quadratic is in Bernstein form, middle weight :math:`2s(1-s)` (Licudi et al. 2025,
    eq. (8)): the report prints :math:`s(1-s)` (eqs. (28), (31)), which with a midpoint control
    point does not reproduce the straight line and pulls the model towards the origin.

    Euclidean base (the rotation acts on flat vectors).
    """

    name = "asynccurve"
    _state_helpers = ("correction", "embedding", "endpoint", "schedule")

    def __init__(
        self,
        base: Manifold,
        server_lr: float = 1.0,
        *,
        endpoint: AsyncRule | None = None,
        rotate: bool = True,
        weighting: str = "dominance",
        schedule: Any = None,
        step_mode: str = "parameter",
        beyond: str = "clip",
        **kw: Any,
    ) -> None:
        if not isinstance(base, Euclidean):
            raise ParameterError(f"AsyncCurve needs a Euclidean base (the rotation R), got {base}")
        if weighting not in ("dominance", "weight"):
            raise ParameterError(f"weighting must be 'dominance' or 'weight', got {weighting!r}")
        if schedule is not None and not callable(schedule):
            raise ParameterError("schedule must be a callable of the server version")
        super().__init__(
            BezierEmbedding(base, 2),
            server_lr,
            correction=None,
            step_mode=step_mode,
            beyond=beyond,
            dominance=weighting == "dominance",
            **kw,
        )
        from .async_rules import OrthoDyn

        self.endpoint = OrthoDyn() if endpoint is None else endpoint
        if not hasattr(self.endpoint, "direction"):
            raise ParameterError(
                "AsyncCurve's endpoint rule must expose direction() "
                "(FedAsync, ASGD, the OrthoCorrect family)"
            )
        self.rotate = bool(rotate)
        self.weighting = weighting
        self.schedule = schedule

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "endpoint": self.endpoint.describe(),
            "rotate": self.rotate,
            "weighting": self.weighting,
        }

    def reset(self, manifold: Manifold, n_clients: int) -> None:
        super().reset(manifold, n_clients)
        endpoint = getattr(self, "endpoint", None)  # None while AsyncManifold.__init__ runs
        if endpoint is not None:
            endpoint.reset(manifold, n_clients)

    def _has_fast_path(self, a: Arrival) -> bool:
        return False

    def corrected_parameters(self, a: Arrival) -> Array:
        m = self.embedding.base
        if tuple(np.shape(a.local)) != (3, *m.point_shape):
            raise ShapeError(
                f"asynccurve: a client uploaded shape {tuple(np.shape(a.local))}; expected "
                f"(3, {', '.join(map(str, m.point_shape))}) = (Theta^t, phi, Theta_i) from a "
                f"CurveClientTrainer"
            )
        _, phi, local = a.local
        point_arrival = Arrival(
            a.client, a.base, local, a.current, a.staleness, a.weight, a.version
        )
        hat = a.current + self.endpoint.direction(m, point_arrival)
        offset = phi - 0.5 * (a.base + local)
        if self.rotate:
            u, w = (local - a.base).reshape(-1), (hat - a.current).reshape(-1)
            offset = PlaneRotation(u, w)(offset.reshape(-1)).reshape(offset.shape)
        return np.stack([a.current, 0.5 * (a.current + hat) + offset, hat])

    def _fraction(self, a: Arrival, local_distance: float, drift_distance: float) -> float:
        eta = float(self.schedule(a.version)) if self.schedule is not None else self.server_lr
        if self.weighting == "dominance":
            rate = eta / (self.n_clients * self.counts[a.client] / self.counts.sum())
        else:
            rate = eta * a.weight
        self.last = {"penalty": 1.0, "local_distance": local_distance, "drift": drift_distance}
        return float(rate)


def _difference_gram(P: np.ndarray, start: np.ndarray, current: np.ndarray) -> np.ndarray:
    r"""Gram matrix of :math:`(P_0 - x, \dots, P_n - x, y - x)` in one pass over the data.

    The differences are formed block by block in a small cache-resident buffer and never
    written to memory (exact differences, no cancellation from expanding the products).
    """
    k = P.shape[0]
    size = start.size
    gram = np.zeros((k + 1, k + 1))
    width = tuning.GRAM_BLOCK_ENTRIES
    buf = np.empty((k + 1, min(width, size)), dtype=np.result_type(P, start, np.float64))
    for lo in range(0, size, width):
        hi = min(size, lo + width)
        block = buf[:, : hi - lo]
        np.subtract(P[:, lo:hi], start[lo:hi], out=block[:k])
        np.subtract(current[lo:hi], start[lo:hi], out=block[k])
        gram += block @ block.T
    return gram


def _combine(weights, P, a: float, x: np.ndarray, b: float, y: np.ndarray) -> np.ndarray:
    """``weights @ P + a x + b y`` in one pass (block by block, the result written once)."""
    out = np.empty(x.size, dtype=np.result_type(P, x, np.float64))
    width = tuning.GRAM_BLOCK_ENTRIES
    for lo in range(0, x.size, width):
        hi = min(x.size, lo + width)
        block = out[lo:hi]
        np.matmul(weights, P[:, lo:hi], out=block)
        block += a * x[lo:hi]
        block += b * y[lo:hi]
    return out


def AsyncBezier(  # noqa: N802 - the paper's name
    base: Manifold,
    server_lr: float = 0.5,
    *,
    vartheta: float = 1.0,
    variant: str = "per_point",
    degree: int = 2,
    **kw: Any,
) -> AsyncManifold:
    r"""AsyncBezier (Licudi et al. 2025, App. C, Alg. 1, :math:`\alpha = 0`).

    Quadratic Bezier curves, OrthoDC(:math:`\vartheta`) per control point, chordal step; the
    paper's FEMNIST settings: :math:`\eta_g = 0.5` (Table 3), :math:`\vartheta = 1` (App. B.1;
    0 for Shakespeare and CXR8, App. B.2-B.3).
    """
    rule = AsyncManifold(
        BezierEmbedding(base, degree),
        server_lr,
        alpha=kw.pop("alpha", 0.0),
        correction=OrthoDCCorrection(vartheta, variant),
        **kw,
    )
    rule.name = "asyncbezier"
    return rule


def AsyncBezierED(base: Manifold, server_lr: float = 0.25, **kw: Any) -> AsyncManifold:  # noqa: N802
    r"""AsyncBezierED: AsyncBezier with the staleness penalty at full strength.

    :math:`\alpha = 1` in Licudi et al. 2025, eq. (10); their FEMNIST :math:`\eta_g = 0.25`
    (Table 3).
    """
    rule = AsyncBezier(base, server_lr, alpha=1.0, **kw)
    rule.name = "asyncbezier-ed"
    return rule

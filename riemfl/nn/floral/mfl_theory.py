r"""The quantities and bounds of FLoRAL's theory (Almansoori et al. 2024, Sec. 4 and App. A).

The theory analyses local SGD on the relaxed MFL objective with C full models and the
exponential-weights router (:mod:`riemfl.nn.floral.mfl`). With the true routers
:math:`\pi^k` and :math:`p(k) = N^k/N`, the aggregation weights of eq. (2) are
:math:`p^k_c = p(k|c) = \pi^k_c N^k / \sum_{k'} \pi^{k'}_c N^{k'}`; an estimated router gives
:math:`\hat p^k_{c,t}` the same way. The quantities:

* the aggregation mismatch :math:`\|\delta_{c,t}\|_1 = \sum_k |\hat p^k_{c,t} - p^k_c|`
  (:func:`mismatch`);
* :math:`\tilde\sigma^2 = \sigma^2 \|p_c\|^2` (:func:`effective_variance`), with
  :math:`\sigma^2` of Assumption 4.4 (:math:`\|p_c\|^2 = 1/K_c` for equal clients);
* :math:`U_c = \min_{k:\, p(c) \le \pi^k_c} p(c)/\pi^k_c \in [p(c), 1]`
  (:func:`uniformity`), :math:`\kappa = L/\mu` (Assumption 4.2);
* :math:`\gamma_t = \min\{1, \min_{k:\, p^k_c > 0} \hat p^k_{c,t}/p^k_c\}` of Lemma A.7
  (:func:`weight_floor`);
* the step :math:`\eta_t = 1/(\mu(t + s))` and the weights :math:`(t + s)^2` of the averaged
  iterate :math:`\hat w_{c,T}` (Theorems A.9 and A.10; Lemma A.8 with :math:`\alpha = 1/\mu`).

Theorem A.9 (no assumption on the mismatch), for :math:`s \ge \max\{3H, 4\kappa/U_c,
16G^2/(\mu U_c)\}`:

.. math::

    \mathbb E f_c(\hat w_{c,T}) - f_c(w_c^*) \le (8\tilde\sigma^2 + 32 G^2 \log KC)
    \Bigl(\frac1{\mu T} + \frac{2s - 1}{\mu T^2}\Bigr) + \frac{18\kappa H^2 G^2}{\mu T^2}
    + \frac{24 (s - 1) s^2 G^2}{\mu T^3}

Theorem A.10 (the mismatch decays, :math:`\|\delta_{c,t}\|_1^2 \le (t + s)^{-\beta}
\|\delta_{c,0}\|_1^2` with :math:`\beta \in (0, 1)`), for :math:`s \ge \max\{3H,
4\kappa/U_c\}`:

.. math::

    \mathbb E f_c(\hat w_{c,T}) - f_c(w_c^*) \le 12\tilde\sigma^2
    \Bigl(\frac1{\mu T} + \frac{2s - 1}{\mu T^2}\Bigr)
    + \frac{48 G^2 \|\delta_{c,0}\|_1^2}{\mu T^{1+\beta}}
    + \frac{24 G^2 (s - 1 + 2\|\delta_{c,0}\|_1^2 s^{-\beta}) s^2}{\mu T^3}
    + \frac{48 L H^2 G^2}{\mu^2 T^2}

Where the paper is inconsistent, and the form used here:

* the main text (after Theorem 4.5) states an extra :math:`O(G/(\mu T))` term; the appendix
  proves :math:`O(G^2 \log KC/(\mu T))`: the appendix's form is used, with the natural
  logarithm (it comes from a log-sum-exp bound);
* Lemma A.7 asks :math:`\eta_t \le \gamma_t/\max\{5/2, 16G^2, 4L\}`; the theorems' condition on
  s keeps the last two and drops :math:`s \ge 5/(2\mu U_c)`. :func:`minimum_s` is the theorems'
  condition as printed; :func:`lemma_a7_step_holds` checks the lemma's along a run;
* the theorems state :math:`\eta_t \le 1/(\mu(t + s))`, Lemma A.8 needs equality: equality is
  used;
* A.10's assumption cannot hold at t = 0 when s > 1 unless :math:`\delta_{c,0} = 0`
  (:math:`s^{-\beta} < 1`); :func:`decay_exponent` fits :math:`\beta` on t > 0 and
  :func:`decay_holds` checks the normalised form :math:`\|\delta_{c,t}\|_1^2 \le ((t + s)/s)^{
  -\beta} \|\delta_{c,0}\|_1^2`. The second assumption of A.10, :math:`|p^k_c - \hat
  p^k_{c,t}| \le |p^k_c - \hat p^k_{c,0}|`, is :func:`entrywise_shrinks`.

Remark A.11 states that from the uniform router :math:`\|\delta_{c,0}\|_1 = \sum_k |p(k) -
p^k_c| \le 1 - U_c`. For one-hot true routers (the synthetic tasks) :math:`\|\delta_{c,0}\|_1 =
2(1 - p(c))` and :math:`U_c = p(c)`: twice the remark's bound, which holds for the total
variation :math:`\tfrac12\|\delta_{c,0}\|_1`. The remark is not used here.
"""

from __future__ import annotations

import math

import numpy as np

from ..._validation import integer, real
from ...errors import DataError, ParameterError, ShapeError
from .aggregation import cluster_probabilities

__all__ = [
    "aggregation_weights",
    "mismatch",
    "uniformity",
    "effective_variance",
    "condition_number",
    "weight_floor",
    "step_size",
    "averaging_weight",
    "minimum_s",
    "bound_a9",
    "bound_a10",
    "fit_power",
    "decay_exponent",
    "decay_holds",
    "entrywise_shrinks",
    "lemma_a7_step_holds",
]


def aggregation_weights(pi: np.ndarray, n_samples: np.ndarray) -> np.ndarray:
    r""":math:`p^k_c = p(k|c)` of eq. (2) for routers ``pi`` (..., K, C) and :math:`N^k` (K,).

    Leading axes of ``pi`` (e.g. time) are kept: the result has the shape of ``pi``; a column
    no client routes to (:math:`p(c) = 0`) is 0, as in
    :func:`~riemfl.nn.floral.cluster_probabilities`, which checks the last entry.
    """
    pi = np.asarray(pi, dtype=np.float64)
    if pi.ndim < 2:
        raise ShapeError(f"aggregation_weights: pi must be (..., K, C), got shape {pi.shape}")
    flat = pi.reshape(-1, *pi.shape[-2:])
    cluster_probabilities(flat[-1], n_samples)  # shapes, the simplex and the sizes
    if (flat < 0).any() or np.abs(flat.sum(-1) - 1).max() > 1e-5:
        raise ParameterError("aggregation_weights: every router must lie on the simplex")
    joint = np.asarray(n_samples, dtype=np.float64)[:, None] * pi
    total = joint.sum(-2, keepdims=True)
    return np.where(total > 0, joint / np.where(total > 0, total, 1.0), 0.0)


def mismatch(pi_hat: np.ndarray, pi_true: np.ndarray, n_samples: np.ndarray) -> np.ndarray:
    r""":math:`\|\delta_c\|_1 = \sum_k |\hat p^k_c - p^k_c|` per cluster: shape (..., C).

    ``pi_hat`` (..., K, C) in the true clusters' labels (match learned labels first), ``pi_true``
    (K, C).
    """
    p_hat = aggregation_weights(pi_hat, n_samples)
    p = aggregation_weights(pi_true, n_samples)
    if p_hat.shape[-2:] != p.shape:
        raise ShapeError(f"mismatch: pi_hat {p_hat.shape} and pi_true {p.shape} disagree")
    return np.abs(p_hat - p).sum(-2)


def uniformity(pi_true: np.ndarray, n_samples: np.ndarray) -> np.ndarray:
    r""":math:`U_c = \min_{k:\, p(c) \le \pi^k_c} p(c)/\pi^k_c` per cluster, shape (C,).

    A cluster no client reaches (:math:`p(c) = 0`) has no such k; its :math:`U_c` is NaN.
    """
    probs = cluster_probabilities(pi_true, n_samples)
    pi, p_c = probs.p_c_given_k, probs.p_c
    out = np.full(p_c.shape, math.nan)
    for c, pc in enumerate(p_c):
        eligible = pi[:, c][(pi[:, c] >= pc) & (pi[:, c] > 0)]
        if pc > 0 and eligible.size:
            out[c] = float(np.min(pc / eligible))
    return out


def effective_variance(sigma2: np.ndarray | float, weights: np.ndarray) -> np.ndarray:
    r""":math:`\tilde\sigma^2_c = \sigma^2_c \|p_c\|^2`; ``weights`` are the (K, C)
    :math:`p^k_c`."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2:
        raise ShapeError(f"effective_variance: weights must be (K, C), got shape {w.shape}")
    return np.asarray(sigma2, dtype=np.float64) * (w**2).sum(0)


def condition_number(smoothness: float, mu: float) -> float:
    """:math:`\\kappa = L/\\mu` (Assumption 4.2: each :math:`f_c` L-smooth, mu-strongly convex)."""
    mu = real(mu, "condition_number: mu", above=0)
    smoothness = real(smoothness, "condition_number: L (>= mu)", at_least=mu)
    return smoothness / mu


def weight_floor(pi_hat: np.ndarray, pi_true: np.ndarray, n_samples: np.ndarray) -> np.ndarray:
    r""":math:`\gamma_t = \min\{1, \min_{k:\, p^k_c > 0} \hat p^k_{c,t}/p^k_c\}` (Lemma A.7):
    shape (..., C) for ``pi_hat`` (..., K, C)."""
    p_hat = aggregation_weights(pi_hat, n_samples)
    p = aggregation_weights(pi_true, n_samples)
    ratio = np.where(p > 0, p_hat / np.where(p > 0, p, 1.0), np.inf)
    return np.minimum(1.0, ratio.min(-2))


def step_size(t: np.ndarray | int, mu: float, s: float) -> np.ndarray:
    r""":math:`\eta_t = 1/(\mu(t + s))` (Theorems A.9, A.10)."""
    mu = real(mu, "step_size: mu", above=0)
    s = real(s, "step_size: s", at_least=1)
    return 1.0 / (mu * (np.asarray(t, dtype=np.float64) + s))


def averaging_weight(t: np.ndarray | int, s: float) -> np.ndarray:
    r"""The weight :math:`(t + s)^2` of :math:`\tilde w_{c,t}` in :math:`\hat w_{c,T}`."""
    s = real(s, "averaging_weight: s", at_least=1)
    return (np.asarray(t, dtype=np.float64) + s) ** 2


def minimum_s(
    local_steps: int,
    kappa: float,
    uniformity: float,
    g2: float | None = None,
    mu: float | None = None,
) -> float:
    r"""The smallest s the theorems allow: :math:`\max\{3H, 4\kappa/U_c\}` (A.10), and with
    ``g2`` and ``mu`` also :math:`16 G^2/(\mu U_c)` (A.9)."""
    h = integer(local_steps, "minimum_s: local_steps H", minimum=1)
    kappa = real(kappa, "minimum_s: kappa", at_least=1)
    u = real(uniformity, "minimum_s: U_c", above=0, at_most=1)
    s = max(3.0 * h, 4.0 * kappa / u)
    if g2 is not None:
        g2 = real(g2, "minimum_s: G^2", at_least=0)
        mu = real(mu, "minimum_s: mu (needed with G^2)", above=0)
        s = max(s, 16.0 * g2 / (mu * u))
    return s


def _horizon(steps: np.ndarray | int, name: str) -> np.ndarray:
    t = np.asarray(steps, dtype=np.float64)
    if t.size == 0 or not np.all(np.isfinite(t)) or np.any(t < 1):
        raise DataError(f"{name}: T must be >= 1, got {steps!r}")
    return t


def bound_a9(
    steps: np.ndarray | int,
    *,
    sigma_tilde2: float,
    g2: float,
    mu: float,
    kappa: float,
    local_steps: int,
    s: float,
    n_clients: int,
    n_clusters: int,
) -> np.ndarray:
    """Theorem A.9's bound on :math:`\\mathbb E f_c(\\hat w_{c,T}) - f_c(w_c^*)` at every T of
    ``steps`` (module docstring; the condition on s is :func:`minimum_s`'s, not checked here)."""
    t = _horizon(steps, "bound_a9")
    sig = real(sigma_tilde2, "bound_a9: sigma_tilde2", at_least=0)
    g2 = real(g2, "bound_a9: G^2", at_least=0)
    mu = real(mu, "bound_a9: mu", above=0)
    kappa = real(kappa, "bound_a9: kappa", at_least=1)
    h = integer(local_steps, "bound_a9: local_steps H", minimum=1)
    s = real(s, "bound_a9: s", at_least=1)
    kc = integer(n_clients, "bound_a9: K", minimum=1)
    kc *= integer(n_clusters, "bound_a9: C", minimum=1)
    lead = (8.0 * sig + 32.0 * g2 * math.log(kc)) * (1.0 / (mu * t) + (2 * s - 1) / (mu * t**2))
    return lead + 18.0 * kappa * h**2 * g2 / (mu * t**2) + 24.0 * (s - 1) * s**2 * g2 / (mu * t**3)


def bound_a10(
    steps: np.ndarray | int,
    *,
    sigma_tilde2: float,
    g2: float,
    mu: float,
    smoothness: float,
    local_steps: int,
    s: float,
    delta0: float,
    beta: float,
) -> np.ndarray:
    """Theorem A.10's bound at every T of ``steps`` (module docstring); ``delta0`` is
    :math:`\\|\\delta_{c,0}\\|_1` and ``beta`` in (0, 1)."""
    t = _horizon(steps, "bound_a10")
    sig = real(sigma_tilde2, "bound_a10: sigma_tilde2", at_least=0)
    g2 = real(g2, "bound_a10: G^2", at_least=0)
    mu = real(mu, "bound_a10: mu", above=0)
    big_l = real(smoothness, "bound_a10: L (>= mu)", at_least=mu)
    h = integer(local_steps, "bound_a10: local_steps H", minimum=1)
    s = real(s, "bound_a10: s", at_least=1)
    d2 = real(delta0, "bound_a10: delta0", at_least=0, at_most=2) ** 2
    beta = real(beta, "bound_a10: beta", above=0, below=1)
    out = 12.0 * sig * (1.0 / (mu * t) + (2 * s - 1) / (mu * t**2))
    out = out + 48.0 * g2 * d2 / (mu * t ** (1 + beta))
    out = out + 24.0 * g2 * (s - 1 + 2 * d2 * s ** (-beta)) * s**2 / (mu * t**3)
    return out + 48.0 * big_l * h**2 * g2 / (mu**2 * t**2)


def fit_power(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """``(a, b)`` of the least-squares line :math:`\\log y = a \\log x + \\log b` over the
    points with x, y > 0 and finite; ``(nan, nan)`` with fewer than two such points."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape:
        raise ShapeError(f"fit_power: x {x.shape} and y {y.shape} differ")
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    if keep.sum() < 2 or np.ptp(np.log(x[keep])) == 0:
        return math.nan, math.nan
    a, log_b = np.polyfit(np.log(x[keep]), np.log(y[keep]), 1)
    return float(a), float(math.exp(log_b))


def decay_exponent(steps: np.ndarray, delta: np.ndarray, s: float) -> float:
    r""":math:`\beta` of the fit :math:`\|\delta_{c,t}\|_1^2 \approx A (t + s)^{-\beta}` over
    t > 0 (A.10's assumption, with a free constant); NaN when it cannot be fitted (a mismatch
    that is exactly 0 has nothing to fit)."""
    s = real(s, "decay_exponent: s", at_least=1)
    t = np.asarray(steps, dtype=np.float64)
    keep = t > 0
    slope, _ = fit_power(t[keep] + s, np.asarray(delta, dtype=np.float64)[keep] ** 2)
    return -slope


def decay_holds(steps: np.ndarray, delta: np.ndarray, s: float, beta: float) -> bool:
    r"""Whether :math:`\|\delta_{c,t}\|_1^2 \le ((t + s)/s)^{-\beta}\|\delta_{c,0}\|_1^2` at every
    recorded t (A.10's assumption, normalised so that it can hold at t = 0; module docstring).
    ``steps`` must start at t = 0."""
    t = np.asarray(steps, dtype=np.float64)
    d = np.asarray(delta, dtype=np.float64)
    if t.shape != d.shape or t.size == 0 or t[0] != 0:
        raise ShapeError("decay_holds: steps and delta must be equal-length series from t = 0")
    s = real(s, "decay_holds: s", at_least=1)
    allowed = ((t + s) / s) ** (-float(beta)) * d[0] ** 2
    return bool(np.all(d**2 <= allowed * (1 + 1e-9) + 1e-300))


def entrywise_shrinks(pi_hat: np.ndarray, pi_true: np.ndarray, n_samples: np.ndarray) -> bool:
    r"""A.10's second assumption along a run: :math:`|p^k_c - \hat p^k_{c,t}| \le |p^k_c -
    \hat p^k_{c,0}|` for every t, k and c (``pi_hat`` (T, K, C) from t = 0)."""
    dev = np.abs(aggregation_weights(pi_hat, n_samples) - aggregation_weights(pi_true, n_samples))
    return bool(np.all(dev <= dev[0] + 1e-12))


def lemma_a7_step_holds(
    steps: np.ndarray, floor: np.ndarray, *, mu: float, s: float, g2: float, smoothness: float
) -> bool:
    r"""Whether :math:`\eta_t \le \gamma_t / \max\{5/2, 16G^2, 4L\}` at every recorded t
    (Lemma A.7's step condition, with :math:`\gamma_t` from :func:`weight_floor`)."""
    eta = step_size(np.asarray(steps), mu, s)
    cap = max(2.5, 16.0 * real(g2, "G^2", at_least=0), 4.0 * real(smoothness, "L", above=0))
    return bool(np.all(eta <= np.asarray(floor, dtype=np.float64) / cap))

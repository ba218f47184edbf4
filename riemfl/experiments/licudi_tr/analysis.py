r"""From the sweep's loss tables to the figures' curves: smoothing, normalisation, averaging,
the phase of the better base, and Q.

Licudi 2025 (TR), Sec. 3: "losses are smoothed by convolution with a Gaussian filter (sigma =
100, truncated after 2 sigma); normalised relative losses in [0, 1] are then computed and averaged
over the underlying federated algorithms". The report does not say how the filter treats the
ends of a run or what the losses are normalised against; riemfl's choices:

* :func:`smooth`: the truncated Gaussian, renormalised over the steps that exist near the ends
  (no padding: a step's smoothed loss is the weighted mean of the losses within 2 sigma of it);
* :func:`relative`: per step, min-max across the methods of one panel (a figure's curves):
  :math:`(L_m - \min_k L_k)/(\max_k L_k - \min_k L_k)`, 0 for the best method and 1 for the
  worst; a step where every method has the same loss is 0 for all (and :func:`tied` marks it);
* :func:`panel`: per algorithm smooth, then normalise, then average the two algorithms' relative
  curves step by step (both runs have one checkpoint per server step).

Q (Licudi 2025 (TR), Theorem 1): :math:`\mathbb E[\mathcal L(\Theta^{s+1})] \le \frac1Q \mathbb
E[\mathcal L(\Theta^s - \eta_g\Delta^t)]`, the loss after the step on the learned manifold against
the loss after the straight step. :func:`q_estimate` is the mean over checkpoints of the ratio
line loss / curve loss with a 99% Gaussian interval (mean +/- 2.576 standard errors; the steps of
a run are correlated, so the interval is narrower than an honest one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = [
    "Z99",
    "smooth",
    "relative",
    "tied",
    "panel",
    "optimal",
    "better_base",
    "transitions",
    "near",
    "q_estimate",
]

#: the two-sided 99% quantile of the standard normal
Z99 = 2.5758293035489004


def smooth(values: Sequence[float], sigma: float, truncate: float = 2.0) -> np.ndarray:
    """Gaussian smoothing, truncated at ``truncate * sigma`` steps, renormalised at the ends.

    ``sigma = 0`` returns the values unchanged (as floats).
    """
    x = np.asarray(values, dtype=float)
    if sigma <= 0 or x.size == 0:
        return x.copy()
    radius = int(truncate * sigma + 0.5)
    k = np.arange(-radius, radius + 1)
    w = np.exp(-0.5 * (k / sigma) ** 2)
    total = np.convolve(x, w, mode="full")[radius : radius + x.size]
    weight = np.convolve(np.ones_like(x), w, mode="full")[radius : radius + x.size]
    return total / weight


def relative(curves: Mapping[str, Sequence[float]]) -> dict[str, np.ndarray]:
    """Per-step min-max normalisation across the methods of ``curves`` (module docstring)."""
    names = list(curves)
    stack = np.array([np.asarray(curves[n], dtype=float) for n in names])
    low, high = stack.min(axis=0), stack.max(axis=0)
    span = high - low
    safe = np.where(span > 0, span, 1.0)
    rel = np.where(span > 0, (stack - low) / safe, 0.0)
    return {n: rel[i] for i, n in enumerate(names)}


def tied(curves: Mapping[str, Sequence[float]]) -> np.ndarray:
    """Per step: whether every method of ``curves`` has the same value."""
    stack = np.array([np.asarray(v, dtype=float) for v in curves.values()])
    return stack.max(axis=0) == stack.min(axis=0)


def panel(
    per_algorithm: Mapping[str, Mapping[str, Sequence[float]]],
    names: Sequence[str],
    sigma: float,
    truncate: float = 2.0,
) -> dict[str, np.ndarray]:
    """The averaged normalised relative losses of the methods ``names``.

    ``per_algorithm``: algorithm -> method -> per-step losses. Each algorithm's curves are
    smoothed, normalised across ``names`` per step, and the relative curves are averaged over the
    algorithms (truncated to the shortest run).
    """
    rels = []
    for curves in per_algorithm.values():
        smoothed = {n: smooth(curves[n], sigma, truncate) for n in names}
        rels.append(relative(smoothed))
    length = min(len(r[names[0]]) for r in rels)
    return {n: np.mean([r[n][:length] for r in rels], axis=0) for n in names}


def optimal(curves: Mapping[str, np.ndarray], name: str, tol: float = 1e-12) -> np.ndarray:
    """Per step: whether ``name`` is (one of) the lowest of ``curves``, within ``tol``."""
    stack = np.array([curves[n] for n in curves])
    return curves[name] <= stack.min(axis=0) + tol


def better_base(curves: Mapping[str, np.ndarray], gradient: str, position: str) -> np.ndarray:
    """Per step: ``"gradient"`` where ``curves[gradient]`` is below ``curves[position]``, else
    ``"position"`` (a tie counts as position)."""
    return np.where(curves[gradient] < curves[position], "gradient", "position")


def transitions(labels: Sequence[str]) -> list[int]:
    """The steps s >= 1 where ``labels[s] != labels[s - 1]``."""
    lab = np.asarray(labels)
    return [int(s) for s in np.flatnonzero(lab[1:] != lab[:-1]) + 1]


def near(n: int, steps: Sequence[int], window: int) -> np.ndarray:
    """Per step 0..n-1: whether it lies within ``window`` steps of one of ``steps``."""
    out = np.zeros(n, dtype=bool)
    for s in steps:
        out[max(0, s - window) : min(n, s + window + 1)] = True
    return out


def q_estimate(line: Sequence[float], curve: Sequence[float]) -> dict[str, float]:
    """Q as the mean of the per-step ratios line / curve, with its 99% Gaussian half-width
    (module docstring), and the ratio of the mean losses."""
    a, b = np.asarray(line, dtype=float), np.asarray(curve, dtype=float)
    ratio = a / b
    n = ratio.size
    half = Z99 * float(ratio.std(ddof=1)) / math.sqrt(n) if n > 1 else math.nan
    return {
        "Q": float(ratio.mean()) if n else math.nan,
        "ci99": half,
        "ratio_of_means": float(a.mean() / b.mean()) if n else math.nan,
        "steps": n,
        "share_above_1": float(np.mean(ratio > 1.0)) if n else math.nan,
    }

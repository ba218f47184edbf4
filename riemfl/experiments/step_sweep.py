"""Step-size selection rules for a sweep, fixed before the sweep runs.

A sweep runs a grid of step sizes on a *tuning* seed, picks one step size per setting with a
rule, and reports the chosen step size's run on a second, *held-out* seed, so that the reported
number is not the one the choice was made on. The rules read only the tuning runs:

* :func:`best_step_size`: the step size with the fewest uploads to the tolerance
  (:func:`uploads_to_tolerance`); ties go to the smaller step size; none when no step size
  reaches the tolerance.
* :func:`largest_stable_step_size`: the largest step size whose run is stable
  (:func:`is_stable`); none when no run is.

"Tolerance" is relative: ``|grad f(x^r)| <= rel_tol |grad f(x^0)|``. A run here is anything with
the metric columns ``grad_norm``, ``loss`` and ``uplink_matrices`` (a
:class:`~riemfl.federated.History`), one entry per round from round 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Protocol

__all__ = [
    "Trace",
    "uploads_to_tolerance",
    "is_stable",
    "best_step_size",
    "largest_stable_step_size",
]


class Trace(Protocol):
    """The metric columns a rule reads (a :class:`~riemfl.federated.History` has them)."""

    grad_norm: Sequence[float]
    loss: Sequence[float]
    uplink_matrices: Sequence[float]


def uploads_to_tolerance(run: Trace, rel_tol: float) -> float:
    """Uploads per client at the first round with ``|grad f| <= rel_tol |grad f(x^0)|``.

    ``math.inf`` when no round reaches it, or when a non-finite ``|grad f|`` comes first.
    """
    g = run.grad_norm
    tol = rel_tol * g[0]
    for i, value in enumerate(g):
        if not math.isfinite(value):
            return math.inf
        if value <= tol:
            return float(run.uplink_matrices[i])
    return math.inf


def is_stable(run: Trace, rel_tol: float, blocks: int = 10, drop: float = 0.01) -> bool:
    """Stable: every ``f`` and ``|grad f|`` is finite, and ``f`` falls by at least ``drop``
    (a fraction) over every block of ``R / blocks`` rounds until ``|grad f|`` reaches the
    tolerance (after that, rounding-level wiggles do not count).

    A divergent run fails the first condition; a run that stalls or oscillates (``f`` flat or
    rising over a block) fails the second; a slow but steadily decreasing run passes.
    """
    g, f = list(run.grad_norm), list(run.loss)
    if not all(math.isfinite(v) for v in (*g, *f)):
        return False
    tol = rel_tol * g[0]
    last = len(f) - 1
    width = max(last // blocks, 1)
    for start in range(0, last, width):
        if g[start] <= tol:
            return True
        end = min(start + width, last)
        if not f[end] <= (1.0 - drop) * f[start]:
            return False
    return True


def best_step_size(tuning: Mapping[float, Trace], rel_tol: float) -> float | None:
    """The step size whose tuning run needs the fewest uploads to the tolerance (ties: the
    smaller step size); None when none reaches it."""
    scored = sorted(
        (uploads_to_tolerance(run, rel_tol), step_size) for step_size, run in tuning.items()
    )
    if not scored or not math.isfinite(scored[0][0]):
        return None
    return scored[0][1]


def largest_stable_step_size(
    tuning: Mapping[float, Trace], rel_tol: float, blocks: int = 10
) -> float | None:
    """The largest step size whose tuning run is stable (:func:`is_stable`); None when none
    is."""
    stable = [step_size for step_size, run in tuning.items() if is_stable(run, rel_tol, blocks)]
    return max(stable) if stable else None

"""Summaries over seeds for the reports' tables: a mean, its spread, and how many runs had one.

With one seed there is no spread to report, so a table prints the value alone (not "+/- 0.00"),
a quantity no run reached prints as such (not "nan +/- nan"), and a figure's axis says "one
seed", not "mean over seeds" (:func:`over_seeds`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

__all__ = ["mean_std", "mean_spread", "over_seeds"]


def mean_std(values: Iterable[float | None]) -> tuple[float, float, int]:
    """``(mean, std, count)`` of the values that are not None; the std (population, as numpy's)
    is NaN with fewer than two values and both are NaN with none."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return math.nan, math.nan, 0
    return float(np.mean(xs)), float(np.std(xs)) if len(xs) > 1 else math.nan, len(xs)


def mean_spread(
    values: Iterable[float | None], digits: int, *, spread_digits: int | None = None
) -> str:
    """``"m +/- s"`` over two or more values, ``"m"`` over one, ``"-"`` over none (None values,
    e.g. a target not reached, are left out; say how many were where that matters)."""
    mean, std, count = mean_std(values)
    if count == 0:
        return "-"
    text = f"{mean:.{digits}f}"
    if count > 1:
        text += f" +/- {std:.{digits if spread_digits is None else spread_digits}f}"
    return text


def over_seeds(count: int) -> str:
    """What a curve or bar over ``count`` seeds shows: ``"mean over 3 seeds"``, or ``"one
    seed"`` (a single run is no mean, and has no spread to draw)."""
    return "one seed" if count == 1 else f"mean over {count} seeds"


def median_over(count: int) -> str:
    """What a cell over ``count`` seeds shows: ``"median over 3 seeds"``, or ``"one seed"``."""
    return "one seed" if count == 1 else f"median over {count} seeds"

"""Asynchronous runs compared on three clocks: server steps, client updates and virtual time.

An asynchronous run (:func:`riemfl.federated.async_engine.run_async`) records, at every evaluated
row, three clocks: ``step`` (server steps, i.e. global model versions), ``updates`` (client
updates received by the server) and ``time`` (the simulator's virtual time). Most rules take one
server step per update; FedBuff takes one per K updates (Toghani & Uribe 2022, Alg. 1), so at an
equal number of server steps it has used K times more client training. Comparing methods at equal
client work means reading every run at the same number of updates (or the same virtual time):

* :func:`value_at`: a run's metric at a given clock reading, by linear interpolation between the
  two evaluations around it (the metric is known only where the run was evaluated);
* :func:`first_reached`: the clock reading of the first evaluation whose error is at most e
  (T_e of Licudi et al. 2025, Sec. 4.2, on any clock);
* :func:`common_budget`: the largest clock reading every run reached (the smallest final value);
* :func:`disagreeing_pairs`, :func:`pair_agreement`: the pairs of methods two scorings order
  differently, and how many they order alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ParameterError
from ..federated.fairness import time_to_error

__all__ = [
    "AXES",
    "value_at",
    "first_reached",
    "common_budget",
    "disagreeing_pairs",
    "pair_agreement",
]

#: the clocks of an asynchronous history: column -> what it counts
AXES = {"step": "server steps", "updates": "client updates", "time": "virtual time"}


def _clock(x: Any, name: str) -> np.ndarray:
    xs = np.asarray(x, dtype=np.float64)
    if xs.ndim != 1 or xs.size == 0 or not np.isfinite(xs).all():
        raise ParameterError(f"{name}: the clock must be a non-empty 1-D array of finite numbers")
    if (np.diff(xs) < 0).any():
        raise ParameterError(f"{name}: the clock must be non-decreasing (rows in run order)")
    return xs


def value_at(x: Sequence[float], y: Sequence[float], at: float) -> float:
    r"""The metric ``y`` of a run at clock reading ``at``, linear between evaluations.

    With :math:`x_i \le a < x_{i+1}` (``i`` the last row at or before ``a``),

    .. math::

        y(a) = y_i + \frac{a - x_i}{x_{i+1} - x_i} (y_{i+1} - y_i),

    and :math:`y(a) = y_i` when :math:`x_i = a` (the last of several rows at the same reading: the
    model after every event at that instant).

    Parameters
    ----------
    x : sequence of float
        The clock at each evaluated row (``step``, ``updates`` or ``time``), non-decreasing.
    y : sequence of float
        The metric at each row (same length).
    at : float
        The reading, within ``[x[0], x[-1]]`` (no extrapolation).

    Raises
    ------
    ParameterError
        When the clock is not non-decreasing, the lengths differ, or ``at`` lies outside the run.
    """
    xs, ys = _clock(x, "value_at"), np.asarray(y, dtype=np.float64)
    if ys.shape != xs.shape:
        raise ParameterError(f"value_at: y must have the shape of x {xs.shape}, got {ys.shape}")
    if not xs[0] <= at <= xs[-1]:
        raise ParameterError(
            f"value_at: at = {at!r} lies outside the run's clock [{xs[0]:g}, {xs[-1]:g}] "
            "(no extrapolation: choose a budget every run reached, e.g. common_budget)"
        )
    i = int(np.searchsorted(xs, at, side="right")) - 1
    if xs[i] == at:
        return float(ys[i])
    return float(ys[i] + (at - xs[i]) / (xs[i + 1] - xs[i]) * (ys[i + 1] - ys[i]))


def first_reached(x: Sequence[float], errors: Sequence[float], e: float) -> float | None:
    """T_e on the clock ``x``: the reading of the first row whose error is at most ``e``; None if
    no row reaches it (Licudi et al. 2025, Sec. 4.2, with :func:`time_to_error`)."""
    xs = _clock(x, "first_reached")
    if np.shape(errors) != xs.shape:
        raise ParameterError(f"first_reached: errors must have the shape of x {xs.shape}")
    k = time_to_error(errors, e)
    return None if k is None else float(xs[k])


def common_budget(clocks: Sequence[Sequence[float]]) -> float:
    """The largest reading every run reached: the smallest final value of the clocks."""
    if not clocks:
        raise ParameterError("common_budget: no runs given")
    return min(float(_clock(x, "common_budget")[-1]) for x in clocks)


def disagreeing_pairs(
    ours: Mapping[str, float], paper: Mapping[str, float]
) -> list[tuple[str, str]]:
    """The pairs (a, b) of the methods of ``ours`` (a before b in its order) that the two
    scorings order differently: ``ours[a] > ours[b]`` but not ``paper[a] > paper[b]``, or the
    reverse."""
    methods = list(ours)
    return [
        (a, b)
        for i, a in enumerate(methods)
        for b in methods[i + 1 :]
        if (ours[a] > ours[b]) != (paper[a] > paper[b])
    ]


def pair_agreement(ours: Mapping[str, float], paper: Mapping[str, float]) -> tuple[int, int]:
    """(pairs ordered alike, pairs) over the pairs of the methods of ``ours``."""
    pairs = len(ours) * (len(ours) - 1) // 2
    return pairs - len(disagreeing_pairs(ours, paper)), pairs

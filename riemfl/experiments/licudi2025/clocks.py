"""The Licudi et al. 2025 runs read at equal work: the same budget on each clock of
:data:`riemfl.experiments.equal_work.AXES` (server steps, client updates, virtual time)."""

from __future__ import annotations

from typing import Any

from ..equal_work import AXES, common_budget, first_reached, value_at
from .settings import Settings

__all__ = ["equal_work"]


def equal_work(runs: list[dict[str, Any]], s: Settings) -> dict[str, Any]:
    """Every method at the same budget on each clock of ``equal_work.AXES``.

    The protocol (fixed before the results were seen): per clock, the budget is the largest
    reading every run of the report reached (:func:`~riemfl.experiments.equal_work.common_budget`:
    server steps ``s.steps``; client updates: the fewest any run received, FedBuff's K = 10
    per step against one for the other rules; virtual time: the shortest run); each run's accuracy
    at the budget is read between its two evaluations around it
    (:func:`~riemfl.experiments.equal_work.value_at`); T_e on the clock is the reading of the first
    evaluation with error at most e, within the budget (server steps: the per-step grid of the
    table, every ``s.record_every`` steps; updates and time: every evaluation, about every
    ``s.record_every`` updates for every rule).

    Returns
    -------
    dict
        clock -> {"budget": float, "accuracy": {method: [per seed]}, "T_e": {method: [per
        seed]}}.
    """
    out: dict[str, Any] = {}
    for axis in AXES:
        budget = common_budget([r["curve"][axis] for r in runs])
        acc: dict[str, list[float]] = {}
        te: dict[str, list[float | None]] = {}
        for method in s.methods:
            rs = [r for r in runs if r["method"] == method]
            acc[method] = [value_at(r["curve"][axis], r["curve"]["accuracy"], budget) for r in rs]
            te[method] = [
                r["T_e"] if axis == "step" else _reached_within(r["curve"], axis, budget, s)
                for r in rs
            ]
        out[axis] = {"budget": budget, "accuracy": acc, "T_e": te}
    return out


def _reached_within(
    curve: dict[str, list[float]], axis: str, budget: float, s: Settings
) -> float | None:
    """T_e on the clock ``axis``, if reached within ``budget`` (a run that ran longer than the
    budget must not reach the target where the others could not); else None."""
    errors = [1.0 - a for a in curve["accuracy"]]
    reading = first_reached(curve[axis], errors, s.error_target)
    return reading if reading is not None and reading <= budget else None

"""The report's text on what discarding the attackers can reach: the oracle's floor (the gap of
the honest clients' optimum on the objective of all the clients) and the robust aggregators' bias
without attackers, each one's clean-run gap relative to the plain mean's."""

from __future__ import annotations

import math
from typing import Any

from ..spread import median_over
from .settings import CLEAN, Settings
from .verdicts import Verdict

__all__ = ["bias_table", "floor_text"]


def _relative(value: float, mean: float) -> str:
    """``value`` against the plain mean's gap: their ratio, or their difference where the mean's
    gap is not positive (a gap to a reference loss)."""
    if not math.isfinite(value):
        return "failed"
    if not math.isfinite(mean):
        return f"{value:.2e} (the mean failed)"
    if mean > 0:
        return f"x{value / mean:.3g}"
    return f"{value - mean:+.2e} (difference)"


def bias_table(rows: list[dict[str, Any]], s: Settings) -> list[str]:
    """Per problem, each robust aggregator's final gap in the clean run relative to the plain
    mean's (and, on a classifier, its accuracy's difference in points): the aggregators' bias
    without any attack."""
    robust = [a for a in s.aggregators if a != "mean"]
    lines = [
        "| problem | " + " | ".join(robust) + " |",
        "|---|" + "---|" * len(robust),
    ]
    for problem in s.rounds:
        clean = {
            r["aggregator"]: r for r in rows if r["problem"] == problem and r["attack"] == CLEAN
        }
        if "mean" not in clean:
            continue
        mean = clean["mean"]
        cells = []
        for a in robust:
            if a not in clean:
                cells.append("")
                continue
            text = _relative(clean[a]["gap"], mean["gap"])
            if "accuracy" in mean and math.isfinite(clean[a]["accuracy"]):
                points = 100 * (clean[a]["accuracy"] - mean["accuracy"])
                text += f"; {points:+.1f} pts"
            cells.append(text)
        lines.append(f"| {problem} | " + " | ".join(cells) + " |")
    return lines


def floor_text(rows: list[dict[str, Any]], s: Settings, verdicts: list[Verdict]) -> list[str]:
    """Why discarding the attackers has a floor (the oracle), in how many pairs the oracle is
    within the bound, and the robust aggregators' bias without attackers
    (:func:`bias_table`)."""
    told = [v for v in verdicts if v.oracle_within is not None]
    lines = [
        "The oracle (the last column of the tables of results) is the mean of the uploads of the "
        "clients that do not attack, the server told which they are: no defence, but the "
        "reference of what discarding exactly the attackers reaches. It never reads the "
        "attackers' uploads, so its run is the same under every attack. Its runs converge to "
        "the optimum of the honest clients' objective, from which the attackers' data are "
        "missing; on heterogeneous clients that optimum is not the optimum of all the clients' "
        "objective, on which the gaps are measured, and its gap there is the floor of what "
        "discarding the attackers and averaging the others reaches (an aggregator whose own "
        "bias points towards the full optimum, or that keeps some of the attackers' updates, "
        "may end below it). The floor is set by the data, not by the rounds, "
        "whereas the clean run's gap falls as the run converges, so a bound of "
        f"{s.gap_factor:g}x a small clean gap can lie below it: where the oracle is beyond the "
        "bound, the goal is out of reach by discarding the attackers, and a FAIL there says so "
        "rather than that the aggregators fall short of it. Without attackers the oracle is the "
        "plain mean, and it has no run of its own.",
    ]
    if told:
        reach = sum(bool(v.oracle_within) for v in told)
        lines += [
            "",
            f"The oracle is within the bound in {reach}/{len(told)} (problem, attack) pairs.",
        ]
    lines += [
        "",
        "The robust aggregators add a bias of their own, with or without attackers: the robust "
        "centre (median, trimmed mean, the Krum selection, the clipped mean) of heterogeneous "
        "clients' updates is not their mean, and the rule settles away from the optimum of all "
        "the clients. Without attackers, each robust aggregator's final gap relative to the "
        "plain mean's (on logreg-digits also the accuracy's difference in points), "
        f"{median_over(len(s.seeds))}; x1 is no bias:",
        "",
        *bias_table(rows, s),
    ]
    return lines

"""The robustness figures: per problem, the final gap (and accuracy) against the attackers'
share, one panel per attack, one line per aggregator and one for the oracle, which starts at the
plain mean's clean run (``robustness-PROBLEM.png``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..spread import median_over
from ..styles import TITLE_FONTSIZE, Styles, log_axis, pyplot, save, shared_legend
from .oracle import ORACLE
from .settings import CLEAN, Settings

__all__ = ["plot_problem"]


def _series(rows: list[dict[str, Any]], attack: str, aggregator: str, key: str) -> tuple:
    """x (the fractions, the clean run's 0 first) and y (NaN for a failed median); the oracle,
    without a clean run of its own, starts at the plain mean's."""
    at_zero = "mean" if aggregator == ORACLE else aggregator
    mine = [
        r
        for r in rows
        if (r["aggregator"] == aggregator and r["attack"] == attack)
        or (r["aggregator"] == at_zero and r["attack"] == CLEAN)
    ]
    mine.sort(key=lambda r: r["fraction"])
    ys = [r[key] if math.isfinite(r[key]) else math.nan for r in mine]
    return [100 * r["fraction"] for r in mine], ys


def plot_problem(rows: list[dict[str, Any]], problem: str, s: Settings, out: Path) -> Any:
    """``robustness-PROBLEM.png`` from the summary rows of ``problem``; returns the (closed)
    figure."""
    plt = pyplot()
    mine = [r for r in rows if r["problem"] == problem]
    keys = ["gap"] + (["accuracy"] if "accuracy" in mine[0] else [])
    attacks = list(s.attacks)
    fig, axes = plt.subplots(
        len(keys),
        len(attacks),
        figsize=(3.2 * len(attacks), 3.2 * len(keys) + 0.6),
        layout="constrained",
        squeeze=False,
    )
    columns = s.columns()
    styles = Styles(list(columns))
    for i, key in enumerate(keys):
        for ax, attack in zip(axes[i], attacks, strict=True):
            for aggregator in columns:
                xs, ys = _series(mine, attack, aggregator, key)
                ax.plot(xs, ys, **(styles.of(aggregator) | {"markevery": 1}))
            if key == "gap" and any(ln.get_ydata().size for ln in ax.lines):
                finite = [y for ln in ax.lines for y in ln.get_ydata() if y > 0]
                if finite:
                    log_axis(ax, "y")
            ax.set_xlabel("attackers (% of clients)")
            ax.set_ylabel("f - f*" if key == "gap" else "accuracy (all clients' rows)")
            ax.set_title(f"{problem}: {attack}", fontsize=TITLE_FONTSIZE)
            ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(
        f"final values, {median_over(len(s.seeds))}; a failed median is not drawn",
        fontsize=TITLE_FONTSIZE,
    )
    shared_legend(fig, [ax for row in axes for ax in row], ncols=len(columns))
    return save(fig, out / f"robustness-{problem}.png")

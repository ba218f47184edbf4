"""The communication figure: the relative optimality gap against the uplink bytes per client
(log-log), one panel per problem and rule, one line per compressor, the tolerance dotted
(``communication.png``).

The curves are those of the first seed: each seed's compressed runs stop at a multiple of the
rounds its own float64 run needed, so curves of several seeds end at different rounds, and a
median over them would change its seeds along the way. The tables give the medians.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..styles import TITLE_FONTSIZE, Styles, log_axis, pyplot, save, shared_legend
from .settings import REFERENCE, Settings

__all__ = ["curve", "plot"]


def curve(run: dict[str, Any] | None) -> tuple[np.ndarray, np.ndarray]:
    """The bytes per client and the relative gap of a run from round 1 on (0 bytes has no place
    on a log axis), gaps at or below 0 as NaN; empty for a failed or missing run."""
    if run is None or "curve" not in run:
        return np.empty(0), np.empty(0)
    gaps = np.asarray(run["curve"][1:], dtype=float)
    return np.asarray(run["uplink"][1:], dtype=float), np.where(gaps > 0, gaps, np.nan)


def plot(runs: list[dict[str, Any]], s: Settings, out: Path) -> Any:
    """``communication.png`` of the first seed's runs; returns the (closed) figure."""
    plt = pyplot()
    problems = list(s.tolerance)
    fig, axes = plt.subplots(
        len(problems),
        len(s.rules),
        figsize=(4.4 * len(s.rules), 3.4 * len(problems) + 0.8),
        layout="constrained",
        squeeze=False,
    )
    styles = Styles(list(s.compressors))
    seed = s.seeds[0]
    by = {(r["problem"], r["rule"], r["compressor"]): r for r in runs if r["seed"] == seed}
    for row, problem in zip(axes, problems, strict=True):
        for ax, rule in zip(row, s.rules, strict=True):
            for compressor in s.compressors:
                run = by.get((problem, rule, compressor))
                style = styles.of(compressor)
                if compressor == REFERENCE:
                    style["label"] = "none (float64)"
                ax.plot(*curve(run), **style)
            ax.axhline(s.tolerance[problem], color="black", ls=":", lw=1)
            log_axis(ax, "x")
            log_axis(ax, "y")
            ax.set_xlabel("uplink bytes per client")
            ax.set_ylabel("(f - f*) / (f(x0) - f*)")
            ax.set_title(f"{problem}: {rule}", fontsize=TITLE_FONTSIZE)
            ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(
        f"seed {seed}; dotted: the tolerance; each compressed run stops at {s.multiple:g}x the "
        "rounds float64 needed",
        fontsize=TITLE_FONTSIZE,
    )
    shared_legend(fig, [ax for row in axes for ax in row], ncols=min(len(s.compressors), 4))
    return save(fig, out / "communication.png")

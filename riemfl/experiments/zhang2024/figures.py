"""The plots of the Zhang et al. 2024 reproduction: one per figure of the paper
(:func:`plot_figure`) and the claim-8 sweep's (:func:`plot_sweep`).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

from ...federated import History
from ..step_sweep import uploads_to_tolerance
from ..styles import (
    TITLE_FONTSIZE,
    Styles,
    legend,
    legend_styles,
    log_axis,
    pyplot,
    save,
    shared_legend,
)
from .settings import Figure, Sweep

__all__ = ["plot_figure", "plot_sweep"]

#: axis labels by History column
_AXIS = {
    "round": "communication round",
    "uplink_matrices": "communication quantity (uploads)",
    "cpu_time": "CPU time (s)",
    "grad_norm": "|grad f(x)|",
    "optimality_gap": "f(x) - f*",
    "loss": "f(x)",
}


def plot_figure(fig: Figure, results: dict[str, History], path: Path, styles: Styles) -> Any:
    """One figure of the paper: a column per (panel, x axis), a row per y axis; returns the
    (closed) matplotlib figure.

    Both axes are logarithmic, the x axes from round 1 (uploads and CPU seconds from their first
    positive reading): |grad f| falls by orders of magnitude in the first rounds, which a linear
    axis squeezes against its left edge. The panels of a row share their y axis, so that
    heights compare across panels. Every label keeps its look across the report's figures
    (``styles``), and the legend says which curves lie on top of another (one legend below the
    panels when they all show the same entries)."""
    plt = pyplot()
    cols = [(title, runs, x) for title, runs in fig.panels for x in fig.x]
    width = 4.0 * len(cols)
    f, axes = plt.subplots(
        len(fig.y),
        len(cols),
        figsize=(width, 3.1 * len(fig.y) + 1.0),
        squeeze=False,
        sharey="row",
        layout="constrained",
    )
    for row, y in enumerate(fig.y):
        for col, (title, runs, x) in enumerate(cols):
            ax = axes[row][col]
            curves = {}
            for label, run in runs:
                h = results[run.key]
                pts = [
                    (a, b)
                    for a, b in zip(getattr(h, x), getattr(h, y), strict=True)
                    if a > 0 and b > 0
                ]
                if pts:
                    curves[label] = tuple(zip(*pts, strict=True))
            for label, style in legend_styles(styles, curves).items():
                ax.loglog(*curves[label], **style)
            log_axis(ax, "x")
            ax.set_xlabel(_AXIS[x] + " (log)")
            if col == 0:
                ax.set_ylabel(_AXIS[y])
            if title:
                ax.set_title(title, fontsize=TITLE_FONTSIZE)
            ax.grid(True, which="both", alpha=0.3)
    shared_legend(f, list(axes.flat))
    heading = f"Fig. {fig.number}: {fig.title}"
    f.suptitle(textwrap.fill(heading, width=max(30, int(11 * width))), fontsize=TITLE_FONTSIZE)
    return save(f, path)


#: the legend entry of each rule of the sweep (the keys of SWEEP_RULES)
_SHORT = {
    "fixed": "one eta (1e-4)",
    "best": "rule (i): best eta, held-out seed",
    "stable": "rule (ii): largest stable eta, held-out seed",
}


def plot_sweep(
    setting: Sweep,
    picks: dict[str, dict[int, float | None]],
    results: dict[str, History],
    path: Path,
    styles: Styles,
) -> Any:
    """The claim-8 sweep: uploads to the tolerance against tau per rule (held-out seed), and
    the tuning grid (uploads against eta per tau, tuning seed); unreached points are left out.
    Returns the (closed) matplotlib figure."""
    plt = pyplot()
    f, (left, right, drift) = plt.subplots(1, 3, figsize=(14.0, 4.6), layout="constrained")
    uploads = setting.uploads(picks, results)
    curves = {}
    for rule, by_tau in uploads.items():
        pts = [(t, u) for t, u in by_tau.items() if math.isfinite(u)]
        if pts:
            curves[_SHORT[rule]] = tuple(zip(*pts, strict=True))
    for label, style in legend_styles(styles, curves).items():
        left.plot(*curves[label], **(style | {"markevery": 1}))
    left.set_xlabel("local steps tau")
    left.set_ylabel("uploads to tolerance")
    left.set_xticks(list(setting.taus))
    left.set_title(f"held-out seed {setting.report_seed}", fontsize=TITLE_FONTSIZE)
    for t in setting.taus:
        tuning = setting.tuning(results, t)
        pts = [(s, uploads_to_tolerance(h, setting.rel_tol)) for s, h in tuning.items()]
        pts = [(s, u) for s, u in pts if math.isfinite(u)]
        if pts:
            style = styles.of(f"tau={t}") | {"markevery": 1}
            right.plot(*zip(*pts, strict=True), **style)
            drift.plot([s * t for s, _ in pts], [u for _, u in pts], **style)
    for ax, x in ((right, "step size eta"), (drift, "eta * tau")):
        log_axis(ax, "x")
        ax.set_xlabel(x)
        ax.set_ylabel("uploads to tolerance")
        ax.set_title(
            f"tuning seed {setting.tune_seed} (gaps: not reached in R rounds)",
            fontsize=TITLE_FONTSIZE,
        )
    for ax in (left, right, drift):
        ax.grid(True, which="both", alpha=0.3)
    legend(left, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    shared_legend(f, [right, drift])
    f.suptitle(
        f"Fig. 9 sweep: LRMC, RFedProj, |grad f| <= {setting.rel_tol:.0e} |grad f(x^0)|, "
        f"R = {setting.rounds}",
        fontsize=TITLE_FONTSIZE,
    )
    return save(f, path)

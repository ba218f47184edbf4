"""The figures of the Licudi et al. 2025 report: accuracy on the three clocks, fairness (Fig. 3)
and the local-epoch study (Fig. 4)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ..equal_work import common_budget, value_at
from ..spread import mean_std, over_seeds
from ..styles import (
    TITLE_FONTSIZE,
    Styles,
    legend_styles,
    log_axis,
    pyplot,
    save,
    shared_legend,
)
from .settings import Settings

__all__ = ["mean_curve", "plot_accuracy", "plot_clocks", "plot_epochs", "plot_fairness"]

#: clock (a column of ``equal_work.AXES``) -> the label of its axis
_AXIS_LABELS = {"step": "server step", "updates": "client updates received", "time": "virtual time"}


def mean_curve(
    runs: list[dict[str, Any]], axis: str, metric: str = "accuracy"
) -> tuple[np.ndarray, np.ndarray]:
    """The mean over seeds of a curve's ``metric`` (a column of the runs' curves) against
    ``axis`` (a column of ``equal_work.AXES``): read at the first seed's evaluations up to the
    end of the shortest seed."""
    curves = [r["curve"] for r in runs]
    end = common_budget([c[axis] for c in curves])
    x = np.array([v for v in curves[0][axis] if v <= end], dtype=float)
    values = [[value_at(c[axis], c[metric], v) for v in x] for c in curves]
    return x, np.mean(values, axis=0)


def plot_accuracy(
    runs: list[dict[str, Any]],
    s: Settings,
    path: Path,
    axis: str = "step",
    budget: float | None = None,
) -> Any:
    """Test accuracy (the mean over the seeds, or the one seed's) against server steps, client
    updates or virtual time (log scale for the last two: FedBuff's runs take K times more
    updates); ``budget``: a dotted vertical line at the equal-work budget. Returns the (closed)
    matplotlib figure."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 5.0), layout="constrained")
    styles = Styles(s.methods)  # the same look per method in every figure of the report
    curves = {}
    for method in s.methods:
        x, acc = mean_curve([r for r in runs if r["method"] == method], axis)
        keep = x > 0 if axis != "step" else np.ones(x.shape, dtype=bool)
        curves[method] = (x[keep], acc[keep])
    looks = legend_styles(styles, curves)
    for method, (x, acc) in curves.items():
        ax.plot(x, acc, **looks[method])
    if axis != "step":
        log_axis(ax, "x")
    if budget is not None:
        ax.axvline(budget, color="k", linestyle=":", linewidth=1, label="equal-work budget")
    ax.set_xlabel(_AXIS_LABELS[axis])
    ax.set_ylabel(f"test accuracy ({over_seeds(len(s.seeds))})")
    ax.grid(True, which="both" if axis != "step" else "major", alpha=0.3)
    shared_legend(fig, [ax])  # below the panel: the curves fill it
    return save(fig, path, dpi=110)


def plot_clocks(runs: list[dict[str, Any]], s: Settings, work: dict[str, Any], out: Path) -> None:
    """``accuracy.png`` (against server steps), ``accuracy_updates.png`` and
    ``accuracy_time.png`` (each with its equal-work budget, from
    :func:`~riemfl.experiments.licudi2025.clocks.equal_work`) and
    ``fairness.png`` under ``out``."""
    plot_accuracy(runs, s, out / "accuracy.png")
    for axis in ("updates", "time"):
        plot_accuracy(runs, s, out / f"accuracy_{axis}.png", axis, work[axis]["budget"])
    plot_fairness(runs, s, out / "fairness.png")


def plot_fairness(runs: list[dict[str, Any]], s: Settings, path: Path) -> Any:
    """Licudi et al. 2025, Fig. 3: Gini and Theil of the per-client accuracy, the mean over the
    seeds with +/- std error bars (one seed: the seed's value, and no error bar). Returns the
    (closed) matplotlib figure."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    styles = Styles(s.methods)  # the colours of accuracy.png
    colours = [styles.of(m)["color"] for m in s.methods]
    for ax, key in zip(axes, ("gini", "theil"), strict=True):
        stats = [mean_std([r[key] for r in runs if r["method"] == m]) for m in s.methods]
        spread = len(s.seeds) > 1
        errors = [0.0 if math.isnan(d) else d for _, d, _ in stats] if spread else None
        heights = [m for m, _, _ in stats]
        ax.bar(
            range(len(s.methods)), heights, yerr=errors, capsize=3 if spread else 0, color=colours
        )
        ax.set_xticks(range(len(s.methods)), s.methods, rotation=45, ha="right")
        ax.set_title(f"{key.capitalize()} ({over_seeds(len(s.seeds))})", fontsize=TITLE_FONTSIZE)
        ax.grid(True, axis="y", alpha=0.3)
    return save(fig, path, dpi=110)


def plot_epochs(rows: list[dict[str, Any]], s: Settings, path: Path) -> Any:
    """Licudi et al. 2025, Fig. 4: final accuracy against the local epochs K (one seed)."""
    plt = pyplot()
    from matplotlib.ticker import NullFormatter

    fig, ax = plt.subplots(figsize=(5.5, 4.6), layout="constrained")
    styles = Styles(s.methods)  # the colours of accuracy.png
    for method in dict.fromkeys(r["method"] for r in rows):
        pts = sorted((r["epochs"], r["accuracy"]) for r in rows if r["method"] == method)
        ax.plot(*zip(*pts, strict=True), **{**styles.of(method), "markevery": None})
    ax.set_xscale("log")
    ax.set_xticks(list(s.epoch_study), [str(k) for k in s.epoch_study])
    ax.xaxis.set_minor_formatter(NullFormatter())  # only the studied K are labelled
    ax.set_xlabel("local epochs K")
    ax.set_ylabel("final test accuracy (one seed)")
    ax.grid(True, alpha=0.3)
    shared_legend(fig, [ax], ncols=3)
    return save(fig, path, dpi=110)

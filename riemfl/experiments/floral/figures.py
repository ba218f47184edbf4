"""The figures of the FLoRAL report, one look per method across all of them.

``table1_curves.png`` (:func:`curves_plot`), ``reduced_gap.png`` (:func:`gap_plot`),
``synthetic_loss.png`` (:func:`synthetic_plot`), ``aggregation.png``
(:func:`aggregation_plot`) and Figs. 3-7's test-loss counterparts
(:func:`~riemfl.experiments.floral.curve_figures.loss_figures`); :func:`plots` draws them all.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ..spread import over_seeds
from ..styles import TITLE_FONTSIZE, Styles, pyplot, save, shared_legend
from .analysis import paper_gap
from .curve_figures import loss_figures
from .settings import COLUMNS, GAP_METHODS, GAP_REFERENCE, GAP_WITHIN, METHODS, Settings

__all__ = ["plots", "curves_plot", "gap_plot", "synthetic_plot", "aggregation_plot"]


def plots(
    digits: list[dict],
    gaps: list[dict],
    synthetic: list[dict],
    agg: dict,
    s: Settings,
    out: Path,
    cifar: list[dict] | None = None,
) -> None:
    """Draw every figure of the report into ``out``.

    Parameters
    ----------
    digits : list of dict
        Table 1's runs.
    gaps : list of dict
        The reduced columns' paired gaps (``results.json``'s ``reduced_gaps``).
    synthetic : list of dict
        The synthetic runs.
    agg : dict
        The aggregation comparison.
    s : Settings
        The columns and seeds.
    out : pathlib.Path
        The output folder.
    cifar : list of dict, optional
        Table 1's CIFAR runs (Figs. 5-7's counterparts).
    """
    labels = [m.label for m in METHODS]
    styles = Styles(labels)  # one look per method in every figure
    curves_plot(digits, s, styles, out)
    loss_figures(digits + (cifar or []), labels, styles, out)
    gap_plot(gaps, styles, out)
    synthetic_plot(synthetic, styles, out)
    aggregation_plot(agg, styles, out)


def curves_plot(digits: list[dict], s: Settings, styles: Styles, out: Path) -> Any:
    """``table1_curves.png``: personal test accuracy against the round per Table 1 column (the
    mean over the seeds, or the one seed's curve); one legend below the panels, where it covers
    no curve.

    Parameters
    ----------
    digits : list of dict
        Table 1's runs (``column``, ``method``, ``curve``).
    s : Settings
        The columns and seeds.
    styles : Styles
        The look of each method.
    out : pathlib.Path
        The output folder.

    Returns
    -------
    matplotlib.figure.Figure
        The (closed) figure.
    """
    plt = pyplot()
    cols = [c.label for c in COLUMNS if c.label in s.columns]
    ncols = min(len(cols), 2)
    nrows = math.ceil(len(cols) / ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(5 * ncols, 3.4 * nrows + 0.9),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    for ax in axes.flat[len(cols) :]:
        ax.set_visible(False)
    for ax, col in zip(axes.flat, cols, strict=False):
        for m in METHODS:
            curves = [r["curve"] for r in digits if r["column"] == col and r["method"] == m.label]
            acc = np.mean([c["accuracy"] for c in curves], axis=0)
            ax.plot(curves[0]["step"], acc, **styles.of(m.label))
        ax.set_title(f"digits, {col}", fontsize=TITLE_FONTSIZE)
        ax.set_xlabel("round")
        ax.set_ylabel(f"personal test accuracy ({over_seeds(len(s.seeds))})")
        ax.grid(True, alpha=0.3)
    shared_legend(fig, list(axes.flat[: len(cols)]))
    return save(fig, out / "table1_curves.png")


def gap_plot(gaps: list[dict], styles: Styles, out: Path) -> None:
    """``reduced_gap.png``: per-seed FLoRAL-minus-ensemble gaps with their mean and 95%
    interval, and the paper's.

    Parameters
    ----------
    gaps : list of dict
        The reduced columns' paired gaps (``column``, ``method``, ``gaps``, ``n``, ``mean``,
        ``lo``, ``hi``).
    styles : Styles
        The look of each method.
    out : pathlib.Path
        The output folder.
    """
    plt = pyplot()
    cols = list(dict.fromkeys(g["column"] for g in gaps))
    fig, ax = plt.subplots(figsize=(1.9 * max(len(cols), 2) + 1.5, 4.6), layout="constrained")
    for i, label in enumerate(GAP_METHODS[1:]):
        look = styles.of(label)
        shift = 0.15 * (2 * i - 1)
        for x, col in enumerate(cols):
            g = next(g for g in gaps if g["column"] == col and g["method"] == label)
            first = x == 0
            ax.scatter(
                np.full(len(g["gaps"]), x + shift),
                g["gaps"],
                s=12,
                alpha=0.5,
                color=look["color"],
                marker=look["marker"],
                label=f"{label}: seeds" if first else None,
            )
            if g["n"] > 1:
                ax.errorbar(
                    x + shift,
                    g["mean"],
                    yerr=[[g["mean"] - g["lo"]], [g["hi"] - g["mean"]]],
                    color=look["color"],
                    fmt=look["marker"],
                    capsize=4,
                    label=f"{label}: mean, 95% interval" if first else None,
                )
            ax.scatter(
                x + shift,
                paper_gap(label, col, GAP_REFERENCE),
                marker="_",
                s=300,
                linewidths=2,
                color="black",
                label="paper (MNIST)" if first and i == 0 else None,
            )
    ax.axhline(GAP_WITHIN, color="grey", linestyle=":", label="-1 point")
    ax.axhline(0.0, color="grey", linewidth=0.5)
    ax.set_xticks(range(len(cols)), cols, fontsize=8)
    ax.set_ylabel("FLoRAL - Ensemble (pi*), points")
    ax.grid(True, axis="y", alpha=0.3)
    shared_legend(fig, [ax], ncols=2)
    save(fig, out / "reduced_gap.png")


def synthetic_plot(synthetic: list[dict], styles: Styles, out: Path) -> None:
    """``synthetic_loss.png``: personal test loss against the round, linear and MLP task.

    Parameters
    ----------
    synthetic : list of dict
        The synthetic runs (``task``, ``method``, ``curve``).
    styles : Styles
        The look of each method.
    out : pathlib.Path
        The output folder.
    """
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 4.4), layout="constrained")
    for ax, kind in zip(axes, ("linear", "mlp"), strict=True):
        for r in (x for x in synthetic if x["task"] == kind):
            ax.semilogy(r["curve"]["step"], r["curve"]["loss"], **styles.of(r["method"]))
        ax.set_title(f"synthetic {kind}", fontsize=TITLE_FONTSIZE)
        ax.set_xlabel("round")
        ax.set_ylabel("personal test loss (MSE)")
        ax.grid(True, which="both", alpha=0.3)
    shared_legend(fig, list(axes))
    save(fig, out / "synthetic_loss.png")


def aggregation_plot(agg: dict, styles: Styles, out: Path) -> None:
    """``aggregation.png``: accuracy of the synchronous runs, factor against product averages.

    Parameters
    ----------
    agg : dict
        The aggregation comparison (its ``sync`` runs).
    styles : Styles
        The look of each run.
    out : pathlib.Path
        The output folder.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.4), layout="constrained")
    for r in agg["sync"]:
        ax.plot(
            r["curve"]["step"],
            r["curve"]["accuracy"],
            **styles.of(f"{r['method']}, {r['adaptors']}"),
        )
    ax.set_xlabel("round")
    ax.set_ylabel("personal test accuracy (Full LS)")
    ax.grid(True, alpha=0.3)
    shared_legend(fig, [ax], ncols=2)
    save(fig, out / "aggregation.png")

"""The paper's per-round figures (Almansoori et al. 2024, Figs. 3-10) drawn from our runs.

Figs. 3-7 are the test loss against the round of every Table 1 method, one figure per task with
the full-data panel left and the reduced-data panels right (:data:`LOSS_FIGURES`,
:func:`loss_figures`); Figs. 8-10 are the accuracy curves of the ablations of Tables 5, 2 and 4
(:data:`ABLATION_FIGURES`, :func:`ablation_curves`). The paper prints no numbers for them: the
counterparts show the same quantities on our tasks, one look per method (or row) in every
panel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..spread import over_seeds
from ..styles import TITLE_FONTSIZE, Styles, pyplot, save, shared_legend
from .ablation_settings import CIFAR_ABLATION_COLUMNS

__all__ = [
    "LossFigure",
    "LOSS_FIGURES",
    "ABLATION_FIGURES",
    "figures_that_ran",
    "mean_curve",
    "loss_figure_lines",
    "loss_figures",
    "ablation_curves",
]


@dataclass(frozen=True)
class LossFigure:
    """One of the paper's test-loss figures and the Table 1 columns of its panels.

    Attributes
    ----------
    number : int
        The paper's figure number.
    task : str
        The paper's task (``"MNIST-R"``).
    columns : tuple of str
        Our Table 1 columns drawn, full data first (the paper's left panel), then reduced.
    stand_in : str
        What our columns run on, where it is not the paper's data ("" for the user's files).
    """

    number: int
    task: str
    columns: tuple[str, ...]
    stand_in: str = ""

    @property
    def file(self) -> str:
        """``fig3_mnist_r_loss.png``."""
        slug = self.task.lower().replace("-", "_")
        return f"fig{self.number}_{slug}_loss.png"


#: Figs. 3-7: test loss on MNIST-R, MNIST-LS, CIFAR-10-R, CIFAR-10-LS and CIFAR-100
LOSS_FIGURES: tuple[LossFigure, ...] = (
    LossFigure(3, "MNIST-R", ("Full R", "Reduced 5% R", "Reduced 14% R"), "digits"),
    LossFigure(4, "MNIST-LS", ("Full LS", "Reduced 5% LS", "Reduced 14% LS"), "digits"),
    LossFigure(5, "CIFAR-10-R", ("C10 Full R", "C10 Reduced R")),
    LossFigure(6, "CIFAR-10-LS", ("C10 Full LS", "C10 Reduced LS")),
    LossFigure(7, "CIFAR-100", ("C100 Full", "C100 Reduced")),
)

#: Figs. 8-10 by ablation table: adaptors +/- bias (Table 5), rho x C (Table 2), ConvLoRA (Table 4)
ABLATION_FIGURES: dict[int, tuple[int, str]] = {
    5: (8, "adaptors"),
    2: (9, "rho_c"),
    4: (10, "convlora"),
}


def mean_curve(runs: list[dict], metric: str) -> tuple[list, np.ndarray] | None:
    """The rounds and the mean over the runs' ``metric`` curves, round by round.

    Parameters
    ----------
    runs : list of dict
        Runs of one method and column (``curve`` with ``step`` and ``metric``), one per seed,
        recorded at the same rounds.
    metric : str
        ``"loss"`` or ``"accuracy"``.

    Returns
    -------
    (list, numpy.ndarray) or None
        The rounds and the mean; None where no run recorded ``metric``.
    """
    curves = [r["curve"] for r in runs if metric in r["curve"]]
    if not curves:
        return None
    return curves[0]["step"], np.mean([c[metric] for c in curves], axis=0)


def _panels(plt: Any, n: int) -> tuple[Any, list[Any]]:
    """One row of ``n`` panels sharing the y axis, room for a legend below."""
    fig, axes = plt.subplots(
        1, n, figsize=(4.6 * n, 4.2), squeeze=False, sharey=True, layout="constrained"
    )
    return fig, list(axes.flat)


def figures_that_ran(runs: list[dict[str, Any]]) -> list[tuple[LossFigure, list[str]]]:
    """The loss figures with at least one column among the runs, and those columns."""
    ran = {r["column"] for r in runs}
    chosen = [(spec, [c for c in spec.columns if c in ran]) for spec in LOSS_FIGURES]
    return [(spec, cols) for spec, cols in chosen if cols]


def loss_figure_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The report's section on Figs. 3-7: one image line per figure :func:`loss_figures`
    draws from these runs.

    Parameters
    ----------
    runs : list of dict
        Table 1's runs, digits and CIFAR.

    Returns
    -------
    list of str
        Markdown lines (none when no figure's column ran).
    """
    figures = figures_that_ran(runs)
    if not figures:
        return []
    lines = [
        "## Figs. 3-7: personal test loss against the round",
        "",
        "The paper draws these curves without numbers; ours are the means over seeds of every "
        "Table 1 method, full data left, reduced right, on the columns that ran (digits for "
        "MNIST).",
        "",
    ]
    for spec, _ in figures:
        lines += [f"![Fig. {spec.number}: {spec.task}]({spec.file})", ""]
    return lines


def loss_figures(
    runs: list[dict[str, Any]], labels: Sequence[str], styles: Styles, out: Path
) -> list[tuple[LossFigure, Any]]:
    """Draw Figs. 3-7's counterparts whose columns ran: per panel (a column), the test loss
    against the round of every method (mean over its seeds), on a log axis.

    Parameters
    ----------
    runs : list of dict
        Table 1's runs, digits and CIFAR (``column``, ``method``, ``seed``, ``curve`` with
        ``step`` and ``loss``).
    labels : sequence of str
        The methods, in legend order.
    styles : Styles
        The look of each method.
    out : pathlib.Path
        The output folder.

    Returns
    -------
    list of (LossFigure, matplotlib.figure.Figure)
        The figures drawn (:attr:`LossFigure.file` in ``out``; the figures closed).
    """
    plt = pyplot()
    drawn = []
    for spec, cols in figures_that_ran(runs):
        fig, axes = _panels(plt, len(cols))
        for ax, col in zip(axes, cols, strict=True):
            for label in labels:
                of = [r for r in runs if r["column"] == col and r["method"] == label]
                curve = mean_curve(of, "loss")
                if curve is not None:
                    ax.semilogy(*curve, **styles.of(label))
            seeds = len({r["seed"] for r in runs if r["column"] == col})
            where = f"{spec.stand_in}, " if spec.stand_in else ""
            ax.set_title(f"{where}{col}", fontsize=TITLE_FONTSIZE)
            ax.set_xlabel("round")
            ax.set_ylabel(f"personal test loss ({over_seeds(seeds)})")
            ax.grid(True, alpha=0.3)
        fig.suptitle(f"Fig. {spec.number} counterpart: test loss, {spec.task}")
        shared_legend(fig, axes)
        drawn.append((spec, save(fig, out / spec.file)))
    return drawn


def ablation_curves(
    table: int, runs: list[dict[str, Any]], rows: Sequence[str], columns: Sequence[str], out: Path
) -> tuple[str, Any]:
    """Draw the counterpart of the figure of ablation ``table`` (Fig. 8, 9 or 10): per column,
    the personal test accuracy against the round of every row (mean over its seeds).

    Parameters
    ----------
    table : {2, 4, 5}
        The ablation table (:data:`ABLATION_FIGURES`).
    runs : list of dict
        The table's runs (``row``, ``column``, ``seed``, ``curve`` with ``step`` and
        ``accuracy``).
    rows : sequence of str
        The table's row labels, in legend order.
    columns : sequence of str
        The columns that ran.
    out : pathlib.Path
        The output folder.

    Returns
    -------
    file : str
        The file written in ``out`` (``fig8_adaptors.png``).
    figure : matplotlib.figure.Figure
        The (closed) figure.
    """
    number, name = ABLATION_FIGURES[table]
    plt = pyplot()
    styles = Styles(list(rows))
    fig, axes = _panels(plt, len(columns))
    for ax, col in zip(axes, columns, strict=True):
        for label in rows:
            curve = mean_curve(
                [r for r in runs if r["row"] == label and r["column"] == col], "accuracy"
            )
            if curve is not None:
                ax.plot(curve[0], 100 * curve[1], **styles.of(label))
        seeds = len({r["seed"] for r in runs if r["column"] == col})
        where = "" if col in dict(CIFAR_ABLATION_COLUMNS) else "digits, "
        ax.set_title(f"{where}{col}", fontsize=TITLE_FONTSIZE)
        ax.set_xlabel("round")
        ax.set_ylabel(f"personal test accuracy, % ({over_seeds(seeds)})")
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"Fig. {number} counterpart: Table {table}'s rows against the round")
    shared_legend(fig, axes)
    file = f"fig{number}_{name}.png"
    return file, save(fig, out / file)

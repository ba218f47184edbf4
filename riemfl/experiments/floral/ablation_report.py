"""The Markdown report and the plot of one FLoRAL ablation table.

:func:`ablation_table` is the table (ours beside the paper's numbers, parameter counts, ranks),
:func:`ablation_report` the whole ``table{N}.md`` (settings, table, what the stand-in can and
cannot show, rank correlations, the paper's claims with verdicts), :func:`ablation_plot` the
``table{N}.png``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ..spread import mean_spread, over_seeds
from ..styles import TITLE_FONTSIZE, Styles, pyplot, save, shared_legend
from .ablation_settings import (
    ABLATION_COLUMNS,
    CIFAR_ABLATION_COLUMNS,
    PAPER_ABLATION_COLUMNS,
    AblationTable,
)
from .settings import Settings

__all__ = ["ablation_table", "ablation_report", "ablation_plot"]


def _ranks(info: dict[str, Any] | None, layers: list[str]) -> str:
    """The rank of each adapted layer ("-": not adapted; filter-wise: matrix rank (filter
    rank))."""
    if not info:
        return "-"
    cells = []
    for name in layers:
        r = info.get(name)
        if r is None:
            cells.append("-")
        else:
            cells.append(f"{r[0]}" if r[1] is None else f"{r[0]} ({r[1]})")
    return " / ".join(cells)


def ablation_table(
    table: AblationTable,
    accs: dict[tuple[str, str], list[float]],
    details: dict[str, dict[str, Any]],
    s: Settings,
) -> tuple[str, list[str]]:
    """The table: our accuracy (mean +/- std over seeds) beside the paper's, per row.

    Parameters
    ----------
    table : AblationTable
        The rows and the paper's numbers.
    accs : dict
        :func:`~riemfl.experiments.floral.ablation_analysis.row_accuracies`.
    details : dict
        Row label -> ``parameters`` (:func:`~riemfl.nn.floral.parameter_counts`) and
        ``ranks`` (adapted layer -> (rank, filter rank or None)) of the row's model.
    s : Settings
        The columns that ran.

    Returns
    -------
    table : str
    layers : list of str
        The adapted layers, in the order of the rank column.
    """
    cols = [(c, j) for c, j in ABLATION_COLUMNS if c in s.columns]
    shown = {j for _, j in cols}
    layers = list(dict.fromkeys(name for d in details.values() for name in (d.get("ranks") or {})))
    head = ["Row"]
    for c, j in cols:
        head += [f"{c}: ours", f"{PAPER_ABLATION_COLUMNS[j]}: paper"]
    head += [f"{p}: paper" for j, p in enumerate(PAPER_ABLATION_COLUMNS) if j not in shown]
    head += ["extra parameters (% of d)", "rank per adapted layer"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for row in table.rows:

        def paper(j: int, row=row) -> str:
            return "-" if row.paper is None else f"{row.paper[j]:.1f}"

        cells = [row.label]
        for c, j in cols:
            cells += [mean_spread(accs[row.label, c], 1), paper(j)]
        cells += [paper(j) for j in range(len(PAPER_ABLATION_COLUMNS)) if j not in shown]
        p = details[row.label]["parameters"]
        cells.append(f"{p['extra']} ({100 * p['extra_fraction']:.1f}%)")
        cells.append(_ranks(details[row.label].get("ranks"), layers))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), layers


def _correlation_lines(corr: list[dict[str, Any]]) -> list[str]:
    lines = []
    for c in corr:
        rho = "undefined (a side has no ordering)" if math.isnan(c["rho"]) else f"{c['rho']:+.2f}"
        (bo, ao), (bp, ap) = c["best_ours"], c["best_paper"]
        lines.append(
            f"- **{c['column']}** against the paper's {c['paper_column']}: rank correlation of "
            f"the {c['rows']} rows {rho}; best row ours {bo} ({ao:.1f}), paper {bp} ({ap:.1f})."
        )
    return lines


def _claim_lines(checks: list[dict[str, Any]]) -> list[str]:
    lines = []
    for claim in dict.fromkeys(c["claim"] for c in checks):
        mine = [c for c in checks if c["claim"] == claim]
        holds = mine[0]["paper_holds"]
        paper = ", ".join(
            f"{name} {'yes' if ok else 'NO'}"
            for name, ok in zip(PAPER_ABLATION_COLUMNS, holds, strict=True)
        )
        lines.append(f'- "{claim}" ({mine[0]["source"]}); the paper\'s own numbers: {paper}.')
        for c in mine:
            w = c["worst"]
            verdict = "agrees" if c["agrees"] else "does NOT agree"
            lines.append(
                f"  - {c['column']}: {verdict} (smallest margin: {w['above']} - {w['below']} = "
                f"{w['gap']:+.1f} points)."
            )
            if c["change"]:
                lines.append(f"    What would change the verdict: {c['change']}.")
    return lines


def ablation_report(
    table: AblationTable,
    text_table: str,
    layers: list[str],
    corr: list[dict[str, Any]],
    checks: list[dict[str, Any]],
    s: Settings,
    quick: bool,
    seconds: float,
) -> str:
    """``table{N}.md``: the settings, the table, what the stand-in shows, the verdicts.

    Parameters
    ----------
    table : AblationTable
        The ablation.
    text_table : str
        :func:`ablation_table`'s table.
    layers : list of str
        The adapted layers of the rank column.
    corr : list of dict
        :func:`~riemfl.experiments.floral.ablation_analysis.correlations`.
    checks : list of dict
        :func:`~riemfl.experiments.floral.ablation_analysis.check_orderings`.
    s : Settings
        What ran.
    quick : bool
        The quick form.
    seconds : float
        Wall time of the runs.

    Returns
    -------
    str
    """
    cifar = any(col in dict(CIFAR_ABLATION_COLUMNS) for col in s.columns)
    if cifar:
        c = s.cifar
        mode = (
            f"Mode: {'quick' if quick else 'full'}; data: the CIFAR files in {c.data} (the "
            "paper's columns); models: the paper's Cifar10CNN (CIFAR-10) and VGG-8 "
            f"(CIFAR-100); {len(s.seeds)} seed(s) {list(s.seeds)}; {s.rounds} rounds; K, C "
            f"and the share per round of the paper's Table 6; batch {c.batch_size}, lr {c.lr} "
            f"(CIFAR-100: {c.cifar100_lr}, server Adam {c.cifar100_server_adam}), router lr "
            f"{c.router_lr}, crops and flips {'on' if c.augment else 'off'}; FLoRAL with "
            f"learned routing; wall time {seconds:.0f} s."
        )
        ours = "on the paper's CIFAR columns (your files)"
        stand_in: list[str] = []
    else:
        data = f"MNIST file {s.data}" if s.data else "scikit-learn digits (offline MNIST stand-in)"
        mode = (
            f"Mode: {'quick' if quick else 'full'}; data: {data}; model: riemfl.nn.SmallCNN; "
            f"{len(s.seeds)} seed(s) {list(s.seeds)}; {s.rounds} rounds; K = {s.n_clients} "
            f"clients, {s.clients_per_round} per round, {s.n_clusters} clusters; batch "
            f"{s.batch_size}, lr {s.lr}, router lr {s.router_lr}; FLoRAL with learned routing; "
            f"wall time {seconds:.0f} s."
        )
        ours = "digits columns; the paper's: CIFAR-10 and CIFAR-100"
        stand_in = ["### What the stand-in can and cannot show", "", table.stand_in, ""]
    if quick:
        mode += " The quick form is a smoke test: too few rounds for the numbers to mean much."
    n = table.number
    return "\n".join(
        [
            f"# FLoRAL (Almansoori, Horvath & Takac), Table {n}: {table.title}",
            "",
            mode,
            "",
            f"## Table {n}: personal test accuracy (%), ours beside the paper's ({table.source})",
            "",
            text_table,
            "",
            f"Ours: mean +/- std over seeds (the mean alone with one seed), {ours}; the "
            "paper's spread is not given. Compare orderings before numbers. Ranks per adapted "
            "layer: "
            + ", ".join(f"`{name}`" for name in layers)
            + " (filter-wise: the matrix rank, the filter rank in brackets).",
            "",
            *stand_in,
            "### Rank correlation with the paper's rows",
            "",
            *_correlation_lines(corr),
            "",
            "### The paper's claims",
            "",
            *_claim_lines(checks),
            "",
            f"![table {n}](table{n}.png)",
            "",
        ]
    )


def ablation_plot(
    table: AblationTable, accs: dict[tuple[str, str], list[float]], s: Settings, out: Path
) -> Any:
    """``table{N}.png``: per column, our accuracy per row (mean over seeds, the seeds' range
    as a bar where there are several) and, on the right axis, the paper's CIFAR-10 number.

    Parameters
    ----------
    table : AblationTable
        The rows and the paper's numbers.
    accs : dict
        :func:`~riemfl.experiments.floral.ablation_analysis.row_accuracies`.
    s : Settings
        The columns and seeds.
    out : pathlib.Path
        The output folder.

    Returns
    -------
    matplotlib.figure.Figure
        The (closed) figure.
    """
    plt = pyplot()
    cols = [(c, j) for c, j in ABLATION_COLUMNS if c in s.columns]
    styles = Styles(["ours", "paper"])
    width = max(4.5, 0.75 * len(table.rows) + 1.5)
    fig, axes = plt.subplots(
        1, len(cols), figsize=(width * len(cols), 4.6), squeeze=False, layout="constrained"
    )
    x = np.arange(len(table.rows))
    labels = [r.label for r in table.rows]
    for ax, (col, j) in zip(axes.flat, cols, strict=True):
        values = [accs[r.label, col] for r in table.rows]
        mean = np.array([np.mean(v) for v in values])
        look = styles.of("ours")
        ax.plot(x, mean, color=look["color"], marker=look["marker"], linestyle="none")
        ax.plot(
            [], [], **{**look, "linestyle": "none", "label": f"ours ({over_seeds(len(s.seeds))})"}
        )
        if len(s.seeds) > 1:
            lo = mean - np.array([min(v) for v in values])
            hi = np.array([max(v) for v in values]) - mean
            ax.errorbar(x, mean, yerr=[lo, hi], fmt="none", color=look["color"], capsize=3)
        ax.set_ylabel(f"ours: personal test accuracy, {col} (%)")
        twin = ax.twinx()
        known = [i for i, r in enumerate(table.rows) if r.paper is not None]
        paper = styles.of("paper")
        twin.plot(
            x[known],
            [table.rows[i].paper[j] for i in known],
            color="black",
            marker=paper["marker"],
            markerfacecolor="none",
            linestyle="none",
        )
        ax.plot(
            [],
            [],
            color="black",
            marker=paper["marker"],
            markerfacecolor="none",
            linestyle="none",
            label="paper, CIFAR-10 (right axis)",
        )
        twin.set_ylabel(f"paper: {PAPER_ABLATION_COLUMNS[j]} (%)")
        ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"Table {table.number}, digits {col}", fontsize=TITLE_FONTSIZE)
        ax.grid(True, axis="y", alpha=0.3)
    shared_legend(fig, list(axes.flat), ncols=2)
    return save(fig, out / f"table{table.number}.png")

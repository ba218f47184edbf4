"""The Markdown tables of the FLoRAL report.

Table 1 beside the paper's numbers (:func:`accuracy_table`; its CIFAR columns:
:func:`cifar_accuracies`, :func:`cifar_table`), the FLoRAL-vs-ensemble gaps
(:func:`gap_table`), what the clients held (:func:`holdings_table`), the parameter counts
(:func:`parameter_table`), the synthetic tasks (:func:`synthetic_table`) and the aggregation
comparison (:func:`aggregation_table`).
"""

from __future__ import annotations

from typing import Any

from ..spread import mean_spread
from .analysis import gap_verdict, held
from .settings import (
    CIFAR_COLUMNS,
    COLUMNS,
    METHODS,
    PAPER_CIFAR,
    PAPER_MNIST,
    SYNTHETIC_METHODS,
    Settings,
    column,
)

__all__ = [
    "span",
    "accuracy_table",
    "cifar_accuracies",
    "cifar_table",
    "gap_table",
    "holdings_table",
    "parameter_table",
    "synthetic_table",
    "aggregation_table",
]


def span(lo: float, hi: float, fmt: str = "d") -> str:
    """``"lo to hi"``, or the value alone where both are the same.

    Parameters
    ----------
    lo, hi : float
        The range (integers for ``fmt="d"``).
    fmt : str
        Format specification of both.

    Returns
    -------
    str
    """
    if fmt == "d":
        lo, hi = int(lo), int(hi)
    return f"{lo:{fmt}}" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}} to {hi:{fmt}}"


def accuracy_table(accs: dict[tuple[str, str], list[float]], s: Settings) -> str:
    """Table 1: our accuracy (mean +/- std over seeds) beside the paper's, per column.

    Parameters
    ----------
    accs : dict
        :func:`~riemfl.experiments.floral.analysis.accuracies`.
    s : Settings
        The columns that ran.

    Returns
    -------
    str
    """
    cols = [c.label for c in COLUMNS if c.label in s.columns]
    head = "| Method | " + " | ".join(f"{c}: ours | {c}: paper" for c in cols) + " |"
    lines = [head, "|---|" + "---|---|" * len(cols)]
    for m in METHODS:
        cells = []
        for c in cols:
            pm, ps = PAPER_MNIST[m.label][column(c).paper]
            cells.append(f"{mean_spread(accs[m.label, c], 1)} | {pm:.1f} +/- {ps:.1f}")
        lines.append(f"| {m.label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cifar_accuracies(runs: list[dict[str, Any]]) -> dict[tuple[str, str], list[float]]:
    """Final accuracy (%) of every method in every CIFAR column that ran, one value per seed.

    Parameters
    ----------
    runs : list of dict
        :func:`~riemfl.experiments.floral.run.cifar_runs`.

    Returns
    -------
    dict
        ``(method label, column label)`` to the accuracies over seeds, columns in
        :data:`~riemfl.experiments.floral.settings.CIFAR_COLUMNS` order.
    """
    ran = {r["column"] for r in runs}
    return {
        (m.label, c.label): [
            100 * r["final"]["accuracy"]
            for r in runs
            if r["method"] == m.label and r["column"] == c.label
        ]
        for c in CIFAR_COLUMNS
        if c.label in ran
        for m in METHODS
    }


def cifar_table(accs: dict[tuple[str, str], list[float]]) -> str:
    """Table 1's CIFAR columns: our accuracy (mean +/- std over seeds) beside the paper's.

    Parameters
    ----------
    accs : dict
        :func:`cifar_accuracies`.

    Returns
    -------
    str
    """
    cols = [c for c in CIFAR_COLUMNS if (METHODS[0].label, c.label) in accs]
    head = "| Method | " + " | ".join(f"{c.label}: ours | {c.label}: paper" for c in cols) + " |"
    lines = [head, "|---|" + "---|---|" * len(cols)]
    for m in METHODS:
        cells = []
        for c in cols:
            pm, ps = PAPER_CIFAR[m.label][c.paper]
            cells.append(f"{mean_spread(accs[m.label, c.label], 1)} | {pm:.1f} +/- {ps:.1f}")
        lines.append(f"| {m.label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _gap_row(row: dict[str, Any]) -> str:
    """One row of :func:`gap_table`: a reduced column with its verdict, or a full one."""
    g, name, label = row["stats"], row["column"].label, row["method"]
    gaps, paper = mean_spread(row["gaps"], 1), row["paper"]
    if not row["column"].reduced:
        return (
            f"| {name} | {label} | {g['n']} | {gaps} | - | - | "
            f"{paper:+.1f} | reference (full data) | - |"
        )
    verdict, change = gap_verdict(g)
    interval = "-" if g["n"] < 2 else f"[{g['lo']:+.1f}, {g['hi']:+.1f}]"
    se = "-" if g["n"] < 2 else f"{g['se']:.1f}"
    return (
        f"| {name} | {label} | {g['n']} | {gaps} | {se} | "
        f"{interval} | {paper:+.1f} | {verdict} | {change or '-'} |"
    )


def gap_table(rows: list[dict[str, Any]]) -> list[str]:
    """The paired FLoRAL-vs-ensemble gaps with their verdicts (reference rows: full data).

    Parameters
    ----------
    rows : list of dict
        :func:`~riemfl.experiments.floral.analysis.gap_rows`.

    Returns
    -------
    list of str
        The table's lines.
    """
    return [
        "| column | FLoRAL | seeds | gap: mean +/- std | s.e. | 95% interval | paper | "
        "verdict | what would change it |",
        "|---|---|---|---|---|---|---|---|---|",
        *(_gap_row(row) for row in rows),
    ]


def holdings_table(holdings: list[dict[str, Any]], s: Settings) -> str:
    """Per reduced column, over its seeds: what each client held.

    Parameters
    ----------
    holdings : list of dict
        :func:`~riemfl.experiments.floral.build.holdings` per column and seed.
    s : Settings
        The columns that ran.

    Returns
    -------
    str
    """
    lines = [
        "| column | seeds | training rows per client | rows in all (% of the training set) | "
        "digits per client (min / mean / max) | digits a whole cluster lacks (mean / max) | "
        "test rows per client |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in (c for c in COLUMNS if c.label in s.columns):
        h = held(holdings, c.label)
        if h is None:
            continue
        lo, mean, hi = h["digits"]
        lines.append(
            f"| {c.label} | {h['seeds']} | {span(*h['rows'])} | "
            f"{span(*h['total'])} ({span(*h['share'], '.1f')}%) | "
            f"{lo} / {mean:.1f} / {hi} | {h['lacks'][0]:.1f} / {h['lacks'][1]} | "
            f"{span(*h['test'])} |"
        )
    return "\n".join(lines)


def parameter_table(runs: list[dict[str, Any]]) -> str:
    """Parameter counts of every method: one model's d and the extra parameters.

    Parameters
    ----------
    runs : list of dict
        Table 1's runs (the first of each method is counted).

    Returns
    -------
    str
    """
    lines = ["| Method | d (one model) | extra parameters | extra / d |", "|---|---|---|---|"]
    seen = set()
    for r in runs:
        if r["method"] in seen:
            continue
        seen.add(r["method"])
        p = r["parameters"]
        lines.append(
            f"| {r['method']} | {p['d']} | {p['extra']} | {100 * p['extra_fraction']:.1f}% |"
        )
    return "\n".join(lines)


def synthetic_table(runs: list[dict[str, Any]]) -> str:
    """Final personal test loss and cluster recovery of every method on both synthetic tasks.

    Parameters
    ----------
    runs : list of dict
        The synthetic runs.

    Returns
    -------
    str
    """
    lines = [
        "| Method | linear: test loss | linear: cluster recovery | MLP: test loss | "
        "MLP: cluster recovery |",
        "|---|---|---|---|---|",
    ]
    for m in SYNTHETIC_METHODS:
        cells = []
        for kind in ("linear", "mlp"):
            r = next(x for x in runs if x["task"] == kind and x["method"] == m.label)
            rec = r["final"].get("cluster_recovery")
            cells += [f"{r['final']['loss']:.3g}", "-" if rec is None else f"{rec:.2f}"]
        lines.append(f"| {m.label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def aggregation_table(agg: dict[str, Any]) -> list[str]:
    """Final accuracy of each run under factor averaging and under the manifold-aware rule.

    Parameters
    ----------
    agg : dict
        The aggregation comparison (``sync`` and ``async`` runs).

    Returns
    -------
    list of str
        The table's lines.
    """
    lines = [
        "| run | factor averaging (Algorithm 1) | products + truncated SVD (riemfl) |",
        "|---|---|---|",
    ]
    for label in sorted({r["method"] for r in agg["sync"]}):
        acc = {
            r["adaptors"]: 100 * r["final"]["accuracy"] for r in agg["sync"] if r["method"] == label
        }
        lines.append(f"| sync, {label}, Full LS | {acc['factors']:.1f} | {acc['products']:.1f} |")
    acc = {r["adaptors"]: 100 * r["accuracy"] for r in agg["async"]}
    st = agg["async"][0]["staleness"]
    lines.append(
        f"| FedBuff + FLoRAL(10%) (learned), K = 5, mean staleness {st['mean']:.1f} | "
        f"{acc['factors']:.1f} | {acc['products']:.1f} |"
    )
    return lines

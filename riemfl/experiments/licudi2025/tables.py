"""The Markdown tables of the Licudi et al. 2025 report: Table 1, the line search, the comparison
at equal client work and the local-epoch study; and the sentences on accuracy ties."""

from __future__ import annotations

from typing import Any

from ..equal_work import AXES
from ..spread import mean_spread, mean_std, over_seeds
from .settings import PAPER_RATES, Settings

__all__ = [
    "accuracy_ties",
    "epoch_tables",
    "equal_work_table",
    "rates_table",
    "table",
    "te_cell",
]


def _runs_of(runs: list[dict[str, Any]], method: str) -> list[dict[str, Any]]:
    return [r for r in runs if r["method"] == method]


def table(runs: list[dict[str, Any]], s: Settings) -> str:
    """Markdown table in the shape of Licudi et al. 2025, Table 1, fairness and staleness columns,
    and the paper's FEMNIST (or Shakespeare) numbers beside ours."""
    lines = [
        f"| Method | Test Acc. (%) | T_e (e = {s.error_target:.2f}) | Gini | Theil | "
        f"mean staleness | Paper {s.paper_table()[0]} Acc. (%) | Paper {s.paper_table()[0]} T_e |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method in s.methods:
        rs = _runs_of(runs, method)
        te = te_cell([r["T_e"] for r in rs], 0)
        pa, pas, pt, pts = s.paper_table()[1][method]
        lines.append(
            f"| {method} | {mean_spread([100 * r['accuracy'] for r in rs], 2)} | {te} | "
            f"{mean_spread([r['gini'] for r in rs], 4)} | "
            f"{mean_spread([r['theil'] for r in rs], 5)} | "
            f"{mean_std([r['mean_staleness'] for r in rs])[0]:.2f} | "
            f"{pa:.2f} +/- {pas:.2f} | {pt:.0f} +/- {pts:.1f} |"
        )
    return "\n".join(lines)


def accuracy_ties(runs: list[dict[str, Any]], s: Settings) -> list[str]:
    """Sentences on the methods whose accuracy in :func:`table` is equal (to its two decimals):
    accuracy is the share of a few hundred test rows classified correctly, so different models
    tie on it often (one row of the digits stand-in's 362 is 0.28 points); each sentence gives
    the mean final test loss of both, which tells the runs apart. Empty when there is no tie
    (or the runs were saved without their loss)."""
    shown: dict[str, list[str]] = {}
    for method in s.methods:
        rs = _runs_of(runs, method)
        shown.setdefault(mean_spread([100 * r["accuracy"] for r in rs], 2), []).append(method)
    lines = []
    for cell, methods in shown.items():
        rs = {m: _runs_of(runs, m) for m in methods}
        if len(methods) < 2 or not all("loss" in r for group in rs.values() for r in group):
            continue
        rows = {r["test_rows"] for group in rs.values() for r in group}
        losses = ", ".join(
            f"{m} {mean_std([r['loss'] for r in group])[0]:.4f}" for m, group in rs.items()
        )
        lines.append(
            f"- {' and '.join(methods)} tie at {cell}% test accuracy: a count over "
            f"{'/'.join(map(str, sorted(rows)))} test rows (one row = "
            f"{100 / min(rows):.2f} points), on which different models often tie. Their final "
            f"test losses ({over_seeds(len(s.seeds))}): {losses}."
        )
    return lines


def te_cell(values: list[float | None], digits: int) -> str:
    """A T_e cell: mean +/- std over the seeds that reached the target, and how many did."""
    reached = sum(v is not None for v in values)
    if not reached:
        return "not reached"
    cell = mean_spread(values, digits, spread_digits=max(digits, 1))
    return cell + (f" ({reached}/{len(values)} reached)" if reached < len(values) else "")


def equal_work_table(runs: list[dict[str, Any]], s: Settings, work: dict[str, Any]) -> str:
    """Markdown: per method, its work per server step, accuracy and T_e on the three clocks, and
    the paper's numbers."""
    name, paper = s.paper_table()
    step, upd, vt = (work[a]["budget"] for a in AXES)
    lines = [
        "| Method | updates / server step | virtual time / update | "
        f"Acc. (%) at {step:g} steps | Acc. (%) at {upd:g} updates | Acc. (%) at time {vt:g} | "
        "T_e (steps) | T_e (updates) | T_e (time) | "
        f"Paper {name} Acc. (%) | Paper {name} T_e |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method in s.methods:
        rs = _runs_of(runs, method)
        per_step = mean_std([r["curve"]["updates"][-1] / r["curve"]["step"][-1] for r in rs])[0]
        per_update = mean_std([r["curve"]["time"][-1] / r["curve"]["updates"][-1] for r in rs])[0]
        cells = [mean_spread([100 * a for a in work[a]["accuracy"][method]], 2) for a in AXES]
        cells += [te_cell(work[a]["T_e"][method], 0) for a in AXES]
        pa, pas, pt, pts = paper[method]
        lines.append(
            f"| {method} | {per_step:.2f} | {per_update:.2f} | {' | '.join(cells)} | "
            f"{pa:.2f} +/- {pas:.2f} | {pt:.0f} +/- {pts:.1f} |"
        )
    return "\n".join(lines)


def rates_table(
    s: Settings, scores: dict[str, dict[float, float]], chosen: dict[str, float]
) -> str:
    """Markdown: per method, the paper's Table 3 rate, the rate chosen here and the final
    validation accuracy (%) at every rate of the grid."""
    header = (
        "| Method | Paper (Table 3) | chosen here | "
        + " | ".join(f"{r:g}" for r in s.rate_grid)
        + " |"
    )
    lines = [header, "|---|---|---|" + "---|" * len(s.rate_grid)]
    for method in s.methods:
        cells = " | ".join(f"{100 * scores[method][r]:.1f}" for r in s.rate_grid)
        lines.append(f"| {method} | {PAPER_RATES[method]:g} | {chosen[method]:g} | {cells} |")
    return "\n".join(lines)


def epoch_tables(rows: list[dict[str, Any]], s: Settings, budget: float) -> str:
    """Markdown: the local-epoch study's accuracy per method and K, after
    ``s.epoch_study_steps`` server steps and at ``budget`` client updates (two tables)."""
    header = "| Method | " + " | ".join(f"K = {k}" for k in s.epoch_study) + " |"
    tables = []
    for key in ("accuracy", "accuracy_at_updates"):
        lines = [header, "|---|" + "---|" * len(s.epoch_study)]
        for method in s.study_methods:
            accs = [
                next(r[key] for r in rows if r["method"] == method and r["epochs"] == k)
                for k in s.epoch_study
            ]
            lines.append(f"| {method} | " + " | ".join(f"{100 * a:.2f}" for a in accs) + " |")
        tables.append("\n".join(lines))
    return (
        f"After {s.epoch_study_steps} server steps:\n\n{tables[0]}\n\nAt equal client work "
        f"({budget:g} client updates, the fewest any run of the study received; FedBuff takes "
        f"K = 10 per server step):\n\n{tables[1]}"
    )

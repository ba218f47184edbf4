"""The robustness report's tables and text (``report.md``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..spread import median_over
from . import server_optimizer_comparison as comparison
from .floor import floor_text
from .oracle import ORACLE
from .settings import CLEAN, Settings
from .verdicts import Verdict

__all__ = [
    "cell",
    "problem_tables",
    "notes",
    "cost_table",
    "winners_table",
    "report",
]


def _value(value: float, key: str) -> str:
    if not math.isfinite(value):
        return "failed"
    return f"{100 * value:.1f}%" if key == "accuracy" else f"{value:.2e}"


def cell(row: dict[str, Any], key: str) -> str:
    """The median over the seeds, then ``[min, max]`` with more than one seed, and how many
    runs failed."""
    text = _value(row[key], key)
    if row["seeds"] > 1:
        text += f" [{_value(row[key + '_min'], key)}, {_value(row[key + '_max'], key)}]"
    if 0 < row["failed"]:
        text += f" ({row['failed']}/{row['seeds']} failed)"
    return text


def _case(attack: str, fraction: float) -> str:
    return "none (clean)" if attack == CLEAN else f"{attack}, {100 * fraction:.0f}%"


def problem_tables(rows: list[dict[str, Any]], problem: str, s: Settings) -> list[str]:
    """Rows: attack x fraction; columns: aggregators, then the oracle (no run without
    attackers); cells: :func:`cell` of the final gap (and, on a classifier, a second table of
    the accuracy)."""
    mine = [r for r in rows if r["problem"] == problem]
    keys = ["gap"] + (["accuracy"] if "accuracy" in mine[0] else [])
    columns = s.columns()
    lines: list[str] = []
    for key in keys:
        what = "final f - f*" if key == "gap" else "accuracy on all clients' rows"
        spread = " [min, max]" if len(s.seeds) > 1 else ""
        lines += [
            f"{what}, {median_over(len(s.seeds))}{spread}:",
            "",
            "| attack, attackers | " + " | ".join(columns) + " |",
            "|---|" + "---|" * len(columns),
        ]
        for attack, fraction in s.cases():
            by = {
                r["aggregator"]: r
                for r in mine
                if r["attack"] == attack and math.isclose(r["fraction"], fraction)
            }
            cells = [cell(by[a], key) if a in by else "" for a in columns]
            lines.append(f"| {_case(attack, fraction)} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def notes(rows: list[dict[str, Any]], problem: str, s: Settings) -> list[str]:
    """What the tables show without attackers (the aggregators that already end beyond the
    goal's factor of the mean's gap) and which runs failed, with their errors."""
    mine = [r for r in rows if r["problem"] == problem]
    clean = {r["aggregator"]: r for r in mine if r["attack"] == CLEAN}
    lines = []
    if "mean" in clean:
        bound = s.gap_factor * clean["mean"]["gap"]
        far = [a for a, r in clean.items() if a != "mean" and not r["gap"] <= bound]
        if far:
            lines.append(
                f"Without attackers, {', '.join(far)} already end{'s' if len(far) == 1 else ''} "
                f"above {s.gap_factor:g}x the "
                "plain mean's gap: the robust centre of heterogeneous clients' updates is not "
                "their mean, and the rule settles elsewhere."
            )
    failed = [r for r in mine if r["failed"]]
    if failed:
        cases = "; ".join(
            f"{r['aggregator']} under {_case(r['attack'], r['fraction'])} "
            f"({r['failed']}/{r['seeds']}: {', '.join(r['errors']) or 'non-finite gap'})"
            for r in failed
        )
        lines.append(f"Failed runs: {cases}.")
    return [*lines, ""] if lines else []


def cost_table(rows: list[dict[str, Any]], s: Settings) -> list[str]:
    """Per problem and aggregator (and the oracle): the median over all its runs of the
    milliseconds per round spent aggregating and of the whole run, and their ratio to the plain
    mean's."""
    lines = [
        "| problem | aggregator | aggregation ms/round | x mean | run ms/round | x mean |",
        "|---|---|---|---|---|---|",
    ]
    for problem in s.rounds:
        mine = [r for r in rows if r["problem"] == problem]
        cost = {}
        for a in s.columns():
            theirs = [r for r in mine if r["aggregator"] == a]
            if not theirs:  # the oracle without a case with attackers
                continue
            agg = [r["aggregation_seconds_per_round"] for r in theirs]
            run = [r["seconds_per_round"] for r in theirs]
            cost[a] = (float(np.nanmedian(agg)) * 1e3, float(np.nanmedian(run)) * 1e3)
        base = cost.get("mean", (math.nan, math.nan))
        for a, (agg, run) in cost.items():
            lines.append(
                f"| {problem} | {a} | {agg:.3f} | {agg / base[0]:.1f} | {run:.2f} | "
                f"{run / base[1]:.2f} |"
            )
    return lines


def winners_table(rows: list[dict[str, Any]], s: Settings) -> list[str]:
    """The best robust aggregator per problem, attack and share of attackers (by the median
    final gap, or accuracy on a classifier), then the oracle's value per share."""
    positive = [f for f in s.fractions if f > 0]
    shares = [f"{100 * f:.0f}%" for f in positive]
    lines = [
        "| problem | attack | "
        + " | ".join(shares + [f"oracle {share}" for share in shares])
        + " |",
        "|---|---|" + "---|" * (2 * len(positive)),
    ]
    for problem in s.rounds:
        theirs_all = [r for r in rows if r["problem"] == problem and r["aggregator"] != "mean"]
        mine = [r for r in theirs_all if r["aggregator"] != ORACLE]
        oracle = [r for r in theirs_all if r["aggregator"] == ORACLE]
        key = "accuracy" if mine and "accuracy" in mine[0] else "gap"
        for attack in s.attacks:
            cells = []
            for f in positive:
                theirs = [
                    r for r in mine if r["attack"] == attack and math.isclose(r["fraction"], f)
                ]
                if not theirs:
                    cells.append("")
                    continue
                sign = -1 if key == "accuracy" else 1
                best = min(theirs, key=lambda r: sign * _order(r[key]))
                cells.append(f"{best['aggregator']} ({_value(best[key], key)})")
            for f in positive:
                at = [r for r in oracle if r["attack"] == attack and math.isclose(r["fraction"], f)]
                cells.append(_value(at[0][key], key) if at else "")
            lines.append(f"| {problem} | {attack} | " + " | ".join(cells) + " |")
    return lines


def _order(value: float) -> float:
    return math.inf if math.isnan(value) else value


def _setup(s: Settings, taus: dict[str, float], quick: bool, seconds: float) -> list[str]:
    rounds = ", ".join(f"{p}: {r}" for p, r in s.rounds.items())
    tau = ", ".join(f"{p}: {t:.3g}" for p, t in taus.items())
    fractions = ", ".join(f"{100 * f:.0f}%" for f in s.fractions)
    return [
        f"Mode: {'--quick' if quick else 'full'}; wall time {seconds:.0f} s; {len(s.seeds)} "
        f"seed(s) {list(s.seeds)} (initial point, attackers, attacks' randomness; the data of "
        "seed 0).",
        "",
        f'RFedAvg with `upload="tangent"` (the server reads only the aggregate of the tangent '
        f"uploads), tau = {s.local_steps} local steps at each problem's default step size "
        f"(`riemfl.experiments.registry`); n = {s.n_clients} clients, all of them in every "
        f"round; rounds {rounds}. Attackers: {fractions} of the clients, chosen once per run "
        f"from its seed; attacks {', '.join(s.attacks)}; the clean run (0%) has none.",
        "",
        "Aggregator parameters, fixed before the runs: Krum and Multi-Krum with f = the number "
        "of attackers of the run (0 in the clean run; Multi-Krum averages the m - f best "
        f"scored); trimmed mean dropping {s.trim:g} of the uploads (farthest from their "
        f"geometric median); centered clipping with {s.clip_iterations} iteration(s) from the "
        "previous aggregate, radius tau = the median norm of the first round's tangent uploads "
        f"in a clean pilot run (plain mean, seed {s.seeds[0]}): {tau}. The geometric median "
        "runs Weiszfeld's algorithm to tol 1e-10 (at most 1000 steps).",
        "",
        "f - f*: the optimality gap of the final model (hyperbolic-tree: f* unknown, the gap "
        "is to the loss of a centralised reference run, and can be negative); a run that "
        "raised an error or ended with a non-finite gap is *failed* and counts as the worst "
        "value in the medians.",
    ]


def _goal(s: Settings, verdicts: list[Verdict]) -> list[str]:
    passed = sum(v.passed for v in verdicts)
    harmless = [v.label for v in verdicts if not v.mean_fails]
    lines = [
        f"Goal: with {100 * s.verdict_fraction:.0f}% attackers the best robust aggregator ends "
        f"within {s.gap_factor:g}x the clean run's optimality gap (on logreg-digits: within "
        f"{s.accuracy_points:g} accuracy points of its accuracy) under every attack, where the "
        "plain mean fails. The clean run is the plain mean without attackers; values are "
        f"{median_over(len(s.seeds))}. Last on each line: the oracle's value, the mean of the "
        "non-attackers' uploads (not a robust aggregator of the verdict; below), and whether "
        "it is within the bound.",
        "",
        *[f"- {v.line()}" for v in verdicts],
        "",
        f"{passed}/{len(verdicts)} (problem, attack) pairs pass.",
    ]
    if harmless:
        lines.append(
            f"The plain mean does not fail under {', '.join(harmless)}: there the attack is "
            "too weak at this share to test the aggregators."
        )
    return lines


def report(
    rows: list[dict[str, Any]],
    taus: dict[str, float],
    verdicts: list[Verdict],
    optimizer_rows: list[dict[str, Any]],
    s: Settings,
    quick: bool,
    seconds: float,
) -> str:
    """The markdown report."""
    lines = [
        "# Robust aggregation under Byzantine attacks, and server optimisers",
        "",
        *_setup(s, taus, quick, seconds),
        "",
        "## Verdicts",
        "",
        *_goal(s, verdicts),
        "",
        *floor_text(rows, s, verdicts),
        "",
        "Best robust aggregator per case (median final f - f*; accuracy on logreg-digits), "
        "then the oracle's value:",
        "",
        *winners_table(rows, s),
        "",
    ]
    for problem in s.rounds:
        lines += [f"## {problem}", "", f"![{problem}](robustness-{problem}.png)", ""]
        lines += problem_tables(rows, problem, s)
        lines += notes(rows, problem, s)
    c = s.comparison
    grid = "; ".join(f"{o}: lr {', '.join(f'{lr:g}' for lr in lrs)}" for o, lrs in c.grid.items())
    lines += [
        "## Cost per round",
        "",
        "Milliseconds per round, median over every run of the aggregator (all attacks and "
        "shares), aggregation alone and the whole run (clients, attack, evaluation):",
        "",
        *cost_table(rows, s),
        "",
        "## Server optimisers",
        "",
        f'RFedAvg (`upload="tangent"`, tau = {c.local_steps}, n = {c.n_clients}, every '
        f"client) with a server optimiser (Reddi et al. 2021); grid fixed before the runs: "
        f"{grid}; momentum 0.9, Adam betas (0.9, 0.99), eps 1e-3. Rounds: "
        f"{', '.join(f'{p}: {r}' for p, r in c.rounds.items())}; {len(c.seeds)} seed(s). "
        "Tolerance: the relative gap (f - f*) / (f(x0) - f*), fixed per problem from a pilot "
        "of the grid (seed 0, the full rounds) at a level plain RFedAvg reaches in the full "
        "run's rounds, above the floors where the runs settle. Best of the grid: fewest rounds "
        "to the tolerance "
        "(median over seeds), then the smallest final gap. sgd with lr 1 is plain RFedAvg.",
        "",
        "![server optimisers](server-optimizers.png)",
        "",
        *comparison.table(optimizer_rows, c),
        "",
    ]
    return "\n".join(lines)

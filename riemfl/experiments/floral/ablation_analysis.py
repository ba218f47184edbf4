"""The numbers and verdicts of the FLoRAL ablations, computed from the runs.

Each row's accuracy over seeds (:func:`row_accuracies`), the rank correlation of the rows with
the paper's (:func:`rank_correlation`, :func:`correlations`, as Table 1's
:func:`~riemfl.experiments.floral.analysis.rank_agreement`), and the paper's claims about the
table checked column by column, with what would change a verdict where ours disagrees
(:func:`check_orderings`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import ShapeError
from .ablation_settings import ABLATION_COLUMNS, PAPER_ABLATION_COLUMNS, AblationTable, Ordering
from .analysis import gap_summary
from .settings import Settings

__all__ = ["row_accuracies", "rank_correlation", "correlations", "check_orderings"]


def row_accuracies(
    runs: list[dict[str, Any]], table: AblationTable, s: Settings
) -> dict[tuple[str, str], list[float]]:
    """Final accuracy (%) of every row and column of the table, one value per seed.

    Parameters
    ----------
    runs : list of dict
        The table's runs (``row``, ``column``, ``seed``, ``final``).
    table : AblationTable
        The rows.
    s : Settings
        The columns that ran.

    Returns
    -------
    dict
        ``(row label, column label)`` to the accuracies in seed order.
    """
    out = {}
    for row in table.rows:
        for col in s.columns:
            chosen = sorted(
                (r["seed"], 100 * r["final"]["accuracy"])
                for r in runs
                if r["row"] == row.label and r["column"] == col
            )
            out[row.label, col] = [acc for _, acc in chosen]
    return out


def rank_correlation(ours: Sequence[float], paper: Sequence[float]) -> float:
    """Spearman's rank correlation of two equally long sequences (ties: average ranks).

    As Table 1's ordering statement (``scipy.stats.spearmanr``); NaN where either side has
    fewer than two distinct values (no ordering to compare).

    Parameters
    ----------
    ours, paper : sequence of float
        The rows' accuracies, in the same row order.

    Returns
    -------
    float
        In [-1, 1], or NaN.

    Raises
    ------
    ShapeError
        When the two sequences differ in length.
    """
    from scipy.stats import spearmanr

    if len(ours) != len(paper):
        raise ShapeError(f"rank_correlation: {len(ours)} values against {len(paper)}")
    if len(set(ours)) < 2 or len(set(paper)) < 2:
        return math.nan
    return float(spearmanr(ours, paper).statistic)


def correlations(
    means: dict[str, dict[str, tuple[float, float]]], table: AblationTable, s: Settings
) -> list[dict[str, Any]]:
    """Per column: the rank correlation of the rows the paper has with the paper's column.

    Parameters
    ----------
    means : dict
        Row label -> column label -> (mean, std) (:func:`~riemfl.experiments.floral.analysis
        .means` of :func:`row_accuracies`).
    table : AblationTable
        The rows and the paper's numbers.
    s : Settings
        The columns that ran.

    Returns
    -------
    list of dict
        ``column``, ``paper_column``, ``rows`` (how many), ``rho``, ``best_ours`` and
        ``best_paper`` ((label, accuracy) of the best row; the first where several tie).
    """
    rows = [r for r in table.rows if r.paper is not None]
    out = []
    for col, j in ABLATION_COLUMNS:
        if col not in s.columns:
            continue
        mine = [means[r.label][col][0] for r in rows]
        paper = [r.paper[j] for r in rows]
        out.append(
            {
                "column": col,
                "paper_column": PAPER_ABLATION_COLUMNS[j],
                "rows": len(rows),
                "rho": rank_correlation(mine, paper),
                "best_ours": (rows[int(np.argmax(mine))].label, max(mine)),
                "best_paper": (rows[int(np.argmax(paper))].label, max(paper)),
            }
        )
    return out


def _paper_holds(table: AblationTable, ordering: Ordering) -> list[bool]:
    """Whether the paper's own numbers satisfy the ordering, per paper column."""
    return [
        all(
            table.row(a).paper[j] > table.row(b).paper[j]
            for a in ordering.above
            for b in ordering.below
        )
        for j in range(len(PAPER_ABLATION_COLUMNS))
    ]


def _change(worst: dict[str, Any], n_pairs: int, failing: int) -> str:
    """What would change a "does NOT agree" verdict: the shortfall of the worst pair, against
    the seed-to-seed spread of its paired gap."""
    g, above, below = worst["stats"], worst["above"], worst["below"]
    if worst["gap"] == 0:
        text = f"{above} ties {below}: any gain on it"
    else:
        text = f"{above} would have to gain more than {-worst['gap']:.1f} points on {below}"
    text += f" (the largest shortfall; {failing} of {n_pairs} pairs out of order, ties included)"
    if g["n"] < 2:
        return text + "; one seed, so the seed-to-seed spread is not measured here"
    if -worst["gap"] > 2 * g["se"]:
        return text + (
            f"; that is more than 2 s.e. ({g['se']:.1f}) of the paired gap over {g['n']} "
            "seeds: more seeds are unlikely to change it"
        )
    return text + (
        f"; within 2 s.e. ({g['se']:.1f}) of the paired gap over {g['n']} seeds: more seeds "
        "could change it"
    )


def check_orderings(
    accs: dict[tuple[str, str], list[float]], table: AblationTable, s: Settings
) -> list[dict[str, Any]]:
    """Every claim of the table in every column that ran: does our ordering agree?

    A claim agrees where every row of ``above`` has a higher mean accuracy than every row of
    ``below`` (the paired gap over seeds is reported beside it).

    Parameters
    ----------
    accs : dict
        :func:`row_accuracies`.
    table : AblationTable
        The rows and the claims.
    s : Settings
        The columns that ran.

    Returns
    -------
    list of dict
        ``claim``, ``source``, ``column``, ``paper_column``, ``agrees``, ``worst`` (the pair with
        the smallest gap: ``above``, ``below``, ``gap`` in points, ``stats`` of the paired
        gaps), ``pairs``, ``failing``, ``paper_holds`` (per paper column, whether the paper's
        numbers satisfy the claim) and ``change`` (what would change a disagreement; "" where
        ours agrees).
    """
    out = []
    for ordering in table.orderings:
        holds = _paper_holds(table, ordering)
        for col, j in ABLATION_COLUMNS:
            if col not in s.columns:
                continue
            pairs = []
            for a in ordering.above:
                for b in ordering.below:
                    gaps = [x - y for x, y in zip(accs[a, col], accs[b, col], strict=True)]
                    stats = gap_summary(gaps)
                    pairs.append({"above": a, "below": b, "gap": stats["mean"], "stats": stats})
            worst = min(pairs, key=lambda p: p["gap"])
            failing = sum(p["gap"] <= 0 for p in pairs)
            agrees = failing == 0
            out.append(
                {
                    "claim": ordering.claim,
                    "source": ordering.source,
                    "column": col,
                    "paper_column": PAPER_ABLATION_COLUMNS[j],
                    "agrees": agrees,
                    "worst": worst,
                    "pairs": len(pairs),
                    "failing": failing,
                    "paper_holds": holds,
                    "change": "" if agrees else _change(worst, len(pairs), failing),
                }
            )
    return out

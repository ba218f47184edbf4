"""The numbers and verdicts of the FLoRAL report, computed from the runs.

Table 1's accuracies over seeds (:func:`accuracies`, :func:`means`), how the ordering of its
rows compares with the paper's (:func:`rank_agreement`, and the claims of :data:`CLAIMS`
checked by :func:`check_claims`), the FLoRAL-vs-ensemble gap with reduced data paired by seed
with the verdict rule fixed before the runs (:func:`gap_rows`, :func:`gap_verdict`,
:func:`regime_shifts`), what the clients of a column held (:func:`held`), and how far the
product of the averaged factors is from the average of the adaptors
(:func:`factor_average_error`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..spread import mean_std
from .settings import (
    COLUMNS,
    GAP_METHODS,
    GAP_REFERENCE,
    GAP_WITHIN,
    METHODS,
    PAPER_MNIST,
    Settings,
    column,
)

__all__ = [
    "accuracies",
    "means",
    "paper_gap",
    "rank_agreement",
    "Claim",
    "CLAIMS",
    "check_claims",
    "paired_gaps",
    "gap_summary",
    "gap_verdict",
    "gap_rows",
    "regime_shifts",
    "held",
    "factor_average_error",
]


def accuracies(runs: list[dict[str, Any]], s: Settings) -> dict[tuple[str, str], list[float]]:
    """Final accuracy (%) of every Table 1 row and column, one value per seed.

    Parameters
    ----------
    runs : list of dict
        Table 1's runs (``method``, ``column``, ``final``).
    s : Settings
        The columns that ran.

    Returns
    -------
    dict
        ``(method label, column label)`` to the accuracies over seeds.
    """
    cols = [c.label for c in COLUMNS if c.label in s.columns]
    return {
        (m.label, c): [
            100 * r["final"]["accuracy"]
            for r in runs
            if r["method"] == m.label and r["column"] == c
        ]
        for m in METHODS
        for c in cols
    }


def means(accs: dict[tuple[str, str], list[float]]) -> dict[str, dict[str, tuple[float, float]]]:
    """Mean and std over seeds of :func:`accuracies`, per method label and column label."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for (label, col), values in accs.items():
        out.setdefault(label, {})[col] = mean_std(values)[:2]
    return out


def paper_gap(label: str, col: str, reference: str) -> float:
    """The paper's accuracy of ``label`` minus that of ``reference`` (points) in the MNIST
    column that the column ``col`` is compared with."""
    j = column(col).paper
    return PAPER_MNIST[label][j][0] - PAPER_MNIST[reference][j][0]


def _spearman(a: list[float], b: list[float]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def rank_agreement(ours: dict[str, dict[str, tuple[float, float]]], col: str) -> dict[str, Any]:
    """Rank correlation of the rows' mean accuracy with the paper's, and each side's best row.

    Parameters
    ----------
    ours : dict
        :func:`means`.
    col : str
        A column label.

    Returns
    -------
    dict
        ``rho``, and ``best_ours`` / ``best_paper``: (label, accuracy) of the best row.
    """
    j = column(col).paper
    mine = [ours[m.label][col][0] for m in METHODS]
    paper = [PAPER_MNIST[m.label][j][0] for m in METHODS]
    return {
        "rho": _spearman(mine, paper),
        "best_ours": (METHODS[int(np.argmax(mine))].label, max(mine)),
        "best_paper": (METHODS[int(np.argmax(paper))].label, max(paper)),
    }


@dataclass(frozen=True)
class Claim:
    """A claim of the paper about Table 1: ``labels`` against ``reference`` in the columns of
    ``transforms`` agree where the gap in points is at least ``threshold``.

    ``verdicts`` are the words for (agrees, does not agree); ``sentence`` formats a check
    with the fields ``col``, ``label``, ``gap``, ``paper`` and ``verdict``.
    """

    reference: str
    labels: tuple[str, ...]
    transforms: tuple[str, ...]
    threshold: float
    verdicts: tuple[str, str]
    sentence: str


#: the paper's claims checked column by column, in the report's order
CLAIMS: tuple[Claim, ...] = (
    Claim(
        "FedAvg",
        ("FLoRAL(1%) (learned)", "FLoRAL(10%) (learned)", "FLoRAL(1%) (pi*)"),
        ("label_shift",),
        20.0,
        ("agrees", "does NOT agree"),
        "- {col}: {label} beats FedAvg by {gap:+.1f} points (paper {paper:+.1f}): "
        "{verdict} with 'a wide margin' (>= 20 points).",
    ),
    Claim(
        GAP_REFERENCE,
        GAP_METHODS[1:],
        ("rotation", "label_shift"),
        -3.0,
        ("close (within 3 points)", "NOT close (more than 3 points)"),
        "- {col}: {label} vs Ensemble (pi*): {gap:+.1f} points (paper {paper:+.1f}): {verdict}.",
    ),
)


def check_claims(ours: dict[str, dict[str, tuple[float, float]]], s: Settings) -> list[str]:
    """Every claim of :data:`CLAIMS` in every column it concerns: one sentence each.

    Parameters
    ----------
    ours : dict
        :func:`means`.
    s : Settings
        The columns that ran.

    Returns
    -------
    list of str
    """
    lines = []
    for claim in CLAIMS:
        for col in (c for c in s.columns if column(c).transform in claim.transforms):
            for label in claim.labels:
                gap = ours[label][col][0] - ours[claim.reference][col][0]
                verdict = claim.verdicts[0] if gap >= claim.threshold else claim.verdicts[1]
                paper = paper_gap(label, col, claim.reference)
                lines.append(
                    claim.sentence.format(
                        col=col, label=label, gap=gap, paper=paper, verdict=verdict
                    )
                )
    return lines


def paired_gaps(runs: list[dict[str, Any]], col: str, label: str) -> list[float]:
    """FLoRAL minus Ensemble (pi*) accuracy (points), seed by seed (same split and seed).

    Parameters
    ----------
    runs : list of dict
        Table 1's runs.
    col : str
        A column label.
    label : str
        A FLoRAL row of :data:`GAP_METHODS`.

    Returns
    -------
    list of float
        One gap per seed on which both rows ran, in seed order.
    """
    acc = {
        (r["method"], r["seed"]): 100 * r["final"]["accuracy"] for r in runs if r["column"] == col
    }
    seeds = sorted(sd for (m, sd) in acc if m == label and (GAP_REFERENCE, sd) in acc)
    return [acc[label, sd] - acc[GAP_REFERENCE, sd] for sd in seeds]


def gap_summary(gaps: list[float]) -> dict[str, float]:
    """Mean, std (population, as the tables), standard error (sample std / sqrt n) and the
    95% Student-t interval of the mean gap (NaN with fewer than two seeds).

    Parameters
    ----------
    gaps : list of float
        :func:`paired_gaps`.

    Returns
    -------
    dict
        ``n``, ``mean``, ``std``, ``se``, ``lo``, ``hi``.
    """
    from scipy.stats import t as student_t

    mean, std, n = mean_std(gaps)
    if n < 2:
        return {"n": n, "mean": mean, "std": std, "se": math.nan, "lo": math.nan, "hi": math.nan}
    se = float(np.std(gaps, ddof=1)) / math.sqrt(n)
    half = float(student_t.ppf(0.975, n - 1)) * se
    return {"n": n, "mean": mean, "std": std, "se": se, "lo": mean - half, "hi": mean + half}


def gap_verdict(g: dict[str, float]) -> tuple[str, str]:
    """The rule fixed before the runs: the 95% interval of the mean gap against -1 point.

    Parameters
    ----------
    g : dict
        :func:`gap_summary`.

    Returns
    -------
    verdict : str
    change : str
        What would change the verdict ("" where nothing is to say).
    """
    if g["n"] < 2:
        return "no verdict (one seed)", ""
    if g["hi"] < GAP_WITHIN:
        return (
            "does NOT agree: FLoRAL trails by more than 1 point",
            f"with the same spread, a mean gap {GAP_WITHIN - g['hi']:.1f} points higher makes it "
            f"undecided, {GAP_WITHIN - g['lo']:.1f} points higher makes it agree",
        )
    if g["lo"] >= GAP_WITHIN:
        return "agrees: within 1 point", ""
    return (
        "undecided: the interval straddles -1",
        f"more seeds: the interval is {g['hi'] - g['lo']:.1f} points wide",
    )


def gap_rows(runs: list[dict[str, Any]], s: Settings) -> list[dict[str, Any]]:
    """FLoRAL (pi*) against Ensemble (pi*): the paired gaps of every column that ran.

    Parameters
    ----------
    runs : list of dict
        Table 1's runs.
    s : Settings
        The columns that ran.

    Returns
    -------
    list of dict
        The reduced columns first, then the full ones (a reference, without a verdict); each
        with ``column`` (a :class:`Column`), ``method``, ``gaps``, ``stats``
        (:func:`gap_summary`) and ``paper`` (the paper's gap).
    """
    rows = []
    for c in sorted(COLUMNS, key=lambda c: not c.reduced):
        if c.label not in s.columns:
            continue
        for label in GAP_METHODS[1:]:
            gaps = paired_gaps(runs, c.label, label)
            rows.append(
                {
                    "column": c,
                    "method": label,
                    "gaps": gaps,
                    "stats": gap_summary(gaps),
                    "paper": paper_gap(label, c.label, GAP_REFERENCE),
                }
            )
    return rows


def regime_shifts(summary: list[dict]) -> list[dict[str, Any]]:
    """Does the paper's 5% move the gap against 14%? Difference of the mean gaps, +/- 2 s.e.

    Parameters
    ----------
    summary : list of dict
        The reduced columns' gaps (``column``, ``method``, ``n``, ``mean``, ``se``).

    Returns
    -------
    list of dict
        ``transform``, ``method``, the mean gaps ``five`` and ``ten``, and ``half`` (two
        standard errors of their difference, the two taken as independent), where both
        columns have two seeds or more.
    """
    shifts = []
    for five in (c for c in COLUMNS if c.reduced and not c.ten_row_minimum):
        ten = next(
            (c for c in COLUMNS if c.ten_row_minimum and c.transform == five.transform), None
        )
        for label in GAP_METHODS[1:]:
            a, b = (
                next((g for g in summary if g["column"] == c.label and g["method"] == label), None)
                for c in (five, ten)
            )
            if a is None or b is None or min(a["n"], b["n"]) < 2:
                continue
            shifts.append(
                {
                    "transform": five.transform,
                    "method": label,
                    "five": a["mean"],
                    "ten": b["mean"],
                    "half": 2 * math.hypot(a["se"], b["se"]),
                }
            )
    return shifts


def held(holdings: list[dict[str, Any]], col: str) -> dict[str, Any] | None:
    """What the clients of a column held, over its seeds (None where it has no holdings).

    Parameters
    ----------
    holdings : list of dict
        :func:`~riemfl.experiments.floral.build.holdings` per column and seed.
    col : str
        A column label.

    Returns
    -------
    dict or None
        ``seeds``; (min, max) of ``rows`` per client, ``total`` rows and their ``share`` (%)
        of the training set per seed, and ``test`` rows per client; ``digits`` per client
        (min, mean, max); ``lacks``, the digits a whole cluster lacks (mean, max).
    """
    hs = [h for h in holdings if h["column"] == col]
    if not hs:
        return None
    rows = np.concatenate([h["train_rows"] for h in hs])
    total = [sum(h["train_rows"]) for h in hs]
    share = [100 * sum(h["train_rows"]) / h["available_rows"] for h in hs]
    cls = np.concatenate([h["classes"] for h in hs])
    lack = np.concatenate([h["cluster_lacks"] for h in hs])
    test = np.concatenate([h["test_rows"] for h in hs])
    return {
        "seeds": len(hs),
        "rows": (rows.min(), rows.max()),
        "total": (min(total), max(total)),
        "share": (min(share), max(share)),
        "digits": (cls.min(), cls.mean(), cls.max()),
        "lacks": (lack.mean(), lack.max()),
        "test": (test.min(), test.max()),
    }


def factor_average_error(agg: dict[str, Any]) -> float:
    """Mean relative gap between the clients' averaged adaptors and the product of the averaged
    factors over the factor-averaging runs (NaN where none recorded it)."""
    err = [
        np.nanmean(r["curve"]["factor_average_error"])
        for r in agg["sync"]
        if r["adaptors"] == "factors" and "factor_average_error" in r["curve"]
    ]
    return float(np.mean(err)) if err else math.nan

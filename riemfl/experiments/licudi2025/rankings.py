"""The rankings of the Licudi et al. 2025 report: our orderings of the methods against the
paper's Table 1, pair by pair, and what would change each verdict."""

from __future__ import annotations

import math
from typing import Any

from ..equal_work import AXES, disagreeing_pairs, pair_agreement
from ..spread import mean_std
from .settings import CURVE_METHODS, Settings

__all__ = ["fedbuff_statement", "pairs_verdict_change", "ranking_statement", "te_ranking"]


def _larger_std(a: tuple[float, float, int], b: tuple[float, float, int]) -> float:
    """The larger seed std of two ``mean_std`` results; NaN with one seed (no spread known)."""
    return max(a[1], b[1]) if not (math.isnan(a[1]) or math.isnan(b[1])) else math.nan


def ranking_statement(
    runs: list[dict[str, Any]], s: Settings, accuracy: dict[str, list[float]] | None = None
) -> list[str]:
    """Plain sentences on where our accuracy ranking agrees with the ranking of Licudi et al.
    2025, Table 1 (FEMNIST or Shakespeare), each disagreement with what would change it.

    ``accuracy``: method -> the accuracy of each seed (default: the final accuracy of ``runs``,
    i.e. at equal server steps)."""
    name, paper = s.paper_table()
    if accuracy is None:
        accuracy = {m: [r["accuracy"] for r in runs if r["method"] == m] for m in s.methods}
    stats = {m: mean_std(accuracy[m]) for m in s.methods}
    ours = {m: stats[m][0] for m in s.methods}
    theirs = {m: paper[m][0] for m in s.methods}
    our_order = sorted(s.methods, key=lambda m: -ours[m])
    agree, pairs = pair_agreement(ours, theirs)
    lines = [
        f"- Accuracy ranking, ours: {' > '.join(our_order)}.",
        f"- Accuracy ranking, Licudi et al. 2025 on {name}: "
        f"{' > '.join(sorted(s.methods, key=lambda m: -theirs[m]))}.",
        f"- The two rankings agree on {agree} of {pairs} pairs of methods.",
    ]
    if agree < pairs:
        lines.append("  " + pairs_verdict_change(stats, paper, disagreeing_pairs(ours, theirs)))
    for proposal in (m for m in CURVE_METHODS if m in s.methods):
        lines += _proposal_verdict(proposal, s, stats, name)
    return lines


def _proposal_verdict(
    proposal: str, s: Settings, stats: dict[str, tuple[float, float, int]], name: str
) -> list[str]:
    """Whether a proposal (AsyncBezier, AsyncBezierED) beats every baseline, as in the paper,
    and if not, what would change the verdict."""
    ours = {m: stats[m][0] for m in s.methods}
    beaten = [m for m in s.methods if m not in CURVE_METHODS and ours[m] >= ours[proposal]]
    if not beaten:
        return [f"- {proposal}: beats every baseline here (as in the paper)."]
    best = max(beaten, key=lambda m: ours[m])
    gap = 100 * (ours[best] - ours[proposal])
    spread = 100 * _larger_std(stats[best], stats[proposal])
    if math.isnan(spread):
        why = "one seed, so the spread is unknown: more seeds would tell whether it holds."
    elif gap < 2 * spread:
        why = "the gap is within two seed std's, so more seeds could reverse it."
    else:
        why = (
            "the gap exceeds two seed std's, so more seeds would not reverse it; only a "
            "different setting could (the paper's FEMNIST clients run hundreds of local "
            "batches, ours about 4)."
        )
    return [
        f"- {proposal}: does NOT beat {', '.join(beaten)} here (the paper: it beats "
        f"every baseline on {name}).",
        f"  What would change the verdict: {proposal} is {gap:.2f} points below {best}"
        + ("" if math.isnan(spread) else f" (largest seed std of the two: {spread:.2f})")
        + f"; {why}",
    ]


def pairs_verdict_change(
    stats: dict[str, tuple[float, float, int]],
    paper: dict[str, tuple[float, ...]],
    flipped: list[tuple[str, str]],
) -> str:
    """What would change the ranking verdict: of the pairs ordered differently (``flipped``), how
    many lie within the seed spread of the paper's numbers, or of ours (two std's of the larger).

    ``stats``: method -> our (mean, std, seeds) (:func:`~riemfl.experiments.spread.mean_std`);
    ``paper``: method -> the paper's (mean, std, ...) of the same metric (its own unit)."""

    def close_theirs(a: str, b: str) -> bool:
        return abs(paper[a][0] - paper[b][0]) < 2 * max(paper[a][1], paper[b][1])

    def close_ours(a: str, b: str) -> bool:
        return abs(stats[a][0] - stats[b][0]) < 2 * _larger_std(stats[a], stats[b])

    theirs = sum(close_theirs(a, b) for a, b in flipped)
    start = f"What would change the verdict: of the {len(flipped)} pairs ordered differently, "
    if any(math.isnan(stats[m][1]) for pair in flipped for m in pair):
        return (
            start + f"{theirs} are within two seed std's in the paper (pairs the paper itself "
            "does not separate); with one seed here our spread is unknown, and more seeds would "
            "tell which of the others hold."
        )
    ours = sum(close_ours(a, b) for a, b in flipped)
    neither = sum(not (close_theirs(a, b) or close_ours(a, b)) for a, b in flipped)
    return (
        start + f"{theirs} are within two seed std's in the paper and {ours} within two seed "
        f"std's here (more seeds could reorder those); {neither} differ beyond both spreads, "
        "which only a different setting could change."
    )


def te_ranking(s: Settings, te: dict[str, list[float | None]], clock: str) -> str:
    """The T_e ranking on one clock (fastest first; a method that never reached the target is
    last, and the slower of two when only one did) and the pairs ordered as in Table 1's T_e."""
    # scores: higher is better, as for accuracy; an unreached target scores -inf
    ours = {
        m: -mean_std(te[m])[0] if any(v is not None for v in te[m]) else -math.inf
        for m in s.methods
    }
    paper = {m: -s.paper_table()[1][m][2] for m in s.methods}
    agree, pairs = pair_agreement(ours, paper)
    order = " < ".join(sorted(s.methods, key=lambda m: -ours[m]))
    return (
        f"- T_e in {clock}, fastest first: {order}; ordered as Table 1's T_e on {agree} of "
        f"{pairs} pairs."
    )


def fedbuff_statement(s: Settings, work: dict[str, Any]) -> list[str]:
    """Where FedBuff ranks on each clock, and whether its lead at equal server steps survives
    equal client work."""
    if "FedBuff" not in s.methods or len(s.methods) < 2:
        return []
    ranks, gaps = {}, {}
    for axis in AXES:
        stats = {m: mean_std(work[axis]["accuracy"][m]) for m in s.methods}
        order = sorted(s.methods, key=lambda m: -stats[m][0])
        ranks[axis] = order.index("FedBuff") + 1
        other = max((m for m in s.methods if m != "FedBuff"), key=lambda m: stats[m][0])
        spread = 100 * _larger_std(stats["FedBuff"], stats[other])
        gaps[axis] = (
            other,
            100 * (stats["FedBuff"][0] - stats[other][0]),
            "one seed" if math.isnan(spread) else f"larger seed std {spread:.2f}",
        )
    n = len(s.methods)
    lines = [
        "- FedBuff ranks "
        + "; ".join(
            f"{ranks[a]} of {n} at equal {AXES[a]} ({gaps[a][1]:+.2f} points against "
            f"{gaps[a][0]}, the best other method; {gaps[a][2]})"
            for a in AXES
        )
        + "."
    ]
    return lines + [_fedbuff_lead(ranks, n, work["updates"]["budget"])]


def _fedbuff_lead(ranks: dict[str, int], n: int, updates: float) -> str:
    """Whether FedBuff's lead at equal server steps survives equal client updates."""
    if ranks["step"] != 1:
        return "- FedBuff is not first at equal server steps in this run."
    if ranks["updates"] == 1:
        return (
            "- FedBuff's lead does NOT disappear at equal client work: it is still first at "
            f"{updates:g} client updates."
        )
    return (
        "- FedBuff's lead disappears at equal client work: first at equal server steps, "
        f"{ranks['updates']} of {n} at {updates:g} client updates."
    )

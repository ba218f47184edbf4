"""The goal's verdicts: per problem and rule, some compressor reaches the tolerance with at least
a factor (4) fewer uplink bytes than float64 uploads, and the cost of that in rounds.

A compressor counts only when every seed reached the tolerance within its budget; its bytes and
rounds are medians over the seeds (:func:`~riemfl.experiments.communication.runs.summarise`).
The best is the compressor of the largest ratio of the float64 run's median bytes to its own.
Without a float64 run that reaches the tolerance there is no reference: the verdict FAILs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .settings import REFERENCE

__all__ = ["Verdict", "verdict", "verdicts", "kilobytes"]


@dataclass(frozen=True)
class Verdict:
    """The goal on one problem for one rule.

    Attributes
    ----------
    problem, rule : str
    tolerance : float
        The relative optimality gap to reach.
    factor : float
        The goal's ratio of bytes.
    reference_rounds, reference_bytes : float
        The float64 run's median rounds and uplink bytes per client to the tolerance (inf: not
        reached in the median).
    best : str or None
        The compressor of the largest ratio among those that reached the tolerance in every
        seed; None when none did.
    ratio : float
        The float64 run's bytes over the best's (NaN without a best or a reference).
    rounds, nbytes : float
        The best's median rounds and bytes to the tolerance (NaN without a best).
    passed : bool
        Whether ``ratio >= factor``.
    """

    problem: str
    rule: str
    tolerance: float
    factor: float
    reference_rounds: float
    reference_bytes: float
    best: str | None
    ratio: float
    rounds: float
    nbytes: float
    passed: bool

    @property
    def label(self) -> str:
        """``problem/rule``, the claim's label for ``--strict``."""
        return f"{self.problem}/{self.rule}"

    def line(self) -> str:
        """One line: PASS or FAIL with the numbers."""
        word = "PASS" if self.passed else "FAIL"
        head = f"{word} {self.label} (relative gap {self.tolerance:g}, goal {self.factor:g}x)"
        if not math.isfinite(self.reference_bytes):
            return f"{head}: float64 does not reach the tolerance, no reference"
        if self.best is None:
            return (
                f"{head}: no compressor reaches the tolerance in every seed within its budget "
                f"(float64: {self.reference_rounds:g} rounds, {kilobytes(self.reference_bytes)})"
            )
        extra = self.rounds - self.reference_rounds
        return (
            f"{head}: best {self.best}, {self.ratio:.2f}x fewer uplink bytes "
            f"({kilobytes(self.nbytes)} vs {kilobytes(self.reference_bytes)} per client) in "
            f"{self.rounds:g} rounds vs {self.reference_rounds:g} ({extra:+g} rounds, "
            f"{self.rounds / self.reference_rounds:.2f}x)"
        )


def kilobytes(nbytes: float) -> str:
    """``nbytes`` in kB (1000 bytes), three significant digits; "not reached" for inf."""
    return "not reached" if not math.isfinite(nbytes) else f"{nbytes / 1e3:.3g} kB"


def verdict(
    problem: str,
    rule: str,
    rows: list[dict[str, Any]],
    *,
    tolerance: float,
    factor: float = 4.0,
) -> Verdict:
    """The verdict on one problem and rule.

    Parameters
    ----------
    problem, rule : str
    rows : list of dict
        One per compressor: ``compressor`` (:data:`~.settings.REFERENCE` for float64, whose row
        is required), ``seeds``, ``reached`` (how many seeds reached the tolerance), ``rounds``
        and ``bytes`` (each a dict with its ``median`` over the seeds; inf when not reached).
    tolerance : float
        The relative gap, for the line.
    factor : float
        The goal's ratio.

    Raises
    ------
    ValueError
        Without the float64 row.
    """
    by = {r["compressor"]: r for r in rows}
    if REFERENCE not in by:
        raise ValueError(f"verdict: no {REFERENCE!r} (float64) row among {sorted(by)}")
    ref_rounds = float(by[REFERENCE]["rounds"]["median"])
    ref_bytes = float(by[REFERENCE]["bytes"]["median"])
    candidates = {
        c: ref_bytes / r["bytes"]["median"]
        for c, r in by.items()
        if c != REFERENCE and r["reached"] == r["seeds"] and math.isfinite(ref_bytes)
    }
    if not candidates:
        nan = math.nan
        return Verdict(problem, rule, tolerance, factor, ref_rounds, ref_bytes, None, nan, nan,
                       nan, False)  # fmt: skip
    best = max(candidates, key=candidates.__getitem__)
    return Verdict(
        problem,
        rule,
        tolerance,
        factor,
        ref_rounds,
        ref_bytes,
        best,
        candidates[best],
        float(by[best]["rounds"]["median"]),
        float(by[best]["bytes"]["median"]),
        bool(candidates[best] >= factor),
    )


def verdicts(
    rows: list[dict[str, Any]], tolerance: dict[str, float], factor: float = 4.0
) -> list[Verdict]:
    """The verdict on every (problem, rule) of the summary rows, in their order."""
    pairs = dict.fromkeys((r["problem"], r["rule"]) for r in rows)
    return [
        verdict(
            problem,
            rule,
            [r for r in rows if (r["problem"], r["rule"]) == (problem, rule)],
            tolerance=tolerance[problem],
            factor=factor,
        )
        for problem, rule in pairs
    ]

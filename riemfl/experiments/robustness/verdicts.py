"""The goal's verdicts: with a share of attackers (20%), the best robust aggregator ends within a
factor (2) of the clean run's optimality gap, or on a classifier within some accuracy points (3)
of its accuracy, under every attack, where the plain mean fails.

The clean run is the plain mean without attackers; every value is the median over the seeds
(:func:`~riemfl.experiments.robustness.runs.summarise`: a failed run counts as the worst). The
verdict is the robust aggregators' (PASS or FAIL); whether the plain mean fails under the same
attack is said beside it, as the measure of the attack's strength: an attack under which the
mean does not fail tests nothing. The oracle (:mod:`~riemfl.experiments.robustness.oracle`, the
mean of the non-attackers' uploads) is no robust aggregator: its value and whether it is within
the bound are said beside the verdict, as whether discarding exactly the attackers reaches the
goal at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .oracle import ORACLE

__all__ = ["Verdict", "verdict", "verdicts"]


@dataclass(frozen=True)
class Verdict:
    """The goal on one problem under one attack.

    Attributes
    ----------
    problem, attack : str
    metric : str
        "gap" (f - f*, smaller is better) or "accuracy" (larger is better).
    clean : float
        The clean run's value.
    mean : float
        The plain mean's value under the attack.
    best : str
        The robust aggregator of the best value under the attack.
    best_value : float
    passed : bool
        Whether ``best_value`` is within the bound of ``clean``.
    mean_fails : bool
        Whether the plain mean's value is not.
    bound : float
        The worst value within the goal: ``factor * clean`` or ``clean - points``.
    oracle : float
        The oracle's value under the attack (NaN without an oracle run; a failed run's value
        as for the aggregators).
    oracle_within : bool or None
        Whether ``oracle`` is within the bound (None without an oracle run).
    """

    problem: str
    attack: str
    metric: str
    clean: float
    mean: float
    best: str
    best_value: float
    passed: bool
    mean_fails: bool
    bound: float
    oracle: float = math.nan
    oracle_within: bool | None = None

    @property
    def label(self) -> str:
        """``problem/attack``, the claim's label for ``--strict``."""
        return f"{self.problem}/{self.attack}"

    def line(self) -> str:
        """One line: PASS or FAIL with the numbers."""
        word = "PASS" if self.passed else "FAIL"
        show = _gap if self.metric == "gap" else _percent
        name = "f - f*" if self.metric == "gap" else "accuracy"
        mean = "the plain mean fails" if self.mean_fails else "the plain mean does not fail"
        text = (
            f"{word} {self.label}: best {self.best}, {name} {show(self.best_value)} (bound "
            f"{show(self.bound)}, clean {show(self.clean)}); mean {show(self.mean)}, {mean}"
        )
        if self.oracle_within is None:
            return text
        where = "within the bound" if self.oracle_within else "beyond the bound"
        return f"{text}; oracle {show(self.oracle)}, {where}"


def _gap(value: float) -> str:
    return "failed" if math.isinf(value) else f"{value:.3g}"


def _percent(value: float) -> str:
    return "failed" if not math.isfinite(value) else f"{100 * value:.1f}%"


def verdict(
    problem: str,
    attack: str,
    clean: float,
    under_attack: dict[str, float],
    *,
    metric: str = "gap",
    factor: float = 2.0,
    points: float = 3.0,
) -> Verdict:
    """The verdict on one problem under one attack.

    Parameters
    ----------
    problem, attack : str
    clean : float
        The clean run's final gap (or accuracy, a fraction in [0, 1]).
    under_attack : dict
        Aggregator name -> its value under the attack; "mean" is the plain mean,
        :data:`~riemfl.experiments.robustness.oracle.ORACLE` the oracle (optional), every other
        name a robust aggregator. A failed run's gap is inf, its accuracy -inf (NaN counts as
        either).
    metric : {"gap", "accuracy"}
    factor : float
        The gap's bound is ``factor * clean``.
    points : float
        The accuracy's bound is ``clean - points / 100``.
    """
    if metric not in ("gap", "accuracy"):
        raise ValueError(f"metric must be 'gap' or 'accuracy', got {metric!r}")
    worst = math.inf if metric == "gap" else -math.inf
    values = {k: worst if math.isnan(v) else v for k, v in under_attack.items()}
    robust = {k: v for k, v in values.items() if k not in ("mean", ORACLE)}
    if not robust:
        raise ValueError("verdict: no robust aggregator among the values")
    if metric == "gap":
        best = min(robust, key=robust.__getitem__)
        bound = factor * clean
    else:
        best = max(robust, key=robust.__getitem__)
        bound = clean - points / 100

    def within(value: float) -> bool:
        return value <= bound if metric == "gap" else value >= bound

    mean = values.get("mean", worst)
    oracle = values.get(ORACLE)
    return Verdict(
        problem,
        attack,
        metric,
        clean,
        mean,
        best,
        robust[best],
        bool(within(robust[best])),
        not within(mean),
        bound,
        math.nan if oracle is None else oracle,
        None if oracle is None else bool(within(oracle)),
    )


def verdicts(
    rows: list[dict[str, Any]], fraction: float, *, factor: float = 2.0, points: float = 3.0
) -> list[Verdict]:
    """The verdict on every problem under every attack at ``fraction``, from the rows of
    :func:`~riemfl.experiments.robustness.runs.summarise`; on a problem with an accuracy the
    verdict is on the accuracy."""
    out = []
    problems = list(dict.fromkeys(r["problem"] for r in rows))
    for problem in problems:
        mine = [r for r in rows if r["problem"] == problem]
        clean = next((r for r in mine if r["fraction"] == 0 and r["aggregator"] == "mean"), None)
        if clean is None:
            continue
        metric = "accuracy" if "accuracy" in clean else "gap"
        attacked = [r for r in mine if math.isclose(r["fraction"], fraction) and r["fraction"] > 0]
        for attack in dict.fromkeys(r["attack"] for r in attacked):
            values = {r["aggregator"]: r[metric] for r in attacked if r["attack"] == attack}
            options = {"metric": metric, "factor": factor, "points": points}
            out.append(verdict(problem, attack, clean[metric], values, **options))
    return out

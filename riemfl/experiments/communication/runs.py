r"""The communication runs: per problem, rule and seed the float64 run, then every compressed run
within its budget, each with the first round at the tolerance and the uplink bytes sent by then.

The measure is the relative optimality gap :math:`(f(x^r) - f^*) / (f(x^0) - f^*)` of every
round, and ``uplink_bytes``, the bytes one client has uploaded by round r (every client takes
part in every round: r times the payload of one upload, :meth:`~riemfl.federated.compression.
Compressor.payload_nbytes`). A run that raises one of riemfl's errors (a cast beyond its format's
range) has not reached the tolerance and carries its error.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import RiemflError
from ...federated import History, RFedAvg, RFedProj, RunOptions, run_sync
from ...federated.algorithm import SyncAlgorithm
from ...federated.compressed import Compressed
from ...federated.compression import make_compressor
from ...problems.base import FederatedProblem
from ...progress import ProgressBar
from ..registry import PROBLEMS, build_problem
from .settings import REFERENCE

if TYPE_CHECKING:
    from .settings import Settings

__all__ = [
    "RULES",
    "build_rule",
    "relative_gaps",
    "rounds_to_tolerance",
    "run_one",
    "communication_runs",
    "summarise",
]

#: rule label -> ``build(step_size, local_steps)``
RULES: dict[str, Callable[[float, int], SyncAlgorithm]] = {
    "RFedProj": lambda step_size, tau: RFedProj(step_size, tau),
    "RFedAvg (tangent)": lambda step_size, tau: RFedAvg(step_size, tau, upload="tangent"),
}


def build_rule(
    name: str, problem: FederatedProblem, rule: str, compressor: str, seed: int, local_steps: int
) -> SyncAlgorithm:
    """The rule of one run: ``rule`` (a key of :data:`RULES`) at the problem's default step size
    (``name``: its key of :data:`~riemfl.experiments.registry.PROBLEMS`), wrapped in
    :class:`~riemfl.federated.compressed.Compressed` with the compressor's default error
    feedback and ``seed`` for its draws (none for :data:`~.settings.REFERENCE`)."""
    step = PROBLEMS[name].default_step_size(problem, local_steps)
    algorithm = RULES[rule](step, local_steps)
    compression = make_compressor(compressor)
    return algorithm if compression is None else Compressed(algorithm, compression, seed=seed)


def relative_gaps(history: History) -> list[float]:
    """:math:`(f(x^r) - f^*) / (f(x^0) - f^*)` of every recorded row.

    Raises
    ------
    ValueError
        When the first row's gap is not a finite number > 0.
    """
    gaps = [float(g) for g in history.optimality_gap]
    if not (gaps and math.isfinite(gaps[0]) and gaps[0] > 0):
        raise ValueError(f"relative gaps need an initial gap > 0, got {gaps[:1]}")
    return [g / gaps[0] for g in gaps]


def rounds_to_tolerance(history: History, tolerance: float) -> tuple[int | None, float | None]:
    """The first recorded round whose relative gap (:func:`relative_gaps`) is at most
    ``tolerance``, and the uplink bytes per client by that round; ``(None, None)`` when no round
    reaches it."""
    for i, gap in enumerate(relative_gaps(history)):
        if gap <= tolerance:
            return int(history.round[i]), float(history.uplink_bytes[i])
    return None, None


def run_one(
    name: str,
    problem: FederatedProblem,
    s: Settings,
    rule: str,
    compressor: str,
    seed: int,
    rounds: int,
) -> dict[str, Any]:
    """One run of ``rounds`` rounds: the first round at the problem's tolerance and the bytes by
    then (None: not reached), the final relative gap, the bytes per round, and the curve
    (``curve``: relative gap; ``uplink``: bytes per client; one entry per round) or the error of
    a failed run."""
    out: dict[str, Any] = {
        "problem": name,
        "rule": rule,
        "compressor": compressor,
        "seed": seed,
        "rounds_run": rounds,
    }
    algorithm = build_rule(name, problem, rule, compressor, seed, s.local_steps)
    out["error_feedback"] = isinstance(algorithm, Compressed) and algorithm.error_feedback
    try:
        with np.errstate(all="ignore"):
            h = run_sync(problem, algorithm, rounds, options=RunOptions(seed=seed))
    except RiemflError as error:
        return out | {"round": None, "bytes": None, "error": f"{type(error).__name__}: {error}"}
    out["round"], out["bytes"] = rounds_to_tolerance(h, s.tolerance[name])
    out["bytes_per_round"] = float(h.uplink_bytes[-1]) / rounds
    out["curve"] = relative_gaps(h)
    out["uplink"] = [float(b) for b in h.uplink_bytes]
    out["final_gap"] = out["curve"][-1]
    return out


def communication_runs(s: Settings, bar: ProgressBar) -> list[dict[str, Any]]:
    """Every run: per problem, rule and seed, the float64 run of the problem's rounds, then each
    compressed run for :attr:`~.settings.Settings.multiple` times the rounds the float64 run
    needed (its rounds when it did not reach the tolerance)."""
    runs = []
    for name in s.tolerance:
        problem = build_problem(name, seed=0)
        for rule in s.rules:
            for seed in s.seeds:
                reference = run_one(name, problem, s, rule, REFERENCE, seed, s.rounds[name])
                runs.append(reference)
                bar.update(1)
                reached = reference["round"]
                budget = s.rounds[name] if reached is None else math.ceil(s.multiple * reached)
                for compressor in s.compressors:
                    if compressor == REFERENCE:
                        continue
                    runs.append(run_one(name, problem, s, rule, compressor, seed, budget))
                    bar.update(1)
    return runs


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "median": float(np.median(values)),
        "min": float(np.min(values)),
        "max": float(np.max(values)),
    }


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (problem, rule, compressor): median, min and max over the seeds of the rounds
    and of the uplink bytes to the tolerance (a run that did not reach it counts as infinite),
    how many seeds reached it, the bytes per round, and the ratios of the float64 run's median
    bytes and rounds to the row's (``bytes_ratio``: how many times fewer bytes; ``rounds_ratio``:
    how many times the rounds)."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["problem"], r["rule"], r["compressor"]), []).append(r)
    rows = []
    for (problem, rule, compressor), mine in groups.items():
        rounds = [math.inf if r["round"] is None else r["round"] for r in mine]
        sent = [math.inf if r["bytes"] is None else r["bytes"] for r in mine]
        per_round = [r["bytes_per_round"] for r in mine if "bytes_per_round" in r]
        rows.append(
            {
                "problem": problem,
                "rule": rule,
                "compressor": compressor,
                "error_feedback": mine[0]["error_feedback"],
                "seeds": len(mine),
                "reached": sum(r["round"] is not None for r in mine),
                "errors": sorted({r["error"].split(":")[0] for r in mine if "error" in r}),
                "bytes_per_round": per_round[0] if per_round else math.nan,
                "rounds": _spread(rounds),
                "bytes": _spread(sent),
            }
        )
    for row in rows:
        ref = next(
            r
            for r in rows
            if (r["problem"], r["rule"], r["compressor"])
            == (row["problem"], row["rule"], REFERENCE)
        )
        row["bytes_ratio"] = _ratio(ref["bytes"]["median"], row["bytes"]["median"])
        row["rounds_ratio"] = _ratio(row["rounds"]["median"], ref["rounds"]["median"])
    return rows


def _ratio(a: float, b: float) -> float:
    """a / b, NaN when either is infinite (not reached)."""
    return a / b if math.isfinite(a) and math.isfinite(b) and b > 0 else math.nan

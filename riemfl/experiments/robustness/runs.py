"""The robustness runs: the clipping radius from a clean pilot, then every case, aggregator and
seed (and, under attack, the oracle's run), each with the seconds its aggregations took.

A run that raises one of riemfl's errors (an attack that throws the model beyond where a
retraction or its inverse is defined) or ends with a non-finite gap has *failed*: its gap counts
as infinite and its accuracy as below every other in the medians (:func:`summarise`).
"""

from __future__ import annotations

import math
import time
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import RiemflError
from ...federated import (
    ClientDroppedWarning,
    History,
    RFedAvg,
    RunOptions,
    build_aggregator,
    run_sync,
)
from ...federated.aggregation import Aggregator, PlainSum, State
from ...federated.attacks import Byzantine
from ...federated.fingerprint import settings as settings_of
from ...problems.base import Classifier, FederatedProblem
from ...problems.hyperbolic import HyperbolicEmbeddingProblem
from ...progress import ProgressBar
from ..registry import PROBLEMS, build_problem
from .oracle import ORACLE, HonestMean

if TYPE_CHECKING:
    from .settings import Settings

__all__ = [
    "TimedAggregator",
    "gap_curve",
    "pilot_tau",
    "run_one",
    "robustness_runs",
    "summarise",
]


class TimedAggregator(Aggregator):
    """An aggregator that times another one (the plain sum for None) and keeps the norms of the
    uploads of its first aggregation; its answers are the other's.

    Parameters
    ----------
    inner : Aggregator or None
        What is timed (None: :class:`~riemfl.federated.aggregation.PlainSum`, the mean).
    """

    def __init__(self, inner: Aggregator | None) -> None:
        self._inner = PlainSum() if inner is None else inner
        self.sums = self._inner.sums
        self._seconds = 0.0
        self._first_norms: list[float] | None = None

    @property
    def seconds(self) -> float:
        """The seconds spent in the inner aggregator so far."""
        return self._seconds

    @property
    def first_norms(self) -> list[float] | None:
        """The Frobenius norms of the uploads of the first aggregation (None before it)."""
        return self._first_norms

    def aggregate(self, uploads: State, phase: int) -> tuple[State, int]:
        if self._first_norms is None:
            m = int(next(iter(uploads.values())).shape[0])
            squares = sum(np.asarray(v, dtype=float).reshape(m, -1) ** 2 for v in uploads.values())
            self._first_norms = np.sqrt(np.sum(squares, axis=1)).tolist()
        t0 = time.perf_counter()
        out = self._inner.aggregate(uploads, phase)
        self._seconds += time.perf_counter() - t0
        return out

    def row(self) -> dict[str, Any]:
        return self._inner.row()

    def describe(self) -> dict[str, Any]:
        return {"timed": settings_of(self._inner)}


def gap_curve(problem: FederatedProblem, history: History) -> list[float]:
    """f(x^r) - f* of every recorded round; for a problem without a known optimum, the gap to
    its ``reference_loss`` (the hyperbolic embeddings: a centralised reference run)."""
    if problem.optimum is not None:
        return [float(g) for g in history.optimality_gap]
    reference = problem.reference_loss if isinstance(problem, HyperbolicEmbeddingProblem) else None
    if reference is None:
        return [math.nan for _ in history.loss]
    return [float(v) - float(reference) for v in history.loss]


def _rule(name: str, problem: FederatedProblem, s: Settings) -> RFedAvg:
    step = PROBLEMS[name].default_step_size(problem, s.local_steps)
    return RFedAvg(step, s.local_steps, upload="tangent")


def pilot_tau(name: str, problem: FederatedProblem, s: Settings) -> float:
    """Centered clipping's radius: the median norm of the tangent uploads of the first round
    of a clean run with the plain mean (the first seed)."""
    timed = TimedAggregator(None)
    options = RunOptions(seed=s.seeds[0])
    run_sync(problem, _rule(name, problem, s), 1, options=options, aggregator=timed)
    if timed.first_norms is None:
        raise RuntimeError(f"{name}: the pilot round aggregated no uploads")
    return float(np.median(timed.first_norms))


def run_one(
    name: str,
    problem: FederatedProblem,
    s: Settings,
    aggregator: str,
    attack: str,
    fraction: float,
    seed: int,
    tau: float,
) -> dict[str, Any]:
    """One run: its final gap (and accuracy), the seconds per round of its aggregations and of
    the whole run, and the error of a failed run (``name``: the problem's key of
    :data:`~riemfl.experiments.registry.PROBLEMS`; ``aggregator``: a name of
    :func:`~riemfl.federated.build_aggregator` or the oracle's,
    :data:`~riemfl.experiments.robustness.oracle.ORACLE`)."""
    f = s.attackers(fraction)
    rounds = s.rounds[name]
    inner = _aggregator(aggregator, problem, s, attack, fraction, seed, tau)
    timed = TimedAggregator(inner)
    out: dict[str, Any] = {
        "problem": name,
        "aggregator": aggregator,
        "attack": attack,
        "fraction": fraction,
        "attackers": f,
        "seed": seed,
    }
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", ClientDroppedWarning)
            h = run_sync(
                problem,
                _rule(name, problem, s),
                rounds,
                options=RunOptions(seed=seed),
                aggregator=timed,
                byzantine=None if f == 0 else Byzantine(fraction, attack),
            )
    except RiemflError as error:
        seconds = time.perf_counter() - t0
        out |= {"gap": math.inf, "error": f"{type(error).__name__}: {error}"}
        if isinstance(problem, Classifier):
            out["accuracy"] = math.nan
        out |= {"seconds_per_round": seconds / rounds, "aggregation_seconds_per_round": math.nan}
        return out
    clients = h.config["byzantine"]["clients"] if f else []
    if len(clients) != f:  # Krum's f is the number of attackers
        raise RuntimeError(f"{name}: {len(clients)} attackers drawn, Krum was given f = {f}")
    if isinstance(inner, HonestMean) and clients != inner.attackers:
        raise RuntimeError(f"{name}: attackers {clients}, the oracle was told {inner.attackers}")
    out["byzantine_clients"] = clients
    out["gap"] = gap_curve(problem, h)[-1]
    if isinstance(problem, Classifier):
        with np.errstate(all="ignore"):
            out["accuracy"] = float(problem.accuracy(h.final_point))
    out["dropped"] = len(h.warnings)
    out["seconds_per_round"] = float(h.wall_time[-1]) / rounds
    out["aggregation_seconds_per_round"] = timed.seconds / rounds
    return out


def _aggregator(
    aggregator: str,
    problem: FederatedProblem,
    s: Settings,
    attack: str,
    fraction: float,
    seed: int,
    tau: float,
) -> Aggregator:
    """The aggregator of one run: the oracle told the attackers of the run's seed, or one of
    :func:`~riemfl.federated.build_aggregator` with the settings' parameters."""
    if aggregator == ORACLE:
        n = problem.n_clients
        attackers = Byzantine(fraction, attack).clients(n, seed) if fraction > 0 else []
        return HonestMean([int(c) for c in attackers], n)
    return build_aggregator(
        aggregator,
        n_byzantine=s.attackers(fraction),
        trim=s.trim,
        tau=tau,
        clip_iterations=s.clip_iterations,
    )


def robustness_runs(s: Settings, bar: ProgressBar) -> tuple[dict[str, float], list[dict]]:
    """The clipping radius per problem and every run (the oracle's after the aggregators' of
    each case with attackers)."""
    taus, runs = {}, []
    for name in s.rounds:
        problem = build_problem(name, clients=s.n_clients, seed=0)
        taus[name] = pilot_tau(name, problem, s)
        for attack, fraction in s.cases():
            for aggregator in s.runs_at(fraction):
                for seed in s.seeds:
                    run = run_one(name, problem, s, aggregator, attack, fraction, seed, taus[name])
                    runs.append(run)
                    bar.update(1)
    return taus, runs


def _failed(run: dict[str, Any]) -> bool:
    return "error" in run or not math.isfinite(run["gap"])


def _finite_median(values: Any) -> float:
    """The median of the finite values (NaN when there is none)."""
    finite = [v for v in values if math.isfinite(v)]
    return float(np.median(finite)) if finite else math.nan


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (problem, attack, fraction, aggregator): median, min and max over the seeds
    of the final gap (a failed run: infinite) and of the accuracy (a failed run: -inf), the
    number of failed runs, and the median seconds per round."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in runs:
        key = (r["problem"], r["attack"], r["fraction"], r["aggregator"])
        groups.setdefault(key, []).append(r)
    rows = []
    for (problem, attack, fraction, aggregator), mine in groups.items():
        gaps = [math.inf if _failed(r) else r["gap"] for r in mine]
        row = {
            "problem": problem,
            "attack": attack,
            "fraction": fraction,
            "attackers": mine[0]["attackers"],
            "aggregator": aggregator,
            "gap": float(np.median(gaps)),
            "gap_min": float(np.min(gaps)),
            "gap_max": float(np.max(gaps)),
            "failed": sum(_failed(r) for r in mine),
            "errors": sorted({r["error"].split(":")[0] for r in mine if "error" in r}),
            "seeds": len(mine),
            "seconds_per_round": _finite_median(r["seconds_per_round"] for r in mine),
            "aggregation_seconds_per_round": _finite_median(
                r["aggregation_seconds_per_round"] for r in mine
            ),
        }
        if "accuracy" in mine[0]:
            acc = [-math.inf if _failed(r) else r["accuracy"] for r in mine]
            row |= {
                "accuracy": float(np.median(acc)),
                "accuracy_min": float(np.min(acc)),
                "accuracy_max": float(np.max(acc)),
            }
        rows.append(row)
    return rows

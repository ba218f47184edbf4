r"""The runs: one (problem, method, rate, seed) at a time, the line search, and all of them.

A run records, at ``rows`` evaluations and the start, the three clocks of an asynchronous
history (server steps, client updates, virtual time) and the case's metrics. A run that raises
a riemfl error (the server's Stiefel logarithm beyond its range, FedBuff's ambient step beyond
the reach of the projection) is kept as failed, with the error's name: its final suboptimality
counts as infinite.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from ...errors import RiemflError
from ...federated.async_engine import run_async
from ...federated.async_manifold import AsyncBezier
from ...federated.async_rules import AsyncRule, FedAsync, FedBuff, FedOrtho
from ...federated.run_core import RunOptions
from ...federated.timing import LogNormalTime
from .problems import Case, CurveTrainer, PointTrainer, build_cases
from .settings import METHODS, Settings

__all__ = ["build_rule", "build_trainer", "clocks", "line_search", "one_run", "run_all", "tail"]


def build_rule(method: str, rate: float, case: Case, s: Settings) -> AsyncRule:
    """The server rule of ``method`` at server rate ``rate`` (:mod:`.settings`)."""
    n = case.problem.n_clients
    if method == "FedAsync":
        return FedAsync(server_lr=rate * n)
    if method == "FedOrtho":
        return FedOrtho(server_lr=rate * n)
    if method == "FedBuff":
        return FedBuff(s.buffer_size, server_lr=rate / s.buffer_size)
    return AsyncBezier(case.problem.manifold, rate * n)


def build_trainer(method: str, case: Case, s: Settings) -> Any:
    """AsyncBezier's curve client, or the point methods' local SGD (the same K gradients)."""
    if method == "AsyncBezier":
        return CurveTrainer(case, s.warmup_steps, s.curve_steps)
    return PointTrainer(case, s.local_steps)


def clocks(case: Case, s: Settings) -> LogNormalTime:
    """The clients' durations (:mod:`.settings`): means K times slowdowns from 1 to ``slowest``."""
    slowdown = np.geomspace(1.0, s.slowest, case.problem.n_clients)
    return LogNormalTime(list(s.local_steps * slowdown), sigma=0.5)


def tail(values: Any, fraction: float) -> float:
    """The mean over the last ``fraction`` of the values (at least one)."""
    v = np.asarray(values, dtype=float)
    return float(v[-max(1, math.ceil(fraction * v.size)) :].mean())


def one_run(case: Case, s: Settings, method: str, rate: float, seed: int, updates: int) -> dict:
    """One run of ``updates`` client updates: the clocks and metrics at every evaluation,
    ``final`` (:func:`tail` of the suboptimality; inf for a failed run), ``error``, ``seconds``
    (process time) and the largest and mean staleness."""
    server_steps = updates // s.buffer_size if method == "FedBuff" else updates
    every = max(1, server_steps // s.rows)
    trainer = build_trainer(method, case, s)
    rule = build_rule(method, rate, case, s)
    start = time.process_time()
    out: dict[str, Any] = {"method": method, "rate": rate, "seed": seed, "error": None}
    try:
        history = run_async(
            trainer,
            rule,
            server_steps,
            options=RunOptions(seed=seed, record_every=every),
            timing=clocks(case, s),
            x0=case.start(seed),
            weights="uniform",
        )
    except RiemflError as exc:
        out.update(error=type(exc).__name__, final=math.inf, seconds=time.process_time() - start)
        return out
    m = history.metrics
    staleness = np.asarray(history.log["staleness"], dtype=float)
    out.update(
        {key: [float(v) for v in m[key]] for key in ("step", "updates", "time", "subopt")},
        distance=[float(v) for v in m["distance"]],
        final=tail(m["subopt"], s.tail),
        seconds=time.process_time() - start,
        max_staleness=float(staleness.max()),
        mean_staleness=float(staleness.mean()),
    )
    return out


def line_search(case: Case, s: Settings, method: str, bar: Any) -> tuple[float, list[dict]]:
    """The rate of ``rate_grid`` with the least final suboptimality on the tuning seed (the
    first on ties), and the search's runs."""
    runs = []
    for rate in s.rate_grid:
        runs.append(one_run(case, s, method, rate, s.tune_seed, s.tune_steps))
        bar.update()
    best = min(range(len(runs)), key=lambda j: runs[j]["final"])
    return s.rate_grid[best], runs


def run_all(s: Settings, bar: Any) -> list[dict]:
    """Every problem: per method the rate (searched or the default), the search and the seeds'
    runs. Returns one dict per problem: ``case``, ``rates``, ``search``, ``runs``."""
    out = []
    for case in build_cases(s):
        rates, search, runs = {}, {}, {}
        for method in METHODS:
            if s.tune:
                rates[method], search[method] = line_search(case, s, method, bar)
            else:
                rates[method], search[method] = s.default_rate, []
            runs[method] = []
            for seed in range(s.seeds):
                runs[method].append(one_run(case, s, method, rates[method], seed, s.steps))
                bar.update()
        out.append({"case": case, "rates": rates, "search": search, "runs": runs})
    return out

"""Benchmark the cost of client-level differential privacy on RFedProj rounds.

RFedProj (Zhang et al. 2024, Alg. 1) on federated kPCA with n = 10 clients, tau = 10, step
1/beta, full local gradients, in two sizes: the paper's synthetic kPCA (d = 20, k = 5) and
scikit-learn's digits (d = 64, k = 2, label-sorted clients, ``kpca-digits``). Per size, four
configurations:

* ``plain``: no privacy;
* ``central``: ``DPSettings(clip=1, noise_multiplier=1)``, every client in every round: the
  clients clip their update, the aggregator adds the noise to the sum and accounts the round;
* ``central-sampled``: the same with 5 of the 10 clients per round (the accountant's sampled
  release; ``plain-sampled`` is its non-private reference);
* ``local``: each client adds its own noise.

What is timed: ``run_sync(problem, RFedProj, R)`` from the same initial point. ``round_ms`` is
the engine's own per-round CPU clock (``History.cpu_time[-1] / R``, ``time.process_time``, one
BLAS thread): client rules with the clipping, the checks of the uploads, the aggregation with
the noise and the server rule; the metric evaluation and the epsilon of each row are outside it.
``wall_round_ms`` is the wall-clock time of the whole run over R, metrics and accounting
included. Configurations are sampled round-robin (order rotated each repeat) and the medians
are reported; ``ratio`` = private / non-private round time (``central-sampled`` against
``plain-sampled``).

Usage::

    python benchmarks/bench_privacy.py [--quick] [--out results/bench_privacy.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    # One BLAS/OpenMP thread, set before numpy loads (its pool size is fixed at load time).
    os.environ.update(
        dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1")
    )

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _harness.py lies beside this script
from _harness import machine_info, single_thread, write_result  # noqa: E402

from riemfl.experiments.registry import PROBLEMS, build_problem  # noqa: E402
from riemfl.federated import DPSettings, RFedProj, initial_point, run_sync  # noqa: E402

__all__ = ["CONFIGS", "run_benchmark", "format_table", "main"]

DEFAULT_OUT = "results/bench_privacy.json"

#: configuration -> (privacy settings or None, clients per round or None)
CONFIGS: dict[str, tuple[DPSettings | None, int | None]] = {
    "plain": (None, None),
    "central": (DPSettings(1.0, 1.0), None),
    "local": (DPSettings(1.0, 1.0, mode="local"), None),
    "plain-sampled": (None, 5),
    "central-sampled": (DPSettings(1.0, 1.0), 5),
}
#: each private configuration and its non-private reference
REFERENCE = {"central": "plain", "local": "plain", "central-sampled": "plain-sampled"}


def _time(problem: Any, config: str, rounds: int) -> tuple[float, float]:
    """(engine CPU ms per round, wall ms per round) of one run."""
    privacy, m = CONFIGS[config]
    step_size = PROBLEMS[problem.name].default_step_size(problem)
    x0 = initial_point(problem, 0)
    t0 = time.perf_counter()
    h = run_sync(
        problem, RFedProj(step_size, 10), rounds, x0=x0, clients_per_round=m, privacy=privacy
    )
    wall = time.perf_counter() - t0
    return 1e3 * h.cpu_time[-1] / rounds, 1e3 * wall / rounds


def run_benchmark(quick: bool = False, out: str | Path | None = DEFAULT_OUT) -> dict[str, Any]:
    """Time every configuration on both sizes; write the JSON file when ``out`` is given."""
    rounds, repeats = (5, 3) if quick else (40, 7)
    cells = []
    with single_thread() as thread_info:
        machine = machine_info(thread_info)
        for name in ("kpca-synthetic", "kpca-digits"):
            problem = build_problem(name, clients=10, seed=0)
            for config in CONFIGS:  # warm-up: caches, the accountant's sampled curve
                _time(problem, config, 2)
            samples: dict[str, list[tuple[float, float]]] = {c: [] for c in CONFIGS}
            order = list(CONFIGS)
            for r in range(repeats):
                for config in order[r % len(order) :] + order[: r % len(order)]:
                    samples[config].append(_time(problem, config, rounds))
            medians = {
                c: (
                    statistics.median(s[0] for s in v),
                    statistics.median(s[1] for s in v),
                )
                for c, v in samples.items()
            }
            for config, (cpu, wall) in medians.items():
                ref = REFERENCE.get(config)
                cells.append(
                    {
                        "problem": name,
                        "config": config,
                        "round_ms": cpu,
                        "wall_round_ms": wall,
                        "ratio": cpu / medians[ref][0] if ref else 1.0,
                        "wall_ratio": wall / medians[ref][1] if ref else 1.0,
                        "samples": repeats,
                    }
                )
    result = {
        "settings": {"rounds": rounds, "repeats": repeats, "is_quick": quick, "clients": 10},
        "machine": machine,
        "cells": cells,
    }
    if out is not None:
        write_result(result, out, format_table(result))
    return result


def format_table(result: dict[str, Any]) -> str:
    lines = [
        "| problem | config | round (ms, CPU) | ratio | round (ms, wall) | wall ratio |",
        "|---|---|---|---|---|---|",
    ]
    for c in result["cells"]:
        lines.append(
            f"| {c['problem']} | {c['config']} | {c['round_ms']:.3f} | {c['ratio']:.2f} | "
            f"{c['wall_round_ms']:.3f} | {c['wall_ratio']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--quick", action="store_true", help="few rounds and repeats")
    cli.add_argument("--out", default=DEFAULT_OUT, help="JSON file (default: %(default)s)")
    opts = cli.parse_args(argv)
    return run_benchmark(quick=opts.quick, out=opts.out)


if __name__ == "__main__":
    main()

"""Benchmark what security costs a round: TLS, SecAgg+ and central DP in a Flower deployment.

RFedProj (Zhang et al. 2024, Alg. 1; tau = 10, eta = 4e-3, full local gradients) on federated
kPCA (``kpca-synthetic`` of the registry: n = 10 clients, d = 20, k = 5) through a real
deployment on loopback (:class:`riemfl.adapters.flower.local.LocalDeployment`: a SuperLink and
``nodes`` SuperNodes as separate processes, the clients split over the nodes), in four
configurations:

* ``insecure``: no TLS, no SuperNode authentication;
* ``tls``: TLS on every connection and SuperNode authentication (the deployment's defaults);
* ``tls+secagg``: that, and every phase's sum through Flower's SecAgg+ (``secagg = true``,
  default :class:`~riemfl.adapters.flower.SecAggSettings`);
* ``tls+secagg+dp``: that, and client-level DP in central mode (``dp-clip = 1``,
  ``dp-noise = 1``: the nodes clip, the server adds the noise to the SecAgg+ sum and accounts).

Time per round: the median over the rounds of a run of the increments of ``History.wall_time``
(the server's wall clock: messaging, the nodes' ClientApp processes, the rules, the metrics);
``ratio`` = that / the insecure round's. Flower's default process isolation starts a ClientApp
process on a node for every message, so a round costs a few such starts per node and SecAgg+
adds its four stages of messages.

Beside it, in process: ``run_sync`` of the same rule with and without ``DPSettings(1, 1)``
(central), timed as ``benchmarks/bench_privacy.py`` does (its step 1/beta; the engine's CPU
clock per round, medians over repeats).

Usage::

    python benchmarks/bench_flower_security.py [--quick] [--nodes 3]
        [--out results/bench_flower_security.json]

The deployment runs ``flower-superlink``, ``flower-supernode`` and ``flwr`` from PATH.
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine_info, single_thread, write_result  # noqa: E402
from bench_privacy import _time as in_process_round  # noqa: E402

from riemfl.experiments.registry import build_problem  # noqa: E402

__all__ = ["CONFIGS", "run_benchmark", "format_table", "main"]

DEFAULT_OUT = "results/bench_flower_security.json"

RUN_CONFIG = {
    "problem": "kpca-synthetic",
    "problem-clients": 10,
    "problem-seed": 0,
    "algorithm": "rfedproj",
    "step-size": 4e-3,
    "local-steps": 10,
    "seed": 0,
}
#: configuration -> (TLS and SuperNode authentication, extra run-config keys)
CONFIGS: dict[str, tuple[bool, dict[str, Any]]] = {
    "insecure": (False, {}),
    "tls": (True, {}),
    "tls+secagg": (True, {"secagg": True}),
    "tls+secagg+dp": (True, {"secagg": True, "dp-clip": 1.0, "dp-noise": 1.0}),
}


def _deployment_rounds(nodes: int, rounds: int, workdir: Path, say: Any) -> dict[str, Any]:
    """Per configuration: the per-round wall times of one run (the insecure ones in their own
    deployment, the others in one TLS deployment)."""
    from riemfl.adapters.flower.local import LocalDeployment

    cells: dict[str, Any] = {}
    for tls in (False, True):
        names = [c for c, (t, _) in CONFIGS.items() if t is tls]
        with LocalDeployment(nodes, workdir / ("tls" if tls else "plain"), tls=tls) as deployment:
            for name in names:
                say(f"deployment: {name}")
                config = {
                    **RUN_CONFIG,
                    **CONFIGS[name][1],
                    "steps": rounds,
                    "job": name.replace("+", "-"),
                }
                t0 = time.perf_counter()
                history = deployment.run(config, timeout=3000)["history"]
                times = np.diff(history["metrics"]["wall_time"]).tolist()
                cells[name] = {
                    "round_times_s": times,
                    "round_ms": 1e3 * statistics.median(times),
                    "run_s": time.perf_counter() - t0,
                    "participants": history["metrics"]["participants"][1:],
                    "epsilon": history["metrics"].get("epsilon", [None])[-1],
                }
    return cells


def run_benchmark(
    quick: bool = False,
    out: str | Path | None = DEFAULT_OUT,
    *,
    nodes: int = 3,
    deployment: bool = True,
    verbose: bool = False,
) -> dict[str, Any]:
    """Time the deployment configurations (``deployment=False``: skip them) and the in-process
    rounds with and without DP; write the JSON file when ``out`` is given."""
    started = time.perf_counter()

    def say(msg: str) -> None:
        if verbose:
            print(f"  [{time.perf_counter() - started:6.1f} s] {msg}", file=sys.stderr, flush=True)

    rounds, repeats, local_rounds = (2, 3, 5) if quick else (5, 7, 40)
    with single_thread() as thread_info:
        import flwr

        machine = machine_info(thread_info, flwr=flwr.__version__)
        cells: dict[str, Any] = {}
        if deployment:
            with tempfile.TemporaryDirectory(prefix="bench-flower-security-") as tmp:
                cells = _deployment_rounds(nodes, rounds, Path(tmp), say)
            for cell in cells.values():
                cell["ratio"] = cell["round_ms"] / cells["insecure"]["round_ms"]
        say("in process: run_sync with and without DP")
        problem = build_problem("kpca-synthetic", clients=10, seed=0)
        samples: dict[str, list[float]] = {"plain": [], "central": []}
        for config in samples:  # warm-up
            in_process_round(problem, config, 2)
        for r in range(repeats):
            for config in ["plain", "central"] if r % 2 == 0 else ["central", "plain"]:
                samples[config].append(in_process_round(problem, config, local_rounds)[0])
        plain, central = (statistics.median(samples[c]) for c in ("plain", "central"))
    result = {
        "settings": {
            "run_config": RUN_CONFIG,
            "nodes": nodes,
            "rounds": rounds,
            "configs": {c: {"tls": t, **extra} for c, (t, extra) in CONFIGS.items()},
            "in_process": {"rounds": local_rounds, "repeats": repeats, "dp": "DPSettings(1, 1)"},
            "is_quick": quick,
            "round_definition": "median over the rounds of one run of the increments of "
            "History.wall_time (server wall clock)",
        },
        "machine": machine,
        "deployment": cells,
        "in_process": {"plain_ms": plain, "central_dp_ms": central, "ratio": central / plain},
        "total_s": time.perf_counter() - started,
    }
    if out is not None:
        write_result(result, out, format_table(result))
    return result


def format_table(result: dict[str, Any]) -> str:
    """One row per configuration (round ms, ratio to the insecure round), then in process."""
    lines = [
        "| path | configuration | round (ms) | ratio | rounds' range (s) |",
        "|---|---|---|---|---|",
    ]
    for name, c in result["deployment"].items():
        t = c["round_times_s"]
        lines.append(
            f"| deployment | {name} | {c['round_ms']:.0f} | {c['ratio']:.2f} | "
            f"{min(t):.1f} to {max(t):.1f} |"
        )
    p = result["in_process"]
    lines.append(f"| in process (CPU) | plain | {p['plain_ms']:.3f} | 1.00 | |")
    lines.append(
        f"| in process (CPU) | central DP | {p['central_dp_ms']:.3f} | {p['ratio']:.2f} | |"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--quick", action="store_true", help="few rounds and repeats")
    cli.add_argument("--nodes", type=int, default=3, help="SuperNodes (default: %(default)s)")
    cli.add_argument("--out", default=DEFAULT_OUT, help="JSON file (default: %(default)s)")
    opts = cli.parse_args(argv)
    return run_benchmark(quick=opts.quick, out=opts.out, nodes=opts.nodes, verbose=True)


if __name__ == "__main__":
    main()

"""Benchmark the Flower adapter: a round through Flower's simulation engine against in-process.

Three measurements in one process and one Flower simulation (``run_simulation``, Ray backend,
one virtual SuperNode per client), on the same problem: federated kPCA
(``kpca-synthetic`` of the registry: n = 10 clients, d = 20, k = 5, p = 15, full gradients):

* **sync**: RFedProj (tau = 10, eta = 4e-3) for R rounds through Flower
  (:class:`riemfl.adapters.flower.SyncJob`) against riemfl's in-process
  :func:`riemfl.federated.run_sync` (same seed, hence the same iterates). Time per round: the
  median over rounds of the increments of ``History.wall_time`` (metrics included on both
  sides), pooled over the in-process repeats.
* **async**: FedAsync (5 local steps, server_lr = 1) for S server steps through Flower's
  asynchronous loop against the discrete-event simulator :func:`riemfl.federated.run_async`
  (virtual clock: nothing waits). Time per update: wall time / updates (throughput with every
  client in flight).
* **messaging**: :class:`~riemfl.adapters.flower.PingJob` round trips with no work, in the same
  simulation: one message to every node until every reply is in (a synchronous round without
  compute), and one message to one node (one asynchronous dispatch). Each message carries two
  point-sized arrays (a round's broadcast: x and P_M(x)) and the reply echoes them.

The claim checked is that Flower adds only messaging: ``residual = flower - empty round trip -
in-process`` should be small against the round trip. Flower's simulation engine fetches queued
messages for the nodes every 0.1 s, so a round trip costs about 0.05-0.1 s whatever the
payload; that is the messaging cost of this engine, not of riemfl.

Usage::

    python benchmarks/bench_flower.py [--quick] [--out results/bench_flower.json]
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine_info, single_thread  # noqa: E402
from riemfl.adapters.flower import (  # noqa: E402
    AsyncJob,
    PingJob,
    ProblemSpec,
    SyncJob,
    default_backend_config,
    simulate,
)

from riemfl.federated import FedAsync, RFedProj, RunOptions, run_async, run_sync  # noqa: E402

__all__ = ["Settings", "run_benchmark", "format_table", "main"]

DEFAULT_OUT = "results/bench_flower.json"


@dataclass
class Settings:
    """Sizes and repeats of one benchmark run.

    Attributes
    ----------
    problem : dict
        ``name``, ``clients``, ``seed`` of the registry problem (one SuperNode per client).
    sync : dict
        ``tau``, ``eta``, ``rounds`` (Flower rounds = in-process rounds per repeat),
        ``repeats`` (in-process runs).
    asynchronous : dict
        ``local_steps``, ``eta``, ``steps``, ``repeats`` (in-process runs).
    ping_repeats : int
        Empty round trips of each kind.
    cpus : int
        CPUs given to Ray (one ClientApp actor each).
    is_quick : bool
    """

    problem: dict[str, Any] = field(
        default_factory=lambda: dict(name="kpca-synthetic", clients=10, seed=0)
    )
    sync: dict[str, Any] = field(
        default_factory=lambda: dict(tau=10, eta=4e-3, rounds=30, repeats=20)
    )
    asynchronous: dict[str, Any] = field(
        default_factory=lambda: dict(local_steps=5, eta=4e-3, steps=100, repeats=20)
    )
    ping_repeats: int = 30
    cpus: int = 2
    is_quick: bool = False

    @classmethod
    def quick(cls) -> Settings:
        """Few rounds and repeats: the full structure in seconds (after Ray's start)."""
        return cls(
            sync=dict(tau=10, eta=4e-3, rounds=4, repeats=3),
            asynchronous=dict(local_steps=5, eta=4e-3, steps=12, repeats=3),
            ping_repeats=4,
            is_quick=True,
        )


class _Progress:
    """Timestamped progress lines on stderr (when verbose)."""

    def __init__(self, verbose: bool) -> None:
        self.verbose, self.started = verbose, time.perf_counter()

    def say(self, msg: str) -> None:
        if self.verbose:
            elapsed = time.perf_counter() - self.started
            print(f"  [{elapsed:6.1f} s] {msg}", file=sys.stderr, flush=True)


def _ms(seconds: float) -> float:
    return 1e3 * float(seconds)


def _round_times(history: Any) -> list[float]:
    """Per-round wall times of a sync History (increments of ``wall_time``)."""
    return [float(t) for t in np.diff(history.wall_time)]


def _in_process_sync(job: SyncJob, repeats: int) -> dict[str, Any]:
    samples, cpu, point = [], [], None
    for _ in range(repeats):
        h = run_sync(job.resolved, job.algorithm, job.steps, options=job.options)
        samples += _round_times(h)
        cpu += [float(t) for t in np.diff(h.cpu_time)]
        point = h.final_point
    return {
        "round_ms": _ms(statistics.median(samples)),
        "rule_cpu_ms": _ms(statistics.median(cpu)),
        "samples": len(samples),
        "final_point": point,
    }


def _in_process_async(job: AsyncJob, repeats: int) -> dict[str, Any]:
    per_update, staleness = [], []
    for r in range(repeats):
        t0 = time.perf_counter()
        h = run_async(
            job.trainer(), FedAsync(), job.steps, options=RunOptions(seed=r, record_every=1)
        )
        per_update.append((time.perf_counter() - t0) / len(h.log["client"]))
        staleness.append(h.staleness_stats()["mean"])
    return {
        "update_ms": _ms(statistics.median(per_update)),
        "runs": repeats,
        "mean_staleness": statistics.median(staleness),
    }


def run_benchmark(
    quick: bool = False, *, out: str | os.PathLike[str] | None = DEFAULT_OUT, **options: Any
) -> dict[str, Any]:
    """Run the three measurements; return a JSON-ready dict and write it to ``out``.

    Parameters
    ----------
    quick : bool
        :meth:`Settings.quick` (ignored when ``settings`` is given).
    out : path or None
        JSON file to write (folders are made); ``None``: no file.
    **options
        ``settings`` (a :class:`Settings`) and ``verbose`` (progress lines on stderr).

    Returns
    -------
    dict
        ``{"machine", "settings", "sync", "async", "messaging", "total_s"}``.
    """
    s = options.get("settings") or (Settings.quick() if quick else Settings())
    progress = _Progress(bool(options.get("verbose")))
    say, started = progress.say, progress.started
    import flwr
    import ray

    spec = ProblemSpec(**s.problem)
    problem = spec.build()
    shape = tuple(problem.manifold.point_shape)
    sy, asy = s.sync, s.asynchronous
    sync_job = SyncJob(spec, RFedProj(sy["eta"], sy["tau"]), sy["rounds"], name="sync")
    async_job = AsyncJob(
        spec, FedAsync(), asy["steps"], asy["eta"], asy["local_steps"], name="async"
    )
    jobs = [
        PingJob(repeats=1, name="warm-up"),  # Ray starts its actors on the first message
        sync_job,
        PingJob(repeats=s.ping_repeats, payload={"x": shape, "px": shape}, name="ping"),
        async_job,
    ]
    with single_thread() as thread_info:
        machine = machine_info(thread_info, flwr=flwr.__version__, ray=ray.__version__)
        say(f"Flower simulation: {len(jobs)} jobs on {problem.n_clients} SuperNodes")
        t0 = time.perf_counter()
        results = simulate(jobs, problem.n_clients, backend_config=default_backend_config(s.cpus))
        simulation_s = time.perf_counter() - t0
        say("in-process run_sync")
        local_sync = _in_process_sync(sync_job, sy["repeats"])
        say("in-process run_async")
        local_async = _in_process_async(async_job, asy["repeats"])

    ping = results["ping"].to_dict()
    fh = results["sync"]
    flower_round = _ms(statistics.median(_round_times(fh)))
    empty_round = _ms(ping["median_all_nodes_s"])
    ah = results["async"]
    updates = len(ah.log["client"])
    flower_update = _ms(ah.log["time"][-1] / updates)
    one_dispatch = _ms(ping["median_one_node_s"])
    per_message = empty_round / problem.n_clients  # throughput of one message, all nodes busy
    result = {
        "machine": machine,
        "settings": {
            **asdict(s),
            "supernodes": problem.n_clients,
            "point_shape": list(shape),
            "round_definition": "median over rounds of the increments of History.wall_time "
            "(wall clock, metrics included); in-process: pooled over the repeats",
            "update_definition": "wall time of the run / client updates (all clients in flight)",
            "empty_round_definition": "PingJob: one message with two point-sized arrays to "
            "every node, until every echo is in; median",
        },
        "sync": {
            "in_process_ms": local_sync["round_ms"],
            "flower_ms": flower_round,
            "ratio": flower_round / local_sync["round_ms"],
            "empty_round_trip_ms": empty_round,
            "residual_ms": flower_round - empty_round - local_sync["round_ms"],
            "in_process_rule_cpu_ms": local_sync["rule_cpu_ms"],
            "flower_rule_cpu_ms": _ms(statistics.median(np.diff(fh.cpu_time))),
            "rounds": sy["rounds"],
            "same_iterates_max_abs_diff": float(
                np.max(np.abs(fh.final_point - local_sync["final_point"]))
            ),
        },
        "async": {
            "in_process_ms": local_async["update_ms"],
            "flower_ms": flower_update,
            "ratio": flower_update / local_async["update_ms"],
            "empty_round_trip_ms": one_dispatch,
            "per_message_ms": per_message,
            "residual_ms": flower_update - per_message - local_async["update_ms"],
            "updates": updates,
            "flower_mean_staleness": ah.staleness_stats()["mean"],
            "in_process_mean_staleness": local_async["mean_staleness"],
            "optimality_gap_first_last": [
                ah.metrics["optimality_gap"][0],
                ah.metrics["optimality_gap"][-1],
            ],
        },
        "messaging": ping,
        "simulation_s": simulation_s,
        "total_s": time.perf_counter() - started,
    }
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1))
    return result


def _fmt(v: float) -> str:
    return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"


def format_table(result: dict[str, Any]) -> str:
    """One row per path: in-process, Flower, ratio, empty round trip, residual (all in ms)."""
    head = ["path", "in-process ms", "Flower ms", "ratio", "empty round trip ms", "residual ms"]
    rows = []
    for key, label in (("sync", "sync round (RFedProj)"), ("async", "async update (FedAsync)")):
        c = result[key]
        empty = c["empty_round_trip_ms"] if key == "sync" else c["per_message_ms"]
        rows.append(
            [
                label,
                _fmt(c["in_process_ms"]),
                _fmt(c["flower_ms"]),
                f"{c['ratio']:.0f}x",
                _fmt(empty),
                _fmt(c["residual_ms"]),
            ]
        )
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [head, ["-" * w for w in widths], *rows]
    cells = (enumerate(zip(r, widths, strict=True)) for r in lines)
    return "\n".join(
        "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in row) for row in cells
    )


def _header(result: dict[str, Any]) -> str:
    m, st = result["machine"], result["settings"]
    a, ping = result["async"], result["messaging"]
    return "\n".join(
        [
            f"riemfl {m['riemfl']}, flwr {m['flwr']}, ray {m['ray']}; numpy {m['numpy']}, "
            f"python {m['python']}",
            f"{m['processor']} ({m['cpu_count']} CPUs, load average {m['load_average_1min']}), "
            f"Ray CPUs {st['cpus']}",
            f"problem {st['problem']['name']}: {st['supernodes']} clients = SuperNodes, points "
            f"{tuple(st['point_shape'])}; RFedProj tau={st['sync']['tau']}, "
            f"{st['sync']['rounds']} rounds; FedAsync {a['updates']} updates",
            f"round: {st['round_definition']}",
            f"update: {st['update_definition']}",
            f"empty round trip: {st['empty_round_definition']} (sync row); async row: that / "
            f"n (one message's share when all nodes are busy); one node alone: "
            f"{_fmt(1e3 * ping['median_one_node_s'])} ms",
            "residual = Flower - empty round trip - in-process",
        ]
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run from the command line: print the table, write the JSON file."""
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--quick", action="store_true", help="few rounds and repeats")
    cli.add_argument("--out", default=DEFAULT_OUT, help="JSON file (default: %(default)s)")
    opts = cli.parse_args(argv)
    result = run_benchmark(quick=opts.quick, out=opts.out, verbose=True)
    print(_header(result), format_table(result), sep="\n\n")
    print(f"\nsame iterates (max |diff|): {result['sync']['same_iterates_max_abs_diff']:.1e}")
    print(f"total {result['total_s']:.1f} s; results written to {opts.out}")
    return result


if __name__ == "__main__":
    main()

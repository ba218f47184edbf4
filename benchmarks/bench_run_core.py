"""Benchmark the federated run core: its overhead per round, per event, per checkpoint, at scale.

Every comparison runs its peers in this process, interleaved (the order alternates between
repeats, garbage collection paused), with one BLAS thread and freed memory kept in the process
(:func:`_harness.steady_allocator`: otherwise every stack of clients of tens of MB is mapped
afresh, and its page faults land on whichever peer allocates first); reported are medians.
Memory is measured in a fresh subprocess per configuration.

1. **Core overhead.** ``run_sync`` with RFedProj (tau = 10, eta = 1/beta) on kPCA of the MNIST
   size (n = 10 clients, p = 6000 rows of d = 784, k = 2). No MNIST file is available offline:
   ``riemfl reproduce zhang2024`` then uses scikit-learn's digits (1797 x 64, label-sorted over
   10 clients), so the MNIST-size problem here is :func:`bench_sync.kpca_like_blocks` (synthetic
   Gaussian rows of exactly that size, a few dominant directions weighted per client, as in
   ``bench_sync.py``), and the digits problem itself is measured too. A round of the engine is the
   interval between two ``on_step`` calls (sampling, the stacked client rule, the checks of every
   upload, the server rule, the delivery, the metrics of the row and its recording); the bare
   oracle cost is the same algorithm's ``broadcast``, ``client_step``, ``server_step`` and
   ``client_finish`` on the full stack in a plain loop. Both end at the same point (checked bit
   for bit). Round 1 (which includes the fingerprint digest of the data) is reported apart, as
   ``setup_ms``. ``ratio`` = engine / bare on CPU time (``time.process_time``); also reported on
   wall-clock time, and for the engine's own ``cpu_time`` column (metrics excluded). Goal:
   ratio <= 1.05 at the MNIST size.
2. **Simulator cost per event.** ``run_async`` with clients whose local run returns the start
   point plus a constant (:class:`ShiftTrainer`), on a 10-dimensional Euclidean model, 10^3 and
   10^4 clients, 100 workers, exponential compute times, FedAsync and FedBuff (K = 10), 10^5
   client updates: wall time per update (goal <= 10 us; also the one-off setup, timed as a run
   of one update, and the time per update without it), and in a fresh subprocess (FedAsync) the
   peak RSS and the peak of traced allocations (``tracemalloc``) of the run. When the goal is
   missed, a cProfile of one run of the slowest configuration lists riemfl's functions by their
   cumulative share of the time.
3. **Checkpoint write** of a 10^6-parameter model: the bare ``save_checkpoint`` of a dict with one
   10^6-float64 array (and its ``load_checkpoint``), and the write inside a run whose state holds
   one such point: ``run_async`` (FedAsync, one worker) and ``run_sync`` (RFedAvg, which keeps no
   client state), measured as the difference per step between a run that checkpoints every step
   and the same run without a checkpoint. Median ms; the file's size.
4. **Scale.** ``run_sync`` with 10^4 clients (kPCA d = 100, k = 5, 20 rows per client,
   ``KPCAProblem.synthetic``; RFedProj, tau = 5, full participation): seconds per round against
   the bare loop of part 1 (goal <= 1.3x; the pure batched gradient oracle, tau calls of
   ``client_egrads`` on the whole stack, is reported too), and in fresh subprocesses the peak
   RSS of the run against the client data the problem holds (the (n, p, d) rows, plus the
   per-client covariances with the default ``storage="covariances"``: 0.96 GB; goal <= 1.2x;
   the ratio to the rows alone is reported too), with the RSS of a
   process that has only imported riemfl, the RSS once the problem is built (the baseline), the
   peak RSS of the bare loop, and the tracemalloc figures (numpy's allocations are traced).
   Peaks are read from ``/proc/self/status`` (``VmHWM``), reset after the problem is built
   (``/proc/self/clear_refs``), so they are the run's own.
5. **Checkpoints against the length of the run.** (a) ``run_sync`` (RFedProj, tau = 1) on
   :class:`HalfSquareProblem` with 30 clients of 100 floats (client state of 24 kB, as
   ``kpca-synthetic``'s corrections, with rounds of a fraction of a millisecond): run to 1,000
   and to 20,000 recorded rows with one checkpoint at the end, then resume and run a window of
   rounds with a checkpoint every 10. The cost of a checkpoint is the interval of the round
   after it less the median interval of the other rounds (wall and CPU); also the bytes
   written per checkpoint (every ``os.write`` of the process, counted) and the size of the
   history as JSON (what each checkpoint rewrote before the append-only format). Goal: the
   median at 20,000 rows <= 1.5x the median at 1,000 (flat). (b) The command ``riemfl run
   kpca-synthetic --algorithm rfedproj --steps 8000 --no-progress`` with ``--checkpoint-every
   10`` against ``--checkpoint-every 0``, in fresh processes, interleaved: median wall-clock
   seconds of the command (goal: ratio <= 1.2), its CPU seconds (user and system, which a
   loaded machine disturbs less) and the run's own seconds (the history's last ``wall_time``).

Usage::

    python benchmarks/bench_run_core.py [--quick] [--out results/bench_run_core.json]
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    # One BLAS/OpenMP thread, set before numpy loads (its pool size is fixed at load time).
    os.environ.update(
        dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1")
    )

import argparse  # noqa: E402
import contextlib  # noqa: E402
import cProfile  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import pstats  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from collections.abc import Callable, Iterator, Sequence  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

# The helpers lie beside this script. _harness and bench_sync import torch: they are imported
# where they are used, so that the memory subprocesses hold riemfl and nothing else.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import child_env, median, table, verdict  # noqa: E402

import riemfl  # noqa: E402
from riemfl.federated import (  # noqa: E402
    ExponentialTime,
    FedAsync,
    FedBuff,
    RFedAvg,
    RFedProj,
    RunOptions,
    initial_point,
    run_async,
    run_sync,
)
from riemfl.federated.algorithm import ClientContext  # noqa: E402
from riemfl.federated.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from riemfl.problems import KPCAProblem  # noqa: E402
from riemfl.problems.base import FederatedProblem  # noqa: E402

__all__ = [
    "Settings",
    "ShiftTrainer",
    "HalfSquareProblem",
    "plain_rounds",
    "bench_overhead",
    "bench_events",
    "bench_checkpoint",
    "bench_scale",
    "bench_history",
    "run_benchmark",
    "format_tables",
    "main",
]

DEFAULT_OUT = "results/bench_run_core.json"


# --------------------------------------------------------------------------------------- settings
@dataclass
class Settings:
    """Sizes, repeats and goals of one benchmark run.

    Attributes
    ----------
    overhead : dict
        ``mnist``: ``n, p, d, k`` of the MNIST-size problem; ``digits``: ``n, k`` of the digits
        problem (None: skipped); ``tau``, ``rounds`` per run and ``repeats`` (runs of each
        peer).
    events : dict
        ``clients`` (sizes), ``dim``, ``events`` (client updates per run), ``workers``,
        ``repeats``, ``profile_events`` (updates of the cProfile run).
    checkpoint : dict
        ``dim`` (floats of the point), ``steps`` per run, ``repeats``.
    scale : dict
        ``n, d, k, p, tau``, ``rounds`` per timed run, ``repeats``, ``memory_rounds`` (rounds
        of the memory subprocesses).
    history : dict
        Part 5: ``dim`` and ``clients`` of the problem, ``rows`` (the history lengths compared),
        ``window`` (rounds run after each), ``every`` (checkpoint interval); ``cli_rounds``,
        ``cli_every`` and ``cli_repeats`` of the command.
    goals : dict
        ``overhead`` (ratio), ``event_us``, ``scale_time`` (ratio), ``scale_memory`` (peak RSS
        / data), ``checkpoint_flat`` (ratio of the medians), ``checkpoint_overhead`` (ratio of
        the command's seconds).
    is_quick : bool
    """

    overhead: dict[str, Any] = field(
        default_factory=lambda: {
            "mnist": {"n": 10, "p": 6000, "d": 784, "k": 2},
            "digits": {"n": 10, "k": 2},
            "tau": 10,
            "rounds": 8,
            "repeats": 5,
        }
    )
    events: dict[str, Any] = field(
        default_factory=lambda: {
            "clients": (1000, 10000),
            "dim": 10,
            "events": 100_000,
            "workers": 100,
            "repeats": 3,
            "profile_events": 50_000,
        }
    )
    checkpoint: dict[str, Any] = field(
        default_factory=lambda: {"dim": 10**6, "steps": 8, "repeats": 5}
    )
    scale: dict[str, Any] = field(
        default_factory=lambda: {
            "n": 10_000,
            "d": 100,
            "k": 5,
            "p": 20,
            "tau": 5,
            "rounds": 3,
            "repeats": 3,
            "memory_rounds": 2,
            "storage": "covariances",
        }
    )
    history: dict[str, Any] = field(
        default_factory=lambda: {
            "dim": 100,
            "clients": 30,
            "rows": (1000, 20000),
            "window": 500,
            "every": 10,
            "cli_rounds": 8000,
            "cli_every": 10,
            "cli_repeats": 3,
        }
    )
    goals: dict[str, float] = field(
        default_factory=lambda: {
            "overhead": 1.05,
            "event_us": 10.0,
            "scale_time": 1.3,
            "scale_memory": 1.2,
            "checkpoint_flat": 1.5,
            "checkpoint_overhead": 1.2,
        }
    )
    is_quick: bool = False

    @classmethod
    def quick(cls) -> Settings:
        """Tiny sizes with the full structure (seconds)."""
        return cls(
            overhead={
                "mnist": {"n": 4, "p": 300, "d": 64, "k": 2},
                "digits": None,
                "tau": 3,
                "rounds": 3,
                "repeats": 2,
            },
            events={
                "clients": (50, 200),
                "dim": 10,
                "events": 2000,
                "workers": 20,
                "repeats": 1,
                "profile_events": 500,
            },
            checkpoint={"dim": 10**4, "steps": 3, "repeats": 2},
            scale={
                "n": 200,
                "d": 20,
                "k": 3,
                "p": 5,
                "tau": 2,
                "rounds": 2,
                "repeats": 1,
                "memory_rounds": 1,
                "storage": "covariances",
            },
            history={
                "dim": 100,
                "clients": 30,
                "rows": (100, 400),
                "window": 60,
                "every": 10,
                "cli_rounds": 200,
                "cli_every": 10,
                "cli_repeats": 1,
            },
            is_quick=True,
        )


# --------------------------------------------------------------------------------------- helpers
Stamp = tuple[float, float]


def _stamp() -> Stamp:
    """(CPU, wall) seconds now."""
    return time.process_time(), time.perf_counter()


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _intervals(stamps: Sequence[Stamp]) -> tuple[list[float], list[float]]:
    """CPU and wall seconds between consecutive stamps."""
    cpu = np.diff([s[0] for s in stamps]).tolist()
    wall = np.diff([s[1] for s in stamps]).tolist()
    return cpu, wall


def plain_rounds(
    problem: FederatedProblem, algorithm: Any, x0: Any, rounds: int
) -> tuple[Any, list[Stamp]]:
    """The algorithm's own calls on the full stack, in a plain loop (no engine).

    Per round and phase ``broadcast``, ``client_step`` and ``server_step``, then
    ``client_finish`` with the new model: what ``run_sync`` computes with full participation.

    Returns
    -------
    point : array
        ``algorithm.output`` after the last round.
    stamps : list of (float, float)
        (CPU, wall) seconds at the start and after every round.
    """
    server, clients = algorithm.init(problem, x0)
    ctx = ClientContext(problem, np.arange(problem.n_clients))
    stamps = [_stamp()]
    for _ in range(rounds):
        for phase in range(algorithm.n_phases):
            message = algorithm.broadcast(server, phase)
            uploads, clients = algorithm.client_step(ctx, phase, message, clients)
            server = algorithm.server_step(problem.manifold, server, phase, message, uploads)
        clients = algorithm.client_finish(algorithm.broadcast(server, 0), clients)
        stamps.append(_stamp())
    return algorithm.output(server), stamps


def _engine_rounds(
    problem: FederatedProblem, algorithm: Any, x0: Any, rounds: int
) -> tuple[Any, list[Stamp], list[float]]:
    """``run_sync`` with a stamp before the call and at every ``on_step``; also the engine's
    per-round ``cpu_time`` (metrics excluded)."""
    stamps = [_stamp()]
    h = run_sync(
        problem,
        algorithm,
        rounds,
        x0=x0,
        options=RunOptions(on_step=lambda r, h: stamps.append(_stamp())),
    )
    return h.final_point, stamps, np.diff(h.cpu_time).tolist()


def _oracle_round(problem: FederatedProblem, x0: Any, tau: int) -> float:
    """CPU seconds of ``tau`` batched gradient-oracle calls on the whole stack (one round's)."""
    xs = np.ascontiguousarray(np.broadcast_to(x0, (problem.n_clients, *np.shape(x0))))
    t0 = time.process_time()
    for _ in range(tau):
        problem.client_egrads(range(problem.n_clients), xs)
    return time.process_time() - t0


def _compare_rounds(
    problem: FederatedProblem, make: Callable[[], Any], x0: Any, rounds: int, repeats: int
) -> dict[str, Any]:
    """Engine against bare loop, interleaved; rounds 2.. of every run are the samples."""
    samples: dict[str, list[float]] = {
        k: [] for k in ("engine", "engine_wall", "bare", "bare_wall", "steps", "setup", "oracle")
    }
    same = True
    for rep in range(repeats):
        for peer in ("engine", "bare") if rep % 2 == 0 else ("bare", "engine"):
            with _gc_paused():
                if peer == "engine":
                    point, stamps, steps = _engine_rounds(problem, make(), x0, rounds)
                    samples["steps"] += steps[1:]
                else:
                    bare_point, stamps = plain_rounds(problem, make(), x0, rounds)
            cpu, wall = _intervals(stamps)
            samples[peer] += cpu[1:]
            samples[f"{peer}_wall"] += wall[1:]
            if peer == "engine":
                samples["setup"].append(cpu[0])
        same = same and np.shape(point) == np.shape(bare_point)
        same = same and np.asarray(point).tobytes() == np.asarray(bare_point).tobytes()
        with _gc_paused():
            samples["oracle"].append(_oracle_round(problem, x0, make().local_steps))
    ms = {k: 1e3 * median(v) for k, v in samples.items()}
    return {
        "engine_round_ms": ms["engine"],
        "bare_round_ms": ms["bare"],
        "ratio": ms["engine"] / ms["bare"],
        "engine_round_wall_ms": ms["engine_wall"],
        "bare_round_wall_ms": ms["bare_wall"],
        "ratio_wall": ms["engine_wall"] / ms["bare_wall"],
        "engine_steps_ms": ms["steps"],
        "ratio_steps": ms["steps"] / ms["bare"],
        "metrics_and_bookkeeping_ms": ms["engine"] - ms["steps"],
        "setup_ms": ms["setup"] - ms["engine"],
        "oracle_ms": ms["oracle"],
        "ratio_to_oracle": ms["engine"] / ms["oracle"],
        "same_final_point": bool(same),
        "samples": len(samples["engine"]),
        "samples_ms": {k: [1e3 * x for x in v] for k, v in samples.items()},
    }


# --------------------------------------------------------------------------------------- memory
def _proc_status() -> dict[str, int]:
    """Current and peak resident set size in bytes (``/proc/self/status``; 0 when absent)."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return {"rss": 0, "peak": 0}
    found = {k: re.search(rf"^{k}:\s+(\d+) kB", text, re.M) for k in ("VmRSS", "VmHWM")}
    return {
        "rss": 1024 * int(found["VmRSS"].group(1)) if found["VmRSS"] else 0,
        "peak": 1024 * int(found["VmHWM"].group(1)) if found["VmHWM"] else 0,
    }


def _reset_peak() -> bool:
    """Reset the peak RSS of this process (Linux >= 4.0); False where it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _run_child(spec: dict[str, Any], timeout: float = 300.0) -> dict[str, Any]:
    """Run :func:`_child` of ``spec`` in a fresh interpreter; its JSON answer."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env())
    if done.returncode != 0:
        raise RuntimeError(f"memory subprocess {spec} failed: {done.stderr[-1500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _top_allocations(snapshot: tracemalloc.Snapshot, limit: int = 6) -> list[dict[str, Any]]:
    stats = snapshot.statistics("lineno")[:limit]
    return [{"where": str(s.traceback[0]), "bytes": s.size, "blocks": s.count} for s in stats]


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    """One memory measurement in this fresh process (``--child``): import, build, reset the
    peak, run, read the peaks."""
    out: dict[str, Any] = {"rss_import": _proc_status()["rss"]}
    tracemalloc.start()
    if spec["part"] == "scale":
        c = spec["config"]
        problem = _scale_problem(c)
        out["data_bytes"] = int(sum(b.nbytes for b in problem.blocks))  # the (p_i, d) rows
        stored = problem.storage == "covariances"  # the rows' storage builds none
        out["covariance_bytes"] = int(problem.covariances.nbytes) if stored else 0
        algorithm = RFedProj(1.0 / problem.smoothness, c["tau"])
        x0 = initial_point(problem, 0)
        run = {
            "baseline": lambda: None,
            "engine": lambda: run_sync(problem, algorithm, c["memory_rounds"], x0=x0),
            "bare": lambda: plain_rounds(problem, algorithm, x0, c["memory_rounds"]),
        }[spec["peer"]]
    else:
        trainer = ShiftTrainer(spec["clients"], spec["dim"])
        rule = FedAsync() if spec["rule"] == "fedasync" else FedBuff(buffer_size=10)
        run = lambda: _event_run(trainer, rule, spec["events"], spec["workers"])  # noqa: E731
    built = _proc_status()
    out |= {
        "rss_built": built["rss"],
        "peak_build": built["peak"],
        "traced_built": tracemalloc.get_traced_memory()[0],
    }
    out["peak_reset"] = _reset_peak()
    tracemalloc.reset_peak()
    kept = run()
    current, peak = tracemalloc.get_traced_memory()
    out |= {
        "peak_run": _proc_status()["peak"],
        "traced_peak": peak,
        "traced_after": current,
        "top_allocations_after": _top_allocations(tracemalloc.take_snapshot()),
    }
    del kept
    return out


# --------------------------------------------------------------------------------------- part 1
def _mnist_size_problem(m: dict[str, Any]) -> KPCAProblem:
    from bench_sync import kpca_like_blocks

    blocks = kpca_like_blocks(m["n"], m["p"], m["d"], directions=min(6, m["d"]), seed=0)
    return KPCAProblem(blocks, m["k"], name="kpca-mnist-size")


def bench_overhead(s: Settings) -> list[dict[str, Any]]:
    """Per-round cost of ``run_sync`` (RFedProj) against the bare loop (part 1)."""
    o = s.overhead
    builders = {"mnist-size (synthetic rows)": lambda: _mnist_size_problem(o["mnist"])}
    if o.get("digits"):
        builders["digits (reproduce's stand-in)"] = lambda: KPCAProblem.digits(
            n_clients=o["digits"]["n"], k=o["digits"]["k"]
        )
    cells = []
    for label, build in builders.items():
        problem = build()
        eta = 1.0 / problem.smoothness
        x0 = initial_point(problem, 0)
        cell = {
            "problem": label,
            "n": problem.n_clients,
            "p": max(problem.n_samples),
            "d": problem.d,
            "k": problem.k,
            "tau": o["tau"],
            "eta": eta,
            **_compare_rounds(
                problem, lambda eta=eta: RFedProj(eta, o["tau"]), x0, o["rounds"], o["repeats"]
            ),
        }
        if label.startswith("mnist"):
            cell["goal"] = s.goals["overhead"]
            cell["met"] = bool(cell["ratio"] <= cell["goal"])
        cells.append(cell)
        del problem
    return cells


# --------------------------------------------------------------------------------------- part 2
class ShiftTrainer:
    """Clients whose local run returns the start point plus a constant (the simulator's own
    cost, with a new model per update as a real trainer makes).

    Parameters
    ----------
    n_clients, dim : int
        Clients and the dimension of the Euclidean model.
    shift : float
        The constant added.
    """

    def __init__(self, n_clients: int, dim: int, shift: float = 1e-3) -> None:
        self.n_clients, self.shift = n_clients, shift
        self.manifold = riemfl.Euclidean(dim)

    def n_samples(self, i: int) -> int:
        return 1

    def num_batches(self, i: int, epochs: int | None = None) -> int:
        return 1

    def train(self, i: int, start: Any, rng: np.random.Generator, epochs: int | None = None):
        return start + self.shift


def _event_run(trainer: ShiftTrainer, rule: Any, events: int, workers: int) -> Any:
    return run_async(
        trainer,
        rule,
        10**12,
        workers=min(workers, trainer.n_clients),
        timing=ExponentialTime(1.0),
        max_updates=events,
        options=RunOptions(record_every=None, seed=0),
    )


def _profile(fn: Callable[[], Any], limit: int = 16) -> list[dict[str, Any]]:
    """Where ``fn`` spends its time (cProfile): riemfl's functions by cumulative share of the
    total (what each costs with everything it calls), with their own share."""
    profile = cProfile.Profile()
    profile.enable()
    fn()
    profile.disable()
    stats = pstats.Stats(profile)
    total = stats.total_tt
    rows = []
    for (path, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():
        if f"{os.sep}riemfl{os.sep}" not in path or name in ("run_steps", "run", "run_async"):
            continue
        where = f"{Path(path).parent.name}/{Path(path).name}:{line}({name})"
        rows.append(
            {
                "function": where,
                "calls": calls,
                "own_share": tottime / total,
                "cumulative_share": cumtime / total,
            }
        )
    rows.sort(key=lambda r: -r["cumulative_share"])
    return rows[:limit]


def bench_events(s: Settings) -> dict[str, Any]:
    """Wall time per client update of the simulator, and its memory (part 2)."""
    e = s.events
    rules = {"fedasync": FedAsync, "fedbuff": lambda: FedBuff(buffer_size=10)}
    cells = []
    for n in e["clients"]:
        trainer = ShiftTrainer(n, e["dim"])
        times: dict[str, list[float]] = {name: [] for name in rules}
        setup: dict[str, list[float]] = {name: [] for name in rules}
        for rep in range(e["repeats"]):
            for name in rules if rep % 2 == 0 else reversed(list(rules)):
                for events, into in ((1, setup), (e["events"], times)):  # one update: the setup
                    with _gc_paused():
                        t0 = time.perf_counter()
                        h = _event_run(trainer, rules[name](), events, e["workers"])
                        into[name].append((time.perf_counter() - t0) / len(h.log["client"]))
        for name in rules:
            us, setup_s = 1e6 * median(times[name]), median(setup[name])
            steady = us - 1e6 * setup_s / e["events"]
            cells.append(
                {
                    "clients": n,
                    "rule": name,
                    "events": e["events"],
                    "workers": min(e["workers"], n),
                    "us_per_event": us,
                    "setup_ms": 1e3 * setup_s,
                    "steady_us_per_event": steady,
                    "samples_us": [1e6 * t for t in times[name]],
                    "goal_us": s.goals["event_us"],
                    "met": bool(us <= s.goals["event_us"]),
                }
            )
    memory = []
    for n in e["clients"]:
        spec = {
            "part": "events",
            "clients": n,
            "dim": e["dim"],
            "rule": "fedasync",
            "events": e["events"],
            "workers": e["workers"],
        }
        child = _run_child(spec)
        memory.append(
            {
                **spec,
                **child,
                "run_rss_bytes": child["peak_run"] - child["rss_built"],
                "traced_bytes_per_event": child["traced_peak"] / e["events"],
            }
        )
    out: dict[str, Any] = {"cells": cells, "memory": memory}
    worst = max(cells, key=lambda c: c["us_per_event"])
    if not worst["met"]:
        trainer = ShiftTrainer(worst["clients"], e["dim"])
        rule = rules[worst["rule"]]
        out["profile"] = {
            "clients": worst["clients"],
            "rule": worst["rule"],
            "events": e["profile_events"],
            "functions": _profile(
                lambda: _event_run(trainer, rule(), e["profile_events"], e["workers"])
            ),
        }
    return out


# --------------------------------------------------------------------------------------- part 3
class HalfSquareProblem(FederatedProblem):
    """f_i(x) = |x - c_i|^2 / 2 on a Euclidean vector of ``dim`` floats (a cheap oracle)."""

    name = "half-square"

    def __init__(self, dim: int, n_clients: int = 2) -> None:
        self.manifold = riemfl.Euclidean(dim)
        self.n_clients = n_clients
        self.centres = np.linspace(-1.0, 1.0, n_clients)[:, None] * np.ones(dim)

    def client_egrads(self, clients, xs, batches=None):
        return xs - self.centres[list(clients)]

    def client_losses(self, clients, xs):
        return 0.5 * np.sum((xs - self.centres[list(clients)]) ** 2, axis=1)


def _time_run(run: Callable[[Path | None], Any], path: Path | None) -> float:
    if path is not None:
        path.unlink(missing_ok=True)  # a fresh run, not a resume
    with _gc_paused():
        t0 = time.perf_counter()
        run(path)
        return time.perf_counter() - t0


def bench_checkpoint(s: Settings, folder: Path) -> list[dict[str, Any]]:
    """Write (and read) times of a 10^6-parameter checkpoint, bare and inside runs (part 3)."""
    c = s.checkpoint
    dim, steps, repeats = c["dim"], c["steps"], c["repeats"]
    x = np.random.default_rng(0).standard_normal(dim)
    path = folder / "bare.rfl"
    writes, reads = [], []
    for _ in range(max(3, 3 * repeats)):
        writes.append(_time_run(lambda p: save_checkpoint(p, {"x": x}), path))
        with _gc_paused():
            t0 = time.perf_counter()
            load_checkpoint(path)
            reads.append(time.perf_counter() - t0)
    cells = [
        {
            "what": "save_checkpoint({'x': 10^6 float64})",
            "write_ms": 1e3 * median(writes),
            "read_ms": 1e3 * median(reads),
            "file_bytes": path.stat().st_size,
            "samples_ms": [1e3 * t for t in writes],
        }
    ]
    trainer, problem = ShiftTrainer(4, dim), HalfSquareProblem(dim)
    runs = {
        "run_async (FedAsync, 1 worker)": lambda p: run_async(
            trainer,
            FedAsync(),
            steps,
            workers=1,
            x0=x,
            options=RunOptions(record_every=None, checkpoint=p, checkpoint_every=1),
        ),
        "run_sync (RFedAvg, no client state)": lambda p: run_sync(
            problem,
            RFedAvg(0.1, 1),
            steps,
            x0=x,
            options=RunOptions(checkpoint=p, checkpoint_every=1),
        ),
    }
    for label, run in runs.items():
        with_ckpt, without = [], []
        target = folder / "run.rfl"
        for rep in range(repeats):
            order = (target, None) if rep % 2 == 0 else (None, target)
            for p in order:
                (with_ckpt if p is not None else without).append(_time_run(run, p))
        per_step = (median(with_ckpt) - median(without)) / steps
        cells.append(
            {
                "what": label,
                "write_ms": 1e3 * per_step,
                "step_ms_with": 1e3 * median(with_ckpt) / steps,
                "step_ms_without": 1e3 * median(without) / steps,
                "file_bytes": target.stat().st_size,
                "steps": steps,
            }
        )
    return cells


# --------------------------------------------------------------------------------------- part 4
def _scale_problem(c: dict[str, Any]) -> KPCAProblem:
    return KPCAProblem.synthetic(
        n_clients=c["n"], d=c["d"], k=c["k"], p=c["p"], seed=0, storage=c["storage"]
    )


def bench_scale(s: Settings) -> dict[str, Any]:
    """Seconds per round and peak memory of ``run_sync`` with many clients (part 4)."""
    c = s.scale
    problem = _scale_problem(c)
    eta = 1.0 / problem.smoothness
    x0 = initial_point(problem, 0)
    timing = _compare_rounds(
        problem, lambda: RFedProj(eta, c["tau"]), x0, c["rounds"], c["repeats"]
    )
    del problem
    gc.collect()
    memory = {
        peer: _run_child({"part": "scale", "peer": peer, "config": c})
        for peer in ("baseline", "engine", "bare")
    }
    engine, bare, base = memory["engine"], memory["bare"], memory["baseline"]
    rows = engine["data_bytes"]
    data = rows + engine["covariance_bytes"]  # what the problem holds per client
    ratio = engine["peak_run"] / data
    return {
        "config": dict(c),
        "eta": eta,
        "timing": timing,
        "time_goal": s.goals["scale_time"],
        "time_met": bool(timing["ratio"] <= s.goals["scale_time"]),
        "data_bytes": data,
        "row_bytes": rows,
        "covariance_bytes": engine["covariance_bytes"],
        "memory_ratio_to_rows": engine["peak_run"] / rows,
        "rss_import": base["rss_import"],
        "rss_baseline": base["rss_built"],
        "peak_build": base["peak_build"],
        "peak_engine": engine["peak_run"],
        "peak_bare": bare["peak_run"],
        "peak_reset": bool(engine["peak_reset"]),
        "memory_ratio": ratio,
        "memory_ratio_without_interpreter": (engine["peak_run"] - base["rss_import"]) / data,
        "engine_extra_over_baseline": (engine["peak_run"] - base["rss_built"]) / data,
        "engine_extra_over_bare": (engine["peak_run"] - bare["peak_run"]) / data,
        "memory_goal": s.goals["scale_memory"],
        "memory_met": bool(ratio <= s.goals["scale_memory"]),
        "children": memory,
    }


# --------------------------------------------------------------------------------------- part 5
@contextlib.contextmanager
def _counted_writes() -> Iterator[list[int]]:
    """Count the bytes of every ``os.write`` of this process (checkpoints write through it)."""
    written: list[int] = []
    real = os.write

    def counting(fd: int, data: Any) -> int:
        n = real(fd, data)
        written.append(n)
        return n

    os.write = counting
    try:
        yield written
    finally:
        os.write = real


def _checkpoints_at(
    problem: HalfSquareProblem, rows: int, h: dict[str, Any], folder: Path
) -> dict[str, Any]:
    """Cost of the checkpoints of a run that holds ``rows`` rows (part 5a)."""
    path = folder / f"history-{rows}.rfl"
    path.unlink(missing_ok=True)
    run_sync(
        problem, RFedProj(0.1, 1), rows, options=RunOptions(checkpoint=path, checkpoint_every=rows)
    )
    stamps: dict[int, Stamp] = {}
    end, every = rows + h["window"], h["every"]
    with _gc_paused(), _counted_writes() as written:
        history = run_sync(
            problem,
            RFedProj(0.1, 1),
            end,
            options=RunOptions(
                checkpoint=path,
                checkpoint_every=every,
                on_step=lambda r, _: stamps.__setitem__(r, _stamp()),
            ),
        )
    # on_step(r) comes before the checkpoint of round r: it lies in the interval to r + 1
    cpu = {r: stamps[r + 1][0] - stamps[r][0] for r in stamps if r + 1 in stamps}
    wall = {r: stamps[r + 1][1] - stamps[r][1] for r in stamps if r + 1 in stamps}
    saved = [r for r in wall if r % every == 0]
    plain = [r for r in wall if r % every != 0]
    base_wall, base_cpu = median(wall[r] for r in plain), median(cpu[r] for r in plain)
    return {
        "rows": rows,
        "checkpoints": len(saved),
        "ms_median": 1e3 * (median(wall[r] for r in saved) - base_wall),
        "ms_mean": 1e3 * (sum(wall[r] for r in saved) / len(saved) - base_wall),
        "cpu_ms_median": 1e3 * (median(cpu[r] for r in saved) - base_cpu),
        "round_ms": 1e3 * base_wall,
        "bytes_per_checkpoint": sum(written) / (h["window"] // every),
        "history_json_bytes": len(history.to_json()),
        "file_bytes": path.stat().st_size,
    }


def _command_seconds(rounds: int, every: int, out: Path) -> dict[str, float]:
    """Seconds of ``riemfl run kpca-synthetic``: the command's wall-clock and CPU time (user and
    system), and the run's own wall-clock time (its history's last ``wall_time``)."""
    import resource

    from riemfl.federated import History

    cmd = [sys.executable, "-m", "riemfl", "run", "kpca-synthetic", "--algorithm", "rfedproj"]
    cmd += ["--steps", str(rounds), "--checkpoint-every", str(every), "--no-progress"]
    cmd += ["--out", str(out), "--overwrite"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=child_env(), timeout=3600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {"s": wall, "cpu_s": cpu, "run_s": History.from_json(out / "history.json").wall_time[-1]}


def bench_history(s: Settings, folder: Path) -> dict[str, Any]:
    """Checkpoint cost at two lengths of the history, and the command's overhead (part 5)."""
    h = s.history
    problem = HalfSquareProblem(h["dim"], h["clients"])
    cells = [_checkpoints_at(problem, rows, h, folder) for rows in h["rows"]]
    flat = cells[-1]["ms_median"] / cells[0]["ms_median"]
    runs: dict[int, list[dict[str, float]]] = {h["cli_every"]: [], 0: []}
    for rep in range(h["cli_repeats"]):
        for every in sorted(runs, reverse=rep % 2 == 0):  # the order alternates
            runs[every].append(_command_seconds(h["cli_rounds"], every, folder / "cli"))
    command: dict[str, Any] = {
        "rounds": h["cli_rounds"],
        "every": h["cli_every"],
        "checkpoints": h["cli_rounds"] // h["cli_every"],
        "samples": {str(k): v for k, v in runs.items()},
    }
    for key in ("s", "cpu_s", "run_s"):
        with_ckpt = median(r[key] for r in runs[h["cli_every"]])
        without = median(r[key] for r in runs[0])
        command[f"with_{key}"], command[f"without_{key}"] = with_ckpt, without
        command[f"ratio_{key}"] = with_ckpt / without
    command["ms_per_checkpoint"] = (
        1e3 * (command["with_run_s"] - command["without_run_s"]) / command["checkpoints"]
    )
    return {
        "cells": cells,
        "flat_ratio": flat,
        "flat_goal": s.goals["checkpoint_flat"],
        "flat_met": bool(flat <= s.goals["checkpoint_flat"]),
        "command": command,
        "overhead_goal": s.goals["checkpoint_overhead"],
        "overhead_met": bool(command["ratio_s"] <= s.goals["checkpoint_overhead"]),
    }


# --------------------------------------------------------------------------------------- all
def run_benchmark(
    quick: bool = False, *, out: str | os.PathLike[str] | None = DEFAULT_OUT, **options: Any
) -> dict[str, Any]:
    """Run the five parts; return the results as a JSON-ready dict (written to ``out``).

    Parameters
    ----------
    quick : bool
        Tiny sizes (seconds); ignored when ``settings`` is given.
    out : path or None
        JSON file (missing folders are made); None: none written.
    **options
        ``settings`` (a :class:`Settings`) and ``verbose`` (progress lines on stderr).

    Returns
    -------
    dict
        ``{"machine", "settings", "overhead", "events", "checkpoint", "scale", "history",
        "goals", "total_s"}``.
    """
    from _harness import machine_info, single_thread, steady_allocator

    s = options.get("settings") or (Settings.quick() if quick else Settings())
    started = time.perf_counter()
    allocator = steady_allocator()  # no page faults from re-mapping freed stacks of clients

    def say(msg: str) -> None:
        if options.get("verbose"):
            print(f"  [{time.perf_counter() - started:6.1f} s] {msg}", file=sys.stderr, flush=True)

    with single_thread() as threads, tempfile.TemporaryDirectory(prefix="rfl-bench-") as tmp:
        machine = {**machine_info(threads), **allocator}
        result: dict[str, Any] = {"machine": machine, "settings": asdict(s)}
        say("part 1: core overhead per round")
        result["overhead"] = bench_overhead(s)
        say("part 2: simulator cost per event")
        result["events"] = bench_events(s)
        say("part 3: checkpoint writes")
        result["checkpoint"] = bench_checkpoint(s, Path(tmp))
        say("part 4: scale")
        result["scale"] = bench_scale(s)
        say("part 5: checkpoints against the length of the run")
        result["history"] = bench_history(s, Path(tmp))
    result["settings"]["checkpoint_folder"] = tempfile.gettempdir()
    goals = {
        "overhead_mnist_size": next(c["met"] for c in result["overhead"] if "goal" in c),
        "event_us": all(c["met"] for c in result["events"]["cells"]),
        "scale_time": result["scale"]["time_met"],
        "scale_memory": result["scale"]["memory_met"],
        "checkpoint_flat": result["history"]["flat_met"],
        "checkpoint_overhead": result["history"]["overhead_met"],
    }
    result["goals"] = {"met": sum(goals.values()), "checked": len(goals), **goals}
    result["total_s"] = time.perf_counter() - started
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1, default=str))
    return result


# --------------------------------------------------------------------------------------- report
def _mb(n: float) -> str:
    return f"{n / 1e6:.1f}"


def format_tables(result: dict[str, Any]) -> str:
    """The five parts as fixed-width tables."""
    rows = [
        [
            c["problem"],
            f"{c['n']}x{c['p']}x{c['d']}, k={c['k']}",
            c["tau"],
            f"{c['engine_round_ms']:.2f}",
            f"{c['bare_round_ms']:.2f}",
            f"{c['ratio']:.3f}",
            f"{c['ratio_wall']:.3f}",
            f"{c['ratio_steps']:.3f}",
            f"{c['metrics_and_bookkeeping_ms']:.2f}",
            f"{c['setup_ms']:.0f}",
            "yes" if c["same_final_point"] else "NO",
            f"<= {c['goal']}" if "goal" in c else "",
            verdict(c.get("met")),
        ]
        for c in result["overhead"]
    ]
    head = [
        "problem",
        "size",
        "tau",
        "engine ms",
        "bare ms",
        "ratio",
        "wall",
        "steps only",
        "metrics ms",
        "setup ms",
        "same x",
        "goal",
        "met?",
    ]
    parts = [table(head, rows, left=(0, 1, 11, 12))]
    ev = result["events"]
    rows = [
        [
            c["clients"],
            c["rule"],
            c["events"],
            c["workers"],
            f"{c['us_per_event']:.2f}",
            f"{c['setup_ms']:.1f}",
            f"{c['steady_us_per_event']:.2f}",
            f"<= {c['goal_us']:g}",
            verdict(c["met"]),
        ]
        for c in ev["cells"]
    ]
    parts.append(
        table(
            [
                "clients",
                "rule",
                "events",
                "workers",
                "us/event",
                "setup ms",
                "us/event after setup",
                "goal",
                "met?",
            ],
            rows,
            left=(1, 7, 8),
        )
    )
    rows = [
        [
            m["clients"],
            m["rule"],
            m["events"],
            _mb(m["rss_built"]),
            _mb(m["peak_run"]),
            _mb(m["run_rss_bytes"]),
            _mb(m["traced_peak"]),
            f"{m['traced_bytes_per_event']:.0f}",
        ]
        for m in ev["memory"]
    ]
    parts.append(
        table(
            [
                "clients",
                "rule",
                "events",
                "RSS before MB",
                "peak RSS MB",
                "run's RSS MB",
                "traced peak MB",
                "traced B/event",
            ],
            rows,
            left=(1,),
        )
    )
    if "profile" in ev:
        p = ev["profile"]
        rows = [
            [
                f["function"],
                f["calls"],
                f"{100 * f['own_share']:.1f}",
                f"{100 * f['cumulative_share']:.1f}",
            ]
            for f in p["functions"]
        ]
        parts.append(
            f"cProfile of {p['rule']}, {p['clients']} clients, {p['events']} events "
            "(riemfl's functions by cumulative share):\n"
            + table(["function", "calls", "own %", "cumulative %"], rows)
        )
    rows = [
        [
            c["what"],
            f"{c['write_ms']:.1f}",
            _mb(c["file_bytes"]),
            f"{c['read_ms']:.1f}" if "read_ms" in c else "",
            f"{c['step_ms_with']:.1f} / {c['step_ms_without']:.1f}" if "steps" in c else "",
        ]
        for c in result["checkpoint"]
    ]
    parts.append(
        table(
            [
                "checkpoint of 10^6 float64",
                "write ms",
                "file MB",
                "read ms",
                "step ms with / without",
            ],
            rows,
        )
    )
    sc = result["scale"]
    t, cfg = sc["timing"], sc["config"]
    rows = [
        ["config", f"n={cfg['n']} d={cfg['d']} k={cfg['k']} p={cfg['p']} tau={cfg['tau']}"],
        [
            "engine s/round (CPU, wall)",
            f"{t['engine_round_ms'] / 1e3:.3f}, {t['engine_round_wall_ms'] / 1e3:.3f}",
        ],
        [
            "bare loop s/round (CPU, wall)",
            f"{t['bare_round_ms'] / 1e3:.3f}, {t['bare_round_wall_ms'] / 1e3:.3f}",
        ],
        ["gradient oracle only s/round", f"{t['oracle_ms'] / 1e3:.3f}"],
        ["engine / bare (goal <= 1.3)", f"{t['ratio']:.3f}: {verdict(sc['time_met'])}"],
        ["engine / oracle only", f"{t['ratio_to_oracle']:.3f}"],
        ["setup (digest, row 0) s", f"{t['setup_ms'] / 1e3:.2f}"],
        ["client data MB (rows + covariances)", _mb(sc["data_bytes"])],
        ["of which rows MB", _mb(sc["row_bytes"])],
        ["of which covariances MB", _mb(sc["covariance_bytes"])],
        ["RSS after import MB", _mb(sc["rss_import"])],
        ["RSS after build (baseline) MB", _mb(sc["rss_baseline"])],
        ["peak RSS while building MB", _mb(sc["peak_build"])],
        ["peak RSS engine run MB", _mb(sc["peak_engine"])],
        ["peak RSS bare loop MB", _mb(sc["peak_bare"])],
        ["peak / data (goal <= 1.2)", f"{sc['memory_ratio']:.2f}: {verdict(sc['memory_met'])}"],
        ["peak / rows", f"{sc['memory_ratio_to_rows']:.2f}"],
        ["(peak - import RSS) / data", f"{sc['memory_ratio_without_interpreter']:.2f}"],
        ["(peak - baseline) / data", f"{sc['engine_extra_over_baseline']:.2f}"],
        ["(peak engine - peak bare) / data", f"{sc['engine_extra_over_bare']:.2f}"],
    ]
    parts.append(table(["scale", "value"], rows, left=(0, 1)))
    hi = result["history"]
    columns: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
        ("history rows", lambda c: c["rows"]),
        ("checkpoints", lambda c: c["checkpoints"]),
        ("ms median", lambda c: f"{c['ms_median']:.2f}"),
        ("ms mean", lambda c: f"{c['ms_mean']:.2f}"),
        ("CPU ms median", lambda c: f"{c['cpu_ms_median']:.2f}"),
        ("kB written each", lambda c: f"{c['bytes_per_checkpoint'] / 1e3:.1f}"),
        ("history JSON kB", lambda c: f"{c['history_json_bytes'] / 1e3:.0f}"),
        ("file kB", lambda c: f"{c['file_bytes'] / 1e3:.0f}"),
    ]
    parts.append(
        table([name for name, _ in columns], [[f(c) for _, f in columns] for c in hi["cells"]])
        + f"\nflat: {hi['flat_ratio']:.2f} (goal <= {hi['flat_goal']}): "
        + verdict(hi["flat_met"])
    )
    c = hi["command"]
    rows = [
        ["command", f"riemfl run kpca-synthetic --algorithm rfedproj --steps {c['rounds']}"],
        ["seconds with / without checkpoints", f"{c['with_s']:.1f} / {c['without_s']:.1f}"],
        ["CPU seconds with / without", f"{c['with_cpu_s']:.1f} / {c['without_cpu_s']:.1f}"],
        ["run's own seconds with / without", f"{c['with_run_s']:.1f} / {c['without_run_s']:.1f}"],
        [
            f"ratio, --checkpoint-every {c['every']} / 0 (goal <= {hi['overhead_goal']})",
            f"{c['ratio_s']:.3f}: {verdict(hi['overhead_met'])}",
        ],
        ["ratio of CPU seconds", f"{c['ratio_cpu_s']:.3f}"],
        ["ms per checkpoint (run's seconds)", f"{c['ms_per_checkpoint']:.2f}"],
    ]
    parts.append(table(["checkpoints in a command", "value"], rows, left=(0, 1)))
    g = result["goals"]
    parts.append(f"goals met: {g['met']}/{g['checked']}; total {result['total_s']:.1f} s")
    return "\n\n".join(parts)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run from the command line: print the tables and the goals, write the JSON file."""
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--quick", action="store_true", help="tiny sizes (seconds)")
    cli.add_argument("--out", default=DEFAULT_OUT, help="JSON file (default: %(default)s)")
    cli.add_argument(
        "--scale-storage",
        choices=("covariances", "rows"),
        default="covariances",
        help="what the 10^4-client kPCA problem keeps (KPCAProblem's storage)",
    )
    cli.add_argument("--child", help=argparse.SUPPRESS)  # a memory measurement (internal)
    opts = cli.parse_args(argv)
    if opts.child:
        print(json.dumps(_child(json.loads(opts.child))))
        return {}
    from _harness import write_result

    settings = Settings.quick() if opts.quick else Settings()
    settings.scale["storage"] = opts.scale_storage
    result = run_benchmark(quick=opts.quick, out=None, verbose=True, settings=settings)
    return write_result(result, opts.out, format_tables(result))


if __name__ == "__main__":
    main()

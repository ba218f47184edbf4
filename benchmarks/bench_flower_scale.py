"""Benchmark the Flower adapter at scale: 1,000 clients in simulation and in a loopback deployment.

One problem throughout: federated kPCA (``kpca-synthetic`` of the registry, ``ProblemSpec(
"kpca-synthetic", clients=1000, seed=1)``: Stiefel(20, 5), 15 rows per client) with RFedProj
(tau = 5 local steps, the registry's default step size for tau = 5, full participation, run
seed 0). Three paths:

1. **In process**: :func:`riemfl.federated.run_sync`, the reference.
2. **Simulation**: :func:`riemfl.adapters.flower.simulate` (Flower's simulation engine on Ray,
   one ClientApp actor per CPU) with P virtual SuperNodes, node p hosting block p of
   ``numpy.array_split(range(1000), P)``: P = 1000 (one client per node), 100 and 10.
3. **Deployment**: :class:`riemfl.adapters.flower.local.LocalDeployment` without TLS (a
   SuperLink and P SuperNodes as processes on 127.0.0.1; every message starts a ClientApp
   process on its node, Flower's default isolation), P = 10, then 30, then 100. The next size
   is skipped when the previous one failed, or when its time or its processes' own memory
   (anonymous pages) scaled linearly in P would exceed ``max_run_s`` or ``memory_fraction``
   of the memory available then.

Seconds per round: the median over the rounds of the increments of the History's ``wall_time``
(round 0, the start-up, excluded: the simulation's Ray start, the nodes' registration and the
job's handshake); the rounds' range and the total wall time of the call (``run_sync``,
``simulate`` with Ray's start and stop, the deployment's start plus its run) are reported too.
Every Flower run is checked against ``run_sync``'s final point for the same number of rounds.

Peak memory: the largest sum of the resident set sizes (``VmRSS``) of a tree of processes,
sampled from ``/proc`` every 0.2 s by a thread of this script. The in-process run and each
simulation run in a fresh interpreter (``--one``), whose tree holds Ray's processes (GCS,
raylet, agents, the ClientApp actors); for the in-process run, whose rounds last milliseconds,
the process's own peak (``VmHWM``) is taken when it is larger than the samples. A deployment's
tree is its SuperLink and SuperNodes with everything they start (SuperExec, ServerApp and
ClientApp processes), not this script nor the ``flwr`` commands. A sum of RSS counts the pages
that processes share (libraries) once per process; the peak of the summed anonymous pages (RSS
less file-backed and shared memory, from ``/proc/<pid>/statm``) is reported beside it. The
sampler also keeps every process's CPU time, summed by process name.

Usage::

    python benchmarks/bench_flower_scale.py [--quick] [--parts in-process,simulation,deployment]
        [--sim-nodes 10,100,1000] [--deploy-nodes 10,30,100]
        [--out results/bench_flower_scale.json]

The deployment runs ``flower-superlink``, ``flower-supernode`` and ``flwr`` from PATH.
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    # One BLAS/OpenMP thread, set before numpy loads; every process started inherits it.
    os.environ.update(
        dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1")
    )

import argparse  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterable, Sequence  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, NamedTuple  # noqa: E402

import numpy as np  # noqa: E402

# _report and _harness lie beside this script; _harness imports torch, so it is imported only
# in the parent (the measured interpreters hold riemfl, and Flower and Ray where they run them).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import median  # noqa: E402

__all__ = [
    "Settings",
    "TreeSampler",
    "measure_child",
    "bench_in_process",
    "bench_simulation",
    "bench_deployment",
    "run_benchmark",
    "format_table",
    "main",
]

DEFAULT_OUT = "results/bench_flower_scale.json"
PARTS = ("in-process", "simulation", "deployment")
MIB = 2**20
#: the marker of a measured interpreter's answer on its standard output
ANSWER = "BENCH-FLOWER-SCALE "


# --------------------------------------------------------------------------------------- settings
@dataclass
class Settings:
    """Sizes, repeats and limits of one benchmark run.

    Attributes
    ----------
    clients : int
        Clients of ``kpca-synthetic`` (every path).
    local_steps : int
        RFedProj's tau.
    problem_seed, seed : int
        Seed of the data (``ProblemSpec(seed=...)``) and of the run (``RunOptions(seed=...)``).
    in_process : dict
        ``steps`` (rounds per run) and ``repeats`` (runs, each in a fresh interpreter).
    simulation : dict
        ``nodes`` (virtual SuperNodes of each configuration), ``steps``, ``repeats``,
        ``timeout`` (seconds per run).
    deployment : dict
        ``nodes`` (SuperNodes, tried in order), ``steps``, ``timeout`` (seconds to wait for a
        run's result), ``max_run_s`` and ``memory_fraction`` (the limits on the next size).
    interval : float
        Seconds between two memory samples.
    is_quick : bool
    """

    clients: int = 1000
    local_steps: int = 5
    problem_seed: int = 1
    seed: int = 0
    in_process: dict[str, Any] = field(default_factory=lambda: {"steps": 20, "repeats": 5})
    simulation: dict[str, Any] = field(
        default_factory=lambda: {
            "nodes": (10, 100, 1000),
            "steps": 8,
            "repeats": 1,
            "timeout": 1800,
        }
    )
    deployment: dict[str, Any] = field(
        default_factory=lambda: {
            "nodes": (10, 30, 100),
            "steps": 3,
            "timeout": 2400,
            "max_run_s": 1800,
            "memory_fraction": 0.6,
        }
    )
    interval: float = 0.2
    is_quick: bool = False

    @classmethod
    def quick(cls) -> Settings:
        """20 clients; a simulation on 2 nodes and a deployment of 2 SuperNodes (under a minute
        on an idle 2-core machine)."""
        return cls(
            clients=20,
            in_process={"steps": 3, "repeats": 1},
            simulation={"nodes": (2,), "steps": 2, "repeats": 1, "timeout": 600},
            deployment={
                "nodes": (2,),
                "steps": 1,
                "timeout": 600,
                "max_run_s": 600,
                "memory_fraction": 0.6,
            },
            is_quick=True,
        )


# --------------------------------------------------------------------------------------- memory
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class Proc(NamedTuple):
    """What ``/proc/<pid>/stat`` says of a process."""

    ppid: int
    name: str
    cpu_ticks: int  # user + system time, in clock ticks


def processes() -> dict[int, Proc]:
    """Every process of the machine (empty without ``/proc``)."""
    table: dict[int, Proc] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for pid in names:
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # the process ended
            continue
        close = stat.rfind(b")")
        fields = stat[close + 2 :].split()  # after "pid (name) ": state, ppid, ...
        name = stat[stat.find(b"(") + 1 : close].decode(errors="replace")
        table[int(pid)] = Proc(int(fields[1]), name, int(fields[11]) + int(fields[12]))
    return table


def descendants(roots: Iterable[int], table: dict[int, Proc] | None = None) -> set[int]:
    """``roots`` (those alive) and every process below them."""
    table = processes() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, proc in table.items():
        children.setdefault(proc.ppid, []).append(pid)
    found, todo = set(), [pid for pid in roots if pid in table]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def _rss(pid: int) -> tuple[int, int]:
    """Resident set size of ``pid`` in bytes, and the part of it not backed by a file or shared
    memory (its own anonymous pages); zeros once it ended."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            fields = f.read().split()
        resident, shared = int(fields[1]), int(fields[2])
    except (OSError, IndexError, ValueError):
        return 0, 0
    return resident * _PAGE, (resident - shared) * _PAGE


def _own_peak() -> int:
    """This process's peak RSS in bytes (``VmHWM``; 0 where unknown)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return 1024 * int(line.split()[1])
    except OSError:
        pass
    return 0


def memory_available() -> int:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (0 where unknown)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return 1024 * int(line.split()[1])
    except OSError:
        pass
    return 0


class TreeSampler:
    """A thread that samples the summed RSS of the process trees below ``roots()``.

    Parameters
    ----------
    roots : callable
        The root pids, asked at every sample (a deployment's list grows as it starts).
    interval : float
        Seconds between samples.
    """

    def __init__(self, roots: Callable[[], Sequence[int]], interval: float = 0.2) -> None:
        self.roots, self.interval = roots, float(interval)
        self.peak_bytes = 0
        self.peak_anon_bytes = 0
        self.peak_processes = 0
        self.samples = 0
        self.seen: set[int] = set()
        #: pid -> (name, CPU ticks at its last sample)
        self.cpu: dict[int, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        """One sample: sum the RSS of the trees now; keep the peaks and each one's CPU time."""
        table = processes()
        pids = descendants(self.roots(), table)
        self.seen |= pids
        self.cpu |= {pid: (table[pid].name, table[pid].cpu_ticks) for pid in pids}
        sizes = [_rss(pid) for pid in pids]
        self.peak_bytes = max(self.peak_bytes, sum(rss for rss, _ in sizes))
        self.peak_anon_bytes = max(self.peak_anon_bytes, sum(anon for _, anon in sizes))
        self.peak_processes = max(self.peak_processes, len(pids))
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def result(self) -> dict[str, Any]:
        """``peak_bytes`` (summed RSS), ``peak_anon_bytes`` (summed anonymous RSS: memory no
        other process shares, unless forked), ``peak_processes``, ``processes_seen``,
        ``samples``, and ``cpu_s``:
        CPU seconds by process name (``/proc/<pid>/stat``'s, e.g. ``python``, ``raylet``,
        ``flwr-clientapp``) as last sampled (a process loses what it ran after its last
        sample)."""
        ticks: dict[str, int] = {}
        for name, t in self.cpu.values():
            ticks[name] = ticks.get(name, 0) + t
        per_second = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        return {
            "peak_bytes": self.peak_bytes,
            "peak_anon_bytes": self.peak_anon_bytes,
            "peak_processes": self.peak_processes,
            "processes_seen": len(self.seen),
            "samples": self.samples,
            "cpu_s": {name: t / per_second for name, t in sorted(ticks.items())},
        }


def _kill_tree(sampler: TreeSampler) -> None:
    """SIGKILL every process of the sampler's trees (ours: started below this script)."""
    for pid in descendants(sampler.roots()):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


# --------------------------------------------------------------------------------------- runs
def _problem_and_rule(task: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The ProblemSpec, its problem and RFedProj with the registry's default step size."""
    from riemfl.adapters.flower import ProblemSpec

    from riemfl.experiments.registry import PROBLEMS
    from riemfl.federated import RFedProj

    spec = ProblemSpec("kpca-synthetic", clients=task["clients"], seed=task["problem_seed"])
    problem = spec.build()
    tau = task["local_steps"]
    step = PROBLEMS["kpca-synthetic"].default_step_size(problem, tau)
    return spec, problem, RFedProj(step, tau)


def reference_point(settings: Settings, steps: int) -> np.ndarray:
    """``run_sync``'s final point after ``steps`` rounds (what every Flower run must reach)."""
    from riemfl.federated import RunOptions, run_sync

    _, problem, rule = _problem_and_rule(_task(settings, "in-process", steps))
    return run_sync(problem, rule, steps, options=RunOptions(seed=settings.seed)).final_point


def _one(task: dict[str, Any]) -> dict[str, Any]:
    """One run in this fresh interpreter (``--one``): the History's figures and own peak."""
    from riemfl.federated import RunOptions, run_sync

    spec, problem, rule = _problem_and_rule(task)
    options = RunOptions(seed=task["seed"])
    out: dict[str, Any] = {"step_size": rule.step_size}
    out["rss_before_run_bytes"] = _rss(os.getpid())[0]
    t0 = time.perf_counter()
    if task["kind"] == "in-process":
        history = run_sync(problem, rule, task["steps"], options=options)
    else:
        from riemfl.adapters.flower import SyncJob, simulate

        job = SyncJob(spec, rule, task["steps"], name="scale", options=options)
        history = simulate([job], task["nodes"])["scale"]
    out["total_s"] = time.perf_counter() - t0
    out["round_s"] = np.diff(history.wall_time).tolist()
    out["final_point"] = np.asarray(history.final_point).tolist()
    out |= _drops(history.metrics["participants"], history.warnings)
    out["own_peak_bytes"] = _own_peak()
    return out


def _drops(participants: Sequence[Any], warnings: Sequence[Any]) -> dict[str, Any]:
    """The clients that took part in each round, and the run's warnings (each dropped client
    with its reason; the first 20)."""
    return {
        "participants": [int(p) for p in participants[1:]],
        "warnings": len(warnings),
        "first_warnings": [str(w) for w in warnings[:20]],
    }


def measure_child(task: dict[str, Any], interval: float, timeout: float) -> dict[str, Any]:
    """Run :func:`_one` of ``task`` in a fresh interpreter while sampling its process tree.

    Returns its answer with ``peak_bytes`` (the larger of the tree's sampled peak and the
    interpreter's own ``VmHWM``), the sampler's figures and ``process_s``; or
    ``{"failed": why}``.
    """
    from _report import child_env

    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", json.dumps(task)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env()
    )
    with TreeSampler(lambda: [proc.pid], interval) as sampler:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_tree(sampler)
            proc.communicate()
            return {"failed": f"no result within {timeout:g} s", **sampler.result()}
    lines = [line for line in stdout.splitlines() if line.startswith(ANSWER)]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(stderr.strip().splitlines()[-5:])
        return {"failed": f"exit code {proc.returncode}: {tail}", **sampler.result()}
    answer = json.loads(lines[-1][len(ANSWER) :])
    tree = sampler.result()
    tree["sampled_peak_bytes"] = tree.pop("peak_bytes")
    return {
        **answer,
        **tree,
        "peak_bytes": max(tree["sampled_peak_bytes"], answer["own_peak_bytes"]),
        "process_s": time.perf_counter() - t0,
    }


def _task(settings: Settings, kind: str, steps: int, nodes: int = 0) -> dict[str, Any]:
    return {
        "kind": kind,
        "clients": settings.clients,
        "local_steps": settings.local_steps,
        "problem_seed": settings.problem_seed,
        "seed": settings.seed,
        "steps": steps,
        "nodes": nodes,
    }


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the runs that finished: s/round (median over each run's rounds), total
    seconds, peak bytes; the pooled rounds' range."""
    done = [r for r in runs if "failed" not in r]
    if not done:
        return {"failed": runs[0]["failed"] if runs else "not run", "runs": runs}
    rounds = [t for r in done for t in r["round_s"]]
    return {
        "round_s": median(median(r["round_s"]) for r in done),
        "round_range_s": [min(rounds), max(rounds)],
        "total_s": median(r["total_s"] for r in done),
        "peak_bytes": median(r["peak_bytes"] for r in done),
        "peak_anon_bytes": median(r["peak_anon_bytes"] for r in done),
        "runs": runs,
        "repeats": len(done),
    }


# --------------------------------------------------------------------------------------- parts
def bench_in_process(settings: Settings, say: Callable[[str], None]) -> dict[str, Any]:
    """``run_sync`` in fresh interpreters: s/round, total, peak memory (medians)."""
    c = settings.in_process
    runs = []
    for r in range(c["repeats"]):
        say(f"in process: run {r + 1} of {c['repeats']}")
        runs.append(
            measure_child(_task(settings, "in-process", c["steps"]), settings.interval, 600)
        )
    return {"steps": c["steps"], **_summary(runs)}


def bench_simulation(settings: Settings, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """``simulate`` with each number of virtual SuperNodes, each run in a fresh interpreter."""
    c = settings.simulation
    cells = []
    for nodes in c["nodes"]:
        runs = []
        for r in range(c["repeats"]):
            say(f"simulation: {nodes} SuperNodes, run {r + 1} of {c['repeats']}")
            task = _task(settings, "simulation", c["steps"], nodes)
            runs.append(measure_child(task, settings.interval, c["timeout"]))
        cells.append({"nodes": nodes, "steps": c["steps"], **_summary(runs)})
    return cells


def _deploy_once(
    settings: Settings, nodes: int, workdir: Path, say: Callable[[str], None]
) -> dict[str, Any]:
    """Start a deployment of ``nodes`` SuperNodes, run the job once, stop it; its figures."""
    from riemfl.adapters.flower.local import LocalDeployment

    c = settings.deployment
    config = {
        "job": "scale",
        "problem": "kpca-synthetic",
        "problem-clients": settings.clients,
        "problem-seed": settings.problem_seed,
        "algorithm": "rfedproj",
        "local-steps": settings.local_steps,
        "steps": c["steps"],
        "seed": settings.seed,
        # every node starts a ClientApp process for the handshake: minutes for many nodes
        "registration-timeout": max(300.0, 10.0 * nodes),
    }
    deployment = LocalDeployment(nodes, workdir, startup_timeout=120 + 10 * nodes, tls=False)
    roots = lambda: [proc.pid for _, proc in deployment.processes]  # noqa: E731
    with TreeSampler(roots, settings.interval) as sampler:
        t0 = time.perf_counter()
        with deployment:
            started = time.perf_counter() - t0
            say(f"deployment: {nodes} SuperNodes up in {started:.0f} s; running")
            result = deployment.run(config, timeout=c["timeout"])
        total = time.perf_counter() - t0
    metrics = result["history"]["metrics"]
    times = np.diff(metrics["wall_time"]).tolist()
    return {
        **_drops(metrics["participants"], result["history"]["warnings"]),
        "round_s": median(times),
        "round_range_s": [min(times), max(times)],
        "rounds_s": times,
        "start_s": started,
        "total_s": total,
        "final_point": np.asarray(result["final_point"]).tolist(),
        **sampler.result(),
    }


def _next_size_blocked(cell: dict[str, Any], nodes: int, limits: dict[str, Any]) -> str | None:
    """Why the deployment of ``nodes`` SuperNodes is not tried after ``cell`` (None: it is)."""
    if "failed" in cell:
        return f"not tried: {cell['nodes']} SuperNodes failed"
    if "skipped" in cell:
        return f"not tried: {cell['nodes']} SuperNodes were not run"
    # linear in the nodes; the memory is the processes' own (anonymous) pages, which the next
    # size needs on top of what the machine's other processes use
    scale = nodes / cell["nodes"]
    time_s, memory = scale * cell["total_s"], scale * cell["peak_anon_bytes"]
    available = memory_available()
    if time_s > limits["max_run_s"]:
        return f"skipped: projected {time_s / 60:.0f} min > {limits['max_run_s'] / 60:.0f} min"
    if available and memory > limits["memory_fraction"] * available:
        return (
            f"skipped: projected {memory / 2**30:.1f} GiB of own memory > "
            f"{limits['memory_fraction']:.0%} of the {available / 2**30:.1f} GiB available"
        )
    return None


def bench_deployment(settings: Settings, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Loopback deployments of growing size until one fails or the next would not fit."""
    c = settings.deployment
    cells: list[dict[str, Any]] = []
    for nodes in c["nodes"]:
        blocked = _next_size_blocked(cells[-1], nodes, c) if cells else None
        if blocked:
            cells.append({"nodes": nodes, "steps": c["steps"], "skipped": blocked})
            say(f"deployment: {nodes} SuperNodes {blocked}")
            continue
        say(f"deployment: {nodes} SuperNodes ({memory_available() / 2**30:.1f} GiB available)")
        cell: dict[str, Any] = {"nodes": nodes, "steps": c["steps"], "repeats": 1}
        with tempfile.TemporaryDirectory(prefix="bench-flower-scale-") as tmp:
            try:
                cell |= _deploy_once(settings, nodes, Path(tmp), say)
            except Exception as exc:  # noqa: BLE001 - a size that fails is a result
                cell["failed"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                say(f"deployment: {nodes} SuperNodes failed: {cell['failed']}")
        cells.append(cell)
    return cells


# --------------------------------------------------------------------------------------- driver
def _machine() -> dict[str, Any]:
    import flwr
    import ray
    from _harness import machine_info

    return machine_info(
        {"torch_threads": None, "blas_threads": "1 (environment variables)"},
        flwr=flwr.__version__,
        ray=ray.__version__,
        memory_total_gib=round(os.sysconf("SC_PHYS_PAGES") * _PAGE / 2**30, 1),
        memory_available_gib=round(memory_available() / 2**30, 1),
    )


def _check_iterates(settings: Settings, result: dict[str, Any]) -> None:
    """Per Flower cell, the largest |difference| of its final points from ``run_sync``'s."""
    points: dict[int, np.ndarray] = {}
    cells = [*result.get("simulation", []), *result.get("deployment", [])]
    for cell in cells:
        finals = [r["final_point"] for r in cell.get("runs", [cell]) if "final_point" in r]
        if not finals:
            continue
        if cell["steps"] not in points:
            points[cell["steps"]] = reference_point(settings, cell["steps"])
        ref = points[cell["steps"]]
        cell["max_abs_diff"] = max(float(np.max(np.abs(np.asarray(f) - ref))) for f in finals)


def _ratios(result: dict[str, Any]) -> None:
    """Flower / in-process of s/round and peak memory, in every Flower cell that finished."""
    base = result.get("in-process", {})
    if "round_s" not in base:
        return
    for cell in [*result.get("simulation", []), *result.get("deployment", [])]:
        if "round_s" in cell:
            cell["time_ratio"] = cell["round_s"] / base["round_s"]
            cell["memory_ratio"] = cell["peak_bytes"] / base["peak_bytes"]


def run_benchmark(
    quick: bool = False,
    out: str | os.PathLike[str] | None = DEFAULT_OUT,
    *,
    settings: Settings | None = None,
    parts: Sequence[str] = PARTS,
    verbose: bool = False,
) -> dict[str, Any]:
    """Run the ``parts`` (of :data:`PARTS`); return a JSON-ready dict and write it to ``out``.

    Returns
    -------
    dict
        ``{"machine", "settings", "in-process", "simulation", "deployment", "load_average_end",
        "total_s"}`` (the parts run).
    """
    s = settings or (Settings.quick() if quick else Settings())
    started = time.perf_counter()

    def say(msg: str) -> None:
        if verbose:
            print(f"  [{time.perf_counter() - started:6.1f} s] {msg}", file=sys.stderr, flush=True)

    result: dict[str, Any] = {"machine": _machine(), "settings": {**asdict(s), "parts": parts}}
    _, problem, rule = _problem_and_rule(_task(s, "in-process", 0))
    result["settings"]["step_size"] = rule.step_size
    result["settings"]["point_shape"] = list(problem.manifold.point_shape)
    if "in-process" in parts:
        result["in-process"] = bench_in_process(s, say)
    if "simulation" in parts:
        result["simulation"] = bench_simulation(s, say)
    if "deployment" in parts:
        result["deployment"] = bench_deployment(s, say)
    _check_iterates(s, result)
    _ratios(result)
    result["load_average_end"] = round(os.getloadavg()[0], 2)
    result["total_s"] = time.perf_counter() - started
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1))
    return result


# --------------------------------------------------------------------------------------- report
def _row(path: str, cell: dict[str, Any], clients: int) -> str:
    nodes = cell.get("nodes")
    per_node = "-"
    if nodes:  # numpy.array_split's block sizes
        fewest, most = clients // nodes, -(-clients // nodes)
        per_node = str(fewest) if fewest == most else f"{fewest}-{most}"
    runs = f"{cell['steps']} x {cell['repeats']}" if cell.get("repeats") else "-"
    head = f"| {path} | {nodes or '-'} | {per_node} | {runs} |"
    if "round_s" not in cell:
        why = cell.get("skipped") or f"failed: {cell.get('failed', 'not run')}"
        return f"{head} {why} | | | | | | | |"
    low, high = cell["round_range_s"]
    ratio = cell.get("time_ratio")
    mem_ratio = cell.get("memory_ratio")
    same = cell.get("max_abs_diff")
    return (
        f"{head} {cell['round_s']:.3g} | {low:.3g} to {high:.3g} | "
        f"{'-' if ratio is None else f'{ratio:.0f}'} | {cell['total_s']:.1f} | "
        f"{cell['peak_bytes'] / MIB:.0f} | {cell['peak_anon_bytes'] / MIB:.0f} | "
        f"{'-' if mem_ratio is None else f'{mem_ratio:.1f}'} | "
        f"{'-' if same is None else f'{same:.0e}'} |"
    )


def format_table(result: dict[str, Any]) -> str:
    """A Markdown table: one row per path and size."""
    clients = result["settings"]["clients"]
    lines = [
        "| path | SuperNodes | clients per node | rounds x runs | s / round | rounds' range (s) "
        "| time / in-process | total s | peak RSS (MiB) | of which anonymous (MiB) "
        "| RSS / in-process | max abs diff to run_sync |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    if "in-process" in result:
        lines.append(_row("in process (run_sync)", result["in-process"], clients))
    for cell in result.get("simulation", []):
        lines.append(_row("simulation (Ray)", cell, clients))
    for cell in result.get("deployment", []):
        lines.append(_row("deployment (loopback)", cell, clients))
    return "\n".join(lines)


def _header(result: dict[str, Any]) -> str:
    m, s = result["machine"], result["settings"]
    return "\n".join(
        [
            f"riemfl {m['riemfl']}, flwr {m['flwr']}, ray {m['ray']}; numpy {m['numpy']}, "
            f"python {m['python']}",
            f"{m['processor']} ({m['cpu_count']} CPUs, {m['memory_total_gib']} GiB, "
            f"{m['memory_available_gib']} GiB available); load average "
            f"{m['load_average_1min']} at the start, {result['load_average_end']} at the end",
            f"kpca-synthetic, {s['clients']} clients (seed {s['problem_seed']}), points "
            f"{tuple(s['point_shape'])}; RFedProj tau={s['local_steps']}, "
            f"eta={s['step_size']:.3g} (the registry's default); run seed {s['seed']}",
        ]
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run from the command line: print the table, write the JSON file."""
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--quick", action="store_true", help="20 clients, 2 nodes (under a minute)")
    cli.add_argument("--out", default=DEFAULT_OUT, help="JSON file (default: %(default)s)")
    cli.add_argument(
        "--parts", default=",".join(PARTS), help="comma-separated (default: %(default)s)"
    )
    cli.add_argument("--sim-nodes", help="virtual SuperNodes, comma-separated (e.g. 10,100,1000)")
    cli.add_argument("--deploy-nodes", help="SuperNodes to try in order (e.g. 10,30,100)")
    cli.add_argument("--one", help=argparse.SUPPRESS)  # one measured run (internal)
    opts = cli.parse_args(argv)
    if opts.one:
        print(ANSWER + json.dumps(_one(json.loads(opts.one))), flush=True)
        return {}
    parts = tuple(p for p in opts.parts.split(",") if p)
    unknown = set(parts) - set(PARTS)
    if unknown:
        cli.error(f"unknown parts {sorted(unknown)}; choose from {','.join(PARTS)}")
    settings = Settings.quick() if opts.quick else Settings()
    if opts.sim_nodes:
        settings.simulation["nodes"] = tuple(int(n) for n in opts.sim_nodes.split(","))
    if opts.deploy_nodes:
        settings.deployment["nodes"] = tuple(int(n) for n in opts.deploy_nodes.split(","))
    result = run_benchmark(out=opts.out, settings=settings, parts=parts, verbose=True)
    print(_header(result), format_table(result), sep="\n\n")
    print(f"\ntotal {result['total_s']:.1f} s; results written to {opts.out}")
    return result


if __name__ == "__main__":
    main()

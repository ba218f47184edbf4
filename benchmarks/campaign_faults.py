"""The fault/kill campaign of the federated run core: kills, corrupt checkpoints, client faults.

Three parts; the goal of each is 100% survived, 0 runs lost and 0 silent wrong resumes.

1. **Kills.** ``riemfl run kpca-synthetic`` as a subprocess, per engine (``sync``: RFedProj;
   ``async``: FedBuff), with a checkpoint every k steps. One uninterrupted reference run, then
   *chains*: a run is SIGKILLed after a random delay (drawn from a fraction of the reference's
   wall time, seeded), started again with the same command, killed again, ... until it exits 0;
   then its ``history.json`` is compared with the reference's (``History.same_results``: equal
   in everything but the wall-clock and CPU-time columns) and so is the final state in its
   checkpoint (the output point bit for bit, and the whole run state but its CPU-time total).
   Chains follow one another until the engine has had its kills. Every run of a chain starts in
   the chain's folder with ``--out run``, so the command line that the history records is the
   reference's. Counted: kills, kills that landed during a checkpoint write (a ``*.tmp`` file
   beside the checkpoint right after the kill), resumes (restarts that found a checkpoint), the
   checkpointed step each kill left (how far the run had come: distinct values show that kills
   landed at many rounds), bit-identical finals, silent wrong resumes (a chain that finished with
   other results), runs lost (a chain that did not finish: an exit status other than 0 after a
   restart, a timeout, or too many attempts) and ``*.tmp`` files left at the end. Every
   subprocess is bounded by a timeout.
2. **Byte flips.** Seeded single-byte flips (one position drawn in each of n equal slices of
   the file, XOR with a non-zero byte) of a real checkpoint written by ``run_sync`` (and of one
   by ``run_async``); each flipped file is resumed, which must raise
   :class:`riemfl.errors.CheckpointError`. Counted: refused, resumed silently, other exception,
   by region of the file (magic line, hash, header length, JSON header, array bytes). The
   unflipped checkpoint is resumed too, as a control: it must end where an uninterrupted run
   ends.
3. **Injected faults.** Each kind (``raise``: the client's computation raises; ``nan``,
   ``inf``: a non-finite upload; ``complex``; ``shape``: a point with one column less;
   ``dtype``: int64 instead of float64) at a rate of 10% per client-round, from a seeded
   schedule, in ``run_sync`` (an RFedProj whose client rule corrupts the scheduled clients' rows
   of its stacked upload, or raises), ``run_async`` (a trainer wrapper that corrupts the
   scheduled arrivals) and ``run_floral`` (a FloralTrainer whose scheduled local runs return a
   corrupted vector, or raise). A fault *survived* when the run completed and
   ``history.warnings`` records it with its client (and round, or its place among the
   arrivals) and a reason of its kind. Counted: injected, survived, missed (completed without a
   matching warning: the corrupt upload was taken), unexpected drops (warnings for clients
   that had no fault) and runs lost (the run raised).

Usage::

    python benchmarks/campaign_faults.py [--quick] [--out results/campaign_faults.json]
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    # One BLAS/OpenMP thread, set before numpy loads (its pool size is fixed at load time).
    os.environ.update(
        dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1")
    )

import argparse  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helpers lie beside this script
from _harness import machine_info, single_thread, write_result  # noqa: E402
from _report import child_env, table  # noqa: E402

from riemfl.errors import CheckpointError  # noqa: E402
from riemfl.federated import (  # noqa: E402
    ClientDroppedWarning,
    ExponentialTime,
    FedBuff,
    History,
    ProblemTrainer,
    RFedProj,
    RunOptions,
    run_async,
    run_sync,
)
from riemfl.federated.checkpoint import CheckpointFile, load_checkpoint  # noqa: E402
from riemfl.problems import KPCAProblem  # noqa: E402

__all__ = [
    "Settings",
    "KINDS",
    "corrupt",
    "FaultyRFedProj",
    "FaultyTrainer",
    "kill_campaign",
    "flip_campaign",
    "fault_campaign",
    "run_campaign",
    "format_tables",
    "main",
]

DEFAULT_OUT = "results/campaign_faults.json"
#: the injected fault kinds, and a piece of the reason the engines must record for each
KINDS = {
    "raise": "RuntimeError: injected fault",
    "nan": "non-finite",
    "inf": "non-finite",
    "complex": "complex dtype",
    "shape": "has shape",
    "dtype": "dtype int64",
}
#: ``riemfl run`` arguments of each engine (the problem is kpca-synthetic: 30 clients, St(20, 5))
ENGINE_ARGS = {
    "sync": ("--algorithm", "rfedproj"),
    "async": ("--engine", "async", "--algorithm", "fedbuff"),
}
CHECKPOINT = "checkpoint.rfl"  # riemfl.cli.CHECKPOINT_NAME
RUN_DIR = "run"


# --------------------------------------------------------------------------------------- settings
@dataclass
class Settings:
    """Sizes of the campaign.

    Attributes
    ----------
    kills : dict
        Per engine: ``rounds`` (R; server steps for async) and ``checkpoint_every`` (k) of the
        CLI run. Shared: ``min_kills`` (kills per engine), ``delay`` (a kill lands after a
        uniform fraction in this range of the reference run's wall time), ``max_attempts``
        (per chain; more counts the chain as lost), ``max_chains`` and ``timeout_s`` (bound of
        every subprocess).
    flips : dict
        ``sync`` and ``async``: the number of byte flips of each engine's checkpoint, of which
        ``per_region`` land in each kind of region of the file (magic line; each record's
        lengths, their check, its digest, its rows part and its state part) and the rest in
        equal slices of the whole file; ``rounds``: the run's
        length (the checkpoint is written half-way).
    faults : dict
        ``rate`` (per client-round), ``sync_rounds``, ``async_steps`` (FedBuff server steps of
        ``buffer`` arrivals), ``floral_rounds``.
    seed : int
        Seed of the kill delays, the flip positions and the fault schedules.
    is_quick : bool
    """

    kills: dict[str, Any] = field(
        default_factory=lambda: {
            "sync": {"rounds": 600, "checkpoint_every": 4},
            "async": {"rounds": 400, "checkpoint_every": 4},
            "min_kills": 20,
            "delay": (0.25, 1.05),
            "max_attempts": 60,
            "max_chains": 25,
            "timeout_s": 180.0,
        }
    )
    flips: dict[str, Any] = field(
        default_factory=lambda: {"sync": 100, "async": 30, "rounds": 20, "per_region": 3}
    )
    faults: dict[str, Any] = field(
        default_factory=lambda: dict(
            rate=0.1, sync_rounds=30, async_steps=60, buffer=5, floral_rounds=20
        )
    )
    seed: int = 0
    is_quick: bool = False

    @classmethod
    def quick(cls) -> Settings:
        """Tiny runs with the full structure (seconds per part)."""
        kills = {
            **cls().kills,
            "min_kills": 2,
            "delay": (0.3, 0.9),
            "max_attempts": 30,
            "max_chains": 6,
            "timeout_s": 120.0,
            "sync": {"rounds": 30, "checkpoint_every": 3},
            "async": {"rounds": 20, "checkpoint_every": 2},
        }
        return cls(
            kills=kills,
            flips={"sync": 12, "async": 6, "rounds": 8, "per_region": 1},
            faults=dict(rate=0.1, sync_rounds=4, async_steps=8, buffer=5, floral_rounds=3),
            is_quick=True,
        )


# --------------------------------------------------------------------------------------- kills
def cli_command(engine: str, rounds: int, every: int) -> list[str]:
    """The ``riemfl run`` command of ``engine`` (run in the chain's folder: ``--out run``)."""
    return [
        sys.executable,
        "-m",
        "riemfl",
        "run",
        "kpca-synthetic",
        *ENGINE_ARGS[engine],
        "--steps",
        str(rounds),
        "--checkpoint-every",
        str(every),
        "--no-progress",
        "--out",
        RUN_DIR,
    ]


def _start_and_maybe_kill(
    cmd: list[str], cwd: Path, delay: float | None, timeout: float
) -> dict[str, Any]:
    """Run ``cmd`` in ``cwd``; SIGKILL it after ``delay`` seconds if it is still running (after
    ``timeout`` seconds when ``delay`` is None: a timeout).

    Returns ``{"killed", "timed_out", "rc", "wall_s"}``; output goes to ``cwd/attempts.log``.
    """
    with open(cwd / "attempts.log", "ab") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=child_env())
        killed = timed_out = False
        try:
            rc = proc.wait(timeout=timeout if delay is None else delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            rc = proc.wait(timeout=60)
            killed, timed_out = delay is not None, delay is None
    return {"killed": killed, "timed_out": timed_out, "rc": rc, "wall_s": time.perf_counter() - t0}


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.tmp"))


def _read_checkpoint(path: Path) -> dict[str, Any] | None:
    """The checkpoint at ``path`` (None if there is none), read from a copy.

    A copy, because loading deletes the stale temporary files beside the file it reads: the
    run's folder is left for the engine to clean.
    """
    if not path.exists():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        shutil.copyfile(path, copy)
        return load_checkpoint(copy)


def _torn_tail(path: Path) -> int:
    """Bytes of a record cut short at the end of the checkpoint (what a kill inside an append
    leaves; the next save drops them), 0 if none or no checkpoint; read from a copy."""
    if not path.exists():
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        shutil.copyfile(path, copy)
        reader = CheckpointFile(copy)
        try:
            reader.load(rows=False)
        except CheckpointError:  # counted by _checkpoint_step as corrupt
            return 0
        return reader.dropped


def _checkpoint_step(path: Path) -> int | str | None:
    try:
        payload = _read_checkpoint(path)
    except CheckpointError as exc:  # a kill must never leave this: reported
        return f"corrupt: {exc}"
    return None if payload is None else int(payload["step"])


def final_point(payload: dict[str, Any], engine: str) -> np.ndarray:
    """The output point in a run's checkpoint: RFedProj's P(x) or the async current model."""
    state = payload["state"]
    if engine == "sync":
        return state["server"]["px"]
    store = state["store"]
    return store["versions"][store["current"]]


def same_tree(a: Any, b: Any, skip: Sequence[str] = ("cpu_time",)) -> bool:
    """Equal nested run states: arrays byte for byte, floats bit for bit (NaN equal NaN),
    except under the keys ``skip`` (measured columns)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(k in skip or same_tree(a[k], b[k], skip) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same_tree(x, y, skip) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, float) and isinstance(b, float):
        return np.float64(a).tobytes() == np.float64(b).tobytes()
    return type(a) is type(b) and a == b


def _outcome(folder: Path, engine: str, ref: dict[str, Any]) -> dict[str, Any]:
    """Compare a finished chain's history and final checkpoint with the reference's."""
    history = History.from_json(folder / RUN_DIR / "history.json")
    payload = _read_checkpoint(folder / RUN_DIR / CHECKPOINT)
    point = final_point(payload, engine)
    same_history = history.same_results(ref["history"])
    same_point = point.tobytes() == ref["point"].tobytes()
    same_state = same_tree(payload["state"], ref["payload"]["state"])
    return {
        "same_history": same_history,
        "same_final_point": same_point,
        "same_state": same_state,
        "identical": same_history and same_point and same_state,
        "final_step": int(payload["step"]),
    }


def _chain(
    cmd: list[str], folder: Path, delays: Callable[[], float], budget: int, s: Settings
) -> dict[str, Any]:
    """Kill and restart one run until it exits 0 (or is lost); every attempt recorded.

    Each attempt is killed after ``delays()`` seconds while fewer than ``budget`` kills have
    landed in this chain; then the run is left to finish.
    """
    folder.mkdir(parents=True)
    path = folder / RUN_DIR / CHECKPOINT
    attempts: list[dict[str, Any]] = []
    lost, kills = None, 0
    while True:
        before = _checkpoint_step(path)
        delay = delays() if kills < budget else None
        a = _start_and_maybe_kill(cmd, folder, delay, s.kills["timeout_s"])
        a |= {"delay_s": delay, "step_before": before, "resumed": before is not None}
        if a["killed"]:
            a["tmp_after_kill"] = _temporaries(path.parent) if path.parent.exists() else []
            a["torn_tail_after_kill"] = _torn_tail(path)
            a["step_after"] = _checkpoint_step(path)
        attempts.append(a)
        kills += a["killed"]
        if a["killed"]:
            if len(attempts) >= s.kills["max_attempts"]:
                lost = f"still unfinished after {len(attempts)} attempts"
                break
            continue
        if a["timed_out"]:
            lost = f"timed out after {s.kills['timeout_s']} s"
        elif a["rc"] != 0:
            tail = (folder / "attempts.log").read_text(errors="replace")[-600:]
            lost = f"exit status {a['rc']}: {tail}"
        break
    return {
        "folder": folder.name,
        "attempts": attempts,
        "lost": lost,
        "tmp_left": _temporaries(path.parent) if path.parent.exists() else [],
    }


def kill_campaign(engine: str, s: Settings, work: Path, rng: np.random.Generator) -> dict[str, Any]:
    """SIGKILL chains of ``riemfl run`` for one engine against an uninterrupted reference."""
    spec = s.kills[engine]
    cmd = cli_command(engine, spec["rounds"], spec["checkpoint_every"])
    (work / "reference").mkdir(parents=True)
    reference = _start_and_maybe_kill(cmd, work / "reference", None, s.kills["timeout_s"])
    if reference["rc"] != 0:
        log = (work / "reference" / "attempts.log").read_text(errors="replace")[-800:]
        raise RuntimeError(f"the {engine} reference run failed ({reference}): {log}")
    payload = _read_checkpoint(work / "reference" / RUN_DIR / CHECKPOINT)
    ref = {
        "history": History.from_json(work / "reference" / RUN_DIR / "history.json"),
        "payload": payload,
        "point": final_point(payload, engine),
    }
    t_ref = reference["wall_s"]
    lo, hi = s.kills["delay"]
    kills, chains = 0, []
    while kills < s.kills["min_kills"] and len(chains) < s.kills["max_chains"]:
        chain = _chain(
            cmd,
            work / f"chain{len(chains):02d}",
            lambda: float(rng.uniform(lo, hi) * t_ref),
            s.kills["min_kills"] - kills,
            s,
        )
        kills += sum(a["killed"] for a in chain["attempts"])
        if chain["lost"] is None:
            chain |= _outcome(work / chain["folder"], engine, ref)
        chains.append(chain)
    return _kill_summary(spec, cmd, t_ref, chains)


def _kill_summary(
    spec: dict[str, Any], cmd: list[str], t_ref: float, chains: list[dict]
) -> dict[str, Any]:
    """The counts of one engine's kill chains (module docstring), with every attempt."""
    attempts = [a for c in chains for a in c["attempts"]]
    killed = [a for a in attempts if a["killed"]]
    finished = [c for c in chains if c["lost"] is None]
    steps = [a["step_after"] for a in killed]
    return {
        "command": "riemfl " + " ".join(cmd[3:]),
        "rounds": spec["rounds"],
        "checkpoint_every": spec["checkpoint_every"],
        "reference_wall_s": t_ref,
        "chains": len(chains),
        "kills": len(killed),
        # a kill inside the first (atomic) write leaves a temporary file, one inside an append
        # a torn tail
        "kills_during_checkpoint_write": sum(
            bool(a["tmp_after_kill"]) or a["torn_tail_after_kill"] > 0 for a in killed
        ),
        "kills_before_first_checkpoint": sum(a["step_after"] is None for a in killed),
        "corrupt_after_kill": sum(isinstance(x, str) for x in steps),
        "resumes": sum(a["resumed"] for a in attempts),
        "restarts": len(attempts) - len(chains),
        "kill_steps": sorted(x for x in steps if isinstance(x, int)),
        "distinct_kill_steps": len({x for x in steps if isinstance(x, int)}),
        "finished": len(finished),
        "bit_identical_finals": sum(c["identical"] for c in finished),
        "silent_wrong_resumes": sum(not c["identical"] for c in finished),
        "runs_lost": len(chains) - len(finished),
        "tmp_left": sorted({t for c in chains for t in c["tmp_left"]}),
        "detail": chains,
    }


# --------------------------------------------------------------------------------------- flips
def _flip_problem() -> KPCAProblem:
    return KPCAProblem.synthetic(n_clients=10, d=12, k=3, p=15, seed=1)


def _flip_runner(engine: str, every: int) -> Callable[..., History]:
    """``run(rounds, **checkpointing)``: the engine's run on the small kPCA problem, with the
    :class:`RunOptions` fields ``checkpointing``, recording every round (sync) or every
    ``every`` steps (async)."""
    problem = _flip_problem()
    if engine == "sync":
        return lambda rounds, **kw: run_sync(
            problem,
            RFedProj(4e-3, 5),
            rounds,
            batch_size=5,
            clients_per_round=6,
            options=RunOptions(seed=2, **kw),
        )
    trainer = ProblemTrainer(problem, 4e-3, 5, batch_size=5)
    return lambda rounds, **kw: run_async(
        trainer,
        FedBuff(buffer_size=4),
        rounds,
        timing=ExponentialTime(1.0),
        options=RunOptions(seed=2, record_every=every, **kw),
    )


def _regions(data: bytes) -> list[tuple[str, int]]:
    """(region, end offset) of a checkpoint (format 3): the magic line, then per record its two
    lengths, their check, its digest, its rows part and its state part."""
    end = data.index(b"\n") + 1
    regions = [("magic", end)]
    while end + 56 <= len(data):
        rows, state = (int.from_bytes(data[end + i : end + i + 8], "little") for i in (0, 8))
        for name, size in (("lengths", 16), ("check", 8), ("digest", 32), ("rows", rows)):
            end += size
            regions.append((name, end))
        end += state
        regions.append(("state", end))
    return regions


def flip_positions(
    rng: np.random.Generator, regions: list[tuple[str, int]], n: int, per_region: int
) -> list[int]:
    """``per_region`` positions drawn in each kind of region (a name may stand for a region of
    every record: the first draw of a kind in its first region, the others in one drawn at
    random), the others one in each of equal slices of the whole file (sorted)."""
    starts = [0] + [end for _, end in regions[:-1]]
    spans: dict[str, list[tuple[int, int]]] = {}
    for start, (name, end) in zip(starts, regions, strict=True):
        if end > start:
            spans.setdefault(name, []).append((start, end))
    targeted = []
    for kind in spans.values():
        for k in range(per_region):
            a, b = kind[0] if k == 0 else kind[int(rng.integers(len(kind)))]
            targeted.append(int(rng.integers(a, b)))
    m, size = n - len(targeted), regions[-1][1]
    spread = [
        int(rng.integers(j * size // m, max((j + 1) * size // m, j * size // m + 1)))
        for j in range(m)
    ]
    return sorted(targeted + spread)


def flip_campaign(engine: str, s: Settings, work: Path, rng: np.random.Generator) -> dict[str, Any]:
    """Flip one byte at a time in a real checkpoint of ``engine``; each resume must refuse."""
    n, rounds = s.flips[engine], s.flips["rounds"]
    # the checkpoint's step (half-way) lies on the recording grid: a run always records its last
    # step, so a run stopped off the grid and then extended keeps that extra row
    every = max(1, rounds // 4)
    run = _flip_runner(engine, every)
    path = work / f"{engine}.rfl"
    reference = run(rounds)
    run(2 * every, checkpoint=path, checkpoint_every=every)
    pristine = path.read_bytes()
    regions = _regions(pristine)
    control = run(rounds, checkpoint=path)  # the unflipped checkpoint resumes exactly
    control_ok = control.same_results(reference) and np.array_equal(
        control.final_point, reference.final_point
    )
    outcomes = {"refused": 0, "resumed_silently": 0, "other_exception": 0}
    by_region = {name: dict(outcomes) for name, _ in regions}
    flips = []
    for pos in flip_positions(rng, regions, n, s.flips["per_region"]):
        xor = int(rng.integers(1, 256))
        data = bytearray(pristine)
        data[pos] ^= xor
        path.write_bytes(bytes(data))
        region = next(name for name, end in regions if pos < end)
        entry = {"position": pos, "xor": xor, "region": region}
        try:
            run(rounds, checkpoint=path)
        except CheckpointError:
            entry["outcome"] = "refused"
        except Exception as exc:  # noqa: BLE001 - counted, the campaign goes on
            entry |= {"outcome": "other_exception", "error": f"{type(exc).__name__}: {exc}"[:300]}
        else:
            entry["outcome"] = "resumed_silently"
        outcomes[entry["outcome"]] += 1
        by_region[region][entry["outcome"]] += 1
        flips.append(entry)
    return {
        "file_bytes": len(pristine),
        "flips": n,
        **outcomes,
        "control_resume_ok": bool(control_ok),
        "regions": dict(regions),
        "by_region": by_region,
        "detail": flips,
    }


# --------------------------------------------------------------------------------------- faults
def corrupt(x: np.ndarray, rows: Sequence[int], kind: str) -> np.ndarray:
    """A stack of uploads ``x`` whose rows ``rows`` carry the fault ``kind``.

    ``nan``, ``inf`` and ``complex`` change those rows only (the stack turns complex as a whole
    for ``complex``); ``shape`` and ``dtype`` change the whole stack (one array has one shape
    and one dtype: the engine must rerun the clients one by one to find the culprits);
    ``raise`` raises.
    """
    rows = list(rows)
    if kind == "raise":
        raise RuntimeError(f"injected fault in stack rows {rows}")
    if kind in ("nan", "inf"):
        x = np.array(x, dtype=np.float64)
        x[rows] = np.nan if kind == "nan" else np.inf
        return x
    if kind == "complex":
        x = x.astype(np.complex128)
        x[rows] += 1e-3j
        return x
    if kind == "shape":
        return x[..., :-1]
    if kind == "dtype":
        return x.astype(np.int64)
    raise ValueError(f"unknown fault kind {kind!r}")


def _corrupt_one(x: np.ndarray, kind: str) -> np.ndarray:
    return corrupt(np.asarray(x)[None], [0], kind)[0]


class FaultyRFedProj(RFedProj):
    """RFedProj whose client rule corrupts the uploads of the scheduled (round, client) pairs.

    Parameters
    ----------
    step_size, local_steps : float, int
    kind : str
        A key of :data:`KINDS`.
    schedule : numpy.ndarray of bool, shape (rounds + 1, n_clients)
        ``schedule[r, i]``: client i's upload of round r is faulty (row 0 unused).
    """

    def __init__(self, step_size: float, local_steps: int, kind: str, schedule: np.ndarray):
        super().__init__(step_size, local_steps)
        self.kind, self._schedule, self._round = kind, schedule, 1

    def client_step(self, ctx, phase, message, clients):
        hit = np.flatnonzero(self._schedule[self._round, ctx.clients])
        if hit.size and self.kind == "raise":
            corrupt(np.zeros(1), hit, "raise")
        uploads, rows = super().client_step(ctx, phase, message, clients)
        if hit.size:
            uploads = {"x": corrupt(uploads["x"], hit, self.kind)}
        return uploads, rows

    def server_step_from_sum(self, manifold, server, phase, message, total, count):
        # RFedProj's server step reads only the sum (the engines call this, never server_step).
        # One phase per round: the client rules after this are next round's.
        self._round += 1
        return super().server_step_from_sum(manifold, server, phase, message, total, count)


class FaultyTrainer:
    """A trainer whose arrivals are corrupted at ``rate``, drawn from its own seeded generator
    (after the inner training, which keeps its client generators' draws unchanged).

    Attributes
    ----------
    injected : list of (int, int)
        (arrival number, client) of every corrupted arrival, in order.
    """

    def __init__(self, inner: ProblemTrainer, kind: str, rate: float, seed: int) -> None:
        self.inner, self.kind, self.rate = inner, kind, rate
        self.manifold, self.n_clients = inner.manifold, inner.n_clients
        self._rng = np.random.default_rng(seed)
        self.calls, self.injected = 0, []

    def n_samples(self, i: int) -> int:
        return self.inner.n_samples(i)

    def num_batches(self, i: int, epochs: int | None = None) -> int:
        return self.inner.num_batches(i, epochs)

    def evaluate(self, x: Any) -> dict[str, float]:
        return self.inner.evaluate(x)

    def train(self, i: int, start: Any, rng: np.random.Generator, epochs: int | None = None):
        call, self.calls = self.calls, self.calls + 1
        out = self.inner.train(i, start, rng, epochs)
        if self._rng.random() >= self.rate:
            return out
        self.injected.append((call, int(i)))
        return _corrupt_one(out, self.kind)


def _faulty_floral_trainer(kind: str, schedule: np.ndarray):
    """A tiny FLoRAL trainer (the synthetic linear task, 10 clients) whose scheduled local runs
    (full participation: the calls come round by round in client order) return a corrupted
    vector or raise."""
    import torch
    from torch import nn

    from riemfl.nn.floral import FloralTrainer, floralize, synthetic_linear

    class FaultyFloral(FloralTrainer):
        def train(self, i, start, rng, epochs=None):
            r, self._calls = 1 + self._calls // self.n_clients, self._calls + 1
            out = super().train(i, start, rng, epochs)
            return _corrupt_one(out, kind) if schedule[r, i] else out

    task = synthetic_linear(seed=0)
    torch.manual_seed(0)
    model = floralize(nn.Sequential(nn.Linear(10, 3)), 2, rank=1, routing="fixed", seed=0)
    trainer = FaultyFloral(
        model, task.clients, loss="mse", lr=0.1, batch_size=4, clusters=task.clusters
    )
    trainer._calls = 0
    return trainer


def _schedule(rng: np.random.Generator, rounds: int, n: int, rate: float) -> np.ndarray:
    """Faulty (round, client) pairs at ``rate`` (row 0 unused); at least one."""
    schedule = rng.random((rounds + 1, n)) < rate
    schedule[0] = False
    if not schedule.any():
        schedule[rng.integers(1, rounds + 1), rng.integers(n)] = True
    return schedule


def _judge_rounds(h: History, schedule: np.ndarray, kind: str) -> dict[str, int]:
    """Match the warnings of a synchronous run to the scheduled (round, client) faults."""
    injected = {(int(r), int(i)) for r, i in zip(*np.nonzero(schedule), strict=True)}
    recorded = {(w["round"], w["client"]) for w in h.warnings if KINDS[kind] in w["reason"]}
    dropped = {(w["round"], w["client"]) for w in h.warnings}
    return {
        "survived": len(injected & recorded),
        "missed": len(injected - dropped),
        "wrong_reason": len((injected & dropped) - recorded),
        "unexpected_drops": len(dropped - injected),
    }


def _judge_arrivals(h: History, trainer: FaultyTrainer, kind: str) -> dict[str, int]:
    """Match the warnings of an asynchronous run to the corrupted arrivals, in order."""
    survived = missed = wrong = 0
    refused = [not a for a in h.log["applied"]]
    for m, (call, client) in enumerate(trainer.injected):
        w = h.warnings[m] if m < len(h.warnings) else None
        if not refused[call] or w is None or w["client"] != client:
            missed += 1
        elif KINDS[kind] not in w["reason"]:
            wrong += 1
        else:
            survived += 1
    return {
        "survived": survived,
        "missed": missed,
        "wrong_reason": wrong,
        "unexpected_drops": max(0, len(h.warnings) - len(trainer.injected)),
    }


def _one_fault_run(engine: str, kind: str, s: Settings, seed: int) -> dict[str, Any]:
    """One run of ``engine`` with faults of ``kind``; its injected, survived and lost counts."""
    f = s.faults
    rng = np.random.default_rng(seed)
    problem = KPCAProblem.synthetic(seed=seed)  # the paper's 30 clients on St(20, 5)
    if engine == "sync":
        schedule = _schedule(rng, f["sync_rounds"], problem.n_clients, f["rate"])
        run = lambda: run_sync(  # noqa: E731
            problem,
            FaultyRFedProj(4e-3, 5, kind, schedule),
            f["sync_rounds"],
            options=RunOptions(seed=seed),
        )
        judge = lambda h: _judge_rounds(h, schedule, kind)  # noqa: E731
        injected = int(schedule.sum())
    elif engine == "async":
        trainer = FaultyTrainer(ProblemTrainer(problem, 4e-3, 5), kind, f["rate"], seed)
        run = lambda: run_async(  # noqa: E731
            trainer,
            FedBuff(buffer_size=f["buffer"]),
            f["async_steps"],
            max_failures=None,
            timing=ExponentialTime(1.0),
            options=RunOptions(seed=seed, record_every=5),
        )
        judge = lambda h: _judge_arrivals(h, trainer, kind)  # noqa: E731
        injected = None  # known after the run
    else:
        schedule = _schedule(rng, f["floral_rounds"], 10, f["rate"])
        floral = _faulty_floral_trainer(kind, schedule)
        from riemfl.nn.floral import run_floral

        options = RunOptions(seed=seed, record_every=5)
        run = lambda: run_floral(floral, f["floral_rounds"], options=options)  # noqa: E731
        judge = lambda h: _judge_rounds(h, schedule, kind)  # noqa: E731
        injected = int(schedule.sum())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClientDroppedWarning)
        try:
            history = run()
        except Exception as exc:  # noqa: BLE001 - a lost run is what this counts
            history, error = None, f"{type(exc).__name__}: {exc}"[:400]
    if engine == "async":
        injected = len(trainer.injected)
    out: dict[str, Any] = {"kind": kind, "seed": seed, "injected": injected}
    if history is None:
        return out | {
            "lost": True,
            "error": error,
            "survived": 0,
            "missed": 0,
            "wrong_reason": 0,
            "unexpected_drops": 0,
        }
    finite = bool(np.isfinite(history.final_point).all() and np.isrealobj(history.final_point))
    return out | {"lost": False, "final_point_finite_real": finite, **judge(history)}


def fault_campaign(engine: str, s: Settings) -> dict[str, Any]:
    """Every fault kind injected into runs of ``engine`` (``sync``, ``async`` or ``floral``)."""
    runs = [_one_fault_run(engine, kind, s, s.seed + j) for j, kind in enumerate(KINDS)]
    totals = {
        key: sum(r[key] for r in runs)
        for key in ("injected", "survived", "missed", "wrong_reason", "unexpected_drops")
    }
    return {"runs": runs, **totals, "runs_lost": sum(r["lost"] for r in runs)}


# --------------------------------------------------------------------------------------- campaign
def run_campaign(settings: Settings | None = None, *, verbose: bool = False) -> dict[str, Any]:
    """Run the three parts; return the results as a JSON-ready dict (nothing written)."""
    s = settings or Settings()
    started = time.perf_counter()

    def say(msg: str) -> None:
        if verbose:
            print(f"  [{time.perf_counter() - started:6.1f} s] {msg}", file=sys.stderr, flush=True)

    rng = np.random.default_rng(s.seed)
    seeds = rng.spawn(4)
    result: dict[str, Any] = {"settings": asdict(s)}
    with single_thread() as threads, tempfile.TemporaryDirectory(prefix="rfl-campaign-") as tmp:
        work = Path(tmp)
        result["machine"] = machine_info(threads)
        result["kills"] = {}
        for engine, g in zip(ENGINE_ARGS, seeds[:2], strict=True):
            say(f"kills: {engine} engine")
            result["kills"][engine] = kill_campaign(engine, s, work / f"kills-{engine}", g)
        say("byte flips")
        (work / "flips").mkdir()
        result["flips"] = {}
        for engine in ("sync", "async"):
            result["flips"][engine] = flip_campaign(engine, s, work / "flips", seeds[2])
        result["faults"] = {}
        for engine in ("sync", "async", "floral"):
            say(f"injected faults: {engine}")
            result["faults"][engine] = fault_campaign(engine, s)
    result["goals"] = _goals(result)
    result["total_s"] = time.perf_counter() - started
    return result


def _goals(result: dict[str, Any]) -> dict[str, Any]:
    """Per part and engine: 100% survived, 0 runs lost, 0 silent wrong resumes."""
    goals = {}
    for engine, k in result["kills"].items():
        goals[f"kills/{engine}"] = bool(
            k["runs_lost"] == 0
            and k["silent_wrong_resumes"] == 0
            and not k["tmp_left"]
            and k["bit_identical_finals"] == k["chains"]
            and k["corrupt_after_kill"] == 0
        )
    for engine, f in result["flips"].items():
        goals[f"flips/{engine}"] = bool(f["refused"] == f["flips"] and f["control_resume_ok"])
    for engine, f in result["faults"].items():
        goals[f"faults/{engine}"] = bool(
            f["runs_lost"] == 0 and f["survived"] == f["injected"] and f["unexpected_drops"] == 0
        )
    return {"met": sum(goals.values()), "checked": len(goals), "parts": goals}


# --------------------------------------------------------------------------------------- report
def _percent(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100.0 * part / whole:.0f}%)" if whole else "0/0"


def format_tables(result: dict[str, Any]) -> str:
    """Kills, byte flips and injected faults as fixed-width tables."""
    goals = result["goals"]["parts"]
    rows = []
    for engine, k in result["kills"].items():
        rows.append(
            [
                engine,
                f"{k['rounds']}/{k['checkpoint_every']}",
                f"{k['reference_wall_s']:.1f}",
                k["kills"],
                k["kills_during_checkpoint_write"],
                k["kills_before_first_checkpoint"],
                k["distinct_kill_steps"],
                k["resumes"],
                _percent(k["bit_identical_finals"], k["chains"]),
                k["silent_wrong_resumes"],
                k["runs_lost"],
                len(k["tmp_left"]),
                "yes" if goals[f"kills/{engine}"] else "NO",
            ]
        )
    head = [
        "engine",
        "R/k",
        "ref s",
        "kills",
        "in write",
        "before ckpt",
        "kill steps",
        "resumes",
        "identical finals",
        "silent wrong",
        "lost",
        "tmp left",
        "goal",
    ]
    kills = table(head, rows)
    rows = []
    for engine, f in result["flips"].items():
        regions = ", ".join(f"{name} {sum(c.values())}" for name, c in f["by_region"].items())
        rows.append(
            [
                engine,
                f["file_bytes"],
                f["flips"],
                f["refused"],
                f["resumed_silently"],
                f["other_exception"],
                "yes" if f["control_resume_ok"] else "NO",
                regions,
                "yes" if goals[f"flips/{engine}"] else "NO",
            ]
        )
    head = [
        "engine",
        "bytes",
        "flips",
        "refused",
        "silent",
        "other",
        "control",
        "flips by region",
        "goal",
    ]
    flips = table(head, rows, left=(0, 7))
    rows = []
    for engine, f in result["faults"].items():
        for r in f["runs"]:
            rows.append(
                [
                    engine,
                    r["kind"],
                    r["injected"],
                    r["survived"],
                    r["missed"],
                    r["wrong_reason"],
                    r["unexpected_drops"],
                    "LOST" if r["lost"] else "",
                    (r.get("error") or "")[:70],
                ]
            )
        rows.append(
            [
                engine,
                "all",
                f["injected"],
                _percent(f["survived"], f["injected"]),
                f["missed"],
                f["wrong_reason"],
                f["unexpected_drops"],
                f["runs_lost"],
                "goal met" if goals[f"faults/{engine}"] else "goal NOT met",
            ]
        )
    head = [
        "engine",
        "kind",
        "injected",
        "survived",
        "missed",
        "wrong reason",
        "unexpected",
        "lost",
        "error",
    ]
    faults = table(head, rows, left=(0, 1, 8))
    return f"{kills}\n\n{flips}\n\n{faults}"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run from the command line: print the tables and the goals, write the JSON file."""
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--quick", action="store_true", help="tiny runs (seconds per part)")
    cli.add_argument("--out", default=DEFAULT_OUT, help="JSON file (default: %(default)s)")
    opts = cli.parse_args(argv)
    result = run_campaign(Settings.quick() if opts.quick else Settings(), verbose=True)
    g = result["goals"]
    summary = f"goals met: {g['met']}/{g['checked']}; total {result['total_s']:.1f} s"
    return write_result(result, opts.out, f"{format_tables(result)}\n\n{summary}")


if __name__ == "__main__":
    main()

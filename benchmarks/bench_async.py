"""Benchmark the asynchronous simulator: cost per event, version-store memory, overhead on a run.

Two measurements:

* ``events``: the simulator's own cost per client update with *instant* clients (``train``
  returns its start point, so nothing but the event loop, the version store, the scheduler, the
  timing model and the server rule runs), for 10^3 and 10^4 clients, 10^5 events, 100 workers,
  exponential compute times, FedAsync and FedBuff (K = 10) on a 1000-dimensional model. Also the
  peak number of stored global versions and their bytes. Goal: <= 50 us per event.
* ``overhead``: the same FedAsync run on a small torch MLP (digits, 64-32-10, one local epoch of
  Adam per update) through the simulator, against a plain loop that does the same local
  trainings (same clients, same start models, same order) and the same server formula without
  the simulator. Goal: simulator time <= 1.05 x the plain loop.

Timing: one BLAS/torch thread, medians of repeats, all implementations in this process.

Usage::

    python benchmarks/bench_async.py [--quick] [--out results/bench_async.json]
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine_info, single_thread, write_result  # noqa: E402

import riemfl  # noqa: E402
from riemfl.federated import ExponentialTime, FedAsync, FedBuff, RunOptions, run_async  # noqa: E402

__all__ = ["InstantTrainer", "MLPTrainer", "bench_events", "bench_overhead", "main"]

EVENT_GOAL_US = 50.0
OVERHEAD_GOAL = 1.05


class InstantTrainer:
    """Clients that return their start point at once: only the simulator's work is timed."""

    def __init__(self, n_clients: int, dim: int) -> None:
        self.n_clients = n_clients
        self.manifold = riemfl.Euclidean(dim)

    def n_samples(self, i: int) -> int:
        return 1

    def num_batches(self, i: int, epochs: int | None = None) -> int:
        return 1

    def train(self, i: int, start: Any, rng: np.random.Generator, epochs: int | None = None):
        return start


class MLPTrainer:
    """One epoch of Adam on a 64-32-10 MLP per local run; clients hold slices of digits."""

    def __init__(self, n_clients: int = 10, batch_size: int = 32, seed: int = 0) -> None:
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)
        order = np.random.default_rng(seed).permutation(len(y))
        x = torch.tensor(x[order] / 16.0, dtype=torch.float32)
        y = torch.tensor(y[order])
        self.shards = [(x[i::n_clients], y[i::n_clients]) for i in range(n_clients)]
        self.model = torch.nn.Sequential(
            torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10)
        )
        self.n_clients = n_clients
        self.batch_size = batch_size
        dim = sum(p.numel() for p in self.model.parameters())
        self.manifold = riemfl.Euclidean(dim)

    def n_samples(self, i: int) -> int:
        return len(self.shards[i][1])

    def num_batches(self, i: int, epochs: int | None = None) -> int:
        return -(-self.n_samples(i) // self.batch_size)

    def train(self, i: int, start: Any, rng: np.random.Generator, epochs: int | None = None):
        torch.nn.utils.vector_to_parameters(
            torch.as_tensor(start, dtype=torch.float32), self.model.parameters()
        )
        opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        xs, ys = self.shards[i]
        perm = torch.from_numpy(rng.permutation(len(ys)))
        for b in range(0, len(ys), self.batch_size):
            idx = perm[b : b + self.batch_size]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(self.model(xs[idx]), ys[idx]).backward()
            opt.step()
        flat = torch.nn.utils.parameters_to_vector(self.model.parameters())
        return flat.detach().double().numpy()


def bench_events(
    clients: Sequence[int], events: int, repeats: int, dim: int = 1000, workers: int = 100
) -> list[dict[str, Any]]:
    """Microseconds per event of the simulator with instant clients."""
    rows = []
    for n in clients:
        trainer = InstantTrainer(n, dim)
        for make in (FedAsync, lambda: FedBuff(buffer_size=10)):
            samples = []
            for _ in range(repeats):
                rule = make()
                t0 = time.perf_counter()
                h = run_async(
                    trainer,
                    rule,
                    10**12,
                    workers=min(workers, n),
                    timing=ExponentialTime(1.0),
                    max_updates=events,
                    options=RunOptions(record_every=None),
                )
                samples.append((time.perf_counter() - t0) / events * 1e6)
            us = statistics.median(samples)
            rows.append(
                {
                    "clients": n,
                    "rule": rule.name,
                    "events": events,
                    "workers": min(workers, n),
                    "us_per_event": us,
                    "samples_us": samples,
                    "peak_versions": h.peak_versions,
                    "store_bytes": h.peak_versions * dim * 8,
                    "goal_us": EVENT_GOAL_US,
                    "met": bool(us <= EVENT_GOAL_US),
                }
            )
    return rows


def _plain_loop(trainer: MLPTrainer, log: dict[str, list], x0: np.ndarray, lr: float) -> np.ndarray:
    """The same local trainings and FedAsync steps, in the simulator's order, without it.

    The simulator's log gives, per update, the client and the version it trained from; the
    plain loop keeps every version (no store, no heap, no scheduler) and replays them.
    """
    seqs = np.random.SeedSequence(0).spawn(4)
    rngs = [np.random.default_rng(s) for s in seqs[3].spawn(trainer.n_clients)]
    sizes = np.array([trainer.n_samples(i) for i in range(trainer.n_clients)], dtype=float)
    w = sizes / sizes.sum()
    versions = [x0]
    for client, stale, version in zip(log["client"], log["staleness"], log["version"], strict=True):
        base = versions[version - 1 - stale]
        local = trainer.train(client, base, rngs[client])
        x = versions[-1]
        versions.append(x + lr * w[client] * (local - x))
    return versions[-1]


def bench_overhead(steps: int, repeats: int) -> dict[str, Any]:
    """Simulator vs plain loop, FedAsync on the MLP, same trainings (checked equal)."""
    trainer = MLPTrainer()
    x0 = torch.nn.utils.parameters_to_vector(trainer.model.parameters()).detach().double().numpy()
    trainer.train(0, x0, np.random.default_rng(0))  # warm-up: torch's first-call setup
    sim, plain = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        h = run_async(
            trainer,
            FedAsync(server_lr=3.0),
            steps,
            workers=5,
            x0=x0.copy(),
            timing=ExponentialTime(1.0),
            options=RunOptions(record_every=None, seed=0),
        )
        sim.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        x = _plain_loop(trainer, h.log, x0.copy(), 3.0)
        plain.append(time.perf_counter() - t0)
        diff = float(np.max(np.abs(x - h.final_point)))
        if diff > 1e-6:
            raise AssertionError(f"plain loop and simulator disagree by {diff:.2e}")
    ratio = statistics.median(sim) / statistics.median(plain)
    return {
        "steps": steps,
        "updates": len(h.log["client"]),
        "sim_s": statistics.median(sim),
        "plain_s": statistics.median(plain),
        "ratio": ratio,
        "max_diff": diff,
        "goal": OVERHEAD_GOAL,
        "met": bool(ratio <= OVERHEAD_GOAL),
    }


def format_table(result: dict[str, Any]) -> str:
    lines = ["clients  rule      events  us/event  peak versions  store MB  goal     met?"]
    for r in result["events"]:
        lines.append(
            f"{r['clients']:>7}  {r['rule']:<8}  {r['events']:>6}  {r['us_per_event']:>8.2f}  "
            f"{r['peak_versions']:>13}  {r['store_bytes'] / 1e6:>8.2f}  <= {r['goal_us']:.0f}us  "
            f"{'yes' if r['met'] else 'NO'}"
        )
    o = result["overhead"]
    lines += [
        "",
        f"FedAsync on an MLP, {o['updates']} local trainings: simulator {o['sim_s']:.2f} s, "
        f"plain loop {o['plain_s']:.2f} s, ratio {o['ratio']:.3f} (goal <= {o['goal']}): "
        f"{'met' if o['met'] else 'NOT met'}; max |difference| {o['max_diff']:.1e}",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="results/bench_async.json")
    args = parser.parse_args(argv)
    with single_thread() as threads:
        if args.quick:
            events = bench_events([100, 1000], 2000, 1)
            overhead = bench_overhead(5, 1)
        else:
            events = bench_events([1000, 10000], 100_000, 3)
            overhead = bench_overhead(60, 3)
    result = {
        "machine": machine_info(threads),
        "quick": args.quick,
        "events": events,
        "overhead": overhead,
    }
    return write_result(result, args.out, format_table(result))


if __name__ == "__main__":
    main()

"""Benchmark AsyncBezier against FedAsync: the server step and the client's curve epoch.

1. **Server step** on a D = 10^6-parameter model (float64 flat vectors, as the torch trainers
   exchange): ``AsyncBezier(...).apply`` (the control points of a learned quadratic, a stale
   arrival, OrthoDC per control point, chordal step) against ``FedAsync(...).apply`` on the same
   arrival's end point. Goal: <= 3x (it touches three control points).
2. **Client epoch** on the digits CNN: one curve-learning epoch of
   :class:`riemfl.nn.BezierClientTrainer` (one forward/backward per batch at the sampled curve
   point, plus the Adam step on B) against one plain FedProx epoch of
   :class:`riemfl.nn.TorchClientTrainer`. Goal: <= 1.5x.

Medians of repeated timings in the same process (one BLAS and one torch thread), interleaved so
background load hits both sides alike; JSON output and a printed table.

Usage::

    python benchmarks/bench_asyncbezier.py [--quick] [--out results/bench_asyncbezier.json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine_info, single_thread, write_result  # noqa: E402

import riemfl  # noqa: E402
from riemfl.federated import Arrival, AsyncBezier, FedAsync  # noqa: E402

SERVER_GOAL = 3.0
CLIENT_GOAL = 1.5


def _interleaved(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median seconds per call of each function, sampled round-robin."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():  # warm-up
        fn()
    for _ in range(repeats):
        for key, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[key].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


def bench_server(dim: int, repeats: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    base = rng.normal(size=dim)
    current = base + 0.01 * rng.normal(size=dim)
    end = base + 0.05 * rng.normal(size=dim)
    middle = base + 0.5 * (end - base) + 0.01 * rng.normal(size=dim)
    phi = np.stack([base, middle, end])
    m = riemfl.Euclidean(dim)
    bezier = AsyncBezier(m, 0.5)
    fedasync = FedAsync(server_lr=3.0)
    curve_arrival = Arrival(0, base, phi, current, 3, 1 / 30, 10)
    point_arrival = Arrival(0, base, end, current, 3, 1 / 30, 10)
    times = _interleaved(
        {
            "asyncbezier": lambda: bezier.apply(m, curve_arrival),
            "fedasync": lambda: fedasync.apply(m, point_arrival),
        },
        repeats,
    )
    ratio = times["asyncbezier"] / times["fedasync"]
    return {
        "D": dim,
        "asyncbezier_ms": 1e3 * times["asyncbezier"],
        "fedasync_ms": 1e3 * times["fedasync"],
        "ratio": ratio,
        "goal": SERVER_GOAL,
        "met": bool(ratio <= SERVER_GOAL),
    }


def bench_client(n_clients: int, repeats: int) -> dict[str, Any]:
    from riemfl.nn import BezierClientTrainer, SmallCNN, TorchClientTrainer, digits_clients

    data = digits_clients(n_clients=n_clients, alpha=0.5, seed=0)
    plain = TorchClientTrainer(SmallCNN, data, epochs=1, lr=1e-2, mu=1e-3)
    curve = BezierClientTrainer(plain, warmup_epochs=1, curve_epochs=1)
    x = plain.initial_parameters(0)
    client = int(np.argmax([plain.n_samples(i) for i in range(n_clients)]))
    # curve epoch = (warm-up epoch + curve epoch) - warm-up epoch: time both calls
    times = _interleaved(
        {
            "plain_epoch": lambda: plain.train(client, x, np.random.default_rng(0), 1),
            "warmup_plus_curve": lambda: curve.train(client, x, np.random.default_rng(0)),
        },
        repeats,
    )
    curve_epoch = times["warmup_plus_curve"] - times["plain_epoch"]
    ratio = curve_epoch / times["plain_epoch"]
    return {
        "client": client,
        "batches": plain.num_batches(client, 1),
        "plain_epoch_ms": 1e3 * times["plain_epoch"],
        "curve_epoch_ms": 1e3 * curve_epoch,
        "ratio": ratio,
        "goal": CLIENT_GOAL,
        "met": bool(ratio <= CLIENT_GOAL),
    }


def format_table(result: dict[str, Any]) -> str:
    s, c = result["server"], result["client"]
    yes = {True: "yes", False: "NO"}
    return "\n".join(
        [
            "AsyncBezier vs FedAsync (medians, one thread)",
            f"  server step, D={s['D']:.0e}: asyncbezier {s['asyncbezier_ms']:.2f} ms, fedasync "
            f"{s['fedasync_ms']:.2f} ms, ratio {s['ratio']:.2f}x (goal <= {s['goal']}x: "
            f"{yes[s['met']]})",
            f"  client epoch ({c['batches']} batches): curve {c['curve_epoch_ms']:.1f} ms, plain "
            f"{c['plain_epoch_ms']:.1f} ms, ratio {c['ratio']:.2f}x (goal <= {c['goal']}x: "
            f"{yes[c['met']]})",
        ]
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="results/bench_asyncbezier.json")
    args = parser.parse_args(argv)
    with single_thread() as threads:
        if args.quick:
            server, client = bench_server(10_000, 5), bench_client(4, 3)
        else:
            server, client = bench_server(1_000_000, 25), bench_client(10, 15)
    result = {
        "machine": machine_info(threads),
        "quick": args.quick,
        "server": server,
        "client": client,
    }
    return write_result(result, args.out, format_table(result))


if __name__ == "__main__":
    main()

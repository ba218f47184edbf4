"""Benchmark FLoRAL on single linear layers of growing size: merged weight against factored pass.

A FLoRAL layer can fold its adaptor mixture into the weight, ``W' = W + A diag(w) B^T``
(``C r m n`` multiply-adds per pass, whatever the batch), or run the adaptors on the input,
``x W^T + ((x B) diag(w)) A^T`` (``rows C r (m + n)``). The first is the right call for the
small layers of the paper's MNIST models, the second for large layers on small batches, where
the merge can cost many times the layer itself. FLoRAL layers choose per pass
(:data:`riemfl.nn.floral.linear.FACTORED_SAVING`); this benchmark shows what the choice is
worth, with C = 4 clusters, rho = 1% and 10%:

* ``base``: the plain ``nn.Linear`` step (forward, ``square().mean()``, gradients of every
  parameter);
* ``compiled``: the FLoRAL layer's step, default backend (the compiled layer on the CPU);
* ``torch``: the same with ``backend = "torch"``;
* ``torch, always merged``: the torch path forced to merge (what every FLoRAL layer did before
  the factored pass existed).

Timing: one torch thread and one BLAS thread, freed memory kept (``steady_allocator``), all
variants in this process, interleaved,
medians of the repeats; ratios are of medians.

Usage::

    python benchmarks/bench_floral_layers.py [--quick] [--out results/bench_floral_layers.json]
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
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_floral  # noqa: E402
from _harness import (  # noqa: E402
    machine_info,
    single_thread,
    steady_allocator,
    write_result,
)

from riemfl.nn.floral import kernels  # noqa: E402

__all__ = ["SIZES", "VARIANTS", "bench_layer", "format_table", "main"]

#: (in_features, out_features) of the layers
SIZES = ((784, 200), (1024, 1024), (2048, 2048))
VARIANTS = ("base", "compiled", "torch", "torch, always merged")
N_CLUSTERS = bench_floral.N_CLUSTERS


def _always_merged(model: nn.Module) -> nn.Module:
    """The torch path with the factored pass switched off (an instance attribute shadows the
    layers' rule; benchmark only)."""
    model.backend = "torch"
    for _, layer in model.adaptors():
        layer._prefers_factored = lambda x: False
    return model


def _floral(base: nn.Module, rho: float, backend: str) -> nn.Module:
    """:func:`bench_floral._floral` (C = 4, a trained-looking state) on the given backend."""
    model = bench_floral._floral(base, rho)
    if backend == "always merged":
        return _always_merged(model)
    return bench_floral._with_backend(model, backend)


def _step(model: nn.Module, x: torch.Tensor) -> Callable[[], None]:
    params = [p for p in model.parameters() if p.requires_grad]

    def step() -> None:
        torch.autograd.grad(model(x).square().mean(), params)

    return step


def _time(fns: dict[str, Callable[[], None]], repeats: int, budget_s: float) -> dict[str, list]:
    """Microseconds per call of every function, interleaved; calls per sample chosen so that a
    sample of the slowest takes about ``budget_s``."""
    first = {}
    for name, fn in fns.items():  # warm-up, and one timed call
        fn()
        t0 = time.perf_counter()
        fn()
        first[name] = time.perf_counter() - t0
    inner = max(1, int(budget_s / max(first.values())))
    return bench_floral._time(fns, repeats, inner)


def bench_layer(size: tuple[int, int], batch: int, rho: float, repeats: int, budget_s: float):
    """The rows of one (layer size, batch, rho) cell."""
    n, m = size
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(n, m))
    x = torch.rand(batch, n, generator=torch.Generator().manual_seed(1))
    models = {
        "compiled": _floral(base, rho, "auto"),
        "torch": _floral(base, rho, "torch"),
        "torch, always merged": _floral(base, rho, "always merged"),
    }
    layer = models["torch"].adaptors()[0][1]
    factored = bool(layer._prefers_factored(x))
    samples = _time(
        {"base": _step(base, x), **{k: _step(v, x) for k, v in models.items()}}, repeats, budget_s
    )
    base_us = statistics.median(samples["base"])
    return [
        {
            "layer": f"{n}x{m}",
            "batch": batch,
            "rho": rho,
            "rank": layer.rank,
            "factored": factored,
            "variant": variant,
            "us": statistics.median(s),
            "samples_us": s,
            "ratio": statistics.median(s) / base_us,
        }
        for variant, s in samples.items()
    ]


def format_table(result: dict[str, Any]) -> str:
    lines = [
        f"{'layer':<10} {'batch':>5} {'rho':>5} {'r':>4} {'pass':<9} {'variant':<21} "
        f"{'median us':>11} {'x base':>7}"
    ]
    for r in result["rows"]:
        mode = "factored" if r["factored"] else "merged"
        lines.append(
            f"{r['layer']:<10} {r['batch']:>5} {r['rho']:>5} {r['rank']:>4} {mode:<9} "
            f"{r['variant']:<21} {r['us']:>11.1f} {r['ratio']:>7.2f}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="results/bench_floral_layers.json")
    args = parser.parse_args(argv)
    repeats, budget = (3, 0.01) if args.quick else (9, 0.1)
    sizes = SIZES[:1] if args.quick else SIZES
    batches = (32,) if args.quick else (32, 256)
    allocator = steady_allocator()
    with single_thread() as threads:
        rows = [
            row
            for size in sizes
            for batch in batches
            for rho in (0.01, 0.1)
            for row in bench_layer(size, batch, rho, repeats, budget)
        ]
    result = {
        "machine": {**machine_info(threads), **allocator},
        "quick": args.quick,
        "clusters": N_CLUSTERS,
        "floral_backend": kernels.backend(),
        "repeats": repeats,
        "rows": rows,
    }
    return write_result(result, args.out, format_table(result))


if __name__ == "__main__":
    main()

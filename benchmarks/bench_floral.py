"""Benchmark FLoRAL models: training step and inference against the base model and the merged one.

Issue 7's measurements, on the digits MLP (64 -> 200 -> 10, the paper's MNIST network on 8 x 8
inputs) and the small CNN (:class:`riemfl.nn.SmallCNN`):

* ``train``: one forward + backward pass (cross-entropy, gradients of every parameter, the
  router's included) of the base model and of its FLoRAL version with C = 4 adaptors per layer
  at rho = 1% and 10% (bias adaptors on, learned router). Goal: FLoRAL(1%) <= 1.3 x the base.
* ``FLoRAL(1%) base grads`` and ``FLoRAL(1%) no router`` (train, diagnostics): the same
  FLoRAL(1%) step asking autograd only for the gradients of the base weights, or of the base
  weights and the adaptors: the differences to the full step are what the adaptors' and the
  router's gradients cost.
* ``infer``: a forward pass without gradient of the base model, of the unmerged FLoRAL(1%)
  model and of its merged model (``FloralModel.merge()``: the base architecture with the
  mixture folded in). Goal: merged = base within noise (ratio in [0.9, 1.1]).

Batch sizes 32 (the paper's MNIST batch) and 256. A FLoRAL layer adds a fixed amount of
weight-sized work per pass (the merged weight W + sum_c pi_c A_c B_c^T and bias, and their
backward), whatever the batch, plus torch's fixed costs for the router and the extra parameter
tensors, so its relative cost falls as the batch (or the layer) grows.

Timing: one torch thread and one BLAS thread, glibc's allocator told to keep freed memory
(:func:`_harness.steady_allocator`: otherwise the SmallCNN's step at batch 256 pays page faults
for its activations at some steps and not at others, 3.0 to 5.0 ms), all variants in this
process, interleaved (round-robin over variants within each repeat, so that machine-load drifts
hit them alike), medians of the repeats; ratios are of medians.

Usage::

    python benchmarks/bench_floral.py [--quick] [--out results/bench_floral.json]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import (  # noqa: E402
    machine_info,
    single_thread,
    steady_allocator,
    write_result,
)

from riemfl.nn import MLP, SmallCNN  # noqa: E402
from riemfl.nn.floral import floralize, parameter_counts  # noqa: E402

__all__ = ["MODELS", "bench_model", "format_table", "main"]

TRAIN_GOAL = 1.3
#: diagnostics: the FLoRAL(1%) step asking autograd for the base weights' gradients only, and
#: for those and the adaptors' (not the router's)
BASE_GRADS = "FLoRAL(1%) base grads"
NO_ROUTER_GRAD = "FLoRAL(1%) no router"
MERGED_BAND = (0.9, 1.1)
N_CLUSTERS = 4

#: model name -> (factory, input shape of one example)
MODELS: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...]]] = {
    "digits MLP 64-200-10": (lambda: MLP([64, 200, 10]), (64,)),
    "SmallCNN (8x8 digits)": (lambda: SmallCNN(), (1, 8, 8)),
}


def _floral(base: torch.nn.Module, rho: float) -> torch.nn.Module:
    """The FLoRAL version of ``base`` in a trained-looking state (non-zero adaptors and router,
    seeded: the same numbers at every call)."""
    model = floralize(base, N_CLUSTERS, rho, seed=0)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _, layer in model.adaptors():
            layer.lora_out.normal_(0.0, 0.02, generator=g)
            layer.lora_bias.normal_(0.0, 0.02, generator=g)
        model.router.logits.normal_(generator=g)
    return model


def _train_step(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    roles: Sequence[str] | None = None,
) -> Callable[[], None]:
    """One forward and backward pass; gradients of every trainable parameter, or (``roles``)
    of those whose FLoRAL role is listed (:meth:`FloralModel.parameter_roles`)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if roles is not None:
        role_of = model.parameter_roles()
        named = [(n, p) for n, p in named if role_of[n] in roles]
    params = [p for _, p in named]

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        torch.autograd.grad(loss, params)

    return step


def _infer(model: torch.nn.Module, x: torch.Tensor) -> Callable[[], None]:
    model.eval()

    def forward() -> None:
        with torch.no_grad():
            model(x)

    return forward


def _time(fns: dict[str, Callable[[], None]], repeats: int, inner: int) -> dict[str, list[float]]:
    """Microseconds per call of every function, interleaved across repeats."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():  # warm-up
        for _ in range(max(inner // 4, 2)):
            fn()
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            samples[name].append((time.perf_counter() - t0) / inner * 1e6)
    return samples


def bench_model(name: str, batch: int, repeats: int, inner: int) -> list[dict[str, Any]]:
    """The ``train`` and ``infer`` rows of one model at one batch size."""
    factory, shape = MODELS[name]
    torch.manual_seed(0)
    base = factory()
    gen = torch.Generator().manual_seed(1)
    x = torch.rand((batch, *shape), generator=gen)
    y = torch.randint(0, 10, (batch,), generator=gen)
    floral = {rho: _floral(base, rho) for rho in (0.01, 0.1)}
    merged = floral[0.01].merge()
    with torch.no_grad():
        max_diff = float((floral[0.01].eval()(x) - merged(x)).abs().max())
    rows = []
    train = _time(
        {
            "base": _train_step(base, x, y),
            "FLoRAL(1%)": _train_step(floral[0.01].train(), x, y),
            "FLoRAL(10%)": _train_step(floral[0.1].train(), x, y),
            BASE_GRADS: _train_step(floral[0.01], x, y, roles=("base",)),
            NO_ROUTER_GRAD: _train_step(floral[0.01], x, y, roles=("base", "cluster")),
        },
        repeats,
        inner,
    )
    infer = _time(
        {
            "base": _infer(base, x),
            "FLoRAL(1%) unmerged": _infer(floral[0.01], x),
            "FLoRAL(1%) merged": _infer(merged, x),
        },
        repeats,
        inner,
    )
    for mode, samples in (("train", train), ("infer", infer)):
        base_us = statistics.median(samples["base"])
        for variant, s in samples.items():
            us = statistics.median(s)
            row = {
                "model": name,
                "batch": batch,
                "mode": mode,
                "variant": variant,
                "us": us,
                "samples_us": s,
                "ratio": us / base_us,
            }
            if mode == "train" and variant == "FLoRAL(1%)":
                row.update(goal=f"<= {TRAIN_GOAL}", met=bool(row["ratio"] <= TRAIN_GOAL))
            if variant == "FLoRAL(1%) merged":
                lo, hi = MERGED_BAND
                row.update(
                    goal=f"in [{lo}, {hi}]",
                    met=bool(lo <= row["ratio"] <= hi),
                    max_abs_output_diff=max_diff,
                )
            if variant.startswith("FLoRAL(1") and mode == "train":
                rho = 0.01 if "1%" in variant else 0.1
                row["extra_parameters"] = parameter_counts(floral[rho])["extra_fraction"]
            rows.append(row)
    return rows


def format_table(result: dict[str, Any]) -> str:
    lines = [
        f"{'model':<22} {'batch':>5} {'mode':<6} {'variant':<22} {'median us':>10} "
        f"{'x base':>7}  goal"
    ]
    for r in result["rows"]:
        goal = f"{r['goal']}: {'met' if r['met'] else 'NOT met'}" if "goal" in r else ""
        lines.append(
            f"{r['model']:<22} {r['batch']:>5} {r['mode']:<6} {r['variant']:<22} "
            f"{r['us']:>10.1f} {r['ratio']:>7.2f}  {goal}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="results/bench_floral.json")
    args = parser.parse_args(argv)
    repeats, inner = (3, 5) if args.quick else (15, 50)
    batches = (32,) if args.quick else (32, 256)
    allocator = steady_allocator()
    with single_thread() as threads:
        rows = [
            row
            for name in MODELS
            for batch in batches
            for row in bench_model(name, batch, repeats, inner)
        ]
    result = {
        "machine": {**machine_info(threads), **allocator},
        "quick": args.quick,
        "clusters": N_CLUSTERS,
        "repeats": repeats,
        "inner": inner,
        "rows": rows,
    }
    return write_result(result, args.out, format_table(result))


if __name__ == "__main__":
    main()

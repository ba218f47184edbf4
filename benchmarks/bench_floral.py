"""Benchmark FLoRAL: training steps and inference against the base model, eager and compiled.

Models: the digits MLP (64 -> 200 -> 10, the paper's MNIST network on 8 x 8 inputs) and the
small CNN (:class:`riemfl.nn.SmallCNN`), at batch 32 (the paper's MNIST batch) and 256; their
FLoRAL versions have C = 4 adaptors per layer at rho = 1% or 10% (bias adaptors on, learned
router, a trained-looking state).

* ``train``: one forward and backward pass (cross-entropy, gradients of every parameter, the
  router's included), eager: the base model, FLoRAL(1%), FLoRAL(10%), and two diagnostics, the
  FLoRAL(1%) step asking autograd only for the base weights' gradients (``base grads``) or for
  those and the adaptors' (``no router``): the differences to the full step are what the
  adaptors' and the router's gradients cost.
* ``train compiled``: the base and FLoRAL(1%) steps with the model under ``torch.compile``
  (Inductor, default options, static shapes), after checking that the compiled model's
  gradients are eager's (``grads_match_eager``).
* ``infer``: a forward pass without gradient of the base model, the unmerged FLoRAL(1%) model
  and its merged model (``FloralModel.merge()``, the base architecture with the mixture folded
  in).

Goals: FLoRAL(1%) train / base train <= 1.3 eager wherever the base step takes at
least 1 ms, and <= 1.5 under ``torch.compile`` everywhere; merged inference / base in
[0.9, 1.1].

``layer`` rows (not in ``--quick`` beyond the first size): one ``nn.Linear`` of growing size,
C = 4, rho = 1% and 10%: the base layer's step, the FLoRAL layer's (merged weight or factored
pass by :data:`riemfl.nn.floral.linear.FACTORED_SAVING`) and the same layer forced to merge
(``always merged``), which shows what the factored pass is worth on large layers and few rows.

Timing: one torch thread and one BLAS thread, glibc's allocator told to keep freed memory
(:func:`_harness.steady_allocator`), all variants in this process, interleaved (round-robin over
the variants within each repeat, eager and compiled together, so that machine-load drifts hit
them alike), medians of the repeats; ratios are of medians.

Usage::

    python benchmarks/bench_floral.py [--quick] [--no-compile] [--out results/bench_floral.json]
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
from _harness import (  # noqa: E402
    machine_info,
    single_thread,
    steady_allocator,
    write_result,
)

from riemfl.nn import MLP, SmallCNN  # noqa: E402
from riemfl.nn.floral import floralize, parameter_counts  # noqa: E402

__all__ = ["MODELS", "LAYER_SIZES", "bench_model", "bench_layer", "format_table", "main"]

#: FLoRAL(1%) train / base train, eager, where the base step takes at least EAGER_FLOOR_US
EAGER_GOAL = 1.3
EAGER_FLOOR_US = 1000.0
#: FLoRAL(1%) train / base train under torch.compile, everywhere
COMPILED_GOAL = 1.5
MERGED_BAND = (0.9, 1.1)
N_CLUSTERS = 4
FLORAL = "FLoRAL(1%)"
#: diagnostics: the FLoRAL(1%) step asking autograd for the base weights' gradients only, and
#: for those and the adaptors' (not the router's)
BASE_GRADS = "FLoRAL(1%) base grads"
NO_ROUTER_GRAD = "FLoRAL(1%) no router"
#: relative error (of the largest gradient entry) under which compiled gradients match eager
GRAD_TOLERANCE = 1e-4

#: model name -> (factory, input shape of one example)
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "digits MLP 64-200-10": (lambda: MLP([64, 200, 10]), (64,)),
    "SmallCNN (8x8 digits)": (lambda: SmallCNN(), (1, 8, 8)),
}
#: (in_features, out_features) of the single-layer rows
LAYER_SIZES = ((784, 200), (1024, 1024), (2048, 2048))
LAYER_VARIANTS = ("base", "FLoRAL", "always merged")


def _floral(base: nn.Module, rho: float) -> nn.Module:
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


def _params(model: nn.Module, roles: Sequence[str] | None = None) -> list[torch.Tensor]:
    """The trainable parameters, or (``roles``) those whose FLoRAL role is listed
    (:meth:`FloralModel.parameter_roles`)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if roles is not None:
        role_of = model.parameter_roles()
        named = [(n, p) for n, p in named if role_of[n] in roles]
    return [p for _, p in named]


def _train_step(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    roles: Sequence[str] | None = None,
    run: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> Callable[[], tuple[torch.Tensor, ...]]:
    """One forward and backward pass of ``model`` (through ``run``, e.g. its compiled version);
    gradients of every trainable parameter, or of those whose role is in ``roles``."""
    params = _params(model, roles)
    forward = model if run is None else run

    def step() -> tuple[torch.Tensor, ...]:
        loss = torch.nn.functional.cross_entropy(forward(x), y)
        return torch.autograd.grad(loss, params)

    return step


def _infer(model: nn.Module, x: torch.Tensor) -> Callable[[], None]:
    model.eval()

    def forward() -> None:
        with torch.no_grad():
            model(x)

    return forward


def _compiled(model: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    return torch.compile(model, dynamic=False)


def _grads_match(step: Callable[[], tuple], reference: Callable[[], tuple]) -> bool:
    got, want = step(), reference()
    return all(
        float((a - b).abs().max()) <= GRAD_TOLERANCE * max(float(b.abs().max()), 1e-30)
        for a, b in zip(got, want, strict=True)
    )


def _time(fns: dict[str, Callable[[], Any]], repeats: int, inner: int) -> dict[str, list[float]]:
    """Microseconds per call of every function, interleaved across repeats."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():  # warm-up (and compilation)
        for _ in range(max(inner // 4, 2)):
            fn()
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            samples[name].append((time.perf_counter() - t0) / inner * 1e6)
    return samples


def _rows(samples: dict[str, list[float]], **fields: Any) -> list[dict[str, Any]]:
    """One row per variant: median, samples, ratio to the ``base`` variant's median."""
    base_us = statistics.median(samples["base"])
    return [
        {
            **fields,
            "variant": variant,
            "us": statistics.median(s),
            "samples_us": s,
            "ratio": statistics.median(s) / base_us,
        }
        for variant, s in samples.items()
    ]


def bench_model(
    name: str, batch: int, repeats: int, inner: int, compiled: bool = True
) -> list[dict[str, Any]]:
    """The ``train``, ``train compiled`` and ``infer`` rows of one model at one batch size."""
    factory, shape = MODELS[name]
    torch.manual_seed(0)
    base = factory()
    gen = torch.Generator().manual_seed(1)
    x = torch.rand((batch, *shape), generator=gen)
    y = torch.randint(0, 10, (batch,), generator=gen)
    floral = {rho: _floral(base, rho).train() for rho in (0.01, 0.1)}
    steps = {
        "base": _train_step(base, x, y),
        FLORAL: _train_step(floral[0.01], x, y),
        "FLoRAL(10%)": _train_step(floral[0.1], x, y),
        BASE_GRADS: _train_step(floral[0.01], x, y, roles=("base",)),
        NO_ROUTER_GRAD: _train_step(floral[0.01], x, y, roles=("base", "cluster")),
    }
    match = {}
    if compiled:
        torch._dynamo.reset()  # a fresh cache: static shapes of this batch only
        for label, model in (("base", base), (FLORAL, floral[0.01])):
            step = _train_step(model, x, y, run=_compiled(model))
            match[label] = _grads_match(step, steps[label])
            steps[f"{label} compiled"] = step
    train = _time(steps, repeats, inner)
    eager = {k: v for k, v in train.items() if not k.endswith(" compiled")}
    rows = _rows(eager, kind="model", model=name, batch=batch, mode="train")
    if compiled:
        compiled_samples = {k[: -len(" compiled")]: v for k, v in train.items() if k not in eager}
        rows += _rows(
            compiled_samples, kind="model", model=name, batch=batch, mode="train compiled"
        )
    merged = floral[0.01].merge()
    with torch.no_grad():
        max_diff = float((floral[0.01].eval()(x) - merged(x)).abs().max())
    infer = _time(
        {
            "base": _infer(base, x),
            "FLoRAL(1%) unmerged": _infer(floral[0.01], x),
            "FLoRAL(1%) merged": _infer(merged, x),
        },
        repeats,
        inner,
    )
    rows += _rows(infer, kind="model", model=name, batch=batch, mode="infer")
    base_us = {r["mode"]: r["us"] for r in rows if r["variant"] == "base"}
    for row in rows:
        mode, variant = row["mode"], row["variant"]
        if mode == "train" and variant.startswith("FLoRAL(1"):
            rho = 0.01 if "1%" in variant else 0.1
            row["extra_parameters"] = parameter_counts(floral[rho])["extra_fraction"]
        if mode == "train" and variant == FLORAL:
            if base_us["train"] >= EAGER_FLOOR_US:
                row.update(goal=f"<= {EAGER_GOAL}", met=bool(row["ratio"] <= EAGER_GOAL))
            else:
                row.update(goal="none (base step < 1 ms)", met=None)
        if mode == "train compiled":
            row["grads_match_eager"] = match[variant]
            if variant == FLORAL:
                row.update(goal=f"<= {COMPILED_GOAL}", met=bool(row["ratio"] <= COMPILED_GOAL))
        if variant == "FLoRAL(1%) merged":
            lo, hi = MERGED_BAND
            row.update(
                goal=f"in [{lo}, {hi}]",
                met=bool(lo <= row["ratio"] <= hi),
                max_abs_output_diff=max_diff,
            )
    return rows


def _always_merged(model: nn.Module) -> nn.Module:
    """The model with the factored pass switched off (an instance attribute shadows the
    layers' rule; benchmark only)."""
    for _, layer in model.adaptors():
        layer._prefers_factored = lambda x: False
    return model


def _layer_step(model: nn.Module, x: torch.Tensor) -> Callable[[], tuple[torch.Tensor, ...]]:
    params = _params(model)

    def step() -> tuple[torch.Tensor, ...]:
        return torch.autograd.grad(model(x).square().mean(), params)

    return step


def bench_layer(
    size: tuple[int, int], batch: int, rho: float, repeats: int, budget_s: float
) -> list[dict[str, Any]]:
    """The rows of one (layer size, batch, rho) cell; calls per sample chosen so that a sample
    of the slowest variant takes about ``budget_s``."""
    n, m = size
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(n, m))
    x = torch.rand(batch, n, generator=torch.Generator().manual_seed(1))
    floral = _floral(base, rho)
    layer = floral.adaptors()[0][1]
    steps = {
        "base": _layer_step(base, x),
        "FLoRAL": _layer_step(floral, x),
        "always merged": _layer_step(_always_merged(_floral(base, rho)), x),
    }
    slowest = 0.0
    for step in steps.values():  # warm-up, and one timed call
        step()
        t0 = time.perf_counter()
        step()
        slowest = max(slowest, time.perf_counter() - t0)
    samples = _time(steps, repeats, max(1, int(budget_s / slowest)))
    return _rows(
        samples,
        kind="layer",
        layer=f"{n}x{m}",
        batch=batch,
        rho=rho,
        rank=layer.rank,
        factored=bool(layer._prefers_factored(x)),
    )


def format_table(result: dict[str, Any]) -> str:
    lines = [
        f"{'model':<22} {'batch':>5} {'mode':<14} {'variant':<22} {'median us':>10} "
        f"{'x base':>7}  goal"
    ]
    for r in result["rows"]:
        if r["kind"] != "model":
            continue
        goal = ""
        if "goal" in r:
            verdict = {True: "met", False: "NOT met", None: "-"}[r["met"]]
            goal = f"{r['goal']}: {verdict}"
        if r.get("grads_match_eager") is False:
            goal += "  (compiled gradients differ from eager)"
        lines.append(
            f"{r['model']:<22} {r['batch']:>5} {r['mode']:<14} {r['variant']:<22} "
            f"{r['us']:>10.1f} {r['ratio']:>7.2f}  {goal}"
        )
    layers = [r for r in result["rows"] if r["kind"] == "layer"]
    if layers:
        lines += [
            "",
            f"{'layer':<10} {'batch':>5} {'rho':>5} {'r':>4} {'pass':<9} {'variant':<14} "
            f"{'median us':>11} {'x base':>7}",
        ]
        for r in layers:
            mode = "factored" if r["factored"] else "merged"
            lines.append(
                f"{r['layer']:<10} {r['batch']:>5} {r['rho']:>5} {r['rank']:>4} {mode:<9} "
                f"{r['variant']:<14} {r['us']:>11.1f} {r['ratio']:>7.2f}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="batch 32, few repeats, one layer")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    parser.add_argument("--out", default="results/bench_floral.json")
    args = parser.parse_args(argv)
    repeats, inner, budget = (3, 5, 0.01) if args.quick else (15, 50, 0.1)
    batches = (32,) if args.quick else (32, 256)
    sizes = LAYER_SIZES[:1] if args.quick else LAYER_SIZES
    allocator = steady_allocator()
    with single_thread() as threads:
        rows = [
            row
            for name in MODELS
            for batch in batches
            for row in bench_model(name, batch, repeats, inner, compiled=not args.no_compile)
        ]
        rows += [
            row
            for size in sizes
            for batch in batches
            for rho in (0.01, 0.1)
            for row in bench_layer(size, batch, rho, repeats, budget)
        ]
    result = {
        "machine": {**machine_info(threads), **allocator},
        "quick": args.quick,
        "compiled": not args.no_compile,
        "clusters": N_CLUSTERS,
        "repeats": repeats,
        "inner": inner,
        "rows": rows,
    }
    return write_result(result, args.out, format_table(result))


if __name__ == "__main__":
    main()

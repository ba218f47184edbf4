"""The curve manifolds' maps at each check level: the host solves against the fixed iterations.

``BezierGraph`` and ``EpsilonTunnel`` find the closest curve parameter (and ``BezierGraph.exp``
the parameter at an arc length) on the host at the check level ``eager``, exactly, and in a fixed
number of tensor operations at ``deferred`` and ``off``
(:class:`riemfl.manifolds.bezier_fixed.FixedCurve`: Aberth-Ehrlich iterations, bracketed Newton
steps), which read nothing back and compile whole. This script times both forms on torch float64
tensors, uncompiled and compiled whole (``torch.compile(fullgraph=True)``, inductor), for a
quadratic and a cubic curve in R^3 and in R^1000, a batch of 1 and of 64 queries, and counts
the host reads and (on CUDA) the synchronisations per call. ``ratio`` is each time over eager
mode's (the host solve) on the same data.

The fixed form trades an early stop for a fixed count, so uncompiled it runs more, smaller
operations than the host solve; compiled, inductor fuses them. On a GPU the host solve's reads
each drain the launch queue; the fixed form's do not.

Usage::

    python benchmarks/bench_bezier_levels.py [--quick] [--no-compile] [--device cpu|cuda]
                                             [--out results/bench_bezier_levels.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

import riemfl

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared harness beside this script
from _harness import machine_info, single_thread, write_result  # noqa: E402
from _report import table  # noqa: E402
from bench_gpu import reads_and_syncs, time_per_call  # noqa: E402

from riemfl.manifolds.bezier import BezierCurve  # noqa: E402
from riemfl.manifolds.bezier_graph import BezierGraph  # noqa: E402
from riemfl.manifolds.tunnel import EpsilonTunnel  # noqa: E402

__all__ = ["CASES", "run_benchmark", "format_table", "main"]

#: (curve degree, ambient dimension, batch)
CASES = [(2, 3, 1), (2, 3, 64), (3, 3, 64), (2, 1000, 64)]
QUICK_CASES = [(2, 3, 8)]
#: (manifold kind, map)
MAPS = [("graph", "project"), ("graph", "exp"), ("graph", "log"), ("tunnel", "project")]


def _curve(degree: int, dim: int) -> BezierCurve:
    rng = np.random.default_rng(degree * 1000 + dim)
    steps = rng.standard_normal((degree, dim))
    return BezierCurve(np.concatenate([np.zeros((1, dim)), np.cumsum(steps, axis=0)]))


def _arguments(kind: str, name: str, manifold: Any, batch: int, device: str) -> list:
    rng = np.random.default_rng(batch)
    like = torch.zeros((), dtype=torch.float64, device=device)
    x = manifold.random_point(batch, rng=rng, like=like)
    noise = torch.as_tensor(rng.standard_normal(tuple(x.shape)), device=device) * 0.1
    if name == "project":
        return [x + noise]
    if name == "exp":
        return [x, manifold.to_tangent(x, noise)]
    return [x, manifold.random_point(batch, rng=rng, like=like)]


def run_benchmark(
    cases: Sequence[tuple[int, int, int]],
    device: str = "cpu",
    compile_maps: bool = True,
    calls: int = 20,
    repeats: int = 5,
    partial: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Time every (case, map) at eager, deferred and off, and compiled at deferred and off.

    ``partial(result)`` is called after every cell with the result so far (the script writes
    it: compiling a cubic's unrolled iterations takes minutes, and a run stopped by a time
    limit keeps what it measured)."""
    cells = []
    start = time.perf_counter()
    for degree, dim, batch in cases:
        graph = BezierGraph(_curve(degree, dim))
        manifolds = {
            "graph": graph,
            "tunnel": EpsilonTunnel(graph.curve, 0.5 * min(graph.reach, 1)),
        }
        for kind, name in MAPS:
            manifold = manifolds[kind]
            method = getattr(manifold, name)
            args = _arguments(kind, name, manifold, batch, device)
            cell: dict[str, Any] = {
                "manifold": f"{type(manifold).__name__}(degree {degree})",
                "map": name,
                "dim": dim,
                "batch": batch,
            }
            for level in ("eager", "deferred", "off"):
                cell[f"{level}_ms"] = 1e3 * time_per_call(
                    method, args, device, level, calls, repeats
                )
                cell[f"{level}_reads"], cell[f"{level}_syncs"] = reads_and_syncs(
                    method, args, device, level
                )
            if compile_maps:
                cell.update(_compiled(method, args, device, calls, repeats))
            with riemfl.checks("eager"):
                expected = method(*args)
            with riemfl.checks("deferred"):
                got = method(*args)
            cell["agreement"] = float((got - expected).abs().max() / (1 + expected.abs().max()))
            cells.append(cell)
            if partial is not None:
                partial(_result(cells, device, compile_maps, calls, repeats, start))
    return _result(cells, device, compile_maps, calls, repeats, start)


def _result(cells, device, compile_maps, calls, repeats, start) -> dict[str, Any]:
    return {
        "settings": {
            "device": device,
            "dtype": "float64",
            "calls": calls,
            "repeats": repeats,
            "compile": compile_maps,
        },
        "cells": cells,
        "total_s": time.perf_counter() - start,
    }


def _compiled(method: Callable, args: Sequence, device: str, calls: int, repeats: int) -> dict:
    torch._dynamo.reset()
    compiled = torch.compile(method, fullgraph=True)
    out = {}
    for level in ("deferred", "off"):
        warm = time.perf_counter()
        with riemfl.checks(level):
            compiled(*args)
            riemfl.raise_deferred()
        out[f"compile_{level}_s"] = time.perf_counter() - warm
        out[f"compiled_{level}_ms"] = 1e3 * time_per_call(
            compiled, args, device, level, calls, repeats
        )
    return out


_COLUMNS = ("eager", "deferred", "off", "compiled_deferred", "compiled_off")


def _row(cell: dict[str, Any]) -> list[str]:
    eager = cell["eager_ms"]
    row = [cell["manifold"], cell["map"], str(cell["dim"]), str(cell["batch"])]
    for column in _COLUMNS:
        ms = cell.get(f"{column}_ms")
        row.append("-" if ms is None else f"{ms:.3f} ({ms / eager:.2f}x)")
    row += [f"{cell['eager_reads']}/{cell['deferred_reads']}", f"{cell['agreement']:.1e}"]
    return row


def format_table(result: dict[str, Any]) -> str:
    """The cells as a text table: ms per call (ratio to eager mode's), reads eager/deferred."""
    head = ["manifold", "map", "D", "batch", *(f"{c} ms" for c in _COLUMNS), "reads", "agree"]
    return table(head, [_row(c) for c in result["cells"]], left=(0, 1))


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one small case (the smoke test)")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled columns")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="results/bench_bezier_levels.json")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with single_thread() as threads:

        def partial(result: dict[str, Any]) -> None:
            result["machine"] = machine_info(threads)
            out.write_text(json.dumps(result, indent=1, default=str))
            out.with_suffix(".txt").write_text(format_table(result) + "\n")
            print(_row(result["cells"][-1]), flush=True)

        result = run_benchmark(
            QUICK_CASES if args.quick else CASES,
            device=args.device,
            compile_maps=not args.no_compile,
            calls=3 if args.quick else 20,
            repeats=2 if args.quick else 5,
            partial=partial,
        )
        result["machine"] = machine_info(threads)
    return write_result(result, args.out, format_table(result))


if __name__ == "__main__":
    main()

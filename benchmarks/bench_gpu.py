"""riemfl's torch maps on a GPU at each check level, with geoopt side by side.

For the families geoopt also has (``Sphere``, ``Stiefel`` with the QR retraction against
``EuclideanStiefel`` and the exact exponential against ``EuclideanStiefelExact``,
``PoincareBall``, ``SPD`` with the affine-invariant metric, ``Lorentz``), every map with a geoopt
method of the same meaning is timed on CUDA float64 tensors (a batch of points in one call) at
the check levels ``eager``, ``deferred`` and ``off`` (:mod:`riemfl.check_levels`), and geoopt's
method on the same data. geoopt's ``transp`` is a projection on the sphere and on Stiefel
(riemfl's ``transport``) and the parallel transport on the ball, the SPD cone and the hyperboloid
(riemfl's ``parallel_transport``); each pairing is checked by comparing the outputs
(``agreement``: largest difference relative to the output's size).

Reported per cell: median wall-clock milliseconds per call (samples of ``calls`` calls ended by
``torch.cuda.synchronize()``; deferred samples include one ``riemfl.raise_deferred()`` each, so
the boundary's read is paid once per sample, as a training loop pays it once per step); host
reads per call (:class:`~riemfl.testing.host_reads.HostReadCounter`: ``item``, ``bool``, ...);
and CUDA synchronisations per call, counted with ``torch.cuda.set_sync_debug_mode("warn")``,
which also sees the synchronisations made inside torch's C++ kernels (a factorisation's status
check) that the read counter cannot. With ``--compile``, a few maps are also timed compiled whole
(``torch.compile(fullgraph=True)``, inductor) at the deferred level, and geoopt's compiled.

Without a CUDA device the script prints so and writes a result marked ``skipped`` (CI has no
GPU); ``--device cpu`` runs the same table on CPU tensors (the smoke test; no sync column).

Usage::

    python benchmarks/bench_gpu.py [--quick] [--compile] [--device cuda|cpu]
                                   [--out results/bench_gpu.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared harness beside this script
from _harness import machine_info, write_result  # noqa: E402

import riemfl  # noqa: E402
from riemfl.testing.host_reads import HostReadCounter  # noqa: E402

try:  # the peer; a missing one is reported, not fatal
    import geoopt
except ImportError:  # pragma: no cover - depends on the environment
    geoopt = None

__all__ = [
    "LEVELS",
    "Family",
    "families",
    "run_benchmark",
    "format_table",
    "main",
    "reads_and_syncs",
    "time_per_call",
]

DEFAULT_OUT = "results/bench_gpu.json"
LEVELS = ("eager", "deferred", "off")
#: (family, map) pairs timed compiled with ``--compile``
COMPILED = (("Sphere", "exp"), ("Stiefel", "retract"), ("PoincareBall", "exp"), ("Lorentz", "exp"))


@dataclass
class Family:
    """One manifold and its geoopt peer: ``maps`` is riemfl map -> geoopt method name."""

    name: str
    size: str
    riemfl: riemfl.Manifold
    geoopt: Any
    maps: dict[str, str]
    #: geoopt keyword arguments per method (its cheapest setting of the same mathematics)
    keywords: dict[str, dict[str, Any]]
    #: a second geoopt manifold for some maps (Stiefel's exact exponential)
    other: dict[str, Any]


def families(quick: bool) -> list[Family]:
    """The benchmarked families at the sizes of a run (``quick``: tiny sizes)."""
    n_sphere, (n, p), n_ball, n_spd, n_lorentz = (
        (5, (6, 2), 4, 3, 4) if quick else (1000, (1000, 10), 1000, 50, 100)
    )
    common = {"project": "projx", "to_tangent": "proju", "egrad_to_rgrad": "egrad2rgrad"}
    if geoopt is None:
        raise SystemExit("geoopt is not installed: pip install geoopt")
    return [
        Family(
            "Sphere",
            f"n={n_sphere}",
            riemfl.Sphere(n_sphere),
            geoopt.Sphere(),
            {
                **common,
                "inner": "inner",
                "retract": "retr",
                "exp": "expmap",
                "log": "logmap",
                "dist": "dist",
                "transport": "transp",
            },
            {},
            {},
        ),
        Family(
            "Stiefel",
            f"{n}x{p}",
            riemfl.Stiefel(n, p, "qr"),
            geoopt.EuclideanStiefel(),
            {**common, "inner": "inner", "retract": "retr", "transport": "transp", "exp": "expmap"},
            {},
            {"exp": geoopt.EuclideanStiefelExact()},
        ),
        Family(
            "PoincareBall",
            f"n={n_ball}",
            riemfl.PoincareBall(n_ball),
            geoopt.PoincareBall(),
            {
                "egrad_to_rgrad": "egrad2rgrad",
                "exp": "expmap",
                "log": "logmap",
                "dist": "dist",
                "parallel_transport": "transp",
            },
            {},
            {},
        ),
        Family(
            "SPD",
            f"n={n_spd}",
            riemfl.SPD(n_spd),
            geoopt.SymmetricPositiveDefinite(),
            {
                "egrad_to_rgrad": "egrad2rgrad",
                "inner": "inner",
                "exp": "expmap",
                "log": "logmap",
                "dist": "dist",
                "parallel_transport": "transp",
            },
            {},
            {},
        ),
        Family(
            "Lorentz",
            f"n={n_lorentz}",
            riemfl.Lorentz(n_lorentz),
            geoopt.Lorentz(),
            {
                "to_tangent": "proju",
                "inner": "inner",
                "exp": "expmap",
                "log": "logmap",
                "dist": "dist",
                "parallel_transport": "transp",
            },
            {"exp": {"norm_tan": False, "project": False}},
            {},
        ),
    ]


def _data(family: Family, batch: int, device: str) -> dict[str, torch.Tensor]:
    m = family.riemfl
    rng = np.random.default_rng(0)
    x = m.random_point(batch, rng=rng)
    u = m.random_tangent(x, rng=rng)
    v = m.random_tangent(x, rng=rng)
    scale = 0.3 / np.sqrt(np.maximum(np.asarray(m.inner(x, u, u)), 1e-300))
    u = u * scale.reshape(scale.shape + (1,) * m.ndim)
    y = np.asarray(m.exp(x, u)) if m.supports("exp")[0] else np.asarray(m.retract(x, u))
    a = x + 0.05 * rng.standard_normal(x.shape)
    data = {"x": x, "u": u, "v": v, "y": y, "a": a, "g": rng.standard_normal(x.shape)}
    if isinstance(m, riemfl.SPD):  # a symmetric ambient matrix
        data["g"] = 0.5 * (data["g"] + np.swapaxes(data["g"], -1, -2))
    return {k: torch.as_tensor(np.asarray(val), device=device) for k, val in data.items()}


#: the arguments of each map, by name in the data
ARGS: dict[str, tuple[str, ...]] = {
    "project": ("a",),
    "to_tangent": ("x", "g"),
    "egrad_to_rgrad": ("x", "g"),
    "inner": ("x", "u", "v"),
    "retract": ("x", "u"),
    "exp": ("x", "u"),
    "log": ("x", "y"),
    "dist": ("x", "y"),
    "transport": ("x", "y", "v"),
    "parallel_transport": ("x", "y", "v"),
}


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_per_call(
    fn: Callable, args: Sequence, device: str, level: str | None, calls: int, repeats: int
) -> float:
    """Median seconds per call; ``level`` None for a peer (no check level)."""
    context = riemfl.checks(level) if level is not None else contextlib.nullcontext()
    with context:
        for _ in range(3):
            fn(*args)
        riemfl.raise_deferred()
        _sync(device)
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                fn(*args)
            riemfl.raise_deferred()
            _sync(device)
            samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def reads_and_syncs(
    fn: Callable, args: Sequence, device: str, level: str
) -> tuple[int, int | None]:
    with riemfl.checks(level):
        fn(*args)  # warm (lazy imports, caches)
        _sync(device)
        with HostReadCounter() as reads:
            fn(*args)
        syncs = None
        if device == "cuda":
            _sync(device)
            torch.cuda.set_sync_debug_mode("warn")
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    fn(*args)
            finally:
                torch.cuda.set_sync_debug_mode(0)
            syncs = sum("synchroniz" in str(w.message) for w in caught)
    return reads.total, syncs


def _agreement(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    ours, theirs = ours.detach().double().cpu(), theirs.detach().double().cpu()
    if ours.shape != theirs.shape:
        theirs = theirs.reshape(ours.shape) if theirs.numel() == ours.numel() else theirs
    if ours.shape != theirs.shape:
        return float("inf")
    return float((ours - theirs).abs().max() / (1.0 + ours.abs().max()))


def _peer(family: Family, name: str) -> Callable:
    manifold = family.other.get(name, family.geoopt)
    method = getattr(manifold, family.maps[name])
    keywords = family.keywords.get(name, {})
    return (lambda *a: method(*a, **keywords)) if keywords else method


def run_benchmark(
    quick: bool = False,
    compile_maps: bool = False,
    device: str = "cuda",
    batch: int | None = None,
    partial: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Time every (family, map, level) and geoopt's method; see the module docstring.

    ``partial(result)`` is called after every cell with the result so far (the script writes
    it, so a run stopped by a time limit keeps what it measured)."""
    if device == "cuda" and not torch.cuda.is_available():
        return {"skipped": "no CUDA device", "cells": []}
    batch = batch or (4 if quick else 256)
    calls, repeats = (3, 2) if quick else (50, 7)
    cells: list[dict[str, Any]] = []
    start = time.perf_counter()
    for family in families(quick):
        data = _data(family, batch, device)
        for name in family.maps:
            args = [data[k] for k in ARGS[name]]
            ours = getattr(family.riemfl, name)
            theirs = _peer(family, name)
            cell: dict[str, Any] = {"family": family.name, "size": family.size, "map": name}
            with riemfl.checks("eager"):
                expected = ours(*args)
            cell["agreement"] = _agreement(expected, theirs(*args))
            for level in LEVELS:
                cell[f"{level}_ms"] = 1e3 * time_per_call(ours, args, device, level, calls, repeats)
                cell[f"{level}_reads"], cell[f"{level}_syncs"] = reads_and_syncs(
                    ours, args, device, level
                )
            cell["geoopt_ms"] = 1e3 * time_per_call(theirs, args, device, None, calls, repeats)
            cell["geoopt_reads"], cell["geoopt_syncs"] = reads_and_syncs(
                theirs, args, device, "off"
            )
            cell["ratio_deferred"] = cell["deferred_ms"] / cell["geoopt_ms"]
            cell["ratio_off"] = cell["off_ms"] / cell["geoopt_ms"]
            if compile_maps and (family.name, name) in COMPILED:
                cell.update(_compiled(ours, theirs, args, device, calls, repeats))
            cells.append(cell)
            if partial is not None:
                partial(_result(cells, batch, calls, repeats, device, compile_maps, start))
    return _result(cells, batch, calls, repeats, device, compile_maps, start)


def _result(cells, batch, calls, repeats, device, compile_maps, start) -> dict[str, Any]:
    return {
        "machine": machine_info(
            {"torch_threads": torch.get_num_threads(), "blas_threads": "default"},
            geoopt=getattr(geoopt, "__version__", None),
            device=torch.cuda.get_device_name() if device == "cuda" else "cpu",
        ),
        "settings": {
            "batch": batch,
            "calls": calls,
            "repeats": repeats,
            "dtype": "float64",
            "device": device,
            "compile": compile_maps,
        },
        "cells": cells,
        "total_s": time.perf_counter() - start,
    }


def _compiled(
    ours: Callable, theirs: Callable, args: Sequence, device: str, calls: int, repeats: int
) -> dict[str, Any]:
    torch._dynamo.reset()
    with riemfl.checks("deferred"):
        ours_c = torch.compile(ours, fullgraph=True)
        ours_c(*args)
    theirs_c = torch.compile(theirs)
    theirs_c(*args)
    ours_ms = 1e3 * time_per_call(ours_c, args, device, "deferred", calls, repeats)
    theirs_ms = 1e3 * time_per_call(theirs_c, args, device, None, calls, repeats)
    return {"compiled_deferred_ms": ours_ms, "compiled_geoopt_ms": theirs_ms}


def format_table(result: dict[str, Any]) -> str:
    """The cells as a text table."""
    if result.get("skipped"):
        return f"skipped: {result['skipped']}"
    s = result["settings"]
    lines = [
        f"{result['machine'].get('device', '')}; batch {s['batch']}, {s['dtype']}, {s['device']}; "
        f"median ms per call; reads / syncs per call; ratio = riemfl / geoopt",
        f"{'family':<13}{'size':<10}{'map':<19}{'eager':>8}{'deferred':>9}{'off':>8}{'geoopt':>8}"
        f"{'r.def':>7}{'r.off':>7}  {'reads e/d/o/g':<14}{'syncs e/d/o/g':<14}{'agree':>8}",
    ]
    for c in result["cells"]:
        reads = "/".join(str(c[f"{k}_reads"]) for k in (*LEVELS, "geoopt"))
        syncs = "/".join(str(c[f"{k}_syncs"]) for k in (*LEVELS, "geoopt"))
        lines.append(
            f"{c['family']:<13}{c['size']:<10}{c['map']:<19}{c['eager_ms']:8.3f}"
            f"{c['deferred_ms']:9.3f}{c['off_ms']:8.3f}{c['geoopt_ms']:8.3f}"
            f"{c['ratio_deferred']:7.2f}{c['ratio_off']:7.2f}  {reads:<14}{syncs:<14}"
            f"{c['agreement']:8.1e}"
        )
        if "compiled_deferred_ms" in c:
            lines.append(
                f"{'':<23}compiled{'':<11}{'':>8}{c['compiled_deferred_ms']:9.3f}{'':>8}"
                f"{c['compiled_geoopt_ms']:8.3f}"
                f"{c['compiled_deferred_ms'] / c['compiled_geoopt_ms']:7.2f}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a few seconds")
    parser.add_argument("--compile", action="store_true", help="also time a few maps compiled")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--batch", type=int, default=None, help="points per call (default 256)")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def partial(result: dict[str, Any]) -> None:
        out.write_text(json.dumps(result, indent=1, default=str))
        out.with_suffix(".txt").write_text(format_table(result) + "\n")

    result = run_benchmark(args.quick, args.compile, args.device, args.batch, partial)
    return write_result(result, args.out, format_table(result))


if __name__ == "__main__":
    main()

"""Count the host reads of every torch map of every manifold family.

For every family of :data:`riemfl.manifolds.catalogue.FAMILIES` (its first constructor example)
and every public map the family supports (``manifold.supports(name)``), one call on torch float64
CPU tensors (a batch of 8 points, arguments built by
:func:`riemfl.testing.suite.method_arguments`) runs inside a
:class:`riemfl.testing.host_reads.HostReadCounter`. Reported per (family, map): the reads of the
call, the reads per function (``item``, ``__bool__``, ...) and per source location. The table
prints family x map with totals; the summary lists the locations with the most reads.

A host read stalls a GPU's launch queue and breaks a ``torch.compile`` graph, so every read
counted here is one to remove (or to defer) for the maps to run whole on an accelerator. With
``--graph-breaks`` each call is also traced by ``torch._dynamo.explain`` and its graph breaks
counted (1.3 to 2 s per map on a 2-core CPU: minutes for the 268 maps of the catalogue).

Usage::

    python benchmarks/bench_host_reads.py [--quick] [--manifolds Sphere,Stiefel,...]
                                          [--graph-breaks] [--out results/bench_host_reads.json]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

import riemfl

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared harness beside this script
from _harness import machine_info, write_result  # noqa: E402

from riemfl.manifolds import Manifold  # noqa: E402
from riemfl.manifolds.catalogue import FAMILIES  # noqa: E402
from riemfl.testing.config import METHODS  # noqa: E402
from riemfl.testing.host_reads import HostReadCounter  # noqa: E402
from riemfl.testing.suite import method_arguments  # noqa: E402

__all__ = ["MAPS", "QUICK_FAMILIES", "run_benchmark", "format_table", "format_summary", "main"]

DEFAULT_OUT = "results/bench_host_reads.json"
BATCH = 8
SEED = 0
TOP = 10
#: the public maps counted, in the order of the table (the conformance kit's)
MAPS = METHODS
#: the families of ``--quick``
QUICK_FAMILIES = ("Sphere", "Stiefel", "Lorentz")


def _to_torch(a: Any) -> Any:
    return torch.as_tensor(np.asarray(a), dtype=torch.float64)


def count_map(
    manifold: Manifold,
    name: str,
    batch: int = BATCH,
    seed: int = SEED,
    graph_breaks: bool = False,
    level: str = "auto",
) -> dict:
    """Call ``manifold.<name>`` once on torch float64 tensors inside a counter.

    With ``graph_breaks``, also trace the call with ``torch._dynamo.explain`` (1 to 2 s per map
    on a CPU) and record its graph breaks.

    Returns
    -------
    dict
        ``reads`` (int), ``by_function`` and ``locations`` (name -> count), ``error`` (None, or
        the exception of the call or of building its arguments as ``"Type: message"``); with
        ``graph_breaks``, ``graph_breaks`` (int, None where tracing failed) and
        ``break_reasons`` (the first line of each distinct reason).
    """
    try:
        args, _ = method_arguments(manifold, name, seed, batch)
        targs = [_to_torch(a) for a in args]
    except Exception as exc:  # an argument builder that does not fit this family
        return {"reads": 0, "by_function": {}, "locations": {}, "error": _describe(exc)}
    error = None
    try:
        with riemfl.checks(level):  # its exit reads the deferred verdicts, outside the counter
            with HostReadCounter() as counter:
                getattr(manifold, name)(*targs)
    except Exception as exc:
        error = _describe(exc)
    cell = {
        "reads": counter.total,
        "by_function": dict(counter.by_function.most_common()),
        "locations": dict(counter.by_location.most_common()),
        "error": error,
    }
    if graph_breaks:
        with riemfl.checks(level):
            cell.update(_graph_breaks(getattr(manifold, name), targs))
    return cell


def _graph_breaks(fn: Any, args: Sequence) -> dict[str, Any]:
    """``torch._dynamo.explain``'s graph-break count of ``fn(*args)`` and its distinct reasons."""
    import torch._dynamo

    try:
        with warnings.catch_warnings():  # dynamo's advice on each break: the reasons say it
            warnings.simplefilter("ignore", UserWarning)
            explained = torch._dynamo.explain(fn)(*args)
    except Exception as exc:  # a map dynamo cannot trace at all
        return {"graph_breaks": None, "break_reasons": [_describe(exc)]}
    finally:
        torch._dynamo.reset()
    reasons = dict.fromkeys(str(b.reason).splitlines()[0] for b in explained.break_reasons)
    return {"graph_breaks": explained.graph_break_count, "break_reasons": list(reasons)}


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def run_benchmark(
    families: Sequence[str] | None = None, graph_breaks: bool = False, level: str = "auto"
) -> dict[str, Any]:
    """Count the reads (and, with ``graph_breaks``, the graph breaks) of every supported map of
    ``families`` (default all).

    Returns
    -------
    dict
        ``machine``, ``settings``, ``cells`` (one per family and supported map: ``family``,
        ``manifold``, ``map``, ``reads``, ``by_function``, ``locations``, ``error``),
        ``unsupported`` (family -> map -> reason) and ``totals`` (``reads``, ``calls``,
        ``by_function``, ``top_locations``).
    """
    start = time.perf_counter()
    by_name = {f.name: f for f in FAMILIES}
    names = list(by_name) if families is None else list(families)
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"unknown families {unknown}; expected some of {list(by_name)}")
    cells: list[dict[str, Any]] = []
    unsupported: dict[str, dict[str, str]] = {}
    for name in names:
        family = by_name[name]
        if not family.examples:
            unsupported[name] = {"*": "no constructor example in the catalogue"}
            continue
        manifold = family.examples[0]()
        for map_name in MAPS:
            ok, why = manifold.supports(map_name)
            if not ok:
                unsupported.setdefault(name, {})[map_name] = why
                continue
            cell = count_map(manifold, map_name, graph_breaks=graph_breaks, level=level)
            cells.append({"family": name, "manifold": repr(manifold), "map": map_name, **cell})
    functions: Counter[str] = Counter()
    locations: Counter[str] = Counter()
    for c in cells:
        functions.update(c["by_function"])
        locations.update(c["locations"])
    result = {
        "machine": machine_info(
            {"torch_threads": torch.get_num_threads(), "blas_threads": "default"}
        ),
        "settings": {
            "families": names,
            "batch": BATCH,
            "seed": SEED,
            "dtype": "float64",
            "graph_breaks": graph_breaks,
            "check_level": level,
        },
        "cells": cells,
        "unsupported": unsupported,
        "totals": {
            "reads": sum(c["reads"] for c in cells),
            "calls": len(cells),
            "calls_with_reads": sum(1 for c in cells if c["reads"]),
            "errors": sum(1 for c in cells if c["error"]),
            "by_function": dict(functions.most_common()),
            "top_locations": dict(locations.most_common(TOP)),
            **(_break_totals(cells) if graph_breaks else {}),
        },
        "total_s": time.perf_counter() - start,
    }
    return result


def _break_totals(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Graph breaks over the cells: their sum, the maps traced whole, the maps not traced."""
    traced = [c["graph_breaks"] for c in cells if c["graph_breaks"] is not None]
    return {
        "graph_breaks": sum(traced),
        "maps_whole": sum(1 for b in traced if b == 0),
        "maps_untraced": len(cells) - len(traced),
    }


def format_table(result: dict[str, Any], key: str = "reads") -> str:
    """Family x map table of ``key`` per call (``reads`` or ``graph_breaks``; ``-``
    unsupported, ``E`` the call raised, ``?`` not traced)."""
    cells = {(c["family"], c["map"]): c for c in result["cells"]}
    families = [
        f
        for f in result["settings"]["families"]
        if f not in result["unsupported"] or "*" not in result["unsupported"][f]
    ]
    short = {
        m: m.replace("retraction_transport", "retr_transp").replace("parallel_", "par_")
        for m in MAPS
    }
    widths = [max(len("family"), *(len(f) for f in families))] if families else [6]
    header = ["family".ljust(widths[0])] + [short[m][:11].rjust(11) for m in MAPS] + ["  total"]
    lines = [" ".join(header)]
    for f in families:
        row = [f.ljust(widths[0])]
        total = 0
        for m in MAPS:
            c = cells.get((f, m))
            if c is None:
                row.append("-".rjust(11))
                continue
            value = c[key]
            total += value or 0
            text = "?" if value is None else f"{value}"
            row.append((text + ("E" if c["error"] else "")).rjust(11))
        lines.append(" ".join(row) + f"{total:7d}")
    t = result["totals"]
    if key == "graph_breaks":
        lines.append(
            f"total: {t['graph_breaks']} graph breaks over {t['calls']} calls "
            f"({t['maps_whole']} traced whole; {t['maps_untraced']} not traced)"
        )
    else:
        lines.append(
            f"total: {t['reads']} reads over {t['calls']} calls "
            f"({t['calls_with_reads']} calls read; {t['errors']} calls raised)"
        )
    return "\n".join(lines)


def format_summary(result: dict[str, Any]) -> str:
    """Reads per function and the locations with the most reads."""
    t = result["totals"]
    lines = ["reads per function: " + ", ".join(f"{k} {v}" for k, v in t["by_function"].items())]
    lines.append("top locations:")
    lines += [f"  {v:4d}  {k}" for k, v in t["top_locations"].items()]
    errors = [c for c in result["cells"] if c["error"]]
    if errors:
        lines.append("calls that raised (reads counted up to the error):")
        lines += [f"  {c['family']}.{c['map']}: {c['error']}" for c in errors]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command-line entry point: count, print the table and the summary, write the JSON.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments (default: ``sys.argv[1:]``): ``--quick`` (the families of
        :data:`QUICK_FAMILIES`), ``--manifolds A,B``, ``--out PATH``.

    Returns
    -------
    dict
        The result of :func:`run_benchmark`.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"only {','.join(QUICK_FAMILIES)}")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    parser.add_argument("--manifolds", default=None, help="comma-separated families (default all)")
    parser.add_argument(
        "--level",
        default="auto",
        choices=riemfl.check_levels.LEVELS,
        help="the check level of the calls (riemfl.checks; default auto: eager on the CPU)",
    )
    parser.add_argument(
        "--graph-breaks",
        action="store_true",
        help="also count torch._dynamo graph breaks per map (1-2 s per map)",
    )
    args = parser.parse_args(argv)
    families: Sequence[str] | None = None
    if args.manifolds is not None:
        families = [m.strip() for m in args.manifolds.split(",") if m.strip()]
    elif args.quick:
        families = QUICK_FAMILIES
    result = run_benchmark(families, graph_breaks=args.graph_breaks, level=args.level)
    summary = f"{format_summary(result)}\n\n{result['total_s']:.1f} s"
    tables = [format_table(result)]
    if args.graph_breaks:
        tables.append(format_table(result, "graph_breaks"))
    return write_result(result, args.out, "\n\n".join([*tables, summary]))


if __name__ == "__main__":
    main()

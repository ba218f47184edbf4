"""Shared pieces of riemfl's benchmark scripts: thread pinning and machine information.

Both benchmarks time single-threaded code (one BLAS thread, one torch thread) so that numbers
are comparable on the 2-core development and CI machines.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

import riemfl

__all__ = ["openblas_one_thread", "single_thread", "machine_info", "write_result"]

THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@contextlib.contextmanager
def openblas_one_thread() -> Iterator[int]:
    """Set every loaded OpenBLAS to one thread through its C API (Linux); restore on exit.

    Needed when numpy was imported before the thread environment variables could be set (e.g.
    under pytest). Yields the number of libraries set.
    """
    restore: list[tuple[Any, int]] = []
    maps = Path("/proc/self/maps")
    libs: set[str] = set()
    if maps.exists():
        for line in maps.read_text().splitlines():
            parts = line.split()
            if parts and "openblas" in Path(parts[-1]).name.lower():
                libs.add(parts[-1])
    for lib_path in sorted(libs):
        try:
            lib = ctypes.CDLL(lib_path)
        except OSError:
            continue
        for name in (
            "scipy_openblas_set_num_threads64_",
            "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_",
            "openblas_set_num_threads",
        ):
            setter = getattr(lib, name, None)
            getter = getattr(lib, name.replace("set_num", "get_num"), None)
            if setter is not None and getter is not None:
                getter.restype = ctypes.c_int
                restore.append((setter, int(getter())))
                setter(ctypes.c_int(1))
                break
    try:
        yield len(restore)
    finally:
        for setter, value in restore:
            setter(ctypes.c_int(value))


@contextlib.contextmanager
def single_thread() -> Iterator[dict[str, Any]]:
    """One torch thread and one BLAS thread (threadpoolctl if installed, else OpenBLAS's C API)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    info: dict[str, Any] = {"torch_threads": torch.get_num_threads()}
    try:
        with contextlib.ExitStack() as stack:
            try:
                import threadpoolctl

                stack.enter_context(threadpoolctl.threadpool_limits(limits=1))
                info["blas_threads"] = "1 (threadpoolctl)"
            except ImportError:
                pinned = stack.enter_context(openblas_one_thread())
                env = [os.environ.get(v) for v in THREAD_ENV[:2]]
                if pinned:
                    info["blas_threads"] = f"1 (openblas_set_num_threads, {pinned} libraries)"
                elif env == ["1", "1"]:
                    info["blas_threads"] = "1 (environment variables)"
                else:
                    info["blas_threads"] = "not controlled"
            yield info
    finally:
        torch.set_num_threads(before)


def machine_info(thread_info: dict[str, Any], **versions: Any) -> dict[str, Any]:
    """Platform, processor, load, library versions (plus ``versions``) and thread settings."""
    processor = platform.processor()
    if Path("/proc/cpuinfo").exists():
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                processor = line.split(":", 1)[1].strip()
                break
    return {
        "platform": platform.platform(),
        "processor": processor,
        "cpu_count": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "torch": torch.__version__,
        "riemfl": getattr(riemfl, "__version__", None),
        **versions,
        "torch_threads": thread_info["torch_threads"],
        "blas_threads": thread_info["blas_threads"],
        "thread_env": {v: os.environ.get(v) for v in THREAD_ENV},
    }


def write_result(result: dict[str, Any], out: str | Path, table: str) -> dict[str, Any]:
    """Write ``result`` as JSON to ``out`` (creating its folder), print ``table`` and where the
    JSON went; return ``result`` (the end of every benchmark script's ``main``)."""
    import json

    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, default=str))
    print(table)
    print(f"results written to {path}")
    return result

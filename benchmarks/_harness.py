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

__all__ = [
    "openblas_one_thread",
    "single_thread",
    "steady_allocator",
    "machine_info",
    "write_result",
]

THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


#: glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def steady_allocator(limit: int = 1 << 30) -> dict[str, Any]:
    """Keep freed memory in the process (glibc): allocations below ``limit`` bytes come from the
    heap, and the heap's top is not returned to the system.

    By default glibc serves large blocks (from 128 KiB, a threshold it moves as blocks are freed)
    with ``mmap`` and gives them back on ``free``, so a training step that allocates and frees
    activations of a few hundred KiB can pay page faults for them at every step, or not,
    depending on the order of earlier allocations: a convolutional model's step at batch 256 took
    3.0 to 5.0 ms in one process over runs. With the thresholds fixed every variant measures its
    arithmetic and torch's costs. Returns what was set (for the JSON); a no-op elsewhere.
    """
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return {"allocator": "default (not glibc)"}
    libc = ctypes.CDLL(None)
    done = (
        libc.mallopt(_M_MMAP_THRESHOLD, limit) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, limit) == 1
    )
    return {"allocator": f"glibc, mmap and trim thresholds {limit} bytes" if done else "default"}


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

"""Test-suite set-up: hypothesis profiles (see README, "Testing riemfl") and thread counts."""

import importlib.util
import os
import sys
from pathlib import Path

# One BLAS/OpenMP thread per test process, set before numpy or scipy load their BLAS (each reads
# it once, and scipy's copy is loaded lazily, after this file): the suite's matrices are tiny,
# and under pytest-xdist two workers each spinning two OpenBLAS threads on two cores made
# Stiefel's iterative log 70x slower than alone. Subprocesses the tests start inherit it.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402 - after the thread settings above

from riemfl.testing import register_profiles  # noqa: E402

register_profiles()

# riemfl's own pytest plugin (the kit's marker, short hypothesis settings chains) loads by itself
# through its entry point; pytester runs small suites in-process (tests/test_kit_plugin.py).
pytest_plugins = ["pytester"]

if importlib.util.find_spec("torch") is not None:
    import torch

    # The suite's matrices are tiny: torch's intra-op thread pool only adds contention on the
    # 2-core CI machines (a 6 x 6 matrix_exp goes from 0.1 ms to ~2 ms with 2 threads).
    torch.set_num_threads(1)


ROOT = Path(__file__).resolve().parents[1]


def _load_script(folder: str, name: str):
    """Import ``ROOT/folder/name.py`` as a module (benchmarks and examples are scripts)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module


@pytest.fixture
def load_benchmark():
    """Import a script of ``benchmarks/`` by file name (they are scripts, not a package)."""
    return lambda name: _load_script("benchmarks", name)


@pytest.fixture
def load_example():
    """Import a script of ``examples/`` by file name."""
    return lambda name: _load_script("examples", name)


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``-n``), the Flower tests share one worker (``--dist loadgroup``):
    each starts Ray or a SuperLink with its nodes, and two at once would only fight for the
    cores."""
    flower = pytest.mark.xdist_group("flower")
    for item in items:
        if "flower" in item.path.name:  # the adapter's tests and the Flower benchmarks' smoke tests
            item.add_marker(flower)

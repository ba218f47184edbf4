"""Smoke test of ``benchmarks/bench_flower_scale.py``: the quick run has the full structure.

No wall-clock assertions: every path has its cell with positive finite times and memory, the
ratios follow from them, and every Flower run ended at ``run_sync``'s point.
"""

from __future__ import annotations

import json
import math

import pytest

from riemfl.testing import importorskip

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'riemfl[flower]')")
pytest.importorskip("ray", reason="Flower's simulation engine needs Ray (flwr[simulation])")
importorskip("torch")  # the benchmark harness reports torch's version

# a Ray simulation and a loopback deployment: part of the full run only
pytestmark = pytest.mark.slow


def _positive(*values) -> bool:
    return all(isinstance(v, int | float) and math.isfinite(v) and v > 0 for v in values)


def _check_cell(cell, base=None) -> None:
    assert "failed" not in cell and "skipped" not in cell, cell
    assert _positive(cell["round_s"], cell["total_s"], cell["peak_bytes"], *cell["round_range_s"])
    low, high = cell["round_range_s"]
    assert low <= cell["round_s"] <= high
    if base is not None:  # a Flower cell: every client took part in every round
        for run in cell.get("runs", [cell]):
            assert run["participants"] == [20] * cell["steps"] and run["warnings"] == 0
        assert cell["time_ratio"] == pytest.approx(cell["round_s"] / base["round_s"])
        assert cell["memory_ratio"] == pytest.approx(cell["peak_bytes"] / base["peak_bytes"])
        assert cell["max_abs_diff"] <= 1e-10


def test_quick_benchmark_structure(tmp_path, load_benchmark):
    bench = load_benchmark("bench_flower_scale")
    out = tmp_path / "nested" / "bench_flower_scale.json"
    result = bench.run_benchmark(quick=True, out=out)
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))

    s = result["settings"]
    assert s["is_quick"] and s["clients"] == 20 and _positive(s["step_size"])
    for key in ("platform", "processor", "cpu_count", "python", "numpy", "riemfl", "flwr", "ray"):
        assert key in result["machine"]

    base = result["in-process"]
    _check_cell(base)
    assert base["repeats"] == s["in_process"]["repeats"]
    (sim,) = result["simulation"]
    _check_cell(sim, base)
    assert sim["nodes"] == 2
    (run,) = sim["runs"]
    assert len(run["round_s"]) == s["simulation"]["steps"]
    assert run["processes_seen"] > 2  # the interpreter and Ray's processes below it
    (deployment,) = result["deployment"]
    _check_cell(deployment, base)
    assert deployment["nodes"] == 2 and len(deployment["rounds_s"]) == s["deployment"]["steps"]
    assert deployment["processes_seen"] >= 3  # the SuperLink and two SuperNodes, at least

    table = bench.format_table(result)
    assert len(table.splitlines()) == 2 + 3
    assert "| simulation (Ray) | 2 | 10 |" in table and "| deployment (loopback) | 2 |" in table


def test_a_failed_size_stops_the_deployments(load_benchmark):
    """After a failure, the larger sizes are not tried; the table says so."""
    bench = load_benchmark("bench_flower_scale")
    limits = bench.Settings().deployment
    failed = {"nodes": 10, "steps": 3, "repeats": 1, "failed": "NodeRegistrationError: late"}
    assert bench._next_size_blocked(failed, 30, limits) == "not tried: 10 SuperNodes failed"
    slow = {"nodes": 10, "steps": 3, "total_s": limits["max_run_s"], "peak_anon_bytes": 1}
    assert bench._next_size_blocked(slow, 30, limits).startswith("skipped: projected")
    result = {
        "settings": {"clients": 1000},
        "deployment": [failed, {"nodes": 30, "steps": 3, "skipped": "not tried: x"}],
    }
    lines = bench.format_table(result).splitlines()
    assert "failed: NodeRegistrationError: late" in lines[2] and "not tried: x" in lines[3]

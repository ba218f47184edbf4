"""Smoke test of ``benchmarks/bench_flower.py``: the quick run has the full structure.

No wall-clock assertions: only that every cell is present, times are positive and finite, the
ratios and residuals follow from the times, and the Flower run had the in-process iterates.
"""

from __future__ import annotations

import json
import math

import pytest

from riemfl.testing import importorskip

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'riemfl[flower]')")
pytest.importorskip("ray", reason="Flower's simulation engine needs Ray (flwr[simulation])")
importorskip("torch")  # the benchmark harness reports torch's thread settings

# seconds per test (simulations, reproductions, benchmark runs): part of the full run only
pytestmark = pytest.mark.slow


def _positive(*values) -> bool:
    return all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in values)


def test_quick_benchmark_structure(tmp_path, load_benchmark):
    bench = load_benchmark("bench_flower")
    out = tmp_path / "nested" / "bench_flower.json"
    result = bench.run_benchmark(quick=True, out=out)
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))

    s = result["settings"]
    assert s["is_quick"] and s["supernodes"] == 10
    for key in ("platform", "processor", "cpu_count", "python", "numpy", "riemfl", "flwr", "ray"):
        assert key in result["machine"]

    sync, asy, ping = result["sync"], result["async"], result["messaging"]
    assert _positive(sync["in_process_ms"], sync["flower_ms"], sync["empty_round_trip_ms"])
    assert sync["ratio"] == pytest.approx(sync["flower_ms"] / sync["in_process_ms"])
    assert sync["residual_ms"] == pytest.approx(
        sync["flower_ms"] - sync["empty_round_trip_ms"] - sync["in_process_ms"]
    )
    assert sync["same_iterates_max_abs_diff"] <= 1e-10
    assert _positive(sync["in_process_rule_cpu_ms"], sync["flower_rule_cpu_ms"])

    assert _positive(asy["in_process_ms"], asy["flower_ms"], asy["per_message_ms"])
    assert asy["ratio"] == pytest.approx(asy["flower_ms"] / asy["in_process_ms"])
    assert asy["residual_ms"] == pytest.approx(
        asy["flower_ms"] - asy["per_message_ms"] - asy["in_process_ms"]
    )
    assert asy["updates"] >= s["asynchronous"]["steps"]
    assert asy["empty_round_trip_ms"] == pytest.approx(1e3 * ping["median_one_node_s"])

    assert ping["nodes"] == 10 and ping["payload_bytes"] == 2 * 20 * 5 * 8
    assert len(ping["all_nodes_s"]) == len(ping["one_node_s"]) == s["ping_repeats"]
    assert sync["empty_round_trip_ms"] == pytest.approx(1e3 * ping["median_all_nodes_s"])

    table = bench.format_table(result)
    assert len(table.splitlines()) == 4
    assert "sync round" in table and "async update" in table

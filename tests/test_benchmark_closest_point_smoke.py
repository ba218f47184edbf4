"""Smoke test of ``benchmarks/bench_closest_point.py``: the quick run has the full structure.

No wall-clock assertions: every case is present with positive times, the speed-up is the ratio
of the medians, and the polynomial method was never farther than the multi-start Newton.
"""

from __future__ import annotations

import json

import pytest

from riemfl.testing import importorskip


def test_quick_benchmark_structure(tmp_path, load_benchmark):
    importorskip("torch")  # the benchmark times the torch path too
    bench = load_benchmark("bench_closest_point")
    out = tmp_path / "bench_closest_point.json"
    result = bench.main(["--quick", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["quick"] is True and saved["newton_starts"] == 9
    rows = result["rows"]
    assert [(r["degree"], r["dim"], r["queries"]) for r in rows] == bench.QUICK_CASES
    for r in rows:
        assert r["polynomial_us"] > 0 and r["newton_us"] > 0
        assert r["speedup"] == pytest.approx(r["newton_us"] / r["polynomial_us"])
        assert r["max_excess_over_newton"] <= 1e-9  # global: never farther than Newton
        assert r["max_t_difference_where_both_global"] <= 1e-6
        assert 0 <= r["newton_missed_global"] <= r["queries"]
    assert "speedup" in bench.format_table(result)

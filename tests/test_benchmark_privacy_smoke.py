"""Smoke test of ``benchmarks/bench_privacy.py``: the quick run has the full structure (no
wall-clock assertions)."""

from __future__ import annotations

import json
import math

import pytest


@pytest.mark.slow
def test_quick_benchmark_structure(tmp_path, load_benchmark):
    bench = load_benchmark("bench_privacy")
    out = tmp_path / "bench_privacy.json"
    result = bench.run_benchmark(quick=True, out=out)
    assert json.loads(out.read_text())["cells"] == result["cells"]
    cells = {(c["problem"], c["config"]): c for c in result["cells"]}
    assert {c for _, c in cells} == set(bench.CONFIGS)
    for (problem, config), c in cells.items():
        assert all(math.isfinite(c[k]) and c[k] > 0 for k in ("round_ms", "wall_round_ms"))
        ref = cells[(problem, bench.REFERENCE.get(config, config))]
        assert c["ratio"] == pytest.approx(c["round_ms"] / ref["round_ms"])
    assert "| kpca-digits | central |" in bench.format_table(result)

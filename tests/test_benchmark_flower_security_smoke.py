"""Smoke test of ``benchmarks/bench_flower_security.py``: the quick run's structure, without the
deployment part (its processes take minutes; ``tests/adapters/test_flower_deployment_secure.py``
runs the same configurations through a deployment). No wall-clock assertions."""

from __future__ import annotations

import json
import math

import pytest

from riemfl.testing import importorskip

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'riemfl[flower]')")
importorskip("torch")  # the benchmark harness reports torch's thread settings


@pytest.mark.slow
def test_quick_benchmark_structure(tmp_path, load_benchmark):
    bench = load_benchmark("bench_flower_security")
    out = tmp_path / "bench_flower_security.json"
    result = bench.run_benchmark(quick=True, out=out, deployment=False)
    assert json.loads(out.read_text())["in_process"] == result["in_process"]
    p = result["in_process"]
    assert all(math.isfinite(p[k]) and p[k] > 0 for k in ("plain_ms", "central_dp_ms"))
    assert p["ratio"] == pytest.approx(p["central_dp_ms"] / p["plain_ms"])
    assert result["deployment"] == {} and set(result["settings"]["configs"]) == set(bench.CONFIGS)
    cell = {"round_ms": 2.0, "ratio": 1.0, "round_times_s": [0.001, 0.002, 0.003]}
    result["deployment"] = dict.fromkeys(bench.CONFIGS, cell)
    table = bench.format_table(result)
    assert len(table.splitlines()) == 2 + len(bench.CONFIGS) + 2
    assert "| deployment | tls+secagg+dp | 2 | 1.00 | 0.0 to 0.0 |" in table

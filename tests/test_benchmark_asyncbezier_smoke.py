"""Smoke test of ``benchmarks/bench_asyncbezier.py``: the quick run has the full structure.

No wall-clock assertions: the cells are present with positive finite times and the verdicts
follow from the numbers.
"""

from __future__ import annotations

import json
import math

import pytest

from riemfl.testing import importorskip

importorskip("torch")
importorskip("sklearn")


def test_quick_benchmark_structure(tmp_path, load_benchmark):
    bench = load_benchmark("bench_asyncbezier")
    out = tmp_path / "bench.json"
    result = bench.main(["--quick", "--out", str(out)])
    assert json.loads(out.read_text())["quick"] is True
    s, c = result["server"], result["client"]
    for row, keys in ((s, ("asyncbezier_ms", "fedasync_ms")), (c, ("plain_epoch_ms",))):
        assert all(math.isfinite(row[k]) and row[k] > 0 for k in keys)
        assert row["met"] == (row["ratio"] <= row["goal"])
    assert s["ratio"] == pytest.approx(s["asyncbezier_ms"] / s["fedasync_ms"])
    assert c["ratio"] == pytest.approx(c["curve_epoch_ms"] / c["plain_epoch_ms"])
    assert "AsyncBezier vs FedAsync" in bench.format_table(result)

"""Smoke test of ``benchmarks/bench_bezier_levels.py``: the quick run, uncompiled, has the full
structure. No wall-clock assertions: every map is timed at the three levels, the fixed forms read
nothing where the host solve reads, and they agree with it."""

from __future__ import annotations

import json

from riemfl.testing import importorskip


def test_quick_benchmark_structure(tmp_path, load_benchmark):
    importorskip("torch")
    bench = load_benchmark("bench_bezier_levels")
    out = tmp_path / "bench_bezier_levels.json"
    result = bench.main(["--quick", "--no-compile", "--device", "cpu", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert len(saved["cells"]) == len(bench.MAPS) == len(result["cells"])
    assert out.with_suffix(".txt").read_text().startswith("manifold")
    for cell in result["cells"]:
        assert all(cell[f"{level}_ms"] > 0 for level in ("eager", "deferred", "off"))
        assert cell["eager_reads"] > 0  # the host solve reads its roots back
        assert cell["deferred_reads"] == 0 and cell["off_reads"] == 0
        assert cell["agreement"] <= 1e-12
        assert "compiled_deferred_ms" not in cell
    assert "compiled_off ms" in bench.format_table(result)

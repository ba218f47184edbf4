"""Smoke test of ``benchmarks/bench_floral_layers.py``: the quick run has the full structure.

No wall-clock assertions: every (layer, batch, rho, variant) cell is present with positive
finite times, ratios are ratios of the medians, the recorded pass is the layers' rule, and the
"always merged" variant does merge.
"""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")


def test_quick_benchmark_structure(tmp_path, load_benchmark):
    bench = load_benchmark("bench_floral_layers")
    out = tmp_path / "bench.json"
    result = bench.main(["--quick", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["quick"] is True and saved["floral_backend"] in ("compiled", "torch")
    cells = {(r["layer"], r["batch"], r["rho"], r["variant"]) for r in result["rows"]}
    assert cells == {("784x200", 32, rho, v) for rho in (0.01, 0.1) for v in bench.VARIANTS}
    for row in result["rows"]:
        assert math.isfinite(row["us"]) and row["us"] > 0
        assert len(row["samples_us"]) == saved["repeats"]
        base = next(r for r in result["rows"] if (r["rho"], r["variant"]) == (row["rho"], "base"))
        assert row["ratio"] == pytest.approx(row["us"] / base["us"])
        assert row["factored"]  # 784 x 200 on 32 rows saves over 10^5 multiply-adds
    assert "always merged" in bench.format_table(result)


def test_always_merged_variant_merges(load_benchmark, node_names):
    bench = load_benchmark("bench_floral_layers")
    base = torch.nn.Sequential(torch.nn.Linear(784, 200))
    x = torch.rand(4, 784)
    for backend, merges in (("torch", False), ("always merged", True)):
        model = bench._floral(base, 0.01, backend)
        model(x)  # the first pass records the layer's choice, the second acts on it
        out = model(x)
        names = node_names(out)
        assert ("MixtureMergeBackward" in names) is merges
        torch.testing.assert_close(out, bench._floral(base, 0.01, "auto")(x))

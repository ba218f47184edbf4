"""Smoke test of ``benchmarks/bench_curves.py``: the quick run has the full structure.

No wall-clock assertions: only that every cell is present, every time is positive and finite, the
bound is the fastest measured candidate, the ratios follow from the times, the goal verdicts from
the ratios, and riemfl's results agreed with the direct formulas.
"""

from __future__ import annotations

import json
import math

import pytest

from riemfl.testing import importorskip

importorskip("torch")

# seconds per test (simulations, reproductions, benchmark runs): part of the full run only
pytestmark = pytest.mark.slow


def _positive(v) -> bool:
    return isinstance(v, float) and math.isfinite(v) and v > 0


def test_quick_benchmark_structure(tmp_path, load_benchmark):
    bench = load_benchmark("bench_curves")
    out = tmp_path / "nested" / "bench_curves.json"
    result = bench.run_benchmark(quick=True, out=out)
    assert out.exists()
    assert json.loads(out.read_text())["cells"] == json.loads(json.dumps(result["cells"]))

    s = result["settings"]
    assert s["is_quick"]
    assert s["sizes"] == [10**4, 10**5]
    for key in ("platform", "processor", "cpu_count", "python", "numpy", "torch", "riemfl"):
        assert key in result["machine"]
    assert result["machine"]["torch_threads"] == 1

    expected = set()
    for d in s["sizes"]:
        for dtype in s["dtypes"]:
            for backend in s["backends"]:
                expected |= {(d, dtype, backend, "eval"), (d, dtype, backend, "eval+grad")}
    for d in s["closest_sizes"]:
        for dtype in s["dtypes"]:
            for backend in s["backends"]:
                expected.add((d, dtype, backend, "closest"))
    cells = result["cells"]
    got = [(c["D"], c["dtype"], c["backend"], c["op"]) for c in cells]
    assert len(got) == len(set(got))
    assert set(got) == expected
    assert {dtype for _, dtype, _, _ in got} == {"float32", "float64"}
    assert {backend for _, _, backend, _ in got} == {"numpy", "torch"}

    for c in cells:
        assert _positive(c["riemfl_ms"]) and _positive(c["bound_ms"]), c
        parts = c["bound_parts_ms"]
        assert set(parts) == ({"pass", "outer"} if c["op"] == "eval+grad" else {"pass"})
        assert c["bound_ms"] == pytest.approx(sum(parts.values()))
        for part, value in parts.items():
            assert _positive(value)
            cands = {k: v for k, v in c["bound_candidates_ms"][part].items() if v is not None}
            assert all(_positive(v) for v in cands.values())
            assert value == pytest.approx(min(cands.values()))
            assert cands[c["bound_impl"][part]] == pytest.approx(value)
        assert c["ratio"] == pytest.approx(c["riemfl_ms"] / c["bound_ms"])
        if c["op"] == "closest":
            assert c["metric"] == "passes" and c["goal"]["max"] == s["closest_goal"]
            assert c["riemfl_gbps"] is None
        else:
            assert c["metric"] == "ratio" and c["goal"]["max"] == s["eval_goal"]
            assert c["riemfl_gbps"] == pytest.approx(
                c["bound_gbps"] * c["bound_ms"] / c["riemfl_ms"]
            )
        assert c["met"] == (c["ratio"] <= c["goal"]["max"])
        itemsize = 4 if c["dtype"] == "float32" else 8
        factor = 2 if c["op"] == "eval+grad" else 1
        assert c["bound_bytes"] == 4 * c["D"] * itemsize * factor
        assert c["bound_gbps"] == pytest.approx(c["bound_bytes"] / (c["bound_ms"] * 1e-3) / 1e9)
        assert c["riemfl_page_faults_per_call"] >= 0
        if c["op"] == "eval+grad":
            assert _positive(c["bound_sequential_ms"])
            assert c["ratio_vs_sequential"] == pytest.approx(
                c["riemfl_ms"] / c["bound_sequential_ms"]
            )
            assert "autograd" in c["note"]
            if c["backend"] == "torch":
                assert _positive(c["scalar_loss_ms"])
                assert c["analytic_ratio"] == pytest.approx(c["analytic_ms"] / c["bound_ms"])
                assert c["alloc_vs_native_autograd"] == pytest.approx(
                    c["alloc_ms"] / c["native_autograd_ms"]
                )
                assert {"analytic_grad", "torch_native_alloc_grad"} <= set(c["check"]["errors"])
            else:
                assert "analytic_ms" not in c and "native_autograd_ms" not in c
        if c["op"] == "closest":
            assert "alloc_ms" not in c
        else:  # riemfl's call writes into buffers; the allocating call is reported beside it
            assert _positive(c["alloc_ms"])
            assert c["alloc_ratio"] == pytest.approx(c["alloc_ms"] / c["bound_ms"])
            assert c["alloc_page_faults_per_call"] >= 0
            assert {"eval", "alloc_eval"} <= set(c["check"]["errors"])
        # like-for-like: riemfl and every bound spelling matched the direct float64 formulas
        errors = c["check"]["errors"]
        assert errors and all(v <= c["check"]["tolerance"] for v in errors.values()), errors

    summary = result["summary"]
    goal_cells = [c for c in cells if c["op"] in ("eval", "closest")]
    assert summary["issue goals"]["ops"] == ["eval", "closest"]
    assert summary["issue goals"]["checked"] == len(goal_cells)
    assert summary["issue goals"]["met"] == sum(c["met"] for c in goal_cells)
    assert summary["issue goals"]["met"] + len(summary["issue goals"]["missed"]) == len(goal_cells)
    for op in ("eval", "eval+grad", "closest"):
        sel = [c for c in cells if c["op"] == op]
        assert summary[op]["checked"] == len(sel)
        assert summary[op]["met"] + len(summary[op]["missed"]) == len(sel)

    table = bench.format_table(result)
    assert len([line for line in table.splitlines() if line.strip()]) == len(cells) + 2
    text = bench.format_summary(result)
    assert "eval: goal met in" in text and "closest: goal met in" in text
    assert "eval+grad: target (not an issue goal) met in" in text
    assert "issue goals (eval and closest): met in" in text

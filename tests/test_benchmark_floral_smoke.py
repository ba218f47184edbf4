"""Smoke test of ``benchmarks/bench_floral.py``: the quick run has the full structure.

No wall-clock assertions: every (model, mode, variant) and (layer, rho, variant) cell is
present with positive finite times, ratios are ratios of the medians, verdicts follow from the
numbers and the goals' rules, the merged model reproduced the unmerged outputs, and the
compiled models' gradients were eager's.
"""

from __future__ import annotations

import json
import math

import pytest

from riemfl.testing import importorskip

importorskip("torch")

EAGER_TRAIN = ("base", "FLoRAL(1%)", "FLoRAL(10%)", "FLoRAL(1%) base grads", "FLoRAL(1%) no router")
INFER = ("base", "FLoRAL(1%) unmerged", "FLoRAL(1%) merged")


def _check(bench, result, saved, compiled):
    rows = result["rows"]
    cells = {(r["model"], r["mode"], r["variant"]) for r in rows if r["kind"] == "model"}
    expected = set()
    for model in bench.MODELS:
        expected |= {(model, "train", v) for v in EAGER_TRAIN}
        expected |= {(model, "infer", v) for v in INFER}
        if compiled:
            expected |= {(model, "train compiled", v) for v in ("base", "FLoRAL(1%)")}
    assert cells == expected
    layers = {
        (r["layer"], r["batch"], r["rho"], r["variant"]) for r in rows if r["kind"] == "layer"
    }
    assert layers == {("784x200", 32, rho, v) for rho in (0.01, 0.1) for v in bench.LAYER_VARIANTS}
    for row in rows:
        assert math.isfinite(row["us"]) and row["us"] > 0
        assert len(row["samples_us"]) == saved["repeats"]
        key = ("layer", "batch", "rho") if row["kind"] == "layer" else ("model", "batch", "mode")
        base = next(
            r
            for r in rows
            if r["kind"] == row["kind"]
            and all(r.get(k) == row.get(k) for k in key)
            and r["variant"] == "base"
        )
        assert row["ratio"] == pytest.approx(row["us"] / base["us"])
        if row["kind"] == "layer":
            assert row["factored"]  # 784 x 200 on 32 rows saves over 10^5 multiply-adds
            continue
        if row["variant"] == "FLoRAL(1%)" and row["mode"] == "train":
            assert 0 < row["extra_parameters"] < 1
            if base["us"] >= bench.EAGER_FLOOR_US:
                assert row["met"] == (row["ratio"] <= bench.EAGER_GOAL)
            else:
                assert row["met"] is None and "1 ms" in row["goal"]
        if row["mode"] == "train compiled":
            assert row["grads_match_eager"] is True
            if row["variant"] == "FLoRAL(1%)":
                assert row["met"] == (row["ratio"] <= bench.COMPILED_GOAL)
        if row["variant"] == "FLoRAL(1%) merged":
            lo, hi = bench.MERGED_BAND
            assert row["met"] == (lo <= row["ratio"] <= hi)
            assert row["max_abs_output_diff"] < 1e-4
    table = bench.format_table(result)
    assert "FLoRAL(1%) merged" in table and "always merged" in table
    assert ("train compiled" in table) is compiled


def test_quick_benchmark_structure(tmp_path, load_benchmark):
    bench = load_benchmark("bench_floral")
    out = tmp_path / "bench_floral.json"
    result = bench.main(["--quick", "--no-compile", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["quick"] is True and saved["compiled"] is False and saved["clusters"] == 4
    assert "allocator" in saved["machine"]
    _check(bench, result, saved, compiled=False)


@pytest.mark.slow
def test_quick_benchmark_with_torch_compile(tmp_path, load_benchmark):
    bench = load_benchmark("bench_floral")
    out = tmp_path / "bench_floral.json"
    result = bench.main(["--quick", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["compiled"] is True
    _check(bench, result, saved, compiled=True)


def test_partial_gradient_variants_ask_for_what_they_say(load_benchmark, monkeypatch):
    import torch

    bench = load_benchmark("bench_floral")
    factory, shape = bench.MODELS["digits MLP 64-200-10"]
    model = bench._floral(factory(), 0.01).train()
    x, y = torch.rand((4, *shape)), torch.randint(0, 10, (4,))
    asked = []
    real_grad = torch.autograd.grad
    monkeypatch.setattr(
        torch.autograd, "grad", lambda out, inputs: asked.append(inputs) or real_grad(out, inputs)
    )
    for roles in (("base",), ("base", "cluster"), None):
        bench._train_step(model, x, y, roles=roles)()
    named = dict(model.named_parameters())
    role_of = model.parameter_roles()
    for inputs, roles in zip(asked, (("base",), ("base", "cluster"), None), strict=True):
        want = [n for n in named if roles is None or role_of[n] in roles]
        assert [id(p) for p in inputs] == [id(named[n]) for n in want]
    assert {role_of[n] for n in named} == {"base", "cluster", "router"}


def test_always_merged_layers_merge(load_benchmark, monkeypatch):
    """The ``always merged`` variant runs the merge where the layer's rule says factored."""
    import torch

    bench = load_benchmark("bench_floral")
    base = torch.nn.Sequential(torch.nn.Linear(784, 200))
    x = torch.rand(4, 784)
    model, forced = bench._floral(base, 0.01), bench._always_merged(bench._floral(base, 0.01))
    layer, forced_layer = model.adaptors()[0][1], forced.adaptors()[0][1]
    assert layer._prefers_factored(x) and not forced_layer._prefers_factored(x)
    merges = []
    real = type(layer).merged_parameters
    monkeypatch.setattr(
        type(layer), "merged_parameters", lambda s, w: merges.append(s) or real(s, w)
    )
    torch.testing.assert_close(forced(x), model(x), rtol=1e-5, atol=1e-5)
    assert merges == [forced_layer]

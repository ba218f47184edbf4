"""Smoke test of ``benchmarks/bench_floral.py``: the quick run has the full structure.

No wall-clock assertions: every (model, mode, variant) cell is present with positive finite
times, ratios are ratios of the medians, verdicts follow from the numbers, and the merged model
reproduced the unmerged outputs.
"""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("torch")


def test_quick_benchmark_structure(tmp_path, load_benchmark):
    bench = load_benchmark("bench_floral")
    out = tmp_path / "bench_floral.json"
    result = bench.main(["--quick", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["quick"] is True and saved["clusters"] == 4
    assert "allocator" in saved["machine"]
    cells = {(r["model"], r["mode"], r["variant"]) for r in result["rows"]}
    for model in bench.MODELS:
        for variant in (
            "base",
            "FLoRAL(1%)",
            "FLoRAL(10%)",
            bench.BASE_GRADS,
            bench.NO_ROUTER_GRAD,
        ):
            assert (model, "train", variant) in cells
        for variant in ("base", "FLoRAL(1%) unmerged", "FLoRAL(1%) merged"):
            assert (model, "infer", variant) in cells
    for row in result["rows"]:
        assert math.isfinite(row["us"]) and row["us"] > 0
        assert len(row["samples_us"]) == saved["repeats"]
        base = next(
            r
            for r in result["rows"]
            if r["model"] == row["model"]
            and r["mode"] == row["mode"]
            and r["batch"] == row["batch"]
            and r["variant"] == "base"
        )
        assert row["ratio"] == pytest.approx(row["us"] / base["us"])
        if row["variant"] == "FLoRAL(1%)" and row["mode"] == "train":
            assert row["met"] == (row["ratio"] <= bench.TRAIN_GOAL)
            assert 0 < row["extra_parameters"] < 1
        if row["variant"] == "FLoRAL(1%) merged":
            lo, hi = bench.MERGED_BAND
            assert row["met"] == (lo <= row["ratio"] <= hi)
            assert row["max_abs_output_diff"] < 1e-4
    assert "FLoRAL(1%) merged" in bench.format_table(result)


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

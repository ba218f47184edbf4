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
    cells = {(r["model"], r["mode"], r["variant"]) for r in result["rows"]}
    for model in bench.MODELS:
        for variant in ("base", "FLoRAL(1%)", "FLoRAL(10%)", bench.FLOOR):
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


def test_floor_variant_is_the_base_step_with_zero_adaptor_gradients(load_benchmark):
    """The floor diagnostic does what its name says: the base weights' gradients are the base
    model's, every FLoRAL-only parameter gets an exact zero, and the real merge is back after
    the call."""
    import torch

    from riemfl.nn.floral import adaptor

    bench = load_benchmark("bench_floral")
    factory, shape = bench.MODELS["digits MLP 64-200-10"]
    torch.manual_seed(0)
    base = factory()
    model = bench._floral(base, 0.01).train()
    x, y = torch.rand((8, *shape)), torch.randint(0, 10, (8,))
    real = adaptor.merge_layers
    adaptor.merge_layers = bench._floor_merge
    try:
        loss = torch.nn.functional.cross_entropy(model(x), y)
    finally:
        adaptor.merge_layers = real

    def named_grads(module, value):
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        grads = torch.autograd.grad(value, [p for _, p in named])
        return {n: g for (n, _), g in zip(named, grads, strict=True)}

    grads = named_grads(model, loss)
    base_loss = torch.nn.functional.cross_entropy(base(x), y)
    base_grads = named_grads(base, base_loss)
    assert loss.item() == pytest.approx(base_loss.item(), rel=1e-6)
    for name, g in grads.items():
        if ".base." in name:
            key = name.removeprefix("model.").replace(".base.", ".")
            torch.testing.assert_close(g, base_grads[key])
        else:
            assert not g.any(), name
    step = bench._floor_step(model, x, y)
    step()
    assert adaptor.merge_layers is real

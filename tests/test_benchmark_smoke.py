"""Smoke test of ``benchmarks/bench_manifolds.py``: the quick run has the full structure.

No wall-clock assertions: only that every cell is present, every time is positive and finite, the
ratios follow from the times and the peers compute the same maps as riemfl.
"""

from __future__ import annotations

import json
import math

import pytest

from riemfl.testing import importorskip

importorskip("torch")
importorskip("geoopt")
importorskip("pymanopt")


STIEFEL_OPS = {
    "project",
    "to_tangent",
    "retract[polar]",
    "retract[qr]",
    "inverse_retract[polar]",
    "inverse_retract[qr]",
    "exp",
    "log",
    "transport",
    "egrad_to_rgrad",
}
SPHERE_OPS = {
    "project",
    "to_tangent",
    "retract",
    "inverse_retract",
    "exp",
    "log",
    "transport",
    "egrad_to_rgrad",
}
LORENTZ_OPS = (SPHERE_OPS - {"project"}) | {"lift (~projx)", "project (exact)"}
#: the families of ``benchmarks/_manifold_peers.py`` and the maps each is compared on
LINEAR_OPS = {
    "to_tangent",
    "egrad_to_rgrad",
    "ehess_to_rhess",
    "inner",
    "retract",
    "exp",
    "log",
    "dist",
    "transport",
}
NEW_OPS = {
    "SPD": LINEAR_OPS | {"parallel_transport"},
    "PoincareBall": (LINEAR_OPS - {"transport"}) | {"parallel_transport"},
    "SpecialOrthogonal": LINEAR_OPS - {"transport"},
    "Oblique": LINEAR_OPS,
    "Positive": LINEAR_OPS - {"retract"},
    "Symmetric": LINEAR_OPS,
    "SkewSymmetric": LINEAR_OPS,
    "Elliptope": {"inner", "retract"},
    "PSDFixedRank": LINEAR_OPS - {"egrad_to_rgrad"},
    "BirkhoffPolytope": {"project", "egrad_to_rgrad", "retract"},
}
NO_PEER = {
    ("Stiefel", "inverse_retract[polar]"),
    ("Stiefel", "inverse_retract[qr]"),
    ("Stiefel", "log"),
    ("Sphere", "inverse_retract"),
    ("Lorentz", "project (exact)"),
}


def test_quick_benchmark_structure(tmp_path, load_benchmark):
    bench = load_benchmark("bench_manifolds")
    out = tmp_path / "nested" / "bench.json"
    result = bench.run_benchmark(quick=True, out=out)
    assert out.exists()
    assert json.loads(out.read_text())["cells"] == json.loads(json.dumps(result["cells"]))

    s = result["settings"]
    assert s["is_quick"]
    for key in ("platform", "processor", "cpu_count", "python", "numpy", "torch", "geoopt"):
        assert key in result["machine"]
    assert result["machine"]["pymanopt"] is not None

    sizes = [f"{n}x{p}" for n, p in s["stiefel_sizes"]]
    expected = set()
    for batch in s["batches"]:
        for size in sizes:
            expected |= {("Stiefel", size, batch, op) for op in STIEFEL_OPS}
        expected |= {("Sphere", f"n={s['sphere_n']}", batch, op) for op in SPHERE_OPS}
        expected |= {("Lorentz", f"n={s['lorentz_n']}", batch, op) for op in LORENTZ_OPS}
        for family, ops in NEW_OPS.items():
            for size in s["new_sizes"][family]:
                label = "x".join(map(str, size)) if len(size) > 1 else f"n={size[0]}"
                expected |= {(family, label, batch, op) for op in ops}
    cells = result["cells"]
    got = [(c["manifold"], c["size"], c["batch"], c["op"]) for c in cells]
    assert len(got) == len(set(got))
    assert set(got) == expected

    for c in cells:
        t = c["times_ms"]
        assert all(math.isfinite(v) and v > 0 for v in t.values()), c
        assert {"riemfl_numpy", "riemfl_torch"} <= set(t)
        peers = {k: v for k, v in t.items() if not k.startswith("riemfl")}
        rf = min(t["riemfl_numpy"], t["riemfl_torch"])
        assert c["riemfl_ms"] == pytest.approx(rf)
        if (c["manifold"], c["op"]) in NO_PEER:
            assert not peers and c["ratio"] is None and c["goals"]["ratio_met"] is None
            continue
        assert peers, c
        assert c["ratio"] == pytest.approx(rf / min(peers.values()))
        assert c["goals"]["ratio_met"] == (c["ratio"] <= c["goals"]["ratio_max"])
        pm = [v for k, v in peers.items() if k.startswith("pymanopt")]
        go = [v for k, v in peers.items() if k.startswith("geoopt")]
        if go:
            assert c["ratio_torch_vs_geoopt"] == pytest.approx(t["riemfl_torch"] / min(go))
        else:
            assert c["ratio_torch_vs_geoopt"] is None
        if pm:
            assert c["ratio_numpy_vs_pymanopt"] == pytest.approx(t["riemfl_numpy"] / min(pm))
        else:
            assert c["ratio_numpy_vs_pymanopt"] is None
        if c["batch"] == 1:
            assert set(peers) <= {"pymanopt", "geoopt"}
        else:
            assert set(peers) <= {
                "pymanopt_loop",
                "pymanopt_batched",
                "geoopt_loop",
                "geoopt_batched",
            }
            assert ("geoopt_loop" in peers) == ("geoopt_batched" in peers)
            loops = [v for k, v in peers.items() if k.endswith("_loop")]
            assert c["speedup_vs_loop"] == pytest.approx(min(loops) / rf)
            assert c["goals"]["speedup_met"] == (c["speedup_vs_loop"] >= c["goals"]["speedup_min"])
        # like-for-like mapping: every peer computes what riemfl computes
        assert set(c["agreement"]) == set(peers) | {"riemfl_torch"}
        assert all(v <= 1e-6 for v in c["agreement"].values()), c["agreement"]

    summary = result["summary"]
    checked = [c for c in cells if c["ratio"] is not None]
    assert summary["ratio_goal"]["checked"] == len(checked)
    assert summary["ratio_goal"]["met"] + len(summary["ratio_goal"]["missed"]) == len(checked)
    table = bench.format_table(result)
    assert len([line for line in table.splitlines() if line.strip()]) == len(cells) + 2
    assert "met in" in bench.format_summary(result)


def test_manifolds_option_selects_families(tmp_path, load_benchmark):
    bench = load_benchmark("bench_manifolds")
    out = tmp_path / "positive.json"
    result = bench.main(["--quick", "--manifolds", "Positive,Symmetric", "--out", str(out)])
    assert {c["manifold"] for c in result["cells"]} == {"Positive", "Symmetric"}
    assert json.loads(out.read_text())["settings"]["manifolds"] == ["Positive", "Symmetric"]
    # the batched speed-up goal of these families: at least as fast as the loop
    assert {c["goals"]["speedup_min"] for c in result["cells"] if c["batch"] > 1} == {1.0}
    with pytest.raises(ValueError, match="unknown manifolds"):
        bench.run_benchmark(out=None, settings=bench.Settings(manifolds=["Sphere", "X"]))

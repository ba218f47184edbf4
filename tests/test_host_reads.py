"""Tests of :mod:`riemfl.testing.host_reads`; smoke test of ``benchmarks/bench_host_reads.py``."""

from __future__ import annotations

import json

from riemfl.testing import importorskip

torch = importorskip("torch")

from riemfl.testing.host_reads import HostReadCounter  # noqa: E402


def test_counts_each_read_once():
    t = torch.tensor([1.0, 2.0])
    s = t.sum()
    with HostReadCounter() as reads:
        s.item()
        bool(s)
        float(s)
        t.tolist()
    assert reads.total == 4
    assert dict(reads.by_function) == {"item": 1, "__bool__": 1, "__float__": 1, "tolist": 1}


def test_pure_arithmetic_reads_nothing():
    x = torch.randn(4, 3, dtype=torch.float64)
    with HostReadCounter() as reads:
        y = (x * 2 + 1).exp().sum(dim=-1)
        torch.where(y > 0, y, -y)
        len(x)
    assert reads.total == 0 and not reads.by_function and not reads.by_location


def test_location_and_mask_index():
    t = torch.tensor([1.0, -1.0])
    with HostReadCounter() as reads:
        t[t > 0]
    assert dict(reads.by_function) == {"__getitem__[mask]": 1}
    (location,) = reads.by_location
    assert location.endswith(
        f"test_host_reads.py:{test_location_and_mask_index.__code__.co_firstlineno + 3}"
    )


def test_first_riemfl_frame_is_reported():
    import numpy as np

    from riemfl import Sphere

    m = Sphere(3)
    x = torch.as_tensor(m.random_point(8, rng=np.random.default_rng(0)))
    u = 0.3 * m.to_tangent(x, torch.randn(8, 3, dtype=torch.float64))
    with HostReadCounter() as reads:
        m.exp(x, u)
    assert reads.total >= 1
    assert all(loc.startswith("riemfl/") for loc in reads.by_location)


def test_nests_and_exits_cleanly():
    s = torch.tensor(1.0)
    with HostReadCounter() as outer:
        s.item()
        with HostReadCounter() as inner:
            float(s)
        s.item()
    s.item()  # after exit: counted by neither
    assert inner.total == 1 and outer.total == 3
    assert dict(outer.by_function) == {"item": 2, "__float__": 1}
    outer.reset()
    assert outer.total == 0 and not outer.by_function


def test_benchmark_quick(tmp_path, load_benchmark):
    bench = load_benchmark("bench_host_reads")
    out = tmp_path / "nested" / "reads.json"
    result = bench.main(["--quick", "--out", str(out)])
    assert json.loads(out.read_text())["cells"] == json.loads(json.dumps(result["cells"]))
    from riemfl.manifolds.catalogue import FAMILIES

    by_name = {f.name: f for f in FAMILIES}
    got = {(c["family"], c["map"]) for c in result["cells"]}
    expected = set()
    for family in bench.QUICK_FAMILIES:
        m = by_name[family].examples[0]()
        expected |= {(family, name) for name in bench.MAPS if m.supports(name)[0]}
    assert got == expected
    for c in result["cells"]:
        assert isinstance(c["reads"], int) and c["reads"] >= 0
        assert sum(c["by_function"].values()) == c["reads"] == sum(c["locations"].values())
        assert c["error"] is None, c
    t = result["totals"]
    assert t["calls"] == len(result["cells"])
    assert t["reads"] == sum(c["reads"] for c in result["cells"])


def test_benchmark_counts_graph_breaks(load_benchmark):
    # one map traced by torch._dynamo.explain: the count is an int and each break names its
    # reason; a function without a host read traces whole
    bench = load_benchmark("bench_host_reads")
    from riemfl import Sphere

    cell = bench.count_map(Sphere(3), "exp", graph_breaks=True)
    assert isinstance(cell["graph_breaks"], int) and cell["graph_breaks"] >= 0
    assert len(cell["break_reasons"]) <= cell["graph_breaks"]
    whole = bench._graph_breaks(lambda a: torch.sin(a) * 2, [torch.zeros(3)])
    assert whole == {"graph_breaks": 0, "break_reasons": []}
    read = bench._graph_breaks(lambda a: a * 2 if bool(a.sum() > 0) else a, [torch.ones(3)])
    assert read["graph_breaks"] >= 1 and read["break_reasons"]


def test_benchmark_at_the_deferred_level_reads_nothing(tmp_path, load_benchmark):
    bench = load_benchmark("bench_host_reads")
    result = bench.main(["--quick", "--level", "deferred", "--out", str(tmp_path / "reads.json")])
    assert result["settings"]["check_level"] == "deferred"
    assert result["totals"]["reads"] == 0 and not result["totals"]["errors"]


def test_gpu_benchmark_on_cpu_tensors(tmp_path, load_benchmark):
    """bench_gpu.py's table, run on CPU tensors (CI has no GPU): every level timed, geoopt
    beside it computing the same thing, no read at the unchecked levels, a partial result
    written as it goes."""
    importorskip("geoopt")
    bench = load_benchmark("bench_gpu")
    out = tmp_path / "gpu.json"
    result = bench.main(["--device", "cpu", "--quick", "--out", str(out)])
    cells = result["cells"]
    assert {c["family"] for c in cells} == {"Sphere", "Stiefel", "PoincareBall", "SPD", "Lorentz"}
    for c in cells:
        assert c["agreement"] < 1e-8, c
        assert c["deferred_reads"] == 0 and c["off_reads"] == 0, c
        assert all(c[f"{level}_ms"] > 0 for level in bench.LEVELS)
    assert json.loads(out.read_text())["cells"] == json.loads(json.dumps(cells, default=str))
    assert out.with_suffix(".txt").read_text().startswith("cpu")

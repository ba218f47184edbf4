"""Smoke test of ``benchmarks/bench_run_core.py``: the quick run has the full structure.

No wall-clock assertions: every cell is present with positive finite figures, the ratios follow
from the times, the goal verdicts from the ratios, the engine and the bare loop end at the same
point, and the memory figures come from fresh subprocesses that hold riemfl but not torch.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from riemfl.testing import importorskip

importorskip("torch")  # the benchmark harness reports torch's thread settings


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bench_run_core")


def _positive(*values) -> bool:
    return all(isinstance(v, int | float) and math.isfinite(v) and v > 0 for v in values)


@pytest.mark.slow
def test_quick_benchmark_structure(tmp_path, bench):
    out = tmp_path / "nested" / "bench_run_core.json"
    result = bench.run_benchmark(quick=True, out=out)
    stored = json.loads(out.read_text())
    assert stored["goals"] == result["goals"] and stored["settings"]["is_quick"]
    goals = result["settings"]["goals"]

    (cell,) = result["overhead"]  # the quick settings skip the digits problem
    assert _positive(cell["engine_round_ms"], cell["bare_round_ms"], cell["oracle_ms"])
    assert cell["ratio"] == pytest.approx(cell["engine_round_ms"] / cell["bare_round_ms"])
    assert cell["same_final_point"] and cell["samples"] >= 2
    assert cell["met"] == (cell["ratio"] <= goals["overhead"])

    events = result["events"]
    s = result["settings"]["events"]
    assert {(c["clients"], c["rule"]) for c in events["cells"]} == {
        (n, r) for n in s["clients"] for r in ("fedasync", "fedbuff")
    }
    for c in events["cells"]:
        assert _positive(c["us_per_event"]) and c["met"] == (c["us_per_event"] <= c["goal_us"])
    assert ("profile" in events) == (not all(c["met"] for c in events["cells"]))
    for m in events["memory"]:
        assert _positive(m["rss_import"], m["peak_run"], m["traced_peak"])
        assert m["rss_import"] < 200e6  # riemfl without torch (the baseline asked for)

    bare, *runs = result["checkpoint"]
    assert _positive(bare["write_ms"], bare["read_ms"], bare["file_bytes"])
    assert bare["file_bytes"] > 8 * result["settings"]["checkpoint"]["dim"]
    assert len(runs) == 2 and all(math.isfinite(c["write_ms"]) for c in runs)
    assert all(c["file_bytes"] > 8 * result["settings"]["checkpoint"]["dim"] for c in runs)

    sc = result["scale"]
    cfg = sc["config"]
    assert sc["row_bytes"] == 8 * cfg["n"] * cfg["p"] * cfg["d"]
    assert sc["covariance_bytes"] == 8 * cfg["n"] * cfg["d"] ** 2
    assert sc["data_bytes"] == sc["row_bytes"] + sc["covariance_bytes"]
    assert sc["timing"]["same_final_point"]
    assert sc["time_met"] == (sc["timing"]["ratio"] <= goals["scale_time"])
    assert sc["memory_ratio"] == pytest.approx(sc["peak_engine"] / sc["data_bytes"])
    assert sc["memory_met"] == (sc["memory_ratio"] <= goals["scale_memory"])
    assert sc["rss_import"] <= sc["rss_baseline"] and _positive(sc["peak_engine"], sc["peak_bare"])

    hi, s = result["history"], result["settings"]["history"]
    small, large = hi["cells"]
    assert [small["rows"], large["rows"]] == list(s["rows"])
    for c in hi["cells"]:
        assert c["checkpoints"] == s["window"] // s["every"] - 1  # the last has no next round
        assert _positive(c["round_ms"], c["bytes_per_checkpoint"], c["file_bytes"])
        assert math.isfinite(c["ms_median"]) and math.isfinite(c["cpu_ms_median"])
    # the bytes a checkpoint writes do not grow with the history (they did: all of it)
    assert large["bytes_per_checkpoint"] <= 1.05 * small["bytes_per_checkpoint"]
    assert large["history_json_bytes"] > 2 * small["history_json_bytes"]
    assert hi["flat_ratio"] == pytest.approx(large["ms_median"] / small["ms_median"])
    assert hi["flat_met"] == (hi["flat_ratio"] <= goals["checkpoint_flat"])
    c = hi["command"]
    assert c["checkpoints"] == s["cli_rounds"] // s["cli_every"]
    assert _positive(c["with_s"], c["without_s"], c["with_cpu_s"], c["with_run_s"])
    assert c["ratio_s"] == pytest.approx(c["with_s"] / c["without_s"])
    assert hi["overhead_met"] == (c["ratio_s"] <= goals["checkpoint_overhead"])

    g = result["goals"]
    names = ("overhead_mnist_size", "event_us", "scale_time", "scale_memory")
    names += ("checkpoint_flat", "checkpoint_overhead")
    assert g["checked"] == len(names) and g["met"] == sum(g[k] for k in names)
    assert len(bench.format_tables(result).split("\n\n")) >= 8


def test_plain_rounds_end_where_run_sync_ends(bench):
    from riemfl.federated import RFedProj, initial_point, run_sync
    from riemfl.problems import KPCAProblem

    problem = KPCAProblem.synthetic(n_clients=5, d=8, k=2, p=6, seed=1)
    x0 = initial_point(problem, 0)
    point, stamps = bench.plain_rounds(problem, RFedProj(4e-3, 3), x0, 4)
    assert len(stamps) == 5
    np.testing.assert_array_equal(point, run_sync(problem, RFedProj(4e-3, 3), 4, x0=x0).final_point)


def test_shift_trainer_and_half_square_problem(bench):
    tr = bench.ShiftTrainer(3, 4, shift=0.5)
    x = np.zeros(4)
    np.testing.assert_array_equal(tr.train(1, x, None), np.full(4, 0.5))
    assert tr.num_batches(2) == tr.n_samples(0) == 1
    problem = bench.HalfSquareProblem(3, n_clients=2)
    xs = np.zeros((2, 3))
    np.testing.assert_array_equal(problem.client_egrads([0, 1], xs), -problem.centres)
    assert problem.loss(np.zeros(3)) == pytest.approx(0.5 * 3)

"""Smoke test of ``benchmarks/bench_sync.py``: the quick run has the full structure.

No wall-clock assertions: only that every cell is present, the times are positive and finite,
the ratios follow from the times, the goal verdicts from the ratios, and the naive loops ended
at riemfl's final point after the same number of rounds.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from riemfl.testing import importorskip

importorskip("torch")  # the benchmark harness reports torch's thread settings

# seconds per test (simulations, reproductions, benchmark runs): part of the full run only
pytestmark = pytest.mark.slow


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bench_sync")


def _positive(*values) -> bool:
    return all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in values)


def test_quick_benchmark_structure(tmp_path, bench):
    out = tmp_path / "nested" / "bench_sync.json"
    result = bench.run_benchmark(quick=True, out=out)
    stored = json.loads(out.read_text())
    assert stored["round_cells"] == json.loads(json.dumps(result["round_cells"]))
    assert stored["tolerance_cells"] == json.loads(json.dumps(result["tolerance_cells"]))

    s = result["settings"]
    assert s["is_quick"]
    for key in ("platform", "processor", "cpu_count", "python", "numpy", "riemfl"):
        assert key in result["machine"]

    cells = result["round_cells"]
    got = [(c["setting"], c["algorithm"], c["operators"]) for c in cells]
    expected = {
        (setting, a, o) for setting in ("mnist", "synthetic") for a, o in bench.ROUND_ALGORITHMS
    }
    assert len(got) == len(set(got)) and set(got) == expected
    for c in cells:
        tau = s[c["setting"]]["tau"]
        assert c["oracle_calls_per_round"] == (tau + 1 if c["algorithm"] == "rfedsvrg" else tau)
        assert _positive(c["oracle_ms"]), c
        if c["affordable"]:
            assert _positive(c["round_ms"]), c
            assert c["overhead"] == pytest.approx(c["round_ms"] / c["oracle_ms"])
        else:
            assert c["round_ms"] is None and _positive(c["probe_round_ms"])
        if "goal" in c:
            assert (c["setting"], c["algorithm"]) == ("mnist", "rfedproj")
            assert c["met"] == (c["overhead"] is not None and c["overhead"] <= c["goal"]["max"])
    assert sum("goal" in c for c in cells) == 1

    tol = result["tolerance_cells"]
    assert [c["algorithm"] for c in tol] == ["rfedproj", "rfedsvrg"]
    for c in tol:
        assert _positive(c["riemfl_s"], c["naive_s"]), c
        assert c["speedup"] == pytest.approx(c["naive_s"] / c["riemfl_s"])
        # naive and riemfl agree: same rounds, same final point
        assert c["rounds"] == c["naive_rounds"] >= 1
        assert c["agreement"]["ok"]
        assert c["agreement"]["max_abs_difference"] <= c["agreement"]["atol"]
        assert c["converged"] and c["grad_norm"] <= s["tolerance"]["grad_tol"]
        assert c["naive_grad_norm"] == pytest.approx(c["grad_norm"], rel=1e-6)
    assert tol[0]["met"] == (tol[0]["riemfl_s"] <= tol[0]["goal"]["max"])
    assert "goal" not in tol[1]

    goals = result["goals"]
    assert goals["checked"] == 2
    assert goals["met"] == goals["rfedproj_overhead_mnist"] + goals["rfedproj_time_to_tolerance"]

    first, second = bench.format_tables(result).split("\n\n")
    assert len(first.splitlines()) == len(cells) + 2
    assert len(second.splitlines()) == len(tol) + 2


def test_naive_rfedproj_matches_riemfl_on_small_problem(bench):
    """The naive loop is Algorithm 1 itself: a few rounds end at riemfl's point."""
    from riemfl.federated import RFedProj, initial_point, run_sync
    from riemfl.problems import KPCAProblem

    problem = KPCAProblem.synthetic(n_clients=4, d=6, k=2, p=5, seed=1)
    x0 = initial_point(problem, 3)
    history = run_sync(problem, RFedProj(1e-2, 3), 7, x0=x0)
    point, rounds, gnorm = bench.naive_rfedproj(problem.blocks, x0, 1e-2, 3, 7, 0.0)
    assert rounds == 7
    np.testing.assert_allclose(point, history.final_point, atol=1e-12)
    assert gnorm == pytest.approx(history.grad_norm[-1], rel=1e-8)

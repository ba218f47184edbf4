"""Report tables over seeds: a spread only where there is one, and unreached targets named."""

from __future__ import annotations

import math

from riemfl.experiments import licudi2025
from riemfl.experiments.spread import mean_spread, mean_std


def test_mean_spread_prints_a_spread_only_over_two_values_or_more():
    assert mean_spread([1.234], 2) == "1.23"
    assert mean_spread([1.0, 3.0], 1) == "2.0 +/- 1.0"
    assert mean_spread([1.0, None, 3.0], 0, spread_digits=2) == "2 +/- 1.00"
    assert mean_spread([None, None], 2) == "-"
    mean, std, count = mean_std([2.0])
    assert mean == 2.0 and math.isnan(std) and count == 1


def _run(method, accuracy, t_e):
    return {
        "method": method,
        "accuracy": accuracy,
        "T_e": t_e,
        "gini": 0.1,
        "theil": 0.01,
        "mean_staleness": 2.0,
    }


def test_a_one_seed_table_has_no_zero_spreads_and_no_nan():
    s = licudi2025.Settings.quick()
    a, b = s.methods[:2]
    text = licudi2025.table([_run(a, 0.8, 120.0), _run(b, 0.7, None)], s)
    ours = [line.split("|")[2:7] for line in text.splitlines()[2:4]]  # our columns only
    assert not any("+/-" in cell or "nan" in cell for row in ours for cell in row)
    assert "not reached" in text.splitlines()[3]


def test_a_partly_reached_target_says_how_many_runs_reached_it():
    s = licudi2025.Settings.quick()
    m = s.methods[0]
    text = licudi2025.table([_run(m, 0.8, 100.0), _run(m, 0.9, None)], s)
    assert "100 (1/2 reached)" in text.splitlines()[2]
    assert "85.00 +/- 5.00" in text.splitlines()[2]

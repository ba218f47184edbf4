"""Asynchronous runs read at equal server steps, client updates and virtual time
(``riemfl.experiments.equal_work`` and the licudi2025 report's comparison), on synthetic curves."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riemfl.errors import ParameterError
from riemfl.experiments import licudi2025
from riemfl.experiments.equal_work import (
    common_budget,
    disagreeing_pairs,
    first_reached,
    pair_agreement,
    value_at,
)
from riemfl.experiments.licudi2025.rankings import te_ranking
from riemfl.federated.fairness import time_to_error

clocks = st.lists(st.integers(1, 20), min_size=1, max_size=12).map(
    lambda gaps: np.concatenate([[0], np.cumsum(gaps)]).astype(float)
)


@settings(max_examples=30, deadline=None)
@given(clocks, st.floats(-2, 2), st.floats(-1, 1), st.floats(0, 1))
def test_value_at_is_exact_on_evaluations_and_on_linear_curves(x, slope, intercept, frac):
    y = slope * x + intercept
    for xi, yi in zip(x, y, strict=True):
        assert value_at(x, y, xi) == yi  # at an evaluation: its value, no rounding
    at = x[0] + frac * (x[-1] - x[0])
    assert math.isclose(value_at(x, y, at), slope * at + intercept, abs_tol=1e-9)


def test_value_at_between_two_evaluations_and_at_repeated_readings():
    x, y = [0, 10, 20, 20, 30], [0.1, 0.5, 0.6, 0.7, 0.9]
    assert math.isclose(value_at(x, y, 5), 0.3)
    assert value_at(x, y, 20) == 0.7  # the last row at that reading: after every event there
    assert math.isclose(value_at(x, y, 25), 0.8)


@pytest.mark.parametrize(
    "x, y, at, match",
    [
        ([0, 10], [0.1, 0.2], 11, "outside the run"),
        ([0, 10], [0.1, 0.2], -1, "outside the run"),
        ([0, 10, 5], [0.1, 0.2, 0.3], 1, "non-decreasing"),
        ([0, 10], [0.1], 1, "shape"),
        ([], [], 0, "non-empty"),
        ([0, math.nan], [0.1, 0.2], 0, "finite"),
    ],
)
def test_value_at_refuses_what_it_cannot_read(x, y, at, match):
    with pytest.raises(ParameterError, match=match):
        value_at(x, y, at)


def test_first_reached_reads_the_clock_of_the_first_row_at_the_target():
    updates, errors = [0, 10, 20, 30], [0.9, 0.3, 0.15, 0.1]
    assert first_reached(updates, errors, 0.2) == 20.0
    assert first_reached(updates, errors, 0.05) is None
    steps = [0, 1, 2, 3]  # on a server-step clock it is time_to_error
    assert first_reached(steps, errors, 0.2) == time_to_error(errors, 0.2, steps=steps)
    with pytest.raises(ParameterError, match="shape"):
        first_reached(updates, errors[:2], 0.2)


def test_common_budget_is_reached_by_every_run():
    runs = [[0, 10, 360], [0, 100, 3600], [0, 5, 365]]
    budget = common_budget(runs)
    assert budget == 360
    for x in runs:
        value_at(x, np.linspace(0, 1, len(x)), budget)  # no run is extrapolated
    with pytest.raises(ParameterError, match="no runs"):
        common_budget([])


def test_pair_agreement_counts_pairs_ordered_alike():
    paper = {"a": 3.0, "b": 2.0, "c": 1.0}
    assert pair_agreement(paper, paper) == (3, 3) and disagreeing_pairs(paper, paper) == []
    reverse = {"a": 1.0, "b": 2.0, "c": 3.0}
    assert pair_agreement(reverse, paper) == (0, 3)
    assert disagreeing_pairs({"a": 3.0, "b": 1.0, "c": 2.0}, paper) == [("b", "c")]


def _synthetic_run(method, per_step, rate, steps=100, seed=0):
    """A run whose accuracy depends on the client updates only: 1 - 0.9 exp(-updates / rate)."""
    step = np.arange(steps + 1)
    updates = per_step * step
    acc = 1.0 - 0.9 * np.exp(-updates / rate)
    curve = {"step": step, "updates": updates, "time": 2.0 * updates, "accuracy": acc}
    errors = 1.0 - acc
    return {
        "method": method,
        "seed": seed,
        "accuracy": float(acc[-1]),
        "T_e": time_to_error(errors, 0.2, steps=[int(v) for v in step]),
        "curve": {k: [float(v) for v in c] for k, c in curve.items()},
    }


def test_a_buffer_that_leads_per_step_can_trail_at_equal_client_work():
    """FedBuff (K = 10 updates per step) learns a little less per update than FedAsync: it leads
    at equal server steps, trails at equal client updates and virtual time."""
    s = licudi2025.Settings(methods=("FedAsync", "FedBuff"), seeds=(0,))
    runs = [_synthetic_run("FedAsync", 1, 50.0), _synthetic_run("FedBuff", 10, 60.0)]
    work = licudi2025.equal_work(runs, s)
    assert work["step"]["budget"] == 100 and work["updates"]["budget"] == 100
    assert work["time"]["budget"] == 200
    assert work["step"]["accuracy"]["FedBuff"][0] == runs[1]["accuracy"]  # final, per step
    fedbuff_at_100 = 1.0 - 0.9 * math.exp(-100 / 60)  # an evaluation: read exactly
    assert math.isclose(work["updates"]["accuracy"]["FedBuff"][0], fedbuff_at_100)
    assert work["updates"]["accuracy"]["FedAsync"][0] > fedbuff_at_100
    # error 0.2 at 50 ln 4.5 = 75.2 updates (FedAsync), 60 ln 4.5 = 90.2 (FedBuff: step 10)
    assert runs[0]["T_e"] == 76 and runs[1]["T_e"] == 10
    te = {axis: {m: work[axis]["T_e"][m][0] for m in s.methods} for axis in work}
    assert te["updates"] == {"FedAsync": 76, "FedBuff": 100} and te["time"]["FedBuff"] == 200
    assert "fastest first: FedBuff < FedAsync" in te_ranking(s, work["step"]["T_e"], "s")
    assert "first: FedAsync < FedBuff" in te_ranking(s, work["updates"]["T_e"], "u")
    lines = licudi2025.fedbuff_statement(s, work)
    assert lines[0].startswith("- FedBuff ranks 1 of 2 at equal server steps")
    assert "lead disappears at equal client work" in lines[1]
    table = licudi2025.equal_work_table(runs, s, work)
    assert "| FedBuff | 10.00 | 2.00 |" in table and "Acc. (%) at 100 updates" in table
    same = [_synthetic_run("FedAsync", 1, 50.0), _synthetic_run("FedBuff", 10, 40.0)]
    lines = licudi2025.fedbuff_statement(s, licudi2025.equal_work(same, s))
    assert "does NOT disappear" in lines[1]


def test_a_target_reached_after_the_budget_is_not_reached_on_that_clock():
    """FedBuff's runs go on past the update budget: T_e there would compare it with methods that
    stopped; it counts as not reached."""
    s = licudi2025.Settings(methods=("FedAsync", "FedBuff"), seeds=(0,))
    runs = [_synthetic_run("FedAsync", 1, 500.0), _synthetic_run("FedBuff", 10, 200.0)]
    work = licudi2025.equal_work(runs, s)
    assert runs[1]["T_e"] is not None  # reached at 310 updates, after the budget of 100
    assert work["updates"]["T_e"]["FedBuff"] == [None] and work["time"]["T_e"]["FedBuff"] == [None]


def test_with_one_seed_the_verdicts_say_the_spread_is_unknown():
    s = licudi2025.Settings(methods=("FedAsync", "FedBuff", "AsyncBezier"), seeds=(0,))
    runs = [
        _synthetic_run("FedAsync", 1, 50.0),
        _synthetic_run("FedBuff", 10, 60.0),
        _synthetic_run("AsyncBezier", 1, 70.0),  # below FedAsync: does not beat a baseline
    ]
    text = "\n".join(licudi2025.ranking_statement(runs, s))
    assert "does NOT beat FedAsync, FedBuff" in text and "nan" not in text
    assert "one seed, so the spread is unknown" in text
    assert "with one seed here our spread is unknown" in text
    lines = licudi2025.fedbuff_statement(s, licudi2025.equal_work(runs, s))
    assert "; one seed)" in lines[0] and "nan" not in lines[0]

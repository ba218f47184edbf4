"""Gini and Theil (Licudi et al. 2025, eqs. (48)-(49)), T_e and the staleness summary."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from riemfl.errors import ParameterError
from riemfl.federated.fairness import gini, staleness_summary, theil, time_to_error

accs = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30).filter(lambda v: sum(v) > 1e-6)


def _gini_pairwise(x):
    x = np.asarray(x, dtype=float)
    n = x.size
    return np.abs(x[:, None] - x[None, :]).sum() / (2 * n * n * x.mean())


def test_hand_computed_values():
    # x = (0.5, 1.0): mean 0.75, sum_{i,j} |x_i - x_j| = 2 * 0.5 = 1 -> 1 / (2 * 4 * 0.75) = 1/6
    assert gini([0.5, 1.0]) == pytest.approx(1 / 6)
    # Theil: (1 / (2 * 0.75)) * (0.5 log(0.5/0.75) + 1.0 log(1/0.75))
    expected = (0.5 * math.log(2 / 3) + math.log(4 / 3)) / 1.5
    assert theil([0.5, 1.0]) == pytest.approx(expected)
    # (0.2, 0.4, 0.9): pairwise |diffs| 0.2, 0.7, 0.5 -> 2.8 in the double sum; mean 0.5
    assert gini([0.2, 0.4, 0.9]) == pytest.approx(2.8 / (2 * 9 * 0.5))


def test_extremes():
    # one client has everything: Gini = 1 - 1/N, Theil = log N (0 log 0 = 0)
    x = [0.0, 0.0, 0.0, 0.8]
    assert gini(x) == pytest.approx(0.75)
    assert theil(x) == pytest.approx(math.log(4))


@given(accs)
def test_gini_matches_double_sum(x):
    assert gini(x) == pytest.approx(_gini_pairwise(x), abs=1e-12)


@given(accs, st.floats(0.01, 100.0))
def test_scale_invariance(x, c):
    x = np.asarray(x)
    assert gini(c * x) == pytest.approx(gini(x), abs=1e-12)
    assert theil(c * x) == pytest.approx(theil(x), abs=1e-12)


@given(st.floats(0.01, 1.0), st.integers(1, 30))
def test_equal_accuracies_give_zero(a, n):
    assert gini([a] * n) == pytest.approx(0.0, abs=1e-15)
    assert theil([a] * n) == pytest.approx(0.0, abs=1e-15)


@given(accs)
def test_bounds_and_permutation(x):
    n = len(x)
    g, t = gini(x), theil(x)
    assert 0.0 <= g <= 1 - 1 / n + 1e-12
    assert 0.0 <= t <= math.log(n) + 1e-12
    assert gini(x[::-1]) == pytest.approx(g, abs=1e-12)
    assert theil(x[::-1]) == pytest.approx(t, abs=1e-12)


@pytest.mark.parametrize(
    "bad", [[], [[0.5, 0.5]], [0.5, float("nan")], [0.5, -0.1], [0.0, 0.0], "ab"]
)
def test_bad_inputs(bad):
    with pytest.raises(ParameterError):
        gini(bad)
    with pytest.raises(ParameterError):
        theil(bad)


def test_time_to_error():
    errors = [0.9, 0.5, 0.3, 0.19, 0.25, 0.1]
    assert time_to_error(errors, 0.2) == 3
    assert time_to_error(errors, 0.3) == 2  # <= e counts
    assert time_to_error(errors, 0.05) is None
    assert time_to_error([], 0.5) is None
    assert time_to_error([0.9, float("nan"), 0.1], 0.5) == 2
    assert time_to_error(errors, 0.2, steps=[10, 20, 30, 40, 50, 60]) == 40
    with pytest.raises(ParameterError):
        time_to_error(errors, 0.2, steps=[1, 2])
    with pytest.raises(ParameterError):
        time_to_error([[0.1]], 0.2)


def test_staleness_summary():
    s = staleness_summary([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert s["count"] == 10 and s["mean"] == 4.5 and s["max"] == 9
    assert s["std"] == pytest.approx(np.sqrt(8.25))
    assert s["p50"] == 4.5 and s["p90"] == pytest.approx(8.1)
    empty = staleness_summary([])
    assert empty["count"] == 0 and math.isnan(empty["mean"])
    with pytest.raises(ParameterError):
        staleness_summary([1, -1])

"""Licudi 2025 (TR), eq. (15): LinearCorrection with a user's lambda and M, and the members of
the family it contains (ASGD, FedAsync, DC-ASGD, OrthoCorrect) equal to riemfl's own rules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import riemfl
from riemfl.errors import ParameterError, ShapeError
from riemfl.federated import ASGD, DCASGD, FedAsync, OrthoCorrect
from riemfl.federated.async_rules import Arrival
from riemfl.federated.linear_correction import (
    LinearCorrection,
    orthocorrect_lambda,
    squared_update,
)

D = 4
vectors = st.lists(st.floats(-3, 3, allow_nan=False), min_size=D, max_size=D).map(np.array)


def _arrival(base, local, current, weight=0.25):
    return Arrival(1, base, local, current, 2, weight, 7)


def _step(rule, manifold, arrival):
    rule.reset(manifold, 3)
    return rule.apply(manifold, arrival)


@settings(max_examples=40, deadline=None)
@given(vectors, vectors, vectors, st.floats(-1, 1), st.sampled_from([0.0, 0.5, 1.0]))
def test_the_family_contains_riemfls_rules_on_euclidean_space(base, local, current, v, alpha):
    m = riemfl.Euclidean(D)
    a = _arrival(base, local, current)
    pairs = [
        (LinearCorrection(0.0), ASGD()),
        (LinearCorrection(1.0), FedAsync()),
        (LinearCorrection(2.0, squared_update), DCASGD(lambda0=2.0, adaptive=False)),
        (LinearCorrection(orthocorrect_lambda(alpha, v)), OrthoCorrect(alpha, v)),
    ]
    scale = 1.0 + np.abs(np.concatenate([base, local, current])).max() ** 3
    for ours, theirs in pairs:
        np.testing.assert_allclose(
            _step(ours, m, a), _step(theirs, m, a), rtol=0, atol=1e-12 * scale
        )


def test_a_matrix_by_hand():
    """hat Delta = Delta + lam M (x^tau - x^t), x^{tau+1} = x^tau - rate hat Delta."""
    m = riemfl.Euclidean(3)
    base, local, current = np.zeros(3), np.array([1.0, -2.0, 0.5]), np.array([0.5, 0.0, -1.0])
    matrix = np.array([[2.0, 1.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 3.0]])
    delta, drift = base - local, current - base
    expected = current - 0.25 * (delta + 0.5 * matrix @ drift)
    got = _step(LinearCorrection(0.5, matrix), m, _arrival(base, local, current))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15)
    diagonal = np.array([2.0, 1.0, 3.0])
    expected = current - 0.25 * (delta + 0.5 * diagonal * drift)
    got = _step(LinearCorrection(0.5, diagonal), m, _arrival(base, local, current))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15)
    flat = LinearCorrection(0.5, np.diag(diagonal))
    np.testing.assert_allclose(_step(flat, m, _arrival(base, local, current)), got, atol=1e-15)


def test_on_a_manifold_the_step_stays_on_it():
    sphere = riemfl.Sphere(3)
    rng = np.random.default_rng(0)
    base = sphere.random_point(rng=rng)  # local model and drift near the base
    local, current = (
        sphere.retract(base, 0.3 * sphere.random_tangent(base, rng=rng)) for _ in "ab"
    )
    rule = LinearCorrection(orthocorrect_lambda(1.0, 0.0))
    rule.validate(sphere)
    new = _step(rule, sphere, _arrival(base, local, current))
    assert abs(np.linalg.norm(new) - 1.0) < 1e-12
    assert not np.allclose(new, current)


def test_bad_settings_are_refused():
    with pytest.raises(ParameterError, match="lam"):
        LinearCorrection(-1.0)
    with pytest.raises(ParameterError, match="non-finite"):
        LinearCorrection(1.0, np.array([1.0, np.nan, 1.0]))
    with pytest.raises(ShapeError, match=r"the point's shape \(3,\) .* or \(3, 3\)"):
        LinearCorrection(1.0, np.ones((2, 2))).validate(riemfl.Euclidean(3))
    with pytest.raises(ParameterError, match="vartheta"):
        orthocorrect_lambda(0.0, 2.0)


def test_describe_names_the_settings():
    d = LinearCorrection(orthocorrect_lambda(1.0, 0.0), squared_update, server_lr=0.5).describe()
    assert d["matrix"] == "squared_update" and "coefficient" in d["lam"]
    assert LinearCorrection(0.3, np.ones(3)).describe()["matrix"] == "array(3,)"
    assert LinearCorrection().describe()["matrix"] == "identity"

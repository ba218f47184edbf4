"""OrthoDyn's switch on the clients' update size (UpdateNormSwitch): the statistic by hand, the
one-way switch, its checkpoint, and bad settings."""

from __future__ import annotations

import numpy as np
import pytest

import riemfl
from riemfl.errors import CheckpointError, ParameterError
from riemfl.federated import OrthoDyn, OrthoGrad, OrthoPos, ProblemTrainer, RunOptions, run_async
from riemfl.federated.async_rules import Arrival
from riemfl.federated.orthodyn_switch import UpdateNormSwitch
from riemfl.problems import FunctionProblem


def _arrival(norm, version=0):
    return Arrival(0, np.zeros(2), np.array([norm, 0.0]), np.zeros(2), 0, 1.0, version)


def test_the_statistic_by_hand():
    s = UpdateNormSwitch(threshold=0.5, warmup=2, beta=0.5)
    assert s(_arrival(4.0)) == (0.0, 0.0) and np.isnan(s.ratio)
    assert s(_arrival(2.0)) == (0.0, 0.0)  # m0 = 3
    assert s(_arrival(2.0)) == (0.0, 0.0) and s.ratio == pytest.approx(2.5 / 3)  # 0.5*3 + 0.5*2
    assert s(_arrival(0.0, version=7)) == (1.0, 0.0)  # 1.25 / 3 <= 0.5: OrthoPos from now on
    assert s.switched_at == 7
    assert s(_arrival(100.0)) == (1.0, 0.0)  # one way


def test_the_state_resumes_and_is_checked():
    s = UpdateNormSwitch(warmup=1, beta=0.0)
    s(_arrival(2.0))
    s(_arrival(1.5))
    state = s.state_dict()
    t = UpdateNormSwitch(warmup=1, beta=0.0)
    t.load_state_dict(state)
    for norm in (1.4, 0.9, 0.3, 0.1):
        assert s(_arrival(norm, 3)) == t(_arrival(norm, 3))
    assert s.switched_at == t.switched_at is not None
    with pytest.raises(CheckpointError, match="reference"):
        t.load_state_dict({**state, "reference": -1.0})
    with pytest.raises(CheckpointError, match="switched_at"):
        t.load_state_dict({**state, "switched_at": "no"})


@pytest.mark.parametrize(
    "kwargs", [{"threshold": 0.0}, {"threshold": 1.5}, {"warmup": 0}, {"beta": 1.0}]
)
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ParameterError):
        UpdateNormSwitch(**kwargs)


def _quadratics(n=4, d=3):
    """Clients with losses 0.5 |A_i (x - 1)|^2: one minimiser, so the updates shrink to 0."""
    rng = np.random.default_rng(0)
    mats = [np.eye(d) + 0.3 * rng.standard_normal((d, d)) for _ in range(n)]
    return FunctionProblem(
        riemfl.Euclidean(d),
        [lambda x, a=a: 0.5 * float(np.sum((a @ (x - 1.0)) ** 2)) for a in mats],
        [lambda x, a=a: a.T @ (a @ (x - 1.0)) for a in mats],
        optimum=0.0,
        name="quadratics",
    )


def test_orthodyn_switches_from_orthograd_to_orthopos_in_a_run():
    """The updates shrink as the run converges: OrthoDyn takes OrthoGrad's steps until the
    switch and OrthoPos's after it."""
    problem = _quadratics()
    trainer = ProblemTrainer(problem, 0.05, 3)
    x0 = np.full(3, -4.0)
    rule = OrthoDyn(UpdateNormSwitch(threshold=0.5, warmup=4))
    history = run_async(trainer, rule, 60, x0=x0, options=RunOptions(seed=0))
    switch = rule.schedule.switched_at
    assert switch is not None and 0 < switch < 60
    before = run_async(trainer, OrthoDyn(UpdateNormSwitch(0.5, 4)), switch, x0=x0)
    grad = run_async(trainer, OrthoGrad(), switch, x0=x0)
    np.testing.assert_array_equal(before.final_point, grad.final_point)
    assert history.metrics["optimality_gap"][-1] < 0.1 * history.metrics["optimality_gap"][0]
    late = OrthoDyn(UpdateNormSwitch(0.5, 4))
    late.schedule.switched_at = 0  # switched from the start: OrthoPos
    np.testing.assert_array_equal(
        run_async(trainer, late, 10, x0=x0).final_point,
        run_async(trainer, OrthoPos(), 10, x0=x0).final_point,
    )

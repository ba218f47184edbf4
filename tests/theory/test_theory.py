"""riemfl.theory: Theorem 1 and Table I of Toghani & Uribe 2022, rule (11) of Zhang et al. 2024.

The hand computations write the theorems' numbers out; the properties check the formulas'
shape (the bound falls with T past the horizon, the step size goes as 1/sqrt(T), the horizon is
cubic in tau + 1); bad inputs raise ParameterError naming the argument.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from riemfl.errors import ParameterError
from riemfl.manifolds import Euclidean, Stiefel
from riemfl.problems import FunctionProblem, KPCAProblem
from riemfl.theory import (
    TABLE_I,
    FedBuffBound,
    RateRow,
    fedbuff_bound,
    fedbuff_horizon,
    fedbuff_horizon_ok,
    fedbuff_server_step,
    fedbuff_step_size,
    projection_constant,
    render_table,
    rfedproj_step_size,
    rfedproj_step_size_for,
)

smoothness = st.floats(1e-6, 1e3, allow_nan=False, allow_infinity=False)
local_steps = st.integers(1, 50)
staleness = st.integers(0, 30)


def _bound(T: int, **changes) -> FedBuffBound:
    """The hand-computed setting below, with ``changes``."""
    args = {
        "L": 0.25,
        "Q": 1,
        "tau": 1,
        "sigma2": 2.0,
        "b": 4,
        "gamma2": 0.25,
        "n": 4,
        "gap": 3.0,
    }
    return fedbuff_bound(T, **{**args, **changes})


# ------------------------------------------------------------------ Theorem 1 by hand
def test_the_step_sizes_by_hand():
    # eta = 1/(Q sqrt(L T)): Q = 2, L = 0.5, T = 200 -> 1/(2 sqrt(100)) = 1/20
    assert fedbuff_step_size(2, 0.5, 200) == pytest.approx(0.05, rel=1e-15)
    # Q = 1, L = 4, T = 25 -> 1/(1 * 10)
    assert fedbuff_step_size(1, 4.0, 25) == pytest.approx(0.1, rel=1e-15)
    # beta = 1/K
    assert fedbuff_server_step(4) == 0.25 and fedbuff_server_step(1) == 1.0


@pytest.mark.parametrize(
    ("L", "Q", "tau", "horizon"),
    [
        (1.0, 1, 0, 1280),  # 160 * 1 * 8 * 1
        (1.0, 1, 1, 10240),  # 160 * 1 * 8 * 8
        (0.05, 2, 2, 1944),  # 160 * 0.05 * 9 * 27
        (0.1, 1, 0, 128),  # 160 * 0.1 * 8: L read as 1/10, not the float just above it
        (0.001, 3, 0, 2),  # 160 * 0.001 * 10 = 1.6 -> 2
        (1e-9, 1, 0, 1),  # below 1: at least one step
        (2.5, 5, 3, 307200),  # 160 * 2.5 * 12 * 64
    ],
)
def test_the_horizon_by_hand(L, Q, tau, horizon):
    assert fedbuff_horizon(L, Q, tau) == horizon
    assert fedbuff_horizon_ok(horizon, L, Q, tau)
    assert horizon == 1 or not fedbuff_horizon_ok(horizon - 1, L, Q, tau)


def test_the_bound_by_hand():
    # L = 1/4, Q = 1, tau = 1, sigma^2 = 2, b = 4, gamma^2 = 1/4, n = 4, f(w0) - f* = 3,
    # T = 10000 (horizon 160 * 0.25 * 8 * 8 = 2560): sqrt(L) = 1/2, sqrt(T) = 100,
    # sigma^2/b = 1/2, n gamma^2 = 1
    bound = _bound(10_000)
    assert bound.optimisation == pytest.approx(8 * 0.5 * 3 / 100)  # 0.12
    assert bound.noise == pytest.approx(16 * 0.5 * (0.5 + 0.25) / 100)  # 0.06
    assert bound.staleness == pytest.approx(320 * 0.25 * 2 * 2 * (0.5 + 1) / 10_000)  # 0.048
    assert bound.total == pytest.approx(0.228)
    assert bound.horizon == 2560 and bound.covered and bound.T == 10_000
    assert bound.step_size == pytest.approx(1 / 50)  # 1/(1 * sqrt(0.25 * 10000))
    # Remark 2: gamma^2 in place of n gamma^2 in the third term only
    uniform = _bound(10_000, uniform_diversity=True)
    assert uniform.staleness == pytest.approx(320 * 0.25 * 2 * 2 * (0.5 + 0.25) / 10_000)
    assert (uniform.optimisation, uniform.noise) == (bound.optimisation, bound.noise)


def test_the_second_hand_example():
    # L = 1/8, Q = 1, tau = 0, sigma^2 = 1, b = 1, gamma^2 = 0, n = 1, gap = 1, T = 200:
    # sqrt(L / T) = sqrt(1/1600) = 1/40; horizon 160 / 8 * 8 = 160
    bound = fedbuff_bound(200, L=0.125, Q=1, tau=0, sigma2=1, b=1, gamma2=0, n=1, gap=1)
    assert bound.optimisation == pytest.approx(8 / 40)
    assert bound.noise == pytest.approx(16 / 40)
    assert bound.staleness == pytest.approx(320 * 0.125 * 2 * 1 * 1 / 200)
    assert bound.horizon == 160


def test_below_the_horizon_the_bound_is_refused_or_marked():
    with pytest.raises(ParameterError, match=r"^fedbuff_bound: T must be an integer >= 2560"):
        _bound(2559)
    below = _bound(2559, require_horizon=False)
    assert not below.covered and below.total > _bound(2560).total


# ------------------------------------------------------------------ properties
@given(smoothness, local_steps, staleness, st.integers(1, 10**6))
def test_the_step_size_goes_as_one_over_root_T(L, Q, tau, T):
    eta = fedbuff_step_size(Q, L, T)
    assert eta * Q * math.sqrt(L * T) == pytest.approx(1.0, rel=1e-12)
    assert fedbuff_step_size(Q, L, 4 * T) == pytest.approx(eta / 2, rel=1e-12)


@given(smoothness, local_steps, staleness)
def test_the_horizon_meets_the_condition_and_one_less_does_not(L, Q, tau):
    horizon = fedbuff_horizon(L, Q, tau)
    exact = 160 * Fraction(repr(L)) * (Q + 7) * (tau + 1) ** 3
    assert horizon >= exact and fedbuff_horizon_ok(horizon, L, Q, tau)
    assert horizon == 1 or (horizon - 1 < exact and not fedbuff_horizon_ok(horizon - 1, L, Q, tau))


@given(st.integers(1, 1000), local_steps, staleness)
def test_the_horizon_is_cubic_in_tau_plus_one(k, Q, tau):
    # L = k/160 makes 160 L (Q+7) an integer, so no rounding hides the cube
    L = k / 160
    assert fedbuff_horizon(L, Q, tau) == fedbuff_horizon(L, Q, 0) * (tau + 1) ** 3
    assert fedbuff_horizon(L, Q, 0) == k * (Q + 7)


@given(
    smoothness,
    local_steps,
    st.integers(0, 8),
    st.floats(0, 1e3),
    st.integers(1, 100),
    st.floats(0, 1e3),
    st.integers(1, 100),
    st.floats(1e-6, 1e3),
    st.integers(0, 10**4),
    st.integers(1, 10**4),
)
def test_the_bound_falls_with_T_beyond_the_horizon(L, Q, tau, sigma2, b, gamma2, n, gap, a, c):
    common = {"L": L, "Q": Q, "tau": tau, "sigma2": sigma2, "b": b, "gamma2": gamma2, "n": n}
    T = fedbuff_horizon(L, Q, tau) + a
    near, far = fedbuff_bound(T, **common, gap=gap), fedbuff_bound(T + c, **common, gap=gap)
    assert far.total < near.total  # gap > 0: the first term falls strictly
    assert far.optimisation < near.optimisation
    assert far.noise <= near.noise and far.staleness <= near.staleness


@given(st.integers(2560, 10**7))
def test_the_terms_have_the_powers_of_T_of_the_rate(T):
    # the leading terms go as T^(-1/2), the staleness term as T^(-1) (Table I's last row)
    now, later = _bound(T), _bound(4 * T)
    assert later.optimisation == pytest.approx(now.optimisation / 2, rel=1e-12)
    assert later.noise == pytest.approx(now.noise / 2, rel=1e-12)
    assert later.staleness == pytest.approx(now.staleness / 4, rel=1e-12)


def test_the_staleness_term_grows_as_tau_squared_plus_one():
    T = fedbuff_horizon(0.25, 1, 9)
    terms = [_bound(T, tau=tau).staleness for tau in (0, 3, 9)]
    assert terms[1] / terms[0] == pytest.approx(10) and terms[2] / terms[0] == pytest.approx(82)


# ------------------------------------------------------------------ bad inputs
BAD = [
    (lambda: fedbuff_step_size(0, 1.0, 10), r"fedbuff_step_size: Q must be an integer >= 1"),
    (lambda: fedbuff_step_size(1.5, 1.0, 10), r"fedbuff_step_size: Q must be an integer"),
    (lambda: fedbuff_step_size(True, 1.0, 10), r"fedbuff_step_size: Q must be an integer"),
    (lambda: fedbuff_step_size(1, 0.0, 10), r"fedbuff_step_size: L must be a finite number > 0"),
    (lambda: fedbuff_step_size(1, math.nan, 10), r"fedbuff_step_size: L must be a finite number"),
    (lambda: fedbuff_step_size(1, "1", 10), r"fedbuff_step_size: L must be a finite number"),
    (lambda: fedbuff_step_size(1, 1.0, 0), r"fedbuff_step_size: T must be an integer >= 1"),
    (lambda: fedbuff_step_size(1, 1.0, 10.0), r"fedbuff_step_size: T must be an integer"),
    (lambda: fedbuff_server_step(0), r"fedbuff_server_step: K must be an integer >= 1"),
    (lambda: fedbuff_horizon(-1.0, 1, 0), r"fedbuff_horizon: L must be a finite number > 0"),
    (lambda: fedbuff_horizon(math.inf, 1, 0), r"fedbuff_horizon: L must be a finite number"),
    (lambda: fedbuff_horizon(1.0, 0, 0), r"fedbuff_horizon: Q must be an integer >= 1"),
    (lambda: fedbuff_horizon(1.0, 1, -1), r"fedbuff_horizon: tau must be an integer >= 0"),
    (lambda: fedbuff_horizon_ok(0, 1.0, 1, 0), r"fedbuff_horizon_ok: T must be an integer >= 1"),
    (lambda: _bound(10_000, sigma2=-1.0), r"fedbuff_bound: sigma2 must be a finite number >= 0"),
    (lambda: _bound(10_000, b=0), r"fedbuff_bound: b must be an integer >= 1"),
    (lambda: _bound(10_000, gamma2=math.nan), r"fedbuff_bound: gamma2 must be a finite number"),
    (lambda: _bound(10_000, n=0), r"fedbuff_bound: n must be an integer >= 1"),
    (lambda: _bound(10_000, gap=-0.1), r"fedbuff_bound: gap must be a finite number >= 0"),
    (lambda: _bound(10_000, tau=np.float64(1)), r"fedbuff_bound: tau must be an integer"),
    (
        lambda: _bound(10_000, uniform_diversity="yes"),
        r"fedbuff_bound: uniform_diversity must be True or False",
    ),
    (
        lambda: _bound(10_000, require_horizon=1),
        r"fedbuff_bound: require_horizon must be True or False",
    ),
    (lambda: projection_constant(0.0, 1.0), r"projection_constant: diameter must be a finite"),
    (lambda: projection_constant(1.0, -1.0), r"projection_constant: gamma must be a finite"),
    (lambda: render_table(["FedAvg"]), r"render_table: rows must be RateRow objects"),
]


@pytest.mark.parametrize(("call", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_inputs_are_refused_by_name(call, message):
    with pytest.raises(ParameterError, match="^" + message):
        call()


def test_numpy_scalars_are_accepted():
    assert fedbuff_step_size(np.int64(2), np.float32(0.5), np.int32(200)) == pytest.approx(0.05)
    assert fedbuff_horizon(np.float64(0.05), np.int64(2), np.int64(2)) == 1944


# ------------------------------------------------------------------ Table I
def test_table_one_holds_the_papers_rows_in_order():
    sqrt_t = "O(1/sqrt(T))"
    delayed = "O(1/sqrt(T)) + O(tau^2/T)"
    expected = [
        ("FedAvg", "McMahan et al. 2017", None),
        ("FedAvg", "Yu et al. 2019", sqrt_t),
        ("FedAvg", "Wang et al. 2020", sqrt_t),
        ("FedAsync", "Xie et al. 2020", delayed),
        ("FedBuff", "Nguyen et al. 2022", delayed),
        ("FedBuff", "Toghani & Uribe 2022", delayed),
    ]
    assert [(r.algorithm, r.analysis, r.rate) for r in TABLE_I] == expected
    assert all(isinstance(r, RateRow) for r in TABLE_I)
    terms = {None: (), sqrt_t: ((-0.5, 0),), delayed: ((-0.5, 0), (-1.0, 2))}
    assert all(r.terms == terms[r.rate] for r in TABLE_I)


def test_table_one_marks_what_the_paper_says():
    marks = {r.analysis: (r.asynchronous, r.buffered, r.unbounded_gradient) for r in TABLE_I}
    # synchronous FedAvg; the text does not settle its analyses' gradient assumption
    for analysis in ("McMahan et al. 2017", "Yu et al. 2019", "Wang et al. 2020"):
        assert marks[analysis] == (False, False, None)
    assert marks["Xie et al. 2020"] == (True, False, False)
    assert marks["Nguyen et al. 2022"] == (True, True, False)  # bounded gradient norm
    # "the first analysis [...] with no boundedness assumption on the gradient norm"
    assert marks["Toghani & Uribe 2022"] == (True, True, True)
    assert sum(r.unbounded_gradient is True for r in TABLE_I) == 1


def test_the_rendered_table_has_a_line_per_row():
    text = render_table()
    lines = text.splitlines()
    assert len(lines) == 2 + len(TABLE_I)
    assert lines[0].startswith("| algorithm | analysis | asynchronous update |")
    assert "| FedAvg | McMahan et al. 2017 | no | no | not stated | - |" in lines
    last = "| FedBuff | Toghani & Uribe 2022 | yes | yes | yes | O(1/sqrt(T)) + O(tau^2/T) |"
    assert lines[-1] == last
    assert render_table(TABLE_I[:1]).count("\n") == 2


# ------------------------------------------------------------------ rule (11)
def test_rule_eleven_by_hand():
    # St(5, 2): reach 2 gamma = 1 -> gamma = 1/2; diam = 2 sqrt(2) -> M = 4 sqrt(2).
    # L = 2, D_f = 3, L_P = 4, n = 9, tau = 5:
    # 1/(24 M L) = 1/(192 sqrt 2); gamma/(6 D_f) = 1/36; 1/(D_f L_P) = 1/12
    got = rfedproj_step_size(
        lipschitz=2.0,
        grad_bound=3.0,
        projection_curvature=4.0,
        reach=1.0,
        diameter=2 * math.sqrt(2),
        n_clients=9,
        local_steps=5,
    )
    assert got.gamma == 0.5 and got.projection_constant == pytest.approx(4 * math.sqrt(2))
    assert got.smoothness_bound == pytest.approx(1 / (192 * math.sqrt(2)))
    assert got.tube_bound == pytest.approx(1 / 36) and got.curvature_bound == pytest.approx(1 / 12)
    assert got.effective == got.smoothness_bound and got.binding == "smoothness"
    assert got.global_step_size == 3.0  # sqrt(n)
    assert got.step_size == pytest.approx(1 / (192 * math.sqrt(2)) / 15)  # / (eta_g tau)


def test_rule_eleven_other_bounds_can_bind():
    common = {"reach": 1.0, "diameter": 2.0, "n_clients": 4, "local_steps": 1}
    # M = max(2 / 0.5, 2) = 4; L = 0.01: 1/(24*4*0.01) = 1.04; gamma/(6 D_f) = 0.5/60
    tube = rfedproj_step_size(lipschitz=0.01, grad_bound=10, projection_curvature=0, **common)
    assert tube.binding == "tube" and tube.effective == pytest.approx(0.5 / 60)
    assert tube.curvature_bound == math.inf  # L_P = 0
    curved = rfedproj_step_size(lipschitz=0.01, grad_bound=1, projection_curvature=100, **common)
    assert curved.binding == "curvature" and curved.effective == pytest.approx(0.01)
    # a convex set (infinite reach): gamma infinite, M = 2, no tube bound
    convex = rfedproj_step_size(
        lipschitz=1, grad_bound=1, projection_curvature=0, **{**common, "reach": math.inf}
    )
    assert convex.projection_constant == 2 and convex.effective == pytest.approx(1 / 48)


def test_projection_constant_by_hand():
    assert projection_constant(2.0, 0.5) == 4.0  # diam / gamma
    assert projection_constant(1.0, 1.0) == 2.0  # at least 2
    assert projection_constant(3.0, math.inf) == 2.0


def _kpca() -> KPCAProblem:
    rng = np.random.default_rng(0)
    return KPCAProblem([rng.standard_normal((15, 6)) for _ in range(4)], 2)


def test_rule_eleven_for_a_problem_reads_the_manifold_and_the_clients():
    problem = _kpca()
    L = 2.0 * problem.smoothness
    got = rfedproj_step_size_for(
        problem, local_steps=5, lipschitz=L, grad_bound=3.0, projection_curvature=4.0
    )
    direct = rfedproj_step_size(
        lipschitz=L,
        grad_bound=3.0,
        projection_curvature=4.0,
        reach=1.0,  # Stiefel
        diameter=2 * math.sqrt(2),  # St(6, 2)
        n_clients=4,
        local_steps=5,
    )
    assert got == direct


def test_rule_eleven_for_a_problem_refuses_what_the_theorem_does_not_cover():
    problem = _kpca()
    below = 0.5 * problem.smoothness
    with pytest.raises(ParameterError, match=r"lipschitz must be >= problem.smoothness"):
        rfedproj_step_size_for(
            problem, local_steps=5, lipschitz=below, grad_bound=1.0, projection_curvature=1.0
        )
    flat = FunctionProblem(Euclidean(3), [lambda x: 0.0], [lambda x: 0 * x])
    with pytest.raises(ParameterError, match=r"diameter must be finite"):
        rfedproj_step_size_for(
            flat, local_steps=1, lipschitz=1.0, grad_bound=1.0, projection_curvature=0.0
        )
    with pytest.raises(ParameterError, match=r"problem must be a FederatedProblem"):
        rfedproj_step_size_for(
            Stiefel(4, 2), local_steps=1, lipschitz=1.0, grad_bound=1.0, projection_curvature=0
        )
    above = 10 * problem.smoothness
    with pytest.raises(ParameterError, match=r"rfedproj_step_size: local_steps must be an integer"):
        rfedproj_step_size_for(
            problem, local_steps=0, lipschitz=above, grad_bound=1.0, projection_curvature=0
        )

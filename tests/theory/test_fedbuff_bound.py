"""riemfl.experiments.fedbuff_bound: the quick form's files and verdicts, the quadratic's exact
constants, and verdicts that fail when the numbers say so."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from riemfl.experiments import fedbuff_bound
from riemfl.experiments.fedbuff_bound import (
    FIGURE,
    QuadraticProblem,
    Settings,
    bound_verdict,
    rate_verdict,
    slope,
)
from riemfl.problems import sample_batches
from riemfl.testing import importorskip
from riemfl.theory import fedbuff_horizon

importorskip("matplotlib")

pytestmark = pytest.mark.xdist_group("fedbuff_bound")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("fedbuff_bound")
    found = fedbuff_bound.reproduce(out, quick=True, progress=False)
    return out, found


@pytest.mark.slow  # the quick form runs 18 FedBuff runs (about 10 s)
def test_the_quick_form_writes_its_files(quick):
    out, found = quick
    assert (out / FIGURE).read_bytes()[:4] == b"\x89PNG"
    report = (out / "report.md").read_text()
    assert "## Theorem 1 (Toghani & Uribe 2022)" in report
    assert "T >= 160 L (Q+7) (tau+1)^3" in report
    assert "| FedBuff | Toghani & Uribe 2022 | yes | yes | yes |" in report  # Table I
    assert f"{sum(v.passed for v in found)}/{len(found)} verdicts pass" in report
    results = json.loads((out / "results.json").read_text())
    assert results["quick"] is True and len(results["verdicts"]) == len(found)
    s = Settings.quick()
    assert [(r["tau"], r["T"]) for r in results["rows"]] == s.grid()
    assert all("curve" not in r for r in results["rows"])


@pytest.mark.slow  # the quick form runs 18 FedBuff runs (about 10 s)
def test_the_quick_form_verdicts_pass_and_measured_is_below_the_bound(quick):
    out, found = quick
    s = Settings.quick()
    bounds = [v for v in found if v.claim == "bound"]
    rates = [v for v in found if v.claim == "rate"]
    assert len(bounds) == len(s.grid()) and [v.label for v in rates] == [
        f"rate/tau={tau}" for tau in s.taus
    ]
    assert all(v.passed for v in found), "\n".join(v.line() for v in found if not v.passed)
    rows = json.loads((out / "results.json").read_text())["rows"]
    for row in rows:
        assert row["minimum"] <= row["average"] < row["bound"]
        assert (
            row["T"] >= row["horizon"] == fedbuff_horizon(s.smoothness, s.local_steps, row["tau"])
        )
        assert row["max_staleness"] == row["tau"]  # theory mode reaches the bound, never beyond
        assert row["updates"] == s.buffer_size * row["T"]
        assert row["seeds"] == s.seeds and len(row["seed_averages"]) == s.seeds
    for v in rates:
        assert abs(v.measured + 0.5) <= s.rate_tolerance


def _row(**changes) -> dict:
    row = {"tau": 1, "T": 600, "horizon": 576, "max_staleness": 1, "average": 0.01, "bound": 0.1}
    return {**row, **changes}


def test_a_bound_verdict_fails_when_the_numbers_say_so():
    assert bound_verdict(_row()).passed
    assert not bound_verdict(_row(average=0.2)).passed  # above the bound
    assert not bound_verdict(_row(max_staleness=2)).passed  # staler than tau
    assert not bound_verdict(_row(T=500)).passed  # below the horizon
    assert bound_verdict(_row(average=0.2)).line().startswith("FAIL bound/tau=1/T=600")


def test_a_rate_verdict_fails_when_the_decay_is_not_one_over_root_T():
    Ts = [100, 200, 400, 800]
    root = [{"T": T, "average": 3.0 / math.sqrt(T)} for T in Ts]
    assert rate_verdict(0, root, 0.15).passed
    assert rate_verdict(0, root, 0.15).measured == pytest.approx(-0.5)
    linear = [{"T": T, "average": 3.0 / T} for T in Ts]
    assert not rate_verdict(0, linear, 0.15).passed  # slope -1
    assert not rate_verdict(0, root[:1], 0.15).passed  # one T: no slope
    assert math.isnan(slope([10], [1.0])) and math.isnan(slope([10, 20], [1.0, 0.0]))


def test_the_quadratic_constants_are_exact():
    problem = QuadraticProblem(n_clients=4, samples=6, dim=3, smoothness=0.5, condition=4.0)
    assert problem.smoothness == 0.5 == problem.curvature.max()
    assert problem.curvature.min() == pytest.approx(0.125)
    rng = np.random.default_rng(1)
    w = rng.standard_normal(3)
    stack = np.broadcast_to(w, (4, 3))
    full = problem.client_egrads(range(4), stack)
    np.testing.assert_allclose(problem.egrad(w), problem.gradient(w), rtol=1e-12, atol=1e-15)
    # sigma^2: the largest per-sample variance of a client's gradients, the same at every w
    variances = []
    for i in range(4):
        samples = [problem.client_egrads([i], w[None], np.array([[k]]))[0] for k in range(6)]
        variances.append(np.mean([np.sum((g - full[i]) ** 2) for g in samples]))
    assert problem.sigma2 == pytest.approx(max(variances), rel=1e-12)
    # gamma^2 (eq. (8)) and its uniform form (eq. (9))
    spread = np.sum((full - full.mean(axis=0)) ** 2, axis=1)
    assert problem.gamma2 == pytest.approx(spread.mean(), rel=1e-12)
    assert problem.gamma2_uniform == pytest.approx(spread.max(), rel=1e-12)
    # f* at the grand mean, where the gradient vanishes
    assert problem.loss(problem.centre) == pytest.approx(problem.optimum)
    assert np.allclose(problem.egrad(problem.centre), 0.0, atol=1e-15)
    # a mini-batch gradient is the mean of its samples' gradients
    batch = sample_batches(rng, problem.n_samples, [2], 3)
    one_by_one = [problem.client_egrads([2], w[None], batch[:, [j]])[0] for j in range(3)]
    np.testing.assert_allclose(
        problem.client_egrads([2], w[None], batch)[0], np.mean(one_by_one, axis=0), rtol=1e-12
    )


def test_the_settings_grid_is_a_multiple_of_each_horizon():
    s = Settings.quick()
    assert s.runs() == len(s.taus) * len(s.multiples) * s.seeds
    for tau, T in s.grid():
        assert T % s.horizon(tau) == 0 and T // s.horizon(tau) in s.multiples
    assert s.horizon(2) == 1944  # 160 * 0.05 * (2 + 7) * 27

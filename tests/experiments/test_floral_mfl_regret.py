"""The MFL experiment (riemfl.experiments.floral.mfl): its files, and what its quick run measures
against Theorems A.9 and A.10 of Almansoori et al. 2024."""

from __future__ import annotations

import json

import pytest

from riemfl.experiments.floral.mfl import MFL_RUNS, run_mfl_regret

pytestmark = pytest.mark.slow  # the quick experiment: about 7 s of MFL runs


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("mfl")
    return out, run_mfl_regret(out, quick=True)


def test_quick_run_writes_its_files(quick):
    out, result = quick
    for name in ("mfl.json", "mfl.png", "mfl.md"):
        assert (out / name).stat().st_size > 0
    saved = json.loads((out / "mfl.json").read_text(encoding="utf-8"))
    assert set(saved["runs"]) == set(MFL_RUNS)
    report = (out / "mfl.md").read_text(encoding="utf-8")
    assert "## Verdicts" in report and "## Where it does not" in report
    assert result["seconds"] < 30


def test_measured_gap_is_below_the_a9_bound(quick):
    _, result = quick
    for label, run in result["runs"].items():
        assert run["below_a9"], label
        assert all(g <= b for g, b in zip(run["gap"], run["bound_a9"], strict=True)), label


def test_what_the_quick_run_measures(quick):
    """Findings that a change of the algorithm or of the bounds can overturn."""
    _, result = quick
    runs, theory = result["runs"], result["theory"]
    perfect = runs["perfect router (pi = pi*)"]
    assert perfect["mismatch_start"] == 0 and perfect["mismatch_end"] == 0
    assert perfect["gap"][-1] < 1e-3 and perfect["rate"] < -0.8
    assert all(g <= b for g, b in zip(perfect["gap"], perfect["bound_a10"], strict=True))
    # eq. (5)'s router, reset with the vanishing SGD step, stays near uniform: no decay
    reset = runs["eq. (5) router"]
    assert not reset["mismatch_decays"] and reset["mismatch_end"] > 0.9
    assert reset["gap"][-1] > 1.0  # the models meet at the federated average
    # the cumulative router separates the clusters and the gap follows the perfect router's
    cumulative = runs["cumulative router"]
    assert cumulative["mismatch_decays"] and cumulative["beta"] > 1
    assert cumulative["gap"][-1] < 1e-2 and cumulative["regret_per_round_last_quarter"] < 1e-6
    # the unbiased oracle of the proofs converges although the mismatch stays
    sampled = runs["eq. (5) router, cluster-sampled gradients"]
    assert sampled["mismatch_end"] > 0.9 and sampled["gap"][-1] < 1e-3
    # Remark A.11 is off by a factor 2 for one-hot truths: ||delta_0||_1 = 2 (1 - U_c)
    for d0, bound in zip(theory["delta0_uniform"], theory["remark_a11_bound"], strict=True):
        assert d0 == pytest.approx(2 * bound)
    assert any("Remark A.11" in v for v in result["verdicts"])
    assert all(run["s_a9"] > theory["s"] for run in runs.values())

"""Smoke test of ``benchmarks/campaign_faults.py``: the quick campaign has the full structure.

No assertions on timings: every part is present, the counts add up, the goal verdicts follow
from the counts, and the run core's contract holds where it is the run core's (kills and byte
flips on both engines, injected faults in ``run_sync`` and ``run_async``). FLoRAL's fault
counts are only checked for consistency: the campaign is where their gaps are reported.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from riemfl.testing import importorskip

importorskip("torch")  # the harness reports torch's threads; FLoRAL runs on torch


@pytest.fixture
def campaign(load_benchmark):
    return load_benchmark("campaign_faults")


@pytest.mark.slow
def test_quick_campaign_structure(tmp_path, campaign):
    out = tmp_path / "nested" / "campaign_faults.json"
    result = campaign.main(["--quick", "--out", str(out)])
    stored = json.loads(out.read_text())
    assert stored["settings"]["is_quick"] and stored["goals"] == result["goals"]
    for key in ("platform", "processor", "cpu_count", "python", "numpy", "riemfl"):
        assert key in result["machine"]

    for engine in ("sync", "async"):
        k = result["kills"][engine]
        attempts = [a for c in k["detail"] for a in c["attempts"]]
        assert k["chains"] == len(k["detail"]) >= 1 and k["kills"] >= 1
        assert k["kills"] == sum(a["killed"] for a in attempts)
        assert k["resumes"] == sum(a["resumed"] for a in attempts) <= len(attempts)
        assert k["finished"] + k["runs_lost"] == k["chains"]
        assert k["distinct_kill_steps"] == len(set(k["kill_steps"]))
        assert k["command"].startswith("riemfl run kpca-synthetic")
        # the run core's contract: every chain ends exactly where the reference ends
        assert k["runs_lost"] == k["silent_wrong_resumes"] == k["corrupt_after_kill"] == 0
        assert k["bit_identical_finals"] == k["chains"] and k["tmp_left"] == []
        assert result["goals"]["parts"][f"kills/{engine}"]

    per_region = result["settings"]["flips"]["per_region"]
    for engine in ("sync", "async"):
        f = result["flips"][engine]
        assert f["refused"] + f["resumed_silently"] + f["other_exception"] == f["flips"]
        assert len(f["detail"]) == f["flips"] == result["settings"]["flips"][engine]
        assert all(sum(c.values()) >= per_region for c in f["by_region"].values())
        assert f["refused"] == f["flips"] and f["control_resume_ok"]
        assert result["goals"]["parts"][f"flips/{engine}"]

    for engine in ("sync", "async", "floral"):
        f = result["faults"][engine]
        assert [r["kind"] for r in f["runs"]] == list(campaign.KINDS)
        assert f["runs_lost"] == sum(r["lost"] for r in f["runs"])
        for r in f["runs"]:
            assert r["injected"] >= (1 if engine != "async" else 0)
            assert r["survived"] + r["missed"] + r["wrong_reason"] <= r["injected"]
            assert r["lost"] == ("error" in r)
        met = f["runs_lost"] == 0 and f["survived"] == f["injected"] == sum(
            r["injected"] for r in f["runs"]
        )
        assert result["goals"]["parts"][f"faults/{engine}"] == (met and f["unexpected_drops"] == 0)
    for engine in ("sync", "async"):  # the run core isolates every kind of fault
        assert result["goals"]["parts"][f"faults/{engine}"]

    tables = campaign.format_tables(result).split("\n\n")
    assert len(tables) == 3
    assert len(tables[2].splitlines()) == 2 + 3 * (len(campaign.KINDS) + 1)


@pytest.mark.parametrize("kind", ["raise", "nan", "inf", "complex", "shape", "dtype"])
def test_corrupt_changes_only_what_its_kind_says(campaign, kind):
    x = np.arange(24.0).reshape(3, 4, 2)
    if kind == "raise":
        with pytest.raises(RuntimeError, match="injected fault"):
            campaign.corrupt(x, [1], kind)
        return
    y = campaign.corrupt(x, [1], kind)
    if kind in ("nan", "inf", "complex"):
        assert y.shape == x.shape
        np.testing.assert_array_equal(y[[0, 2]], x[[0, 2]])
        assert not np.array_equal(y[1], x[1])
    assert {"shape": y.shape == (3, 4, 1), "dtype": y.dtype == np.int64}.get(kind, True)


def test_flip_positions_cover_every_region(campaign):
    regions = [
        ("magic", 21),
        ("hash", 53),
        ("header_length", 61),
        ("header", 400),
        ("arrays", 5000),
    ]
    rng = np.random.default_rng(0)
    positions = campaign.flip_positions(rng, regions, 40, 2)
    assert len(positions) == 40 and positions == sorted(positions)
    assert 0 <= positions[0] and positions[-1] < 5000
    starts = [0, 21, 53, 61, 400]
    for (_, end), start in zip(regions, starts, strict=True):
        assert sum(start <= p < end for p in positions) >= 2


def test_same_tree_is_bitwise_but_skips_measured_keys(campaign):
    a = {"x": np.array([1.0, np.nan]), "totals": {"cpu_time": 1.0, "n": 2.0}, "v": (1, "a")}
    b = {"x": np.array([1.0, np.nan]), "totals": {"cpu_time": 9.0, "n": 2.0}, "v": (1, "a")}
    assert campaign.same_tree(a, b)
    assert not campaign.same_tree(a, {**b, "x": np.array([1.0, 0.0])})
    assert not campaign.same_tree(
        a, {**b, "totals": {"cpu_time": 1.0, "n": np.nextafter(2.0, 3.0)}}
    )
    assert not campaign.same_tree(a, {**b, "x": np.array([1.0, np.nan], dtype=np.float32)})

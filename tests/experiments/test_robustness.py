"""``riemfl reproduce robustness``: the report, its JSON against direct runs, and the verdicts."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from riemfl.cli import main
from riemfl.errors import ParameterError
from riemfl.experiments import robustness
from riemfl.experiments.registry import PROBLEMS, build_problem
from riemfl.experiments.robustness import ORACLE, HonestMean, Settings, verdict, verdicts
from riemfl.experiments.robustness.server_optimizer_comparison import ComparisonSettings
from riemfl.federated import (
    RFedAvg,
    RunOptions,
    ServerOptimized,
    build_aggregator,
    build_server_optimizer,
    run_sync,
)
from riemfl.federated.attacks import Byzantine
from riemfl.testing import importorskip

importorskip("matplotlib")
importorskip("sklearn")

PROBLEM = "logreg-digits"


def _tiny() -> Settings:
    """One problem, three rounds, one seed, the mean and two robust aggregators, one attack."""
    comparison = ComparisonSettings(
        rounds={PROBLEM: 3},
        tolerance={PROBLEM: 0.9},
        grid={"sgd": (1.0,), "adam": (0.1,)},
        seeds=(1,),
    )
    return Settings(
        rounds={PROBLEM: 3},
        fractions=(0.0, 0.2),
        attacks=("alie",),
        aggregators=("mean", "krum", "clipped"),
        seeds=(1,),
        comparison=comparison,
    )


@pytest.mark.slow
def test_the_report_and_its_numbers_are_those_of_direct_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(Settings, "quick", classmethod(lambda cls: _tiny()))
    argv = ["reproduce", "robustness", "--quick", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"report: {tmp_path}/report.md" in out and "1 (problem, attack) pairs pass" in out
    for png in (f"robustness-{PROBLEM}.png", "server-optimizers.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"
    report = (tmp_path / "report.md").read_text()
    assert f"## {PROBLEM}" in report and "## Server optimisers" in report
    data = json.loads((tmp_path / "results.json").read_text())
    s = _tiny()
    # (clean, alie 20%) x 3 aggregators, and the oracle under alie
    assert data["quick"] and len(data["runs"]) == 2 * 3 + 1
    assert [r["aggregator"] for r in data["runs"]].count(ORACLE) == 1

    problem = build_problem(PROBLEM, clients=s.n_clients, seed=0)
    step = PROBLEMS[PROBLEM].default_step_size(problem, s.local_steps)
    tau = data["clipping_tau"][PROBLEM]
    for run in data["runs"]:
        f = round(run["fraction"] * s.n_clients)
        if run["aggregator"] == ORACLE:
            attackers = Byzantine(run["fraction"], run["attack"]).clients(s.n_clients, 1)
            aggregator = HonestMean(attackers.tolist(), s.n_clients)
        else:
            aggregator = build_aggregator(run["aggregator"], n_byzantine=f, trim=s.trim, tau=tau)
        h = run_sync(
            problem,
            RFedAvg(step, s.local_steps, upload="tangent"),
            3,
            options=RunOptions(seed=1),
            aggregator=aggregator,
            byzantine=Byzantine(run["fraction"], run["attack"]) if f else None,
        )
        assert run["attackers"] == f == (2 if run["attack"] == "alie" else 0)
        assert run["gap"] == pytest.approx(h.optimality_gap[-1], rel=1e-12), run
        assert run["accuracy"] == pytest.approx(problem.accuracy(h.final_point), rel=1e-12)
        if f:
            assert run["byzantine_clients"] == h.config["byzantine"]["clients"]

    (v,) = data["verdicts"]
    rows = {(r["attack"], r["aggregator"]): r for r in data["rows"]}
    assert v["label"] == f"{PROBLEM}/alie" and v["metric"] == "accuracy"
    assert v["clean"] == rows[("none", "mean")]["accuracy"]
    assert v["best_value"] == max(rows[("alie", a)]["accuracy"] for a in ("krum", "clipped"))
    assert v["best"] != ORACLE and v["oracle"] == rows[("alie", ORACLE)]["accuracy"]
    assert v["oracle_within"] == (v["oracle"] >= v["bound"])
    assert f"oracle {100 * v['oracle']:.1f}%" in out
    assert "| mean | krum | clipped | oracle |" in report

    for row in data["server_optimizers"]:
        name, lr = row["optimizer"], row["lr"]
        rule = ServerOptimized(
            RFedAvg(step, s.local_steps, upload="tangent"), build_server_optimizer(name, lr)
        )
        h = run_sync(problem, rule, 3, options=RunOptions(seed=1))
        gaps = h.optimality_gap
        assert row["runs"][0]["gap"] == pytest.approx(gaps[-1], rel=1e-12)
        reached = next((r for r, g in enumerate(gaps) if g <= 0.9 * gaps[0]), None)
        assert row["runs"][0]["rounds_to_tolerance"] == reached


@pytest.mark.parametrize(("passed", "code"), [(False, 1), (True, 0)])
def test_strict_exits_1_when_a_verdict_fails(tmp_path, capsys, monkeypatch, passed, code):
    found = verdict("p", "alie", 1.0, {"mean": 9.0, "median": 1.5 if passed else 3.0})
    monkeypatch.setattr(robustness, "reproduce", lambda out, **kw: [found])
    argv = ["reproduce", "robustness", "--quick", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0  # without --strict a FAIL is reported, not an error
    assert main([*argv, "--strict"]) == code
    captured = capsys.readouterr()
    assert ("FAIL p/alie" in captured.out) != passed
    if code:
        assert "--strict: claims p/alie FAIL" in captured.err


def test_a_verdict_passes_within_the_bound_and_fails_beyond_it():
    good = verdict("p", "alie", 1.0, {"mean": 10.0, "median": 1.5, "krum": 3.0})
    assert good.passed and good.best == "median" and good.mean_fails and good.bound == 2.0
    assert good.line().startswith("PASS p/alie: best median")
    bad = verdict("p", "ipm", 1.0, {"mean": 1.2, "median": 2.5, "krum": math.inf})
    assert not bad.passed and bad.best == "median" and not bad.mean_fails
    assert bad.line().startswith("FAIL p/ipm") and "does not fail" in bad.line()
    nan = verdict("p", "scale", 1.0, {"median": math.nan, "krum": 1.9})
    assert nan.passed and nan.best == "krum" and nan.mean_fails  # no mean: counted as failed


def test_the_oracle_is_no_robust_aggregator_of_the_verdict():
    both = {"mean": 9.0, "median": 3.0, ORACLE: 1.5}
    v = verdict("p", "alie", 1.0, both)
    assert not v.passed and v.best == "median" and v.oracle == 1.5 and v.oracle_within
    assert v.line().endswith("; oracle 1.5, within the bound")
    beyond = verdict("p", "alie", 1.0, {"mean": 9.0, "median": 1.5, ORACLE: 2.5})
    assert beyond.passed and beyond.oracle_within is False
    assert beyond.line().endswith("; oracle 2.5, beyond the bound")
    alone = verdict("p", "alie", 1.0, {"mean": 9.0, "median": 1.5})
    assert alone.oracle_within is None and "oracle" not in alone.line()
    with pytest.raises(ValueError, match="no robust aggregator"):
        verdict("p", "alie", 1.0, {"mean": 9.0, ORACLE: 1.0})


def test_the_oracle_averages_exactly_the_rows_of_the_honest_clients():
    rng = np.random.default_rng(0)
    uploads = {"u": rng.normal(size=(5, 3, 2)), "v": rng.normal(size=(5, 4))}
    uploads["u"][[1, 3]] = 1e6  # the attackers' rows
    total, count = HonestMean([3, 1], 5).aggregate(uploads, 0)
    assert count == 5 and set(total) == {"u", "v"}
    for key, v in uploads.items():
        honest = v[[0, 2, 4]].mean(axis=0)
        np.testing.assert_allclose(total[key] / count, honest, rtol=1e-14, atol=1e-15)
    with pytest.raises(ParameterError, match="4 uploads in phase 0, expected one per client"):
        HonestMean([1], 5).aggregate({k: v[:4] for k, v in uploads.items()}, 0)
    with pytest.raises(ParameterError, match="must lie in"):
        HonestMean([5], 5)
    with pytest.raises(ParameterError, match="every client attacks"):
        HonestMean([0, 1], 2)


def test_an_accuracy_verdict_reads_points():
    clean = 0.90
    ok = verdict("d", "alie", clean, {"mean": 0.5, "trimmed": 0.871}, metric="accuracy")
    assert ok.passed and ok.mean_fails and ok.bound == pytest.approx(0.87)
    low = verdict("d", "alie", clean, {"mean": 0.5, "trimmed": 0.869}, metric="accuracy")
    assert not low.passed and "accuracy 86.9% (bound 87.0%, clean 90.0%)" in low.line()


def test_verdicts_take_the_clean_mean_and_every_attack_at_the_fraction():
    def row(attack, fraction, aggregator, gap):
        return {"problem": "p", "attack": attack, "fraction": fraction, "aggregator": aggregator,
                "gap": gap}  # fmt: skip

    rows = [
        row("none", 0.0, "mean", 1.0),
        row("none", 0.0, "median", 5.0),
        *(row("sign-flip", 0.2, a, g) for a, g in (("mean", 9.0), ("median", 1.8))),
        *(row("sign-flip", 0.1, a, g) for a, g in (("mean", 9.0), ("median", 9.0))),
        *(row("scale", 0.2, a, g) for a, g in (("mean", 9.0), ("median", 2.2))),
    ]
    found = verdicts(rows, 0.2)
    assert [(v.label, v.passed) for v in found] == [("p/sign-flip", True), ("p/scale", False)]
    assert all(v.clean == 1.0 for v in found)


def test_a_cell_gives_the_spread_and_the_failures_over_several_seeds():
    from riemfl.experiments.robustness.report import cell

    row = {"gap": 2.0, "gap_min": 1.0, "gap_max": math.inf, "seeds": 3, "failed": 1}
    assert cell(row, "gap") == "2.00e+00 [1.00e+00, failed] (1/3 failed)"
    one = {"accuracy": 0.9, "accuracy_min": 0.9, "accuracy_max": 0.9, "seeds": 1, "failed": 0}
    assert cell(one, "accuracy") == "90.0%"


def test_the_bias_table_gives_each_clean_gap_against_the_mean():
    from riemfl.experiments.robustness.floor import bias_table

    def row(problem, aggregator, gap, **extra):
        return {"problem": problem, "attack": "none", "fraction": 0.0, "aggregator": aggregator,
                "gap": gap, **extra}  # fmt: skip

    s = Settings(rounds={"p": 1, "q": 1, "d": 1}, aggregators=("mean", "median", "krum"))
    rows = [
        row("p", "mean", 2.0), row("p", "median", 3.0), row("p", "krum", math.inf),
        row("q", "mean", -1.0), row("q", "median", 1.0), row("q", "krum", 1.0),
        row("d", "mean", 1.0, accuracy=0.9), row("d", "median", 1.5, accuracy=0.88),
        row("d", "krum", 1.0, accuracy=0.9),
    ]  # fmt: skip
    assert bias_table(rows, s)[2:] == [
        "| p | x1.5 | failed |",
        "| q | +2.00e+00 (difference) | +2.00e+00 (difference) |",
        "| d | x1.5; -2.0 pts | x1; +0.0 pts |",
    ]


def test_the_settings_run_the_clean_case_once_and_krum_holds_at_30_percent():
    s = Settings()
    cases = s.cases()
    assert cases[0] == (robustness.CLEAN, 0.0) and sum(f == 0 for _, f in cases) == 1
    assert len(cases) == 1 + len(s.attacks) * 3
    assert ORACLE not in s.runs_at(0.0) and s.runs_at(0.2) == (*s.aggregators, ORACLE)
    assert s.runs() == len(s.rounds) * len(s.seeds) * (
        len(s.aggregators) + len(s.attacks) * 3 * (len(s.aggregators) + 1)
    )
    f = s.attackers(0.3)
    assert f == 3 and s.n_clients >= 2 * f + 3
    assert s.attackers(0.2) == round(0.2 * s.n_clients) == 2

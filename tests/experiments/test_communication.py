"""``riemfl reproduce communication``: the report, its JSON against direct runs, the verdicts and
the rounds to the tolerance."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from riemfl.cli import main
from riemfl.experiments import communication
from riemfl.experiments.communication import Settings, rounds_to_tolerance, verdict
from riemfl.experiments.registry import PROBLEMS, build_problem
from riemfl.federated import History, RFedAvg, RFedProj, RunOptions, run_sync
from riemfl.federated.compressed import Compressed
from riemfl.federated.compression import make_compressor
from riemfl.testing import importorskip

importorskip("matplotlib")

PROBLEM = "kpca-synthetic"
TOLERANCE = 0.5


def _tiny() -> Settings:
    """One problem, 30 float64 rounds to a loose tolerance, three compressors, one seed."""
    return Settings(
        tolerance={PROBLEM: TOLERANCE},
        rounds={PROBLEM: 30},
        compressors=("none", "qsgd:4", "topk:0.1"),
        seeds=(1,),
    )


def _direct(rule: str, compressor: str, rounds: int) -> History:
    problem = build_problem(PROBLEM, seed=0)
    step = PROBLEMS[PROBLEM].default_step_size(problem, 10)
    base = RFedProj(step, 10) if rule == "RFedProj" else RFedAvg(step, 10, upload="tangent")
    spec = make_compressor(compressor)
    algorithm = base if spec is None else Compressed(base, spec, seed=1)
    return run_sync(problem, algorithm, rounds, options=RunOptions(seed=1))


def _first(h: History) -> tuple[int | None, float | None]:
    gaps = np.asarray(h.optimality_gap) / h.optimality_gap[0]
    hits = np.flatnonzero(gaps <= TOLERANCE)
    return (None, None) if not hits.size else (int(hits[0]), float(h.uplink_bytes[hits[0]]))


def test_the_report_and_its_numbers_are_those_of_direct_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(Settings, "quick", classmethod(lambda cls: _tiny()))
    argv = ["reproduce", "communication", "--quick", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"report: {tmp_path}/report.md" in out and "(problem, rule) pairs pass" in out
    assert (tmp_path / "communication.png").read_bytes()[:4] == b"\x89PNG"
    report = (tmp_path / "report.md").read_text()
    assert f"## {PROBLEM}" in report and "### RFedProj" in report and "| qsgd:4 | off |" in report
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["quick"] and len(data["runs"]) == 2 * 3
    assert all("curve" not in r for r in data["runs"])

    for run in data["runs"]:
        h = _direct(run["rule"], run["compressor"], run["rounds_run"])
        assert (run["round"], run["bytes"]) == _first(h), run
        assert run["final_gap"] == pytest.approx(h.optimality_gap[-1] / h.optimality_gap[0])
        if run["compressor"] == "none":
            assert run["rounds_run"] == 30 and run["round"] is not None
        else:  # three times the rounds the float64 run of the rule needed
            ref = next(
                r for r in data["runs"] if r["rule"] == run["rule"] and r["compressor"] == "none"
            )
            assert run["rounds_run"] == 3 * ref["round"]
    rows = {(r["rule"], r["compressor"]): r for r in data["rows"]}
    for v in data["verdicts"]:
        ref = rows[(v["rule"], "none")]
        assert v["reference_bytes"] == ref["bytes"]["median"] == 800 * ref["rounds"]["median"]
        if v["best"] is not None:
            best = rows[(v["rule"], v["best"])]
            assert v["ratio"] == pytest.approx(ref["bytes"]["median"] / best["bytes"]["median"])
            assert v["passed"] == (v["ratio"] >= 4)
        assert (("PASS " if v["passed"] else "FAIL ") + v["label"]) in out


def _row(compressor: str, rounds: list[float], per_round: float) -> dict:
    """A summary row over the seeds of ``rounds`` (inf: not reached)."""
    sent = [r * per_round for r in rounds]
    return {
        "compressor": compressor,
        "seeds": len(rounds),
        "reached": sum(math.isfinite(r) for r in rounds),
        "rounds": {"median": float(np.median(rounds))},
        "bytes": {"median": float(np.median(sent))},
    }


def test_a_verdict_passes_with_enough_fewer_bytes_and_fails_otherwise():
    ref = _row("none", [100, 100, 100], 800)
    good = verdict(
        "p", "r", [ref, _row("fp16", [100] * 3, 200), _row("qsgd:4", [110] * 3, 71)], tolerance=1e-2
    )
    assert good.passed and good.best == "qsgd:4" and good.rounds == 110
    assert good.ratio == pytest.approx(80_000 / 7_810)
    assert good.line().startswith("PASS p/r") and "+10 rounds" in good.line()
    short = verdict("p", "r", [ref, _row("topk:0.1", [300] * 3, 90)], tolerance=1e-2)
    assert not short.passed and short.best == "topk:0.1" and short.ratio < 4
    assert short.line().startswith("FAIL p/r")
    # a compressor that misses the tolerance in one seed does not count, however few its bytes
    flaky = verdict("p", "r", [ref, _row("qsgd:2", [90, 90, math.inf], 46)], tolerance=1e-2)
    assert not flaky.passed and flaky.best is None and "no compressor" in flaky.line()
    lost = _row("none", [math.inf] * 3, 800)
    nothing = verdict("p", "r", [lost, _row("fp16", [50] * 3, 200)], tolerance=1e-2)
    assert not nothing.passed and "no reference" in nothing.line()
    with pytest.raises(ValueError, match="float64"):
        verdict("p", "r", [_row("fp16", [50], 200)], tolerance=1e-2)


def test_rounds_to_tolerance_is_the_first_round_at_it_with_its_bytes():
    h = History()
    for r, gap in enumerate([4.0, 3.0, 1.0, 0.4, 0.3]):
        h.append(round=r, optimality_gap=gap, uplink_bytes=71.0 * r)
    assert rounds_to_tolerance(h, 0.25) == (2, 142.0)
    assert rounds_to_tolerance(h, 0.1) == (3, 213.0)
    assert rounds_to_tolerance(h, 0.05) == (None, None)
    flat = History()
    flat.append(round=0, optimality_gap=0.0, uplink_bytes=0.0)
    with pytest.raises(ValueError, match="initial gap"):
        rounds_to_tolerance(flat, 0.1)


@pytest.mark.parametrize(("passed", "code"), [(False, 1), (True, 0)])
def test_strict_exits_1_when_a_verdict_fails(tmp_path, capsys, monkeypatch, passed, code):
    rows = [_row("none", [100], 800), _row("qsgd:4", [100], 71 if passed else 400)]
    found = verdict("p", "r", rows, tolerance=1e-2)
    monkeypatch.setattr(communication, "reproduce", lambda out, **kw: [found])
    argv = ["reproduce", "communication", "--quick", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0  # without --strict a FAIL is reported, not an error
    assert main([*argv, "--strict"]) == code
    captured = capsys.readouterr()
    assert ("FAIL p/r" in captured.out) != passed
    if code:
        assert "--strict: claims p/r FAIL" in captured.err

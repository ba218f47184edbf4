"""The gap study: schedule choice, candidate configurations, cells, verdicts and a tiny run."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from riemfl.testing import importorskip

importorskip("torch")
importorskip("sklearn")
importorskip("matplotlib")

from riemfl.errors import ParameterError  # noqa: E402
from riemfl.experiments.floral.gap_candidates import (  # noqa: E402
    MNIST_FIRST_LAYER_RANK,
    GapStudySettings,
    RunConfig,
    candidate_configs,
    select_schedules,
)
from riemfl.experiments.floral.gap_candidates_report import (  # noqa: E402
    CHANGED,
    claims,
    gap_cells,
    overall_verdict,
)
from riemfl.experiments.floral.gap_study import reproduce_gap_candidates  # noqa: E402
from riemfl.experiments.floral.settings import GAP_METHODS, Settings  # noqa: E402
from riemfl.nn.floral import lora_rank  # noqa: E402

ST = GapStudySettings(
    table=replace(Settings(), reduced_rounds=10), columns=("Reduced 5% R",), seeds=(0, 1, 2)
)


def test_mnist_rank_is_the_budget_rank_of_mnists_first_layer():
    assert MNIST_FIRST_LAYER_RANK == lora_rank(0.1, 784, 200)
    assert lora_rank(0.1, 64, 200) < MNIST_FIRST_LAYER_RANK  # digits' first layer
    assert lora_rank(0.01, 784, 200) == lora_rank(0.01, 64, 200) == 1  # rho = 1%: same rank


def test_candidate_configs_change_one_thing():
    base = ST.baseline
    assert base == RunConfig(Settings().lr, 10)
    assert candidate_configs("capacity", "FLoRAL(10%) (pi*)", ST).rank == MNIST_FIRST_LAYER_RANK
    assert candidate_configs("capacity", "FLoRAL(1%) (pi*)", ST) == base
    assert candidate_configs("capacity", "Ensemble (pi*)", ST) == base
    assert candidate_configs("rows", "Ensemble (pi*)", ST) == replace(base, keep=ST.keep)
    chosen = RunConfig(0.2, 20)
    assert candidate_configs("schedule", "Ensemble (pi*)", ST, chosen) == chosen
    with pytest.raises(ParameterError, match="schedule"):
        candidate_configs("schedule", "Ensemble (pi*)", ST)
    assert RunConfig(0.1, 600).key == "lr0.1-r600-keep5"
    assert RunConfig(0.1, 600, 0.25, 15).key == "lr0.1-r600-keep25-rank15"


def test_select_schedules_best_then_the_default_on_ties():
    col, m = "Reduced 5% R", "Ensemble (pi*)"
    scores = dict.fromkeys(ST.schedules, 50.0)
    tuning = {(col, m, cfg): v for cfg, v in scores.items()}
    assert select_schedules(tuning, ST)[col, m] == ST.baseline  # a tie keeps Table 1's
    best = RunConfig(0.2, 20)
    tuning[col, m, best] = 60.0
    assert select_schedules(tuning, ST)[col, m] == best


def _accuracies(gap_by_candidate):
    acc = {}
    for cand in CHANGED:
        for sd in ST.seeds:
            acc[cand, "Reduced 5% R", GAP_METHODS[0], sd] = 80.0
            for label in GAP_METHODS[1:]:
                gap = gap_by_candidate[cand] + 0.1 * sd  # a small seed-to-seed spread
                acc[cand, "Reduced 5% R", label, sd] = 80.0 + gap
    return acc


def test_cells_verdicts_and_the_overall_verdict():
    acc = _accuracies({"baseline": -8.0, "capacity": -7.0, "schedule": -6.0, "rows": 0.0})
    cells = gap_cells(acc, ST)
    assert len(cells) == 2 + 1 + 2 + 2  # the capacity candidate changes FLoRAL(10%) only
    rows = [c for c in cells if c["candidate"] == "rows"]
    assert all(c["verdict"].startswith("agrees") for c in rows)
    assert rows[0]["moved"]["mean"] == pytest.approx(8.0)  # paired by seed
    assert all(c["verdict"].startswith("does NOT") for c in cells if c["candidate"] == "schedule")
    text = overall_verdict(cells)
    assert text.startswith("The gap closes under rows") and "+8.0 points (rows" in text
    by = {c.label: c.passed for c in claims(cells)}
    assert by["within-1/rows/Reduced 5% R/FLoRAL(1%) (pi*)"] is True
    assert by["within-1/capacity/Reduced 5% R/FLoRAL(10%) (pi*)"] is False
    stands = gap_cells(_accuracies(dict.fromkeys(CHANGED, -8.0)), ST)
    assert overall_verdict(stands).startswith("The gap stands")


@pytest.mark.slow
def test_tiny_study_writes_its_files_reads_r_off_the_2r_run_and_resumes(tmp_path):
    table = replace(
        Settings(), n_clients=8, clients_per_round=4, hidden=16, reduced_rounds=4, record_every=2
    )
    st = GapStudySettings(
        table=table,
        columns=("Reduced 5% R",),
        seeds=(0, 1),
        tuning_seeds=(0,),  # the evaluation seed 0: its R run and its 2R run must agree
        learning_rates=(0.1, 0.2),
    )
    found = reproduce_gap_candidates(tmp_path, settings=st, progress=False)
    assert len(found) == len(gap_cells(_accuracies(dict.fromkeys(CHANGED, 0.0)), st))
    text = (tmp_path / "gap_candidates.md").read_text()
    assert "## Verdict" in text and "MNIST's adaptor capacity" in text
    assert "Cost of the capacity candidate: FLoRAL(10%) adds" in text
    assert (tmp_path / "gap_candidates.png").read_bytes()[:4] == b"\x89PNG"
    data = json.loads((tmp_path / "gap_candidates.json").read_text())
    runs = data["runs"]
    long = [r for r in runs if r["seed"] == 0 and r["config"]["rounds"] == 8]
    assert {r["config"]["lr"] for r in long} == {0.1, 0.2}
    for r in (r for r in long if r["config"]["lr"] == table.lr):  # the baseline ran R rounds
        short = next(
            s
            for s in runs
            if s["seed"] == 0
            and s["method"] == r["method"]
            and s["config"] == {**r["config"], "rounds": 4}
        )
        at_r = r["curve"]["accuracy"][r["curve"]["step"].index(4)]
        assert at_r == short["final"]["accuracy"]  # same seed: the first R rounds coincide
    wide = [r for r in runs if r["config"]["rank"] == MNIST_FIRST_LAYER_RANK]
    base = [
        r
        for r in runs
        if r["method"] == "FLoRAL(10%) (pi*)" and r["config"] == wide[0]["config"] | {"rank": None}
    ]
    assert wide and base
    assert wide[0]["parameters"]["extra"] > base[0]["parameters"]["extra"]
    assert not any(r["resumed"] for r in runs)
    again = reproduce_gap_candidates(tmp_path, settings=st, progress=False)
    assert [c.line() for c in again] == [c.line() for c in found]
    assert all(
        r["resumed"] for r in json.loads((tmp_path / "gap_candidates.json").read_text())["runs"]
    )

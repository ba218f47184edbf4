"""The FLoRAL ablations (Almansoori et al. 2024, App. G.3, Tables 2, 4 and 5): the paper's
numbers, the rank correlation, the claims' verdicts, and the quick forms' files."""

from __future__ import annotations

import json
import math

import pytest

from riemfl.testing import importorskip

importorskip("torch")
importorskip("scipy")

from riemfl.errors import ParameterError, ShapeError  # noqa: E402
from riemfl.experiments.floral import ablation_settings as ab  # noqa: E402
from riemfl.experiments.floral.ablation_analysis import (  # noqa: E402
    check_orderings,
    rank_correlation,
)
from riemfl.experiments.floral.ablations import reproduce_table  # noqa: E402
from riemfl.experiments.floral.curve_figures import ABLATION_FIGURES  # noqa: E402

#: Almansoori et al. 2024, App. G.3 (CIFAR-10 R, CIFAR-10 LS, CIFAR-100), typed from the paper
PAPER = {
    2: {
        "x0.5, 1%": (66.5, 36.3, 48.8),
        "x0.5, 10%": (66.8, 41.6, 50.9),
        "x1, 1%": (70.2, 74.1, 51.7),
        "x1, 10%": (71.5, 74.2, 57.4),
        "x2, 1%": (69.0, 73.8, 51.3),
        "x2, 10%": (70.8, 74.1, 54.8),
    },
    4: {
        "Balanced 2D": (70.2, 74.1, 51.7),
        "In Layer": (67.6, 73.5, 49.1),
        "Out Layer": (68.5, 74.0, 51.9),
        "None": (67.6, 73.9, 50.8),
        "Filter-wise": None,
        "Reshaped linear": None,
    },
    5: {
        "ConvLoRA, no bias": (69.8, 72.7, 45.1),
        "ConvLoRA + bias": (67.6, 73.4, 45.8),
        "LoRA, no bias": (68.7, 73.7, 46.6),
        "LoRA + bias": (67.6, 73.9, 50.8),
        "Both, no bias": (68.9, 73.3, 47.9),
        "Both + bias": (70.2, 74.1, 51.7),
        "None, no bias": (64.6, 21.9, 12.1),
        "None + bias": (64.6, 21.9, 12.1),
    },
}


def test_paper_numbers_are_the_papers():
    assert ab.PAPER_ABLATION_COLUMNS == ("CIFAR-10 R", "CIFAR-10 LS", "CIFAR-100")
    for n, rows in PAPER.items():
        table = ab.TABLES[n]
        assert {r.label: r.paper for r in table.rows} == rows
        assert table.source == f"Almansoori et al. 2024, App. G.3, Table {n}"


def test_rows_describe_their_configuration():
    t2, t4, t5 = ab.TABLES[2], ab.TABLES[4], ab.TABLES[5]
    assert [t2.row(f"x{c}, 1%").n_clusters(4) for c in ("0.5", "1", "2")] == [2, 4, 8]
    assert {t2.row(f"x1, {p}%").rho for p in (1, 10)} == {0.01, 0.1}
    variants = [t4.row(label).conv_variant for label in ("In Layer", "Out Layer", "Filter-wise")]
    assert variants == ["in_layer", "out_layer", "filter_wise"]
    assert t4.row("None").layer_types == ("linear",)
    assert t5.row("ConvLoRA, no bias").layer_types == ("conv2d",)
    assert not t5.row("ConvLoRA, no bias").bias and t5.row("ConvLoRA + bias").bias
    assert t5.row("None + bias").method.kind == "fedavg"
    # the default row, Table 4's None and Table 5's None rows: one configuration each
    default = {t2.row("x1, 1%").key, t4.row("Balanced 2D").key, t5.row("Both + bias").key}
    assert len(default) == 1
    assert t4.row("None").key == t5.row("LoRA + bias").key
    assert t5.row("None, no bias").key == t5.row("None + bias").key == "fedavg"
    assert len({r.key for r in t5.rows}) == 7


def test_rank_correlation_on_hand_examples():
    # ranks (1, 2, 3, 4) against (1, 3, 2, 4): sum d^2 = 2, 1 - 6 * 2 / (4 * 15) = 0.8
    assert rank_correlation([1.0, 2.0, 3.0, 4.0], [10.0, 30.0, 20.0, 40.0]) == pytest.approx(0.8)
    # ties take average ranks: (3, 1.5, 1.5) against (1, 2, 3), Pearson of the ranks
    # = (-1 - 0.5) / sqrt(1.5 * 2) = -sqrt(3) / 2
    assert rank_correlation([3.0, 1.0, 1.0], [1.0, 2.0, 3.0]) == pytest.approx(-math.sqrt(3) / 2)
    assert rank_correlation([1.0, 1.0, 2.0, 3.0], [5.0, 5.0, 6.0, 7.0]) == pytest.approx(1.0)
    assert math.isnan(rank_correlation([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]))
    with pytest.raises(ShapeError):
        rank_correlation([1.0, 2.0], [1.0, 2.0, 3.0])


def test_orderings_verdicts_and_what_would_change_them():
    table = ab.TABLES[4]
    s = ab.ablation_settings(quick=True)
    s.seeds = (0, 1)
    accs = {
        ("Balanced 2D", "Full R"): [90.0, 92.0],
        ("In Layer", "Full R"): [89.0, 90.0],
        ("Out Layer", "Full R"): [92.0, 93.0],  # beats Balanced 2D by 1.5 points
        ("None", "Full R"): [80.0, 81.0],
        ("Balanced 2D", "Full LS"): [90.0, 90.0],
        ("In Layer", "Full LS"): [80.0, 80.0],
        ("Out Layer", "Full LS"): [85.0, 85.0],
        ("None", "Full LS"): [70.0, 70.0],
    }
    for label in ("Filter-wise", "Reshaped linear"):
        for col in ("Full R", "Full LS"):
            accs[label, col] = [0.0, 0.0]
    checks = {c["column"]: c for c in check_orderings(accs, table, s)}
    assert checks["Full LS"]["agrees"] and checks["Full LS"]["change"] == ""
    r = checks["Full R"]
    assert not r["agrees"] and r["failing"] == 1 and r["pairs"] == 3
    assert (r["worst"]["above"], r["worst"]["below"]) == ("Balanced 2D", "Out Layer")
    assert r["worst"]["gap"] == pytest.approx(-1.5)
    assert "gain more than 1.5 points on Out Layer" in r["change"]
    assert "paired gap over 2 seeds" in r["change"]
    # the paper's own numbers: Out Layer beats Balanced 2D on CIFAR-100 (51.9 against 51.7)
    assert r["paper_holds"] == [True, True, False]


def test_a_tie_is_out_of_order():
    table = ab.TABLES[2]
    s = ab.ablation_settings(quick=True)  # one seed
    accs = {(r.label, c): [50.0] for r in table.rows for c in ("Full R", "Full LS")}
    accs["x1, 1%", "Full R"] = [60.0]
    checks = check_orderings(accs, table, s)
    fixes = [c for c in checks if c["claim"] == "a larger rho fixes this"]
    assert [c["agrees"] for c in fixes] == [False, False]
    assert fixes[0]["change"].startswith("x2, 10% ties x2, 1%: any gain on it")
    assert "one seed" in fixes[0]["change"]
    first = [c for c in checks if c["claim"].startswith("choosing C")]
    assert first[0]["failing"] == 2 and first[1]["failing"] == 4


def test_bad_tables_and_columns_are_refused(tmp_path):
    with pytest.raises(ParameterError, match="table must be one of"):
        reproduce_table(3, tmp_path, quick=True)
    s = ab.ablation_settings(quick=True)
    s.columns = ("Reduced 5% R",)
    with pytest.raises(ParameterError, match="columns"):
        reproduce_table(2, tmp_path, quick=True, settings=s)
    s.columns = ("C10 Full R",)  # a CIFAR column without the files
    with pytest.raises(ParameterError, match="need the CIFAR files"):
        reproduce_table(2, tmp_path, quick=True, settings=s)


@pytest.mark.slow
def test_a_table_on_cifar_files_runs_the_papers_columns_and_networks(tmp_path):
    from dataclasses import replace

    from riemfl.experiments.floral.cifar import CIFAR_FOLDERS, write_generated_cifar

    root = tmp_path / "cifar"
    write_generated_cifar(
        root / CIFAR_FOLDERS["cifar10"], "cifar10", train_per_class=4, test_per_class=2
    )
    write_generated_cifar(
        root / CIFAR_FOLDERS["cifar100"], "cifar100", train_per_class=1, test_per_class=1
    )
    s = ab.cifar_ablation_settings(str(root), ("cifar10", "cifar100"), quick=True)
    assert s.columns == ("C10 Full R", "C10 Full LS", "C100 Full")
    tiny = replace(
        s,
        rounds=1,
        record_every=1,
        cifar=replace(s.cifar, rounds=1, clients={"cifar10": 4, "cifar100": 10}, batch_size=16),
    )
    text = reproduce_table(4, tmp_path / "out", quick=True, settings=tiny)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0].startswith(
        "| Row | C10 Full R: ours | CIFAR-10 R: paper | C10 Full LS: ours | CIFAR-10 LS: paper "
        "| C100 Full: ours | CIFAR-100: paper"
    )
    assert "Cifar10CNN (CIFAR-10) and VGG-8 (CIFAR-100)" in text
    assert "What the stand-in can and cannot show" not in text
    runs = json.loads((tmp_path / "out" / "table4.json").read_text())["runs"]
    assert {r["column"] for r in runs} == {"C10 Full R", "C10 Full LS", "C100 Full"}
    files = sorted(p.name for p in (tmp_path / "out" / "runs").iterdir())
    assert any(f.startswith("ablation-cifar100-disjoint_labels-") for f in files)
    # the CIFAR-100 runs: VGG-8's 100 outputs, Adam on the server, crops and flips
    c100 = next(f for f in files if f.startswith("ablation-cifar100-"))
    config = json.loads((tmp_path / "out" / "runs" / c100).read_text())["config"]
    assert config["aggregator"]["server_optimizer"]["kind"] == "adam"
    assert config["trainer"]["augment"].startswith("CropFlip")


@pytest.mark.slow
def test_quick_forms_write_their_files_with_ours_beside_the_papers(tmp_path):
    # one test (one xdist worker) and one folder: the tables' common rows run once
    for n in (2, 4, 5):
        text = reproduce_table(n, tmp_path, quick=True)
        assert (tmp_path / f"table{n}.md").read_text() == text
        assert (tmp_path / f"table{n}.png").read_bytes()[:4] == b"\x89PNG"
        number, name = ABLATION_FIGURES[n]  # Fig. 9 (Table 2), 10 (Table 4), 8 (Table 5)
        assert (tmp_path / f"fig{number}_{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert f"Fig. {number} counterpart" in text
        data = json.loads((tmp_path / f"table{n}.json").read_text())
        assert data["table"] == n and data["quick"] is True
        rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
        assert rows[0].startswith("| Row | Full R: ours | CIFAR-10 R: paper | Full LS: ours")
        assert [r.split("|")[1].strip() for r in rows[1:]] == list(PAPER[n])
        for row in rows[1:]:
            label = row.split("|")[1].strip()
            cells = [c.strip() for c in row.split("|")[2:7]]
            ours = data["ours"][label]
            assert cells[0] == f"{ours['Full R']['mean']:.1f}"  # one seed: the mean alone
            assert cells[2] == f"{ours['Full LS']['mean']:.1f}"
            paper = PAPER[n][label]
            want = ["-"] * 3 if paper is None else [f"{v:.1f}" for v in paper]
            assert [cells[1], cells[3], cells[4]] == want
            assert 0.0 <= ours["Full R"]["mean"] <= 100.0
        assert data["paper"]["rows"] == {
            k: None if v is None else list(v) for k, v in PAPER[n].items()
        }
        assert "Rank correlation" in text and "What the stand-in can and cannot show" in text
        assert len(data["rank_correlation"]) == 2
        assert all(
            c["rows"] == sum(v is not None for v in PAPER[n].values())
            for c in data["rank_correlation"]
        )
        runs = data["runs"]
        assert len(runs) == 2 * len(PAPER[n])  # one seed, two columns
    # Table 5's shared rows resumed from Tables 2 and 4's runs
    t5 = json.loads((tmp_path / "table5.json").read_text())["runs"]
    resumed = {r["row"] for r in t5 if r["resumed"]}
    assert resumed == {"Both + bias", "LoRA + bias"}
    none = [r for r in t5 if r["row"].startswith("None")]
    assert len({(r["column"], r["final"]["accuracy"]) for r in none}) == 2  # one run per column

"""``riemfl reproduce floral``: the table, report, JSON and plots on tiny settings; resume."""

from __future__ import annotations

import json
import math

import pytest

from riemfl.testing import importorskip

importorskip("torch")
importorskip("sklearn")
importorskip("matplotlib")

# seconds per test (simulations, reproductions, benchmark runs): part of the full run only
pytestmark = pytest.mark.slow

from riemfl.cli import build_parser  # noqa: E402
from riemfl.experiments import floral  # noqa: E402

TINY = floral.Settings(
    rounds=3,
    reduced_rounds=3,
    seeds=(0,),
    n_clients=8,
    clients_per_round=4,
    hidden=16,
    record_every=1,
    columns=("Full R", "Full LS", "Reduced 5% LS", "Reduced 14% LS"),
    gap_seeds=(0, 1),  # the gap's rows of the reduced columns also on seed 1
    synthetic_rounds={"linear": 2, "mlp": 2},
    async_steps=2,
)


def test_tiny_reproduction_writes_table_report_and_json(tmp_path):
    table = floral.reproduce(tmp_path, settings=TINY, progress=False)
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert [r.split("|")[1].strip() for r in rows[1:]] == [m.label for m in floral.METHODS]
    # the paper's MNIST numbers sit beside ours
    assert "| 91.5 +/- 0.6 |" in rows[1] and "| 25.8 +/- 2.4 |" in rows[1]
    assert "Reduced 5% LS: ours" in rows[0] and rows[1].endswith("| 23.2 +/- 0.9 |")
    report = (tmp_path / "report.md").read_text()
    assert table in report and "Where the ordering agrees" in report
    assert "rank correlation" in report and "Gauge check" in report
    assert "FLoRAL against the ensemble with reduced data" in report and "Protocol" in report
    figures = ("fig3_mnist_r_loss.png", "fig4_mnist_ls_loss.png")  # Figs. 3-4 (no CIFAR: 5-7)
    for png in ("table1_curves.png", "synthetic_loss.png", "aggregation.png", "reduced_gap.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"
    for png in figures:
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG" and f"({png})" in report
    assert not list(tmp_path.glob("fig[567]_*.png")) and "Figs. 3-7" in report
    data = json.loads((tmp_path / "results.json").read_text())
    gap_runs = 2 * len(floral.GAP_METHODS)  # seed 1 of the reduced columns
    assert len(data["digits"]) == len(floral.METHODS) * len(TINY.columns) + gap_runs
    acc = {
        (r["column"], r["method"], r["seed"]): 100 * r["final"]["accuracy"] for r in data["digits"]
    }
    assert len(data["reduced_gaps"]) == 2 * 2  # two columns, two FLoRAL rows
    for g in data["reduced_gaps"]:  # paired per seed: FLoRAL minus the ensemble, same seed
        assert g["column"] in ("Reduced 5% LS", "Reduced 14% LS") and g["n"] == 2
        want = [
            acc[g["column"], g["method"], sd] - acc[g["column"], "Ensemble (pi*)", sd]
            for sd in (0, 1)
        ]
        assert g["gaps"] == pytest.approx(want)
        assert g["lo"] <= g["mean"] <= g["hi"]
    shift = {g["method"]: g["mean"] for g in data["reduced_gaps"] if "5%" in g["column"]}
    for g in (g for g in data["reduced_gaps"] if "14%" in g["column"]):
        assert f"5% minus 14%: {shift[g['method']] - g['mean']:+.1f}" in report
    held = [h for h in data["holdings"] if h["column"] == "Reduced 5% LS"]
    assert [h["seed"] for h in held] == [0, 1]
    for h in held:  # 5% of each client's rows, no 10-row minimum; every client tested
        per_client = h["available_rows"] / TINY.n_clients
        assert max(h["train_rows"]) == round(0.05 * math.ceil(per_client))
        assert min(h["train_rows"]) >= 1 and min(h["test_rows"]) > 0
    assert {r["method"] for r in data["synthetic"]} == {m.label for m in floral.SYNTHETIC_METHODS}
    for r in data["digits"]:
        assert 0.0 <= r["final"]["accuracy"] <= 1.0 and r["curve"]["step"] == [0, 1, 2, 3]
    ens = next(r for r in data["digits"] if r["method"] == "Ensemble (pi*)")
    assert ens["parameters"]["extra_fraction"] == pytest.approx(3.0)  # (C - 1) d
    agg = data["aggregation"]
    assert {r["adaptors"] for r in agg["sync"]} == {"factors", "products"}
    assert {r["adaptors"] for r in agg["async"]} == {"factors", "products"}
    assert agg["gauge"]["products"] < 1e-9 < agg["gauge"]["factors"]
    # a second call resumes from the checkpoints of the finished runs: same table
    assert not any(r["resumed"] for r in data["digits"])
    assert floral.reproduce(tmp_path, settings=TINY, progress=False) == table
    again = json.loads((tmp_path / "results.json").read_text())
    assert all(r["resumed"] for r in again["digits"])
    assert "Table 1 runs resumed from checkpoints" in (tmp_path / "report.md").read_text()


def test_mnist_settings_drop_the_ten_row_columns():
    # on MNIST 5% of a client's 200 rows is the 10-row minimum: the 14% columns would repeat
    cols = floral.Settings().for_mnist("mnist.npz", quick=True).columns
    assert "Reduced 5% R" in cols and not any("14%" in c for c in cols)


def test_cli_offers_the_reproduction():
    args = build_parser().parse_args(["reproduce", "floral", "--quick"])
    assert args.paper == "floral" and args.quick

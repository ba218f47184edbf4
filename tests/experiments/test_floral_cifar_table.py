"""Table 1's CIFAR columns in ``riemfl reproduce floral``: a tiny run on generated CIFAR-10 and
CIFAR-100 files given as ``data=`` writes the CIFAR table (ours beside the paper's) and its JSON;
without CIFAR data nothing CIFAR runs; the stand-in runs only when asked."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from riemfl.testing import importorskip

importorskip("torch")
importorskip("sklearn")
importorskip("matplotlib")

from riemfl.experiments import floral  # noqa: E402
from riemfl.experiments.floral.cifar import (  # noqa: E402
    CIFAR_FOLDERS,
    cifar_kinds,
    write_generated_cifar,
)
from riemfl.experiments.floral.run import cifar_columns, total_rounds  # noqa: E402
from riemfl.experiments.floral.settings import (  # noqa: E402
    CIFAR_COLUMNS,
    METHODS,
    PAPER_CIFAR,
    CifarSettings,
    Settings,
)

#: one cheap digits column (the aggregation comparison needs Full LS) and tiny CIFAR runs
TINY_CIFAR = CifarSettings(
    columns=("C10 Full R", "C100 Reduced"),
    seeds=(0,),
    rounds=1,
    clients={"cifar10": 4, "cifar100": 10},
    batch_size=16,
    record_every=1,
)
TINY = Settings(
    rounds=1,
    reduced_rounds=1,
    seeds=(0,),
    n_clients=4,
    clients_per_round=2,
    hidden=8,
    record_every=1,
    columns=("Full LS",),
    synthetic_rounds={"linear": 1, "mlp": 1},
    async_steps=1,
    cifar=TINY_CIFAR,
)


def _cifar_dir(root):
    write_generated_cifar(
        root / CIFAR_FOLDERS["cifar10"], "cifar10", train_per_class=4, test_per_class=2
    )
    write_generated_cifar(
        root / CIFAR_FOLDERS["cifar100"], "cifar100", train_per_class=1, test_per_class=1
    )
    return root


def _table_rows(text: str, heading: str) -> list[list[str]]:
    part = text.split(heading, 1)[1].split("\n###", 1)[0]
    rows = [line for line in part.splitlines() if line.startswith("| ") and "---" not in line]
    return [[cell.strip() for cell in r.strip("|").split("|")] for r in rows]


@pytest.mark.slow
def test_cifar_data_dir_runs_and_reports_the_cifar_columns(tmp_path):
    data = _cifar_dir(tmp_path / "cifar")
    assert cifar_kinds(data) == ("cifar10", "cifar100")
    out = tmp_path / "out"
    floral.reproduce(out, data=str(data), quick=True, settings=TINY, progress=False)

    text = (out / "report.md").read_text()
    rows = _table_rows(text, "## Table 1, CIFAR columns")
    assert rows[0] == [
        "Method",
        "C10 Full R: ours",
        "C10 Full R: paper",
        "C100 Reduced: ours",
        "C100 Reduced: paper",
    ]
    assert [r[0] for r in rows[1:]] == [m.label for m in METHODS]
    for r, m in zip(rows[1:], METHODS, strict=True):
        assert r[2] == "{:.1f} +/- {:.1f}".format(*PAPER_CIFAR[m.label][0])
        assert r[4] == "{:.1f} +/- {:.1f}".format(*PAPER_CIFAR[m.label][5])
        assert 0.0 <= float(r[1]) <= 100.0 and 0.0 <= float(r[3]) <= 100.0
    assert "**C10 Full R**: rank correlation of the 8 rows" in text
    assert "**C100 Reduced**: rank correlation of the 8 rows" in text
    assert "not CIFAR numbers" not in text  # real-format files given by the user

    summary = json.loads((out / "results.json").read_text())
    assert "cifar" not in summary["settings"]
    runs = summary["cifar"]["runs"]
    assert len(runs) == 2 * len(METHODS)
    assert {(r["kind"], r["column"], r["n_clients"]) for r in runs} == {
        ("cifar10", "C10 Full R", 4),
        ("cifar100", "C100 Reduced", 10),
    }
    # C100 Reduced keeps max(10, 5%) rows per client: all 10 rows of each client's share
    assert {r["train_rows"] for r in runs if r["kind"] == "cifar100"} == {100}
    assert summary["cifar"]["settings"]["data"] == str(data)
    assert (out / "runs" / "cifar10-data-rotation-full-fedavg-s0.json").is_file()
    # the authors' code's CIFAR settings: crops and flips, Adam on CIFAR-100's server
    for kind, transform, regime, server, lr in (
        ("cifar10", "rotation", "full", "sgd", TINY_CIFAR.lr),
        ("cifar100", "disjoint_labels", "reduced", "adam", TINY_CIFAR.cifar100_lr),
    ):
        config = json.loads(
            (out / "runs" / f"{kind}-data-{transform}-{regime}-fedavg-s0.json").read_text()
        )["config"]
        assert config["aggregator"]["server_optimizer"]["kind"] == server
        assert config["trainer"]["lr"] == lr
        assert config["trainer"]["augment"].startswith("CropFlip(padding=4")
    assert "random crops (padding 4) and flips" in text and "Adam on the pseudo-gradient" in text
    for png in ("fig5_cifar_10_r_loss.png", "fig7_cifar_100_loss.png"):  # Figs. 5 and 7
        assert (out / png).read_bytes()[:4] == b"\x89PNG" and f"({png})" in text


def test_default_settings_run_no_cifar_column():
    for s in (Settings(), Settings.quick()):
        assert s.cifar.data is None and not s.cifar.standin
        assert cifar_columns(s) == []
        assert s.columns == tuple(c.label for c in floral.COLUMNS if c.label in s.columns)
        assert not any(c.startswith("C10") for c in s.columns)
    assert Settings.quick().columns == ("Full R", "Full LS", "Reduced 5% R", "Reduced 5% LS")


def test_cifar_dir_is_told_apart_from_mnist(tmp_path):
    data = _cifar_dir(tmp_path)
    s = Settings.quick()
    assert cifar_kinds(tmp_path / "missing") == ()
    only10 = s.for_cifar(str(data), ("cifar10",))
    assert only10.cifar.columns == tuple(c.label for c in CIFAR_COLUMNS[:4])
    assert only10.columns == s.columns and only10.data is None  # the digits columns as they are
    assert total_rounds(only10) == total_rounds(s) + 4 * len(METHODS) * s.cifar.rounds
    standin = s.with_cifar_standin()
    assert standin.cifar.standin and standin.cifar.rounds == CifarSettings.quick().rounds
    assert replace(s, cifar=replace(s.cifar, data=str(data))).cifar.data == str(data)

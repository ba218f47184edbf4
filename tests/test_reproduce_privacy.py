"""``riemfl reproduce privacy``: the report, its JSON and its figure."""

from __future__ import annotations

import json
import math

import pytest

from riemfl.cli import main
from riemfl.experiments import privacy
from riemfl.testing import importorskip

importorskip("matplotlib")


def _tiny() -> privacy.Settings:
    """The quick report's structure at a fraction of its rounds."""
    rounds = {"kpca-synthetic": 3, "logreg-digits": 2}
    return privacy.Settings(
        rounds=rounds, n_clients=10, clients_per_round=4, noise=(1.0, 10.0), seeds=(0,)
    )


@pytest.mark.slow
def test_the_quick_report(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(privacy.Settings, "quick", classmethod(lambda cls: _tiny()))
    assert main(["reproduce", "privacy", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    assert f"report: {tmp_path}/report.md" in capsys.readouterr().out
    assert (tmp_path / "privacy.png").read_bytes()[:4] == b"\x89PNG"
    assert "utility against epsilon" in (tmp_path / "report.md").read_text()
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["quick"] and len(data["runs"]) == 2 * 2 * (2 + len(data["settings"]["noise"]))
    for problem in data["settings"]["rounds"]:
        mine = [r for r in data["runs"] if r["problem"] == problem and r["rule"] == "RFedProj"]
        eps = [float(r["epsilon"]) for r in mine]
        assert math.isinf(eps[0]) and math.isinf(eps[1])  # non-private, clipping only
        assert eps[2] > eps[3] > 0  # more noise, smaller epsilon


def test_strict_is_refused_for_the_privacy_report(tmp_path, capsys):
    assert main(["reproduce", "privacy", "--strict", "--out", str(tmp_path)]) == 2
    assert "no pass/fail claims" in capsys.readouterr().err


def test_the_table_gives_no_spread_for_one_seed():
    """With one seed the table printed "f - f* (mean +/- std)" and "+/- 0" in every row."""
    row = {"problem": "p", "rule": "RFedProj", "sigma": 1.0, "epsilon": 4.0, "gap": 2.5}
    one = privacy._table([row | {"gap_std": 0.0}], 1)
    assert "f - f* (one seed)" in one[0] and "+/-" not in "".join(one)
    three = privacy._table([row | {"gap_std": 0.25}], 3)
    assert "f - f* (mean over 3 seeds +/- std)" in three[0] and "| 2.5 +/- 0.25 |" in three[2]

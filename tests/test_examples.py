"""The scripts of ``examples/`` run end to end (small settings) and say what they claim."""

from __future__ import annotations

import math

import pytest

from riemfl.testing import importorskip


def test_asyncbezier_logreg(tmp_path, capsys, load_example):
    importorskip("matplotlib")
    importorskip("sklearn")
    summary = load_example("asyncbezier_logreg").main(["--steps", "30", "--out", str(tmp_path)])
    assert set(summary) == {"FedAsync", "FedBuff (K = 3)", "AsyncBezier", "AsyncBezierED"}
    for name, s in summary.items():
        assert math.isfinite(s["optimality_gap"]) and s["optimality_gap"] > 0, name
        assert 0.5 < s["accuracy"] <= 1.0, name  # from 10% at the zero start
        expected = 90 if name.startswith("FedBuff") else 30  # K = 3 updates per server step
        assert s["client_updates"] == expected
    assert (tmp_path / "asyncbezier_logreg.png").read_bytes()[:4] == b"\x89PNG"
    out = capsys.readouterr().out
    assert "AsyncBezierED" in out and "accuracy at the optimum" in out


@pytest.mark.slow
def test_flower_kpca_quick(capsys, load_example):
    importorskip("flwr")
    importorskip("ray")
    load_example("flower_kpca").main(["--quick"])
    out = capsys.readouterr().out
    assert "same iterates as in-process" in out
    difference = float(out.split("max |difference|")[1].split()[0])
    assert difference < 1e-10
    assert "3. FedAsync:" in out

"""``riemfl reproduce licudi2025-baselines``: the table, plot and JSON on tiny settings."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")

from riemfl.experiments import licudi2025  # noqa: E402


def test_tiny_reproduction_writes_the_table(tmp_path):
    settings = licudi2025.Settings(server_steps=10, seeds=(0,), eval_every=5, n_clients=8)
    md = licudi2025.reproduce(tmp_path, settings=settings, progress=False)
    rows = [line for line in md.splitlines() if line.startswith("| ") and "---" not in line]
    assert [r.split("|")[1].strip() for r in rows[1:]] == list(licudi2025.METHODS)
    assert (tmp_path / "accuracy.png").read_bytes()[:4] == b"\x89PNG"
    report = (tmp_path / "report.md").read_text()
    assert "[P] Table 1 on FEMNIST" in report and md in report
    data = json.loads((tmp_path / "results.json").read_text())
    assert len(data["runs"]) == len(licudi2025.METHODS)
    for run in data["runs"]:
        assert 0.0 <= run["accuracy"] <= 1.0 and 0.0 <= run["best_accuracy"] <= 1.0
        assert math.isfinite(run["gini"]) and math.isfinite(run["theil"])
        assert run["T_e"] is None or run["T_e"] in (0, 5, 10)
    fedbuff = next(r for r in data["runs"] if r["method"] == "FedBuff")
    assert fedbuff["updates"] == 10 * 10  # K = 10 updates per server step

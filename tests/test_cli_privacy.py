"""``riemfl run --dp-clip C --dp-noise SIGMA``: the epsilon column, the summary and refusals."""

from __future__ import annotations

import json

import pytest

from riemfl.cli import main
from riemfl.testing import importorskip

importorskip("matplotlib")

FAST = ["kpca-synthetic", "--clients", "4", "--steps", "3", "--local-steps", "2"]


def _run(tmp_path, *args):
    return main(["run", *args, "--out", str(tmp_path), "--no-progress"])


def test_a_private_run_writes_epsilon(tmp_path, capsys):
    extra = ["--algorithm", "rfedavg", "--upload", "tangent", "--clients-per-round", "2"]
    args = [*FAST, *extra, "--dp-clip", "0.5", "--dp-noise", "2", "--dp-delta", "1e-6"]
    assert _run(tmp_path, *args) == 0
    data = json.loads((tmp_path / "history.json").read_text())
    eps = data["metrics"]["epsilon"]
    assert len(eps) == 4 and eps[0] == 0 and eps[1] < eps[2] < eps[3]
    privacy = data["config"]["algorithm"]["privacy"]
    assert privacy["clip"] == 0.5 and privacy["delta"] == 1e-6
    assert data["summary"]["epsilon"] == eps[-1]
    assert (tmp_path / "history.csv").read_text().splitlines()[0].endswith(",epsilon")
    assert f"epsilon {eps[-1]:.3g} (delta 1e-06)" in capsys.readouterr().out


def test_a_private_fedbuff_run(tmp_path, capsys):
    args = ["kpca-synthetic", "--clients", "4", "--algorithm", "fedbuff", "--engine", "async"]
    args += ["--steps", "2", "--buffer-size", "2", "--local-steps", "2", "--record-every", "1"]
    assert _run(tmp_path, *args, "--dp-clip", "0.01", "--dp-noise", "1", "--dp-mode", "local") == 0
    eps = json.loads((tmp_path / "history.json").read_text())["metrics"]["epsilon"]
    assert len(eps) == 3 and 0 == eps[0] < eps[1] <= eps[2]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--algorithm", "rfedavg"], "add --upload tangent"),
        (["--algorithm", "rfedsvrg", "--upload", "point"], "add --upload tangent"),
        (["--algorithm", "fedasync", "--engine", "async"], "--algorithm fedbuff only"),
    ],
)
def test_rules_without_a_sum_only_server_are_refused(tmp_path, capsys, extra, message):
    assert _run(tmp_path, *FAST, *extra, "--dp-clip", "1", "--dp-noise", "1") == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_dp_options_need_clip_and_noise(tmp_path, capsys):
    assert _run(tmp_path, *FAST, "--algorithm", "rfedproj", "--dp-noise", "1") == 2
    assert "needs both --dp-clip C and --dp-noise SIGMA" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):
        _run(tmp_path, *FAST, "--algorithm", "rfedproj", "--dp-clip", "1", "--dp-delta", "2")
    assert "--dp-delta: expected a number in (0, 1)" in capsys.readouterr().err

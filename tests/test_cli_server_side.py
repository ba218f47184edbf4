"""``riemfl run --aggregator/--server-optimizer/--byzantine``: what the run gets, and refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from riemfl.cli import main
from riemfl.experiments.registry import build_problem
from riemfl.federated import (
    GeometricMedian,
    RFedAvg,
    RunOptions,
    ServerAdam,
    ServerOptimized,
    run_sync,
)
from riemfl.federated.attacks import Byzantine
from riemfl.testing import importorskip

importorskip("matplotlib")

FAST = ["kpca-synthetic", "--clients", "6", "--steps", "3", "--local-steps", "2"]
STEP = "0.01"


def _run(tmp_path, *args):
    return main(["run", *args, "--out", str(tmp_path), "--no-progress"])


def _history(tmp_path):
    return json.loads((tmp_path / "history.json").read_text())


def test_the_cli_run_is_the_python_run(tmp_path):
    """--aggregator median --server-optimizer adam --byzantine 0.2 --attack alie equals the
    same run built in Python."""
    args = [*FAST, "--algorithm", "rfedavg", "--upload", "tangent", "--step-size", STEP]
    args += ["--aggregator", "median", "--server-optimizer", "adam", "--server-lr", "0.05"]
    args += ["--byzantine", "0.2", "--attack", "alie", "--seed", "3"]
    assert _run(tmp_path, *args) == 0
    data = _history(tmp_path)
    problem = build_problem("kpca-synthetic", clients=6, seed=3)
    rule = ServerOptimized(RFedAvg(0.01, 2, upload="tangent"), ServerAdam(0.05))
    h = run_sync(
        problem,
        rule,
        3,
        options=RunOptions(seed=3),
        aggregator=GeometricMedian(),
        byzantine=Byzantine(0.2, "alie"),
    )
    assert np.allclose(data["metrics"]["loss"], h.metrics["loss"], rtol=0, atol=1e-12)
    assert data["config"]["byzantine"]["clients"] == h.config["byzantine"]["clients"]
    assert len(data["config"]["byzantine"]["clients"]) == 1  # round(0.2 * 6)
    assert data["config"]["aggregator"]["name"] == "geometric_median"
    assert data["config"]["algorithm"]["server_optimizer"]["name"] == "adam"


@pytest.mark.parametrize(
    ("extra", "name"),
    [
        (["--aggregator", "trimmed", "--trim", "0.3"], "trimmed_mean"),
        (["--aggregator", "krum"], "krum"),
        (["--aggregator", "multikrum", "--krum-f", "1"], "multi_krum"),
        (["--aggregator", "clipped", "--clip-radius", "0.5"], "centered_clipping"),
    ],
)
def test_each_aggregator_runs_on_point_uploads(tmp_path, extra, name):
    assert _run(tmp_path, *FAST, "--algorithm", "rfedavg", *extra) == 0
    assert _history(tmp_path)["config"]["aggregator"]["name"] == name


def test_krum_f_defaults_to_the_attackers(tmp_path):
    args = [*FAST, "--clients", "7", "--algorithm", "rfedproj", "--aggregator", "krum"]
    args += ["--byzantine", "0.3"]
    assert _run(tmp_path, *args) == 0
    data = _history(tmp_path)
    assert (
        data["config"]["aggregator"]["n_byzantine"]
        == 2
        == len(data["config"]["byzantine"]["clients"])
    )


def test_momentum_and_betas_reach_the_optimiser(tmp_path):
    args = [*FAST, "--algorithm", "rfedproj", "--server-optimizer", "momentum"]
    assert _run(tmp_path, *args, "--server-momentum", "0.5") == 0
    described = _history(tmp_path)["config"]["algorithm"]["server_optimizer"]
    assert described["momentum"] == 0.5 and described["lr"] == 1.0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--trim", "0.3"], "--trim: a parameter of --aggregator trimmed"),
        (["--aggregator", "median", "--clip-radius", "1"], "--aggregator clipped"),
        (["--server-optimizer", "adam", "--server-momentum", "0.5"], "--server-optimizer momentum"),
        (["--attack", "ipm"], "--attack: the attack of --byzantine"),
        (["--server-lr", "0.1"], "--server-lr: with --engine sync"),
        (["--server-optimizer", "adam"], "upload='tangent'"),
        (["--aggregator", "krum", "--krum-f", "2"], "m >= 2f + 3"),
    ],
)
def test_options_the_run_would_ignore_or_refuse(tmp_path, capsys, extra, message):
    code = _run(tmp_path, *FAST, "--algorithm", "rfedavg", *extra)
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--algorithm", "fedasync", "--aggregator", "median"], "only fedbuff aggregates"),
        (["--algorithm", "fedbuff", "--byzantine", "0.2"], "synchronous engine"),
    ],
)
def test_async_refusals(tmp_path, capsys, extra, message):
    args = ["kpca-synthetic", "--clients", "4", "--engine", "async", "--steps", "2", *extra]
    assert _run(tmp_path, *args) == 2
    assert message in capsys.readouterr().err


def test_bad_fractions_are_refused_by_the_parser(tmp_path, capsys):
    with pytest.raises(SystemExit):
        _run(tmp_path, *FAST, "--algorithm", "rfedproj", "--byzantine", "1.0")
    assert "expected a number in [0, 1)" in capsys.readouterr().err


def test_fedbuff_takes_the_aggregator_and_the_optimiser(tmp_path):
    args = ["kpca-synthetic", "--clients", "4", "--engine", "async", "--algorithm", "fedbuff"]
    args += ["--steps", "2", "--buffer-size", "3", "--local-steps", "2", "--record-every", "1"]
    args += ["--aggregator", "median", "--server-optimizer", "adam", "--server-lr", "0.05"]
    assert _run(tmp_path, *args) == 0
    rule = _history(tmp_path)["config"]["rule"]
    assert rule["aggregator"]["name"] == "geometric_median"
    assert rule["server_optimizer"]["name"] == "adam" and rule["server_optimizer"]["lr"] == 0.05
    assert rule["server_lr"] == pytest.approx(1 / 3)  # beta stays 1/K: the buffer's mean


def test_krum_on_a_small_buffer_is_refused(tmp_path, capsys):
    args = ["kpca-synthetic", "--clients", "4", "--engine", "async", "--algorithm", "fedbuff"]
    args += ["--buffer-size", "4", "--aggregator", "krum", "--krum-f", "1"]
    assert _run(tmp_path, *args) == 2
    assert "uploads per aggregation with f = 1" in capsys.readouterr().err

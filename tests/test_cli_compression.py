"""``riemfl run --compression SPEC [--error-feedback]``: what the run gets, and refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from riemfl.cli import main
from riemfl.experiments.registry import build_problem
from riemfl.federated import RFedAvg, RunOptions, run_sync
from riemfl.federated.compressed import Compressed
from riemfl.federated.compression import make_compressor
from riemfl.testing import importorskip

importorskip("matplotlib")

FAST = ["kpca-synthetic", "--clients", "4", "--steps", "3", "--local-steps", "2"]


def _run(tmp_path, *args):
    return main(["run", *args, "--out", str(tmp_path), "--no-progress"])


def test_the_cli_run_is_the_python_run(tmp_path):
    args = [*FAST, "--algorithm", "rfedavg", "--upload", "tangent", "--step-size", "0.01"]
    assert _run(tmp_path, *args, "--compression", "qsgd:3", "--error-feedback", "--seed", "4") == 0
    data = json.loads((tmp_path / "history.json").read_text())
    rule = Compressed(
        RFedAvg(0.01, 2, upload="tangent"), make_compressor("qsgd:3"), error_feedback=True, seed=4
    )
    h = run_sync(
        build_problem("kpca-synthetic", clients=4, seed=4), rule, 3, options=RunOptions(seed=4)
    )
    assert np.allclose(data["metrics"]["loss"], h.metrics["loss"], rtol=0, atol=1e-12)
    assert data["metrics"]["uplink_bytes"] == h.metrics["uplink_bytes"]
    compression = data["config"]["algorithm"]["compression"]
    assert compression["name"] == "qsgd" and compression["error_feedback"] is True


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--algorithm", "rfedavg", "--compression", "topk:0.1"], "use upload='tangent'"),
        (["--algorithm", "rfedproj", "--compression", "qsgd:9"], "qsgd"),
        (["--algorithm", "rfedproj", "--compression", "zip"], "topk:FRACTION"),
        (["--algorithm", "rfedproj", "--no-error-feedback"], "a setting of --compression"),
        (
            ["--algorithm", "fedasync", "--engine", "async", "--compression", "fp16"],
            "only fedbuff compresses",
        ),
    ],
)
def test_refusals(tmp_path, capsys, extra, message):
    assert _run(tmp_path, *FAST, *extra) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_fedbuff_compresses_its_clients_updates(tmp_path):
    args = ["kpca-synthetic", "--clients", "4", "--engine", "async", "--algorithm", "fedbuff"]
    args += ["--steps", "2", "--buffer-size", "2", "--local-steps", "2", "--record-every", "1"]
    assert _run(tmp_path, *args, "--compression", "topk:0.2") == 0
    data = json.loads((tmp_path / "history.json").read_text())
    assert data["config"]["rule"]["compression"]["name"] == "topk"
    assert data["metrics"]["uplink_bytes"][-1] > 0

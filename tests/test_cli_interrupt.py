"""Ctrl-C (SIGINT) and SIGTERM during ``riemfl run``: checkpoint, one line, exit 130, resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from riemfl.cli import CHECKPOINT_NAME, EXIT_INTERRUPTED
from riemfl.federated import History
from riemfl.federated.checkpoint import load_checkpoint

pytest.importorskip("matplotlib")

RUNS = {
    "sync": ["kpca-synthetic", "--algorithm", "rfedproj", "--rounds", "600"],
    "async": [
        "kpca-synthetic",
        "--engine",
        "async",
        "--algorithm",
        "fedbuff",
        "--rounds",
        "300",
        "--eval-every",
        "5",
    ],
}


def _command(out: Path, args: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "riemfl",
        "run",
        *args,
        "--checkpoint-every",
        "5",
        "--no-progress",
        "--out",
        str(out),
    ]


def _start_and_signal(out: Path, args: list[str], signum: int) -> subprocess.CompletedProcess:
    """Start the run, send ``signum`` once its first checkpoint exists, wait for the exit."""
    proc = subprocess.Popen(
        _command(out, args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    deadline = time.monotonic() + 120
    while not (out / CHECKPOINT_NAME).exists() and proc.poll() is None:
        assert time.monotonic() < deadline, "the run wrote no checkpoint within 120 s"
        time.sleep(0.005)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.slow
@pytest.mark.parametrize(
    "engine, signum", [("sync", signal.SIGINT), ("async", signal.SIGTERM)], ids=["sync", "async"]
)
def test_a_signal_saves_prints_one_line_and_the_same_command_resumes(tmp_path, engine, signum):
    args = RUNS[engine]
    interrupted = _start_and_signal(tmp_path / "run", args, signum)
    assert interrupted.returncode == EXIT_INTERRUPTED, interrupted.stderr
    assert "Traceback" not in interrupted.stderr
    lines = [line for line in interrupted.stderr.splitlines() if line.startswith("riemfl:")]
    assert len(lines) == 1 and "interrupted after step" in lines[0], interrupted.stderr
    assert "run the same command again" in lines[0] and "--checkpoint-every 5" in lines[0]
    step = load_checkpoint(tmp_path / "run" / CHECKPOINT_NAME)["step"]
    assert f"after step {step} " in lines[0]
    assert not (tmp_path / "run" / "history.json").exists()  # the run did not finish
    resumed = subprocess.run(
        _command(tmp_path / "run", args), capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr
    reference = subprocess.run(
        _command(tmp_path / "ref", args), capture_output=True, text=True, timeout=300
    )
    assert reference.returncode == 0, reference.stderr
    got = History.from_json(tmp_path / "run" / "history.json")
    want = History.from_json(tmp_path / "ref" / "history.json")
    got.config.pop("command"), want.config.pop("command")  # the --out folders differ
    assert got.same_results(want)
    assert not list((tmp_path / "run").glob("*.tmp"))


@pytest.mark.slow
def test_an_interrupted_reproduction_resumes_from_its_finished_runs(tmp_path):
    """Fig. 1 in its quick form: SIGINT once the first run has a checkpoint; the rerun resumes
    and its runs equal those of an uninterrupted reproduction."""
    command = [
        sys.executable,
        "-m",
        "riemfl",
        "reproduce",
        "zhang2024",
        "--quick",
        "--figure",
        "1",
        "--no-progress",
        "--out",
    ]
    proc = subprocess.Popen(
        [*command, str(tmp_path / "run")],
        stderr=subprocess.PIPE,
        text=True,
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not list((tmp_path / "run").glob("checkpoints/*.ckpt")) and proc.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INTERRUPTED and "Traceback" not in stderr, stderr
    assert "run the same command again" in stderr
    for out in ("run", "ref"):
        done = subprocess.run(
            [*command, str(tmp_path / out)], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
    runs = sorted(p.name for p in (tmp_path / "ref" / "runs").glob("*.json"))
    assert runs and runs == sorted(p.name for p in (tmp_path / "run" / "runs").glob("*.json"))
    for name in runs:
        got = History.from_json(tmp_path / "run" / "runs" / name)
        assert got.same_results(History.from_json(tmp_path / "ref" / "runs" / name)), name

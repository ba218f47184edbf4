"""Ctrl-C (SIGINT) and SIGTERM during ``riemfl run``: checkpoint, one line, exit 130, resume."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from riemfl.cli import CHECKPOINT_NAME, EXIT_INTERRUPTED, main
from riemfl.federated import History
from riemfl.federated.checkpoint import load_checkpoint
from riemfl.testing import importorskip

importorskip("matplotlib")

RUNS = {
    "sync": ["kpca-synthetic", "--algorithm", "rfedproj", "--steps", "600"],
    "async": [
        "kpca-synthetic",
        "--engine",
        "async",
        "--algorithm",
        "fedbuff",
        "--steps",
        "300",
        "--record-every",
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


def test_a_checkpoint_of_the_previous_format_is_refused_by_name(tmp_path, capsys):
    """A folder left by a riemfl that rewrote the whole history at every checkpoint (format 2):
    one line naming the format and the way out, exit status 2, the file left as it was."""
    out = tmp_path / "run"
    out.mkdir()
    old = b"RIEMFL-CHECKPOINT 2\n" + bytes(range(256)) * 4
    (out / CHECKPOINT_NAME).write_bytes(old)
    argv = ["run", *RUNS["sync"][:3], "--steps", "3", "--no-progress", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("riemfl: error: cannot read checkpoint") and "\n" not in err
    assert "format '2'" in err and "--overwrite" in err
    assert (out / CHECKPOINT_NAME).read_bytes() == old


def _written(path: Path) -> tuple[int, int] | None:
    """When and how large ``path`` was last written (None while there is none)."""
    with contextlib.suppress(FileNotFoundError):
        stat = path.stat()
        return stat.st_mtime_ns, stat.st_size
    return None


def _start_and_signal(
    out: Path, args: list[str], signum: int, delay: float = 0.0
) -> subprocess.CompletedProcess:
    """Start the run, send ``signum`` ``delay`` seconds after it has written its checkpoint
    (once, if there was one before), wait for the exit."""
    before = _written(out / CHECKPOINT_NAME)
    proc = subprocess.Popen(
        _command(out, args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    deadline = time.monotonic() + 120
    while _written(out / CHECKPOINT_NAME) in (None, before) and proc.poll() is None:
        assert time.monotonic() < deadline, "the run wrote no checkpoint within 120 s"
        time.sleep(0.005)
    time.sleep(delay)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _finish_like_an_uninterrupted_run(tmp_path: Path, args: list[str]) -> None:
    """Run the command again in ``tmp_path/run`` (a resume) and afresh in ``tmp_path/ref``: the
    same results, and no temporary file left."""
    for out in ("run", "ref"):
        done = subprocess.run(
            _command(tmp_path / out, args), capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
    got = History.from_json(tmp_path / "run" / "history.json")
    want = History.from_json(tmp_path / "ref" / "history.json")
    got.config.pop("command"), want.config.pop("command")  # the --out folders differ
    assert got.same_results(want)
    assert not list((tmp_path / "run").glob("*.tmp"))


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
    _finish_like_an_uninterrupted_run(tmp_path, args)


@pytest.mark.slow
def test_a_run_killed_at_random_moments_resumes_to_the_uninterrupted_result(tmp_path):
    """SIGKILL (no handler, no last checkpoint) lands in a round or in the middle of appending a
    checkpoint record: the same command resumes from the last complete record each time and
    ends exactly where the uninterrupted run ends."""
    args = RUNS["sync"]
    delays = random.Random(7)
    steps = []
    for _ in range(3):
        killed = _start_and_signal(tmp_path / "run", args, signal.SIGKILL, delays.uniform(0, 0.4))
        assert killed.returncode in (-signal.SIGKILL, 0), killed.stderr
        steps.append(load_checkpoint(tmp_path / "run" / CHECKPOINT_NAME)["step"])
    assert steps == sorted(set(steps)) and steps[0] > 0  # each attempt saved once at least
    _finish_like_an_uninterrupted_run(tmp_path, args)


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

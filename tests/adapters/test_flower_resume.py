"""A Flower job whose server process dies resumes from its checkpoint.

The server side is killed (SIGKILL, no cleanup) in the middle of a job, then the job is
submitted again with the same checkpoint file and compared with an uninterrupted job:

* a simulated synchronous job (the whole simulation process dies, nodes included: the resume
  installs the clients' state of the checkpoint on the new nodes) equals the uninterrupted job
  bit for bit;
* a simulated asynchronous job continues from the checkpoint's model, rule state, counters and
  rows (its arrivals follow real compute and messaging times, so only what the checkpoint holds
  is compared);
* a deployed synchronous job (SuperLink and SuperNodes as processes; only the ServerApp's
  process is killed, once a checkpoint exists) finishes with the in-process run's iterates.

Each killed process runs in its own session, and its whole process group (Ray's helpers
included) is killed after it, so nothing outlives the test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'riemfl[flower]')")
pytest.importorskip("ray", reason="Flower's simulation engine needs Ray (flwr[simulation])")

pytestmark = pytest.mark.slow

COMMON = """
import json, os, signal, sys
import numpy as np
from riemfl.adapters.flower import AsyncJob, ProblemSpec, SyncJob, simulate
from riemfl.federated import FedBuff, RFedSVRG, RunOptions

out, checkpoint = sys.argv[1], sys.argv[2]
KPCA = ProblemSpec("kpca-synthetic", clients=6, seed=1)


def dying_at(step_to_die):
    def on_step(step, history):
        if step == step_to_die:  # the rows so far, then death without any cleanup
            with open(out + ".rows.json", "w") as f:
                json.dump(history.to_dict()["metrics"], f)
            os.kill(os.getpid(), signal.SIGKILL)
    return on_step


def dump(results):
    runs = {
        name: {"metrics": h.to_dict()["metrics"], "final": np.asarray(h.final_point).tolist()}
        for name, h in results.items()
    }
    with open(out, "w") as f:
        json.dump(runs, f)
"""

SYNC_KILLED = """
options = RunOptions(seed=2, checkpoint=checkpoint, checkpoint_every=1, on_step=dying_at(3))
simulate([SyncJob(KPCA, RFedSVRG(4e-3, 3), 5, name="svrg", batch_size=5, options=options)], 3)
"""

SYNC_RESUMED = """
resumed = RunOptions(seed=2, checkpoint=checkpoint, checkpoint_every=1)
jobs = [
    SyncJob(KPCA, RFedSVRG(4e-3, 3), 5, name="svrg", batch_size=5, options=resumed),
    SyncJob(KPCA, RFedSVRG(4e-3, 3), 5, name="plain", batch_size=5, options=RunOptions(seed=2)),
]
dump(simulate(jobs, 3))
"""

SYNC_INTERRUPTED = (
    """
from riemfl.adapters.flower.errors import JobFailedError
from riemfl.federated.interrupt import RunInterrupted, request_interrupt


def stop_at_2(step, history):
    if step == 2:
        request_interrupt()  # what SIGINT/SIGTERM do to the ServerApp's process


stopped = RunOptions(seed=2, checkpoint=checkpoint, checkpoint_every=10, on_step=stop_at_2)
try:
    simulate([SyncJob(KPCA, RFedSVRG(4e-3, 3), 5, name="svrg", batch_size=5, options=stopped)], 3)
    raise SystemExit("the job was not interrupted")
except JobFailedError as exc:
    assert isinstance(exc.cause, RunInterrupted) and exc.cause.step == 2, repr(exc.cause)
"""
    + SYNC_RESUMED
)

ASYNC_KILLED = """
options = RunOptions(seed=2, checkpoint=checkpoint, checkpoint_every=2, record_every=1,
                     on_step=dying_at(5))
job = AsyncJob(KPCA, FedBuff(buffer_size=2), 8, 4e-3, 2, name="buff", options=options)
simulate([job], 3)
"""

ASYNC_RESUMED = """
options = RunOptions(seed=2, checkpoint=checkpoint, checkpoint_every=2, record_every=1)
job = AsyncJob(KPCA, FedBuff(buffer_size=2), 8, 4e-3, 2, name="buff", options=options)
dump(simulate([job], 3))
"""


def _python(script: str, out: Path, checkpoint: Path, timeout: float = 300) -> int:
    """Run ``script`` in a new session; kill what is left of its process group; its status."""
    code = textwrap.dedent(COMMON) + textwrap.dedent(script)
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(out), str(checkpoint)],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if proc.returncode not in (0, -signal.SIGKILL):
        pytest.fail(f"the job's process failed ({proc.returncode}):\n{err.decode()[-3000:]}")
    return proc.returncode


def _without_clocks(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k not in ("wall_time", "cpu_time", "time")}


def test_a_simulated_sync_job_killed_mid_run_resumes_bit_for_bit(tmp_path):
    out, checkpoint = tmp_path / "out.json", tmp_path / "svrg.ckpt"
    assert _python(SYNC_KILLED, out, checkpoint) == -signal.SIGKILL
    assert checkpoint.exists() and not out.exists()
    assert _python(SYNC_RESUMED, out, checkpoint) == 0
    runs = json.loads(out.read_text())
    resumed, plain = runs["svrg"], runs["plain"]
    assert resumed["final"] == plain["final"]  # bit for bit
    assert _without_clocks(resumed["metrics"]) == _without_clocks(plain["metrics"])
    assert resumed["metrics"]["round"] == [0, 1, 2, 3, 4, 5]


def test_an_interrupted_simulated_sync_job_saves_and_resumes_bit_for_bit(tmp_path):
    """An interruption (the signals' stop request) ends the job at a step boundary with a
    checkpoint, whatever checkpoint_every says; the rerun completes it as if uninterrupted."""
    out, checkpoint = tmp_path / "out.json", tmp_path / "svrg.ckpt"
    assert _python(SYNC_INTERRUPTED, out, checkpoint) == 0
    runs = json.loads(out.read_text())
    assert runs["svrg"]["final"] == runs["plain"]["final"]
    assert _without_clocks(runs["svrg"]["metrics"]) == _without_clocks(runs["plain"]["metrics"])


def test_a_simulated_async_job_killed_mid_run_continues_from_its_checkpoint(tmp_path):
    out, checkpoint = tmp_path / "out.json", tmp_path / "buff.ckpt"
    assert _python(ASYNC_KILLED, out, checkpoint) == -signal.SIGKILL
    before = json.loads(Path(f"{out}.rows.json").read_text())
    assert before["step"] == [0, 1, 2, 3, 4, 5]
    assert _python(ASYNC_RESUMED, out, checkpoint) == 0
    after = json.loads(out.read_text())["buff"]["metrics"]
    assert after["step"] == list(range(9))
    saved = 4  # the last checkpoint before the death at step 5
    for key in ("loss", "updates", "dropped"):
        assert after[key][: saved + 1] == before[key][: saved + 1], key
    assert all(b >= a for a, b in zip(after["updates"], after["updates"][1:], strict=False))
    assert after["updates"][-1] >= 2 * 8  # FedBuff(2): two updates per server step at least


def _serverapp_processes() -> list[int]:
    """Pids of the running ServerApp processes of local deployments (``flwr-serverapp``)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"flwr-serverapp" in cmdline:
            pids.append(int(entry.name))
    return pids


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the ServerApp through /proc")
def test_a_deployed_sync_job_whose_serverapp_dies_resumes(tmp_path):
    from riemfl.adapters.flower.deploy import job_from_run_config
    from riemfl.adapters.flower.local import LocalDeployment

    from riemfl.federated import RunOptions, run_sync
    from riemfl.federated.checkpoint import load_checkpoint

    checkpoint = tmp_path / "deployed.ckpt"
    config = {
        "problem": "kpca-synthetic",
        "problem-clients": 4,
        "problem-seed": 1,
        "algorithm": "rfedproj",
        "step-size": 4e-3,
        "local-steps": 3,
        "steps": 3,
        "seed": 3,
        "batch-size": 5,
        "checkpoint": str(checkpoint),
        "checkpoint-every": 1,
    }
    with LocalDeployment(2, tmp_path / "deployment", tls=False) as deployment:
        before = set(_serverapp_processes())
        deployment.submit(config)
        deadline = time.monotonic() + 300
        while not (checkpoint.exists() and load_checkpoint(checkpoint)["step"] >= 1):
            assert time.monotonic() < deadline, deployment.logs()
            time.sleep(0.2)
        for pid in set(_serverapp_processes()) - before:
            os.kill(pid, signal.SIGKILL)
        killed_at = load_checkpoint(checkpoint)["step"]
        assert killed_at < 3
        result = deployment.run(config, timeout=400)
    job = job_from_run_config(config)
    reference = run_sync(job.resolved, job.algorithm, 3, batch_size=5, options=RunOptions(seed=3))
    history = result["history"]
    assert history["metrics"]["round"] == [0, 1, 2, 3]
    np.testing.assert_allclose(result["final_point"], reference.final_point, rtol=0, atol=1e-10)
    np.testing.assert_allclose(history["metrics"]["loss"], reference.loss, rtol=0, atol=1e-10)

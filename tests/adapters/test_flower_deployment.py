"""A real Flower deployment over loopback: a SuperLink and two SuperNodes as separate processes.

``LocalDeployment`` starts ``flower-superlink`` and ``flower-supernode`` (``--insecure`` on
127.0.0.1, free ports), ``flwr run`` submits the app of ``riemfl.adapters.flower.deploy``, and
every process is stopped on exit, also when the test fails. Each message starts a ClientApp
process on the node (Flower's default isolation), so a round takes seconds: the job is short.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'riemfl[flower]')")

from riemfl.adapters.flower.deploy import job_from_run_config  # noqa: E402
from riemfl.adapters.flower.local import LocalDeployment  # noqa: E402

from riemfl.federated import run_sync  # noqa: E402

RUN_CONFIG = {
    "problem": "kpca-synthetic",
    "problem-clients": 4,
    "problem-seed": 1,
    "algorithm": "rfedproj",
    "step-size": 4e-3,
    "local-steps": 3,
    "rounds": 2,
    "seed": 3,
    "batch-size": 5,
}


@pytest.mark.slow
def test_sync_job_through_superlink_and_supernodes(tmp_path):
    deployment = LocalDeployment(2, tmp_path)
    with deployment:
        assert [name for name, _ in deployment.processes] == [
            "superlink",
            "supernode-0",
            "supernode-1",
        ]
        result = deployment.run(RUN_CONFIG, timeout=400)
    # every process started is gone, even though the run itself succeeded
    assert all(proc.poll() is not None for _, proc in deployment.processes)

    job = job_from_run_config(RUN_CONFIG)
    reference = run_sync(job.resolved, job.algorithm, job.rounds, seed=job.seed, batch_size=5)
    assert result["kind"] == "SyncJob"
    history = result["history"]
    assert history["config"]["engine"] == "flower" and history["config"]["nodes"] == 2
    assert history["warnings"] == []
    np.testing.assert_allclose(result["final_point"], reference.final_point, rtol=0, atol=1e-10)
    np.testing.assert_allclose(history["metrics"]["loss"], reference.loss, rtol=0, atol=1e-10)


def test_processes_are_stopped_when_the_body_fails(tmp_path):
    """The context manager tears the deployment down on an exception (no run submitted)."""
    deployment = LocalDeployment(1, tmp_path)
    with pytest.raises(RuntimeError, match="boom"), deployment:
        assert all(proc.poll() is None for _, proc in deployment.processes)
        raise RuntimeError("boom")
    assert len(deployment.processes) == 2
    assert all(proc.poll() is not None for _, proc in deployment.processes)

"""A real Flower deployment over loopback: a SuperLink and two SuperNodes as separate processes.

``LocalDeployment`` starts ``flower-superlink`` and ``flower-supernode`` (127.0.0.1, free
ports) with TLS (a throwaway CA) and SuperNode authentication (each node's key registered with
the SuperLink), ``flwr run`` submits the app of ``riemfl.adapters.flower.deploy``, and every
process is stopped on exit, also when the test fails. Each message starts a ClientApp process on
the node (Flower's default isolation), so a round takes seconds: the job is short.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'riemfl[flower]')")

from riemfl.adapters.flower.deploy import job_from_run_config  # noqa: E402
from riemfl.adapters.flower.errors import (  # noqa: E402
    ConnectionRefusedByPeerError,
    NodeAuthenticationError,
)
from riemfl.adapters.flower.local import LocalDeployment  # noqa: E402

from riemfl.federated import run_sync  # noqa: E402

RUN_CONFIG = {
    "problem": "kpca-synthetic",
    "problem-clients": 4,
    "problem-seed": 1,
    "algorithm": "rfedproj",
    "step-size": 4e-3,
    "local-steps": 3,
    "steps": 2,
    "seed": 3,
    "batch-size": 5,
}


@pytest.mark.slow
def test_sync_job_through_superlink_and_supernodes(tmp_path):
    """With TLS and SuperNode authentication (the defaults), the run is the in-process run."""
    deployment = LocalDeployment(2, tmp_path)
    with deployment:
        assert [name for name, _ in deployment.processes] == [
            "superlink",
            "supernode-0",
            "supernode-1",
        ]
        superlink = (tmp_path / "superlink.log").read_text()
        assert "running on https://127.0.0.1" in superlink.lower()
        assert len(deployment.online_nodes()) == 2
        result = deployment.run(RUN_CONFIG, timeout=400)
    # every process started is gone, even though the run itself succeeded
    assert all(proc.poll() is not None for _, proc in deployment.processes)

    job = job_from_run_config(RUN_CONFIG)
    reference = run_sync(job.resolved, job.algorithm, job.steps, batch_size=5, options=job.options)
    assert result["kind"] == "SyncJob"
    history = result["history"]
    assert history["config"]["engine"] == "flower" and history["config"]["nodes"] == 2
    assert history["warnings"] == []
    np.testing.assert_allclose(result["final_point"], reference.final_point, rtol=0, atol=1e-10)
    np.testing.assert_allclose(history["metrics"]["loss"], reference.loss, rtol=0, atol=1e-10)


def test_processes_are_stopped_when_the_body_fails(tmp_path):
    """The context manager tears the deployment down on an exception (no run submitted).

    Without TLS and without waiting for the node to register, to stay quick (2 s): the secure
    path's teardown is checked by the slow tests."""
    deployment = LocalDeployment(1, tmp_path, tls=False, wait=False)
    with pytest.raises(RuntimeError, match="boom"), deployment:
        assert all(proc.poll() is None for _, proc in deployment.processes)
        raise RuntimeError("boom")
    assert len(deployment.processes) == 2
    assert all(proc.poll() is not None for _, proc in deployment.processes)


@pytest.mark.slow
def test_superlink_refuses_unlisted_keys_and_nodes_without_the_ca(tmp_path):
    """Both refusals happen at connection: Flower's SuperNode exits (code 1) once the SuperLink
    answers its activation with API error 2004 (key not registered), or once its TLS handshake
    fails (it verifies the server against the system's CAs, which do not know the throwaway
    CA). ``add_supernode`` turns the exit and its log line into the typed error; the SuperLink
    then lists only the node that was accepted. The ``flwr`` CLI without the CA gets "the
    SuperLink is unavailable" at once."""
    deployment = LocalDeployment(1, tmp_path, startup_timeout=60)
    with deployment:
        accepted = deployment.online_nodes()
        assert len(accepted) == 1
        with pytest.raises(NodeAuthenticationError, match="supernode-1: its public key is not"):
            deployment.add_supernode(register=False)
        with pytest.raises(ConnectionRefusedByPeerError, match="CERTIFICATE_VERIFY_FAILED"):
            deployment.add_supernode(trust_ca=False)
        assert deployment.refused == ["supernode-1", "supernode-2"]
        assert deployment.online_nodes() == accepted
        # the flwr CLI without the CA cannot connect either
        config = tmp_path / "flwr-home" / "config.toml"
        config.write_text(config.read_text().replace("root-certificates", "# root-certificates"))
        with pytest.raises(ConnectionRefusedByPeerError, match="flwr could not reach"):
            deployment.online_nodes()
    assert all(proc.poll() is not None for _, proc in deployment.processes)

"""SecAgg+ and client-level DP through a real deployment: a SuperLink and three SuperNodes as
separate processes, with TLS and SuperNode authentication (``LocalDeployment``'s defaults).

The deployment runs the processes found on PATH (``flower-superlink``, ``flower-supernode``,
``flwr``), which import the riemfl of their interpreter.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'riemfl[flower]')")

from riemfl.adapters.flower.deploy import job_from_run_config  # noqa: E402
from riemfl.adapters.flower.local import LocalDeployment  # noqa: E402
from riemfl.adapters.flower.secure import SecAggSettings, max_weight  # noqa: E402

from riemfl.federated import run_sync  # noqa: E402
from riemfl.federated.privacy import DPSettings  # noqa: E402

NODES = 3
RUN_CONFIG = {
    "problem": "kpca-synthetic",
    "problem-clients": 4,
    "problem-seed": 1,
    "algorithm": "rfedproj",
    "step-size": 4e-3,
    "local-steps": 3,
    "steps": 1,
    "seed": 3,
    "secagg": True,
}
DP = {"dp-clip": 0.05, "dp-noise": 0.6}


@pytest.mark.slow
def test_secagg_and_central_dp_through_superlink_and_supernodes(tmp_path):
    """4 clients on 3 SuperNodes (2, 1, 1), TLS and node authentication on, SecAgg+ and central
    DP in one run (each SecAgg+ phase costs five ClientApp processes per node, so one round):
    its iterate is ``run_sync(privacy=...)``'s (the same central noise on the sum) within the
    quantisation bound (N W 2c/Q per entry of a sum), yet not equal (the sum was quantised), its
    epsilon column is the in-process one, and it is far from the run without noise.
    (SecAgg+ without DP, and DP without SecAgg+, are compared with the in-process runs in
    Flower's simulation engine: test_flower_secagg.py, test_flower_privacy.py.)"""
    with LocalDeployment(NODES, tmp_path) as deployment:
        private = deployment.run({**RUN_CONFIG, **DP, "job": "dp"}, timeout=500)
    assert all(proc.poll() is not None for _, proc in deployment.processes)

    job = job_from_run_config(RUN_CONFIG)
    problem, rounds = job.resolved, job.steps
    bound = rounds * SecAggSettings().error_bound(NODES, max_weight(2))
    plain = run_sync(problem, job.algorithm, rounds, options=job.options)
    settings = DPSettings(DP["dp-clip"], DP["dp-noise"])
    dp = run_sync(problem, job.algorithm, rounds, privacy=settings, options=job.options)
    history = private["history"]
    assert history["config"]["nodes"] == NODES and history["warnings"] == []
    assert history["metrics"]["participants"][1:] == [4] * rounds
    gap = np.abs(np.asarray(private["final_point"]) - dp.final_point).max()
    assert 0 < gap < bound
    assert history["metrics"]["epsilon"] == dp.metrics["epsilon"]
    assert np.abs(np.asarray(private["final_point"]) - plain.final_point).max() > 10 * bound

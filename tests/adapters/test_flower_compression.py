"""Compressed uploads on the Flower synchronous path: the payloads travel packed, the server
decodes them, and the run equals ``run_sync``'s (iterates and ``uplink_bytes``).

On the in-process grid of ``test_flower_secagg`` (real ClientApps called in this process): the
bytes of the payload arrays in the nodes' replies equal the ``uplink_bytes`` the History counts.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'riemfl[flower]')")

from riemfl.adapters.flower import NotSumOnlyError, SyncJob, make_client_app  # noqa: E402
from riemfl.adapters.flower.sync_server import run_sync_job  # noqa: E402
from riemfl.adapters.flower.wire import ARRAYS_KEY  # noqa: E402
from test_flower_secagg import (  # noqa: E402
    KPCA,
    NODES,
    InProcessGrid,
    task_identity,  # noqa: F401 - a fixture
)

from riemfl.errors import ParameterError  # noqa: E402
from riemfl.federated import RFedAvg, RFedProj, RunOptions, run_sync  # noqa: E402
from riemfl.federated.compressed import PAYLOAD, Compressed  # noqa: E402
from riemfl.federated.compression import make_compressor  # noqa: E402

STEPS = 3


class CountingGrid(InProcessGrid):
    """The in-process grid, adding up what the compressed payload arrays in the nodes' replies
    hold (``payload_bytes``), what Flower serialises for them (``serialised_bytes``: the same
    bytes and a .npy header per array) and their number."""

    def __init__(self, app) -> None:
        super().__init__(app)
        self.payload_bytes = self.serialised_bytes = self.arrays = 0

    def _answer(self, message):
        reply = super()._answer(message)
        if reply.has_content() and ARRAYS_KEY in reply.content:
            for name, array in reply.content[ARRAYS_KEY].items():
                if PAYLOAD in name:
                    self.payload_bytes += array.numpy().nbytes
                    self.serialised_bytes += len(array.data)
                    self.arrays += 1
        return reply


def _rule(kind, spec):
    inner = RFedAvg(0.01, 2, upload="tangent") if kind == "rfedavg" else RFedProj(0.01, 2)
    return Compressed(inner, make_compressor(spec))


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize(
    ("kind", "spec"),
    [("rfedavg", "qsgd:3"), ("rfedavg", "topk:0.2"), ("rfedproj", "rank:1"), ("rfedavg", "bf16")],
)
def test_a_compressed_job_equals_run_sync_and_moves_the_counted_bytes(kind, spec):
    job = SyncJob(KPCA, _rule(kind, spec), STEPS, name="packed", options=RunOptions(seed=2))
    grid = CountingGrid(make_client_app([job]))
    history = run_sync_job(grid, job, range(NODES))
    local = run_sync(KPCA.build(), _rule(kind, spec), STEPS, options=RunOptions(seed=2))
    np.testing.assert_allclose(history.final_point, local.final_point, rtol=0, atol=1e-10)
    np.testing.assert_allclose(history.uplink_bytes, local.uplink_bytes, rtol=0, atol=1e-9)
    n = KPCA.build().n_clients
    assert grid.payload_bytes == pytest.approx(history.uplink_bytes[-1] * n, rel=0, abs=1e-6)
    assert grid.payload_bytes > 0
    header = grid.serialised_bytes - grid.payload_bytes  # one .npy header per node's array
    assert 0 < header <= 256 * grid.arrays


def test_secure_aggregation_refuses_compressed_payloads():
    with pytest.raises(NotSumOnlyError, match="compressed payloads"):
        SyncJob(KPCA, _rule("rfedavg", "fp16"), STEPS, secagg=True)


def test_privacy_with_compression_is_refused_on_flower():
    from riemfl.federated.privacy import DPSettings

    with pytest.raises(ParameterError, match="runs in process"):
        SyncJob(KPCA, _rule("rfedavg", "fp16"), STEPS, privacy=DPSettings(1.0, 1.0))


def test_a_compressed_fedbuff_is_refused_on_flower():
    from riemfl.adapters.flower import AsyncJob
    from riemfl.federated import FedBuff

    with pytest.raises(ParameterError, match="simulated in the server's rule"):
        AsyncJob(KPCA, FedBuff(3, compressor=make_compressor("fp16")), 2, step_size=0.01)

"""Run riemfl's federated algorithms on Flower (https://flower.ai): simulation and deployment.

A riemfl algorithm becomes a Flower ``ServerApp`` and ``ClientApp`` that talk through Flower's
message API: the nodes run riemfl's own client rules on the clients they host, the ServerApp
runs the server rule and checks every reply. Synchronous algorithms (RFedProj, RFedAvg,
RFedProx, RFedSVRG; FedAvg = RFedAvg on a Euclidean problem) reproduce
:func:`riemfl.federated.run_sync`'s iterates for the same seed; asynchronous rules (FedAsync,
FedBuff, AsyncBezier, ...) run in a loop that applies each reply as it arrives. A sum-only
synchronous rule can run under Flower's secure aggregation (``SyncJob(secagg=True)``: the server
learns only each phase's sum). Guide: ``docs/flower.md``.

Flower is imported only when used; without it, the functions raise
:class:`FlowerNotInstalledError` (``pip install "riemfl[flower]"``).

Example
-------
>>> from riemfl.adapters.flower import ProblemSpec, SyncJob, simulate  # doctest: +SKIP
>>> from riemfl.federated import RFedProj  # doctest: +SKIP
>>> job = SyncJob(ProblemSpec("kpca-synthetic", clients=10), RFedProj(4e-3, 10), steps=20)
>>> history = simulate([job], num_supernodes=5)["sync"]  # doctest: +SKIP
"""

from riemfl.adapters.flower.checks import UPLOAD_KINDS
from riemfl.adapters.flower.client import hosted_clients, make_client_app
from riemfl.adapters.flower.errors import (
    FlowerAdapterError,
    FlowerNotInstalledError,
    JobFailedError,
    NodeRegistrationError,
    NoProgressError,
    NotSumOnlyError,
    ProtocolError,
    ReplyTimeoutError,
    TrainerMismatchError,
)
from riemfl.adapters.flower.faults import CorruptReplies, SecAggDropout
from riemfl.adapters.flower.jobs import AsyncJob, PingJob, ProblemSpec, SyncJob
from riemfl.adapters.flower.ping import PingResult
from riemfl.adapters.flower.secure import SecAggSettings
from riemfl.adapters.flower.server import make_server_app, run_job
from riemfl.adapters.flower.simulation import default_backend_config, simulate

__all__ = [
    "AsyncJob",
    "CorruptReplies",
    "FlowerAdapterError",
    "FlowerNotInstalledError",
    "JobFailedError",
    "NodeRegistrationError",
    "NoProgressError",
    "NotSumOnlyError",
    "PingJob",
    "PingResult",
    "ProblemSpec",
    "ProtocolError",
    "ReplyTimeoutError",
    "SecAggDropout",
    "SecAggSettings",
    "SyncJob",
    "TrainerMismatchError",
    "UPLOAD_KINDS",
    "default_backend_config",
    "hosted_clients",
    "make_client_app",
    "make_server_app",
    "run_job",
    "simulate",
]

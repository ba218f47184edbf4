"""Federated optimisation on manifolds: algorithms as pure client/server rules, and engines.

Synchronous algorithms (Zhang et al. 2024 and the baselines of Li & Ma 2022):
:class:`RFedProj`, :class:`RFedAvg`, :class:`RFedProx`, :class:`RFedSVRG`; run them with
:func:`run_sync`, which returns a :class:`History`.

Every engine is a configuration of one run core (:func:`run_steps`: rows, progress bar,
checkpoints, interruption) with its steps (:class:`RoundSteps` over a :class:`ClientExecutor`
for synchronous rounds; the event loop of :func:`run_async`) and an evaluator.

Asynchronous server rules (:class:`FedAsync`, :class:`FedBuff`, :class:`DCASGD`,
:class:`AsyncFedED`, the OrthoCorrect family, the linear delay corrections of
:class:`LinearCorrection`) run in the discrete-event simulator
:func:`run_async` with a local trainer (:class:`ProblemTrainer`) and a timing model.
"""

from .algorithm import ClientContext, Operators, SyncAlgorithm
from .async_engine import VersionStore, run_async
from .async_manifold import (
    AsyncBezier,
    AsyncBezierED,
    AsyncCurve,
    AsyncManifold,
    BezierEmbedding,
    Embedding,
    OrthoDCCorrection,
    staleness_penalty,
)
from .async_rules import (
    ASGD,
    DCASGD,
    Arrival,
    AsyncFedED,
    AsyncRule,
    FedAsync,
    FedBuff,
    FedGS,
    FedOrtho,
    OrthoCorrect,
    OrthoDC,
    OrthoDyn,
    OrthoGrad,
    OrthoPos,
    OrthoStrict,
    SumBuffer,
    staleness_function,
    switch_schedule,
)
from .attacks import ATTACK_NAMES, Attack, Byzantine, make_attack
from .compressed import Compressed
from .curve_local import BezierProblemTrainer
from .curve_manifold_local import ManifoldBezierTrainer
from .engine import StackedClients, initial_point, run_sync
from .faults import ClientDroppedWarning
from .history import METRICS, History
from .interrupt import RunInterrupted, handle_interrupts
from .linear_correction import LinearCorrection, orthocorrect_lambda, squared_update
from .local import ProblemTrainer
from .privacy import DPSettings, GaussianSum, PrivateAlgorithm, privatize
from .rfedproj import RFedProj
from .robust import (
    AGGREGATOR_NAMES,
    CenteredClipping,
    GeometricMedian,
    Krum,
    MultiKrum,
    TrimmedMean,
    build_aggregator,
)
from .rounds import ClientExecutor, PhaseReply, RoundSteps, ServerRule, sample_round
from .run_core import EngineSpec, RunOptions, Steps, run_steps
from .seeds import SeedStreams
from .server_optimized import ServerOptimized
from .server_optimizers import (
    SERVER_OPTIMIZER_NAMES,
    ServerAdagrad,
    ServerAdam,
    ServerOptimizer,
    ServerSGD,
    ServerYogi,
    build_server_optimizer,
)
from .tangent import RFedAvg, RFedProx, RFedSVRG
from .timing import ExponentialTime, LogNormalTime, ProportionalTime, TimingModel, TraceTime

__all__ = [
    "Compressed",
    "ATTACK_NAMES",
    "Attack",
    "Byzantine",
    "make_attack",
    "AGGREGATOR_NAMES",
    "SERVER_OPTIMIZER_NAMES",
    "build_aggregator",
    "build_server_optimizer",
    "CenteredClipping",
    "GeometricMedian",
    "Krum",
    "MultiKrum",
    "TrimmedMean",
    "ServerAdagrad",
    "ServerAdam",
    "ServerOptimized",
    "ServerOptimizer",
    "ServerSGD",
    "ServerYogi",
    "AsyncBezier",
    "AsyncBezierED",
    "AsyncCurve",
    "AsyncManifold",
    "BezierEmbedding",
    "BezierProblemTrainer",
    "ManifoldBezierTrainer",
    "Embedding",
    "OrthoDCCorrection",
    "staleness_penalty",
    "ASGD",
    "DCASGD",
    "LinearCorrection",
    "orthocorrect_lambda",
    "squared_update",
    "Arrival",
    "AsyncFedED",
    "History",
    "AsyncRule",
    "ExponentialTime",
    "FedAsync",
    "FedBuff",
    "FedGS",
    "FedOrtho",
    "LogNormalTime",
    "OrthoCorrect",
    "OrthoDC",
    "OrthoDyn",
    "OrthoGrad",
    "OrthoPos",
    "OrthoStrict",
    "ProblemTrainer",
    "ProportionalTime",
    "SumBuffer",
    "TimingModel",
    "TraceTime",
    "VersionStore",
    "run_async",
    "staleness_function",
    "switch_schedule",
    "ClientContext",
    "ClientDroppedWarning",
    "METRICS",
    "Operators",
    "RFedAvg",
    "RFedProj",
    "RFedProx",
    "RFedSVRG",
    "SyncAlgorithm",
    "initial_point",
    "run_sync",
    "ClientExecutor",
    "PhaseReply",
    "RoundSteps",
    "RunInterrupted",
    "RunOptions",
    "EngineSpec",
    "SeedStreams",
    "ServerRule",
    "StackedClients",
    "Steps",
    "handle_interrupts",
    "run_steps",
    "sample_round",
    "DPSettings",
    "GaussianSum",
    "PrivateAlgorithm",
    "privatize",
]

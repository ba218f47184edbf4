"""What a Flower run does: jobs (a synchronous run, an asynchronous run, a round-trip probe).

A job holds everything both sides need: the server runs it over the grid and the nodes look it up
by name in every message. A problem can be given as an object or as a :class:`ProblemSpec` (a
name of :mod:`riemfl.experiments.registry` and its arguments): a spec travels as a few fields
(Flower's simulation engine pickles the ClientApp with every message) and is built once per
process, and it is the form a real deployment uses (``riemfl.adapters.flower.deploy``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from riemfl.adapters.flower.errors import NotSumOnlyError, TrainerMismatchError
from riemfl.adapters.flower.secure import SecAggSettings

from riemfl._validation import integer, optional
from riemfl.errors import ParameterError
from riemfl.federated.aggregation import Aggregator, check_aggregator
from riemfl.federated.algorithm import SyncAlgorithm, check_local_steps, check_step_size
from riemfl.federated.async_manifold import AsyncManifold, BezierEmbedding
from riemfl.federated.async_rules import AsyncRule, FedBuff
from riemfl.federated.attacks import Byzantine
from riemfl.federated.buffer_compression import BufferCompression
from riemfl.federated.compressed import Compressed, private_rule
from riemfl.federated.curve_local import BezierProblemTrainer, CurveClientBase
from riemfl.federated.curve_manifold_local import ManifoldBezierTrainer
from riemfl.federated.local import ProblemTrainer
from riemfl.federated.privacy import DPSettings, PrivateAlgorithm
from riemfl.federated.run_core import RunOptions
from riemfl.manifolds.euclidean import Euclidean
from riemfl.problems.base import FederatedProblem

__all__ = [
    "ProblemSpec",
    "SyncJob",
    "AsyncJob",
    "PingJob",
    "Job",
    "resolve_problem",
    "is_curve_rule",
    "REGISTRATION_TIMEOUT",
    "REPLY_TIMEOUT",
    "MAX_FAILURES",
]

#: default seconds to wait for the nodes to register and to answer a job's handshake (the first
#: message starts each node's ClientApp and builds the problem there: measured 8 s on an idle
#: 2-core machine, up to 64 s with two CPU-bound processes beside it; ``docs/flower.md``, 8)
REGISTRATION_TIMEOUT = 300.0
#: default seconds to wait for the reply to one message (a synchronous phase, an asynchronous
#: dispatch) before its node is taken for dead
REPLY_TIMEOUT = 600.0
#: default consecutive faulty replies after which an asynchronous client is excluded
MAX_FAILURES = 3

_BUILT: dict[ProblemSpec, FederatedProblem] = {}
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class ProblemSpec:
    """A problem of :data:`riemfl.experiments.registry.PROBLEMS`, built where it is needed.

    Parameters
    ----------
    name : str
        E.g. ``"kpca-synthetic"``.
    clients : int, optional
        Number of clients (default: the registry's).
    k : int, optional
        Number of components (default: the registry's).
    seed : int
        Seed of generated data.
    data : str, optional
        Data file of problems that need one (``"kpca-mnist"``).
    """

    name: str
    clients: int | None = None
    k: int | None = None
    seed: int = 0
    data: str | None = None

    def build(self) -> FederatedProblem:
        """The problem (built once per process and spec, then reused)."""
        if self not in _BUILT:
            from riemfl.experiments.registry import build_problem

            _BUILT[self] = build_problem(
                self.name, clients=self.clients, k=self.k, seed=self.seed, data=self.data
            )
        return _BUILT[self]


def resolve_problem(problem: FederatedProblem | ProblemSpec) -> FederatedProblem:
    """``problem`` itself, or the problem a :class:`ProblemSpec` builds."""
    if isinstance(problem, ProblemSpec):
        return problem.build()
    if not isinstance(problem, FederatedProblem):
        raise ParameterError(
            f"problem must be a FederatedProblem or a ProblemSpec, got {type(problem).__name__}"
        )
    return problem


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ParameterError(
            f"job name must be a non-empty string of letters, digits, '_', '-', '.', got {name!r}"
        )
    return name


def check_positive(what: str, value: float) -> float:
    """``value`` as a float; raise ParameterError naming ``what`` unless it is finite and > 0."""
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ParameterError(f"{what} must be a finite number > 0, got {value!r}")
    return v


def _check_options(options: Any) -> None:
    """A job's options: a :class:`~riemfl.federated.RunOptions`."""
    if not isinstance(options, RunOptions):
        raise ParameterError(
            f"options must be a riemfl.federated.RunOptions, got {type(options).__name__}"
        )


#: a job's waits and polling interval, in seconds (a ping job has no registration)
TIMEOUTS = ("registration_timeout", "reply_timeout", "max_poll")


def _check_timeouts(job: Any, names: tuple[str, ...] = TIMEOUTS) -> None:
    """Check (and convert to float) the job's timeouts and polling interval ``names``."""
    for what in names:
        setattr(job, what, check_positive(what, getattr(job, what)))


def _check_byzantine(byzantine: Any, secagg: Any, privacy: Any) -> None:
    """Refuse attackers that the job cannot forge: not a Byzantine, under SecAgg+ (the server
    sees only the sum) or with differential privacy (as ``run_sync``)."""
    if not isinstance(byzantine, Byzantine):
        raise ParameterError(
            "byzantine must be a riemfl.federated.attacks.Byzantine, got "
            f"{type(byzantine).__name__}"
        )
    if secagg is not None:
        raise ParameterError(
            "byzantine: the server forges the attackers' uploads, but under secure aggregation "
            "it sees only their sum; expected secagg=None"
        )
    if privacy is not None:
        raise ParameterError(
            "byzantine with privacy is not supported (as in run_sync); expected privacy=None"
        )


def _check_secagg(
    secagg: Any, algorithm: SyncAlgorithm, aggregator: Aggregator | None = None
) -> SecAggSettings | None:
    """The job's SecAgg+ settings (``True``: the defaults; ``False``/None: none); raise
    :class:`NotSumOnlyError` when a phase of ``algorithm``, or ``aggregator``, needs each
    upload."""
    if secagg is None or secagg is False:
        return None
    if secagg is True:
        secagg = SecAggSettings()
    if not isinstance(secagg, SecAggSettings):
        raise ParameterError(
            f"secagg must be a SecAggSettings, True, False or None, got {type(secagg).__name__}"
        )
    if isinstance(algorithm, Compressed):
        raise NotSumOnlyError(
            f"secure aggregation sums the uploads as they travel, but {algorithm.name}'s are "
            "compressed payloads (packed bits, indices, factors) that the server decodes one by "
            "one; expected secagg=None or the plain rule"
        )
    if aggregator is not None and not aggregator.takes_totals:
        raise NotSumOnlyError(
            f"secure aggregation hands the server only the sum of the uploads, but aggregator "
            f"{type(aggregator).__name__} needs each upload (its takes_totals is False; robust "
            "aggregators compute a centre of the individual uploads); expected secagg=None or "
            "aggregator=None"
        )
    needs_rows = [p for p in range(algorithm.n_phases) if not algorithm.sum_only(p)]
    if needs_rows:
        hint = algorithm.sum_only_hint()
        raise NotSumOnlyError(
            f"secure aggregation needs a sum-only rule, but the server step of {algorithm.name} "
            f"in phase(s) {needs_rows} needs each upload{f' ({hint})' if hint else ''}; "
            "sum-only rules: RFedProj, and "
            "RFedAvg / RFedProx / RFedSVRG with upload='tangent'"
        )
    return secagg


def is_curve_rule(rule: Any) -> bool:
    """Whether ``rule`` takes a learned Bezier curve's control points instead of a local model:
    an :class:`~riemfl.federated.AsyncManifold` with a :class:`~riemfl.federated.BezierEmbedding`
    (AsyncBezier, AsyncBezierED, AsyncCurve)."""
    return isinstance(rule, AsyncManifold) and isinstance(rule.embedding, BezierEmbedding)


@dataclass
class _Job:
    """Fields every job has."""

    @property
    def resolved(self) -> FederatedProblem:
        """The problem object (a :class:`ProblemSpec` is built on first use)."""
        return resolve_problem(self.problem)


@dataclass
class SyncJob(_Job):
    """A synchronous riemfl algorithm run for ``steps`` rounds through Flower.

    Same meaning of every parameter as in :func:`riemfl.federated.run_sync`; for the same seed
    the iterates are those of ``run_sync`` (``docs/flower.md``, "Equivalence").

    Parameters
    ----------
    problem : FederatedProblem or ProblemSpec
    algorithm : SyncAlgorithm
        RFedProj, RFedAvg, RFedProx, RFedSVRG (FedAvg: RFedAvg on a Euclidean problem), one of
        them with a server optimiser (:class:`~riemfl.federated.ServerOptimized`, e.g.
        ``ServerOptimized(RFedAvg(eta, K, upload="tangent"), ServerAdam(0.05))``: the nodes
        run the wrapped rule's client steps, the optimiser runs in the ServerApp), or any
        :class:`~riemfl.federated.SyncAlgorithm`.
    steps : int
        Communication rounds.
    options : RunOptions, optional
        The run's options, as in ``run_sync``: the seed (initial point, client sampling,
        mini-batches, noise), ``record_every``, the progress bar, ``on_step``, and the
        checkpoint: the server's state and every client's state rows (asked of the nodes) every
        ``checkpoint_every`` rounds; a job rerun with ``resume=True`` after its server process
        died installs them on the nodes and continues as the uninterrupted job would.
    name : str
        Identifies the job in messages and in the nodes' state.
    x0 : array, optional
        Initial global model (default: :func:`riemfl.federated.initial_point` of the seed).
    clients_per_round, batch_size : int, optional
        As in ``run_sync``.
    atol : float
        Tolerance of the server's checks that an uploaded point is on the manifold, or an
        uploaded vector tangent (``Manifold.check_point`` / ``check_tangent``).
    registration_timeout : float
        Seconds to wait for the nodes' answers to the job's handshake (their first message,
        which starts their ClientApps and builds the problem); a node that does not answer in
        time fails the job with ``NodeRegistrationError``.
    reply_timeout : float
        Seconds to wait for the replies of one phase; a node that does not answer in time (or
        answers with an error) is dropped for the rest of the job.
    upload_kinds : dict, optional
        ``{(phase, key): "point" | "tangent" | "ambient"}``: how uploads of an algorithm that
        :data:`riemfl.adapters.flower.checks.UPLOAD_KINDS` does not know are checked.
    max_poll : float
        Longest sleep (s) between two polls for replies (polls start at 1 ms and double while
        nothing arrives): short in simulation, longer against a remote SuperLink.
    secagg : SecAggSettings or bool, optional
        Run every phase through Flower's SecAgg+: the server learns only the sum of the
        uploads (:mod:`riemfl.adapters.flower.secure`; ``True``: the default
        :class:`~riemfl.adapters.flower.SecAggSettings`). Every phase of ``algorithm`` must be
        sum-only, else :class:`~riemfl.adapters.flower.NotSumOnlyError`.
    privacy : DPSettings, optional
        Client-level differential privacy, as ``run_sync(privacy=...)``
        (:mod:`riemfl.federated.privacy`): ``algorithm`` is wrapped in a
        :class:`~riemfl.federated.privacy.PrivateAlgorithm` at construction, so the nodes clip
        (and in local mode noise, each client with its own stream:
        :func:`~riemfl.federated.privacy.client_noise`) and the server adds the central noise
        to the sum (:class:`~riemfl.federated.privacy.GaussianSum`, also after SecAgg+). The
        History gets the ``epsilon`` column (``docs/flower.md``, "Differential privacy").
    aggregator : Aggregator, optional
        What the server step of a sum-only phase receives, as ``run_sync(aggregator=...)``:
        e.g. a robust aggregator of :mod:`riemfl.federated.robust` (GeometricMedian,
        TrimmedMean, Krum, MultiKrum, CenteredClipping); default the plain sum. Its columns
        (``row()``) join the History, its state is checkpointed with the round, and its
        settings enter the job's fingerprint. Each run of the job starts from a copy of it as
        given (the job's own object is never advanced). A robust aggregator needs each
        upload: with ``secagg`` it raises :class:`~riemfl.adapters.flower.NotSumOnlyError`,
        and with ``privacy`` (whose noise is calibrated to a sum) ParameterError.
    byzantine : Byzantine, optional
        Byzantine clients for robustness experiments, as ``run_sync(byzantine=...)``
        (:mod:`riemfl.federated.attacks`): the job's seed chooses them, the server forges their
        accepted uploads of the model phase, and the History records them. Refused with
        ``secagg`` (the server never sees the rows it would forge) and with ``privacy``.
    """

    problem: FederatedProblem | ProblemSpec
    algorithm: SyncAlgorithm
    steps: int
    name: str = "sync"
    x0: Any = None
    clients_per_round: int | None = None
    batch_size: int | None = None
    atol: float = 1e-8
    reply_timeout: float = REPLY_TIMEOUT
    upload_kinds: dict[tuple[int, str], str] | None = None
    max_poll: float = 0.005
    registration_timeout: float = REGISTRATION_TIMEOUT
    secagg: SecAggSettings | bool | None = None
    privacy: DPSettings | None = None
    aggregator: Aggregator | None = None
    byzantine: Byzantine | None = None
    options: RunOptions = field(default_factory=RunOptions, kw_only=True)

    def _wrap_private(self) -> None:
        """``algorithm`` wrapped in a PrivateAlgorithm of ``privacy`` (once: a copy made with
        :func:`dataclasses.replace` keeps the wrapper; a compressed rule's compression goes
        around the private rule: the nodes clip, then compress); an aggregator that does not sum
        is refused (the noise is calibrated to a sum of clipped updates,
        :class:`~riemfl.federated.privacy.GaussianSum`)."""
        if self.privacy is not None and not isinstance(self.privacy, DPSettings):
            raise ParameterError(f"privacy must be a DPSettings, got {type(self.privacy).__name__}")
        if self.privacy is not None and self.aggregator is not None and not self.aggregator.sums:
            raise ParameterError(
                f"privacy adds its noise to the sum of the clipped updates, but aggregator "
                f"{type(self.aggregator).__name__} does not return their sum (its sums is "
                "False), so the noise would not match the accounting; expected privacy=None or "
                "an aggregator that sums"
            )
        private = private_rule(self.algorithm)
        if private is not None:
            if private.settings != self.privacy:
                raise ParameterError(
                    f"algorithm is a PrivateAlgorithm of {private.settings}, but privacy "
                    f"is {self.privacy}; expected the plain rule and privacy=DPSettings(...)"
                )
        elif self.privacy is not None and isinstance(self.algorithm, Compressed):
            # clip (and noise), then compress: the order of run_sync(privacy=...)
            inner = PrivateAlgorithm(self.algorithm.algorithm, self.privacy)
            self.algorithm = self.algorithm.around(inner)
        elif self.privacy is not None:
            self.algorithm = PrivateAlgorithm(self.algorithm, self.privacy)

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not isinstance(self.algorithm, SyncAlgorithm):
            raise ParameterError(
                f"algorithm must be a SyncAlgorithm, got {type(self.algorithm).__name__}"
            )
        if self.aggregator is not None:
            self.aggregator = check_aggregator(self.aggregator)
        self.secagg = _check_secagg(self.secagg, self.algorithm, self.aggregator)
        if self.byzantine is not None:
            _check_byzantine(self.byzantine, self.secagg, self.privacy)
        self._wrap_private()
        integer(self.steps, "SyncJob: steps", minimum=0)
        _check_options(self.options)
        problem = self.resolved
        optional(
            integer,
            self.clients_per_round,
            "SyncJob: clients_per_round",
            minimum=1,
            maximum=problem.n_clients,
        )
        optional(integer, self.batch_size, "SyncJob: batch_size", minimum=1)
        if self.batch_size is not None and problem.n_samples is None:
            raise ParameterError(
                f"{problem.name} has no per-sample losses: batch_size must be None"
            )
        self.atol = check_positive("atol", self.atol)
        _check_timeouts(self)
        self.algorithm.validate(problem)


@dataclass
class AsyncJob(_Job):
    """An asynchronous riemfl server rule (FedAsync, FedBuff, AsyncBezier, ...) run through Flower.

    Nodes train with :class:`riemfl.federated.ProblemTrainer` (Riemannian SGD, the local
    training of :func:`riemfl.federated.run_async`) and upload their local model; for a curve
    rule (an :class:`~riemfl.federated.AsyncManifold` with a
    :class:`~riemfl.federated.BezierEmbedding`: AsyncBezier, AsyncBezierED) they train with
    :class:`riemfl.federated.BezierProblemTrainer` and upload the learned control points,
    shape ``(degree + 1, *point_shape)``. The server applies every reply as it arrives and
    dispatches that client again with the current model.

    Parameters
    ----------
    problem : FederatedProblem or ProblemSpec
    rule : AsyncRule
    steps : int
        Stop after this many server steps (global model versions).
    step_size, local_steps, batch_size
        The local training (:class:`~riemfl.federated.ProblemTrainer`; for a curve rule,
        ``local_steps`` is the default of ``warmup_steps`` and ``curve_steps``).
    options : RunOptions, optional
        The run's options, as in ``run_async``: the seed (initial point, the clients'
        mini-batches), ``record_every`` (evaluate the global model every this many server
        steps; None: at step 0 and the last step only), the progress bar, ``on_step``, and
        the checkpoint (the server's model, the rule's state, the queue and the exclusions; the
        messages in flight when the server died are sent again at resume).
    name : str
    x0 : array, optional
    workers : int, optional
        Clients in flight at once (default: all), at most ``node_workers`` per node.
    weights : {"samples", "uniform"}
        :math:`w_i` of the rule's rate, as in ``run_async``.
    max_staleness : int, optional
        Drop (not apply) an update staler than this.
    atol : float
        Tolerance of the check that a returned local model is on the manifold.
    registration_timeout : float
        Seconds to wait for the nodes' answers to the handshake (as :class:`SyncJob`).
    reply_timeout : float
        Seconds to wait for the reply to one dispatch; a node with a message unanswered for
        longer is taken for dead and excluded with its clients (as is a node whose reply says
        that its ClientApp process died); its late reply, if any, is ignored. When no client is
        left, the run stops with :class:`~riemfl.adapters.flower.NoProgressError`
        (``ReplyTimeoutError`` when the last ones timed out): the longest wait of a run whose
        nodes all die.
    max_failures : int
        Exclude a client after this many faulty replies in a row (an exception its ClientApp
        raised, or an upload that fails the checks: malformed, non-finite, complex, wrong shape
        or dtype, off the manifold). Each faulty reply is logged with its reason and the client
        is dispatched again until then.
    node_workers : int
        Messages in flight to one node at once (default 1): a node's other clients wait in the
        queue until its reply arrives. A node's messages share its compute (in simulation, a
        pool of Ray actors that every node shares, one message per actor), and one message per
        node keeps a node that hangs from holding more than one of the simulation's actors,
        which would starve the healthy nodes (their messages would wait behind it until every
        node timed out). More only helps a node that runs messages in parallel; in simulation,
        keep it below the number of actors.
    drain_timeout : float
        After the last server step, seconds to wait for the replies still in flight (they are
        not applied; waiting keeps a node from running a stale task into the next job).
    max_poll : float
        Longest sleep (s) between two polls for replies.
    curve : bool, optional
        Whether the nodes run the curve client (:class:`~riemfl.federated.BezierProblemTrainer`)
        instead of :class:`~riemfl.federated.ProblemTrainer`. Default: exactly when ``rule`` is
        a curve rule (:func:`is_curve_rule`); a value that contradicts the rule raises
        :class:`~riemfl.adapters.flower.TrainerMismatchError`.
    warmup_steps, curve_steps : int, optional
        The curve client's K1 steps on the end point and K - K1 steps of curve learning
        (default: ``local_steps`` each).
    mu : float
        The curve client's FedProx weight (Licudi et al. 2025, eq. (6); default 0).
    freeze_end : bool
        Keep the curve's end point fixed during curve learning (default True, as in the
        experiments of Licudi et al. 2025, Sec. 3). The curve settings need a curve rule.
    """

    problem: FederatedProblem | ProblemSpec
    rule: AsyncRule
    steps: int
    step_size: float
    local_steps: int = 5
    batch_size: int | None = None
    name: str = "async"
    x0: Any = None
    workers: int | None = None
    weights: str = "samples"
    max_staleness: int | None = None
    atol: float = 1e-8
    reply_timeout: float = REPLY_TIMEOUT
    drain_timeout: float = 60.0
    max_poll: float = 0.005
    curve: bool | None = None
    warmup_steps: int | None = None
    curve_steps: int | None = None
    mu: float = 0.0
    freeze_end: bool = True
    registration_timeout: float = REGISTRATION_TIMEOUT
    max_failures: int = MAX_FAILURES
    node_workers: int = 1
    options: RunOptions = field(default_factory=RunOptions, kw_only=True)

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not isinstance(self.rule, AsyncRule):
            raise ParameterError(f"rule must be an AsyncRule, got {type(self.rule).__name__}")
        if self.compression is not None and self.rule.privacy is not None:
            raise ParameterError(
                f"{self.rule.name}: differential privacy with compressed uploads clips each "
                "update before it is compressed, which run_async does; a Flower job takes one or "
                "the other"
            )
        self._check_client_kind()
        integer(self.steps, "AsyncJob: steps", minimum=0)
        _check_options(self.options)
        check_step_size("step_size", self.step_size)
        check_local_steps(self.local_steps)
        problem = self.resolved
        optional(integer, self.workers, "AsyncJob: workers", minimum=1, maximum=problem.n_clients)
        optional(integer, self.max_staleness, "AsyncJob: max_staleness", minimum=0)
        self.max_failures = optional(
            integer, self.max_failures, "AsyncJob: max_failures", minimum=1
        )
        self.node_workers = integer(self.node_workers, "AsyncJob: node_workers", minimum=1)
        if self.weights not in ("samples", "uniform"):
            raise ParameterError(f"weights must be 'samples' or 'uniform', got {self.weights!r}")
        self.atol = check_positive("atol", self.atol)
        self.drain_timeout = check_positive("drain_timeout", self.drain_timeout)
        _check_timeouts(self)
        self.rule.validate(problem.manifold)
        self.trainer()  # validates batch_size against the problem

    def _check_client_kind(self) -> None:
        """Resolve ``curve`` from the rule; refuse a client that does not fit the rule."""
        rule, name = self.rule, self.rule.name
        curve_rule = is_curve_rule(rule)
        if isinstance(rule, AsyncManifold) and not curve_rule:
            raise TrainerMismatchError(
                f"rule {name!r} learns a {type(rule.embedding).__name__}; the Flower nodes have "
                "a client only for a BezierEmbedding (BezierProblemTrainer)"
            )
        if self.curve is None:
            self.curve = curve_rule
        if not isinstance(self.curve, bool):
            raise ParameterError(f"curve must be True, False or None, got {self.curve!r}")
        if self.curve and not curve_rule:
            raise TrainerMismatchError(
                f"curve=True makes the nodes upload Bezier control points, but rule {name!r} "
                f"({type(rule).__name__}) takes a local model; expected an AsyncManifold rule "
                "with a BezierEmbedding (AsyncBezier, AsyncBezierED), or curve=False"
            )
        if not self.curve and curve_rule:
            raise TrainerMismatchError(
                f"rule {name!r} takes a curve's control points of shape "
                f"{tuple(rule.embedding.parameters.point_shape)}, but curve=False makes the "
                "nodes upload a local model (ProblemTrainer); expected curve=True (the default "
                "for this rule)"
            )
        if not self.curve:
            settings = {
                "warmup_steps": self.warmup_steps,
                "curve_steps": self.curve_steps,
                "mu": self.mu or None,
                "freeze_end": None if self.freeze_end else False,
            }
            given = {k: v for k, v in settings.items() if v is not None}
            if given:
                raise TrainerMismatchError(
                    f"{given} are settings of the curve client, but rule {name!r} takes a "
                    "local model (ProblemTrainer); expected a curve rule (AsyncBezier, "
                    "AsyncBezierED) or none of these settings"
                )
            return
        for what in ("warmup_steps", "curve_steps"):
            steps = self.local_steps if getattr(self, what) is None else getattr(self, what)
            setattr(self, what, integer(steps, f"AsyncJob: {what}", minimum=0))

    @property
    def compression(self) -> BufferCompression | None:
        """FedBuff's compression of the clients' updates, which the nodes run (None:
        uncompressed uploads of the local model)."""
        return self.rule.compression if isinstance(self.rule, FedBuff) else None

    @property
    def upload_kind(self) -> str:
        """What a client uploads: ``"point"`` (its local model), ``"curve"`` (a curve rule's
        control points) or ``"payload"`` (FedBuff's compressed update)."""
        if self.compression is not None:
            return "payload"
        return "curve" if self.curve else "point"

    @property
    def upload_shape(self) -> tuple[int, ...]:
        """Shape of a client's upload: the point shape, or ``(degree + 1, *point_shape)``."""
        if self.curve:
            return tuple(self.rule.embedding.parameters.point_shape)
        return tuple(self.resolved.manifold.point_shape)

    def trainer(self) -> ProblemTrainer | CurveClientBase:
        """The local training every client runs (the same classes as ``run_async`` uses): a
        curve rule's client learns a Bezier curve in flat space, or a geodesic one on a curved
        problem (:class:`~riemfl.federated.ManifoldBezierTrainer`, which needs torch)."""
        if self.curve:
            flat = isinstance(self.resolved.manifold, Euclidean)
            return (BezierProblemTrainer if flat else ManifoldBezierTrainer)(
                self.resolved,
                self.step_size,
                self.warmup_steps,
                self.curve_steps,
                mu=self.mu,
                batch_size=self.batch_size,
                degree=self.rule.embedding.degree,
                freeze_end=self.freeze_end,
            )
        return ProblemTrainer(self.resolved, self.step_size, self.local_steps, self.batch_size)

    def weight_vector(self) -> np.ndarray:
        """:math:`w_i`: dataset shares (``"samples"``) or 1/n (``"uniform"``)."""
        trainer = self.trainer()
        n = trainer.n_clients
        if self.weights == "uniform":
            return np.full(n, 1.0 / n)
        sizes = np.array([trainer.n_samples(i) for i in range(n)], dtype=float)
        return sizes / sizes.sum()


@dataclass
class PingJob:
    """Round trips without work: the messaging cost of a round, measured in the same run.

    First ``repeats`` times, back to back, one message to every node until all replies are in
    (a synchronous round with no compute); then ``repeats`` times one message to one node, the
    nodes in turn (one asynchronous dispatch). The message carries zero arrays of ``payload``
    shapes and the reply echoes them, so the bytes moved match those of a real round when
    ``payload`` does.

    Parameters
    ----------
    repeats : int
    payload : dict of shapes
        Arrays to send (float64 zeros), e.g. ``{"x": (20, 5), "px": (20, 5)}``.
    name : str
    reply_timeout, max_poll : float
    """

    repeats: int = 10
    payload: dict[str, tuple[int, ...]] = field(default_factory=dict)
    name: str = "ping"
    reply_timeout: float = REPLY_TIMEOUT
    max_poll: float = 0.005

    def __post_init__(self) -> None:
        _check_name(self.name)
        integer(self.repeats, "PingJob: repeats", minimum=1)
        _check_timeouts(self, TIMEOUTS[1:])


Job = SyncJob | AsyncJob | PingJob

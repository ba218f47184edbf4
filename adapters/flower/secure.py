r"""Secure aggregation of sum-only phases through Flower's SecAgg+ (Bell et al. 2020).

With ``SyncJob(secagg=SecAggSettings(...))`` (or ``secagg=True``) every phase of the rule must
be sum-only (:meth:`~riemfl.federated.SyncAlgorithm.sum_only`; RFedProj, and RFedAvg / RFedProx
/ RFedSVRG with ``upload="tangent"``), and each phase runs in two exchanges on the same grid:

1. **riemfl's own message** (``train.riemfl_sync``, marked ``secure``): each node runs the
   client rule on its clients and checks their upload rows itself, with the checks the server
   runs in a plain job (:func:`~riemfl.adapters.flower.checks.upload_verdicts`: shape, real
   dtype, finite, on the manifold or tangent within ``atol``) plus one more: every entry within
   ``clipping_range``. It keeps the mean :math:`\bar u_n` of its accepted rows and their
   number :math:`k_n` in its ``context.state`` and replies with *which* clients passed (and
   why the others failed), never with an upload.
2. **Flower's SecAgg+** (``flwr.server.workflow.SecAggPlusWorkflow`` on the server, the mod
   ``flwr.client.mod.secaggplus_mod`` on the nodes' default ``train`` handler): the nodes with
   at least one accepted client answer the workflow's fit instruction with
   :math:`(\bar u_n, k_n)`, as ``FitRes(parameters, num_examples)``; SecAgg+ masks, quantises
   and sums them, and the server receives only the weighted mean
   :math:`\sum_n k_n \bar u_n / \sum_n k_n`, from which it takes the sum
   :math:`\sum_j u_j = (\sum_n k_n)\cdot` mean and hands it to ``server_step_from_sum``
   (a pre-aggregated :class:`~riemfl.federated.rounds.PhaseReply`).

Flower 1.41 offers SecAgg+ only on its legacy ``Strategy`` path: the workflow takes a
``LegacyContext`` and asks its strategy for the fit instructions (``configure_fit``) and hands
it the result (``aggregate_fit``). :func:`secure_sum` therefore drives the workflow object
itself, on riemfl's grid, with a strategy that only names the nodes of the phase and keeps
the aggregate; the protocol (keys, secret shares, masks, quantisation, unmasking) is Flower's
code, unchanged. The message-API ``flwr.serverapp`` has no equivalent in 1.41.

**Quantisation.** A node scales its mean by :math:`q_n/Q` with :math:`q_n = k_n Q / W`
(``max_weight`` :math:`W`: the number of clients of the largest node rounded up to a power of
two, so that :math:`q_n` is an integer and the weights are exact), clips to
:math:`[-c, c]` (``clipping_range``; the node's check refuses a row that would be clipped) and
rounds stochastically to :math:`Q` (``quantization_range``) levels: each node's value moves by
less than one level :math:`2c/Q`. The server divides the sum by :math:`\sum_n q_n / Q =
(\sum_n k_n)/W`, so every entry of the sum it obtains differs from the exact one by less than

.. math:: N\,W\,\frac{2c}{Q}

for :math:`N` contributing nodes (:meth:`SecAggSettings.error_bound`), and the mean the rule
uses by that over :math:`\sum_n k_n`. The masked sums live modulo :math:`M`
(``modulus_range``), which needs :math:`N Q < M`.

**Dropouts.** SecAgg+ finishes when a node fails after sending its masked vector, or while
sending it (the ``collect_masked_vectors`` stage), as long as every node keeps at least
``reconstruction_threshold`` live neighbours; its clients are then dropped with that reason and
the node is excluded for the rest of the job (its client state is no longer known). A node that
fails the first exchange never joins the SecAgg+ run. Flower 1.41's workflow does *not* survive
a node that fails during its first two stages (``setup``, ``share_keys``): the other nodes hold
no share of its key, the unmasking stops, and the phase fails for every client.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from riemfl.adapters.flower._flwr import flwr
from riemfl.adapters.flower.checks import check_upload_arrays, upload_verdicts
from riemfl.adapters.flower.errors import ProtocolError
from riemfl.adapters.flower.wire import to_numpy

from riemfl._validation import integer, optional, real
from riemfl.errors import ParameterError

__all__ = [
    "SecAggSettings",
    "SecureSum",
    "secure_sum",
    "max_weight",
    "Contribution",
    "contribute",
]

_POWER_OF_TWO = "a power of two"


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def max_weight(largest_node: int) -> float:
    """:math:`W`: the number of clients of the largest node rounded up to a power of two."""
    return float(2 ** math.ceil(math.log2(max(int(largest_node), 1))))


@dataclass(frozen=True)
class SecAggSettings:
    """The settings of Flower's SecAgg+ for a :class:`~riemfl.adapters.flower.SyncJob`.

    Parameters
    ----------
    num_shares : int or float
        Shares of each node's secrets (an int > 2, or a float: that fraction of the phase's
        nodes; 1.0: every node is every node's neighbour). Flower's ``num_shares``.
    reconstruction_threshold : int or float
        Shares needed to reconstruct a secret (an int below ``num_shares``, or a fraction of
        the shares, at least 2): every node must keep this many live neighbours, so with
        :math:`n` shares at most :math:`n - t` neighbours of a node may drop out.
    clipping_range : float
        :math:`c`: every uploaded entry must lie in :math:`[-c, c]` (the node refuses a row
        that does not, instead of letting SecAgg+ clip it).
    quantization_range : int
        :math:`Q`: quantisation levels, a power of two (default :math:`2^{22}`).
    modulus_range : int
        :math:`M`: the masks' modulus, a power of two above :math:`Q` and at most
        :math:`2^{32}` (default).
    timeout : float, optional
        Seconds each SecAgg+ stage waits for replies (default: the job's ``reply_timeout``).
    """

    num_shares: int | float = 1.0
    reconstruction_threshold: int | float = 0.5
    clipping_range: float = 8.0
    quantization_range: int = 2**22
    modulus_range: int = 2**32
    timeout: float | None = None

    def __post_init__(self) -> None:
        c = real(self.clipping_range, "SecAggSettings: clipping_range", above=0)
        object.__setattr__(self, "clipping_range", c)
        for what in ("quantization_range", "modulus_range"):
            v = integer(getattr(self, what), f"SecAggSettings: {what}", minimum=1)
            if not _power_of_two(v):
                raise ParameterError(f"{what} must be an integer, {_POWER_OF_TWO}, got {v!r}")
            object.__setattr__(self, what, v)
        if self.modulus_range > 2**32:
            raise ParameterError(
                f"modulus_range must be at most 2**32 (Flower's masks), got {self.modulus_range}"
            )
        optional(real, self.timeout, "SecAggSettings: timeout", above=0)
        self.workflow(1.0, None)  # Flower's own checks of the other settings

    def workflow(self, weight: float, timeout: float | None) -> Any:
        """Flower's ``SecAggPlusWorkflow`` with these settings and ``max_weight=weight``.

        Raises
        ------
        ParameterError
            When Flower refuses the settings (its message says why).
        """
        flwr()  # without Flower: FlowerNotInstalledError
        from flwr.server.workflow import SecAggPlusWorkflow

        try:
            return SecAggPlusWorkflow(
                self.num_shares,
                self.reconstruction_threshold,
                max_weight=float(weight),
                clipping_range=self.clipping_range,
                quantization_range=self.quantization_range,
                modulus_range=self.modulus_range,
                timeout=self.timeout if self.timeout is not None else timeout,
            )
        except (TypeError, ValueError) as exc:
            raise ParameterError(f"SecAgg+ settings refused by Flower: {exc}") from exc

    def error_bound(self, nodes: int, weight: float) -> float:
        r"""Largest entry error of the securely aggregated sum of ``nodes`` nodes' uploads:
        :math:`N W\, 2c / Q` (module docstring)."""
        return nodes * weight * 2.0 * self.clipping_range / self.quantization_range

    def check_capacity(self, nodes: int, weight: float) -> None:
        """Raise :class:`ParameterError` unless ``nodes`` quantised values sum below the modulus
        and the weights :math:`k/W` are whole levels (:math:`W \\le Q`)."""
        if nodes * self.quantization_range >= self.modulus_range:
            raise ParameterError(
                f"{nodes} nodes x quantization_range {self.quantization_range} reach "
                f"modulus_range {self.modulus_range}: the masked sum would overflow; use a "
                "smaller quantization_range"
            )
        if weight > self.quantization_range:
            raise ParameterError(
                f"a node hosts up to {int(weight)} clients, more than quantization_range "
                f"{self.quantization_range} levels"
            )


@dataclass
class SecureSum:
    """What one SecAgg+ run gave the server.

    Attributes
    ----------
    total : dict of str to array, or None
        The sum of the contributions (None when the protocol halted).
    nodes : list of int
        The nodes whose contribution is in the sum.
    why : str
        Why the protocol halted, or what the nodes that dropped out reported ("" if none).
    """

    total: dict[str, np.ndarray] | None
    nodes: list[int] = field(default_factory=list)
    why: str = ""


def _strategy(grid: Any, nodes: Sequence[int], config: Mapping[str, Any]) -> Any:
    """A Flower ``Strategy`` that gives the SecAgg+ workflow the phase's nodes and keeps what it
    aggregated (the workflow calls only ``configure_fit`` and ``aggregate_fit``)."""
    from flwr.common import FitIns, Parameters
    from flwr.server.compat.grid_client_proxy import GridClientProxy
    from flwr.server.strategy import Strategy

    class _SumOfPhase(Strategy):
        def __init__(self) -> None:
            self.results: list[Any] | None = None
            self.failures: list[Any] = []

        def initialize_parameters(self, client_manager: Any) -> None:
            return None

        def configure_fit(self, server_round: int, parameters: Any, client_manager: Any) -> Any:
            ins = FitIns(Parameters(tensors=[], tensor_type="numpy.ndarray"), dict(config))
            return [(GridClientProxy(int(n), grid, 0), ins) for n in nodes]

        def aggregate_fit(self, server_round: int, results: Any, failures: Any) -> Any:
            self.results, self.failures = list(results), list(failures)
            return (results[0][1].parameters if results else None), {}

        def configure_evaluate(self, *args: Any) -> list[Any]:
            return []

        def aggregate_evaluate(self, *args: Any) -> tuple[None, dict[str, Any]]:
            return None, {}

        def evaluate(self, *args: Any) -> None:
            return None

    return _SumOfPhase()


def _failures(failures: Sequence[Any]) -> str:
    """The distinct reasons of the workflow's failures (each wraps a reply's ``Error``)."""
    reasons = set()
    for f in failures:
        error = f.args[0] if getattr(f, "args", None) else f
        reasons.add(str(getattr(error, "reason", error)))
    return "; ".join(sorted(reasons))


def secure_sum(
    grid: Any,
    settings: SecAggSettings,
    counts: Mapping[int, int],
    shapes: Mapping[str, tuple[int, ...]],
    config: Mapping[str, Any],
    *,
    weight: float,
    timeout: float,
    round_id: int = 0,
) -> SecureSum:
    r"""Run Flower's SecAgg+ over the nodes of ``counts`` and return the sum of their uploads.

    Parameters
    ----------
    grid : flwr Grid
    settings : SecAggSettings
    counts : dict of int to int
        Node -> :math:`k_n`, the number of accepted rows whose mean it holds.
    shapes : dict of str to tuple
        The shape of one upload per key (the order of the sorted keys is the wire order).
    config : dict
        The fit instruction's configuration (job, round, phase: the node checks it).
    weight : float
        :math:`W` (:func:`max_weight`).
    timeout : float
        Seconds each stage waits when ``settings.timeout`` is None.
    round_id : int
        The workflow's round number (its messages' ``group_id``).
    """
    from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
    from flwr.common import parameters_to_ndarrays
    from flwr.server.compat.legacy_context import LegacyContext
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
    from flwr.server.workflow.constant import Key as WorkflowKey

    nodes = sorted(int(n) for n in counts)
    settings.check_capacity(len(nodes), weight)
    if len(nodes) < 2:
        return SecureSum(
            None, [], f"secure aggregation needs at least 2 nodes with uploads, got {len(nodes)}"
        )
    strategy = _strategy(grid, nodes, config)
    state = RecordDict(
        {
            MAIN_CONFIGS_RECORD: ConfigRecord({WorkflowKey.CURRENT_ROUND: int(round_id)}),
            MAIN_PARAMS_RECORD: ArrayRecord(),
        }
    )
    context = LegacyContext(
        Context(run_id=0, node_id=0, node_config={}, state=state, run_config={}),
        strategy=strategy,
    )
    settings.workflow(weight, timeout)(grid, context)
    if strategy.results is None:
        why = _failures(strategy.failures)
        return SecureSum(
            None,
            [],
            "Flower's SecAgg+ halted (fewer live nodes than its reconstruction threshold, or "
            f"fewer than 2 nodes){': ' + why if why else ''}",
        )
    contributed = {int(proxy.node_id): int(res.num_examples) for proxy, res in strategy.results}
    wrong = {n: k for n, k in contributed.items() if counts.get(n) != k}
    if wrong:
        raise ParameterError(f"nodes reported other contribution counts {wrong}; sent {counts}")
    count = sum(contributed.values())
    mean = parameters_to_ndarrays(strategy.results[0][1].parameters)
    keys = sorted(shapes)
    if len(mean) != len(keys):
        return SecureSum(None, [], f"the aggregate has {len(mean)} arrays; expected {len(keys)}")
    total = {k: np.asarray(v, dtype=float) * count for k, v in zip(keys, mean, strict=True)}
    return SecureSum(total, sorted(contributed), _failures(strategy.failures))


class Contribution:
    """A node's contribution to the secure sum of one phase, kept in its ``context.state``
    between riemfl's message and the SecAgg+ stage that asks for it.

    Parameters
    ----------
    state : flwr.app.RecordDict
        ``context.state`` of the node.
    job : str
    """

    def __init__(self, state: Any, job: str) -> None:
        self._state, self.job = state, job
        self._arrays_key = f"riemfl.{job}.secagg"
        self._meta_key = f"riemfl.{job}.secagg.meta"

    def put(self, r: int, phase: int, mean: Mapping[str, np.ndarray], count: int) -> None:
        """Keep the mean of ``count`` accepted rows of round ``r``, phase ``phase``."""
        from flwr.app import Array, ArrayRecord, ConfigRecord

        self._state[self._arrays_key] = ArrayRecord(
            {k: Array(np.ascontiguousarray(v, dtype=float)) for k, v in mean.items()}
        )
        self._state[self._meta_key] = ConfigRecord(
            {"round": int(r), "phase": int(phase), "count": int(count)}
        )

    def take(self, r: int, phase: int) -> tuple[dict[str, np.ndarray], int]:
        """The kept mean and count of round ``r``, phase ``phase`` (then forgotten).

        Raises
        ------
        ProtocolError
            When this node holds no contribution of that round and phase.
        """
        meta = dict(self._state[self._meta_key]) if self._meta_key in self._state else {}
        if (meta.get("round"), meta.get("phase")) != (int(r), int(phase)) or not meta["count"]:
            raise ProtocolError(
                f"job {self.job!r}: SecAgg+ asks for the upload of round {r}, phase {phase}; "
                f"this node holds {meta or 'none'}"
            )
        arrays = {k: np.array(v.numpy()) for k, v in self._state[self._arrays_key].items()}
        self._state[self._meta_key]["count"] = 0  # taken: a second request is refused
        return arrays, int(meta["count"])


def _clipped(uploads: Mapping[str, np.ndarray], m: int, c: float) -> dict[int, str]:
    """Stack row -> why SecAgg+ would clip it: an entry beyond ``c`` in absolute value."""
    bad: dict[int, str] = {}
    for key in sorted(uploads):
        peaks = np.abs(np.asarray(uploads[key]).reshape(m, -1)).max(1, initial=0.0)
        for j in np.flatnonzero(peaks > c):
            bad.setdefault(
                int(j),
                f"upload {key!r} has an entry of absolute value {peaks[j]:.6g} beyond the "
                f"secure aggregation's clipping_range {c:g}",
            )
    return bad


def contribute(
    job: Any,
    state: Any,
    r: int,
    phase: int,
    message: Mapping[str, Any],
    uploads: Mapping[str, np.ndarray],
    clients: Sequence[int],
) -> tuple[list[int], dict[int, str]]:
    """A node's side of a secure phase: check its clients' upload rows, keep their mean.

    The node runs the server's checks of a plain job
    (:func:`~riemfl.adapters.flower.checks.upload_verdicts`) and refuses rows with an entry
    beyond the job's ``clipping_range``; the mean and number of the other rows wait in its
    ``context.state`` (:class:`Contribution`) for the SecAgg+ stage that asks for them.

    Parameters
    ----------
    job : SyncJob
        With ``secagg`` set.
    state : flwr.app.RecordDict
        The node's ``context.state``.
    r, phase : int
    message : dict
        The phase's broadcast (its ``x`` is the base of tangent uploads).
    uploads : dict of arrays
        The stacked uploads of ``clients``.
    clients : sequence of int

    Returns
    -------
    accepted : list of int
        The clients whose rows are in the mean.
    refused : dict of int to str
        Client -> why its row was refused.
    """
    if job.secagg is None:
        raise ProtocolError(
            f"job {job.name!r}: the server asks for secure aggregation, but this node's job has "
            "no secagg settings (the server and the nodes must build the same job)"
        )
    m = len(clients)
    problem = job.resolved
    expected = job.algorithm.upload_shapes(problem, phase)
    why = check_upload_arrays(uploads, expected, m) if m else None
    if why is not None:
        bad = dict.fromkeys(range(m), why)
    else:
        base = to_numpy(message["x"]) if "x" in message else None
        bad = upload_verdicts(
            job.algorithm, problem.manifold, phase, uploads, job.atol, base, job.upload_kinds
        )
        for j, reason in _clipped(uploads, m, job.secagg.clipping_range).items():
            bad.setdefault(j, reason)
    good = [j for j in range(m) if j not in bad]
    mean = {k: np.asarray(v)[good].mean(0) for k, v in uploads.items()} if good else {}
    Contribution(state, job.name).put(r, phase, mean, len(good))
    return [int(clients[j]) for j in good], {int(clients[j]): bad[j] for j in sorted(bad)}

r"""The interface between federated algorithms and the engines that run them.

A synchronous algorithm is a sequence of *phases* per round. In each phase the server broadcasts
a message, every participating client runs a pure client rule on it and uploads arrays, and the
server runs a pure server rule on the uploads. Client rules work on a **stack** of clients at
once (leading axis = participating clients), so that a problem whose clients share shapes is
served by one batched manifold call per local step instead of a Python loop per client; the
engine falls back to one client at a time only to isolate a client whose computation fails.

The rules only use the manifold contract (:class:`riemfl.manifolds.Manifold`), so a manifold a
user writes runs with every algorithm here.

State
    *server state*: a dict of arrays/floats held by the server.
    *client state*: a dict of arrays with leading axis ``n_clients`` (one row per client), held by
    the engine; a client rule receives the rows of the participating clients and returns their
    new rows. Clients dropped in a round keep their old rows.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._validation import integer
from ..errors import ParameterError
from ..manifolds.base import Manifold
from ..problems.base import FederatedProblem
from .aggregation import PlainSum
from .serialise import describe_parameters

Array = Any
State = dict[str, Any]

__all__ = ["Operators", "ClientContext", "SyncAlgorithm", "check_step_size", "check_local_steps"]


def check_step_size(name: str, value: float, *, allow_zero: bool = False) -> float:
    """Return ``value`` as float, or raise :class:`ParameterError` unless finite and > 0."""
    v = float(value)
    ok = np.isfinite(v) and (v >= 0 if allow_zero else v > 0)
    if not ok:
        expected = ">= 0" if allow_zero else "> 0"
        raise ParameterError(f"{name} must be a finite number {expected}, got {value!r}")
    return v


def check_local_steps(value: int) -> int:
    """Return ``value`` as int, or raise :class:`ParameterError` unless an integer >= 1."""
    return integer(value, "local_steps", minimum=1)


@dataclass(frozen=True)
class Operators:
    r"""The geometric operators a tangent-space algorithm uses: exact or approximate.

    ``"exact"``: :math:`\mathrm{Exp}`, :math:`\mathrm{Log}` and parallel transport (the manifold's
    vector transport where it has no parallel transport, e.g. Stiefel with the embedded metric;
    :attr:`transport_name` records which one ran). ``"approximate"``: the manifold's retraction,
    inverse retraction and vector transport (on Stiefel, Li & Ma's choice is the QR retraction,
    its inverse and projection transport: ``Stiefel(d, k, retraction="qr")``).
    """

    kind: Literal["exact", "approximate"] = "approximate"

    def __post_init__(self) -> None:
        if self.kind not in ("exact", "approximate"):
            raise ParameterError(f"operators must be 'exact' or 'approximate', got {self.kind!r}")

    def retract(self, manifold: Manifold, x: Array, u: Array) -> Array:
        """Move from x along u: Exp_x(u) (exact) or R_x(u) (approximate)."""
        return manifold.exp(x, u) if self.kind == "exact" else manifold.retract(x, u)

    def inverse_retract(self, manifold: Manifold, x: Array, y: Array) -> Array:
        """The inverse of :meth:`retract`, the tangent vector at x pointing to y: Log_x(y) or
        R_x^{-1}(y)."""
        return manifold.log(x, y) if self.kind == "exact" else manifold.inverse_retract(x, y)

    def transport_name(self, manifold: Manifold) -> str:
        if self.kind == "exact" and manifold.supports("parallel_transport")[0]:
            return "parallel_transport"
        return "transport"

    def transport(self, manifold: Manifold, x: Array, y: Array, u: Array) -> Array:
        """Carry u from T_x M to T_y M."""
        if self.transport_name(manifold) == "parallel_transport":
            return manifold.parallel_transport(x, y, u)
        return manifold.transport(x, y, u)

    def names(self, manifold: Manifold) -> dict[str, str]:
        """Which manifold methods run (for histories: CPU-time claims depend on it)."""
        exact = self.kind == "exact"
        return {
            "retract": "exp" if exact else "retract",
            "inverse_retract": "log" if exact else "inverse_retract",
            "transport": self.transport_name(manifold),
        }

    def require(self, manifold: Manifold) -> None:
        """Raise :class:`ParameterError` if the manifold lacks an operator this set needs."""
        for method in self.names(manifold).values():
            ok, why = manifold.supports(method)
            if not ok:
                hint = "operators='approximate' or " if self.kind == "exact" else ""
                raise ParameterError(
                    f"{self.kind} operators need {manifold.name}.{method}: {why}; "
                    f"use {hint}a manifold that implements it"
                )


@dataclass
class ClientContext:
    """What a client rule may use besides its message and state: the oracle, batches, its ids.

    Attributes
    ----------
    problem : FederatedProblem
    clients : numpy.ndarray of int
        The participating clients, in stack order.
    batches : int array of shape (len(clients), n_steps, b), or None
        Mini-batch sample indices drawn by the engine before the round (so that a retry of one
        client reuses exactly its batches); ``None`` for full local gradients.
    """

    problem: FederatedProblem
    clients: np.ndarray
    batches: np.ndarray | None = None

    @property
    def manifold(self) -> Manifold:
        return self.problem.manifold

    def __post_init__(self) -> None:
        c = np.asarray(self.clients)
        first = int(c[0]) if c.size else 0
        consecutive = c.ndim == 1 and bool(np.all(c == np.arange(first, first + c.size)))
        # consecutive clients (all of them in order, or a block of them): problems recognise a
        # range and use views of their per-client arrays instead of gathering copies
        self._oracle_clients = range(first, first + c.size) if consecutive else self.clients

    def egrads(self, xs: Array, step: int | None) -> Array:
        """Stacked Euclidean gradients at ``xs``: on the batch of local step ``step``.

        ``step=None`` asks for the full local gradient even in mini-batch mode (RFedSVRG's
        anchor gradient).
        """
        batch = None if self.batches is None or step is None else self.batches[:, step]
        return self.problem.client_egrads(self._oracle_clients, xs, batch)

    def rgrads(self, xs: Array, step: int | None) -> Array:
        """Stacked Riemannian gradients ``egrad_to_rgrad(xs, egrads(xs, step))``."""
        return self.manifold.egrad_to_rgrad(xs, self.egrads(xs, step))

    def subset(self, rows: Sequence[int]) -> ClientContext:
        """The context of a subset of the stack (rows in stack order)."""
        rows = np.asarray(rows, dtype=np.intp)
        return ClientContext(
            self.problem,
            self.clients[rows],
            None if self.batches is None else self.batches[rows],
        )


class SyncAlgorithm(abc.ABC):
    """A synchronous federated algorithm: per round, ``n_phases`` broadcast/client/server steps.

    Subclasses set :attr:`name`, :attr:`n_phases` and :attr:`local_steps` and implement
    :meth:`init`, :meth:`client_step`, :meth:`server_step` and :meth:`output`.
    """

    name: str = "algorithm"
    #: the phase whose server step moves the model; a rule with several phases whose model
    #: step is not phase 0 sets it (RFedSVRG: 1, after the anchor gradients of phase 0)
    model_phase: int = 0
    #: the geometric operators of a tangent-space rule (exact or approximate); None for a rule
    #: that does not move along tangent vectors (RFedProj: metric projections only)
    operators: Operators | None = None
    n_phases: int = 1
    local_steps: int = 1

    def validate(self, problem: FederatedProblem) -> None:  # noqa: B027 - optional hook
        """Raise :class:`ParameterError` if this algorithm cannot run on ``problem``."""

    @abc.abstractmethod
    def init(self, problem: FederatedProblem, x0: Array) -> tuple[State, State]:
        """Initial server state and client state (arrays with leading axis n_clients)."""

    def broadcast(self, server: State, phase: int) -> State:
        """The message of ``phase`` sent to every participating client (default: ``x``)."""
        return {"x": server["x"]}

    @abc.abstractmethod
    def client_step(
        self, ctx: ClientContext, phase: int, message: State, clients: State
    ) -> tuple[State, State]:
        """Run the client rule of ``phase`` on a stack; return (uploads, new client rows).

        Every upload is an array whose leading axis is the stack; the engine checks each row
        (shape, finite values) and drops failing clients before the server step.
        """

    def server_step(
        self, manifold: Manifold, server: State, phase: int, message: State, uploads: State
    ) -> State:
        """Aggregate the uploads of the surviving clients; return the new server state.

        The default serves sum-only phases: :meth:`server_step_from_sum` of the stack's sum.
        A rule with a phase that needs each upload overrides it.
        """
        if not self.sum_only(phase):
            raise NotImplementedError(f"{self.name}: no server step for phase {phase}")
        total, count = PlainSum().aggregate(uploads, phase)
        return self.server_step_from_sum(manifold, server, phase, message, total, count)

    def sum_only(self, phase: int) -> bool:
        """Whether the server step of ``phase`` needs only the sum of the uploads and their
        number (default: False).

        The engines then call :meth:`server_step_from_sum` with what an aggregator hands them
        (:mod:`riemfl.federated.aggregation`), never the individual uploads, so such a phase can
        run under secure aggregation or with noise added to the sum.
        """
        return False

    def wire_dtypes(self, phase: int) -> dict[str, Any]:
        """The upload keys of ``phase`` whose arrays are not in the model's floating dtype, and
        their exact dtype (default: none). A compressed payload declares its packed bytes,
        indices and half-precision values here (:mod:`riemfl.federated.compressed`); the
        engines check each row against it."""
        return {}

    def decode(self, message: State, uploads: State, phase: int) -> State:
        """The uploads the server step reads, from the accepted ``uploads`` of ``phase`` as they
        travelled (default: the same). A compressed rule decodes its payloads here; the uplink
        is counted before decoding."""
        return uploads

    def point_uploads(self, phase: int) -> str | None:
        """The upload key of ``phase`` whose rows are points of the manifold, in a phase whose
        server step needs each upload (default: None, no such key).

        A robust aggregator (:mod:`riemfl.federated.robust`) replaces such a stack by one
        robust centre (:func:`~riemfl.federated.aggregation.server_update`): on the manifold
        with geodesic distances, or of the updates :meth:`update_of` maps the points to.
        """
        return None

    def sum_only_hint(self) -> str:
        """How to configure this rule so that every phase is sum-only, for the message that
        refuses it under secure aggregation or differential privacy ("" when there is no such
        setting, the default)."""
        return ""

    def server_step_from_sum(
        self,
        manifold: Manifold,
        server: State,
        phase: int,
        message: State,
        total: State,
        count: int,
    ) -> State:
        r"""The server step of a sum-only phase from :math:`\sum_j u_j` (per upload key) over
        the ``count`` accepted uploads."""
        raise NotImplementedError(
            f"{self.name}: the server step of phase {phase} needs each upload, not only their sum"
        )

    #: where the client update that differential privacy clips lives
    #: (:mod:`riemfl.federated.privacy`): ``"tangent"`` (tangent vectors at the broadcast
    #: ``x``), ``"ambient"`` (arrays of the ambient space), or None (not declared: refused)
    privacy_space: str | None = None

    def update_of(self, message: State, uploads: State, phase: int) -> State:
        """The stacked client updates that differential privacy clips, from the uploads of
        ``phase`` (default: the uploads themselves)."""
        return uploads

    def upload_of(self, message: State, updates: State, phase: int) -> State:
        """The uploads that carry the (clipped) ``updates``: the inverse of :meth:`update_of`
        (default: the updates themselves)."""
        return updates

    def client_finish(self, message: State, clients: State) -> State:
        """Rows of the round's survivors after the new global model arrives (default: same)."""
        return clients

    @abc.abstractmethod
    def output(self, server: State) -> Array:
        """The current global model as a point of the manifold (metrics are evaluated here)."""

    def upload_shapes(self, problem: FederatedProblem, phase: int) -> dict[str, tuple[int, ...]]:
        """Shape of one client's upload per key (default: one point, key ``x``)."""
        return {"x": tuple(problem.manifold.point_shape)}

    def describe(self) -> dict[str, Any]:
        """JSON-ready parameters (for histories and checkpoint compatibility checks)."""
        return describe_parameters(self)

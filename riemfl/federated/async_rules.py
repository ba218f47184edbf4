r"""Server rules of asynchronous federated learning, over the manifold contract.

When client i's update arrives, the server holds the current model :math:`x^\tau` (version
:math:`\tau`); the client trained from the older version :math:`x^t` (staleness
:math:`\tau - t`) and produced the local model :math:`x_i`. Notation (riemfl's; how it maps to
the papers' symbols is in ``docs/federated/async/index.md``):

* update :math:`u = R^{-1}_{x^t}(x_i)` (Euclidean: :math:`x_i - x^t`), a tangent vector at the
  client's base point;
* global drift :math:`g = R^{-1}_{x^t}(x^\tau)` (Euclidean: :math:`x^\tau - x^t`);
* trusted update (ASGD, "TAN"): :math:`\Gamma_{x^t \to x^\tau} u` (Euclidean: u);
* trusted position (FedAsync, "POS"): :math:`R^{-1}_{x^\tau}(x_i)` (Euclidean:
  :math:`x_i - x^\tau = u - g`).

A rule turns this into a step :math:`x^{\tau+1} = R_{x^\tau}(\text{rate}\cdot\text{direction})`
(``R`` = Exp or the retraction, per ``operators``). On Euclidean space every rule equals its
paper's formula exactly (tests). The rate is :math:`\eta_g w_i` (Licudi et al. 2025, App. B.1:
"contributions from each client are weighted by proportion of dataset", :math:`w_i = n_i /
\sum_j n_j`) times an optional staleness function.

Rules: :class:`FedAsync`, :class:`ASGD`, :class:`FedBuff` (sum-only buffer, ambient step and
projection), :class:`DCASGD`, :class:`AsyncFedED`, and the orthogonal correction family
:class:`OrthoCorrect` (OrthoGrad, OrthoPos, OrthoStrict, :class:`OrthoDyn`), :func:`OrthoDC`,
:func:`FedOrtho`, :func:`FedGS`.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import integer
from ..backend import ops_for
from ..errors import ParameterError, ProjectionError
from ..manifolds.base import Manifold
from .aggregation import Aggregator
from .algorithm import Operators, check_step_size
from .buffer_compression import BufferCompression, buffer_compression
from .buffer_server import (
    BUFFER_KEY,
    AggregatorStart,
    AmbientOptimizer,
    StackBuffer,
    check_buffer_aggregator,
)
from .compression import Compressor
from .fingerprint import settings
from .orthodyn_switch import UpdateNormSwitch
from .privacy import DPSettings
from .privacy_buffer import BufferPrivacy
from .rule_state import Checkpointable, Commit, StateReader, commit_all, copy_array, setter
from .serialise import describe_parameters
from .server_optimizers import ServerOptimizer

Array = Any

__all__ = [
    "Arrival",
    "AsyncRule",
    "DirectionRule",
    "staleness_function",
    "FedAsync",
    "ASGD",
    "FedBuff",
    "SumBuffer",
    "proximal_radius",
    "require_proximal_radius",
    "DCASGD",
    "AsyncFedED",
    "OrthoCorrect",
    "OrthoDyn",
    "OrthoDC",
    "FedOrtho",
    "FedGS",
    "OrthoGrad",
    "OrthoPos",
    "OrthoStrict",
    "switch_schedule",
]


@dataclass
class Arrival:
    """One client update as the server sees it when it arrives.

    Attributes
    ----------
    client : int
    base : array
        :math:`x^t`, the global model the client trained from.
    local : array
        :math:`x_i`, the client's locally trained model.
    current : array
        :math:`x^\\tau`, the global model now.
    staleness : int
        :math:`\\tau - t` in server steps.
    weight : float
        :math:`w_i` (dataset share by default).
    version : int
        :math:`\\tau`.
    """

    client: int
    base: Array
    local: Array
    current: Array
    staleness: int
    weight: float
    version: int


def staleness_function(kind: str | Callable[[int], float] = "constant", **kw: float):
    r"""FedAsync's staleness functions (Xie et al. 2020), :math:`s(d)` of the staleness d.

    ``"constant"``: 1; ``"polynomial"`` (``a``, default 0.5): :math:`(d + 1)^{-a}`; ``"hinge"``
    (``a`` = 10, ``b`` = 4): 1 if :math:`d \le b`, else :math:`1 / (a (d - b) + 1)`. A callable
    is returned unchanged.
    """
    if callable(kind):
        return kind
    if kind == "constant":
        return lambda d: 1.0
    if kind == "polynomial":
        a = float(kw.get("a", 0.5))
        return lambda d: (d + 1.0) ** (-a)
    if kind == "hinge":
        a, b = float(kw.get("a", 10.0)), float(kw.get("b", 4.0))
        return lambda d: 1.0 if d <= b else 1.0 / (a * (d - b) + 1.0)
    raise ParameterError(
        f"staleness function must be 'constant', 'polynomial', 'hinge' or a callable, got {kind!r}"
    )


class AsyncRule(Checkpointable, abc.ABC):
    """A server rule: ``apply`` returns the new global model, or ``None`` (no server step).

    A rule's mutable run state (buffers, running averages, counters and diagnostics: what
    :meth:`reset` initialises and :meth:`apply` changes) travels through :meth:`state_dict` and
    :meth:`load_state_dict`, so that a checkpointed run resumes bit for bit.
    """

    name: str = "rule"
    #: whether the server step reads only the sum of the updates received, never one update
    #: (then it can run under secure aggregation: :mod:`riemfl.federated.aggregation`)
    sum_only: bool = False
    #: how many arrivals a server step consumes (FedBuff: its buffer's size)
    buffer_size: int = 1

    def __init__(
        self, server_lr: float = 1.0, operators: str = "approximate", staleness: Any = "constant"
    ) -> None:
        self.server_lr = check_step_size("server_lr", server_lr)
        self.operators = Operators(operators)
        self.staleness = staleness
        self._s = staleness_function(staleness)

    def validate(self, manifold: Manifold) -> None:
        """Raise :class:`ParameterError` if the manifold lacks a map this rule needs."""
        self.operators.require(manifold)

    def seed(self, seq: np.random.SeedSequence) -> None:  # noqa: B027 - optional hook
        """Derive the rule's random generators (e.g. FedBuff's privacy noise) from the run's
        seed sequence; the engine calls it after :meth:`reset`."""

    def state_dict(self) -> dict[str, Any]:
        """The rule's mutable run state, for a checkpoint.

        Returns
        -------
        dict
            A snapshot (arrays copied) made only of dict (str keys), list, None, bool, int,
            float, str, numpy arrays and torch tensors; ``{}`` for a rule without state.
        """
        return super().state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict` of a rule with the same constructor arguments.

        Call it after :meth:`reset` with the run's manifold and number of clients; every later
        :meth:`apply` (and ``output``, ``local_epochs``) then returns exactly what the saved
        rule would have returned. Nothing changes when the state is refused.

        Raises
        ------
        CheckpointError
            For a missing or extra key, or a value of the wrong kind or shape (the message names
            the rule, the key, what was expected and what was found).
        """
        super().load_state_dict(state)

    def _state_owner(self) -> str:
        return f"rule {self.name!r} ({type(self).__name__})"

    def reset(self, manifold: Manifold, n_clients: int) -> None:  # noqa: B027 - optional hook
        """Clear per-run state (buffers, running averages) before a run."""

    def local_epochs(self, client: int) -> int | None:
        """The number of local epochs client ``client`` runs next; ``None`` (the default): the
        trainer's own number. A rule that schedules its clients' work (AsyncFedED) overrides it.
        """
        return None

    def output(self, current: Array) -> Array:
        """The model the run reports, given the server's current model: ``current`` itself (the
        default), or e.g. a running average of the iterates (SWA)."""
        return current

    def row(self) -> dict[str, Any]:
        """Extra columns for every recorded row of the history (the default: none; a private
        FedBuff: its ``epsilon``)."""
        return {}

    def privacy_delta(self) -> float | None:
        r"""The :math:`\delta` at which a private rule's ``epsilon`` column is reported; ``None``
        (the default) for a rule without differential privacy."""
        return None

    def upload_nbytes(self, shape: tuple[int, ...], dtype: Any) -> int | None:
        """Bytes of one client's upload of ``shape`` and numpy ``dtype`` as it travels; None
        (the default): the dense array's (FedBuff with a compressor: the payload's)."""
        return None

    def rate(self, a: Arrival) -> float:
        r""":math:`\eta_g\, w_i\, s(\tau - t)`."""
        return self.server_lr * a.weight * float(self._s(a.staleness))

    @abc.abstractmethod
    def apply(self, manifold: Manifold, a: Arrival) -> Array | None:
        """The new global model after this arrival, or ``None`` when the server does not step."""

    # -------------------------------------------------------------- shared geometry
    def update(self, m: Manifold, a: Arrival) -> Array:
        """u: the client's update as a tangent vector at its base point."""
        return self.operators.inverse_retract(m, a.base, a.local)

    def trusted_update(self, m: Manifold, a: Arrival, u: Array) -> Array:
        """ASGD's direction: u carried to the current model."""
        return self.operators.transport(m, a.base, a.current, u)

    def trusted_position(self, m: Manifold, a: Arrival) -> Array:
        """FedAsync's direction: towards the client's local model from the current one."""
        return self.operators.inverse_retract(m, a.current, a.local)

    def step(self, m: Manifold, a: Arrival, direction: Array) -> Array:
        return self.operators.retract(m, a.current, self.rate(a) * direction)

    def describe(self) -> dict[str, Any]:
        """JSON-ready parameters (for histories and checkpoint compatibility checks)."""
        return describe_parameters(self)


class DirectionRule(AsyncRule):
    r"""A rule whose server step is :math:`x^{\tau+1} = R_{x^\tau}(\text{rate}\cdot d)` with a
    direction d at the current model: FedAsync, ASGD and the OrthoCorrect family. AsyncCurve
    uses such a rule for its curve's end point (:meth:`direction`)."""

    @abc.abstractmethod
    def direction(self, manifold: Manifold, a: Arrival) -> Array:
        r"""The update at the current model :math:`x^\tau` before the rate."""

    def apply(self, manifold: Manifold, a: Arrival) -> Array:
        return self.step(manifold, a, self.direction(manifold, a))


class FedAsync(DirectionRule):
    r"""FedAsync (Xie et al. 2020), "trusted position": mix the local model into the current one.

    Euclidean (Licudi 2025 (TR), eq. (4), with mixing weight :math:`\eta_g w_i`): :math:`x^{\tau+1}
    = x^\tau + \eta_g w_i s(\tau - t)\,(x_i - x^\tau)`. On a manifold: :math:`x^{\tau+1} =
    R_{x^\tau}(\eta_g w_i s\, R^{-1}_{x^\tau}(x_i))` (Licudi et al. 2025, Sec. 2.2, "ASYNCPOS").
    Neither Licudi paper writes FedAsync's mixing weight; riemfl uses :math:`\eta_g w_i` because
    their App. B.1 weights every method by dataset share and their Table 3 tunes FedAsync's
    :math:`\eta_g` up to 5, which is a weight in (0, 1] only when multiplied by :math:`w_i` (about
    1/30). ``staleness`` selects s: ``"constant"`` (the Licudi papers; no staleness function is
    mentioned there), ``"polynomial"``, ``"hinge"`` (Xie et al. 2020).
    """

    name = "fedasync"

    def direction(self, manifold, a):
        """The update at the current model before the rate: towards the local model."""
        return self.trusted_position(manifold, a)


class ASGD(DirectionRule):
    r"""Asynchronous SGD (Dean et al. 2012), "trusted update": apply the stale update as is.

    Euclidean (Licudi 2025 (TR), eq. (5), with pseudo-gradients): :math:`x^{\tau+1} = x^\tau +
    \eta_g w_i (x_i - x^t)`; on a manifold the update is transported to :math:`x^\tau`
    (Licudi et al. 2025, Sec. 2.2, "ASYNCTAN").
    """

    name = "asgd"

    def direction(self, manifold, a):
        """The update at the current model before the rate: the transported client update."""
        return self.trusted_update(manifold, a, self.update(manifold, a))


class OrthoCorrect(DirectionRule):
    r"""Orthogonal delay correction (Licudi 2025 (TR), Sec. 3; OrthoDC, Licudi et al. 2025, Alg. 3).

    With u the update and g the drift (module docstring), the update *conflicts* with the drift
    when :math:`\cos(u, g) \le \vartheta`; then its component along the drift is removed,

    .. math::  u' = u - \frac{\langle u, g\rangle}{\langle g, g\rangle}\, g, \qquad
               x^{\tau+1} = R_{x^\tau}(\text{rate}\;\Gamma_{x^t\to x^\tau} u');

    otherwise the base rule applies, interpolating between trusting the update (:math:`\alpha = 0`,
    ASGD) and trusting the position (:math:`\alpha = 1`, FedAsync): direction :math:`(1 -
    \alpha)\,\Gamma u + \alpha\, R^{-1}_{x^\tau}(x_i)`, which on Euclidean space is :math:`u -
    \alpha g` (Licudi 2025 (TR), eq. (15)). Neither paper handles a zero drift or a zero update;
    riemfl skips the projection on zero drift, and counts a zero update as orthogonal to the drift
    (cosine 0), so for :math:`\vartheta \ge 0` it is projected to itself and the model does not move
    (as OrthoDC's :math:`\pi(\cdot,\cdot,0) = 0` in Licudi et al. 2025, Alg. 3). Named settings:
    OrthoGrad (:math:`\alpha = \vartheta = 0`), OrthoPos (:math:`\alpha = 1, \vartheta = 0`),
    OrthoStrict (:math:`\vartheta = 1`: always orthogonal, so ASGD and FedAsync coincide).
    """

    name = "orthocorrect"
    _state_counters = ("projections",)

    def __init__(
        self,
        alpha: float = 0.0,
        vartheta: float = 0.0,
        server_lr: float = 1.0,
        operators: str = "approximate",
        staleness: Any = "constant",
    ) -> None:
        super().__init__(server_lr, operators, staleness)
        self.alpha = float(alpha)
        self.vartheta = check_vartheta(vartheta)
        self.projections = 0  # how many arrivals took the conflict branch (diagnostic)

    def reset(self, manifold, n_clients):
        self.projections = 0

    def settings(self, a: Arrival) -> tuple[float, float]:
        """(alpha, vartheta) for this arrival (constant here; scheduled in :class:`OrthoDyn`)."""
        return self.alpha, self.vartheta

    def direction(self, manifold: Manifold, a: Arrival) -> Array:
        r"""The corrected update at the current model (before the rate): the server moves to
        ``R_{x^tau}(rate * direction)``; ``R_{x^tau}(direction)`` is the corrected end point
        (AsyncCurve's :math:`\hat\Theta_i^\tau`)."""
        alpha, vartheta = self.settings(a)
        u = self.update(manifold, a)
        g = self.operators.inverse_retract(manifold, a.base, a.current)
        uu = float(manifold.inner(a.base, u, u))
        gg = float(manifold.inner(a.base, g, g))
        if gg > 0:
            ug = float(manifold.inner(a.base, u, g)) if uu > 0 else 0.0
            # the zero update is orthogonal to the drift (cos = 0): with vartheta >= 0 it is
            # "corrected" to itself, so the server does not move, as OrthoDC's pi(., ., 0) = 0
            if (ug / math.sqrt(uu * gg) if uu > 0 else 0.0) <= vartheta:
                self.projections += 1
                return self.trusted_update(manifold, a, u - (ug / gg) * g)
        direction = self.trusted_update(manifold, a, u)
        if alpha:
            position = self.trusted_position(manifold, a)
            direction = (1.0 - alpha) * direction + alpha * position
        return direction


def switch_schedule(switch_version: int, before=(0.0, 0.0), after=(1.0, 0.0)):
    """OrthoDyn schedule: ``before`` (OrthoGrad) until server version ``switch_version``, then
    ``after`` (OrthoPos), as (alpha, vartheta) pairs (Licudi 2025 (TR), eq. (16), leaves the
    switching statistic open; a fixed server version is riemfl's simplest choice)."""
    switch_version = integer(switch_version, "switch_schedule: switch_version", minimum=0)

    def schedule(a: Arrival) -> tuple[float, float]:
        return before if a.version < switch_version else after

    return schedule


class OrthoDyn(OrthoCorrect):
    """OrthoCorrect with (alpha, vartheta) chosen per arrival by ``schedule(arrival)``.

    Licudi 2025 (TR), eq. (16), schedules OrthoGrad early and OrthoPos late without fixing the
    statistic, threshold or whether an ASGD phase sits between them; any callable of the
    :class:`Arrival` works. The default switches on a statistic of the run, the clients' update
    size relative to its initial size, as a proxy for closeness to convergence
    (:class:`~riemfl.federated.orthodyn_switch.UpdateNormSwitch`); :func:`switch_schedule`
    switches at a fixed server version.
    """

    name = "orthodyn"
    _state_helpers = ("schedule",)  # a schedule object with a state of its own

    def __init__(
        self,
        schedule: Callable[[Arrival], tuple[float, float]] | None = None,
        server_lr: float = 1.0,
        operators: str = "approximate",
        staleness: Any = "constant",
    ) -> None:
        super().__init__(0.0, 0.0, server_lr, operators, staleness)
        self.schedule = schedule if schedule is not None else UpdateNormSwitch()

    def settings(self, a):
        alpha, vartheta = self.schedule(a)
        return float(alpha), check_vartheta(vartheta)


def OrthoGrad(**kw: Any) -> OrthoCorrect:  # noqa: N802 - the paper's name
    """OrthoCorrect with alpha = vartheta = 0 (gradient surgery against the drift)."""
    return _named(OrthoCorrect(0.0, 0.0, **kw), "orthograd")


def OrthoPos(**kw: Any) -> OrthoCorrect:  # noqa: N802
    """OrthoCorrect with alpha = 1, vartheta = 0."""
    return _named(OrthoCorrect(1.0, 0.0, **kw), "orthopos")


def OrthoStrict(alpha: float = 1.0, **kw: Any) -> OrthoCorrect:  # noqa: N802
    """OrthoCorrect with vartheta = 1: always keep only the part orthogonal to the drift."""
    return _named(OrthoCorrect(alpha, 1.0, **kw), "orthostrict")


def OrthoDC(vartheta: float = 1.0, base: str = "position", **kw: Any) -> OrthoCorrect:  # noqa: N802
    """OrthoDC(vartheta) (Licudi et al. 2025, Sec. 3, Alg. 3) over a base rule.

    The paper does not say what the non-conflict branch re-applies: read literally, its framework
    re-applies the raw update at the current model (``"update"``, the ASGD base); read as
    "FedAsync + OrthoDC", as its FedOrtho and FedGS baselines are defined (Sec. 4.1), it keeps the
    learned position (``"position"``, the FedAsync base, the technical report's OrthoPos). riemfl
    defaults to ``"position"``; the choice matters only for vartheta < 1.
    """
    if base not in ("position", "update"):
        raise ParameterError(f"base must be 'position' or 'update', got {base!r}")
    return _named(OrthoCorrect(1.0 if base == "position" else 0.0, vartheta, **kw), "orthodc")


def FedOrtho(**kw: Any) -> OrthoCorrect:  # noqa: N802
    """FedAsync + OrthoDC(vartheta = 1) (Licudi et al. 2025, Sec. 4.1, ablation)."""
    return _named(OrthoDC(1.0, "position", **kw), "fedortho")


def FedGS(**kw: Any) -> OrthoCorrect:  # noqa: N802
    """FedAsync + OrthoDC(vartheta = 0), gradient surgery only on conflict.

    Licudi et al. 2025, Sec. 4.1, ablation.
    """
    return _named(OrthoDC(0.0, "position", **kw), "fedgs")


def _named(rule: OrthoCorrect, name: str) -> OrthoCorrect:
    rule.name = name
    return rule


def check_vartheta(v: float) -> float:
    """Return the OrthoDC strength ``v`` as float, or raise :class:`ParameterError` unless it
    lies in [-1, 1]."""
    v = float(v)
    if not -1.0 <= v <= 1.0:
        raise ParameterError(f"vartheta must be in [-1, 1], got {v!r}")
    return v


class DCASGD(AsyncRule):
    r"""DC-ASGD (Zheng et al. 2017) with pseudo-gradients (Licudi 2025 (TR), eq. (12)).

    Euclidean, with the pseudo-gradient :math:`\Delta = x^t - x_i = -u` and drift g:
    :math:`\hat\Delta = \Delta + \lambda \odot \Delta \odot \Delta \odot g`,
    :math:`x^{\tau+1} = x^\tau - \text{rate}\,\hat\Delta`. Adaptive :math:`\lambda`
    (DC-ASGD-a): :math:`\lambda = \lambda_0 / (\sqrt{\text{MS}} + \epsilon)`,
    :math:`\text{MS} \leftarrow m\,\text{MS} + (1 - m)\,\Delta\odot\Delta`, with
    :math:`\lambda_0 = 2` (Licudi et al. 2025, App. B.1) and m = 0.95 (the Licudi papers give
    only :math:`\lambda_0`; m = 0.95 is the value usually attributed to Zheng et al. 2017, not
    checked against that paper); ``adaptive=False`` uses
    :math:`\lambda = \lambda_0`. On a manifold the diagonal correction acts on the ambient
    coordinates of the transported update and drift at :math:`x^\tau`, projected back to the
    tangent space.
    """

    name = "dcasgd"

    def __init__(
        self,
        server_lr: float = 1.0,
        lambda0: float = 2.0,
        adaptive: bool = True,
        momentum: float = 0.95,
        eps: float = 1e-7,
        operators: str = "approximate",
        staleness: Any = "constant",
    ) -> None:
        super().__init__(server_lr, operators, staleness)
        self.lambda0 = check_step_size("lambda0", lambda0, allow_zero=True)
        self.adaptive = bool(adaptive)
        if not 0.0 <= momentum < 1.0:
            raise ParameterError(f"momentum must be in [0, 1), got {momentum!r}")
        self.momentum = float(momentum)
        self.eps = float(eps)
        self._mean_square = None
        self._point_shape: tuple[int, ...] | None = None  # the run's, checked when loading

    def reset(self, manifold, n_clients):
        self._mean_square = None
        self._point_shape = tuple(manifold.point_shape)

    def _state(self) -> dict[str, Any]:
        return {"mean_square": copy_array(self._mean_square)}

    def _read_state(self, reader: StateReader) -> Commit:
        ms = reader.array("mean_square", shape=self._point_shape, optional=True)
        return setter(self, _mean_square=ms)

    def apply(self, manifold, a):
        u = self.trusted_update(manifold, a, self.update(manifold, a))
        drift = -self.operators.inverse_retract(manifold, a.current, a.base)  # x^tau - x^t at x^tau
        pseudo = -u
        lam = self.lambda0
        if self.adaptive:
            sq = pseudo * pseudo
            ms = self._mean_square
            ms = (
                sq * (1.0 - self.momentum)
                if ms is None
                else self.momentum * ms + (1.0 - self.momentum) * sq
            )
            self._mean_square = ms
            lam = self.lambda0 / (ops_for(ms).sqrt(ms) + self.eps)
        corrected = pseudo + lam * pseudo * pseudo * drift
        return self.step(manifold, a, manifold.to_tangent(a.current, -corrected))


class AsyncFedED(AsyncRule):
    r"""AsyncFedED (Wang et al. 2022): staleness-adaptive server rate and local epochs.

    The staleness ratio :math:`\gamma = \|x^\tau - x^t\| / \|u\|` (geodesic or retraction
    distance on a manifold), replaced by :math:`\bar\gamma` while the server version is at most
    ``warmup`` (Licudi et al. 2025, App. B.1, eq. (47): :math:`\tilde\gamma = \gamma` only for t >
    10); rate :math:`\eta_g w_i / (\gamma + \epsilon)` (Wang et al.'s :math:`\lambda` is subsumed by
    :math:`\eta_g`, Licudi et al. 2025, App. B.1), applied to the update at :math:`x^\tau`:
    :math:`x^{\tau+1} = x^\tau + \text{rate}\; u`. Client i's next number of local epochs is
    :math:`K_i \leftarrow K_i + \lfloor(\bar\gamma - \gamma)/\kappa\rfloor`, kept in
    ``[1, max_epochs]``.

    Neither Licudi paper gives :math:`\epsilon`. An update that meets no drift (staleness 0) has
    :math:`\gamma = 0`, so with :math:`\epsilon \to 0` its rate is unbounded; the default
    :math:`\epsilon = 0.1` caps the amplification at 10, which puts AsyncFedED's largest rate
    with :math:`\eta_g = 0.25` (Licudi et al. 2025, Table 3) next to FedAsync's 3.
    """

    name = "asyncfeded"

    def __init__(
        self,
        server_lr: float = 1.0,
        gamma_bar: float = 1.0,
        kappa: float = 1.0,
        eps: float = 0.1,
        warmup: int = 10,
        initial_epochs: int = 2,
        max_epochs: int = 20,
        operators: str = "approximate",
    ) -> None:
        super().__init__(server_lr, operators, "constant")
        self.gamma_bar = check_step_size("gamma_bar", gamma_bar)
        self.kappa = check_step_size("kappa", kappa)
        self.eps = check_step_size("eps", eps)
        self.warmup = int(warmup)
        self.initial_epochs = int(initial_epochs)
        self.max_epochs = int(max_epochs)
        if not 1 <= self.initial_epochs <= self.max_epochs:
            raise ParameterError("need 1 <= initial_epochs <= max_epochs")
        self._epochs: list[int] = []
        self.last_gamma = math.nan

    def reset(self, manifold, n_clients):
        self._epochs = [self.initial_epochs] * n_clients
        self.last_gamma = math.nan

    def _state(self) -> dict[str, Any]:
        return {"epochs": list(self._epochs), "last_gamma": self.last_gamma}

    def _read_state(self, reader: StateReader) -> Commit:
        epochs = reader.integers("epochs", len(self._epochs), 1, self.max_epochs)
        return setter(self, _epochs=epochs, last_gamma=reader.real("last_gamma"))

    def local_epochs(self, client: int) -> int:
        """The number of local epochs client ``client`` runs next."""
        return self._epochs[client] if self._epochs else self.initial_epochs

    def apply(self, manifold, a):
        u = self.update(manifold, a)
        drift = self.operators.inverse_retract(manifold, a.base, a.current)
        nu = float(manifold.norm(a.base, u))
        gamma = float(manifold.norm(a.base, drift)) / nu if nu > 0 else math.inf
        if a.version <= self.warmup:  # Licudi et al. 2025, eq. (47): gamma-tilde = gamma for t > 10
            gamma = self.gamma_bar
        self.last_gamma = gamma
        if self._epochs:
            finite = math.isfinite(gamma)
            change = math.floor((self.gamma_bar - gamma) / self.kappa) if finite else -1
            k = self._epochs[a.client] + change
            self._epochs[a.client] = min(max(k, 1), self.max_epochs)
        if nu == 0:
            return None
        rate = self.server_lr * a.weight / (gamma + self.eps)
        return self.operators.retract(
            manifold, a.current, rate * self.trusted_update(manifold, a, u)
        )


def proximal_radius(manifold: Manifold, x: Array) -> float:
    """The radius around x within which P_M is single-valued.

    The manifold's ``local_reach(x)``: a local value where the manifold has one (FixedRank,
    Simplex, SPD, the Poincare ball: manifolds whose uniform reach is 0), else its uniform
    ``reach``, the default of :meth:`~riemfl.manifolds.base.Manifold.local_reach`.

    Raises
    ------
    NotImplementedError
        When the manifold has neither (e.g. the Birkhoff polytope, or a product with such a
        factor), with the reasons the manifold gives.
    """
    why_local = None
    try:
        return float(manifold.local_reach(x))
    except NotImplementedError as exc:
        why_local = str(exc)
    try:
        return float(manifold.reach)
    except NotImplementedError as exc:
        why = why_local or f"{manifold.name}: {exc}; and no local_reach(x)"
        raise NotImplementedError(why) from None


def require_proximal_radius(owner: str, manifold: Manifold) -> None:
    """Refuse a manifold on which :func:`proximal_radius` cannot be computed (tried at a
    random point when the manifold has no uniform constant), before a run starts.

    Raises
    ------
    ParameterError
        Naming ``owner``, the manifold (or the factor that lacks the constant) and what is
        needed.
    """
    try:
        float(manifold.reach)
        return
    except NotImplementedError:
        pass
    try:
        proximal_radius(manifold, manifold.random_point(rng=np.random.default_rng(0)))
    except NotImplementedError as exc:
        raise ParameterError(
            f"{owner} projects its server step onto the manifold and needs the radius within "
            f"which that projection is unique (reach, or local_reach(x)): {exc}"
        ) from None


class SumBuffer(Checkpointable):
    """A buffer that exposes only the sum of its updates (the secure-aggregation interface).

    ``add(delta, weight)`` accumulates ``weight * delta``; the server reads :meth:`total` and
    :attr:`count`, never an individual update. Its state (for a checkpoint) is the sum and the
    count.
    """

    def __init__(self) -> None:
        self._sum: Array | None = None
        self.count = 0

    def add(self, delta: Array, weight: float = 1.0) -> None:
        term = delta if weight == 1.0 else weight * delta
        self._sum = term if self._sum is None else self._sum + term
        self.count += 1

    def total(self) -> Array:
        if self._sum is None:
            raise ParameterError("the buffer is empty")
        return self._sum

    def clear(self) -> None:
        self._sum = None
        self.count = 0

    def _state(self) -> dict[str, Any]:
        return {"sum": copy_array(self._sum), "count": self.count}

    def _read_state(self, reader: StateReader) -> Commit:
        return self.read_state(reader)

    def read_state(self, reader: StateReader, shape: tuple[int, ...] | None = None) -> Commit:
        """Validate this buffer's state in ``reader`` (the sum of shape ``shape``, None: any;
        None exactly when the count is 0) and return the commit installing it."""
        total = reader.array("sum", shape=shape, optional=True)
        count = reader.integer("count")
        if (total is None) != (count == 0):
            raise reader.error("count", "0 exactly when the sum is None", count)
        return setter(self, _sum=total, count=count)


class FedBuff(AsyncRule):
    r"""FedBuff as in Toghani & Uribe 2022 (Algorithms 1-2): a sum-only buffer of K updates.

    Each client sends :math:`\Delta_i = x^t - x_i` (start minus end: along the descent direction);
    the buffer sums K of them and the server steps :math:`x \leftarrow x - \beta \sum_k \Delta_k`
    (:math:`\beta = 1/K` by default), reading only the sum. Optional staleness scaling (off by
    default, as Toghani & Uribe 2022 have none): :math:`\Delta \mapsto \Delta/\sqrt{1 + \tau - t}`,
    the scaling usually attributed to the original FedBuff (Nguyen et al. 2022; not checked here
    against that paper). Toghani & Uribe work in :math:`\mathbb{R}^d`; on a manifold riemfl steps
    the sum of ambient differences in the ambient space and projects, :math:`x \leftarrow P_M(x -
    \beta\sum\Delta)` (a per-client transport would need each client's stale base point, which the
    sum-only buffer hides), which is single-valued while the step is shorter than the
    proximal-smoothness radius; a longer step raises :class:`ProjectionError`
    (``outside_reach="error"``) or is shrunk to half the radius (``"shrink"``).

    ``privacy`` (a :class:`~riemfl.federated.privacy.DPSettings`): client-level differential
    privacy, each :math:`\Delta_i` clipped and Gaussian noise on each buffer's sum
    (:class:`~riemfl.federated.privacy_buffer.BufferPrivacy`); the history gets an ``epsilon``
    column.

    ``aggregator`` (an :class:`~riemfl.federated.aggregation.Aggregator`, e.g.
    :class:`~riemfl.federated.robust.GeometricMedian`): the total of the full buffer is the
    aggregator's answer for ``{"d": stack of the K updates}`` (phase 0) in place of the sum:
    :math:`x \leftarrow P_M(x - \beta\,\text{total})`. A robust aggregator returns K times a
    robust centre, so with :math:`\beta = 1/K` the step is that centre. Staleness weights are
    applied to the updates before they are aggregated. An aggregator that acts on a sum
    (``takes_totals``: :class:`~riemfl.federated.aggregation.PlainSum`) is given the buffer's sum
    (``from_total``) and the buffer stays sum-only; any other keeps the K updates
    (:class:`~riemfl.federated.buffer_server.StackBuffer`) and the rule is no longer sum-only.
    Its state (e.g. :class:`~riemfl.federated.robust.CenteredClipping`'s previous aggregate) is
    checkpointed with the rule and restored to its state at construction when a run starts; its
    ``row()`` columns join the history's.

    ``server_optimizer`` (a :class:`~riemfl.federated.server_optimizers.ServerOptimizer`): FedOpt
    (Reddi et al. 2021, Alg. 2) on the buffer. Its update is the ambient step FedBuff would take,
    :math:`d = -\beta\,\text{total}` (with :math:`\beta = 1/K` and the plain sum: the mean of the
    buffer's :math:`x_i - x^t`), its step :math:`s` is taken in ``Euclidean(*point_shape)`` and
    :math:`x \leftarrow P_M(x + s)`, with the length of s checked against the radius as above
    (a shrunk step leaves the optimiser's moments as they were computed). The moments are
    ambient arrays, updated elementwise and never transported, as for RFedProj's ambient update
    in :class:`~riemfl.federated.ServerOptimized`: d is a difference of ambient points, not a
    tangent vector (:class:`~riemfl.federated.buffer_server.AmbientOptimizer`).
    ``ServerSGD(1.0)`` reproduces FedBuff bit for bit. The optimiser's state is checkpointed with
    the rule and restarts (zero moments) with every run.

    ``compressor`` (a :class:`~riemfl.federated.compression.Compressor`, e.g.
    ``make_compressor("topk:0.1")``): each client uploads its :math:`\Delta_i` compressed, as
    :class:`~riemfl.federated.compressed.Compressed` does on the synchronous engine
    (:class:`~riemfl.federated.buffer_compression.BufferCompression`): with error feedback
    (``error_feedback``; default on for a biased compressor, off for an unbiased one) it sends
    :math:`C(\Delta_i + e_i)` and keeps :math:`e_i \leftarrow \Delta_i + e_i - D(C(\Delta_i +
    e_i))`. The buffer receives the decoded :math:`D(C(\cdot))`, before the staleness weight,
    the aggregator and the optimiser. The k-th applied upload of client i draws its randomness
    from ``numpy.random.default_rng([compression_seed, k, i])``. The residuals, the
    compressor's per-client state (PowerSGD's factor) and the upload counters are checkpointed
    with the rule and restart with every run. The server decodes each upload, so a compressed
    FedBuff is not sum-only; :meth:`upload_nbytes` is the payload's size. With ``privacy`` a
    client clips (and in local mode noises) its update, then compresses it; under central noise
    the server clips each decoded update to C again before it enters the buffer, so the
    accountant is that of the uncompressed run.

    Parameters
    ----------
    buffer_size : int
        K >= 1.
    server_lr : float, optional
        :math:`\beta` (default 1/K).
    staleness_scaling : bool
    outside_reach : {"error", "shrink"}
    privacy : DPSettings, optional
    aggregator : Aggregator, optional
        None: the plain sum.
    server_optimizer : ServerOptimizer, optional
        None: the plain step.
    compressor : Compressor, optional
        None: uncompressed uploads.
    error_feedback : bool, optional
        With a compressor: keep each client's residual (None: on for a biased compressor).
    compression_seed : int
        With a compressor: the seed of the clients' random draws.

    Raises
    ------
    ParameterError
        Besides the settings' own checks: privacy with staleness scaling; an ``aggregator`` that
        is not an Aggregator, one that does not sum (``sums`` False) with privacy, whose
        accounting covers a sum of clipped updates, or a Krum for which K < 2f + 3; a
        ``server_optimizer`` that is not a ServerOptimizer; a ``compressor`` that is not a
        Compressor; ``error_feedback`` without a compressor.
    """

    name = "fedbuff"

    def __init__(
        self,
        buffer_size: int = 10,
        server_lr: float | None = None,
        staleness_scaling: bool = False,
        outside_reach: str = "error",
        privacy: DPSettings | None = None,
        aggregator: Aggregator | None = None,
        server_optimizer: ServerOptimizer | None = None,
        compressor: Compressor | None = None,
        error_feedback: bool | None = None,
        compression_seed: int = 0,
    ) -> None:
        self.buffer_size = integer(buffer_size, "FedBuff: buffer_size", minimum=1)
        super().__init__(1.0 / self.buffer_size if server_lr is None else server_lr)
        self.staleness_scaling = bool(staleness_scaling)
        if outside_reach not in ("error", "shrink"):
            raise ParameterError(
                f"outside_reach must be 'error' or 'shrink', got {outside_reach!r}"
            )
        self.outside_reach = outside_reach
        if privacy is not None and self.staleness_scaling:
            raise ParameterError(
                "FedBuff: differential privacy adds noise to the buffer's sum, but "
                "staleness_scaling weighs each update on the server; use staleness_scaling=False"
            )
        self._aggregator = (
            None
            if aggregator is None
            else check_buffer_aggregator(aggregator, self.buffer_size, privacy is not None)
        )
        self._optimizer = None if server_optimizer is None else AmbientOptimizer(server_optimizer)
        self.privacy = None if privacy is None else BufferPrivacy(privacy)
        self._compression = buffer_compression(compressor, error_feedback, compression_seed)
        self._aggregator_start = AggregatorStart(self._aggregator)
        stacks = self._aggregator is not None and not self._aggregator.takes_totals
        self.buffer: SumBuffer | StackBuffer = StackBuffer() if stacks else SumBuffer()
        self._point_shape: tuple[int, ...] | None = None  # the run's, checked when loading

    @property
    def aggregator(self) -> Aggregator | None:
        """What turns the full buffer into its total (None: the plain sum)."""
        return self._aggregator

    @property
    def server_optimizer(self) -> ServerOptimizer | None:
        """The optimiser of the server's step (None: the plain step)."""
        return None if self._optimizer is None else self._optimizer.optimizer

    @property
    def compression(self) -> BufferCompression | None:
        """The clients' compression of their uploads (None: uncompressed)."""
        return self._compression

    @property
    def sum_only(self) -> bool:  # type: ignore[override]
        """True unless ``staleness_scaling`` (the staleness weight of each update is known to
        the server only, so it would have to see the updates one by one), an aggregator that
        needs each update, or compressed uploads (the server decodes each one)."""
        return (
            not self.staleness_scaling
            and not isinstance(self.buffer, StackBuffer)
            and self._compression is None
        )

    def upload_nbytes(self, shape: tuple[int, ...], dtype: Any) -> int | None:
        """Bytes of one client's upload of an update of ``shape`` and ``dtype``: the
        compressor's payload; None (the dense array's bytes) when uploads are uncompressed."""
        if self._compression is None:
            return None
        return self._compression.upload_nbytes(shape, dtype)

    def validate(self, manifold):
        """Refuse a manifold without the projection or its proximal-smoothness radius (which
        :meth:`apply` checks every server step against), or whose points the compressor cannot
        compress, before the run."""
        ok, why = manifold.supports("project")
        if not ok:
            raise ParameterError(f"FedBuff needs {manifold.name}.project: {why}")
        require_proximal_radius("FedBuff (fedbuff)", manifold)
        if self._compression is not None:
            self._compression.check(tuple(manifold.point_shape))

    _state_helpers = ("privacy", "aggregator", "compression")

    def reset(self, manifold, n_clients):
        self.buffer.clear()
        self._point_shape = tuple(manifold.point_shape)
        if self._compression is not None:
            self._compression.reset(n_clients, self._point_shape)
        if self.privacy is not None:
            self.privacy.reset(n_clients)
        self._aggregator_start.restore()
        if self._optimizer is not None:
            self._optimizer.reset(self._point_shape)

    def seed(self, seq):
        if self.privacy is not None:
            self.privacy.seed(seq)

    def row(self) -> dict[str, Any]:
        """The ``epsilon`` column of a private run and the aggregator's columns (none
        otherwise)."""
        out = {} if self.privacy is None else {"epsilon": self.privacy.epsilon()}
        if self._aggregator is not None:
            out.update(self._aggregator.row())
        return out

    def privacy_delta(self) -> float | None:
        return None if self.privacy is None else self.privacy.settings.delta

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        if self.privacy is not None:
            out["privacy"] = self.privacy.settings.describe()
        if self._aggregator is not None:
            out["aggregator"] = settings(self._aggregator)
        if self._optimizer is not None:
            out["server_optimizer"] = settings(self._optimizer.optimizer)
        if self._compression is not None:
            out["compression"] = self._compression.describe()
        return out

    def _state(self) -> dict[str, Any]:
        state = {"buffer": self.buffer.state_dict()}
        if self._optimizer is not None:
            state["optimizer"] = self._optimizer.state()
        return state

    def _read_state(self, reader: StateReader) -> Commit:
        section = reader.section("buffer")
        if isinstance(self.buffer, StackBuffer):
            buffer = self.buffer.read_state(section, self._point_shape, self.buffer_size)
        else:
            buffer = self.buffer.read_state(section, self._point_shape)
        if self._optimizer is None:
            return buffer
        return commit_all(buffer, self._optimizer.read_state(reader, "optimizer"))

    def _total(self) -> Array:
        """The full buffer's total: its sum, or the aggregator's answer."""
        agg, buffer = self._aggregator, self.buffer
        if agg is None:
            return buffer.total()
        if isinstance(buffer, StackBuffer):
            total, _ = agg.aggregate({BUFFER_KEY: buffer.stack()}, 0)
        else:
            total, _ = agg.from_total({BUFFER_KEY: buffer.total()}, buffer.count, 0)
        return total[BUFFER_KEY]

    def apply(self, manifold, a):
        delta = a.base - a.local  # computed client-side in a real deployment
        if self.privacy is not None:  # clipped (and noised) client-side too
            delta = self.privacy.client_update(a.client, delta)
        if self._compression is not None:  # compressed client-side, decoded by the server
            delta = self._compression.client_update(a.client, delta)
            if self.privacy is not None:  # central noise: the decoded update back within C
                delta = self.privacy.decoded_update(delta)
        return self._receive(manifold, a, delta)

    def apply_decoded(self, manifold: Manifold, a: Arrival, delta: Array) -> Array | None:
        r"""The server step of an arrival whose client compressed :math:`\Delta_i` itself (on
        its Flower node): ``delta`` is the server's decoding of the payload; ``a.local`` is not
        read. The client's upload counter moves on
        (:meth:`~riemfl.federated.buffer_compression.BufferCompression.accept`).

        Raises
        ------
        ParameterError
            The rule has no compressor, or has differential privacy (the client would clip
            before it compresses, which only :meth:`apply` does).
        """
        if self._compression is None or self.privacy is not None:
            raise ParameterError(
                "FedBuff.apply_decoded: an update compressed by its client needs a FedBuff with "
                "a compressor and without privacy"
            )
        self._compression.accept(a.client)
        return self._receive(manifold, a, delta)

    def _receive(self, manifold: Manifold, a: Arrival, delta: Array) -> Array | None:
        """Add the client's (decoded) update to the buffer; the server step when it is full."""
        weight = 1.0 / math.sqrt(1.0 + a.staleness) if self.staleness_scaling else 1.0
        self.buffer.add(delta, weight)
        if self.buffer.count < self.buffer_size:
            return None
        total = self._total()
        step = self.server_lr * (total if self.privacy is None else self.privacy.flush(total))
        self.buffer.clear()
        if self._optimizer is not None:  # negations are exact: ServerSGD(1.0) is the plain step
            step = -self._optimizer.step(a.current, -step)
        reach = proximal_radius(manifold, a.current)
        if math.isfinite(reach):
            length = float(np.sqrt(float(ops_for(step).sum(step * step))))
            if length >= reach:
                if self.outside_reach == "error":
                    raise ProjectionError(
                        f"FedBuff's ambient step has length {length:.3g}, not below the "
                        f"proximal-smoothness radius {reach:.3g} of {manifold.name}: its "
                        "projection may not be unique; lower server_lr or use "
                        "outside_reach='shrink'"
                    )
                step = step * (0.5 * reach / length)
        return manifold.project(a.current - step)

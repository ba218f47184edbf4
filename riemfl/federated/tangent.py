r"""Tangent-space federated baselines: RFedAvg, RFedProx and RFedSVRG (Li & Ma 2022).

All three keep the global model on the manifold and aggregate with the *tangent-space mean*
(Zhang et al. 2024, Sec. 2.2, describing Li & Ma 2022)

.. math::  x^{r+1} = R_{x^r}\Big(\frac1n \sum_i R_{x^r}^{-1}(x_{i,\tau})\Big),

where, with ``operators="exact"``, :math:`R = \mathrm{Exp}` and :math:`R^{-1} = \mathrm{Log}`,
and with ``operators="approximate"`` (the default, as in Li & Ma's code) the manifold's
retraction and its inverse. Transport :math:`\Gamma` is parallel transport (exact, where the
manifold has it) or the manifold's vector transport.

What clients upload (``upload=``): ``"point"`` (the default, as in Li & Ma 2022) sends
:math:`x_{i,\tau}` and the server computes each :math:`R_{x^r}^{-1}(x_{i,\tau})`, so it needs
every upload; ``"tangent"`` sends :math:`u_i = R_{x^r}^{-1}(x_{i,\tau})` (the client knows
:math:`x^r`) and the server takes :math:`R_{x^r}(\frac1m\sum_i u_i)` from the sum alone: the same
step computed on the other side of the link, so the phase can run under secure aggregation
(:mod:`riemfl.federated.aggregation`).

On Euclidean space every map is the flat one, so RFedAvg is FedAvg, RFedProx is FedProx and
RFedSVRG is the FedSVRG/SCAFFOLD-like method with an anchor gradient.
"""

from __future__ import annotations

from typing import Any

from ..backend import ops_for
from ..errors import ParameterError
from ..manifolds.base import Manifold
from ..problems.base import FederatedProblem
from .algorithm import (
    ClientContext,
    Operators,
    State,
    SyncAlgorithm,
    check_local_steps,
    check_step_size,
)

__all__ = ["RFedAvg", "RFedProx", "RFedSVRG"]


#: what a client of a tangent-space-mean rule may upload
UPLOADS = ("point", "tangent")


class _TangentMean(SyncAlgorithm):
    """Shared parameters, state and the tangent-space-mean server step."""

    #: the phase whose uploads are the local models
    model_phase = 0
    #: the uploads (``upload="tangent"``) and RFedSVRG's anchor gradients are tangent vectors at
    #: the broadcast x^r: differential privacy clips them (:mod:`riemfl.federated.privacy`)
    privacy_space = "tangent"

    def __init__(self, step_size: float, local_steps: int, operators: str, upload: str) -> None:
        self.step_size = check_step_size("step_size", step_size)
        self.local_steps = check_local_steps(local_steps)
        self.operators = Operators(operators)
        if upload not in UPLOADS:
            raise ParameterError(
                f"{self.name}: upload must be one of {list(UPLOADS)}, got {upload!r}"
            )
        self.upload = upload
        self._manifold: Manifold | None = None

    def validate(self, problem: FederatedProblem) -> None:
        self.operators.require(problem.manifold)

    def sum_only_hint(self) -> str:
        if self.upload == "point":
            return (
                "use upload='tangent' (the clients upload R^{-1}_{x^r}(x_i), whose sum alone the "
                "server needs)"
            )
        return ""

    def init(self, problem: FederatedProblem, x0: Any) -> tuple[State, State]:
        problem.manifold.check_point(x0)
        self._manifold = problem.manifold  # the server's maps between points and updates
        return {"x": x0}, {}

    def output(self, server: State) -> Any:
        return server["x"]

    def _local_result(self, manifold: Manifold, x: Any, z: Any) -> State:
        """The upload of the stack of local models ``z`` started from ``x``: the points, or
        their inverse retractions at x (``upload``)."""
        if self.upload == "point":
            return {"x": z}
        anchors = ops_for(x, z).broadcast_to(x, z.shape)
        return {"u": self.operators.inverse_retract(manifold, anchors, z)}

    def server_step(
        self, manifold: Manifold, server: State, phase: int, message: State, uploads: State
    ) -> State:
        if not self.sum_only(phase):  # points: the server takes each inverse retraction
            x, locals_ = server["x"], uploads["x"]
            anchors = ops_for(x, locals_).broadcast_to(x, locals_.shape)
            mean = self.operators.inverse_retract(manifold, anchors, locals_).mean(0)
            return {"x": self.operators.retract(manifold, x, mean)}
        return super().server_step(manifold, server, phase, message, uploads)

    def sum_only(self, phase: int) -> bool:
        """Sum-only unless the phase's uploads are points (``upload="point"``)."""
        return self.upload == "tangent" or phase != self.model_phase

    def point_uploads(self, phase: int) -> str | None:
        """``"x"`` in the model phase with ``upload="point"`` (the local models), else None."""
        return "x" if self.upload == "point" and phase == self.model_phase else None

    def update_of(self, message: State, uploads: State, phase: int) -> State:
        """The tangent updates at the broadcast :math:`x^r`: the uploads themselves, or with
        ``upload="point"`` the inverse retractions :math:`R^{-1}_{x^r}(x_i)` of the uploaded
        points (as the server step computes them)."""
        if self.point_uploads(phase) is None:
            return uploads
        x, points = message["x"], uploads["x"]
        anchors = ops_for(x, points).broadcast_to(x, points.shape)
        return {"x": self.operators.inverse_retract(self._manifold, anchors, points)}

    def upload_of(self, message: State, updates: State, phase: int) -> State:
        """The uploads that carry the tangent ``updates``: themselves, or with
        ``upload="point"`` the points :math:`R_{x^r}(u_i)` (the inverse of :meth:`update_of`)."""
        if self.point_uploads(phase) is None:
            return updates
        x, u = message["x"], updates["x"]
        anchors = ops_for(x, u).broadcast_to(x, u.shape)
        return {"x": self.operators.retract(self._manifold, anchors, u)}

    def server_step_from_sum(
        self,
        manifold: Manifold,
        server: State,
        phase: int,
        message: State,
        total: State,
        count: int,
    ) -> State:
        """:math:`R_{x^r}(\\frac1m\\sum_i u_i)` from the sum of the tangent uploads."""
        if not self.sum_only(phase):
            return super().server_step_from_sum(manifold, server, phase, message, total, count)
        return {"x": self.operators.retract(manifold, server["x"], total["u"] / count)}

    def upload_shapes(self, problem: FederatedProblem, phase: int) -> dict[str, tuple[int, ...]]:
        key = "x" if self.upload == "point" else "u"
        return {key: tuple(problem.manifold.point_shape)}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "operators": self.operators.kind}


class RFedProx(_TangentMean):
    r"""RFedProx: FedProx on a manifold (local objective :math:`f_i + \frac\mu2 d^2(\cdot, x^r)`).

    Local steps from :math:`x_{i,0} = x^r` (uplink: one point per round):

    .. math::  x_{i,t+1} = R_{x_{i,t}}\Big(-\eta\big[\operatorname{grad} f_i(x_{i,t})
               - \mu\, P_{T_{x_{i,t}}}\big(R_{x_{i,t}}^{-1}(x^r)\big)\big]\Big)

    since :math:`\operatorname{grad}_y \tfrac12 d^2(y, x^r) = -\mathrm{Log}_y(x^r)`. This is
    the mathematically correct sign: Li & Ma's public code adds :math:`+\mu R^{-1}(x^r)`, which
    pushes the iterate *away* from the global model. (Zhang et al. 2024, Sec. 5, give no
    formula and no :math:`\mu` for RFedProx; this one is riemfl's.)

    Parameters
    ----------
    step_size : float
        :math:`\eta`.
    local_steps : int
        :math:`\tau`.
    mu : float
        Proximal weight :math:`\mu \ge 0` (not given in Zhang et al. 2024; 1.0 by default).
        ``mu=0`` is RFedAvg.
    operators : {"approximate", "exact"}
        Retraction / inverse retraction / vector transport, or Exp / Log / parallel transport.
    upload : {"point", "tangent"}
        What clients upload: their local models, or the inverse retractions of them at
        :math:`x^r` (sum-only, module docstring).
    """

    name = "rfedprox"

    def __init__(
        self,
        step_size: float,
        local_steps: int = 10,
        mu: float = 1.0,
        operators: str = "approximate",
        upload: str = "point",
    ) -> None:
        super().__init__(step_size, local_steps, operators, upload)
        self.mu = check_step_size("mu", mu, allow_zero=True)

    def client_step(
        self, ctx: ClientContext, phase: int, message: State, clients: State
    ) -> tuple[State, State]:
        M, op = ctx.manifold, self.operators
        x = message["x"]
        z = ops_for(x).broadcast_to(x, (len(ctx.clients), *x.shape))
        anchors = z
        for t in range(self.local_steps):
            direction = ctx.rgrads(z, t)
            if self.mu and t:  # at t = 0 the iterate is the anchor: no pull
                pull = M.to_tangent(z, op.inverse_retract(M, z, anchors))
                direction = direction - self.mu * pull
            z = op.retract(M, z, -self.step_size * direction)
        return self._local_result(M, x, z), clients


class RFedAvg(RFedProx):
    r"""RFedAvg: FedAvg on a manifold, :math:`x_{i,t+1} = R_{x_{i,t}}(-\eta\,\operatorname{grad}
    f_i(x_{i,t}))` from :math:`x_{i,0} = x^r`, then the tangent-space mean (RFedProx with
    :math:`\mu = 0`; parameters as RFedProx's)."""

    name = "rfedavg"

    def __init__(
        self,
        step_size: float,
        local_steps: int = 10,
        operators: str = "approximate",
        upload: str = "point",
    ) -> None:
        super().__init__(step_size, local_steps, mu=0.0, operators=operators, upload=upload)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.pop("mu", None)
        return out


class RFedSVRG(_TangentMean):
    r"""RFedSVRG (Li & Ma 2022, Algorithm 1), run with full participation and :math:`\tau \ge 1`.

    Two phases, two uploads per client per round:

    1. clients upload :math:`\operatorname{grad} f_i(x^r)` (full local gradient); the server
       broadcasts :math:`\operatorname{grad} f(x^r) = \frac1n\sum_i \operatorname{grad} f_i(x^r)`;
    2. from :math:`x_{i,0} = x^r`,

       .. math::  x_{i,t+1} = R_{x_{i,t}}\Big(-\eta\big[\operatorname{grad} f_i(x_{i,t})
                  - \Gamma_{x^r \to x_{i,t}}\big(\operatorname{grad} f_i(x^r)
                  - \operatorname{grad} f(x^r)\big)\big]\Big),

       upload :math:`x_{i,\tau}` (or, with ``upload="tangent"``, its inverse retraction at
       :math:`x^r`); the server takes the tangent-space mean.

    The anchor gradient of the server is the mean over the clients whose phase-0 upload arrived
    (all n under full participation, as in the paper), so the correction terms of those clients
    sum to zero; Li & Ma average over all n clients, which differs only when clients are sampled
    or dropped.
    """

    name = "rfedsvrg"
    n_phases = 2
    model_phase = 1

    def __init__(
        self,
        step_size: float,
        local_steps: int = 10,
        operators: str = "approximate",
        upload: str = "point",
    ) -> None:
        super().__init__(step_size, local_steps, operators, upload)

    def init(self, problem: FederatedProblem, x0: Any) -> tuple[State, State]:
        server, _ = super().init(problem, x0)
        zeros = ops_for(x0).broadcast_to(0 * x0, (problem.n_clients, *x0.shape))
        return server, {"anchor_grad": zeros}

    def broadcast(self, server: State, phase: int) -> State:
        if phase == 0:
            return {"x": server["x"]}
        return {"x": server["x"], "grad": server["grad"]}

    def client_step(
        self, ctx: ClientContext, phase: int, message: State, clients: State
    ) -> tuple[State, State]:
        M, op = ctx.manifold, self.operators
        x = message["x"]
        anchors = ops_for(x).broadcast_to(x, (len(ctx.clients), *x.shape))
        if phase == 0:
            g = ctx.rgrads(anchors, None)
            return {"grad": g}, {"anchor_grad": g}
        drift = clients["anchor_grad"] - message["grad"]
        z = anchors
        for t in range(self.local_steps):
            correction = op.transport(M, anchors, z, drift) if t else drift
            z = op.retract(M, z, -self.step_size * (ctx.rgrads(z, t) - correction))
        return self._local_result(M, x, z), clients

    def server_step_from_sum(
        self,
        manifold: Manifold,
        server: State,
        phase: int,
        message: State,
        total: State,
        count: int,
    ) -> State:
        """Phase 0: the anchor gradient :math:`\\frac1m\\sum_i \\operatorname{grad} f_i(x^r)`;
        phase 1: the tangent-space mean."""
        if phase == 0:
            return {**server, "grad": total["grad"] / count}
        return super().server_step_from_sum(manifold, server, phase, message, total, count)

    def upload_shapes(self, problem: FederatedProblem, phase: int) -> dict[str, tuple[int, ...]]:
        if phase == 0:
            return {"grad": tuple(problem.manifold.point_shape)}
        return super().upload_shapes(problem, phase)

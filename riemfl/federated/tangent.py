r"""Tangent-space federated baselines: RFedAvg, RFedProx and RFedSVRG (Li & Ma 2022).

All three keep the global model on the manifold and aggregate with the *tangent-space mean*
(Zhang et al. 2024, Sec. 2.2, describing Li & Ma 2022)

.. math::  x^{r+1} = R_{x^r}\Big(\frac1n \sum_i R_{x^r}^{-1}(x_{i,\tau})\Big),

where, with ``operators="exact"``, :math:`R = \mathrm{Exp}` and :math:`R^{-1} = \mathrm{Log}`,
and with ``operators="approximate"`` (the default, as in Li & Ma's code) the manifold's
retraction and its inverse. Transport :math:`\Gamma` is parallel transport (exact, where the
manifold has it) or the manifold's vector transport.

On Euclidean space every map is the flat one, so RFedAvg is FedAvg, RFedProx is FedProx and
RFedSVRG is the FedSVRG/SCAFFOLD-like method with an anchor gradient.
"""

from __future__ import annotations

from typing import Any

from ..backend import ops_for
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


class _TangentMean(SyncAlgorithm):
    """Shared parameters, state and the tangent-space-mean server step."""

    def __init__(self, step_size: float, local_steps: int, operators: str) -> None:
        self.step_size = check_step_size("step_size", step_size)
        self.local_steps = check_local_steps(local_steps)
        self.operators = Operators(operators)

    def validate(self, problem: FederatedProblem) -> None:
        self.operators.require(problem.manifold)

    def init(self, problem: FederatedProblem, x0: Any) -> tuple[State, State]:
        problem.manifold.check_point(x0)
        return {"x": x0}, {}

    def output(self, server: State) -> Any:
        return server["x"]

    def _aggregate(self, manifold: Manifold, x: Any, locals_: Any) -> Any:
        """:math:`R_x(\\frac1m \\sum_j R_x^{-1}(x_j))` over the stack ``locals_``."""
        ops = ops_for(x, locals_)
        anchors = ops.broadcast_to(x, locals_.shape)
        mean = self.operators.inverse_step(manifold, anchors, locals_).mean(0)
        return self.operators.step(manifold, x, mean)

    def server_step(
        self, manifold: Manifold, server: State, phase: int, message: State, uploads: State
    ) -> State:
        return {"x": self._aggregate(manifold, server["x"], uploads["x"])}

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
    """

    name = "rfedprox"

    def __init__(
        self,
        step_size: float,
        local_steps: int = 10,
        mu: float = 1.0,
        operators: str = "approximate",
    ) -> None:
        super().__init__(step_size, local_steps, operators)
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
                pull = M.to_tangent(z, op.inverse_step(M, z, anchors))
                direction = direction - self.mu * pull
            z = op.step(M, z, -self.step_size * direction)
        return {"x": z}, clients


class RFedAvg(RFedProx):
    r"""RFedAvg: FedAvg on a manifold, :math:`x_{i,t+1} = R_{x_{i,t}}(-\eta\,\operatorname{grad}
    f_i(x_{i,t}))` from :math:`x_{i,0} = x^r`, then the tangent-space mean (RFedProx with
    :math:`\mu = 0`)."""

    name = "rfedavg"

    def __init__(
        self, step_size: float, local_steps: int = 10, operators: str = "approximate"
    ) -> None:
        super().__init__(step_size, local_steps, mu=0.0, operators=operators)

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

       upload :math:`x_{i,\tau}`; the server takes the tangent-space mean.

    The anchor gradient of the server is the mean over the clients whose phase-0 upload arrived
    (all n under full participation, as in the paper), so the correction terms of those clients
    sum to zero; Li & Ma average over all n clients, which differs only when clients are sampled
    or dropped.
    """

    name = "rfedsvrg"
    n_phases = 2

    def __init__(
        self, step_size: float, local_steps: int = 10, operators: str = "approximate"
    ) -> None:
        super().__init__(step_size, local_steps, operators)

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
            z = op.step(M, z, -self.step_size * (ctx.rgrads(z, t) - correction))
        return {"x": z}, clients

    def server_step(
        self, manifold: Manifold, server: State, phase: int, message: State, uploads: State
    ) -> State:
        if phase == 0:
            return {**server, "grad": uploads["grad"].mean(0)}
        return {"x": self._aggregate(manifold, server["x"], uploads["x"])}

    def upload_shapes(self, problem: FederatedProblem, phase: int) -> dict[str, tuple[int, ...]]:
        key = "grad" if phase == 0 else "x"
        return {key: tuple(problem.manifold.point_shape)}

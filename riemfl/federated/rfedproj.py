r"""RFedProj: Algorithm 1 of Zhang, Hu, So and Johansson (NeurIPS 2024).

The paper gives its method no name; "RFedProj" follows the re-implementation ``RFedProj_.m`` in the
public RFedAGS code (``zhenwei-huang/RFedAGS``, listed in ``docs/references.md``). Everything is
done with the metric projection :math:`P_{\mathcal M}` from the ambient space: no exponential map,
logarithm, retraction inverse or transport.

Per round r (Algorithm 1; n clients, :math:`\tau` local steps, local step :math:`\eta`, global
step :math:`\eta_g`), client i starts from :math:`\hat z_{i,0} = z_{i,0} = P_{\mathcal M}(x^r)`
and runs

.. math::

    g_{i,t} &= \operatorname{grad} f_i(z_{i,t}; \mathcal B_{i,t})  && \text{(line 7)}\\
    \hat z_{i,t+1} &= \hat z_{i,t} - \eta\,(g_{i,t} + c_i^r)  && \text{(line 8)}\\
    z_{i,t+1} &= P_{\mathcal M}(\hat z_{i,t+1})  && \text{(line 9)}

and uploads the *unprojected* :math:`\hat z_{i,\tau}` (one point-sized array). The server steps
in the ambient space,

.. math::  x^{r+1} = P_{\mathcal M}(x^r) + \eta_g\Big(\frac1n\sum_i \hat z_{i,\tau}
           - P_{\mathcal M}(x^r)\Big)  \quad\text{(line 13)}

and broadcasts :math:`x^{r+1}` (generally not on M). Each client then builds its correction
locally, with no extra communication,

.. math::  c_i^{r+1} = \frac{P_{\mathcal M}(x^r) - x^{r+1}}{\eta_g\,\eta\,\tau}
           - \frac1\tau\sum_{t=0}^{\tau-1} g_{i,t}  \quad\text{(line 17)}

from the *same* gradients it used in the round (so :math:`c_i^{r+1} = \bar g^r - g_i^r`, a
SCAFFOLD-like control variate, and :math:`\frac1n\sum_i c_i = 0`). :math:`c_i^1 = 0`. The output
is :math:`P_{\mathcal M}(x^{R+1})`; metrics are evaluated at :math:`P_{\mathcal M}(x^r)`: the
paper's figures plot :math:`\|\operatorname{grad} f(x^r)\|` although :math:`x^r` is not on
:math:`\mathcal M`, and :math:`P_{\mathcal M}(x^r)` is the point its Output line and Theorem 4.3
use.

With :math:`\tau = 1` and full gradients one round is exactly projected Riemannian gradient
descent with step :math:`\eta\eta_g` (eq. (7)); on Euclidean space this is a SCAFFOLD-like
method.

Partial participation is not covered by the paper. Here a client's correction is rebuilt when
the new global model of a round it took part in arrives, and kept until its next round.
"""

from __future__ import annotations

from typing import Any

from ..backend import ops_for
from ..errors import ParameterError
from ..manifolds.base import Manifold
from ..problems.base import FederatedProblem
from .algorithm import ClientContext, State, SyncAlgorithm, check_local_steps, check_step_size

__all__ = ["RFedProj"]


class RFedProj(SyncAlgorithm):
    r"""Algorithm 1 of Zhang et al. 2024 (projection-based federated learning on manifolds).

    Parameters
    ----------
    step_size : float
        :math:`\eta`, the local step (the paper's experiments use :math:`1/\beta` for kPCA).
    local_steps : int
        :math:`\tau`.
    global_step_size : float
        :math:`\eta_g` (1 in every experiment of the paper; its theory, Theorem 4.3, asks for
        :math:`\sqrt n`).
    """

    name = "rfedproj"
    n_phases = 1

    def __init__(
        self, step_size: float, local_steps: int = 10, global_step_size: float = 1.0
    ) -> None:
        self.step_size = check_step_size("step_size", step_size)
        self.local_steps = check_local_steps(local_steps)
        self.global_step_size = check_step_size("global_step_size", global_step_size)

    def validate(self, problem: FederatedProblem) -> None:
        ok, why = problem.manifold.supports("project")
        if not ok:
            raise ParameterError(
                f"RFedProj needs the metric projection {problem.manifold.name}.project: {why}"
            )

    # ------------------------------------------------------------------ state
    def init(self, problem: FederatedProblem, x0: Any) -> tuple[State, State]:
        M = problem.manifold
        px = M.project(x0)
        zeros = ops_for(x0).broadcast_to(0 * px, (problem.n_clients, *px.shape))
        return {"x": x0, "px": px, "start": px}, {"correction": zeros, "grad_sum": zeros}

    # ------------------------------------------------------------------ rules
    def client_step(
        self, ctx: ClientContext, phase: int, message: State, clients: State
    ) -> tuple[State, State]:
        M = ctx.manifold
        px = message["px"]
        ops = ops_for(px)
        m = len(ctx.clients)
        z_hat = ops.broadcast_to(px, (m, *px.shape))
        z = z_hat
        correction = clients["correction"]
        grad_sum = 0 * z_hat
        eta = self.step_size
        for t in range(self.local_steps):
            g = ctx.rgrads(z, t)  # line 7
            grad_sum = grad_sum + g
            z_hat = z_hat - eta * (g + correction)  # line 8
            if t + 1 < self.local_steps:  # z_{i,tau} is never used
                z = M.project(z_hat)  # line 9
        return {"x": z_hat}, {"correction": correction, "grad_sum": grad_sum}

    def sum_only(self, phase: int) -> bool:
        """Line 13 reads only the sum of the uploads: RFedProj runs under secure aggregation."""
        return True

    #: the update is the ambient step zhat_{i,tau} - P_M(x^r) (:mod:`riemfl.federated.privacy`)
    privacy_space = "ambient"

    def update_of(self, message: State, uploads: State, phase: int) -> State:
        """A client's update :math:`\\hat z_{i,\\tau} - P_M(x^r)`."""
        return {"x": uploads["x"] - message["px"]}

    def upload_of(self, message: State, updates: State, phase: int) -> State:
        """The upload :math:`P_M(x^r) + d_i` of the update :math:`d_i`."""
        return {"x": message["px"] + updates["x"]}

    def server_step_from_sum(
        self,
        manifold: Manifold,
        server: State,
        phase: int,
        message: State,
        total: State,
        count: int,
    ) -> State:
        px = server["px"]
        x_new = px + self.global_step_size * (total["x"] / count - px)  # line 13
        return {"x": x_new, "px": manifold.project(x_new), "start": px}

    def broadcast(self, server: State, phase: int) -> State:
        """x^r, P_M(x^r) and the previous round's P_M(x^{r-1}): functions of the models every
        client has received, which every client would compute identically, so the simulation
        computes them once (the uplink accounting is unaffected)."""
        return {"x": server["x"], "px": server["px"], "start": server["start"]}

    def client_finish(self, message: State, clients: State) -> State:
        """Line 17 from the round's start point ``message["start"]`` = :math:`P_M(x^r)` and the
        new model :math:`x^{r+1}`; the gradient sum is spent, so its rows become zeros (a
        broadcast view: no memory between rounds)."""
        scale = self.global_step_size * self.step_size * self.local_steps
        drift = (message["start"] - message["x"]) / scale  # one point, the same for all clients
        correction = clients["grad_sum"] / -self.local_steps
        correction += drift  # = drift - grad_sum / tau, bit for bit, without a second stack
        spent = ops_for(drift).broadcast_to(0 * drift, correction.shape)
        return {"correction": correction, "grad_sum": spent}  # line 17

    def output(self, server: State) -> Any:
        return server["px"]

r"""A synchronous rule whose server step runs a server optimiser: FedAvgM, FedAdam, FedYogi,
FedAdagrad (Reddi et al. 2021, Alg. 2; Hsu et al. 2019) for riemfl's rules, on any manifold.

:class:`ServerOptimized` wraps a sum-only rule that declares its client update
(:attr:`~riemfl.federated.algorithm.SyncAlgorithm.privacy_space`, as differential privacy needs
it) and changes only the server step of the phase that moves the model (:attr:`model_phase`):

1. the mean update of the round, :math:`\Delta = ` ``update_of`` of the mean upload: a tangent
   vector at :math:`x^r` (RFedAvg, RFedProx, RFedSVRG with ``upload="tangent"``) or the ambient
   step :math:`\frac1m\sum_i\hat z_{i,\tau} - P_M(x^r)` (RFedProj);
2. the optimiser's step :math:`s` from it (:mod:`riemfl.federated.server_optimizers`);
3. the rule's *own* server step with :math:`s` in place of :math:`\Delta`: the tangent rules
   take :math:`x^{r+1} = R_{x^r}(s)` with their operators, RFedProj takes
   :math:`x^{r+1} = P(x^r) + \eta_g s` (use ``global_step_size=1`` and the optimiser's learning
   rate), so ``ServerSGD(1.0)`` reproduces the rule;
4. tangent rules: the first moment is carried to :math:`T_{x^{r+1}}M` by the rule's transport
   (parallel transport with ``operators="exact"`` where the manifold has it) and projected onto
   it. RFedProj's moments are ambient arrays: no transport.

Every other phase (RFedSVRG's anchor gradient) and everything on the clients is the rule's.
A rule whose clients finish a round from the new model (RFedProj's control variates, Zhang et
al. 2024, Alg. 1 line 17) finishes it from the model its own step would have made from the same
sum, which the server keeps beside the optimised one (keys ``own:...``) and broadcasts: its
control variates :math:`c_i = \bar g - g_i` keep mean zero, and the optimiser moves only the
global model.
"""

from __future__ import annotations

from typing import Any

from .._validation import integer
from ..errors import ParameterError
from ..manifolds.base import Manifold
from ..manifolds.euclidean import Euclidean
from ..problems.base import FederatedProblem
from .algorithm import ClientContext, Operators, State, SyncAlgorithm
from .checkpoint import require
from .privacy import PrivateAlgorithm
from .run_core import Stateful
from .server_optimizers import ServerOptimizer

__all__ = ["ServerOptimized", "OWN"]

#: prefix of the server-state and message keys of the wrapped rule's own step
OWN = "own:"


def _main(state: State) -> State:
    """``state`` without the keys of the rule's own step."""
    return {k: v for k, v in state.items() if not k.startswith(OWN)}


def _own(state: State) -> State:
    """The keys of the rule's own step, unprefixed."""
    return {k[len(OWN) :]: v for k, v in state.items() if k.startswith(OWN)}


def _prefixed(state: State) -> State:
    return {OWN + k: v for k, v in state.items()}


class ServerOptimized(SyncAlgorithm):
    """A synchronous rule with a server optimiser in its model-moving server step.

    Parameters
    ----------
    algorithm : SyncAlgorithm
        The rule: RFedProj, or RFedAvg, RFedProx, RFedSVRG with ``upload="tangent"`` (any rule
        that declares ``privacy_space`` and whose model phase is sum-only).
    optimizer : ServerOptimizer
        E.g. ``ServerAdam(0.05)``; its state is reset by :meth:`init` and checkpointed.

    Raises
    ------
    ParameterError
        A rule without a declared update, whose model phase needs each upload (the message
        names the rule's fix), already wrapped, or already private (wrap first, then pass
        ``privacy=`` to :func:`~riemfl.federated.run_sync`).
    """

    def __init__(self, algorithm: SyncAlgorithm, optimizer: ServerOptimizer) -> None:
        if not isinstance(algorithm, SyncAlgorithm):
            raise ParameterError(
                "ServerOptimized: algorithm must be a SyncAlgorithm, got "
                f"{type(algorithm).__name__}"
            )
        if not isinstance(optimizer, ServerOptimizer):
            raise ParameterError(
                "ServerOptimized: optimizer must be a ServerOptimizer (ServerSGD, ServerAdam, "
                f"ServerYogi, ServerAdagrad), got {type(optimizer).__name__}"
            )
        if isinstance(algorithm, ServerOptimized):
            raise ParameterError(
                f"{algorithm.name} already has a server optimiser; wrap the plain rule once"
            )
        if isinstance(algorithm, PrivateAlgorithm):
            raise ParameterError(
                f"{algorithm.name} is already private: wrap the plain rule with ServerOptimized "
                "and pass privacy= to run_sync, which adds the clipping and noise around it"
            )
        if algorithm.privacy_space not in ("tangent", "ambient"):
            raise ParameterError(
                f"{algorithm.name}: a server optimiser needs a rule that declares its client "
                "update (privacy_space 'tangent' or 'ambient'); expected rfedproj, or rfedavg, "
                "rfedprox, rfedsvrg with upload='tangent'"
            )
        self.model_phase = integer(
            algorithm.model_phase,
            f"{algorithm.name}: model_phase",
            minimum=0,
            maximum=algorithm.n_phases - 1,
        )
        if not algorithm.sum_only(self.model_phase):
            hint = algorithm.sum_only_hint()
            raise ParameterError(
                f"{algorithm.name}: a server optimiser steps from the mean client update, but "
                f"the server step of phase {self.model_phase} needs each upload"
                + (f"; {hint}" if hint else "")
            )
        self.algorithm, self.optimizer = algorithm, optimizer
        self.name = f"{algorithm.name}+{optimizer.name}"
        self.n_phases, self.local_steps = algorithm.n_phases, algorithm.local_steps
        self.privacy_space = algorithm.privacy_space
        self.operators = algorithm.operators or Operators()
        # a rule whose clients finish a round from the new model finishes it from its own step
        self._finishes = type(algorithm).client_finish is not SyncAlgorithm.client_finish
        self._ambient: Euclidean | None = None

    # ------------------------------------------------------------------ delegated
    def validate(self, problem: FederatedProblem) -> None:
        """The rule's checks, and one upload key of the point's shape in the model phase."""
        self.algorithm.validate(problem)
        shapes = self.algorithm.upload_shapes(problem, self.model_phase)
        point = tuple(problem.manifold.point_shape)
        if len(shapes) != 1 or tuple(next(iter(shapes.values()))) != point:
            raise ParameterError(
                f"{self.name}: the model phase must upload one array of the point's shape "
                f"{point}, got {shapes}"
            )

    def init(self, problem: FederatedProblem, x0: Any) -> tuple[State, State]:
        """The rule's initial state; the optimiser starts afresh (zero moments)."""
        server, clients = self.algorithm.init(problem, x0)
        self.optimizer.reset(self._space(problem.manifold), self.algorithm.output(server))
        if self._finishes:
            server = {**server, **_prefixed(server)}
        return server, clients

    def broadcast(self, server: State, phase: int) -> State:
        """The rule's message; in phase 0 also the message of the rule's own step (``own:``
        keys), from which the clients finish the round."""
        message = self.algorithm.broadcast(_main(server), phase)
        own = _own(server)
        if own and phase == 0:
            message = {**message, **_prefixed(self.algorithm.broadcast(own, 0))}
        return message

    def client_step(
        self, ctx: ClientContext, phase: int, message: State, clients: State
    ) -> tuple[State, State]:
        return self.algorithm.client_step(ctx, phase, _main(message), clients)

    def client_finish(self, message: State, clients: State) -> State:
        own = _own(message)
        return self.algorithm.client_finish(own or _main(message), clients)

    def update_of(self, message: State, uploads: State, phase: int) -> State:
        return self.algorithm.update_of(_main(message), uploads, phase)

    def upload_of(self, message: State, updates: State, phase: int) -> State:
        return self.algorithm.upload_of(_main(message), updates, phase)

    def output(self, server: State) -> Any:
        return self.algorithm.output(_main(server))

    def upload_shapes(self, problem: FederatedProblem, phase: int) -> dict[str, tuple[int, ...]]:
        return self.algorithm.upload_shapes(problem, phase)

    def sum_only(self, phase: int) -> bool:
        return self.algorithm.sum_only(phase)

    def sum_only_hint(self) -> str:
        return self.algorithm.sum_only_hint()

    def describe(self) -> dict[str, Any]:
        return {
            **self.algorithm.describe(),
            "name": self.name,
            "server_optimizer": self.optimizer.describe(),
        }

    # ------------------------------------------------------------------ server
    def _space(self, manifold: Manifold) -> Manifold:
        """Where the update lives: the manifold (tangent) or its ambient Euclidean space."""
        if self.privacy_space == "tangent":
            return manifold
        shape = tuple(manifold.point_shape)
        if self._ambient is None or self._ambient.point_shape != shape:
            self._ambient = Euclidean(*shape)
        return self._ambient

    def server_step(
        self, manifold: Manifold, server: State, phase: int, message: State, uploads: State
    ) -> State:
        if self.sum_only(phase):
            return super().server_step(manifold, server, phase, message, uploads)
        new = self.algorithm.server_step(manifold, _main(server), phase, _main(message), uploads)
        return {**new, **_prefixed(_own(server))}

    def server_step_from_sum(
        self,
        manifold: Manifold,
        server: State,
        phase: int,
        message: State,
        total: State,
        count: int,
    ) -> State:
        """The rule's step in every phase but :attr:`model_phase`; there, the rule's step
        with the optimiser's step in place of the mean update (module docstring)."""
        rule, main, msg = self.algorithm, _main(server), _main(message)
        if phase != self.model_phase:
            new = rule.server_step_from_sum(manifold, main, phase, msg, total, count)
            return {**new, **_prefixed(_own(server))}
        mean = {k: v / count for k, v in total.items()}
        ((key, delta),) = rule.update_of(msg, mean, phase).items()
        space = self._space(manifold)
        x = msg["x"]
        step = self.optimizer.step(space, x, delta)
        moved = rule.upload_of(msg, {key: step}, phase)
        new = rule.server_step_from_sum(manifold, main, phase, msg, moved, 1)
        if self.privacy_space == "tangent":
            y, op = rule.output(new), self.operators
            self.optimizer.transport(
                lambda u: manifold.to_tangent(y, op.transport(manifold, x, y, u))
            )
        if self._finishes:
            own = rule.server_step_from_sum(manifold, main, phase, msg, total, count)
            new = {**new, **_prefixed(own)}
        return new

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"optimizer": self.optimizer.state_dict()}
        if isinstance(self.algorithm, Stateful):
            state["rule"] = self.algorithm.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (after :meth:`init`); the optimiser checks its layout.

        Raises
        ------
        CheckpointError
            A missing or misshapen optimiser state.
        """
        where = f"checkpoint: {self.name} rule state"
        self.optimizer.load_state_dict(require(state, "optimizer", dict, where=where))
        if isinstance(self.algorithm, Stateful):
            self.algorithm.load_state_dict(require(state, "rule", dict, where=where))

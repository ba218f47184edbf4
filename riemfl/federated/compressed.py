r"""A synchronous rule whose clients upload a compressed update: :class:`Compressed`.

What is compressed is a vector the server can use after decoding (:mod:`riemfl.federated.
compression`): the client update the rule declares (:attr:`~riemfl.federated.algorithm.
SyncAlgorithm.privacy_space`) in its model phase,

* RFedAvg, RFedProx, RFedSVRG with ``upload="tangent"``: :math:`u_i = R^{-1}_{x^r}(x_{i,\tau})`,
  a tangent vector at the broadcast :math:`x^r`;
* RFedProj (Zhang et al. 2024, Alg. 1 line 13): the ambient step
  :math:`\hat z_{i,\tau} - P_M(x^r)`.

A quantised tangent vector at :math:`x^r` is no longer tangent in general, so the server
projects each decoded update onto :math:`T_{x^r}M` before the rule's step (the rule then
retracts it); RFedProj's ambient step needs no projection. A compressed *point* upload
(``upload="point"``) is refused: a quantised point is not on the manifold, and the rule's
server step reads points.

Per client and round, with error feedback (Stich, Cordonnier & Jaggi 2018; Karimireddy et al.
2019) the client compresses :math:`v_i = u_i + e_i` and keeps the residual
:math:`e_i \leftarrow v_i - D(C(v_i))`; without it, :math:`v_i = u_i`. The residuals, and the
compressor's own per-client state (PowerSGD's warm-started factor), are client state rows: they
move with the client's other rows, are kept only when the server accepts the client's upload,
and are in every checkpoint. A client's random draws (QSGD's stochastic rounding) come from
``numpy.random.default_rng([seed, round, client])``, the same in process and on Flower.

With client-level differential privacy (``run_sync(..., privacy=...)``,
:func:`~riemfl.federated.privacy.privatize`) the clients clip (and, in local mode, noise) their
update, then compress it: local noise is then post-processed by the compressor, and with central
noise the server clips each decoded update to C again before the noisy sum (a decoded update
can be longer than the clipped one: QSGD's, or one carrying an error-feedback residual), so the
sensitivity, and the accountant, are those of the uncompressed run.

The server decodes the accepted payloads (:meth:`~riemfl.federated.algorithm.SyncAlgorithm.
decode`) before anything else reads them: the aggregator (a robust one too), a server optimiser
inside the rule, the attacks of an experiment. The uplink (``uplink_bytes``) is counted on the
payloads as they travel: packed bits, indices and scales.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import ops_for, to_like, to_numpy
from ..errors import ParameterError
from ..manifolds.base import Manifold
from ..problems.base import FederatedProblem
from .algorithm import ClientContext, State, SyncAlgorithm
from .checkpoint import require
from .compression import Compressor
from .compression.feedback import ClientCompression, client_rng
from .privacy import PrivateAlgorithm, clip_rows, update_norms
from .run_core import Stateful

__all__ = ["Compressed", "private_rule", "PAYLOAD", "RESIDUAL", "ROUND"]

#: prefix of the payload keys of the compressed upload
PAYLOAD = "compressed:"
#: the client state key of the error-feedback residual
RESIDUAL = "compression:residual"
#: the server state and message key of the round counter (the clients' random draws)
ROUND = "compression:round"
#: prefix of the compressor's own client state keys
STATE = "compressor:"


def _without(state: State, *prefixes: str) -> State:
    return {k: v for k, v in state.items() if not k.startswith(prefixes)}


def _with(state: State, prefix: str) -> State:
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


class Compressed(SyncAlgorithm):
    """A synchronous rule whose model-phase uploads are compressed (module docstring).

    Parameters
    ----------
    algorithm : SyncAlgorithm
        RFedProj, or RFedAvg, RFedProx, RFedSVRG with ``upload="tangent"`` (a rule that declares
        its client update and whose model phase is sum-only); also such a rule wrapped in
        :class:`~riemfl.federated.ServerOptimized`.
    compressor : Compressor
        E.g. ``make_compressor("topk:0.1")``.
    error_feedback : bool, optional
        Keep each client's residual (default: on for a biased compressor, off for an unbiased
        one such as QSGD).
    seed : int
        Of the clients' random draws.

    Raises
    ------
    ParameterError
        A rule without a declared update or whose model phase needs each upload (point
        uploads: the message says why), or a bad setting.
    """

    def __init__(
        self,
        algorithm: SyncAlgorithm,
        compressor: Compressor,
        *,
        error_feedback: bool | None = None,
        seed: int = 0,
    ) -> None:
        if not isinstance(algorithm, SyncAlgorithm):
            raise ParameterError(
                f"Compressed: algorithm must be a SyncAlgorithm, got {type(algorithm).__name__}"
            )
        if isinstance(algorithm, Compressed):
            raise ParameterError(f"{algorithm.name} is already compressed")
        if algorithm.privacy_space not in ("tangent", "ambient"):
            raise ParameterError(
                f"{algorithm.name}: compression needs a rule that declares its client update "
                "(privacy_space 'tangent' or 'ambient'); expected rfedproj, or rfedavg, "
                "rfedprox, rfedsvrg with upload='tangent'"
            )
        phase = algorithm.model_phase
        if not algorithm.sum_only(phase):
            hint = algorithm.sum_only_hint()
            raise ParameterError(
                f"{algorithm.name}: its clients upload points, and a compressed point is no "
                "longer on the manifold, which the server step reads"
                + (f"; {hint}" if hint else "")
            )
        self.algorithm = algorithm
        self.codec = ClientCompression(compressor, error_feedback, seed, owner="Compressed")
        self.compressor, self.error_feedback = compressor, self.codec.error_feedback
        self.seed = self.codec.seed
        self.name = f"{algorithm.name}+{compressor.name}"
        self.n_phases, self.local_steps = algorithm.n_phases, algorithm.local_steps
        self.model_phase = phase
        self.operators = algorithm.operators
        self._shape: tuple[int, ...] = ()
        self._dtype = np.dtype(np.float64)
        self._key = ""
        self._manifold: Manifold | None = None

    # ------------------------------------------------------------------ set-up
    def around(self, algorithm: SyncAlgorithm) -> Compressed:
        """The same compression (compressor, error feedback, seed) around ``algorithm``."""
        return Compressed(
            algorithm, self.compressor, error_feedback=self.error_feedback, seed=self.seed
        )

    def validate(self, problem: FederatedProblem) -> None:
        """The rule's checks, and one update key of the point's shape in the model phase that
        the compressor accepts."""
        self.algorithm.validate(problem)
        shapes = self.algorithm.upload_shapes(problem, self.model_phase)
        if len(shapes) != 1:
            raise ParameterError(
                f"{self.name}: the model phase must upload one array, got {sorted(shapes)}"
            )
        ((_, shape),) = shapes.items()
        self.compressor.payload_spec(tuple(shape), self._dtype)  # the compressor's refusal

    def init(self, problem: FederatedProblem, x0: Any) -> tuple[State, State]:
        """The rule's state, the round counter, zero residuals and the compressor's initial
        state per client."""
        server, clients = self.algorithm.init(problem, x0)
        ((self._key, shape),) = self.algorithm.upload_shapes(problem, self.model_phase).items()
        self._shape, self._dtype = tuple(shape), np.dtype(to_numpy(x0).dtype)
        self._manifold = problem.manifold
        n = problem.n_clients
        rows = {
            STATE + k: v
            for k, v in self.compressor.initial_state(self._shape, n, self._dtype).items()
        }
        if self.error_feedback:
            rows[RESIDUAL] = np.zeros((n, *self._shape), dtype=self._dtype)
        return {**server, ROUND: np.zeros(1, dtype=np.int64)}, {**clients, **rows}

    # ------------------------------------------------------------------ clients
    def broadcast(self, server: State, phase: int) -> State:
        message = self.algorithm.broadcast(_without(server, ROUND), phase)
        if phase == self.model_phase:
            message = {**message, ROUND: server[ROUND]}
        return message

    def client_step(
        self, ctx: ClientContext, phase: int, message: State, clients: State
    ) -> tuple[State, State]:
        inner = _without(message, ROUND)
        own = _without(clients, RESIDUAL, STATE)
        uploads, rows = self.algorithm.client_step(ctx, phase, inner, own)
        if phase != self.model_phase:
            return uploads, {**clients, **rows}
        ((key, shape),) = self.algorithm.upload_shapes(ctx.problem, phase).items()
        updates = to_numpy(self.algorithm.update_of(inner, uploads, phase)[key])
        residuals = to_numpy(clients[RESIDUAL]) if self.error_feedback else None
        r = int(to_numpy(message[ROUND])[0])
        rngs = [client_rng(self.seed, r, c) for c in ctx.clients]
        payload, _, residuals, state = self.codec.compress(
            updates, residuals, _with(clients, STATE), rngs
        )
        new = {**clients, **rows, **{STATE + k: s for k, s in state.items()}}
        if self.error_feedback:
            new[RESIDUAL] = to_like(residuals, clients[RESIDUAL])
        return {PAYLOAD + k: p for k, p in payload.items()}, new

    def client_finish(self, message: State, clients: State) -> State:
        own = self.algorithm.client_finish(
            _without(message, ROUND), _without(clients, RESIDUAL, STATE)
        )
        return {**clients, **own}

    # ------------------------------------------------------------------ wire
    def upload_shapes(self, problem: FederatedProblem, phase: int) -> dict[str, tuple[int, ...]]:
        if phase != self.model_phase:
            return self.algorithm.upload_shapes(problem, phase)
        ((_, shape),) = self.algorithm.upload_shapes(problem, phase).items()
        spec = self.compressor.payload_spec(tuple(shape), self._dtype)
        return {PAYLOAD + k: s for k, (s, _) in spec.items()}

    def wire_dtypes(self, phase: int) -> dict[str, Any]:
        if phase != self.model_phase:
            return self.algorithm.wire_dtypes(phase)
        spec = self.compressor.payload_spec(self._shape, self._dtype)
        return {PAYLOAD + k: d for k, (_, d) in spec.items()}

    def decode(self, message: State, uploads: State, phase: int) -> State:
        """The rule's uploads that carry the decoded updates; tangent updates projected onto
        :math:`T_{x^r}M` (module docstring)."""
        if phase != self.model_phase:
            return self.algorithm.decode(message, uploads, phase)
        payload = _with(uploads, PAYLOAD)
        decoded = self.compressor.decode(payload, self._shape, self._dtype)
        inner = _without(message, ROUND)
        x = inner["x"]
        updates = to_like(decoded, x)
        if self.algorithm.privacy_space == "tangent":
            anchors = ops_for(x, updates).broadcast_to(x, updates.shape)
            updates = self._manifold.to_tangent(anchors, updates)
        decoded = {self._key: updates}
        if (
            isinstance(self.algorithm, PrivateAlgorithm)
            and self.algorithm.settings.mode == "central"
        ):
            base = x if self.algorithm.privacy_space == "tangent" else None
            norms = update_norms(self._manifold, base, decoded)
            decoded, _ = clip_rows(decoded, norms, self.algorithm.settings.clip)
        return self.algorithm.upload_of(inner, decoded, phase)

    # ------------------------------------------------------------------ server
    def server_step(
        self, manifold: Manifold, server: State, phase: int, message: State, uploads: State
    ) -> State:
        new = self.algorithm.server_step(
            manifold, _without(server, ROUND), phase, _without(message, ROUND), uploads
        )
        return self._counted(server, new, phase)

    def server_step_from_sum(
        self,
        manifold: Manifold,
        server: State,
        phase: int,
        message: State,
        total: State,
        count: int,
    ) -> State:
        new = self.algorithm.server_step_from_sum(
            manifold, _without(server, ROUND), phase, _without(message, ROUND), total, count
        )
        return self._counted(server, new, phase)

    def _counted(self, server: State, new: State, phase: int) -> State:
        step = 1 if phase == self.model_phase else 0
        return {**new, ROUND: server[ROUND] + step}

    def sum_only(self, phase: int) -> bool:
        return self.algorithm.sum_only(phase)

    def point_uploads(self, phase: int) -> str | None:
        return self.algorithm.point_uploads(phase)

    def update_of(self, message: State, uploads: State, phase: int) -> State:
        return self.algorithm.update_of(_without(message, ROUND), uploads, phase)

    def upload_of(self, message: State, updates: State, phase: int) -> State:
        return self.algorithm.upload_of(_without(message, ROUND), updates, phase)

    def output(self, server: State) -> Any:
        return self.algorithm.output(_without(server, ROUND))

    def describe(self) -> dict[str, Any]:
        return {
            **self.algorithm.describe(),
            "name": self.name,
            "compression": self.codec.describe(),
        }

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The wrapped rule's run state, if any (the residuals are client rows)."""
        if isinstance(self.algorithm, Stateful):
            return {"rule": self.algorithm.state_dict()}
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (after :meth:`init`).

        Raises
        ------
        CheckpointError
            A wrapped rule's state missing.
        """
        if isinstance(self.algorithm, Stateful):
            where = f"checkpoint: {self.name} rule state"
            self.algorithm.load_state_dict(require(state, "rule", dict, where=where))


def private_rule(algorithm: SyncAlgorithm) -> PrivateAlgorithm | None:
    """The :class:`~riemfl.federated.privacy.PrivateAlgorithm` that clips (and noises) the
    clients' updates of ``algorithm``: itself, or the rule a :class:`Compressed` wraps (the
    clients clip, then compress); None for a rule without privacy."""
    if isinstance(algorithm, Compressed):
        algorithm = algorithm.algorithm
    return algorithm if isinstance(algorithm, PrivateAlgorithm) else None

r"""Synchronous FLoRAL rounds (Algorithm 1 with partial participation) on the run core.

:func:`run_floral` is the synchronous engine's configuration for personalised models: the run
core (:func:`riemfl.federated.run_core.run_steps`: rows, progress, checkpoints, interruption)
with synchronous rounds (:class:`riemfl.federated.rounds.RoundSteps`: the seed's client
sampling, the checks of every upload, drops with their reasons), and

* the executor :class:`FloralClients`: each participant's local run from the global vector
  (:meth:`FloralTrainer.train`), uploading its vector, :math:`N^k` and :math:`\hat\pi^k`; a
  client whose run raises, or whose upload is refused, keeps its previous personal state;
* the server rule :class:`FloralServer`: the aggregation of the accepted uploads with
  :math:`N^k` and :math:`\hat\pi^k` (:class:`~riemfl.nn.floral.FloralAggregator`: factor
  averages or manifold-aware products, optional server optimiser, whose state a checkpoint
  keeps);
* the evaluator: personal metrics (:meth:`FloralTrainer.evaluate`: each client with its own
  router, which only the client holds) and the aggregation's diagnostics.

A checkpoint holds the global vector, the clients' personal state, the generator, the server
optimiser and the history, so a resumed run ends exactly where an uninterrupted one does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._validation import integer
from ...errors import ParameterError
from ...federated.faults import FaultRecorder, failure_reason, upload_problem
from ...federated.fingerprint import data_digest
from ...federated.history import History
from ...federated.rounds import PhaseReply, RoundSteps
from ...federated.run_core import EngineSpec, RunOptions, run_steps
from ...federated.seeds import SeedStreams
from .server import FloralAggregator
from .trainer import FloralTrainer

__all__ = ["run_floral", "FloralClients", "FloralServer"]

State = dict[str, Any]


class FloralServer:
    """FLoRAL's server rule: one phase, the aggregation of :class:`FloralAggregator`."""

    n_phases = 1
    local_steps = 1

    def __init__(self, aggregator: FloralAggregator, clustered: bool) -> None:
        self.aggregator, self.clustered = aggregator, clustered

    def broadcast(self, server: State, phase: int) -> State:
        return {"x": server["x"]}

    def server_step(
        self, manifold: Any, server: State, phase: int, message: State, uploads: State
    ) -> State:
        pi = uploads["pi"] if self.clustered else None
        x, info = self.aggregator.aggregate(server["x"], uploads["x"], uploads["n"], pi)
        return {"x": x, "info": {k: float(v) for k, v in info.items()}}

    def sum_only(self, phase: int) -> bool:
        """No: each client's adaptors are weighed by its own router probabilities."""
        return False

    def server_step_from_sum(
        self, manifold: Any, server: State, phase: int, message: State, total: State, count: int
    ) -> State:
        raise NotImplementedError("FLoRAL's aggregation needs each client's upload")

    def point_uploads(self, phase: int) -> str | None:
        """None: the uploads are adaptors and router weights, not points of one manifold."""
        return None

    def wire_dtypes(self, phase: int) -> dict[str, Any]:
        """None declared: every upload is in the model's dtype."""
        return {}

    def decode(self, message: State, uploads: State, phase: int) -> State:
        """The uploads as they travelled (nothing is compressed)."""
        return uploads

    def output(self, server: State) -> np.ndarray:
        return server["x"]

    def state_dict(self) -> dict[str, Any]:
        return {"server_optimizer": self.aggregator.server_optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.aggregator.server_optimizer.load_state_dict(state["server_optimizer"])


def upload_shapes(trainer: FloralTrainer) -> dict[str, tuple[int, ...]]:
    r"""What one FLoRAL client uploads: its federated vector, :math:`N^k` and
    :math:`\hat\pi^k`."""
    return {"x": (trainer.layout.size,), "n": (), "pi": (trainer.last_pi.shape[1],)}


class FloralClients:
    """FLoRAL's executor: the participants' local runs, one after another, in process.

    Parameters
    ----------
    trainer : FloralTrainer
    rng : numpy.random.Generator
        The run's generator (each local run draws its seed from it).
    history : History
        Receives one log entry per accepted update.
    """

    def __init__(self, trainer: FloralTrainer, rng: np.random.Generator, history: History) -> None:
        self.trainer, self.rng, self.history = trainer, rng, history
        self.shapes = upload_shapes(trainer)
        self._before: State = {}
        self._sizes: dict[int, float] = {}
        self._round = 0

    def run_phase(
        self, r: int, phase: int, message: State, active: np.ndarray, batches: np.ndarray | None
    ) -> PhaseReply:
        tr = self.trainer
        self._round = r
        self._before = {k: v[active].copy() for k, v in tr.client_state().items()}
        rows: list[tuple[int, np.ndarray, float, np.ndarray]] = []
        reasons: dict[int, str] = {}
        for j, i in enumerate(active):
            try:
                local = tr.train(int(i), message["x"], self.rng)
            except Exception as exc:  # noqa: BLE001 - a client's failure must not end the run
                reasons[j] = failure_reason(exc)
                continue
            n_k, pi_k = tr.upload_weights(int(i))
            upload = {"x": local, "n": np.float64(n_k), "pi": pi_k}
            why = upload_problem(upload, self.shapes, np.float64)  # before stacking it
            if why is not None:
                reasons[j] = why
                continue
            rows.append((j, local, n_k, pi_k))
        self._sizes = {j: n_k for j, _, n_k, _ in rows}
        served = np.array([j for j, *_ in rows], dtype=np.intp)
        uploads = {}
        if rows:
            uploads = {
                "x": np.stack([x for _, x, _, _ in rows]),
                "n": np.array([n_k for _, _, n_k, _ in rows], dtype=np.float64),
                "pi": np.stack([pi for *_, pi in rows]),
            }
        return PhaseReply(uploads, served, reasons)

    def accept(self, phase: int, active: np.ndarray, kept: np.ndarray) -> None:
        tr = self.trainer
        rejected = np.setdiff1d(np.arange(len(active)), kept)
        if rejected.size:  # they keep their previous personal state
            state = tr.client_state()
            for key, before in self._before.items():
                state[key][active[rejected]] = before[rejected]
            tr.load_client_state(state)
        total = float(sum(self._sizes[int(j)] for j in kept))
        for j in kept:
            self.history.log_update(
                client=int(active[j]),
                staleness=0,
                weight=self._sizes[int(j)] / total,
                time=float(self._round),
                version=self._round,
                applied=True,
            )

    def finish(self, message: State, survivors: np.ndarray) -> None:
        """FLoRAL clients keep their personal state between rounds; nothing to deliver."""

    def state_dict(self) -> dict[str, Any]:
        return {"clients": self.trainer.client_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.trainer.load_client_state(state["clients"])


def run_floral(
    trainer: FloralTrainer,
    steps: int,
    *,
    options: RunOptions | None = None,
    aggregator: FloralAggregator | None = None,
    clients_per_round: int | None = None,
    x0: np.ndarray | None = None,
) -> History:
    """Run ``steps`` synchronous FLoRAL rounds (module docstring).

    Parameters
    ----------
    trainer : FloralTrainer
        The clients (data, personal state, local training).
    steps : int
        Communication rounds R (a step of a synchronous run is a round).
    options : RunOptions, optional
        Seed (client sampling and the local runs' shuffles), recording cadence, checkpoint,
        resume, progress bar and callback (:class:`~riemfl.federated.run_core.RunOptions`;
        default ``RunOptions()``).
    aggregator : FloralAggregator, optional
        Default: factor-wise averages (Algorithm 1) with plain averaging.
    clients_per_round : int, optional
        Participants per round (default: all).
    x0 : array (D,), optional
        Initial global vector (default: ``trainer.global_parameters()``).

    Returns
    -------
    History
        ``metrics``: ``round``, ``uplink_floats`` (cumulative floats uploaded per client on
        average), ``cpu_time``, ``participants``, the trainer's metrics, the aggregator's
        diagnostics and ``wall_time``; ``log``: one entry per accepted client update;
        ``warnings``: every dropped client; ``final_point``: the last global vector.
    """
    options = RunOptions() if options is None else options
    seed = options.seed
    steps = integer(steps, "run_floral: steps", minimum=0)
    aggregator = aggregator if aggregator is not None else FloralAggregator(trainer.layout)
    n = trainer.n_clients
    if clients_per_round is not None and not 1 <= clients_per_round <= n:
        raise ParameterError(
            f"run_floral: clients_per_round must be in 1..{n}, got {clients_per_round!r}"
        )
    x = trainer.global_parameters() if x0 is None else np.array(x0, dtype=np.float64)
    if x.shape != upload_shapes(trainer)["x"] or not np.isfinite(x).all():
        raise ParameterError(
            f"run_floral: x0 must be a finite vector of the model's {trainer.layout.size} "
            f"federated parameters, got shape {x.shape}"
        )
    config = {
        "trainer": trainer.describe(),
        "aggregator": aggregator.describe(),
        "clients_per_round": clients_per_round,
        "seed": seed,
    }
    history = History(config={**config, "steps": steps, "engine": "floral-sync"})
    rng = SeedStreams(seed).generator("rounds")
    shapes = upload_shapes(trainer)
    server = FloralServer(aggregator, trainer.layout.n_clusters is not None)
    rounds = RoundSteps(
        server,
        FloralClients(trainer, rng, history),
        trainer,
        {"x": x, "info": {}},
        lambda phase: shapes,
        rng,
        FaultRecorder(history),
        clients_per_round=clients_per_round,
        dtype=np.float64,
    )

    def evaluate(point: np.ndarray) -> dict[str, float]:
        return {**trainer.evaluate(point), **rounds.server["info"]}

    spec = EngineSpec(steps, label="floral", show=("accuracy", "loss"), columns=("round",))
    fingerprint = {**config, "data": data_digest(trainer), "x0": data_digest(x)}
    return run_steps(rounds, evaluate, history, fingerprint, options, spec)

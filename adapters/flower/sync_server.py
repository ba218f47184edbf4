r"""A synchronous riemfl algorithm on a Flower grid: the round loop of the ServerApp.

The loop is :func:`riemfl.federated.run_sync`'s: the run core
(:func:`riemfl.federated.run_steps`) with synchronous rounds
(:class:`riemfl.federated.RoundSteps`: the same sampling, checks of every upload, drops and
accounting) and the global objective as evaluator; only the executor differs,
:class:`GridClients`, which runs the client rule on the nodes:

1. clients and mini-batches are drawn with :func:`riemfl.federated.engine.sample_round` from
   ``rounds`` stream of the job's seed (:class:`~riemfl.federated.seeds.SeedStreams`; the
   same draws as ``run_sync``),
   and the batches travel in the message of each node;
2. per phase, every node with participating clients gets the broadcast and runs the
   algorithm's ``client_step`` on its stack; the server checks every reply
   (:mod:`~riemfl.adapters.flower.checks`), drops failing clients with their reason, stacks the
   survivors' uploads in client order and runs ``server_step``;
3. the node keeps its new client rows *pending* until the server's next message says which were
   accepted (a dropped client keeps its old rows, as in ``run_sync``); after the last phase,
   that next message (the next round's phase-0 broadcast, which is exactly the new global model)
   also runs ``client_finish`` on them. A node that has pending rows but no client in the next
   round gets a message with no work for this. The last round's pending rows are never read,
   so no message is spent on them. A node whose message fails (no reply in time, or an error
   reply) is excluded for the rest of the job: its client state is no longer known.

Same seed, same draws, same rules, same order of the stacked uploads: the iterates equal
``run_sync``'s (to rounding; the tests ask for 1e-10).

With ``SyncJob(secagg=...)`` the nodes check their own rows and keep them; the phase's sum
reaches the server through Flower's SecAgg+ (:mod:`riemfl.adapters.flower.secure`) as a
pre-aggregated :class:`~riemfl.federated.rounds.PhaseReply` (``total``).

With ``SyncJob(privacy=...)`` the nodes run the :class:`~riemfl.federated.privacy.PrivateAlgorithm`
(clipping, local noise) and the round's aggregator is a
:class:`~riemfl.federated.privacy.GaussianSum` seeded as in ``run_sync``: central noise on the
sum (also on a SecAgg+ sum, through its ``from_total``) and the ``epsilon`` column.

With ``SyncJob(aggregator=...)`` the round's aggregator is a copy of the job's (e.g. a robust
one of :mod:`riemfl.federated.robust`), handed to :class:`~riemfl.federated.rounds.RoundSteps`
as ``run_sync(aggregator=...)`` does (under privacy, as the inner sum of the
:class:`~riemfl.federated.privacy.GaussianSum`); its state is in the round's checkpoint and its
settings are in the History's ``config`` and the fingerprint, as ``run_sync``'s.
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from riemfl.adapters.flower.checks import check_upload_arrays, upload_verdicts
from riemfl.adapters.flower.errors import ProtocolError
from riemfl.adapters.flower.grid_io import exchange, install_on_nodes, reply_error, setup_nodes
from riemfl.adapters.flower.jobs import SyncJob
from riemfl.adapters.flower.secure import max_weight, secure_sum
from riemfl.adapters.flower.wire import (
    RESTORE,
    SNAPSHOT,
    SYNC,
    check_point_meta,
    decode,
    encode,
    group,
    point_meta,
    prefixed,
    to_numpy,
)

from riemfl.errors import RiemflError
from riemfl.federated.aggregation import Aggregator
from riemfl.federated.algorithm import State
from riemfl.federated.checkpoint import inconsistent, require_layout
from riemfl.federated.compressed import private_rule
from riemfl.federated.engine import initial_point
from riemfl.federated.faults import FaultRecorder
from riemfl.federated.fingerprint import data_digest, settings
from riemfl.federated.history import METRICS, History
from riemfl.federated.local import problem_metrics
from riemfl.federated.privacy import privatize, summarise_privacy
from riemfl.federated.rounds import PhaseReply, RoundSteps
from riemfl.federated.run_core import EngineSpec, run_steps
from riemfl.federated.seeds import SeedStreams

__all__ = ["run_sync_job", "GridClients"]


class GridClients:
    """The executor of a Flower grid: the client rule of each phase runs on the nodes.

    Parameters
    ----------
    grid : flwr Grid
    job : SyncJob
    hosting : dict of int to list of int
        Node id -> the clients it hosts.
    rows : dict of arrays
        The client state of every client at the start (``algorithm.init``; leading axis: the
        clients), the layout of the client state in a checkpoint.

    Notes
    -----
    The executor's state (:meth:`state_dict`) is the client state of every client, which lives
    on the nodes: a checkpoint asks every node for its rows (``query.riemfl_state``) and a
    resume installs them on the nodes of the new run (``train.riemfl_state``), so a job whose
    server process died continues on fresh nodes as if it had not been interrupted.
    """

    def __init__(
        self, grid: Any, job: Any, hosting: dict[int, list[int]], rows: dict[str, np.ndarray]
    ) -> None:
        self.grid, self.job = grid, job
        self.rows = {k: to_numpy(v) for k, v in rows.items()}
        self.problem = job.resolved
        self.manifold = self.problem.manifold
        self.hosting = hosting
        self.owner = {c: node for node, clients in hosting.items() for c in clients}
        self.pending: dict[int, list[int]] = {node: [] for node in hosting}
        self.finishing = False
        self.lost: dict[int, str] = {}
        self.meta = point_meta(self.manifold)
        self._requested: dict[int, list[int]] = {}
        self.weight = max_weight(max((len(c) for c in hosting.values()), default=1))

    # ------------------------------------------------------------------ messages
    def _messages(
        self, r: int, phase: int, message: State, active: np.ndarray, batches: np.ndarray | None
    ) -> tuple[dict[int, Any], dict[int, list[int]], dict[int, str]]:
        """Per node: the message; the stack rows it serves; rows dropped for a lost node."""
        arrays = prefixed("message", {k: to_numpy(v) for k, v in message.items()})
        rows_of: dict[int, list[int]] = {}
        for j, c in enumerate(active):
            rows_of.setdefault(self.owner[int(c)], []).append(j)
        contents, drops = {}, {}
        for node in self.hosting:
            mine = rows_of.get(node, [])
            if node in self.lost:
                drops.update({j: self.lost[node] for j in mine})
                continue
            if not mine and not self.pending[node]:
                continue
            config = {
                "job": self.job.name,
                "round": r,
                "phase": phase,
                "clients": [int(active[j]) for j in mine],
                "commit": self.pending[node],
                "finish": phase == 0 and self.finishing,
                "secure": self.job.secagg is not None,
                **self.meta,
            }
            node_arrays = dict(arrays)
            if batches is not None and mine:
                node_arrays["batches"] = batches[mine]
            contents[node] = encode(config, node_arrays)
        return contents, rows_of, drops

    def _check_reply(
        self, phase: int, message: State, reply: Any, requested: list[int]
    ) -> tuple[dict[int, dict[str, np.ndarray]], dict[int, str], float]:
        """Accepted upload rows and reasons per client of one node's reply; its CPU time."""
        why = reply_error(reply)
        if why is not None:
            return {}, dict.fromkeys(requested, why), 0.0
        try:
            config, arrays = decode(reply.content)
            check_point_meta(self.manifold, config)
        except RiemflError as exc:
            return {}, dict.fromkeys(requested, f"malformed reply: {exc}"), 0.0
        reasons = {
            int(c): str(w) for c, w in zip(config["dropped"], config["reasons"], strict=True)
        }
        served = [int(c) for c in config["clients"]]
        if not set(served) <= set(requested) or len(set(served)) != len(served):
            why = f"reply answers for clients {served}; expected some of {requested}"
            return {}, dict.fromkeys(requested, why), 0.0
        uploads = group("upload", arrays)
        if self.job.secagg is not None:  # the node checked its rows; they reach the SecAgg+ sum
            unanswered = set(requested) - set(served) - set(reasons)
            reasons.update(dict.fromkeys(unanswered, "the node returned no upload for it"))
            why = "a secure phase's reply carries uploads" if uploads else None
            accepted = {} if why else {c: {} for c in served}
            return (
                accepted,
                {**reasons, **dict.fromkeys(served if why else [], why)},
                float(config["cpu_time"]),
            )
        expected = self.job.algorithm.upload_shapes(self.problem, phase)
        why = check_upload_arrays(
            uploads, expected, len(served), self.job.algorithm.wire_dtypes(phase)
        )
        if why is not None:
            return {}, {**reasons, **dict.fromkeys(served, why)}, float(config["cpu_time"])
        accepted: dict[int, dict[str, np.ndarray]] = {}
        base = to_numpy(message["x"]) if "x" in message else None
        rows = upload_verdicts(
            self.job.algorithm,
            self.manifold,
            phase,
            uploads,
            self.job.atol,
            base,
            self.job.upload_kinds,
        )
        bad = {served[j]: why for j, why in rows.items()}
        for s, c in enumerate(served):
            if c not in bad:
                accepted[c] = {k: v[s] for k, v in uploads.items()}
        unanswered = set(requested) - set(served) - set(reasons)
        reasons.update(dict.fromkeys(unanswered, "the node returned no upload for it"))
        return accepted, {**reasons, **bad}, float(config["cpu_time"])

    # ------------------------------------------------------------------ ClientExecutor
    def run_phase(
        self, r: int, phase: int, message: State, active: np.ndarray, batches: np.ndarray | None
    ) -> PhaseReply:
        contents, rows_of, drops = self._messages(r, phase, message, active, batches)
        group_id = f"{self.job.name}:{r}:{phase}"
        replies = exchange(
            self.grid, contents, SYNC, group_id, self.job.reply_timeout, self.job.max_poll
        )
        self.finishing = False
        position = {int(c): j for j, c in enumerate(active)}
        accepted: dict[int, dict[str, np.ndarray]] = {}
        cpu = 0.0
        self._requested = {}
        for node, reply in replies.items():
            self.pending[node] = []
            failed = reply_error(reply)
            if failed is not None:  # the node's client state is unknown from now on
                self.lost[node] = f"node {node} excluded from the job after: {failed}"
            requested = [int(active[j]) for j in rows_of.get(node, [])]
            ok, bad, node_cpu = self._check_reply(phase, message, reply, requested)
            cpu += node_cpu
            accepted.update({position[c]: rows for c, rows in ok.items()})
            drops.update({position[c]: w for c, w in bad.items()})
            self._requested[node] = requested
        if self.job.secagg is not None:
            return self._secure_reply(r, phase, message, active, accepted, drops, cpu)
        served = np.array(sorted(accepted), dtype=np.intp)
        uploads = {}
        if served.size:
            keys = accepted[int(served[0])]
            uploads = {k: np.stack([accepted[int(j)][k] for j in served]) for k in keys}
        return PhaseReply(uploads, served, drops, cpu_time=cpu)

    def _secure_reply(
        self,
        r: int,
        phase: int,
        message: State,
        active: np.ndarray,
        accepted: dict[int, Any],
        drops: dict[int, str],
        cpu: float,
    ) -> PhaseReply:
        """Flower's SecAgg+ over the nodes with accepted clients: the reply is their sum."""
        node_of = {j: self.owner[int(active[j])] for j in accepted}
        counts: dict[int, int] = {}
        for node in node_of.values():
            counts[node] = counts.get(node, 0) + 1
        config = {"job": self.job.name, "round": r, "phase": phase}
        shapes = self.job.algorithm.upload_shapes(self.problem, phase)
        result = secure_sum(
            self.grid,
            self.job.secagg,
            counts,
            shapes,
            config,
            weight=self.weight,
            timeout=self.job.reply_timeout,
            round_id=r,
        )
        if result.total is None:
            drops.update(dict.fromkeys(node_of, f"secure aggregation failed: {result.why}"))
            return PhaseReply({}, np.zeros(0, dtype=np.intp), drops, cpu_time=cpu)
        for node in set(counts) - set(result.nodes):  # its client state is unknown from now on
            self.lost[node] = f"node {node} dropped out of secure aggregation ({result.why})"
        served = sorted(j for j, node in node_of.items() if node in result.nodes)
        drops.update({j: self.lost[node] for j, node in node_of.items() if node in self.lost})
        dtype = to_numpy(message["x"]).dtype if "x" in message else np.float64
        total = {k: v.astype(dtype) for k, v in result.total.items()}
        return PhaseReply({}, np.array(served, dtype=np.intp), drops, cpu, total=total)

    def accept(self, phase: int, active: np.ndarray, kept: np.ndarray) -> None:
        """Each node keeps the new rows of its accepted clients (told in its next message)."""
        kept_clients = {int(active[j]) for j in kept}
        for node, requested in self._requested.items():
            self.pending[node] = [c for c in requested if c in kept_clients]

    def finish(self, message: State, survivors: np.ndarray) -> None:
        """The next phase-0 message (the new global model) runs ``client_finish`` on them."""
        self.finishing = True

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        """Every client's state rows (from the nodes), the rows awaiting the server's verdict,
        whether the next message finishes a round, and the excluded clients with their reason.

        A node that does not answer is excluded from then on, as after any failed message;
        its clients keep the rows of its last answer.
        """
        live = [node for node in self.hosting if node not in self.lost]
        contents = {node: encode({"job": self.job.name}) for node in live}
        group_id = f"{self.job.name}:state"
        replies = exchange(
            self.grid, contents, SNAPSHOT, group_id, self.job.reply_timeout, self.job.max_poll
        )
        pending = {k: [] for k in self.rows}
        pending_clients: list[int] = []
        for node, reply in replies.items():
            why = reply_error(reply)
            try:
                config, arrays = decode(reply.content) if why is None else ({}, {})
                if why is None:
                    check_point_meta(self.manifold, config)
                    self._take_snapshot(node, config, arrays, pending, pending_clients)
            except RiemflError as exc:
                why = f"malformed reply: {exc}"
            if why is not None:
                self.lost[node] = f"node {node} excluded from the job after: {why}"
        order = np.argsort(pending_clients, kind="stable")
        return {
            "clients": dict(self.rows),
            "pending": [pending_clients[j] for j in order],
            "pending_rows": {
                k: (np.concatenate(v)[order] if v else np.zeros((0, *self.rows[k].shape[1:])))
                for k, v in pending.items()
            },
            "finishing": self.finishing,
            "excluded": sorted(
                [c, why] for node, why in self.lost.items() for c in self.hosting[node]
            ),
        }

    def _take_snapshot(
        self,
        node: int,
        config: dict[str, Any],
        arrays: dict[str, np.ndarray],
        pending: dict[str, list[np.ndarray]],
        pending_clients: list[int],
    ) -> None:
        """Copy one node's answer into the server's rows; collect its pending rows."""
        hosted, waiting = self.hosting[node], [int(c) for c in config["pending"]]
        if waiting != self.pending[node]:
            raise ProtocolError(
                f"node {node} holds pending rows of clients {waiting}; the server expects "
                f"{self.pending[node]}"
            )
        rows = require_layout(
            group("rows", arrays), {k: v[hosted] for k, v in self.rows.items()}, "node rows"
        )
        waiting_rows = require_layout(
            group("pending", arrays),
            {k: v[waiting] for k, v in self.rows.items()} if waiting else {},
            "node pending rows",
        )
        for k, v in rows.items():
            self.rows[k][hosted] = v
        for k, v in waiting_rows.items():
            pending[k].append(v)
        pending_clients.extend(waiting)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Install a checkpoint's client state on the nodes of this run (``train.riemfl_state``).

        Raises
        ------
        CheckpointError
            For rows that do not fit the job's client state.
        ClientFailureError
            When a live node does not install them (the run cannot continue as the
            uninterrupted run would).
        """
        self.rows = require_layout(state["clients"], self.rows, "checkpoint: client state")
        pending = [int(c) for c in state["pending"]]
        unknown = sorted(set(pending) - set(self.owner))
        if unknown:
            raise inconsistent("state key 'executor.pending'", unknown, "hosted clients")
        fresh = {k: v[pending] for k, v in self.rows.items()}
        pending_rows = require_layout(state["pending_rows"], fresh, "checkpoint: pending rows")
        self.finishing = bool(state["finishing"])
        excluded = {int(c): str(why) for c, why in state["excluded"]}
        self.lost = {
            node: excluded[clients[0]]
            for node, clients in self.hosting.items()
            if clients and all(c in excluded for c in clients)
        }
        self.pending = {
            node: [c for c in pending if self.owner[c] == node] for node in self.hosting
        }
        contents = {}
        for node, hosted in self.hosting.items():
            if node in self.lost:
                continue
            mine = [j for j, c in enumerate(pending) if self.owner[c] == node]
            config = {"job": self.job.name, "pending": self.pending[node], **self.meta}
            arrays = {
                **prefixed("rows", {k: v[hosted] for k, v in self.rows.items()}),
                **prefixed("pending", {k: v[mine] for k, v in pending_rows.items()}),
            }
            contents[node] = encode(config, arrays)
        install_on_nodes(self.grid, self.job, contents, RESTORE, "client state")


def run_sync_job(grid: Any, job: SyncJob, nodes: Sequence[int]) -> History:
    """Run ``job`` over ``grid`` with the registered ``nodes``; return its :class:`History`.

    The History has the columns of :func:`riemfl.federated.run_sync`'s; ``cpu_time`` is the CPU
    time of the rules (the server's ``server_step`` and every node's ``client_step``, as each
    node reports it), ``wall_time`` the wall-clock time of the rounds (messaging included), and
    ``warnings`` every dropped client with its reason.
    """
    problem, algorithm = job.resolved, job.algorithm
    x0 = job.x0 if job.x0 is not None else initial_point(problem, job.options.seed)
    server, rows = algorithm.init(problem, x0)
    hosting = setup_nodes(
        grid,
        job.name,
        "sync",
        problem.manifold,
        nodes,
        problem.n_clients,
        job.registration_timeout,
        {"x0": to_numpy(x0)},
        job.max_poll,
    )
    history = History(
        config={
            "problem": problem.describe(),
            "algorithm": algorithm.describe(),
            "seed": job.options.seed,
            "clients_per_round": job.clients_per_round,
            "batch_size": job.batch_size,
            "steps": job.steps,
            "engine": "flower",
            "job": job.name,
            "nodes": len(hosting),
            **({} if job.aggregator is None else {"aggregator": settings(job.aggregator)}),
            **_byzantine_config(job, problem.n_clients),
        }
    )
    steps = RoundSteps(
        algorithm,
        GridClients(grid, job, hosting, rows),
        problem,
        server,
        lambda phase: algorithm.upload_shapes(problem, phase),
        SeedStreams(job.options.seed).generator("rounds"),
        FaultRecorder(history, label=f"job {job.name}, "),
        clients_per_round=job.clients_per_round,
        batch_size=job.batch_size,
        dtype=algorithm.output(server).dtype,
        clock=time.thread_time,
        aggregator=_aggregator(job),
        attack=None
        if job.byzantine is None
        else job.byzantine.attackers(algorithm, problem.n_clients, job.options.seed),
    )
    spec = EngineSpec(job.steps, label=f"job {job.name}", columns=METRICS)
    evaluate = functools.partial(problem_metrics, problem)
    fingerprint = {
        **{k: v for k, v in history.config.items() if k != "steps"},
        "secagg": None if job.secagg is None else settings(job.secagg),
        "privacy": None if job.privacy is None else job.privacy.describe(),
        "data": data_digest(problem),
        "x0": data_digest(x0),
    }
    history = run_steps(steps, evaluate, history, fingerprint, job.options, spec)
    summarise_privacy(history, None if job.privacy is None else job.privacy.delta)
    return history


def _byzantine_config(job: SyncJob, n_clients: int) -> dict[str, Any]:
    """The History's ``byzantine`` entry, as ``run_sync`` writes it (none without attackers)."""
    if job.byzantine is None:
        return {}
    return {"byzantine": job.byzantine.describe(n_clients, job.options.seed)}


def _aggregator(job: SyncJob) -> Aggregator | None:
    """The run's aggregator: a copy of the job's (each run starts from it as given); for a
    private job, the :class:`~riemfl.federated.privacy.GaussianSum` around it: central noise
    (from the job's seed, as ``run_sync``) on the sum, in the clear or from SecAgg+
    (``GaussianSum.from_total``), and the accounting."""
    aggregator = copy.deepcopy(job.aggregator)
    if job.privacy is None:
        return aggregator
    return privatize(
        private_rule(job.algorithm).algorithm,
        job.privacy,
        population=job.resolved.n_clients,
        sample_size=job.clients_per_round,
        seed=job.options.seed,
        aggregator=aggregator,
    )[1]

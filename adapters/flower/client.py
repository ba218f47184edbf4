"""The Flower ``ClientApp``: each node runs riemfl's own client rules on the clients it hosts.

A node hosts the riemfl clients of its partition: with ``partition-id`` p and ``num-partitions``
P in its node configuration (Flower's simulation engine sets both; a SuperNode gets them from
``--node-config "partition-id=0 num-partitions=3"``), it hosts block p of
``numpy.array_split(range(n_clients), P)``. The handlers only translate: they decode a message,
call the algorithm's ``client_step`` / ``client_finish`` (or the asynchronous job's trainer:
:class:`ProblemTrainer.train`, or :class:`BezierProblemTrainer.train` for a curve rule), and
encode the result. Message format: :mod:`riemfl.adapters.flower.wire`.

Under secure aggregation (:mod:`riemfl.adapters.flower.secure`) a node keeps its uploads,
checks them itself and answers Flower's SecAgg+ stages on the default ``train`` handler, which
carries Flower's ``secaggplus_mod``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from riemfl.adapters.flower._flwr import flwr
from riemfl.adapters.flower.errors import ProtocolError
from riemfl.adapters.flower.jobs import AsyncJob, Job, SyncJob
from riemfl.adapters.flower.node_compression import (
    NodeCompression,
    client_arrays,
    rows_of_clients,
)
from riemfl.adapters.flower.node_state import NodeState
from riemfl.adapters.flower.secure import Contribution, contribute
from riemfl.adapters.flower.wire import (
    check_point_meta,
    check_upload_meta,
    decode,
    encode,
    group,
    point_meta,
    prefixed,
    to_numpy,
    upload_meta,
)

from riemfl.federated.algorithm import ClientContext, SyncAlgorithm
from riemfl.federated.compressed import private_rule
from riemfl.federated.privacy import client_noise
from riemfl.problems.base import FederatedProblem

__all__ = ["make_client_app", "hosted_clients", "run_client_rule"]

JobSource = Sequence[Job] | Callable[[str, Any], Job]


def hosted_clients(node_config: Mapping[str, Any], n_clients: int) -> list[int]:
    """The riemfl clients a node hosts: block ``partition-id`` of ``num-partitions`` blocks.

    Raises
    ------
    ProtocolError
        When the node configuration lacks either key or they are out of range.
    """
    try:
        p, parts = int(node_config["partition-id"]), int(node_config["num-partitions"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(
            f"node_config {dict(node_config)} lacks an integer 'partition-id' and "
            "'num-partitions'; start the SuperNode with --node-config "
            '"partition-id=0 num-partitions=3"'
        ) from exc
    if not 0 <= p < parts:
        raise ProtocolError(f"partition-id {p} is not in 0..{parts - 1} (num-partitions {parts})")
    return [int(c) for c in np.array_split(np.arange(n_clients), parts)[p]]


def run_client_rule(
    algorithm: SyncAlgorithm,
    problem: FederatedProblem,
    phase: int,
    message: Mapping[str, Any],
    rows: Mapping[str, Any],
    clients: Sequence[int],
    batches: np.ndarray | None,
    noise: Callable[[Sequence[int]], Any] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], list[bool], dict[int, str]]:
    """Run ``algorithm.client_step`` on a stack of clients, isolating the ones that raise.

    As in the in-process engine, when the stacked call raises, each client is rerun alone with
    exactly its batches, so only the failing ones are dropped. ``noise(clients)``, when given,
    is the generator of a private rule's local noise for that stack (set on its
    :func:`~riemfl.federated.compressed.private_rule` before each call:
    :func:`~riemfl.federated.privacy.client_noise`).

    Returns
    -------
    uploads, new_rows : dict of arrays
        Of the clients that succeeded, stacked in order.
    ok : list of bool
        Per client of ``clients``.
    reasons : dict
        Stack row -> why that client failed.
    """
    ctx = ClientContext(problem, np.asarray(clients, dtype=np.intp), batches)
    if noise is not None:
        private_rule(algorithm).rng = noise(clients)
    try:
        uploads, new_rows = algorithm.client_step(ctx, phase, dict(message), dict(rows))
        uploads = {k: to_numpy(v) for k, v in uploads.items()}
        new_rows = {k: to_numpy(v) for k, v in new_rows.items()}
        return uploads, new_rows, [True] * len(clients), {}
    except Exception as exc:  # noqa: BLE001 - a client's failure is reported, not fatal
        if len(clients) == 1:
            return {}, {}, [False], {0: f"{type(exc).__name__}: {exc}"}
    parts = []
    for j in range(len(clients)):
        sub_rows = {k: v[j : j + 1] for k, v in rows.items()}
        sub_batches = None if batches is None else batches[j : j + 1]
        parts.append(
            run_client_rule(
                algorithm, problem, phase, message, sub_rows, [clients[j]], sub_batches, noise
            )
        )
    ok = [p[2][0] for p in parts]
    reasons = {j: p[3][0] for j, p in enumerate(parts) if not p[2][0]}
    good = [p for p in parts if p[2][0]]
    uploads = {k: np.concatenate([p[0][k] for p in good]) for k in (good[0][0] if good else {})}
    new_rows = {k: np.concatenate([p[1][k] for p in good]) for k in (good[0][1] if good else {})}
    return uploads, new_rows, ok, reasons


def _local_noise(job: SyncJob, r: int, phase: int) -> Callable[[Sequence[int]], Any] | None:
    """The local-noise generators of a private job's clients in round ``r``, ``phase`` (None: no
    local noise)."""
    rule = private_rule(job.algorithm)
    if rule is None or rule.settings.mode != "local":
        return None
    return lambda clients: client_noise(job.options.seed, clients, r, phase)


def _compressed_update(
    job: AsyncJob, context: Any, client: int, count: int, received: Any, local: Any
) -> dict[str, np.ndarray]:
    r"""FedBuff's compressed upload of ``client`` (its ``count``-th accepted one, as the server
    says): the payload of :math:`\Delta_i = x^t - x_i` with the client's rows kept on this node
    (:class:`~riemfl.adapters.flower.node_compression.NodeCompression`), whose new rows wait
    for the server's verdict."""
    rows = NodeCompression(context.state, job.name)
    before = rows.settle(client, count)
    delta = to_numpy(received) - to_numpy(local)
    payload, _, after = job.compression.compress(client, count, delta, before)
    rows.set_pending(client, after)
    return prefixed("payload", payload)


class _Handlers:
    """The message handlers of one ClientApp (jobs looked up by name)."""

    def __init__(self, jobs: JobSource) -> None:
        if callable(jobs):
            self._resolve = jobs
        else:
            table = {job.name: job for job in jobs}
            if len(table) != len(jobs):
                raise ProtocolError(f"job names must be unique, got {[j.name for j in jobs]}")

            def resolve(name: str, context: Any) -> Job:
                if name not in table:
                    raise ProtocolError(
                        f"unknown job {name!r}; this ClientApp serves {sorted(table)}"
                    )
                return table[name]

            self._resolve = resolve

    def _job(self, config: Mapping[str, Any], context: Any, *kinds: type) -> Any:
        job = self._resolve(str(config.get("job")), context)
        if not isinstance(job, kinds):
            expected = " or ".join(k.__name__ for k in kinds)
            raise ProtocolError(
                f"job {job.name!r} is a {type(job).__name__}; this message needs a {expected}"
            )
        return job

    def _reply(
        self, msg: Any, config: Mapping[str, Any], arrays: Mapping[str, Any] | None = None
    ) -> Any:
        return flwr().Message(encode(config, arrays), reply_to=msg)

    # ------------------------------------------------------------------ handlers
    def setup(self, msg: Any, context: Any) -> Any:
        config, arrays = decode(msg.content)
        job = self._job(config, context, SyncJob, AsyncJob)
        problem = job.resolved
        check_point_meta(problem.manifold, config)
        hosted = hosted_clients(context.node_config, problem.n_clients)
        if isinstance(job, SyncJob):
            _, rows = job.algorithm.init(problem, arrays["x0"])
            NodeState(context.state, job.name).init(
                hosted, {k: to_numpy(v)[hosted] for k, v in rows.items()}
            )
        elif job.compression is not None:
            NodeCompression(context.state, job.name).init(hosted)
        meta = point_meta(problem.manifold)
        return self._reply(msg, {"job": job.name, "clients": hosted, **meta})

    def sync(self, msg: Any, context: Any) -> Any:
        config, arrays = decode(msg.content)
        job: SyncJob = self._job(config, context, SyncJob)
        problem, algorithm = job.resolved, job.algorithm
        check_point_meta(problem.manifold, config)
        state = NodeState(context.state, job.name)
        commit = [int(c) for c in config["commit"]]
        state.commit(commit)
        message = group("message", arrays)
        if config["finish"] and commit:  # the new global model after the round of `commit`
            state.write(commit, algorithm.client_finish(message, state.gather(commit)))
        clients = [int(c) for c in config["clients"]]
        reply = {"job": job.name, "clients": [], "dropped": [], "reasons": [], "cpu_time": 0.0}
        uploads: dict[str, np.ndarray] = {}
        if clients:
            t0 = time.thread_time()
            r, phase = int(config["round"]), int(config["phase"])
            uploads, new_rows, ok, reasons = run_client_rule(
                algorithm,
                problem,
                phase,
                message,
                state.gather(clients),
                clients,
                arrays.get("batches"),
                _local_noise(job, r, phase),
            )
            kept = [c for c, good in zip(clients, ok, strict=True) if good]
            state.set_pending(kept, new_rows)
            dropped = {clients[j]: reasons[j] for j in sorted(reasons)}
            if config.get("secure"):  # the uploads stay here, for the SecAgg+ stage
                kept, refused = contribute(job, context.state, r, phase, message, uploads, kept)
                dropped.update(refused)
                uploads = {}
            reply["cpu_time"] = time.thread_time() - t0
            reply["clients"] = kept
            reply["dropped"] = list(dropped)
            reply["reasons"] = list(dropped.values())
        return self._reply(
            msg, {**reply, **point_meta(problem.manifold)}, prefixed("upload", uploads)
        )

    def snapshot(self, msg: Any, context: Any) -> Any:
        """A job's checkpoint: a synchronous job's rows, pending clients and pending rows on
        this node; a compressed asynchronous job's rows of the ``clients`` after the server's
        ``counts`` of their accepted uploads."""
        config, _ = decode(msg.content)
        job: SyncJob | AsyncJob = self._job(config, context, SyncJob, AsyncJob)
        if isinstance(job, AsyncJob):
            rows = NodeCompression(context.state, job.name)
            clients, counts = (list(map(int, config[k])) for k in ("clients", "counts"))
            arrays = client_arrays(
                {c: rows.rows_at(c, k) for c, k in zip(clients, counts, strict=True)}
            )
            return self._reply(msg, {"job": job.name, "clients": clients}, arrays)
        rows, pending, pending_rows = NodeState(context.state, job.name).snapshot()
        reply = {"job": job.name, "pending": pending, **point_meta(job.resolved.manifold)}
        arrays = {**prefixed("rows", rows), **prefixed("pending", pending_rows)}
        return self._reply(msg, reply, arrays)

    def restore(self, msg: Any, context: Any) -> Any:
        """A job's resume: install the checkpoint's rows of this node's clients (a compressed
        asynchronous job's: with the server's counts of their accepted uploads)."""
        config, arrays = decode(msg.content)
        job: SyncJob | AsyncJob = self._job(config, context, SyncJob, AsyncJob)
        check_point_meta(job.resolved.manifold, config)
        if isinstance(job, AsyncJob):
            clients, counts = (list(map(int, config[k])) for k in ("clients", "counts"))
            NodeCompression(context.state, job.name).restore(
                dict(zip(clients, counts, strict=True)), rows_of_clients(arrays, clients)
            )
            return self._reply(msg, {"job": job.name, "clients": clients})
        state = NodeState(context.state, job.name)
        pending = [int(c) for c in config["pending"]]
        state.restore(group("rows", arrays), pending, group("pending", arrays))
        return self._reply(msg, {"job": job.name, "clients": state.hosted})

    def train_async(self, msg: Any, context: Any) -> Any:
        config, arrays = decode(msg.content)
        job: AsyncJob = self._job(config, context, AsyncJob)
        problem = job.resolved
        check_point_meta(problem.manifold, config)
        upload = upload_meta(job.upload_kind, job.upload_shape)
        check_upload_meta(config, upload)
        client = int(config["client"])
        hosted = hosted_clients(context.node_config, problem.n_clients)
        if client not in hosted:
            raise ProtocolError(f"client {client} is not hosted by this node (it hosts {hosted})")
        seq = np.random.SeedSequence(
            int(config["seed"]), spawn_key=(client, int(config["dispatch"]))
        )
        epochs = int(config["epochs"])
        t0 = time.thread_time()
        local = job.trainer().train(
            client, arrays["x"], np.random.default_rng(seq), None if epochs < 0 else epochs
        )
        uploads = {"x": local}
        if job.compression is not None:
            uploads = _compressed_update(
                job, context, client, int(config["uploads"]), arrays["x"], local
            )
        reply = {
            "job": job.name,
            "client": client,
            "version": int(config["version"]),
            "cpu_time": time.thread_time() - t0,
            **point_meta(problem.manifold),
            **upload,
        }
        return self._reply(msg, reply, uploads)

    def secure_fit(self, msg: Any, context: Any) -> Any:
        """The SecAgg+ stage that collects the masked vectors: this node's contribution to the
        phase named by the fit instruction, as ``FitRes(parameters=[mean per key, keys sorted],
        num_examples=count)`` (Flower's ``secaggplus_mod`` around this handler masks it)."""
        from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
        from flwr.compat.common import recorddict_compat as compat

        config = compat.recorddict_to_fitins(msg.content, keep_input=True).config
        job: SyncJob = self._job(config, context, SyncJob)
        mean, count = Contribution(context.state, job.name).take(
            int(config["round"]), int(config["phase"])
        )
        parameters = ndarrays_to_parameters([mean[k] for k in sorted(mean)])
        fitres = FitRes(Status(Code.OK, ""), parameters, count, {})
        return flwr().Message(compat.fitres_to_recorddict(fitres, keep_input=False), reply_to=msg)

    def ping(self, msg: Any, context: Any) -> Any:
        config, arrays = decode(msg.content)
        return self._reply(msg, {"job": config.get("job", "")}, arrays)


def make_client_app(jobs: JobSource, *, mods: Sequence[Callable] | None = None) -> Any:
    """A Flower ``ClientApp`` that serves riemfl jobs.

    Parameters
    ----------
    jobs : sequence of jobs, or callable
        The jobs the server will run (looked up by the name in each message), or
        ``resolve(name, context) -> job`` (the deployment app builds jobs from
        ``context.run_config``).
    mods : sequence of Flower mods, optional
        Passed to ``ClientApp(mods=...)`` (they wrap every handler, outside the SecAgg+ mod).

    Returns
    -------
    flwr.clientapp.ClientApp
        With handlers ``train.riemfl_setup``, ``train.riemfl_sync``, ``train.riemfl_async``,
        ``query.riemfl_ping``, ``query.riemfl_state`` / ``train.riemfl_state`` (a synchronous
        job's checkpoint and resume), and ``train`` (the SecAgg+ stages, behind Flower's
        ``secaggplus_mod``).
    """
    f = flwr()  # first: without Flower, FlowerNotInstalledError
    from flwr.client.mod import secaggplus_mod

    handlers = _Handlers(jobs if callable(jobs) else list(jobs))
    app = f.ClientApp(mods=list(mods) if mods else None)
    app.train(mods=[secaggplus_mod])(handlers.secure_fit)  # Flower's SecAgg+ (secure.py)
    app.train("riemfl_setup")(handlers.setup)
    app.train("riemfl_sync")(handlers.sync)
    app.train("riemfl_async")(handlers.train_async)
    app.query("riemfl_ping")(handlers.ping)
    app.query("riemfl_state")(handlers.snapshot)
    app.train("riemfl_state")(handlers.restore)
    return app

"""Run riemfl jobs in Flower's simulation engine (``flwr.simulation.run_simulation``, Ray).

Two things of the engine are set here rather than left to Flower's defaults:

* **Restartable actors.** Flower runs every node's messages on a shared pool of Ray actors
  (``BasicActorPool``): whichever actor is idle takes the next message, whatever its node. When
  a ClientApp kills its process (``os._exit``, a segfault, the OOM killer), Flower puts the dead
  actor back into the pool, and Ray does not restart actors by default, so every later message
  that lands on it fails with ``ActorDiedError``: healthy nodes fail with the dead one. The
  actors are therefore created with ``max_restarts=-1`` (Ray restarts a dead actor) and
  ``max_task_retries=1`` (a message handed to an actor while it restarts waits for it instead of
  failing with ``ActorUnavailableError``; the message that killed it is run once more, then
  fails, and the server excludes its node).
* **Loopback only.** Ray binds its servers to the node's address, by default the machine's
  routable one (all interfaces); a simulation needs none of that, so Ray gets
  ``_node_ip_address="127.0.0.1"`` (see :func:`default_backend_config`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from riemfl.adapters.flower._flwr import flwr
from riemfl.adapters.flower.client import make_client_app
from riemfl.adapters.flower.errors import (
    FlowerAdapterError,
    FlowerNotInstalledError,
    JobFailedError,
)
from riemfl.adapters.flower.jobs import REGISTRATION_TIMEOUT, Job
from riemfl.adapters.flower.quiet import quiet_flower
from riemfl.adapters.flower.secure import SecAggSettings
from riemfl.adapters.flower.server import make_server_app

from riemfl._validation import integer

__all__ = ["simulate", "default_backend_config", "ACTOR_FAULT_TOLERANCE", "LOOPBACK"]

log = logging.getLogger("riemfl.adapters.flower")

#: Ray actor options that keep a dying node from taking the healthy ones down (module docstring)
ACTOR_FAULT_TOLERANCE: dict[str, int] = {"max_restarts": -1, "max_task_retries": 1}
#: the address Ray binds to by default in a simulation
LOOPBACK = "127.0.0.1"
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def default_backend_config(cpus: int | None = None, *, loopback: bool = True) -> dict[str, Any]:
    """Flower's backend configuration for :func:`simulate`.

    Ray with ``cpus`` CPUs (default: all) and one CPU per ClientApp actor (so ``cpus`` actors run
    nodes' messages in parallel); restartable actors (:data:`ACTOR_FAULT_TOLERANCE`); no
    dashboard; with ``loopback``, every Ray server bound to 127.0.0.1 only.
    """
    cpus = max(1, cpus or os.cpu_count() or 1)
    init_args: dict[str, Any] = {"num_cpus": cpus, "num_gpus": 0, "include_dashboard": False}
    if loopback:
        init_args["_node_ip_address"] = LOOPBACK
    return {
        "client_resources": {"num_cpus": 1, "num_gpus": 0.0, **ACTOR_FAULT_TOLERANCE},
        "init_args": init_args,
    }


def _fault_tolerant(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with :data:`ACTOR_FAULT_TOLERANCE` in its ``client_resources`` (Flower passes
    them to ``ClientAppActor.options``) unless it sets them itself."""
    out = copy.deepcopy(dict(config))
    resources = out.get("client_resources")
    if resources is None:
        out["client_resources"] = default_backend_config()["client_resources"]
    else:
        out["client_resources"] = {**ACTOR_FAULT_TOLERANCE, **resources}
    return out


@contextlib.contextmanager
def _ray_started(config: Mapping[str, Any]) -> Iterator[None]:
    """Start Ray as Flower would (its ``init_args``, the driver's ``sys.path`` as the workers'
    ``PYTHONPATH``), plus the workers' setup hook that filters two of Flower's notices
    (:func:`~riemfl.adapters.flower.quiet.install_filter`); Flower then uses this Ray and shuts
    it down at the end. Ray already running (the user's) is left as it is."""
    import ray

    if ray.is_initialized():
        yield
        return
    paths = [*sys.path, *filter(None, [os.environ.get("PYTHONPATH")])]
    runtime_env = {
        "env_vars": {"PYTHONPATH": os.pathsep.join(paths)},
        "worker_process_setup_hook": "riemfl.adapters.flower.quiet.install_filter",
    }
    init_args = {"logging_level": logging.WARNING, **dict(config.get("init_args") or {})}
    ray.init(runtime_env=runtime_env, **init_args)
    try:
        yield
    finally:
        if ray.is_initialized():  # Flower shuts it down when the simulation ends normally
            ray.shutdown()


@contextlib.contextmanager
def _ray_on_loopback(config: Mapping[str, Any]) -> Iterator[None]:
    """Keep a loopback ``_node_ip_address`` of ``config["init_args"]`` loopback.

    Ray 2.x replaces 127.0.0.1, localhost and ::1 by the machine's routable address
    (``ray._private.services.resolve_ip_for_localhost``) unless its multi-machine clusters are
    off (``ray._private.ray_constants.ENABLE_RAY_CLUSTER``, read from the environment variable
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` when Ray is imported); they are turned off while the
    simulation starts Ray, and restored afterwards.
    """
    address = (config.get("init_args") or {}).get("_node_ip_address")
    try:
        constants = importlib.import_module("ray._private.ray_constants")
    except ImportError:  # run_simulation reports the missing extra
        constants = None
    if address not in _LOOPBACK_NAMES or not hasattr(constants, "ENABLE_RAY_CLUSTER"):
        if address in _LOOPBACK_NAMES and constants is not None:
            log.warning("this Ray version may bind the simulation to a routable address")
        yield
        return
    saved = constants.ENABLE_RAY_CLUSTER
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = saved


def _with_timeouts(jobs: list[Job], **timeouts: Any) -> list[Job]:
    """``jobs`` with the given timeouts and settings (those a job has; ``None``: keep the job's
    own)."""
    given = {k: v for k, v in timeouts.items() if v is not None}
    if not given:
        return jobs
    return [
        dataclasses.replace(job, **{k: v for k, v in given.items() if hasattr(job, k)})
        for job in jobs
    ]


def _job_failed(jobs: list[Job], results: dict[str, Any], exc: Exception) -> JobFailedError:
    """The error of a simulation that stopped on ``exc``, with the finished jobs' results."""
    pending = [job.name for job in jobs if job.name not in results]
    failed, skipped = pending[0], pending[1:]
    return JobFailedError(
        f"job {failed!r} failed ({type(exc).__name__}: {exc}); the results of the jobs that "
        f"finished before it, {list(results)}, are in .results; not run: {skipped}",
        results=dict(results),
        job=failed,
        cause=exc,
        skipped=skipped,
    )


def simulate(
    jobs: Sequence[Job],
    num_supernodes: int,
    *,
    backend_config: Mapping[str, Any] | None = None,
    registration_timeout: float | None = None,
    reply_timeout: float | None = None,
    mods: Sequence[Callable] | None = None,
    secagg: SecAggSettings | bool | None = None,
    verbose: bool = False,
) -> dict[str, Any]:
    """Run ``jobs`` in order in one Flower simulation with ``num_supernodes`` virtual nodes.

    Starting the simulation engine (Ray) takes seconds, so put every job of a session in one
    call. Node p of P hosts block p of ``numpy.array_split(range(n_clients), P)``.

    Parameters
    ----------
    jobs : sequence of SyncJob, AsyncJob or PingJob
    num_supernodes : int
        Virtual SuperNodes (partition-ids 0..num_supernodes-1).
    backend_config : mapping, optional
        Flower's backend configuration (default: :func:`default_backend_config`: Ray on
        127.0.0.1 only). Its ``client_resources`` get :data:`ACTOR_FAULT_TOLERANCE` unless they
        set those keys (a configuration without ``client_resources`` gets the default's).
    registration_timeout : float, optional
        Seconds the ServerApp waits for the nodes to register (default
        :data:`~riemfl.adapters.flower.jobs.REGISTRATION_TIMEOUT`); when given, also every job's
        ``registration_timeout`` (its handshake).
    reply_timeout : float, optional
        When given, every job's ``reply_timeout`` (default: each job's own).
    mods : sequence of Flower mods, optional
        ClientApp mods (e.g. to inject faults in tests: :class:`CorruptReplies`).
    secagg : SecAggSettings or bool, optional
        When given, every SyncJob's ``secagg``: its phases run through Flower's SecAgg+
        (:mod:`riemfl.adapters.flower.secure`; ``True``: the default settings).
    verbose : bool
        Flower's debug logging.

    Returns
    -------
    dict
        ``job.name ->`` History, History or PingResult.

    Raises
    ------
    JobFailedError
        When a job raises (e.g. ``ClientFailureError``, ``NoProgressError``,
        ``NodeRegistrationError``): the simulation stops there; the error carries the finished
        jobs' results (``.results``), the failed job's name (``.job``), what it raised
        (``.cause``, also ``__cause__``) and the jobs not run (``.skipped``).
    """
    integer(num_supernodes, "simulate: num_supernodes", minimum=1)
    jobs = _with_timeouts(
        list(jobs),
        registration_timeout=registration_timeout,
        reply_timeout=reply_timeout,
        secagg=secagg,
    )
    results: dict[str, Any] = {}
    server_app = make_server_app(
        jobs,
        min_nodes=int(num_supernodes),
        results=results,
        registration_timeout=registration_timeout or REGISTRATION_TIMEOUT,
    )
    client_app = make_client_app(jobs, mods=mods)
    if backend_config is None:
        config = default_backend_config()
    else:
        config = _fault_tolerant(backend_config)
    run_simulation = flwr().run_simulation
    try:
        with _ray_on_loopback(config), quiet_flower(), _ray_started(config):
            run_simulation(
                server_app=server_app,
                client_app=client_app,
                num_supernodes=int(num_supernodes),
                backend_config=config,
                verbose_logging=verbose,
            )
    except FlowerNotInstalledError:
        raise
    except Exception as exc:  # noqa: BLE001 - a job's failure, re-raised with the results
        if all(job.name in results for job in jobs):  # failed after the last job: keep them
            log.warning("the simulation failed after its last job: %r", exc)
            return results
        raise _job_failed(jobs, results, exc) from exc
    if any(job.name not in results for job in jobs):
        cause = FlowerAdapterError("the simulation ended early (see Flower's log above)")
        raise _job_failed(jobs, results, cause) from cause
    return results

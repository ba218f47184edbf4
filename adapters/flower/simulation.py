"""Run riemfl jobs in Flower's simulation engine (``flwr.simulation.run_simulation``, Ray)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...errors import ParameterError
from ._flwr import flwr
from .client import make_client_app
from .errors import FlowerAdapterError
from .jobs import Job
from .server import make_server_app

__all__ = ["simulate", "default_backend_config"]


def default_backend_config(cpus: int | None = None) -> dict[str, Any]:
    """Ray with ``cpus`` CPUs (default: all) and one CPU per ClientApp actor (so ``cpus``
    actors run nodes' messages in parallel)."""
    cpus = max(1, cpus or os.cpu_count() or 1)
    return {
        "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
        "init_args": {"num_cpus": cpus, "num_gpus": 0},
    }


def simulate(
    jobs: Sequence[Job],
    num_supernodes: int,
    *,
    backend_config: Mapping[str, Any] | None = None,
    registration_timeout: float = 120.0,
    mods: Sequence[Callable] | None = None,
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
        Flower's backend configuration (default: :func:`default_backend_config`).
    registration_timeout : float
        Seconds the ServerApp waits for the nodes.
    mods : sequence of Flower mods, optional
        ClientApp mods (e.g. to inject faults in tests).
    verbose : bool
        Flower's debug logging.

    Returns
    -------
    dict
        ``job.name ->`` History, AsyncHistory or PingResult. An exception in a job (e.g.
        ``ClientFailureError``) propagates.
    """
    if isinstance(num_supernodes, bool) or int(num_supernodes) != num_supernodes:
        raise ParameterError(f"num_supernodes must be an integer >= 1, got {num_supernodes!r}")
    if num_supernodes < 1:
        raise ParameterError(f"num_supernodes must be an integer >= 1, got {num_supernodes!r}")
    jobs = list(jobs)
    results: dict[str, Any] = {}
    server_app = make_server_app(
        jobs,
        min_nodes=int(num_supernodes),
        results=results,
        registration_timeout=registration_timeout,
    )
    client_app = make_client_app(jobs, mods=mods)
    config = dict(backend_config) if backend_config is not None else default_backend_config()
    flwr().run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=int(num_supernodes),
        backend_config=config,
        verbose_logging=verbose,
    )
    missing = [job.name for job in jobs if job.name not in results]
    if missing:
        raise FlowerAdapterError(
            f"the simulation ended without results for jobs {missing} (see Flower's log above)"
        )
    return results

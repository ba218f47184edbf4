"""The Flower ``ServerApp`` that runs riemfl jobs, and the dispatch from a job to its loop."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from riemfl.adapters.flower._flwr import flwr
from riemfl.adapters.flower.async_server import run_async_job
from riemfl.adapters.flower.grid_io import wait_for_nodes
from riemfl.adapters.flower.jobs import REGISTRATION_TIMEOUT, AsyncJob, Job, PingJob, SyncJob
from riemfl.adapters.flower.ping import run_ping_job
from riemfl.adapters.flower.sync_server import run_sync_job

from riemfl.errors import ParameterError

__all__ = ["make_server_app", "run_job"]

log = logging.getLogger("riemfl.adapters.flower")


def run_job(grid: Any, job: Job, nodes: Sequence[int]) -> Any:
    """Run one job over ``grid``: a :class:`~riemfl.federated.History` (sync), an
    :class:`~riemfl.federated.History` (async) or a :class:`PingResult`."""
    if isinstance(job, SyncJob):
        return run_sync_job(grid, job, nodes)
    if isinstance(job, AsyncJob):
        return run_async_job(grid, job, nodes)
    if isinstance(job, PingJob):
        return run_ping_job(grid, job, nodes)
    raise ParameterError(f"expected a SyncJob, AsyncJob or PingJob, got {type(job).__name__}")


def make_server_app(
    jobs: Sequence[Job] | Callable[[Any], Sequence[Job]],
    *,
    min_nodes: int | Callable[[Any], int],
    results: dict[str, Any] | None = None,
    registration_timeout: float | Callable[[Any], float] = REGISTRATION_TIMEOUT,
    on_result: Callable[[Job, Any, Any], None] | None = None,
) -> Any:
    """A Flower ``ServerApp`` that waits for the nodes, then runs ``jobs`` in order.

    Parameters
    ----------
    jobs : sequence of jobs, or callable
        The jobs, or ``jobs(context)`` (the deployment app builds them from
        ``context.run_config``). Job names must be unique.
    min_nodes : int or callable
        Dispatch nothing before this many nodes have registered (``grid.get_node_ids()``);
        ``min_nodes(context)`` is allowed.
    results : dict, optional
        Filled with ``job.name -> result`` as the jobs finish (the ServerApp returns nothing, so
        this is how a caller in the same process gets the results).
    registration_timeout : float or callable
        Seconds to wait for the nodes before raising ``NodeRegistrationError`` (or
        ``registration_timeout(context)``).
    on_result : callable, optional
        Called as ``on_result(job, result, context)`` after each job (e.g. to write files).

    Returns
    -------
    flwr.serverapp.ServerApp
    """
    f = flwr()
    app = f.ServerApp()
    store = results if results is not None else {}

    @app.main()
    def main(grid: Any, context: Any) -> None:
        todo = list(jobs(context) if callable(jobs) else jobs)
        names = [job.name for job in todo]
        if len(set(names)) != len(names):
            raise ParameterError(f"job names must be unique, got {names}")
        need = min_nodes(context) if callable(min_nodes) else min_nodes
        wait = registration_timeout
        nodes = wait_for_nodes(grid, int(need), float(wait(context) if callable(wait) else wait))
        log.info("riemfl: %d nodes registered; running jobs %s", len(nodes), names)
        for job in todo:
            result = run_job(grid, job, nodes)
            store[job.name] = result
            if on_result is not None:
                on_result(job, result, context)

    return app

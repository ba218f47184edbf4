"""Round trips without work: the messaging cost of Flower, measured beside a real job."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from riemfl.adapters.flower.errors import FlowerAdapterError
from riemfl.adapters.flower.grid_io import exchange, reply_error
from riemfl.adapters.flower.jobs import PingJob
from riemfl.adapters.flower.wire import PING, encode

__all__ = ["PingResult", "run_ping_job"]


@dataclass
class PingResult:
    """Round-trip times of a :class:`PingJob`, in seconds.

    Attributes
    ----------
    all_nodes_s : list of float
        One message to every node, until every reply is in (a synchronous round, no work).
    one_node_s : list of float
        One message to one node (nodes in turn): an asynchronous dispatch, no work.
    nodes : int
    payload_bytes : int
        Bytes of arrays in each message (the reply echoes them).
    """

    all_nodes_s: list[float] = field(default_factory=list)
    one_node_s: list[float] = field(default_factory=list)
    nodes: int = 0
    payload_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with the medians."""
        return {
            "all_nodes_s": self.all_nodes_s,
            "one_node_s": self.one_node_s,
            "median_all_nodes_s": statistics.median(self.all_nodes_s),
            "median_one_node_s": statistics.median(self.one_node_s),
            "nodes": self.nodes,
            "payload_bytes": self.payload_bytes,
        }


def _round_trip(grid: Any, job: PingJob, nodes: Sequence[int], tag: str, payload: dict) -> float:
    contents = {node: encode({"job": job.name, "tag": tag}, payload) for node in nodes}
    t0 = time.perf_counter()
    replies = exchange(grid, contents, PING, f"{job.name}:{tag}", job.reply_timeout, job.max_poll)
    elapsed = time.perf_counter() - t0
    failed = {node: reply_error(r) for node, r in replies.items() if reply_error(r) is not None}
    if failed:
        raise FlowerAdapterError(f"job {job.name!r}: ping {tag} failed on nodes {failed}")
    return elapsed


def run_ping_job(grid: Any, job: PingJob, nodes: Sequence[int]) -> PingResult:
    """Measure ``job.repeats`` all-node and one-node round trips over ``grid``."""
    payload = {k: np.zeros(shape) for k, shape in job.payload.items()}
    result = PingResult(nodes=len(nodes), payload_bytes=sum(a.nbytes for a in payload.values()))
    for i in range(job.repeats):  # back to back, as the rounds of a synchronous job
        result.all_nodes_s.append(_round_trip(grid, job, nodes, f"all-{i}", payload))
    for i in range(job.repeats):
        one = [nodes[i % len(nodes)]]
        result.one_node_s.append(_round_trip(grid, job, one, f"one-{i}", payload))
    return result

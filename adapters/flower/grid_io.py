"""The server's side of the messaging: waiting for nodes, exchanging messages, the handshake.

Everything goes through Flower's ``Grid`` (``get_node_ids``, ``push_messages``,
``pull_messages``); replies are polled with a short, growing sleep (1 ms doubling to the job's
``max_poll``, back to 1 ms after each reply), so that a fast round trip is not rounded up to
a fixed polling interval.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from riemfl.adapters.flower._flwr import flwr
from riemfl.adapters.flower.errors import NodeRegistrationError, ProtocolError
from riemfl.adapters.flower.wire import SETUP, decode, encode, point_meta

from riemfl.errors import ClientFailureError

__all__ = [
    "Poller",
    "wait_for_nodes",
    "push",
    "exchange",
    "install_on_nodes",
    "setup_nodes",
    "reply_error",
    "node_lost",
    "CLIENT_APP_RAISED",
    "check_cover",
]

#: Flower's error code of a reply whose ClientApp raised an exception
#: (``flwr.common.constant.ErrorCode.CLIENT_APP_RAISED_EXCEPTION``, part of Flower's wire
#: format). Every other error code means the node could not run the ClientApp at all: its
#: process died (simulation: the Ray actor died, ``ActorDiedError``; deployment:
#: ``CLIENT_APP_CRASHED``), the node is unavailable, or the message expired.
CLIENT_APP_RAISED = 2


class Poller:
    """Sleeps between polls: 1 ms, doubling up to ``max_poll``; :meth:`reset` after progress."""

    def __init__(self, max_poll: float = 0.005) -> None:
        self.max_poll = max_poll
        self.delay = 1e-3

    def reset(self) -> None:
        """Back to the shortest sleep (something arrived)."""
        self.delay = 1e-3

    def wait(self) -> None:
        """Sleep, then double the next sleep (up to ``max_poll``)."""
        time.sleep(self.delay)
        self.delay = min(2 * self.delay, self.max_poll)


def wait_for_nodes(grid: Any, min_nodes: int, timeout: float) -> list[int]:
    """The registered node ids, once at least ``min_nodes`` have registered.

    Raises
    ------
    NodeRegistrationError
        When fewer than ``min_nodes`` nodes have registered after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    poller = Poller(0.1)
    while True:
        nodes = sorted(int(n) for n in grid.get_node_ids())
        if len(nodes) >= min_nodes:
            return nodes
        if time.monotonic() > deadline:
            raise NodeRegistrationError(
                f"{len(nodes)} node(s) registered within {timeout:g} s; expected at least "
                f"{min_nodes} (are the SuperNodes started and pointed at this SuperLink?)"
            )
        poller.wait()


def push(
    grid: Any, items: Sequence[tuple[int, Any]], message_type: str, group_id: str
) -> list[str]:
    """Push one message per ``(node, RecordDict)``; return their ids in the same order ("" for a
    message the grid did not accept)."""
    f = flwr()
    messages = [
        f.Message(content, int(node), message_type, group_id=group_id) for node, content in items
    ]
    ids = [str(i) if i else "" for i in grid.push_messages(messages)]
    if len(ids) != len(messages):
        raise ProtocolError(f"pushed {len(messages)} messages but got {len(ids)} message ids")
    return ids


def exchange(
    grid: Any,
    contents: Mapping[int, Any],
    message_type: str,
    group_id: str,
    timeout: float,
    max_poll: float = 0.005,
) -> dict[int, Any]:
    """Send ``{node: RecordDict}`` and collect the replies.

    Returns
    -------
    dict
        node -> reply ``Message``, or ``None`` when it did not answer within ``timeout``
        seconds (or its message could not be pushed).
    """
    ids = push(grid, list(contents.items()), message_type, group_id)
    node_of = {i: node for i, node in zip(ids, contents, strict=True) if i}
    replies: dict[int, Any] = {node: None for node in contents}
    waiting = set(node_of)
    deadline = time.monotonic() + timeout
    poller = Poller(max_poll)
    while waiting:
        got = list(grid.pull_messages(list(waiting)))
        for reply in got:
            mid = reply.metadata.reply_to_message_id
            if mid in waiting:
                waiting.discard(mid)
                replies[node_of[mid]] = reply
        if not waiting or time.monotonic() > deadline:
            break
        if got:
            poller.reset()
        else:
            poller.wait()
    return replies


def reply_error(reply: Any, timeout: str = "reply_timeout") -> str | None:
    """Why a reply is unusable, else ``None``: no reply within the job's ``timeout`` (the name
    of the knob, for the message), an exception the ClientApp raised, or a node that could not
    run it (see :func:`node_lost`)."""
    if reply is None:
        return f"no reply within the job's {timeout}"
    if not reply.has_error():
        return None
    if reply.error.code == CLIENT_APP_RAISED:
        return f"the ClientApp failed: {reply.error.reason}"
    return (
        f"the node could not run the ClientApp (its process died or the node is unavailable; "
        f"Flower error code {reply.error.code}): {reply.error.reason}"
    )


def node_lost(reply: Any) -> bool:
    """Whether a reply says that its node is gone (no reply at all, or an error other than an
    exception the ClientApp raised: :data:`CLIENT_APP_RAISED`)."""
    return reply is None or (reply.has_error() and reply.error.code != CLIENT_APP_RAISED)


def setup_nodes(
    grid: Any,
    job_name: str,
    kind: str,
    manifold: Any,
    nodes: Sequence[int],
    n_clients: int,
    timeout: float,
    arrays: Mapping[str, Any] | None = None,
    max_poll: float = 0.005,
) -> dict[int, list[int]]:
    """The handshake: every node answers which clients it hosts (and initialises their state).

    ``timeout`` is the job's ``registration_timeout``: the first message to a node also starts
    its ClientApp (a Ray actor or a process) and builds the problem there, which takes far
    longer than a round on a loaded machine.

    Returns
    -------
    dict
        node -> its clients, for the nodes that host at least one.

    Raises
    ------
    NodeRegistrationError
        When a node fails the handshake, or the nodes do not host every client exactly once.
    """
    content = {"job": job_name, "kind": kind, **point_meta(manifold)}
    replies = exchange(
        grid,
        {node: encode(content, arrays) for node in nodes},
        SETUP,
        f"{job_name}:setup",
        timeout,
        max_poll,
    )
    hosting: dict[int, list[int]] = {}
    for node, reply in replies.items():
        why = reply_error(reply, "registration_timeout")
        if why is not None:
            raise NodeRegistrationError(
                f"job {job_name!r}: node {node} failed the handshake: {why}"
            )
        config, _ = decode(reply.content)
        clients = [int(c) for c in config["clients"]]
        if clients:
            hosting[node] = clients
    check_cover(job_name, hosting, n_clients)
    return hosting


def check_cover(job_name: str, hosting: Mapping[int, Iterable[int]], n_clients: int) -> None:
    """Raise :class:`NodeRegistrationError` unless ``hosting`` (node -> clients) covers clients
    0..n_clients-1 exactly once."""
    seen: dict[int, int] = {}
    twice = []
    for node, clients in hosting.items():
        for c in clients:
            if c in seen:
                twice.append((c, seen[c], node))
            seen[c] = node
    missing = sorted(set(range(n_clients)) - set(seen))
    extra = sorted(set(seen) - set(range(n_clients)))
    if missing or twice or extra:
        raise NodeRegistrationError(
            f"job {job_name!r}: the nodes must host clients 0..{n_clients - 1} exactly once; "
            f"missing {missing}, hosted twice (client, node, node) {twice}, unknown {extra} "
            "(give the SuperNodes partition-ids 0..P-1 of the same num-partitions P)"
        )


def install_on_nodes(
    grid: Any, job: Any, contents: Mapping[int, Any], message_type: str, what: str
) -> None:
    """Send each node its part of a checkpoint (``{node: RecordDict}``, the ``RESTORE``
    message) and wait for every node to confirm.

    Raises
    ------
    ClientFailureError
        When a node does not install ``what`` (the run cannot continue as the uninterrupted
        run would).
    """
    group_id = f"{job.name}:restore"
    replies = exchange(grid, contents, message_type, group_id, job.reply_timeout, job.max_poll)
    failed = {node: why for node, r in replies.items() if (why := reply_error(r)) is not None}
    if failed:
        raise ClientFailureError(
            f"job {job.name}: nodes {sorted(failed)} did not install the checkpoint's {what} "
            f"({'; '.join(sorted(set(failed.values())))})"
        )

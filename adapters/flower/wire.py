"""riemfl's message format on Flower: what travels, and how it is encoded as Flower records.

Every message (and every reply) holds a :class:`flwr.app.RecordDict` with two records:

``"riemfl.config"`` (a ``ConfigRecord``)
    ``protocol`` (:data:`PROTOCOL`), ``job`` (the job's name), the manifold's ``manifold`` name
    and ``point_shape`` wherever points travel, and the fields of the message type (below).
``"riemfl.arrays"`` (an ``ArrayRecord``)
    numpy arrays under ``"<group>/<key>"`` names: ``message/x`` (a broadcast entry),
    ``upload/x`` (a client upload, stacked over the node's clients), ``batches`` (mini-batch
    indices), ``x0``, ``x`` (a point; in an asynchronous reply of a curve rule, the learned
    control points, shape ``(degree + 1, *point_shape)``). Arrays keep their dtype and shape
    exactly (Flower serialises them with ``numpy.save``), so a float64 point arrives bit for bit.

An asynchronous message and its reply also say what the client uploads (:func:`upload_meta`):
``upload`` (``"point"``, ``"curve"`` or ``"payload"``) and ``upload_shape``; the node refuses a
message whose upload differs from its own job's, and the server a reply that does not match (a
server and a node that built different jobs fail loudly). A compressed FedBuff's message also
carries ``uploads`` (how many of the client's uploads the server has accepted), and its reply
the packed payload as ``payload/<key>`` arrays instead of ``x``
(:mod:`riemfl.adapters.flower.node_compression`).

Message types (``Message.metadata.message_type``):

=====================  ==========================================================================
``train.riemfl_setup``  handshake: the node answers the clients it hosts (and, for a synchronous
                        job, initialises their client state from ``x0``)
``train.riemfl_sync``   one phase of a synchronous round for the node's participating clients
``train.riemfl_async``  one local training of one client from the current global model
``query.riemfl_ping``   no work: the node echoes the payload (the messaging cost alone)
``query.riemfl_state``  a synchronous job's checkpoint: the node answers its clients' state rows
                        and the rows that await the server's verdict (a compressed FedBuff's: its
                        clients' compression rows at the server's ``counts``, ``rows/<client>/..``)
``train.riemfl_state``  a job's resume: the node installs the state rows (compression rows) of a
                        checkpoint in place of those of its setup
=====================  ==========================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from riemfl.adapters.flower._flwr import flwr
from riemfl.adapters.flower.errors import ProtocolError

from riemfl.backend import to_numpy as _backend_to_numpy

__all__ = [
    "PROTOCOL",
    "SETUP",
    "SYNC",
    "ASYNC",
    "PING",
    "encode",
    "decode",
    "prefixed",
    "group",
    "to_numpy",
    "point_meta",
    "check_point_meta",
    "upload_meta",
    "check_upload_meta",
]

#: version of the format; a node refuses a message of another version (2: asynchronous
#: messages and replies carry ``upload`` and ``upload_shape``)
PROTOCOL = 2
CONFIG_KEY = "riemfl.config"
ARRAYS_KEY = "riemfl.arrays"

SETUP = "train.riemfl_setup"
SYNC = "train.riemfl_sync"
ASYNC = "train.riemfl_async"
PING = "query.riemfl_ping"
SNAPSHOT = "query.riemfl_state"
#: what an asynchronous client uploads (:func:`upload_meta`)
UPLOAD_KINDS = ("point", "curve", "payload")
RESTORE = "train.riemfl_state"


def to_numpy(a: Any) -> np.ndarray:
    """A C-contiguous numpy copy of an array, a torch tensor (detached, on the CPU) or a scalar
    (0-d stays 0-d)."""
    return np.array(_backend_to_numpy(a), order="C", copy=True)


def _config_value(key: str, v: Any) -> Any:
    if isinstance(v, bool | str | bytes):
        return v
    if isinstance(v, int | np.integer):
        return int(v)
    if isinstance(v, float | np.floating):
        return float(v)
    if isinstance(v, list | tuple | np.ndarray):
        items = [_config_value(key, x) for x in v]
        return items
    raise ProtocolError(
        f"config entry {key!r} has type {type(v).__name__}; expected bool, int, float, str, "
        "bytes or a list of one of them"
    )


def encode(config: Mapping[str, Any], arrays: Mapping[str, Any] | None = None) -> Any:
    """The ``RecordDict`` of a message: ``config`` (plus the protocol version) and ``arrays``.

    Parameters
    ----------
    config : mapping
        Scalars, strings and lists of them (numpy integers and floats are converted).
    arrays : mapping, optional
        Name -> array (numpy, torch or scalar); encoded with dtype and shape.
    """
    f = flwr()
    cfg = {k: _config_value(k, v) for k, v in config.items()}
    cfg["protocol"] = PROTOCOL
    records = {CONFIG_KEY: f.ConfigRecord(cfg)}
    records[ARRAYS_KEY] = f.ArrayRecord(
        {k: f.Array(to_numpy(v)) for k, v in (arrays or {}).items()}
    )
    return f.RecordDict(records)


def decode(content: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(config, arrays)`` of a message encoded by :func:`encode` (arrays are writable).

    Raises
    ------
    ProtocolError
        When the content is not riemfl's format or has another protocol version.
    """
    if CONFIG_KEY not in content or ARRAYS_KEY not in content:
        raise ProtocolError(
            f"message content has records {sorted(content.keys())}; expected {CONFIG_KEY!r} and "
            f"{ARRAYS_KEY!r} (riemfl's format, riemfl.adapters.flower.wire)"
        )
    config = dict(content[CONFIG_KEY])
    if config.get("protocol") != PROTOCOL:
        raise ProtocolError(
            f"message has riemfl protocol {config.get('protocol')!r}; expected {PROTOCOL} (run the "
            "same riemfl version on the server and the nodes)"
        )
    arrays = {k: np.array(v.numpy()) for k, v in content[ARRAYS_KEY].items()}
    return config, arrays


def prefixed(prefix: str, arrays: Mapping[str, Any]) -> dict[str, Any]:
    """``{f"{prefix}/{k}": v}``: the names of one group of arrays."""
    return {f"{prefix}/{k}": v for k, v in arrays.items()}


def group(prefix: str, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays named ``"{prefix}/..."`` without the prefix (inverse of :func:`prefixed`)."""
    head = prefix + "/"
    return {k[len(head) :]: v for k, v in arrays.items() if k.startswith(head)}


def point_meta(manifold: Any) -> dict[str, Any]:
    """The config entries that name the manifold of the points a message carries."""
    return {"manifold": manifold.name, "point_shape": list(manifold.point_shape)}


def check_point_meta(manifold: Any, config: Mapping[str, Any]) -> None:
    """Raise :class:`ProtocolError` unless ``config`` names ``manifold`` and its point shape."""
    name, shape = config.get("manifold"), tuple(config.get("point_shape", ()))
    if name != manifold.name or shape != tuple(manifold.point_shape):
        raise ProtocolError(
            f"message carries points of {name!r} with shape {shape}; this side's problem is on "
            f"{manifold.name!r} with point shape {tuple(manifold.point_shape)} (the server and the "
            "nodes must build the same problem)"
        )


def upload_meta(kind: str, shape: tuple[int, ...]) -> dict[str, Any]:
    """The config entries that say what an asynchronous client uploads: ``upload`` (``"point"``:
    a local model, ``"curve"``: control points, ``"payload"``: FedBuff's compressed update of
    a point's shape) and ``upload_shape``."""
    if kind not in UPLOAD_KINDS:
        raise ProtocolError(f"upload kind must be one of {UPLOAD_KINDS}, got {kind!r}")
    return {"upload": kind, "upload_shape": [int(n) for n in shape]}


def check_upload_meta(config: Mapping[str, Any], expected: Mapping[str, Any]) -> None:
    """Raise :class:`ProtocolError` unless ``config`` announces the upload ``expected`` (what
    :func:`upload_meta` gives for this side's job)."""
    shape = config.get("upload_shape")
    got = {"upload": config.get("upload"), "upload_shape": None if shape is None else list(shape)}
    if got != dict(expected):
        raise ProtocolError(
            f"message announces upload {got['upload']!r} of shape "
            f"{tuple(got['upload_shape'] or ())}; this side's job uploads {expected['upload']!r} "
            f"of shape {tuple(expected['upload_shape'])} (the server and the nodes must build the "
            "same job)"
        )

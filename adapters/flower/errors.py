"""Exception types of the Flower adapter (all derive from :class:`riemfl.errors.RiemflError`)."""

from __future__ import annotations

from ...errors import MissingDependencyError, ParameterError, RiemflError

__all__ = [
    "FlowerNotInstalledError",
    "FlowerAdapterError",
    "NodeRegistrationError",
    "ReplyTimeoutError",
    "ProtocolError",
    "TrainerMismatchError",
]


class FlowerNotInstalledError(MissingDependencyError):
    """Flower (``flwr``) is not installed: ``pip install "riemfl[flower]"`` provides it."""


class FlowerAdapterError(RiemflError, RuntimeError):
    """Base class of the errors a Flower run of a riemfl job raises."""


class NodeRegistrationError(FlowerAdapterError):
    """Too few SuperNodes registered in time, or the nodes do not host every client once."""


class ReplyTimeoutError(FlowerAdapterError):
    """No node answered within the job's ``reply_timeout`` (an asynchronous run cannot go on)."""


class ProtocolError(FlowerAdapterError, ValueError):
    """A message does not follow riemfl's format: unknown job, wrong manifold or point shape,
    missing node configuration."""


class TrainerMismatchError(ParameterError):
    """An :class:`~riemfl.adapters.flower.AsyncJob` pairs a server rule with a client whose
    upload it cannot take: a curve rule (AsyncBezier) with a point trainer, a point rule
    (FedAsync) with the curve client, or curve settings without a curve rule."""

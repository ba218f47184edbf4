"""Exception types of the Flower adapter (all derive from :class:`riemfl.errors.RiemflError`)."""

from __future__ import annotations

from typing import Any

from riemfl.errors import MissingDependencyError, ParameterError, RiemflError

__all__ = [
    "FlowerNotInstalledError",
    "FlowerAdapterError",
    "NodeRegistrationError",
    "NoProgressError",
    "ReplyTimeoutError",
    "JobFailedError",
    "ProtocolError",
    "TrainerMismatchError",
    "CertificateError",
    "NodeAuthenticationError",
    "ConnectionRefusedByPeerError",
    "NotSumOnlyError",
]


class FlowerNotInstalledError(MissingDependencyError):
    """Flower (``flwr``) is not installed: ``pip install "riemfl[flower]"`` provides it."""


class FlowerAdapterError(RiemflError, RuntimeError):
    """Base class of the errors a Flower run of a riemfl job raises."""


class NodeRegistrationError(FlowerAdapterError):
    """Too few SuperNodes registered in time, or the nodes do not host every client once."""


class NoProgressError(FlowerAdapterError):
    """No client of an asynchronous job can make progress: every client is excluded (its node
    died or did not answer within ``reply_timeout``, or it failed ``max_failures`` times in a
    row). The message lists each exclusion with its reason."""


class ReplyTimeoutError(NoProgressError):
    """No client of an asynchronous job can make progress, the last ones because their nodes did
    not answer within the job's ``reply_timeout``."""


class JobFailedError(FlowerAdapterError):
    """A job of :func:`~riemfl.adapters.flower.simulate` failed; the jobs before it had finished.

    Attributes
    ----------
    results : dict
        ``job.name ->`` result of every job that finished before the failure.
    job : str
        The name of the job that failed (the one running, or about to start, when the
        simulation stopped).
    cause : BaseException
        What the job raised (also the exception's ``__cause__``).
    skipped : list of str
        The jobs after it, which did not run.
    """

    def __init__(
        self,
        message: str,
        *,
        results: dict[str, Any],
        job: str,
        cause: BaseException,
        skipped: list[str],
    ) -> None:
        super().__init__(message)
        self.results, self.job, self.cause, self.skipped = results, job, cause, skipped


class ProtocolError(FlowerAdapterError, ValueError):
    """A message does not follow riemfl's format: unknown job, wrong manifold or point shape,
    missing node configuration."""


class TrainerMismatchError(ParameterError):
    """An :class:`~riemfl.adapters.flower.AsyncJob` pairs a server rule with a client whose
    upload it cannot take: a curve rule (AsyncBezier) with a point trainer, a point rule
    (FedAsync) with the curve client, or curve settings without a curve rule."""


class CertificateError(FlowerAdapterError):
    """A TLS file of a deployment is missing, unreadable, expired or not yet valid, or does not
    fit the others (a server certificate the CA did not sign, a key of another certificate, a
    certificate that does not name the host the clients connect to). The message names the
    file and what is wrong with it."""


class NodeAuthenticationError(NodeRegistrationError):
    """The SuperLink refused a SuperNode's authentication: its public key is not registered with
    a SuperLink that runs with SuperNode authentication (``--enable-supernode-auth``)."""


class ConnectionRefusedByPeerError(FlowerAdapterError):
    """A SuperNode or the ``flwr`` CLI could not connect to the SuperLink: the TLS handshake
    failed (it does not trust the server's certificate, or speaks plain HTTP to a TLS server) or
    nothing answered. The message names the process and quotes its log."""


class NotSumOnlyError(ParameterError):
    """Secure aggregation was asked for a synchronous rule with a phase whose server step needs
    each upload (:meth:`~riemfl.federated.SyncAlgorithm.sum_only` is False), e.g. RFedAvg with
    ``upload="point"``; under secure aggregation the server only learns the sum."""

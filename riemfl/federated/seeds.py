"""The random streams of a run, named in one place.

Every random draw of a run comes from a child of ``numpy.random.SeedSequence(seed)`` (the
``seed`` of :class:`~riemfl.federated.run_core.RunOptions`). The child's index is the stream's
contract: reproduced numbers and checkpoints depend on it, so the indices are written here once,
by name, and the engines ask for a stream by its name. Child ``i`` is
``SeedSequence(seed, spawn_key=(i,))``, the same sequence as ``SeedSequence(seed).spawn(n)[i]``
for any ``n > i``, so a stream does not depend on how many others exist.

A synchronous run (:func:`~riemfl.federated.run_sync`, :func:`~riemfl.nn.floral.run_floral`):

========================  =====  ==========================================================
stream                    child  draws
========================  =====  ==========================================================
``initial_point``         0      the initial global model (when none is given)
``rounds``                1      client sampling and mini-batches, round by round
``central_noise``         2      differential privacy: the aggregator's Gaussian noise
``local_noise``           3      differential privacy: each client's Gaussian noise
``byzantine``             4      the attacking clients; its child 0: the attacks' draws
========================  =====  ==========================================================

An asynchronous run (:func:`~riemfl.federated.run_async` and the asynchronous Flower job):

========================  =====  ==========================================================
stream                    child  draws
========================  =====  ==========================================================
``initial_point``         0      the initial global model (when none is given)
``timing``                1      the durations of local runs
``scheduler``             2      the waiting queue's choices
``clients``               3      one generator per client (its child ``i`` for client ``i``)
``rule``                  4      the server rule's own randomness (e.g. FedBuff's DP noise)
========================  =====  ==========================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .._validation import integer
from ..errors import ParameterError

__all__ = ["SeedStreams", "SYNC_STREAMS", "ASYNC_STREAMS"]

#: stream name -> child index of the run's SeedSequence, for synchronous runs
SYNC_STREAMS: dict[str, int] = {
    "initial_point": 0,
    "rounds": 1,
    "central_noise": 2,
    "local_noise": 3,
    "byzantine": 4,
}

#: stream name -> child index of the run's SeedSequence, for asynchronous runs
ASYNC_STREAMS: dict[str, int] = {
    "initial_point": 0,
    "timing": 1,
    "scheduler": 2,
    "clients": 3,
    "rule": 4,
}


@dataclass(frozen=True)
class SeedStreams:
    """The named random streams of one run.

    Parameters
    ----------
    seed : int
        The run's seed (>= 0).
    layout : {"sync", "async"}
        Which engine's table of streams (module docstring) the names refer to.

    Examples
    --------
    >>> streams = SeedStreams(7, "sync")
    >>> streams.generator("rounds").integers(10) == np.random.default_rng(
    ...     np.random.SeedSequence(7).spawn(2)[1]).integers(10)
    True
    """

    seed: int
    layout: str = "sync"
    LAYOUTS: ClassVar[dict[str, dict[str, int]]] = {"sync": SYNC_STREAMS, "async": ASYNC_STREAMS}

    def __post_init__(self) -> None:
        object.__setattr__(self, "seed", integer(self.seed, "SeedStreams: seed", minimum=0))
        if self.layout not in self.LAYOUTS:
            raise ParameterError(
                f"SeedStreams: layout must be one of {sorted(self.LAYOUTS)}, got {self.layout!r}"
            )

    def sequence(self, name: str) -> np.random.SeedSequence:
        """The :class:`~numpy.random.SeedSequence` of stream ``name``.

        Raises
        ------
        ParameterError
            ``name`` is not a stream of this layout.
        """
        table = self.LAYOUTS[self.layout]
        if name not in table:
            raise ParameterError(
                f"SeedStreams: {self.layout} runs have no stream {name!r}; "
                f"expected one of {sorted(table)}"
            )
        return np.random.SeedSequence(self.seed, spawn_key=(table[name],))

    def generator(self, name: str) -> np.random.Generator:
        """A fresh generator of stream ``name`` (the same draws at every call)."""
        return np.random.default_rng(self.sequence(name))

    def per_client(self, name: str, n_clients: int) -> list[np.random.Generator]:
        """One generator per client, client ``i`` from child ``i`` of stream ``name``."""
        return [np.random.default_rng(s) for s in self.sequence(name).spawn(n_clients)]

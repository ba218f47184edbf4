r"""A checkpoint per server step, and the two runs' server rules that record them.

Licudi 2025 (TR), Sec. 3: "at each server update step, a model checkpoint is saved with details
of the contributing client". A :class:`Checkpoint` holds what the one-step proposals need: the
global model the client trained from (:math:`\Theta^t`), the global model when its update
arrived (:math:`\Theta^\tau`), the client's local model (:math:`\Theta_i^t`, so the
pseudo-gradient :math:`\Delta = \Theta^t - \Theta_i^t`), AsyncCurve's learned control point
:math:`\phi`, the client, its weight and staleness, and the model the run itself moved to.

:class:`RecordedFedAsync` and :class:`RecordedAsyncCurve` are the runs' rules, FedAsync and
AsyncCurve without delay correction, handing each checkpoint to a sink as they step. The sink
sweeps it (:mod:`.sweep`) and lets it go, so the checkpoints are never all held at once (a
LeNet-5 checkpoint is a few hundred kB, a run has thousands): the sweep is offline in that no
proposal feeds back into the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...federated.async_manifold import AsyncCurve
from ...federated.async_rules import Arrival, FedAsync
from ...manifolds.euclidean import Euclidean

__all__ = ["Checkpoint", "RecordedFedAsync", "RecordedAsyncCurve"]

Sink = Callable[["Checkpoint"], None]


@dataclass(frozen=True)
class Checkpoint:
    """One server step of a run.

    Attributes
    ----------
    step : int
        tau, the server version the update arrived at (the step makes version tau + 1).
    client : int
    staleness : int
        tau - t.
    weight : float
        w_i, the client's share of the training rows.
    base, current, local : numpy.ndarray
        Theta^t, Theta^tau and Theta_i^t (flat).
    phi : numpy.ndarray or None
        The control point the client learned (AsyncCurve), else None.
    after : numpy.ndarray
        Theta^(tau+1), where the run moved.
    """

    step: int
    client: int
    staleness: int
    weight: float
    base: np.ndarray
    current: np.ndarray
    local: np.ndarray
    phi: np.ndarray | None
    after: np.ndarray

    def arrival(self) -> Arrival:
        """The server's view of the update (for riemfl's rules), with the local model as the
        upload."""
        return Arrival(
            self.client,
            self.base,
            self.local,
            self.current,
            self.staleness,
            self.weight,
            self.step,
        )


def _checkpoint(a: Arrival, after: Any, curve: bool) -> Checkpoint:
    local, phi = (a.local[2], a.local[1]) if curve else (a.local, None)
    return Checkpoint(
        int(a.version),
        int(a.client),
        int(a.staleness),
        float(a.weight),
        np.asarray(a.base),
        np.asarray(a.current),
        np.asarray(local),
        None if phi is None else np.asarray(phi),
        np.asarray(after),
    )


class RecordedFedAsync(FedAsync):
    """FedAsync (no delay correction: trusted position) handing a :class:`Checkpoint` per step to
    ``sink``."""

    name = "fedasync"

    def __init__(self, sink: Sink, server_lr: float = 1.0) -> None:
        super().__init__(server_lr)
        self._sink = sink

    def apply(self, manifold, a):
        after = super().apply(manifold, a)
        self._sink(_checkpoint(a, after, curve=False))
        return after


class RecordedAsyncCurve(AsyncCurve):
    r"""AsyncCurve without delay correction, handing a :class:`Checkpoint` per step to ``sink``.

    "No correction" here: the end point is the client's local model (trusted position, as the
    FedAsync run), and the learned control point keeps its offset from the chord's midpoint
    without rotation (eq. (17) with R = I), the least AsyncCurve can do to follow the chord to
    :math:`\Theta^\tau`. The step is the curve at parameter :math:`r = \eta_g w_i` (the FedAsync
    run's fraction), so the two runs differ only in the curve.
    """

    name = "asynccurve"

    def __init__(self, sink: Sink, dim: int, server_lr: float = 1.0, **options: Any) -> None:
        """``options``: more :class:`~riemfl.federated.async_manifold.AsyncCurve` settings
        (the study's: none; the defaults above can be overridden, as the tests do)."""
        settings = {"endpoint": FedAsync(), "rotate": False, "weighting": "weight", **options}
        super().__init__(Euclidean(dim), server_lr, **settings)
        self._sink = sink

    def apply(self, manifold, a):
        after = super().apply(manifold, a)
        self._sink(_checkpoint(a, after, curve=True))
        return after

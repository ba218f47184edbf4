r"""OrthoDyn's switch on a statistic of the run: :class:`UpdateNormSwitch`.

Licudi 2025 (TR), eq. (16), schedules OrthoGrad (trust the pseudo-gradient, project it on
conflict) early in training and OrthoPos (trust the client's position) late, switching "based on
any statistic which captures useful information about the local loss landscape", with closeness
to convergence as the example, and fixes no statistic or threshold. Its Fig. 1 shows why: the
methods that trust the pseudo-gradient lead while the models are far from a minimiser, those
that trust the position lead near one.

riemfl's statistic is the size of the clients' updates, relative to its size at the start:

.. math::  r = \bar m / m_0, \qquad \bar m \leftarrow \beta \bar m + (1 - \beta)\,
           \|x_i - x^t\|_F,

with :math:`m_0` the mean of the first ``warmup`` arrivals' :math:`\|x_i - x^t\|_F` (ambient
Frobenius norm) and :math:`\bar m` their exponential moving average from then on. With a fixed
local step size a client's update is about the step times its gradients, so r falls as the run
approaches a stationary point: the proxy for closeness to convergence the report names, which
the server reads from the uploads it receives anyway (no extra communication, no evaluation
on data). The switch happens once, the first time :math:`r \le` ``threshold``, and is kept
(a late burst of large updates does not switch back).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import integer, real
from ..backend import to_numpy
from .rule_state import Checkpointable, Commit, StateReader, setter

__all__ = ["UpdateNormSwitch"]


class UpdateNormSwitch(Checkpointable):
    """OrthoDyn's schedule: ``before`` until the clients' update size falls to ``threshold``
    times its initial size, then ``after`` (module docstring).

    Parameters
    ----------
    threshold : float
        In (0, 1]: switch when :math:`r \\le` threshold (default 0.5).
    warmup : int
        Arrivals whose mean update norm is the reference :math:`m_0` (default 10).
    beta : float
        In [0, 1): the moving average's weight of the past (default 0.9).
    before, after : (alpha, vartheta)
        The OrthoCorrect settings of each phase (default OrthoGrad, then OrthoPos).

    Attributes
    ----------
    switched_at : int or None
        The server version at which the switch happened (None before).
    """

    _state_counters = ("seen",)

    def __init__(
        self,
        threshold: float = 0.5,
        warmup: int = 10,
        beta: float = 0.9,
        before: tuple[float, float] = (0.0, 0.0),
        after: tuple[float, float] = (1.0, 0.0),
    ) -> None:
        self.threshold = real(threshold, "UpdateNormSwitch: threshold", above=0.0, at_most=1.0)
        self.warmup = integer(warmup, "UpdateNormSwitch: warmup", minimum=1)
        self.beta = real(beta, "UpdateNormSwitch: beta", at_least=0.0, below=1.0)
        self.before, self.after = tuple(before), tuple(after)
        self.seen = 0
        self.reference = 0.0
        self.average = 0.0
        self.switched_at: int | None = None

    @property
    def ratio(self) -> float:
        """:math:`r = \\bar m / m_0` (NaN during the warm-up or when the updates were zero)."""
        if self.seen <= self.warmup or self.reference <= 0.0:
            return float("nan")
        return self.average / self.reference

    def __call__(self, a: Any) -> tuple[float, float]:
        """The settings for arrival ``a`` (its update enters the statistic first)."""
        if self.switched_at is not None:
            return self.after
        norm = float(np.linalg.norm(to_numpy(a.local) - to_numpy(a.base)))
        self.seen += 1
        if self.seen <= self.warmup:
            self.reference += (norm - self.reference) / self.seen
            self.average = self.reference
            return self.before
        self.average = self.beta * self.average + (1.0 - self.beta) * norm
        if self.ratio <= self.threshold:
            self.switched_at = int(a.version)
            return self.after
        return self.before

    def _state(self) -> dict[str, Any]:
        switched = -1 if self.switched_at is None else self.switched_at
        return {"reference": self.reference, "average": self.average, "switched_at": switched}

    def _read_state(self, reader: StateReader) -> Commit:
        reference, average = reader.real("reference"), reader.real("average")
        switched = reader.integer("switched_at", minimum=-1)
        for key, value in (("reference", reference), ("average", average)):
            if not np.isfinite(value) or value < 0:
                raise reader.error(key, "a finite float >= 0", value)
        return setter(
            self,
            reference=reference,
            average=average,
            switched_at=None if switched < 0 else switched,
        )

    def _state_owner(self) -> str:
        return "OrthoDyn schedule UpdateNormSwitch"

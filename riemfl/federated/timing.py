"""Compute-time models of the asynchronous simulator: how long one local run of a client takes.

Every model maps (client, number of local batches, RNG) to a positive duration in virtual time
units. The simulator draws one duration per dispatch, from its own seeded generator, so runs are
reproducible.

* :class:`ProportionalTime`: ``num_batches / speed`` (the model of Licudi et al. 2025,
  App. B.0.1: delay proportional to the number of local batches), optionally times a per-client
  factor;
* :class:`ExponentialTime`, :class:`LogNormalTime`: random durations with per-client means
  (heterogeneous devices; Toghani & Uribe 2022, Sec. II, describe the delays only in words and
  give no distribution);
* :class:`TraceTime`: per-client lists of measured durations, replayed cyclically.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence

import numpy as np

from ..errors import ParameterError

__all__ = ["TimingModel", "ProportionalTime", "ExponentialTime", "LogNormalTime", "TraceTime"]


def _positive(name: str, value: float) -> float:
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ParameterError(f"{name} must be a finite number > 0, got {value!r}")
    return v


def _per_client(name: str, value: float | Sequence[float], n: int, client: int) -> float:
    if isinstance(value, int | float):
        return float(value)
    if len(value) != n:
        raise ParameterError(f"{name} has {len(value)} entries for {n} clients")
    return float(value[client])


class TimingModel(abc.ABC):
    """Duration of one local run."""

    @abc.abstractmethod
    def duration(
        self, client: int, num_batches: int, n_clients: int, rng: np.random.Generator
    ) -> float:
        """A positive duration (virtual time units)."""


class ProportionalTime(TimingModel):
    r"""``num_batches / speed`` times an optional per-client slowdown factor.

    Parameters
    ----------
    speed : float
        Batches per time unit (the k = 2 "batches per second" of Licudi et al. 2025,
        App. B.0.1, is ``speed=2``).
    slowdown : float or sequence of float
        Per-client multiplicative factor (1 for all by default).
    """

    def __init__(self, speed: float = 1.0, slowdown: float | Sequence[float] = 1.0) -> None:
        self.speed = _positive("speed", speed)
        self.slowdown = slowdown

    def duration(self, client, num_batches, n_clients, rng):
        factor = _positive("slowdown", _per_client("slowdown", self.slowdown, n_clients, client))
        return max(num_batches, 1) / self.speed * factor


class ExponentialTime(TimingModel):
    """Exponential durations with mean ``mean`` (a number, or one per client)."""

    def __init__(self, mean: float | Sequence[float] = 1.0) -> None:
        self.mean = mean

    def duration(self, client, num_batches, n_clients, rng):
        mean = _positive("mean", _per_client("mean", self.mean, n_clients, client))
        return float(rng.exponential(mean)) + 1e-12  # strictly positive


class LogNormalTime(TimingModel):
    r"""Log-normal durations :math:`\exp(\mathcal N(\log m - \sigma^2/2, \sigma^2))` (mean m)."""

    def __init__(self, mean: float | Sequence[float] = 1.0, sigma: float = 0.5) -> None:
        self.mean = mean
        self.sigma = _positive("sigma", sigma)

    def duration(self, client, num_batches, n_clients, rng):
        mean = _positive("mean", _per_client("mean", self.mean, n_clients, client))
        mu = math.log(mean) - 0.5 * self.sigma**2
        return float(rng.lognormal(mu, self.sigma))


class TraceTime(TimingModel):
    """Measured durations per client, replayed in order and cyclically."""

    def __init__(self, traces: Sequence[Sequence[float]]) -> None:
        self.traces = [[_positive("trace entry", v) for v in tr] for tr in traces]
        if any(len(tr) == 0 for tr in self.traces):
            raise ParameterError("every client's trace needs at least one duration")
        self._next = [0] * len(self.traces)

    def duration(self, client, num_batches, n_clients, rng):
        if len(self.traces) != n_clients:
            raise ParameterError(f"{len(self.traces)} traces for {n_clients} clients")
        tr = self.traces[client]
        value = tr[self._next[client] % len(tr)]
        self._next[client] += 1
        return value

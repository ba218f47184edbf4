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

A model that remembers something between draws (:class:`TraceTime`: where each client's trace
stands) keeps it as run state, as server rules do: :meth:`TimingModel.reset` clears it when a
run starts, the run's checkpoints hold its :meth:`~TimingModel.state_dict`, read back through a
:class:`~riemfl.federated.rule_state.StateReader`, and a resumed run checks the state it loaded
against the durations the run has drawn (:meth:`TimingModel.validate_state`), so that a resumed
run draws what the uninterrupted run draws.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._validation import real
from ..errors import ParameterError
from .checkpoint import inconsistent
from .rule_state import StateReader

__all__ = ["TimingModel", "ProportionalTime", "ExponentialTime", "LogNormalTime", "TraceTime"]


def _per_client(name: str, value: float | Sequence[float], n: int, client: int) -> Any:
    """``value`` itself when it is one number (or any scalar), else its entry for ``client``."""
    if np.ndim(value) == 0:
        return value
    if len(value) != n:
        raise ParameterError(f"{name} has {len(value)} entries for {n} clients")
    return value[client]


class TimingModel(abc.ABC):
    """Duration of one local run, and the run state the model keeps between draws (none here;
    :class:`TraceTime`'s positions)."""

    @abc.abstractmethod
    def duration(
        self, client: int, num_batches: int, n_clients: int, rng: np.random.Generator
    ) -> float:
        """A positive duration (virtual time units)."""

    def reset(self, n_clients: int) -> None:  # noqa: B027 - optional hook
        """Start a run of ``n_clients`` clients: forget what an earlier run left (nothing
        here)."""

    def state_dict(self) -> dict[str, Any]:
        """The model's run state, for a checkpoint (``{}``: none)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict` (all of it or, on an error, nothing).

        Raises
        ------
        CheckpointError
            For a missing or extra key, or a value of the wrong kind (naming the model, the
            key, what was expected and what was found).
        """
        StateReader(self._state_owner(), state).finish()  # none: any key is one too many

    def validate_state(self, key: str, drawn: Sequence[int]) -> None:  # noqa: B027
        """Check a state loaded from a checkpoint against the run's (nothing to check here).

        Parameters
        ----------
        key : str
            The model's key in its owner's state (named in the errors).
        drawn : sequence of int
            How many durations the run has drawn for each client so far.

        Raises
        ------
        CheckpointError
            Naming the first field that disagrees.
        """

    def _state_owner(self) -> str:
        """Who the state belongs to, in the errors of :meth:`load_state_dict`."""
        return f"timing model {type(self).__name__}"


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
        self.speed = real(speed, "ProportionalTime: speed", above=0)
        self.slowdown = slowdown

    def duration(self, client, num_batches, n_clients, rng):
        factor = _per_client("slowdown", self.slowdown, n_clients, client)
        factor = real(factor, "ProportionalTime: slowdown", above=0)
        return max(num_batches, 1) / self.speed * factor


class ExponentialTime(TimingModel):
    """Exponential durations with mean ``mean`` (a number, or one per client)."""

    def __init__(self, mean: float | Sequence[float] = 1.0) -> None:
        self.mean = mean

    def duration(self, client, num_batches, n_clients, rng):
        mean = _per_client("mean", self.mean, n_clients, client)
        mean = real(mean, "ExponentialTime: mean", above=0)
        return float(rng.exponential(mean)) + 1e-12  # strictly positive


class LogNormalTime(TimingModel):
    r"""Log-normal durations :math:`\exp(\mathcal N(\log m - \sigma^2/2, \sigma^2))` (mean m)."""

    def __init__(self, mean: float | Sequence[float] = 1.0, sigma: float = 0.5) -> None:
        self.mean = mean
        self.sigma = real(sigma, "LogNormalTime: sigma", above=0)

    def duration(self, client, num_batches, n_clients, rng):
        mean = _per_client("mean", self.mean, n_clients, client)
        mean = real(mean, "LogNormalTime: mean", above=0)
        mu = math.log(mean) - 0.5 * self.sigma**2
        return float(rng.lognormal(mu, self.sigma))


class TraceTime(TimingModel):
    """Measured durations per client, replayed in order and cyclically.

    Parameters
    ----------
    traces : sequence of sequence of float
        Client ``i``'s durations, each > 0 (at least one per client).

    Notes
    -----
    Where each client's trace stands (the entry its next dispatch takes) is run state: it starts
    at entry 0 at :meth:`reset` and is saved in checkpoints (``state_dict()["position"]``, one
    entry index per client).
    """

    #: the positions change during a run: not a setting (:mod:`riemfl.federated.fingerprint`)
    run_state_attributes = ("_position",)

    def __init__(self, traces: Sequence[Sequence[float]]) -> None:
        self.traces = [[real(v, "TraceTime: trace entry", above=0) for v in tr] for tr in traces]
        if any(len(tr) == 0 for tr in self.traces):
            raise ParameterError("every client's trace needs at least one duration")
        self._position = [0] * len(self.traces)

    def reset(self, n_clients: int) -> None:
        """Every client's trace at its first entry (a run of ``n_clients`` clients)."""
        self._check_clients(n_clients)
        self._position = [0] * len(self.traces)

    def duration(self, client, num_batches, n_clients, rng):
        self._check_clients(n_clients)
        tr, k = self.traces[client], self._position[client]
        self._position[client] = (k + 1) % len(tr)
        return tr[k]

    def validate_state(self, key: str, drawn: Sequence[int]) -> None:
        """Each client's position is where its trace stands after the durations drawn for it
        (``drawn[i]`` modulo the length of trace ``i``).

        Raises
        ------
        CheckpointError
            Naming the client whose position disagrees.
        """
        for client, (k, n, tr) in enumerate(zip(self._position, drawn, self.traces, strict=True)):
            if k != n % len(tr):
                raise inconsistent(
                    f"state key '{key}.position' entry {client}",
                    k,
                    f"{n % len(tr)}: the {n} durations drawn for client {client} so far, modulo "
                    f"the {len(tr)} entries of its trace",
                )

    def _check_clients(self, n_clients: int) -> None:
        if len(self.traces) != n_clients:
            raise ParameterError(f"{len(self.traces)} traces for {n_clients} clients")

    def state_dict(self) -> dict[str, Any]:
        """``{"position": [the entry of its trace that client i's next dispatch takes]}``."""
        return {"position": list(self._position)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the positions of :meth:`state_dict` (all of them or, on an error, none).

        Raises
        ------
        CheckpointError
            For a missing or extra key, or a position that is not an entry of its client's trace.
        """
        reader = StateReader(self._state_owner(), state)
        longest = max(len(tr) for tr in self.traces)
        position = reader.integers("position", len(self.traces), 0, longest - 1)
        for client, (k, tr) in enumerate(zip(position, self.traces, strict=True)):
            if k >= len(tr):
                shown = f"entry {client} in 0..{len(tr) - 1} (an entry of client {client}'s trace)"
                raise reader.error("position", shown, position)
        reader.finish()
        self._position = position

r"""The server side of FedBuff's buffer: a robust aggregator of its K updates, and a server
optimiser of the step it takes (:class:`~riemfl.federated.FedBuff`'s ``aggregator=`` and
``server_optimizer=``).

* :class:`StackBuffer` keeps each (weighted) update, for an
  :class:`~riemfl.federated.aggregation.Aggregator` that needs them one by one (the robust
  aggregators of :mod:`riemfl.federated.robust`); an aggregator that acts on a sum
  (``takes_totals``, e.g. :class:`~riemfl.federated.aggregation.PlainSum`) reads the sum-only
  :class:`~riemfl.federated.async_rules.SumBuffer` instead.
* :class:`AmbientOptimizer` runs a :class:`~riemfl.federated.server_optimizers.ServerOptimizer`
  on FedBuff's ambient update :math:`-\beta\,\text{total}`, in ``Euclidean(*point_shape)``
  (elementwise moments, no transport), as :class:`~riemfl.federated.ServerOptimized` does for
  RFedProj's ambient update.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from ..backend import is_torch, ops_for
from ..errors import CheckpointError, ParameterError
from ..manifolds.euclidean import Euclidean
from .aggregation import Aggregator, check_aggregator
from .robust import MultiKrum
from .rule_state import Commit, StateReader, copy_array, setter
from .run_core import Stateful
from .server_optimizers import ServerOptimizer

Array = Any

__all__ = [
    "StackBuffer",
    "AmbientOptimizer",
    "AggregatorStart",
    "check_buffer_aggregator",
    "BUFFER_KEY",
]


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) or is_torch(value)


#: the key of the updates handed to the aggregator (one key: FedBuff's ambient updates)
BUFFER_KEY = "d"


class StackBuffer:
    """A buffer that keeps each of its updates, for an aggregator that reads them one by one.

    ``add(delta, weight)`` appends ``weight * delta`` (``delta`` itself when the weight is 1, as
    :class:`~riemfl.federated.async_rules.SumBuffer` adds it); :meth:`stack` is the array of
    shape ``(count, *point_shape)``. Its state (for a checkpoint) is that stack, under the key
    ``updates``, or None when the buffer is empty.
    """

    def __init__(self) -> None:
        self._rows: list[Array] = []

    @property
    def count(self) -> int:
        """The number of updates held."""
        return len(self._rows)

    def add(self, delta: Array, weight: float = 1.0) -> None:
        self._rows.append(delta if weight == 1.0 else weight * delta)

    def stack(self) -> Array:
        """The updates, stacked along a new first axis."""
        if not self._rows:
            raise ParameterError("the buffer is empty")
        return ops_for(self._rows[0]).stack(self._rows, 0)

    def clear(self) -> None:
        self._rows = []

    def state_dict(self) -> dict[str, Any]:
        """``{"updates": a copy of the stack, or None}``."""
        return {"updates": copy_array(self.stack()) if self._rows else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (all of it or, on an error, nothing).

        Raises
        ------
        CheckpointError
            A missing or extra key, or updates that are not a non-empty stack or None.
        """
        reader = StateReader(type(self).__name__, state)
        commit = self.read_state(reader)
        reader.finish()
        commit()

    def read_state(
        self, reader: StateReader, shape: tuple[int, ...] | None = None, capacity: int | None = None
    ) -> Commit:
        """Validate this buffer's state in ``reader`` (a stack of updates of shape ``shape``,
        None: any; fewer than ``capacity`` of them, a full buffer being emptied at once) and
        return the commit installing it."""
        updates = reader.array("updates", optional=True)
        if updates is None:
            return setter(self, _rows=[])
        rows = int(updates.shape[0]) if updates.ndim else 0
        wrong = rows == 0 or (shape is not None and tuple(updates.shape[1:]) != tuple(shape))
        if wrong or (capacity is not None and rows >= capacity):
            expected = f"a stack of 1 to {'K' if capacity is None else capacity - 1} updates"
            expected += "" if shape is None else f" of shape {tuple(shape)}"
            raise reader.error("updates", expected + " or None", updates)
        return setter(self, _rows=[updates[i] for i in range(rows)])


def check_buffer_aggregator(aggregator: Any, buffer_size: int, private: bool) -> Aggregator:
    """``aggregator``, checked for a buffer of ``buffer_size`` updates (``private``: with
    FedBuff's differential privacy).

    Raises
    ------
    ParameterError
        Not an :class:`~riemfl.federated.aggregation.Aggregator`; one that does not return the
        sum of the updates (``sums`` False: a robust centre) with differential privacy, whose
        accounting covers a sum of clipped updates; a Krum whose guarantee needs more updates
        than the buffer holds (:math:`K \\ge 2f + 3`, and at most :math:`K - f` selected).
    """
    aggregator = check_aggregator(aggregator)
    name = type(aggregator).__name__
    if private and not aggregator.sums:
        raise ParameterError(
            f"FedBuff: aggregator {name} returns a robust centre of the buffer, not its sum, "
            "but differential privacy's noise and accounting cover a sum of clipped updates "
            "(its sensitivity); use privacy=None, or an aggregator that sums"
        )
    if isinstance(aggregator, MultiKrum):
        f = aggregator.n_byzantine
        if buffer_size < 2 * f + 3:
            raise ParameterError(
                f"FedBuff: {name} with n_byzantine f = {f} needs a buffer of m >= 2f + 3 = "
                f"{2 * f + 3} updates, got buffer_size {buffer_size}"
            )
        chosen = aggregator.n_selected
        if chosen is not None and chosen > buffer_size - f:
            raise ParameterError(
                f"FedBuff: {name} selects n_selected = {chosen} > m - f = {buffer_size - f} "
                f"of a buffer of {buffer_size} updates with f = {f}"
            )
    return aggregator


class AggregatorStart:
    """The state a stateful aggregator had when FedBuff was built, restored at every run's
    start, so that two runs of one rule agree (e.g. CenteredClipping's previous aggregate)."""

    def __init__(self, aggregator: Aggregator | None) -> None:
        self.aggregator = aggregator
        stateful = isinstance(aggregator, Stateful)
        self._start = copy.deepcopy(aggregator.state_dict()) if stateful else None

    def restore(self) -> None:
        if self._start is not None:
            self.aggregator.load_state_dict(copy.deepcopy(self._start))  # type: ignore[union-attr]


class AmbientOptimizer:
    r"""A server optimiser of FedBuff's ambient update.

    Its space is ``Euclidean(*point_shape)``: moments are ambient arrays, updated elementwise,
    and never transported (the update :math:`-\beta\,\text{total}` is a difference of ambient
    points, not a tangent vector). Its moments are allocated at the first server step of a run,
    like the model (type, dtype and device).

    Parameters
    ----------
    optimizer : ServerOptimizer
    """

    def __init__(self, optimizer: Any) -> None:
        if not isinstance(optimizer, ServerOptimizer):
            raise ParameterError(
                "FedBuff: server_optimizer must be a ServerOptimizer (ServerSGD, ServerAdam, "
                f"ServerYogi, ServerAdagrad), got {type(optimizer).__name__}"
            )
        self.optimizer = optimizer
        self.space: Euclidean | None = None
        self.started = False

    def reset(self, point_shape: tuple[int, ...]) -> None:
        """A new run on points of ``point_shape``: the moments restart at the first step."""
        self.space = Euclidean(*point_shape)
        self.started = False

    def step(self, x: Array, update: Array) -> Array:
        """The optimiser's step from the ambient ``update`` at the model ``x``."""
        if self.space is None:
            self.reset(tuple(x.shape))
        if not self.started:
            self.optimizer.reset(self.space, x)
            self.started = True
        return self.optimizer.step(self.space, x, update)

    def state(self) -> dict[str, Any]:
        """The optimiser's state (arrays copied); ``{}`` before the run's first step."""
        if not self.started:
            return {}
        saved = self.optimizer.state_dict()
        return {k: copy_array(v) if _is_array(v) else v for k, v in saved.items()}

    def read_state(self, reader: StateReader, key: str) -> Commit:
        """Validate the optimiser's state under ``key`` (``{}``, or a state whose first moment
        ``m`` has the point's shape and whose other entries fit it) and return the commit
        installing it."""
        saved = reader.mapping(key)
        if not saved:
            return setter(self, started=False)
        shape = tuple(self.space.point_shape) if self.space is not None else None
        m = saved.get("m")
        if not _is_array(m) or (shape is not None and tuple(m.shape) != shape):
            raise reader.error(f"{key}.m", f"an array of the point's shape {shape}", m)
        space = self.space if self.space is not None else Euclidean(*m.shape)
        state = {k: copy_array(v) if _is_array(v) else v for k, v in saved.items()}
        trial = copy.deepcopy(self.optimizer)
        trial.reset(space, m)
        try:
            trial.load_state_dict(state)
        except CheckpointError as exc:
            raise CheckpointError(f"{reader.owner}: state key {reader.key(key)!r}: {exc}") from None
        optimizer = self.optimizer

        def commit() -> None:
            optimizer.reset(space, m)
            optimizer.load_state_dict(trial.state_dict())
            self.space, self.started = space, True

        return commit

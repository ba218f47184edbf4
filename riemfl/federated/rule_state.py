"""The run state of server rules: a checkpointable copy out, a validated copy back in.

A rule's state (:meth:`~riemfl.federated.AsyncRule.state_dict`) is a nested structure of dict
(str keys), list, None, bool, int, float, str, numpy arrays and torch tensors: what a checkpoint
holds without pickling custom objects. :class:`Checkpointable` gives a class ``state_dict`` and
``load_state_dict`` from three declarations:

* ``_state_counters``: names of int attributes (counters, >= 0) saved under their own name;
* ``_state`` / ``_read_state``: the class's other fields, copied out (arrays copied, so that the
  state is a snapshot), and read back through a :class:`StateReader`, which checks each key's
  kind and shape;
* ``_state_helpers``: names of attributes holding helper objects (a correction, a schedule, an
  embedding, an inner rule) whose state, when they have one (``state_dict`` and
  ``load_state_dict``), is saved under the attribute's name.

Loading is all or nothing: the whole state is validated before any attribute changes. A missing
key, an extra key or a value of the wrong kind or shape raises
:class:`~riemfl.errors.CheckpointError` naming the owner, the key (dotted for nested states),
what was expected and what was found.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np

from ..backend import is_torch
from ..errors import CheckpointError
from .run_core import Stateful

__all__ = ["Checkpointable", "StateReader", "Commit", "copy_array", "setter", "commit_all"]

#: what :meth:`StateReader` returns for a validated state: the function that installs it
Commit = Callable[[], None]


def copy_array(a: Any) -> Any:
    """A copy of a numpy array (memory order kept) or torch tensor (strides kept); None stays."""
    if a is None:
        return None
    if is_torch(a):
        return a.detach().clone()
    return np.array(a, copy=True, order="K")


def setter(obj: Any, **values: Any) -> Commit:
    """The commit that sets ``obj``'s attributes to ``values``."""

    def commit() -> None:
        for name, value in values.items():
            setattr(obj, name, value)

    return commit


def commit_all(*commits: Commit) -> Commit:
    """One commit running ``commits`` in order."""

    def commit() -> None:
        for c in commits:
            c()

    return commit


def has_state(obj: Any) -> bool:
    """Whether ``obj`` (an instance) has ``state_dict`` and ``load_state_dict``
    (:class:`~riemfl.federated.run_core.Stateful`)."""
    return not isinstance(obj, type) and isinstance(obj, Stateful)


def _is_array(value: Any) -> bool:
    return type(value) is np.ndarray or is_torch(value)


def _found(value: Any) -> str:
    """A short description of a value for an error message."""
    if _is_array(value):
        kind = "torch tensor" if is_torch(value) else "numpy array"
        return f"a {kind} of shape {tuple(value.shape)} and dtype {value.dtype}"
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{type(value).__name__} {text}"


class StateReader:
    """Reads one owner's state dict, checking the kind of every value it is asked for.

    Each reading method takes a key, checks that it is there and that its value has the expected
    kind, and returns the value (arrays copied). :meth:`finish` then refuses the keys nobody
    read, here and in every :meth:`section` taken from this reader.

    Parameters
    ----------
    owner : str
        Who the state belongs to (named in every error).
    state : dict
        The state to read.
    path : str
        The dotted key of this state within the owner's (empty for the whole state).
    """

    def __init__(self, owner: str, state: Any, path: str = "") -> None:
        self.owner = owner
        self.path = path
        if type(state) is not dict:
            raise CheckpointError(
                f"{owner}: the state{f' under key {path!r}' if path else ''} must be a dict "
                f"with str keys; found {_found(state)}"
            )
        self._state = state
        self._read: set[str] = set()
        self._sections: list[StateReader] = []

    def __contains__(self, key: str) -> bool:
        return key in self._state

    def key(self, key: str) -> str:
        """The dotted key of ``key`` within the owner's state."""
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, expected: str, value: Any) -> CheckpointError:
        """The error for a value of the wrong kind under ``key``."""
        return CheckpointError(
            f"{self.owner}: state key {self.key(key)!r}: expected {expected}, found {_found(value)}"
        )

    def _take(self, key: str, expected: str) -> Any:
        if key not in self._state:
            keys = sorted(map(str, self._state))
            raise CheckpointError(
                f"{self.owner}: state key {self.key(key)!r} is missing; expected {expected}, "
                f"found only the keys {keys}"
            )
        self._read.add(key)
        return self._state[key]

    def integer(self, key: str, minimum: int = 0, maximum: int | None = None) -> int:
        """An int in ``[minimum, maximum]`` (bool refused)."""
        expected = f"an int >= {minimum}" + ("" if maximum is None else f" and <= {maximum}")
        value = self._take(key, expected)
        if type(value) is not int or value < minimum or (maximum is not None and value > maximum):
            raise self.error(key, expected, value)
        return value

    def real(self, key: str) -> float:
        """A float (NaN and infinities included)."""
        value = self._take(key, "a float")
        if type(value) is not float:
            raise self.error(key, "a float", value)
        return value

    def integers(self, key: str, length: int, minimum: int, maximum: int) -> list[int]:
        """A list of ``length`` ints in ``[minimum, maximum]``."""
        expected = f"a list of {length} ints in [{minimum}, {maximum}]"
        value = self._take(key, expected)
        if (
            type(value) is not list
            or len(value) != length
            or not all(type(v) is int and minimum <= v <= maximum for v in value)
        ):
            raise self.error(key, expected, value)
        return list(value)

    def reals(self, key: str) -> dict[str, float]:
        """A dict of str keys to floats."""
        expected = "a dict of str keys to floats"
        value = self._take(key, expected)
        if type(value) is not dict or not all(
            type(k) is str and type(v) is float for k, v in value.items()
        ):
            raise self.error(key, expected, value)
        return dict(value)

    def array(
        self,
        key: str,
        *,
        shape: tuple[int, ...] | None = None,
        like: Any = None,
        optional: bool = False,
    ) -> Any:
        """A copy of a numeric numpy array or torch tensor (None too when ``optional``).

        ``shape`` fixes the shape (None: any); ``like`` an array whose kind (numpy or torch),
        dtype and shape the value must have.
        """
        if like is not None:
            kind = "torch tensor" if is_torch(like) else "numpy array"
            expected = f"a {kind} of shape {tuple(like.shape)} and dtype {like.dtype}"
        else:
            expected = "a numeric numpy array or torch tensor"
            expected += "" if shape is None else f" of shape {tuple(shape)}"
        expected += " or None" if optional else ""
        value = self._take(key, expected)
        if value is None and optional:
            return None
        ok = _is_array(value) and (is_torch(value) or value.dtype.kind in "biufc")
        if ok and like is not None:
            ok = is_torch(value) == is_torch(like) and value.dtype == like.dtype
            shape = tuple(like.shape)
        if not ok or (shape is not None and tuple(value.shape) != tuple(shape)):
            raise self.error(key, expected, value)
        return copy_array(value)

    def mapping(self, key: str) -> dict[str, Any]:
        """A dict, as it is (for a helper that validates its own state)."""
        value = self._take(key, "a dict (a helper's state)")
        if type(value) is not dict:
            raise self.error(key, "a dict (a helper's state)", value)
        return value

    def section(self, key: str, *, optional: bool = False) -> StateReader | None:
        """A reader of the nested state under ``key`` (None for a None value when
        ``optional``); its keys are checked by this reader's :meth:`finish`."""
        expected = "a dict" + (" or None" if optional else "")
        value = self._take(key, expected)
        if value is None and optional:
            return None
        if type(value) is not dict:
            raise self.error(key, expected, value)
        child = StateReader(self.owner, value, self.key(key))
        self._sections.append(child)
        return child

    def finish(self) -> None:
        """Refuse the keys that were not read (here and in every section)."""
        for key, value in self._state.items():
            if key not in self._read:
                raise CheckpointError(
                    f"{self.owner}: unexpected state key {self.key(str(key))!r}: expected only "
                    f"the keys {sorted(self._read)}, found {_found(value)}"
                )
        for child in self._sections:
            child.finish()


class Checkpointable:
    """``state_dict`` / ``load_state_dict`` from declared fields (module docstring).

    Subclasses set ``_state_counters`` and ``_state_helpers`` and override ``_state`` and
    ``_read_state`` for their other fields.
    """

    #: int attributes (>= 0) saved under their own names
    _state_counters: tuple[str, ...] = ()
    #: attributes holding helper objects whose own state (when they have one) is saved
    _state_helpers: tuple[str, ...] = ()

    def state_dict(self) -> dict[str, Any]:
        """The object's mutable state (a snapshot: arrays are copied)."""
        state = {name: getattr(self, name) for name in self._state_counters}
        state.update(self._state())
        for name, helper in self._stateful_helpers():
            state[name] = helper.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict` (all of it or, on an error, nothing).

        Raises
        ------
        CheckpointError
            For a missing or extra key, or a value of the wrong kind or shape.
        """
        reader = StateReader(self._state_owner(), state)
        commit = self._read_all(reader)
        reader.finish()
        commit()

    # ----------------------------------------------------------------- hooks
    def _state(self) -> dict[str, Any]:
        """The fields besides the counters and the helpers."""
        return {}

    def _read_state(self, reader: StateReader) -> Commit:
        """Read the fields of :meth:`_state` from ``reader``; return the commit installing them."""
        return commit_all()

    def _state_owner(self) -> str:
        return type(self).__name__

    # ----------------------------------------------------------------- machinery
    def _stateful_helpers(self) -> Iterator[tuple[str, Any]]:
        for name in self._state_helpers:
            helper = getattr(self, name)
            if has_state(helper):
                yield name, helper

    def _read_all(self, reader: StateReader) -> Commit:
        counters = {name: reader.integer(name) for name in self._state_counters}
        commits = [setter(self, **counters), self._read_state(reader)]
        for name, helper in self._stateful_helpers():
            if isinstance(helper, Checkpointable):
                commits.append(helper._read_all(reader.section(name)))
            else:  # a user's helper validates its own state when it loads it
                commits.append(partial(helper.load_state_dict, reader.mapping(name)))
        return commit_all(*commits)

"""The global model versions of an asynchronous run, each kept only while someone needs it."""

from __future__ import annotations

from typing import Any

from .checkpoint import inconsistent, require_count

__all__ = ["VersionStore"]


class VersionStore:
    """Global model versions, each kept only while some client holds it (or it is current).

    ``acquire()`` hands out the current version (reference counted), ``release(v)`` drops a
    reference, ``advance(x)`` makes x the new current version. The number of stored versions
    never exceeds the number of clients in flight + 1 (:attr:`peak` records the maximum).
    """

    def __init__(self, x0: Any) -> None:
        self.current = 0
        self._arrays: dict[int, Any] = {0: x0}
        self._refs: dict[int, int] = {0: 0}
        self.peak = 1

    def __len__(self) -> int:
        return len(self._arrays)

    def get(self, version: int) -> Any:
        return self._arrays[version]

    @property
    def model(self) -> Any:
        return self._arrays[self.current]

    def acquire(self) -> int:
        self._refs[self.current] += 1
        return self.current

    def release(self, version: int) -> None:
        self._refs[version] -= 1
        if self._refs[version] == 0 and version != self.current:
            del self._arrays[version], self._refs[version]

    def advance(self, x: Any) -> int:
        old = self.current
        self.current += 1
        self._arrays[self.current] = x
        self._refs[self.current] = 0
        if self._refs[old] == 0:
            del self._arrays[old], self._refs[old]
        self.peak = max(self.peak, len(self._arrays))
        return self.current

    def state_dict(self) -> dict[str, Any]:
        """The stored versions with their reference counts (the models themselves included)."""
        return {
            "current": self.current,
            "versions": {v: self._arrays[v] for v in self._arrays},
            "refs": dict(self._refs),
            "peak": self.peak,
        }

    @property
    def refs(self) -> dict[int, int]:
        """The stored versions and how many clients hold each (a copy)."""
        return dict(self._refs)

    def validate(self, key: str = "store") -> None:
        """Check a loaded store: its current version is stored, and every stored version is
        at most the current one with a reference count >= 0.

        Parameters
        ----------
        key : str
            The store's key in its owner's state (named in the errors).

        Raises
        ------
        CheckpointError
            Naming the first field that disagrees.
        """
        stored = sorted(self._arrays)
        if self.current not in self._arrays:
            shown = f"a stored model version (stored: {stored})"
            raise inconsistent(f"state key '{key}.current'", self.current, shown)
        if sorted(self._refs) != stored:
            raise inconsistent(f"state key '{key}.refs'", self._refs, f"the versions {stored}")
        for version in stored:
            require_count(f"state key '{key}.versions' entry", version, 0, self.current)
            require_count(f"state key '{key}.refs.{version}'", self._refs[version])
        require_count(f"state key '{key}.peak'", self.peak, len(stored))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.current = int(state["current"])
        self._arrays = {int(v): a for v, a in state["versions"].items()}
        self._refs = {int(v): int(c) for v, c in state["refs"].items()}
        self.peak = int(state["peak"])

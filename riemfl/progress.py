"""A dependency-free text progress bar for long runs (rounds of a federated run, reproductions).

Writes ``desc [#####-----] 50/100  3.2s<3.1s  key=value`` to a stream (stderr by default),
redrawn in place on a terminal at most ``min_interval`` seconds apart, and as plain lines
(every 10%) when the stream is not a terminal, so logs of CI runs stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any

__all__ = ["ProgressBar"]


class ProgressBar:
    """Progress over ``total`` steps; use as a context manager, call :meth:`update` per step.

    Parameters
    ----------
    total : int
        Number of steps.
    desc : str
        Label shown before the bar.
    enabled : bool
        ``False`` makes every method a no-op.
    stream : file, optional
        Where to write (default ``sys.stderr``).
    min_interval : float
        Minimum seconds between redraws on a terminal.
    """

    def __init__(
        self,
        total: int,
        desc: str = "",
        *,
        enabled: bool = True,
        stream: IO[str] | None = None,
        min_interval: float = 0.1,
        width: int = 24,
        start: int = 0,
    ) -> None:
        self.total = max(int(total), 0)
        self.desc = desc
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.min_interval = min_interval
        self.width = width
        self.count = start
        self._start_count = start
        self._t0 = time.perf_counter()
        self._last_draw = -float("inf")
        self._last_decile = -1
        self._isatty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.postfix: dict[str, Any] = {}

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int = 1, **postfix: Any) -> None:
        """Advance by ``n`` steps; keyword arguments are shown after the bar."""
        self.count += n
        self.postfix.update(postfix)
        if not self.enabled:
            return
        now = time.perf_counter()
        if self._isatty:
            if now - self._last_draw >= self.min_interval or self.count >= self.total:
                self._last_draw = now
                self.stream.write("\r" + self.render(now))
                self.stream.flush()
        else:
            decile = (10 * self.count) // self.total if self.total else 10
            if decile > self._last_decile:
                self._last_decile = decile
                self.stream.write(self.render(now) + "\n")
                self.stream.flush()

    def render(self, now: float | None = None) -> str:
        """The bar as one line of text."""
        now = time.perf_counter() if now is None else now
        elapsed = now - self._t0
        frac = self.count / self.total if self.total else 1.0
        filled = int(round(self.width * min(frac, 1.0)))
        done = self.count - self._start_count
        left = (self.total - self.count) * elapsed / done if done > 0 else float("nan")
        extra = "  ".join(f"{k}={_fmt(v)}" for k, v in self.postfix.items())
        bar = "#" * filled + "-" * (self.width - filled)
        return (
            f"{self.desc} [{bar}] {self.count}/{self.total}  {elapsed:.1f}s<{left:.1f}s  {extra}"
        ).rstrip()

    def close(self) -> None:
        if self.enabled and self._isatty:
            self.stream.write("\n")
            self.stream.flush()


def _fmt(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)

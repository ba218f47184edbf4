"""A dependency-free text progress bar for long runs (rounds of a federated run, reproductions).

Writes ``desc [#####-----] 50/100  3.2s<3.1s  key=value`` to a stream (stderr by default),
redrawn in place on a terminal at most ``min_interval`` seconds apart, and as plain lines
(every 10%) when the stream is not a terminal, so logs of CI runs stay readable.

The time left is the steps left times an exponential moving average of the recent seconds per
step (weight :data:`SMOOTHING` on the newest interval). The first step is left out of the average,
as it usually carries one-off costs (imports, data loading, compilation, the first checkpoint),
and the bar says ``estimating`` until :data:`MIN_TIMED_STEPS` further steps have been timed.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any

__all__ = ["ProgressBar", "SMOOTHING", "MIN_TIMED_STEPS"]

#: weight of the newest interval in the moving average of seconds per step
SMOOTHING = 0.3
#: steps timed (after the first) before the bar shows an estimate of the time left
MIN_TIMED_STEPS = 2


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
        self._t0 = time.perf_counter()
        self._last_draw = -float("inf")
        self._last_decile = -1
        self._last_step: float | None = None  # when the previous update came (None: none yet)
        self._per_step: float | None = None  # moving average of seconds per step
        self._timed = 0  # steps in the moving average
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
        self._time_step(now, n)
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

    def _time_step(self, now: float, n: int) -> None:
        """Fold the interval since the previous update into the moving average (the first
        update only starts the clock)."""
        if self._last_step is not None and n > 0:
            sample = (now - self._last_step) / n
            if self._per_step is None:
                self._per_step = sample
            else:
                self._per_step += SMOOTHING * (sample - self._per_step)
            self._timed += n
        self._last_step = now

    def remaining(self) -> float | None:
        """Estimated seconds left, or None while estimating."""
        if self._per_step is None or self._timed < MIN_TIMED_STEPS:
            return None
        return max(self.total - self.count, 0) * self._per_step

    def render(self, now: float | None = None) -> str:
        """The bar as one line of text."""
        now = time.perf_counter() if now is None else now
        elapsed = now - self._t0
        frac = self.count / self.total if self.total else 1.0
        filled = int(round(self.width * min(frac, 1.0)))
        left = self.remaining()
        eta = "estimating" if left is None else f"{left:.1f}s"
        extra = "  ".join(f"{k}={_fmt(v)}" for k, v in self.postfix.items())
        bar = "#" * filled + "-" * (self.width - filled)
        return (
            f"{self.desc} [{bar}] {self.count}/{self.total}  {elapsed:.1f}s<{eta}  {extra}"
        ).rstrip()

    def close(self) -> None:
        if self.enabled and self._isatty:
            self.stream.write("\n")
            self.stream.flush()


def _fmt(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)

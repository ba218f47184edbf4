"""A dependency-free text progress bar for long runs (rounds of a federated run, reproductions).

Writes ``desc [#####-----] 50/100  3.2s<3.1s  key=value`` to a stream (stderr by default),
redrawn in place on a terminal at most ``min_interval`` seconds apart, and as plain lines
(every 10%) when the stream is not a terminal, so logs of CI runs stay readable.

Steps that a run does not compute (a finished or resumed run read back from its checkpoint)
advance the bar through :meth:`ProgressBar.skip`: they count towards the total, are said as
``(N cached)`` after the count, and are left out of the time estimate. :meth:`ProgressBar.close`
draws the final count, so the last line shows where the bar ended (the total, once every step is
done) even where it was advanced without a redraw or its total was revised at the end.

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
        self._drawn: tuple[int, int] | None = None  # (count, total) of the last line drawn
        self.postfix: dict[str, Any] = {}
        #: steps advanced by :meth:`skip` (read back, not computed)
        self.skipped = 0

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
        self._draw(now)

    def skip(self, n: int, **postfix: Any) -> None:
        """Advance by ``n`` steps that were not computed (read back from a cache or a
        checkpoint): counted in the total and in :attr:`skipped`, left out of the estimate."""
        if n <= 0:
            return
        self.count += n
        self.skipped += n
        self.postfix.update(postfix)
        if not self.enabled:
            return
        now = time.perf_counter()
        self._last_step = None if self._last_step is None else now  # not an interval of work
        self._draw(now)

    def _draw(self, now: float, final: bool = False) -> None:
        """Redraw in place on a terminal (at most every ``min_interval`` seconds, and always at
        the end); write a line per tenth of the total elsewhere, and the last one at ``final``."""
        if self._isatty:
            due = now - self._last_draw >= self.min_interval or self.count >= self.total
            if due or final:
                self._last_draw = now
                self._write("\r" + self.render(now))
            return
        decile = (10 * self.count) // self.total if self.total else 10
        if decile > self._last_decile or (final and self._drawn != (self.count, self.total)):
            self._last_decile = max(decile, self._last_decile)
            self._write(self.render(now) + "\n")

    def _write(self, text: str) -> None:
        self._drawn = (self.count, self.total)
        self.stream.write(text)
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
        cached = f" ({self.skipped} cached)" if self.skipped else ""
        head = f"{self.desc} [{bar}] {self.count}/{self.total}{cached}"
        return f"{head}  {elapsed:.1f}s<{eta}  {extra}".rstrip()

    def close(self) -> None:
        """Draw the final count (unless the last line already shows it) and end the line."""
        if not self.enabled:
            return
        self._draw(time.perf_counter(), final=True)
        if self._isatty:
            self._write("\n")


def _fmt(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)

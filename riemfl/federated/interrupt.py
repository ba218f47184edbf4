"""Stopping a run cleanly on Ctrl-C (SIGINT) or SIGTERM.

Inside :func:`handle_interrupts` the first SIGINT or SIGTERM only sets a flag; every run loop
checks :func:`interrupt_requested` between two steps, writes its checkpoint and raises
:class:`RunInterrupted`, so nothing computed is lost and the same call resumes. A second signal
raises :class:`KeyboardInterrupt` at once (the user insists; the last checkpoint written stays
valid, because a checkpoint's record is either whole or, cut short, dropped as a torn tail:
:mod:`riemfl.federated.checkpoint`).

Signal handlers can only be installed by the main thread; in other threads (e.g. runs in a
thread pool) :func:`handle_interrupts` does nothing and the loops see the flag set by the main
thread's handler.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from ..errors import RiemflError

__all__ = [
    "RunInterrupted",
    "handle_interrupts",
    "interrupt_requested",
    "request_interrupt",
    "request_served",
]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_state = {"requested": 0, "depth": 0}
_lock = threading.Lock()


class RunInterrupted(RiemflError, KeyboardInterrupt):
    """A run stopped between two steps because SIGINT or SIGTERM arrived.

    Attributes
    ----------
    step : int
        The last completed step (round or server step).
    checkpoint : str or None
        The checkpoint written at that step (None when the run had no checkpoint file).
    """

    def __init__(self, step: int, checkpoint: str | None) -> None:
        self.step = int(step)
        self.checkpoint = checkpoint
        saved = f"; checkpoint {checkpoint!r} saved" if checkpoint else " (no checkpoint file)"
        super().__init__(f"interrupted after step {step}{saved}")


def interrupt_requested() -> bool:
    """True once SIGINT/SIGTERM arrived inside :func:`handle_interrupts` (or
    :func:`request_interrupt` was called)."""
    return _state["requested"] > 0


def request_interrupt() -> None:
    """Ask every running loop to stop at its next step boundary (what the handler does)."""
    _state["requested"] += 1


def request_served() -> None:
    """A loop stopped for the request: forget it, unless a :func:`handle_interrupts` block
    owns it (that block clears it on exit, after every loop inside it has seen it). A request
    made where no block runs (a loop off the main thread, e.g. a Flower ServerApp in a
    simulation, stopped by :func:`request_interrupt`) would otherwise stop the next run too."""
    with _lock:
        if _state["depth"] == 0:
            _state["requested"] = 0


def _handler(signum: int, frame: Any) -> None:
    request_interrupt()
    if _state["requested"] > 1:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name} received twice")


@contextlib.contextmanager
def handle_interrupts() -> Iterator[None]:
    """Turn SIGINT/SIGTERM into a stop request for the duration of the block (re-entrant).

    The outermost block installs the handlers and, on exit, restores the previous ones and
    clears the request.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with _lock:
        outermost = _state["depth"] == 0
        if outermost:  # a request left over from outside any block is stale
            _state["requested"] = 0
        _state["depth"] += 1
        previous = {s: signal.signal(s, _handler) for s in _SIGNALS} if outermost else {}
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if outermost:
                for s, h in previous.items():
                    signal.signal(s, h)
                _state["requested"] = 0

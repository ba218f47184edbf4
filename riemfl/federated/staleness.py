r"""The asynchronous simulator's staleness policies: what happens to updates older than tau.

The staleness of an update is the number of server steps between the version the client trained
from and the current one. With a bound ``max_staleness`` = tau:

* ``"drop"`` discards a staler update when it arrives (logged; the client is dispatched again
  with the current model);
* ``"block"`` never lets an update become staler than tau: a free worker stays idle while
  dispatching could break the bound (the stale-synchronous-parallel idea of making fast clients
  wait for stragglers).

Block rule: with F the clients in flight, v_min their oldest version and t the current version,
a client is dispatched only if ``(t - v_min) + |F| <= tau`` (always when F is empty). Proof that
no update exceeds tau: the quantity ``s_c = tau - (t - v_c) - (|F| - 1)`` is >= 0 for every c in
F; an arrival of another client raises t by at most 1 (one server step per arrival at most) and
lowers |F| by 1, so s_c does not decrease; a dispatch is allowed only when it keeps every
s_c >= 0 (the newcomer's included); when c arrives its staleness is
``t - v_c <= tau - (|F| - 1) <= tau``. No deadlock: with no client in flight one is always
dispatched, and a client in flight always arrives. No update is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping

from .._validation import integer, optional
from ..errors import ParameterError

__all__ = ["StalenessPolicy", "STALENESS_POLICIES"]

#: The policies :class:`StalenessPolicy` knows.
STALENESS_POLICIES = ("drop", "block")


class StalenessPolicy:
    """The bound tau and how it is kept (module docstring).

    Parameters
    ----------
    max_staleness : int or None
        tau; None: no bound (every update is applied, dispatch never waits).
    kind : {"drop", "block"}
    """

    def __init__(self, max_staleness: int | None, kind: str = "drop") -> None:
        if kind not in STALENESS_POLICIES:
            raise ParameterError(
                f"staleness_policy must be one of {STALENESS_POLICIES}, got {kind!r}"
            )
        bound = optional(integer, max_staleness, "StalenessPolicy: max_staleness", minimum=0)
        if kind == "block" and max_staleness is None:
            raise ParameterError(
                "staleness_policy='block' needs mode='events' and a max_staleness bound to enforce"
            )
        self.bound = bound
        self.kind = kind

    def admits(self, staleness: int) -> bool:
        """Whether an update of this staleness is applied (``"drop"`` refuses staler ones)."""
        return self.bound is None or self.kind != "drop" or staleness <= self.bound

    def may_dispatch(self, current: int, holding: Mapping[int, int]) -> bool:
        """The block rule ``(t - v_min) + |F| <= tau`` (always True for ``"drop"``).

        ``holding`` maps each client in flight to the version it trains from.
        """
        if self.kind != "block" or not holding:
            return True
        return current - min(holding.values()) + len(holding) <= self.bound

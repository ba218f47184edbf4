r"""The verdicts: per (tau, T), the measured average is within Theorem 1's bound; per tau, it
decays like :math:`1/\sqrt T`.

* **bound** (one per (tau, T)): passes when T meets the horizon condition, no update was staler
  than tau, and the measured :math:`\frac1T\sum_{t<T}\mathbb E\|\nabla f(w^t)\|^2` is at most the
  bound.
* **rate** (one per tau): the least-squares slope of log(measured average) against log(T)
  passes within ``tolerance`` of -1/2, the leading order :math:`O(1/\sqrt T)` of the theorem's
  rate. Fewer than two values of T give no slope (NaN), which fails.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Verdict", "bound_verdict", "rate_verdict", "slope", "verdicts"]

#: the exponent of T in the leading term of Theorem 1's rate
RATE = -0.5


@dataclass(frozen=True)
class Verdict:
    """One checked claim.

    Attributes
    ----------
    label : str
        ``bound/tau=1/T=576`` or ``rate/tau=1``, the claim's name for ``--strict``.
    claim : {"bound", "rate"}
    measured : float
        The measured average (bound), or the fitted slope (rate).
    reference : float
        Theorem 1's bound, or -1/2.
    passed : bool
    detail : str
        What else decided it (the staleness, the horizon, the tolerance).
    """

    label: str
    claim: str
    measured: float
    reference: float
    passed: bool
    detail: str

    def line(self) -> str:
        """One line: PASS or FAIL with the numbers."""
        word = "PASS" if self.passed else "FAIL"
        if self.claim == "bound":
            return (
                f"{word} {self.label}: measured {self.measured:.4g} vs bound "
                f"{self.reference:.4g} ({self.detail})"
            )
        return (
            f"{word} {self.label}: slope {self.measured:.3f} vs {self.reference:g} ({self.detail})"
        )


def bound_verdict(row: dict) -> Verdict:
    """The bound's verdict for one measured (tau, T) (a row of :func:`~.run.measure`)."""
    tau, T = row["tau"], row["T"]
    covered = T >= row["horizon"]
    bounded = row["max_staleness"] <= tau
    within = row["average"] <= row["bound"]
    detail = (
        f"T {'>=' if covered else '<'} horizon {row['horizon']}, "
        f"largest staleness {row['max_staleness']} {'<=' if bounded else '>'} tau, "
        f"ratio {row['average'] / row['bound']:.3f}"
    )
    return Verdict(
        f"bound/tau={tau}/T={T}",
        "bound",
        row["average"],
        row["bound"],
        covered and bounded and within,
        detail,
    )


def slope(Ts: Sequence[float], values: Sequence[float]) -> float:
    """The least-squares slope of log(values) against log(T); NaN with fewer than two distinct
    T or a value that is not positive."""
    x, y = np.asarray(Ts, dtype=float), np.asarray(values, dtype=float)
    if len(np.unique(x)) < 2 or not np.all(y > 0):
        return math.nan
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def rate_verdict(tau: int, rows: Sequence[dict], tolerance: float) -> Verdict:
    """The rate's verdict for one tau, from its rows over T."""
    fitted = slope([r["T"] for r in rows], [r["average"] for r in rows])
    passed = math.isfinite(fitted) and abs(fitted - RATE) <= tolerance
    Ts = ", ".join(str(r["T"]) for r in rows)
    detail = f"tolerance {tolerance:g}, T in {{{Ts}}}"
    return Verdict(f"rate/tau={tau}", "rate", fitted, RATE, passed, detail)


def verdicts(rows: Sequence[dict], tolerance: float) -> list[Verdict]:
    """Every bound verdict, in the rows' order, then one rate verdict per tau."""
    out = [bound_verdict(r) for r in rows]
    for tau in dict.fromkeys(r["tau"] for r in rows):
        out.append(rate_verdict(tau, [r for r in rows if r["tau"] == tau], tolerance))
    return out

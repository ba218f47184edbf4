"""The words of claim 8 in the Zhang et al. 2024 reproduction: how its uploads and step sizes
print, and, for a reading that FAILs, what would change its verdict.
"""

from __future__ import annotations

import math

from ...federated import History
from ..step_sweep import uploads_to_tolerance
from .settings import Sweep, fewer_uploads_with_larger_tau

__all__ = ["fmt_uploads", "fmt_step_size", "one_eta_hint", "tuned_hint"]


def fmt_uploads(u: float) -> str:
    """Uploads to a tolerance: a whole number, or "not reached" for ``inf``."""
    return f"{u:.0f}" if math.isfinite(u) else "not reached"


def fmt_step_size(step_size: float | None) -> str:
    """A step size to three significant digits ("none": no step size was picked)."""
    return "none" if step_size is None else f"{step_size:.3g}"


def one_eta_hint(setting: Sweep, results: dict[str, History], taus: list[int]) -> str:
    """For 8a: the grid's step sizes under which one eta for all of Fig. 9's ``taus`` would pass
    (uploads to the sweep's tolerance on the tuning seed)."""
    good = [
        s
        for s in setting.step_sizes
        if fewer_uploads_with_larger_tau(
            {
                t: uploads_to_tolerance(
                    results[setting.run(t, s, setting.tune_seed).key], setting.rel_tol
                )
                for t in taus
            }
        )
    ]
    which = ", ".join(fmt_step_size(s) for s in good) if good else "none of the grid's"
    return (
        f"another single eta: on the sweep's tuning seed, tau = {taus} need fewer uploads as "
        f"tau grows for eta = {which}; the paper's LRMC eta is not stated"
    )


def tuned_hint(uploads: dict[int, float], kpca_ok: list[bool]) -> str:
    """For 8b / 8c: which comparisons broke the claim and what could move them (``uploads``: tau
    -> held-out uploads on LRMC; ``kpca_ok``: the verdicts of Fig. 7, if it ran)."""
    if kpca_ok and not all(kpca_ok):
        return "Fig. 7 (its stated eta) fails too; see claim 8a"
    taus = sorted(uploads)
    broken = [
        f"tau={b} {fmt_uploads(uploads[b])} vs tau={a} {fmt_uploads(uploads[a])}"
        for a, b in zip(taus, taus[1:], strict=False)
        if not uploads[b] <= uploads[a]
    ]
    missing = [f"tau={t}" for t in taus if not math.isfinite(uploads[t])]
    found = []
    if broken:
        found.append("more uploads at larger tau: " + ", ".join(broken))
    if missing:
        found.append("not reached: " + ", ".join(missing))
    what = "; ".join(found) or "no fewer uploads at the largest tau than at the smallest"
    return (
        f"{what}; a finer eta grid near the picks, more rounds, or another tolerance could move "
        "these numbers (each is one held-out run)"
    )

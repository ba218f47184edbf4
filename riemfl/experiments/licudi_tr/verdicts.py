r"""The two claims of Licudi 2025 (TR), Sec. 3, as :class:`~riemfl.experiments.claims.Claim`.

Both read Fig. 1's curves on the test split: the averaged normalised relative one-step test
losses of ASGD, FedAsync, OrthoGrad, OrthoPos and DC-ASGD (:func:`.analysis.panel`). A method is
*optimal* at a step when its curve is the lowest there (ties included, within 1e-12); steps where
all five curves coincide (no drift anywhere in the filter's reach, so every proposal is the same
point) say nothing and are left out. The rules were fixed before any run was looked at:

* **dcasgd-never-optimal** ("DC-ASGD, while never the optimal choice, ..."): passes when DC-ASGD
  is optimal at no step.
* **orthocorrect-dominates** ("the dominance of OrthoCorrect when applied to the corresponding
  'best' method for a particular point during convergence (except in the region around the
  phase transition)"): per step the better base is the lower of ASGD (gradient) and FedAsync
  (position), and its OrthoCorrect is OrthoGrad or OrthoPos. A *transition* is a step where the
  better base changes; steps within ``window`` (the filter's radius, 2 sigma) of one are left
  out. Passes when the matching OrthoCorrect is optimal at at least ``share`` (75%) of the
  remaining steps; fails when none remain.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..claims import Claim
from .analysis import better_base, near, optimal, transitions

__all__ = ["dcasgd_claim", "orthocorrect_claim", "claims", "informative", "MATCHING"]

#: the better base -> the OrthoCorrect applied to it
MATCHING = {"gradient": "orthograd", "position": "orthopos"}

_DC_REFERENCE = "DC-ASGD is never the optimal choice (Sec. 3, Fig. 1)"
_ORTHO_REFERENCE = (
    "OrthoCorrect on the currently better base dominates, except near the phase transition "
    "(Sec. 3, Fig. 1)"
)


def informative(curves: Mapping[str, np.ndarray]) -> np.ndarray:
    """Per step: whether the curves differ (not all equal)."""
    stack = np.array([curves[n] for n in curves])
    return stack.max(axis=0) > stack.min(axis=0)


def dcasgd_claim(curves: Mapping[str, np.ndarray]) -> Claim:
    """The claim that DC-ASGD is never optimal, on Fig. 1's curves (module docstring)."""
    keep = informative(curves)
    best = optimal(curves, "dcasgd") & keep
    n, k = int(keep.sum()), int(best.sum())
    others = np.min([curves[m] for m in curves if m != "dcasgd"], axis=0)
    gap = (curves["dcasgd"] - others)[keep]
    if k:
        first = int(np.flatnonzero(best)[0])
        change = (
            f"it would pass if DC-ASGD lost its lead at all {k} steps (first at step {first}; its "
            f"largest lead there is {float(-gap.min()):.3g} relative units)"
        )
    elif n:
        change = (
            f"it would fail if DC-ASGD came within {float(gap.min()):.3g} relative units of the "
            "best method at one step (its smallest gap)"
        )
    else:
        change = "no step separates the methods: a run with staleness would decide it"
    measured = f"optimal at {k} of {n} informative steps" + (f" ({100 * k / n:.1f}%)" if n else "")
    return Claim("dcasgd-never-optimal", k == 0 and n > 0, measured, _DC_REFERENCE, change)


def orthocorrect_claim(
    curves: Mapping[str, np.ndarray], window: int, share: float = 0.75
) -> tuple[Claim, dict]:
    """The claim that OrthoCorrect on the better base dominates away from the transition
    (module docstring); also returns the phase: the base per step, the transitions, the
    counts."""
    base = better_base(curves, "asgd", "fedasync")
    switches = transitions(base)
    n = len(base)
    keep = ~near(n, switches, window) & informative(curves)
    hits = np.zeros(n, dtype=bool)
    for b, ortho in MATCHING.items():
        hits |= (base == b) & optimal(curves, ortho)
    kept, won = int(keep.sum()), int((hits & keep).sum())
    passed = kept > 0 and won >= share * kept
    need = int(np.ceil(share * kept))
    if kept == 0:
        change = "no step lies outside the transition windows: a longer run would decide it"
    elif passed:
        change = (
            f"it would fail if {won - need + 1} of those steps went to another method "
            f"(threshold {share:.0%} = {need} steps)"
        )
    else:
        change = (
            f"it would pass with {need - won} more such steps (threshold {share:.0%} = "
            f"{need} steps)"
        )
    measured = (
        f"matching OrthoCorrect optimal at {won} of {kept} steps"
        + (f" ({100 * won / kept:.1f}%)" if kept else "")
        + f" outside +/-{window} steps of {len(switches)} transition(s)"
    )
    phase = {
        "base": [str(b) for b in base],
        "transitions": switches,
        "first_base": str(base[0]) if n else None,
        "last_base": str(base[-1]) if n else None,
        "share_position": float(np.mean(base == "position")) if n else float("nan"),
        "kept": kept,
        "won": won,
    }
    return Claim("orthocorrect-dominates", passed, measured, _ORTHO_REFERENCE, change), phase


def claims(curves: Mapping[str, np.ndarray], window: int, share: float) -> tuple[list, dict]:
    """Both claims on Fig. 1's test curves, and the phase (:func:`orthocorrect_claim`)."""
    ortho, phase = orthocorrect_claim(curves, window, share)
    return [dcasgd_claim(curves), ortho], phase

r"""The summaries of the runs and the claims, each a rule fixed before the runs.

Licudi et al. 2025, Table 1, find AsyncBezier above FedAsync, FedOrtho and FedBuff in final test
accuracy and below them in :math:`T_e` (the first server step whose test error is at most e) on
FEMNIST and Shakespeare. On the curved problems, with the suboptimality :math:`f - f_{\rm ref}`
in place of the test error, six claims per problem:

* ``final-vs-fedasync``, ``final-vs-fedortho``, ``final-vs-fedbuff``: AsyncBezier's final
  suboptimality (the mean over the seeds of each run's :func:`~.run.tail` mean) is at most the
  baseline's, every method having received the same client updates. A method with a failed run
  has an infinite final suboptimality, and AsyncBezier passes only without one.
* ``steps-to-target-vs-fedasync``, ``steps-to-target-vs-fedortho``: AsyncBezier reaches the
  target e (a fixed fraction of the initial suboptimality) in no more server steps than the
  baseline; ``updates-to-target-vs-fedbuff``: in no more client updates than FedBuff (FedBuff
  takes K updates per server step, so server steps would favour it K-fold). T is read on the
  mean over the seeds of the suboptimality curves, at the evaluated rows; a method that never
  reaches e has none, and AsyncBezier passes only if it reaches e.

FedOrtho is FedAsync with OrthoDC (:math:`\vartheta = 1`), the correction AsyncBezier applies to
each control point: the claims against it isolate what the learned curve adds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..claims import Claim
from ..equal_work import first_reached
from ..licudi2025.settings import PAPER_FEMNIST, PAPER_SHAKESPEARE
from .run import tail
from .settings import Settings

__all__ = ["CLAIMS", "claims", "paper_statement", "summarise", "target"]

#: claim -> (the baseline, the clock of T_e, or None for the final value)
CLAIMS: dict[str, tuple[str, str | None]] = {
    "final-vs-fedasync": ("FedAsync", None),
    "final-vs-fedortho": ("FedOrtho", None),
    "final-vs-fedbuff": ("FedBuff", None),
    "steps-to-target-vs-fedasync": ("FedAsync", "step"),
    "steps-to-target-vs-fedortho": ("FedOrtho", "step"),
    "updates-to-target-vs-fedbuff": ("FedBuff", "updates"),
}


def paper_statement(claim: str) -> str:
    """What Licudi et al. 2025, Table 1, report for AsyncBezier against the claim's baseline
    (FEMNIST and Shakespeare; accuracy in %, T_e in server steps)."""
    base, clock = CLAIMS[claim]
    parts = []
    for data, table in (("FEMNIST", PAPER_FEMNIST), ("Shakespeare", PAPER_SHAKESPEARE)):
        ours, theirs = table["AsyncBezier"], table[base]
        if clock is None:
            parts.append(f"{data} accuracy {ours[0]:.2f}% vs {theirs[0]:.2f}%")
        else:
            parts.append(f"{data} T_e {ours[2]:g} vs {theirs[2]:g} server steps")
    return f"AsyncBezier vs {base}: " + ", ".join(parts) + " (Table 1)"


def target(case: Any, s: Settings) -> float:
    """e: ``target_fraction`` of the mean initial suboptimality over the seeds."""
    start = [case.metrics(case.start(seed))["subopt"] for seed in range(s.seeds)]
    return s.target_fraction * float(np.mean(start))


def summarise(runs: Sequence[dict], s: Settings, e: float) -> dict:
    """One method's runs over the seeds: final (mean, std, per seed), the last value, the final
    distance, the mean curve and its clocks, T_e on steps and updates, failures, seconds."""
    ok = [r for r in runs if r["error"] is None]
    finals = [r["final"] for r in runs]
    out: dict[str, Any] = {
        "seeds": len(runs),
        "failed": [f"seed {r['seed']}: {r['error']}" for r in runs if r["error"] is not None],
        "finals": finals,
        "final": float(np.mean(finals)) if ok and len(ok) == len(runs) else math.inf,
        "final_std": float(np.std(finals)) if len(ok) == len(runs) else math.nan,
        "seconds": float(sum(r["seconds"] for r in runs)),
        "max_staleness": max((r["max_staleness"] for r in ok), default=math.nan),
        "mean_staleness": float(np.mean([r["mean_staleness"] for r in ok])) if ok else math.nan,
    }
    if len(ok) < len(runs) or not ok:
        out.update(curve=None, last=math.inf, distance=math.nan, te_step=None, te_updates=None)
        return out
    curve = {
        key: np.mean([r[key] for r in ok], axis=0).tolist()
        for key in ("step", "updates", "time", "subopt", "distance")
    }
    out.update(
        curve=curve,
        last=float(curve["subopt"][-1]),
        distance=float(np.mean([tail(r["distance"], s.tail) for r in ok])),
        te_step=first_reached(curve["step"], curve["subopt"], e),
        te_updates=first_reached(curve["updates"], curve["subopt"], e),
    )
    return out


def _final_claim(label: str, ours: dict, base: dict, name: str) -> Claim:
    wins = sum(a <= b for a, b in zip(ours["finals"], base["finals"], strict=True))
    passed = math.isfinite(ours["final"]) and ours["final"] <= base["final"]
    measured = (
        f"final suboptimality {ours['final']:.4g} vs {name}'s {base['final']:.4g} "
        f"(lower or equal on {wins} of {ours['seeds']} seeds)"
    )
    change = ""
    if math.isfinite(ours["final"]) and math.isfinite(base["final"]):
        margin = base["final"] - ours["final"]
        scale = max(abs(base["final"]), 1e-300)
        change = f"margin {margin:+.3g} ({100 * margin / scale:+.1f}% of {name}'s)"
    return Claim(label, passed, measured, paper_statement(label.split("/", 1)[1]), change)


def _speed_claim(label: str, ours: dict, base: dict, name: str, clock: str, e: float) -> Claim:
    key = "te_step" if clock == "step" else "te_updates"
    a, b = ours[key], base[key]
    unit = "server steps" if clock == "step" else "client updates"
    passed = a is not None and (b is None or a <= b)

    def said(v: float | None) -> str:
        return "never" if v is None else f"{v:g}"

    measured = f"e = {e:.4g} reached after {said(a)} vs {name}'s {said(b)} {unit}"
    step = np.diff(ours["curve"][clock]) if ours["curve"] is not None else np.array([])
    change = f"resolution {float(step.max()):g} {unit}" if step.size else ""
    return Claim(label, passed, measured, paper_statement(label.split("/", 1)[1]), change)


def claims(results: Sequence[dict]) -> list[Claim]:
    """The six claims per problem (module docstring), from :func:`summarise`'s summaries:
    ``results[j]["summary"][method]`` and ``results[j]["target"]``."""
    out = []
    for r in results:
        key, summary, e = r["case"].key, r["summary"], r["target"]
        ours = summary["AsyncBezier"]
        for claim, (name, clock) in CLAIMS.items():
            label = f"{key}/{claim}"
            if clock is None:
                out.append(_final_claim(label, ours, summary[name], name))
            else:
                out.append(_speed_claim(label, ours, summary[name], name, clock, e))
    return out

"""The study's results from the two runs' tables: Fig. 1's and Fig. 3's curves, per-split
summaries, the claims, the phase and Q (:func:`analyse`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .analysis import panel, q_estimate, smooth
from .settings import CONTROL_PANELS, ENDPOINTS, FIGURE1, Settings
from .sweep import SPLITS
from .verdicts import claims, informative

__all__ = ["analyse", "summary_rows"]


def summary_rows(curves: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Per method: its mean relative loss and the share of (informative) steps it is optimal."""
    keep = informative(curves)
    stack = np.array([curves[n] for n in curves])
    low = stack.min(axis=0)
    out = {}
    for name, curve in curves.items():
        best = (curve <= low + 1e-12) & keep
        out[name] = {
            "mean_relative": float(curve.mean()),
            "share_optimal": float(best.sum() / max(int(keep.sum()), 1)),
        }
    return out


def _q(asynccurve: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Q on test loss for every curve proposal against its base's line."""
    test = asynccurve["control"]["test"]
    out = {}
    for base, names in CONTROL_PANELS.items():
        line = test[f"{base}/line"]
        for name in names[1:]:
            out[name] = q_estimate(line, test[name])
    return out


def analyse(runs: dict[str, dict[str, Any]], s: Settings) -> dict[str, Any]:
    """Everything the figures, the report and ``results.json`` show.

    Returns
    -------
    dict
        ``fig1`` (split -> method -> averaged relative curve), ``fig3`` (split -> base ->
        proposal -> relative curve), ``summary1`` and ``summary3`` (the same per split as
        :func:`summary_rows`), ``claims``, ``phase``, ``Q`` (proposal -> estimate),
        ``raw_test`` (proposal -> mean one-step test loss, every endpoint proposal, both runs),
        ``runs`` (algorithm -> smoothed test loss and the step of its minimum, final test loss
        and accuracy, staleness, arrivals per client).
    """
    fig1, summary1 = {}, {}
    for split in SPLITS:
        per_alg = {a: r["endpoint"][split] for a, r in runs.items()}
        fig1[split] = panel(per_alg, FIGURE1, s.sigma, s.truncate)
        summary1[split] = summary_rows(fig1[split])
    found, phase = claims(fig1["test"], s.window, s.dominance)
    curve_run = runs["asynccurve"]
    fig3: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    summary3: dict[str, dict[str, Any]] = {}
    for split in SPLITS:
        fig3[split], summary3[split] = {}, {}
        for base, names in CONTROL_PANELS.items():
            curves = panel({"asynccurve": curve_run["control"][split]}, names, s.sigma, s.truncate)
            fig3[split][base] = curves
            summary3[split][base] = summary_rows(curves)
    raw_test = {
        a: {m: float(np.mean(r["endpoint"]["test"][m])) for m in ENDPOINTS} for a, r in runs.items()
    }
    smoothed = {a: smooth(r["trajectory"]["test"], s.sigma, s.truncate) for a, r in runs.items()}
    trajectories = {
        a: {
            "smoothed_test_loss": smoothed[a],
            "best_step": int(np.argmin(smoothed[a])),
            "final_test_accuracy": float(r["trajectory"]["test_accuracy"][-1]),
            "final_test_loss": float(r["trajectory"]["test"][-1]),
            "mean_staleness": float(np.mean(r["staleness"])),
            "max_staleness": int(np.max(r["staleness"])),
            "arrivals": np.bincount(r["client"], minlength=s.n_clients).tolist(),
            "parameters": int(r["parameters"]),
        }
        for a, r in runs.items()
    }
    return {
        "fig1": fig1,
        "summary1": summary1,
        "fig3": fig3,
        "summary3": summary3,
        "claims": found,
        "phase": phase,
        "Q": _q(curve_run),
        "raw_test": raw_test,
        "runs": trajectories,
    }

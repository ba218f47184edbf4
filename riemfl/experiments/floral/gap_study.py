"""``riemfl reproduce floral-gap``: the gap study's runs, report, JSON and figure.

:func:`reproduce_gap_candidates` runs :func:`~riemfl.experiments.floral.gap_candidates.
study_runs` (resumable: every run is checkpointed under ``out``) and writes
``gap_candidates.md``, ``gap_candidates.json`` and ``gap_candidates.png``
(:mod:`~riemfl.experiments.floral.gap_candidates_report`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from ...federated.serialise import json_ready
from ...progress import ProgressBar
from .._threads import single_torch_thread
from ..claims import Claim
from .gap_candidates import GapStudySettings, study_runs, total_rounds
from .gap_candidates_report import claims, gap_cells, overall_verdict, study_plot, study_report
from .run import Runner

__all__ = ["reproduce_gap_candidates"]


def reproduce_gap_candidates(
    out: str | Path = "results/floral_gap",
    *,
    quick: bool = False,
    progress: bool = True,
    settings: GapStudySettings | None = None,
) -> list[Claim]:
    """Run the three candidates and the baseline; write the report, JSON and figure.

    Parameters
    ----------
    out : str or pathlib.Path
        The output folder (checkpoints and run files under it: a second call resumes).
    quick : bool
        :meth:`GapStudySettings.quick` (one column, two seeds, 60 rounds): a smoke run.
    progress : bool
        Show a progress bar over the rounds.
    settings : GapStudySettings, optional
        Every setting (``quick`` then only names the mode in the report).

    Returns
    -------
    list of Claim
        "FLoRAL within 1 point of the ensemble" per candidate, column and FLoRAL row.
    """
    st = (
        settings
        if settings is not None
        else (GapStudySettings.quick() if quick else GapStudySettings())
    )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    total = total_rounds(st)
    t0 = time.perf_counter()
    with single_torch_thread(), ProgressBar(total, "floral-gap", enabled=progress) as bar:
        result = study_runs(Runner(out, bar), st)
        bar.skip(total - bar.count)  # evaluation runs that coincide with another run
    seconds = time.perf_counter() - t0
    cells = gap_cells(result["accuracy"], st)
    (out / "gap_candidates.md").write_text(study_report(cells, result, st, quick, seconds))
    study_plot(cells, out)
    summary = {
        "settings": asdict(st),
        "quick": quick,
        "seconds": seconds,
        "verdict": overall_verdict(cells),
        "cells": cells,
        "schedules": [
            {"column": col, "method": m, **asdict(cfg)}
            for (col, m), cfg in result["schedules"].items()
        ],
        "tuning": [
            {"column": col, "method": m, **asdict(cfg), "accuracy": acc}
            for (col, m, cfg), acc in result["tuning"].items()
        ],
        "runs": [{**r, "config": asdict(r["config"])} for r in result["runs"]],
    }
    (out / "gap_candidates.json").write_text(json.dumps(json_ready(summary), indent=1))
    return claims(cells)

r"""Licudi 2025 (TR), Sec. 3-4: the exploratory study of delay corrections (Figs. 1 and 3, Q).

``reproduce(out, quick=...)`` runs FedAsync and AsyncCurve without delay correction on 8 clients
whose data (and so compute) grows with their index, training LeNet-5 on scikit-learn's digits
(the offline stand-in for FEMNIST; ``data=DIR`` reads LEAF's FEMNIST), records a checkpoint at
every server step and sweeps it: the train/val/test loss one step would reach under every
endpoint correction (ASGD, FedAsync, OrthoGrad, OrthoPos, DC-ASGD with the adaptive lambda x 2.5,
OrthoStrict, eq. (15) with lambda = 1/2) and every control-point correction of AsyncCurve's
learned curve (stale, translated, rotated, against the line). The losses are smoothed (Gaussian,
truncated at 2 sigma), normalised per step to [0, 1] and averaged over the two runs; the report
draws Fig. 1 and Fig. 3, checks two claims (DC-ASGD is never optimal; OrthoCorrect on the better
base dominates away from the phase transition) and sets Q beside the report's 1.0275 +/- 0.0139.

Writes ``report.md``, ``results.json``, ``fig1_endpoint.png`` and ``fig3_control_points.png``;
finished runs are kept under ``runs/`` and read back on a rerun (a reproduction interrupted
during its second run resumes there).

The package, one job per module: :mod:`.settings` (what the study fixes, the quick form),
:mod:`.data` (clients and evaluation sets), :mod:`.checkpoints` (a checkpoint per server step,
the recording rules), :mod:`.proposals` (where each correction moves), :mod:`.sweep` (their
losses), :mod:`.run` (the runs, cached), :mod:`.analysis` (smoothing, normalisation, Q),
:mod:`.verdicts` (the claims), :mod:`.results` (the curves and tables), :mod:`.figures` and
:mod:`.report`.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path

from ...federated.serialise import json_ready
from ...progress import ProgressBar
from .._threads import single_torch_thread
from ..claims import Claim
from .analysis import panel, q_estimate, relative, smooth
from .data import load_study_data
from .figures import FIG1, FIG3, plot_control, plot_endpoint
from .report import report
from .results import analyse
from .run import cached_run, one_run, run_all
from .settings import ALGORITHMS, CONTROL, ENDPOINTS, FIGURE1, PAPER, Settings
from .verdicts import dcasgd_claim, orthocorrect_claim

__all__ = [
    "ALGORITHMS",
    "CONTROL",
    "ENDPOINTS",
    "FIGURE1",
    "FIG1",
    "FIG3",
    "PAPER",
    "Settings",
    "analyse",
    "cached_run",
    "dcasgd_claim",
    "load_study_data",
    "one_run",
    "orthocorrect_claim",
    "panel",
    "q_estimate",
    "relative",
    "reproduce",
    "run_all",
    "smooth",
]


def reproduce(
    out: str | Path = "results/licudi_tr",
    *,
    quick: bool = False,
    progress: bool = True,
    data: str | None = None,
    settings: Settings | None = None,
) -> list[Claim]:
    """Run both runs with their sweeps; write ``report.md``, ``results.json`` and the two figures
    into ``out``; return the claims.

    Parameters
    ----------
    out : path
        The output folder (created; finished runs are cached in ``out/runs``).
    quick : bool
        The quick form (:meth:`Settings.quick`: 100 steps per run, sigma = 5; under a minute on
        one core) instead of the full one (1500 steps, sigma = 100).
    progress : bool
        A progress bar on stderr (one step per server step of either run).
    data : str, optional
        LEAF FEMNIST's directory (``train/`` and ``test/``) instead of the digits stand-in.
    settings : Settings, optional
        Overrides ``quick`` (and ``data``, unless ``data`` is given).

    Returns
    -------
    list of Claim
        ``dcasgd-never-optimal`` and ``orthocorrect-dominates``.
    """
    s = settings if settings is not None else (Settings.quick() if quick else Settings())
    if data is not None:
        s = replace(s, data=str(data))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with single_torch_thread():
        study = load_study_data(s)
        with ProgressBar(s.runs(), "licudi-tr", enabled=progress) as bar:
            runs = run_all(out / "runs", s, study, bar)
    found = analyse(runs, s)
    switches = found["phase"]["transitions"]
    plot_endpoint(
        found["fig1"]["test"],
        {a: v["smoothed_test_loss"] for a, v in found["runs"].items()},
        switches,
        s.window,
        out,
    )
    plot_control(found["fig3"]["test"], switches, s.window, out)
    seconds = time.perf_counter() - t0
    (out / "report.md").write_text(report(found, s, study.description, quick, seconds))
    summary = {
        "settings": asdict(s),
        "quick": quick,
        "seconds": seconds,
        "paper": PAPER,
        "claims": [asdict(c) for c in found["claims"]],
        "phase": {k: v for k, v in found["phase"].items() if k != "base"},
        "Q": found["Q"],
        "summary_fig1": found["summary1"],
        "summary_fig3": found["summary3"],
        "raw_test": found["raw_test"],
        "runs": {
            a: {k: v for k, v in r.items() if k != "smoothed_test_loss"}
            for a, r in found["runs"].items()
        },
        "fig1_test": found["fig1"]["test"],
        "fig3_test": found["fig3"]["test"],
    }
    (out / "results.json").write_text(json.dumps(json_ready(summary), indent=1))
    return found["claims"]

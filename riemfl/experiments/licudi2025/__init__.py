"""Licudi et al. 2025, Table 1, Fig. 3 and Fig. 4 on the offline digits stand-in.

``riemfl reproduce licudi2025 [--quick]`` runs the eight methods of the paper's Table 1 --
FedAsync, FedOrtho, FedGS, DC-ASGD, FedBuff, AsyncFedED and the proposals AsyncBezier and
AsyncBezierED -- on N = 30 clients of scikit-learn's digits split by a per-label Dirichlet(0.5)
(the FEMNIST stand-in; the paper's setup is in its Sec. 4.1 and App. B), 360 server steps, 3 seeds,
and writes a table in the shape of Table 1 (test accuracy and T_e) with the fairness columns (Gini
and Theil of the per-client accuracy of the best global model, eqs. (48)-(49); the bars of
Fig. 3), mean +/- std over the seeds, the paper's FEMNIST numbers beside ours, the local-epoch
study of Fig. 4 (K in {1, 2, 5, 10}, one seed, AsyncFedED excluded as in Sec. 4.2.2),
accuracy-vs-step plots and the loss along a learned curve against the straight line (with the
diagnostic Q), and the comparison at equal client work: accuracy, T_e and the ranking at equal
server steps, client updates and virtual time (:func:`equal_work`; the docs page
``docs/licudi2025.md``). ``riemfl reproduce licudi2025-baselines`` runs the six
baselines only (no epoch study).

Settings (the paper's App. B unless noted):

* clients: local Adam on the FedProx objective, 2 epochs, mu = 1e-3, batch 32, a 2-conv 2-dense
  CNN (:class:`riemfl.nn.SmallCNN`). The local learning rate is 1e-2 instead of the paper's 1e-3:
  a digits client has about 48 rows (4 Adam steps per run) against hundreds of batches for a
  FEMNIST client, and at 1e-3 FedAsync reaches only 59% in 360 steps (95% at 1e-2);
* global learning rates: chosen on the stand-in by the paper's own protocol (App. B, Table 3:
  "selected by line search for each method"): every method's eta_g from the paper's grid {0.25,
  0.5, 1, 1.5, 2, 2.5, 3, 5} by the final accuracy on validation rows split off the clients'
  training data (a separate seed; test rows never seen), reported beside the paper's Table 3
  FEMNIST choices (FedAsync 3,
  FedOrtho 3, FedGS 1, DC-ASGD 1, FedBuff 1 with K = 10, AsyncFedED 0.25, AsyncBezier 0.5,
  AsyncBezierED 0.25). Table 3's values transfer badly: the stand-in's clients run a few Adam
  steps, not hundreds, so the rates that suit FEMNIST leave the slow methods far from converged.
  ``licudi2025-baselines`` keeps Table 3's values; DC-ASGD lambda_0 = 2; AsyncFedED gamma_bar =
  1, kappa = 1, warm-up 10;
* compute heterogeneity: the paper's scheduler (App. B.0.1: 2 workers, queue key num_batches +
  2 * time, rank-sampled), durations proportional to the number of local batches;
* T_e: the first evaluated server step whose test error is at most e = 0.20 (FEMNIST's e,
  Sec. 4.2);
  evaluation every 10 server steps (every step in the paper), so T_e has a resolution of 10;
  FedBuff, which takes K = 10 client updates per server step, is evaluated at every server step,
  so that every method is evaluated about every 10 client updates (the per-step table, T_e and
  best model use FedBuff's evaluations at multiples of 10 steps only, as for the others);
* equal client work (fixed before the results were seen): each run's curve keeps the server
  step, the client updates received and the virtual time of every evaluation; on each of the
  three clocks every method is read at the largest budget every run reached (the fewest client
  updates any run received: FedBuff gets 10x the updates of the others in the same server steps;
  the shortest virtual time), by linear interpolation between two evaluations; T_e on a clock is
  its reading at the first evaluation at the target, if within the budget. The report gives the
  accuracy and T_e rankings and the pairs agreeing with Table 1 on each clock, and where FedBuff
  ranks. Which clock the paper used is an
  inference from its "720 total epochs" (Sec. 4.2), a budget of client work (:func:`paper_axis`);
* AsyncBezier / AsyncBezierED: :class:`riemfl.nn.BezierClientTrainer` (2 warm-up epochs, then 2
  curve epochs on the middle control point, both ends frozen; the control point's Adam step is the
  paper's 1e-3, not the end point's 1e-2: with 1e-2, Adam's per-coordinate steps carry the middle of
  the curve into high loss, Q = 0.32 at a final model against 1.14 with 1e-3), OrthoDC per control
  point with vartheta = 1, alpha = 0 / 1. In the copy of the paper available to us, rows 7 and 8 of
  Table 1 (the two AsyncBezier variants) carry garbled labels; we print row 7 beside AsyncBezier and
  row 8 beside AsyncBezierED (Table 3's order);
* Fig. 4: AsyncBezier uses min(K, 2) curve epochs with K warm-up epochs (Sec. 4.2.2);
* every (method, seed, K) run is saved under ``runs/`` as it finishes, so an interrupted
  reproduction resumes where it stopped;
* ``--quick``: one seed, 120 server steps; line search over {0.5, 1, 3} at 60 steps; epoch
  study K in {1, 2, 5} at 60 steps.

The package, one job per module: :mod:`~riemfl.experiments.licudi2025.settings` (the methods, the
paper's numbers, :class:`Settings`), :mod:`~riemfl.experiments.licudi2025.data` (the clients'
data), :mod:`~riemfl.experiments.licudi2025.run` (one run, cached under ``runs/``),
:mod:`~riemfl.experiments.licudi2025.studies` (the line search, every run, the epoch and path
studies), :mod:`~riemfl.experiments.licudi2025.clocks` (the readings at equal work),
:mod:`~riemfl.experiments.licudi2025.tables` and :mod:`~riemfl.experiments.licudi2025.rankings`
(the report's tables and verdicts), :mod:`~riemfl.experiments.licudi2025.figures` and
:mod:`~riemfl.experiments.licudi2025.report` (the Markdown and the files written).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .._threads import single_torch_thread
from .clocks import equal_work
from .data import client_data
from .figures import plot_clocks, plot_epochs
from .rankings import fedbuff_statement, ranking_statement
from .report import (
    epoch_section,
    equal_work_section,
    main_sections,
    paper_axis,
    path_section,
    write_report,
)
from .settings import (
    BASELINES,
    CURVE_METHODS,
    DATASETS,
    METHODS,
    PAPER_FEMNIST,
    PAPER_RATES,
    PAPER_SHAKESPEARE,
    RATE_GRID,
    TARGET_ERRORS,
    Settings,
)
from .studies import line_search, path_study, run_all
from .table2 import reproduce_table2
from .table2_settings import PAPER_CXR8, PAPER_CXR8_RATES, Table2Settings
from .tables import accuracy_ties, equal_work_table, table

__all__ = [
    "METHODS",
    "PAPER_RATES",
    "RATE_GRID",
    "BASELINES",
    "CURVE_METHODS",
    "DATASETS",
    "PAPER_FEMNIST",
    "PAPER_SHAKESPEARE",
    "TARGET_ERRORS",
    "PAPER_CXR8",
    "PAPER_CXR8_RATES",
    "Settings",
    "Table2Settings",
    "accuracy_ties",
    "client_data",
    "equal_work",
    "equal_work_section",
    "equal_work_table",
    "fedbuff_statement",
    "line_search",
    "paper_axis",
    "ranking_statement",
    "reproduce",
    "reproduce_table2",
    "table",
]


def reproduce(
    out: str | Path = "results/licudi2025",
    *,
    quick: bool = False,
    progress: bool = True,
    settings: Settings | None = None,
) -> str:
    """Run every method and seed (and the epoch study); write ``report.md``, plots and
    ``results.json``. Finished runs are kept under ``out/runs`` and reused on a rerun.

    Parameters
    ----------
    out : str or Path
        The output directory.
    quick : bool
        Use :meth:`Settings.quick` (ignored when ``settings`` is given).
    progress : bool
        Show a progress bar.
    settings : Settings, optional
        The settings; default :class:`Settings` (or :meth:`Settings.quick`).

    Returns
    -------
    str
        The Markdown table in the shape of Table 1 (:func:`table`).
    """
    s = settings if settings is not None else (Settings.quick() if quick else Settings())
    with single_torch_thread():
        return _reproduce(Path(out), s, progress)


def _reproduce(out: Path, s: Settings, progress: bool) -> str:
    """Run, analyse, draw and write everything of :func:`reproduce` under ``out``."""
    t0 = time.perf_counter()
    done = run_all(out / "runs", s, progress)
    md = table(done.runs, s)
    work = equal_work(done.runs, s)
    plot_clocks(done.runs, s, work, out)
    sections = main_sections(done, s, work, md)
    results: dict[str, Any] = {"settings": s.__dict__, "rates": done.rates, "equal_work": work}
    if done.study:
        plot_epochs(done.study, s, out / "epochs.png")
        sections += epoch_section(s, done.study_md)
        results["epoch_study"] = done.study
    quality = path_study(done.runs, s, out)
    if quality is not None:
        sections += path_section(quality)
        results["path"] = quality
    write_report(out, sections, results, done.runs, time.perf_counter() - t0)
    return md

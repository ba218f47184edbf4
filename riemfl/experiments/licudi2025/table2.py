"""Licudi et al. 2025, Table 2 (CXR8): macro AUROC, macro AUPRC and T_e of the eight methods.

:func:`reproduce_table2` runs the methods of Table 1 -- FedAsync, FedOrtho, FedGS, DC-ASGD,
FedBuff, AsyncFedED and the proposals AsyncBezier and AsyncBezierED, the rows of the paper's
Table 2 -- through Table 1's run loop (:func:`~riemfl.experiments.licudi2025.run.cached_run`, with
the task of :mod:`~riemfl.experiments.licudi2025.table2_task`) and writes ``table2.md``,
``table2.json`` and ``table2.png`` (macro AUROC against client updates and virtual time).

Settings (Licudi et al. 2025, Sec. 4.1 and App. B, B.3, unless noted):

* data: by default the offline stand-in (:mod:`~riemfl.experiments.licudi2025.cxr8_standin`),
  3000 patients (about 10,900 images of 16 x 16, 8 findings), dealt whole to N = 30 clients,
  a fifth of each client's patients its test patients. 3000 rather than the stand-in's default
  300: a client then has about 290 training rows, 20 Adam steps per update; with 300 (one batch,
  2 Adam steps) FedAsync's macro AUROC is still about 0.5 after 120 server steps (measured: 0.53
  with the linear model, 0.49 with :class:`riemfl.nn.SmallCNN`). With
  ``data=DIR``: the user's NIH ChestX-ray14 files (:func:`~riemfl.experiments.licudi2025.cxr8.
  cxr8_clients`): every image (112,120; 7.3 GB as float32) at 128 x 128, 30 clients of whole
  patients; ``quick``: 2000 images of whole patients;
* model: on the stand-in a linear layer per finding (``MLP([256, 8])``, a logistic regression
  per finding). ShuffleNet V2 x1.5 is far too slow on a CPU for the stand-in (about 1.3 s per
  client update on one core at 16 x 16 against about 7 ms; the quick run's ~2,600 client updates
  would take an hour). On the NIH files: ShuffleNet V2 x1.5 (:class:`riemfl.nn.ShuffleNetV2`)
  from random weights (the paper fine-tunes torchvision's ImageNet weights, which riemfl does not
  download), with **1 input channel**: the paper copies the grey image to 3 channels to match the
  pretrained weights, which a network trained from scratch does not need (``channels=3`` in
  :class:`~riemfl.experiments.licudi2025.table2_settings.Table2Settings` restores the copy). Its
  batch norms normalise by the batch's statistics in training and evaluation
  (:func:`~riemfl.experiments.licudi2025.table2_task.batch_statistics`): the rules exchange
  parameters only, so no client's running statistics belong to the global model (a model that
  keeps them is evaluated with statistics recalibrated on the pooled training rows,
  :class:`~riemfl.nn.TorchClientTrainer`);
* loss: binary cross-entropy with logits over the 8 conditions (the paper does not name the
  head); local Adam, 2 epochs, mu = 1e-3, batch 32, learning rate 1e-3 on the NIH files (the
  paper's) and 1e-2 on the stand-in (Table 1's stand-in rate, for the same reason: a few Adam
  steps per update);
* global rates: Table 3's CXR8 column (FedAsync 2, FedOrtho 2, FedGS 1, DC-ASGD 1, FedBuff 1,
  AsyncFedED 0.5, AsyncBezier 0.5, AsyncBezierED 0.25), unchanged: no line search here;
  AsyncBezier and AsyncBezierED with OrthoDC's vartheta = 0 (App. B.3); the other rules' settings
  are Table 1's (DC-ASGD lambda_0 = 2, FedBuff K = 10, AsyncFedED gamma_bar = 1, kappa = 1,
  warm-up 10);
* 360 server steps and 3 seeds (``quick``: 120 and one), the paper's scheduler (App. B.0.1), 2
  workers, evaluation every 10 server steps (FedBuff every step), as in Table 1;
* metrics: macro AUROC and macro AUPRC over the 8 conditions on the pooled test rows at the last
  server step (:func:`riemfl.nn.macro_auroc_auprc`); T_e the first server step on the grid of 10
  whose 1 - macro AUROC <= e = 0.25 (Sec. 4.2), by
  :func:`~riemfl.experiments.licudi2025.multilabel.auroc_t_e`; the macro AUROC of every run also
  at the fewest client updates any run received (equal client work: FedBuff takes K = 10 per
  server step);
* the report orders the methods on each metric against Table 2 (pairs ordered alike, as Table 1's
  report counts them, and Kendall's tau-b) and says what would change each verdict; rows 7 and 8
  of Table 2 (garbled labels in our copy of the paper) are printed beside AsyncBezier and
  AsyncBezierED in Table 3's order;
* every (method, seed) run is saved under ``runs/<data and model>/`` as it finishes, so an
  interrupted reproduction resumes where it stopped.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ...progress import ProgressBar
from .._threads import single_torch_thread
from ..equal_work import common_budget, value_at
from .multilabel import auroc_t_e
from .run import cached_run, summary
from .table2_figure import plot_table2
from .table2_report import report_lines, table2_table
from .table2_settings import PAPER_CXR8, PAPER_CXR8_RATES, Table2Settings
from .table2_task import CXR8_TASK

__all__ = ["reproduce_table2", "run_table2", "table2_rows"]


def reproduce_table2(
    out: str,
    *,
    quick: bool = False,
    data: str | None = None,
    progress: bool = True,
    device: str = "cpu",
    settings: Table2Settings | None = None,
) -> str:
    """Run Licudi et al. 2025, Table 2's methods and write ``table2.md``, ``table2.json`` and
    ``table2.png`` into ``out`` (module docstring).

    Parameters
    ----------
    out : str
        The output directory; finished runs are kept under ``out/runs`` and reused on a rerun.
    quick : bool
        120 server steps and one seed (on the NIH files also 2000 images, not all).
    data : str, optional
        The directory of the NIH ChestX-ray14 files (``Data_Entry_2017.csv`` and the PNGs);
        default: the offline stand-in.
    progress : bool
        Show a progress bar.
    device : str
        The torch device of the clients' training ("cpu", "cuda", ...).
    settings : Table2Settings, optional
        Every setting at once (``quick``, ``data`` and ``device`` are then ignored).

    Returns
    -------
    str
        The report's Markdown (the text of ``table2.md``).
    """
    s = settings
    if s is None:
        s = Table2Settings.standin(quick) if data is None else Table2Settings.files(data, quick)
        s.device = device
    s.check()
    with single_torch_thread():
        return _reproduce(Path(out), s, progress)


def run_table2(runs_dir: Path, s: Table2Settings, progress: bool) -> list[dict[str, Any]]:
    """Every method and seed of ``s`` at Table 3's CXR8 rates, each run cached under
    ``runs_dir``."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(m, seed) for m in s.methods for seed in s.seeds]
    runs = []
    with ProgressBar(len(jobs), "licudi2025 table 2", enabled=progress) as bar:
        for method, seed in jobs:
            run = cached_run(runs_dir, method, seed, s, rate=s.rate(method), task=CXR8_TASK)
            runs.append(run)
            bar.update(1, run=f"{method} seed {seed}", auroc=run["auroc"])
    return runs


def table2_rows(
    runs: list[dict[str, Any]], s: Table2Settings
) -> tuple[list[dict[str, Any]], float]:
    """Each run's row of the table (its summary), with T_e by
    :func:`~riemfl.experiments.licudi2025.multilabel.auroc_t_e` on the server steps of the
    per-step grid (every ``s.record_every`` steps and the last) and its macro AUROC at the fewest
    client updates any run received; and that budget of client updates."""
    budget = common_budget([r["curve"]["updates"] for r in runs])
    rows = []
    for run in runs:
        curve = run["curve"]
        grid = [
            i
            for i, step in enumerate(curve["step"])
            if step % s.record_every == 0 or step >= run["steps"]
        ]
        row = summary(run)
        row["T_e"] = auroc_t_e(
            [curve["step"][i] for i in grid], [curve["auroc"][i] for i in grid], s.error_target
        )
        row["auroc_at_updates"] = value_at(curve["updates"], curve["auroc"], budget)
        rows.append(row)
    return rows, budget


def _reproduce(out: Path, s: Table2Settings, progress: bool) -> str:
    """Run, tabulate, draw and write everything of :func:`reproduce_table2` under ``out``."""
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    runs = run_table2(out / "runs" / s.tag, s, progress)
    rows, budget = table2_rows(runs, s)
    table = table2_table(rows, s, budget)
    lines, ranked = report_lines(rows, s, table, budget)
    plot_table2(runs, s, out / "table2.png")
    seconds = time.perf_counter() - t0
    lines += ["", f"Total time {seconds:.0f} s (runs found under `runs/` are reused)."]
    text = "\n".join(lines) + "\n"
    (out / "table2.md").write_text(text)
    results = {
        "settings": s.__dict__,
        "rates": {m: PAPER_CXR8_RATES[m] for m in s.methods},
        "paper": {m: PAPER_CXR8[m] for m in s.methods},
        "updates_budget": budget,
        "rankings": ranked,
        "runs": rows,
        "seconds": seconds,
    }
    (out / "table2.json").write_text(json.dumps(results, indent=1, default=str))
    return text

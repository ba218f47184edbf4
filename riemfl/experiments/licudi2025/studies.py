"""The runs of a Licudi et al. 2025 reproduction: the line search of the global rates, every
method and seed, the local-epoch study (Fig. 4) and the loss along a learned curve."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...federated.curve_quality import manifold_quality, path_losses, plot_loss_along_path
from ...progress import ProgressBar
from ..equal_work import common_budget, value_at
from .run import cached_run, summary, trainer
from .settings import PAPER_RATES, Settings, check_methods
from .tables import epoch_tables, rates_table

__all__ = ["Runs", "epoch_study", "line_search", "path_study", "run_all"]


@dataclass
class Runs:
    """Everything :func:`run_all` ran: the global rates and their line-search table (empty
    without a line search), the runs of every method and seed, and the local-epoch study's rows
    and tables (empty without the study)."""

    rates: dict[str, float]
    rates_md: str
    runs: list[dict[str, Any]] = field(default_factory=list)
    study: list[dict[str, Any]] = field(default_factory=list)
    study_md: str = ""


def run_all(runs_dir: Path, s: Settings, progress: bool) -> Runs:
    """The line search (if ``s.tune``), every method and seed at the chosen rates, and the
    local-epoch study (if ``s.epoch_study``), each run cached under ``runs_dir``."""
    check_methods(s)
    runs_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(m, seed) for m in s.methods for seed in s.seeds]
    n_study = len(s.epoch_study) * len(s.study_methods)
    n_tune = len(s.methods) * len(s.rate_grid) if s.tune else 0
    with ProgressBar(n_tune + len(jobs) + n_study, "licudi2025", enabled=progress) as bar:
        done = Runs(*line_search(runs_dir, s, bar)) if s.tune else Runs(dict(PAPER_RATES), "")
        for method, seed in jobs:
            done.runs.append(cached_run(runs_dir, method, seed, s, rate=done.rates[method]))
            bar.update(1, run=f"{method} seed {seed}", acc=done.runs[-1]["accuracy"])
        if s.epoch_study:
            done.study, done.study_md = epoch_study(runs_dir, s, bar, done.rates)
    return done


def line_search(runs_dir: Path, s: Settings, bar: Any) -> tuple[dict[str, float], str]:
    """The protocol of Licudi et al. 2025 (App. B) on the stand-in.

    Each method's eta_g from ``s.rate_grid`` by the best final validation accuracy (training rows
    split into training and validation, seed ``s.tune_seed``, ``s.tune_steps`` server steps); the
    test rows are never used.

    Returns
    -------
    tuple
        method -> the chosen rate, and the Markdown table of the search
        (:func:`~riemfl.experiments.licudi2025.tables.rates_table`).
    """
    chosen: dict[str, float] = {}
    scores: dict[str, dict[float, float]] = {}
    for method in s.methods:
        scores[method] = {}
        for rate in s.rate_grid:
            run = cached_run(
                runs_dir, method, s.tune_seed, s, steps=s.tune_steps, rate=rate, validation=True
            )
            scores[method][rate] = run["accuracy"]
            bar.update(1, run=f"tune {method} eta={rate:g}", acc=run["accuracy"])
        chosen[method] = max(s.rate_grid, key=lambda r, m=method: (scores[m][r], -r))
    return chosen, rates_table(s, scores, chosen)


def epoch_study(
    runs_dir: Path, s: Settings, bar: Any, rates: dict[str, float]
) -> tuple[list[dict[str, Any]], str]:
    """Licudi et al. 2025, Fig. 4: final accuracy against the local epochs K (one seed; no
    AsyncFedED), after ``s.epoch_study_steps`` server steps and at equal client updates (the
    fewest any study run received, as in
    :func:`~riemfl.experiments.licudi2025.clocks.equal_work`).

    Returns
    -------
    tuple
        The study's rows (one per method and K, with ``accuracy_at_updates``) and its two
        Markdown tables (:func:`~riemfl.experiments.licudi2025.tables.epoch_tables`).
    """
    rows, curves = [], []
    for k in s.epoch_study:
        for method in s.study_methods:
            run = cached_run(
                runs_dir, method, s.epoch_study_seed, s, k, s.epoch_study_steps, rates[method]
            )
            rows.append(summary(run))
            curves.append(run["curve"])
            bar.update(1, run=f"{method} K={k}", acc=run["accuracy"])
    budget = common_budget([c["updates"] for c in curves])
    for row, c in zip(rows, curves, strict=True):
        row["accuracy_at_updates"] = value_at(c["updates"], c["accuracy"], budget)
    return rows, epoch_tables(rows, s, budget)


def path_study(runs: list[dict[str, Any]], s: Settings, out: Path) -> dict[str, Any] | None:
    """Loss along a curve learned by client 0 from the final model of the first AsyncBezier run,
    against the straight line between the same end points; Q = mean line loss / mean curve loss.
    Draws ``out/loss_along_path.png``. None without an AsyncBezier run that kept its model."""
    curve_runs = [r for r in runs if r["method"] == "AsyncBezier" and r["final_point"] is not None]
    if not curve_runs:
        return None
    from ...nn import BezierClientTrainer

    run = curve_runs[0]
    local = trainer(s, run["seed"], s.epochs)
    clients = BezierClientTrainer(local, curve_epochs=s.curve_epochs, curve_lr=s.curve_lr)
    phi = clients.train(0, run["final_point"], np.random.default_rng(run["seed"]))

    def loss(x: np.ndarray) -> float:
        return local.evaluate(x)["loss"]

    losses = path_losses(loss, phi, 11)
    plot_loss_along_path(
        losses, out / "loss_along_path.png", title="AsyncBezier client 0: learned curve vs line"
    )
    return {
        "Q": manifold_quality(loss, phi, 11),
        "curve_mean_loss": float(losses["curve"].mean()),
        "line_mean_loss": float(losses["line"].mean()),
    }

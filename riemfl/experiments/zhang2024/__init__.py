"""Reproduction of Figures 1-9 of Zhang, Hu, So and Johansson (NeurIPS 2024) and their claims.

``riemfl reproduce zhang2024 [--figure N] [--quick] [--data MNIST_FILE]`` runs the four
algorithms with the paper's settings (Sec. 5 and App. A.4), draws every figure, checks ten claims
(structural ones to 1e-12, empirical ones with the tolerances written in each claim) and writes a
markdown report. Claims 1-5 are exact properties of Algorithm 1 and its accounting (Secs. 3 and
5: feasibility of P_M(x^r), the compact form (5), the C-PRGD special case (7), one uploaded
matrix per round against RFedSVRG's two, the Euclidean reduction); claims 6-10 restate the
qualitative statements that Sec. 5 and App. A.4 make about Figs. 1-9 (the paper states no
numbers), with tolerances chosen here.

Settings the paper leaves open, and the values used:

* MNIST is replaced by scikit-learn's digits (1797 x 64, label-sorted over 10 clients, p = 180)
  unless ``--data`` gives an MNIST file; then Fig. 3 uses the batch sizes (200, 500, 1000) (the
  paper's text does not give them; these are read off a third-party summary of its Fig. 3 and
  are unverified) and the paper's eta = 1/(20 beta); on digits it uses (10, 50, 150) and
  eta = 1/beta, because with 1/(20 beta) the digits runs are still far from their noise floor
  after 1500 rounds (the digits problem has a small eigengap).
* The number of rounds R is stated only for Fig. 7 (4000); the others use the values in
  :func:`figures`. ``--quick`` shortens every run (and runs only RFedProj and RFedSVRG in Fig. 7)
  and the claim-8 sweep (:func:`sweep`: four step sizes, tolerance 1e-6).
* LRMC: eta = 1e-4, tau = 5 (Figs. 4, 8) and tau in {2, 5, 10} (Fig. 9); not stated. In trial runs
  at tau = 5, eta = 1e-3 stalls (f about 14) and eta = 1e-4 converges; at tau = 10 the local drift
  eta * tau = 1e-3 is close to where those trials stalled, and tau = 10 converges per round more
  slowly than tau = 5: Fig. 9 shows it, claim 8a reports it.
* Claim 8 depends on the LRMC step size, so it is checked under three readings: 8a one eta for
  all tau (the figures as run); 8b and 8c eta per tau, picked from a sweep (:class:`Sweep`,
  :func:`sweep`: tau in {2, 5, 10, 15, 20}, eta on a log grid, on a tuning seed) by rule (i),
  the fewest uploads to the tolerance, or rule (ii), the largest stable eta, and measured on a
  held-out seed. The protocol was fixed in code before the sweep ran; 8b is the verdict
  ``--strict`` counts (tuning the open setting per tau on held-out data is the usual way to
  compare settings whose step size is not given, and the fixed eta was itself picked at tau = 5
  only), 8a and 8c are reported beside it.
* RFedProx: mu = 1 (not stated). The baselines use approximate operators (the manifold's polar
  retraction, its inverse and projection transport), like the implementations the paper cites.
* Every run starts from the same random Stiefel point (seed 0); eta_g = 1 as in the paper's
  experiments.

The modules: :mod:`~riemfl.experiments.zhang2024.settings` (the runs, figures and the claim-8
sweep), :mod:`~riemfl.experiments.zhang2024.run` (running them, and what a rerun reads back),
:mod:`~riemfl.experiments.zhang2024.checks` (the claim checks, with
:mod:`~riemfl.experiments.zhang2024.structural` for claims 2, 3 and 5,
:mod:`~riemfl.experiments.zhang2024.tau` for claim 8 and
:mod:`~riemfl.experiments.zhang2024.hints` for its words; the record of a verdict is
:mod:`~riemfl.experiments.zhang2024.claims`), :mod:`~riemfl.experiments.zhang2024.figures` (the
plots) and :mod:`~riemfl.experiments.zhang2024.report` (the Markdown report); :func:`reproduce`
runs them in that order.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from ...errors import ParameterError
from ...federated import History
from ...progress import ProgressBar
from ..styles import Styles
from .checks import check_claims
from .claims import Claim, claim_lines
from .figures import plot_figure, plot_sweep
from .report import report_markdown, sweep_section
from .run import Problems, Reuse, run_all, warm_up
from .settings import (
    SWEEP_RULES,
    Figure,
    Run,
    Sweep,
    fewer_uploads_with_larger_tau,
    figures,
    sweep,
)

__all__ = [
    "Run",
    "Figure",
    "Claim",
    "Sweep",
    "figures",
    "sweep",
    "reproduce",
    "check_claims",
    "claim_lines",
    "fewer_uploads_with_larger_tau",
]


def reproduce(
    out: str | Path = "results/zhang2024",
    *,
    figure: Sequence[int] | None = None,
    quick: bool = False,
    data: str | None = None,
    progress: bool = True,
) -> list[Claim]:
    """Run the figures, write ``report.md``, ``figN.png``, ``results.json`` and the histories;
    with Fig. 9, also the claim-8 sweep (:func:`sweep`) and ``fig9_sweep.png``.

    Returns the claims; completed runs are checkpointed under ``out/checkpoints``, so an
    interrupted reproduction resumes where it stopped, and a rerun reads finished runs back
    instead of computing them again: the report and a line on stderr say how many (and the
    wall time they took when they were computed).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    all_figs = figures(quick=quick, mnist=data is not None)
    chosen = sorted(set(figure)) if figure else sorted(all_figs)
    bad = [n for n in chosen if n not in all_figs]
    if bad:
        raise ParameterError(f"no figure {bad} in Zhang et al. 2024; expected numbers 1-9")
    figs = {n: all_figs[n] for n in chosen}
    runs: dict[str, Run] = {}
    for fig in figs.values():
        for run in fig.runs:
            runs.setdefault(run.key, run)
    setting = sweep(quick) if 9 in figs else None
    tuning = setting.tuning_runs() if setting else []
    problems = Problems(data)
    results: dict[str, History] = {}
    t0 = time.perf_counter()
    warm_up(list(runs.values()), problems)  # the sweep compares uploads, not CPU time
    stage1 = list(runs.values()) + [r for r in tuning if r.key not in runs]
    # the sweep's held-out runs depend on the tuning runs: at most one per (rule, tau)
    later = len(SWEEP_RULES) * len(setting.taus) * setting.rounds if setting else 0
    total = sum(r.rounds for r in stage1) + later
    picks = None
    reuse = Reuse()
    with ProgressBar(total, "zhang2024", enabled=progress) as bar:
        run_all(stage1, problems, out, bar, results, reuse)
        if setting is not None:
            picks = setting.choices(results)
            held_out = [r for r in setting.report_runs(picks) if r.key not in results]
            bar.total = bar.count + sum(r.rounds for r in held_out)  # the estimate, made exact
            run_all(held_out, problems, out, bar, results, reuse)
    claims = check_claims(figs, results, problems, setting)
    styles = Styles()  # one look per label across all the figures
    for n, fig in figs.items():
        plot_figure(fig, results, out / f"fig{n}.png", styles)
    sweep_lines: list[str] = []
    if setting is not None and picks is not None:
        plot_sweep(setting, picks, results, out / "fig9_sweep.png", styles)
        sweep_lines = sweep_section(setting, picks, results, claims)
    seconds = time.perf_counter() - t0
    cached = reuse.sentence(out, seconds)
    if cached:
        print(f"zhang2024: {cached}", file=sys.stderr)
    (out / "report.md").write_text(
        report_markdown(
            figs,
            results,
            claims,
            quick=quick,
            data=data,
            seconds=seconds,
            sweep_lines=sweep_lines,
            cached=cached,
        )
    )
    summary = {
        "quick": quick,
        "data": data,
        "figures": chosen,
        "seconds": seconds,
        "reused_runs": reuse.reused,
        "resumed_runs": reuse.resumed,
        "reused_runs_seconds": reuse.seconds,
        "claims": [asdict(c) | {"verdict": c.verdict, "label": c.label} for c in claims],
        "sweep": None
        if setting is None or picks is None
        else {
            "setting": asdict(setting),
            "picks": picks,
            "uploads": setting.uploads(picks, results),
            "runs": [r.key for r in tuning + setting.report_runs(picks)],
        },
        "runs": {k: asdict(r) for k, r in runs.items()},
    }
    (out / "results.json").write_text(json.dumps(summary, indent=1, default=str))
    return claims

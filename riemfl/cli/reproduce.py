"""``riemfl reproduce PAPER``: a paper's experiments, its report and plots.

:data:`PAPERS` is the one table of the reproducible papers: the parser's choices, the dispatch,
the ``--strict`` check and the check of the optional dependencies (``Paper.extras``, before
anything runs) all read it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ParameterError

__all__ = ["PAPERS", "Paper", "reproduce"]


@dataclass(frozen=True)
class Paper:
    """One reproducible paper of ``riemfl reproduce``.

    Attributes
    ----------
    run : callable
        ``run(args, out) -> failed``: runs the experiments, prints their summary and returns the
        labels of the claims that FAIL and that ``--strict`` counts (empty for a paper without
        pass/fail claims).
    no_verdicts : str
        Empty for a paper whose report has pass/fail claims (``--strict`` applies); else why
        ``--strict`` does not apply.
    extras : tuple of str
        The extras it needs (keys of :data:`riemfl.extras.EXTRAS`); a missing
        one is a one-line error naming its ``pip install`` command.
    tables : tuple of int
        The paper's tables that ``--table N`` selects (empty: none; the run without
        ``--table`` is the paper's main reproduction).
    figures : tuple of int
        The figures that ``--figure N`` selects (empty: none).
    report : str
        The file the run writes its report to (``--table N`` runs write ``tableN.md``).
    """

    run: Callable[[argparse.Namespace, str], list[str]]
    no_verdicts: str = ""
    extras: tuple[str, ...] = ("data",)
    tables: tuple[int, ...] = ()
    figures: tuple[int, ...] = ()
    report: str = "report.md"


def _failed(verdicts: list, what: str) -> list[str]:
    """Print a paper's verdicts and how many pass; return the labels of those that fail."""
    for v in verdicts:
        print(v.line())
    print(f"{sum(v.passed for v in verdicts)}/{len(verdicts)} {what}")
    return [v.label for v in verdicts if not v.passed]


def _verdicts(module: str, what: str) -> Callable[[argparse.Namespace, str], list[str]]:
    """The ``run`` of a paper whose ``riemfl.experiments.<module>.reproduce(out, quick=...,
    progress=...)`` returns its verdicts (``label``, ``passed``, ``line()``); ``what`` names
    them in the summary line ("claims pass")."""

    def run(args: argparse.Namespace, out: str) -> list[str]:
        experiment = importlib.import_module(f"riemfl.experiments.{module}")
        verdicts = experiment.reproduce(out, quick=args.quick, progress=not args.no_progress)
        return _failed(verdicts, what)

    return run


def _floral(args: argparse.Namespace, out: str) -> list[str]:
    from ..experiments import floral

    progress = not args.no_progress
    if args.figure:  # Fig. 2: the synthetic MLP with batch normalisation
        from ..experiments.floral.fig2 import run_fig2

        result = run_fig2(out, quick=args.quick, progress=progress)
        for label, variant in result["variants"].items():
            print(f"{label}: final personal test MSE {variant['final_loss']:.4g}")
    elif args.table in (None, 1):
        report = floral.reproduce(
            out,
            quick=args.quick,
            data=args.data,
            progress=progress,
            cifar_standin=args.cifar_standin,
        )
        print(report)
    else:
        report = floral.reproduce_table(
            args.table, out, quick=args.quick, data=args.data, progress=progress
        )
        print(report)
    return []


def _floral_theory(args: argparse.Namespace, out: str) -> list[str]:
    from ..experiments import floral

    floral.run_mfl_regret(out, quick=args.quick, progress=not args.no_progress)
    print((Path(out) / "mfl.md").read_text())
    return []


def _floral_gap(args: argparse.Namespace, out: str) -> list[str]:
    from ..experiments.floral.gap_study import reproduce_gap_candidates

    claims = reproduce_gap_candidates(out, quick=args.quick, progress=not args.no_progress)
    return _failed(claims, "cells where FLoRAL is within 1 point of the ensemble")


def _licudi2025(args: argparse.Namespace, out: str) -> list[str]:
    from ..experiments import licudi2025

    if args.table == 2:  # the chest X-rays (CXR8), or the offline multi-label stand-in
        progress = not args.no_progress
        print(
            licudi2025.reproduce_table2(
                out, quick=args.quick, data=args.data, progress=progress, device=args.device
            )
        )
        return []

    if args.paper == "licudi2025-baselines":
        settings = licudi2025.Settings.baselines(args.quick)
    else:
        settings = licudi2025.Settings.quick() if args.quick else licudi2025.Settings()
    settings.dataset, settings.data, settings.device = args.dataset, args.data, args.device
    print(licudi2025.reproduce(out, settings=settings, progress=not args.no_progress))
    return []


def _licudi_tr(args: argparse.Namespace, out: str) -> list[str]:
    from ..experiments import licudi_tr

    claims = licudi_tr.reproduce(
        out, quick=args.quick, progress=not args.no_progress, data=args.data
    )
    return _failed(claims, "claims pass")


def _privacy(args: argparse.Namespace, out: str) -> list[str]:
    from ..experiments import privacy

    print(privacy.reproduce(out, quick=args.quick, progress=not args.no_progress))
    return []


def _zhang2024(args: argparse.Namespace, out: str) -> list[str]:
    from ..experiments import zhang2024

    claims = zhang2024.reproduce(
        out, figure=args.figure, quick=args.quick, data=args.data, progress=not args.no_progress
    )
    for line in zhang2024.claim_lines(claims):
        print(line)
    gated = [c for c in claims if c.gated]
    passed = sum(c.passed is True for c in gated)
    checked = sum(c.passed is not None for c in gated)
    readings = ", ".join(f"{c.label} {c.verdict}" for c in claims if not c.gated)
    print(
        f"{passed}/{checked} claims pass"
        + (f" (readings not counted: {readings})" if readings else "")
    )
    return [c.label for c in gated if c.passed is False]


_TABLES_ONLY = "it reports tables and plots, with no pass/fail claims"

#: the reproducible papers, by the name ``riemfl reproduce`` takes
PAPERS: dict[str, Paper] = {
    "zhang2024": Paper(_zhang2024, figures=tuple(range(1, 10))),
    "licudi2025": Paper(_licudi2025, _TABLES_ONLY, ("torch", "data"), tables=(1, 2)),
    "licudi2025-baselines": Paper(_licudi2025, _TABLES_ONLY, ("torch", "data")),
    "licudi-tr": Paper(_licudi_tr, extras=("torch", "data")),
    "learned-surfaces": Paper(
        _verdicts("learned_surfaces", "claims pass"), extras=("torch", "data")
    ),
    "curved-curves": Paper(_verdicts("curved_curves", "claims pass"), extras=("torch", "data")),
    "floral": Paper(
        _floral,
        "its report compares with the paper's numbers in prose, with no pass/fail claims",
        ("torch", "data"),
        tables=(1, 2, 4, 5),
        figures=(2,),
    ),
    "floral-theory": Paper(
        _floral_theory,
        "it compares measurements with Theorems A.9 and A.10 in its report, with no pass/fail "
        "claims",
        ("torch", "data"),
        report="mfl.md",
    ),
    "floral-gap": Paper(_floral_gap, extras=("torch", "data"), report="gap_candidates.md"),
    "privacy": Paper(
        _privacy,
        "it reports utility against epsilon, with no pass/fail claims",
        ("privacy", "data"),
    ),
    "robustness": Paper(_verdicts("robustness", "(problem, attack) pairs pass")),
    "communication": Paper(_verdicts("communication", "(problem, rule) pairs pass")),
    "fedbuff-bound": Paper(_verdicts("fedbuff_bound", "checks of Theorem 1 pass")),
}


def reproduce(args: argparse.Namespace) -> int:
    """``riemfl reproduce``: check the options, run the paper, print where the report is."""
    paper = PAPERS[args.paper]
    if args.strict and paper.no_verdicts:
        with_verdicts = [name for name, p in PAPERS.items() if not p.no_verdicts]
        raise ParameterError(
            f"--strict: expected a paper with pass/fail claims ({', '.join(with_verdicts)}), got "
            f"{args.paper}: {paper.no_verdicts}"
        )
    if args.table is not None and args.table not in paper.tables:
        with_tables = {name: p.tables for name, p in PAPERS.items() if p.tables}
        raise ParameterError(
            f"--table {args.table}: expected one of the tables {with_tables} of those papers; "
            f"got it with {args.paper}"
        )
    if args.figure and not paper.figures:
        with_figures = {name: p.figures for name, p in PAPERS.items() if p.figures}
        raise ParameterError(
            f"--figure: selects figures of {', '.join(with_figures)} only; got it with {args.paper}"
        )
    if args.figure and args.paper != "zhang2024" and set(args.figure) - set(paper.figures):
        raise ParameterError(
            f"--figure {args.figure}: {args.paper} has the figures {list(paper.figures)}"
        )
    if args.cifar_standin and args.paper != "floral":
        raise ParameterError(f"--cifar-standin: a setting of floral's Table 1; got {args.paper}")
    if args.figure and args.table is not None:
        raise ParameterError("--figure and --table select one run each; give one of them")
    from ..extras import require_extras

    require_extras(paper.extras, f"riemfl reproduce {args.paper}")
    out = args.out or f"results/{args.paper}" + ("-quick" if args.quick else "")
    failed = paper.run(args, out)
    if args.figure and args.paper != "zhang2024":
        report = f"fig{args.figure[0]}.png"
    elif args.table not in (None, 1):
        report = f"table{args.table}.md"
    else:
        report = paper.report
    print(f"report: {out}/{report}")
    if args.strict and failed:
        print(
            f"riemfl: error: --strict: claims {', '.join(map(str, failed))} FAIL",
            file=sys.stderr,
        )
        return 1
    return 0

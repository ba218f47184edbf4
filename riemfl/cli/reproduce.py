"""``riemfl reproduce PAPER``: a paper's experiments, its report and plots.

:data:`PAPERS` is the one table of the reproducible papers: the parser's choices, the dispatch,
the ``--strict`` check and the check of the optional dependencies (``Paper.extras``, before
anything runs) all read it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

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
    """

    run: Callable[[argparse.Namespace, str], list[str]]
    no_verdicts: str = ""
    extras: tuple[str, ...] = ("data",)
    tables: tuple[int, ...] = ()


def _communication(args: argparse.Namespace, out: str) -> list[str]:
    from ..experiments import communication

    verdicts = communication.reproduce(out, quick=args.quick, progress=not args.no_progress)
    for v in verdicts:
        print(v.line())
    print(f"{sum(v.passed for v in verdicts)}/{len(verdicts)} (problem, rule) pairs pass")
    return [v.label for v in verdicts if not v.passed]


def _fedbuff_bound(args: argparse.Namespace, out: str) -> list[str]:
    from ..experiments import fedbuff_bound

    verdicts = fedbuff_bound.reproduce(out, quick=args.quick, progress=not args.no_progress)
    for v in verdicts:
        print(v.line())
    print(f"{sum(v.passed for v in verdicts)}/{len(verdicts)} checks of Theorem 1 pass")
    return [v.label for v in verdicts if not v.passed]


def _floral(args: argparse.Namespace, out: str) -> list[str]:
    from ..experiments import floral

    progress = not args.no_progress
    if args.table in (None, 1):
        print(floral.reproduce(out, quick=args.quick, data=args.data, progress=progress))
    else:
        report = floral.reproduce_table(
            args.table, out, quick=args.quick, data=args.data, progress=progress
        )
        print(report)
    return []


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


def _privacy(args: argparse.Namespace, out: str) -> list[str]:
    from ..experiments import privacy

    print(privacy.reproduce(out, quick=args.quick, progress=not args.no_progress))
    return []


def _robustness(args: argparse.Namespace, out: str) -> list[str]:
    from ..experiments import robustness

    verdicts = robustness.reproduce(out, quick=args.quick, progress=not args.no_progress)
    for v in verdicts:
        print(v.line())
    print(f"{sum(v.passed for v in verdicts)}/{len(verdicts)} (problem, attack) pairs pass")
    return [v.label for v in verdicts if not v.passed]


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
    "zhang2024": Paper(_zhang2024),
    "licudi2025": Paper(_licudi2025, _TABLES_ONLY, ("torch", "data"), tables=(1, 2)),
    "licudi2025-baselines": Paper(_licudi2025, _TABLES_ONLY, ("torch", "data")),
    "floral": Paper(
        _floral,
        "its report compares with the paper's numbers in prose, with no pass/fail claims",
        ("torch", "data"),
        tables=(1, 2, 4, 5),
    ),
    "privacy": Paper(
        _privacy,
        "it reports utility against epsilon, with no pass/fail claims",
        ("privacy", "data"),
    ),
    "robustness": Paper(_robustness),
    "communication": Paper(_communication),
    "fedbuff-bound": Paper(_fedbuff_bound),
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
    if args.figure and args.paper != "zhang2024":
        raise ParameterError(
            f"--figure: selects figures of zhang2024 only; got it with {args.paper}"
        )
    from ..extras import require_extras

    require_extras(paper.extras, f"riemfl reproduce {args.paper}")
    out = args.out or f"results/{args.paper}" + ("-quick" if args.quick else "")
    failed = paper.run(args, out)
    print(f"report: {out}/" + ("report.md" if args.table in (None, 1) else f"table{args.table}.md"))
    if args.strict and failed:
        print(
            f"riemfl: error: --strict: claims {', '.join(map(str, failed))} FAIL",
            file=sys.stderr,
        )
        return 1
    return 0

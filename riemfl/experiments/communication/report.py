"""The communication report's tables and text (``report.md``)."""

from __future__ import annotations

import math
from typing import Any

from ..spread import median_over
from .settings import REFERENCE, Settings
from .verdicts import Verdict, kilobytes

__all__ = ["table", "notes", "report"]


def _count(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:g}"


def _cell(spread: dict[str, float], show: Any, seeds: int) -> str:
    """The median, then ``[min, max]`` over more than one seed; "-" for a median not reached."""
    if not math.isfinite(spread["median"]):
        return "-"
    text = show(spread["median"])
    if seeds > 1:
        text += f" [{show(spread['min'])}, {show(spread['max'])}]"
    return text


def _times(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:.2f}x"


def table(rows: list[dict[str, Any]], problem: str, rule: str, s: Settings) -> list[str]:
    """Per compressor: error feedback, bytes per round, seeds that reached the tolerance, rounds
    and uplink bytes per client to it, how many times fewer bytes than float64 and how many
    times its rounds."""
    spread = " [min, max]" if len(s.seeds) > 1 else ""
    lines = [
        f"| compressor | EF | bytes/round | reached | rounds to tol.{spread} | "
        f"uplink to tol.{spread} | x fewer bytes | x rounds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by = {r["compressor"]: r for r in rows if (r["problem"], r["rule"]) == (problem, rule)}
    for compressor in s.compressors:
        if compressor not in by:
            continue
        r = by[compressor]
        name = "none (float64)" if compressor == REFERENCE else compressor
        per_round = "-" if not math.isfinite(r["bytes_per_round"]) else f"{r['bytes_per_round']:g}"
        lines.append(
            f"| {name} | {'on' if r['error_feedback'] else 'off'} | {per_round} | "
            f"{r['reached']}/{r['seeds']} | {_cell(r['rounds'], _count, r['seeds'])} | "
            f"{_cell(r['bytes'], kilobytes, r['seeds'])} | {_times(r['bytes_ratio'])} | "
            f"{_times(r['rounds_ratio'])} |"
        )
    return lines


def notes(rows: list[dict[str, Any]], problem: str, rule: str) -> list[str]:
    """What the table shows beside the numbers: PowerSGD ranks that send as much per round as
    float64, runs that failed, and QSGD's floor under RFedProj (:func:`_qsgd_floor`)."""
    mine = [r for r in rows if (r["problem"], r["rule"]) == (problem, rule)]
    ref = next(r for r in mine if r["compressor"] == REFERENCE)
    lines = []
    heavier = [
        r["compressor"]
        for r in mine
        if r["compressor"].startswith("rank:") and r["bytes_per_round"] >= ref["bytes_per_round"]
    ]
    if heavier:
        lines.append(
            f"{', '.join(heavier)} send{'s' if len(heavier) == 1 else ''} at least as many bytes "
            "per round as float64: PowerSGD's factors of a d x k update are (d + k) r numbers, "
            "more than dk when r = k."
        )
    failed = [r for r in mine if r["errors"]]
    if failed:
        lines.append(
            "Failed runs: "
            + "; ".join(f"{r['compressor']} ({', '.join(r['errors'])})" for r in failed)
            + "."
        )
    if rule == "RFedProj":
        lines += _qsgd_floor(rows, problem)
    return [text for line in lines for text in (line, "")]


def _qsgd_floor(rows: list[dict[str, Any]], problem: str) -> list[str]:
    """The QSGD compressors that RFedProj does not bring to the tolerance in every seed while
    RFedAvg (tangent) does, and a likely cause."""

    def reached(rule: str) -> dict[str, bool]:
        return {
            r["compressor"]: r["reached"] == r["seeds"]
            for r in rows
            if (r["problem"], r["rule"]) == (problem, rule) and r["compressor"].startswith("qsgd")
        }

    proj, avg = reached("RFedProj"), reached("RFedAvg (tangent)")
    stalled = [c for c, ok in proj.items() if not ok and avg.get(c)]
    if not stalled:
        return []
    return [
        f"{', '.join(stalled)} (unbiased, no error feedback) did not reach the tolerance in every "
        "seed, where RFedAvg (tangent) reaches it with the same compressor. A likely cause: "
        "RFedProj's clients rebuild their correction from the broadcast model (Zhang et al. "
        "2024, Alg. 1 line 17), so the quantisation noise in a round's mean enters every local "
        "step of the next round scaled by 1 / (eta_g eta tau), and the run settles at a floor "
        "that grows with QSGD's variance (fewer bits, a higher floor: the figure)."
    ]


def _setup(s: Settings, quick: bool, seconds: float, clients: dict[str, int]) -> list[str]:
    problems = ", ".join(
        f"{p} ({clients[p]} clients, {s.rounds[p]} rounds, tolerance {s.tolerance[p]:g})"
        for p in s.tolerance
    )
    return [
        f"Mode: {'--quick' if quick else 'full'}; wall time {seconds:.0f} s; {len(s.seeds)} "
        f"seed(s) {list(s.seeds)} (initial point and the compressors' random draws; the data "
        "of seed 0).",
        "",
        f"Problems: {problems}. Rules: {', '.join(s.rules)}, tau = {s.local_steps} local "
        "steps at each problem's default step size (`riemfl.experiments.registry`), every "
        "client in every round. Compressors (`riemfl.federated.compression`), each with its "
        "default error feedback (EF: on for the biased casts, top-k and PowerSGD, off for the "
        "unbiased QSGD): "
        f"{', '.join(s.compressors)}. QSGD: Alistarh et al. 2017; top-k: Stich, Cordonnier & "
        "Jaggi 2018; error feedback: Karimireddy et al. 2019; PowerSGD (rank:R): Vogels, "
        "Karimireddy & Jaggi 2019; RFedProj: Zhang et al. 2024.",
        "",
        "Measure: the first round whose relative optimality gap (f - f*) / (f(x0) - f*) is at "
        "most the problem's tolerance (fixed before the runs, at a level both uncompressed "
        "rules reach in the problem's rounds from every seed's initial point, above RFedAvg's "
        "floor: `riemfl.experiments.communication.settings`), and the uplink bytes one "
        "client has sent by then (`uplink_bytes`, the payloads as they travel: packed bits, "
        "indices, scales, factors). The float64 run of a rule and seed runs the problem's "
        f"rounds; each compressed run of the same rule and seed runs {s.multiple:g}x the "
        "rounds that float64 run needed (a run that needs more has not reached it). A median "
        "counts a seed that did not reach the tolerance as infinite ('-' when the median is "
        "not reached). x fewer bytes: float64's median bytes over the row's; x rounds: the "
        "row's median rounds over float64's.",
    ]


def _goal(s: Settings, verdicts: list[Verdict]) -> list[str]:
    passed = sum(v.passed for v in verdicts)
    return [
        f"Goal: per problem and rule, some compressor reaches the tolerance in every seed with "
        f"at least {s.factor:g}x fewer uplink bytes than float64 uploads "
        f"({median_over(len(s.seeds))}); the best is named with its cost in rounds.",
        "",
        *[f"- {v.line()}" for v in verdicts],
        "",
        f"{passed}/{len(verdicts)} (problem, rule) pairs pass.",
    ]


def report(
    rows: list[dict[str, Any]],
    verdicts: list[Verdict],
    s: Settings,
    quick: bool,
    seconds: float,
    clients: dict[str, int],
) -> str:
    """The markdown report (``clients``: problem name -> its number of clients)."""
    lines = [
        "# Uplink bytes to a tolerance under compressed uploads",
        "",
        *_setup(s, quick, seconds, clients),
        "",
        "## Verdicts",
        "",
        *_goal(s, verdicts),
        "",
        f"The figure: the relative gap against the uplink bytes per client of seed "
        f"{s.seeds[0]}'s runs (each seed's compressed runs stop at their own budget).",
        "",
        "![optimality gap against uplink bytes](communication.png)",
        "",
    ]
    for problem in s.tolerance:
        lines += [f"## {problem}", ""]
        for rule in s.rules:
            lines += [f"### {rule}", "", *table(rows, problem, rule, s), ""]
            lines += notes(rows, problem, rule)
    return "\n".join(lines)

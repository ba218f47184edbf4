"""``report.md``: Theorem 1 and Table I of Toghani & Uribe 2022 beside the measurements."""

from __future__ import annotations

from collections.abc import Sequence

from ...theory import render_table
from .figures import FIGURE
from .problem import QuadraticProblem
from .settings import Settings
from .verdicts import Verdict

__all__ = ["report", "THEOREM", "EXPERIMENT", "MEASURED"]

#: Theorem 1 as the paper states it (plain text)
THEOREM = """\
Let Assumptions 1-4 hold, beta = 1/K and eta = 1/(Q sqrt(L T)). Then for every number of server
steps T >= 160 L (Q+7) (tau+1)^3:

    (1/T) sum_{t<T} E||grad f(w^t)||^2
        <= 8 sqrt(L) (f(w^0) - f*) / sqrt(T)
         + 16 sqrt(L) (sigma^2/b + gamma^2) / sqrt(T)
         + 320 L (Q+1) (tau^2+1) (sigma^2/b + n gamma^2) / T

(rate O(1/sqrt(T)) + O(tau^2/T); T counts server steps). Assumption 1: staleness at most tau,
arrivals uniform over the n clients (eq. (3)); 2: every f_i L-smooth, f bounded below (eqs.
(4)-(5)); 3: per-sample gradient variance at most sigma^2, batches of at least b samples (eqs.
(6)-(7)); 4: (1/n) sum_i ||grad f_i(w) - grad f(w)||^2 <= gamma^2 (eq. (8))."""


#: how the runs are made (the paper has no experiment)
EXPERIMENT = """\
The paper has no experiment; this one is riemfl's. FedBuff (a sum-only buffer of K updates,
beta = 1/K) runs in the simulator's theory mode: every arrival is a client drawn uniformly from
the n clients, its base model drawn uniformly among the last tau + 1 server versions
(Assumption 1). Each client runs Q steps of mini-batch SGD with eta = 1/(Q sqrt(L T)). The
problem is a heterogeneous stochastic quadratic on R^d with sample loss (1/2)(w - a)^T H (w - a),
H diagonal, whose constants are exact:"""

#: what is measured
MEASURED = """\
Each T is a multiple of the horizon 160 L (Q+7) (tau+1)^3 of its tau. The expectation
E||grad f(w^t)||^2 is the mean over the seeds of the exact squared gradient norm at server step
t; "measured" is its average over t = 0..T-1 (the theorem's left-hand side), "min_t" its
smallest value (at most the average)."""


def _g(value: float) -> str:
    return f"{value:.4g}"


def report(
    rows: Sequence[dict],
    found: Sequence[Verdict],
    s: Settings,
    problem: QuadraticProblem,
    gap: float,
    quick: bool,
    seconds: float,
) -> str:
    """The markdown report."""
    passed = sum(v.passed for v in found)
    form = "quick form" if quick else "full form"
    lines = [
        "# FedBuff: Theorem 1 of Toghani & Uribe 2022 against measurements",
        "",
        f"{form}; {s.runs()} runs in {seconds:.1f} s; {passed}/{len(found)} verdicts pass.",
        "",
        "## Theorem 1 (Toghani & Uribe 2022)",
        "",
        "```text",
        THEOREM,
        "```",
        "",
        "## Table I of the paper: rates of federated analyses (smooth, non-convex)",
        "",
        "tau is the maximum delay; T counts server updates. The property marks follow what the",
        'paper\'s text says of each analysis ("not stated" where it says nothing).',
        "",
        render_table(),
        "",
        "## The experiment",
        "",
        EXPERIMENT,
        "",
        "| constant | value |",
        "|---|---|",
        f"| n (clients), samples per client, d | {s.n_clients}, {s.samples}, {s.dim} |",
        f"| L (largest curvature), condition number | {_g(problem.smoothness)}, "
        f"{_g(s.condition)} |",
        f"| sigma^2 (eq. (6)) | {_g(problem.sigma2)} |",
        f"| gamma^2 (eq. (8)) | {_g(problem.gamma2)} |",
        f"| f(w^0) - f* | {_g(gap)} |",
        f"| Q, K, b | {s.local_steps}, {s.buffer_size}, {s.batch_size} |",
        f"| seeds per (tau, T) | {s.seeds} |",
        "",
        MEASURED,
        "",
        "## Measurements",
        "",
        "| tau | T | horizon | eta | largest staleness | measured | min_t | bound | "
        "opt. term | noise term | staleness term | measured/bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['tau']} | {r['T']} | {r['horizon']} | {_g(r['step_size'])} | "
            f"{r['max_staleness']} | {_g(r['average'])} | {_g(r['minimum'])} | "
            f"{_g(r['bound'])} | {_g(r['bound_optimisation'])} | {_g(r['bound_noise'])} | "
            f"{_g(r['bound_staleness'])} | {r['average'] / r['bound']:.3f} |"
        )
    lines += [
        "",
        "## Rate in T",
        "",
        "The least-squares slope of log(measured) against log(T) per tau, against the -1/2 of",
        f"the leading term O(1/sqrt(T)) (tolerance {s.rate_tolerance:g}).",
        "",
        "| tau | slope | verdict |",
        "|---|---|---|",
    ]
    for v in found:
        if v.claim == "rate":
            word = "PASS" if v.passed else "FAIL"
            lines.append(f"| {v.label.split('=')[1]} | {v.measured:.3f} | {word} |")
    lines += [
        "",
        "## Verdicts",
        "",
        *(f"- {v.line()}" for v in found),
        "",
        f"![measured against the bound]({FIGURE})",
        "",
    ]
    return "\n".join(lines)

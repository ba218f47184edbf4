r"""FedBuff's measured rate against Theorem 1 of Toghani & Uribe 2022.

FedBuff runs in the asynchronous simulator's theory mode (iid uniform arrivals, staleness at most
tau: the paper's Assumption 1) on a stochastic heterogeneous quadratic whose constants L,
:math:`\sigma^2`, :math:`\gamma^2` and :math:`f(w^0) - f^\star` are exact
(:mod:`.problem`), with the theorem's step sizes :math:`\eta = 1/(Q\sqrt{LT})` and
:math:`\beta = 1/K`, for several tau and, per tau, several T at and beyond the horizon
:math:`160L(Q+7)(\tau+1)^3` (:mod:`.settings`, :mod:`.run`). The report sets the measured
:math:`\frac1T\sum_{t<T}\mathbb E\|\nabla f(w^t)\|^2` (and its :math:`\min_t`) beside the bound
(:func:`riemfl.theory.fedbuff_bound`), with a verdict per (tau, T) (measured <= bound) and per
tau (slope -1/2 in T on log-log axes) (:mod:`.verdicts`), and Table I of the paper
(:data:`riemfl.theory.TABLE_I`).

Writes ``report.md``, ``results.json`` (settings, constants, rows without the curves, verdicts)
and ``fedbuff_bound.png``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from ...federated.serialise import json_ready
from ...progress import ProgressBar
from .._threads import one_blas_thread
from .figures import FIGURE, plot
from .problem import QuadraticProblem
from .report import report
from .run import measure, one_run, run_all
from .settings import Settings
from .verdicts import Verdict, bound_verdict, rate_verdict, slope, verdicts

__all__ = [
    "FIGURE",
    "QuadraticProblem",
    "Settings",
    "Verdict",
    "bound_verdict",
    "measure",
    "one_run",
    "rate_verdict",
    "reproduce",
    "slope",
    "verdicts",
]


def reproduce(
    out: str | Path = "results/fedbuff_bound",
    *,
    quick: bool = False,
    progress: bool = True,
    settings: Settings | None = None,
) -> list[Verdict]:
    """Run the grid; write ``report.md``, ``results.json`` and ``fedbuff_bound.png`` into
    ``out``; return the verdicts (one per (tau, T), then one per tau).

    Parameters
    ----------
    out : path
        The output folder (created).
    quick : bool
        The quick form (:meth:`Settings.quick`: under 30 s on one core) instead of the full one.
    progress : bool
        A progress bar on stderr.
    settings : Settings, optional
        Overrides ``quick``.
    """
    s = settings if settings is not None else (Settings.quick() if quick else Settings())
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with one_blas_thread(), ProgressBar(s.runs(), "fedbuff-bound", enabled=progress) as bar:
        problem, rows = run_all(s, bar)
    seconds = time.perf_counter() - t0
    found = verdicts(rows, s.rate_tolerance)
    plot(rows, out)
    gap = problem.loss(problem.start(s.start_offset)) - problem.optimum
    (out / "report.md").write_text(report(rows, found, s, problem, gap, quick, seconds))
    summary = {
        "settings": asdict(s),
        "quick": quick,
        "seconds": seconds,
        "constants": {
            "L": problem.smoothness,
            "sigma2": problem.sigma2,
            "gamma2": problem.gamma2,
            "gamma2_uniform": problem.gamma2_uniform,
            "gap": gap,
            "n": problem.n_clients,
        },
        "verdicts": [asdict(v) for v in found],
        "rows": [{k: v for k, v in r.items() if k != "curve"} for r in rows],
    }
    (out / "results.json").write_text(json.dumps(json_ready(summary), indent=1))
    return found

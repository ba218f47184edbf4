r"""``riemfl reproduce robustness``: robust aggregation under Byzantine attacks on manifolds, and a
comparison of server optimisers.

**Robustness.** A share of the clients (0, 10, 20, 30%) is Byzantine
(:class:`~riemfl.federated.attacks.Byzantine`): they send sign-flipped or scaled updates, random
points, "a little is enough" updates (ALIE, Baruch et al. 2019) or inner-product manipulation
(IPM, Xie et al. 2020) in place of their own. The server of RFedAvg with ``upload="tangent"``
reads only the aggregate of the tangent uploads at :math:`x^r`
(:mod:`riemfl.federated.aggregation`), so a robust aggregator (:mod:`riemfl.federated.robust`)
can take the place of the mean: the geometric median of the tangent uploads (Weiszfeld's
algorithm in :math:`T_{x^r}M`; Fletcher et al. 2009 define it on the manifold itself), the
trimmed mean, Krum and Multi-Krum (Blanchard et al. 2017) and centered clipping (Karimireddy, He
& Jaggi 2021). Every attack, share and aggregator runs on four problems: kPCA on Stiefel(64, 2)
(scikit-learn's digits, label-sorted clients), the Karcher mean on SPD(3), a hyperbolic
embedding of a tree on a product of Poincare balls and softmax regression on the digits
(Euclidean; also its accuracy), ten clients each. Measured: the final optimality gap, the
accuracy on the digits and the seconds per round of the aggregation, against the plain mean's.
The aggregators' parameters follow fixed rules (:mod:`.settings`), and the report checks the
goal "with 20% attackers the best robust aggregator ends within 2x the clean run's optimality
gap (within 3 accuracy points on the digits) under every attack, where the plain mean fails" per
problem and attack (:mod:`.verdicts`). Beside the aggregators, under attack, runs an oracle
(:mod:`.oracle`): the mean of the non-attackers' uploads, told who attacks. It is no defence and
not among the verdicts' robust aggregators; its value beside each verdict says whether the goal
is reachable at all by discarding the attackers, whose data are not in the honest clients'
objective.

**Server optimisers** (:mod:`.server_optimizer_comparison`): rounds to a tolerance of RFedAvg
with an SGD, momentum (FedAvgM) or Adam server (Reddi et al. 2021) on three problems, the best
of a fixed grid of server learning rates per optimiser.

Writes ``report.md``, ``results.json`` (every run's numbers), ``robustness-PROBLEM.png`` per
problem and ``server-optimizers.png``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from ...federated.serialise import json_ready
from ...progress import ProgressBar
from .._threads import one_blas_thread
from . import server_optimizer_comparison as comparison
from .figures import plot_problem
from .oracle import ORACLE, HonestMean
from .report import report
from .runs import robustness_runs, summarise
from .settings import CLEAN, Settings
from .verdicts import Verdict, verdict, verdicts

__all__ = [
    "CLEAN",
    "ORACLE",
    "HonestMean",
    "Settings",
    "Verdict",
    "reproduce",
    "verdict",
    "verdicts",
]


def reproduce(
    out: str | Path = "results/robustness",
    *,
    quick: bool = False,
    progress: bool = True,
    settings: Settings | None = None,
) -> list[Verdict]:
    """Run both studies; write ``report.md``, ``results.json`` and the figures; return the
    verdicts."""
    s = settings if settings is not None else (Settings.quick() if quick else Settings())
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    total = s.runs() + s.comparison.runs()
    t0 = time.perf_counter()
    with one_blas_thread(), ProgressBar(total, "robustness", enabled=progress) as bar:
        taus, runs = robustness_runs(s, bar)
        optimizer_rows = comparison.compare(s.comparison, bar)
    seconds = time.perf_counter() - t0
    rows = summarise(runs)
    found = verdicts(rows, s.verdict_fraction, factor=s.gap_factor, points=s.accuracy_points)
    for problem in s.rounds:
        plot_problem(rows, problem, s, out)
    comparison.plot(optimizer_rows, s.comparison, out / "server-optimizers.png")
    (out / "report.md").write_text(report(rows, taus, found, optimizer_rows, s, quick, seconds))
    summary = {
        "settings": asdict(s),
        "quick": quick,
        "seconds": seconds,
        "clipping_tau": taus,
        "verdicts": [asdict(v) | {"label": v.label} for v in found],
        "rows": rows,
        "runs": runs,
        "server_optimizers": optimizer_rows,
    }
    (out / "results.json").write_text(json.dumps(json_ready(summary), indent=1))
    return found

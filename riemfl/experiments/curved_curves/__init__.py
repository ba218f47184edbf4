r"""AsyncBezier on curved model spaces: kPCA on Stiefel and a hyperbolic tree embedding.

Licudi et al. 2025 state AsyncBezier for a learned manifold of models but run it on Euclidean
networks only. Here its clients learn geodesic Bezier curves on the problems' manifolds
(:class:`~riemfl.federated.curve_manifold_local.ManifoldBezierTrainer`), and the server rule
:func:`~riemfl.federated.async_manifold.AsyncBezier` runs on the same base; FedAsync and FedBuff
(and FedOrtho, FedAsync with AsyncBezier's drift correction) run on the same problems with the
same heterogeneous client clocks, the same local work per
update and the same seeds (:mod:`.settings`). Two problems (:mod:`.problems`): kPCA on St(d, k)
(Zhang et al. 2024's heterogeneous synthetic data; :math:`f^*` and the optimal subspace known)
and the Nickel-Kiela embedding of a tree in a product of Poincare balls (relations split by
subtree; a centralised run's loss as the reference). Every run (:mod:`.run`) is read on its
suboptimality; the claims (:mod:`.verdicts`) are those of the paper's Table 1 (final value,
:math:`T_e`) as rules fixed before the runs.

Writes ``report.md``, ``results.json`` (settings, rates, line search, per-run curves, summaries,
claims) and ``curved_curves.png``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from ...federated.serialise import json_ready
from ...progress import ProgressBar
from .._threads import single_torch_thread
from ..claims import Claim
from .figures import FIGURE, plot
from .problems import Case, CurveTrainer, PointTrainer, build_cases
from .report import report
from .run import line_search, one_run, run_all
from .settings import METHODS, PROBLEMS, Settings
from .verdicts import CLAIMS, claims, summarise, target

__all__ = [
    "CLAIMS",
    "FIGURE",
    "METHODS",
    "PROBLEMS",
    "Case",
    "CurveTrainer",
    "PointTrainer",
    "Settings",
    "build_cases",
    "claims",
    "line_search",
    "one_run",
    "reproduce",
    "run_all",
    "summarise",
]


def _case_json(case: Case) -> dict:
    return {
        "key": case.key,
        "title": case.title,
        "reference": case.reference,
        "exact": case.exact,
        "step_size": case.step_size,
        "problem": case.problem.describe(),
    }


def reproduce(
    out: str | Path = "results/curved_curves",
    *,
    quick: bool = False,
    progress: bool = True,
    settings: Settings | None = None,
) -> list[Claim]:
    """Run the experiment; write ``report.md``, ``results.json`` and ``curved_curves.png`` into
    ``out``; return the claims (six per problem).

    Parameters
    ----------
    out : path
        The output folder (created).
    quick : bool
        The quick form (:meth:`Settings.quick`: under a minute on one core) instead of the full
        one (about ten minutes).
    progress : bool
        A progress bar on stderr.
    settings : Settings, optional
        Overrides ``quick``.

    Raises
    ------
    MissingDependencyError
        Without torch (the curve clients' gradients) or matplotlib (the figure).
    """
    s = settings if settings is not None else (Settings.quick() if quick else Settings())
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    import scipy.linalg  # noqa: F401 - its BLAS must be loaded before the thread limit applies

    start = time.perf_counter()
    with single_torch_thread(), ProgressBar(s.runs(), "curved-curves", enabled=progress) as bar:
        results = run_all(s, bar)
        for r in results:
            r["target"] = target(r["case"], s)
            r["summary"] = {m: summarise(r["runs"][m], s, r["target"]) for m in METHODS}
    seconds = time.perf_counter() - start
    found = claims(results)
    plot(results, out)
    (out / "report.md").write_text(report(results, found, s, quick, seconds))
    summary = {
        "settings": asdict(s),
        "quick": quick,
        "seconds": seconds,
        "problems": [
            {
                "case": _case_json(r["case"]),
                "rates": r["rates"],
                "target": r["target"],
                "search": r["search"],
                "summary": r["summary"],
                "runs": r["runs"],
            }
            for r in results
        ],
        "claims": [asdict(c) for c in found],
    }
    (out / "results.json").write_text(json.dumps(json_ready(summary), indent=1))
    return found

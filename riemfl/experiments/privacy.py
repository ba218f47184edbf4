r"""``riemfl reproduce privacy``: utility against :math:`\varepsilon` of client-level DP.

Central client-level DP (DP-FedAvg, McMahan et al. 2018, Alg. 1, on riemfl's rules:
:mod:`riemfl.federated.privacy`) for RFedProj (Zhang et al. 2024, Alg. 1) and RFedAvg with
``upload="tangent"`` (Li & Ma 2022), on two problems:

* kPCA on the synthetic data of Zhang et al. 2024 (Stiefel(20, 5)): the optimality gap
  :math:`f(x) - f^*`;
* softmax regression on scikit-learn's digits (``logreg-digits``, Euclidean
  :math:`\mathbb R^{65\times 10}`): the optimality gap and the accuracy on all clients' rows.

Per problem and rule: the non-private run, the run with clipping only (:math:`\sigma = 0`,
:math:`\varepsilon = \infty`) and runs with noise multipliers :data:`Settings.noise`, every
run's :math:`\varepsilon` at :math:`\delta` from the accountant
(:mod:`riemfl.federated.privacy_accounting`: replace-one-client, m of n clients sampled without
replacement). The clipping norm C is fixed in :class:`Settings` from the median update norm of
a non-private pilot (1.2 to 2 on these problems); a deployment would have to choose C
without looking at the clients' data, or account for it (McMahan et al. 2018 tune their S the
same way). No claim of a paper is checked: the report shows the trade-off.

Writes ``report.md``, ``results.json`` and ``privacy.png`` (utility against :math:`\varepsilon`).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..federated import DPSettings, RFedAvg, RFedProj, RunOptions, run_sync
from ..federated.serialise import json_ready
from ..problems.base import Classifier
from ..progress import ProgressBar
from .registry import PROBLEMS, build_problem
from .spread import over_seeds
from .styles import TITLE_FONTSIZE, log_axis, pyplot, save, shared_legend

__all__ = ["Settings", "reproduce"]


@dataclass
class Settings:
    """The report's settings (``--quick``: :meth:`quick`)."""

    #: problem name -> rounds
    rounds: dict[str, int] = field(
        default_factory=lambda: {"kpca-synthetic": 100, "logreg-digits": 40}
    )
    n_clients: int = 50
    clients_per_round: int = 20
    local_steps: int = 5
    clip: float = 1.0
    noise: tuple[float, ...] = (1.0, 3.0, 10.0)
    delta: float = 1e-5
    seeds: tuple[int, ...] = (0, 1, 2)

    @classmethod
    def quick(cls) -> Settings:
        """A smoke-test run: few rounds, one seed, two noise levels."""
        return cls(
            rounds={"kpca-synthetic": 30, "logreg-digits": 10}, noise=(1.0, 10.0), seeds=(0,)
        )


#: the rules compared, by label
RULES = {
    "RFedProj": lambda step_size, tau: RFedProj(step_size, tau),
    "RFedAvg (tangent)": lambda step_size, tau: RFedAvg(step_size, tau, upload="tangent"),
}


def _levels(s: Settings) -> list[float | None]:
    """None: non-private; 0: clipping only; then the noise multipliers."""
    return [None, 0.0, *s.noise]


def _one(problem: Any, rule: str, sigma: float | None, seed: int, s: Settings, rounds: int):
    step_size = PROBLEMS[problem.name].default_step_size(problem)
    algorithm = RULES[rule](step_size, s.local_steps)
    privacy = None if sigma is None else DPSettings(s.clip, sigma, s.delta)
    h = run_sync(
        problem,
        algorithm,
        rounds,
        clients_per_round=s.clients_per_round,
        privacy=privacy,
        options=RunOptions(seed=seed),
    )
    out = {
        "gap": float(h.optimality_gap[-1]),
        "epsilon": float(h.epsilon[-1]) if privacy is not None else math.inf,
        "curve": [float(g) for g in h.optimality_gap],
    }
    if isinstance(problem, Classifier):
        out["accuracy"] = float(problem.accuracy(h.final_point))
    return out


def _runs(s: Settings, bar: ProgressBar) -> list[dict[str, Any]]:
    rows = []
    for name, rounds in s.rounds.items():
        problem = build_problem(name, clients=s.n_clients, seed=0)
        for rule in RULES:
            for sigma in _levels(s):
                per_seed = [_one(problem, rule, sigma, seed, s, rounds) for seed in s.seeds]
                bar.update(len(s.seeds))
                row = {
                    "problem": name,
                    "rule": rule,
                    "sigma": sigma,
                    "epsilon": per_seed[0]["epsilon"],  # the same for every seed
                    "gap": float(np.mean([r["gap"] for r in per_seed])),
                    "gap_std": float(np.std([r["gap"] for r in per_seed])),
                    "curve": np.mean([r["curve"] for r in per_seed], axis=0).tolist(),
                }
                if "accuracy" in per_seed[0]:
                    row["accuracy"] = float(np.mean([r["accuracy"] for r in per_seed]))
                rows.append(row)
    return rows


def _label(sigma: float | None) -> str:
    return "non-private" if sigma is None else ("clip only" if sigma == 0 else f"sigma={sigma:g}")


def _plot(rows: list[dict[str, Any]], s: Settings, out: Path) -> Any:
    """``privacy.png``: utility against epsilon per problem (log axes), one legend below the
    panels; returns the (closed) matplotlib figure."""
    plt = pyplot()
    panels = [(p, "gap") for p in s.rounds] + [("logreg-digits", "accuracy")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.3 * len(panels), 4.4), layout="constrained")
    for ax, (problem, key) in zip(axes, panels, strict=True):
        for i, rule in enumerate(RULES):
            mine = [r for r in rows if r["problem"] == problem and r["rule"] == rule]
            noisy = sorted((r for r in mine if r["sigma"]), key=lambda r: r["epsilon"])
            color = f"C{i}"
            ax.plot([r["epsilon"] for r in noisy], [r[key] for r in noisy], "o-", c=color,
                    label=f"{rule}, DP")  # fmt: skip
            for r in mine:
                if not r["sigma"]:
                    ls = "--" if r["sigma"] is None else ":"
                    ax.axhline(r[key], c=color, ls=ls, lw=1, label=f"{rule}, {_label(r['sigma'])}")
        log_axis(ax, "x")
        if key == "gap":
            log_axis(ax, "y")
        ax.set_xlabel(f"epsilon (delta = {s.delta:g})")
        ax.set_ylabel("f - f*" if key == "gap" else "accuracy (all clients' rows)")
        ax.set_title(problem, fontsize=TITLE_FONTSIZE)
        ax.grid(True, which="both", alpha=0.3)
    shared_legend(fig, list(axes), ncols=len(RULES))
    return save(fig, out / "privacy.png")


def _table(rows: list[dict[str, Any]], seeds: int) -> list[str]:
    """The markdown table; f - f* is the mean +/- std over ``seeds`` seeds (one seed: its value,
    with no spread)."""
    spread = " +/- std" if seeds > 1 else ""
    lines = [
        f"| problem | rule | noise | epsilon | f - f* ({over_seeds(seeds)}{spread}) | accuracy |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        acc = f"{r['accuracy']:.3f}" if "accuracy" in r else ""
        eps = "inf" if math.isinf(r["epsilon"]) else f"{r['epsilon']:.3g}"
        gap = f"{r['gap']:.3g}" + (f" +/- {r['gap_std']:.2g}" if seeds > 1 else "")
        lines.append(
            f"| {r['problem']} | {r['rule']} | {_label(r['sigma'])} | {eps} | {gap} | {acc} |"
        )
    return lines


def _report(rows: list[dict[str, Any]], s: Settings, quick: bool, seconds: float) -> str:
    rounds = ", ".join(f"{p}: {r}" for p, r in s.rounds.items())
    return "\n".join(
        [
            "# Client-level differential privacy: utility against epsilon",
            "",
            f"Mode: {'--quick' if quick else 'full'}; n = {s.n_clients} clients, m = "
            f"{s.clients_per_round} per round (uniform without replacement); rounds {rounds}; "
            f"tau = {s.local_steps} local steps at the problems' default step sizes; clip C = "
            f"{s.clip:g}; delta = {s.delta:g}; {len(s.seeds)} seed(s); wall time "
            f"{seconds:.0f} s.",
            "",
            "Central DP (McMahan et al. 2018): every client's update is clipped to norm C, the "
            "server (or aggregator) adds N(0, sigma^2 C^2) to the sum. epsilon is for the "
            "replace-one-client relation, from dp_accounting's RDP accountant (sampling without "
            "replacement); it depends only on sigma, the rounds, n, m and delta. The mechanism "
            "per rule and the argument for the projected noise: `docs/federated/privacy.md`.",
            "",
            *_table(rows, len(s.seeds)),
            "",
            "Dashed lines in `privacy.png`: the non-private run; dotted: clipping without noise. "
            "With n = 50 clients the noise on the mean update, sigma C / m per entry, is large "
            "beside the update itself: single-digit epsilon costs most of the progress, as "
            "client-level DP does with few clients (McMahan et al. 2018 use thousands per "
            "round).",
            "",
            "RFedProj loses more to the same noise than RFedAvg: its clients rebuild their "
            "correction from the broadcast model (Zhang et al. 2024, Alg. 1 line 17, c_i = "
            "(P_M(x^r) - x^{r+1}) / (eta_g eta tau) - mean of the round's gradients), so the "
            "noise in x^{r+1} enters every local step of the next round multiplied by "
            "1 / (eta_g eta tau); RFedAvg's clients restart from the noisy model without such a "
            "term.",
            "",
        ]
    )


def reproduce(
    out: str | Path = "results/privacy",
    *,
    quick: bool = False,
    progress: bool = True,
    settings: Settings | None = None,
) -> str:
    """Run the grid; write ``report.md``, ``results.json`` and ``privacy.png``; return the
    table (markdown)."""
    s = settings if settings is not None else (Settings.quick() if quick else Settings())
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    total = len(s.rounds) * len(RULES) * len(_levels(s)) * len(s.seeds)
    t0 = time.perf_counter()
    with ProgressBar(total, "privacy", enabled=progress) as bar:
        rows = _runs(s, bar)
    seconds = time.perf_counter() - t0
    _plot(rows, s, out)
    (out / "report.md").write_text(_report(rows, s, quick, seconds))
    summary = {"settings": asdict(s), "quick": quick, "seconds": seconds, "runs": rows}
    (out / "results.json").write_text(json.dumps(json_ready(summary), indent=1))
    return "\n".join(_table(rows, len(s.seeds)))

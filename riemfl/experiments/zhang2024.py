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
"""

from __future__ import annotations

import json
import math
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ParameterError
from ..federated import (
    ClientContext,
    History,
    RFedAvg,
    RFedProj,
    RFedProx,
    RFedSVRG,
    initial_point,
    run_sync,
)
from ..manifolds import Euclidean
from ..problems import FederatedProblem
from ..progress import ProgressBar
from .registry import build_algorithm, build_problem
from .step_sweep import best_step, is_stable, largest_stable_step, uploads_to_tolerance
from .styles import (
    TITLE_FONTSIZE,
    Styles,
    legend,
    legend_styles,
    log_axis,
    pyplot,
    save,
    shared_legend,
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
    "fewer_uploads_with_larger_tau",
]

ALGORITHMS = ("rfedproj", "rfedsvrg", "rfedavg", "rfedprox")
LABELS = {
    "rfedproj": "RFedProj (ours)",
    "rfedsvrg": "RFedSVRG",
    "rfedavg": "RFedAvg",
    "rfedprox": "RFedProx",
}


@dataclass(frozen=True)
class Run:
    """One run: problem, algorithm and settings (``step`` may be "1/beta" or "1/(20 beta)");
    ``seed`` seeds the problem's synthetic data and the initial point (0 in every figure)."""

    problem: str
    algorithm: str
    local_steps: int
    rounds: int
    step: float | str
    batch_size: int | None = None
    seed: int = 0

    @property
    def key(self) -> str:
        b = f"-b{self.batch_size}" if self.batch_size else ""
        b += f"-s{self.seed}" if self.seed else ""
        step = (
            str(self.step).replace("/", "over").replace(" ", "").replace("(", "").replace(")", "")
        )
        return f"{self.problem}-{self.algorithm}-tau{self.local_steps}-R{self.rounds}-{step}{b}"


@dataclass
class Figure:
    """A figure: panels of runs, the y metrics (rows) and x axes (columns per panel)."""

    number: int
    title: str
    panels: list[tuple[str, list[tuple[str, Run]]]]
    y: tuple[str, ...]
    x: tuple[str, ...]
    settings: str

    @property
    def runs(self) -> list[Run]:
        return [run for _, runs in self.panels for _, run in runs]


@dataclass
class Claim:
    """One checked claim about the paper's figures (module docstring) and its verdict (None: not
    checked)."""

    number: int
    text: str
    passed: bool | None
    detail: str
    figures: tuple[int, ...] = field(default_factory=tuple)
    #: "" for a claim checked under one reading; "a", "b", ... for the readings of a claim whose
    #: check depends on a setting the paper leaves open (claim 8: the LRMC step size)
    part: str = ""
    #: whether ``--strict`` counts this verdict (False: a reading reported beside the gated one)
    gated: bool = True
    #: for a FAIL: what would change the verdict
    would_change: str = ""

    @property
    def verdict(self) -> str:
        return {True: "PASS", False: "FAIL", None: "SKIP"}[self.passed]

    @property
    def label(self) -> str:
        """The claim's number and part, e.g. "8b"."""
        return f"{self.number}{self.part}"


# --------------------------------------------------------------------------------------- settings
def figures(quick: bool = False, mnist: bool = False) -> dict[int, Figure]:
    """The nine figures with the paper's settings (R and the open values: module docstring)."""
    kp = "kpca-mnist"
    rounds = {
        "kpca": 300 if quick else 1000,
        "tau": 200 if quick else 600,
        "sto": 300 if quick else 1000,
        "lrmc": 60 if quick else 150,
        "syn": 600 if quick else 2000,
        "syn7": 1000 if quick else 4000,
    }
    batches = (200, 500, 1000) if mnist else (10, 50, 150)
    # digits: the paper's 1/(20 beta) does not reach the noise floor in affordable rounds (the
    # digits problem has a small eigengap); 1/beta, as in trial runs on the digits, does
    sto_step = "1/(20 beta)" if mnist else "1/beta"

    def four(problem: str, tau: int, r: int, step: float | str) -> list[tuple[str, Run]]:
        return [(LABELS[a], Run(problem, a, tau, r, step)) for a in ALGORITHMS]

    fig1 = four(kp, 10, rounds["kpca"], "1/beta")
    lrmc = four("lrmc-synthetic", 5, rounds["lrmc"], 1e-4)
    algs7 = ALGORITHMS[:2] if quick else ALGORITHMS
    data = "MNIST" if mnist else "digits (MNIST stand-in)"
    return {
        1: Figure(
            1,
            f"kPCA, {data}: |grad f|",
            [("", fig1)],
            ("grad_norm",),
            ("round", "uplink_matrices", "cpu_time"),
            "n=10, k=2, tau=10, eta=1/beta",
        ),
        2: Figure(
            2,
            f"kPCA, {data}: tau in {{10, 15, 20}}",
            [(f"tau={t}", four(kp, t, rounds["tau"], "1/beta")) for t in (10, 15, 20)],
            ("grad_norm",),
            ("uplink_matrices",),
            "eta=1/beta",
        ),
        3: Figure(
            3,
            f"kPCA, {data}: stochastic gradients (RFedProj)",
            [
                (
                    "",
                    [
                        (f"b={b}", Run(kp, "rfedproj", 10, rounds["sto"], sto_step, b))
                        for b in batches
                    ],
                )
            ],
            ("grad_norm",),
            ("round",),
            f"eta={sto_step}, tau=10",
        ),
        4: Figure(
            4,
            "LRMC: |grad f|",
            [("", lrmc)],
            ("grad_norm",),
            ("round", "uplink_matrices", "cpu_time"),
            "d=100, T=1000, k=2, n=10, tau=5, eta=1e-4",
        ),
        5: Figure(
            5,
            f"kPCA, {data}: f - f*",
            [("", fig1)],
            ("optimality_gap",),
            ("round", "uplink_matrices", "cpu_time"),
            "as Fig. 1",
        ),
        6: Figure(
            6,
            "kPCA, synthetic",
            [("", four("kpca-synthetic", 5, rounds["syn"], 4e-3))],
            ("grad_norm", "optimality_gap"),
            ("round", "uplink_matrices", "cpu_time"),
            "n=30, (d,k)=(20,5), p=15, tau=5, eta=4e-3",
        ),
        7: Figure(
            7,
            "kPCA, synthetic: tau in {10, 15, 20}",
            [
                (
                    f"tau={t}",
                    [
                        (LABELS[a], Run("kpca-synthetic", a, t, rounds["syn7"], 0.7e-3))
                        for a in algs7
                    ],
                )
                for t in (10, 15, 20)
            ],
            ("grad_norm",),
            ("uplink_matrices",),
            "eta=0.7e-3",
        ),
        8: Figure(
            8,
            "LRMC: f",
            [("", lrmc)],
            ("loss",),
            ("round", "uplink_matrices", "cpu_time"),
            "as Fig. 4",
        ),
        9: Figure(
            9,
            "LRMC: tau (RFedProj)",
            [
                (
                    "",
                    [
                        (f"tau={t}", Run("lrmc-synthetic", "rfedproj", t, rounds["lrmc"], 1e-4))
                        for t in (2, 5, 10)
                    ],
                )
            ],
            ("grad_norm",),
            ("uplink_matrices",),
            "eta=1e-4",
        ),
    }


# --------------------------------------------------------------------------- claim 8: eta sweep
#: the step sizes of the claim-8 sweep: 10^(-5 + j/3) for j = 0, ..., 7 to three significant
#: digits (1e-5 to 2.15e-3; 1e-4 and 1e-3 among them)
SWEEP_STEPS = tuple(float(f"{10 ** (-5 + j / 3):.3g}") for j in range(8))

#: the rules of the sweep, by key: what each picks per tau
SWEEP_RULES = {
    "fixed": "one eta for all tau (1e-4, Fig. 9's)",
    "best": "rule (i): fewest uploads on the tuning seed",
    "stable": "rule (ii): largest stable eta on the tuning seed",
}


@dataclass(frozen=True)
class Sweep:
    """The step-size sweep of claim 8 on LRMC (RFedProj); its protocol was fixed before it ran.

    For every tau every step size of ``steps`` runs ``rounds`` rounds on the tuning seed; the
    rules of :mod:`riemfl.experiments.step_sweep` pick one step size per tau from those runs
    alone (rule (i) :func:`~riemfl.experiments.step_sweep.best_step`, rule (ii)
    :func:`~riemfl.experiments.step_sweep.largest_stable_step`, tolerance
    ``|grad f| <= rel_tol |grad f(x^0)|``), and each picked step size runs again on the held-out
    report seed, whose uploads to the tolerance are what claims 8b and 8c compare. The report
    seed is 0, the LRMC instance and initial point of Figs. 4, 8 and 9, so the Fig. 9 runs
    (eta = 1e-4) are its fixed-eta runs; the tuning seed draws another instance and initial
    point.
    """

    taus: tuple[int, ...]
    steps: tuple[float, ...]
    rounds: int
    tune_seed: int = 1
    report_seed: int = 0
    rel_tol: float = 1e-8
    fixed_step: float = 1e-4
    blocks: int = 10
    problem: str = "lrmc-synthetic"

    def run(self, tau: int, step: float, seed: int) -> Run:
        """The RFedProj run of the sweep with this tau, step size and seed."""
        return Run(self.problem, "rfedproj", tau, self.rounds, step, seed=seed)

    def tuning_runs(self) -> list[Run]:
        """Every (tau, step size) on the tuning seed."""
        return [self.run(t, s, self.tune_seed) for t in self.taus for s in self.steps]

    def tuning(self, results: dict[str, History], tau: int) -> dict[float, History]:
        """Step size -> tuning-seed history, for one tau."""
        return {s: results[self.run(tau, s, self.tune_seed).key] for s in self.steps}

    def choices(self, results: dict[str, History]) -> dict[str, dict[int, float | None]]:
        """Rule -> tau -> the step size it picks (None: none qualifies), from the tuning runs
        only."""
        picks: dict[str, dict[int, float | None]] = {rule: {} for rule in SWEEP_RULES}
        for t in self.taus:
            tuning = self.tuning(results, t)
            picks["fixed"][t] = self.fixed_step
            picks["best"][t] = best_step(tuning, self.rel_tol)
            picks["stable"][t] = largest_stable_step(tuning, self.rel_tol, self.blocks)
        return picks

    def report_runs(self, picks: dict[str, dict[int, float | None]]) -> list[Run]:
        """The held-out runs of the picked step sizes (each (tau, step size) once)."""
        runs = [
            self.run(t, s, self.report_seed)
            for by_tau in picks.values()
            for t, s in by_tau.items()
            if s is not None
        ]
        return list({r.key: r for r in runs}.values())

    def uploads(
        self, picks: dict[str, dict[int, float | None]], results: dict[str, History]
    ) -> dict[str, dict[int, float]]:
        """Rule -> tau -> uploads per client to the tolerance on the report seed (inf where the
        rule picked nothing or the run did not reach it)."""
        return {
            rule: {
                t: math.inf
                if s is None
                else uploads_to_tolerance(
                    results[self.run(t, s, self.report_seed).key], self.rel_tol
                )
                for t, s in by_tau.items()
            }
            for rule, by_tau in picks.items()
        }


def sweep(quick: bool = False) -> Sweep:
    """The claim-8 sweep: tau in {2, 5, 10} (Fig. 9) and {10, 15, 20} (the kPCA claim's, Fig. 7)
    over :data:`SWEEP_STEPS` for Fig. 9's R.

    ``quick``: tau in {2, 5, 10}, the four step sizes of the grid around Fig. 9's 1e-4 (2.15e-5
    to 2.15e-4; the larger ones do not converge in 60 rounds on the tuning seed), the quick
    R = 60 and the tolerance 1e-6: in 60 rounds almost no run reaches the full 1e-8 (1 of 6
    with eta in {1e-4, 1e-3}: the figure was one point per panel), at 1e-6 8 of these 12 do,
    so the quick figure shows uploads against eta per tau. Its verdicts exercise the code path
    only."""
    rounds = figures(quick)[9].runs[0].rounds
    if quick:
        return Sweep((2, 5, 10), SWEEP_STEPS[1:5], rounds, rel_tol=1e-6)
    return Sweep((2, 5, 10, 15, 20), SWEEP_STEPS, rounds)


def fewer_uploads_with_larger_tau(uploads: dict[int, float]) -> bool:
    """The claim-8 criterion on uploads to the tolerance by tau: every one finite, none larger
    than the previous (smaller) tau's, and the largest tau's fewer than the smallest's."""
    u = [uploads[t] for t in sorted(uploads)]
    return (
        all(math.isfinite(v) for v in u)
        and all(b <= a for a, b in zip(u, u[1:], strict=False))
        and u[-1] < u[0]
    )


# --------------------------------------------------------------------------------------- running
class _Problems:
    """Builds each named problem once."""

    def __init__(self, data: str | None) -> None:
        self.data = data
        self._cache: dict[tuple[str, int], FederatedProblem] = {}

    def __call__(self, name: str, seed: int = 0) -> FederatedProblem:
        if (name, seed) not in self._cache:
            if name == "kpca-mnist" and not self.data:
                problem = build_problem("kpca-digits", seed=seed)  # the offline stand-in
            else:
                problem = build_problem(name, data=self.data, seed=seed)
            self._cache[name, seed] = problem
        return self._cache[name, seed]


def _step(run: Run, problem: FederatedProblem) -> float:
    if run.step == "1/beta":
        return 1.0 / float(problem.smoothness)
    if run.step == "1/(20 beta)":
        return 1.0 / (20.0 * float(problem.smoothness))
    return float(run.step)


def _warm_up(runs: Sequence[Run], problems: _Problems, rounds: int = 2) -> list[tuple]:
    """Run every distinct (problem, algorithm, tau, batch size) of ``runs`` for ``rounds``
    rounds, untimed and unrecorded, before the timed runs.

    The claims compare CPU seconds (claims 7 and 10), and the first run of each kind in a
    process pays one-time costs its later peers do not (first calls into BLAS and numpy's
    kernels, caches of the problem and the algorithm): in the quick reproduction that made
    RFedProj, which runs first, look 1.5x slower per round than RFedSVRG on the Fig. 1 problem,
    although it does half the work. Returns the warmed kinds.
    """
    kinds = list(
        dict.fromkeys((r.problem, r.algorithm, r.local_steps, r.batch_size, r.step) for r in runs)
    )
    for problem_name, algorithm_name, local_steps, batch_size, step in kinds:
        run = Run(problem_name, algorithm_name, local_steps, rounds, step, batch_size)
        problem = problems(problem_name)
        algorithm = build_algorithm(
            algorithm_name, step_size=_step(run, problem), local_steps=local_steps
        )
        run_sync(problem, algorithm, rounds, seed=0, batch_size=batch_size)
    return kinds


def _execute(
    run: Run, problems: _Problems, out: Path, on_round: Callable[[int, History], None]
) -> History:
    problem = problems(run.problem, run.seed)
    algorithm = build_algorithm(
        run.algorithm, step_size=_step(run, problem), local_steps=run.local_steps
    )
    return run_sync(
        problem,
        algorithm,
        run.rounds,
        seed=run.seed,
        batch_size=run.batch_size,
        checkpoint=out / "checkpoints" / f"{run.key}.ckpt",
        checkpoint_every=max(run.rounds // 10, 1),
        on_round=on_round,
    )


# --------------------------------------------------------------------------------------- claims
def _reach(h: History, tol: float) -> tuple[int, float, float] | None:
    """(round, uplink per client, CPU seconds) of the first round with |grad f| <= tol."""
    for i, g in enumerate(h.grad_norm):
        if g <= tol:
            return h.round[i], h.uplink_matrices[i], h.cpu_time[i]
    return None


def _fmt_reach(name: str, r: tuple[int, float, float] | None) -> str:
    if r is None:
        return f"{name}: not reached"
    return f"{name}: round {r[0]}, {r[1]:.0f} uploads, {r[2]:.2f} s CPU"


def _by_algorithm(fig: Figure, panel: int, results: dict[str, History]) -> dict[str, History]:
    return {run.algorithm: results[run.key] for _, run in fig.panels[panel][1]}


def _structural_claims(problems: _Problems) -> list[Claim]:
    """Claims 2, 3 and 5: exact identities, checked on the Fig. 1 problem and on R^{d x k}."""
    P = problems("kpca-mnist")
    M = P.manifold
    eta, tau = 1.0 / float(P.smoothness), 10
    # claim 2: compact form (5) and sum_i c_i = 0
    alg = RFedProj(eta, tau)
    server, clients = alg.init(P, initial_point(P, 0))
    ctx = ClientContext(P, np.arange(P.n_clients))
    form_err = mean_c = 0.0
    for _ in range(3):
        message = alg.broadcast(server, 0)
        uploads, clients = alg.client_step(ctx, 0, message, clients)
        new = alg.server_step(M, server, 0, message, uploads)
        compact = server["px"] - eta * clients["grad_sum"].mean(0)
        form_err = max(form_err, float(np.max(np.abs(new["x"] - compact))))
        scale = float(np.max(np.abs(clients["grad_sum"]))) / tau
        clients = alg.client_finish(alg.broadcast(new, 0), clients)
        mean_c = max(mean_c, float(np.max(np.abs(clients["correction"].mean(0)))) / scale)
        server = new
    c2 = Claim(
        2,
        "Algorithm 1 equals its compact form (5); the corrections c_i average to 0",
        form_err <= 1e-12 and mean_c <= 1e-12,
        f"max |x^(r+1) - (P(x^r) - eta sum_t gbar_t)| = {form_err:.1e}, "
        f"max |mean_i c_i| / |g| = {mean_c:.1e} (3 rounds, Fig. 1 problem)",
    )
    # claim 3: tau = 1, full gradients == projected Riemannian gradient descent (7)
    x0 = initial_point(P, 0)
    h = run_sync(P, RFedProj(eta, 1), 20, x0=x0)
    x = M.project(x0)
    for _ in range(20):
        x = M.project(x - eta * P.rgrad(x))
    err3 = float(np.max(np.abs(h.final_point - x)))
    c3 = Claim(
        3,
        "tau = 1 with full gradients is projected Riemannian gradient descent (7)",
        err3 <= 1e-12,
        f"max |RFedProj - C-PRGD| after 20 rounds = {err3:.1e}",
    )
    # claim 5: on R^{d x k} the rules are FedAvg / FedProx / SCAFFOLD-like / SVRG
    err5 = _euclidean_reduction_error()
    c5 = Claim(
        5,
        "on Euclidean space the algorithms are FedAvg, FedProx, a SCAFFOLD-like method and SVRG",
        err5 <= 1e-12,
        f"max deviation from the Euclidean formulas over 4 algorithms = {err5:.1e}",
    )
    return [c2, c3, c5]


class _LeastSquares(FederatedProblem):
    """f_i(x) = 1/2 |A_i x - B_i|^2 on R^{d x k} (heterogeneous clients), for claim 5."""

    name = "least-squares"

    def __init__(self, n: int = 5, m: int = 12, d: int = 6, k: int = 2, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.manifold = Euclidean(d, k)
        self.n_clients = n
        self.A = rng.normal(size=(n, m, d)) * np.arange(1, n + 1)[:, None, None] / n
        self.B = rng.normal(size=(n, m, k))

    def client_egrads(self, clients, xs, batches=None):
        a = self.A[np.asarray(clients)]
        return a.transpose(0, 2, 1) @ (a @ xs - self.B[np.asarray(clients)])

    def client_losses(self, clients, xs):
        r = self.A[np.asarray(clients)] @ xs - self.B[np.asarray(clients)]
        return 0.5 * np.sum(r * r, axis=(1, 2))


def _euclidean_reduction_error(rounds: int = 4, eta: float = 0.05, tau: int = 3) -> float:
    P = _LeastSquares()
    ids = np.arange(P.n_clients)
    x0 = initial_point(P, 0)
    shape = (P.n_clients, *x0.shape)

    def local(x, direction):
        z = np.broadcast_to(x, shape).copy()
        for _ in range(tau):
            z = z - eta * direction(z)
        return z

    def grad(z):
        return P.client_egrads(ids, z)

    errors = []
    for mu, algorithm in ((0.0, RFedAvg(eta, tau)), (0.5, RFedProx(eta, tau, mu=0.5))):
        x = x0
        for _ in range(rounds):
            x = local(x, lambda z, x=x, mu=mu: grad(z) + mu * (z - x)).mean(0)
        errors.append(np.max(np.abs(run_sync(P, algorithm, rounds, x0=x0).final_point - x)))
    x = x0
    for _ in range(rounds):
        anchor = grad(np.broadcast_to(x, shape))
        x = local(x, lambda z, a=anchor: grad(z) - a + a.mean(0)).mean(0)
    errors.append(np.max(np.abs(run_sync(P, RFedSVRG(eta, tau), rounds, x0=x0).final_point - x)))
    x, c = x0, np.zeros(shape)
    for _ in range(rounds):
        z, gsum = np.broadcast_to(x, shape).copy(), np.zeros(shape)
        for _ in range(tau):
            g = grad(z)
            gsum += g
            z = z - eta * (g + c)
        x_new = z.mean(0)
        c = (x - x_new) / (eta * tau) - gsum / tau
        x = x_new
    errors.append(np.max(np.abs(run_sync(P, RFedProj(eta, tau), rounds, x0=x0).final_point - x)))
    return float(max(errors))


def check_claims(
    figs: dict[int, Figure],
    results: dict[str, History],
    problems: _Problems,
    setting: Sweep | None = None,
) -> list[Claim]:
    """Every claim of the module docstring (claims whose figures did not run are skipped);
    ``setting``: the claim-8 sweep whose runs are in ``results`` (None: not run)."""
    ran = {n for n, f in figs.items() if all(r.key in results for r in f.runs)}
    claims: list[Claim] = []
    # 1: feasibility of every output
    worst = 0.0
    for key, h in results.items():
        M = problems(key.split("-rfed")[0]).manifold
        worst = max(worst, M.point_violation(h.final_point)[1])
    claims.append(
        Claim(
            1,
            "every global iterate P_M(x^r) is on the manifold",
            worst <= 1e-12,
            f"max |X^T X - I| over the final points of {len(results)} runs = {worst:.1e}",
        )
    )
    claims += _structural_claims(problems)
    # 4: uplink accounting
    if 1 in ran:
        per_round = {a: h.uplink_matrices[1] for a, h in _by_algorithm(figs[1], 0, results).items()}
        ok = per_round == {"rfedproj": 1.0, "rfedsvrg": 2.0, "rfedavg": 1.0, "rfedprox": 1.0}
        claims.append(
            Claim(
                4,
                "uplink per client per round: RFedProj 1, RFedAvg 1, RFedProx 1, "
                "RFedSVRG 2 d x k matrices",
                ok,
                f"measured {per_round}",
                (1,),
            )
        )
    else:
        claims.append(Claim(4, "uplink accounting", None, "Fig. 1 not run", (1,)))
    claims.append(_claim_plateau(figs, results, ran))
    claims.append(_claim_versus_svrg(7, figs, results, ran, (1, 6), "kPCA"))
    claims += _claim_tau(figs, results, ran, setting)
    claims.append(_claim_batch_floor(figs, results, ran))
    claims.append(_claim_versus_svrg(10, figs, results, ran, (4,), "LRMC"))
    return sorted(claims, key=lambda c: (c.number, c.part))


def _claim_plateau(figs: dict[int, Figure], results: dict[str, History], ran: set[int]) -> Claim:
    text = (
        "heterogeneous kPCA: RFedAvg and RFedProx plateau at a non-zero |grad f| while "
        "RFedProj and RFedSVRG keep decreasing"
    )
    used = tuple(n for n in (1, 6) if n in ran)
    if not used:
        return Claim(6, text, None, "Figs. 1 and 6 not run", (1, 6))
    ok, parts = True, []
    for n in used:
        h = _by_algorithm(figs[n], 0, results)
        good = max(h["rfedproj"].grad_norm[-1], h["rfedsvrg"].grad_norm[-1])
        for a in ("rfedavg", "rfedprox"):
            g = h[a].grad_norm
            late = g[(3 * len(g)) // 4]
            stalled = g[-1] >= 0.5 * late  # less than a halving over the last quarter
            ok &= stalled and g[-1] >= 10 * good
            parts.append(f"Fig. {n} {a}: {g[-1]:.2e} (last quarter x{g[-1] / late:.2f})")
        parts.append(f"Fig. {n} best of RFedProj/RFedSVRG: {good:.2e}")
    return Claim(
        6,
        text + " (final |grad f| of the plateaued >= 10x the others', and less "
        "than halved over the last quarter of the rounds)",
        ok,
        "; ".join(parts),
        used,
    )


def _claim_versus_svrg(
    number: int,
    figs: dict[int, Figure],
    results: dict[str, History],
    ran: set[int],
    used_figs: tuple[int, ...],
    what: str,
) -> Claim:
    text = (
        f"{what}: RFedProj is comparable to RFedSVRG per round (within 1.5x the rounds) and "
        "ahead in communication quantity and CPU time, to the same |grad f|"
    )
    used = tuple(n for n in used_figs if n in ran)
    if not used:
        return Claim(number, text, None, f"Fig(s). {used_figs} not run", used_figs)
    ok, parts = True, []
    for n in used:
        h = _by_algorithm(figs[n], 0, results)
        proj, svrg = h["rfedproj"], h["rfedsvrg"]
        tol = 2.0 * max(proj.grad_norm[-1], svrg.grad_norm[-1], 1e-300)
        tol = max(tol, 1e-10 * proj.grad_norm[0])  # below that both are at rounding level
        rp, rs = _reach(proj, tol), _reach(svrg, tol)
        if rp is None or rs is None:
            ok = False
        else:
            ok &= rp[0] <= 1.5 * rs[0] and rp[1] < rs[1] and rp[2] < rs[2]
        parts.append(
            f"Fig. {n}, |grad f| <= {tol:.1e}: {_fmt_reach('RFedProj', rp)}; "
            f"{_fmt_reach('RFedSVRG', rs)}"
        )
    return Claim(number, text, ok, "; ".join(parts), used)


def _tau_parts(
    figs: dict[int, Figure], results: dict[str, History], ran: set[int], which: tuple[int, ...]
) -> list[tuple[int, bool, str]]:
    """Claim 8 with one eta for all tau, per figure of ``which`` that ran: (figure, verdict,
    measured), uploads to twice the largest final |grad f| of the figure's RFedProj runs."""
    parts = []
    for n in (n for n in which if n in ran):
        fig = figs[n]
        runs = [run for _, rs in fig.panels for (_, run) in rs if run.algorithm == "rfedproj"]
        hs = [(run.local_steps, results[run.key]) for run in runs]
        tol = 2.0 * max(h.grad_norm[-1] for _, h in hs)
        reach = [(t, _reach(h, tol)) for t, h in hs]
        uplinks = [r[1] if r else math.inf for _, r in reach]
        ok = all(a >= b for a, b in zip(uplinks, uplinks[1:], strict=False)) and math.isfinite(
            uplinks[-1]
        )
        parts.append(
            (
                n,
                ok,
                f"Fig. {n}, uploads to |grad f| <= {tol:.1e}: "
                + ", ".join(f"tau={t}: {u:.0f}" for (t, _), u in zip(reach, uplinks, strict=True)),
            )
        )
    return parts


_TAU_TEXT = "larger tau reaches the same accuracy with less communication (RFedProj: "


def _claim_tau(
    figs: dict[int, Figure],
    results: dict[str, History],
    ran: set[int],
    setting: Sweep | None = None,
) -> list[Claim]:
    """Claim 8 under three readings of the LRMC step size (which the paper does not state):
    8a one eta for all tau (Figs. 7 and 9 as run); 8b, gated by ``--strict``, Fig. 7 (its
    stated eta) and LRMC with eta per tau by rule (i) on a held-out seed; 8c as 8b with rule
    (ii). The protocol of 8b and 8c is :class:`Sweep`'s."""
    fixed = _tau_parts(figs, results, ran, (7, 9))
    a_text = _TAU_TEXT + "synthetic kPCA, Fig. 7; LRMC, Fig. 9) -- one eta for all tau"
    if fixed:
        a = Claim(
            8,
            a_text,
            all(ok for _, ok, _ in fixed),
            "; ".join(d for _, _, d in fixed),
            tuple(n for n, _, _ in fixed),
            part="a",
            gated=False,
        )
    else:
        a = Claim(8, a_text, None, "Figs. 7 and 9 not run", (7, 9), part="a", gated=False)
    kpca = [p for p in fixed if p[0] == 7]
    picks = None
    if setting is not None and all(r.key in results for r in setting.tuning_runs()):
        picks = setting.choices(results)
        if not all(r.key in results for r in setting.report_runs(picks)):
            picks = None
    if a.passed is False and picks is not None:
        assert setting is not None
        fig9 = figs[9].runs if 9 in figs else []
        taus = sorted({run.local_steps for run in fig9}) or list(setting.taus)
        a.would_change = _one_eta_hint(setting, results, taus)
    out = [a]
    for part, rule in (("b", "best"), ("c", "stable")):
        text = (
            _TAU_TEXT
            + "synthetic kPCA, Fig. 7, at its stated eta; LRMC with eta per tau by "
            + SWEEP_RULES[rule]
            + ", uploads on a held-out seed)"
        )
        parts = [(ok, d) for _, ok, d in kpca]
        uploads: dict[int, float] = {}
        if picks is not None:
            assert setting is not None
            uploads = setting.uploads(picks, results)[rule]
            parts.append(
                (
                    fewer_uploads_with_larger_tau(uploads),
                    f"LRMC, uploads to |grad f| <= {setting.rel_tol:.0e} |grad f(x^0)| "
                    "(held-out seed): "
                    + ", ".join(
                        f"tau={t} (eta={_fmt_step(picks[rule][t])}): {_fmt_uploads(u)}"
                        for t, u in uploads.items()
                    ),
                )
            )
        if not parts:
            out.append(
                Claim(8, text, None, "Figs. 7 and 9 not run", (7, 9), part=part, gated=part == "b")
            )
            continue
        claim = Claim(
            8,
            text,
            all(ok for ok, _ in parts),
            "; ".join(d for _, d in parts),
            ((7,) if kpca else ()) + ((9,) if picks is not None else ()),
            part=part,
            gated=part == "b",
        )
        if claim.passed is False:
            claim.would_change = _tuned_hint(uploads, [ok for ok, _ in parts][: len(kpca)])
        out.append(claim)
    return out


def _one_eta_hint(setting: Sweep, results: dict[str, History], taus: list[int]) -> str:
    """For 8a: the grid's step sizes under which one eta for all of Fig. 9's ``taus`` would pass
    (uploads to the sweep's tolerance on the tuning seed)."""
    good = [
        s
        for s in setting.steps
        if fewer_uploads_with_larger_tau(
            {
                t: uploads_to_tolerance(
                    results[setting.run(t, s, setting.tune_seed).key], setting.rel_tol
                )
                for t in taus
            }
        )
    ]
    which = ", ".join(_fmt_step(s) for s in good) if good else "none of the grid's"
    return (
        f"another single eta: on the sweep's tuning seed, tau = {taus} need fewer uploads as "
        f"tau grows for eta = {which}; the paper's LRMC eta is not stated"
    )


def _tuned_hint(uploads: dict[int, float], kpca_ok: list[bool]) -> str:
    """For 8b / 8c: which comparisons broke the claim and what could move them."""
    if kpca_ok and not all(kpca_ok):
        return "Fig. 7 (its stated eta) fails too; see claim 8a"
    taus = sorted(uploads)
    broken = [
        f"tau={b} {_fmt_uploads(uploads[b])} vs tau={a} {_fmt_uploads(uploads[a])}"
        for a, b in zip(taus, taus[1:], strict=False)
        if not uploads[b] <= uploads[a]
    ]
    missing = [f"tau={t}" for t in taus if not math.isfinite(uploads[t])]
    what = "; ".join(
        x
        for x in (
            "more uploads at larger tau: " + ", ".join(broken) if broken else "",
            "not reached: " + ", ".join(missing) if missing else "",
        )
        if x
    )
    return (
        f"{what or 'no fewer uploads at the largest tau than at the smallest'}; a finer eta "
        "grid near the picks, more rounds, or another tolerance could move these numbers "
        "(each is one held-out run)"
    )


def _fmt_uploads(u: float) -> str:
    return f"{u:.0f}" if math.isfinite(u) else "not reached"


def _fmt_step(step: float | None) -> str:
    return "none" if step is None else f"{step:.3g}"


def _claim_batch_floor(
    figs: dict[int, Figure], results: dict[str, History], ran: set[int]
) -> Claim:
    text = (
        "stochastic gradients: |grad f| plateaus at a floor that shrinks as the batch grows "
        "(each floor at most 0.8x the previous)"
    )
    if 3 not in ran:
        return Claim(9, text, None, "Fig. 3 not run", (3,))
    floors = []
    for _, run in figs[3].panels[0][1]:
        g = results[run.key].grad_norm
        floors.append((run.batch_size, float(np.median(g[(3 * len(g)) // 4 :]))))
    values = [f for _, f in floors]
    ok = all(b <= 0.8 * a for a, b in zip(values, values[1:], strict=False))
    detail = "median |grad f| over the last quarter: " + ", ".join(
        f"b={b}: {f:.3g}" for b, f in floors
    )
    return Claim(9, text, ok, detail, (3,))


# --------------------------------------------------------------------------------------- plots
_AXIS = {
    "round": "communication round",
    "uplink_matrices": "communication quantity (uploads)",
    "cpu_time": "CPU time (s)",
    "grad_norm": "|grad f(x)|",
    "optimality_gap": "f(x) - f*",
    "loss": "f(x)",
}


def _plot(fig: Figure, results: dict[str, History], path: Path, styles: Styles) -> Any:
    """One figure of the paper: a column per (panel, x axis), a row per y axis; returns the
    (closed) matplotlib figure.

    Both axes are logarithmic, the x axes from round 1 (uploads and CPU seconds from their first
    positive reading): |grad f| falls by orders of magnitude in the first rounds, which a linear
    axis squeezes against its left edge. The panels of a row share their y axis, so that
    heights compare across panels. Every label keeps its look across the report's figures
    (``styles``), and the legend says which curves lie on top of another (one legend below the
    panels when they all show the same entries)."""
    plt = pyplot()
    cols = [(title, runs, x) for title, runs in fig.panels for x in fig.x]
    width = 4.0 * len(cols)
    f, axes = plt.subplots(
        len(fig.y),
        len(cols),
        figsize=(width, 3.1 * len(fig.y) + 1.0),
        squeeze=False,
        sharey="row",
        layout="constrained",
    )
    for row, y in enumerate(fig.y):
        for col, (title, runs, x) in enumerate(cols):
            ax = axes[row][col]
            curves = {}
            for label, run in runs:
                h = results[run.key]
                pts = [
                    (a, b)
                    for a, b in zip(getattr(h, x), getattr(h, y), strict=True)
                    if a > 0 and b > 0
                ]
                if pts:
                    curves[label] = tuple(zip(*pts, strict=True))
            for label, style in legend_styles(styles, curves).items():
                ax.loglog(*curves[label], **style)
            log_axis(ax, "x")
            ax.set_xlabel(_AXIS[x] + " (log)")
            if col == 0:
                ax.set_ylabel(_AXIS[y])
            if title:
                ax.set_title(title, fontsize=TITLE_FONTSIZE)
            ax.grid(True, which="both", alpha=0.3)
    shared_legend(f, list(axes.flat))
    heading = f"Fig. {fig.number}: {fig.title}"
    f.suptitle(textwrap.fill(heading, width=max(30, int(11 * width))), fontsize=TITLE_FONTSIZE)
    return save(f, path)


_SHORT = {
    "fixed": "one eta (1e-4)",
    "best": "rule (i): best eta, held-out seed",
    "stable": "rule (ii): largest stable eta, held-out seed",
}


def _plot_sweep(
    setting: Sweep,
    picks: dict[str, dict[int, float | None]],
    results: dict[str, History],
    path: Path,
    styles: Styles,
) -> Any:
    """The claim-8 sweep: uploads to the tolerance against tau per rule (held-out seed), and
    the tuning grid (uploads against eta per tau, tuning seed); unreached points are left out.
    Returns the (closed) matplotlib figure."""
    plt = pyplot()
    f, (left, right, drift) = plt.subplots(1, 3, figsize=(14.0, 4.6), layout="constrained")
    uploads = setting.uploads(picks, results)
    curves = {}
    for rule, by_tau in uploads.items():
        pts = [(t, u) for t, u in by_tau.items() if math.isfinite(u)]
        if pts:
            curves[_SHORT[rule]] = tuple(zip(*pts, strict=True))
    for label, style in legend_styles(styles, curves).items():
        left.plot(*curves[label], **(style | {"markevery": 1}))
    left.set_xlabel("local steps tau")
    left.set_ylabel("uploads to tolerance")
    left.set_xticks(list(setting.taus))
    left.set_title(f"held-out seed {setting.report_seed}", fontsize=TITLE_FONTSIZE)
    for t in setting.taus:
        tuning = setting.tuning(results, t)
        pts = [(s, uploads_to_tolerance(h, setting.rel_tol)) for s, h in tuning.items()]
        pts = [(s, u) for s, u in pts if math.isfinite(u)]
        if pts:
            style = styles.of(f"tau={t}") | {"markevery": 1}
            right.plot(*zip(*pts, strict=True), **style)
            drift.plot([s * t for s, _ in pts], [u for _, u in pts], **style)
    for ax, x in ((right, "step size eta"), (drift, "eta * tau")):
        log_axis(ax, "x")
        ax.set_xlabel(x)
        ax.set_ylabel("uploads to tolerance")
        ax.set_title(
            f"tuning seed {setting.tune_seed} (gaps: not reached in R rounds)",
            fontsize=TITLE_FONTSIZE,
        )
    for ax in (left, right, drift):
        ax.grid(True, which="both", alpha=0.3)
    legend(left, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    shared_legend(f, [right, drift])
    f.suptitle(
        f"Fig. 9 sweep: LRMC, RFedProj, |grad f| <= {setting.rel_tol:.0e} |grad f(x^0)|, "
        f"R = {setting.rounds}",
        fontsize=TITLE_FONTSIZE,
    )
    return save(f, path)


# --------------------------------------------------------------------------------------- report
def _sweep_section(
    setting: Sweep,
    picks: dict[str, dict[int, float | None]],
    results: dict[str, History],
    claims: list[Claim],
) -> list[str]:
    """The report's claim-8 section: the protocol, the picks, uploads by tau per rule, the grid."""
    uploads = setting.uploads(picks, results)
    verdicts = {c.part: c for c in claims if c.number == 8}
    steps = ", ".join(_fmt_step(s) for s in setting.steps)
    both = {2, 5, 10, 15, 20} <= set(setting.taus)
    which = " (Fig. 9's {2, 5, 10} and the kPCA claim's {10, 15, 20})" if both else " (reduced)"
    lines = [
        "## Claim 8 on LRMC: the step size per tau (Fig. 9 sweep)",
        "",
        "The paper states neither eta nor the tau values for LRMC; the fixed eta = 1e-4 of "
        "Figs. 4, 8, 9 was chosen in trial runs at tau = 5 only. The protocol below was fixed in "
        "code (`Sweep` in `riemfl/experiments/zhang2024.py`, the rules in "
        "`riemfl/experiments/step_sweep.py`) before the sweep was run:",
        "",
        f"- RFedProj on LRMC (Fig. 9's problem: d=100, T=1000, k=2, n=10), tau in "
        f"{{{', '.join(map(str, setting.taus))}}}{which}, eta in {{{steps}}}, "
        f"R = {setting.rounds} rounds each.",
        f"- Tolerance: |grad f(x^r)| <= {setting.rel_tol:.0e} |grad f(x^0)|; the measure is the "
        'uploads per client to it ("not reached": not within R rounds).',
        f"- Tuning seed {setting.tune_seed} (another LRMC instance and initial point); every "
        f"rule reads only its runs. Report seed {setting.report_seed} (Fig. 9's instance and "
        "initial point), held out: each picked eta runs again there, and those uploads are "
        "what the verdicts compare.",
        "- Rule (i): per tau, the eta with the fewest uploads to the tolerance on the tuning "
        "seed (ties: the smaller eta).",
        f"- Rule (ii): per tau, the largest eta whose tuning run is stable: every f and "
        f"|grad f| finite, and f falls by at least 1% over every block of R/{setting.blocks} "
        "rounds until |grad f| reaches the tolerance.",
        "- Verdict per rule: PASS when the held-out uploads are finite at every tau, never "
        "larger than at the previous (smaller) tau, and fewer at the largest tau than at the "
        "smallest. Claim 8b (rule (i)) is the claim's gated verdict (`--strict`); 8a (one eta "
        "for all tau) and 8c (rule (ii)) are readings reported beside it.",
        "",
        "![Fig. 9 sweep](fig9_sweep.png)",
        "",
        "| tau | one eta (1e-4): uploads, held-out | rule (i): eta | uploads, tuning seed | "
        "uploads, held-out | rule (ii): eta | uploads, held-out |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in setting.taus:
        best = picks["best"][t]
        tuned = (
            "-"
            if best is None
            else _fmt_uploads(
                uploads_to_tolerance(
                    results[setting.run(t, best, setting.tune_seed).key], setting.rel_tol
                )
            )
        )
        lines.append(
            f"| {t} | {_fmt_uploads(uploads['fixed'][t])} | {_fmt_step(best)} | {tuned} | "
            f"{_fmt_uploads(uploads['best'][t])} | {_fmt_step(picks['stable'][t])} | "
            f"{_fmt_uploads(uploads['stable'][t])} |"
        )
    lines += [
        "",
        f"Tuning grid (seed {setting.tune_seed}): uploads to the tolerance; `*` marks a run "
        "that is not stable by rule (ii)'s definition.",
        "",
        "| eta | " + " | ".join(f"tau={t}" for t in setting.taus) + " |",
        "|---|" + "---|" * len(setting.taus),
    ]
    for s in setting.steps:
        cells = []
        for t in setting.taus:
            h = results[setting.run(t, s, setting.tune_seed).key]
            mark = "" if is_stable(h, setting.rel_tol, setting.blocks) else "*"
            cells.append(_fmt_uploads(uploads_to_tolerance(h, setting.rel_tol)) + mark)
        lines.append(f"| {_fmt_step(s)} | " + " | ".join(cells) + " |")
    lines += ["", "Verdicts:", ""]
    for part in ("a", "b", "c"):
        c = verdicts[part]
        lines.append(f"- Claim 8{part} ({'gated' if c.gated else 'reading'}): **{c.verdict}**.")
    holds = [f"8{p}" for p in ("a", "b", "c") if verdicts[p].passed]
    lines += [
        "",
        "Does claim 8 hold (Fig. 7, if it ran, and LRMC)? "
        + (
            f"Under {', '.join(holds)} of the readings stated in advance."
            if holds
            else "No: under none of the three readings stated in advance."
        ),
        "",
        _sweep_observations(setting, picks, results, uploads),
        "",
    ]
    return lines


def _sweep_observations(
    setting: Sweep,
    picks: dict[str, dict[int, float | None]],
    results: dict[str, History],
    uploads: dict[str, dict[int, float]],
) -> str:
    """What the numbers show beyond the verdicts: the spread of the tuned uploads, eta * tau at
    the picks, and (exploratory, chosen after the fact) the single step sizes of the grid under
    which the uploads fall with tau on the tuning seed."""
    tuned = [u for u in uploads["best"].values() if math.isfinite(u)]
    spread = f"{min(tuned):.0f}-{max(tuned):.0f}" if tuned else "none reached"
    drift = ", ".join(f"tau={t}: {s * t:.2g}" for t, s in picks["best"].items() if s is not None)
    reach = {
        (t, s): uploads_to_tolerance(
            results[setting.run(t, s, setting.tune_seed).key], setting.rel_tol
        )
        for t in setting.taus
        for s in setting.steps
    }
    # pairs of tuning runs with different tau and eta * tau within 10%: relative gap in uploads
    gaps = [
        abs(u - v) / min(u, v)
        for (t, s), u in reach.items()
        for (t2, s2), v in reach.items()
        if t < t2 and abs(s * t - s2 * t2) <= 0.1 * s * t and math.isfinite(u + v)
    ]
    collapse = ""
    if gaps:
        collapse = (
            f" Tuning runs of different tau with eta * tau within 10% of each other differ in "
            f"uploads by at most {100 * max(gaps):.0f}% ({len(gaps)} pairs; third panel of the "
            "figure)" + (": the uploads follow eta * tau, not tau." if max(gaps) <= 0.25 else ".")
        )
    single = []
    for s in setting.steps:
        u = {
            t: uploads_to_tolerance(
                results[setting.run(t, s, setting.tune_seed).key], setting.rel_tol
            )
            for t in setting.taus
        }
        kept = {t: v for t, v in u.items() if math.isfinite(v)}
        if len(kept) >= 2 and fewer_uploads_with_larger_tau(kept):
            single.append(f"eta={_fmt_step(s)} (tau in {sorted(kept)})")
    return (
        f"With eta picked per tau by rule (i), the held-out uploads span {spread} over tau; "
        f"eta * tau at those picks: {drift}.{collapse} Exploratory, not a verdict (chosen "
        "after the sweep ran): single step sizes of the grid under which the tuning-seed "
        "uploads fall with tau over the taus that reach the tolerance: "
        + ("; ".join(single) if single else "none")
        + "."
    )


def _report(
    figs: dict[int, Figure],
    results: dict[str, History],
    claims: list[Claim],
    *,
    quick: bool,
    data: str | None,
    seconds: float,
    sweep_lines: Sequence[str] = (),
    cached: str = "",
) -> str:
    """The markdown report; ``cached``: :meth:`_Reuse.sentence` (runs read back, not run)."""
    when = cached or f"wall time {seconds:.0f} s"
    lines = [
        "# Reproduction of Zhang, Hu, So & Johansson (NeurIPS 2024), Figures "
        + ", ".join(str(n) for n in figs),
        "",
        f"Mode: {'--quick (shortened runs)' if quick else 'full'}; MNIST data: "
        f"{data if data else 'scikit-learn digits (offline stand-in)'}; "
        f"{when}. Settings the paper leaves open are listed in "
        "`riemfl/experiments/zhang2024.py` (module docstring) and `docs/federated/`.",
        "",
        "## Claims (Zhang et al. 2024, Secs. 3 and 5, App. A.4)",
        "",
        "Claims 1-5 are exact properties of Algorithm 1 (Sec. 3) and of its communication "
        "accounting (Sec. 5); claims 6-10 restate what Sec. 5 and App. A.4 say about the "
        "figures (the paper states no numbers; the tolerances are riemfl's).",
        "",
        "Claim 8 is checked under three readings of the LRMC step size, which the paper does "
        'not state (section "Claim 8 on LRMC" below); 8b is the one `--strict` counts, 8a '
        "and 8c are readings reported beside it.",
        "",
        "| # | claim | verdict | measured |",
        "|---|---|---|---|",
    ]
    for c in claims:
        scope = "" if c.gated else " (reading)"
        lines.append(f"| {c.label} | {c.text}{scope} | **{c.verdict}** | {c.detail} |")
    changes = [c for c in claims if c.passed is False and c.would_change]
    if changes:
        lines += ["", "What would change the verdicts that FAIL:", ""]
        lines += [f"- Claim {c.label}: {c.would_change}." for c in changes]
    lines.append("")
    lines += sweep_lines
    lines += ["## Figures", ""]
    for n, fig in figs.items():
        lines += [
            f"### Fig. {n}: {fig.title}",
            "",
            f"Settings: {fig.settings}.",
            "",
            f"![Fig. {n}](fig{n}.png)",
            "",
            "| run | rounds | final |grad f| | final f - f* | uploads/client | CPU s |",
            "|---|---|---|---|---|---|---|",
        ]
        for title, runs in fig.panels:
            for label, run in runs:
                h = results[run.key]
                name = f"{title} {label}".strip()
                lines.append(
                    f"| {name} | {h.round[-1]} | {h.grad_norm[-1]:.3e} | "
                    f"{h.optimality_gap[-1]:.3e} | {h.uplink_matrices[-1]:.0f} | "
                    f"{h.cpu_time[-1]:.2f} |"
                )
        lines.append("")
    return "\n".join(lines)


@dataclass
class _Reuse:
    """What a reproduction read back from ``out/checkpoints`` instead of computing: finished
    runs (``reused``, and the wall time they took when they were computed) and interrupted ones
    it continued (``resumed``)."""

    runs: int = 0
    reused: int = 0
    resumed: int = 0
    seconds: float = 0.0

    def count(self, run: Run, h: History, computed: int) -> None:
        """Account for ``run`` (history ``h``), of whose rounds this invocation computed
        ``computed``."""
        self.runs += 1
        if computed == 0 and run.rounds > 0:
            self.reused += 1
            self.seconds += float(h.wall_time[-1])
        elif computed < run.rounds:
            self.resumed += 1

    def sentence(self, out: Path, seconds: float) -> str:
        """The report's and the terminal's words on it ("" when every run was computed)."""
        if not (self.reused or self.resumed):
            return ""
        parts = []
        if self.reused:
            parts.append(
                f"reused {self.reused} of {self.runs} runs cached by an earlier invocation "
                f"(their original compute: {self.seconds:.0f} s wall time)"
            )
        if self.resumed:
            parts.append(f"resumed {self.resumed} interrupted runs from their checkpoints")
        return (
            f"this invocation took {seconds:.0f} s and {' and '.join(parts)}; delete "
            f"{out / 'checkpoints'} to compute them again"
        )


def _run_all(
    runs: Sequence[Run],
    problems: _Problems,
    out: Path,
    bar: ProgressBar,
    results: dict[str, History],
    reuse: _Reuse,
) -> None:
    """Run (or resume) each run into ``results`` and ``out/runs/KEY.json``, advancing ``bar``
    (by :meth:`~riemfl.progress.ProgressBar.skip` for the rounds a checkpoint held) and
    counting in ``reuse`` the runs read back from their checkpoints."""
    for i, run in enumerate(runs):
        desc = f"{run.problem} {run.algorithm} tau={run.local_steps} ({i + 1}/{len(runs)})"
        bar.postfix = {"run": desc}

        def tick(r: int, h: History) -> None:
            bar.update(1, grad_norm=h.grad_norm[-1])

        before = bar.count
        h = _execute(run, problems, out, tick)
        computed = bar.count - before
        bar.skip(run.rounds - computed)  # the rounds its checkpoint held
        reuse.count(run, h, computed)
        results[run.key] = h
        (out / "runs").mkdir(exist_ok=True)
        h.to_json(out / "runs" / f"{run.key}.json")


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
    problems = _Problems(data)
    results: dict[str, History] = {}
    t0 = time.perf_counter()
    _warm_up(list(runs.values()), problems)  # the sweep compares uploads, not CPU time
    stage1 = list(runs.values()) + [r for r in tuning if r.key not in runs]
    # the sweep's held-out runs depend on the tuning runs: at most one per (rule, tau)
    later = len(SWEEP_RULES) * len(setting.taus) * setting.rounds if setting else 0
    total = sum(r.rounds for r in stage1) + later
    picks = None
    reuse = _Reuse()
    with ProgressBar(total, "zhang2024", enabled=progress) as bar:
        _run_all(stage1, problems, out, bar, results, reuse)
        if setting is not None:
            picks = setting.choices(results)
            held_out = [r for r in setting.report_runs(picks) if r.key not in results]
            bar.total = bar.count + sum(r.rounds for r in held_out)  # the estimate, made exact
            _run_all(held_out, problems, out, bar, results, reuse)
    claims = check_claims(figs, results, problems, setting)
    styles = Styles()  # one look per label across all the figures
    for n, fig in figs.items():
        _plot(fig, results, out / f"fig{n}.png", styles)
    sweep_lines: list[str] = []
    if setting is not None and picks is not None:
        _plot_sweep(setting, picks, results, out / "fig9_sweep.png", styles)
        sweep_lines = _sweep_section(setting, picks, results, claims)
    seconds = time.perf_counter() - t0
    cached = reuse.sentence(out, seconds)
    if cached:
        print(f"zhang2024: {cached}", file=sys.stderr)
    (out / "report.md").write_text(
        _report(
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


def claim_lines(claims: Sequence[Claim]) -> list[str]:
    """One ``PASS``/``FAIL``/``SKIP`` line per claim, for the terminal (readings that
    ``--strict`` does not count say so)."""
    return [
        f"{c.verdict} claim {c.label}{'' if c.gated else ' (reading, not --strict)'}: "
        f"{c.text} -- {c.detail}"
        for c in claims
    ]

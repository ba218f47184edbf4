r"""The runs: FedBuff in the theory mode, with Theorem 1's step sizes, per (tau, T, seed).

Every run records :math:`\|\nabla f(w^t)\|^2` at each server step t = 0..T-1 (the exact gradient
of the quadratic), and the largest staleness of its updates. :func:`measure` turns the seeds of
one (tau, T) into the measured quantities: the expectation :math:`\mathbb E\|\nabla
f(w^t)\|^2` is estimated by the mean over the seeds, and then

* ``average``: :math:`\frac1T\sum_{t<T}` of it, the left-hand side of Theorem 1;
* ``minimum``: :math:`\min_{t<T}` of it, at most the average.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...federated.async_engine import run_async
from ...federated.async_rules import FedBuff
from ...federated.local import ProblemTrainer
from ...federated.run_core import RunOptions
from ...theory import fedbuff_bound, fedbuff_server_step, fedbuff_step_size
from .problem import QuadraticProblem
from .settings import Settings

__all__ = ["GradientTrainer", "build_problem", "one_run", "measure", "run_all"]


class GradientTrainer(ProblemTrainer):
    """Local SGD on the quadratic; a global model's metric is its squared gradient norm."""

    problem: QuadraticProblem

    def evaluate(self, x: Any) -> dict[str, float]:
        g = self.problem.gradient(np.asarray(x))
        return {"grad_sq": float(g @ g)}


def build_problem(s: Settings) -> QuadraticProblem:
    """The experiment's quadratic."""
    return QuadraticProblem(
        s.n_clients, s.samples, s.dim, s.smoothness, s.condition, seed=s.data_seed
    )


def one_run(problem: QuadraticProblem, s: Settings, tau: int, T: int, seed: int) -> dict:
    """One run of T server steps: ``curve`` (the squared gradient norms at steps 0..T-1),
    ``max_staleness`` and ``updates`` (client updates)."""
    eta = fedbuff_step_size(s.local_steps, problem.smoothness, T)
    trainer = GradientTrainer(problem, eta, s.local_steps, s.batch_size)
    rule = FedBuff(s.buffer_size, server_lr=fedbuff_server_step(s.buffer_size))
    history = run_async(
        trainer,
        rule,
        T,
        options=RunOptions(seed=seed, record_every=1),
        mode="theory",
        max_staleness=tau,
        x0=problem.start(s.start_offset),
    )
    curve = np.asarray(history.metrics["grad_sq"][:T], dtype=float)
    return {
        "curve": curve,
        "max_staleness": int(max(history.log["staleness"])),
        "updates": len(history.log["staleness"]),
    }


def measure(problem: QuadraticProblem, s: Settings, tau: int, T: int, runs: list[dict]) -> dict:
    """The measured quantities of the runs of one (tau, T), beside Theorem 1's bound."""
    mean = np.mean([r["curve"] for r in runs], axis=0)
    bound = fedbuff_bound(
        T,
        L=problem.smoothness,
        Q=s.local_steps,
        tau=tau,
        sigma2=problem.sigma2,
        b=s.batch_size,
        gamma2=problem.gamma2,
        n=problem.n_clients,
        gap=problem.loss(problem.start(s.start_offset)) - problem.optimum,
    )
    return {
        "tau": tau,
        "T": T,
        "horizon": bound.horizon,
        "step_size": bound.step_size,
        "seeds": len(runs),
        "average": float(mean.mean()),
        "minimum": float(mean.min()),
        "seed_averages": [float(r["curve"].mean()) for r in runs],
        "max_staleness": max(r["max_staleness"] for r in runs),
        "updates": runs[0]["updates"],
        "bound": bound.total,
        "bound_optimisation": bound.optimisation,
        "bound_noise": bound.noise,
        "bound_staleness": bound.staleness,
        "curve": mean,
    }


def run_all(s: Settings, bar: Any) -> tuple[QuadraticProblem, list[dict]]:
    """Every (tau, T) of the grid over the seeds; ``bar.update()`` after each run."""
    problem = build_problem(s)
    rows = []
    for tau, T in s.grid():
        runs = []
        for seed in range(s.seeds):
            runs.append(one_run(problem, s, tau, T, seed))
            bar.update()
        rows.append(measure(problem, s, tau, T, runs))
    return problem, rows

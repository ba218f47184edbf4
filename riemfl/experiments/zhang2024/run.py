"""Running the Zhang et al. 2024 reproduction: its problems, the warm-up, the runs, and what a
rerun reads back.

Each :class:`~riemfl.experiments.zhang2024.settings.Run` goes through
:func:`~riemfl.federated.run_sync` with a checkpoint under ``out/checkpoints`` and writes its
history to ``out/runs/KEY.json`` (:func:`run_all`); an interrupted run resumes from its checkpoint
and a finished one is read back, which :class:`Reuse` counts for the report. :func:`warm_up` runs
every kind of run for two untimed rounds first, so that no timed run pays the process's first-call
costs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...federated import History, run_sync
from ...federated.run_core import RunOptions
from ...problems import FederatedProblem
from ...progress import ProgressBar
from ..registry import build_algorithm, build_problem
from .settings import Run

__all__ = ["Problems", "warm_up", "Reuse", "run_all"]


class Problems:
    """Builds each named problem once per seed; ``kpca-mnist`` is scikit-learn's digits (the
    offline stand-in) unless ``data`` names an MNIST file."""

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


def _step_size(run: Run, problem: FederatedProblem) -> float:
    if run.step_size == "1/beta":
        return 1.0 / float(problem.smoothness)
    if run.step_size == "1/(20 beta)":
        return 1.0 / (20.0 * float(problem.smoothness))
    return float(run.step_size)


def warm_up(runs: Sequence[Run], problems: Problems, rounds: int = 2) -> list[tuple]:
    """Run every distinct (problem, algorithm, tau, batch size) of ``runs`` for ``rounds``
    rounds, untimed and unrecorded, before the timed runs.

    The claims compare CPU seconds (claims 7 and 10), and the first run of each kind in a
    process pays one-time costs its later peers do not (first calls into BLAS and numpy's
    kernels, caches of the problem and the algorithm): in the quick reproduction that made
    RFedProj, which runs first, look 1.5x slower per round than RFedSVRG on the Fig. 1 problem,
    although it does half the work. Returns the warmed kinds.
    """
    kinds = list(
        dict.fromkeys(
            (r.problem, r.algorithm, r.local_steps, r.batch_size, r.step_size) for r in runs
        )
    )
    for problem_name, algorithm_name, local_steps, batch_size, step_size in kinds:
        run = Run(problem_name, algorithm_name, local_steps, rounds, step_size, batch_size)
        problem = problems(problem_name)
        algorithm = build_algorithm(
            algorithm_name, step_size=_step_size(run, problem), local_steps=local_steps
        )
        run_sync(problem, algorithm, rounds, batch_size=batch_size, options=RunOptions(seed=0))
    return kinds


def _execute(
    run: Run, problems: Problems, out: Path, on_round: Callable[[int, History], None]
) -> History:
    problem = problems(run.problem, run.seed)
    algorithm = build_algorithm(
        run.algorithm, step_size=_step_size(run, problem), local_steps=run.local_steps
    )
    return run_sync(
        problem,
        algorithm,
        run.rounds,
        batch_size=run.batch_size,
        options=RunOptions(
            seed=run.seed,
            checkpoint=out / "checkpoints" / f"{run.key}.ckpt",
            checkpoint_every=max(run.rounds // 10, 1),
            on_step=on_round,
        ),
    )


@dataclass
class Reuse:
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


def run_all(
    runs: Sequence[Run],
    problems: Problems,
    out: Path,
    bar: ProgressBar,
    results: dict[str, History],
    reuse: Reuse,
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

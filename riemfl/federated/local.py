r"""Local training of one client, for the asynchronous simulator (the "trainer" protocol).

A trainer answers

* ``n_clients``; ``n_samples(i)`` (the client weight :math:`w_i = n_i/\sum_j n_j`);
* ``num_batches(i, epochs=None)``: batches of one local run (the compute-time models use it);
* ``train(i, start, rng, epochs=None)``: the local model after a run from ``start``,
  deterministic given ``rng``;
* ``evaluate(x)``: a dict of metrics of a global model (optional).

:class:`ProblemTrainer` trains on a :class:`~riemfl.problems.FederatedProblem` by Riemannian
SGD, :math:`x_{q+1} = R_{x_q}(-\eta\,\operatorname{grad} f_i(x_q; \mathcal B_q))` for Q steps per
epoch (Toghani & Uribe 2022, Algorithm 1, whose Euclidean SGD step riemfl lifts to a manifold
with a retraction). Torch models use
``riemfl.nn.TorchClientTrainer``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ParameterError
from ..problems.base import FederatedProblem, sample_batches
from .algorithm import check_local_steps, check_step_size

__all__ = ["ProblemTrainer", "problem_metrics"]


class ProblemTrainer:
    """Riemannian SGD on client i's objective of a federated problem.

    Parameters
    ----------
    problem : FederatedProblem
    step_size : float
        :math:`\\eta`.
    local_steps : int
        Q, steps per epoch.
    batch_size : int, optional
        Mini-batch size (default: full local gradients).
    """

    def __init__(
        self,
        problem: FederatedProblem,
        step_size: float,
        local_steps: int = 5,
        batch_size: int | None = None,
    ) -> None:
        self.problem = problem
        self.manifold = problem.manifold
        self.step_size = check_step_size("step_size", step_size)
        self.local_steps = check_local_steps(local_steps)
        if batch_size is not None and problem.n_samples is None:
            raise ParameterError(f"{problem.name} has no samples, so batch_size must be None")
        self.batch_size = batch_size
        self.n_clients = problem.n_clients

    def n_samples(self, i: int) -> int:
        return 1 if self.problem.n_samples is None else int(self.problem.n_samples[i])

    def num_batches(self, i: int, epochs: int | None = None) -> int:
        return self.local_steps * (1 if epochs is None else int(epochs))

    def train(self, i: int, start: Any, rng: np.random.Generator, epochs: int | None = None) -> Any:
        M, problem = self.manifold, self.problem
        x = start[None]
        for _ in range(self.num_batches(i, epochs)):
            batch = None
            if self.batch_size is not None:
                batch = sample_batches(rng, problem.n_samples, [i], self.batch_size)
            g = M.egrad_to_rgrad(x, problem.client_egrads([i], x, batch))
            x = M.retract(x, -self.step_size * g)
        return x[0]

    def evaluate(self, x: Any) -> dict[str, float]:
        return problem_metrics(self.problem, x)


def problem_metrics(problem: FederatedProblem, x: Any) -> dict[str, float]:
    """``loss``, ``optimality_gap`` (NaN without a known optimum) and ``grad_norm`` at x."""
    loss = problem.loss(x)
    gap = loss - problem.optimum if problem.optimum is not None else float("nan")
    return {"loss": loss, "optimality_gap": gap, "grad_norm": problem.grad_norm(x)}

r"""The two curved problems, their reference values, starts and metrics, and the measured trainers.

* **kPCA on the Stiefel manifold** St(d, k) (Zhang et al. 2024, Sec. 5, their heterogeneous
  synthetic data: client i's rows from :math:`N(0, 2i/n)`): :math:`f^*` is known
  (:class:`~riemfl.problems.KPCAProblem`), and so is the optimal subspace, the span of the top-k
  eigenvectors of the mean covariance; the distance to it is the projection distance
  :math:`\|xx^\top - x^*x^{*\top}\|_F/\sqrt2` (the optimum is a subspace: any
  :math:`x^*Q`, :math:`Q \in O(k)`, is optimal). Start: a random point of St(d, k) per seed.
* **The hyperbolic tree embedding** on a product of Poincare balls
  (:class:`~riemfl.problems.HyperbolicEmbeddingProblem`, Nickel and Kiela's loss, relations split
  by subtree: each client sees one part of the tree). :math:`f^*` is unknown; the reference is
  the loss of the problem's centralised run (``reference_loss``), so a suboptimality may dip
  below 0, and no distance to an optimum is reported (the loss is invariant under the isometries
  of the ball: a distance to the reference point would measure the gauge). Start: Nickel and
  Kiela's, every coordinate uniform in [-1e-3, 1e-3], per seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...federated.curve_manifold_local import ManifoldBezierTrainer
from ...federated.local import ProblemTrainer
from ...problems import HyperbolicEmbeddingProblem, KPCAProblem
from ...problems.base import FederatedProblem
from .settings import Settings

__all__ = ["Case", "CurveTrainer", "PointTrainer", "build_cases"]


@dataclass
class Case:
    """One problem of the experiment.

    Attributes
    ----------
    key : str
        ``"kpca"`` or ``"tree"``.
    title : str
        The problem in words, for the report.
    problem : FederatedProblem
    reference : float
        :math:`f^*` (kPCA), or the centralised run's loss (the tree).
    exact : bool
        Whether ``reference`` is :math:`f^*`.
    step_size : float
        The local step size of every method.
    solution : numpy.ndarray or None
        A minimiser (kPCA), None where none is known.
    """

    key: str
    title: str
    problem: FederatedProblem
    reference: float
    exact: bool
    step_size: float
    solution: np.ndarray | None = None

    def start(self, seed: int) -> np.ndarray:
        """The initial model of seed ``seed`` (module docstring)."""
        rng = np.random.default_rng([seed, 7919])
        if self.key == "tree":
            return rng.uniform(-1e-3, 1e-3, size=self.problem.manifold.point_shape)
        return np.asarray(self.problem.manifold.random_point(rng=rng))

    def distance(self, x: Any) -> float:
        """The projection distance to the optimal subspace (kPCA); NaN without a known optimum."""
        if self.solution is None:
            return math.nan
        x = np.asarray(x)
        gap = x @ x.T - self.solution @ self.solution.T
        return float(np.linalg.norm(gap) / math.sqrt(2.0))

    def metrics(self, x: Any) -> dict[str, float]:
        """The rows' metrics: ``loss``, ``subopt`` (loss - reference), ``distance``."""
        loss = float(self.problem.loss(x))
        return {"loss": loss, "subopt": loss - self.reference, "distance": self.distance(x)}


class PointTrainer(ProblemTrainer):
    """Local Riemannian SGD of FedAsync and FedBuff; a global model's metrics are the case's."""

    def __init__(self, case: Case, local_steps: int) -> None:
        super().__init__(case.problem, case.step_size, local_steps)
        self.case = case

    def evaluate(self, x: Any) -> dict[str, float]:
        return self.case.metrics(x)


class CurveTrainer(ManifoldBezierTrainer):
    """AsyncBezier's curve-learning client; a global model's metrics are the case's."""

    def __init__(self, case: Case, warmup_steps: int, curve_steps: int) -> None:
        super().__init__(case.problem, case.step_size, warmup_steps, curve_steps)
        self.case = case

    def evaluate(self, x: Any) -> dict[str, float]:
        return self.case.metrics(x)


def _kpca(s: Settings) -> Case:
    problem = KPCAProblem.synthetic(
        n_clients=s.kpca_clients,
        d=s.kpca_dim,
        k=s.kpca_components,
        p=s.kpca_rows,
        seed=s.data_seed,
    )
    largest = float(np.linalg.eigvalsh(problem.covariances)[:, -1].max())
    title = (
        f"kPCA on St({s.kpca_dim}, {s.kpca_components}), {s.kpca_clients} clients of "
        f"{s.kpca_rows} rows from N(0, 2i/n)"
    )
    return Case(
        "kpca",
        title,
        problem,
        float(problem.optimum),
        True,
        s.kpca_step / largest,
        problem.solution(),
    )


def _tree(s: Settings) -> Case:
    problem = HyperbolicEmbeddingProblem.tree(
        n_clients=s.tree_clients,
        branching=s.tree_branching,
        depth=s.tree_depth,
        n_negatives=s.tree_negatives,
        seed=s.data_seed,
        split="subtree",
    )
    nodes = problem.n_nodes
    title = (
        f"hyperbolic embedding of a tree (branching {s.tree_branching}, depth {s.tree_depth}, "
        f"{nodes} nodes) in PoincareBall(2)^{nodes}, {s.tree_clients} clients split by subtree"
    )
    return Case("tree", title, problem, float(problem.reference_loss), False, s.tree_step)


def build_cases(s: Settings) -> list[Case]:
    """The kPCA and the tree, in :data:`~.settings.PROBLEMS` order."""
    return [_kpca(s), _tree(s)]

"""Federated objectives and their data: kPCA and LRMC on Stiefel, callables, loaders.

* :class:`FederatedProblem` (the interface the algorithms use) and :func:`sample_batches`;
* :class:`KPCAProblem`, :class:`LRMCProblem`: the problems of Zhang et al. (2024), vectorised
  across clients;
* :class:`SPDMeanProblem`: the Karcher mean of SPD matrices held by clients;
* :class:`HyperbolicEmbeddingProblem`: Nickel-Kiela embedding of a tree on the Poincare ball;
* :class:`RotationAveragingProblem`: chordal L2 rotation averaging on SO(n);
* :class:`SoftmaxRegressionProblem`: multinomial logistic regression, a Euclidean problem (the
  curve rules' clients need flat space);
* :class:`FunctionProblem`: any manifold with per-client callables (numpy, autograd or torch);
* :func:`label_sorted_split`, :func:`load_mnist`, :func:`load_digits`: data, offline only.
"""

from .base import FederatedProblem, sample_batches
from .data import NPZ_KEYS, label_sorted_indices, label_sorted_split, load_digits, load_mnist
from .functional import FunctionProblem
from .hyperbolic import HyperbolicEmbeddingProblem, balanced_tree
from .kpca import KPCAProblem
from .logreg import SoftmaxRegressionProblem
from .lrmc import LRMCProblem
from .rotation_averaging import RotationAveragingProblem
from .spd_mean import SPDMeanProblem

__all__ = [
    "FederatedProblem",
    "sample_batches",
    "KPCAProblem",
    "LRMCProblem",
    "RotationAveragingProblem",
    "HyperbolicEmbeddingProblem",
    "balanced_tree",
    "SPDMeanProblem",
    "SoftmaxRegressionProblem",
    "FunctionProblem",
    "label_sorted_indices",
    "label_sorted_split",
    "load_mnist",
    "load_digits",
    "NPZ_KEYS",
]

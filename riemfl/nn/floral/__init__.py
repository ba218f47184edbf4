r"""FLoRAL: federated mixtures of low-rank adaptors (Almansoori et al. 2024).

Almansoori, Horváth & Takáč, "Collaborative and Efficient Personalization with Mixtures of
Adaptors" (2024). A model parameterisation for the FML objective with weight sharing
(Sec. 3.1 and 5) :math:`\min E_k f^k(\sum_c \pi^k_c w_c)`, :math:`w_c = (u, a_c)`, with
low-rank adaptors :math:`a_c`; each client mixes the C adaptors' outputs with its own router
:math:`\pi^k = \mathrm{softmax}(\theta^k)`. One job per module:

* :mod:`~riemfl.nn.floral.budget`: rank from the budget, :math:`r = \max(1, \lfloor\rho mn/(m +
  n)\rfloor)`; parameter accounting (:math:`C\rho d` against :math:`(C-1)d`);
* :mod:`~riemfl.nn.floral.adaptor`, :mod:`~riemfl.nn.floral.linear`,
  :mod:`~riemfl.nn.floral.conv`: the adapted layers (LinearLoRA, ConvLoRA balanced 2-D / in /
  out layer, bias adaptors), ``merge``, ScaledGD preconditioning (App. D, eq. (36)); each layer
  merges all its clusters' adaptors into its weight in one batched product;
* :mod:`~riemfl.nn.floral.norm`: the normalisation adaptors (App. F.2: a scale and a bias
  adaptor per cluster on batch, instance, layer and group normalisations; Batch NorA and its
  reparameterisation, eq. (42)), and where the running statistics live;
* :mod:`~riemfl.nn.floral.merge`: the merge written as the plain formula, cluster by cluster
  (the reference the tests check the layers against);
* :mod:`~riemfl.nn.floral.router`: the personal router (learned, the oracle :math:`\pi^*`, or the
  exponential weights of eq. (5) set from the clusters' losses);
* :mod:`~riemfl.nn.floral.mfl`, :mod:`~riemfl.nn.floral.mfl_theory`: the algorithm the paper's
  theory analyses (MFL with the exponential-weights router, eqs. (4)-(5)) and the quantities of
  Theorems A.9 and A.10;
* :mod:`~riemfl.nn.floral.model`: :func:`floralize` (a plain model -> its FLoRAL version) and
  :class:`FloralModel` (``merge`` for inference);
* :mod:`~riemfl.nn.floral.ensemble`: the Ensemble baseline (C full models, output mixture);
* :mod:`~riemfl.nn.floral.layout`: what is federated (base, clusters), what stays (private,
  router), as flat vectors;
* :mod:`~riemfl.nn.floral.aggregation`: eq. (2) and the aggregation formulas (factor averages,
  manifold-aware product averages on ``FixedRank``, the centering of App. E);
  :mod:`~riemfl.nn.floral.server`: the
  aggregator and the server optimiser;
* :mod:`~riemfl.nn.floral.trainer`: client-side local training and personal evaluation;
  :mod:`~riemfl.nn.floral.loop`: synchronous rounds with checkpoints;
  :mod:`~riemfl.nn.floral.async_rule`: FedBuff + FLoRAL for the asynchronous simulator;
* :mod:`~riemfl.nn.floral.metrics`: cluster recovery and aggregation mismatch;
* :mod:`~riemfl.nn.floral.synthetic`, :mod:`~riemfl.nn.floral.clusters`: the tasks.

Baselines: FedAvg is a plain model in :class:`FloralTrainer`; the Local Adaptor is
``floralize(model, 1, rho, private_adaptors=True)``; the Ensemble is :class:`EnsembleModel`.
See ``docs/floral.md``.
"""

from . import mfl_theory
from .adaptor import INITS, PRECONDITIONERS, MatrixView, MixtureAdaptor, MixtureContext
from .aggregation import (
    ClusterProbabilities,
    average_base,
    average_clusters,
    average_products,
    center_adaptors,
    center_additive,
    center_products,
    cluster_probabilities,
    factor_average_error,
    retract_products,
)
from .async_rule import FloralFedBuff
from .budget import lora_rank, nominal_increase, parameter_counts
from .clusters import (
    ClusteredTask,
    clustered_images,
    digits_clusters,
    reduce_rows,
    rotate_images,
    shift_labels,
)
from .conv import CONV_VARIANTS, MixtureConv2d, filter_rank
from .ensemble import EnsembleModel
from .layout import FederatedLayout, parameter_roles
from .linear import MixtureLinear
from .loop import run_floral
from .metrics import aggregation_mismatch, cluster_recovery
from .mfl import (
    MFL_GRADIENTS,
    MFL_ROUTERS,
    LeastSquaresClients,
    MFLRun,
    exp_weights,
    least_squares_clients,
    match_clusters,
    router_regret,
    run_mfl,
)
from .model import ACCEPTED_LAYER_TYPES, LAYER_TYPES, FloralModel, floralize
from .norm import NORM_LAYERS, NORM_STATISTICS, NORM_VARIANTS, MixtureNorm, statistics_roles
from .router import EXP_WEIGHTS_MODES, Router
from .server import ADAPTOR_AGGREGATIONS, FloralAggregator, ServerOptimizer
from .synthetic import SyntheticTask, synthetic_linear, synthetic_mlp
from .trainer import FloralTrainer

__all__ = [
    "EXP_WEIGHTS_MODES",
    "MFL_GRADIENTS",
    "MFL_ROUTERS",
    "LeastSquaresClients",
    "MFLRun",
    "exp_weights",
    "least_squares_clients",
    "match_clusters",
    "mfl_theory",
    "router_regret",
    "run_mfl",
    "ACCEPTED_LAYER_TYPES",
    "ADAPTOR_AGGREGATIONS",
    "CONV_VARIANTS",
    "INITS",
    "LAYER_TYPES",
    "NORM_LAYERS",
    "NORM_STATISTICS",
    "NORM_VARIANTS",
    "PRECONDITIONERS",
    "ClusterProbabilities",
    "ClusteredTask",
    "EnsembleModel",
    "FederatedLayout",
    "FloralAggregator",
    "FloralFedBuff",
    "FloralModel",
    "FloralTrainer",
    "MatrixView",
    "MixtureAdaptor",
    "MixtureContext",
    "MixtureConv2d",
    "MixtureLinear",
    "MixtureNorm",
    "Router",
    "ServerOptimizer",
    "SyntheticTask",
    "aggregation_mismatch",
    "average_base",
    "average_clusters",
    "average_products",
    "center_adaptors",
    "center_additive",
    "center_products",
    "cluster_probabilities",
    "cluster_recovery",
    "clustered_images",
    "digits_clusters",
    "factor_average_error",
    "filter_rank",
    "floralize",
    "lora_rank",
    "nominal_increase",
    "parameter_counts",
    "parameter_roles",
    "reduce_rows",
    "retract_products",
    "rotate_images",
    "run_floral",
    "shift_labels",
    "statistics_roles",
    "synthetic_linear",
    "synthetic_mlp",
]

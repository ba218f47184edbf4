"""Neural-network clients for the asynchronous experiments (needs torch: ``riemfl[torch]``).

* :class:`SmallCNN`, :class:`MLP`: small models for the offline stand-ins;
* :class:`ShuffleNetV2`: the CXR8 model of Licudi et al. 2025 (x1.5, no pretrained weights);
* :class:`LeNet5`: the model of Licudi 2025 (TR)'s exploratory study (LeCun et al. 1998);
* :class:`Cifar10CNN`, :class:`VGG8`: FLoRAL's CIFAR-10 and CIFAR-100 models;
* :func:`flatten_parameters`, :func:`load_flat_parameters`, :func:`n_parameters`: the flat
  parameter vectors the algorithms exchange (order ``module.parameters()``, buffers excluded);
* :class:`TorchClientTrainer`: local Adam on the FedProx objective, the protocol the
  asynchronous simulator calls (``n_clients``, ``n_samples``, ``num_batches``, ``train``,
  ``evaluate``, ``per_client_accuracy``);
* :func:`digits_clients`: the offline default data (scikit-learn digits, Dirichlet clients);
* :func:`binary_auroc`, :func:`average_precision`, :func:`macro_auroc_auprc`: numpy metrics;
* :mod:`riemfl.nn.floral`: FLoRAL, federated mixtures of low-rank adaptors (:func:`floralize`,
  :class:`FloralModel`, :class:`EnsembleModel`, :class:`FloralTrainer`, :func:`run_floral`).
"""

from ..extras import import_extra

import_extra("torch", "riemfl.nn")  # a one-line MissingDependencyError without torch

from . import floral  # noqa: E402 - after the torch check
from .cifar_models import VGG8, Cifar10CNN  # noqa: E402 - after the torch check
from .curve_trainer import BezierClientTrainer, CurveClientTrainer, lorentz_prox  # noqa: E402 - after the torch check
from .floral import EnsembleModel, FloralModel, FloralTrainer, floralize, run_floral  # noqa: E402 - after the torch check
from .lenet import LeNet5  # noqa: E402 - after the torch check
from .models import MLP, SmallCNN, flatten_parameters, load_flat_parameters, n_parameters  # noqa: E402 - after the torch check
from .shufflenet import ShuffleNetV2  # noqa: E402 - after the torch check
from .trainer import (  # noqa: E402 - after the torch check
    LOSSES,
    TorchClientTrainer,
    average_precision,
    binary_auroc,
    digits_clients,
    macro_auroc_auprc,
)

__all__ = [
    "SmallCNN",
    "MLP",
    "LeNet5",
    "ShuffleNetV2",
    "Cifar10CNN",
    "VGG8",
    "flatten_parameters",
    "load_flat_parameters",
    "n_parameters",
    "TorchClientTrainer",
    "BezierClientTrainer",
    "CurveClientTrainer",
    "lorentz_prox",
    "digits_clients",
    "binary_auroc",
    "average_precision",
    "macro_auroc_auprc",
    "LOSSES",
    "floral",
    "floralize",
    "FloralModel",
    "EnsembleModel",
    "FloralTrainer",
    "run_floral",
]

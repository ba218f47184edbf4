"""What Table 2's runs train: the CXR8 clients (stand-in or NIH files), the model, binary
cross-entropy, and the rules of Table 1 with the paper's CXR8 vartheta.

The task plugs into Table 1's run loop (:class:`~riemfl.experiments.licudi2025.run.Task`,
:func:`~riemfl.experiments.licudi2025.run.cached_run`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...federated.async_rules import AsyncRule
from .cxr8 import PAPER_CONDITIONS, cxr8_clients
from .cxr8_standin import cxr8_standin_clients
from .run import Task
from .settings import CURVE_METHODS, METHODS
from .table2_settings import CXR8_VARTHETA, Table2Settings

__all__ = ["CXR8_TASK", "batch_statistics", "cxr8_data", "cxr8_model", "cxr8_rule"]


def cxr8_data(s: Table2Settings, seed: int) -> list[Any]:
    """The clients' (X_train, y_train, X_test, y_test) of seed ``seed``: the stand-in's
    (:func:`~riemfl.experiments.licudi2025.cxr8_standin.cxr8_standin_clients`, ``s.n_patients``
    patients of ``s.image_size`` pixels a side), or the NIH files under ``s.data``
    (:func:`~riemfl.experiments.licudi2025.cxr8.cxr8_clients`); per patient either way."""
    s.check()
    if s.dataset == "cxr8-standin":
        return cxr8_standin_clients(
            s.n_clients,
            n_patients=s.n_patients,
            test_fraction=s.test_fraction,
            seed=seed,
            n_conditions=len(PAPER_CONDITIONS),
            size=s.image_size,
        )
    return cxr8_clients(
        s.data,
        n_clients=s.n_clients,
        max_images=s.max_images,
        size=s.image_size,
        channels=s.channels,
        test_fraction=s.test_fraction,
        seed=seed,
        missing=s.missing,
    )


def batch_statistics(model: Any) -> Any:
    """``model`` with every batch norm normalising by the batch's own statistics, in training
    and in evaluation alike (no running statistics).

    The rules exchange the parameters only, so no client's running statistics belong to the
    global model; with this, training and evaluation normalise alike, with no recalibration pass
    (:class:`~riemfl.nn.TorchClientTrainer` recalibrates running statistics, where a model keeps
    them, on the pooled training rows before evaluating). Evaluation reads the test rows in
    chunks of :data:`riemfl.tuning.EVAL_BATCH_ROWS`, each normalised by its own statistics.
    """
    from torch import nn

    for module in model.modules():
        if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
            module.track_running_stats = False
            module.running_mean = module.running_var = module.num_batches_tracked = None
    return model


def cxr8_model(s: Table2Settings) -> Callable[[], Any]:
    """The ``model_fn`` of ``s``: a linear layer per condition on the stand-in (``MLP([size^2,
    8])``, a logistic regression per finding), ShuffleNet V2 of ``s.width`` with ``s.channels``
    input channels and batch statistics (:func:`batch_statistics`) on the NIH files."""
    from ...nn import MLP, ShuffleNetV2

    k = len(PAPER_CONDITIONS)
    if s.dataset == "cxr8-standin":
        return lambda: MLP([s.image_size**2, k])
    return lambda: batch_statistics(ShuffleNetV2(k, in_channels=s.channels, width=s.width))


def cxr8_rule(method: str, d: int, eta: float) -> AsyncRule:
    """The rule of ``method`` from Table 1's :data:`~riemfl.experiments.licudi2025.settings.
    METHODS`, with vartheta = 0 for AsyncBezier and AsyncBezierED (Licudi et al. 2025,
    App. B.3)."""
    if method in CURVE_METHODS:
        return METHODS[method](d, eta, vartheta=CXR8_VARTHETA)
    return METHODS[method](d, eta)


#: Table 2's task: multi-hot targets, binary cross-entropy, T_e and the best model by macro AUROC
CXR8_TASK = Task(
    clients=cxr8_data,
    model=cxr8_model,
    loss="bce_multilabel",
    rule=cxr8_rule,
    target="auroc",
    scores=("auroc", "auprc"),
)

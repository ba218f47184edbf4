"""The models, tasks and trainers of the FLoRAL reproduction, and what a task's clients hold.

:func:`build_model` turns a base network into a row of Table 1 (FedAvg, Local Adaptor,
Ensemble, FLoRAL); :func:`digits_task` and :func:`digits_trainer` make a column's task and a
row's trainer on it (:func:`cifar_base`: the CIFAR columns' base networks),
:func:`synthetic_trainer` a synthetic task's; :func:`holdings` describes what the clients of a
digits task hold.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .settings import Column, Method, Settings

__all__ = [
    "SYNTHETIC_TASKS",
    "build_model",
    "cifar_base",
    "digits_task",
    "digits_trainer",
    "synthetic_task",
    "synthetic_trainer",
    "holdings",
]

#: per synthetic task: the generator in :mod:`riemfl.nn.floral`, batch size and learning rate
#: (the authors' code's defaults)
SYNTHETIC_TASKS: dict[str, tuple[str, int, float]] = {
    "linear": ("synthetic_linear", 4, 0.1),
    "mlp": ("synthetic_mlp", 8, 0.03),
}


def build_model(
    method: Method,
    base: Any,
    n_clusters: int,
    seed: int,
    s: Settings,
    rank: int | None = None,
    **options: Any,
) -> Any:
    """The model of one row of a table, built on ``base``.

    Parameters
    ----------
    method : Method
        The row: FedAvg (a copy of ``base``), Local Adaptor (one private adaptor), Ensemble or
        FLoRAL.
    base : torch.nn.Module
        The shared model.
    n_clusters : int
        C, the number of ensemble members or adaptors.
    seed : int
        Seed of the adaptors' or members' initialisation.
    s : Settings
        The router noise.
    rank : int, optional
        The adaptors' rank (default: from the budget ``method.rho``).
    **options
        More :func:`~riemfl.nn.floral.floralize` arguments of a FLoRAL row (``layer_types``,
        ``conv_variant``, ``bias``: the ablations).

    Returns
    -------
    torch.nn.Module
    """
    from ...nn.floral import EnsembleModel, floralize

    if method.kind == "fedavg":
        import copy

        return copy.deepcopy(base)
    if method.kind == "local":
        return floralize(base, 1, method.rho or 0.1, rank=rank, private_adaptors=True, seed=seed)
    if method.kind == "ensemble":
        return EnsembleModel(
            base, n_clusters, routing=method.routing, router_noise=s.router_noise, seed=seed
        )
    return floralize(
        base,
        n_clusters,
        method.rho,
        rank=rank,
        routing=method.routing,
        router_noise=s.router_noise,
        seed=seed,
        **options,
    )


def _mlp(sizes: list[int], seed: int) -> Any:
    import torch

    from ...nn import MLP

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MLP(sizes)


def cifar_base(kind: str, seed: int) -> Any:
    """The paper's base network of a CIFAR column, initialised from ``seed``.

    Parameters
    ----------
    kind : {"cifar10", "cifar100"}
        :class:`~riemfl.nn.cifar_models.Cifar10CNN` (10 outputs) or
        :class:`~riemfl.nn.cifar_models.VGG8` (100 outputs).
    seed : int

    Returns
    -------
    torch.nn.Module
    """
    import torch

    from ...nn.cifar_models import VGG8, Cifar10CNN

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return VGG8() if kind == "cifar100" else Cifar10CNN()


def _synthetic_base(task: Any, seed: int) -> Any:
    import torch
    from torch import nn

    z = task.sizes
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if task.kind == "linear":
            return nn.Sequential(nn.Linear(z["d_x"], z["d_y"]))
        width = 2 * z["d_h"]  # the model's hidden width m d_h, m = 2 (G.2)
        return nn.Sequential(nn.Linear(z["d_x"], width), nn.ReLU(), nn.Linear(width, z["d_y"]))


def digits_task(column: Column, seed: int, s: Settings) -> Any:
    """The clustered digits (or the user's MNIST) task of a Table 1 column.

    Parameters
    ----------
    column : Column
        The transform and how much of each client's data is kept.
    seed : int
        Seed of the split.
    s : Settings
        Clients, clusters, data file and evaluation.

    Returns
    -------
    riemfl.nn.floral.ClusteredTask
    """
    from ...nn.floral import digits_clusters

    return digits_clusters(
        column.transform,
        data=s.data,
        n_clients=s.n_clients,
        n_clusters=s.n_clusters,
        reduced=column.reduced,
        keep_fraction=column.keep or 1.0,
        min_rows=column.min_rows,
        evaluation=s.evaluation,
        seed=seed,
    )


def digits_trainer(
    method: Method,
    task: Any,
    seed: int,
    s: Settings,
    *,
    base: Any = None,
    n_clusters: int | None = None,
    augment: Any = None,
    **options: Any,
) -> Any:
    """A :class:`~riemfl.nn.floral.FloralTrainer` of one Table 1 row on a digits task.

    The model is the paper's MNIST MLP (one hidden ReLU layer of ``s.hidden`` units), or
    ``base``, made into ``method``'s model by :func:`build_model`.

    Parameters
    ----------
    method : Method
        The row.
    task : riemfl.nn.floral.ClusteredTask
        From :func:`digits_task`.
    seed : int
        Seed of the model's initialisation.
    s : Settings
        Model width, learning rates and batch size.
    base : torch.nn.Module, optional
        Another shared model (the ablations' CNN); default the MLP.
    n_clusters : int, optional
        C, adaptors or ensemble members (default ``s.n_clusters``, the task's clusters); the
        trainer gets the true clusters (oracle routing, routing diagnostics) only where C is
        the task's number of clusters.
    augment : callable, optional
        The training batches' augmentation (:class:`riemfl.nn.augment.CropFlip` on CIFAR).
    **options
        Passed to :func:`build_model` (``floralize`` arguments of a FLoRAL row).

    Returns
    -------
    riemfl.nn.floral.FloralTrainer
    """
    from ...nn.floral import FloralTrainer

    if base is None:
        d_in = int(np.prod(task.input_shape))
        base = _mlp([d_in, s.hidden, task.n_classes], seed)
    c = s.n_clusters if n_clusters is None else n_clusters
    model = build_model(method, base, c, seed, s, **options)
    return FloralTrainer(
        model,
        task.clients,
        lr=s.lr,
        router_lr=s.router_lr,
        batch_size=s.batch_size,
        # the true clusters (pi* routing, routing diagnostics) name C adaptors or members
        clusters=task.clusters if c == task.n_clusters else None,
        augment=augment,
    )


def synthetic_task(kind: str) -> Any:
    """The synthetic task ``kind`` (a key of :data:`SYNTHETIC_TASKS`), seed 0."""
    from ...nn import floral as nn_floral

    return getattr(nn_floral, SYNTHETIC_TASKS[kind][0])(seed=0)


def synthetic_trainer(method: Method, task: Any, s: Settings) -> Any:
    """A :class:`~riemfl.nn.floral.FloralTrainer` of one row on a synthetic task (MSE loss).

    Parameters
    ----------
    method : Method
        The row (FLoRAL's adaptors at the true rank 1).
    task : riemfl.nn.floral.SyntheticTask
        From :func:`synthetic_task`.
    s : Settings
        The router's learning rate and noise.

    Returns
    -------
    riemfl.nn.floral.FloralTrainer
    """
    from ...nn.floral import FloralTrainer

    _, batch, lr = SYNTHETIC_TASKS[task.kind]
    model = build_model(method, _synthetic_base(task, 0), task.n_clusters, 0, s, rank=1)
    return FloralTrainer(
        model,
        task.clients,
        loss="mse",
        lr=lr,
        router_lr=s.router_lr,
        batch_size=batch,
        clusters=task.clusters,
    )


def holdings(task: Any) -> dict[str, Any]:
    """What the clients hold: training rows, distinct classes, classes a whole cluster lacks.

    Classes are the images' own digits (label shift undone), so that a cluster "lacks" a digit
    whose images none of its clients holds.

    Parameters
    ----------
    task : riemfl.nn.floral.ClusteredTask
        From :func:`digits_task`.

    Returns
    -------
    dict
        ``train_rows``, ``classes`` and ``test_rows`` per client, ``cluster_lacks`` per
        cluster, and ``available_rows`` (the training rows before any reduction).
    """
    n_classes = task.n_classes
    digits = [
        (y - (c if task.description["transform"] == "label_shift" else 0)) % n_classes
        for (_, y, _, _), c in zip(task.clients, task.clusters, strict=True)
    ]
    members = [np.flatnonzero(np.asarray(task.clusters) == c) for c in range(task.n_clusters)]
    lacking = [n_classes - np.unique(np.concatenate([digits[k] for k in m])).size for m in members]
    return {
        "train_rows": [int(d.size) for d in digits],
        "classes": [int(np.unique(d).size) for d in digits],
        "cluster_lacks": lacking,
        "test_rows": [int(c[3].size) for c in task.clients],
        "available_rows": int(sum(task.description["available_rows"])),
    }

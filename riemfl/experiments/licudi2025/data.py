"""The clients' data of the Licudi et al. 2025 reproduction: the digits stand-in or LEAF's files,
and the validation rows of the line search."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ...errors import ParameterError
from .settings import DATASETS, Settings

__all__ = ["client_data", "validation_split"]


def client_data(s: Settings, seed: int) -> list[Any]:
    """The N clients' (X_train, y_train, X_test, y_test) of ``s.dataset``.

    * ``digits``: :func:`riemfl.nn.digits_clients` (Dirichlet(alpha) per label);
    * ``femnist``: LEAF's FEMNIST files under ``s.data`` (``train/`` and ``test/``), pooled and
      split into N Dirichlet(alpha) clients per label, each with a 20% local test split (the
      FEMNIST partition of Licudi et al. 2025, App. B.1.1);
    * ``shakespeare``: LEAF's Shakespeare files under ``s.data``; LEAF's users (speaking roles),
      each wholly on one client, dealt round-robin in a seeded order to N clients (the paper deals
      plays, App. B.2; LEAF's user ids do not name the play in general, so roles are the groups
      here).
    """
    from ...nn import digits_clients
    from ...problems.checks import data_rng

    if s.dataset not in DATASETS:
        raise ParameterError(f"dataset must be one of {DATASETS}, got {s.dataset!r}")
    if s.dataset == "digits":
        return digits_clients(n_clients=s.n_clients, alpha=s.alpha, seed=seed)
    if s.data is None:
        raise ParameterError(
            f"dataset {s.dataset!r} needs data=DIR: LEAF's data directory with train/ and test/ "
            "JSON files (nothing is downloaded)"
        )
    rng = data_rng(seed, f"licudi2025-{s.dataset}")
    return _LEAF_CLIENTS[s.dataset](s, rng)


def _femnist_clients(s: Settings, rng: np.random.Generator) -> list[Any]:
    """LEAF FEMNIST pooled, then split into N Dirichlet(alpha) clients with 20% local tests."""
    from ...nn.trainer import dirichlet_clients

    x, y = _pooled_femnist(s.data)
    return dirichlet_clients(x, y, s.n_clients, s.alpha, rng, 0.2)


def _shakespeare_clients(s: Settings, rng: np.random.Generator) -> list[Any]:
    """LEAF Shakespeare's users dealt whole to N clients."""
    from ...problems.partition import natural_partition

    users, per_user = _shakespeare_users(s.data)
    parts = natural_partition(np.arange(len(users)), min(s.n_clients, len(users)), rng)
    return [
        tuple(np.concatenate([per_user[u][j] for u in part]) for j in range(4)) for part in parts
    ]


#: LEAF data set -> its clients, given the settings and the data's generator
_LEAF_CLIENTS = {"femnist": _femnist_clients, "shakespeare": _shakespeare_clients}


@functools.lru_cache(maxsize=1)
def _pooled_femnist(path: str) -> tuple[np.ndarray, np.ndarray]:
    """LEAF FEMNIST's train and test rows pooled, read once per process (a reproduction makes
    about a hundred runs from the same files)."""
    from ...problems.leaf import load_femnist

    reads = [load_femnist(path, split) for split in ("train", "test")]
    x = np.concatenate([v[0] for read in reads for v in read.values()])
    y = np.concatenate([v[1] for read in reads for v in read.values()])
    return x, y


@functools.lru_cache(maxsize=1)
def _shakespeare_users(path: str) -> tuple[list[str], list[Any]]:
    """LEAF Shakespeare's users and their (train, test) arrays, read once per process."""
    from ...problems.leaf import leaf_client_datasets, load_shakespeare

    train, vocabulary = load_shakespeare(path, "train")
    test, _ = load_shakespeare(path, "test", vocabulary=vocabulary)
    return leaf_client_datasets(train, test)


def validation_split(data: list[Any], fraction: float, seed: int) -> list[Any]:
    """Each client's training rows split into training and validation rows.

    The validation rows take the place of the test rows: the data of the line search, which never
    sees a test row.

    Parameters
    ----------
    data : list
        The clients' (X_train, y_train, X_test, y_test).
    fraction : float
        The share of each client's training rows kept for validation (rounded).
    seed : int
        Seed of the split.

    Returns
    -------
    list
        The clients' (X_train', y_train', X_val, y_val).
    """
    rng = np.random.default_rng(seed)
    out = []
    for x, y, _, _ in data:
        order = rng.permutation(len(y))
        k = int(round(fraction * len(y)))
        val, train = order[:k], order[k:]
        out.append((x[train], y[train], x[val], y[val]))
    return out

"""The study's data: 8 clients whose training rows grow with their index, a global validation
and test set, and the model.

* digits (default): scikit-learn's 1797 8 x 8 digits, shuffled; ``test_fraction`` of them are the
  global test rows, ``val_fraction`` the validation rows, and the rest are dealt to the clients,
  client i (1-based) taking a share i / (1 + ... + N) (an iid split: the heterogeneity is in the
  sizes and so in the compute, as in Licudi 2025 (TR), Sec. 3). LeNet-5 with "same" padding
  (:class:`riemfl.nn.lenet.LeNet5`, ``image_size=8, padding=(2, 2)``).
* FEMNIST (``data=DIR``): LEAF's train files pooled (writers mixed), ``femnist_rows`` of them
  drawn for the clients and dealt as above, ``val_fraction`` of that many more as validation
  rows; LEAF's test files pooled as the test rows. LeNet-5 in its padded-MNIST form
  (``image_size=28, padding=(2, 0)``, 62 classes).

Each client's tuple also carries test rows (its share of the global test rows) for
:class:`~riemfl.nn.TorchClientTrainer`, which requires some; the sweep evaluates on the pooled
sets (:mod:`.sweep`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .settings import Settings

__all__ = ["StudyData", "index_shares", "load_study_data", "deal"]


@dataclass(frozen=True)
class StudyData:
    """The clients' data, the pooled evaluation sets and the model.

    Attributes
    ----------
    clients : list of (X_train, y_train, X_test, y_test)
    splits : dict
        ``"train"``, ``"val"``, ``"test"`` -> (x, y), the pooled rows the sweep evaluates on.
    model_fn : callable
        Builds the model (LeNet-5 for the data's image size).
    description : str
        One line for the report.
    """

    clients: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    splits: dict[str, tuple[np.ndarray, np.ndarray]]
    model_fn: Callable[[], Any]
    description: str


def index_shares(n: int, total: int) -> np.ndarray:
    """Sizes proportional to 1, 2, ..., n summing to ``total`` (largest remainders, ties to the
    larger index)."""
    exact = total * np.arange(1, n + 1) / (n * (n + 1) / 2)
    sizes = np.floor(exact).astype(int)
    order = np.lexsort((-np.arange(n), -(exact - sizes)))
    sizes[order[: total - sizes.sum()]] += 1
    return sizes


def deal(x: np.ndarray, y: np.ndarray, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Rows (already shuffled) dealt in order to n clients by :func:`index_shares`."""
    edges = np.r_[0, np.cumsum(index_shares(n, len(y)))]
    return [(x[a:b], y[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def _assemble(
    train: tuple[np.ndarray, np.ndarray],
    val: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    s: Settings,
) -> tuple[list[Any], dict[str, tuple[np.ndarray, np.ndarray]]]:
    parts = deal(*train, s.n_clients)
    tests = deal(*test, s.n_clients)
    clients = [(a[0], a[1], b[0], b[1]) for a, b in zip(parts, tests, strict=True)]
    return clients, {"train": train, "val": val, "test": test}


def _digits(s: Settings, rng: np.random.Generator) -> StudyData:
    from ...nn.lenet import LeNet5
    from ...problems.data import load_digits

    x, y = load_digits()
    order = rng.permutation(len(y))
    x = x.reshape(-1, 1, 8, 8).astype(np.float32)[order]
    y = y[order]
    n_test = int(round(s.test_fraction * len(y)))
    n_val = int(round(s.val_fraction * len(y)))
    test = (x[:n_test], y[:n_test])
    val = (x[n_test : n_test + n_val], y[n_test : n_test + n_val])
    train = (x[n_test + n_val :], y[n_test + n_val :])
    clients, splits = _assemble(train, val, test, s)
    return StudyData(
        clients,
        splits,
        lambda: LeNet5(10, 1, image_size=8, padding=(2, 2)),
        "scikit-learn's digits (1797 8 x 8 images, 10 classes), the offline stand-in for FEMNIST",
    )


def _femnist(s: Settings, rng: np.random.Generator) -> StudyData:
    from ...nn.lenet import LeNet5
    from ...problems.leaf import FEMNIST_CLASSES, load_femnist

    def pooled(split: str) -> tuple[np.ndarray, np.ndarray]:
        read = load_femnist(s.data, split)
        return (
            np.concatenate([v[0] for v in read.values()]),
            np.concatenate([v[1] for v in read.values()]),
        )

    x, y = pooled("train")
    n_val = int(round(s.val_fraction * s.femnist_rows))
    order = rng.permutation(len(y))[: s.femnist_rows + n_val]
    train = (x[order[n_val:]], y[order[n_val:]])
    val = (x[order[:n_val]], y[order[:n_val]])
    test = pooled("test")
    clients, splits = _assemble(train, val, test, s)
    return StudyData(
        clients,
        splits,
        lambda: LeNet5(FEMNIST_CLASSES, 1, image_size=28, padding=(2, 0)),
        f"LEAF FEMNIST from {s.data} ({len(train[1])} training rows drawn from its train files, "
        f"{len(test[1])} test rows)",
    )


def load_study_data(s: Settings) -> StudyData:
    """The data of ``s``: the digits stand-in, or LEAF FEMNIST when ``s.data`` is set."""
    from ...problems.checks import data_rng

    rng = data_rng(s.seed, "licudi-tr")
    return _digits(s, rng) if s.data is None else _femnist(s, rng)

r"""Federated problems: a manifold plus n client objectives with Euclidean-gradient oracles.

A federated problem is (Zhang et al. 2024, problem (1))

.. math::

    \min_{x \in \mathcal M} f(x) = \frac1n \sum_{i=1}^n f_i(x), \qquad
    f_i(x) = \frac1{m_i} \sum_{l=1}^{m_i} f_{il}(x),

where client i holds m_i samples. The algorithms of :mod:`riemfl.federated` only ever ask a
problem for Euclidean gradients of the f_i (full, or on a mini-batch of sample indices) at a
*stack* of points, one per participating client, so that a problem with equal shapes across
clients answers with one batched array operation instead of a Python loop per client.

Mini-batch gradients are unbiased: for a batch B of b indices drawn uniformly without
replacement from client i's m_i samples, the oracle returns
:math:`\frac1b \sum_{l \in B} \nabla f_{il}(x)`, whose expectation is :math:`\nabla f_i(x)`
(Assumption 4.2, eq. (9) of Zhang et al. 2024).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import ParameterError, ShapeError
from ..manifolds.base import Manifold

Array = Any

__all__ = ["Classifier", "FederatedProblem", "sample_batches"]


def sample_batches(
    rng: np.random.Generator, n_samples: Sequence[int], clients: Sequence[int], batch_size: int
) -> np.ndarray:
    """Draw one mini-batch per client: ``batch_size`` indices uniformly without replacement.

    Parameters
    ----------
    rng : numpy.random.Generator
        The only source of randomness (the engine owns it and checkpoints its state).
    n_samples : sequence of int
        m_i, the number of samples of every client.
    clients : sequence of int
        The clients that need a batch, in order.
    batch_size : int
        b; must not exceed any participating client's m_i.

    Returns
    -------
    numpy.ndarray of int, shape (len(clients), batch_size)
        Row j holds the sample indices of ``clients[j]``.
    """
    out = np.empty((len(clients), batch_size), dtype=np.intp)
    for j, i in enumerate(clients):
        m = int(n_samples[i])
        if batch_size > m:
            raise ParameterError(
                f"batch_size {batch_size} exceeds client {i}'s {m} samples "
                f"(expected 1 <= batch_size <= {m})"
            )
        if batch_size == m:
            out[j] = np.arange(m)
        else:
            # partial Fisher-Yates: O(b) per client, no O(m) permutation
            out[j] = rng.choice(m, size=batch_size, replace=False)
    return out


@runtime_checkable
class Classifier(Protocol):
    """A problem whose model classifies: ``accuracy(x)`` is the fraction of the samples that
    the model x labels correctly (the logistic regression problem)."""

    def accuracy(self, x: Array) -> float: ...


class FederatedProblem(abc.ABC):
    r"""n client objectives f_i on one manifold, with Euclidean-gradient oracles.

    Subclasses implement :meth:`client_egrads` (and :meth:`client_losses`) for a stack of points;
    everything else (global loss, Riemannian gradient, optimality gap) follows.

    Attributes
    ----------
    manifold : Manifold
        The constraint set M (any implementation of the manifold contract).
    n_clients : int
        n.
    n_samples : tuple of int or None
        m_i per client when the objectives are sample averages (mini-batches possible), else None.
    optimum : float or None
        f* = min f over M when known (kPCA: from an eigendecomposition; noiseless LRMC: 0).
    smoothness : float or None
        A Lipschitz constant of the Euclidean gradients (kPCA: beta = |stacked A|_2^2), used for
        the papers' step sizes (eta = 1/beta).
    array_like : array or None
        An array whose kind, dtype and device a default start point takes (a torch tensor for a
        problem computed in torch); None: numpy float64.
    """

    manifold: Manifold
    n_clients: int
    n_samples: tuple[int, ...] | None = None
    optimum: float | None = None
    smoothness: float | None = None
    array_like: Array | None = None
    name: str = "problem"

    # ------------------------------------------------------------------ the oracle (subclasses)
    @abc.abstractmethod
    def client_egrads(
        self, clients: Sequence[int], xs: Array, batches: np.ndarray | None = None
    ) -> Array:
        r"""Euclidean gradients :math:`\nabla f_i(x_j)` for ``i = clients[j]``, stacked.

        Parameters
        ----------
        clients : sequence of int
            Client indices (each in ``range(n_clients)``), possibly a subset, in any order.
        xs : array, shape (len(clients), *point_shape)
            One point per listed client.
        batches : int array of shape (len(clients), b), optional
            Sample indices per client (mini-batch); ``None`` for the full local gradient.
        """

    @abc.abstractmethod
    def client_losses(self, clients: Sequence[int], xs: Array) -> np.ndarray:
        """Full local losses :math:`f_i(x_j)` for ``i = clients[j]``, as a float64 vector."""

    # ------------------------------------------------------------------ derived quantities
    @property
    def all_clients(self) -> range:
        return range(self.n_clients)

    def _stack(self, x: Array) -> Array:
        self.manifold._shape(x, "point")
        if x.ndim != len(self.manifold.point_shape):
            raise ShapeError(
                f"{self.name}: expected one point of shape {self.manifold.point_shape}, "
                f"got shape {tuple(x.shape)}"
            )
        if isinstance(x, np.ndarray):
            return np.broadcast_to(x, (self.n_clients, *x.shape))
        return x.expand(self.n_clients, *x.shape)

    def loss(self, x: Array) -> float:
        r"""Global objective :math:`f(x) = \frac1n\sum_i f_i(x)` at one point."""
        return float(np.mean(self.client_losses(self.all_clients, self._stack(x))))

    def f(self, x: Array) -> float:
        """Alias of :meth:`loss`: the global objective f(x) of problem (1)."""
        return self.loss(x)

    def egrad(self, x: Array) -> Array:
        r"""Euclidean gradient :math:`\nabla f(x) = \frac1n\sum_i \nabla f_i(x)`."""
        return self.client_egrads(self.all_clients, self._stack(x)).mean(0)

    def rgrad(self, x: Array) -> Array:
        r"""Riemannian gradient :math:`\operatorname{grad} f(x) = P_{T_x\mathcal M}\nabla f(x)`."""
        return self.manifold.egrad_to_rgrad(x, self.egrad(x))

    def grad_norm(self, x: Array) -> float:
        """Norm of the Riemannian gradient of f at x (the papers' stationarity measure)."""
        return float(self.manifold.norm(x, self.rgrad(x)))

    def optimality_gap(self, x: Array) -> float:
        """f(x) - f* (NaN when f* is unknown)."""
        if self.optimum is None:
            return math.nan
        return self.loss(x) - self.optimum

    def check_clients(self, clients: Sequence[int]) -> None:
        """Raise :class:`ParameterError` unless every index is a client of this problem."""
        bad = [i for i in clients if not 0 <= int(i) < self.n_clients]
        if bad:
            raise ParameterError(
                f"{self.name}: client indices {bad[:5]} out of range "
                f"(expected 0..{self.n_clients - 1})"
            )

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary (name, manifold, sizes, f*, smoothness) for histories and reports."""
        return {
            "name": self.name,
            "manifold": self.manifold.name,
            "n_clients": self.n_clients,
            "n_samples": None if self.n_samples is None else list(self.n_samples),
            "optimum": self.optimum,
            "smoothness": self.smoothness,
        }

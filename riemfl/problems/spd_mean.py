r"""The federated Frechet (Karcher) mean of SPD matrices held by clients.

Client i holds :math:`m_i` symmetric positive-definite matrices :math:`A_{ij}` (e.g. covariance
descriptors) and

.. math::

    f_i(X) = \frac1{2m_i}\sum_{j=1}^{m_i} d(X, A_{ij})^2, \qquad
    f(X) = \frac1n \sum_{i=1}^n f_i(X), \qquad X \in \mathcal S^n_{++},

with the distance of the chosen metric of :class:`~riemfl.manifolds.SPD`. The minimiser of f is
the weighted Karcher mean of all the matrices, with weights :math:`w_{ij} = 1/(n m_i)` (summing
to 1; Karcher 1977; for the affine-invariant metric it is unique, Moakher 2005).

**Affine-invariant** metric, :math:`d(X, A) = \|\log(L^{-1}AL^{-\top})\|_F` with the Cholesky
factor :math:`X = LL^\top` (the eigenvalues of :math:`L^{-1}AL^{-\top}` are those of
:math:`X^{-1}A`). The Riemannian gradient of :math:`\tfrac12 d(\cdot, A)^2` is
:math:`-\mathrm{Log}_X(A) = -L\log(W)L^\top`, :math:`W = L^{-1}AL^{-\top}`, and the metric's
``egrad_to_rgrad`` is :math:`G \mapsto X\operatorname{sym}(G)X`, so the (symmetric) Euclidean
gradient is

.. math:: \nabla_X \tfrac12 d(X, A)^2 = -L^{-\top}\log(W)\,L^{-1} = -X^{-1}\mathrm{Log}_X(A)X^{-1}.

The centralised optimum is computed by the Karcher fixed-point iteration (Riemannian gradient
descent with unit step) :math:`X \leftarrow \mathrm{Exp}_X\big(\sum_{ij} w_{ij}\mathrm{Log}_X
(A_{ij})\big)` from the log-Euclidean mean until the Riemannian gradient norm is below
:math:`10^{-12}` (relative), and :math:`f^* = f(X^*)`.

**Log-Euclidean** metric, :math:`d(X, A) = \|\log X - \log A\|_F`: the Euclidean gradient is
:math:`\mathrm{D}\log(X)[\log X - \log A]` (the Frechet derivative of the matrix logarithm is
self-adjoint), and the optimum is closed form: :math:`X^* = \exp(\sum_{ij} w_{ij}\log A_{ij})`.

The Bures-Wasserstein metric is not offered (``ParameterError``).

The data are stored as one flat stack of all matrices with an owner per matrix, so the oracle
is one batched eigendecomposition over every (client point, matrix) pair whatever the
:math:`m_i`. Mini-batches of b matrices give :math:`\frac1b\sum_{j\in B}\nabla
\tfrac12 d(X, A_{ij})^2`, unbiased. f is geodesically convex for the affine-invariant metric
but its Euclidean gradient is not globally Lipschitz, so ``smoothness`` is None.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._validation import integer, real
from ..errors import NotOnManifoldError, ParameterError
from ..linalg import sym
from ..manifolds.spd import SPD, dlogm, expm, logm
from .base import FederatedProblem
from .checks import (
    batch_array,
    client_index,
    data_rng,
    matrix_blocks,
    point_stack,
)

__all__ = ["SPDMeanProblem", "SPD_MEAN_METRICS"]

#: the metrics :class:`SPDMeanProblem` supports
SPD_MEAN_METRICS = ("affine-invariant", "log-euclidean")


def _eig_log(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(log W, sum of log(lambda)^2)`` of a stack of SPD matrices by one ``eigh``."""
    lam, q = np.linalg.eigh(w)
    loglam = np.log(lam)
    return (q * loglam[..., None, :]) @ np.swapaxes(q, -1, -2), np.sum(loglam * loglam, axis=-1)


class SPDMeanProblem(FederatedProblem):
    r"""The Karcher mean of SPD matrices split among n clients (module docstring).

    Parameters
    ----------
    matrices : sequence of array-like
        Client i's matrices as an :math:`(m_i, n, n)` array; each symmetric positive definite.
    metric : {"affine-invariant", "log-euclidean"}
        The metric of :math:`\mathcal S^n_{++}` whose squared distance is averaged.
    name : str
        Used in histories and messages.

    Attributes
    ----------
    matrices : numpy.ndarray, shape (N, n, n)
        All :math:`A_{ij}`, client by client (N = :math:`\sum_i m_i`).
    owners : numpy.ndarray of int, shape (N,)
        The client of each matrix.
    optimum : float
        :math:`f^* = f(X^*)` at the Karcher mean :math:`X^*` (:meth:`solution`).

    Raises
    ------
    ParameterError, ShapeError, NotOnManifoldError
        An unknown metric, blocks of the wrong shape, a matrix that is not SPD.
    """

    def __init__(
        self,
        matrices: Sequence[Any],
        metric: str = "affine-invariant",
        *,
        name: str = "spd-mean",
    ) -> None:
        if metric not in SPD_MEAN_METRICS:
            raise ParameterError(
                f"SPDMeanProblem: metric must be one of {SPD_MEAN_METRICS}, got {metric!r}"
            )
        blocks = matrix_blocks(matrices, "SPDMeanProblem", "matrices")
        n = blocks[0].shape[1]
        self.manifold = SPD(n, metric)
        for b in blocks:
            self.manifold.check_point(b)
        self.n = n
        self.metric = metric
        self.name = name
        self.n_clients = len(blocks)
        self.n_samples = tuple(b.shape[0] for b in blocks)
        self._sizes = np.asarray(self.n_samples, dtype=np.intp)
        self.matrices = sym(np.concatenate(blocks))
        self.owners = np.repeat(np.arange(self.n_clients), self._sizes)
        self._starts = np.concatenate([[0], np.cumsum(self._sizes)[:-1]]).astype(np.intp)
        # w_ij = 1 / (n m_i): f = sum_ij w_ij d(X, A_ij)^2 / 2
        self.weights = 1.0 / (self.n_clients * self._sizes[self.owners])
        if metric == "log-euclidean":
            self._logs = logm(self.matrices)
        self._solution = self._karcher_mean()
        self.optimum = self.loss(self._solution)
        self.smoothness = None

    # ------------------------------------------------------------------ constructors
    @classmethod
    def synthetic(
        cls,
        *,
        n_clients: int = 10,
        n: int = 3,
        per_client: int = 20,
        heterogeneity: float = 1.0,
        seed: int | np.random.Generator | None = 0,
        spread: float = 0.3,
        metric: str = "affine-invariant",
    ) -> SPDMeanProblem:
        r"""Covariance-like matrices scattered around a different centre per client.

        Client i's centre is :math:`C_i = \exp(h S_i)`, its matrices :math:`A_{ij} =
        C_i^{1/2}\exp(s E_{ij})C_i^{1/2}`, with :math:`S_i, E_{ij}` symmetric with independent
        standard normal entries on and above the diagonal (h = ``heterogeneity``, s =
        ``spread``): the clients' own means differ by about h in the affine-invariant distance.

        Parameters
        ----------
        n_clients, n, per_client : int
            The number of clients, the matrix size and :math:`m_i` (equal for every client).
        heterogeneity, spread : float
            h and s, >= 0.
        seed : int, numpy.random.Generator or None
            Source of the data (an int is mixed with a fixed tag, as in the other generators).
        metric : {"affine-invariant", "log-euclidean"}
            The metric of the problem.
        """
        where = "SPDMeanProblem.synthetic"
        n_clients = integer(n_clients, f"{where}: n_clients", minimum=1)
        n = integer(n, f"{where}: n", minimum=1)
        per_client = integer(per_client, f"{where}: per_client", minimum=1)
        heterogeneity = real(heterogeneity, f"{where}: heterogeneity", at_least=0)
        spread = real(spread, f"{where}: spread", at_least=0)
        rng = data_rng(seed, "spdmean")
        centres = expm(sym(rng.standard_normal((n_clients, n, n))) * (0.5 * heterogeneity))
        roots = expm(0.5 * logm(centres))
        noise = expm(sym(rng.standard_normal((n_clients, per_client, n, n))) * (0.5 * spread))
        a = sym(roots[:, None] @ noise @ roots[:, None])
        return cls(list(a), metric, name="spd-mean-synthetic")

    # ------------------------------------------------------------------ the pairs
    def _pairs(
        self, ids: np.ndarray, batches: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row of xs, matrix index, weight within the row) of every pair the oracle sums."""
        if batches is None:
            sizes = self._sizes[ids]
            rows = np.repeat(np.arange(ids.size), sizes)
            # position within the row's client, plus the client's first matrix
            within = np.arange(rows.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
            mats = within + self._starts[ids][rows]
            weight = 1.0 / self._sizes[ids][rows]
            return rows, mats, weight
        b = batches.shape[1]
        rows = np.repeat(np.arange(ids.size), b)
        mats = (self._starts[ids][:, None] + batches).reshape(-1)
        return rows, mats, np.full(rows.size, 1.0 / b)

    def _pair_terms(
        self, xs: np.ndarray, rows: np.ndarray, mats: np.ndarray, *, grad: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        r"""Per pair: :math:`d(X, A)^2` and (``grad``) the Euclidean gradient of
        :math:`\tfrac12 d(X, A)^2`."""
        if self.metric == "log-euclidean":
            logx = logm(xs)
            diff = logx[rows] - self._logs[mats]
            sq = np.sum(diff * diff, axis=(-2, -1))
            if not grad:
                return sq, None
            return sq, dlogm(xs[rows], diff)
        chol = np.linalg.cholesky(xs)
        inv = np.linalg.inv(chol)[rows]  # L^{-1}
        w = sym(inv @ self.matrices[mats] @ np.swapaxes(inv, -1, -2))
        logw, sq = _eig_log(w)
        if not grad:
            return sq, None
        return sq, -(np.swapaxes(inv, -1, -2) @ logw @ inv)

    def _checked(self, clients: Sequence[int], xs: Any) -> tuple[Any, np.ndarray, np.ndarray]:
        index, ids = client_index(clients, self.n_clients, self.name)
        xs = point_stack(xs, ids.size, (self.n, self.n), self.name)
        low = np.linalg.eigvalsh(sym(xs))[..., 0] if xs.size else np.ones(0)
        if np.any(low <= 0):
            j = int(np.flatnonzero(low <= 0)[0])
            raise NotOnManifoldError(
                f"{self.name}: point {j} is not positive definite (lambda_min = {low[j]:.3e}); "
                "the squared distances are defined on the open cone only"
            )
        return index, ids, sym(xs)

    # ------------------------------------------------------------------ oracle
    def client_egrads(
        self, clients: Sequence[int], xs: Any, batches: np.ndarray | None = None
    ) -> np.ndarray:
        r"""Stacked :math:`\nabla f_i(X_j) = \frac1{m_i}\sum_l \nabla_X\tfrac12 d(X_j,
        A_{il})^2` for ``i = clients[j]`` (``batches``: the mean over the batch), float64 of
        shape ``(len(clients), n, n)``, symmetric."""
        _, ids, xs = self._checked(clients, xs)
        if batches is not None:
            batches = batch_array(batches, ids, self._sizes, self.name)
        rows, mats, weight = self._pairs(ids, batches)
        _, g = self._pair_terms(xs, rows, mats, grad=True)
        out = np.zeros_like(xs)
        np.add.at(out, rows, g * weight[:, None, None])
        return out

    def client_losses(self, clients: Sequence[int], xs: Any) -> np.ndarray:
        r"""Stacked :math:`f_i(X_j) = \frac1{2m_i}\sum_l d(X_j, A_{il})^2`, float64."""
        _, ids, xs = self._checked(clients, xs)
        rows, mats, weight = self._pairs(ids, None)
        sq, _ = self._pair_terms(xs, rows, mats, grad=False)
        return np.bincount(rows, weights=0.5 * sq * weight, minlength=ids.size)

    # ------------------------------------------------------------------ reference values
    def _karcher_mean(self, *, rtol: float = 1e-12, max_iter: int = 500) -> np.ndarray:
        """The weighted Karcher mean (closed form, or the fixed-point iteration)."""
        w = self.weights[:, None, None]
        if self.metric == "log-euclidean":
            return expm(np.sum(w * self._logs, axis=0))
        M = self.manifold
        x = expm(np.sum(w * logm(self.matrices), axis=0))  # log-Euclidean start
        for _ in range(max_iter):
            step = np.sum(w * M.log(np.broadcast_to(x, self.matrices.shape), self.matrices), 0)
            x = sym(M.exp(x, sym(step)))
            if float(M.norm(x, step)) <= rtol:
                break
        return x

    def solution(self) -> np.ndarray:
        r"""The centralised minimiser :math:`X^*`, the weighted Karcher mean (a copy)."""
        return self._solution.copy()

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(n=self.n, metric=self.metric)
        return out

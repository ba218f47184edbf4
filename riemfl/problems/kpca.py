r"""Federated k-component PCA on the Stiefel manifold (Zhang et al. 2024, Section 5).

.. math::

    \min_{x \in \mathrm{St}(d,k)} f(x) = \frac1n \sum_{i=1}^n f_i(x), \qquad
    f_i(x) = -\frac12 \operatorname{tr}(x^\top A_i^\top A_i x),

where :math:`A_i \in \mathbb R^{p_i \times d}` holds client i's samples as rows ("kPCA" is
k-component PCA, not kernel PCA). With :math:`C_i = A_i^\top A_i` (the paper's "covariance
matrix of the local data", not centred and not divided by :math:`p_i`):

* :math:`\nabla f_i(x) = -C_i x` (one batched matmul over the stacked :math:`C_i`);
* :math:`f^* = -\frac12 \sum_{j=1}^k \lambda_j(\bar C)`, :math:`\bar C = \frac1n\sum_i C_i`,
  attained at the top-k eigenvectors of :math:`\bar C` (:meth:`KPCAProblem.solution`);
* :math:`\beta = \|\mathrm{col}\{A_i\}\|_2^2 = \lambda_{\max}(\sum_i C_i)`, the constant of
  the paper's step size :math:`\eta = 1/\beta` (App. A.4.1).

Mini-batches (a choice the paper leaves open: Section 5 writes :math:`f_i` without a factor
:math:`1/p_i`, problem (1) as an average of :math:`m_i` per-sample losses): we keep :math:`f_i`
unnormalised and write it as the average (1) of :math:`m_i = p_i` per-sample losses
:math:`f_{il}(x) = -\frac{p_i}2 \|x^\top a_{il}\|^2`, so the mini-batch gradient of a batch B of
b rows drawn uniformly without replacement is

.. math:: \nabla f_i(x; B) = -\frac{p_i}{b} A_{i,B}^\top A_{i,B}\, x,

unbiased for :math:`\nabla f_i(x)` (eq. (9), Assumption 4.2), and :math:`\beta` and the step
sizes are those of the full-gradient problem. (The alternative, normalising :math:`f_i` by
:math:`1/p_i`, would change :math:`\beta` and the paper's step sizes.)
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._validation import integer
from ..errors import DataError, ParameterError, ShapeError
from ..manifolds.stiefel import Stiefel
from .base import FederatedProblem
from .checks import (
    batch_array,
    check_k,
    client_index,
    data_rng,
    float_matrix,
    point_stack,
)
from .data import label_sorted_split, load_digits, load_mnist

__all__ = ["KPCAProblem"]

#: mini-batches use one zero-padded (n, max p_i, d) stack when it costs at most this factor
#: more memory than the data itself, else a loop over per-client arrays
_PAD_OVERHEAD = 1.25

#: What a :class:`KPCAProblem`'s gradient oracle keeps.
STORAGES = ("covariances", "rows")


class KPCAProblem(FederatedProblem):
    r"""k-component PCA with the rows of the data split among n clients, on St(d, k).

    Parameters
    ----------
    data_blocks : sequence of array-like
        :math:`A_1, \dots, A_n`, client i's samples as the rows of a (p_i, d) array; the p_i may
        differ, d must not.
    k : int
        Number of components, ``1 <= k <= d``.
    name : str
        Used in histories and messages.
    storage : {"covariances", "rows"}
        What the gradient oracle keeps. ``"covariances"`` (default): the stacked
        :math:`C_i = A_i^\top A_i` (n d^2 floats; a gradient costs :math:`O(d^2 k)` per client).
        ``"rows"``: only the samples (a gradient :math:`-A_i^\top (A_i x)` costs
        :math:`O(p_i d k)`), smaller and faster when the clients have fewer rows than d (e.g.
        10^4 clients of 20 rows in d = 100: 160 MB of rows instead of 800 MB of covariances).
        The two differ only by rounding.

    Attributes
    ----------
    covariances : numpy.ndarray, shape (n, d, d)
        The stacked :math:`C_i = A_i^\top A_i` (computed on first use with ``storage="rows"``).
    blocks : list of numpy.ndarray
        The :math:`A_i` (float64).
    optimum, smoothness : float
        :math:`f^*` and :math:`\beta`, see the module docstring.
    n_samples : tuple of int
        :math:`p_i` (the samples of the mini-batch oracle).

    Raises
    ------
    DataError
        When every entry of the data is zero (:math:`\beta = 0`: f is constant).

    Notes
    -----
    ``client_egrads(clients, xs)`` is ``-C[clients] @ xs``; with all clients in order it uses the
    stacked covariances without a gather copy. Building :math:`C_i` costs :math:`O(p_i d^2)`
    once; each gradient then costs :math:`O(d^2 k)` per client instead of :math:`O(p_i d k)`.
    """

    def __init__(
        self,
        data_blocks: Sequence[Any],
        k: int,
        *,
        name: str = "kpca",
        storage: str = "covariances",
    ) -> None:
        if storage not in STORAGES:
            raise ParameterError(f"KPCAProblem: storage must be one of {STORAGES}, got {storage!r}")
        self.storage = storage
        if isinstance(data_blocks, np.ndarray) and data_blocks.ndim == 3:
            data_blocks = list(data_blocks)
        if not isinstance(data_blocks, Sequence) or len(data_blocks) == 0:
            raise ParameterError(
                "KPCAProblem: data_blocks must be a non-empty sequence of (p_i, d) arrays, "
                f"got {type(data_blocks).__name__}"
            )
        blocks = [
            float_matrix(a, f"KPCAProblem: data block {i}") for i, a in enumerate(data_blocks)
        ]
        d = blocks[0].shape[1]
        for i, a in enumerate(blocks):
            if a.shape[1] != d:
                raise ShapeError(
                    f"KPCAProblem: data block {i} has {a.shape[1]} columns, block 0 has {d}; "
                    "every client's samples must have the same dimension d"
                )
        self.k = check_k(k, d, "KPCAProblem")
        self.d = d
        self.name = name
        self.manifold = Stiefel(d, self.k)
        self.n_clients = len(blocks)
        self.n_samples = tuple(a.shape[0] for a in blocks)
        self._sizes = np.asarray(self.n_samples, dtype=np.intp)

        p_max = int(self._sizes.max())
        if self.n_clients * p_max <= _PAD_OVERHEAD * self._sizes.sum():
            # zero rows beyond p_i are never indexed by a valid batch
            self._padded: np.ndarray | None = np.zeros((self.n_clients, p_max, d))
            for i, a in enumerate(blocks):
                self._padded[i, : a.shape[0]] = a
            blocks = [self._padded[i, :p] for i, p in enumerate(self.n_samples)]
        else:
            self._padded = None
        self.blocks = blocks

        self._covariances: np.ndarray | None = None
        if storage == "rows" and self._padded is None:
            raise ParameterError(
                "KPCAProblem: storage='rows' needs clients of similar sizes (the rows are kept in "
                f"one padded stack); the sizes range from {min(self.n_samples)} to {p_max}"
            )
        if storage == "covariances":
            total = self.covariances.sum(axis=0)
        else:
            total = np.zeros((d, d))
            for a in blocks:
                total += a.T @ a
        self.mean_covariance = total / self.n_clients  # C-bar: f(x) = -1/2 tr(x^T C-bar x)
        # eigh of the mean; top-k eigenvalues in decreasing order
        evals, evecs = np.linalg.eigh(total / self.n_clients)
        self._eigenvalues = evals[::-1]
        self._solution = np.ascontiguousarray(evecs[:, ::-1][:, : self.k])
        self.optimum = -0.5 * float(self._eigenvalues[: self.k].sum())
        self.smoothness = float(np.linalg.eigvalsh(total)[-1])
        if not self.smoothness > 0:
            raise DataError(
                f"KPCAProblem: expected data with a nonzero entry, got {self.n_clients} client(s) "
                f"whose {sum(self.n_samples)} rows of dimension {d} are all zero (the smoothness "
                "beta = lambda_max(sum_i A_i^T A_i) is 0, so f is constant and no step 1/beta "
                "exists)"
            )

    @property
    def covariances(self) -> np.ndarray:
        """The stacked :math:`C_i = A_i^\top A_i`, shape (n, d, d) (built once, when first
        needed)."""
        if self._covariances is None:
            cov = np.empty((self.n_clients, self.d, self.d))
            for i, a in enumerate(self.blocks):
                np.matmul(a.T, a, out=cov[i])
            self._covariances = cov
        return self._covariances

    def _covariance_times(self, index: Any, ids: np.ndarray, xs: np.ndarray) -> np.ndarray:
        """Stacked :math:`C_i x_j` from the stored covariances or rows (``storage``)."""
        if self.storage == "covariances":
            return np.matmul(self.covariances[index], xs)
        rows = self._padded[index]  # a view for all clients in order (index is a slice)
        return np.matmul(rows.transpose(0, 2, 1), np.matmul(rows, xs))

    # ------------------------------------------------------------------ constructors
    @classmethod
    def synthetic(
        cls,
        *,
        n_clients: int = 30,
        d: int = 20,
        k: int = 5,
        p: int = 15,
        seed: int | np.random.Generator | None = 0,
        scale: str = "variance",
        storage: str = "covariances",
    ) -> KPCAProblem:
        r"""The heterogeneous synthetic kPCA of Zhang et al. (2024, App. A.4.1, Figs. 6-7).

        Every entry of :math:`A_i \in \mathbb R^{p \times d}` is drawn from
        :math:`N(0, 2i/n)`, i = 1..n. The paper does not say whether 2i/n is a variance or a
        standard deviation; riemfl reads it as a **variance** (the usual meaning of
        :math:`N(\mu, \sigma^2)`), and ``scale="std"`` reads it as a standard deviation.

        Parameters
        ----------
        n_clients, d, k, p : int
            n = 30, (d, k) = (20, 5), p = 15 in the paper.
        seed : int, numpy.random.Generator or None
            Source of the data (one ``standard_normal((n, p, d))`` draw); an int seed is mixed
            with a fixed tag, so the data are independent of ``default_rng(seed)`` draws such as
            an initial point.
        scale : {"variance", "std"}
            How to read the 2i/n of :math:`N(0, 2i/n)`.
        storage : {"covariances", "rows"}
            What the oracle keeps (class docstring).
        """
        if scale not in ("variance", "std"):
            raise ParameterError(f"scale must be 'variance' or 'std', got {scale!r}")
        for what, v in (("n_clients", n_clients), ("d", d), ("p", p)):
            integer(v, f"KPCAProblem.synthetic: {what}", minimum=1)
        rng = data_rng(seed, "kpca")
        level = 2.0 * np.arange(1, n_clients + 1) / n_clients
        std = np.sqrt(level) if scale == "variance" else level
        a = rng.standard_normal((n_clients, p, d)) * std[:, None, None]
        return cls(list(a), k, name="kpca-synthetic", storage=storage)

    @classmethod
    def from_labelled(
        cls, features: Any, labels: Any, n_clients: int, k: int, *, name: str = "kpca-labelled"
    ) -> KPCAProblem:
        """kPCA on a labelled data set split by :func:`~riemfl.problems.label_sorted_split`.

        This is the MNIST protocol of Zhang et al. (2024, App. A.4.1): rows sorted by label,
        contiguous blocks of nearly N/n rows, so every client sees one or two digits.
        """
        return cls(label_sorted_split(features, labels, n_clients), k, name=name)

    @classmethod
    def digits(cls, n_clients: int = 10, k: int = 2) -> KPCAProblem:
        """Label-sorted kPCA on scikit-learn's digits (1797 x 64), the offline MNIST stand-in."""
        x, y = load_digits()
        return cls.from_labelled(x, y, n_clients, k, name="kpca-digits")

    @classmethod
    def mnist(cls, path: str | os.PathLike, n_clients: int = 10, k: int = 2) -> KPCAProblem:
        """Label-sorted kPCA on the user's MNIST file (:func:`~riemfl.problems.load_mnist`).

        With the 60,000 training images and the defaults: n = 10, p = 6000, d = 784, k = 2.
        """
        x, y = load_mnist(path)
        return cls.from_labelled(x, y, n_clients, k, name="kpca-mnist")

    # ------------------------------------------------------------------ oracle
    def client_egrads(
        self, clients: Sequence[int], xs: Any, batches: np.ndarray | None = None
    ) -> np.ndarray:
        r"""Stacked gradients :math:`\nabla f_i(x_j) = -C_i x_j` for ``i = clients[j]``.

        With ``batches``, row j's mini-batch gradient
        :math:`-\frac{p_i}{b}A_{i,B_j}^\top A_{i,B_j} x_j` (unbiased, module docstring).
        Returns a float64 array of shape ``(len(clients), d, k)``.
        """
        index, ids = client_index(clients, self.n_clients, self.name)
        xs = point_stack(xs, ids.size, (self.d, self.k), self.name)
        if batches is None:
            out = self._covariance_times(index, ids, xs)
            return np.negative(out, out=out)
        batches = batch_array(batches, ids, self._sizes, self.name)
        scale = -(self._sizes[ids] / batches.shape[1])[:, None, None]
        if self._padded is not None:
            rows = self._padded[ids[:, None], batches]  # (m, b, d)
            out = np.matmul(rows.transpose(0, 2, 1), np.matmul(rows, xs))
        else:
            out = np.empty_like(xs)
            for j, i in enumerate(ids):
                rows = self.blocks[i][batches[j]]
                np.matmul(rows.T, rows @ xs[j], out=out[j])
        out *= scale
        return out

    def loss(self, x: Any) -> float:
        r""":math:`f(x) = -\frac12 \operatorname{tr}(x^\top \bar C x)` with the mean covariance
        :math:`\bar C` (one d x d product instead of n)."""
        x = self._point(x)
        return -0.5 * float(np.sum(x * (self.mean_covariance @ x)))

    def egrad(self, x: Any) -> np.ndarray:
        r""":math:`\nabla f(x) = -\bar C x`."""
        return -(self.mean_covariance @ self._point(x))

    def _point(self, x: Any) -> np.ndarray:
        """One (d, k) point as float64 numpy (the checks of :func:`point_stack`)."""
        return point_stack(x, 1, (self.d, self.k), self.name, single=True)

    def client_losses(self, clients: Sequence[int], xs: Any) -> np.ndarray:
        r"""Stacked :math:`f_i(x_j) = -\frac12 \langle x_j, C_i x_j\rangle`, float64."""
        index, ids = client_index(clients, self.n_clients, self.name)
        xs = point_stack(xs, ids.size, (self.d, self.k), self.name)
        cx = self._covariance_times(index, ids, xs)
        return -0.5 * np.einsum("nij,nij->n", xs, cx)

    # ------------------------------------------------------------------ reference values
    def solution(self) -> np.ndarray:
        r"""A global minimiser: the top-k eigenvectors of :math:`\bar C` as a (d, k) point of St.

        Columns in decreasing eigenvalue order; any :math:`xQ`, :math:`Q \in O(k)`, is optimal
        too (and, with repeated eigenvalues at the k-th place, other subspaces as well).
        """
        return self._solution.copy()

    @property
    def eigenvalues(self) -> np.ndarray:
        r"""Eigenvalues of :math:`\bar C = \frac1n\sum_i A_i^\top A_i`, in decreasing order."""
        return self._eigenvalues.copy()

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(d=self.d, k=self.k, eigengap=self.eigengap)
        if self.storage != "covariances":  # the default adds no key: fingerprints of runs agree
            out["storage"] = self.storage
        return out

    @property
    def eigengap(self) -> float:
        r""":math:`\lambda_k(\bar C) - \lambda_{k+1}(\bar C)` (inf when k = d)."""
        if self.k == self.d:
            return math.inf
        return float(self._eigenvalues[self.k - 1] - self._eigenvalues[self.k])

r"""Federated low-rank matrix completion on the Stiefel manifold (Zhang et al. 2024, eq. (13)).

The observed entries :math:`P_\Omega(A)` of :math:`A \in \mathbb R^{d \times T}` are split by
columns among n clients (:math:`A_i`, :math:`\Omega_i`), and

.. math::

    \min_{X \in \mathrm{St}(d,k)} \frac1n \sum_{i=1}^n f_i(X), \qquad
    f_i(X) = \frac12 \|P_{\Omega_i}(X V_i(X) - A_i)\|^2, \qquad
    V_i(X) = \operatorname*{argmin}_V \|P_{\Omega_i}(XV - A_i)\|.        \qquad (13)

:math:`V_i(X)` is a least-squares solve per column t with observed rows :math:`S_t`:
:math:`v_t = (X_{S_t}^\top X_{S_t})^{-1} X_{S_t}^\top a_{S_t t}`. All columns of all listed
clients are solved at once: the k x k Grams :math:`X^\top \mathrm{diag}(\omega_t) X` come from
one batched matmul of the mask with the row outer products :math:`x_r x_r^\top`, and one batched
symmetric eigendecomposition solves them. **Safe fallback**: a column with fewer than k
observations, or whose Gram has condition number above ``1 / rcond``, is solved by
``numpy.linalg.lstsq`` on :math:`X_{S_t}` itself (the minimum-norm least-squares solution); a
column with no observation gets :math:`v_t = 0`.

By the envelope theorem the gradient is :math:`\nabla f_i(X) = P_{\Omega_i}(XV_i - A_i)V_i^\top`,
and the normal equations give :math:`X^\top \nabla f_i(X) = 0`: it is already tangent to the
Stiefel manifold, so :math:`\operatorname{grad} f_i = \nabla f_i` (the paper does not write the
gradient; ``tests/problems/test_lrmc.py`` checks this one against finite differences).

Columns are the natural samples: with :math:`m_i = T_i` columns,
:math:`f_i = \frac1{T_i}\sum_t f_{it}`, :math:`f_{it}(X) = \frac{T_i}2\|P_{\Omega}(X v_t -
a_t)\|^2`, so a batch of b columns gives the unbiased gradient
:math:`\frac{T_i}{b}\sum_{t \in B} P_\Omega(Xv_t - a_t)v_t^\top` (the paper uses full gradients
only for LRMC; the mini-batch oracle is an extension).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._validation import integer, real
from ..errors import ParameterError, ShapeError
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

__all__ = ["LRMCProblem"]


class LRMCProblem(FederatedProblem):
    r"""Low-rank matrix completion with the columns split among n clients, on St(d, k).

    Parameters
    ----------
    matrix : array-like, shape (d, T)
        A; only the observed entries are read (the others may be anything, NaN included).
    mask : array-like of bool, shape (d, T)
        :math:`\Omega`: True where an entry is observed.
    n_clients : int
        n; client i gets the i-th of n contiguous blocks of nearly T/n columns ("split equally
        by columns"; sizes differ by at most one when n does not divide T).
    k : int
        The rank, ``1 <= k <= d``.
    optimum : float, optional
        f* when known (0 for noiseless data of rank <= k with enough observations per column).
    truth : array-like, shape (d, k), optional
        A matrix spanning the true column space (noiseless data), used by :meth:`solution`.
    rcond : float
        Columns whose Gram :math:`X_S^\top X_S` has
        :math:`\lambda_{\min} \le \mathrm{rcond}\,\lambda_{\max}` use the lstsq fallback.
    name : str
        Used in histories and messages.

    Attributes
    ----------
    column_blocks : list of numpy.ndarray
        The columns of A that each client holds.
    n_samples : tuple of int
        Columns per client (the samples of the mini-batch oracle).
    """

    def __init__(
        self,
        matrix: Any,
        mask: Any,
        n_clients: int,
        k: int,
        *,
        optimum: float | None = None,
        truth: Any = None,
        rcond: float = 1e-8,
        name: str = "lrmc",
    ) -> None:
        a = float_matrix(matrix, "LRMCProblem: matrix", allow_nan=True)
        omega = np.asarray(mask)
        if omega.shape != a.shape:
            raise ShapeError(f"LRMCProblem: mask has shape {omega.shape}; expected {a.shape}")
        if omega.dtype != np.bool_:
            if not np.isin(omega, (0, 1)).all():
                raise ParameterError("LRMCProblem: mask must be boolean (or 0/1)")
            omega = omega.astype(bool)
        if not np.isfinite(a[omega]).all():
            raise ParameterError("LRMCProblem: matrix has NaN or infinite observed entries")
        d, t = a.shape
        self.k = check_k(k, d, "LRMCProblem")
        integer(n_clients, "LRMCProblem: n_clients (at most the number of columns)", 1, t)
        self.d, self.n_columns = d, t
        self.rcond = real(rcond, "LRMCProblem: rcond", at_least=0, below=1)
        self.name = name
        self.manifold = Stiefel(d, self.k)
        self.n_clients = int(n_clients)
        self.column_blocks = np.array_split(np.arange(t), self.n_clients)
        self.n_samples = tuple(len(c) for c in self.column_blocks)
        self._sizes = np.asarray(self.n_samples, dtype=np.intp)
        # column-major client stacks (n, T_max, d), padded with unobserved all-zero columns
        t_max = int(self._sizes.max())
        self._obs = np.zeros((self.n_clients, t_max, d))
        self._mask = np.zeros((self.n_clients, t_max, d))
        for i, cols in enumerate(self.column_blocks):
            self._obs[i, : cols.size] = np.where(omega[:, cols], a[:, cols], 0.0).T
            self._mask[i, : cols.size] = omega[:, cols].T
        self.optimum = None if optimum is None else float(optimum)
        self.smoothness = None
        self._truth = None if truth is None else float_matrix(truth, "LRMCProblem: truth")
        if self._truth is not None and self._truth.shape != (d, self.k):
            raise ShapeError(f"LRMCProblem: truth has shape {self._truth.shape}; expected {(d, k)}")
        self.nu: float | None = None
        self.factors: tuple[np.ndarray, np.ndarray] | None = None

    # ------------------------------------------------------------------ constructor
    @classmethod
    def synthetic(
        cls,
        *,
        d: int = 100,
        T: int = 1000,
        k: int = 2,
        n_clients: int = 10,
        seed: int | np.random.Generator | None = 0,
        oversampling: float = 10.0,
    ) -> LRMCProblem:
        r"""The LRMC data of Zhang et al. (2024, App. A.4.2, Figs. 4, 8, 9).

        :math:`\hat L \in \mathbb R^{d\times k}`, :math:`\hat R \in \mathbb R^{k \times T}` with
        iid N(0, 1) entries and :math:`A = \hat L \hat R` (implied by the paper); B with iid
        U[0, 1] entries and :math:`\Omega = \{B_{ij} \le \nu\}`,
        :math:`\nu = 10k(d + T - k)/(dT)` (``oversampling`` = 10 times the k(d + T - k) degrees
        of freedom; 0.2196 at the paper's sizes). Noiseless, so f* = 0.

        The draws, in order: L, R, B, from one generator; an int ``seed`` is mixed with a fixed
        tag, so that the data are independent of ``default_rng(seed)`` draws such as the initial
        point (unmixed, seed 0 would make L the Gaussian of the first random Stiefel point, i.e.
        start the solver at the solution).
        """
        for what, v in (("d", d), ("T", T)):
            integer(v, f"LRMCProblem.synthetic: {what}", minimum=1)
        check_k(k, d, "LRMCProblem.synthetic")
        real(oversampling, "LRMCProblem.synthetic: oversampling", above=0)
        rng = data_rng(seed, "lrmc")
        left = rng.standard_normal((d, k))
        right = rng.standard_normal((k, T))
        nu = oversampling * k * (d + T - k) / (d * T)
        mask = rng.uniform(size=(d, T)) <= nu
        problem = cls(
            left @ right, mask, n_clients, k, optimum=0.0, truth=left, name="lrmc-synthetic"
        )
        problem.nu = nu
        problem.factors = (left, right)
        return problem

    # ------------------------------------------------------------------ oracle
    def _select(
        self, clients: Sequence[int], xs: Any, batches: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(xs, observed columns, mask columns, scale) for the listed clients (and batches)."""
        index, ids = client_index(clients, self.n_clients, self.name)
        xs = point_stack(xs, ids.size, (self.d, self.k), self.name)
        if batches is None:
            return xs, self._obs[index], self._mask[index], np.ones(ids.size)
        batches = batch_array(batches, ids, self._sizes, self.name)
        rows = ids[:, None]
        scale = self._sizes[ids] / batches.shape[1]
        return xs, self._obs[rows, batches], self._mask[rows, batches], scale

    def coefficients(self, xs: np.ndarray, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        r"""Per-column least squares :math:`V(X)^\top`, batched over clients and columns.

        Parameters
        ----------
        xs : numpy.ndarray, shape (m, d, k)
            One X per client.
        obs, mask : numpy.ndarray, shape (m, c, d)
            Observed entries (zero elsewhere) and the 0/1 mask of c columns per client.

        Returns
        -------
        numpy.ndarray, shape (m, c, k)
            Row t of block j is :math:`v_t = \operatorname{argmin}_v \|P_\Omega(X_j v - a_t)\|`,
            with the safe fallback described in the module docstring.
        """
        m, c, d = obs.shape
        k = xs.shape[-1]
        outer = (xs[:, :, :, None] * xs[:, :, None, :]).reshape(m, d, k * k)
        gram = np.matmul(mask, outer).reshape(m, c, k, k)  # X^T diag(omega_t) X
        rhs = np.matmul(obs, xs)  # X^T P_Omega(a_t), (m, c, k)
        w, q = np.linalg.eigh(gram)
        counts = mask.sum(axis=-1)
        good = (counts >= k) & (w[..., 0] > self.rcond * w[..., -1])
        w = np.where(good[..., None], w, 1.0)
        coef = np.matmul(q.swapaxes(-1, -2), rhs[..., None])[..., 0] / w
        v = np.matmul(q, coef[..., None])[..., 0]
        v[~good] = 0.0
        for j, t in zip(*np.nonzero(~good & (counts > 0)), strict=True):  # the safe fallback
            rows = mask[j, t] > 0
            v[j, t] = np.linalg.lstsq(xs[j][rows], obs[j, t, rows], rcond=None)[0]
        return v

    def _residuals(
        self, clients: Sequence[int], xs: Any, batches: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(residual P_Omega(XV - A) column-major (m, c, d), V^T (m, c, k), scale (m,))."""
        xs, obs, mask, scale = self._select(clients, xs, batches)
        v = self.coefficients(xs, obs, mask)
        res = np.matmul(v, xs.swapaxes(-1, -2))  # (X V)^T
        res *= mask
        res -= obs
        return res, v, scale

    def client_egrads(
        self, clients: Sequence[int], xs: Any, batches: np.ndarray | None = None
    ) -> np.ndarray:
        r"""Stacked envelope gradients :math:`P_{\Omega_i}(X_j V_i(X_j) - A_i) V_i(X_j)^\top`.

        With ``batches`` (column indices per client), :math:`\frac{T_i}{b}` times the same sum
        over the batch's columns. Returns float64 of shape ``(len(clients), d, k)``; every
        block is tangent at its :math:`X_j` (:math:`X_j^\top \nabla f_i = 0`).
        """
        res, v, scale = self._residuals(clients, xs, batches)
        out = np.matmul(res.swapaxes(-1, -2), v)
        out *= scale[:, None, None]
        return out

    def client_losses(self, clients: Sequence[int], xs: Any) -> np.ndarray:
        r"""Stacked :math:`f_i(X_j) = \frac12\|P_{\Omega_i}(X_j V_i(X_j) - A_i)\|^2`, float64."""
        res, _, _ = self._residuals(clients, xs, None)
        return 0.5 * np.einsum("mcd,mcd->m", res, res)

    # ------------------------------------------------------------------ reference values
    def solution(self) -> np.ndarray:
        """An orthonormal basis of the true column space (a global minimiser for noiseless data).

        Raises
        ------
        ParameterError
            When the problem was built without ``truth``.
        """
        if self._truth is None:
            raise ParameterError(
                f"{self.name}: the true column space is unknown (pass truth= to LRMCProblem)"
            )
        q, _ = np.linalg.qr(self._truth)
        return q

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(d=self.d, T=self.n_columns, k=self.k)
        if self.nu is not None:
            out["nu"] = self.nu
        out["observed_fraction"] = float(self._mask.sum() / (self.d * self.n_columns))
        return out

    @property
    def min_observations(self) -> int:
        """The fewest observed entries in any column (the fallback runs for those below k)."""
        counts = self._mask.sum(axis=-1)
        present = np.arange(counts.shape[1])[None, :] < self._sizes[:, None]
        return int(counts[present].min()) if present.any() else math.nan

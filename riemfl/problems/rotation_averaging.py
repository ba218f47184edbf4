r"""Federated rotation averaging on SO(n) with the chordal L2 cost (SO(3) by default).

Client i holds :math:`m_i` noisy rotations :math:`R_{ij} \in \mathrm{SO}(n)` and

.. math::

    f_i(X) = \frac1{2m_i}\sum_{j=1}^{m_i} \|X - R_{ij}\|_F^2, \qquad
    f(X) = \frac1n\sum_{i=1}^n f_i(X), \qquad X \in \mathrm{SO}(n),

the *chordal* (Frobenius) L2 mean (not the geodesic one, whose optimum has no closed
form). With the client means
:math:`\bar R_i = \frac1{m_i}\sum_j R_{ij}` and :math:`M = \frac1n\sum_i \bar R_i`:

* :math:`\nabla f_i(X) = X - \bar R_i` (a mini-batch B of b rotations:
  :math:`X - \frac1b\sum_{j\in B}R_{ij}`, unbiased);
* :math:`f_i(X) = \tfrac12\|X\|_F^2 - \langle X, \bar R_i\rangle + \frac1{2m_i}\sum_j
  \|R_{ij}\|_F^2`; on SO(n) the first and last terms are n/2 each;
* the centralised optimum is closed form: :math:`f(X) = \text{const} - \langle X, M\rangle`,
  minimised over SO(n) by the special polar factor :math:`X^* = P_{\mathrm{SO}(n)}(M)`
  (:func:`riemfl.linalg.special_polar`, unique when :math:`\sigma'_{n-1} + \sigma'_n > 0`),
  and :math:`f^* = f(X^*)`;
* smoothness :math:`\beta = 1` (the Euclidean gradients are 1-Lipschitz).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._validation import integer, real
from ..errors import DataError, ProjectionError
from ..linalg import skew, special_polar
from ..manifolds.special_orthogonal import SpecialOrthogonal
from .base import FederatedProblem
from .checks import (
    batch_array,
    client_index,
    data_rng,
    matrix_blocks,
    point_stack,
)

__all__ = ["RotationAveragingProblem"]


class RotationAveragingProblem(FederatedProblem):
    r"""Chordal L2 rotation averaging with the rotations split among n clients.

    Parameters
    ----------
    rotations : sequence of array-like
        Client i's rotations as an :math:`(m_i, n, n)` array (the :math:`m_i` may differ); each
        must be a rotation (:math:`R^\top R = I`, :math:`\det R = 1`, within ``atol``).
    name : str
        Used in histories and messages.
    atol : float
        Tolerance of the rotation check.

    Attributes
    ----------
    client_means : numpy.ndarray, shape (n_clients, n, n)
        :math:`\bar R_i`.
    mean : numpy.ndarray, shape (n, n)
        :math:`M = \frac1n \sum_i \bar R_i`.
    optimum, smoothness : float
        :math:`f^* = f(P_{\mathrm{SO}(n)}(M))` and :math:`\beta = 1`.

    truth : numpy.ndarray or None
        The rotation :math:`R^*` the synthetic data were drawn around (None otherwise).

    Raises
    ------
    ShapeError, NotOnManifoldError, DataError
        Blocks of the wrong shape; a matrix that is not a rotation; a mean M whose nearest
        rotation is not unique (the optimum is then not unique).
    """

    truth: np.ndarray | None = None

    def __init__(
        self, rotations: Sequence[Any], *, name: str = "rotation-averaging", atol: float = 1e-8
    ) -> None:
        blocks = matrix_blocks(rotations, "RotationAveragingProblem", "rotations", min_n=2)
        n = blocks[0].shape[1]
        self.manifold = SpecialOrthogonal(n)
        for b in blocks:
            self.manifold.check_point(b, atol=atol)
        self.n = n
        self.name = name
        self.blocks = blocks
        self.n_clients = len(blocks)
        self.n_samples = tuple(b.shape[0] for b in blocks)
        self._sizes = np.asarray(self.n_samples, dtype=np.intp)
        self.client_means = np.stack([b.mean(axis=0) for b in blocks])
        # (1 / 2 m_i) sum_j |R_ij|_F^2: n / 2 up to rounding
        self._constants = np.array([0.5 * np.mean(np.sum(b * b, axis=(1, 2))) for b in blocks])
        self.mean = self.client_means.mean(axis=0)
        try:
            self._solution = special_polar(self.mean, rtol=1e-10, what="the mean rotation M")
        except ProjectionError as exc:  # M has no unique nearest rotation
            raise DataError(
                f"RotationAveragingProblem: the chordal mean is not unique: {exc}"
            ) from None
        self.smoothness = 1.0
        self.optimum = self.loss(self._solution)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def synthetic(
        cls,
        *,
        n_clients: int = 10,
        per_client: int = 20,
        noise: float = 0.2,
        heterogeneity: float = 0.3,
        seed: int | np.random.Generator | None = 0,
        n: int = 3,
    ) -> RotationAveragingProblem:
        r"""Noisy copies of one rotation, with a bias per client.

        :math:`R_{ij} = R^*\,\exp(\Omega_i)\,\exp(\Xi_{ij})` with a Haar-random :math:`R^*`,
        a client bias :math:`\Omega_i` and a per-rotation noise :math:`\Xi_{ij}`, skew-symmetric
        with independent :math:`N(0, h^2)` resp. :math:`N(0, \sigma^2)` entries above the
        diagonal (h = ``heterogeneity``, :math:`\sigma` = ``noise``; radians).

        Parameters
        ----------
        n_clients, per_client : int
            n and :math:`m_i` (equal for every client).
        noise, heterogeneity : float
            :math:`\sigma` and h, >= 0.
        seed : int, numpy.random.Generator or None
            Source of the data (an int is mixed with a fixed tag, as in the other
            generators).
        n : int
            The rotations are n x n (SO(3) by default).
        """
        where = "RotationAveragingProblem.synthetic"
        n_clients = integer(n_clients, f"{where}: n_clients", minimum=1)
        per_client = integer(per_client, f"{where}: per_client", minimum=1)
        n = integer(n, f"{where}: n", minimum=2)
        noise = real(noise, f"{where}: noise", at_least=0)
        heterogeneity = real(heterogeneity, f"{where}: heterogeneity", at_least=0)
        rng = data_rng(seed, "rotavg")
        so = SpecialOrthogonal(n)
        eye = np.eye(n)
        truth = so.random_point(rng=rng)
        bias = skew(rng.standard_normal((n_clients, n, n))) * (heterogeneity * math.sqrt(2.0))
        jitter = skew(rng.standard_normal((n_clients, per_client, n, n))) * (noise * math.sqrt(2.0))
        biased = truth @ so.exp(np.broadcast_to(eye, bias.shape), bias)
        noisy = so.exp(np.broadcast_to(eye, jitter.shape), jitter)
        rotations = biased[:, None] @ noisy
        problem = cls(list(rotations), name="rotation-averaging-synthetic")
        problem.truth = truth
        return problem

    # ------------------------------------------------------------------ oracle
    def client_egrads(
        self, clients: Sequence[int], xs: Any, batches: np.ndarray | None = None
    ) -> np.ndarray:
        r"""Stacked :math:`\nabla f_i(X_j) = X_j - \bar R_i` (``batches``: the mean over the batch
        instead of :math:`\bar R_i`), float64 of shape ``(len(clients), n, n)``."""
        index, ids = client_index(clients, self.n_clients, self.name)
        xs = point_stack(xs, ids.size, (self.n, self.n), self.name)
        if batches is None:
            return xs - self.client_means[index]
        batches = batch_array(batches, ids, self._sizes, self.name)
        means = np.stack([self.blocks[i][batches[j]].mean(axis=0) for j, i in enumerate(ids)])
        return xs - means

    def client_losses(self, clients: Sequence[int], xs: Any) -> np.ndarray:
        r"""Stacked :math:`f_i(X_j) = \tfrac12\|X_j\|^2 - \langle X_j, \bar R_i\rangle +
        \frac1{2m_i}\sum_l\|R_{il}\|^2`, float64."""
        index, ids = client_index(clients, self.n_clients, self.name)
        xs = point_stack(xs, ids.size, (self.n, self.n), self.name)
        return (
            0.5 * np.einsum("kij,kij->k", xs, xs)
            - np.einsum("kij,kij->k", xs, self.client_means[index])
            + self._constants[index]
        )

    # ------------------------------------------------------------------ reference values
    def solution(self) -> np.ndarray:
        r"""The global minimiser :math:`X^* = P_{\mathrm{SO}(n)}(M)` (a copy)."""
        return self._solution.copy()

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(n=self.n, cost="chordal L2")
        return out

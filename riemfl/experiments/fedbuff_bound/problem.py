r"""A heterogeneous stochastic quadratic whose constants in Theorem 1 are known exactly.

Client i holds m points :math:`a_{i1},\dots,a_{im} \in \mathbb R^d`; a sample's loss is
:math:`\ell_i(w, a_{il}) = \tfrac12 (w - a_{il})^\top H (w - a_{il})` with one diagonal
:math:`H = \mathrm{diag}(h)`, :math:`h_1 = L \ge h_2 \ge \dots \ge h_d = L/\kappa`, so that

* :math:`\nabla f_i(w) = H(w - \bar a_i)` with :math:`\bar a_i` the client's mean: every
  :math:`f_i` is L-smooth (Toghani & Uribe 2022, eq. (4)), and f is minimised at the grand mean
  :math:`\bar a`, :math:`f^\star = f(\bar a)` (eq. (5));
* the per-sample gradient variance is :math:`\frac1m\sum_l\|H(a_{il} - \bar a_i)\|^2`, the same
  at every w: :math:`\sigma^2` (eq. (6)) is its largest value over the clients. A batch of b
  samples drawn without replacement has variance at most :math:`\sigma^2/b` (eq. (7));
* the population diversity :math:`\frac1n\sum_i\|\nabla f_i(w) - \nabla f(w)\|^2 =
  \frac1n\sum_i\|H(\bar a_i - \bar a)\|^2` is also the same at every w: :math:`\gamma^2` (eq.
  (8)) is that value, and its uniform form (eq. (9), Remark 2) the largest term.

Client i's centre :math:`c_i` is drawn from :math:`N(0, I)` and its points from
:math:`N(c_i, I)`, all from one seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..._validation import integer, real
from ...manifolds.euclidean import Euclidean
from ...problems.base import FederatedProblem

__all__ = ["QuadraticProblem"]


class QuadraticProblem(FederatedProblem):
    r"""The quadratic of the module docstring on :math:`\mathbb R^d`.

    Parameters
    ----------
    n_clients, samples, dim : int
        n, m (samples per client) and d.
    smoothness : float
        L, the largest curvature :math:`h_1`.
    condition : float
        :math:`\kappa = h_1/h_d` >= 1 (the curvatures are geometrically spaced).
    seed : int
        The data's seed.

    Attributes
    ----------
    sigma2, gamma2, gamma2_uniform : float
        :math:`\sigma^2` (eq. (6)), :math:`\gamma^2` (eq. (8)) and the uniform :math:`\gamma^2`
        (eq. (9)), exact.
    """

    name = "quadratic"

    def __init__(
        self,
        n_clients: int = 10,
        samples: int = 20,
        dim: int = 10,
        smoothness: float = 0.05,
        condition: float = 10.0,
        seed: int = 0,
    ) -> None:
        owner = "QuadraticProblem"
        n = integer(n_clients, f"{owner}: n_clients", minimum=1)
        m = integer(samples, f"{owner}: samples", minimum=1)
        d = integer(dim, f"{owner}: dim", minimum=1)
        L = real(smoothness, f"{owner}: smoothness", above=0)
        kappa = real(condition, f"{owner}: condition", at_least=1)
        rng = np.random.default_rng(integer(seed, f"{owner}: seed", minimum=0))
        self.curvature = L * np.geomspace(1.0, 1.0 / kappa, d)
        self.curvature[0] = L  # exactly L, whatever geomspace rounds to
        centres = rng.standard_normal((n, 1, d))
        self.points = centres + rng.standard_normal((n, m, d))
        self.means = self.points.mean(axis=1)
        self.centre = self.means.mean(axis=0)
        self.manifold = Euclidean(d)
        self.n_clients = n
        self.n_samples = (m,) * n
        self.smoothness = L
        self.optimum = self.loss(self.centre)
        spread = self.curvature * (self.points - self.means[:, None, :])
        self.sigma2 = float((spread**2).sum(axis=-1).mean(axis=1).max())
        diversity = ((self.curvature * (self.means - self.centre)) ** 2).sum(axis=-1)
        self.gamma2 = float(diversity.mean())
        self.gamma2_uniform = float(diversity.max())

    def client_egrads(
        self, clients: Sequence[int], xs: Any, batches: np.ndarray | None = None
    ) -> np.ndarray:
        index = np.asarray(clients, dtype=np.intp)
        if batches is None:
            target = self.means[index]
        else:
            chosen = np.take_along_axis(self.points[index], batches[..., None], axis=1)
            target = chosen.mean(axis=1)
        return self.curvature * (np.asarray(xs) - target)

    def client_losses(self, clients: Sequence[int], xs: Any) -> np.ndarray:
        index = np.asarray(clients, dtype=np.intp)
        diff = np.asarray(xs)[:, None, :] - self.points[index]
        return 0.5 * np.einsum("cmd,d,cmd->c", diff, self.curvature, diff) / diff.shape[1]

    def gradient(self, x: np.ndarray) -> np.ndarray:
        r""":math:`\nabla f(x) = H(x - \bar a)`, exactly."""
        return self.curvature * (x - self.centre)

    def start(self, offset: float) -> np.ndarray:
        r"""The initial model :math:`w^0 = \bar a + \text{offset}\cdot\mathbf 1`."""
        return self.centre + real(offset, "QuadraticProblem.start: offset")

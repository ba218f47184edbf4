r"""What the experiment fixes: the problem, FedBuff's settings, the grid of tau and T, the seeds.

Toghani & Uribe 2022 run no experiment; every number here is riemfl's choice. The step sizes are
the theorem's: :math:`\eta = 1/(Q\sqrt{LT})` per run and :math:`\beta = 1/K`. The staleness
bound :math:`\tau` is enforced by the simulator's theory mode (iid uniform arrivals, staleness
uniform in :math:`0..\tau`: their Assumption 1), and each T is a multiple of the horizon
:math:`160L(Q+7)(\tau+1)^3` of its :math:`\tau`, so every run is one the theorem covers.

The smoothness constant is small (L = 0.05) so that the horizons stay affordable: the horizon
condition multiplies L by plain numbers, and with L = 0.05, Q = 2 it is :math:`72(\tau+1)^3`
server steps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...theory import fedbuff_horizon

__all__ = ["Settings"]


@dataclass(frozen=True)
class Settings:
    """The experiment's settings (defaults: the full form; :meth:`quick`: the quick one).

    Attributes
    ----------
    n_clients, samples, dim : int
        n, samples per client, d (:class:`~.problem.QuadraticProblem`).
    smoothness, condition : float
        L and the condition number of the quadratic.
    data_seed : int
        The data's seed.
    start_offset : float
        :math:`w^0 = \\bar a + \\text{offset}\\cdot\\mathbf 1`.
    local_steps, buffer_size, batch_size : int
        Q, K and b.
    taus : tuple of int
        The staleness bounds.
    multiples : tuple of int
        T = multiple x horizon(tau), per tau.
    seeds : int
        Runs per (tau, T), seeds 0..seeds-1 (the expectation is their mean).
    rate_tolerance : float
        The fitted slope of the measured average against T, on log-log axes, passes within
        this distance of -1/2.
    """

    n_clients: int = 10
    samples: int = 20
    dim: int = 10
    smoothness: float = 0.05
    condition: float = 10.0
    data_seed: int = 0
    start_offset: float = 3.0
    local_steps: int = 2
    buffer_size: int = 2
    batch_size: int = 4
    taus: tuple[int, ...] = (0, 1, 2, 4)
    multiples: tuple[int, ...] = (1, 2, 4, 8)
    seeds: int = 5
    rate_tolerance: float = 0.15

    @classmethod
    def quick(cls) -> Settings:
        """Three staleness bounds, three horizons' multiples, two seeds (about 10 s)."""
        return replace(cls(), taus=(0, 1, 2), multiples=(1, 2, 4), seeds=2)

    def horizon(self, tau: int) -> int:
        """The least T Theorem 1 covers for this tau."""
        return fedbuff_horizon(self.smoothness, self.local_steps, tau)

    def grid(self) -> list[tuple[int, int]]:
        """Every (tau, T) of the experiment, in order."""
        return [(tau, m * self.horizon(tau)) for tau in self.taus for m in self.multiples]

    def runs(self) -> int:
        """The number of runs: one per (tau, T, seed)."""
        return len(self.grid()) * self.seeds

"""What ``riemfl reproduce robustness`` runs: every parameter fixed before the runs.

The aggregators' parameters follow fixed rules rather than a tuning on the results:

* Krum and Multi-Krum: f = the number of attackers of the run (the known bound; 0 in the clean
  run), Multi-Krum averaging the m - f best-scored uploads (Blanchard et al. 2017);
* trimmed mean: the fraction :attr:`Settings.trim` = 0.3 dropped (3 of 10 uploads, the most
  attackers of the grid);
* centered clipping (Karimireddy, He & Jaggi 2021): one iteration from the previous aggregate,
  radius tau = the median norm of the tangent uploads of the first round of a clean pilot run
  (plain mean, the first seed), per problem (:func:`~riemfl.experiments.robustness.runs.pilot_tau`);
* every run: RFedAvg with ``upload="tangent"`` (its server step reads the aggregate only), tau =
  :data:`~riemfl.experiments.registry.DEFAULT_LOCAL_STEPS` local steps at the problem's default
  step size (:mod:`riemfl.experiments.registry`), every client in every round, so that the
  attackers are the same share of the uploads in each round;
* the oracle (:class:`~riemfl.experiments.robustness.oracle.HonestMean`, the mean of the
  non-attackers' uploads) runs at every positive share beside the aggregators, as the reference
  of what discarding exactly the attackers reaches; it is not among the robust aggregators of
  the verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...federated import AGGREGATOR_NAMES
from ...federated.attacks import ATTACK_NAMES
from ..registry import DEFAULT_LOCAL_STEPS
from .oracle import ORACLE
from .server_optimizer_comparison import ComparisonSettings

__all__ = ["Settings", "CLEAN", "ORACLE"]

#: the attack label of the runs without attackers (fraction 0)
CLEAN = "none"


@dataclass
class Settings:
    """The report's settings (``--quick``: :meth:`quick`).

    Attributes
    ----------
    rounds : dict
        Problem name -> rounds of every robustness run on it.
    n_clients : int
        n, every one of them in every round: 10, so that 30% is 3 attackers and Krum's
        m >= 2f + 3 holds at f = 3.
    local_steps : int
        tau of RFedAvg.
    fractions : tuple of float
        The attackers' shares of the clients; 0 is the clean run (no attack).
    attacks : tuple of str
        Names of :class:`~riemfl.federated.attacks.Byzantine` attacks.
    aggregators : tuple of str
        Names of :func:`~riemfl.federated.build_aggregator` ("mean": the plain mean).
    trim : float
        The trimmed mean's fraction dropped.
    clip_iterations : int
        Centered clipping's iterations per aggregation.
    seeds : tuple of int
        Run seeds (initial point, attackers, attacks' randomness); the data is that of seed 0.
    verdict_fraction : float
        The share of attackers at which the goal is checked.
    gap_factor : float
        The goal: the best robust aggregator ends within this factor of the clean run's gap...
    accuracy_points : float
        ... or, on a classifier, within this many accuracy points (percent) of its accuracy.
    comparison : ComparisonSettings
        The server-optimiser comparison.
    """

    rounds: dict[str, int] = field(
        default_factory=lambda: {
            "kpca-digits": 150,
            "spd-mean": 100,
            "hyperbolic-tree": 100,
            "logreg-digits": 200,
        }
    )
    n_clients: int = 10
    local_steps: int = DEFAULT_LOCAL_STEPS
    fractions: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3)
    attacks: tuple[str, ...] = ATTACK_NAMES
    aggregators: tuple[str, ...] = AGGREGATOR_NAMES
    trim: float = 0.3
    clip_iterations: int = 1
    seeds: tuple[int, ...] = (0, 1, 2)
    verdict_fraction: float = 0.2
    gap_factor: float = 2.0
    accuracy_points: float = 3.0
    comparison: ComparisonSettings = field(default_factory=ComparisonSettings)

    @classmethod
    def quick(cls) -> Settings:
        """A smoke-test run: one seed, fractions 0 and 20%, fewer rounds."""
        return cls(
            rounds={"kpca-digits": 50, "spd-mean": 40, "hyperbolic-tree": 50, "logreg-digits": 60},
            fractions=(0.0, 0.2),
            seeds=(0,),
            comparison=ComparisonSettings.quick(),
        )

    def attackers(self, fraction: float) -> int:
        """The number of attackers at ``fraction`` of the clients."""
        return round(fraction * self.n_clients)

    def cases(self) -> list[tuple[str, float]]:
        """``(attack, fraction)`` of every case: the clean run once, then every attack at every
        positive fraction."""
        clean = [(CLEAN, 0.0)] if 0.0 in self.fractions else []
        return clean + [(a, f) for a in self.attacks for f in self.fractions if f > 0]

    def runs_at(self, fraction: float) -> tuple[str, ...]:
        """The aggregators run at ``fraction``: :attr:`aggregators`, and the oracle
        (:data:`~riemfl.experiments.robustness.oracle.ORACLE`) when there are attackers."""
        return (*self.aggregators, ORACLE) if fraction > 0 else self.aggregators

    def columns(self) -> tuple[str, ...]:
        """The aggregators of the tables: :attr:`aggregators`, then the oracle."""
        return (*self.aggregators, ORACLE)

    def runs(self) -> int:
        """The number of robustness runs."""
        per_case = sum(len(self.runs_at(f)) for _, f in self.cases())
        return len(self.rounds) * per_case * len(self.seeds)

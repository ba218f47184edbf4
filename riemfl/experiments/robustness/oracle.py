"""The oracle of the robustness study: an aggregator told which clients attack, which averages
the uploads of the others.

It is no defence (a server does not know its attackers); it is the reference of what discarding
exactly the attackers reaches. Its runs converge to the optimum of the honest clients' objective,
whose gap on the objective of all the clients is a floor for any aggregator that discards the
attackers' uploads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...backend import ops_for
from ...errors import ParameterError
from ...federated.aggregation import Aggregator, State
from ...federated.rounds import take_rows

__all__ = ["ORACLE", "HonestMean"]

#: the aggregator label of the oracle's runs
ORACLE = "oracle"


class HonestMean(Aggregator):
    """The mean of the honest clients' uploads, as ``({key: mean * m}, m)`` like a robust
    aggregator (:mod:`riemfl.federated.robust`): the rule's mean ``total / count`` is the honest
    mean, and ``count`` stays the number of uploads.

    The rounds stack the accepted uploads in the order of the round's participants
    (:class:`~riemfl.federated.rounds.RoundSteps`), which the aggregator does not see. With every
    client in every round and none dropped, stack position i is client i; the aggregator
    refuses any other stack.

    Parameters
    ----------
    attackers : sequence of int
        The attacking client ids (those of
        :meth:`~riemfl.federated.attacks.Byzantine.clients` for the run's seed).
    n_clients : int
        The number of clients, every one of them in every round.

    Raises
    ------
    ParameterError
        For an attacker id outside ``[0, n_clients)``, or when every client attacks.
    """

    sums = False  # count times the honest mean, not the sum

    def __init__(self, attackers: Sequence[int], n_clients: int) -> None:
        self.n_clients = int(n_clients)
        self.attackers = sorted({int(c) for c in attackers})
        if any(not 0 <= c < self.n_clients for c in self.attackers):
            raise ParameterError(
                f"HonestMean: attacker ids {self.attackers} must lie in [0, {self.n_clients})"
            )
        self._honest = np.setdiff1d(np.arange(self.n_clients), self.attackers).astype(np.intp)
        if not self._honest.size:
            raise ParameterError("HonestMean: every client attacks, no honest upload to average")

    def aggregate(self, uploads: State, phase: int) -> tuple[State, int]:
        if not uploads:
            raise ParameterError("HonestMean: no uploads to aggregate")
        m = int(next(iter(uploads.values())).shape[0])
        if m != self.n_clients:
            raise ParameterError(
                f"HonestMean: {m} uploads in phase {phase}, expected one per client "
                f"({self.n_clients}): stack positions are client ids only when every client "
                "takes part and none is dropped"
            )
        out = {}
        for key, v in uploads.items():
            rows = take_rows(v, self._honest)
            out[key] = ops_for(v).sum(rows, axis=0) / len(self._honest) * m
        return out, m

    def describe(self) -> dict[str, Any]:
        return {"name": ORACLE, "attackers": self.attackers, "n_clients": self.n_clients}

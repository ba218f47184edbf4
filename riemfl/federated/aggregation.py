r"""What the server sees of the uploads: the whole stack, or only their sum.

A synchronous rule declares, per phase, whether its server step needs only
:math:`\sum_j u_j` and the number of uploads
(:meth:`~riemfl.federated.algorithm.SyncAlgorithm.sum_only`). For such a phase the round
(:class:`~riemfl.federated.rounds.RoundSteps`) hands the uploads to an :class:`Aggregator` and
calls :meth:`~riemfl.federated.algorithm.SyncAlgorithm.server_step_from_sum` with its answer
alone: the server rule never receives an individual upload, which is what secure aggregation
(the server learns only the sum) and central differential privacy (noise added to the sum)
require.

Which rules are sum-only:

* **RFedProj** (Zhang et al. 2024, Alg. 1 line 13): :math:`x^{r+1} = P(x^r) + \eta_g(\frac1m
  \sum_i \hat z_{i,\tau} - P(x^r))` reads the sum of the unprojected uploads.
* **RFedAvg / RFedProx / RFedSVRG** with ``upload="tangent"``: clients upload
  :math:`R_{x^r}^{-1}(x_{i,\tau})` (they know :math:`x^r`, it was broadcast) and the server takes
  :math:`R_{x^r}(\frac1m\sum_i u_i)`, the same tangent-space mean. With the default
  ``upload="point"`` the server computes the inverse retraction of each uploaded point at
  :math:`x^r` itself, which needs each point. RFedSVRG's first phase (the anchor gradients) is
  sum-only either way.
* FedBuff (asynchronous): its server reads only :class:`~riemfl.federated.async_rules.SumBuffer`.
  The other asynchronous rules apply each update on its own (with its staleness weight), so the
  server sees single updates; FLoRAL's aggregation weighs each client's adaptors by its router
  probabilities and needs each upload.
"""

from __future__ import annotations

import abc
from typing import Any

from ..errors import ParameterError

State = dict[str, Any]

__all__ = ["Aggregator", "PlainSum", "check_aggregator", "check_aggregator_fits", "server_update"]


class Aggregator(abc.ABC):
    """Turns the accepted uploads of a sum-only phase into their sum and number.

    A subclass implements :meth:`aggregate`. The other members are optional, with neutral
    defaults: :meth:`from_total` (with :attr:`takes_totals`) for a sum computed elsewhere (an
    executor that ran secure aggregation returns only the sum,
    :attr:`~riemfl.federated.rounds.PhaseReply.total`), :meth:`row` for columns of the history.
    An aggregator with a run state also implements ``state_dict`` / ``load_state_dict``
    (:class:`~riemfl.federated.run_core.Stateful`) and is checkpointed with the round.
    """

    #: whether :meth:`from_total` acts on a sum computed elsewhere; ``False`` (the default): the
    #: aggregator needs each upload, and a pre-aggregated reply is refused
    takes_totals: bool = False
    #: whether :meth:`aggregate` returns the exact sum of the uploads (the contract's default);
    #: a robust aggregator returns ``count`` times a robust centre instead, which differential
    #: privacy's accounting (a sum of clipped updates) does not cover
    sums: bool = True

    @abc.abstractmethod
    def aggregate(self, uploads: State, phase: int) -> tuple[State, int]:
        """``({key: sum over the stack}, number of uploads)`` of the stacked ``uploads``."""

    def from_total(self, total: State, count: int, phase: int) -> tuple[State, int]:
        """What the aggregator does to ``total``, the sum of ``count`` uploads computed
        elsewhere. The default refuses: it needs each upload."""
        raise ParameterError(
            f"aggregator {type(self).__name__} needs each upload; it cannot act on a sum "
            "computed elsewhere (takes_totals is False)"
        )

    def row(self) -> dict[str, Any]:
        """Columns added to every recorded row of the history (default: none; a private sum:
        its ``epsilon``)."""
        return {}

    def centre_of_points(
        self, rule: Any, manifold: Any, message: State, uploads: State, phase: int
    ) -> Any:
        """One point standing for the stacked point uploads of ``phase`` (key
        ``rule.point_uploads(phase)``), for an aggregator that does not sum. The default
        refuses."""
        raise ParameterError(
            f"aggregator {type(self).__name__} cannot aggregate point uploads; it acts on "
            "sum-only phases"
        )


class PlainSum(Aggregator):
    """The sum computed in the server's process, in the clear (the default)."""

    takes_totals = True

    def aggregate(self, uploads: State, phase: int) -> tuple[State, int]:
        count = int(next(iter(uploads.values())).shape[0]) if uploads else 0
        return {k: v.sum(0) for k, v in uploads.items()}, count

    def from_total(self, total: State, count: int, phase: int) -> tuple[State, int]:
        """A sum computed elsewhere (secure aggregation), unchanged."""
        return total, count


def check_aggregator(aggregator: Any) -> Aggregator:
    """``aggregator``, after a check that it is an :class:`Aggregator`."""
    if not isinstance(aggregator, Aggregator):
        raise ParameterError(
            f"aggregator must be an instance of riemfl.federated.aggregation.Aggregator (a "
            f"subclass implementing aggregate), got {type(aggregator).__name__}"
        )
    return aggregator


def check_aggregator_fits(rule: Any, aggregator: Aggregator) -> None:
    """Refuse an aggregator that does not sum (a robust one) for a rule with a phase that it
    cannot act on: one that needs each upload and does not declare point uploads
    (:meth:`~riemfl.federated.algorithm.SyncAlgorithm.point_uploads`).

    Raises
    ------
    ParameterError
        Naming the phase.
    """
    for phase in range(rule.n_phases):
        _check_phase(rule, aggregator, phase)


def _check_phase(rule: Any, aggregator: Aggregator, phase: int) -> None:
    if aggregator.sums or rule.sum_only(phase) or rule.point_uploads(phase) is not None:
        return
    raise ParameterError(
        f"aggregator {type(aggregator).__name__} acts on sum-only phases and on point uploads; "
        f"phase {phase} of {rule.name} needs each upload and uploads no point"
    )


def server_update(
    rule: Any,
    manifold: Any,
    server: State,
    phase: int,
    message: State,
    uploads: State,
    aggregator: Aggregator,
) -> State:
    """The new server state of ``phase``.

    * A sum-only phase: the rule's step from the aggregator's ``(total, count)``.
    * A phase of point uploads (the rule's ``point_uploads(phase)``) with an aggregator that
      does not sum (a robust one): the rule's step from one upload, the aggregator's
      :meth:`centre_of_points` of the stack.
    * Otherwise the rule's step from the stack of uploads.
    """
    if rule.sum_only(phase):
        total, count = aggregator.aggregate(uploads, phase)
        return rule.server_step_from_sum(manifold, server, phase, message, total, count)
    if aggregator.sums:
        return rule.server_step(manifold, server, phase, message, uploads)
    _check_phase(rule, aggregator, phase)
    key = rule.point_uploads(phase)
    centre = aggregator.centre_of_points(rule, manifold, message, uploads, phase)
    one = {k: v[:1] for k, v in uploads.items()}  # the other keys of the upload: first row
    one[key] = centre[None]
    return rule.server_step(manifold, server, phase, message, one)

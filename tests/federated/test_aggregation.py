"""Sum-only aggregation: declared per rule and phase, enforced by the engine, and the tangent
uploads of the tangent-space-mean rules equivalent to their point uploads."""

from __future__ import annotations

import numpy as np
import pytest

from riemfl.errors import ParameterError
from riemfl.federated import RFedAvg, RFedProj, RFedProx, RFedSVRG, RunOptions, run_sync
from riemfl.federated.aggregation import Aggregator, PlainSum, check_aggregator
from riemfl.federated.async_rules import FedAsync, FedBuff

TANGENT_RULES = [
    lambda upload: RFedAvg(0.02, 3, upload=upload),
    lambda upload: RFedProx(0.02, 3, mu=0.5, upload=upload),
    lambda upload: RFedSVRG(0.02, 3, upload=upload),
]


def test_each_rule_declares_which_phases_need_only_the_sum():
    assert RFedProj(0.1, 2).sum_only(0)
    assert not RFedAvg(0.1, 2).sum_only(0) and RFedAvg(0.1, 2, upload="tangent").sum_only(0)
    assert not RFedProx(0.1, 2).sum_only(0)
    svrg = RFedSVRG(0.1, 2)
    assert svrg.sum_only(0) and not svrg.sum_only(1)  # anchor gradients, then points
    assert RFedSVRG(0.1, 2, upload="tangent").sum_only(1)
    assert FedBuff().sum_only and not FedBuff(staleness_scaling=True).sum_only
    assert not FedAsync().sum_only
    assert isinstance(PlainSum(), Aggregator)


def test_an_aggregator_declares_its_optional_members_with_neutral_defaults():
    class SumOnly(Aggregator):
        def aggregate(self, uploads, phase):
            return PlainSum().aggregate(uploads, phase)

    plain = SumOnly()
    assert plain.row() == {} and not plain.takes_totals
    assert PlainSum().takes_totals
    assert PlainSum().from_total({"x": 1.0}, 2, 0) == ({"x": 1.0}, 2)
    with pytest.raises(TypeError):  # aggregate is abstract
        Aggregator()


def test_an_object_that_is_not_an_aggregator_is_refused_by_name():
    class Duck:
        def aggregate(self, uploads, phase):
            return uploads, 0

    with pytest.raises(ParameterError, match="Aggregator .*got Duck"):
        check_aggregator(Duck())


class Recording(Aggregator):
    """An aggregator that hands the server the sum and the count, and remembers what it saw."""

    def __init__(self, offset: float = 0.0) -> None:
        self.calls: list[tuple[int, int]] = []
        self.offset = offset

    def aggregate(self, uploads, phase):
        m = len(next(iter(uploads.values())))
        self.calls.append((phase, m))
        # summed in reverse order: the same sum up to rounding, computed elsewhere
        return {k: v[::-1].sum(0) + self.offset for k, v in uploads.items()}, m


def _no_stack_server_step(monkeypatch, algorithm):
    """Make the stacked server step fail for every sum-only phase of ``algorithm``."""
    stacked = type(algorithm).server_step

    def guarded(self, manifold, server, phase, message, uploads):
        if self.sum_only(phase):
            raise AssertionError(f"the server saw the stack of phase {phase}")
        return stacked(self, manifold, server, phase, message, uploads)

    monkeypatch.setattr(type(algorithm), "server_step", guarded)


SUM_ONLY = [
    lambda: RFedProj(0.02, 3),
    lambda: RFedAvg(0.02, 3, upload="tangent"),
    lambda: RFedSVRG(0.02, 3, upload="tangent"),
    lambda: RFedSVRG(0.02, 3),  # phase 0 only
]


@pytest.mark.parametrize("make", SUM_ONLY)
def test_sum_only_phases_see_only_the_aggregator_s_sum(stiefel_problem, monkeypatch, make):
    kw = {"options": RunOptions(seed=1), "clients_per_round": 4, "batch_size": 4}
    reference = run_sync(stiefel_problem, make(), 4, **kw)
    algorithm = make()
    _no_stack_server_step(monkeypatch, algorithm)
    seen = Recording()
    recorded = run_sync(stiefel_problem, algorithm, 4, aggregator=seen, **kw)
    sum_phases = [p for p in range(algorithm.n_phases) if algorithm.sum_only(p)]
    assert [p for p, _ in seen.calls] == sum_phases * 4 and all(m == 4 for _, m in seen.calls)
    np.testing.assert_allclose(recorded.final_point, reference.final_point, rtol=0, atol=1e-13)
    plain = run_sync(stiefel_problem, algorithm, 4, **kw)  # PlainSum: the stack is never seen
    np.testing.assert_array_equal(plain.final_point, reference.final_point)


def test_the_server_step_uses_what_the_aggregator_returns(stiefel_problem):
    """An aggregator that adds to the sum changes the iterates: the engine does not bypass it."""
    shifted = run_sync(
        stiefel_problem,
        RFedProj(0.02, 3),
        3,
        aggregator=Recording(1e-3),
        options=RunOptions(seed=1),
    )
    plain = run_sync(stiefel_problem, RFedProj(0.02, 3), 3, options=RunOptions(seed=1))
    assert np.max(np.abs(shifted.final_point - plain.final_point)) > 1e-6


@pytest.mark.parametrize("make", TANGENT_RULES)
@pytest.mark.parametrize("kw", [{}, {"clients_per_round": 4, "batch_size": 4}])
def test_tangent_uploads_give_the_point_uploads_run(stiefel_problem, make, kw):
    options = RunOptions(seed=2)
    point = run_sync(stiefel_problem, make("point"), 5, options=options, **kw)
    tangent = run_sync(stiefel_problem, make("tangent"), 5, options=options, **kw)
    np.testing.assert_allclose(tangent.final_point, point.final_point, rtol=0, atol=1e-12)
    np.testing.assert_allclose(tangent.loss, point.loss, rtol=1e-12)
    assert tangent.uplink_matrices == point.uplink_matrices  # one point-sized array per upload


def test_tangent_uploads_on_the_euclidean_space_are_fedavg(euclidean_problem):
    point = run_sync(euclidean_problem, RFedAvg(0.05, 2), 3, options=RunOptions(seed=0))
    tangent = run_sync(
        euclidean_problem, RFedAvg(0.05, 2, upload="tangent"), 3, options=RunOptions(seed=0)
    )
    np.testing.assert_allclose(tangent.final_point, point.final_point, rtol=0, atol=1e-14)


def test_an_unknown_upload_is_refused():
    with pytest.raises(ParameterError, match="upload must be one of"):
        RFedAvg(0.1, 2, upload="gradient")

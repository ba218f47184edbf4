"""Pre-aggregated replies: an executor that returns only the sum of a sum-only phase (what secure
aggregation gives the server) drives the same rounds as one that returns every upload."""

from __future__ import annotations

import numpy as np
import pytest
from _problems import round_steps

from riemfl.errors import ClientFailureError, ParameterError
from riemfl.federated import RFedAvg, RFedProj
from riemfl.federated.aggregation import Aggregator, PlainSum
from riemfl.federated.engine import StackedClients
from riemfl.federated.privacy import DPSettings, GaussianSum, privatize
from riemfl.federated.rounds import PhaseReply
from riemfl.testing import importorskip


class Summing:
    """Runs the phase on ``inner`` and returns only the sum of the uploads (plus ``offset``)."""

    def __init__(self, inner: StackedClients, offset: float = 0.0) -> None:
        self.inner, self.offset = inner, offset

    def run_phase(self, r, phase, message, active, batches):
        reply = self.inner.run_phase(r, phase, message, active, batches)
        total = {k: v.sum(0) + self.offset for k, v in reply.uploads.items()}
        return PhaseReply({}, reply.served, reply.reasons, reply.cpu_time, total=total)

    def accept(self, phase, active, kept):
        self.inner.accept(phase, active, kept)

    def finish(self, message, survivors):
        self.inner.finish(message, survivors)


def steps(problem, algorithm, wrap=lambda inner: inner, aggregator=None):
    return round_steps(problem, algorithm, 1, wrap, clients_per_round=4, aggregator=aggregator)


@pytest.mark.parametrize(
    "make", [lambda: RFedProj(0.02, 3), lambda: RFedAvg(0.02, 3, upload="tangent")]
)
def test_a_pre_aggregated_sum_gives_the_plain_rounds(stiefel_problem, make):
    plain, summed = steps(stiefel_problem, make()), steps(stiefel_problem, make(), Summing)
    for r in (1, 2, 3):
        plain.advance(r)
        summed.advance(r)
    np.testing.assert_allclose(summed.output(), plain.output(), rtol=0, atol=1e-13)
    assert summed.row()["participants"] == plain.row()["participants"] == 4
    for key in ("uplink_matrices", "uplink_bytes"):  # a sum counts as its contributors' rows
        assert summed.row()[key] == plain.row()[key] > 0


def test_a_non_finite_sum_drops_every_contributor(stiefel_problem):
    run = steps(stiefel_problem, RFedProj(0.02, 3), lambda inner: Summing(inner, np.nan))
    with pytest.warns(UserWarning), pytest.raises(ClientFailureError, match="aggregated sum"):
        run.advance(1)


def test_a_sum_is_refused_where_it_cannot_serve(stiefel_problem):
    point_uploads = steps(stiefel_problem, RFedAvg(0.02, 3), Summing)  # phase needs each upload
    with pytest.raises(ParameterError, match="needs each upload"):
        point_uploads.advance(1)

    class PerUpload(Aggregator):  # e.g. noise per upload: impossible on a sum it never sees
        def aggregate(self, uploads, phase):
            return PlainSum().aggregate(uploads, phase)

    noisy = steps(stiefel_problem, RFedProj(0.02, 3), Summing, aggregator=PerUpload())
    with pytest.raises(ParameterError, match="aggregator PerUpload .*takes_totals is False"):
        noisy.advance(1)
    inner = GaussianSum(DPSettings(1.0, 1.0), 8, 4, 0, inner=PerUpload())
    assert not inner.takes_totals  # noise on a sum needs an inner aggregator that takes one
    wrapped = steps(stiefel_problem, RFedProj(0.02, 3), Summing, aggregator=inner)
    with pytest.raises(ParameterError, match="aggregator GaussianSum .*takes_totals is False"):
        wrapped.advance(1)
    with pytest.raises(ParameterError, match="inner aggregator PerUpload needs each upload"):
        inner.from_total({"x": np.zeros(3)}, 1, 0)
    with pytest.raises(ParameterError, match="aggregator PerUpload needs each upload"):
        PerUpload().from_total({"x": np.zeros(3)}, 1, 0)


@pytest.mark.parametrize(
    "make", [lambda: RFedProj(0.02, 3), lambda: RFedAvg(0.02, 3, upload="tangent")]
)
def test_central_noise_on_a_pre_aggregated_sum_is_the_plain_paths(stiefel_problem, make):
    """GaussianSum.from_total: the same noise and accounting on a sum computed elsewhere."""
    importorskip("dp_accounting")  # the epsilon column
    n = stiefel_problem.n_clients
    runs = []
    for wrap in (lambda inner: inner, Summing):
        rule, aggregator = privatize(
            make(), DPSettings(0.05, 0.8), population=n, sample_size=4, seed=3
        )
        runs.append(steps(stiefel_problem, rule, wrap, aggregator))
    for r in (1, 2):
        for run in runs:
            run.advance(r)
    plain, summed = runs
    np.testing.assert_allclose(summed.output(), plain.output(), rtol=0, atol=1e-13)
    assert summed.row()["epsilon"] == plain.row()["epsilon"] < np.inf

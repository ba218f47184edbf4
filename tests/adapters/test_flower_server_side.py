"""Robust aggregators and server optimisers on the Flower synchronous path.

``SyncJob(aggregator=...)`` hands the aggregator to the ServerApp's round as
``run_sync(aggregator=...)`` does, and ``ServerOptimized(rule, optimizer)`` runs as a job's
algorithm (the nodes run the wrapped rule's client steps, the optimiser runs in the ServerApp).
Every case is compared with ``run_sync`` to 1e-10: the final iterate and every recorded column
but the clocks (the aggregator's own columns included).

Fast part (no Ray): the refusals, which need no Flower run, and on the in-process grid of
``test_flower_secagg`` (real ClientApps called in this process) every case, a CenteredClipping
job and a ServerAdam job interrupted and resumed from their checkpoints, and the fingerprint.
Slow part: every case in one Flower simulation (one Ray start, 15 to 19 s on a 2-core machine;
the whole module about 20 s).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'riemfl[flower]')")

from riemfl.adapters.flower import (  # noqa: E402
    NotSumOnlyError,
    SecAggSettings,
    SyncJob,
    make_client_app,
    simulate,
)
from riemfl.adapters.flower.simulation import _with_timeouts  # noqa: E402
from riemfl.adapters.flower.sync_server import run_sync_job  # noqa: E402
from test_flower_secagg import (  # noqa: E402
    KPCA,
    NODES,
    InProcessGrid,
    task_identity,  # noqa: F401 - a fixture
)

from riemfl.errors import CheckpointMismatchError, ParameterError  # noqa: E402
from riemfl.federated import RFedAvg, RFedProj, RFedSVRG, RunOptions, run_sync  # noqa: E402
from riemfl.federated.aggregation import PlainSum  # noqa: E402
from riemfl.federated.attacks import Byzantine  # noqa: E402
from riemfl.federated.interrupt import RunInterrupted, request_interrupt  # noqa: E402
from riemfl.federated.privacy import DPSettings  # noqa: E402
from riemfl.federated.robust import (  # noqa: E402
    CenteredClipping,
    GeometricMedian,
    Krum,
    MultiKrum,
    TrimmedMean,
)
from riemfl.federated.server_optimized import ServerOptimized  # noqa: E402
from riemfl.federated.server_optimizers import (  # noqa: E402
    ServerAdagrad,
    ServerAdam,
    ServerSGD,
    ServerYogi,
)

ETA = 4e-3
STEPS = 3
TAU = 0.01  # CenteredClipping's radius: small enough to clip these uploads


def tangent():
    return RFedAvg(ETA, 2, upload="tangent")


def proj():
    return RFedProj(ETA, 2)


#: name -> (algorithm, aggregator or None, job settings); factories, so that every run starts
#: from fresh objects (an aggregator and an optimiser have run state)
CASES = {
    "median": (tangent, GeometricMedian, {}),
    "trimmed": (proj, lambda: TrimmedMean(0.2), {"batch_size": 5}),
    "krum": (tangent, lambda: Krum(1), {"clients_per_round": 5}),
    "median-points": (lambda: RFedAvg(ETA, 2), GeometricMedian, {}),
    "krum-geodesic": (
        lambda: RFedAvg(ETA, 2, operators="exact"),
        lambda: Krum(1, geometry="geodesic"),
        {},
    ),
    "multikrum": (proj, lambda: MultiKrum(1), {}),
    "clipping": (tangent, lambda: CenteredClipping(TAU), {"clients_per_round": 5}),
    "clipping-proj": (proj, lambda: CenteredClipping(TAU), {}),
    "clipping-svrg": (
        lambda: RFedSVRG(ETA, 2, upload="tangent"),
        lambda: CenteredClipping(TAU),
        {"batch_size": 5},
    ),
    "sgd-momentum": (
        lambda: ServerOptimized(tangent(), ServerSGD(1.0, momentum=0.9)),
        lambda: None,
        {"clients_per_round": 4},
    ),
    "adam": (lambda: ServerOptimized(proj(), ServerAdam(0.01)), lambda: None, {}),
    "yogi": (lambda: ServerOptimized(tangent(), ServerYogi(0.01)), lambda: None, {}),
    "adagrad": (
        lambda: ServerOptimized(proj(), ServerAdagrad(0.01)),
        lambda: None,
        {"batch_size": 5},
    ),
    "adam-median": (lambda: ServerOptimized(tangent(), ServerAdam(0.01)), GeometricMedian, {}),
}
#: the aggregators' own History columns
AGGREGATOR_COLUMNS = ("median_iterations", "trimmed", "krum_selected", "krum_dropped", "clipped")


def job_of(name: str, **changes) -> SyncJob:
    """The job of case ``name``, seed 2, with ``changes`` to its fields."""
    algorithm, aggregator, settings = CASES[name]
    fields = {"name": name, "aggregator": aggregator(), "options": RunOptions(seed=2)}
    return SyncJob(KPCA, algorithm(), STEPS, **{**fields, **settings, **changes})


def reference(name: str, *, aggregator: bool = True):
    """``run_sync`` of case ``name`` (without its aggregator: the plain mean)."""
    algorithm, make, settings = CASES[name]
    return run_sync(
        KPCA.build(),
        algorithm(),
        STEPS,
        aggregator=make() if aggregator else None,
        options=RunOptions(seed=2),
        **settings,
    )


def in_process(job: SyncJob):
    return run_sync_job(InProcessGrid(make_client_app([job])), job, range(NODES))


def check_equals_run_sync(history, name: str) -> None:
    """The final iterate and every recorded column but the clocks are run_sync's to 1e-10."""
    local = reference(name)
    np.testing.assert_allclose(history.final_point, local.final_point, rtol=0, atol=1e-10)
    clocks = ("wall_time", "cpu_time", "time")
    mine = {k: v for k, v in history.metrics.items() if k not in clocks}
    theirs = {k: v for k, v in local.metrics.items() if k not in clocks}
    assert sorted(mine) == sorted(theirs)
    for key, column in theirs.items():
        np.testing.assert_allclose(mine[key], column, rtol=0, atol=1e-10, err_msg=key)
    assert history.round == list(range(STEPS + 1))
    assert history.warnings == local.warnings == []
    assert history.config["algorithm"] == local.config["algorithm"]
    assert history.config.get("aggregator") == local.config.get("aggregator")
    assert history.config["engine"] == "flower"
    if CASES[name][1]() is not None:
        assert any(c in mine for c in AGGREGATOR_COLUMNS)
        plain = reference(name, aggregator=False)  # the aggregator changed the run
        assert np.abs(history.final_point - plain.final_point).max() > 1e-6


# ------------------------------------------------------------------ refusals (no Flower run)
@pytest.mark.parametrize("make", [GeometricMedian, lambda: Krum(1), lambda: CenteredClipping(TAU)])
def test_secure_aggregation_refuses_a_robust_aggregator_at_construction(make):
    with pytest.raises(NotSumOnlyError, match="needs each upload") as caught:
        SyncJob(KPCA, tangent(), 2, secagg=True, aggregator=make())
    assert isinstance(caught.value, ParameterError)
    assert "only the sum" in str(caught.value)


def test_simulate_secagg_refuses_a_robust_job_before_starting_flower():
    """``simulate(secagg=True)`` rebuilds every job with it before anything starts."""
    job = SyncJob(KPCA, proj(), 2, aggregator=TrimmedMean(0.2))
    with pytest.raises(NotSumOnlyError, match="TrimmedMean"):
        _with_timeouts([job], secagg=True)


def test_secure_aggregation_takes_an_aggregator_that_acts_on_a_sum():
    job = SyncJob(KPCA, proj(), 2, secagg=SecAggSettings(), aggregator=PlainSum())
    assert isinstance(job.aggregator, PlainSum) and job.secagg is not None


@pytest.mark.parametrize("bad", ["median", GeometricMedian, lambda uploads, phase: uploads])
def test_a_non_aggregator_is_refused(bad):
    with pytest.raises(ParameterError, match="aggregator must be an instance of"):
        SyncJob(KPCA, tangent(), 2, aggregator=bad)


def test_privacy_refuses_an_aggregator_that_does_not_sum():
    with pytest.raises(ParameterError, match="does not return their sum"):
        SyncJob(KPCA, proj(), 2, privacy=DPSettings(0.02, 0.7), aggregator=MultiKrum(1))
    job = SyncJob(KPCA, proj(), 2, privacy=DPSettings(0.02, 0.7), aggregator=PlainSum())
    assert isinstance(job.aggregator, PlainSum)


def test_a_copy_of_the_job_keeps_its_aggregator():
    job = job_of("clipping")
    copy = dataclasses.replace(job, name="again")
    assert copy.aggregator is job.aggregator


# ------------------------------------------------------------------ in-process grid (no Ray)
@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("name", list(CASES))
def test_on_the_in_process_grid_every_case_is_run_syncs(name):
    job = job_of(name)
    check_equals_run_sync(in_process(job), name)
    if isinstance(job.aggregator, CenteredClipping):  # each run advances a copy
        assert job.aggregator.centres == {}


@pytest.mark.usefixtures("task_identity")
def test_a_private_job_with_a_summing_inner_aggregator_is_run_syncs():
    settings = DPSettings(0.02, 0.7)
    job = SyncJob(
        KPCA, proj(), 2, privacy=settings, aggregator=PlainSum(), options=RunOptions(seed=2)
    )
    history = in_process(job)
    local = run_sync(
        KPCA.build(),
        proj(),
        2,
        privacy=settings,
        aggregator=PlainSum(),
        options=RunOptions(seed=2),
    )
    np.testing.assert_allclose(history.final_point, local.final_point, rtol=0, atol=1e-10)
    assert history.metrics["epsilon"] == local.metrics["epsilon"]
    assert history.summary["epsilon"] < math.inf


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("name", ["clipping", "adam"])
def test_an_interrupted_job_resumes_with_the_server_sides_state(tmp_path, name):
    """The checkpoint holds CenteredClipping's previous centres, ServerAdam's moments: the
    resumed job (fresh nodes, a fresh aggregator and rule) finishes as run_sync's uninterrupted
    run, column for column; the checkpoint refuses a job with another aggregator."""
    fired: list[int] = []

    def stop_at_2(step, history):
        if step == 2 and not fired:
            fired.append(step)
            request_interrupt()

    path = tmp_path / f"{name}.ckpt"
    stopped = RunOptions(seed=2, checkpoint=path, checkpoint_every=1, on_step=stop_at_2)
    with pytest.raises(RunInterrupted):
        in_process(job_of(name, options=stopped))
    assert fired == [2]
    history = in_process(job_of(name, options=stopped))
    check_equals_run_sync(history, name)
    if name == "clipping":
        assert max(history.metrics["clipped"][1:]) > 0  # the centre carried over mattered

    other = RunOptions(seed=2, checkpoint=path, checkpoint_every=1)
    with pytest.raises(CheckpointMismatchError, match="aggregator"):
        in_process(job_of(name, aggregator=CenteredClipping(2 * TAU), options=other))


# ------------------------------------------------------------------ Flower's simulation engine
@pytest.fixture(scope="module")
def simulated():
    """Every case in one simulation (one Ray start)."""
    pytest.importorskip("ray", reason="Flower's simulation engine needs Ray (flwr[simulation])")
    return simulate([job_of(name) for name in CASES], NODES)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_in_flowers_simulation_every_case_is_run_syncs(simulated, name):
    check_equals_run_sync(simulated[name], name)


# ------------------------------------------------------------------ attacks on the grid
@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize(("attack", "make"), [("alie", GeometricMedian), ("sign-flip", None)])
def test_a_job_with_attackers_equals_run_sync(attack, make):
    """The same attackers forge the same uploads on the grid as in run_sync."""
    byzantine = Byzantine(0.25, attack)
    aggregator = None if make is None else make()
    job = SyncJob(
        KPCA,
        tangent(),
        STEPS,
        name="attacked",
        aggregator=aggregator,
        byzantine=byzantine,
        options=RunOptions(seed=2),
    )
    history = in_process(job)
    local = run_sync(
        KPCA.build(),
        tangent(),
        STEPS,
        aggregator=None if make is None else make(),
        byzantine=byzantine,
        options=RunOptions(seed=2),
    )
    np.testing.assert_allclose(history.final_point, local.final_point, rtol=0, atol=1e-10)
    assert history.config["byzantine"] == local.config["byzantine"]
    assert history.metrics["attacked"] == local.metrics["attacked"]
    assert max(history.metrics["attacked"]) > 0


def test_attackers_are_refused_under_secure_aggregation():
    with pytest.raises(ParameterError, match="sees only their sum"):
        SyncJob(KPCA, tangent(), STEPS, secagg=True, byzantine=Byzantine(0.25))

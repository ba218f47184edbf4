"""One options object for every engine, the named seed streams, and checkpoints written before
both existed."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from riemfl.errors import CheckpointMismatchError, ParameterError
from riemfl.federated import (
    FedBuff,
    ProblemTrainer,
    RFedProj,
    RunOptions,
    SeedStreams,
    run_async,
    run_sync,
)
from riemfl.federated.seeds import ASYNC_STREAMS, SYNC_STREAMS
from riemfl.nn.floral import run_floral
from riemfl.problems import KPCAProblem
from tests.federated.test_checkpoint_consistency import _crafted

OPTION_NAMES = {f.name for f in dataclasses.fields(RunOptions)}


def _problem():
    return KPCAProblem.synthetic(n_clients=4, d=6, k=2, p=8, seed=2)


def _entry_points():
    flower = pytest.importorskip("riemfl.adapters.flower")
    return {
        "run_sync": run_sync,
        "run_async": run_async,
        "run_floral": run_floral,
        "SyncJob": flower.SyncJob,
        "AsyncJob": flower.AsyncJob,
    }


# ------------------------------------------------------------------------ the options object
def test_no_entry_point_redeclares_a_run_option():
    for name, entry in _entry_points().items():
        parameters = set(inspect.signature(entry).parameters)
        assert "options" in parameters and "steps" in parameters, name
        assert not parameters & OPTION_NAMES, f"{name} re-declares {parameters & OPTION_NAMES}"
        # the old names of the same ideas are gone
        old = {"rounds", "server_steps", "eval_every", "on_round", "seed"}
        assert not parameters & old, f"{name} still takes {parameters & old}"


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("seed", -1, "seed must be an integer >= 0"),
        ("seed", 1.5, "seed must be an integer >= 0"),
        ("seed", True, "seed must be an integer >= 0"),
        ("record_every", 0, "record_every must be an integer >= 1"),
        ("checkpoint_every", 0, "checkpoint_every must be an integer >= 1"),
        ("on_step", 3, "on_step must be callable"),
    ],
)
def test_bad_options_are_refused_naming_the_field(field, value, expected):
    with pytest.raises(ParameterError, match=expected):
        RunOptions(**{field: value})


def test_options_are_frozen_and_label_defaults_to_the_engines():
    options = RunOptions(seed=np.int64(3))
    assert options.seed == 3 and type(options.seed) is int
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.seed = 4  # type: ignore[misc]
    assert options.label("RFedProj on kPCA") == "RFedProj on kPCA"
    assert RunOptions(desc="mine").label("RFedProj on kPCA") == "mine"


def test_one_options_object_serves_the_sync_and_async_engines(tmp_path):
    problem, calls = _problem(), []
    options = RunOptions(seed=5, record_every=2, on_step=lambda step, h: calls.append(step))
    sync = run_sync(problem, RFedProj(1e-2, 2), 4, options=options)
    assert sync.round == [0, 2, 4] and sync.config["seed"] == 5 and sync.config["steps"] == 4
    trainer = ProblemTrainer(problem, 1e-2, 2)
    asynchronous = run_async(trainer, FedBuff(2), 4, options=options)
    assert asynchronous.metrics["step"] == [0, 2, 4] and asynchronous.config["seed"] == 5
    assert calls == [1, 2, 3, 4, 1, 2, 3, 4]


def test_record_every_none_records_the_first_and_last_rows_evaluated():
    trainer = ProblemTrainer(_problem(), 1e-2, 2)
    h = run_async(trainer, FedBuff(2), 5, options=RunOptions(record_every=None))
    assert h.metrics["step"] == [0, 5]
    assert np.all(np.isfinite(h.metrics["grad_norm"]))


def test_the_seed_of_the_options_is_the_runs_seed():
    problem = _problem()
    a = run_sync(problem, RFedProj(1e-2, 2), 3, options=RunOptions(seed=1), clients_per_round=2)
    b = run_sync(problem, RFedProj(1e-2, 2), 3, options=RunOptions(seed=1), clients_per_round=2)
    c = run_sync(problem, RFedProj(1e-2, 2), 3, options=RunOptions(seed=2), clients_per_round=2)
    assert np.array_equal(a.final_point, b.final_point)
    assert not np.array_equal(a.final_point, c.final_point)


def test_flower_jobs_take_the_options_unchanged(tmp_path):
    flower = pytest.importorskip("riemfl.adapters.flower")
    problem, options = _problem(), RunOptions(seed=7, record_every=3)
    job = flower.SyncJob(problem, RFedProj(1e-2, 2), 4, options=options)
    assert job.options is options
    saved = RunOptions(checkpoint=tmp_path / "job.ckpt", checkpoint_every=2, resume=True)
    assert flower.SyncJob(problem, RFedProj(1e-2, 2), 4, options=saved).options is saved
    assert flower.AsyncJob(problem, FedBuff(2), 4, 1e-2, options=saved).options is saved
    with pytest.raises(ParameterError, match="options must be a riemfl.federated.RunOptions"):
        flower.AsyncJob(problem, FedBuff(2), 4, 1e-2, options={"seed": 1})


# ---------------------------------------------------------------------------- seed streams
def test_the_streams_are_the_children_the_engines_have_always_drawn():
    # the contract: reproduced numbers and checkpoints depend on these indices
    assert SYNC_STREAMS == {
        "initial_point": 0,
        "rounds": 1,
        "central_noise": 2,
        "local_noise": 3,
        "byzantine": 4,
    }
    assert ASYNC_STREAMS == {
        "initial_point": 0,
        "timing": 1,
        "scheduler": 2,
        "clients": 3,
        "rule": 4,
    }


@given(st.integers(0, 2**32), st.sampled_from(sorted(SYNC_STREAMS)))
def test_a_stream_is_the_seed_sequences_child_of_its_index(seed, name):
    expected = np.random.SeedSequence(seed).spawn(8)[SYNC_STREAMS[name]]
    got = SeedStreams(seed).sequence(name)
    assert got.spawn_key == expected.spawn_key and got.entropy == expected.entropy
    assert np.array_equal(got.generate_state(4), expected.generate_state(4))


def test_per_client_generators_are_the_grandchildren_of_the_clients_stream():
    streams = SeedStreams(11, "async")
    old = np.random.SeedSequence(11).spawn(4)[3].spawn(3)
    for rng, seq in zip(streams.per_client("clients", 3), old, strict=True):
        assert rng.integers(1 << 30) == np.random.default_rng(seq).integers(1 << 30)


def test_unknown_streams_and_layouts_are_refused():
    with pytest.raises(ParameterError, match="sync runs have no stream 'timing'"):
        SeedStreams(0).sequence("timing")
    with pytest.raises(ParameterError, match="layout must be one of"):
        SeedStreams(0, "floral")
    with pytest.raises(ParameterError, match="seed must be an integer >= 0"):
        SeedStreams(-3)


# ------------------------------------------------------------- checkpoints of an older riemfl
def test_a_checkpoint_written_before_the_options_object_is_refused_clearly(tmp_path):
    path = tmp_path / "run.rfl"
    problem = _problem()
    options = RunOptions(seed=3, checkpoint=path, checkpoint_every=2)
    run_sync(problem, RFedProj(1e-2, 2), 2, options=options)

    def as_before(payload, history):  # the fingerprint an engine wrote before RunOptions
        del payload["fingerprint"]["record_every"]

    _crafted(path, as_before)
    with pytest.raises(CheckpointMismatchError, match="one RunOptions") as raised:
        run_sync(problem, RFedProj(1e-2, 2), 4, options=options)
    assert "resume=False" in str(raised.value)
    # and resume=False starts afresh over it
    fresh = run_sync(
        problem, RFedProj(1e-2, 2), 4, options=dataclasses.replace(options, resume=False)
    )
    assert fresh.round[-1] == 4

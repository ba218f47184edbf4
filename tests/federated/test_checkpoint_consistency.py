"""Checkpoints that are consistent, not only intact; the asynchronous fingerprint; a kill inside
the first checkpoint write; one fault policy on every engine.

A checkpoint edited by hand (or by a writer bug) keeps a valid chain hash when it is rewritten
with the checkpoint module's own writer (:meth:`CheckpointFile.write`): these tests make such
files and check that each inconsistency is refused with a :class:`CheckpointError` that names the
field, what it held and what was expected.
"""

from __future__ import annotations

import math
import signal
import subprocess
import sys

import numpy as np
import pytest
from _problems import FaultyTrainer, QuadraticProblem

import riemfl
from riemfl.errors import CheckpointError, CheckpointMismatchError
from riemfl.federated import (
    ClientDroppedWarning,
    ExponentialTime,
    FedBuff,
    History,
    ProblemTrainer,
    RFedProj,
    RunOptions,
    TraceTime,
    run_async,
    run_sync,
)
from riemfl.federated import checkpoint as checkpoint_module
from riemfl.federated.checkpoint import CheckpointFile

pytestmark = pytest.mark.filterwarnings("ignore::riemfl.federated.ClientDroppedWarning")


# ----------------------------------------------------------------------------- helpers
def _crafted(path, edit):
    """Rewrite the checkpoint at ``path`` after ``edit(payload, history)``, with valid hashes:
    ``history`` holds the rows of the file's entries and is written back as one entry."""
    payload, entries = CheckpointFile(path).load()
    history = History(log={})
    for part in entries:
        history.extend(part)
    edit(payload, history)
    payload["history"]["lengths"] = history.mark()
    CheckpointFile(path).write(payload, [history.since(None)])


def _drop_row(history, k):
    for column in history.metrics.values():
        del column[k]


def _stiefel():
    return QuadraticProblem(riemfl.Stiefel(7, 3), n=6, p=8, seed=1)


def _sync(path, rounds):
    return run_sync(
        _stiefel(),
        RFedProj(0.02, 3),
        rounds,
        options=RunOptions(checkpoint=path, checkpoint_every=2),
    )


def _async_trainer(step_size=0.05, local_steps=3, batch_size=3):
    problem = QuadraticProblem(riemfl.Euclidean(5, 2), n=5, p=6, seed=2, linear=1.0)
    return ProblemTrainer(problem, step_size, local_steps, batch_size=batch_size)


ASYNC_TIMING = ExponentialTime([0.2, 0.5, 1.0, 2.0, 4.0])


def _async(path, steps, trainer=None, timing=ASYNC_TIMING, **options):
    """FedBuff for ``steps`` server steps, checkpointed at ``path``; ``options`` are
    :class:`RunOptions` fields over seed 4 and a checkpoint every 3 steps."""
    trainer = _async_trainer() if trainer is None else trainer
    options = RunOptions(**{"seed": 4, "checkpoint": path, "checkpoint_every": 3, **options})
    return run_async(trainer, FedBuff(buffer_size=3), steps, timing=timing, options=options)


def _set(*keys_value):
    """An edit that sets ``payload[k0][k1]...[kn] = value``."""
    *keys, last, value = keys_value

    def edit(payload, history):
        target = payload
        for key in keys:
            target = target[key]
        target[last] = value

    return edit


# ----------------------------------------------------------------------------- synchronous
SYNC_EDITS = {
    "negative-step": (_set("step", -1), ["'step'", "-1", ">= 0"]),
    "step-behind-the-state": (_set("step", 5), ["'round'", "6", "5"]),
    "round-ahead-of-step": (_set("state", "round", 9), ["'round'", "9", "6"]),
    "row-missing": (lambda p, h: _drop_row(h, 3), ["history", "round 3", "[0, 1, 2, 4, 5, 6]"]),
    "negative-uplink": (
        _set("state", "totals", "uplink_bytes", -1.0),
        ["'totals.uplink_bytes'", "-1.0", ">= 0"],
    ),
    "negative-participants": (_set("state", "participants", -1), ["'participants'", "-1"]),
    "nan-cpu-clock": (_set("state", "totals", "cpu_time", math.nan), ["'totals.cpu_time'", "nan"]),
    "nan-wall-clock": (_set("wall", math.nan), ["'wall'", "nan", "finite"]),
}


@pytest.mark.parametrize("case", sorted(SYNC_EDITS))
def test_an_inconsistent_sync_checkpoint_is_refused_naming_the_field(tmp_path, case):
    edit, words = SYNC_EDITS[case]
    path = tmp_path / "run.ckpt"
    _sync(path, 6)
    _crafted(path, edit)
    with pytest.raises(CheckpointError) as info:
        _sync(path, 8)
    message = str(info.value)
    assert str(path) in message
    for word in words:
        assert word in message, message


def test_an_unedited_checkpoint_still_resumes(tmp_path):
    """The checks accept what the writer writes: an extended run and a resumed one agree."""
    path = tmp_path / "run.ckpt"
    _sync(path, 5)
    _crafted(path, lambda p, h: None)  # rewritten as one entry: still consistent
    assert _sync(path, 8).same_results(_sync(tmp_path / "ref.ckpt", 8))


# ----------------------------------------------------------------------------- asynchronous
def _first_event(index, value):
    def edit(payload, history):
        heap = payload["state"]["heap"]
        first = min(range(len(heap)), key=lambda k: heap[k][:2])  # the next arrival
        heap[first][index] = value

    return edit


ASYNC_EDITS = {
    "negative-step": (_set("step", -2), ["'step'", "-2", ">= 0"]),
    "step-behind-the-state": (_set("step", 4), ["'store.current'", "6", "4"]),
    "negative-updates": (
        _set("state", "counters", "updates", -5),
        ["'counters.updates'", "-5", ">= 0"],
    ),
    "negative-dropped": (
        _set("state", "counters", "dropped", -1),
        ["'counters.dropped'", "-1", ">= 0"],
    ),
    "nan-clock": (_set("state", "now", math.nan), ["'now'", "nan", "finite"]),
    "event-of-client-999": (_first_event(2, 999), ["client of state key 'heap'", "999", "0..4"]),
    "event-of-unknown-version": (
        _first_event(3, 999),
        ["model version of state key 'heap'", "999", "stored model version"],
    ),
    "unknown-current-version": (
        _set("state", "store", "current", 999),
        ["'store.current'", "999", "stored"],
    ),
    "row-missing": (lambda p, h: _drop_row(h, 2), ["history", "step 2"]),
    "exhausted-not-a-bool": (_set("exhausted", 1), ["'exhausted'", "must be bool", "int 1"]),
}


@pytest.mark.parametrize("case", sorted(ASYNC_EDITS))
def test_an_inconsistent_async_checkpoint_is_refused_naming_the_field(tmp_path, case):
    edit, words = ASYNC_EDITS[case]
    path = tmp_path / "async.ckpt"
    _async(path, 6)
    assert CheckpointFile(path).load()[0]["state"]["heap"]  # clients in flight at the save
    _crafted(path, edit)
    with pytest.raises(CheckpointError) as info:
        _async(path, 10)
    message = str(info.value)
    for word in words:
        assert word in message, message


def _trace():
    return TraceTime([[0.3, 1.1, 0.7], [2.0, 0.5], [1.3], [0.9, 0.4, 1.7, 0.2], [0.6, 3.0]])


def _position(client, value):
    return _set("state", "timing", "position", client, value)


def _shifted(client):
    def edit(payload, history):
        position = payload["state"]["timing"]["position"]
        position[client] = (position[client] + 1) % len(_trace().traces[client])

    return edit


TRACE_EDITS = {
    "beyond-its-trace": (_position(1, 2), ["TraceTime", "'position'", "[0, 2", "entry 1 in 0..1"]),
    "negative": (_position(0, -1), ["TraceTime", "'position'", "[-1, ", "ints in [0, 3]"]),
    "not-the-draws": (_shifted(3), ["'timing.position' entry 3", "durations drawn for client 3"]),
    "missing": (
        lambda p, h: p["state"].pop("timing"),
        ["TraceTime", "'position' is missing"],
    ),
}


@pytest.mark.parametrize("case", sorted(TRACE_EDITS))
def test_an_inconsistent_trace_position_is_refused_naming_the_field(tmp_path, case):
    """TraceTime's positions are checkpointed run state, checked like the rest."""
    edit, words = TRACE_EDITS[case]
    path = tmp_path / "async.ckpt"
    _async(path, 6, timing=_trace())
    assert CheckpointFile(path).load()[0]["state"]["timing"]["position"] != [0] * 5
    _crafted(path, lambda p, h: None)
    assert _async(path, 7, timing=_trace()).step[-1] == 7  # unedited: resumed
    _async(path, 6, timing=_trace(), resume=False)
    _crafted(path, edit)
    with pytest.raises(CheckpointError) as info:
        _async(path, 10, timing=_trace())
    message = str(info.value)
    for word in words:
        assert word in message, message


# ----------------------------------------------------------------------------- fingerprints
@pytest.mark.parametrize(
    "setting, other",
    [("step_size", {"step_size": 0.1}), ("local_steps", {"local_steps": 2}), ("batch_size", {})],
)
def test_an_async_checkpoint_of_another_local_training_is_refused(tmp_path, setting, other):
    path = tmp_path / "async.ckpt"
    _async(path, 4)
    trainer = _async_trainer(**({"batch_size": None} if setting == "batch_size" else other))
    with pytest.raises(CheckpointMismatchError, match="another run") as info:
        _async(path, 8, trainer)
    assert setting in info.value.differences


def test_a_setting_new_since_the_checkpoint_is_named_even_when_none(tmp_path):
    """A trainer whose description gained a key (here set to None) is another run; the message
    names the key as missing in the checkpoint."""

    path = tmp_path / "async.ckpt"
    _async(path, 4)
    trainer = _async_trainer()
    trainer.augment = None  # a public setting: part of the trainer's fingerprint
    with pytest.raises(CheckpointMismatchError, match="augment: missing there, None here"):
        _async(path, 8, trainer)


def test_an_async_checkpoint_of_another_evaluation_cadence_is_refused(tmp_path):
    path = tmp_path / "async.ckpt"
    _async(path, 4, record_every=2)
    with pytest.raises(CheckpointMismatchError, match="record_every"):
        _async(path, 8, record_every=1)


def test_the_same_trainer_settings_resume(tmp_path):
    """A trainer built anew with the same settings is the same local training."""
    path = tmp_path / "async.ckpt"
    _async(path, 4)
    resumed = _async(path, 9, _async_trainer())
    assert resumed.same_results(_async(tmp_path / "ref.ckpt", 9))


# ----------------------------------------------------------------------------- one fault policy
def test_async_drops_a_float32_upload_to_a_float64_model_as_sync_does():
    trainer = FaultyTrainer(_async_trainer(), bad={2}, mode="float32")
    with pytest.warns(ClientDroppedWarning, match="dtype float32; expected float64"):
        h = run_async(
            trainer,
            FedBuff(buffer_size=3),
            6,
            timing=ASYNC_TIMING,
            max_failures=None,
            options=RunOptions(seed=4),
        )
    applied = np.array(h.log["applied"])
    clients = np.array(h.log["client"])
    assert clients[clients == 2].size > 0 and not applied[clients == 2].any()
    assert applied[clients != 2].all()
    assert h.metrics["dropped"][-1] == (clients == 2).sum()
    assert {w["client"] for w in h.warnings} == {2}


# ----------------------------------------------------------------------------- first write
def _dead_pid():
    """The id of a process that has ended."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def _leftover_temporary(path):
    """What a writer killed inside the first checkpoint write leaves: only its temporary file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = checkpoint_module._temporary_path(path, _dead_pid())
    tmp.write_bytes(b"RIEMFL-CHECKPOINT 3\n" + bytes(100))
    return tmp


def test_the_api_starts_afresh_beside_a_leftover_temporary_file(tmp_path):
    path = tmp_path / "run" / "run.ckpt"
    tmp = _leftover_temporary(path)
    h = _sync(path, 4)
    assert not tmp.exists() and sorted(p.name for p in path.parent.iterdir()) == ["run.ckpt"]
    assert h.same_results(_sync(tmp_path / "ref.ckpt", 4))


CLI_RUN = ["run", "kpca-synthetic", "--algorithm", "rfedavg", "--steps", "3", "--no-progress"]


def _cli_history(out):
    h = History.from_json(out / "history.json")
    h.config.pop("command")
    return h


def test_the_cli_starts_afresh_in_a_folder_holding_only_a_leftover_temporary_file(tmp_path):
    pytest.importorskip("matplotlib")
    from riemfl.cli import CHECKPOINT_NAME, main

    out = tmp_path / "run"
    tmp = _leftover_temporary(out / CHECKPOINT_NAME)
    assert main([*CLI_RUN, "--out", str(out)]) == 0
    assert not tmp.exists() and (out / CHECKPOINT_NAME).exists()
    assert main([*CLI_RUN, "--out", str(tmp_path / "ref")]) == 0
    assert _cli_history(out).same_results(_cli_history(tmp_path / "ref"))


KILLED_IN_FIRST_WRITE = """
import os, signal, sys
from riemfl.cli import main
os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # the first write's fsync
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_cli_run_killed_inside_its_first_checkpoint_write_starts_afresh(tmp_path):
    pytest.importorskip("matplotlib")
    from riemfl.cli import CHECKPOINT_NAME, main

    out = tmp_path / "run"
    argv = [*CLI_RUN, "--out", str(out)]
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_IN_FIRST_WRITE, *argv], capture_output=True, timeout=300
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    left = [p.name for p in out.iterdir()]
    assert len(left) == 1 and left[0].startswith(CHECKPOINT_NAME + ".") and left[0].endswith(".tmp")
    assert main(argv) == 0  # the same command
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [CHECKPOINT_NAME, "history.csv", "history.json", "history.png"]
    )
    assert main([*CLI_RUN, "--out", str(tmp_path / "ref")]) == 0
    assert _cli_history(out).same_results(_cli_history(tmp_path / "ref"))


def test_the_cli_refuses_an_async_checkpoint_of_another_local_training(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from riemfl.cli import main

    out = tmp_path / "run"
    argv = ["run", "kpca-synthetic", "--engine", "async", "--algorithm", "fedbuff", "--steps",
            "3", "--record-every", "1", "--no-progress", "--out", str(out)]  # fmt: skip
    assert main([*argv, "--step-size", "1e-3"]) == 0
    capsys.readouterr()
    assert main([*argv, "--step-size", "2e-3"]) == 2
    err = capsys.readouterr().err
    assert "checkpoint of another run" in err and "step_size" in err, err
    assert main([*argv, "--step-size", "1e-3", "--record-every", "2"]) == 2
    assert "record_every" in capsys.readouterr().err


# ----------------------------------------------------------------------------- FLoRAL
def _floral_trainer(lr=0.1):
    torch = pytest.importorskip("torch")
    from riemfl.nn.floral import FloralTrainer, floralize, synthetic_linear

    task = synthetic_linear(n_clients=4, seed=0)
    torch.manual_seed(0)
    model = floralize(torch.nn.Sequential(torch.nn.Linear(10, 3)), 2, rank=1, seed=0)
    return FloralTrainer(
        model, task.clients, loss="mse", lr=lr, batch_size=4, clusters=task.clusters
    )


def _floral(path, rounds, **options):
    """``rounds`` FLoRAL rounds, checkpointed at ``path``; ``options`` are :class:`RunOptions`
    fields over seed 1 and a checkpoint every 2 rounds."""
    from riemfl.nn.floral import run_floral

    options = RunOptions(**{"checkpoint": path, "checkpoint_every": 2, "seed": 1, **options})
    return run_floral(_floral_trainer(), rounds, options=options)


@pytest.mark.parametrize(
    "edit, words",
    [
        (_set("state", "round", 7), ["'round'", "7", "4"]),
        (_set("state", "totals", "uplink_floats", -3.0), ["'totals.uplink_floats'", "-3.0"]),
        (lambda p, h: _drop_row(h, 1), ["history", "round 1"]),
    ],
    ids=["round-ahead-of-step", "negative-uplink", "row-missing"],
)
def test_an_inconsistent_floral_checkpoint_is_refused_naming_the_field(tmp_path, edit, words):
    path = tmp_path / "floral.ckpt"
    _floral(path, 4)
    _crafted(path, edit)
    with pytest.raises(CheckpointError) as info:
        _floral(path, 6)
    for word in words:
        assert word in str(info.value), str(info.value)


def test_a_floral_checkpoint_of_another_evaluation_cadence_is_refused(tmp_path):
    path = tmp_path / "floral.ckpt"
    _floral(path, 4, record_every=2)
    with pytest.raises(CheckpointMismatchError, match="record_every"):
        _floral(path, 6, record_every=1)


def test_an_async_floral_checkpoint_of_other_learning_rates_is_refused(tmp_path):
    from riemfl.nn.floral import FloralFedBuff

    def run(lr, steps):
        trainer = _floral_trainer(lr)
        rule = FloralFedBuff(trainer.layout, trainer.upload_weights, buffer_size=2)
        x0 = trainer.global_parameters()
        options = RunOptions(checkpoint=tmp_path / "a.ckpt")
        return run_async(trainer, rule, steps, timing=ExponentialTime(1.0), x0=x0, options=options)

    run(0.1, 2)
    with pytest.raises(CheckpointMismatchError, match="another run") as info:
        run(0.05, 4)
    assert "trainer.lr" in info.value.differences

"""The synchronous engine: faults, sampling, mini-batches, checkpoint/resume, History."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from _problems import FlakyProblem, QuadraticProblem

from riemfl.backend import is_torch
from riemfl.errors import CheckpointError, ClientFailureError, ParameterError
from riemfl.federated import (
    METRICS,
    ClientDroppedWarning,
    History,
    RFedAvg,
    RFedProj,
    RFedSVRG,
    RunOptions,
    initial_point,
    run_sync,
)
from riemfl.federated import checkpoint as checkpoint_module
from riemfl.testing import importorskip

TRAJECTORY = ("round", "loss", "optimality_gap", "grad_norm", "uplink_matrices", "participants")


def _same_trajectory(a: History, b: History) -> None:
    for key in TRAJECTORY:
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=key)
    np.testing.assert_array_equal(a.final_point, b.final_point)


# ----------------------------------------------------------------------------- faults
@pytest.mark.parametrize("mode", ["raise", "nan", "shape"])
@pytest.mark.parametrize("algorithm", [RFedProj(0.02, 3), RFedSVRG(0.02, 3)])
def test_a_failing_client_is_dropped_and_the_others_go_on(stiefel_problem, mode, algorithm):
    flaky = FlakyProblem(stiefel_problem, bad={2}, mode=mode)
    with pytest.warns(ClientDroppedWarning, match="client 2 dropped"):
        h = run_sync(flaky, algorithm, 3)
    assert h.participants[1:] == [stiefel_problem.n_clients - 1] * 3
    assert {w["client"] for w in h.warnings} == {2}
    assert len(h.warnings) == 3  # one per round: a client dropped in phase 0 skips phase 1
    # a NaN gradient is caught by the upload check, or earlier by the manifold's own check
    reason = {"raise": "RuntimeError", "nan": "NaN|non-finite", "shape": "shape"}[mode]
    assert all(re.search(reason, w["reason"]) for w in h.warnings)
    assert np.isfinite(h.grad_norm).all()
    assert stiefel_problem.manifold.check_point(h.final_point, atol=1e-12) is None


def test_dropping_a_client_leaves_the_rest_exactly_as_without_it(stiefel_problem):
    """FedAvg over the survivors: the same global model as if the bad client never existed."""
    P = stiefel_problem
    x0 = initial_point(P, 0)
    with pytest.warns(ClientDroppedWarning):
        flaky = run_sync(FlakyProblem(P, bad={0}, mode="raise"), RFedAvg(0.02, 3), 4, x0=x0)
    fewer = QuadraticProblem(P.manifold, n=P.n_clients, p=8, seed=1)
    fewer.C, fewer.A, fewer.b = P.C[1:], P.A[1:], P.b[1:]
    fewer.n_clients, fewer.n_samples = P.n_clients - 1, P.n_samples[1:]
    ref = run_sync(fewer, RFedAvg(0.02, 3), 4, x0=x0)
    np.testing.assert_allclose(flaky.final_point, ref.final_point, atol=1e-13)


def test_the_one_by_one_fallback_gives_the_stacked_result(stiefel_problem):
    """When the stacked call fails for everyone, clients rerun alone: no one is dropped and the
    trajectory equals the stacked run's (mini-batches included)."""
    P = stiefel_problem
    stacked = run_sync(P, RFedProj(0.02, 3), 5, batch_size=4, options=RunOptions(seed=7))
    alone = run_sync(
        FlakyProblem(P, only_stacked=True),
        RFedProj(0.02, 3),
        5,
        batch_size=4,
        options=RunOptions(seed=7),
    )
    assert alone.warnings == []
    np.testing.assert_allclose(alone.grad_norm, stacked.grad_norm, rtol=1e-12)
    np.testing.assert_allclose(alone.final_point, stacked.final_point, atol=1e-13)


def test_the_run_fails_clearly_when_every_client_fails(stiefel_problem):
    bad = set(range(stiefel_problem.n_clients))
    with pytest.warns(ClientDroppedWarning), pytest.raises(ClientFailureError, match="client 3"):
        run_sync(FlakyProblem(stiefel_problem, bad=bad), RFedProj(0.02, 2), 2)


# ----------------------------------------------------------------------------- sampling, batches
def test_client_sampling_is_uniform_without_replacement(stiefel_problem):
    h = run_sync(
        stiefel_problem, RFedProj(0.02, 2), 30, clients_per_round=2, options=RunOptions(seed=1)
    )
    assert h.participants[1:] == [2] * 30
    n = stiefel_problem.n_clients
    assert h.uplink_matrices[-1] == pytest.approx(30 * 2 / n)


def test_full_batch_equals_full_gradients(stiefel_problem):
    full = run_sync(stiefel_problem, RFedProj(0.02, 3), 4)
    batch = run_sync(stiefel_problem, RFedProj(0.02, 3), 4, batch_size=stiefel_problem.p)
    np.testing.assert_allclose(batch.final_point, full.final_point, atol=1e-13)


def test_mini_batches_are_reproducible_from_the_seed(stiefel_problem):
    a = run_sync(stiefel_problem, RFedProj(0.02, 3), 4, batch_size=3, options=RunOptions(seed=5))
    b = run_sync(stiefel_problem, RFedProj(0.02, 3), 4, batch_size=3, options=RunOptions(seed=5))
    c = run_sync(stiefel_problem, RFedProj(0.02, 3), 4, batch_size=3, options=RunOptions(seed=6))
    _same_trajectory(a, b)
    assert not np.allclose(a.grad_norm[1:], c.grad_norm[1:])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"steps": -1},
        {"steps": 2.5},
        {"clients_per_round": 0},
        {"clients_per_round": 99},
        {"batch_size": 0},
        {"batch_size": 9},  # more than the 8 samples of a client
        {"options": {"checkpoint_every": 0}},
    ],
)
def test_bad_engine_arguments_raise(stiefel_problem, kwargs):
    kwargs = {"steps": 2, **kwargs}
    with pytest.raises(ParameterError):
        options = RunOptions(**kwargs.pop("options", {}))
        run_sync(stiefel_problem, RFedProj(0.02, 2), options=options, **kwargs)


def test_grad_tol_stops_at_the_first_round_below_it(stiefel_problem):
    full = run_sync(stiefel_problem, RFedProj(0.05, 3), 40)
    tol = full.grad_norm[20]
    h = run_sync(stiefel_problem, RFedProj(0.05, 3), 40, grad_tol=tol)
    first = next(i for i, g in enumerate(full.grad_norm) if g <= tol and i > 0)
    assert h.round[-1] == first


# ----------------------------------------------------------------------------- checkpoint/resume
@pytest.mark.parametrize("algorithm", [RFedProj(0.02, 3), RFedSVRG(0.02, 3)])
def test_resume_continues_to_the_uninterrupted_result(tmp_path, stiefel_problem, algorithm):
    """Mini-batches and client sampling included: the RNG state is part of the checkpoint."""
    P = stiefel_problem
    kw = {"batch_size": 4, "clients_per_round": 4}
    ref = run_sync(P, algorithm, 12, options=RunOptions(seed=3), **kw)
    saved = RunOptions(seed=3, checkpoint=tmp_path / "run.ckpt", checkpoint_every=3)
    first = run_sync(P, algorithm, 7, options=saved, **kw)  # "dies" at 7
    assert len(first) == 8
    resumed = run_sync(P, algorithm, 12, options=saved, **kw)
    _same_trajectory(resumed, ref)
    assert resumed.cpu_time == sorted(resumed.cpu_time)


def test_resume_from_an_older_checkpoint_replays_the_lost_rounds(tmp_path, stiefel_problem):
    P = stiefel_problem
    ref = run_sync(P, RFedProj(0.02, 3), 9, batch_size=4)
    path = tmp_path / "run.ckpt"
    run_sync(
        P,
        RFedProj(0.02, 3),
        4,
        batch_size=4,
        options=RunOptions(checkpoint=path, checkpoint_every=4),
    )
    saved = checkpoint_module.load_checkpoint(path)
    assert saved["step"] == 4
    resumed = run_sync(P, RFedProj(0.02, 3), 9, batch_size=4, options=RunOptions(checkpoint=path))
    _same_trajectory(resumed, ref)


def test_a_checkpoint_of_another_run_is_refused(tmp_path, stiefel_problem):
    path = tmp_path / "run.ckpt"
    run_sync(stiefel_problem, RFedProj(0.02, 3), 2, options=RunOptions(checkpoint=path))
    with pytest.raises(CheckpointError, match="another run"):
        run_sync(stiefel_problem, RFedProj(0.03, 3), 4, options=RunOptions(checkpoint=path))
    with pytest.raises(CheckpointError, match="beyond"):
        run_sync(stiefel_problem, RFedProj(0.02, 3), 1, options=RunOptions(checkpoint=path))
    fresh = run_sync(
        stiefel_problem, RFedProj(0.03, 3), 2, options=RunOptions(checkpoint=path, resume=False)
    )
    assert len(fresh) == 3


def test_a_corrupt_checkpoint_is_a_clear_error(tmp_path, stiefel_problem):
    path = tmp_path / "run.ckpt"
    path.write_bytes(b"not a pickle")
    with pytest.raises(CheckpointError, match="cannot read"):
        run_sync(stiefel_problem, RFedProj(0.02, 3), 2, options=RunOptions(checkpoint=path))


def test_a_crash_while_saving_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "state.ckpt"
    checkpoint_module.save_checkpoint(path, {"round": 1})

    def broken_dump(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module.os, "fsync", broken_dump)
    with pytest.raises(OSError, match="disk full"):
        checkpoint_module.save_checkpoint(path, {"round": 2})
    monkeypatch.undo()
    assert checkpoint_module.load_checkpoint(path)["round"] == 1
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


# ----------------------------------------------------------------------------- History
def test_history_has_every_column_for_every_round(stiefel_problem):
    h = run_sync(stiefel_problem, RFedProj(0.02, 2), 5)
    for key in METRICS:
        assert len(getattr(h, key)) == 6, key
    assert h.round == list(range(6))
    assert np.all(np.diff(h.cpu_time) >= 0) and np.all(np.diff(h.wall_time) >= 0)
    assert h.config["algorithm"] == {
        "name": "rfedproj",
        "step_size": 0.02,
        "local_steps": 2,
        "global_step_size": 1.0,
    }


def test_history_json_and_csv_round_trip(tmp_path, stiefel_problem):
    h = run_sync(stiefel_problem, RFedProj(0.02, 2), 3)  # optimum unknown: the gap is NaN
    assert np.isnan(h.optimality_gap).all()
    back = History.from_json(h.to_json(tmp_path / "h.json"))
    assert back == h
    assert History.from_json(tmp_path / "h.json") == h
    data = json.loads((tmp_path / "h.json").read_text())
    assert data["metrics"]["optimality_gap"][0] == "nan"
    lines = h.to_csv(tmp_path / "h.csv").splitlines()
    assert lines[0].split(",") == list(METRICS)
    assert len(lines) == 5  # header and rounds 0..3
    assert float(lines[2].split(",")[3]) == h.grad_norm[1]


def test_history_refuses_ragged_columns():
    with pytest.raises(ParameterError, match="different lengths"):
        History.from_dict({"round": [0, 1], "loss": [1.0]})  # riemfl 0.1's layout
    with pytest.raises(ParameterError, match="different lengths"):
        History.from_dict({"metrics": {"step": [0, 1], "loss": [1.0]}})


def test_history_rows_pad_missing_and_late_columns_with_nan():
    h = History()
    h.append(round=0, loss=1.0)
    h.append(round=1, accuracy=0.5)  # no loss in this row; accuracy appears late
    assert h.round == [0, 1] and len(h) == 2
    assert h.loss[0] == 1.0 and np.isnan(h.loss[1])
    assert np.isnan(h.accuracy[0]) and h.accuracy[1] == 0.5
    assert History.from_json(h.to_json()) == h


def test_history_plot_writes_a_png(tmp_path, stiefel_problem):
    importorskip("matplotlib")
    a = run_sync(stiefel_problem, RFedProj(0.02, 2), 3)
    b = run_sync(stiefel_problem, RFedAvg(0.02, 2), 3)
    a.plot(tmp_path / "p.png", y=("grad_norm",), others=[b])
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ParameterError):
        a.plot(others=[b], labels=["only one"])


def test_progress_bar_reports_rounds(capsys, stiefel_problem):
    run_sync(stiefel_problem, RFedProj(0.02, 2), 10, options=RunOptions(progress=True))
    err = capsys.readouterr().err
    assert "rfedproj on quadratic" in err and "10/10" in err and "grad_norm=" in err


@pytest.mark.parametrize("algorithm", [RFedProj(0.02, 3), RFedAvg(0.02, 3), RFedSVRG(0.02, 3)])
def test_torch_oracles_and_points_run_through_the_engine(stiefel_problem, algorithm):
    """A torch loss (gradients by torch.autograd) and a torch start give the numpy trajectory."""
    torch = importorskip("torch")
    from riemfl.problems import FunctionProblem

    P = stiefel_problem
    covariances = [torch.from_numpy(c) for c in P.C]
    losses = [lambda x, c=c: -0.5 * torch.sum(x * (c @ x)) for c in covariances]
    torch_problem = FunctionProblem(P.manifold, losses, differentiation="torch")
    x0 = torch.from_numpy(initial_point(P, 0))
    h = run_sync(torch_problem, algorithm, 4, x0=x0)
    ref = run_sync(P, algorithm, 4, x0=x0.numpy())
    assert is_torch(h.final_point)
    np.testing.assert_allclose(h.final_point.numpy(), ref.final_point, atol=1e-12)
    np.testing.assert_allclose(h.grad_norm, ref.grad_norm, rtol=1e-10)

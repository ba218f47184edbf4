"""The run core shared by every engine: faults, checkpoints and interruption on each of them."""

from __future__ import annotations

import os

import numpy as np
import pytest
from _problems import FaultyTrainer, QuadraticProblem

import riemfl
from riemfl.errors import CheckpointError, ClientFailureError, ParameterError
from riemfl.federated import (
    DCASGD,
    AsyncBezier,
    AsyncFedED,
    BezierProblemTrainer,
    ClientDroppedWarning,
    ExponentialTime,
    FedAsync,
    FedBuff,
    History,
    ProblemTrainer,
    RFedProj,
    RFedSVRG,
    RunInterrupted,
    RunOptions,
    TraceTime,
    run_async,
    run_sync,
)
from riemfl.federated import checkpoint as checkpoint_module
from riemfl.federated.checkpoint import CheckpointFile, load_checkpoint
from riemfl.federated.interrupt import handle_interrupts, interrupt_requested, request_interrupt

pytestmark = pytest.mark.filterwarnings("ignore::riemfl.federated.ClientDroppedWarning")


# ----------------------------------------------------------------------------- helpers
class InterruptAt:
    """An ``on_step`` callback that asks the run to stop after step ``r``."""

    def __init__(self, r):
        self.r = r

    def __call__(self, r, history):
        if r == self.r:
            request_interrupt()


def _euclid(seed=2):
    return QuadraticProblem(riemfl.Euclidean(5, 2), n=5, p=6, seed=seed, linear=1.0)


# ----------------------------------------------------------------------------- sync faults
class ComplexFor(RFedProj):
    """RFedProj whose client ``bad`` uploads a complex point (dtype of the whole stack)."""

    def __init__(self, bad):
        super().__init__(0.02, 2)
        self.bad = bad

    def client_step(self, ctx, phase, message, clients):
        uploads, rows = super().client_step(ctx, phase, message, clients)
        if self.bad in ctx.clients:
            x = uploads["x"].astype(complex)
            x[list(ctx.clients).index(self.bad)] += 1e-3j
            uploads = {"x": x}
        return uploads, rows


def test_sync_a_complex_upload_is_dropped_and_only_that_client(stiefel_problem):
    with pytest.warns(ClientDroppedWarning, match="complex"):
        h = run_sync(stiefel_problem, ComplexFor(bad=2), 4)
    assert {w["client"] for w in h.warnings} == {2}
    assert all("complex" in w["reason"] for w in h.warnings)
    assert h.participants[1:] == [5] * 4
    assert np.isrealobj(h.final_point) and np.isfinite(h.grad_norm).all()
    stiefel_problem.manifold.check_point(h.final_point)


# ----------------------------------------------------------------------------- async faults
@pytest.mark.parametrize("manifold", [riemfl.Euclidean(6, 2), riemfl.Stiefel(6, 2)])
@pytest.mark.parametrize("mode", ["raise", "nan", "inf", "complex", "shape", "int"])
def test_async_a_faulty_arrival_is_dropped_and_the_client_retried(mode, manifold):
    problem = QuadraticProblem(manifold, n=5, p=8, seed=1)
    trainer = FaultyTrainer(ProblemTrainer(problem, 0.02, 3), bad={1}, mode=mode, rate=0.5)
    h = run_async(
        trainer, FedAsync(server_lr=2.0), 30, max_failures=None, options=RunOptions(seed=1)
    )
    assert np.isfinite(h.final_point).all() and np.isrealobj(h.final_point)
    manifold.check_point(h.final_point)
    assert h.warnings and {w["client"] for w in h.warnings} == {1}
    refused = [not a for a in h.log["applied"]]
    assert sum(refused) == len(h.warnings) == h.dropped[-1]
    # the client was dispatched again after each failure: it also delivered good updates
    assert any(c == 1 and a for c, a in zip(h.log["client"], h.log["applied"], strict=True))
    assert np.isfinite(h.grad_norm).all() and h.step[-1] == 30
    if isinstance(manifold, riemfl.Stiefel):  # a bounded objective: the run still converges
        assert h.grad_norm[-1] < 0.5 * h.grad_norm[0]


def test_async_a_client_failing_k_times_in_a_row_is_excluded():
    problem = _euclid()
    trainer = FaultyTrainer(ProblemTrainer(problem, 0.05, 3), bad={0, 3}, mode="raise")
    h = run_async(trainer, FedAsync(server_lr=1.0), 40, max_failures=2, options=RunOptions(seed=2))
    failed = [w["client"] for w in h.warnings]
    assert failed.count(0) == failed.count(3) == 2  # then never dispatched again
    late = h.log["client"][len(h.log["client"]) // 2 :]
    assert 0 not in late and 3 not in late and h.step[-1] == 40


def test_async_raises_only_when_no_client_can_make_progress():
    problem = _euclid()
    trainer = FaultyTrainer(ProblemTrainer(problem, 0.05, 3), bad=range(5), mode="nan")
    with pytest.raises(ClientFailureError, match="no client can make progress"):
        run_async(trainer, FedAsync(server_lr=1.0), 10, max_failures=3, options=RunOptions(seed=0))


def test_async_theory_mode_isolates_faults_too():
    problem = _euclid()
    trainer = FaultyTrainer(ProblemTrainer(problem, 0.05, 3), bad={2}, mode="raise")
    h = run_async(
        trainer, FedAsync(server_lr=1.0), 20, mode="theory", max_staleness=2, max_failures=None
    )
    assert h.step[-1] == 20 and {w["client"] for w in h.warnings} == {2}


# ----------------------------------------------------------------------------- async checkpoints
def _async_cases():
    problem = _euclid()
    stiefel = QuadraticProblem(riemfl.Stiefel(6, 2), n=5, p=8, seed=1)
    point = ProblemTrainer(problem, 0.05, 3, batch_size=3)
    return {
        "fedbuff": (point, lambda: FedBuff(buffer_size=3, staleness_scaling=True), {}),
        "dcasgd": (point, lambda: DCASGD(server_lr=1.0, adaptive=True), {}),
        "asyncfeded": (point, lambda: AsyncFedED(), {"weights": "uniform"}),
        "fedasync-paper-drop": (
            ProblemTrainer(stiefel, 0.02, 3),
            lambda: FedAsync(server_lr=2.0),
            {"scheduler": "paper", "workers": 3, "max_staleness": 2},
        ),
        "fedasync-block": (
            point,
            lambda: FedAsync(),
            {"max_staleness": 2, "staleness_policy": "block"},
        ),
        "theory": (point, lambda: FedAsync(), {"mode": "theory", "max_staleness": 3}),
        "asyncbezier": (
            BezierProblemTrainer(problem, 0.05, 2, 2),
            lambda: AsyncBezier(problem.manifold, 1.0),
            {},
        ),
        "faulty": (
            FaultyTrainer(point, bad={1}, mode="nan", rate=0.3),
            lambda: FedBuff(buffer_size=2),
            {"max_failures": None},
        ),
    }


@pytest.mark.parametrize("case", sorted(_async_cases()))
def test_async_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path, case):
    trainer, rule, kw = _async_cases()[case]
    kw = {"timing": ExponentialTime([0.2, 0.5, 1.0, 2.0, 4.0]), **kw}
    ref = run_async(trainer, rule(), 24, options=RunOptions(seed=4, record_every=3), **kw)
    path = tmp_path / "async.ckpt"
    saved = RunOptions(seed=4, record_every=3, checkpoint=path, checkpoint_every=4)
    first = run_async(trainer, rule(), 9, options=saved, **kw)
    assert load_checkpoint(path)["step"] == 9 and first.step[-1] == 9
    resumed = run_async(trainer, rule(), 24, options=saved, **kw)
    assert resumed.same_results(ref)
    np.testing.assert_array_equal(resumed.final_point, ref.final_point)


def test_async_resume_from_an_older_checkpoint_replays_lost_steps(tmp_path):
    trainer, rule, kw = _async_cases()["fedbuff"]
    kw = {"timing": ExponentialTime(1.0), **kw}
    ref = run_async(trainer, rule(), 20, options=RunOptions(seed=7), **kw)
    path = tmp_path / "async.ckpt"
    saving = RunOptions(seed=7, checkpoint=path, checkpoint_every=5)
    run_async(trainer, rule(), 8, options=saving, **kw)
    resumed = run_async(trainer, rule(), 20, options=RunOptions(seed=7, checkpoint=path), **kw)
    assert resumed.same_results(ref)


# ----------------------------------------------------------------------------- interruption
def test_sync_interrupt_saves_and_the_same_call_resumes(tmp_path, stiefel_problem):
    kw = {"batch_size": 4, "clients_per_round": 4}
    ref = run_sync(stiefel_problem, RFedSVRG(0.02, 3), 12, options=RunOptions(seed=3), **kw)
    path = tmp_path / "run.ckpt"
    interrupted = RunOptions(seed=3, checkpoint=path, checkpoint_every=100, on_step=InterruptAt(5))
    with pytest.raises(RunInterrupted) as info:
        run_sync(stiefel_problem, RFedSVRG(0.02, 3), 12, options=interrupted, **kw)
    assert info.value.step == 5 and info.value.checkpoint == str(path)
    assert isinstance(info.value, KeyboardInterrupt)  # callers that catch Ctrl-C catch it
    assert load_checkpoint(path)["step"] == 5  # saved at the interruption, not only every 100
    assert not interrupt_requested()  # the request ended with the run
    resumed = run_sync(
        stiefel_problem, RFedSVRG(0.02, 3), 12, options=RunOptions(seed=3, checkpoint=path), **kw
    )
    assert resumed.same_results(ref)


def test_async_interrupt_saves_and_the_same_call_resumes(tmp_path):
    trainer, rule, kw = _async_cases()["dcasgd"]

    class Interrupting(FaultyTrainer):
        at = 17  # asks to stop at this training call (None: never)

        def train(self, i, start, rng, epochs=None):
            if self.calls == self.at:
                request_interrupt()
            return super().train(i, start, rng, epochs)

    ref = run_async(trainer, rule(), 20, options=RunOptions(seed=1), **kw)
    path = tmp_path / "async.ckpt"
    saved = RunOptions(seed=1, checkpoint=path)
    with pytest.raises(RunInterrupted) as info:
        run_async(Interrupting(trainer), rule(), 20, options=saved, **kw)
    assert 0 < info.value.step < 20 and load_checkpoint(path)["step"] == info.value.step
    Interrupting.at = None
    resumed = run_async(Interrupting(trainer), rule(), 20, options=saved, **kw)
    assert resumed.same_results(ref)


def test_without_a_checkpoint_an_interrupt_still_stops_cleanly(stiefel_problem):
    with pytest.raises(RunInterrupted, match="no checkpoint"):
        run_sync(stiefel_problem, RFedProj(0.02, 2), 10, options=RunOptions(on_step=InterruptAt(2)))


def test_a_stale_request_from_outside_a_run_is_ignored(stiefel_problem):
    request_interrupt()  # e.g. left over from code that ran outside any run
    h = run_sync(stiefel_problem, RFedProj(0.02, 2), 3)
    assert h.round[-1] == 3
    with handle_interrupts():
        assert not interrupt_requested()


def test_a_request_served_off_the_main_thread_does_not_stop_the_next_run(stiefel_problem):
    """Off the main thread no handle_interrupts block owns the request (a Flower ServerApp in
    a simulation): the loop that stops for it forgets it, so the next run runs whole."""
    import threading

    outcome = {}

    def two_runs():
        try:
            run_sync(
                stiefel_problem, RFedProj(0.02, 2), 5, options=RunOptions(on_step=InterruptAt(2))
            )
        except RunInterrupted as exc:
            outcome["stopped_at"] = exc.step
        outcome["next"] = run_sync(stiefel_problem, RFedProj(0.02, 2), 3).round[-1]

    worker = threading.Thread(target=two_runs)
    worker.start()
    worker.join()
    assert outcome == {"stopped_at": 2, "next": 3}
    assert not interrupt_requested()


# ----------------------------------------------------------------------------- fingerprints
def test_a_checkpoint_of_other_client_data_is_refused(tmp_path):
    path = tmp_path / "run.ckpt"
    problem = QuadraticProblem(riemfl.Stiefel(7, 3), n=6, p=8, seed=1)
    run_sync(problem, RFedProj(0.02, 3), 3, options=RunOptions(checkpoint=path))
    swapped = QuadraticProblem(riemfl.Stiefel(7, 3), n=6, p=8, seed=1)
    swapped.A[[0, 1]] = swapped.A[[1, 0]]  # two clients' data exchanged: describe() is equal
    swapped.C = swapped.A.transpose(0, 2, 1) @ swapped.A
    assert swapped.describe() == problem.describe()
    with pytest.raises(CheckpointError, match="another run"):
        run_sync(swapped, RFedProj(0.02, 3), 6, options=RunOptions(checkpoint=path))


def test_a_checkpoint_of_another_async_configuration_is_refused(tmp_path):
    trainer, rule, kw = _async_cases()["fedbuff"]
    path = tmp_path / "async.ckpt"
    saved = RunOptions(checkpoint=path)
    run_async(trainer, rule(), 4, workers=2, options=saved, **kw)
    with pytest.raises(CheckpointError, match="another run"):
        run_async(trainer, rule(), 8, workers=3, options=saved, **kw)


# ----------------------------------------------------------------------------- crafted files
def _crafted(path, edit):
    """Rewrite a checkpoint (valid digests) after ``edit(payload)``: a file written by hand."""
    payload, entries = CheckpointFile(path).load()
    edit(payload)
    CheckpointFile(path).write(payload, entries)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda p: p["state"]["executor"]["clients"].update(c=np.zeros((2, 2))), "client state"),
        (lambda p: p["state"]["server"].update(x=np.zeros(3)), "server state"),
        (lambda p: p["state"].pop("rng"), "does not fit"),
        (lambda p: p["state"].update(totals="many"), "does not fit"),
        (lambda p: p.update(step="7"), "must be int"),
        (lambda p: p.pop("history"), "history"),
    ],
)
def test_a_valid_file_whose_content_does_not_fit_the_run_is_refused(tmp_path, edit, match):
    path = tmp_path / "run.ckpt"
    problem = QuadraticProblem(riemfl.Stiefel(7, 3), n=6, p=8, seed=1)
    run_sync(problem, RFedProj(0.02, 3), 3, options=RunOptions(checkpoint=path))
    _crafted(path, edit)
    with pytest.raises(CheckpointError, match=match):
        run_sync(problem, RFedProj(0.02, 3), 6, options=RunOptions(checkpoint=path))


def test_an_async_file_with_a_model_of_another_shape_is_refused(tmp_path):
    trainer, rule, kw = _async_cases()["fedbuff"]
    path = tmp_path / "async.ckpt"
    run_async(trainer, rule(), 4, options=RunOptions(checkpoint=path), **kw)

    def edit(payload):
        versions = payload["state"]["store"]["versions"]
        versions.update({v: np.zeros(3) for v in versions})

    _crafted(path, edit)
    with pytest.raises(CheckpointError, match="model version"):
        run_async(trainer, rule(), 8, options=RunOptions(checkpoint=path), **kw)


# ----------------------------------------------------------------------------- checkpoint records
def _checkpoint_bytes(monkeypatch, run):
    """Bytes that ``run()`` hands to ``os.write`` (every checkpoint write goes through it)."""
    written = []
    real = os.write

    def counting(fd, data):
        n = real(fd, data)
        written.append(n)
        return n

    with monkeypatch.context() as m:
        m.setattr(os, "write", counting)
        run()
    return sum(written)


@pytest.mark.parametrize("compact_min", [None, 0], ids=["appends", "with-compactions"])
def test_the_bytes_written_per_checkpoint_do_not_grow_with_the_run(
    tmp_path, monkeypatch, stiefel_problem, compact_min
):
    """A checkpoint appends the rows since the previous one and the (fixed-size) state, so the
    bytes per checkpoint stay flat while the history grows 10x (they grew with it when every
    checkpoint rewrote the whole history). Compactions (forced here by a threshold of 0 bytes)
    included, on average."""
    if compact_min is not None:
        monkeypatch.setattr(checkpoint_module, "COMPACT_MIN_BYTES", compact_min)
    per_checkpoint, history = {}, {}
    for rounds in (40, 400):
        path = tmp_path / f"{rounds}.ckpt"

        def run(rounds=rounds, path=path):
            history[rounds] = run_sync(
                stiefel_problem,
                RFedProj(0.02, 2),
                rounds,
                options=RunOptions(checkpoint=path, checkpoint_every=2),
            )

        per_checkpoint[rounds] = _checkpoint_bytes(monkeypatch, run) / (rounds // 2)
    # a compaction copies the rows every (live bytes / state bytes) checkpoints: on average
    # one more state per checkpoint in a long run, half a one in a short run
    assert per_checkpoint[400] <= (1.05 if compact_min is None else 1.3) * per_checkpoint[40]
    everything = len(history[400].to_json())  # what a checkpoint rewrote before
    assert per_checkpoint[400] < everything / 5
    resumed = run_sync(
        stiefel_problem,
        RFedProj(0.02, 2),
        400,
        options=RunOptions(checkpoint=tmp_path / "400.ckpt"),
    )
    assert resumed == history[400]  # the file holds the whole history


def test_a_checkpoint_cut_inside_its_last_record_resumes_from_the_one_before(
    tmp_path, stiefel_problem
):
    """What a SIGKILL during an append leaves: the torn record is dropped, the lost rounds are
    recomputed, and the result is the uninterrupted one."""
    kw = {"batch_size": 4, "clients_per_round": 4}
    ref = run_sync(stiefel_problem, RFedSVRG(0.02, 3), 12, options=RunOptions(seed=3), **kw)
    path = tmp_path / "run.ckpt"
    saving = RunOptions(seed=3, checkpoint=path, checkpoint_every=3)
    run_sync(stiefel_problem, RFedSVRG(0.02, 3), 9, options=saving, **kw)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])  # the record of round 9 torn
    assert load_checkpoint(path)["step"] == 6
    resuming = RunOptions(seed=3, checkpoint=path)
    resumed = run_sync(stiefel_problem, RFedSVRG(0.02, 3), 12, options=resuming, **kw)
    assert resumed.same_results(ref)
    np.testing.assert_array_equal(resumed.final_point, ref.final_point)


def test_a_history_that_lost_entries_is_saved_whole(tmp_path, stiefel_problem):
    """The entries since the previous checkpoint cannot say that a warning was removed: such a
    checkpoint rewrites the whole history, and a resume still equals the uninterrupted run."""

    def forget(r, history):
        if r == 5:
            history.warnings.clear()

    def run(rounds, **options):
        options = RunOptions(on_step=forget, **options)
        return run_sync(stiefel_problem, ComplexFor(bad=2), rounds, options=options)

    ref = run(10)
    path = tmp_path / "run.ckpt"
    run(7, checkpoint=path, checkpoint_every=2)
    resumed = run(10, checkpoint=path, checkpoint_every=2)
    assert resumed.same_results(ref) and [w["round"] for w in ref.warnings] == [6, 7, 8, 9, 10]


def test_a_checkpoint_that_cannot_be_synced_stops_the_run(tmp_path, monkeypatch, stiefel_problem):
    """A checkpoint's sync to disk runs while the next rounds compute; its failure is not
    lost: the run raises it (at the next checkpoint, or at the end)."""
    path = tmp_path / "run.ckpt"
    run_sync(
        stiefel_problem,
        RFedProj(0.02, 2),
        2,
        options=RunOptions(checkpoint=path, checkpoint_every=2),
    )

    def failing(fd):
        raise OSError("the disk is gone")

    monkeypatch.setattr(os, "fdatasync", failing, raising=False)
    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError, match="the disk is gone"):
        run_sync(
            stiefel_problem,
            RFedProj(0.02, 2),
            3,
            options=RunOptions(checkpoint=path, checkpoint_every=2),
        )


def test_history_entries_since_a_mark_rebuild_it(stiefel_problem):
    h = run_sync(stiefel_problem, ComplexFor(bad=2), 3)
    first, mark = h.since(None), h.mark()
    h.record({"round": 4, "loss": 1.0, "late": 2.0})  # a column that appears late: NaN before
    h.warnings.append({"client": 1, "reason": "test"})
    h.log["client"].append(3)
    rebuilt = History(config=h.config, log={})
    rebuilt.extend(first)
    rebuilt.extend(h.since(mark))
    rebuilt.summary.update(h.summary)
    assert rebuilt == h and list(rebuilt.metrics) == list(h.metrics)
    assert np.isnan(rebuilt.late[:4]).all() and rebuilt.late[4] == 2.0
    with pytest.raises(ParameterError, match=r"metrics\['round'\] starts at entry 0, the hist"):
        rebuilt.extend(first)  # does not continue where the history ends
    h.warnings.clear()
    assert h.since(mark) is None  # entries were removed: not an extension of the mark


# ----------------------------------------------------------------------------- client state
class SharedInit(RFedProj):
    """RFedProj whose initial corrections are a caller's writable array (aliasing it)."""

    def __init__(self, shared):
        super().__init__(0.02, 2)
        self.shared = shared

    def init(self, problem, x0):
        server, clients = super().init(problem, x0)
        return server, {**clients, "correction": self.shared}


def test_client_state_is_copied_only_when_rows_are_written_in_place(stiefel_problem):
    n, shape = stiefel_problem.n_clients, stiefel_problem.manifold.point_shape
    shared = np.zeros((n, *shape))
    run_sync(
        stiefel_problem, SharedInit(shared), 4, clients_per_round=3, options=RunOptions(seed=1)
    )
    assert not shared.any()  # partial rounds wrote into the engine's own copy, not the caller's
    full = run_sync(stiefel_problem, SharedInit(shared), 4, options=RunOptions(seed=1))
    plain = run_sync(stiefel_problem, RFedProj(0.02, 2), 4, options=RunOptions(seed=1))
    assert not shared.any()
    np.testing.assert_array_equal(full.final_point, plain.final_point)


# ----------------------------------------------------------------------------- stateful timing
def _trace():
    """Measured durations of the 5 clients of ``_euclid``, of different lengths."""
    return TraceTime([[0.3, 1.1, 0.7], [2.0, 0.5], [1.3], [0.9, 0.4, 1.7, 0.2], [0.6, 3.0]])


def test_async_resume_with_a_trace_timing_is_bit_identical(tmp_path):
    """TraceTime's position in each trace is run state: a resumed run (a new process builds a
    new TraceTime) draws the durations the uninterrupted run draws."""
    trainer, rule, kw = _async_cases()["fedbuff"]
    kw = {"workers": 3, **kw}
    ref = run_async(
        trainer, rule(), 24, timing=_trace(), options=RunOptions(seed=4, record_every=3), **kw
    )
    path = tmp_path / "async.ckpt"
    saving = RunOptions(seed=4, record_every=3, checkpoint=path, checkpoint_every=4)
    run_async(trainer, rule(), 9, timing=_trace(), options=saving, **kw)
    resuming = RunOptions(seed=4, record_every=3, checkpoint=path)
    resumed = run_async(trainer, rule(), 24, timing=_trace(), options=resuming, **kw)
    assert resumed.same_results(ref)
    np.testing.assert_array_equal(resumed.final_point, ref.final_point)


def test_a_trace_timing_starts_every_run_at_the_start_of_its_traces():
    """One TraceTime given to two runs: the second draws what the first drew."""
    trainer, rule, kw = _async_cases()["fedbuff"]
    timing = _trace()
    first = run_async(trainer, rule(), 12, timing=timing, options=RunOptions(seed=2), **kw)
    again = run_async(trainer, rule(), 12, timing=timing, options=RunOptions(seed=2), **kw)
    assert again.same_results(first)


# ----------------------------------------------------------------------------- early stops
def test_an_async_early_stop_is_saved_and_the_same_call_redoes_nothing(tmp_path):
    """``max_updates`` ends the run before ``steps``: the checkpoint is written there,
    and the same call returns the finished run without training a client again."""
    trainer, rule, kw = _async_cases()["fedbuff"]
    kw = {"timing": ExponentialTime(1.0), "max_updates": 23, **kw}
    ref = run_async(trainer, rule(), 50, options=RunOptions(seed=4), **kw)
    assert ref.step[-1] < 50  # stopped early by max_updates
    path = tmp_path / "async.ckpt"
    saved = RunOptions(seed=4, checkpoint=path, checkpoint_every=4)
    first = run_async(FaultyTrainer(trainer), rule(), 50, options=saved, **kw)
    assert first.same_results(ref)
    assert load_checkpoint(path)["step"] == ref.step[-1]
    again = FaultyTrainer(trainer)
    rerun = run_async(again, rule(), 50, options=saved, **kw)
    assert again.calls == 0 and rerun == first  # the rows read back, wall times included
    np.testing.assert_array_equal(rerun.final_point, ref.final_point)
    again = FaultyTrainer(trainer)
    resuming = RunOptions(seed=4, checkpoint=path)
    longer = run_async(again, rule(), 80, options=resuming, **kw)  # no further step either
    assert longer.config.pop("steps") == 80 and again.calls == 0
    longer.config["steps"] = 50
    assert longer == first


def test_a_sync_stop_at_the_gradient_tolerance_is_final_for_the_same_call(
    tmp_path, stiefel_problem
):
    """A rerun of a run that stopped at ``grad_tol`` returns it, without another round."""
    plain = run_sync(stiefel_problem, RFedProj(0.02, 2), 30)
    tol = plain.grad_norm[8]
    ref = run_sync(stiefel_problem, RFedProj(0.02, 2), 30, grad_tol=tol)
    assert ref.round[-1] == 8
    path = tmp_path / "run.ckpt"
    saved = RunOptions(checkpoint=path, checkpoint_every=5)
    assert run_sync(
        stiefel_problem, RFedProj(0.02, 2), 30, grad_tol=tol, options=saved
    ).same_results(ref)
    rounds = []
    watched = RunOptions(checkpoint=path, checkpoint_every=5, on_step=lambda r, h: rounds.append(r))
    rerun = run_sync(stiefel_problem, RFedProj(0.02, 2), 30, grad_tol=tol, options=watched)
    assert rounds == [] and rerun.same_results(ref)
    lower = run_sync(stiefel_problem, RFedProj(0.02, 2), 30, grad_tol=tol / 10, options=saved)
    assert lower.round[-1] > 8  # another tolerance continues the run

"""The command line: every user error is one line on stderr, exit status 2, no
traceback, and no output folder left behind; divergence warns; ``--overwrite``; ``--strict``."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from riemfl.cli import main
from riemfl.errors import ParameterError
from riemfl.experiments import zhang2024
from riemfl.federated import History
from riemfl.testing import importorskip

importorskip("matplotlib")

SYNTH = ("run", "kpca-synthetic", "--algorithm", "rfedavg", "--steps", "2", "--no-progress")


def _error(capsys, argv, *words):
    """Run ``riemfl ARGV``: exit status 2 and one stderr line holding every word."""
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def zeros_npz(tmp_path):
    path = tmp_path / "zeros.npz"
    np.savez(path, x=np.zeros((40, 4, 4)), y=np.arange(40) % 10)
    return path


def test_all_zero_images_are_a_data_error(tmp_path, capsys, zeros_npz):
    out = tmp_path / "out"
    argv = [
        "run",
        "kpca-mnist",
        "--algorithm",
        "rfedavg",
        "--data",
        str(zeros_npz),
        "--out",
        str(out),
        "--no-progress",
    ]
    _error(capsys, argv, "--data", "all zero")
    assert not out.exists()


def test_random_bytes_named_npz_are_not_an_archive(tmp_path, capsys):
    data = tmp_path / "noise.npz"
    data.write_bytes(np.random.default_rng(0).bytes(300))
    out = tmp_path / "out"
    argv = [
        "run",
        "kpca-mnist",
        "--algorithm",
        "rfedavg",
        "--data",
        str(data),
        "--out",
        str(out),
        "--no-progress",
    ]
    line = _error(capsys, argv, "--data", "not an npz archive", "zip")
    assert "allow_pickle" not in line and not out.exists()


def test_out_naming_an_existing_file(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    _error(capsys, [*SYNTH, "--out", str(afile)], "--out", "expected a folder", "file")


def test_out_under_a_regular_file(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    _error(capsys, [*SYNTH, "--out", str(afile / "sub" / "dir")], "--out", "under the file")


def test_out_an_impossible_path_leaves_nothing(tmp_path, capsys):
    out = tmp_path / "made" / ("x" * 300) / "run"
    _error(capsys, [*SYNTH, "--out", str(out)], "--out", "too long")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_out_in_a_read_only_folder(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        _error(capsys, [*SYNTH, "--out", str(ro / "run")], "--out", "not writable")
    finally:
        ro.chmod(0o755)


@pytest.mark.skipif(not os.path.isdir("/sys/kernel"), reason="needs Linux's sysfs")
def test_out_where_even_root_cannot_create_a_folder(capsys):
    """sysfs refuses new folders to every user (root included): the unwritable case as root."""
    _error(capsys, [*SYNTH, "--out", "/sys/riemfl-out/run"], "--out", "can be created")
    assert not os.path.exists("/sys/riemfl-out")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--steps", "0"),
        ("--clients", "0"),
        ("--local-steps", "0"),
        ("--step-size", "-1"),
        ("--step-size", "nan"),
        ("--checkpoint-every", "-1"),
        ("--batch-size", "0"),
    ],
)
def test_out_of_range_values(tmp_path, capsys, option, value):
    out = tmp_path / "out"
    _error(capsys, [*SYNTH, option, value, "--out", str(out)], option, "expected", repr(value))
    assert not out.exists()


def test_data_on_a_problem_without_data(tmp_path, capsys, zeros_npz):
    out = tmp_path / "out"
    _error(capsys, [*SYNTH, "--data", str(zeros_npz), "--out", str(out)], "--data", "no data")
    assert not out.exists()


def test_options_of_the_other_engine_are_refused(tmp_path, capsys):
    out = tmp_path / "out"
    _error(capsys, [*SYNTH, "--workers", "3", "--out", str(out)], "--workers", "--engine async")
    _error(capsys, [*SYNTH, "--mu", "0.5", "--out", str(out)], "--mu", "rfedprox")
    argv = [
        "run",
        "kpca-synthetic",
        "--algorithm",
        "fedasync",
        "--engine",
        "async",
        "--clients-per-round",
        "3",
        "--out",
        str(out),
        "--no-progress",
    ]
    _error(capsys, argv, "--clients-per-round", "--engine sync")
    assert not out.exists()


def test_errors_found_late_leave_no_folder(tmp_path, capsys):
    """Errors of the rules and trainers (built after the problem) come before the folder."""
    out = tmp_path / "out"
    argv = [
        "run",
        "kpca-synthetic",
        "--algorithm",
        "asyncbezier",
        "--engine",
        "async",
        "--steps",
        "2",
        "--vartheta",
        "5",
        "--out",
        str(out),
        "--no-progress",
    ]
    _error(capsys, argv, "vartheta must be in [-1, 1]")
    _error(capsys, [*SYNTH, "--clients-per-round", "99", "--out", str(out)], "at most the 30")
    assert not out.exists()


def test_a_divergent_step_warns_in_the_history_and_on_stderr(tmp_path, capsys):
    argv = [
        "run",
        "logreg-digits",
        "--algorithm",
        "rfedavg",
        "--step-size",
        "1e6",
        "--steps",
        "3",
        "--local-steps",
        "2",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    assert main(argv) == 0
    assert "riemfl: warning: the run diverges: grad_norm" in capsys.readouterr().err
    warnings = json.loads((tmp_path / "history.json").read_text())["warnings"]
    assert [w["kind"] for w in warnings] == ["divergence"] and warnings[0]["round"] == 1


def test_check_divergence_rule():
    h = History()
    for g in (1.0, 50.0, 900.0):
        h.append(round=len(h), grad_norm=g, loss=-1.0)
    assert h.check_divergence() is None and h.warnings == []
    h.append(round=3, grad_norm=2e3, loss=-1.0)
    entry = h.check_divergence()
    assert entry["metric"] == "grad_norm" and entry["round"] == 3
    assert h.check_divergence() == entry and len(h.warnings) == 1  # recorded once
    h2 = History()
    h2.append(grad_norm=1.0)
    h2.append(grad_norm=float("nan"))
    assert h2.check_divergence()["value"] != 1.0


def test_a_non_empty_out_needs_overwrite_but_a_checkpoint_resumes(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    _error(capsys, [*SYNTH, "--out", str(out)], "--out", "notes.txt", "--overwrite")
    assert (out / "notes.txt").read_text() == "mine"
    assert main([*SYNTH, "--out", str(out), "--overwrite"]) == 0
    assert not (out / "notes.txt").exists() and (out / "checkpoint.rfl").exists()
    assert main([*SYNTH, "--out", str(out)]) == 0  # the same run: resumed, no --overwrite
    capsys.readouterr()
    _error(capsys, [*SYNTH, "--step-size", "1e-3", "--out", str(out)], "another run", "--overwrite")
    _error(capsys, [*SYNTH, "--checkpoint-every", "0", "--out", str(out)], "--overwrite")
    assert main([*SYNTH, "--step-size", "1e-3", "--out", str(out), "--overwrite"]) == 0


def test_overwrite_never_empties_the_current_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("x")
    _error(capsys, [*SYNTH, "--out", ".", "--overwrite"], "--overwrite", "current folder")
    assert (tmp_path / "keep.txt").exists()


def test_the_default_out_is_not_overwritten_silently(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "results" / "run"
    run.mkdir(parents=True)
    (run / "history.json").write_text("{}")  # another run's output, no checkpoint
    _error(capsys, SYNTH, "--out results/run", "--overwrite")
    assert (run / "history.json").read_text() == "{}"


def _claims(passed):
    return [zhang2024.Claim(1, "a claim", passed, "detail", (1,))]


@pytest.mark.parametrize(("passed", "code"), [(False, 1), (True, 0), (None, 0)])
def test_reproduce_strict_exits_1_when_a_claim_fails(tmp_path, capsys, monkeypatch, passed, code):
    monkeypatch.setattr(zhang2024, "reproduce", lambda out, **kw: _claims(passed))
    argv = ["reproduce", "zhang2024", "--quick", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0  # without --strict a failed claim is reported, not an error
    assert main([*argv, "--strict"]) == code
    if code:
        assert "--strict: claims 1 FAIL" in capsys.readouterr().err


@pytest.mark.parametrize("paper", ["floral", "licudi2025", "licudi2025-baselines"])
def test_reproduce_strict_is_refused_where_there_are_no_claims(tmp_path, capsys, paper):
    _error(capsys, ["reproduce", paper, "--strict", "--out", str(tmp_path)], "--strict", paper)


# ---------------------------------------------------------------- stalls (oscillating runs)
def _history(values, column="grad_norm"):
    h = History()
    for r, v in enumerate(values):
        h.append(round=r, **{column: v})
    return h


def test_check_stall_rule():
    oscillating = _history([6.0, 1.0, *([0.57, 0.54] * 40)])
    entry = oscillating.check_stall(window=20)
    assert entry["kind"] == "stall" and entry["metric"] == "grad_norm"
    assert entry["round"] == len(oscillating) - 20 and entry["value"] == 0.54
    assert "oscillates" in entry["reason"] and "--step-size" in entry["reason"]
    assert oscillating.check_stall(window=20) == entry and len(oscillating.warnings) == 1
    # progress, however slow; convergence to the rounding floor; too few rows: no warning
    assert _history(6.0 * 0.999 ** np.arange(80)).check_stall(window=20) is None
    converged = _history([6.0, 1e-3, *([3e-15, 4e-15] * 40)])
    assert converged.check_stall(window=20) is None
    assert _history([6.0, 1.0, *([0.5] * 40)]).check_stall(window=20, floor=0.1) is None
    assert _history([6.0, 1.0, 0.5, 0.5]).check_stall(window=20) is None
    # a stalled gradient norm with a gap still falling is progress
    h = _history([6.0, 1.0, *([0.5] * 40)])
    h.metrics["optimality_gap"] = list(1.0 * 0.9 ** np.arange(len(h)))
    assert h.check_stall(window=20) is None
    for bad in ({"window": 0}, {"factor": 1.0}, {"floor": -0.1}, {"floor": 1.0}):
        with pytest.raises(ParameterError, match="check_stall"):
            h.check_stall(**bad)


def test_an_oscillating_run_warns_of_a_stall_once(tmp_path, capsys):
    """kPCA with the step the command line used to default to (its paper's 4e-3, given for
    tau = 5) at tau = 10: |grad f| alternates between two values for ever."""
    argv = [*SYNTH[:3], "rfedproj", "--step-size", "4e-3", "--steps", "300", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert err.count("riemfl: warning: the run stalls: the best grad_norm") == 1, err
    warnings = json.loads((tmp_path / "history.json").read_text())["warnings"]
    assert [w["kind"] for w in warnings] == ["stall"]


def test_a_converging_run_does_not_warn(tmp_path, capsys):
    argv = [*SYNTH[:3], "rfedproj", "--steps", "150", "--no-progress", "--out", str(tmp_path)]
    assert main(argv) == 0
    assert "warning" not in capsys.readouterr().err
    assert json.loads((tmp_path / "history.json").read_text())["warnings"] == []


# ---------------------------------------------------------------- what a rule needs of M
def _no_reach_problem():
    """A problem on Sphere(3) x BirkhoffPolytope(3): the Birkhoff polytope has no
    proximal-smoothness radius, uniform or local."""
    from riemfl.manifolds import Product, Sphere
    from riemfl.manifolds.birkhoff import BirkhoffPolytope
    from riemfl.problems import FunctionProblem

    manifold = Product(Sphere(3), BirkhoffPolytope(3))
    target = manifold.random_point(rng=np.random.default_rng(1))
    losses = [lambda x: 0.5 * float(np.sum((x - target) ** 2))] * 2
    egrads = [lambda x: x - target] * 2
    return FunctionProblem(manifold, losses, egrads, name="no-reach")


def test_fedbuff_refuses_a_manifold_without_a_proximal_radius_before_the_run():
    from riemfl.federated import FedBuff, ProblemTrainer, run_async

    class NeverTrained(ProblemTrainer):
        def train(self, *args, **kwargs):
            raise AssertionError("the run started")

    trainer = NeverTrained(_no_reach_problem(), 0.1, 2)
    with pytest.raises(ParameterError) as refused:
        run_async(trainer, FedBuff(2), 4, workers=2)
    for word in ("FedBuff", "BirkhoffPolytope(3)", "reach", "local_reach(x)"):
        assert word in str(refused.value), refused.value


def test_the_command_line_refuses_it_in_one_line_and_leaves_no_folder(
    tmp_path, capsys, monkeypatch
):
    from riemfl.experiments.registry import PROBLEMS, ProblemEntry, StepRule

    entry = ProblemEntry(lambda n, k, seed, data, progress: _no_reach_problem(), StepRule(0.1), 2)
    monkeypatch.setitem(PROBLEMS, "no-reach", entry)
    out = tmp_path / "out"
    argv = ["run", "no-reach", "--algorithm", "fedbuff", "--engine", "async", "--out", str(out)]
    _error(capsys, [*argv, "--no-progress"], "FedBuff", "BirkhoffPolytope(3)", "local_reach")
    assert not out.exists()


def test_fedbuff_runs_on_the_hyperbolic_tree(tmp_path, capsys):
    """Product(PoincareBall(2), ...) has a local radius (each factor's); the run of the report
    that ended in a NotImplementedError."""
    argv = ["run", "hyperbolic-tree", "--algorithm", "fedbuff", "--engine", "async"]
    more = ["--workers", "2", "--steps", "6", "--out", str(tmp_path), "--no-progress"]
    assert main([*argv, *more]) == 0
    assert "fedbuff (async) on hyperbolic-tree" in capsys.readouterr().out

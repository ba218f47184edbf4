"""``riemfl run`` and ``riemfl reproduce zhang2024`` end to end (small settings)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from riemfl.cli import main
from riemfl.experiments import zhang2024
from riemfl.experiments.registry import PROBLEMS, build_problem
from riemfl.experiments.zhang2024.run import Problems, warm_up
from riemfl.federated import METRICS, History
from riemfl.federated.checkpoint import load_checkpoint
from riemfl.testing import importorskip

importorskip("matplotlib")


def _run(tmp_path, *args):
    return main(["run", *args, "--out", str(tmp_path), "--no-progress"])


@pytest.mark.parametrize("algorithm", ["rfedproj", "rfedavg", "rfedprox", "rfedsvrg"])
def test_run_writes_history_json_csv_and_plot(tmp_path, capsys, algorithm):
    code = _run(
        tmp_path, "kpca-synthetic", "--algorithm", algorithm, "--steps", "6", "--local-steps", "3"
    )
    assert code == 0
    data = json.loads((tmp_path / "history.json").read_text())
    for key in METRICS:
        assert len(data["metrics"][key]) == 7, key
    assert data["config"]["algorithm"]["name"] == algorithm
    # the default step size 1/(max(tau, 10) L) (L: the largest client smoothness) at tau = 3
    problem = build_problem("kpca-synthetic")
    step_size = PROBLEMS["kpca-synthetic"].default_step_size(problem, 3)
    assert data["config"]["algorithm"]["step_size"] == step_size < 4e-3
    header = (tmp_path / "history.csv").read_text().splitlines()[0]
    assert header.split(",") == list(METRICS)
    assert (tmp_path / "history.png").read_bytes()[:4] == b"\x89PNG"
    assert f"{algorithm} on kpca-synthetic: 6 rounds" in capsys.readouterr().out


def test_run_kpca_mnist_reads_the_users_file(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(60, 28, 28), dtype=np.uint8)
    labels = np.repeat(np.arange(10), 6)
    data = tmp_path / "mnist.npz"
    np.savez(data, x_train=images, y_train=labels)
    out = tmp_path / "out"
    code = main(
        [
            "run",
            "kpca-mnist",
            "--algorithm",
            "rfedproj",
            "--data",
            str(data),
            "--steps",
            "3",
            "--out",
            str(out),
            "--no-progress",
            "--checkpoint-every",
            "1",
        ]
    )
    assert code == 0
    h = History.from_json(out / "history.json")
    assert h.config["problem"]["n_clients"] == 10
    assert h.config["problem"]["n_samples"] == [6] * 10
    assert load_checkpoint(out / "checkpoint.rfl")["step"] == 3


def test_run_lrmc_and_stochastic_options(tmp_path):
    code = _run(
        tmp_path,
        "lrmc-synthetic",
        "--algorithm",
        "rfedproj",
        "--steps",
        "3",
        "--local-steps",
        "2",
        "--clients-per-round",
        "5",
    )
    assert code == 0
    h = History.from_json(tmp_path / "history.json")
    assert h.participants[1:] == [5, 5, 5]
    assert h.optimality_gap[-1] == pytest.approx(h.loss[-1])  # f* = 0


@pytest.mark.parametrize(
    "problem, algorithm, gap",
    [
        ("spd-mean", "rfedsvrg", 1e-10),
        ("rotation-averaging", "rfedproj", 1e-10),
        ("hyperbolic-tree", "rfedavg", None),
    ],
)
def test_run_the_problems_on_spd_so3_and_the_poincare_ball(tmp_path, problem, algorithm, gap):
    """The issue-19 problems at their default step and the command line's 10 local steps."""
    assert _run(tmp_path, problem, "--algorithm", algorithm, "--steps", "30") == 0
    h = History.from_json(tmp_path / "history.json")
    assert h.config["problem"]["name"].startswith(problem.split("-")[0])
    if gap is None:  # f* unknown: the loss decreases, the reference is recorded
        assert np.isnan(h.optimality_gap[-1]) and h.loss[-1] < h.loss[0] - 0.5
        assert h.config["problem"]["reference_loss"] > 0
    else:
        assert h.optimality_gap[-1] <= gap


def test_run_reports_bad_input_as_an_error(tmp_path, capsys):
    assert _run(tmp_path, "kpca-mnist", "--algorithm", "rfedproj") == 2
    assert "needs --data" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):  # refused by the parser, one line
        _run(tmp_path, "kpca-synthetic", "--algorithm", "rfedproj", "--step-size", "-1")
    assert "--step-size: expected a finite number > 0, got '-1'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _run(tmp_path, "no-such-problem", "--algorithm", "rfedproj")


@pytest.mark.parametrize("rule", ["fedasync", "fedbuff", "fedortho", "dcasgd", "asyncfeded"])
def test_run_async_engine(tmp_path, capsys, rule):
    code = _run(
        tmp_path,
        "kpca-synthetic",
        "--algorithm",
        rule,
        "--engine",
        "async",
        "--steps",
        "8",
        "--workers",
        "5",
        "--buffer-size",
        "3",
        "--record-every",
        "4",
        "--server-lr",
        "0.1",
    )
    assert code == 0
    data = json.loads((tmp_path / "history.json").read_text())
    assert data["config"]["rule"]["name"] == rule and data["config"]["workers"] == 5
    assert data["metrics"]["step"] == [0.0, 4.0, 8.0]
    assert len(data["log"]["client"]) >= 8
    assert (tmp_path / "history.png").read_bytes()[:4] == b"\x89PNG"
    assert f"{rule} (async) on kpca-synthetic: 8 server steps" in capsys.readouterr().out


def test_run_async_with_a_blocking_staleness_bound(tmp_path, capsys):
    code = _run(
        tmp_path,
        "kpca-synthetic",
        "--algorithm",
        "fedasync",
        "--engine",
        "async",
        "--steps",
        "12",
        "--workers",
        "4",
        "--max-staleness",
        "1",
        "--staleness-policy",
        "block",
    )
    assert code == 0
    data = json.loads((tmp_path / "history.json").read_text())
    assert data["config"]["staleness_policy"] == "block" and data["config"]["max_staleness"] == 1
    assert max(data["log"]["staleness"]) <= 1 and all(data["log"]["applied"])
    assert (
        _run(
            tmp_path,
            "kpca-synthetic",
            "--algorithm",
            "fedasync",
            "--engine",
            "async",
            "--staleness-policy",
            "block",
        )
        == 2
    )
    assert "needs mode='events' and a max_staleness" in capsys.readouterr().err


@pytest.mark.parametrize("rule", ["asyncbezier", "asyncbezier-ed"])
def test_run_curve_rules_on_the_euclidean_problem(tmp_path, capsys, rule):
    """The curve rules from the command line: softmax regression (Euclidean) on the digits, the
    clients learning quadratic curves with K1 = 2, K - K1 = 3; the loss falls."""
    code = _run(
        tmp_path,
        "logreg-digits",
        "--algorithm",
        rule,
        "--engine",
        "async",
        "--steps",
        "30",
        "--workers",
        "3",
        "--clients",
        "6",
        "--warmup-steps",
        "2",
        "--curve-steps",
        "3",
        "--record-every",
        "10",
    )
    assert code == 0
    data = json.loads((tmp_path / "history.json").read_text())
    assert data["config"]["rule"]["name"] == rule
    assert data["config"]["problem"]["name"] == "logreg-digits"
    assert data["config"]["problem"]["manifold"] == "Euclidean(65, 10)"
    gaps = data["metrics"]["optimality_gap"]
    assert len(gaps) == 4 and all(b < a for a, b in zip(gaps, gaps[1:], strict=False))
    assert gaps[-1] < 0.9 * gaps[0]  # 30 steps from a random start: 6.9 -> 6.0 (4.8 for ED)
    assert f"{rule} (async) on logreg-digits: 30 server steps" in capsys.readouterr().out


@pytest.mark.slow
def test_run_curve_rule_on_a_curved_problem(tmp_path, capsys):
    """On Stiefel (kPCA) the clients learn geodesic Bezier curves (ManifoldBezierTrainer)."""
    code = _run(
        tmp_path,
        "kpca-synthetic",
        "--algorithm",
        "asyncbezier",
        "--engine",
        "async",
        "--steps",
        "8",
    )
    assert code == 0
    data = json.loads((tmp_path / "history.json").read_text())
    assert data["config"]["problem"]["manifold"].startswith("Stiefel")
    assert data["config"]["rule"]["name"] == "asyncbezier"
    gaps = data["metrics"]["optimality_gap"]
    assert gaps[-1] < gaps[0]  # the learned curves move the model towards the optimum
    assert "asyncbezier (async) on kpca-synthetic" in capsys.readouterr().out


def test_run_curve_rule_errors(tmp_path, capsys):
    # the curve options need a curve rule; logreg has no k
    assert (
        _run(
            tmp_path,
            "logreg-digits",
            "--algorithm",
            "fedasync",
            "--engine",
            "async",
            "--curve-steps",
            "3",
        )
        == 2
    )
    assert "--warmup-steps, --curve-steps and --vartheta set the curve rules" in (
        capsys.readouterr().err
    )
    assert (
        _run(
            tmp_path,
            "logreg-digits",
            "--algorithm",
            "fedbuff",
            "--engine",
            "async",
            "--vartheta",
            "0",
        )
        == 2
    )
    assert "trains a point" in capsys.readouterr().err
    assert _run(tmp_path, "logreg-digits", "--algorithm", "rfedavg", "-k", "3") == 2
    assert "has no components" in capsys.readouterr().err


def test_run_engine_and_algorithm_must_match(tmp_path, capsys):
    assert _run(tmp_path, "kpca-synthetic", "--algorithm", "fedbuff", "--steps", "2") == 2
    assert "--engine sync runs the algorithms" in capsys.readouterr().err
    code = _run(tmp_path, "kpca-synthetic", "--algorithm", "rfedproj", "--engine", "async")
    assert code == 2


def test_reproduce_selected_figures_writes_a_report(tmp_path, capsys):
    out = tmp_path / "zhang"
    code = main(
        ["reproduce", "zhang2024", "--quick", "--figure", "9", "--out", str(out), "--no-progress"]
    )
    assert code == 0
    printed = capsys.readouterr().out
    lines = [
        line for line in printed.splitlines() if line.split(" ")[0] in ("PASS", "FAIL", "SKIP")
    ]
    # one line per claim (the docstring of riemfl.experiments.zhang2024), claim 8 under 3 readings
    assert len(lines) == 12
    labels = [line.split("claim ")[1].split(":")[0].split(" ")[0] for line in lines]
    verdicts = dict(zip(labels, (line.split()[0] for line in lines), strict=True))
    assert labels == ["1", "2", "3", "4", "5", "6", "7", "8a", "8b", "8c", "9", "10"]
    for structural in ("1", "2", "3", "5"):
        assert verdicts[structural] == "PASS"
    for part in "abc":  # Fig. 9 ran, with its sweep, so every reading of claim 8 was checked
        assert verdicts[f"8{part}"] in ("PASS", "FAIL")
    assert verdicts["6"] == verdicts["9"] == "SKIP"
    assert [line for line in lines if "not --strict" in line] == [lines[7], lines[9]]
    report = (out / "report.md").read_text()
    assert "![Fig. 9](fig9.png)" in report and "| 8b |" in report
    assert "## Claims (Zhang et al. 2024, Secs. 3 and 5, App. A.4)" in report
    assert "## Claim 8 on LRMC" in report and "![Fig. 9 sweep](fig9_sweep.png)" in report
    assert "digest" not in report.lower()
    for png in ("fig9.png", "fig9_sweep.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((out / "results.json").read_text())
    assert summary["figures"] == [9] and len(summary["runs"]) == 3
    setting = zhang2024.sweep(quick=True)
    # the sweep's runs: the tuning grid on the tuning seed, the picks on the held-out seed
    assert len(summary["sweep"]["runs"]) >= len(setting.taus) * len(setting.step_sizes)
    assert all((out / "runs" / f"{key}.json").exists() for key in summary["sweep"]["runs"])
    # a second call resumes every run from its checkpoint and reaches the same verdicts
    assert (
        main(
            [
                "reproduce",
                "zhang2024",
                "--quick",
                "--figure",
                "9",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    again = [line.split()[0] for line in capsys.readouterr().out.splitlines()[:12]]
    assert again == [line.split()[0] for line in lines]


def test_reproduce_rejects_unknown_figures(tmp_path, capsys):
    assert main(["reproduce", "zhang2024", "--figure", "12", "--out", str(tmp_path)]) == 2
    assert "no figure [12]" in capsys.readouterr().err


@pytest.mark.parametrize(("paper", "table"), [("zhang2024", 2), ("floral", 3), ("floral", 6)])
def test_reproduce_rejects_tables_a_paper_does_not_have(tmp_path, capsys, paper, table):
    args = ["reproduce", paper, "--table", str(table), "--out", str(tmp_path / "x")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"--table {table}" in err and "'floral': (1, 2, 4, 5)" in err
    assert "'licudi2025': (1, 2)" in err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["privacy", "--figure", "2"], "--figure: selects figures of zhang2024, floral only"),
        (["floral", "--figure", "3"], "floral has the figures [2]"),
        (["floral", "--figure", "2", "--table", "2"], "give one of them"),
        (["zhang2024", "--cifar-standin"], "--cifar-standin: a setting of floral's Table 1"),
    ],
)
def test_reproduce_rejects_options_a_paper_does_not_take(tmp_path, capsys, args, message):
    assert main(["reproduce", *args, "--out", str(tmp_path / "x")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_every_figure_has_the_papers_settings():
    figs = zhang2024.figures(quick=False)
    assert sorted(figs) == list(range(1, 10))
    fig7 = figs[7]
    assert {run.rounds for run in fig7.runs} == {4000}  # the only R the paper states
    assert {run.local_steps for run in fig7.runs} == {10, 15, 20}
    assert {run.step_size for run in fig7.runs} == {0.7e-3}
    assert {run.algorithm for run in figs[1].runs} == {
        "rfedproj",
        "rfedavg",
        "rfedprox",
        "rfedsvrg",
    }
    assert {(r.local_steps, r.step_size) for r in figs[6].runs} == {(5, 4e-3)}
    mnist3 = zhang2024.figures(mnist=True)[3]
    assert {r.batch_size for r in mnist3.runs} == {200, 500, 1000}
    assert {r.step_size for r in mnist3.runs} == {"1/(20 beta)"}


@pytest.mark.slow
def test_the_quick_reproduction_passes_its_deterministic_claims(tmp_path):
    """The README's main job. Claims 7 and 10 compare CPU times and are not asserted here."""
    claims = {c.label: c for c in zhang2024.reproduce(tmp_path, quick=True, progress=False)}
    for label in ("1", "2", "3", "4", "5", "6", "9"):
        assert claims[label].verdict == "PASS", claims[label].detail
    assert {"8a", "8b", "8c"} <= set(claims) and claims["8b"].gated and not claims["8a"].gated
    for n in range(1, 10):
        assert (tmp_path / f"fig{n}.png").exists()
    assert (tmp_path / "fig9_sweep.png").exists()


def test_warm_up_runs_each_kind_of_run_once():
    """Before the timed runs every distinct (problem, algorithm, tau, batch, step size) runs two
    untimed rounds, so that no run's CPU seconds carry the process's first-call costs."""
    figs = zhang2024.figures(quick=True)
    runs = [run for n in (4, 9) for _, panel in figs[n].panels for _, run in panel]
    kinds = warm_up(runs + runs[:2], Problems(None))
    expected = {(r.problem, r.algorithm, r.local_steps, r.batch_size, r.step_size) for r in runs}
    assert len(kinds) == len(expected) and set(kinds) == expected


def test_run_async_writes_a_checkpoint_and_the_same_command_resumes_it(tmp_path):
    args = (
        "kpca-synthetic",
        "--algorithm",
        "fedbuff",
        "--engine",
        "async",
        "--steps",
        "10",
        "--record-every",
        "5",
        "--checkpoint-every",
        "5",
    )
    assert _run(tmp_path, *args) == 0
    assert load_checkpoint(tmp_path / "checkpoint.rfl")["step"] == 10
    first = History.from_json(tmp_path / "history.json")
    assert _run(tmp_path, *args) == 0  # resumes at the end: nothing left to run
    again = History.from_json(tmp_path / "history.json")
    assert again.same_results(first) and again.step == [0, 5, 10]
    # --checkpoint-every 0 reads no checkpoint, so the folder's files need --overwrite
    assert _run(tmp_path, *args[:-1], "0") == 2
    assert _run(tmp_path, *args[:-1], "0", "--overwrite") == 0
    assert not (tmp_path / "checkpoint.rfl").exists()

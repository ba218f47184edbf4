"""The ``riemfl`` command / ``python -m riemfl``."""

import json
import subprocess
import sys

import numpy as np
import pytest

from riemfl.cli import main
from riemfl.manifolds.catalogue import examples
from riemfl.testing import importorskip


def test_cli_table_and_json(tmp_path, capsys):
    out = tmp_path / "manifolds.json"
    assert main(["--json", str(out)]) == 0
    printed = capsys.readouterr().out
    for manifold in examples():
        assert manifold.name in printed
    rows = json.loads(out.read_text())
    assert [r["manifold"] for r in rows] == [m.name for m in examples()]
    for row in rows:
        assert row["retraction_constraint_error"] < 1e-10
        if "exp_log_roundtrip_error" in row:
            assert row["exp_log_roundtrip_error"] < 1e-9
    stiefel = next(r for r in rows if r["manifold"] == "Stiefel(20, 5)")
    assert stiefel["reach"] == 1.0
    assert stiefel["diameter"] == 2 * 5**0.5
    assert stiefel["maps"]["parallel_transport"] is False


def test_python_dash_m_runs():
    done = subprocess.run(
        [sys.executable, "-m", "riemfl"], capture_output=True, text=True, check=True
    )
    assert "Lorentz(10)" in done.stdout


def test_version_prints_the_package_version(capsys):
    import riemfl

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"riemfl {riemfl.__version__}"


def test_run_help_lists_every_problem_and_algorithm_with_defaults(capsys):
    from riemfl.experiments.registry import ALGORITHMS, ASYNC_RULES, PROBLEMS

    with pytest.raises(SystemExit) as done:
        main(["run", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for name, summary in [
        *((k, e.summary) for k, e in PROBLEMS.items()),
        *((k, e.summary) for k, e in ALGORITHMS.items()),
        *((k, e.summary) for k, e in ASYNC_RULES.items()),
    ]:
        assert summary, name
        assert f"\n  {name} " in text and summary.split()[0] in text, name
    words = " ".join(text.split())
    assert "steps R >= 1: communication rounds (sync) or server steps (async); default:" in words
    for name, entry in PROBLEMS.items():  # each problem's defaults, and why
        defaults = f"Defaults: {entry.step_size.describe()}; {entry.rounds} rounds"
        assert defaults in words, name
    assert "Theorem 4.3" in words and "tau >= 1 (default: 10)" in words
    assert "(default: None)" not in text and "(default: False)" not in text


def _small_mnist(path):
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.integers(0, 256, (200, 6, 6), dtype=np.uint8), y=np.arange(200) % 10)
    return path


def test_the_solve_for_f_star_shows_its_progress_on_the_command_line_only(tmp_path, capsys):
    """logreg-mnist solves for f* (L-BFGS) before its first round: a progress bar on stderr
    says so (before the rounds' bar), and --no-progress silences it."""
    importorskip("matplotlib")
    data = _small_mnist(tmp_path / "small.npz")
    argv = ["run", "logreg-mnist", "--data", str(data), "--algorithm", "rfedavg", "--steps", "2"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert "solving for f* (L-BFGS) [" in err and "iteration=" in err, err
    assert err.index("solving for f*") < err.index("rfedavg"), err
    assert main([*argv, "--out", str(tmp_path / "b"), "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


def test_readme_names_every_problem_algorithm_rule_and_reproduction():
    from pathlib import Path

    from riemfl.cli.reproduce import PAPERS
    from riemfl.experiments.registry import ALGORITHMS, ASYNC_RULES, PROBLEMS

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    for name in [*PROBLEMS, *ALGORITHMS, *ASYNC_RULES]:
        assert f"`{name}" in readme, name
    for paper in PAPERS:
        assert f"reproduce {paper}" in readme or f"`{paper}`" in readme, paper

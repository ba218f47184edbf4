"""``riemfl reproduce zhang2024``: a rerun reads its finished runs back and says so, and the
progress bar ends at its total."""

from __future__ import annotations

import io
import json

import pytest

from riemfl.experiments import zhang2024
from riemfl.experiments.zhang2024.report import report_markdown
from riemfl.experiments.zhang2024.run import Problems, Reuse, run_all
from riemfl.progress import ProgressBar

RUNS = [
    zhang2024.Run("kpca-synthetic", "rfedproj", 2, 5, 4e-3),
    zhang2024.Run("kpca-synthetic", "rfedavg", 2, 5, 4e-3),
]


def _run_all(out, problems):
    stream, reuse, results = io.StringIO(), Reuse(), {}
    with ProgressBar(10, "zhang2024", stream=stream) as bar:
        run_all(RUNS, problems, out, bar, results, reuse)
    return stream.getvalue().splitlines(), reuse, results


def test_a_rerun_reuses_the_finished_runs_and_says_so(tmp_path):
    """A rerun read every run back from its checkpoint and reported "wall time 7 s" as if it
    had computed them; its non-terminal progress bar stopped short of its total."""
    problems = Problems(None)
    lines, reuse, first = _run_all(tmp_path, problems)
    assert lines[-1].startswith("zhang2024 [########################] 10/10  ")
    assert (reuse.runs, reuse.reused, reuse.resumed) == (2, 0, 0)
    assert reuse.sentence(tmp_path, 3.0) == ""
    lines, reuse, again = _run_all(tmp_path, problems)
    assert "10/10 (10 cached)" in lines[-1]
    assert (reuse.runs, reuse.reused, reuse.resumed) == (2, 2, 0) and reuse.seconds > 0
    said = reuse.sentence(tmp_path, 3.0)
    assert said.startswith("this invocation took 3 s and reused 2 of 2 runs cached by an earlier")
    assert f"delete {tmp_path / 'checkpoints'} to compute them again" in said
    assert all(again[k].same_results(first[k]) for k in first)
    report = report_markdown({}, again, [], quick=True, data=None, seconds=3.0, cached=said)
    assert said in report and "wall time 3 s" not in report


@pytest.mark.slow
def test_the_report_and_the_terminal_say_a_rerun_reused_its_runs(tmp_path, capsys):
    zhang2024.reproduce(tmp_path, figure=[4], quick=True, progress=False)
    assert "reused" not in capsys.readouterr().err
    assert "wall time" in (tmp_path / "report.md").read_text()
    zhang2024.reproduce(tmp_path, figure=[4], quick=True, progress=False)
    err = capsys.readouterr().err
    assert err.startswith("zhang2024: this invocation took ") and "reused 4 of 4 runs" in err
    assert (
        "reused 4 of 4 runs cached by an earlier invocation" in (tmp_path / "report.md").read_text()
    )
    summary = json.loads((tmp_path / "results.json").read_text())
    assert summary["reused_runs"] == 4 and summary["reused_runs_seconds"] > 0

"""AsyncBezier on curved problems (riemfl.experiments.curved_curves): the rules of the claims on
made-up summaries, and one tiny run end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from riemfl.errors import ConvergenceError, ParameterError
from riemfl.testing import importorskip

importorskip("torch")
cc = pytest.importorskip("riemfl.experiments.curved_curves")
from riemfl.experiments.curved_curves import run as run_module  # noqa: E402
from riemfl.experiments.curved_curves.verdicts import claims, summarise  # noqa: E402

TINY = cc.Settings(
    steps=10,
    seeds=2,
    buffer_size=5,
    warmup_steps=1,
    curve_steps=1,
    rate_grid=(0.5, 1.0),
    tune=True,
    tune_steps=5,
    rows=5,
    kpca_clients=3,
    kpca_dim=4,
    kpca_components=2,
    kpca_rows=5,
    tree_clients=2,
    tree_depth=2,
    tree_negatives=3,
)


def _run(seed, subopt, *, error=None):
    n = len(subopt)
    return {
        "seed": seed,
        "error": error,
        "final": math.inf if error else float(np.mean(subopt[-1:])),
        "seconds": 0.1,
        "step": list(range(n)),
        "updates": list(range(n)),
        "time": list(range(n)),
        "subopt": list(subopt),
        "distance": [math.nan] * n,
        "max_staleness": 1.0,
        "mean_staleness": 0.5,
    }


def _results(curves, e=1.0):
    """One made-up problem: method -> one seed's suboptimality curve (None: a failed run)."""
    s = cc.Settings(tail=0.2)
    case = type("Case", (), {"key": "p"})()
    summary = {}
    for method, curve in curves.items():
        run = _run(0, [0.0], error="ConvergenceError") if curve is None else _run(0, curve)
        summary[method] = summarise([run], s, e)
    return [{"case": case, "summary": summary, "target": e}]


def _found(fedasync, fedortho, fedbuff, asyncbezier):
    curves = {"FedAsync": fedasync, "FedOrtho": fedortho, "FedBuff": fedbuff}
    return claims(_results({**curves, "AsyncBezier": asyncbezier}))


def test_the_rules_of_the_claims():
    slow, fast = [4.0, 3.0, 2.0, 1.5, 1.2], [4.0, 2.0, 0.9, 0.5, 0.4]
    found = _found(slow, slow, slow, fast)
    assert [c.label for c in found] == [f"p/{k}" for k in cc.CLAIMS]
    assert all(c.passed for c in found)
    assert "reached after 2 vs FedAsync's never server steps" in found[3].measured
    assert "Table 1" in found[0].reference and "85.82%" in found[0].reference
    # the baselines better: every claim fails
    assert not any(c.passed for c in _found(fast, fast, fast, slow))
    # a failed AsyncBezier run loses every claim, even against failed baselines
    assert not any(c.passed for c in _found(None, slow, slow, None))
    assert not any(c.passed for c in _found(None, None, None, None))
    # failed baselines lose to a finite run; AsyncBezier must still reach e (1.0) itself
    found = _found(None, None, None, slow)
    assert [c.passed for c in found] == [True] * 3 + [False] * 3


def test_summaries_and_settings():
    runs = [_run(0, [3.0, 2.0, 1.0]), _run(1, [3.0, 1.0, 0.0])]
    x = summarise(runs, cc.Settings(tail=0.5), 1.5)
    assert x["final"] == pytest.approx(0.5)  # the mean of the runs' finals (one_run's tails)
    assert x["distance"] != x["distance"]  # NaN: no optimum known
    assert x["te_step"] == 1.0 and x["curve"]["subopt"] == [3.0, 1.5, 0.5]
    failed = summarise([runs[0], _run(1, [0.0], error="ProjectionError")], cc.Settings(), 1.0)
    assert failed["final"] == math.inf and failed["curve"] is None
    assert failed["failed"] == ["seed 1: ProjectionError"]
    with pytest.raises(ParameterError, match="multiple of buffer_size"):
        cc.Settings(steps=12, buffer_size=5)
    quick = cc.Settings.quick()
    assert quick.tune and quick.steps % quick.buffer_size == 0
    assert quick.runs() == 2 * 4 * (quick.seeds + len(quick.rate_grid))


def test_a_run_that_raises_is_kept_as_failed(monkeypatch):
    class Failing(run_module.FedAsync):
        def apply(self, manifold, a):
            raise ConvergenceError("the logarithm did not converge")

    monkeypatch.setattr(run_module, "FedAsync", Failing)
    case = cc.build_cases(TINY)[0]
    out = run_module.one_run(case, TINY, "FedAsync", 0.5, 0, TINY.steps)
    assert out["error"] == "ConvergenceError" and out["final"] == math.inf


@pytest.mark.slow
def test_tiny_run_end_to_end(tmp_path):
    importorskip("matplotlib")
    found = cc.reproduce(tmp_path, settings=TINY, progress=False)
    assert len(found) == 2 * len(cc.CLAIMS)
    assert all(isinstance(c.passed, bool) and c.line().startswith(("PASS", "FAIL")) for c in found)
    assert {c.label.split("/")[0] for c in found} == {"kpca", "tree"}
    text = (tmp_path / "report.md").read_text()
    assert "the paper has no experiment on a curved model space" in text
    assert "Line search" in text and "## Claims" in text
    assert (tmp_path / cc.FIGURE).stat().st_size > 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert [p["case"]["key"] for p in data["problems"]] == ["kpca", "tree"]
    kpca = data["problems"][0]
    assert set(kpca["rates"]) == set(cc.METHODS)
    assert all(len(kpca["runs"][m]) == TINY.seeds for m in cc.METHODS)
    curve = kpca["runs"]["AsyncBezier"][0]
    assert curve["updates"][-1] == TINY.steps
    assert data["problems"][1]["runs"]["FedBuff"][0]["step"][-1] == TINY.steps // 5
    assert len(data["claims"]) == len(found)

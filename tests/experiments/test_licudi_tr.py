"""``riemfl.experiments.licudi_tr``: the smoothing and normalisation, the claims (which can fail),
Q, the offline sweep against direct computation, and a tiny run end to end."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from riemfl.experiments.licudi_tr import Settings
from riemfl.experiments.licudi_tr.analysis import (
    Z99,
    better_base,
    near,
    panel,
    q_estimate,
    relative,
    smooth,
    tied,
    transitions,
)
from riemfl.experiments.licudi_tr.data import deal, index_shares
from riemfl.experiments.licudi_tr.settings import FIGURE1
from riemfl.experiments.licudi_tr.verdicts import dcasgd_claim, orthocorrect_claim

# --------------------------------------------------------------------------- helpers as identities


def test_smooth_identities():
    rng = np.random.default_rng(0)
    x = rng.normal(size=50)
    assert np.array_equal(smooth(x, 0.0), x)  # sigma 0: the values themselves
    assert np.allclose(smooth(np.full(30, 2.5), 4.0), 2.5)  # a constant, ends included
    line = np.arange(40.0)
    inner = smooth(line, 3.0, truncate=2.0)[6:-6]  # a symmetric kernel keeps a line inside
    assert np.allclose(inner, line[6:-6])
    # one step against the definition: weights exp(-k^2 / (2 sigma^2)), |k| <= 2 sigma, over
    # the steps that exist (renormalised at the start)
    k = np.arange(0, 9)
    w = np.exp(-0.5 * (k / 4.0) ** 2)
    assert np.isclose(smooth(x, 4.0)[0], (w * x[:9]).sum() / w.sum())
    assert smooth([], 3.0).size == 0


def test_relative_identities():
    curves = {"a": np.array([0.0, 1.0, 0.3]), "b": np.array([1.0, 0.0, 1.0])}
    curves["c"] = np.array([0.5, 0.5, 0.0])
    out = relative(curves)  # already min 0, max 1 at every step: unchanged
    for name, values in curves.items():
        assert np.array_equal(out[name], values)
    shifted = relative({n: 3.0 * v + 7.0 for n, v in curves.items()})  # affine invariant
    for name in curves:
        assert np.allclose(shifted[name], out[name])
    flat = {"a": np.array([1.0, 2.0]), "b": np.array([1.0, 3.0])}
    assert np.array_equal(relative(flat)["a"], [0.0, 0.0])  # an all-tied step is 0 for all
    assert np.array_equal(tied(flat), [True, False])


def test_panel_averages_the_algorithms():
    one = {"x": np.array([0.0, 1.0]), "y": np.array([1.0, 0.0])}
    two = {"x": np.array([0.0, 0.0]), "y": np.array([1.0, 2.0])}
    out = panel({"p": one, "q": two}, ("x", "y"), sigma=0.0)
    assert np.allclose(out["x"], [0.0, 0.5])
    assert np.allclose(out["y"], [1.0, 0.5])


def test_phase_helpers():
    curves = {"asgd": np.array([0.0, 0.0, 1.0, 1.0]), "fedasync": np.array([1.0, 1.0, 0.0, 0.0])}
    base = better_base(curves, "asgd", "fedasync")
    assert list(base) == ["gradient", "gradient", "position", "position"]
    assert transitions(base) == [2]
    assert list(near(6, [2], 1)) == [False, True, True, True, False, False]


def test_q_estimate():
    line, curve = np.array([1.1, 1.2, 1.3]), np.array([1.0, 1.0, 1.0])
    q = q_estimate(line, curve)
    assert np.isclose(q["Q"], 1.2)
    assert np.isclose(q["ci99"], Z99 * 0.1 / np.sqrt(3))
    assert np.isclose(q["ratio_of_means"], 1.2)
    assert q["share_above_1"] == 1.0


def test_index_shares():
    sizes = index_shares(8, 1258)
    assert sizes.sum() == 1258
    assert np.all(np.abs(sizes - 1258 * np.arange(1, 9) / 36) < 1)
    assert np.all(np.diff(sizes) > 0)
    parts = deal(np.arange(36), np.arange(36), 8)
    assert [len(p[1]) for p in parts] == list(range(1, 9))


# --------------------------------------------------------------------------- the claims


def _curves(n: int = 100) -> dict[str, np.ndarray]:
    """Fig. 1-like curves: ASGD best early, FedAsync late (a transition at 50), the matching
    OrthoCorrect a little better than its base, DC-ASGD in between."""
    s = np.arange(n)
    early = s < n // 2
    c = {
        "asgd": np.where(early, 0.1, 0.9),
        "fedasync": np.where(early, 0.9, 0.1),
        "orthograd": np.where(early, 0.0, 1.0),
        "orthopos": np.where(early, 1.0, 0.0),
        "dcasgd": np.full(n, 0.5),
    }
    return {k: c[k].astype(float) for k in FIGURE1}


def test_claims_pass_on_the_papers_picture():
    curves = _curves()
    assert dcasgd_claim(curves).passed
    claim, phase = orthocorrect_claim(curves, window=5)
    assert claim.passed
    assert phase["transitions"] == [50]
    assert phase["kept"] == 100 - 11 and phase["won"] == phase["kept"]
    assert "would fail" in claim.change


def test_dcasgd_claim_fails_where_dcasgd_is_optimal():
    curves = _curves()
    curves["dcasgd"][40:45] = -0.1  # DC-ASGD the best at five steps
    claim = dcasgd_claim(curves)
    assert not claim.passed
    assert claim.measured.startswith("optimal at 5 of 100")
    assert "would pass" in claim.change
    curves["dcasgd"][:] = 0.0  # tied with the best everywhere: optimal, so it fails too
    assert not dcasgd_claim(curves).passed


def test_all_tied_steps_say_nothing():
    curves = {k: np.zeros(10) for k in FIGURE1}
    claim = dcasgd_claim(curves)
    assert not claim.passed and claim.measured.startswith("optimal at 0 of 0")
    ortho, _ = orthocorrect_claim(curves, window=0)
    assert not ortho.passed


def test_orthocorrect_claim_fails_when_the_base_wins():
    curves = _curves()
    curves["orthograd"][:] = 0.5  # OrthoGrad no longer beats ASGD early
    claim, _ = orthocorrect_claim(curves, window=5)
    assert not claim.passed  # it wins only late: 44 of 89 kept steps < 75%
    assert "would pass" in claim.change
    claim, _ = orthocorrect_claim(_curves(), window=60)  # every step is near the transition
    assert not claim.passed and "no step" in claim.change


# --------------------------------------------------------------------------- the sweep


def _tiny(**kw) -> Settings:
    return replace(Settings.quick(), steps=6, epochs=1, eval_rows=40, sigma=1.0, **kw)


@pytest.fixture(scope="module")
def study():
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from riemfl.experiments._threads import single_torch_thread
    from riemfl.experiments.licudi_tr.data import load_study_data
    from riemfl.experiments.licudi_tr.run import one_run
    from riemfl.experiments.licudi_tr.sweep import Evaluator

    s = _tiny()
    data = load_study_data(s)
    out = {}
    with single_torch_thread():
        for algorithm in ("fedasync", "asynccurve"):
            keep: list = []
            out[algorithm] = (one_run(algorithm, s, data, keep=keep), keep)
    return s, Evaluator(data.model_fn, data.splits, s.eval_rows, s.seed), out


def _loss(evaluator, point) -> float:
    return evaluator(point)["test"]


@pytest.mark.slow
def test_sweep_matches_direct_computation(study):
    s, evaluator, runs = study
    table, keep = runs["fedasync"]
    assert len(keep) == s.steps == len(table["endpoint"]["test"]["asgd"])
    for k, c in enumerate(keep):
        if k + 1 < len(keep):  # the next checkpoint starts where the run moved
            assert np.array_equal(keep[k + 1].current, c.after)
        r = min(s.server_lr * c.weight, 1.0)
        # FedAsync's proposal is the run's own step; ASGD applies the stale update
        assert np.isclose(table["endpoint"]["test"]["fedasync"][k], _loss(evaluator, c.after))
        asgd = c.current + r * (c.local - c.base)
        assert np.isclose(table["endpoint"]["test"]["asgd"][k], _loss(evaluator, asgd))
        assert np.isclose(table["trajectory"]["test"][k], _loss(evaluator, c.current))
    # DC-ASGD at the last checkpoint: the running mean square of all pseudo-gradients before it
    ms = None
    for c in keep:
        sq = (c.base - c.local) ** 2
        ms = 0.05 * sq if ms is None else 0.95 * ms + 0.05 * sq
    c = keep[-1]
    lam = s.dc_scale * s.dc_lambda0 / (np.sqrt(ms) + 1e-7)
    pseudo = c.base - c.local
    corrected = pseudo + lam * pseudo * pseudo * (c.current - c.base)
    point = c.current - min(s.server_lr * c.weight, 1.0) * corrected
    assert np.isclose(table["endpoint"]["test"]["dcasgd"][-1], _loss(evaluator, point))


@pytest.mark.slow
def test_control_sweep_matches_direct_computation(study):
    s, evaluator, runs = study
    table, keep = runs["asynccurve"]
    test = table["control"]["test"]
    stale = [k for k, c in enumerate(keep) if c.staleness > 0]
    assert stale, "the tiny run has no stale update"
    for k, c in enumerate(keep):
        r = min(s.server_lr * c.weight, 1.0)
        # the run itself: position-based end point, the offset translated (no rotation)
        assert np.isclose(test["position/translation"][k], _loss(evaluator, c.after))
        assert test["position/line"][k] == table["endpoint"]["test"]["fedasync"][k]
        stale_curve = (1 - r) ** 2 * c.current + 2 * r * (1 - r) * c.phi + r * r * c.local
        assert np.isclose(test["position/stale"][k], _loss(evaluator, stale_curve))
    # eq. (17) at a stale checkpoint, by hand: rotate the offset in the plane of u and w
    c = keep[stale[-1]]
    r = min(s.server_lr * c.weight, 1.0)
    u, w = c.local - c.base, c.local - c.current
    e1 = u / np.linalg.norm(u)
    e2 = w - (w @ e1) * e1
    e2 /= np.linalg.norm(e2)
    cos = (u @ w) / (np.linalg.norm(u) * np.linalg.norm(w))
    sin = np.sqrt(1 - cos**2)
    x = c.phi - 0.5 * (c.base + c.local)
    x1, x2 = x @ e1, x @ e2
    rotated = x + (cos * x1 - sin * x2 - x1) * e1 + (sin * x1 + cos * x2 - x2) * e2
    assert np.isclose(np.linalg.norm(rotated), np.linalg.norm(x))
    phi = 0.5 * (c.current + c.local) + rotated
    point = (1 - r) ** 2 * c.current + 2 * r * (1 - r) * phi + r * r * c.local
    assert np.isclose(test["position/rotation"][stale[-1]], _loss(evaluator, point))


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_reproduce_end_to_end(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    from riemfl.experiments import licudi_tr
    from riemfl.experiments.licudi_tr import run

    s = replace(_tiny(), steps=12, sigma=2.0)
    claims = licudi_tr.reproduce(tmp_path, settings=s, progress=False)
    assert [c.label for c in claims] == ["dcasgd-never-optimal", "orthocorrect-dominates"]
    for name in ("report.md", "results.json", "fig1_endpoint.png", "fig3_control_points.png"):
        assert (tmp_path / name).stat().st_size > 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["paper"]["Q"] == 1.0275
    assert set(results["Q"]) >= {"position/rotation", "gradient/translation"}
    assert len(results["fig1_test"]["dcasgd"]) == 12
    text = (tmp_path / "report.md").read_text()
    assert "stand-in" in text
    assert "PASS" in text or "FAIL" in text
    assert len(list((tmp_path / "runs").glob("*.json"))) == 2

    def refuse(*args, **kwargs):
        raise AssertionError("a cached run was recomputed")

    monkeypatch.setattr(run, "one_run", refuse)  # a rerun reads both runs back
    again = licudi_tr.reproduce(tmp_path, settings=s, progress=False)
    assert [c.line() for c in again] == [c.line() for c in claims]


def _leaf(path, users: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = {
        "users": list(users),
        "num_samples": [len(y) for _, y in users.values()],
        "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()},
    }
    path.write_text(json.dumps(blob))


def test_femnist_files_make_the_clients(tmp_path):
    torch = pytest.importorskip("torch")
    from riemfl.experiments.licudi_tr.data import load_study_data

    rng = np.random.default_rng(0)

    def users(n_users: int, rows: int) -> dict:
        return {
            f"f{u:04d}": (
                rng.random((rows, 784)).round(3).tolist(),
                rng.integers(0, 62, rows).tolist(),
            )
            for u in range(n_users)
        }

    _leaf(tmp_path / "train" / "a.json", users(4, 30))
    _leaf(tmp_path / "test" / "a.json", users(2, 20))
    s = replace(Settings(), data=str(tmp_path), femnist_rows=72, val_fraction=0.25)
    study = load_study_data(s)
    assert [len(c[1]) for c in study.clients] == list(range(2, 18, 2))  # 72 rows in shares i/36
    assert len(study.splits["val"][1]) == 18 and len(study.splits["test"][1]) == 40
    model = study.model_fn()
    assert model(torch.from_numpy(study.splits["test"][0][:3])).shape == (3, 62)
    assert "FEMNIST" in study.description

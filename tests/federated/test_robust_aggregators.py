"""Robust aggregators (riemfl.federated.robust): agreement with the mean on equal uploads,
breakdown under one far upload, Krum against a brute-force reference (ties included), runs of
RFedAvg and RFedProj, a resumed centered-clipping run, the secure-aggregation refusal and bad
parameters."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riemfl.errors import ParameterError
from riemfl.federated import RFedAvg, RFedProj, RunInterrupted, RunOptions, run_sync
from riemfl.federated.aggregation import Aggregator
from riemfl.federated.interrupt import request_interrupt
from riemfl.federated.robust import (
    CenteredClipping,
    GeometricMedian,
    Krum,
    MultiKrum,
    TrimmedMean,
)
from riemfl.problems import KPCAProblem

EPS = np.finfo(np.float64).eps


#: fresh aggregators (centered clipping has a run state), named for the test ids
MAKERS = {
    "median": GeometricMedian,
    "trimmed": lambda: TrimmedMean(0.2),
    "krum": lambda: Krum(1),
    "multikrum": lambda: MultiKrum(1, 3),
    "clipping": lambda: CenteredClipping(10.0),
    "clipping-zero": lambda: CenteredClipping(10.0, iterations=3, center="zero"),
}


def _mean(agg: Aggregator, uploads: dict, phase: int = 0) -> dict:
    """What the rule's server step reads: total / count."""
    total, count = agg.aggregate(uploads, phase)
    assert count == next(iter(uploads.values())).shape[0]
    return {k: v / count for k, v in total.items()}


# ------------------------------------------------------------------ equal uploads, one upload
@pytest.mark.parametrize("name", list(MAKERS))
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_equal_uploads_give_that_upload(name, backend):
    agg = MAKERS[name]()
    rng = np.random.default_rng(1)
    u = rng.standard_normal((4, 3))  # norm < 10 = tau: centered clipping moves onto it
    stack = {"u": np.broadcast_to(u, (7, 4, 3)).copy(), "g": np.full((7, 2), 0.5)}
    if backend == "torch":
        torch = pytest.importorskip("torch")
        stack = {k: torch.as_tensor(v) for k, v in stack.items()}
    out = _mean(agg, stack)
    assert set(out) == {"u", "g"}
    got = {k: np.asarray(v) for k, v in out.items()}
    # c * m / m: two roundings of a value of size |u|
    np.testing.assert_allclose(got["u"], u, rtol=0, atol=4 * EPS * np.abs(u).max())
    np.testing.assert_allclose(got["g"], 0.5, rtol=0, atol=4 * EPS)
    assert type(out["u"]) is type(stack["u"])


@pytest.mark.parametrize("name", ["median", "trimmed", "clipping", "clipping-zero"])
def test_a_single_upload_is_returned(name):
    agg = MAKERS[name]()
    u = np.array([[1.0, -2.0], [0.25, 3.0]])
    total, count = agg.aggregate({"x": u[None]}, 0)
    assert count == 1
    np.testing.assert_allclose(total["x"], u, rtol=0, atol=4 * EPS * 3)


def test_centered_clipping_moves_tau_towards_far_equal_uploads():
    u = np.array([3.0, 4.0])  # |u| = 5
    agg = CenteredClipping(1.0, iterations=2, center="zero")
    out = _mean(agg, {"u": np.tile(u, (5, 1))})["u"]
    np.testing.assert_allclose(out, 2.0 * u / 5.0, rtol=1e-15)
    assert agg.row() == {"clipped": 5}


# ------------------------------------------------------------------ breakdown
def _inliers(rng):
    return rng.standard_normal((10, 4, 2))


@pytest.mark.parametrize("scale", [1e3, 1e6, 1e12])
def test_median_and_trimmed_mean_stay_bounded_when_one_upload_flies_off(scale):
    rng = np.random.default_rng(7)
    points = _inliers(rng)
    centre = points[1:].mean(0)
    radius = max(np.linalg.norm(p - centre) for p in points[1:])
    points[0] = scale * np.ones((4, 2))
    stack = {"u": points}
    # k = 1 of m = 10 replaced: the median is within 2(m-k)/(m-2k) R = 2.25 R of any centre of
    # the others (a triangle-inequality bound); the trimmed mean keeps only inliers (within R)
    med = _mean(GeometricMedian(), stack)["u"]
    assert np.linalg.norm(med - centre) <= 2.25 * radius * (1 + 1e-8)
    trimmed = TrimmedMean(0.2)
    tm = _mean(trimmed, stack)["u"]
    assert np.linalg.norm(tm - centre) <= radius * (1 + 1e-12)
    assert trimmed.row() == {"trimmed": 2}
    mean = points.mean(0)  # the plain mean follows the outlier
    assert np.linalg.norm(mean - centre) >= 0.1 * scale * math.sqrt(8) - 2 * radius


def test_krum_never_selects_a_far_upload():
    rng = np.random.default_rng(3)
    for trial in range(20):
        points = rng.standard_normal((9, 5))
        far = trial % 9
        points[far] += 1e3 * rng.standard_normal(5)
        agg = Krum(2)
        out = _mean(agg, {"u": points})["u"]
        assert agg.selected[0] != far
        np.testing.assert_array_equal(out * 9 / 9, out)
        multi = MultiKrum(2, 7)
        _mean(multi, {"u": points})
        assert far not in multi.selected


# ------------------------------------------------------------------ Krum vs brute force
def _brute_krum(points: np.ndarray, f: int, k: int) -> list[int]:
    """Positions of the k best Krum scores, ties to the lower position."""
    m = len(points)
    scores = []
    for i in range(m):
        d = sorted(float(np.sum((points[i] - points[j]) ** 2)) for j in range(m) if j != i)
        scores.append(sum(d[: m - f - 2]))
    return sorted(range(m), key=lambda i: (scores[i], i))[:k]


@settings(max_examples=60, deadline=None)
@given(
    f=st.integers(0, 3),
    extra=st.integers(0, 4),
    dim=st.integers(1, 3),
    k=st.integers(1, 4),
    grid=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_krum_matches_brute_force(f, extra, dim, k, grid, seed):
    m = 2 * f + 3 + extra
    k = min(k, m - f)
    rng = np.random.default_rng(seed)
    # on a small integer grid the distances and scores are exact and ties are frequent
    points = rng.integers(-2, 3, (m, dim)).astype(float) if grid else rng.normal(size=(m, dim))
    want = _brute_krum(points, f, k)
    agg = MultiKrum(f, k)
    out = _mean(agg, {"u": points})["u"]
    assert list(agg.selected) == want
    np.testing.assert_allclose(out, points[want].mean(0), rtol=0, atol=8 * EPS * (1 + 2 * dim))
    assert agg.row() == {"krum_selected": want[0], "krum_dropped": m - k}
    single = Krum(f)
    single.aggregate({"u": points}, 0)
    assert single.selected == (want[0],)


def test_krum_ties_go_to_the_lowest_position():
    points = np.array([[0.0], [1.0], [0.0], [1.0], [0.0], [1.0]])  # scores: all equal
    agg = MultiKrum(1, 2)
    agg.aggregate({"u": points}, 0)
    assert agg.selected == (0, 1)


# ------------------------------------------------------------------ runs
@pytest.fixture(scope="module")
def kpca():
    return KPCAProblem.synthetic(n_clients=8, d=6, k=2, p=5, seed=0)


@pytest.mark.parametrize(
    "rule",
    [lambda: RFedAvg(0.01, 3, upload="tangent"), lambda: RFedProj(0.01, 3)],
    ids=["rfedavg-tangent", "rfedproj"],
)
@pytest.mark.parametrize(
    "make",
    [GeometricMedian, lambda: TrimmedMean(0.25), lambda: MultiKrum(1, 4)],
    ids=["median", "trimmed", "multikrum"],
)
def test_a_robust_run_stays_on_the_manifold_and_decreases_the_loss(kpca, rule, make):
    agg = make()
    h = run_sync(kpca, rule(), 8, aggregator=agg, options=RunOptions(seed=0))
    kpca.manifold.check_point(h.final_point)
    loss = np.asarray(h.metrics["loss"])
    assert np.all(np.diff(loss) < 0)  # every round lowers the loss
    assert loss[-1] < loss[0] - 0.02 * abs(loss[0])
    assert set(agg.row()) <= set(h.metrics)


def test_a_resumed_centered_clipping_run_equals_the_uninterrupted_one(kpca, tmp_path):
    def rule():
        return RFedAvg(0.01, 3, upload="tangent")

    tau = 0.02  # small enough to clip: the previous centre matters
    full = run_sync(kpca, rule(), 6, aggregator=CenteredClipping(tau), options=RunOptions(seed=0))
    assert max(full.metrics["clipped"][1:]) > 0
    zero = run_sync(
        kpca, rule(), 6, aggregator=CenteredClipping(tau, center="zero"), options=RunOptions(seed=0)
    )
    assert not np.array_equal(zero.final_point, full.final_point)

    fired = []

    def stop_at_2(step, history):
        if step == 2 and not fired:
            fired.append(step)
            request_interrupt()

    opts = RunOptions(seed=0, checkpoint=tmp_path / "c.ckpt", checkpoint_every=1, on_step=stop_at_2)
    with pytest.raises(RunInterrupted):
        run_sync(kpca, rule(), 6, aggregator=CenteredClipping(tau), options=opts)
    resumed = run_sync(kpca, rule(), 6, aggregator=CenteredClipping(tau), options=opts)
    assert resumed.same_results(full)
    np.testing.assert_array_equal(resumed.final_point, full.final_point)


def test_centered_clipping_state_round_trips():
    a = CenteredClipping(0.5)
    a.aggregate({"u": np.arange(12.0).reshape(3, 4)}, 1)
    b = CenteredClipping(0.5)
    b.load_state_dict(a.state_dict())
    stack = {"u": np.ones((3, 4))}
    np.testing.assert_array_equal(a.aggregate(stack, 1)[0]["u"], b.aggregate(stack, 1)[0]["u"])
    with pytest.raises(ParameterError, match="phase 1"):
        b.aggregate({"u": np.ones((3, 5))}, 1)


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("name", list(MAKERS))
def test_secure_aggregation_is_refused(name):
    agg = MAKERS[name]()
    assert agg.takes_totals is False
    with pytest.raises(ParameterError, match="needs each upload"):
        agg.from_total({"u": np.zeros(3)}, 4, 0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: TrimmedMean(-0.1),
        lambda: TrimmedMean(0.5),
        lambda: TrimmedMean(math.nan),
        lambda: GeometricMedian(tol=0),
        lambda: GeometricMedian(max_iter=-1),
        lambda: Krum(-1),
        lambda: Krum(1.5),
        lambda: MultiKrum(1, 0),
        lambda: CenteredClipping(0),
        lambda: CenteredClipping(-1.0),
        lambda: CenteredClipping(math.nan),
        lambda: CenteredClipping(math.inf),
        lambda: CenteredClipping(1.0, iterations=0),
        lambda: CenteredClipping(1.0, center="mean"),
    ],
)
def test_bad_parameters_are_refused(make):
    with pytest.raises(ParameterError):
        make()


def test_krum_refuses_too_few_uploads():
    points = {"u": np.zeros((6, 2))}
    with pytest.raises(ParameterError, match=r"m = 6 .* f = 2.*2f \+ 3 = 7"):
        Krum(2).aggregate(points, 0)
    Krum(1).aggregate(points, 0)  # 6 >= 5
    with pytest.raises(ParameterError, match="n_selected = 6 exceeds m - f = 5"):
        MultiKrum(1, 6).aggregate(points, 0)


@pytest.mark.parametrize(
    "make",
    [GeometricMedian, TrimmedMean, lambda: MultiKrum(1, 2), lambda: CenteredClipping(1.0)],
)
def test_differential_privacy_refuses_a_robust_inner_aggregator(make):
    """The accounting of GaussianSum assumes a sum of clipped updates; a robust centre times m
    is not one, so the combination is refused rather than reported with a wrong epsilon."""
    from riemfl.federated.privacy import DPSettings, GaussianSum

    aggregator = make()
    assert not aggregator.sums
    with pytest.raises(ParameterError, match="does not return the sum"):
        GaussianSum(DPSettings(1.0, 1.0), 8, 4, 0, inner=aggregator)

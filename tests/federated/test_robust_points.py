"""Robust aggregation of point uploads: RFedAvg, RFedProx and RFedSVRG with upload="point"."""

from __future__ import annotations

import numpy as np
import pytest

from riemfl.errors import ParameterError
from riemfl.federated import RFedAvg, RFedProx, RFedSVRG, RunOptions, run_sync
from riemfl.federated.aggregation import PlainSum, check_aggregator_fits, server_update
from riemfl.federated.robust import (
    CenteredClipping,
    GeometricMedian,
    Krum,
    MultiKrum,
    TrimmedMean,
    build_aggregator,
)
from riemfl.manifolds import Sphere
from riemfl.problems import KPCAProblem
from riemfl.stats import frechet_mean, geometric_median

MAKERS = {
    "median": GeometricMedian,
    "trimmed": lambda: TrimmedMean(0.25),
    "krum": lambda: Krum(1),
    "multikrum": lambda: MultiKrum(1),
    "clipping": lambda: CenteredClipping(0.05),
}


@pytest.fixture(scope="module")
def kpca():
    return KPCAProblem.synthetic(n_clients=8, d=6, k=2, p=5, seed=0)


# ------------------------------------------------------------------ tangent geometry
@pytest.mark.parametrize("rule", [RFedAvg, RFedProx, RFedSVRG], ids=lambda r: r.__name__)
@pytest.mark.parametrize("name", list(MAKERS))
def test_point_uploads_equal_tangent_uploads(kpca, rule, name):
    """geometry="tangent": the robust centre of R^{-1}_{x^r}(x_i), carried back by R_{x^r}, is
    the step the same aggregator takes on upload="tangent" (up to the round trips' rounding)."""
    runs = [
        run_sync(
            kpca,
            rule(0.01, 3, upload=upload),
            5,
            aggregator=MAKERS[name](),
            options=RunOptions(seed=1),
        )
        for upload in ("point", "tangent")
    ]
    a, b = (h.final_point for h in runs)
    assert np.abs(a - b).max() <= 1e-10


def test_the_point_path_uses_the_aggregator(kpca):
    plain = run_sync(kpca, RFedAvg(0.01, 3), 5, options=RunOptions(seed=1)).final_point
    median = run_sync(
        kpca, RFedAvg(0.01, 3), 5, aggregator=GeometricMedian(), options=RunOptions(seed=1)
    ).final_point
    assert np.abs(plain - median).max() > 1e-6


def test_update_and_upload_of_points_are_inverse(kpca):
    rule = RFedAvg(0.01, 3)
    rule.init(kpca, kpca.manifold.random_point(rng=0))
    rng = np.random.default_rng(2)
    x = kpca.manifold.random_point(rng=rng)
    u = 0.3 * kpca.manifold.random_tangent(np.broadcast_to(x, (4, *x.shape)), rng=rng)
    points = rule.upload_of({"x": x}, {"x": u}, 0)["x"]
    kpca.manifold.check_point(points)
    back = rule.update_of({"x": x}, {"x": points}, 0)["x"]
    assert np.abs(back - u).max() <= 1e-10
    tangent = RFedAvg(0.01, 3, upload="tangent")
    assert tangent.update_of({"x": x}, {"u": u}, 0)["u"] is u  # tangent uploads are the updates


# ------------------------------------------------------------------ geodesic geometry
def _sphere_cluster(rng, n, far):
    """n points near the north pole of S^2 and ``far`` points near the south pole."""
    sphere = Sphere(3)
    pole = np.array([0.0, 0.0, 1.0])
    near = pole + 0.15 * rng.standard_normal((n, 3)) * np.array([1.0, 1.0, 0.0])
    away = -pole + 0.05 * rng.standard_normal((far, 3))
    points = np.concatenate([near, away])
    return sphere, points / np.linalg.norm(points, axis=1, keepdims=True), pole


def _arc(a, b):
    """Great-circle distance, independently of the manifold's dist."""
    return np.arccos(np.clip(a @ b, -1.0, 1.0))


def _step(agg, sphere, points, pole):
    """The server's new x^{r+1} from point uploads with ``agg`` (RFedAvg, exact operators)."""
    rule = RFedAvg(0.1, 1, operators="exact")

    class _P:
        manifold = sphere

    rule.init(_P, pole)
    server = {"x": pole}
    return server_update(rule, sphere, server, 0, {"x": pole}, {"x": points}, agg)["x"]


def test_geodesic_median_is_the_manifold_median():
    sphere, points, pole = _sphere_cluster(np.random.default_rng(0), 7, 2)
    new = _step(GeometricMedian(geometry="geodesic"), sphere, points, pole)
    expected = geometric_median(sphere, points).point
    assert np.linalg.norm(new - expected) <= 1e-9
    assert _arc(new, pole) < 0.2  # the two far points do not drag it


def test_geodesic_trimmed_mean_is_the_frechet_mean_of_the_nearest():
    sphere, points, pole = _sphere_cluster(np.random.default_rng(1), 8, 2)
    agg = TrimmedMean(0.2, geometry="geodesic")
    new = _step(agg, sphere, points, pole)
    assert agg.trimmed == 2
    expected = frechet_mean(sphere, points[:8], uniqueness="ignore").point
    assert np.linalg.norm(new - expected) <= 1e-9


@pytest.mark.parametrize("n_selected", [1, 3, None])
def test_geodesic_krum_scores_with_arc_lengths(n_selected):
    sphere, points, pole = _sphere_cluster(np.random.default_rng(2), 7, 2)
    f = 2
    agg = MultiKrum(f, n_selected, geometry="geodesic")
    new = _step(agg, sphere, points, pole)
    m = len(points)
    sq = np.array([[_arc(p, q) ** 2 for q in points] for p in points])
    scores = [np.sort(np.delete(sq[i], i))[: m - f - 2].sum() for i in range(m)]
    k = m - f if n_selected is None else n_selected
    best = sorted(np.argsort(scores, kind="stable")[:k])
    assert sorted(agg.selected) == best
    assert max(best) < 7  # never a far point
    chosen = points[best]
    expected = chosen[0] if k == 1 else frechet_mean(sphere, chosen, uniqueness="ignore").point
    assert np.linalg.norm(new - expected) <= 1e-9


def test_a_geodesic_run_on_the_sphere_converges_like_the_tangent_one(kpca):
    h = run_sync(
        kpca,
        RFedAvg(0.01, 3, operators="exact"),
        6,
        aggregator=GeometricMedian(geometry="geodesic"),
        options=RunOptions(seed=0),
    )
    kpca.manifold.check_point(h.final_point)
    loss = np.asarray(h.metrics["loss"])
    assert loss[-1] < loss[0]


# ------------------------------------------------------------------ refusals
def test_an_unknown_geometry_is_refused():
    with pytest.raises(ParameterError, match="geometry must be one of"):
        GeometricMedian(geometry="flat")


def test_geodesic_needs_the_maps():
    from riemfl.manifolds import Elliptope

    manifold = Elliptope(4, 2)
    assert not manifold.supports("log")[0]
    from riemfl.federated.robust import _PointStack

    with pytest.raises(ParameterError, match="geometry='tangent'"):
        _PointStack.require(manifold, "GeometricMedian")


def test_a_phase_that_needs_each_upload_and_uploads_no_point_is_refused():
    class _Stacks(RFedAvg):
        def point_uploads(self, phase):
            return None

    rule = _Stacks(0.1, 1)
    with pytest.raises(ParameterError, match="phase 0 of rfedavg needs each upload"):
        check_aggregator_fits(rule, build_aggregator("median"))
    check_aggregator_fits(rule, PlainSum())  # a sum needs no point key
    check_aggregator_fits(RFedAvg(0.1, 1), GeometricMedian())  # points: accepted

"""The quadratic Bezier triangle of AsyncBezierTriangle: the Bernstein basis, the vertices, the
point parametrisation, the edge against BezierEmbedding's curve, the geodesic path, the eq. (12)
step, the rule against AsyncBezier, the errors and a run on the asynchronous engine."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _problems import LeastSquares

import riemfl
from riemfl.errors import ParameterError, ShapeError
from riemfl.federated import Arrival, AsyncBezier, ProblemTrainer, RunOptions, run_async
from riemfl.federated.async_manifold import BezierEmbedding
from riemfl.federated.async_manifold.triangle import (
    MULTI_INDICES,
    AsyncBezierTriangle,
    BezierTriangleEmbedding,
    band_point,
    isometric_copy,
    surface_geodesic,
    triangle_bernstein,
)
from riemfl.federated.local import problem_metrics
from riemfl.federated.timing import ExponentialTime

VERTEX_ROWS = {(1, 0, 0): 0, (0, 1, 0): 2, (0, 0, 1): 5}


def _latent(rng, n):
    return rng.dirichlet([1.0, 1.0, 1.0], size=n)


def _sphere_points(n, rng):
    sphere = riemfl.Sphere(3)
    x = sphere.random_point(rng=rng)
    return sphere, np.stack(
        [sphere.exp(x, 0.4 * sphere.random_tangent(x, rng=rng)) for _ in range(n)]
    )


# --------------------------------------------------------------------- the basis and the map
def test_bernstein_partition_of_unity_by_hand():
    rng = np.random.default_rng(0)
    x = _latent(rng, 50)
    b = triangle_bernstein(x)
    np.testing.assert_allclose(b.sum(axis=-1), 1.0, rtol=0, atol=1e-15)
    assert (b >= 0).all()
    outside = np.array([[-0.5, 1.2, 0.3], [2.0, -1.5, 0.5]])  # extended: still sums to 1
    np.testing.assert_allclose(triangle_bernstein(outside).sum(-1), 1.0, atol=1e-14)
    u, v, w = x[7]
    factorials = [2 / (math.prod(math.factorial(k) for k in idx)) for idx in MULTI_INDICES]
    expected = [
        c * u**i * v**j * w**k for c, (i, j, k) in zip(factorials, MULTI_INDICES, strict=True)
    ]
    np.testing.assert_allclose(b[7], expected, rtol=1e-14)


def test_vertices_are_interpolated_on_flat_and_curved_bases():
    rng = np.random.default_rng(1)
    phi = rng.normal(size=(6, 4))
    sphere, on_sphere = _sphere_points(6, rng)
    for base, points in ((riemfl.Euclidean(4), phi), (sphere, on_sphere)):
        emb = BezierTriangleEmbedding(base)
        for vertex, row in VERTEX_ROWS.items():
            np.testing.assert_allclose(emb.embed(points, np.array(vertex)), points[row], atol=1e-12)
        np.testing.assert_allclose(emb.embed(points, emb.start), points[0], atol=1e-12)
        np.testing.assert_allclose(emb.embed(points, emb.omega), points[2], atol=1e-12)


def test_euclidean_embedding_is_the_bernstein_sum_and_batches():
    rng = np.random.default_rng(2)
    phi = rng.normal(size=(6, 3, 2))  # any point shape
    emb = BezierTriangleEmbedding(riemfl.Euclidean(3, 2))
    x = _latent(rng, 8).reshape(2, 4, 3)
    out = emb.embed(phi, x)
    assert out.shape == (2, 4, 3, 2)
    u, v, w = x[1, 2]
    by_hand = (
        u * u * phi[0] + 2 * u * v * phi[1] + v * v * phi[2]
        + 2 * u * w * phi[3] + 2 * v * w * phi[4] + w * w * phi[5]
    )  # fmt: skip
    np.testing.assert_allclose(out[1, 2], by_hand, rtol=1e-13)


def test_point_parametrisation_collapses_the_surface():
    rng = np.random.default_rng(3)
    theta = rng.normal(size=5)
    sphere, points = _sphere_points(1, rng)
    for base, x in ((riemfl.Euclidean(5), theta), (sphere, points[0])):
        emb = BezierTriangleEmbedding(base)
        phi = emb.point_parameters(x)
        assert phi.shape == (6, *x.shape)
        image = emb.embed(phi, _latent(rng, 10))
        np.testing.assert_allclose(image, np.broadcast_to(x, image.shape), atol=1e-14)


@pytest.mark.parametrize("curved", [False, True])
def test_edge_is_the_quadratic_curve_of_bezier_embedding(curved):
    rng = np.random.default_rng(4)
    if curved:
        base, phi = _sphere_points(6, rng)
    else:
        base, phi = riemfl.Euclidean(4), rng.normal(size=(6, 4))
    emb, curve = BezierTriangleEmbedding(base), BezierEmbedding(base, 2)
    for t in (0.0, 0.2, 0.5, 0.9, 1.0):
        np.testing.assert_allclose(
            emb.embed(phi, [1 - t, t, 0]), curve.embed(phi[:3], t), atol=1e-12
        )
        np.testing.assert_allclose(emb.path_point(phi, t), curve.path_point(phi[:3], t), atol=1e-12)
    # the other two edges are the curves through their three control points
    np.testing.assert_allclose(
        emb.embed(phi, [0, 0.7, 0.3]), curve.embed(phi[[2, 4, 5]], 0.3), atol=1e-12
    )
    np.testing.assert_allclose(
        emb.embed(phi, [0.6, 0, 0.4]), curve.embed(phi[[0, 3, 5]], 0.4), atol=1e-12
    )
    modes = ("chordal", "parameter") if curved else ("chordal", "arc_length", "parameter")
    for mode in modes:  # the curved base's arc length (a polyline search) is the slow one
        point, r = emb.step_point(phi, 0.3, mode)
        point_c, r_c = curve.step_point(phi[:3], 0.3, mode)
        assert r == pytest.approx(r_c, abs=1e-12)
        np.testing.assert_allclose(point, point_c, atol=1e-12)


# --------------------------------------------------------------------- the geodesic path
def _bowed():
    """A flat triangle in the plane z = 0 whose edge from A to C bows away from the third vertex:
    the straight chord A-C lies on the surface, and is shorter than the edge."""
    a, c, d = np.array([0.0, 0.0, 0.0]), np.array([2.0, 0.0, 0.0]), np.array([1.0, 2.0, 0.0])
    return np.stack([a, np.array([1.0, -1.0, 0.0]), c, (a + d) / 2, (c + d) / 2, d])


def test_isometric_copy_keeps_every_distance_on_the_surface():
    rng = np.random.default_rng(5)
    phi = rng.normal(size=(6, 40))
    copy = isometric_copy(phi)
    assert copy.shape == (6, 5)
    x, y = triangle_bernstein(_latent(rng, 20)), triangle_bernstein(_latent(rng, 20))
    full = np.linalg.norm((x - y) @ phi, axis=-1)
    small = np.linalg.norm((x - y) @ copy, axis=-1)
    np.testing.assert_allclose(small, full, rtol=1e-10)


def test_geodesic_takes_the_shortcut_through_the_surface():
    phi = _bowed()
    geo = BezierTriangleEmbedding(riemfl.Euclidean(3), path="geodesic", nodes=16)
    edge = BezierTriangleEmbedding(riemfl.Euclidean(3))
    nodes = geo.latent_path(phi)
    assert nodes.shape == (17, 3)
    np.testing.assert_allclose(nodes[[0, -1]], [geo.start, geo.omega])
    assert (nodes >= -1e-12).all() and np.allclose(nodes.sum(-1), 1.0)
    assert nodes[:, 2].max() > 0.1  # off the edge, into the triangle
    assert geo.arc_length(phi, 1.0) == pytest.approx(2.0, rel=2e-3)  # the chord's length
    assert edge.arc_length(phi, 1.0) > 2.2
    # the path's points lie (to the discretisation) on the chord y = 0
    points = np.array([geo.path_point(phi, r) for r in np.linspace(0, 1, 11)])
    assert np.abs(points[:, 1]).max() < 5e-3
    # a point parametrisation keeps the edge
    flat = surface_geodesic(np.zeros((6, 5)), 4)
    np.testing.assert_allclose(flat[:, 2], 0.0)


@pytest.mark.parametrize("path", ["segment", "geodesic"])
def test_eq12_step_length_rule(path):
    rng = np.random.default_rng(6)
    phi = rng.normal(size=(6, 7))
    emb = BezierTriangleEmbedding(riemfl.Euclidean(7), path=path)
    start, end = emb.path_point(phi, 0.0), emb.path_point(phi, 1.0)
    np.testing.assert_allclose(start, phi[0], atol=1e-12)
    np.testing.assert_allclose(end, phi[2], atol=1e-12)
    for f in (0.1, 0.4, 1.0, 1.3):
        point, r = emb.step_point(phi, f, "chordal")
        assert np.linalg.norm(point - phi[0]) == pytest.approx(f * np.linalg.norm(end - start))
        np.testing.assert_allclose(point, emb.path_point(phi, r), atol=1e-12)
        point, r = emb.step_point(phi, f, "arc_length")
        assert emb.arc_length(phi, r) == pytest.approx(f * emb.arc_length(phi, 1.0), rel=1e-6)
        point, r = emb.step_point(phi, f, "parameter")
        assert r == f
    point, r = emb.step_point(phi, 1.5, "chordal", beyond="clip")
    assert r == pytest.approx(1.0) and np.allclose(point, end)
    assert emb.step_point(phi, 0.0)[1] == 0.0


# --------------------------------------------------------------------- the rule
def test_segment_rule_equals_asyncbezier_on_the_edge_control_points():
    rng = np.random.default_rng(7)
    d = 6
    base, current = rng.normal(size=d), rng.normal(size=d)
    curve = np.stack([base, base + rng.normal(size=d), base + rng.normal(size=d)])
    surface = np.concatenate([curve, base + rng.normal(size=(3, d))])
    for vartheta in (1.0, 0.0):
        tri = AsyncBezierTriangle(riemfl.Euclidean(d), 2.0, vartheta=vartheta)
        bez = AsyncBezier(riemfl.Euclidean(d), 2.0, vartheta=vartheta)
        new_tri = tri.apply(tri.embedding.base, Arrival(1, base, surface, current, 2, 0.3, 5))
        new_bez = bez.apply(bez.embedding.base, Arrival(1, base, curve, current, 2, 0.3, 5))
        np.testing.assert_allclose(new_tri, new_bez, atol=1e-12)
        psi = tri.corrected_parameters(Arrival(1, base, surface, current, 2, 0.3, 5))
        np.testing.assert_allclose(psi[0], current)  # the corrected triangle contains Theta^tau
    geodesic = AsyncBezierTriangle(riemfl.Euclidean(d), 2.0, path="geodesic")
    assert geodesic.name == "asyncbeziertriangle-geodesic" and tri.name == "asyncbeziertriangle"
    new = geodesic.apply(geodesic.embedding.base, Arrival(1, base, surface, current, 2, 0.3, 5))
    hat = geodesic.embedding.embed(
        geodesic.corrected_parameters(Arrival(1, base, surface, current, 2, 0.3, 5)),
        geodesic.embedding.omega,
    )
    fraction = 2.0 * 0.3
    assert np.linalg.norm(new - current) == pytest.approx(fraction * np.linalg.norm(hat - current))
    with pytest.raises(ShapeError):
        tri.apply(tri.embedding.base, Arrival(1, base, curve, current, 2, 0.3, 5))


def test_band_point_samples_the_band_by_area():
    rng = np.random.default_rng(8)
    np.testing.assert_allclose(band_point(0.3, 0.9, 0.0), [0.7, 0.3, 0.0])
    whole = np.array([band_point(a, b, 1.0) for a, b in rng.uniform(size=(20000, 2))])
    np.testing.assert_allclose(whole.mean(axis=0), [1 / 3] * 3, atol=0.01)  # the centroid
    half = np.array([band_point(a, b, 0.5) for a, b in rng.uniform(size=(2000, 2))])
    assert half[:, 2].max() <= 0.5 and np.allclose(half.sum(-1), 1.0) and (half >= 0).all()
    with pytest.raises(ParameterError):
        band_point(0.1, 0.1, 1.5)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: BezierTriangleEmbedding("R^3"), ParameterError, "Manifold"),
        (lambda: BezierTriangleEmbedding(riemfl.Euclidean(3), path="disk"), ParameterError, "path"),
        (lambda: BezierTriangleEmbedding(riemfl.Sphere(3), path="geodesic"), ParameterError,
         "Euclidean base"),
        (lambda: BezierTriangleEmbedding(riemfl.Euclidean(3), nodes=1), ParameterError, "nodes"),
        (lambda: BezierTriangleEmbedding(riemfl.Euclidean(3)).embed(np.zeros((6, 3)), [0.5, 0.5]),
         ShapeError, "barycentric"),
        (lambda: BezierTriangleEmbedding(riemfl.Euclidean(3)).embed(np.zeros((6, 3)), [1, 1, 0]),
         ParameterError, "sum to 1"),
        (lambda: AsyncBezierTriangle(riemfl.Euclidean(3), step_mode="x"), ParameterError, "step"),
    ],
)  # fmt: skip
def test_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


# --------------------------------------------------------------------- on the engine
class _SurfaceTrainer(ProblemTrainer):
    """Gradient steps on the local vertex, then on the triangle's inner control points."""

    def train(self, i, start, rng, epochs=None):
        phi = np.repeat(np.asarray(start, dtype=float)[None], 6, axis=0)
        phi[2] = super().train(i, start, rng, epochs)
        for _ in range(4):
            x = band_point(rng.uniform(), rng.uniform(), 0.5)
            b = triangle_bernstein(x)
            g = self.problem.client_egrads([i], (b @ phi)[None])[0]
            phi[[1, 3, 4, 5]] -= self.step_size * b[[1, 3, 4, 5], None] * g
        return phi

    def evaluate(self, x):
        return problem_metrics(self.problem, x)


@pytest.mark.parametrize("path", ["segment", "geodesic"])
def test_asyncbeziertriangle_runs_on_the_engine_and_converges(path):
    problem = LeastSquares(d=3, n=4)
    trainer = _SurfaceTrainer(problem, 0.2, local_steps=3)
    h = run_async(
        trainer,
        AsyncBezierTriangle(problem.manifold, 2.0, path=path),
        40,
        x0=np.full(3, 4.0),
        timing=ExponentialTime([0.2, 0.5, 1.0, 2.0]),
        options=RunOptions(record_every=20),
    )
    assert h.metrics["optimality_gap"][-1] < 1e-2 * h.metrics["optimality_gap"][0]
    assert max(h.log["staleness"]) > 0

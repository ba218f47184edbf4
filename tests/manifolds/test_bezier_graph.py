"""BezierGraph: the conformance kit on curve images, plus exact constants and errors."""

import math

import numpy as np
import pytest

from riemfl import ParameterError
from riemfl.manifolds.bezier import BezierCurve
from riemfl.manifolds.bezier_graph import BezierGraph
from riemfl.testing import ManifoldTests

QUADRATIC = BezierGraph(BezierCurve(np.array([[0.0, 0.0, 0.0], [1.0, 0.8, 0.1], [2.0, 0.0, 0.3]])))
CUBIC = BezierGraph(BezierCurve(np.array([[0.0, 0.0], [1.0, 1.0], [2.0, -1.0], [3.0, 0.0]])))


class TestQuadraticGraph(ManifoldTests):
    manifold = QUADRATIC


class TestCubicGraph(ManifoldTests):
    pytestmark = pytest.mark.slow  # the quadratic graph is the quick tier's representative
    manifold = CUBIC
    max_tangent_norm = 0.5


def test_quadratic_reach_is_the_vertex_radius_of_curvature():
    # c(t) = (2t, 2t(1 - t) h): a parabola y = h x (1 - x/2) ... radius at the vertex 1/(h/2)
    h = 1.5
    curve = BezierCurve(np.array([[0.0, 0.0], [1.0, h], [2.0, 0.0]]))
    graph = BezierGraph(curve)
    # y(x) = h x - h x^2 / 2, curvature at the vertex |y''| = h, radius 1 / h
    assert graph.proximal_smoothness == pytest.approx(1.0 / h)
    straight = BezierGraph(BezierCurve(np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])))
    assert straight.proximal_smoothness == math.inf


def test_numerical_reach_close_to_the_exact_one_for_a_quadratic_written_as_a_cubic():
    quad = np.array([[0.0, 0.0], [1.0, 1.5], [2.0, 0.0]])
    cubic = np.stack([quad[0], (quad[0] + 2 * quad[1]) / 3, (2 * quad[1] + quad[2]) / 3, quad[2]])
    exact = BezierGraph(BezierCurve(quad)).proximal_smoothness
    estimate = BezierGraph(BezierCurve(cubic)).proximal_smoothness
    assert estimate == pytest.approx(exact, rel=1e-3)


def test_geodesic_distance_is_arc_length():
    g = QUADRATIC
    x, y = g.curve(0.2), g.curve(0.9)
    assert float(g.dist(x, y)) == pytest.approx(float(g.curve.arc_length(0.2, 0.9)), rel=1e-10)
    np.testing.assert_allclose(g.exp(x, g.log(x, y)), y, atol=1e-10)


def test_not_an_immersion():
    with pytest.raises(ParameterError, match="not an immersion"):
        BezierGraph(BezierCurve(np.ones((3, 4))))
    with pytest.raises(ParameterError, match="not an immersion"):  # folds back on a line
        BezierGraph(BezierCurve(np.array([[0.0, 0.0], [2.0, 0.0], [1.0, 0.0]])))

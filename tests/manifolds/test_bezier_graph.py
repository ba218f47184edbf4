"""BezierGraph: the conformance kit on curve images, plus exact constants and errors."""

import math

import numpy as np
import pytest

from riemfl import ParameterError
from riemfl.manifolds.bezier import BezierCurve
from riemfl.manifolds.bezier_graph import BezierGraph
from riemfl.testing import ManifoldTests, checks

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
    assert graph.reach == pytest.approx(1.0 / h)
    straight = BezierGraph(BezierCurve(np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])))
    assert straight.reach == math.inf


def test_numerical_reach_close_to_the_exact_one_for_a_quadratic_written_as_a_cubic():
    quad = np.array([[0.0, 0.0], [1.0, 1.5], [2.0, 0.0]])
    cubic = np.stack([quad[0], (quad[0] + 2 * quad[1]) / 3, (2 * quad[1] + quad[2]) / 3, quad[2]])
    exact = BezierGraph(BezierCurve(quad)).reach
    estimate = BezierGraph(BezierCurve(cubic)).reach
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


# Points of CUBIC beside its inflection point c(1/2) = (1.5, 0) (where the curvature changes
# sign), with tangent vectors towards it: the Taylor remainders of exp and the retraction are
# exact to ~1e-15 there (checked against a 40-digit reference), but the leading term (the
# curvature, or its square, nearly zero) is overtaken by the next one within the kit's steps, so
# the fitted slope of the whole remainder is below the order. Each failed the kit's check named
# (x is c(t) for a parameter t, or the projection of a printed point; u the tangent part of v).
INFLECTION_EXAMPLES = {
    # slope 1.69 < 2 (found by a scan of the inflection)
    "retraction first order": (
        checks.check_retraction_first_order,
        0.4997548805866338,
        [0.11390867, -0.05695429],
    ),
    # the first-order part of the check: slope 1.71 < 2 (same scan)
    "exp first order": (
        checks.check_exp_second_order,
        0.49923241946909824,
        [0.34548954, -0.17274355],
    ),
    # the tangential part: slope 2.70 < 3 (the thorough hypothesis profile, --hypothesis-seed=2)
    "exp second order": (
        checks.check_exp_second_order,
        [1.5126816, -0.00634035],
        [-0.2289034, 0.11442716],
    ),
}


def _inflection_example(name):
    _, where, v = INFLECTION_EXAMPLES[name]
    x = np.asarray(CUBIC.curve(where) if np.ndim(where) == 0 else CUBIC.project(np.array(where)))
    return x, np.asarray(CUBIC.to_tangent(x, np.array(v)))


@pytest.mark.parametrize("name", sorted(INFLECTION_EXAMPLES))
def test_taylor_checks_beside_the_inflection_point(name):
    x, u = _inflection_example(name)
    INFLECTION_EXAMPLES[name][0](CUBIC, x, u)


class _Perturbed(BezierGraph):
    """CUBIC with exp (= the retraction) of ``gain`` u + ``bend`` |u|^2 v (v the unit velocity
    at x) for u: first order only for gain 1, second order only for bend 0."""

    def __init__(self, gain: float, bend: float) -> None:
        super().__init__(CUBIC.curve)
        self.gain, self.bend = gain, bend

    def _exp(self, x, u):
        v = self._unit_velocity(self.curve, self._param(x))
        return super()._exp(x, self.gain * u + self.bend * np.sum(u * u) * v)

    _retract = _exp


@pytest.mark.parametrize("name", sorted(INFLECTION_EXAMPLES))
def test_taylor_checks_still_reject_wrong_maps_beside_the_inflection_point(name):
    x, u = _inflection_example(name)
    with pytest.raises(AssertionError, match="retraction is not first order"):
        checks.check_retraction_first_order(_Perturbed(1.01, 0.0), x, u)
    with pytest.raises(AssertionError, match="exp is not"):  # the tangential part: slope 1
        checks.check_exp_second_order(_Perturbed(1.01, 0.0), x, u)
    with pytest.raises(AssertionError, match="exp is not second order"):
        checks.check_exp_second_order(_Perturbed(1.0, 0.1), x, u)

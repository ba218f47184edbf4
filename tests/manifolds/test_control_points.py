"""ControlPoints: M^n with the point parametrisation phi."""

import numpy as np
import pytest
from hypothesis import given

from riemfl import Euclidean, NotOnManifoldError, ParameterError, Sphere, Stiefel
from riemfl.manifolds.bezier import BezierCurve
from riemfl.manifolds.control_points import ControlPoints
from riemfl.testing import ManifoldTests
from riemfl.testing import strategies as rst


class TestControlPointsSphere(ManifoldTests):
    manifold = ControlPoints(Sphere(4), 3)


class TestControlPointsEuclidean(ManifoldTests):
    pytestmark = pytest.mark.slow  # a variant: the sphere base is the quick tier's
    manifold = ControlPoints(Euclidean(5), 3)


class TestControlPointsStiefel(ManifoldTests):
    pytestmark = pytest.mark.slow  # a variant: the sphere base is the quick tier's
    manifold = ControlPoints(Stiefel(4, 2), 2)


@given(theta=rst.points(Sphere(4), (2,)))
def test_phi_and_its_inverse(theta):
    m = ControlPoints(Sphere(4), 3)
    x = m.phi(theta)
    assert x.shape == (2, 3, 4)
    m.check_point(x)
    np.testing.assert_array_equal(m.phi_inverse(x), theta)
    curve = BezierCurve(x[0], Sphere(4))  # phi(theta) is the constant curve at theta
    np.testing.assert_allclose(curve(np.linspace(0, 1, 5)), np.tile(theta[0], (5, 1)), atol=1e-12)


def test_phi_inverse_is_only_defined_on_the_degenerate_curves():
    m = ControlPoints(Euclidean(3), 3)
    with pytest.raises(NotOnManifoldError, match="only defined where all control points"):
        m.phi_inverse(np.arange(9.0).reshape(3, 3))


def test_product_metric_and_constants():
    m = ControlPoints(Sphere(3), 4)
    x = m.random_point(rng=0)
    u = m.random_tangent(x, rng=1)
    y = m.exp(x, 0.3 * u)
    per_point = Sphere(3).dist(x, y)
    assert float(m.dist(x, y)) == pytest.approx(float(np.sqrt(np.sum(per_point**2))))
    assert m.dim == 8 and m.diameter == pytest.approx(4.0) and m.reach == 1.0
    assert ControlPoints(Stiefel(4, 2), 3).supports("parallel_transport")[0] is False
    with pytest.raises(ParameterError):
        ControlPoints(Sphere(3), 0)

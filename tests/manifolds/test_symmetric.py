"""Symmetric and SkewSymmetric beyond the kit: the projection is the nearest point, the
violation is the distance to the subspace, the two are orthogonal complements."""

import numpy as np
import pytest

from riemfl import NotOnManifoldError, ParameterError, SkewSymmetric, Symmetric


@pytest.mark.parametrize("cls", [Symmetric, SkewSymmetric])
def test_project_is_the_nearest_point_and_the_violation_its_distance(cls):
    m = cls(4)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 4))
    p = m.project(a)
    m.check_point(p)
    _, violation = m.point_violation(a)
    assert violation == pytest.approx(np.linalg.norm(a - p))
    for _ in range(20):  # no point of the subspace is closer
        y = m.random_point(rng=rng)
        assert np.linalg.norm(a - y) >= np.linalg.norm(a - p)
    # the residual is orthogonal to the subspace
    assert np.sum((a - p) * m.random_point(rng=rng)) == pytest.approx(0.0, abs=1e-12)


def test_the_two_are_orthogonal_complements():
    a = np.random.default_rng(1).standard_normal((3, 5, 5))
    np.testing.assert_allclose(Symmetric(5).project(a) + SkewSymmetric(5).project(a), a)
    assert Symmetric(5).dim + SkewSymmetric(5).dim == 25


def test_check_point_names_the_asymmetry():
    x = np.array([[1.0, 2.0], [2.5, 1.0]])
    with pytest.raises(NotOnManifoldError, match=r"X = X\^T is violated by 3\.5"):
        Symmetric(2).check_point(x)
    with pytest.raises(NotOnManifoldError, match=r"X = -X\^T"):
        SkewSymmetric(2).check_point(x)
    with pytest.raises(NotOnManifoldError, match=r"U = U\^T"):
        Symmetric(2).check_tangent(np.eye(2), x)


def test_maps_are_flat():
    m = Symmetric(3)
    rng = np.random.default_rng(2)
    x, y = m.random_point(2, rng=rng)
    u = m.random_tangent(x, rng=rng)
    np.testing.assert_allclose(m.exp(x, u), x + u)
    np.testing.assert_allclose(m.log(x, y), y - x)
    assert m.dist(x, y) == pytest.approx(np.linalg.norm(y - x))
    np.testing.assert_allclose(m.parallel_transport(x, y, u), u)


def test_parameters():
    with pytest.raises(ParameterError, match=r"SkewSymmetric\(n\): n must be an integer >= 2"):
        SkewSymmetric(1)
    with pytest.raises(ParameterError, match=r"Symmetric\(n\): n must be an integer >= 1"):
        Symmetric(0)
    assert Symmetric(1).dim == 1

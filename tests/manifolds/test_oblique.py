"""Oblique beyond the kit: the sphere's maps column by column (and pymanopt's), the projection
at a zero column, the cut locus of a column, and the constants attained."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from riemfl import CutLocusError, Oblique, ProjectionError, Sphere
from riemfl.testing import importorskip
from riemfl.testing import strategies as rst


@given(seed=rst.seeds(), norm=st.floats(0.0, 2.5))
def test_every_map_is_the_spheres_on_each_column(seed, norm):
    m, sphere = Oblique(4, 3), Sphere(4)
    rng = np.random.default_rng(seed)
    x = m.random_point(rng=rng)
    u = rst.scaled_tangent(m, x, norm, rng)
    v = m.random_tangent(x, rng=rng)
    y = m.exp(x, u)
    for j in range(3):
        np.testing.assert_allclose(y[:, j], sphere.exp(x[:, j], u[:, j]), atol=1e-15)
        np.testing.assert_allclose(m.log(x, y)[:, j], sphere.log(x[:, j], y[:, j]), atol=1e-15)
        pt = sphere.parallel_transport(x[:, j], y[:, j], v[:, j])
        np.testing.assert_allclose(m.parallel_transport(x, y, v)[:, j], pt, atol=1e-15)
    angles = [sphere.dist(x[:, j], y[:, j]) for j in range(3)]
    assert m.dist(x, y) == pytest.approx(np.linalg.norm(angles), rel=1e-14)


@given(seed=rst.seeds(), norm=st.floats(0.01, 2.5))
def test_matches_pymanopt(seed, norm):
    pymanopt = importorskip("pymanopt")
    ref = pymanopt.manifolds.Oblique(5, 3)
    m = Oblique(5, 3)
    rng = np.random.default_rng(seed)
    x = m.random_point(rng=rng)
    u = rst.scaled_tangent(m, x, norm, rng)
    y = m.exp(x, u)
    np.testing.assert_allclose(y, ref.exp(x, u), atol=1e-14)
    np.testing.assert_allclose(m.retract(x, u), ref.retraction(x, u), atol=1e-14)
    np.testing.assert_allclose(m.log(x, y), ref.log(x, y), atol=1e-7)
    np.testing.assert_allclose(m.dist(x, y), ref.dist(x, y), atol=1e-7)
    g, h = rng.standard_normal((2, 5, 3))
    np.testing.assert_allclose(
        m.ehess_to_rhess(x, g, h, u), ref.euclidean_to_riemannian_hessian(x, g, h, u), atol=1e-14
    )


def test_project_names_a_zero_column():
    m = Oblique(3, 4)
    a = np.random.default_rng(0).standard_normal((2, 3, 4))
    np.testing.assert_allclose(m.project(a), a / np.linalg.norm(a, axis=-2, keepdims=True))
    a[1, :, 2] = 0.0
    with pytest.raises(ProjectionError, match=r"column 2 of batch element \(1,\)"):
        m.project(a)
    with pytest.raises(ProjectionError, match="column 2 of the ambient"):
        m.project(a[1])


def test_an_antipodal_column_is_the_cut_locus():
    m = Oblique(3, 2)
    x = m.random_point(rng=0)
    y = x.copy()
    y[:, 1] *= -1
    with pytest.raises(CutLocusError, match=r"Oblique\(3, 2\), a column"):
        m.log(x, y)
    assert m.dist(x, y) == pytest.approx(np.pi)  # defined there: one column at pi


def test_constants_are_attained():
    m = Oblique(5, 3)
    x = m.random_point(rng=1)
    assert np.linalg.norm(x - (-x)) == pytest.approx(m.diameter)
    zeroed = x.copy()
    zeroed[:, 0] = 0.0  # at distance 1 = the reach, every unit vector nearest to that column
    assert np.linalg.norm(zeroed - x) == pytest.approx(m.reach)
    with pytest.raises(ProjectionError):
        m.project(zeroed)
    u = np.zeros_like(x)
    u[:, 0] = Sphere(5).random_tangent(x[:, 0], rng=2)
    u *= (np.pi - 1e-9) / np.linalg.norm(u)  # one column almost to its antipode
    assert m.norm(x, m.log(x, m.exp(x, u))) == pytest.approx(m.injectivity_radius, rel=1e-8)

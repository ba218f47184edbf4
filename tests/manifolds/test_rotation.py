"""The O(D) plane rotation of AsyncCurve."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from riemfl import ShapeError
from riemfl.manifolds.rotation import PlaneRotation
from riemfl.testing import importorskip
from riemfl.testing import strategies as rst


def unit(v):
    return v / np.linalg.norm(v)


@given(seed=rst.seeds(), dim=st.integers(2, 9))
def test_orthogonal_proper_and_maps_u_to_w(seed, dim):
    rng = np.random.default_rng(seed)
    u, w = rng.standard_normal(dim), rng.standard_normal(dim) * 3.0
    rot = PlaneRotation(u, w)
    m = rot.matrix()
    np.testing.assert_allclose(m.T @ m, np.eye(dim), atol=1e-12)
    assert np.linalg.det(m) == pytest.approx(1.0)
    np.testing.assert_allclose(rot(unit(u)), unit(w), atol=1e-12)
    x = rng.standard_normal((4, dim))
    np.testing.assert_allclose(rot.inverse(rot(x)), x, atol=1e-12)
    np.testing.assert_allclose(rot(x), x @ m.T, atol=1e-12)  # batch = matrix action
    # identity on the orthogonal complement of span(u, w)
    basis = np.linalg.qr(np.stack([u, w], axis=1))[0]
    z = rng.standard_normal(dim)
    z -= basis @ (basis.T @ z)
    np.testing.assert_allclose(rot(z), z, atol=1e-12)
    assert rot.angle == pytest.approx(np.arccos(np.clip(unit(u) @ unit(w), -1, 1)), abs=1e-7)


def test_degenerate_cases():
    u = np.array([1.0, 2.0, 2.0])
    x = np.array([0.3, -1.0, 4.0])
    np.testing.assert_allclose(PlaneRotation(u, 5 * u)(x), x)  # parallel: identity
    np.testing.assert_allclose(PlaneRotation(np.zeros(3), u)(x), x)  # zero vector: identity
    np.testing.assert_allclose(PlaneRotation(u, np.zeros(3))(x), x)
    anti = PlaneRotation(u, -2 * u)  # antiparallel: a rotation by pi, not a reflection
    m = anti.matrix()
    np.testing.assert_allclose(m @ unit(u), -unit(u), atol=1e-12)
    np.testing.assert_allclose(m.T @ m, np.eye(3), atol=1e-12)
    assert np.linalg.det(m) == pytest.approx(1.0)
    assert anti.angle == pytest.approx(np.pi)
    with pytest.raises(ShapeError):
        PlaneRotation(np.zeros(3), np.zeros(4))
    with pytest.raises(ShapeError):
        PlaneRotation(u, u)(np.zeros(4))


def test_torch_matches_numpy_and_is_differentiable():
    torch = importorskip("torch")
    rng = np.random.default_rng(0)
    u, w, x = (rng.standard_normal(6) for _ in range(3))
    ref = PlaneRotation(u, w)(x)
    ut, wt = torch.tensor(u, requires_grad=True), torch.tensor(w)
    out = PlaneRotation(ut, wt)(torch.tensor(x))
    np.testing.assert_allclose(out.detach().numpy(), ref, atol=1e-12)
    out.sum().backward()
    assert torch.isfinite(ut.grad).all()

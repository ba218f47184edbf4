"""PSDFixedRank beyond the kit: pymanopt's maps, the horizontal space, exp on its domain and log
as the Procrustes alignment, the class invariance of the maps, and the typed errors."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from riemfl import (
    CutLocusError,
    NotOnManifoldError,
    ParameterError,
    ProjectionError,
    PSDFixedRank,
)
from riemfl.testing import importorskip
from riemfl.testing import strategies as rst


def _orthogonal(rng, k):
    q, r = np.linalg.qr(rng.standard_normal((k, k)))
    return q * np.sign(np.diag(r))


@given(seed=rst.seeds())
def test_matches_pymanopt(seed):
    pymanopt = importorskip("pymanopt")
    ref = pymanopt.manifolds.PSDFixedRank(5, 2)
    m = PSDFixedRank(5, 2)
    rng = np.random.default_rng(seed)
    y = m.random_point(rng=rng)
    a, h = rng.standard_normal(y.shape), rng.standard_normal(y.shape)
    u = m.random_tangent(y, rng=rng)
    np.testing.assert_allclose(m.to_tangent(y, a), ref.projection(y, a), atol=1e-12)
    np.testing.assert_allclose(
        m.ehess_to_rhess(y, a, h, u), ref.euclidean_to_riemannian_hessian(y, a, h, u), atol=1e-12
    )
    np.testing.assert_allclose(m.retract(y, u), ref.retraction(y, u), atol=1e-15)
    assert m.dim == ref.dim


@given(seed=rst.seeds())
def test_horizontal_space(seed):
    """P^h kills the vertical Y Omega, returns Y^T U symmetric, and A - P^h(A) is vertical."""
    m = PSDFixedRank(6, 3)
    rng = np.random.default_rng(seed)
    y = m.random_point(rng=rng)
    w = rng.standard_normal((3, 3))
    np.testing.assert_allclose(m.to_tangent(y, y @ (w - w.T)), 0.0, atol=1e-12)
    a = rng.standard_normal(y.shape)
    p = m.to_tangent(y, a)
    np.testing.assert_allclose(y.T @ p, p.T @ y, atol=1e-12)
    omega = np.linalg.lstsq(y, a - p, rcond=None)[0]
    np.testing.assert_allclose(y @ omega, a - p, atol=1e-12)
    np.testing.assert_allclose(omega, -omega.T, atol=1e-12)
    with pytest.raises(NotOnManifoldError, match="horizontal"):
        m.check_tangent(y, y @ (w - w.T))


@given(seed=rst.seeds(), t=st.floats(0.0, 1.0))
@example(seed=1, t=0.0)  # Z = Y: the Procrustes reference cancels (the thorough profile's)
def test_the_horizontal_segment_is_minimising(seed, t):
    """dist(Y, Y + tU) = t |U| and dist = min_Q |ZQ - Y|_F =
    sqrt(|Y|^2 + |Z|^2 - 2 |Z^T Y|_*) (Procrustes) for U in the domain of exp."""
    m = PSDFixedRank(5, 2)
    rng = np.random.default_rng(seed)
    y = m.random_point(rng=rng)
    u = rst.scaled_tangent(m, y, 0.9, rng)
    z = m.exp(y, t * u)
    assert float(m.dist(y, z)) == pytest.approx(t * 0.9, abs=1e-12)
    zq = z @ _orthogonal(rng, 2)
    nuclear = np.linalg.svd(zq.T @ y, compute_uv=False).sum()
    squares = np.sum(y * y) + np.sum(zq * zq)
    procrustes = np.sqrt(max(squares - 2 * nuclear, 0.0))
    # the reference cancels: its square s is accurate to E = k eps (|Y|^2 + |Z|^2) only (k = 16
    # with margin), and |sqrt(s + e) - sqrt(s)| <= min(sqrt(E), E / (2 sqrt(s))) for |e| <= E:
    # 3e-8 at t = 0 (riemfl's distance there: 3e-16); 1e-10 bounds riemfl's own error
    error = 16 * np.finfo(np.float64).eps * squares
    tol = 1e-10 + min(np.sqrt(error), error / (2 * procrustes + 1e-300))
    assert float(m.dist(y, zq)) == pytest.approx(procrustes, abs=tol)
    assert float(m.dist(zq, y)) == pytest.approx(procrustes, abs=tol)


@given(seed=rst.seeds())
def test_maps_respect_the_classes(seed):
    """Y' = YQ, Z' = ZR: lifts move by Q, log(YQ, ZR) = log(Y, Z) Q, point_gap(Y, YQ) = 0."""
    m = PSDFixedRank(5, 3)
    rng = np.random.default_rng(seed)
    y, z = m.random_point(rng=rng), m.random_point(rng=rng)
    q, r = _orthogonal(rng, 3), _orthogonal(rng, 3)
    u = m.random_tangent(y, rng=rng)
    a = rng.standard_normal(y.shape)
    np.testing.assert_allclose(m.to_tangent(y @ q, a @ q), m.to_tangent(y, a) @ q, atol=1e-12)
    np.testing.assert_allclose(m.log(y @ q, z @ r), m.log(y, z) @ q, atol=1e-11)
    s = rng.standard_normal((5, 5))
    s = s + s.T
    hess = m.ehess_to_rhess(y, s @ y, s @ u, u)
    np.testing.assert_allclose(m.ehess_to_rhess(y @ q, s @ y @ q, s @ u @ q, u @ q), hess @ q)
    assert float(m.point_gap(y, y @ q)) < 1e-13


def test_domains_and_typed_errors():
    m = PSDFixedRank(4, 2)
    y = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    # exp leaves its domain: Y^T (Y + U) = diag(-1, 1) with U = diag(-2, 0) horizontal
    u = np.array([[-2.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    with pytest.raises(CutLocusError, match="positive definite"):
        m.exp(y, u)
    with pytest.raises(NotOnManifoldError, match="rank below 2"):
        m.retract(y, np.array([[-1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]))
    # log: Z^T Y singular (a column of Z orthogonal to span Y)
    z = np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    with pytest.raises(CutLocusError, match="singular"):
        m.log(y, z)
    deficient = np.array([[1.0, 2.0], [2.0, 4.0], [0.0, 0.0], [3.0, 6.0]])
    with pytest.raises(ProjectionError, match="rank below 2"):
        m.project(deficient)
    with pytest.raises(NotOnManifoldError, match="rank Y = 2"):
        m.check_point(deficient)
    nan = y.copy()
    nan[0, 0] = np.nan
    with pytest.raises(NotOnManifoldError, match="NaN"):
        m.check_point(nan)
    np.testing.assert_array_equal(m.project(y), y)
    assert float(m.local_reach(y)) == pytest.approx(1.0)
    with pytest.raises(ParameterError, match=r"PSDFixedRank\(n, k\): n \(n >= k\) .* >= 3"):
        PSDFixedRank(2, 3)
    ok, why = m.supports("parallel_transport")
    assert not ok and "O'Neill" in why
    with pytest.raises(NotImplementedError, match="not complete"):
        m.injectivity_radius  # noqa: B018
    with pytest.raises(NotImplementedError, match="local_reach"):
        m.reach  # noqa: B018


@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 6))
def test_gram_lyapunov_solves_the_equation_the_dense_solve_solves(seed, k):
    """numpy's eigenbasis solve of M S + S M = C (M = Y^T Y) agrees with the dense k^2 solve."""
    from riemfl.linalg import solve_lyapunov
    from riemfl.manifolds.factor_quotient import _gram_lyapunov

    rng = np.random.default_rng(seed)
    y = rng.standard_normal((3, k + 4, k))
    m = np.swapaxes(y, -1, -2) @ y
    c = rng.standard_normal((3, k, k))
    s = _gram_lyapunov(m, c)
    np.testing.assert_allclose(m @ s + s @ m, c, atol=1e-9 * (1 + np.abs(c).max()))
    np.testing.assert_allclose(s, solve_lyapunov(m, c), atol=1e-9 * (1 + np.abs(s).max()))


def test_gram_lyapunov_of_a_rank_deficient_gram_is_the_dense_solve():
    from riemfl.errors import CutLocusError
    from riemfl.manifolds.factor_quotient import _gram_lyapunov

    m = np.diag([1.0, 0.0])
    with pytest.raises(CutLocusError):
        _gram_lyapunov(m, np.array([[0.0, 1.0], [-1.0, 0.0]]))

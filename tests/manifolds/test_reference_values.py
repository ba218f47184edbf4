"""riemfl's maps against independent references: closed forms, scipy, pymanopt and geoopt."""

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize
from hypothesis import given
from hypothesis import strategies as st

from riemfl import Grassmann, Lorentz, Sphere, Stiefel
from riemfl.testing import importorskip
from riemfl.testing import strategies as rst

pymanopt = importorskip("pymanopt")
torch = importorskip("torch")
geoopt = importorskip("geoopt")


def tangent(m, x, norm, seed):
    return rst.scaled_tangent(m, x, norm, np.random.default_rng(seed))


@given(seed=rst.seeds(), norm=st.floats(0.05, 2.5))
def test_stiefel_exp_matches_pymanopt(seed, norm):
    m = Stiefel(7, 3)
    x = m.random_point(rng=seed)
    u = tangent(m, x, norm, seed + 1)
    ref = pymanopt.manifolds.Stiefel(7, 3).exp(x, u)
    np.testing.assert_allclose(m.exp(x, u), ref, atol=1e-11)


@given(seed=rst.seeds())
def test_stiefel_project_is_svd_polar_factor(seed):
    a = np.random.default_rng(seed).standard_normal((9, 4))
    u, _, vt = np.linalg.svd(a, full_matrices=False)
    np.testing.assert_allclose(Stiefel(9, 4).project(a), u @ vt, atol=1e-11)


@given(seed=rst.seeds(), norm=st.floats(0.0, 2.0))
def test_stiefel_retractions_match_pymanopt(seed, norm):
    for kind in ("polar", "qr"):
        m = Stiefel(6, 3, retraction=kind)
        x = m.random_point(rng=seed)
        u = tangent(m, x, norm, seed + 2)
        ref = pymanopt.manifolds.Stiefel(6, 3, retraction=kind).retraction(x, u)
        np.testing.assert_allclose(m.retract(x, u), ref, atol=1e-11)


def test_stiefel_exp_is_a_geodesic_of_the_embedded_metric():
    """Y'' + Y (Y'^T Y') = 0 along Exp_X(tU) (Edelman et al. 1998, eq. 2.7 with A = X^T U)."""
    m = Stiefel(6, 2)
    x = m.random_point(rng=3)
    u = tangent(m, x, 1.3, 4)
    h, t = 1e-4, 0.7
    y = m.exp(x, t * u)
    yp = (m.exp(x, (t + h) * u) - m.exp(x, (t - h) * u)) / (2 * h)
    ypp = (m.exp(x, (t + h) * u) - 2 * y + m.exp(x, (t - h) * u)) / h**2
    np.testing.assert_allclose(ypp + y @ (yp.T @ yp), 0.0, atol=1e-6)


def test_stiefel_inverse_qr_matches_the_triangular_system():
    m = Stiefel(8, 4, retraction="qr")
    x = m.random_point(rng=5)
    u = tangent(m, x, 0.8, 6)
    y = m.retract(x, u)
    xi = m.inverse_retract(x, y)
    r = np.linalg.lstsq(y, x + xi, rcond=None)[0]  # x + xi = y R
    np.testing.assert_allclose(np.tril(r, -1), 0.0, atol=1e-11)
    assert np.all(np.diag(r) > 0)
    np.testing.assert_allclose(xi, u, atol=1e-11)


@given(seed=rst.seeds(), norm=st.floats(0.05, 1.4))
def test_grassmann_exp_log_dist_match_pymanopt(seed, norm):
    m = Grassmann(7, 3)
    ref = pymanopt.manifolds.Grassmann(7, 3)
    x = m.random_point(rng=seed)
    u = tangent(m, x, norm, seed + 1)
    y = m.exp(x, u)
    assert float(m.point_gap(y, ref.exp(x, u))) < 1e-10
    np.testing.assert_allclose(m.dist(x, y), ref.dist(x, y), atol=1e-9)
    np.testing.assert_allclose(m.log(x, y), ref.log(x, y), atol=1e-8)


@given(seed=rst.seeds())
def test_grassmann_dist_is_norm_of_principal_angles(seed):
    m = Grassmann(8, 3)
    rng = np.random.default_rng(seed)
    x, y = m.random_point(rng=rng), m.random_point(rng=rng)
    angles = scipy.linalg.subspace_angles(x, y)
    np.testing.assert_allclose(m.dist(x, y), np.linalg.norm(angles), atol=1e-9)


@given(seed=rst.seeds(), norm=st.floats(0.01, 3.0))
def test_sphere_matches_geoopt_exact(seed, norm):
    m = Sphere(6)
    ref = geoopt.SphereExact()
    x = m.random_point(rng=seed)
    u = tangent(m, x, norm, seed + 1)
    xt, ut = torch.as_tensor(x), torch.as_tensor(u)
    y = m.exp(x, u)
    np.testing.assert_allclose(y, ref.expmap(xt, ut).numpy(), atol=1e-12)
    np.testing.assert_allclose(m.log(x, y), ref.logmap(xt, torch.as_tensor(y)).numpy(), atol=1e-8)
    np.testing.assert_allclose(m.dist(x, y), ref.dist(xt, torch.as_tensor(y)).numpy(), atol=1e-8)


@pytest.mark.parametrize("gap", [1e-3, 1e-6, 1e-7, 1e-9, 1e-12])
def test_sphere_log_is_accurate_next_to_the_antipode(gap):
    """log(x, y) at angle pi - gap has norm pi - gap (the series of theta/sin theta, meant for
    theta -> 0, once answered 1 + s^2/6 here too: |log| was gap instead of pi - gap)."""
    m = Sphere(3)
    x = np.array([1.0, 0.0, 0.0])
    y = np.array([-np.cos(gap), np.sin(gap), 0.0])
    u = m.log(x, y)
    assert np.linalg.norm(u) == pytest.approx(np.pi - gap, rel=1e-14)
    np.testing.assert_allclose(m.exp(x, u), y, atol=1e-15)
    grad = torch.autograd.functional.jacobian(
        lambda t: Sphere(3).log(torch.as_tensor(x), t), torch.as_tensor(y)
    )
    assert bool(torch.isfinite(grad).all())


@given(seed=rst.seeds(), norm=st.floats(0.01, 3.0))
def test_lorentz_matches_geoopt(seed, norm):
    m = Lorentz(4)
    ref = geoopt.Lorentz()
    x = m.random_point(rng=seed)
    u = tangent(m, x, norm, seed + 1)
    v = tangent(m, x, 1.0, seed + 2)
    xt, ut, vt = (torch.as_tensor(a) for a in (x, u, v))
    y = m.exp(x, u)
    yt = torch.as_tensor(y)
    np.testing.assert_allclose(y, ref.expmap(xt, ut).numpy(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(m.dist(x, y), ref.dist(xt, yt).numpy(), rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(m.log(x, y), ref.logmap(xt, yt).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        m.parallel_transport(x, y, v), ref.transp(xt, yt, vt).numpy(), rtol=1e-9, atol=1e-9
    )
    np.testing.assert_allclose(m.lift(y + 0.1), ref.projx(torch.as_tensor(y + 0.1)).numpy())


@given(seed=rst.seeds(), beta=st.floats(0.3, 4.0), scale=st.floats(0.01, 5.0))
def test_lorentz_project_is_the_euclidean_nearest_point(seed, beta, scale):
    """Compare with a direct minimisation of |x - a| over the hyperboloid (scipy)."""
    m = Lorentz(3, beta=beta)
    rng = np.random.default_rng(seed)
    a = m.random_point(rng=rng) + scale * rng.standard_normal(4)
    if np.linalg.norm(a[1:]) < 1e-3:
        return
    p = m.project(a)
    m.check_point(p)

    def objective(spatial):
        x = np.concatenate([[np.sqrt(beta + spatial @ spatial)], spatial])
        return np.sum((x - a) ** 2)

    best = min(
        (
            scipy.optimize.minimize(objective, start, method="BFGS", options={"gtol": 1e-12})
            for start in (p[1:], a[1:], np.zeros(3), -a[1:])
        ),
        key=lambda r: r.fun,
    )
    assert np.sum((p - a) ** 2) <= best.fun * (1 + 1e-9) + 1e-12


def test_lorentz_project_is_stable_far_from_the_origin():
    m = Lorentz(3)
    for dtype in (np.float32, np.float64):
        x = m.lift(np.array([0.0, 3e3, -2e3, 1e3], dtype=dtype))
        m.check_point(x)
        p = m.project(x)
        m.check_point(p)
        np.testing.assert_allclose(p, x, rtol=1e-5 if dtype == np.float32 else 1e-12)
        u = m.random_tangent(x.astype(np.float64), rng=0).astype(dtype)
        y = m.exp(x, u / float(m.norm(x, u)))
        m.check_point(y)
        assert y.dtype == dtype


def test_lorentz_distance_is_accurate_for_close_and_far_points():
    m = Lorentz(2)
    x = m.random_point(rng=0)
    for d in (1e-9, 1e-5, 0.3, 5.0, 30.0):
        u = tangent(m, x, d, 1)
        np.testing.assert_allclose(m.dist(x, m.exp(x, u)), d, rtol=1e-8)


def test_constants_are_attained():
    """Reach and diameter are tight: points at distance exactly the reach have no unique P_M."""
    st_m = Stiefel(5, 2)
    x = st_m.random_point(rng=0)
    assert np.linalg.norm(x - (-x)) == pytest.approx(st_m.diameter)
    degenerate = x.copy()
    degenerate[:, 1] = 0.0  # at distance 1 = reach from x
    assert np.linalg.norm(degenerate - x) == pytest.approx(st_m.reach)
    from riemfl import ProjectionError

    with pytest.raises(ProjectionError):
        st_m.project(degenerate)
    lo = Lorentz(3, beta=2.0)
    focal = np.array([2 * np.sqrt(2.0) + 1e-3, 0, 0, 0])  # on the axis beyond the focal point
    with pytest.raises(ProjectionError, match="not unique"):
        lo.project(focal)
    inside = np.array([2 * np.sqrt(2.0) - 1e-3, 0, 0, 0])  # within the reach: the vertex
    np.testing.assert_allclose(lo.project(inside), [np.sqrt(2.0), 0, 0, 0], atol=1e-12)

"""Stiefel(n, p, metric="canonical"): the canonical metric's identities and closed forms (the
conformance kit runs in test_conformance.py, the Hessian checks in test_hessians.py)."""

import math
import pickle

import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings
from hypothesis import strategies as st

from riemfl import ConvergenceError, CutLocusError, ParameterError, Sphere, Stiefel
from riemfl.manifolds.stiefel_canonical import cayley_retraction
from riemfl.testing import checks, importorskip

SHAPES = [(5, 2), (4, 3), (6, 1), (3, 3)]  # p < n/2, p > n/2, the sphere, O(p)


def christoffel(x, u, v):
    """Edelman et al. 1998, eq. 2.49, polarised: the geodesics solve Y'' + Gamma(Y', Y') = 0."""
    qu, qv = u - x @ (x.T @ u), v - x @ (x.T @ v)
    return 0.5 * ((u @ v.T + v @ u.T) @ x + x @ (u.T @ qv + v.T @ qu))


def frame(m, seed, length):
    rng = np.random.default_rng(seed)
    x = m.random_point(rng=rng)
    u = m.random_tangent(x, rng=rng)
    return x, length * u / float(m.norm(x, u))


@given(seed=st.integers(0, 2**32 - 1), shape=st.sampled_from(SHAPES))
@settings(max_examples=10, deadline=None)
def test_canonical_inner_is_the_embedded_one_minus_half_the_span_part(seed, shape):
    """<U, V>_c = <U, V>_e - tr((X^T U)^T X^T V) / 2, so |XA + K|_c^2 = |A|^2 / 2 + |K|^2."""
    canonical, embedded = Stiefel(*shape, metric="canonical"), Stiefel(*shape)
    rng = np.random.default_rng(seed)
    x = canonical.random_point(rng=rng)
    u, v = (canonical.random_tangent(x, rng=rng) for _ in range(2))
    a, b = x.T @ u, x.T @ v
    expected = float(embedded.inner(x, u, v)) - 0.5 * float(np.sum(a * b))
    assert float(canonical.inner(x, u, v)) == pytest.approx(expected, abs=1e-12)
    k = u - x @ a
    squared = 0.5 * np.sum(a * a) + np.sum(k * k)
    assert float(canonical.norm(x, u)) ** 2 == pytest.approx(squared, rel=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", range(3))
def test_gradient_is_the_riesz_map_of_the_euclidean_pairing(shape, seed):
    """<G - X G^T X, V>_c = tr(G^T V) for every tangent V."""
    m = Stiefel(*shape, metric="canonical")
    rng = np.random.default_rng(seed)
    x = m.random_point(rng=rng)
    g, v = rng.standard_normal(x.shape), m.random_tangent(x, rng=rng)
    grad = m.egrad_to_rgrad(x, g)
    m.check_tangent(x, grad)
    assert float(m.inner(x, grad, v)) == pytest.approx(float(np.sum(g * v)), abs=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", range(3))
def test_exp_solves_the_geodesic_equation(shape, seed):
    """Y'' + Y' Y'^T Y + Y Y'^T (I - Y Y^T) Y' = 0 (Edelman et al. 1998, eq. 2.41) along
    Exp_X(tU), by central differences at t = 0.6, and |Y'| is constant."""
    m = Stiefel(*shape, metric="canonical")
    x, u = frame(m, seed, 1.3)
    t, h = 0.6, 1e-4

    def y(s):
        return m.exp(x, s * u)

    vel = (y(t + h) - y(t - h)) / (2 * h)
    acc = (y(t + h) - 2 * y(t) + y(t - h)) / h**2
    np.testing.assert_allclose(acc + christoffel(y(t), vel, vel), 0.0, atol=1e-6)
    assert float(m.norm(y(t), vel)) == pytest.approx(float(m.norm(x, u)), rel=1e-8)


@pytest.mark.parametrize("seed", range(4))
def test_sphere_and_orthogonal_group_closed_forms(seed):
    """p = 1: the great circle of Sphere(n). n = p: X expm(X^T U) (the canonical metric of O(p)
    is half the bi-invariant one, with the same geodesics) and X logm(X^T Y)."""
    column = Stiefel(6, 1, metric="canonical")
    x, u = frame(column, seed, 2.0)
    sphere = Sphere(6)
    np.testing.assert_allclose(column.exp(x, u)[:, 0], sphere.exp(x[:, 0], u[:, 0]), atol=1e-13)
    assert float(column.norm(x, u)) == pytest.approx(float(sphere.norm(x[:, 0], u[:, 0])))
    square = Stiefel(4, 4, metric="canonical")
    x, u = frame(square, seed, 2.0)
    y = x @ scipy.linalg.expm(x.T @ u)
    np.testing.assert_allclose(square.exp(x, u), y, atol=1e-13)
    np.testing.assert_allclose(
        square.log(x, y), x @ np.real(scipy.linalg.logm(x.T @ y)), atol=1e-11
    )
    np.testing.assert_allclose(square.log(x, y), u, atol=1e-11)


@pytest.mark.parametrize("shape", [(7, 3), (5, 3), (20, 5), (6, 1)])
@pytest.mark.parametrize("length", [0.1, 1.0, 2.0, 2.5])
def test_exp_log_within_the_injectivity_radius(shape, length):
    """log(exp(U)) = U and exp(log(Y)) = Y for |U| up to 2.5 < sqrt(4/5) pi = 2.81 (Zimmermann's
    algorithm converges in 4 to 75 iterations there); dist = |U|; far points raise."""
    m = Stiefel(*shape, metric="canonical")
    assert length < m.injectivity_radius
    x, u = frame(m, 7, length)
    y = m.exp(x, u)
    v = m.log(x, y)
    np.testing.assert_allclose(v, u, atol=1e-9)
    np.testing.assert_allclose(m.exp(x, v), y, atol=1e-12)
    assert float(m.dist(x, y)) == pytest.approx(length, rel=1e-9)


@pytest.mark.parametrize("length", [0.0, 0.5, 2.0])
def test_torch_gradient_of_log_is_that_of_the_implicit_function(length):
    """d/ds <W, Log_{X(s)}(Y(s))> by autograd (implicit differentiation, GMRES) against central
    differences along retraction curves of both points; at distance 2 the fixed point's Jacobian
    has a spectral radius near 1, where a Neumann series would not do."""
    torch = importorskip("torch")
    m = Stiefel(6, 2, metric="canonical")
    x, u = frame(m, 5, 1.0)
    y = m.exp(x, length * u)
    rng = np.random.default_rng(6)
    w, dx, dy = (
        rng.standard_normal(x.shape),
        m.random_tangent(x, rng=rng),
        m.random_tangent(y, rng=rng),
    )
    xt, yt = (torch.tensor(a, requires_grad=True) for a in (x, y))
    (torch.as_tensor(w) * m.log(xt, yt)).sum().backward()
    auto = float(np.sum(xt.grad.numpy() * dx) + np.sum(yt.grad.numpy() * dy))

    def value(h):
        return float(np.sum(w * m.log(m.retract(x, h * dx), m.retract(y, h * dy))))

    h = 1e-6
    assert auto == pytest.approx((value(h) - value(-h)) / (2 * h), rel=1e-6, abs=1e-7)


def test_log_raises_where_it_cannot_converge():
    m = Stiefel(6, 2, metric="canonical", log_max_iter=5)
    x, u = frame(m, 0, 2.5)
    with pytest.raises(ConvergenceError, match="did not converge in 5 iterations"):
        m.log(x, m.exp(x, u))
    square = Stiefel(3, 3, metric="canonical")
    x = square.random_point(rng=0)
    with pytest.raises(CutLocusError, match="components of O"):
        square.log(x, x * np.array([1.0, 1.0, -1.0]))


def test_cayley_is_a_second_order_retraction_for_the_canonical_metric_only():
    """R_X(tU) - Exp_X(tU) = O(t^3) for the canonical exp, O(t^2) against the embedded exp
    (and the polar retraction is first order for the canonical metric)."""
    canonical, embedded = Stiefel(7, 3, metric="canonical"), Stiefel(7, 3)
    x, u = frame(canonical, 3, 1.0)
    ts = np.logspace(-3, -1.5, 7)

    def slope(curve, exp):
        errors = np.array([np.linalg.norm(curve(x, t * u) - exp(x, t * u)) for t in ts])
        return checks.taylor_slope(ts, errors, 1e-13)

    assert slope(cayley_retraction, canonical.exp) == pytest.approx(3.0, abs=0.1)
    assert slope(cayley_retraction, embedded.exp) == pytest.approx(2.0, abs=0.1)
    polar = Stiefel(7, 3, retraction="polar", metric="canonical")
    assert slope(polar.retract, canonical.exp) == pytest.approx(2.0, abs=0.1)
    assert slope(embedded.retract, embedded.exp) == pytest.approx(3.0, abs=0.1)


@pytest.mark.parametrize("metric", ["embedded", "canonical"])
def test_cayley_and_its_closed_form_inverse(metric):
    """R_X(U) = (I - W/2)^(-1)(I + W/2) X with the n x n W, and its inverse on any Y near X."""
    m = Stiefel(6, 2, retraction="cayley", metric=metric)
    x, u = frame(m, 1, 1.5)
    uhat = u - 0.5 * x @ (x.T @ u)
    w = uhat @ x.T - x @ uhat.T
    eye = np.eye(6)
    np.testing.assert_allclose(
        m.retract(x, u), np.linalg.solve(eye - 0.5 * w, (eye + 0.5 * w) @ x), atol=1e-13
    )
    y = m.project(x + 0.3 * np.random.default_rng(2).standard_normal(x.shape))
    back = m.inverse_retract(x, y)
    m.check_tangent(x, back)
    np.testing.assert_allclose(m.retract(x, back), y, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", range(3))
def test_retraction_transport_is_the_differential_of_the_cayley_retraction(shape, seed):
    """T_U(V) = d/dt R_X(U + tV) at t = 0 (Absil, Mahony & Sepulchre 2008, Sec. 8.1.2), against
    (a) the derivative of the Cayley transform with n x n matrices, (I - W/2)^-1 W_V (X + Y) / 2,
    to rounding; (b) central differences with h = 1e-5, whose error is at most
    h^2 max|c'''| / 6 + eps max|c| / h: about 1e-11 for these curves (|U| = 1.5, |V| = 1, where
    the derivatives of the rational function c are of order 1), so 1e-8 leaves room for third
    derivatives up to 500; (c) along the curve itself (V = U): the velocity d/dt R_X(tU) is
    T_{tU}(U). The result is tangent at Y = R_X(U), and T_0 is the identity."""
    for metric in ("canonical", "embedded"):
        m = Stiefel(*shape, retraction="cayley", metric=metric)
        x, u = frame(m, seed, 1.5)
        v = m.random_tangent(x, rng=seed + 10)
        v = v / float(m.norm(x, v))
        y = m.retract(x, u)
        moved = m.retraction_transport(x, u, v)
        m.check_tangent(y, moved)
        n = shape[0]
        uhat, vhat = (a - 0.5 * x @ (x.T @ a) for a in (u, v))
        w, w_v = uhat @ x.T - x @ uhat.T, vhat @ x.T - x @ vhat.T
        dense = np.linalg.solve(np.eye(n) - 0.5 * w, 0.5 * w_v @ (x + y))
        np.testing.assert_allclose(moved, dense, atol=1e-12)
        h = 1e-5
        central = (m.retract(x, u + h * v) - m.retract(x, u - h * v)) / (2 * h)
        np.testing.assert_allclose(moved, central, atol=1e-8)
        t = 0.7
        velocity = (m.retract(x, (t + h) * u) - m.retract(x, (t - h) * u)) / (2 * h)
        np.testing.assert_allclose(m.retraction_transport(x, t * u, u), velocity, atol=1e-8)
        np.testing.assert_allclose(m.retraction_transport(x, 0 * u, v), v, atol=1e-14)


def test_retraction_transport_is_batched_and_torch_native():
    torch = importorskip("torch")
    m = Stiefel(6, 2, metric="canonical")
    rng = np.random.default_rng(4)
    x = m.random_point(3, rng=rng)
    u, v = m.random_tangent(x, rng=rng), m.random_tangent(x, rng=rng)
    batched = m.retraction_transport(x, u, v)
    for i in range(3):
        one = m.retraction_transport(x[i], u[i], v[i])
        np.testing.assert_allclose(batched[i], one, atol=1e-14)
    tx, tu, tv = (torch.tensor(a, requires_grad=True) for a in (x, u, v))
    out = m.retraction_transport(tx, tu, tv)
    np.testing.assert_allclose(out.detach().numpy(), batched, atol=1e-13)
    out.sum().backward()
    assert all(bool(torch.isfinite(a.grad).all()) for a in (tx, tu, tv))


def test_retraction_transport_only_for_the_cayley_retraction():
    """The polar and QR retractions declare it unsupported, with the reason."""
    for retraction in ("polar", "qr"):
        m = Stiefel(5, 2, retraction=retraction, metric="canonical")
        ok, why = m.supports("retraction_transport")
        assert not ok and "retraction='cayley'" in why
        x, u = frame(m, 0, 0.5)
        with pytest.raises(NotImplementedError, match="no differentiated-retraction transport"):
            m.retraction_transport(x, u, u)
    assert Stiefel(5, 2, "cayley").supports("retraction_transport") == (True, "")
    assert not Sphere(3).supports("retraction_transport")[0]


def test_cayley_is_geoopts_canonical_retraction():
    """geoopt 0.5's CanonicalStiefel.retr (= expmap) builds Wen and Yin's W = u x^T - x u^T from
    its argument itself, so retr(x, u_hat) with u_hat = (I - XX^T/2) U is riemfl's R_X(U). (Its
    retr(x, U) has the velocity U + X X^T U at 0: a retraction only for X^T U = 0.)"""
    torch = importorskip("torch")
    geoopt = importorskip("geoopt")
    m = Stiefel(7, 3, metric="canonical")
    x, u = frame(m, 4, 1.2)
    uhat = u - 0.5 * x @ (x.T @ u)
    theirs = geoopt.manifolds.CanonicalStiefel()
    for fn in (theirs.retr, theirs.expmap):
        out = fn(torch.as_tensor(x), torch.as_tensor(uhat)).numpy()
        np.testing.assert_allclose(m.retract(x, u), out, atol=1e-13)


def test_names_parameters_and_constants():
    assert Stiefel(20, 5, metric="canonical").name == "Stiefel(20, 5, metric='canonical')"
    m = Stiefel(20, 5, "polar", metric="canonical")
    assert m.name == "Stiefel(20, 5, metric='canonical', retraction='polar')"
    assert Stiefel(20, 5, "cayley").name == "Stiefel(20, 5, retraction='cayley')"
    assert Stiefel(20, 5).name == "Stiefel(20, 5)" and Stiefel(20, 5).retraction == "polar"
    assert Stiefel(20, 5, metric="canonical").retraction == "cayley"
    with pytest.raises(ParameterError, match="'embedded', 'canonical'"):
        Stiefel(5, 2, metric="euclidean")
    with pytest.raises(ParameterError, match="'polar', 'qr', 'cayley'"):
        Stiefel(5, 2, retraction="exp")
    assert Stiefel(20, 5, metric="canonical").injectivity_radius == pytest.approx(
        math.sqrt(0.8) * math.pi
    )
    assert Stiefel(20, 1, metric="canonical").injectivity_radius == pytest.approx(math.pi)
    for attr in ("reach", "diameter", "dim"):
        assert getattr(m, attr) == getattr(Stiefel(20, 5), attr)
    ok, why = m.supports("parallel_transport")
    assert not ok and "canonical metric" in why


def test_the_metric_survives_pickling_and_names_the_manifold():
    """Problems and checkpoints identify a manifold by its name (fingerprints): the metric is
    part of it, and a pickled manifold keeps its metric and maps."""
    m = Stiefel(6, 2, metric="canonical")
    back = pickle.loads(pickle.dumps(m))
    assert (back.name, back.metric, back.retraction) == (m.name, "canonical", "cayley")
    assert back.name != Stiefel(6, 2).name
    x, u = frame(m, 0, 1.0)
    np.testing.assert_array_equal(back.exp(x, u), m.exp(x, u))

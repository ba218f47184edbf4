"""SPD(n, metric): identities the conformance kit does not cover (closed forms against scipy,
pymanopt and geoopt, the geodesic equations, the Hessians, exp's domain for Bures-Wasserstein,
the projection onto the open cone, gradients at repeated eigenvalues, float32 on ill-conditioned
points)."""

import math

import hessian_reference as reference
import numpy as np
import pytest
import scipy.linalg
from hypothesis import given
from hypothesis import strategies as st

from riemfl import SPD
from riemfl.errors import CutLocusError, NotOnManifoldError, ParameterError, ProjectionError
from riemfl.manifolds.spd import METRICS, dexpm, dlogm, logm, lyapunov
from riemfl.testing import checks, importorskip
from riemfl.testing import strategies as rst

torch = importorskip("torch")

sizes = st.sampled_from([1, 2, 3, 5])


def frame(n, metric, seed, norm):
    m = SPD(n, metric=metric)
    rng = np.random.default_rng(seed)
    x = m.random_point(rng=rng)
    return m, x, rst.scaled_tangent(m, x, norm, rng), rng


def sym_basis(n):
    basis = []
    for i in range(n):
        for j in range(i, n):
            e = np.zeros((n, n))
            e[i, j] = e[j, i] = 1.0
            basis.append(e)
    return basis


def close(a, b, tol):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert np.max(np.abs(a - b)) <= tol * max(1.0, float(np.max(np.abs(b)))), np.max(np.abs(a - b))


# --------------------------------------------------------------------------- construction
def test_parameters_are_checked():
    for bad in (0, -1, 2.0, True, "3"):
        with pytest.raises(ParameterError, match=r"SPD\(n\): n must be an integer >= 1"):
            SPD(bad)
    with pytest.raises(ParameterError, match="affine-invariant"):
        SPD(3, metric="stein")
    assert SPD(3).name == "SPD(3)"
    assert SPD(3, metric="bures-wasserstein").name == 'SPD(3, metric="bures-wasserstein")'
    assert SPD(4).dim == 10 and SPD(4).point_shape == (4, 4)


def test_constants_and_capabilities():
    for metric in METRICS:
        m = SPD(3, metric=metric)
        assert m.diameter == math.inf
        with pytest.raises(NotImplementedError, match="open"):
            _ = m.reach
    assert SPD(3).injectivity_radius == math.inf
    assert SPD(3, metric="log-euclidean").injectivity_radius == math.inf
    bw = SPD(3, metric="bures-wasserstein")
    with pytest.raises(NotImplementedError, match="not complete"):
        _ = bw.injectivity_radius
    assert bw.supports("parallel_transport") == (False, bw.unsupported["parallel_transport"])
    with pytest.raises(NotImplementedError, match="no closed form"):
        bw.parallel_transport(*[bw.random_point(rng=0)] * 2, np.eye(3))
    for metric in ("affine-invariant", "log-euclidean"):
        assert all(SPD(3, metric=metric).supports(name)[0] for name in checks_maps())


def checks_maps():
    return ("exp", "log", "dist", "parallel_transport", "inverse_retract", "ehess_to_rhess")


# --------------------------------------------------------------------------- affine-invariant
@given(n=sizes, seed=rst.seeds(), norm=st.floats(0.01, 3.0))
def test_affine_invariant_closed_forms_against_scipy_and_pymanopt(n, seed, norm):
    pymanopt = importorskip("pymanopt")
    m, x, u, rng = frame(n, "affine-invariant", seed, norm)
    ref = pymanopt.manifolds.SymmetricPositiveDefinite(n)
    root = scipy.linalg.sqrtm(x).real
    iroot = np.linalg.inv(root)
    y = m.exp(x, u)
    close(y, root @ scipy.linalg.expm(iroot @ u @ iroot) @ root, 1e-11)
    close(y, ref.exp(x, u), 1e-10)
    z = m.random_point(rng=rng)
    close(m.log(x, z), ref.log(x, z), 1e-10)
    d = np.linalg.norm(scipy.linalg.logm(iroot @ z @ iroot))
    assert m.dist(x, z) == pytest.approx(d, rel=1e-10)
    assert m.dist(x, z) == pytest.approx(ref.dist(x, z), rel=1e-10)
    v = m.random_tangent(x, rng=rng)
    assert m.inner(x, u, v) == pytest.approx(ref.inner_product(x, u, v), rel=1e-10, abs=1e-12)
    close(m.retract(x, u), ref.retraction(x, u), 1e-11)
    g = rng.standard_normal((n, n))
    close(m.egrad_to_rgrad(x, g), ref.euclidean_to_riemannian_gradient(x, g), 1e-12)
    e = scipy.linalg.sqrtm(z @ np.linalg.inv(x)).real  # E = (Y X^-1)^(1/2)
    close(m.parallel_transport(x, z, v), e @ v @ e.T, 1e-9)


def test_affine_invariant_distance_matches_geoopt():
    geoopt = importorskip("geoopt")
    m = SPD(4)
    x, y = m.random_point(2, rng=3)
    ref = geoopt.SymmetricPositiveDefinite().dist(torch.as_tensor(x), torch.as_tensor(y))
    assert m.dist(x, y) == pytest.approx(float(ref), rel=1e-9)


@given(seed=rst.seeds(), norm=st.floats(0.05, 0.8))
def test_affine_invariant_retraction_is_second_order_and_its_inverse_has_a_domain(seed, norm):
    m, x, u, _ = frame(4, "affine-invariant", seed, norm)
    ts = np.array([1e-3, 2e-3, 4e-3, 8e-3])
    errors = [np.linalg.norm(m.retract(x, t * u) - m.exp(x, t * u)) for t in ts]
    slope = np.polyfit(np.log(ts), np.log(errors), 1)[0]
    assert slope > 2.75  # R_X(tU) = Exp_X(tU) + O(t^3)
    # R_X(U) is positive definite for every U, also where I + W is not: its inverse picks the
    # preimage with I + W > 0 and refuses Y that are not above X/2
    far = m.retract(x, -3.0 * x)  # W = -3I: R = X (1 - 3 + 4.5) = 2.5 X
    m.check_point(far)
    close(m.inverse_retract(x, far), x, 1e-12)  # the other preimage, W = I
    with pytest.raises(CutLocusError, match="Loewner"):
        m.inverse_retract(x, 0.4 * x)


# --------------------------------------------------------------------------- log-Euclidean
def dlogm_fd(x, u, h=1e-6):
    return (scipy.linalg.logm(x + h * u) - scipy.linalg.logm(x - h * u)).real / (2 * h)


@given(n=sizes, seed=rst.seeds(), norm=st.floats(0.01, 2.0))
def test_log_euclidean_maps_against_scipy(n, seed, norm):
    m, x, u, rng = frame(n, "log-euclidean", seed, norm)
    v = m.random_tangent(x, rng=rng)
    lx = scipy.linalg.logm(x).real
    close(dlogm(x, u), dlogm_fd(x, u), 1e-7)
    assert m.inner(x, u, v) == pytest.approx(
        np.sum(dlogm_fd(x, u) * dlogm_fd(x, v)), rel=1e-6, abs=1e-8
    )
    y = m.exp(x, u)
    close(y, scipy.linalg.expm(lx + dlogm_fd(x, u)), 1e-7)
    z = m.random_point(rng=rng)
    lz = scipy.linalg.logm(z).real
    assert m.dist(x, z) == pytest.approx(np.linalg.norm(lz - lx), rel=1e-10)
    close(dlogm_fd(x, m.log(x, z)), lz - lx, 1e-7)  # Log is the inverse differential
    # in the log coordinates parallel transport is the identity (the metric is flat)
    close(dlogm_fd(z, m.parallel_transport(x, z, v)), dlogm_fd(x, v), 1e-7)
    close(dexpm(logm(x), dlogm(x, v)), v, 1e-11)


# --------------------------------------------------------------------------- Bures-Wasserstein
@given(n=sizes, seed=rst.seeds(), fraction=st.floats(0.01, 0.95))
def test_bures_wasserstein_maps_against_scipy(n, seed, fraction):
    m = SPD(n, metric="bures-wasserstein")
    rng = np.random.default_rng(seed)
    x, z = m.random_point(2, rng=rng)
    u = rst.scaled_tangent(m, x, fraction * float(m.local_injectivity_radius(x)), rng)
    v = m.random_tangent(x, rng=rng)
    ell = scipy.linalg.solve_continuous_lyapunov(x, u)  # X L + L X^T = U
    close(lyapunov(x, u), ell, 1e-11)
    assert m.inner(x, u, v) == pytest.approx(0.5 * np.trace(ell @ v), rel=1e-10, abs=1e-12)
    close(m.exp(x, u), x + u + ell @ x @ ell, 1e-12)
    sq = scipy.linalg.sqrtm(x @ z)
    close(m.log(x, z), (sq + sq.T).real - 2 * x, 1e-9)  # (XY)^(1/2) + (YX)^(1/2) - 2X
    rx = scipy.linalg.sqrtm(x).real
    d2 = np.trace(x) + np.trace(z) - 2 * np.trace(scipy.linalg.sqrtm(rx @ z @ rx).real)
    assert m.dist(x, z) == pytest.approx(math.sqrt(max(d2, 0.0)), rel=1e-8)
    # the Procrustes form of the 2-Wasserstein distance: min over orthogonal Q of |X^1/2 - Y^1/2 Q|
    rz = scipy.linalg.sqrtm(z).real
    a, _, bt = np.linalg.svd(rz.T @ rx)
    assert m.dist(x, z) == pytest.approx(np.linalg.norm(rx - rz @ (a @ bt)), rel=1e-8)
    g = rng.standard_normal((n, n))
    gs = 0.5 * (g + g.T)
    close(m.egrad_to_rgrad(x, g), 2 * (gs @ x + x @ gs), 1e-12)


@given(n=st.sampled_from([2, 3, 5]), seed=rst.seeds(), t=st.floats(0.05, 1.0))
def test_bures_wasserstein_geodesic_is_the_mccann_interpolation(n, seed, t):
    """Exp_X(t Log_X(Y)) = ((1 - t) I + t T) X ((1 - t) I + t T) with T X T = Y (T from scipy)."""
    m = SPD(n, metric="bures-wasserstein")
    x, y = m.random_point(2, rng=seed)
    rx = scipy.linalg.sqrtm(x).real
    irx = np.linalg.inv(rx)
    transport_map = irx @ scipy.linalg.sqrtm(rx @ y @ rx).real @ irx
    path = (1 - t) * np.eye(n) + t * transport_map
    close(m.exp(x, t * m.log(x, y)), path @ x @ path, 1e-9)
    assert m.dist(x, m.exp(x, t * m.log(x, y))) == pytest.approx(t * m.dist(x, y), rel=1e-8)


@given(seed=rst.seeds(), scale=st.floats(0.01, 1.0))
def test_bures_wasserstein_transport_is_the_parallel_transport_to_first_order(seed, scale):
    """transport(X, Y, V) = V + Gamma_Y(X - Y, V), with Gamma from the Koszul formula of the
    metric: the closed form Gamma_X(U, V) = -(L_X[U] X L_X[V] + L_X[V] X L_X[U]) is the
    connection's."""
    m = SPD(3, metric="bures-wasserstein")
    rng = np.random.default_rng(seed)
    x, y = m.random_point(2, rng=rng)
    y = x + scale * (y - x)
    v = m.random_tangent(y, rng=rng)
    koszul = reference.christoffel(m, x, y - x, v, sym_basis(3))
    close(m.transport(y, x, v), v + koszul, 1e-7)
    close(m.transport(x, x, v), v, 1e-15)
    lu, lv = lyapunov(x, y - x), lyapunov(x, v)
    close(koszul, -(lu @ x @ lv + lv @ x @ lu), 1e-7)


def test_bures_wasserstein_exp_domain_is_exact():
    m = SPD(3, metric="bures-wasserstein")
    x = m.random_point(rng=7)
    lam, vec = np.linalg.eigh(x)
    e = vec[:, :1]
    radius = float(m.local_injectivity_radius(x))
    assert radius == pytest.approx(math.sqrt(lam[0]))
    u = -2.0 * lam[0] * (e @ e.T)  # L_X[U] = -e e^T: the geodesic is singular at t = 1
    assert float(m.norm(x, u)) == pytest.approx(radius)
    inside = m.exp(x, 0.999 * u)
    m.check_point(inside)
    close(m.log(x, inside), 0.999 * u, 1e-8)
    with pytest.raises(CutLocusError, match="leaves the cone"):
        m.exp(x, 1.001 * u)
    with pytest.raises(CutLocusError, match="leaves the cone"):
        m.retract(x, 1.001 * u)
    w = rst.scaled_tangent(m, x, 0.999 * radius, np.random.default_rng(0))
    m.check_point(m.exp(x, w))  # every direction is fine inside the radius
    big = m.exp(x, 50.0 * x)  # far outside the ball, but I + L = 26 I is positive definite
    close(big, 676.0 * x, 1e-12)


# --------------------------------------------------------------------------- every metric
@pytest.mark.parametrize("metric", METRICS)
@given(seed=rst.seeds(), t=st.floats(0.2, 0.9))
def test_exp_solves_the_geodesic_equation(metric, seed, t):
    """gamma'' + Gamma(gamma', gamma') = 0 along gamma(t) = Exp_X(tU), with the Christoffel map
    from the Koszul formula of the metric (independent of every closed form but inner)."""
    m, x, u, _ = frame(3, metric, seed, 0.5)
    h = 1e-4
    points = [np.asarray(m.exp(x, s * u)) for s in (t - h, t, t + h)]
    velocity = (points[2] - points[0]) / (2 * h)
    acceleration = (points[2] - 2 * points[1] + points[0]) / h**2
    residual = acceleration + reference.christoffel(m, points[1], velocity, velocity, sym_basis(3))
    assert np.max(np.abs(residual)) < 1e-5 * max(1.0, np.max(np.abs(acceleration)))
    # constant speed
    assert float(m.norm(points[1], velocity)) == pytest.approx(float(m.norm(x, u)), rel=1e-7)


@pytest.mark.parametrize("metric", METRICS)
@given(seed=rst.seeds(), norm=st.floats(0.1, 1.0))
def test_ehess_to_rhess(metric, seed, norm):
    """Symmetric in the metric; equal to D grad f + Gamma(u, grad f) (Koszul, finite
    differences); its quadratic form is the second derivative of f along exp; for the metrics with
    parallel transport, equal to the derivative of the transported gradient along exp."""
    m, x, u, rng = frame(3, metric, seed, norm)
    v = m.random_tangent(x, rng=rng)
    f, egrad, ehess = reference.quadratic(x.shape, rng)
    g = egrad(x)
    hu, hv = m.ehess_to_rhess(x, g, ehess(x, u), u), m.ehess_to_rhess(x, g, ehess(x, v), v)
    m.check_tangent(x, hu)
    assert float(m.inner(x, hu, v)) == pytest.approx(float(m.inner(x, u, hv)), rel=1e-9, abs=1e-9)
    close(hu, reference.hessian_by_connection(m, x, egrad, u, sym_basis(3)), 1e-6)
    quadratic_form = float(m.inner(x, hu, u))
    assert reference.second_derivative_along_exp(m, x, f, u) == pytest.approx(
        quadratic_form, abs=1e-5
    )
    if m.supports("parallel_transport")[0]:
        close(hu, reference.hessian_by_transport(m, x, egrad, u), 1e-6)
    else:  # Bures-Wasserstein: its transport is the parallel transport to first order
        close(hu, reference.hessian_by_transport(m, x, egrad, u, "transport"), 1e-6)
    close(m.ehess_to_rhess(x, g, 2 * ehess(x, u), 2 * u), 2 * np.asarray(hu), 1e-12)


def test_ehess_to_rhess_affine_invariant_matches_pymanopt():
    pymanopt = importorskip("pymanopt")
    m, x, u, rng = frame(4, "affine-invariant", 1, 0.7)
    g, h = rng.standard_normal((2, 4, 4))
    ref = pymanopt.manifolds.SymmetricPositiveDefinite(4).euclidean_to_riemannian_hessian
    close(m.ehess_to_rhess(x, g, h, u), ref(x, g, h, u), 1e-12)


# --------------------------------------------------------------------------- the open cone
@given(n=sizes, seed=rst.seeds(), fraction=st.floats(0.0, 0.99))
def test_project_inside_the_local_radius_is_the_symmetric_part(n, seed, fraction):
    m = SPD(n)
    rng = np.random.default_rng(seed)
    x = m.random_point(rng=rng)
    rho = float(m.local_reach(x))
    assert rho == pytest.approx(np.linalg.eigvalsh(x)[0])
    a = x + fraction * rho * rst.unit_ambient(m, (), rng)
    p = m.project(a)
    close(p, 0.5 * (a + a.T), 0.0)
    m.check_point(p)
    checks.check_projection(m, a, x, checks.Tolerance(1e-12, 1e-12))
    # no symmetric positive-definite matrix is nearer (the cone is convex)
    for _ in range(5):
        y = m.retract(p, rst.scaled_tangent(m, p, 0.3, rng))
        assert np.linalg.norm(a - y) >= np.linalg.norm(a - p) - 1e-12


def test_project_refuses_points_without_a_nearest_point_in_the_open_cone():
    m = SPD(3)
    x = m.random_point(rng=2)
    lam, vec = np.linalg.eigh(x)
    e = vec[:, :1]
    edge = x - lam[0] * (e @ e.T)  # singular: at distance lambda_min(X), the local radius
    assert np.linalg.norm(edge - x) == pytest.approx(float(m.local_reach(x)))
    with pytest.raises(ProjectionError, match=r"eigenvalue .* <= 0"):
        m.project(edge - 1e-9 * np.eye(3))
    skew = np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    close(m.project(x + 5.0 * skew), x, 1e-15)  # the skew part is orthogonal to the cone
    batch = np.stack([x, -x])
    with pytest.raises(ProjectionError, match=r"batch element \(1,\)"):
        m.project(batch)


def test_check_point_names_the_failed_constraint():
    m = SPD(3)
    x = m.random_point(rng=0)
    with pytest.raises(NotOnManifoldError, match="X = X\\^T"):
        m.check_point(x + np.triu(np.ones((3, 3)), 1))
    with pytest.raises(NotOnManifoldError, match="positive definite.*batch element \\(1,\\)"):
        m.check_point(np.stack([x, x - 10 * np.eye(3)]))
    assert m.point_violation(-x)[1] == math.inf
    with pytest.raises(NotOnManifoldError, match=r"SPD\(3\)\.exp: point x .* lambda_min"):
        m.exp(-x, np.zeros((3, 3)))
    with pytest.raises(NotOnManifoldError, match="U = U\\^T"):
        m.check_tangent(x, np.triu(np.ones((3, 3))))


# --------------------------------------------------------------------------- torch gradients
@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("where", ["identity", "repeated"])
def test_torch_gradients_at_repeated_eigenvalues(metric, where):
    """At X = I (or eigenvalues 1, 1, 2) torch.linalg.eigh's backward divides by zero; every map
    goes through sym_function / daleckii_krein, whose backward passes are finite there: compare
    with finite differences (torch.autograd.gradcheck), derivatives in X and in the vectors."""
    m = SPD(3, metric=metric)
    base = np.eye(3) if where == "identity" else np.diag([1.0, 1.0, 2.0])
    rng = np.random.default_rng(0)
    u, v = (0.3 * rst.scaled_tangent(m, base, 1.0, rng) for _ in range(2))
    y = np.asarray(m.exp(base, u))

    def param(a):
        return torch.tensor(a, dtype=torch.float64, requires_grad=True)

    def s(a):  # a symmetric argument from an unconstrained one
        return 0.5 * (a + a.T)

    cases = {
        "exp": lambda a, b: m.exp(s(a), s(b)),
        "log": lambda a, b: m.log(s(a), s(b)),
        "dist": lambda a, b: m.dist(s(a), s(b)),
        "inner": lambda a, b: m.inner(s(a), s(b), torch.as_tensor(v)),
        "egrad_to_rgrad": lambda a, b: m.egrad_to_rgrad(s(a), b),
        "retract": lambda a, b: m.retract(s(a), s(b)),
    }
    if m.supports("parallel_transport")[0]:
        cases["parallel_transport"] = lambda a, b: m.parallel_transport(
            s(a), torch.as_tensor(y), s(b)
        )
    for name, fn in cases.items():
        second = y if name in ("log", "dist") else u
        args = (param(base), param(second))
        assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-6, rtol=1e-5), name


# --------------------------------------------------------------------------- float32
@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_float32_on_ill_conditioned_points(metric, backend):
    """Eigenvalues from 1e-2 to 1e2 (condition number 1e4): float32 results agree with float64 on
    the same float32 arguments to a few float32 eps (relative to max(1, |result|); float32
    arguments are computed in float64 and rounded once)."""
    m = SPD(4, metric=metric)
    rng = np.random.default_rng(3)
    q = np.linalg.qr(rng.standard_normal((4, 4)))[0]
    x = (q * np.array([1e-2, 0.3, 7.0, 1e2])) @ q.T
    x = 0.5 * (x + x.T)
    u = rst.scaled_tangent(m, x, 0.05, rng)
    y = np.asarray(m.exp(x, u))
    for method, args in {
        "exp": (x, u),
        "log": (x, y),
        "dist": (x, y),
        "inner": (x, u, u),
        "egrad_to_rgrad": (x, u),
    }.items():
        assert checks.float32_error(m, method, args, backend) < 4.0, method


# --------------------------------------------------------------------------- kernels
def test_divided_differences_are_accurate_for_close_and_far_arguments():
    """exp^[1], log^[1] and the second differences against 50-digit arithmetic, over gaps from
    1e-14 to 10 (relative), where the plain quotients cancel."""
    mpmath = importorskip("mpmath")
    mpmath.mp.dps = 50
    from riemfl.manifolds.spd import (
        exp_divided_difference,
        exp_second_divided_differences,
        log_divided_difference,
        log_second_divided_differences,
    )

    def mp_first(f, a, b):
        a, b = mpmath.mpf(a), mpmath.mpf(b)
        return mpmath.diff(f, a) if a == b else (f(a) - f(b)) / (a - b)

    def mp_second(f, a, b, c):
        a, b, c = sorted(mpmath.mpf(v) for v in (a, b, c))
        if c - a < mpmath.mpf(10) ** -30:
            return mpmath.diff(f, b, 2) / 2
        return (mp_first(f, b, c) - mp_first(f, a, b)) / (c - a)

    for gap in (0.0, 1e-14, 1e-9, 1e-5, 1e-3, 0.1, 2.0, 10.0):
        a, b = 0.7, 0.7 * (1 + gap)
        got = float(log_divided_difference(np.float64(a), np.float64(b)))
        assert got == pytest.approx(float(mp_first(mpmath.log, a, b)), rel=4e-16)
        got = float(exp_divided_difference(np.float64(a), np.float64(b)))
        assert got == pytest.approx(float(mp_first(mpmath.exp, a, b)), rel=4e-16)
        lam = np.array([a, b, a * (1 + 0.3 * gap)])
        for second, f in (
            (log_second_divided_differences, mpmath.log),
            (exp_second_divided_differences, mpmath.exp),
        ):
            grid = second(lam)
            for i, j, k in [(0, 1, 2), (0, 0, 1), (2, 2, 2), (1, 0, 2)]:
                ref = float(mp_second(f, lam[i], lam[j], lam[k]))
                assert grid[i, j, k] == pytest.approx(ref, rel=1e-10), (gap, i, j, k)


def test_daleckii_krein_is_the_frechet_derivative_and_the_lyapunov_solution():
    m = SPD(4)
    rng = np.random.default_rng(0)
    x = m.random_point(rng=rng)
    e = rng.standard_normal((4, 4))
    e = e + e.T
    h = 1e-6
    fd = (scipy.linalg.logm(x + h * e) - scipy.linalg.logm(x - h * e)).real / (2 * h)
    close(dlogm(x, e), fd, 1e-8)
    s = logm(x)
    fd = (scipy.linalg.expm(s + h * e) - scipy.linalg.expm(s - h * e)) / (2 * h)
    close(dexpm(s, e), fd, 1e-8)
    ell = lyapunov(x, e)
    close(x @ ell + ell @ x, e, 1e-13)
    batch = np.stack([e, 2 * e, -e])  # batch dimensions broadcast against one base point
    close(lyapunov(x, batch)[1], 2 * ell, 1e-14)
    xt = torch.tensor(x, requires_grad=True)
    et = torch.tensor(batch, requires_grad=True)
    lyapunov(xt, et).sum().backward()
    assert xt.grad.shape == (4, 4) and et.grad.shape == (3, 4, 4)


def test_elementary_functions_join_their_series_smoothly():
    from riemfl.manifolds.elementary import artanh_sqrt_over, asinh_sqrt_over, tanh_sqrt_over

    lam = np.array([0.0, 1e-12, 9.9e-6, 1.01e-5, 1e-3, 0.2, 0.81])
    root = np.sqrt(lam[1:])
    for f, ref in (
        (tanh_sqrt_over, np.tanh(root) / root),
        (artanh_sqrt_over, np.arctanh(root) / root),
        (asinh_sqrt_over, np.arcsinh(root) / root),
    ):
        values = f(lam)
        assert values[0] == 1.0
        np.testing.assert_allclose(values[1:], ref, rtol=3e-16)
        t = torch.tensor(lam, requires_grad=True)
        (grad,) = torch.autograd.grad(f(t).sum(), t)
        assert bool(torch.isfinite(grad).all())


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("metric", ["affine-invariant", "log-euclidean"])
def test_long_steps_stay_positive_definite_within_the_representable_condition(metric, backend):
    """exp of steps up to |U|_X = 15 in float64 (5 in float32) from points of condition <= 4:
    kappa(Y) <= 4 e^(2 |U|_X) < 1/(c n eps) with a margin of 10 or more for c = 16 (the
    class docstring's bound), so the rounded result is positive definite whatever order its
    sums are taken in: eigvalsh and Cholesky (numpy and torch) accept it, batched and one point
    at a time. The second-order retraction (affine-invariant) stays positive definite for steps
    of |U|_X = 1e5, far below (kappa n eps)^(-1/2) = 1.7e7."""
    n = 4
    m = SPD(n, metric=metric)
    rng = np.random.default_rng(0)
    convert = (lambda a: a) if backend == "numpy" else torch.as_tensor
    x = m.random_point(16, rng=rng)
    direction = m.random_tangent(x, rng=rng)
    direction /= np.asarray(m.norm(x, direction))[:, None, None]
    steps = [("exp", 15.0, np.float64), ("exp", 5.0, np.float32)]
    if metric == "affine-invariant":
        steps.append(("retract", 1e5, np.float64))
    for method, length, dtype in steps:
        args = [convert(a.astype(dtype)) for a in (x, length * direction)]
        batched = np.asarray(getattr(m, method)(*args))
        single = np.stack(
            [np.asarray(getattr(m, method)(a, b)) for a, b in zip(*args, strict=True)]
        )
        for y in (batched, single):
            wide = y.astype(np.float64)
            assert np.all(np.linalg.eigvalsh(wide)[..., 0] > 0), (method, length)
            np.linalg.cholesky(wide)
            torch.linalg.cholesky(torch.as_tensor(wide))
            m.check_point(y)

"""PoincareBall(n, c): gyrovector identities, the maps against geoopt and against the textbook
formulas in 50-digit arithmetic (mpmath), the isometry with Lorentz(n, 1/c) both ways, the
geodesic equation, the Hessian, and float32 near the boundary (geoopt's trouble spot: it clamps
points to 1 - 4e-3 in float32)."""

import math
from fractions import Fraction

import hessian_reference as reference
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from riemfl import Lorentz, PoincareBall
from riemfl.errors import NonFiniteError, NotOnManifoldError, ParameterError, ProjectionError
from riemfl.manifolds.poincare import conformal_sigma, gyration, mobius_add, mobius_scalar_mul
from riemfl.testing import checks, importorskip
from riemfl.testing import strategies as rst

torch = importorskip("torch")
mpmath = importorskip("mpmath")

curvatures = st.sampled_from([1.0, 0.7, 3.0])
F32 = float(np.finfo(np.float32).eps)


def frame(n, c, seed, norm):
    m = PoincareBall(n, c=c)
    rng = np.random.default_rng(seed)
    x = m.random_point(rng=rng)
    return m, x, rst.scaled_tangent(m, x, norm, rng), rng


def close(a, b, tol):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert np.max(np.abs(a - b)) <= tol * max(1.0, float(np.max(np.abs(b)))), np.max(np.abs(a - b))


def near_boundary(n, c, delta, seed):
    """Two points with sqrt(c)|x| = 1 - delta in random directions 0.3 rad apart (float64)."""
    rng = np.random.default_rng(seed)
    d = rng.standard_normal(n)
    d /= np.linalg.norm(d)
    e = rng.standard_normal(n)
    e -= (e @ d) * d
    e /= np.linalg.norm(e)
    other = math.cos(0.3) * d + math.sin(0.3) * e
    radius = (1.0 - delta) / math.sqrt(c)
    return radius * d, radius * other


# --------------------------------------------------------------------------- textbook formulas
mpmath.mp.dps = 50


def mp_vec(a):
    return [mpmath.mpf(float(v)) for v in np.asarray(a, dtype=np.float64)]


def mp_dot(a, b):
    return mpmath.fsum(p * q for p, q in zip(a, b, strict=True))


def mp_add(x, y, c):
    xy, xx, yy = mp_dot(x, y), mp_dot(x, x), mp_dot(y, y)
    num_x, num_y = 1 + 2 * c * xy + c * yy, 1 - c * xx
    den = 1 + 2 * c * xy + c * c * xx * yy
    return [(num_x * p + num_y * q) / den for p, q in zip(x, y, strict=True)]


def mp_dist(x, y, c):
    """2/sqrt(c) artanh(sqrt(c) |-x (+) y|), in 50 digits."""
    x, y, c = mp_vec(x), mp_vec(y), mpmath.mpf(c)
    w = mp_add([-v for v in x], y, c)
    return 2 / mpmath.sqrt(c) * mpmath.atanh(mpmath.sqrt(c * mp_dot(w, w)))


def mp_log(x, y, c):
    """2/(sqrt(c) lambda_x) artanh(sqrt(c)|w|) w/|w|, w = -x (+) y, in 50 digits."""
    x, y, c = mp_vec(x), mp_vec(y), mpmath.mpf(c)
    w = mp_add([-v for v in x], y, c)
    nw = mpmath.sqrt(mp_dot(w, w))
    lam = 2 / (1 - c * mp_dot(x, x))
    scale = 2 / (mpmath.sqrt(c) * lam) * mpmath.atanh(mpmath.sqrt(c) * nw) / nw
    return np.array([float(scale * v) for v in w])


def mp_exp(x, u, c):
    """x (+) tanh(sqrt(c) lambda_x |u| / 2) u / (sqrt(c) |u|), in 50 digits."""
    x, u, c = mp_vec(x), mp_vec(u), mpmath.mpf(c)
    nu = mpmath.sqrt(mp_dot(u, u))
    lam = 2 / (1 - c * mp_dot(x, x))
    v = [mpmath.tanh(mpmath.sqrt(c) * lam * nu / 2) / (mpmath.sqrt(c) * nu) * p for p in u]
    return np.array([float(p) for p in mp_add(x, v, c)])


# --------------------------------------------------------------------------- construction
def test_parameters_and_constants():
    for bad in (0, 2.5, True):
        with pytest.raises(ParameterError, match=r"PoincareBall\(n\): n must be an integer >= 1"):
            PoincareBall(bad)
    for bad in (0.0, -1.0, math.inf, math.nan, "1"):
        with pytest.raises(ParameterError, match="PoincareBall: c must be a finite number > 0"):
            PoincareBall(3, c=bad)
    m = PoincareBall(3, c=4.0)
    assert m.name == "PoincareBall(3, c=4.0)" and PoincareBall(2).name == "PoincareBall(2)"
    assert m.dim == 3 and m.point_shape == (3,)
    assert m.diameter == pytest.approx(1.0) and m.injectivity_radius == math.inf
    with pytest.raises(NotImplementedError, match="not closed"):
        _ = m.reach
    assert m.lorentz.beta == pytest.approx(0.25) and m.lorentz.n == 3


# --------------------------------------------------------------------------- against geoopt
@given(c=curvatures, seed=rst.seeds(), norm=st.floats(0.01, 2.0))
def test_maps_match_geoopt(c, seed, norm):
    geoopt = importorskip("geoopt")
    m, x, u, rng = frame(4, c, seed, norm)
    ref = geoopt.PoincareBall(c=torch.tensor(c, dtype=torch.float64))
    y, v, w = m.random_point(rng=rng), m.random_tangent(x, rng=rng), rng.standard_normal(4)
    t = torch.as_tensor
    close(m.exp(x, u), ref.expmap(t(x), t(u)).numpy(), 1e-12)
    close(m.log(x, y), ref.logmap(t(x), t(y)).numpy(), 1e-10)
    assert m.dist(x, y) == pytest.approx(float(ref.dist(t(x), t(y))), rel=1e-10)
    close(m.parallel_transport(x, y, v), ref.transp(t(x), t(y), t(v)).numpy(), 1e-11)
    assert m.inner(x, u, v) == pytest.approx(float(ref.inner(t(x), t(u), t(v))), rel=1e-12)
    close(m.egrad_to_rgrad(x, w), ref.egrad2rgrad(t(x), t(w)).numpy(), 1e-14)
    close(mobius_add(x, y, c), ref.mobius_add(t(x), t(y)).numpy(), 1e-13)
    r = torch.tensor(-1.7, dtype=torch.float64)
    close(mobius_scalar_mul(-1.7, x, c), ref.mobius_scalar_mul(r, t(x)).numpy(), 1e-12)
    gyr = geoopt.manifolds.stereographic.math.gyration(t(x), t(y), t(w), k=ref.k)
    close(gyration(x, y, w, c), gyr.numpy(), 1e-12)


# --------------------------------------------------------------------------- gyrovector algebra
@given(c=curvatures, seed=rst.seeds(), r=st.floats(-3.0, 3.0), s=st.floats(-3.0, 3.0))
def test_gyrovector_identities(c, seed, r, s):
    m = PoincareBall(3, c=c)
    x, y, z = m.random_point(3, rng=seed)
    w = np.random.default_rng(seed).standard_normal(3)
    close(mobius_add(-x, mobius_add(x, y, c), c), y, 1e-12)  # left cancellation
    close(mobius_add(x, np.zeros(3), c), x, 0.0)
    # the gyration by its definition, and gyroassociativity x + (y + z) = (x + y) + gyr[x, y] z
    definition = mobius_add(-mobius_add(x, y, c), mobius_add(x, mobius_add(y, z, c), c), c)
    close(gyration(x, y, z, c), definition, 1e-11)
    left = mobius_add(x, mobius_add(y, z, c), c)
    close(left, mobius_add(mobius_add(x, y, c), gyration(x, y, z, c), c), 1e-12)
    assert np.linalg.norm(gyration(x, y, w, c)) == pytest.approx(np.linalg.norm(w), rel=1e-13)
    close(gyration(x, -x, w, c), w, 1e-13)
    # scalar multiplication: 1 (x) x = x, (r + s) (x) x = r (x) x (+) s (x) x, distances scale
    close(mobius_scalar_mul(1.0, x, c), x, 1e-14)
    both = mobius_add(mobius_scalar_mul(r, x, c), mobius_scalar_mul(s, x, c), c)
    close(mobius_scalar_mul(r + s, x, c), both, 1e-10)
    zero = np.zeros(3)
    assert m.dist(zero, mobius_scalar_mul(r, x, c)) == pytest.approx(
        abs(r) * m.dist(zero, x), rel=1e-10, abs=1e-12
    )
    rs = np.array([r, s])  # an array of scalars against a batch of points
    close(mobius_scalar_mul(rs, np.stack([x, y]), c)[1], mobius_scalar_mul(s, y, c), 1e-15)


def test_gyrovector_helpers_take_torch_and_have_finite_gradients_at_the_origin():
    x = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(mobius_scalar_mul(2.0, x).sum(), x)
    assert torch.allclose(g, torch.full((3,), 2.0, dtype=torch.float64))
    m = PoincareBall(3)
    u = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(m.exp(torch.zeros(3, dtype=torch.float64), u).sum(), u)
    assert torch.allclose(g, torch.ones(3, dtype=torch.float64))  # Exp_x(u) = x + u + O(u^2)


# --------------------------------------------------------------------------- Lorentz
@given(c=curvatures, seed=rst.seeds(), norm=st.floats(0.01, 3.0))
def test_lorentz_isometry_both_ways(c, seed, norm):
    """x -> to_lorentz(x) and y -> from_lorentz(y) are inverse isometries between
    PoincareBall(n, c) and Lorentz(n, 1/c): distances, metrics, exp, log and parallel transport
    commute with them, starting on either side."""
    m, x, u, rng = frame(3, c, seed, norm)
    lo = m.lorentz
    assert isinstance(lo, Lorentz) and lo.beta == pytest.approx(1.0 / c)
    y = m.random_point(rng=rng)
    v = m.random_tangent(x, rng=rng)
    px, py = m.to_lorentz(x), m.to_lorentz(y)
    lo.check_point(px)
    close(m.from_lorentz(px), x, 1e-14)
    assert lo.dist(px, py) == pytest.approx(float(m.dist(x, y)), rel=1e-10)
    du, dv = m.to_lorentz_tangent(x, u), m.to_lorentz_tangent(x, v)
    lo.check_tangent(px, du)
    assert lo.inner(px, du, dv) == pytest.approx(float(m.inner(x, u, v)), rel=1e-10, abs=1e-12)
    close(m.from_lorentz_tangent(px, du), u, 1e-12)
    close(lo.exp(px, du), m.to_lorentz(m.exp(x, u)), 1e-11)
    close(lo.log(px, py), m.to_lorentz_tangent(x, m.log(x, y)), 1e-9)
    transported = m.to_lorentz_tangent(y, m.parallel_transport(x, y, v))
    close(lo.parallel_transport(px, py, dv), transported, 1e-10)
    # from the hyperboloid's side
    a, b = lo.random_point(2, rng=rng)
    w = lo.random_tangent(a, rng=rng)
    qa, qb = m.from_lorentz(a), m.from_lorentz(b)
    m.check_point(qa)
    close(m.to_lorentz(qa), a, 1e-12)
    assert m.dist(qa, qb) == pytest.approx(float(lo.dist(a, b)), rel=1e-10)
    dw = m.from_lorentz_tangent(a, w)
    close(m.to_lorentz_tangent(qa, dw), w, 1e-11)
    close(m.exp(qa, dw), m.from_lorentz(lo.exp(a, w)), 1e-11)
    close(m.log(qa, qb), m.from_lorentz_tangent(a, lo.log(a, b)), 1e-10)


# --------------------------------------------------------------------------- geometry
@given(c=curvatures, seed=rst.seeds(), t=st.floats(0.2, 0.9))
def test_exp_solves_the_geodesic_equation(c, seed, t):
    """x'' = -2<grad phi, x'> x' + |x'|^2 grad phi (grad phi = c lambda_x x) along Exp_x(tu), and
    the same residual from the Koszul formula of the metric."""
    m, x, u, _ = frame(3, c, seed, 1.5)
    h = 1e-4
    points = [np.asarray(m.exp(x, s * u)) for s in (t - h, t, t + h)]
    vel = (points[2] - points[0]) / (2 * h)
    acc = (points[2] - 2 * points[1] + points[0]) / h**2
    grad_phi = c * 2.0 / (1 - c * points[1] @ points[1]) * points[1]
    assert np.max(np.abs(acc + 2 * (grad_phi @ vel) * vel - (vel @ vel) * grad_phi)) < 1e-5 * max(
        1.0, np.max(np.abs(acc))
    )
    residual = acc + reference.christoffel(m, points[1], vel, vel, list(np.eye(3)))
    assert np.max(np.abs(residual)) < 1e-5 * max(1.0, np.max(np.abs(acc)))


@given(c=curvatures, seed=rst.seeds(), norm=st.floats(0.1, 2.0))
def test_ehess_to_rhess(c, seed, norm):
    m, x, u, rng = frame(3, c, seed, norm)
    v = m.random_tangent(x, rng=rng)
    f, egrad, ehess = reference.quadratic(x.shape, rng)
    g = egrad(x)
    hu, hv = m.ehess_to_rhess(x, g, ehess(x, u), u), m.ehess_to_rhess(x, g, ehess(x, v), v)
    assert float(m.inner(x, hu, v)) == pytest.approx(float(m.inner(x, u, hv)), rel=1e-9, abs=1e-9)
    close(hu, reference.hessian_by_connection(m, x, egrad, u, list(np.eye(3))), 1e-6)
    close(hu, reference.hessian_by_transport(m, x, egrad, u), 1e-6)
    assert reference.second_derivative_along_exp(m, x, f, u) == pytest.approx(
        float(m.inner(x, hu, u)), rel=1e-5, abs=1e-5
    )


# --------------------------------------------------------------------------- the boundary
def riemannian_error(m, base, low, high):
    """|low - high|_base / |high|_base: the error of a float32 tangent vector in the metric."""
    base = np.asarray(base, dtype=np.float64)
    diff = np.asarray(low, dtype=np.float64) - np.asarray(high, dtype=np.float64)
    return float(m.norm(base, diff)) / float(m.norm(base, np.asarray(high, dtype=np.float64)))


@pytest.mark.parametrize("c", [1.0, 0.7])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-7])
def test_float32_near_the_boundary(c, delta):
    """Points with sqrt(c)|x| = 1 - delta, rounded to float32 (as far as float32 represents
    them: 1 - 1e-7 is one unit of rounding below 1). On those float32 points:

    * dist and log are within a few float32 eps of the textbook formulas evaluated in 50 digits,
      relative to the result (log's error measured in the metric at x), for a far pair and a
      close pair (geoopt's float32 dist and log are off by 19% at 1 - 1e-5);
    * the metric, the Riemannian gradient, parallel transport (errors in the metric, relative)
      and exp of a unit step (componentwise, the kit's measure) agree with riemfl's float64 on
      the same points to a few eps;
    * exp of the long step log(x, y) is ill-conditioned (an O(1) move of x, in units of
      rounding, moves the endpoint by e^(d/2) units): its float32 error stays below the change
      that perturbing x and u by half a float32 unit causes in float64.
    """
    m = PoincareBall(3, c=c)
    x64, y64 = near_boundary(3, c, delta, seed=1)
    x, y = x64.astype(np.float32), y64.astype(np.float32)
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    m.check_point(x)
    m.check_point(y)
    sigma = conformal_sigma(x, c)
    assert sigma.dtype == np.float32 and sigma[0] > 0
    assert float(sigma[0]) == pytest.approx(float(1 - c * mp_dot(mp_vec(x), mp_vec(x))), rel=F32)
    for z in (y, x + np.float32(1e-3) * (y - x)):  # a far and a close pair
        d = float(m.dist(x, z))
        assert abs(d - float(mp_dist(x, z, c))) <= 4 * F32 * d
        assert riemannian_error(m, x, m.log(x, z), mp_log(x, z, c)) <= 4 * F32
    rng = np.random.default_rng(0)
    u = rst.scaled_tangent(m, xd, 1.0, rng).astype(np.float32)
    ud = u.astype(np.float64)
    assert abs(float(m.inner(x, u, u)) / float(m.inner(xd, ud, ud)) - 1) <= 4 * F32
    g = rng.standard_normal(3).astype(np.float32)
    rgrad = m.egrad_to_rgrad(xd, g.astype(np.float64))
    assert riemannian_error(m, x, m.egrad_to_rgrad(x, g), rgrad) <= 4 * F32
    transported = m.parallel_transport(xd, yd, ud)
    assert riemannian_error(m, y, m.parallel_transport(x, y, u), transported) <= 4 * F32
    for backend in ("numpy", "torch"):
        assert checks.float32_error(m, "exp", (x, u), backend) < 4.0
    step = np.asarray(m.log(x, y))
    error = checks.float32_error(m, "exp", (x, step), "numpy")
    reference = np.asarray(m.exp(xd, step.astype(np.float64)))
    moved = 0.0
    for _ in range(8):
        dx, du = (rng.standard_normal(3) * np.abs(a) * 2.0**-24 for a in (xd, step))
        change = np.asarray(m.exp(xd + dx, step.astype(np.float64) + du)) - reference
        moved = max(moved, float(np.max(np.abs(change))) / F32)
    assert error < moved
    close(mp_exp(x, u, c), m.exp(xd, ud), 1e-14)


@pytest.mark.parametrize("delta", [1e-5, 1e-10, 1e-14])
def test_float64_near_the_boundary_against_50_digits(delta):
    """float64 points carry no wider type to accumulate sigma_x in: sigma_x has an absolute error
    of a few eps, so the maps are accurate to about eps / sigma_x relative (10 digits at
    1 - 1e-5; what the data's own rounding allows is the same order)."""
    m = PoincareBall(4)
    x, y = near_boundary(4, 1.0, delta, seed=2)
    eps = float(np.finfo(np.float64).eps)
    tol = 8 * eps / float(conformal_sigma(x)[0])
    for z in (y, x + 1e-6 * (y - x)):
        d = float(m.dist(x, z))
        assert abs(d - float(mp_dist(x, z, 1.0))) <= tol * d
        assert riemannian_error(m, x, m.log(x, z), mp_log(x, z, 1.0)) <= tol


def test_maps_match_geoopt_in_float64_near_the_boundary():
    """At 1 - 1e-3 (inside geoopt's float64 clamp, 1 - 1e-5) geoopt is right in float64."""
    geoopt = importorskip("geoopt")
    m, ref = PoincareBall(3), geoopt.PoincareBall()
    x, y = near_boundary(3, 1.0, 1e-3, seed=3)
    xt, yt = torch.as_tensor(x), torch.as_tensor(y)
    assert float(m.dist(x, y)) == pytest.approx(float(ref.dist(xt, yt)), rel=1e-9)
    close(m.log(x, y), ref.logmap(xt, yt).numpy(), 1e-9)
    v = np.array([0.3, -0.2, 0.1])
    close(m.parallel_transport(x, y, v), ref.transp(xt, yt, torch.as_tensor(v)).numpy(), 1e-9)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exp_and_retract_stay_inside(dtype):
    """A step of hyperbolic length 60 from near the boundary: the exact endpoint rounds onto the
    sphere c|y|^2 = 1 in both precisions; exp moves it radially onto the pull-back radius r = 1 -
    2 eps - (n + 4) eps_64, a point of the ball, whose direction is the exact one. The exact
    radius of the result is within the rounding bound of pull_inside, r (1 +- (eps + (n + 4)
    eps_64 / 2)), and its norm summed in any order in float64 is below 1/sqrt(c)."""
    m = PoincareBall(3, c=2.0)
    x64, _ = near_boundary(3, 2.0, 1e-2, seed=4)
    x = x64.astype(dtype)
    u = np.array([0.3, 0.5, -0.2])
    u = (u * (60.0 / float(m.norm(x64, u)))).astype(dtype)
    eps = float(np.finfo(dtype).eps)
    r = pull_back_radius(3, dtype)
    slack = eps + 7 * EPS64 / 2
    for y in (m.exp(x, u), m.retract(x, u)):
        assert y.dtype == dtype
        m.check_point(y)
        radius2 = exact_squared_radius(y, 2.0)
        assert Fraction(r * (1 - slack)) ** 2 <= radius2 <= Fraction(r * (1 + slack)) ** 2 < 1
        assert_inside_for_every_order(y, 2.0)
    exact = mp_exp(x64, u.astype(np.float64), 2.0)
    direction = exact / np.linalg.norm(exact)
    close(m.exp(x, u) / np.linalg.norm(m.exp(x, u)), direction, 64 * float(np.finfo(dtype).eps))


EPS64 = float(np.finfo(np.float64).eps)


def pull_back_radius(n, dtype):
    """The radius sqrt(c)|y| of PoincareBall.pull_inside: 1 - 2 eps - (n + 4) eps_64."""
    return 1.0 - 2.0 * float(np.finfo(dtype).eps) - (n + 4) * EPS64


def exact_squared_radius(y, c):
    """c |y|^2 in exact rational arithmetic (no rounding at all)."""
    return Fraction(c) * sum(Fraction(float(v)) ** 2 for v in np.asarray(y).ravel())


def assert_inside_for_every_order(y, c):
    """c |y|^2 < 1 however the squares are summed in float64: BLAS dot (np.dot, matmul, the
    kernel OPENBLAS_CORETYPE picks), numpy's pairwise sum, sequential sums forwards, backwards
    and over a random permutation, torch's reduction, the correctly rounded fsum, the norm."""
    v = np.asarray(y, dtype=np.float64)
    squares = v * v
    perm = np.random.default_rng(len(v)).permutation(len(v))
    sums = {
        "dot": float(np.dot(v, v)),
        "matmul": (v[None, :] @ v[:, None]).item(),
        "pairwise": float(np.sum(squares)),
        "forwards": float(np.cumsum(squares)[-1]),
        "backwards": float(np.cumsum(squares[::-1])[-1]),
        "permuted": float(np.cumsum(squares[perm])[-1]),
        "torch": float(torch.as_tensor(v).square().sum()),
        "fsum": math.fsum(squares),
        "norm": float(np.linalg.norm(v)) ** 2,
    }
    for how, total in sums.items():
        assert c * total < 1.0, (how, 1.0 - c * total)
    assert float(conformal_sigma(v, c)[0]) > 0.0


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_long_steps_stay_inside_for_every_summation_order(dtype, backend):
    """The pull-back invariant as a property: from many points near the boundary, steps of
    hyperbolic length 5 to 80 (most of whose endpoints round onto or beyond the sphere), in
    dimensions 2 to 64 and curvatures 0.5 and 2, batched, one point at a time and with the
    coordinates permuted (each changes riemfl's own summation order): every result has exact
    radius sqrt(c)|y| below r (1 + eps + (n + 4) eps_64 / 2) < 1, the bound of pull_inside,
    and c|y|^2 < 1 however it is summed in float64 (the OPENBLAS_CORETYPE kernels included)."""
    convert = (lambda a: a) if backend == "numpy" else torch.as_tensor
    pulled = 0
    for n, c in ((2, 2.0), (3, 0.5), (7, 2.0), (16, 1.0), (64, 0.5)):
        m = PoincareBall(n, c=c)
        rng = np.random.default_rng(n)
        direction = rng.standard_normal((12, n))
        direction /= np.linalg.norm(direction, axis=-1, keepdims=True)
        x64 = direction * ((1.0 - 10.0 ** rng.uniform(-7, -1, (12, 1))) / math.sqrt(c))
        u64 = rng.standard_normal((12, n))
        lengths = rng.uniform(5.0, 80.0, 12)
        u64 *= (lengths / np.asarray(m.norm(x64, u64)))[:, None]
        x, u = x64.astype(dtype), u64.astype(dtype)
        perm = rng.permutation(n)
        results = [np.asarray(m.exp(convert(x), convert(u)))]
        results.append(
            np.stack([np.asarray(m.exp(convert(a), convert(b))) for a, b in zip(x, u, strict=True)])
        )
        results.append(np.asarray(m.retract(convert(x[:, perm]), convert(u[:, perm]))))
        slack = float(np.finfo(dtype).eps) + (n + 4) * EPS64 / 2
        low, high = (Fraction(pull_back_radius(n, dtype) * (1 + s)) ** 2 for s in (-slack, slack))
        for y in results:
            assert y.dtype == dtype
            m.check_point(y)
            for point in y:
                radius2 = exact_squared_radius(point, c)
                assert radius2 <= high < 1
                pulled += int(radius2 >= low)
                assert_inside_for_every_order(point, c)
    assert 45 < pulled < 180  # long steps met the pull-back; the others ended inside it


def test_pull_inside_leaves_interior_points_and_is_differentiable():
    """pull_inside changes nothing below the radius (numpy: the array itself; torch: bit for
    bit), moves points beyond it onto it, and has finite torch gradients on both sides."""
    m = PoincareBall(4, c=0.5)
    x = m.random_point(5, rng=0)
    assert m.pull_inside(x) is x
    xt = torch.as_tensor(x)
    assert torch.equal(m.pull_inside(xt), xt)
    edge = x / np.linalg.norm(x, axis=-1, keepdims=True) * math.sqrt(2.0)  # on the sphere
    both = torch.as_tensor(np.concatenate([x, edge])).requires_grad_(True)
    moved = m.pull_inside(both)
    (grad,) = torch.autograd.grad(moved.square().sum(), both)
    assert bool(torch.isfinite(grad).all())
    bound = Fraction(pull_back_radius(4, np.float64) * (1 + 9 * EPS64 / 2)) ** 2
    for point in moved.detach().numpy()[5:]:
        assert exact_squared_radius(point, 0.5) <= bound < 1


def test_check_point_is_strict_and_names_the_value():
    m = PoincareBall(2, c=4.0)
    with pytest.raises(NotOnManifoldError, match=r"c\|x\|\^2 < 1.*1 - c\|x\|\^2 = "):
        m.check_point(np.array([0.5, 0.0]))  # on the sphere of radius 1/2
    with pytest.raises(NotOnManifoldError, match=r"batch element \(1,\)"):
        m.check_point(np.array([[0.1, 0.0], [0.3, 0.4]]))
    inside = np.array([np.nextafter(np.float32(0.5), np.float32(0)), 0.0], dtype=np.float32)
    m.check_point(inside)  # one unit of rounding inside
    assert m.point_violation(np.array([0.6, 0.0]))[1] == math.inf
    assert m.point_violation(inside)[1] == 0.0


def test_project_and_the_local_radius():
    m = PoincareBall(3, c=0.5)
    x = m.random_point(rng=0)
    rho = float(m.local_reach(x))
    assert rho == pytest.approx(1 / math.sqrt(0.5) - np.linalg.norm(x), rel=1e-12)
    direction = x / np.linalg.norm(x)
    close(m.project(x + 0.999 * rho * direction), x + 0.999 * rho * direction, 0.0)
    with pytest.raises(ProjectionError, match="no nearest point in the open ball"):
        m.project(x + 1.001 * rho * direction)
    edge, _ = near_boundary(3, 0.5, 1e-12, seed=0)  # accurate where 1/sqrt(c) - |x| cancels
    assert float(m.local_reach(edge)) == pytest.approx(1e-12 / math.sqrt(0.5), rel=1e-3)


def test_sech2_of_the_exp_step_matches_cosh_and_never_overflows():
    """exp's conformal factor of the step, 1 / cosh^2 t, from e^(-2t): equal to the direct form
    where cosh is finite (within a few eps: both are a few roundings from the true value), 0
    with no overflow warning where cosh overflows, and the series near 0."""
    from riemfl.manifolds.elementary import sech2_sqrt

    lam = np.concatenate([[0.0], np.geomspace(1e-12, 5e5, 200)])
    with np.errstate(over="ignore"):
        direct = 1.0 / np.cosh(np.sqrt(lam)) ** 2
    np.testing.assert_allclose(sech2_sqrt(lam), direct, rtol=1e-13, atol=1e-300)
    with np.errstate(over="raise"):
        assert sech2_sqrt(np.array([1e6, 1e12])).tolist() == [0.0, 0.0]


# --------------------------------------------------------------------------- boundary points
#: the maps whose formulas give inf or NaN at a point with |x| = 1: each must refuse it
SIX_MAPS = ("inner", "norm", "retract", "exp", "inverse_retract", "parallel_transport")


def six_map_args(method, x, y, u):
    return {
        "inner": (x, u, u),
        "norm": (x, u),
        "retract": (x, u),
        "exp": (x, u),
        "inverse_retract": (x, y),
        "parallel_transport": (x, y, u),
    }[method]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("method", SIX_MAPS)
def test_maps_refuse_a_point_on_the_boundary(method, backend):
    """x = [1, 0], which check_point refuses (|x| = 1): each map gave inf or NaN (inner and norm
    inf, retract, exp and inverse_retract NaN, parallel_transport inf), now a
    NotOnManifoldError naming the map, the violation and what a point must satisfy."""
    m = PoincareBall(2)
    x, y, u = np.array([1.0, 0.0]), np.array([0.1, 0.3]), np.array([0.1, -0.2])
    args = six_map_args(method, x, y, u)
    if backend == "torch":
        args = [torch.as_tensor(a) for a in args]
    with pytest.raises(NotOnManifoldError):
        m.check_point(args[0])
    with pytest.raises(NotOnManifoldError) as info:
        getattr(m, method)(*args)
    message = str(info.value)
    assert not isinstance(info.value, NonFiniteError)  # the arguments are finite
    assert message.startswith(f"PoincareBall(2).{method}: point x is not a point of the manifold")
    assert "|x| = 1 is not < 1: the point is on the ball's boundary" in message
    assert "expected a point of the open ball, c|x|^2 < 1" in message


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("method", ["inverse_retract", "parallel_transport", "log", "dist"])
def test_maps_refuse_a_second_point_beyond_the_boundary(method, backend):
    """y outside the ball (c|y|^2 = 1.8 > 1, batch element 1), where the conformal factor is
    negative: the maps named the point y, not a NaN."""
    m = PoincareBall(2, c=0.25)
    x = np.zeros((2, 2))
    y = np.array([[0.1, 0.2], [1.2, -2.4]])
    args = (x, y, np.ones((2, 2)))[: 3 if method == "parallel_transport" else 2]
    if backend == "torch":
        args = [torch.as_tensor(a) for a in args]
    pattern = (
        rf"PoincareBall\(2, c=0\.25\)\.{method}: point y .*\|y\| = 2\.68\d* is not < 1/sqrt\(c\) "
        r"= 2 \(batch element \(1,\)\): the point is beyond the ball's boundary"
    )
    with pytest.raises(NotOnManifoldError, match=pattern):
        getattr(m, method)(*args)


def test_the_boundary_guard_leaves_points_of_the_ball_bit_for_bit():
    """Points one float32 unit of rounding inside the ball: the guard of sigma changes nothing
    (the gradient, its Hessian and exp agree with the formulas on sigma itself)."""
    m = PoincareBall(2)
    x = np.array([np.nextafter(np.float32(1), np.float32(0)), 0.0], dtype=np.float32)
    g = np.array([0.3, -0.7], dtype=np.float32)
    sigma = conformal_sigma(x)
    np.testing.assert_array_equal(m.egrad_to_rgrad(x, g), (0.25 * sigma * sigma) * g)
    assert np.isfinite(m.exp(x, g)).all() and np.isfinite(m.inner(x, g, g))

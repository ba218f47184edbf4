"""Simplex (Fisher-Rao): identities the conformance kit does not cover (the distance formula,
the geodesic equation, exp's domain, Chentsov invariance, the entropic retraction, projections
against a QP), and the kit's projection checks inside the per-point radius."""

import itertools
import math

import numpy as np
import pytest
import scipy.optimize
from hypothesis import given
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

from riemfl.errors import (
    CutLocusError,
    NonFiniteError,
    NotOnManifoldError,
    ParameterError,
    ProjectionError,
)
from riemfl.manifolds import Simplex
from riemfl.manifolds.simplex import project_closed_simplex
from riemfl.testing import TOLERANCES, checks, torch_available
from riemfl.testing import strategies as rst

sizes = st.sampled_from([2, 3, 5, 8])
F64 = TOLERANCES["float64"]


def rng_of(seed):
    return np.random.default_rng(seed)


def inside_tangent(manifold, p, fraction, rng):
    """A tangent vector of Fisher norm ``fraction`` times the distance to the boundary."""
    radius = np.asarray(manifold.local_injectivity_radius(p))
    return rst.scaled_tangent(manifold, p, fraction * radius, rng)


# --------------------------------------------------------------------------- distance, exp, log
@given(c=sizes, seed=rst.seeds(), fraction=st.floats(0.0, 0.99))
def test_exp_log_dist_on_uniform_points(c, seed, fraction):
    """Dirichlet(1) points (close to the boundary too), tangents inside the exp domain."""
    manifold, rng = Simplex(c), rng_of(seed)
    p = manifold.random_point(3, rng=rng)
    u = inside_tangent(manifold, p, fraction, rng)
    q = manifold.exp(p, u)
    manifold.check_point(q)
    np.testing.assert_allclose(manifold.log(p, q), u, atol=1e-9 * max(1, np.abs(u).max()))
    bhattacharyya = np.sum(np.sqrt(p * q), axis=-1)
    expected = 2 * np.arccos(np.clip(bhattacharyya, -1, 1))
    np.testing.assert_allclose(manifold.dist(p, q), manifold.norm(p, u), atol=1e-7)
    np.testing.assert_allclose(manifold.dist(p, q), expected, atol=1e-7)
    r = manifold.random_point(3, rng=rng)  # log and dist are global
    np.testing.assert_allclose(manifold.exp(p, manifold.log(p, r)), r, atol=1e-10)
    d = manifold.dist(p, r)
    np.testing.assert_allclose(
        d, 2 * np.arccos(np.clip(np.sum(np.sqrt(p * r), -1), -1, 1)), atol=1e-7
    )
    np.testing.assert_allclose(manifold.norm(p, manifold.log(p, r)), d, atol=1e-10)
    assert np.all(d < math.pi)  # the Fisher-Rao diameter


def geodesic_ode(_, state):
    """Fisher-Rao geodesic equation on the simplex (Euler-Lagrange of sum q'^2/q with sum q = 1):
    q'' = q'^2 / (2q) - (q/2) sum q'^2/q."""
    q, v = np.split(state, 2)
    return np.concatenate([v, v * v / (2 * q) - 0.5 * q * np.sum(v * v / q)])


@given(c=sizes, seed=rst.seeds(), fraction=st.floats(0.05, 0.9))
def test_exp_solves_the_geodesic_equation(c, seed, fraction):
    manifold, rng = Simplex(c), rng_of(seed)
    p = manifold.random_point(rng=rng)
    u = inside_tangent(manifold, p, fraction, rng)
    sol = solve_ivp(geodesic_ode, (0, 1), np.concatenate([p, u]), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(manifold.exp(p, u), sol.y[:c, -1], atol=1e-8)
    # speed is constant along a geodesic: |q'(1)|_q = |u|_p
    assert manifold.norm(sol.y[:c, -1], sol.y[c:, -1]) == pytest.approx(manifold.norm(p, u))


def test_exp_raises_where_the_geodesic_leaves_the_simplex():
    manifold = Simplex(3)
    p = np.array([0.05, 0.45, 0.5])
    radius = float(manifold.local_injectivity_radius(p))
    assert radius == pytest.approx(2 * math.asin(math.sqrt(0.05)))
    face = np.array([0.0, 0.45, 0.5]) / 0.95  # the nearest point of the face p_0 = 0
    # the log formula extends to the closed orthant (Simplex.log refuses the boundary point)
    x, y = np.sqrt(p), np.sqrt(face)
    alpha = math.acos(x @ y)
    u = 2.0 * x * (alpha / math.sin(alpha)) * (y - math.cos(alpha) * x)
    assert manifold.norm(p, u) == pytest.approx(radius)
    manifold.check_point(manifold.exp(p, 0.999 * u))
    with pytest.raises(CutLocusError, match=r"\|u\|_p = 0\.4.* component 0 reaches 0"):
        manifold.exp(p, 1.001 * u)
    # longer than pi: the endpoint can be back inside, still the geodesic has left
    v = manifold.log(p, np.array([0.3, 0.3, 0.4]))
    with pytest.raises(CutLocusError, match="longer than pi"):
        manifold.exp(p, 2 * math.pi * v / manifold.norm(p, v))


# --------------------------------------------------------------------------- invariance
@given(c=sizes, seed=rst.seeds(), split=st.floats(0.01, 0.99))
def test_fisher_rao_is_invariant_under_permutations_and_markov_splits(c, seed, split):
    """Chentsov: the Fisher metric is the one invariant under sufficient statistics."""
    manifold, rng = Simplex(c), rng_of(seed)
    p, q = manifold.random_point(2, rng=rng)
    u, v = (manifold.random_tangent(p, rng=rng) for _ in range(2))
    perm = rng.permutation(c)
    assert manifold.dist(p[perm], q[perm]) == pytest.approx(float(manifold.dist(p, q)))
    assert manifold.inner(p[perm], u[perm], v[perm]) == pytest.approx(
        float(manifold.inner(p, u, v))
    )

    def refine(a):  # split the first outcome into two with ratio split : 1 - split
        return np.concatenate([[split * a[0], (1 - split) * a[0]], a[1:]])

    big = Simplex(c + 1)
    assert big.dist(refine(p), refine(q)) == pytest.approx(float(manifold.dist(p, q)), abs=1e-12)
    assert big.inner(refine(p), refine(u), refine(v)) == pytest.approx(
        float(manifold.inner(p, u, v)), rel=1e-10
    )
    # the Fisher metric is the pull-back of the sphere map p -> 2 sqrt(p)
    w = inside_tangent(manifold, p, 0.5, rng)  # p +- h w stays far inside for small h
    h = 1e-5
    image = (2 * np.sqrt(p + h * w) - 2 * np.sqrt(p - h * w)) / (2 * h)
    assert float(np.sum(image**2)) == pytest.approx(float(manifold.inner(p, w, w)), rel=1e-6)


@given(c=sizes, seed=rst.seeds())
def test_parallel_transport_carries_the_geodesic_velocity(c, seed):
    manifold, rng = Simplex(c), rng_of(seed)
    p, q = manifold.random_point(2, rng=rng)
    np.testing.assert_allclose(
        manifold.parallel_transport(p, q, manifold.log(p, q)), -manifold.log(q, p), atol=1e-10
    )
    v = manifold.random_tangent(p, rng=rng)
    there = manifold.parallel_transport(p, q, v)
    np.testing.assert_allclose(manifold.parallel_transport(q, p, there), v, atol=1e-10)
    np.testing.assert_allclose(manifold.transport(p, q, v), v, atol=1e-15)


# --------------------------------------------------------------------------- entropic retraction
@given(c=sizes, seed=rst.seeds())
def test_entropic_retraction_second_order_term(c, seed):
    manifold, rng = Simplex(c), rng_of(seed)
    p = manifold.random_point(rng=rng)
    u = inside_tangent(manifold, p, 0.5, rng)
    # R_p(tu) = p + tu + t^2 c + O(t^3) with the exact c = (u^2/p - p |u|_p^2) / 2: first order,
    # and c is twice the geodesic's t^2 term, so not second order (c vanishes only where u^2/p is
    # parallel to p, e.g. at the barycentre of an even-C simplex). The t^3 remainder is below
    # t max|u/p| max(u^2/p) <= 2e-4 max(u^2/p) for u inside the exp domain.
    t, scale = 1e-4, float(np.max(u * u / p))
    second = 0.5 * (u * u / p - p * float(manifold.inner(p, u, u)))
    lhs = (manifold.retract(p, t * u) - p - t * u) / t**2
    np.testing.assert_allclose(lhs, second, atol=1e-3 * scale)
    lhs = (manifold.exp(p, t * u) - p - t * u) / t**2
    np.testing.assert_allclose(lhs, 0.5 * second, atol=1e-3 * scale)


@given(c=sizes, seed=rst.seeds(), eta=st.floats(0.01, 5.0))
def test_retraction_of_the_fisher_gradient_step_is_exponential_weights(c, seed, eta):
    """FLoRAL eq. (5)/(34): pi <- pi * exp(-eta f) / Z is R_pi(-eta grad <f, pi>)."""
    manifold, rng = Simplex(c), rng_of(seed)
    p = manifold.random_point(rng=rng)
    losses = rng.uniform(0, 3, size=c)
    step = manifold.retract(p, -eta * manifold.egrad_to_rgrad(p, losses))
    weights = p * np.exp(-eta * losses)
    np.testing.assert_allclose(step, weights / weights.sum(), rtol=1e-12)
    np.testing.assert_allclose(manifold.retract(p, 1e3 * p * (losses - p @ losses)).sum(), 1.0)


@given(c=sizes, seed=rst.seeds())
def test_inverse_retraction_is_global(c, seed):
    manifold, rng = Simplex(c), rng_of(seed)
    p, q = manifold.random_point(2, rng=rng)
    u = manifold.inverse_retract(p, q)
    manifold.check_tangent(p, u)
    np.testing.assert_allclose(manifold.retract(p, u), q, rtol=1e-10)
    kl = np.sum(p * np.log(p / q))  # u = p (log(q/p) + KL(p || q))
    np.testing.assert_allclose(u, p * (np.log(q / p) + kl), atol=1e-12)


@given(c=sizes, seed=rst.seeds())
def test_riemannian_gradient_against_finite_differences_along_the_retraction(c, seed):
    manifold, rng = Simplex(c), rng_of(seed)
    p = manifold.random_point(rng=rng)
    w, m = rng.standard_normal(c), rng.standard_normal((c, c))

    def f(x):
        return float(w @ np.log(x) + 0.5 * x @ m @ x)

    g = w / p + 0.5 * (m + m.T) @ p
    grad = manifold.egrad_to_rgrad(p, g)
    manifold.check_tangent(p, grad)
    u = inside_tangent(manifold, p, 0.5, rng)  # |u_i| < 1.6 p_i: R_p(+-h u) stays near p
    h = 1e-6
    fd = (f(manifold.retract(p, h * u)) - f(manifold.retract(p, -h * u))) / (2 * h)
    assert float(manifold.inner(p, grad, u)) == pytest.approx(fd, rel=1e-6, abs=1e-6)
    # grad is the Fisher-Rao Riesz representer: <grad, v>_p = sum g v for every tangent v
    assert float(manifold.inner(p, grad, u)) == pytest.approx(float(g @ u), rel=1e-10)


# --------------------------------------------------------------------------- projections
def qp_projection(a):
    """Brute-force QP min |x - a|^2 over x >= 0, sum x = 1, by enumerating the faces.

    The minimiser lies in the relative interior of some face, where it is the projection of a
    onto that face's affine hull; every feasible such projection is a candidate, so the nearest
    candidate is the exact solution (2^C - 1 faces; no iterative solver, no tolerance).
    """
    best, best_d = None, math.inf
    for size in range(1, a.size + 1):
        for face in itertools.combinations(range(a.size), size):
            x = np.zeros_like(a)
            x[list(face)] = a[list(face)] - (a[list(face)].sum() - 1.0) / size
            if x.min() >= 0 and np.sum((x - a) ** 2) < best_d:
                best, best_d = x, np.sum((x - a) ** 2)
    return best


@given(c=sizes, seed=rst.seeds(), scale=st.floats(0.01, 3.0))
def test_projections_against_a_qp(c, seed, scale):
    manifold, rng = Simplex(c), rng_of(seed)
    a = manifold.random_point(rng=rng) + scale * rng.standard_normal(c)
    qp = qp_projection(a)
    closed = project_closed_simplex(a)
    np.testing.assert_allclose(closed, qp, atol=1e-12)
    # and scipy's active-set NNLS, the equality as a heavily weighted row (error ~ 1/w^2)
    w = 1e4
    nnls, _ = scipy.optimize.nnls(np.vstack([np.eye(c), w * np.ones((1, c))]), np.append(a, w))
    np.testing.assert_allclose(closed, nnls, atol=1e-6)
    if np.all(closed > 0):
        np.testing.assert_allclose(manifold.project(a), closed, atol=1e-12)
    else:
        with pytest.raises(ProjectionError, match=r"no nearest point in the open simplex"):
            manifold.project(a)
    np.testing.assert_allclose(project_closed_simplex(np.stack([a, a])), [closed, closed])


def test_project_raises_on_the_boundary_and_moves_along_the_normal():
    manifold = Simplex(3)
    p = np.array([0.2, 0.3, 0.5])
    np.testing.assert_allclose(manifold.project(p + 7.5), p, atol=1e-14)  # normal direction 1
    with pytest.raises(ProjectionError, match=r"components \[0\] <= 0.*project_closed_simplex"):
        manifold.project(np.array([-0.1, 0.5, 0.6]))
    with pytest.raises(ProjectionError, match=r"batch element \(1,\)"):
        manifold.project(np.array([p, [1.0, 0.0, 0.0]]))
    for project in (manifold.project, project_closed_simplex):
        with pytest.raises(NotOnManifoldError, match="NaN"):
            project(np.array([np.nan, 0.5, 0.5]))


@given(c=sizes, seed=rst.seeds(), fraction=st.floats(0.0, 0.99))
def test_local_reach_is_the_exact_ball_radius(c, seed, fraction):
    manifold, rng = Simplex(c), rng_of(seed)
    p = manifold.random_point(rng=rng)
    rho = float(manifold.local_reach(p))
    a = p + fraction * rho * rst.unit_ambient(manifold, (), rng)
    q = manifold.project(a)  # never raises inside the ball
    checks.check_projection(manifold, a, p, F64)
    b = a + 0.2 * rho * rst.unit_ambient(manifold, (), rng)
    if fraction < 0.75:
        checks.check_projection_lipschitz(manifold, a, b)
    for _ in range(8):
        y = manifold.random_point(rng=rng)
        assert np.linalg.norm(a - y) >= np.linalg.norm(a - q) - 1e-12
    # sharp: towards the nearest face, the boundary is reached at exactly rho
    k = int(np.argmin(p))
    towards = (np.full(c, 1.0 / c) - np.eye(c)[k]) / math.sqrt((c - 1) / c)
    manifold.project(p + 0.999 * rho * towards)
    with pytest.raises(ProjectionError):
        manifold.project(p + 1.001 * rho * towards)


@pytest.mark.skipif(not torch_available(), reason="torch is not installed")
@given(c=sizes, seed=rst.seeds())
def test_closed_projection_in_torch_and_its_jacobian(c, seed):
    """On the support S of P(a), P(a)_i = a_i - (sum_S a - 1)/|S|: Jacobian I - 11^T/|S|."""
    import torch

    rng = rng_of(seed)
    a, w = rng.standard_normal(c), rng.standard_normal(c)
    at = torch.tensor(a, requires_grad=True)
    closed = project_closed_simplex(at)
    np.testing.assert_allclose(closed.detach().numpy(), project_closed_simplex(a), atol=1e-15)
    (grad,) = torch.autograd.grad((torch.as_tensor(w) * closed).sum(), at)
    support = closed.detach().numpy() > 0
    jac = np.where(np.outer(support, support), np.eye(c) - 1.0 / support.sum(), 0.0)
    np.testing.assert_allclose(grad.numpy(), jac.T @ w, atol=1e-12)


# --------------------------------------------------------------------------- checks and errors
def test_check_point_names_the_failed_constraint():
    manifold = Simplex(3)
    with pytest.raises(NotOnManifoldError, match=r"p > 0 is violated by component 1 = 0\.000e\+00"):
        manifold.check_point(np.array([0.5, 0.0, 0.5]))
    with pytest.raises(NotOnManifoldError, match=r"component 2 = -1\.000e-01 in batch element"):
        manifold.check_point(np.array([[0.2, 0.3, 0.5], [0.6, 0.5, -0.1]]))
    with pytest.raises(NotOnManifoldError, match=r"sum\(p\) = 1 is violated by 1\.000e-01"):
        manifold.check_point(np.array([0.2, 0.3, 0.6]))
    with pytest.raises(NotOnManifoldError, match=r"sum\(u\) = 0"):
        manifold.check_tangent(np.array([0.2, 0.3, 0.5]), np.array([0.1, 0.0, 0.0]))
    for bad in ((1,), (2.5,), (3, 0.0), (3, math.inf)):
        with pytest.raises(ParameterError):
            Simplex(*bad)
    assert Simplex(4, concentration=0.01).random_point(50, rng=0).min() > 0


def test_random_point_is_dirichlet():
    p = Simplex(3).random_point(20000, rng=1)
    np.testing.assert_allclose(p.mean(axis=0), 1 / 3, atol=0.01)
    np.testing.assert_allclose(p.var(axis=0), 2 / 36, atol=0.005)  # Dirichlet(1,1,1): 2/(9*4)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_long_entropic_steps_keep_every_component_positive(backend):
    """The entropic retraction of steps so long that weights e^(z_i - max z) underflow (the
    exact components are below the smallest normal number): every component stays positive
    (nonzero), batched and one point at a time, in every dimension and dtype."""
    if backend == "torch" and not torch_available():
        pytest.skip("torch is not installed")
    for c, scale in itertools.product((2, 5, 40), (1e3, 1e5)):
        m = Simplex(c)
        rng = rng_of(c)
        for dtype in (np.float64, np.float32):
            x = m.random_point(8, rng=rng)
            u = scale * m.random_tangent(x, rng=rng)
            args = [a.astype(dtype) for a in (x, u)]
            if backend == "torch":
                import torch

                args = [torch.as_tensor(a) for a in args]
            batched = np.asarray(m.retract(*args))
            single = np.stack([np.asarray(m.retract(a, b)) for a, b in zip(*args, strict=True)])
            for y in (batched, single):
                assert y.dtype == dtype and np.all(y > 0)
                m.check_point(y)


def test_exp_whose_square_root_underflows_when_squared_stays_positive():
    """Exp towards a face from a component of 1e-300: the endpoint's square root keeps a
    positive component of about 1e-163, whose square (1e-326) underflows; the component is the
    smallest normal number instead of 0, so the result is a point of the open simplex."""
    m = Simplex(3)
    p = np.array([1e-300, 0.5, 0.5 - 1e-300])
    u = 2e-300 * (1 - 1e-13) * np.array([-1.0, 1.0, 0.0])
    y = m.exp(p, u)
    assert 0 < y[0] <= np.finfo(np.float64).tiny  # the floor, divided by the sum (1 + 1e-16)
    m.check_point(y)


# --------------------------------------------------------------------------- boundary points
#: the maps whose formulas give inf or NaN at a point with a zero component: each must refuse it
SIX_MAPS = ("inner", "norm", "retract", "exp", "inverse_retract", "parallel_transport")


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("method", SIX_MAPS)
def test_maps_refuse_a_point_with_a_zero_component(method, backend):
    """p = [0.5, 0.5, 0], which check_point refuses (p > 0): inner and norm gave inf, retract
    and inverse_retract NaN, parallel_transport inf (exp a CutLocusError that blamed the
    tangent's length); now a NotOnManifoldError naming the map, the component and what a point
    must satisfy."""
    if backend == "torch" and not torch_available():
        pytest.skip("torch is not installed")
    m = Simplex(3)
    p, q, u = np.array([0.5, 0.5, 0.0]), np.array([0.2, 0.3, 0.5]), np.array([0.1, -0.05, -0.05])
    args = {
        "inner": (p, u, u),
        "norm": (p, u),
        "retract": (p, u),
        "exp": (p, u),
        "inverse_retract": (p, q),
        "parallel_transport": (p, q, u),
    }[method]
    if backend == "torch":
        import torch

        args = [torch.as_tensor(a) for a in args]
    with pytest.raises(NotOnManifoldError):
        m.check_point(args[0])
    # numpy's warnings on the way (log 0, u/0) are those of the failure path
    with np.errstate(divide="ignore"), pytest.raises(NotOnManifoldError) as info:
        getattr(m, method)(*args)
    message = str(info.value)
    assert not isinstance(info.value, NonFiniteError)  # the arguments are finite
    assert message.startswith(f"Simplex(3).{method}: point x is not a point of the manifold")
    assert "its component 2 is 0.000e+00, not > 0: the point is on the boundary" in message
    assert "expected a point of the open simplex, x > 0 with sum(x) = 1" in message


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("method", ["inverse_retract", "parallel_transport", "log", "dist"])
def test_maps_refuse_a_second_point_with_a_negative_component(method, backend):
    """q with a negative component in batch element 1 (beyond the boundary): the maps name the
    point y; log and dist, whose formulas extend to the closed simplex, refuse a zero one too."""
    if backend == "torch" and not torch_available():
        pytest.skip("torch is not installed")
    m = Simplex(3)
    p = np.full((2, 3), 1 / 3)
    pattern = rf"Simplex\(3\)\.{method}: point y .*component 0 in batch element \(1,\) is "
    cases = (([-0.1, 0.5, 0.6], r"-1\.000e-01.* beyond"), ([0.0, 0.5, 0.5], r"0\.000e\+00.* on"))
    for q, value in cases:
        args = (p, np.array([[0.2, 0.3, 0.5], q]), np.zeros((2, 3)))
        args = args[: 3 if method == "parallel_transport" else 2]
        if backend == "torch":
            import torch

            args = [torch.as_tensor(a) for a in args]
        with pytest.raises(NotOnManifoldError, match=pattern + value):
            getattr(m, method)(*args)

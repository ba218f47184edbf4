"""SpecialOrthogonal beyond the kit: the closed forms against the matrix functions, the cut
locus, parallel transport against its differential equation, the special polar factor where it
is and is not unique, and the constants attained."""

import math

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize
from hypothesis import given
from hypothesis import strategies as st

from riemfl import CutLocusError, NotOnManifoldError, ProjectionError, SpecialOrthogonal
from riemfl.linalg import special_polar
from riemfl.manifolds.stiefel import inverse_polar_retraction
from riemfl.testing import importorskip
from riemfl.testing import strategies as rst

torch = importorskip("torch")


def rotation_in_plane(n, angle, rng, other=0.0):
    """A rotation by ``angle`` in a random plane (and by ``other`` in a second one, n >= 4),
    with its logarithm."""
    q = SpecialOrthogonal(n).random_point(rng=rng)
    w = np.zeros((n, n))
    w[1, 0], w[0, 1] = angle, -angle
    if n >= 4:
        w[3, 2], w[2, 3] = other, -other
    log = q @ w @ q.T
    return scipy.linalg.expm(log), log


@pytest.mark.parametrize("n", [2, 3, 4, 5])
@given(seed=rst.seeds(), norm=st.floats(0.0, 4.0))
def test_exp_log_match_the_matrix_functions(n, seed, norm):
    """X expm(X^T U) and X logm(X^T Y) (scipy), for the closed forms (n = 2, 3) and the
    generic path alike, up to rotation angles of 4/sqrt(2) = 2.8."""
    m = SpecialOrthogonal(n)
    x = m.random_point(rng=seed)
    u = rst.scaled_tangent(m, x, norm, np.random.default_rng(seed + 1))
    y = m.exp(x, u)
    np.testing.assert_allclose(y, x @ scipy.linalg.expm(x.T @ u), atol=1e-13)
    reference = x @ np.real(scipy.linalg.logm(x.T @ y))
    np.testing.assert_allclose(m.log(x, y), reference, atol=1e-10)
    np.testing.assert_allclose(m.dist(x, y), np.linalg.norm(reference), atol=1e-10)


@given(seed=rst.seeds(), norm=st.floats(0.01, 3.0))
def test_matches_pymanopt(seed, norm):
    """pymanopt stores tangent vectors as Omega = X^T U (the Lie algebra), riemfl as U."""
    pymanopt = importorskip("pymanopt")
    ref = pymanopt.manifolds.SpecialOrthogonalGroup(4)
    m = SpecialOrthogonal(4)
    x = m.random_point(rng=seed)
    u = rst.scaled_tangent(m, x, norm, np.random.default_rng(seed + 1))
    y = m.exp(x, u)
    np.testing.assert_allclose(y, ref.exp(x, x.T @ u), atol=1e-12)
    np.testing.assert_allclose(x.T @ m.log(x, y), ref.log(x, y), atol=1e-9)
    np.testing.assert_allclose(m.dist(x, y), ref.dist(x, y), atol=1e-9)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("gap", [1e-3, 1e-6, 1e-9, 1e-12])
def test_closed_form_log_is_accurate_up_to_the_cut_locus(n, gap):
    """For n = 2, 3 log is exact to rounding at angles pi - gap (n = 3 takes the axis from the
    symmetric part there, not (theta / sin theta) S, which loses eps / gap)."""
    m = SpecialOrthogonal(n)
    rng = np.random.default_rng(0)
    r, log = rotation_in_plane(n, math.pi - gap, rng)
    x = m.random_point(rng=rng)
    y = x @ r
    np.testing.assert_allclose(x.T @ m.log(x, y), log, atol=3e-15)
    assert m.dist(x, y) == pytest.approx(math.sqrt(2) * (math.pi - gap), rel=1e-15)


@pytest.mark.parametrize("n", [4, 5, 6])
@pytest.mark.parametrize("gap", [1.0, 1e-3, 1e-6])
def test_generic_log_error_grows_like_eps_over_the_gap(n, gap):
    """For n >= 4 (log R = 2 log R^(1/2), the square root the nearest rotation to I + R) the
    error near the cut locus is about eps / (pi - theta), as the docstring states."""
    m = SpecialOrthogonal(n)
    rng = np.random.default_rng(n)
    r, log = rotation_in_plane(n, math.pi - gap, rng, other=0.3)
    x = m.random_point(rng=rng)
    err = np.max(np.abs(x.T @ m.log(x, x @ r) - log))
    assert err < 50 * np.finfo(float).eps / gap


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_log_and_parallel_transport_refuse_the_cut_locus(n):
    m = SpecialOrthogonal(n)
    rng = np.random.default_rng(1)
    r, _ = rotation_in_plane(n, math.pi, rng, other=0.5)
    x = m.random_point(rng=rng)
    y = x @ r
    with pytest.raises(CutLocusError, match="rotation by pi"):
        m.log(x, y)
    with pytest.raises(CutLocusError, match="rotation by pi"):
        m.parallel_transport(x, y, m.random_tangent(x, rng=2))
    if n <= 3:  # the closed-form distance is defined there: sqrt(2) pi, the injectivity radius
        assert m.dist(x, y) == pytest.approx(m.injectivity_radius, rel=1e-14)
    # one batch element on the cut locus is named
    batch = np.stack([x, y])
    with pytest.raises(CutLocusError, match=r"batch element \(1,\)" if n <= 3 else "rotation"):
        m.log(np.stack([x, x]), batch)


def _transport_ode(x, log, v0, steps=400):
    """Parallel transport along X expm(t L) by RK4 on the ambient equation of a Riemannian
    submanifold, V' = (d/dt P_gamma) V = -(gamma' V^T gamma + gamma V^T gamma')/2 (from
    P_gamma V' = 0 and V = P_gamma V), independent of the Lie-group derivation."""

    def rhs(t, v):
        g = x @ scipy.linalg.expm(t * log)
        gp = g @ log
        return -0.5 * (gp @ v.T @ g + g @ v.T @ gp)

    v, h = v0, 1.0 / steps
    for k in range(steps):
        t = k * h
        k1 = rhs(t, v)
        k2 = rhs(t + h / 2, v + h / 2 * k1)
        k3 = rhs(t + h / 2, v + h / 2 * k2)
        k4 = rhs(t + h, v + h * k3)
        v = v + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return v


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_parallel_transport_solves_the_transport_equation(n):
    m = SpecialOrthogonal(n)
    rng = np.random.default_rng(n)
    x = m.random_point(rng=rng)
    u = rst.scaled_tangent(m, x, 2.5, rng)
    v = m.random_tangent(x, rng=rng)
    y = m.exp(x, u)
    np.testing.assert_allclose(
        m.parallel_transport(x, y, v), _transport_ode(x, x.T @ u, v), atol=1e-9
    )
    # it moves the geodesic's velocity to the velocity at y, Y X^T U
    np.testing.assert_allclose(m.parallel_transport(x, y, u), y @ (x.T @ u), atol=1e-12)


def _brute_force_nearest(a, rng, starts=6):
    """The nearest rotation by minimising |a - expm(W)|_F over skew W from several starts."""
    n = a.shape[0]
    rows, cols = np.triu_indices(n, 1)

    def rotation(w):
        s = np.zeros((n, n))
        s[rows, cols] = w
        return scipy.linalg.expm(s - s.T)

    best = None
    for _ in range(starts):
        res = scipy.optimize.minimize(
            lambda w: np.sum((a - rotation(w)) ** 2), rng.uniform(-3, 3, rows.size), tol=1e-14
        )
        if best is None or res.fun < best.fun:
            best = res
    return rotation(best.x), best.fun


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("negative", [False, True])
def test_project_is_the_nearest_rotation(n, negative):
    """Against a brute-force minimisation, for det A > 0 and det A < 0 (there the last
    singular vector is flipped)."""
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n))
    if (np.linalg.det(a) < 0) != negative:
        a[:, 0] *= -1
    p = SpecialOrthogonal(n).project(a)
    SpecialOrthogonal(n).check_point(p)
    ref, value = _brute_force_nearest(a, rng)
    assert np.sum((a - p) ** 2) <= value + 1e-9
    np.testing.assert_allclose(p, ref, atol=1e-5)


def test_project_where_the_nearest_rotation_is_and_is_not_unique():
    m = SpecialOrthogonal(3)
    # det < 0 with a repeated smallest singular value: diag(2, 1, -1) has the nearest
    # rotations diag(1, R(phi)) for every phi (signed singular values 2, 1, -1: 1 + (-1) = 0)
    with pytest.raises(ProjectionError, match="not unique"):
        m.project(np.diag([2.0, 1.0, -1.0]))
    # rank n - 2
    with pytest.raises(ProjectionError, match=r"rank is at most n - 2"):
        m.project(np.diag([1.0, 0.0, 0.0]))
    # rank n - 1 has a unique nearest rotation (the last column fixed by the orientation)
    np.testing.assert_allclose(m.project(np.diag([3.0, 2.0, 0.0])), np.eye(3), atol=1e-15)
    # det < 0 with distinct singular values: the smallest direction flips
    np.testing.assert_allclose(m.project(np.diag([3.0, 2.0, -1.0])), np.eye(3), atol=1e-15)
    # the batch element is named
    stack = np.stack([np.eye(3), np.diag([2.0, 1.0, -1.0])])
    with pytest.raises(ProjectionError, match=r"batch element \(1,\)"):
        m.project(stack)


@pytest.mark.parametrize("n", [2, 3, 5, 6])
def test_constants_are_attained(n):
    m = SpecialOrthogonal(n)
    x = m.random_point(rng=0)
    # reach sqrt(2): X diag(1, ..., 1, 0, 0) is at distance sqrt(2), with no unique projection;
    # every point closer than sqrt(2) has one (the kit checks the tube; here its edge)
    corner = x @ np.diag([1.0] * (n - 2) + [0.0, 0.0])
    assert np.linalg.norm(corner - x) == pytest.approx(m.reach)
    with pytest.raises(ProjectionError):
        m.project(corner)
    inside = x @ np.diag([1.0] * (n - 2) + [1e-3, 1e-3])
    np.testing.assert_allclose(m.project(inside), x, atol=1e-12)
    # diameter 2 sqrt(2 floor(n/2)): -X for even n, X diag(-1, ..., -1, 1) for odd n
    far = x @ np.diag([-1.0] * (2 * (n // 2)) + [1.0] * (n % 2))
    m.check_point(far)
    assert np.linalg.norm(far - x) == pytest.approx(m.diameter)
    # injectivity radius sqrt(2) pi: a one-plane rotation by pi - 1e-6 is still reached by log
    r, _ = rotation_in_plane(n, math.pi - 1e-6, np.random.default_rng(1))
    assert m.norm(x, m.log(x, x @ r)) == pytest.approx(m.injectivity_radius, rel=1e-6)


def test_check_point_names_the_failed_constraint():
    m = SpecialOrthogonal(3)
    reflection = np.diag([1.0, 1.0, -1.0])
    with pytest.raises(NotOnManifoldError, match=r"det X = 1 is violated by 2\.0"):
        m.check_point(reflection)
    assert m.point_violation(1.01 * np.eye(3))[0] == "X^T X = I"


def test_random_points_are_rotations_and_cover_the_group():
    x = SpecialOrthogonal(3).random_point(2000, rng=0)
    np.testing.assert_allclose(np.linalg.det(x), 1.0, atol=1e-12)
    # Haar measure: E[X] = 0 and the rotation angle has density (1 - cos t)/pi on [0, pi]
    assert np.abs(x.mean(axis=0)).max() < 0.1
    angles = np.arccos(np.clip((np.trace(x, axis1=1, axis2=2) - 1) / 2, -1, 1))
    assert np.mean(angles) == pytest.approx(math.pi / 2 + 2 / math.pi, abs=0.05)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_project_autograd_through_a_negative_determinant(n):
    """The special polar factor's backward pass against finite differences, at a matrix with
    det < 0 (the flipped branch; the kit's points are near the manifold, det > 0)."""
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n))
    if np.linalg.det(a) > 0:
        a[:, 0] *= -1
    d = rng.standard_normal((n, n))
    w = rng.standard_normal((n, n))
    m = SpecialOrthogonal(n)
    t = torch.tensor(a, requires_grad=True)
    (grad,) = torch.autograd.grad((m.project(t) * torch.as_tensor(w)).sum(), t)
    h = 1e-6
    fd = (np.sum(w * m.project(a + h * d)) - np.sum(w * m.project(a - h * d))) / (2 * h)
    assert float((grad * torch.as_tensor(d)).sum()) == pytest.approx(fd, rel=1e-6, abs=1e-9)
    np.testing.assert_allclose(special_polar(torch.as_tensor(a)).numpy(), m.project(a))


@pytest.mark.parametrize("n", [2, 3, 5])
def test_inverse_retraction_matches_stiefels_and_refuses_angles_beyond_half_pi(n):
    """X C^-1 S (one n x n solve) equals the Stiefel manifold's inverse polar retraction (the
    n^2 x n^2 Lyapunov equation); beyond an angle pi/2 no tangent vector retracts to Y."""
    m = SpecialOrthogonal(n)
    rng = np.random.default_rng(n)
    x = m.random_point(3, rng=rng)
    u = m.random_tangent(x, rng=rng)
    y = m.retract(x, u)
    np.testing.assert_allclose(m.inverse_retract(x, y), inverse_polar_retraction(x, y), atol=1e-13)
    r, _ = rotation_in_plane(n, 0.51 * math.pi, rng)
    with pytest.raises(CutLocusError, match="below pi/2"):
        m.inverse_retract(x[0], x[0] @ r)
    r, _ = rotation_in_plane(n, 0.49 * math.pi, rng)
    back = m.inverse_retract(x[0], x[0] @ r)
    np.testing.assert_allclose(m.retract(x[0], back), x[0] @ r, atol=1e-12)

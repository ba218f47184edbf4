"""FixedRank: identities the conformance kit does not cover (Eckart-Young, ties, local reach,
second-order retraction, the inverse retraction's domain, factors), and the kit's projection checks
run inside the per-point radius (the kit skips them: there is no uniform constant)."""

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from riemfl.errors import (
    CutLocusError,
    NotOnManifoldError,
    ParameterError,
    ProjectionError,
    ShapeError,
)
from riemfl.manifolds import FixedRank
from riemfl.manifolds.fixedrank import truncated_svd_derivative
from riemfl.testing import TOLERANCES, checks, torch_available
from riemfl.testing import strategies as rst

SHAPES = [(5, 4, 2), (3, 6, 1), (6, 6, 3), (4, 3, 3), (7, 2, 1)]
shapes = st.sampled_from(SHAPES)
with_normals = st.sampled_from([s for s in SHAPES if s[2] < min(s[:2])])
F64 = TOLERANCES["float64"]


def rng_of(seed):
    return np.random.default_rng(seed)


def frames(x, r):
    u, s, vt = np.linalg.svd(x)
    return u[:, :r], s, vt[:r].T, u[:, r:], vt[r:].T


def random_normal(x, r, rng):
    """A random unit-Frobenius-norm normal vector (I - P_U) G (I - P_V) at x."""
    u, _, v, _, _ = frames(x, r)
    g = rng.standard_normal(x.shape)
    g = g - u @ (u.T @ g)
    g = g - (g @ v) @ v.T
    return g / np.linalg.norm(g)


# --------------------------------------------------------------------------- Eckart-Young
@given(shape=shapes, seed=rst.seeds())
def test_project_is_truncated_svd_and_the_nearest_rank_r_matrix(shape, seed):
    m, n, r = shape
    manifold, rng = FixedRank(m, n, r), rng_of(seed)
    a = rng.standard_normal((m, n))
    p = manifold.project(a)
    u, s, vt = np.linalg.svd(a)
    np.testing.assert_allclose(p, (u[:, :r] * s[:r]) @ vt[:r], atol=1e-12)
    manifold.check_point(p)
    best = np.linalg.norm(a - p)
    assert best == pytest.approx(math.sqrt(np.sum(s[r:] ** 2)), abs=1e-12)
    competitors = [manifold.random_point(rng=rng) * rng.uniform(0.1, 3) for _ in range(20)]
    competitors += [
        manifold.retract(p, rst.scaled_tangent(manifold, p, rng.uniform(1e-3, 0.3), rng))
        for _ in range(20)
    ]
    assert min(np.linalg.norm(a - y) for y in competitors) >= best * (1 - 1e-12)


def test_project_raises_at_a_tie_and_names_the_singular_values():
    rng = rng_of(0)
    u = np.linalg.qr(rng.standard_normal((5, 4)))[0]
    v = np.linalg.qr(rng.standard_normal((4, 4)))[0]
    tie = (u * [3.0, 1.0, 1.0, 0.5]) @ v.T
    manifold = FixedRank(5, 4, 2)
    with pytest.raises(ProjectionError, match=r"not unique: sigma_2 = 1\.0+\de\+00 and sigma_3"):
        manifold.project(tie)
    manifold.project((u * [3.0, 1.0 + 1e-6, 1.0, 0.5]) @ v.T)  # a resolvable gap: no error
    assert FixedRank(5, 4, 1).project(tie) == pytest.approx(3.0 * np.outer(u[:, 0], v[:, 0]))
    batch = np.stack([manifold.random_point(rng=1), tie])
    with pytest.raises(ProjectionError, match=r"batch element \(1,\)"):
        manifold.project(batch)


def test_project_raises_below_rank_r():
    manifold = FixedRank(4, 4, 2)
    rank_one = np.outer(np.arange(1.0, 5.0), np.ones(4))
    with pytest.raises(ProjectionError, match="numerical rank below 2.*Expected rank >= 2"):
        manifold.project(rank_one)
    with pytest.raises(ProjectionError, match="numerical rank below 2"):
        manifold.project(np.zeros((4, 4)))
    x = manifold.random_point(rng=0)
    with pytest.raises(ProjectionError, match="retraction"):
        manifold.retract(x, -x)  # X + xi = 0
    with pytest.raises(NotOnManifoldError, match="NaN"):
        manifold.project(np.full((4, 4), np.nan))


def test_project_relative_tolerance_is_a_parameter():
    a = np.diag([2.0, 1.0, 1.0 - 1e-9])
    FixedRank(3, 3, 2).project(a)
    with pytest.raises(ProjectionError, match="1.0e-06"):
        FixedRank(3, 3, 2, rtol=1e-6).project(a)


# --------------------------------------------------------------------------- tangent spaces
@pytest.mark.parametrize("shape", SHAPES)
def test_tangent_projector_is_orthogonal_with_rank_m_plus_n_minus_r_times_r(shape):
    m, n, r = shape
    manifold = FixedRank(m, n, r)
    x = manifold.random_point(rng=3)
    basis = np.eye(m * n).reshape(m * n, m, n)
    proj = np.stack([np.ravel(manifold.to_tangent(x, e)) for e in basis], axis=1)
    np.testing.assert_allclose(proj, proj.T, atol=1e-12)
    np.testing.assert_allclose(proj @ proj, proj, atol=1e-12)
    assert np.linalg.matrix_rank(proj) == (m + n - r) * r == manifold.dim
    assert np.trace(proj) == pytest.approx(manifold.dim)
    # the same projector as P_U A P_V + (I - P_U) A P_V + P_U A (I - P_V)
    u, _, v, _, _ = frames(x, r)
    pu, pv = u @ u.T, v @ v.T
    a = rng_of(4).standard_normal((m, n))
    expected = pu @ a @ pv + (np.eye(m) - pu) @ a @ pv + pu @ a @ (np.eye(n) - pv)
    np.testing.assert_allclose(manifold.to_tangent(x, a), expected, atol=1e-12)


def test_check_point_names_the_failed_rank_constraint():
    manifold = FixedRank(4, 3, 2)
    x = manifold.random_point(rng=0)
    with pytest.raises(NotOnManifoldError, match=r"rank X <= 2 .*violated by"):
        manifold.check_point(x + 1e-3 * random_normal(x, 2, rng_of(1)))
    low = np.outer(np.ones(4), np.ones(3))
    with pytest.raises(NotOnManifoldError, match=r"rank X >= 2 .*sigma_2/sigma_1 = .*<= atol"):
        manifold.check_point(low)
    with pytest.raises(NotOnManifoldError, match="rank X >= 2"):
        manifold.check_point(np.zeros((4, 3)))
    manifold.check_point(1e-30 * x)  # a cone: only ratios of singular values count


def test_constructor_and_factor_shapes_are_checked():
    for bad in ((3, 2, 3), (3, 3, 0), (3.0, 2, 1)):
        with pytest.raises(ParameterError, match=r"FixedRank\(m, n, r\): .* must be an integer"):
            FixedRank(*bad)
    with pytest.raises(ParameterError, match="rtol"):
        FixedRank(3, 3, 1, rtol=2.0)
    manifold = FixedRank(4, 3, 2)
    with pytest.raises(ShapeError, match=r"factor B .*expected \(\.\.\., 3, 2\)"):
        manifold.from_factors(np.ones((4, 2)), np.ones((2, 3)))


# --------------------------------------------------------------------------- retraction
@given(shape=shapes, seed=rst.seeds())
def test_retraction_is_second_order_with_the_second_fundamental_form(shape, seed):
    m, n, r = shape
    manifold, rng = FixedRank(m, n, r), rng_of(seed)
    x = manifold.random_point(rng=rng)
    xi = rst.scaled_tangent(manifold, x, 1.0, rng)
    ts = np.logspace(-3.5, -1.5, 9)
    errors = [manifold.retract(x, t * xi) - x - t * xi for t in ts]
    tangential = np.array([np.linalg.norm(manifold.to_tangent(x, e)) for e in errors])
    slope = checks.taylor_slope(ts, tangential, 1e-13)
    assert slope is None or slope > 2.75, slope
    # normal part / t^2 -> II(xi, xi)/2 = (I - P_U) xi X^+ xi (I - P_V)
    u, s, v, _, _ = frames(x, r)
    second = xi @ np.linalg.pinv(x) @ xi
    second = second - u @ (u.T @ second)
    second = second - (second @ v) @ v.T
    t = 1e-3
    normal = manifold.retract(x, t * xi) - x - t * xi
    normal = normal - manifold.to_tangent(x, normal)
    np.testing.assert_allclose(normal / t**2, second, atol=5e-3 * max(1.0, np.abs(second).max()))


@given(shape=shapes, seed=rst.seeds(), norm=st.floats(0.01, 0.9))
def test_inverse_retraction_inverts_the_truncated_svd(shape, seed, norm):
    m, n, r = shape
    manifold, rng = FixedRank(m, n, r), rng_of(seed)
    x = manifold.random_point(rng=rng)
    xi = rst.scaled_tangent(manifold, x, norm, rng)
    y = manifold.retract(x, xi)
    back = manifold.inverse_retract(x, y)
    manifold.check_tangent(x, back)
    np.testing.assert_allclose(back, xi, atol=1e-10)


def test_inverse_retraction_domain_is_sharp():
    """X = e1 e1^T, Y = eps v v^T at angle phi: the normal residual is eps tan(phi)^2."""
    manifold = FixedRank(2, 2, 1)
    x = np.diag([1.0, 0.0])
    for phi, inside in ((math.pi / 6, True), (math.pi / 3, False)):
        v = np.array([math.cos(phi), math.sin(phi)])
        y = 0.1 * np.outer(v, v)
        if inside:
            np.testing.assert_allclose(
                manifold.retract(x, manifold.inverse_retract(x, y)), y, atol=1e-14
            )
        else:
            with pytest.raises(CutLocusError, match="normal residual of spectral norm 3.000e-01"):
                manifold.inverse_retract(x, y)
    with pytest.raises(CutLocusError, match="principal angle of pi/2"):
        manifold.inverse_retract(x, np.diag([0.0, 1.0]))


# --------------------------------------------------------------------------- local reach
@given(shape=with_normals, seed=rst.seeds(), fraction=st.floats(0.0, 0.99))
def test_normal_offsets_below_sigma_r_project_back(shape, seed, fraction):
    m, n, r = shape
    manifold, rng = FixedRank(m, n, r), rng_of(seed)
    x = manifold.random_point(rng=rng)
    sigma_r = np.linalg.svd(x, compute_uv=False)[r - 1]
    a = x + fraction * sigma_r * random_normal(x, r, rng)
    np.testing.assert_allclose(manifold.project(a), x, atol=1e-11)


def test_normal_reach_and_ball_radius_are_sharp():
    manifold = FixedRank(4, 3, 2)
    x = manifold.random_point(rng=5)
    u, s, v, uperp, vperp = frames(x, 2)
    sigma = s[1]
    assert manifold.local_reach(x) == pytest.approx(sigma / math.sqrt(2))
    normal = np.outer(uperp[:, 0], vperp[:, 0])  # rank one, unit spectral and Frobenius norm
    np.testing.assert_allclose(manifold.project(x + 0.999 * sigma * normal), x, atol=1e-12)
    jumped = manifold.project(x + 1.001 * sigma * normal)
    assert np.linalg.norm(jumped - x) > 0.5 * sigma  # the other branch: P is not X any more
    with pytest.raises(ProjectionError, match="not unique"):
        manifold.project(x + sigma * normal)
    # the medial-axis point nearest to X, at distance sigma_r / sqrt(2)
    shift = 0.5 * sigma * (np.outer(uperp[:, 0], vperp[:, 0]) - np.outer(u[:, 1], v[:, 1]))
    assert np.linalg.norm(shift) == pytest.approx(sigma / math.sqrt(2))
    with pytest.raises(ProjectionError, match="not unique"):
        manifold.project(x + shift)
    manifold.project(x + 0.999 * shift)
    full = FixedRank(4, 3, 3)
    y = full.random_point(rng=6)
    assert full.local_reach(y) == pytest.approx(np.linalg.svd(y)[1][-1])


@given(shape=shapes, seed=rst.seeds(), fraction=st.floats(0.0, 0.99))
def test_ball_of_local_radius_has_unique_nearest_points(shape, seed, fraction):
    m, n, r = shape
    manifold, rng = FixedRank(m, n, r), rng_of(seed)
    x = manifold.random_point(rng=rng)
    rho = float(manifold.local_reach(x))
    w = rng.standard_normal((m, n))
    a = x + fraction * rho * w / np.linalg.norm(w)
    s = np.linalg.svd(a, compute_uv=False)
    if r < min(m, n):  # Mirsky: inside the ball sigma_r(A) - sigma_{r+1}(A) > 0
        assert s[r - 1] - s[r] >= math.sqrt(2) * rho * (1 - fraction) - 1e-12
    p = manifold.project(a)
    for _ in range(16):
        y = manifold.retract(p, rst.scaled_tangent(manifold, p, rng.uniform(0, 0.5) * rho, rng))
        assert np.linalg.norm(a - y) >= np.linalg.norm(a - p) * (1 - 1e-12)
    # the kit's checks, inside the per-point radius
    b = a + 0.2 * rho * rst.unit_ambient(manifold, (), rng)
    if fraction < 0.25:
        checks.check_projection_lipschitz(manifold, a, b)
    checks.check_projection(manifold, a, x, F64)


# --------------------------------------------------------------------------- derivative of P_r
@given(shape=shapes, seed=rst.seeds())
def test_truncated_svd_derivative_matches_finite_differences_and_is_self_adjoint(shape, seed):
    m, n, r = shape
    manifold, rng = FixedRank(m, n, r), rng_of(seed)
    a, d, e = (rng.standard_normal((m, n)) for _ in range(3))
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    exact = truncated_svd_derivative(u, s, vt, r, d)
    h = 1e-6
    fd = (manifold.project(a + h * d) - manifold.project(a - h * d)) / (2 * h)
    gap = s[r - 1] - (s[r] if r < len(s) else 0.0)
    np.testing.assert_allclose(exact, fd, atol=1e-6 * max(1.0, 1.0 / gap))
    lhs = np.sum(truncated_svd_derivative(u, s, vt, r, e) * d)
    assert lhs == pytest.approx(np.sum(exact * e), abs=1e-10)
    x = manifold.random_point(rng=rng)  # at a point of M_r it is the tangent projection
    u, s, vt = np.linalg.svd(x, full_matrices=False)
    np.testing.assert_allclose(
        truncated_svd_derivative(u, s, vt, r, d), manifold.to_tangent(x, d), atol=1e-12
    )


# --------------------------------------------------------------------------- factors (FLoRAL)
@given(shape=shapes, seed=rst.seeds())
def test_factor_round_trip_is_balanced_and_not_gauge_invariant(shape, seed):
    m, n, r = shape
    manifold, rng = FixedRank(m, n, r), rng_of(seed)
    x = manifold.random_point(2, rng=rng)
    a, b = manifold.to_factors(x)
    assert a.shape == (2, m, r) and b.shape == (2, n, r)
    np.testing.assert_allclose(manifold.from_factors(a, b), x, atol=1e-12)
    s = np.linalg.svd(x, compute_uv=False)[:, :r]
    gram = np.swapaxes(a, -1, -2) @ a
    np.testing.assert_allclose(gram, np.swapaxes(b, -1, -2) @ b, atol=1e-12)
    np.testing.assert_allclose(gram, np.stack([np.diag(v) for v in s]), atol=1e-12)
    g = 2.0 * np.linalg.qr(rng.standard_normal((r, r)))[0]  # another gauge of the same points
    a2, b2 = a @ g, b @ np.linalg.inv(g).T  # (mixing them gives A (2I + G^T/8 + G/2) B^T / 4)
    np.testing.assert_allclose(manifold.from_factors(a2, b2), x, atol=1e-11)
    # FLoRAL's adaptors: averaging factors is not averaging points, averaging products is
    mixed = manifold.from_factors(0.5 * (a + a2), 0.5 * (b + b2))
    assert np.linalg.norm(mixed - x) > 1e-3 * np.linalg.norm(x)
    products = 0.5 * (manifold.from_factors(a, b) + manifold.from_factors(a2, b2))
    np.testing.assert_allclose(manifold.project(products), x, atol=1e-11)


@pytest.mark.skipif(not torch_available(), reason="torch is not installed")
def test_to_factors_torch_matches_numpy_and_differentiates():
    import torch

    manifold = FixedRank(5, 4, 2)
    x = manifold.random_point(rng=0)
    a, b = manifold.to_factors(x)
    xt = torch.tensor(x, requires_grad=True)
    at, bt = manifold.to_factors(xt)
    np.testing.assert_allclose(at.detach().numpy(), a, atol=1e-12)
    np.testing.assert_allclose(bt.detach().numpy(), b, atol=1e-12)
    rng = rng_of(1)
    wa, wb = rng.standard_normal(a.shape), rng.standard_normal(b.shape)
    loss = (torch.as_tensor(wa) * at).sum() + (torch.as_tensor(wb) * bt).sum()
    (grad,) = torch.autograd.grad(loss, xt)
    d = manifold.random_tangent(x, rng=2)
    h = 1e-6

    def value(sign):
        fa, fb = manifold.to_factors(manifold.retract(x, sign * h * d))
        return float(np.sum(wa * fa) + np.sum(wb * fb))

    fd = (value(1.0) - value(-1.0)) / (2 * h)
    assert float((grad * torch.as_tensor(d)).sum()) == pytest.approx(fd, rel=1e-5, abs=1e-8)


# --------------------------------------------------------------------------- docs
DOC = Path(__file__).resolve().parents[2] / "docs" / "manifolds.md"
DOC_BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text("utf-8"), re.S)


@pytest.mark.parametrize("block", DOC_BLOCKS, ids=[f"block{i}" for i in range(len(DOC_BLOCKS))])
def test_manifolds_doc_blocks_run(block):
    """Every code block of docs/manifolds.md runs (tests/test_docs.py does not run that page);
    the FixedRank and Simplex blocks assert their results."""
    exec(block, {})  # noqa: S102 - our own documentation


def test_manifolds_doc_has_both_examples():
    assert all(any(name in b for b in DOC_BLOCKS) for name in ("FixedRank(", "Simplex("))

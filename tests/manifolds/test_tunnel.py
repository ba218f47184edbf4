"""EpsilonTunnel: the kit (with its capability flags) plus membership, projection, sampling."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from riemfl import NotOnManifoldError, ParameterError
from riemfl.manifolds.bezier import BezierCurve
from riemfl.manifolds.tunnel import EpsilonTunnel
from riemfl.testing import ManifoldTests, checks
from riemfl.testing import strategies as rst

CURVE = BezierCurve(np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 0.2], [2.0, 0.0, 0.4]]))
TUNNEL = EpsilonTunnel(CURVE, 0.2)


class TestTunnel(ManifoldTests):
    manifold = TUNNEL

    def inside(self, data):
        """A point and a tangent vector whose steps in the Taylor checks (at most
        ``10**-1.5 |u|`` either way, the kit's longest Taylor step) stay inside the tunnel: the
        tunnel is flat there, and its retraction (the projection) clips at the boundary, which
        no Taylor expansion crosses (the kit's own draws reach 0.195 from the curve in a tube
        of radius 0.2, where its longest step crossed the wall: slope 1.73)."""
        x, (u,) = self.draw_frame(data, 1)
        x, u = x[0], u[0]
        room = TUNNEL.eps - float(TUNNEL.distance_to_curve(x))
        longest = 10**-1.5 * max(float(np.linalg.norm(u)), 1e-300)
        return x, u * min(1.0, 0.5 * room / longest)

    @given(data=st.data())
    def test_retraction_first_order(self, data):
        x, u = self.inside(data)
        checks.check_retraction_first_order(TUNNEL, x, u)

    @given(data=st.data())
    def test_exp_second_order(self, data):
        self.require("exp")
        x, u = self.inside(data)
        checks.check_exp_second_order(TUNNEL, x, u)

    @given(data=st.data())
    def test_ehess_to_rhess_second_order(self, data):
        x, u = self.inside(data)
        fn = self.hessian_function(np.random.default_rng(data.draw(rst.seeds())))
        checks.check_ehess_to_rhess_taylor(TUNNEL, x, u, fn)

    @given(data=st.data())
    def test_ehess_to_rhess_finite_differences(self, data):
        x, u = self.inside(data)
        fn = self.hessian_function(np.random.default_rng(data.draw(rst.seeds())))
        checks.check_ehess_to_rhess_gradient(TUNNEL, x, u, fn)


def test_taylor_checks_near_the_wall_use_steps_inside_the_tunnel():
    # the thorough profile's example: x 0.195 from the curve, the kit's longest step along u
    # crosses the wall (radius 0.2), where the projection clips and the remainder is not a
    # Taylor series; scaled as TestTunnel.inside does, the steps stay inside and the check holds
    x = np.array([1.50891243, 0.21243489, 0.17632987])
    u = np.array([0.33297521, -0.53322192, -0.65185965])
    room = TUNNEL.eps - float(TUNNEL.distance_to_curve(x))
    with pytest.raises(AssertionError, match="Taylor slope"):
        checks.check_retraction_first_order(TUNNEL, x, u)
    checks.check_retraction_first_order(TUNNEL, x, u * 0.5 * room / (10**-1.5 * np.linalg.norm(u)))


def brute_force_projection(tunnel, a):
    grid = np.linspace(0, 1, 200001)
    pts = np.asarray(tunnel.curve(grid))
    d = np.linalg.norm(pts - a, axis=1)
    i = int(np.argmin(d))
    if d[i] <= tunnel.eps:
        return a, d[i]
    return pts[i] + tunnel.eps * (a - pts[i]) / d[i], d[i]


@given(seed=rst.seeds(), scale=st.floats(0.01, 3.0))
def test_projection_is_the_nearest_tunnel_point(seed, scale):
    rng = np.random.default_rng(seed)
    a = np.asarray(CURVE(rng.uniform(-0.3, 1.3))) + scale * rng.standard_normal(3)
    p = TUNNEL.project(a)
    ref, dist = brute_force_projection(TUNNEL, a)
    assert np.linalg.norm(a - p) <= np.linalg.norm(a - ref) + 1e-12  # never farther than the grid
    np.testing.assert_allclose(p, ref, atol=2e-5)  # the grid's resolution
    assert bool(TUNNEL.contains(p, atol=1e-12))
    assert bool(TUNNEL.contains(a)) == (dist <= TUNNEL.eps + 1e-9)


def test_sampling_stays_inside_and_normal_sampling_is_normal():
    t, pts = TUNNEL.sample(500, rng=0)
    assert np.all(TUNNEL.contains(pts, atol=1e-12))
    assert pts.shape == (500, 3) and np.all((0 <= t) & (t <= 1))
    t, pts = TUNNEL.sample(200, rng=1, normal_only=True, uniform="parameter")
    offsets = pts - np.asarray(CURVE(t))
    velocity = np.asarray(CURVE.velocity(t))
    np.testing.assert_allclose(np.sum(offsets * velocity, axis=1), 0.0, atol=1e-12)
    assert np.all(np.linalg.norm(offsets, axis=1) <= TUNNEL.eps + 1e-12)


def test_adversarial_point_is_on_the_boundary_along_the_gradient():
    g = np.array([0.0, 3.0, 4.0])
    p = TUNNEL.adversarial(0.4, g)
    np.testing.assert_allclose(p - np.asarray(CURVE(0.4)), 0.2 * g / 5.0, atol=1e-15)
    np.testing.assert_allclose(TUNNEL.adversarial(0.4, np.zeros(3)), CURVE(0.4))


def test_constants():
    straight = EpsilonTunnel(BezierCurve(np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]])), 0.5)
    assert straight.diameter == pytest.approx(2.0 + 2 * 0.5, rel=1e-5)
    assert straight.reach == np.inf
    from riemfl.manifolds.bezier_graph import BezierGraph

    reach = BezierGraph(CURVE).reach
    assert TUNNEL.reach == pytest.approx(reach - 0.2)
    with pytest.raises(ParameterError, match="below the curve's reach"):
        EpsilonTunnel(CURVE, reach * 1.01)
    with pytest.raises(ParameterError):
        EpsilonTunnel(CURVE, -1.0)
    with pytest.raises(NotImplementedError, match="no exp/log"):
        TUNNEL.exp(np.zeros(3), np.zeros(3))


def test_check_point_rejects_points_outside():
    far = np.asarray(CURVE(0.5)) + np.array([0.0, 0.0, 1.0])
    with pytest.raises(NotOnManifoldError, match="dist"):
        TUNNEL.check_point(far)

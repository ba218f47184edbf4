"""The fixed-iteration closest parameter and inverse arc length (riemfl.manifolds.bezier_fixed):
the same minimiser and inverse as the host solves, no read, errors at the boundary."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from riemfl import ConvergenceError, ParameterError, checks
from riemfl.manifolds import bezier_fixed
from riemfl.manifolds.bezier import BezierCurve
from riemfl.manifolds.bezier_closest import closest_point
from riemfl.manifolds.bezier_eval import power_basis_matrix
from riemfl.manifolds.bezier_fixed import FixedCurve
from riemfl.manifolds.bezier_graph import BezierGraph
from riemfl.manifolds.tunnel import EpsilonTunnel
from riemfl.testing import importorskip
from riemfl.testing import strategies as rst
from riemfl.testing.host_reads import HostReadCounter

torch = importorskip("torch")


def random_fixed(seed, degree, scale=1.0):
    rng = np.random.default_rng(seed)
    return FixedCurve(BezierCurve(rng.standard_normal((degree + 1, 3)) * scale), "curve")


def squared_distances(curve, t, a):
    return np.sum((np.asarray(curve(t)) - a) ** 2, axis=-1)


@given(
    seed=rst.seeds(),
    degree=st.integers(1, 5),
    extended=st.booleans(),
    log_scale=st.floats(-1.0, 2.0),
)
def test_the_fixed_closest_parameter_is_as_close_as_the_host_solve(
    seed, degree, extended, log_scale
):
    # both are global minimisers of f(t) = |c(t) - a|^2 over the domain: f agrees at the two
    # to the rounding of f, a few ulps of its terms (|a|^2 + max |c|^2)
    fixed = random_fixed(seed, degree)
    a = np.random.default_rng(seed + 1).standard_normal((6, 3)) * 10**log_scale
    with checks("deferred"):
        t_fixed = fixed.fixed_closest(torch.as_tensor(a), extended).numpy()
    t_host, _ = closest_point(fixed.curve, a, extended)
    f_fixed = squared_distances(fixed.curve, t_fixed, a)
    f_host = squared_distances(fixed.curve, t_host, a)
    reach = np.max(np.abs(np.asarray(fixed.curve(np.concatenate([t_fixed, t_host])))))
    terms = 1.0 + np.sum(a * a, axis=-1) + 3 * reach**2
    np.testing.assert_array_less(np.abs(f_fixed - f_host), 1e-11 * terms)
    if not extended:
        assert np.all((t_fixed >= 0) & (t_fixed <= 1))


@given(seed=rst.seeds(), degree=st.integers(1, 4), shift=st.floats(-5.0, 5.0))
def test_the_fixed_inverse_arc_length_inverts_the_arc_length(seed, degree, shift):
    fixed = random_fixed(seed, degree)
    t = torch.as_tensor(np.random.default_rng(seed).uniform(-1.0, 2.0, 4))
    shifts = torch.full((4,), shift, dtype=torch.float64)
    with checks("deferred"):
        solved = fixed.fixed_parameter_at_arc_length(t, shifts)
    target = fixed.arc_length_at(t) + shifts
    residual = (fixed.arc_length_at(solved) - target).abs()
    assert torch.all(residual <= 1e-12 * (1 + target.abs() + fixed.length))
    host = fixed.curve.parameter_at_arc_length(target.numpy())
    # the two parameters differ by the residuals over the speed, at least the least speed
    bound = 2e-12 * (1 + target.abs() + fixed.length).numpy() / fixed.least_speed
    np.testing.assert_array_less(np.abs(solved.numpy() - host), bound + 1e-15)


@given(seed=rst.seeds(), degree=st.integers(1, 5))
def test_speed_and_arc_length_equal_the_curves_own(seed, degree):
    fixed = random_fixed(seed, degree)
    t = np.random.default_rng(seed).uniform(-1.5, 2.5, 7)
    speed = np.asarray(fixed.curve.speed(t))
    np.testing.assert_allclose(fixed.speed(t), speed, rtol=1e-12, atol=1e-13 * speed.max())
    length = np.asarray(fixed.curve.arc_length_at(t))
    np.testing.assert_allclose(
        fixed.arc_length_at(t), length, rtol=1e-11, atol=1e-12 * np.abs(length).max()
    )


@given(seed=rst.seeds(), degree=st.integers(1, 5))
def test_the_least_speed_is_the_minimum_over_the_real_line(seed, degree):
    fixed = random_fixed(seed, degree)
    # the squared speed is a polynomial of degree 2(q - 1) > 0 leading: its minimiser lies
    # where the dense grid is, up to the grid's spacing
    grid = np.linspace(-50.0, 50.0, 400001)
    speeds = fixed.speed(grid)
    assert fixed.least_speed <= speeds.min() * (1 + 1e-12)
    assert fixed.least_speed >= speeds.min() - 1e-3 * (1 + speeds.min())


@given(
    roots=st.lists(st.floats(-100.0, 100.0), min_size=3, max_size=3),
    pair=st.tuples(st.floats(-100.0, 100.0), st.floats(0.01, 100.0)),
    three_real=st.booleans(),
)
def test_the_closed_form_cubic_finds_every_real_root(roots, pair, three_real):
    # monic cubics with three real roots, or one beside a complex pair: each simple real root
    # is among the candidates to its condition, 1e-12 sum_k |p_k| |r|^k / |p'(r)| (first-order
    # perturbation, with room for the closed form's rounding); a double root of f' (where f'
    # keeps its sign: no minimum of f) may be missed, so such roots are skipped
    zeros = (sorted(roots) if three_real else [roots[0]]) + (
        [] if three_real else [complex(*pair), complex(pair[0], -pair[1])]
    )
    polynomial = np.real(np.poly(zeros))  # highest first, monic
    coefficients = torch.as_tensor(polynomial[::-1].copy())[None]
    got = bezier_fixed._cubic_real_roots(coefficients)[0].numpy()
    scale = 1 + max(abs(z) for z in zeros)
    for i, root in enumerate(zeros[: 3 if three_real else 1]):
        slope = abs(np.polyval(np.polyder(polynomial), root))
        size = np.polyval(np.abs(polynomial), abs(root))
        bound = 1e-12 * size / max(slope, 1e-300) + 1e-14 * scale
        gap = min(abs(root - z) for z in zeros[:i] + zeros[i + 1 :])
        if bound > 1e-3 * scale or gap < 1e-6 * scale:  # ill-conditioned, or a double root
            continue
        assert np.min(np.abs(got - root)) <= bound
        if not three_real:  # the complex pair's slots repeat the real root
            np.testing.assert_allclose(got, root, rtol=0, atol=bound)


def test_a_curve_whose_velocity_vanishes_outside_the_unit_interval_is_no_immersion():
    # c(t) = ((t - 5)^2, (t - 5)^3): a cusp at t = 5, regular on [-1, 2] (the old grid's
    # range); the graph is of the extended curve, so it is refused
    power = np.array([[25.0, -125.0], [-10.0, 75.0], [1.0, -15.0], [0.0, 1.0]])
    control_points = np.linalg.solve(power_basis_matrix(3), power)
    with pytest.raises(ParameterError, match="not an immersion"):
        BezierGraph(BezierCurve(control_points))


def cubic_graph():
    return BezierGraph(BezierCurve(np.array([[0.0, 0.0], [1.0, 1.0], [2.0, -1.0], [3.0, 0.0]])))


def test_the_fixed_forms_read_nothing_and_match_eager_mode():
    graph = cubic_graph()
    x = torch.as_tensor(graph.random_point(5, rng=0))
    y = torch.as_tensor(graph.random_point(5, rng=1))
    u = graph.to_tangent(x, torch.as_tensor(np.random.default_rng(2).standard_normal((5, 2))))
    with checks("eager"):
        expected = graph.exp(x, u), graph.log(x, y), graph.project(y + 0.1)
    with checks("deferred"), HostReadCounter() as reads:
        got = graph.exp(x, u), graph.log(x, y), graph.project(y + 0.1)
    assert reads.total == 0
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=0, atol=1e-12)


def test_an_unconverged_closest_parameter_raises_at_the_boundary(monkeypatch):
    graph = cubic_graph()
    monkeypatch.setattr(bezier_fixed, "aberth_iterations", lambda m: 1)
    x = torch.as_tensor(graph.random_point(3, rng=0)) + 0.3
    with checks("off"):
        graph.project(x)  # no checks: the last iterate
    with pytest.raises(ConvergenceError, match="closest parameter did not converge.*1 Aberth"):
        with checks("deferred"):
            graph.project(x)


def test_an_unconverged_inverse_arc_length_raises_at_the_boundary(monkeypatch):
    graph = cubic_graph()
    monkeypatch.setattr(bezier_fixed, "arc_length_steps", lambda degree: 0)
    x = torch.as_tensor(graph.random_point(3, rng=0))
    u = graph.to_tangent(x, torch.ones(3, 2, dtype=torch.float64))
    with pytest.raises(ConvergenceError, match="inverse arc length did not converge.*0 safeg"):
        with checks("deferred"):
            graph.exp(x, u)


def test_the_tunnel_projects_in_fixed_iterations_onto_the_segment():
    tunnel = EpsilonTunnel(cubic_graph().curve, 0.05)
    a = torch.as_tensor(np.random.default_rng(3).standard_normal((8, 2)) * 2)
    with checks("eager"):
        expected = tunnel.project(a)
    with checks("deferred"), HostReadCounter() as reads:
        got = tunnel.project(a)
    assert reads.total == 0
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_an_end_point_is_not_polished_into_a_tie_with_the_minimiser():
    # a quadratic in R^1000 and queries 3 away: Newton steps from the end point t = 1 stop
    # 5e-9 short of the minimiser, and f (about 11, rounded to 2e-13) ranked that unstationary
    # point first (1.5e-8 off eager mode's projection): end points now stay as they are
    rng = np.random.default_rng(3000)
    control_points = np.concatenate(
        [np.zeros((1, 1000)), np.cumsum(rng.standard_normal((2, 1000)), 0)]
    )
    graph = BezierGraph(BezierCurve(control_points))
    tunnel = EpsilonTunnel(graph.curve, 0.5 * min(graph.reach, 1.0))
    rng = np.random.default_rng(64)
    x = tunnel.random_point(64, rng=rng)
    a = torch.as_tensor(x + 0.1 * rng.standard_normal(x.shape))
    with checks("eager"):
        expected = tunnel.project(a)
    with checks("deferred"):
        got = tunnel.project(a)
    # both the exact projection: they differ by rounding, a few ulps of the points' size
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-13 * float(expected.abs().max()))


@pytest.mark.slow
def test_a_cubic_graph_compiles_whole_with_eager_values_and_gradients():
    # the catalogue's example is a quadratic (closed-form arc length); a cubic integrates the
    # speed by Gauss-Legendre quadrature inside the graph
    from riemfl.testing.levels import check_compiles_whole
    from riemfl.testing.suite import method_arguments

    graph = cubic_graph()
    for method in ("exp", "log", "project"):
        args, _ = method_arguments(graph, method)
        check_compiles_whole(graph, method, args, levels=("deferred",), backend="eager")


def test_the_constants_reach_a_device_once(monkeypatch):
    # a copy from host memory to a CUDA device synchronises its stream: the curve and the
    # constants are converted at the first call on a device and dtype, and kept
    graph = cubic_graph()
    x = torch.as_tensor(graph.random_point(4, rng=0))
    u = graph.to_tangent(x, torch.ones(4, 2, dtype=torch.float64))
    with checks("deferred"):
        expected = graph.exp(x, u), graph.project(x + 0.1)

    def converted(*args, **kwargs):
        raise AssertionError("a constant was converted again")

    monkeypatch.setattr(bezier_fixed, "to_like", converted)
    monkeypatch.setattr(BezierCurve, "like", converted)
    with checks("deferred"):
        got = graph.exp(x, u), graph.project(x + 0.1)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=0, atol=0)

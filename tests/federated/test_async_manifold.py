"""AsyncManifold / AsyncBezier: each formula on small vectors, the Euclidean special cases, the
fast path against the generic one, a custom embedding on the sphere, and end-to-end runs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _problems import LeastSquares
from hypothesis import given, settings
from hypothesis import strategies as st

import riemfl
from riemfl.errors import ClientFailureError, ParameterError, ShapeError
from riemfl.federated import (
    Arrival,
    AsyncBezier,
    AsyncBezierED,
    AsyncManifold,
    BezierEmbedding,
    BezierProblemTrainer,
    ClientDroppedWarning,
    Embedding,
    FedAsync,
    OrthoDCCorrection,
    ProblemTrainer,
    RunOptions,
    run_async,
    staleness_penalty,
)
from riemfl.federated.async_manifold import chordal_root
from riemfl.federated.async_manifold.embedding import _first_crossing
from riemfl.federated.timing import ExponentialTime
from riemfl.manifolds.bezier import BezierCurve
from riemfl.testing import importorskip


def _arrival(local, base, current, weight=0.5, client=0, version=3):
    return Arrival(client, base, local, current, 1, weight, version)


# --------------------------------------------------------------------- staleness penalty
def test_staleness_penalty_by_hand():
    assert staleness_penalty(0.0, 5.0, 1.0) == 1.0
    # eq. (10) itself where gamma = drift / local >= eps: alpha = 1 gives 1 / gamma
    for local, drift, expected in ((5.0, 1.0, 5.0), (2.0, 1.0, 2.0), (1.0, 1.0, 1.0)):
        assert staleness_penalty(1.0, local, drift) == pytest.approx(expected, rel=1e-15)
    assert staleness_penalty(0.5, 2.0, 1.0) == pytest.approx(1 + 0.5 * (2 - 1), rel=1e-15)
    assert staleness_penalty(1.0, 2.0, 0.0, eps=0.1) == pytest.approx(10.0)  # no drift: finite
    assert staleness_penalty(1.0, 100.0, 1.0, eps=0.1) == pytest.approx(10.0)  # gamma < eps
    assert staleness_penalty(0.25, 0.0, 3.0) == 0.75  # a zero update: 1 - alpha
    with pytest.raises(ParameterError):
        staleness_penalty(1.5, 1.0, 1.0)


# --------------------------------------------------------------------- OrthoDC on control points
def test_orthodc_per_point_and_stacked_by_hand():
    P = riemfl.ControlPoints(riemfl.Euclidean(2), 3)
    phi = np.zeros((3, 2))
    d = np.array([1.0, 0.0])
    drift = np.stack([d, d, d])
    v = np.array([[0.0, 0.0], [-1.0, 1.0], [1.0, 1.0]])
    per0 = OrthoDCCorrection(0.0, "per_point")(P, phi, v, drift)
    np.testing.assert_allclose(per0, [[0, 0], [0, 1], [1, 1]])  # only B conflicts (cos < 0)
    per1 = OrthoDCCorrection(1.0, "per_point")(P, phi, v, drift)
    np.testing.assert_allclose(per1, [[0, 0], [0, 1], [0, 1]])  # everything loses its d part
    # stacked: <v, drift> = -1 + 1 = 0 -> cos 0 <= 0: projected by 0 (unchanged) for vartheta 0
    np.testing.assert_allclose(OrthoDCCorrection(0.0, "stacked")(P, phi, v, drift), v)
    v2 = v + np.array([[0.0, 0.0], [1.5, 0.0], [0.0, 0.0]])  # <v2, drift> = 1.5 > 0: no
    # conflict at vartheta 0 ...
    np.testing.assert_allclose(OrthoDCCorrection(0.0, "stacked")(P, phi, v2, drift), v2)
    st1 = OrthoDCCorrection(1.0, "stacked")(P, phi, v2, drift)  # ... but at vartheta 1
    np.testing.assert_allclose(st1, v2 - (1.5 / 3.0) * drift)
    assert st1[0, 0] != 0  # the literal variant moves the first control point
    with pytest.raises(ParameterError):
        OrthoDCCorrection(2.0)
    with pytest.raises(ParameterError):
        OrthoDCCorrection(0.0, "joint")


# --------------------------------------------------------------------- the step (eq. 12)
def test_chordal_root_matches_brent_on_the_curve():
    rng = np.random.default_rng(3)
    for degree in (1, 2, 3):
        cp = rng.normal(size=(degree + 1, 6))
        emb = BezierEmbedding(riemfl.Euclidean(6), degree)
        curve = BezierCurve(cp)
        for f in (0.1, 0.7, 1.0, 1.8):
            target = f * np.linalg.norm(cp[-1] - cp[0])
            r = emb._chordal_fraction(cp, f)
            brute = _first_crossing(
                lambda s, c=curve, p0=cp[0]: float(np.linalg.norm(c(s) - p0)), target
            )
            assert r == pytest.approx(brute, abs=1e-9)
            assert np.linalg.norm(curve(r) - cp[0]) == pytest.approx(target, rel=1e-9)
    assert chordal_root(np.zeros((2, 2)), 0.5) == 0.0  # a degenerate curve does not move


def test_arc_length_step():
    emb = BezierEmbedding(riemfl.Euclidean(3))
    cp = np.array([[0.0, 0, 0], [1.0, 2.0, 0], [3.0, 0, 1.0]])
    point, r = emb.step_point(cp, 0.4, "arc_length")
    curve = BezierCurve(cp)
    assert float(curve.arc_length(0.0, r)) == pytest.approx(0.4 * float(curve.arc_length()))
    np.testing.assert_allclose(point, curve(r))
    clipped, r1 = emb.step_point(cp, 3.0, "parameter", beyond="clip")
    assert r1 == 1.0 and np.allclose(clipped, cp[-1])
    with pytest.raises(ParameterError):
        emb.step_point(cp, 0.5, "geodesic")


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    variant=st.sampled_from(["per_point", "stacked"]),
    vartheta=st.sampled_from([-1.0, 0.0, 1.0]),
    alpha=st.sampled_from([0.0, 1.0]),
    mode=st.sampled_from(["chordal", "parameter"]),
    degree=st.integers(1, 3),
)
def test_fast_euclidean_step_equals_the_generic_one(seed, variant, vartheta, alpha, mode, degree):
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(4, 2))
    local = base + 0.3 * rng.normal(size=(degree + 1, 4, 2))
    local[0] = base  # the client's start stays the model it received
    current = base + 0.2 * rng.normal(size=(4, 2))
    emb = BezierEmbedding(riemfl.Euclidean(4, 2), degree)
    rule = AsyncManifold(
        emb, 2.0, alpha=alpha, correction=OrthoDCCorrection(vartheta, variant), step_mode=mode
    )
    a = _arrival(local, base, current)
    assert rule._has_fast_path(a)
    fast = rule.apply(emb.base, a)
    fast_fraction = rule.last["fraction"]
    psi = rule.corrected_parameters(a)
    f = rule.step_fraction(a, psi)
    curve = BezierCurve(psi)
    if mode == "parameter":
        r = f
    else:
        target = f * np.linalg.norm(curve(1.0) - curve(0.0))
        r = _first_crossing(lambda s: float(np.linalg.norm(curve(s) - curve(0.0))), target)
    np.testing.assert_allclose(fast, curve(r), atol=1e-9)
    assert fast_fraction == pytest.approx(f)
    if variant == "per_point":
        np.testing.assert_allclose(psi[0], current, atol=1e-12)  # passes through Theta^tau


def test_straight_curve_without_staleness_is_fedasync():
    """No drift, a straight learned curve, no correction: AsyncBezier = FedAsync (ASYNCPOS,
    Licudi et al. 2025, Sec. 2.2)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=5)
    local_model = x + rng.normal(size=5)
    m = riemfl.Euclidean(5)
    for middle in (x, 0.5 * (x + local_model)):  # the paper's initial B = A, and the midpoint
        cp = np.stack([x, middle, local_model])
        a = _arrival(cp, x, x, weight=0.3)
        rule = AsyncManifold(BezierEmbedding(m), 2.0, correction=None)
        fed = FedAsync(server_lr=2.0).apply(m, _arrival(local_model, x, x, weight=0.3))
        np.testing.assert_allclose(rule.apply(m, a), fed, atol=1e-12)


def test_asyncbezier_ed_scales_the_step_by_the_penalty():
    m = riemfl.Euclidean(3)
    base, current = np.zeros(3), np.array([1.0, 0, 0])
    cp = np.stack([base, base, np.array([0.0, 2.0, 0])])
    plain = AsyncBezier(m, 1.0, vartheta=1.0)
    ed = AsyncBezierED(m, 1.0, vartheta=1.0)
    plain.apply(m, _arrival(cp, base, current, weight=0.2))
    ed.apply(m, _arrival(cp, base, current, weight=0.2))
    s = staleness_penalty(1.0, 2.0, 1.0)  # |hat - current| = |(0,2,0)| (C is orthogonal to d)
    assert s == 2.0  # eq. (10): 1 / gamma, gamma = |current - base| / |hat - current| = 1/2
    assert ed.last["penalty"] == pytest.approx(s) and plain.last["penalty"] == 1.0
    assert ed.last["fraction"] == pytest.approx(s * plain.last["fraction"])


# --------------------------------------------------------------------- a custom embedding
class GeodesicArc(Embedding):
    """A user's embedding: phi = (start, end) on the sphere, iota_phi(s) = the geodesic point."""

    def __init__(self, sphere):
        self.base = sphere
        self.parameters = riemfl.ControlPoints(sphere, 2)

    def point_parameters(self, theta):
        return self.parameters.phi(theta)

    def embed(self, phi, s):
        return self.base.exp(phi[0], float(s) * self.base.log(phi[0], phi[1]))


def test_custom_embedding_on_the_sphere_is_exact_fedasync():
    sphere = riemfl.Sphere(4)
    rng = np.random.default_rng(1)
    x = sphere.random_point(rng=rng)
    local = sphere.exp(x, 0.5 * sphere.random_tangent(x, rng=rng))
    phi = np.stack([x, local])
    a = _arrival(phi, x, x, weight=0.4)
    rule = AsyncManifold(GeodesicArc(sphere), 1.5, correction=None)
    rule.validate(sphere)
    expected = FedAsync(server_lr=1.5, operators="exact").apply(sphere, _arrival(local, x, x, 0.4))
    np.testing.assert_allclose(rule.apply(sphere, a), expected, atol=1e-9)
    arc = AsyncManifold(GeodesicArc(sphere), 1.5, correction=None, step_mode="arc_length")
    np.testing.assert_allclose(arc.apply(sphere, a), expected, atol=1e-3)  # polyline length
    # with staleness and OrthoDC the result stays on the sphere
    current = sphere.exp(x, 0.2 * sphere.random_tangent(x, rng=rng))
    stale = AsyncManifold(GeodesicArc(sphere), 1.5, alpha=1.0)
    sphere.check_point(stale.apply(sphere, _arrival(phi, x, current, 0.4)))


# --------------------------------------------------------------------- momentum, SWA, dominance
def test_momentum_swa_and_dominance():
    m = riemfl.Euclidean(2)
    x0 = np.zeros(2)
    steps = [np.array([1.0, 0.0]), np.array([0.0, 1.0]), np.array([1.0, 1.0])]

    def line(x, target):
        return np.stack([x, x, target])

    mom = AsyncManifold(BezierEmbedding(m), 1.0, correction=None, momentum=0.5)
    x, prev = x0, None
    for k, s in enumerate(steps):
        new = mom.apply(m, _arrival(line(x, x + s), x, x, weight=1.0, version=k))
        want = x + s + (0.5 * prev if prev is not None else 0.0)
        np.testing.assert_allclose(new, want)
        prev, x = new - x, new
    swa = AsyncManifold(BezierEmbedding(m), 1.0, correction=None, swa_start=1, swa_every=1)
    x, iterates = x0, []
    for k, s in enumerate(steps):
        x = swa.apply(m, _arrival(line(x, x + s), x, x, weight=1.0, version=k))
        iterates.append(x)
    np.testing.assert_allclose(swa.output(x), np.mean(iterates, axis=0))
    periodic = AsyncManifold(
        BezierEmbedding(m), 1.0, correction=None, swa_start=0, swa_every=1, swa_cycle=2
    )
    x1 = periodic.apply(m, _arrival(line(x0, x0 + steps[0]), x0, x0, weight=1.0, version=0))
    x2 = periodic.apply(m, _arrival(line(x1, x1 + steps[1]), x1, x1, weight=1.0, version=1))
    np.testing.assert_allclose(x2, 0.5 * (x1 + x1 + steps[1]))  # version 2: overwritten by SWA
    dom = AsyncManifold(
        BezierEmbedding(m), 1.0, correction=None, dominance=True, step_mode="parameter"
    )
    dom.reset(m, 4)
    for client in (0, 0, 0, 1):
        dom.apply(m, _arrival(line(x0, x0 + 1.0), x0, x0, weight=0.25, client=client))
    # client 1 sent 1 of 4 updates: p = 1/4, N p = 1 -> rate unchanged; client 0 had N p = 3
    assert dom.last["fraction"] == pytest.approx(0.25)


# --------------------------------------------------------------------- clients and runs
def test_bezier_problem_trainer_follows_algorithm_2():
    problem = LeastSquares()
    x = np.ones(4)
    warm = BezierProblemTrainer(problem, 0.1, warmup_steps=3, curve_steps=0)
    phi = warm.train(2, x, np.random.default_rng(0))
    end = ProblemTrainer(problem, 0.1, local_steps=3).train(2, x, np.random.default_rng(0))
    np.testing.assert_allclose(phi, np.stack([x, x, end]))
    one = BezierProblemTrainer(problem, 0.1, warmup_steps=3, curve_steps=1)
    phi1 = one.train(2, x, np.random.default_rng(5))
    s = np.random.default_rng(5).uniform()  # the only draw: full-batch gradients
    point = (1 - s) ** 2 * x + 2 * s * (1 - s) * x + s * s * end
    np.testing.assert_allclose(phi1[1], x - 0.1 * 2 * s * (1 - s) * (point - problem.c[2]))
    np.testing.assert_allclose(phi1[[0, 2]], [x, end])  # start and (frozen) end unchanged
    free_trainer = BezierProblemTrainer(problem, 0.1, 3, 1, freeze_end=False)
    free = free_trainer.train(2, x, np.random.default_rng(5))
    np.testing.assert_allclose(free[2], end - 0.1 * s * s * (point - problem.c[2]))
    with pytest.raises(ParameterError, match="Euclidean"):
        BezierProblemTrainer(
            type("P", (), {"manifold": riemfl.Sphere(3), "name": "s"})(),
            0.1,  # type: ignore
        )


def test_asyncbezier_runs_converge_and_reject_point_uploads():
    problem = LeastSquares(d=4, n=5, seed=2)
    trainer = BezierProblemTrainer(problem, 0.2, warmup_steps=3, curve_steps=3)
    kw = {
        "timing": ExponentialTime([0.2, 0.5, 1.0, 2.0, 4.0]),
        "options": RunOptions(record_every=20),
    }
    # eq. (10)'s penalty reaches 1 / eps = 10 for an update with little drift: ED steps slower
    for rule in (AsyncBezier(problem.manifold, 2.0), AsyncBezierED(problem.manifold, 0.3)):
        h = run_async(trainer, rule, 60, x0=np.full(4, 5.0), **kw)
        assert h.metrics["optimality_gap"][-1] < 1e-2 * h.metrics["optimality_gap"][0]
        assert max(h.log["staleness"]) > 0
    # every client uploads a point instead of control points: each is excluded, then the run
    # stops with the reason (a misconfiguration is not a client fault to retry forever)
    with pytest.warns(ClientDroppedWarning, match="curve trainer"):
        with pytest.raises(ClientFailureError, match="curve trainer"):
            run_async(ProblemTrainer(problem, 0.2, 3), AsyncBezier(problem.manifold), 3, **kw)
    with pytest.raises(ParameterError, match="base"):
        run_async(trainer, AsyncBezier(riemfl.Euclidean(5)), 3, **kw)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"alpha": 2.0},
        {"step_mode": "x"},
        {"beyond": "wrap"},
        {"eps": 0.0},
        {"momentum": 1.0},
        {"swa_cycle": 3},
        {"swa_every": 0},
        {"swa_start": -1},
    ],
)
def test_bad_arguments(kwargs):
    with pytest.raises(ParameterError):
        AsyncManifold(BezierEmbedding(riemfl.Euclidean(2)), 1.0, **kwargs)
    with pytest.raises(ParameterError):
        BezierEmbedding(riemfl.Euclidean(2), degree=0)


def test_torch_bezier_client(tmp_path):
    torch = importorskip("torch")
    from riemfl.nn import MLP, BezierClientTrainer, TorchClientTrainer, digits_clients

    torch.manual_seed(0)
    data = digits_clients(n_clients=4, alpha=0.5, seed=0)
    base = TorchClientTrainer(lambda: MLP([64, 16, 10]), data, epochs=1, lr=1e-2)
    x = base.initial_parameters(0)
    warm_only = BezierClientTrainer(base, warmup_epochs=1, curve_epochs=0)
    phi0 = warm_only.train(1, x, np.random.default_rng(3))
    np.testing.assert_allclose(phi0[2], base.train(1, x, np.random.default_rng(3)))
    np.testing.assert_array_equal(phi0[0], x)
    np.testing.assert_array_equal(phi0[1], x)
    curve = BezierClientTrainer(base, warmup_epochs=1, curve_epochs=1)
    phi = curve.train(1, x, np.random.default_rng(3))
    again = curve.train(1, x, np.random.default_rng(3))
    np.testing.assert_array_equal(phi, again)  # deterministic from the rng
    np.testing.assert_allclose(phi[[0, 2]], phi0[[0, 2]])  # start fixed, end frozen
    assert np.abs(phi[1] - x).max() > 0  # the control point learned something
    for tunnel in ("uniform", "adversarial"):
        t = BezierClientTrainer(base, curve_epochs=1, tunnel_eps=0.1, tunnel=tunnel)
        assert np.isfinite(t.train(0, x, np.random.default_rng(0))).all()
    assert curve.num_batches(1) == base.num_batches(1, 2)
    h = run_async(
        curve,
        AsyncBezier(riemfl.Euclidean(x.size), 1.5),
        6,
        workers=2,
        x0=x,
        options=RunOptions(seed=0, record_every=3),
    )
    assert h.metrics["step"][-1] == 6 and math.isfinite(h.metrics["accuracy"][-1])
    with pytest.raises(ParameterError):
        BezierClientTrainer(base, tunnel="sam")


def test_manifold_quality_on_a_parabolic_valley(tmp_path):
    importorskip("matplotlib")  # the plot of the loss along the path
    from riemfl.federated.curve_quality import manifold_quality, path_losses, plot_loss_along_path

    def loss(x):  # the valley x2 = 1 - x1^2
        return 1.0 + (x[1] - 1.0 + x[0] ** 2) ** 2

    cp = np.array([[-1.0, 0.0], [0.0, 2.0], [1.0, 0.0]])  # traces the valley exactly
    losses = path_losses(loss, cp, 11)
    np.testing.assert_allclose(losses["curve"], 1.0, atol=1e-12)
    x1 = 2 * losses["s"] - 1
    np.testing.assert_allclose(losses["line"], 1.0 + (x1**2 - 1.0) ** 2, atol=1e-12)
    assert manifold_quality(loss, cp, 11) == pytest.approx(losses["line"].mean())
    straight = np.array([[-1.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    assert manifold_quality(loss, straight) == pytest.approx(1.0)
    plot_loss_along_path(losses, tmp_path / "path.png")
    assert (tmp_path / "path.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ParameterError):
        path_losses(loss, cp, 1)


# ------------------------------------------------------ AsyncCurve (Licudi 2025 (TR), Sec. 5.2)
def test_asynccurve_translation_rotation_and_step():
    from riemfl.federated import ASGD, AsyncCurve, OrthoStrict

    m = riemfl.Euclidean(3)
    base = np.zeros(3)
    local = np.array([2.0, 0.0, 0.0])
    phi = np.array([1.0, 1.0, 0.0])  # control point 1 above the chord's midpoint
    current = np.array([0.0, 0.0, 1.0])
    a = _arrival(np.stack([base, phi, local]), base, current, weight=0.25)
    # trusted update (ASGD): the end point translates, R = I: the curve is translated
    trans = AsyncCurve(m, 1.0, endpoint=ASGD(server_lr=1.0), weighting="weight")
    psi = trans.corrected_parameters(a)
    np.testing.assert_allclose(psi, np.stack([current, phi + current, local + current]))
    new = trans.apply(m, a)
    np.testing.assert_allclose(new, BezierCurve(psi)(0.25))  # alpha = w_i eta, parameter mode
    # OrthoStrict with a drift orthogonal to the update: the same end point, so again R = I
    strict = AsyncCurve(m, 1.0, endpoint=OrthoStrict(), weighting="weight")
    np.testing.assert_allclose(strict.corrected_parameters(a), psi)
    # a drift along the update: OrthoStrict removes it and the control offset is rotated
    along = _arrival(np.stack([base, phi, local]), base, np.array([1.0, 0, 0]), weight=0.25)
    rot = AsyncCurve(m, 1.0, endpoint=OrthoStrict(), weighting="weight").corrected_parameters(along)
    np.testing.assert_allclose(rot[2], [1.0, 0, 0])  # hat = current + 0 (all of u is drift)
    # a drift at 45 degrees: u' = (1, -1, 0); the control offset (0, 1, 0), orthogonal to u,
    # is rotated by the same -45 degrees and stays orthogonal to the corrected chord
    diag = _arrival(np.stack([base, phi, local]), base, np.array([1.0, 1.0, 0]), weight=0.25)
    psi45 = AsyncCurve(m, 1.0, endpoint=OrthoStrict(), weighting="weight").corrected_parameters(
        diag
    )
    np.testing.assert_allclose(psi45[2], [2.0, 0.0, 0.0])
    r = 1 / math.sqrt(2)
    np.testing.assert_allclose(psi45[1], [1.5 + r, 0.5 + r, 0.0])
    # dominance: eta / (N p_i); the first arrival of client 0 among 1 gives N p = N
    dom = AsyncCurve(m, 0.6, endpoint=ASGD(server_lr=1.0))
    dom.reset(m, 3)
    dom.apply(m, a)
    assert dom.last["fraction"] == pytest.approx(0.6 / 3)
    with pytest.raises(ParameterError):
        AsyncCurve(riemfl.Sphere(3))
    with pytest.raises(ShapeError, match="CurveClientTrainer"):
        trans.apply(m, _arrival(np.zeros((2, 3)), base, current))


def test_lorentz_prox_formula_gradient_and_overflow():
    torch = importorskip("torch")
    from riemfl.nn import lorentz_prox

    rng = np.random.default_rng(0)
    theta = torch.tensor(rng.normal(size=6), dtype=torch.float64)
    anchor = theta + 0.1 * torch.tensor(rng.normal(size=6), dtype=torch.float64)

    def lift(x):
        return torch.cat([torch.sqrt(1.0 + x @ x)[None], x])

    def lorentz_sq(v):
        return -(v[0] ** 2) + v[1:] @ v[1:]

    value, grad, capped = lorentz_prox(theta, anchor, mu=0.3, sigma=2.0)
    d = lorentz_sq(lift(theta) - lift(anchor))
    assert float(d) >= 0 and not capped
    assert float(value) == pytest.approx(0.15 * math.exp(float(d) / 2.0), rel=1e-12)
    x = theta.clone().requires_grad_(True)
    (0.15 * torch.exp(lorentz_sq(lift(x) - lift(anchor)) / 2.0)).backward()
    torch.testing.assert_close(grad, x.grad, rtol=1e-10, atol=1e-12)
    far = lorentz_prox(theta, anchor + 1e3, mu=1.0, sigma=1e-3)
    assert far[2] and torch.isfinite(far[1]).all() and math.isfinite(float(far[0]))


def test_curve_client_and_asynccurve_run():
    torch = importorskip("torch")
    from riemfl.federated import AsyncCurve
    from riemfl.nn import MLP, CurveClientTrainer, TorchClientTrainer, digits_clients

    torch.manual_seed(0)
    data = digits_clients(n_clients=4, alpha=0.5, seed=0)
    base = TorchClientTrainer(lambda: MLP([64, 16, 10]), data, epochs=2, lr=1e-2)
    x = base.initial_parameters(0)
    client = CurveClientTrainer(base, gamma=1.0)
    up = client.train(1, x, np.random.default_rng(2))
    np.testing.assert_array_equal(up, client.train(1, x, np.random.default_rng(2)))
    np.testing.assert_allclose(up[0], x)
    u = up[0] - up[2]
    offset = up[1] - 0.5 * (up[0] + up[2])  # gamma = 1: orthogonal to the pseudo-gradient
    assert abs(offset @ u) <= 1e-6 * np.linalg.norm(offset) * np.linalg.norm(u)
    assert np.linalg.norm(offset) > 0 and np.linalg.norm(u) > 0
    assert client.num_batches(1) == 2 * base.num_batches(1)
    h = run_async(
        client,
        AsyncCurve(riemfl.Euclidean(x.size), 1.0, swa_start=2, swa_every=1),
        6,
        workers=2,
        x0=x,
        options=RunOptions(seed=0, record_every=3),
    )
    assert h.metrics["step"][-1] == 6 and math.isfinite(h.metrics["accuracy"][-1])
    assert not np.array_equal(h.final_point, x)
    with pytest.raises(ParameterError):
        CurveClientTrainer(base, gamma=2.0)


def test_curve_client_settings_leave_out_its_diagnostic_counter():
    # the checkpoint fingerprint of an asynchronous run holds the trainer's settings; the
    # counter of capped prox exponents grows during a run and must not make a resume refused
    importorskip("torch")
    from riemfl.federated.fingerprint import settings
    from riemfl.nn import MLP, CurveClientTrainer, TorchClientTrainer, digits_clients

    data = digits_clients(n_clients=2, alpha=0.5, seed=0)
    client = CurveClientTrainer(TorchClientTrainer(lambda: MLP([64, 10]), data, lr=1e-2))
    before = settings(client)
    client.capped += 3
    assert settings(client) == before
    assert settings(CurveClientTrainer(client.trainer, gamma=0.5)) != before

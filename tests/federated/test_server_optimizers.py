"""Server optimisers (FedAvgM, FedAdam, FedYogi, FedAdagrad) wrapped around riemfl's rules:
reproduction of the plain rules, Reddi et al. 2021's Euclidean algorithm, the Riemannian
moments, RFedProj's control variates, checkpoints and refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

import riemfl
from riemfl.errors import CheckpointError, CheckpointMismatchError, ParameterError
from riemfl.federated import (
    ClientContext,
    DPSettings,
    PrivateAlgorithm,
    RFedAvg,
    RFedProj,
    RFedSVRG,
    RunInterrupted,
    RunOptions,
    SyncAlgorithm,
    run_sync,
)
from riemfl.federated.interrupt import request_interrupt
from riemfl.federated.server_optimized import ServerOptimized
from riemfl.federated.server_optimizers import (
    ServerAdagrad,
    ServerAdam,
    ServerSGD,
    ServerYogi,
    moment_shape,
)
from riemfl.problems import FunctionProblem, KPCAProblem

ETA, TAU = 0.01, 3


@pytest.fixture(scope="module")
def kpca():
    return KPCAProblem.synthetic(n_clients=6, d=8, k=3, p=10, seed=0)


def _least_squares(n=5, d=4, seed=0):
    """f_i(x) = |A_i x - b_i|^2 / 2 on R^(d, 2), with the data for the reference."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, 6, d))
    b = rng.normal(size=(n, 6, 2))
    losses = [lambda x, i=i: 0.5 * float(np.sum((a[i] @ x - b[i]) ** 2)) for i in range(n)]
    egrads = [lambda x, i=i: a[i].T @ (a[i] @ x - b[i]) for i in range(n)]
    problem = FunctionProblem(riemfl.Euclidean(d, 2), losses, egrads, name="least-squares")
    return problem, a, b


def _rayleigh_on_sphere(n=4, dim=5, seed=3):
    """f_i(x) = -x^T C_i x / 2 on the sphere S^(dim-1)."""
    rng = np.random.default_rng(seed)
    cs = [(g := rng.normal(size=(6, dim))).T @ g for _ in range(n)]
    losses = [lambda x, c=c: -0.5 * float(x @ c @ x) for c in cs]
    egrads = [lambda x, c=c: -c @ x for c in cs]
    return FunctionProblem(riemfl.Sphere(dim), losses, egrads, name="rayleigh")


# ------------------------------------------------------------------ reproduction of the rules
RULES = {
    "rfedavg": lambda: RFedAvg(ETA, TAU, upload="tangent"),
    "rfedsvrg": lambda: RFedSVRG(ETA, TAU, upload="tangent"),
    "rfedproj": lambda: RFedProj(ETA, TAU, global_step_size=1.5),
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_sgd_with_unit_rate_reproduces_the_rule(kpca, rule):
    kw = {"options": RunOptions(seed=1), "clients_per_round": 4}
    plain = run_sync(kpca, RULES[rule](), 6, **kw)
    wrapped = run_sync(kpca, ServerOptimized(RULES[rule](), ServerSGD(1.0)), 6, **kw)
    if rule == "rfedproj":
        # RFedProj's step runs on P(x^r) + s for s = mean - P(x^r): a few ulps of |x| per round
        np.testing.assert_allclose(wrapped.final_point, plain.final_point, rtol=0, atol=1e-13)
        np.testing.assert_allclose(wrapped.loss, plain.loss, rtol=1e-13)
    else:  # R_x(1.0 * (total / m) / 1) is R_x(total / m) bit for bit
        np.testing.assert_array_equal(wrapped.final_point, plain.final_point)
        assert wrapped.loss == plain.loss
    adam = run_sync(kpca, ServerOptimized(RULES[rule](), ServerAdam(0.05)), 6, **kw)
    assert np.abs(adam.final_point - plain.final_point).max() > 1e-3  # the optimiser acts


# ------------------------------------------------------------------ Reddi et al. 2021, Alg. 2
def _reference(kind, a, b, x0, rounds, hyper):
    """Alg. 2 of Reddi et al. 2021 (and FedAvgM) in plain numpy, on FedAvg's client updates:
    every client runs TAU gradient steps of size ETA from x_t; Delta_t is the mean of
    x^i_{t,K} - x_t; m_{-1} = 0, v_{-1} = v0 (tau^2 by default)."""
    x, iterates = x0.copy(), []
    m = np.zeros_like(x0)
    tau = hyper.get("eps", 1e-3)
    v = np.full_like(x0, hyper.get("v0", tau**2))
    for _ in range(rounds):
        updates = []
        for ai, bi in zip(a, b, strict=True):
            z = x.copy()
            for _ in range(TAU):
                z = z - ETA * (ai.T @ (ai @ z - bi))
            updates.append(z - x)
        delta = np.mean(updates, axis=0)
        if kind == "sgd":  # FedAvgM: m_t = beta m_{t-1} + Delta_t
            beta = hyper["momentum"]
            m = beta * m + delta
            step = beta * m + delta if hyper.get("nesterov") else m
            x = x + hyper["lr"] * step
        else:
            b1, b2 = hyper.get("b1", 0.9), hyper.get("b2", 0.99)
            m = b1 * m + (1 - b1) * delta
            if kind == "adagrad":
                v = v + delta**2
            elif kind == "yogi":
                v = v - (1 - b2) * delta**2 * np.sign(v - delta**2)
            else:
                v = b2 * v + (1 - b2) * delta**2
            x = x + hyper["lr"] * m / (np.sqrt(v) + tau)
        iterates.append(x)
    return iterates


EUCLIDEAN_CASES = {
    "fedavgm": ("sgd", lambda: ServerSGD(0.7, momentum=0.9), {"lr": 0.7, "momentum": 0.9}),
    "fedavgm-nesterov": (
        "sgd",
        lambda: ServerSGD(0.7, momentum=0.8, nesterov=True),
        {"lr": 0.7, "momentum": 0.8, "nesterov": True},
    ),
    "fedadam": ("adam", lambda: ServerAdam(0.05), {"lr": 0.05}),
    "fedyogi": (
        "yogi",
        lambda: ServerYogi(0.05, betas=(0.5, 0.9), eps=1e-2),
        {"lr": 0.05, "b1": 0.5, "b2": 0.9, "eps": 1e-2},
    ),
    "fedadagrad": (
        "adagrad",
        lambda: ServerAdagrad(0.05, momentum=0.5, initial_accumulator=0.1),
        {"lr": 0.05, "b1": 0.5, "v0": 0.1},
    ),
}


@pytest.mark.parametrize("case", sorted(EUCLIDEAN_CASES))
def test_on_euclidean_space_each_optimiser_is_reddi_et_al_algorithm_2(case):
    kind, make, hyper = EUCLIDEAN_CASES[case]
    problem, a, b = _least_squares()
    x0 = np.random.default_rng(5).normal(size=(4, 2))
    rounds = 6
    expected = _reference(kind, a, b, x0, rounds, hyper)
    for r in range(1, rounds + 1):
        rule = ServerOptimized(RFedAvg(ETA, TAU, upload="tangent"), make())
        got = run_sync(problem, rule, r, x0=x0, options=RunOptions(record_every=None))
        err = np.linalg.norm(got.final_point - expected[r - 1])
        assert err <= 1e-12 * np.linalg.norm(expected[r - 1]), (r, err)
    # the reference is not trivially the plain rule's: the optimiser moved the iterates
    plain = run_sync(problem, RFedAvg(ETA, TAU, upload="tangent"), rounds, x0=x0)
    assert np.linalg.norm(plain.final_point - expected[-1]) > 1e-3


def test_the_euclidean_second_moment_is_elementwise():
    manifold = riemfl.Euclidean(4, 2)
    opt = ServerAdam(0.1)
    x = np.zeros((4, 2))
    opt.reset(manifold, x)
    delta = np.arange(8.0).reshape(4, 2)
    opt.step(manifold, x, delta)
    np.testing.assert_allclose(opt.second_moment, 0.99 * 1e-6 + 0.01 * delta**2, rtol=1e-15)


# ------------------------------------------------------------------ the Riemannian moments
@pytest.mark.parametrize(
    "manifold",
    [
        riemfl.Stiefel(5, 2),
        riemfl.Product(riemfl.Sphere(3), riemfl.Stiefel(4, 2)),
        riemfl.Product(riemfl.Euclidean(3), riemfl.Sphere(4)),
    ],
    ids=["stiefel", "sphere-x-stiefel", "euclidean-x-sphere"],
)
def test_adams_second_moment_is_one_nonnegative_number_per_factor(manifold):
    rng = np.random.default_rng(0)
    x = manifold.random_point(rng=rng)
    opt = ServerAdam(0.1, betas=(0.8, 0.9), eps=1e-2)
    opt.reset(manifold, x)
    delta = manifold.to_tangent(x, rng.normal(size=x.shape))
    step = opt.step(manifold, x, delta)
    v = opt.second_moment
    assert v.shape == moment_shape(manifold) and np.all(v >= 0)
    factors = manifold.manifolds if isinstance(manifold, riemfl.Product) else (manifold,)
    xs = manifold.split(x) if len(factors) > 1 else [x]
    ds = manifold.split(delta) if len(factors) > 1 else [delta]
    steps = manifold.split(step) if len(factors) > 1 else [step]
    expected_v = []
    for f, xi, di, si in zip(factors, xs, ds, steps, strict=True):
        sq = di**2 if isinstance(f, riemfl.Euclidean) else np.array([f.norm(xi, di) ** 2])
        vi = 0.9 * 1e-4 + 0.1 * sq.reshape(-1)
        expected_v.append(vi)
        scale = np.sqrt(vi).reshape(di.shape if isinstance(f, riemfl.Euclidean) else ()) + 1e-2
        np.testing.assert_allclose(si, 0.1 * 0.2 * di / scale, rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(np.ravel(v), np.concatenate(expected_v), rtol=1e-13)


@pytest.mark.parametrize(
    ("problem", "operators"),
    [("kpca", "approximate"), ("sphere", "exact")],
)
@pytest.mark.parametrize(
    "optimizer",
    [lambda: ServerSGD(0.5, momentum=0.9), lambda: ServerAdam(0.05)],
    ids=["fedavgm", "fedadam"],
)
def test_iterates_stay_on_the_manifold_and_the_momentum_is_carried_along(
    kpca, problem, operators, optimizer
):
    prob = kpca if problem == "kpca" else _rayleigh_on_sphere()
    manifold = prob.manifold
    wrapped = ServerOptimized(RFedAvg(ETA, TAU, operators, upload="tangent"), optimizer())
    for rounds in (1, 4):
        h = run_sync(prob, wrapped, rounds, options=RunOptions(seed=2, record_every=None))
        x, m = h.final_point, wrapped.optimizer.first_moment
        manifold.check_point(x, atol=1e-12)
        normal = m - manifold.to_tangent(x, m)
        assert np.linalg.norm(m) > 1e-6
        assert np.linalg.norm(normal) <= 1e-12 * np.linalg.norm(m)
        assert wrapped.optimizer.steps_taken == rounds  # init restarts the optimiser
        if hasattr(wrapped.optimizer, "second_moment"):
            v = wrapped.optimizer.second_moment
            assert v.shape == () and v >= 0


@pytest.mark.parametrize(
    "optimizer",
    [
        lambda: ServerSGD(1.0, momentum=0.5),
        lambda: ServerAdam(0.05),
        lambda: ServerYogi(0.05),
        lambda: ServerAdagrad(0.1),
    ],
    ids=["fedavgm", "fedadam", "fedyogi", "fedadagrad"],
)
def test_the_loss_decreases_on_kpca(kpca, optimizer):
    h = run_sync(kpca, ServerOptimized(RULES["rfedavg"](), optimizer()), 20)
    gap = np.asarray(h.loss) - kpca.optimum
    assert gap[-1] < 0.5 * gap[0]
    kpca.manifold.check_point(h.final_point, atol=1e-12)


def test_the_riemannian_adam_is_coordinate_free_and_the_ambient_one_is_not():
    """Rotating the ambient space rotates the iterates of Adam with intrinsic moments (tangent
    rule); RFedProj's elementwise ambient Adam depends on the coordinates."""
    rng = np.random.default_rng(4)
    blocks = [rng.normal(size=(10, 8)) * (1 + i) for i in range(4)]
    q = np.linalg.qr(rng.normal(size=(8, 8)))[0]
    problem = KPCAProblem(blocks, 3)
    rotated = KPCAProblem([a @ q.T for a in blocks], 3)
    x0 = problem.manifold.random_point(rng=rng)
    opts = RunOptions(record_every=None)

    def final(rule, prob, x):
        return run_sync(prob, ServerOptimized(rule, ServerAdam(0.05)), 8, x0=x, options=opts)

    tangent = final(RULES["rfedavg"](), problem, x0).final_point
    tangent_q = final(RULES["rfedavg"](), rotated, q @ x0).final_point
    np.testing.assert_allclose(tangent_q, q @ tangent, rtol=0, atol=1e-11)
    ambient = final(RFedProj(ETA, TAU), problem, x0).final_point
    ambient_q = final(RFedProj(ETA, TAU), rotated, q @ x0).final_point
    assert np.abs(ambient_q - q @ ambient).max() > 1e-6


def test_rfedprojs_control_variates_keep_mean_zero_under_a_server_optimiser(kpca):
    """The clients finish a round from the rule's own step on the same sum, so c_i = gbar -
    g_i still averages to zero while the optimiser moves the global model elsewhere."""
    rule = ServerOptimized(RFedProj(ETA, TAU), ServerAdam(0.05))
    n = kpca.n_clients
    x0 = kpca.manifold.random_point(rng=np.random.default_rng(0))
    server, clients = rule.init(kpca, x0)
    ctx = ClientContext(kpca, np.arange(n))
    for _ in range(3):
        message = rule.broadcast(server, 0)
        uploads, rows = rule.client_step(ctx, 0, message, clients)
        total = {k: v.sum(0) for k, v in uploads.items()}
        server = rule.server_step_from_sum(kpca.manifold, server, 0, message, total, n)
        clients = rule.client_finish(rule.broadcast(server, 0), rows)
        c = clients["correction"]
        assert np.abs(c.mean(0)).max() <= 1e-12 * np.abs(c).max()
        assert np.abs(c).max() > 1e-3
        assert np.abs(server["x"] - server["own:x"]).max() > 1e-3  # two different models


# ------------------------------------------------------------------ checkpoints
class _Stop(Exception):
    pass


class _OnceAt:
    """on_step that stops the run once, at ``step``: by an exception or an interrupt request."""

    def __init__(self, step, how):
        self.step, self.how, self.fired = step, how, False

    def __call__(self, step, history):
        if step == self.step and not self.fired:
            self.fired = True
            if self.how == "raise":
                raise _Stop
            request_interrupt()


@pytest.mark.parametrize("how", ["raise", "interrupt"])
@pytest.mark.parametrize(
    ("rule", "optimizer"),
    [
        ("rfedavg", lambda: ServerAdam(0.05)),
        ("rfedsvrg", lambda: ServerYogi(0.05)),
        ("rfedproj", lambda: ServerSGD(0.8, momentum=0.9, nesterov=True)),
    ],
    ids=["rfedavg+adam", "rfedsvrg+yogi", "rfedproj+sgd"],
)
def test_a_resumed_run_equals_the_uninterrupted_one(kpca, tmp_path, rule, optimizer, how):
    kw = {"clients_per_round": 4}
    full = run_sync(
        kpca, ServerOptimized(RULES[rule](), optimizer()), 7, options=RunOptions(seed=3), **kw
    )
    opts = RunOptions(
        seed=3, checkpoint=tmp_path / "x.ckpt", checkpoint_every=2, on_step=_OnceAt(3, how)
    )
    with pytest.raises(_Stop if how == "raise" else RunInterrupted):
        run_sync(kpca, ServerOptimized(RULES[rule](), optimizer()), 7, options=opts, **kw)
    resumed = run_sync(kpca, ServerOptimized(RULES[rule](), optimizer()), 7, options=opts, **kw)
    assert resumed.same_results(full)
    np.testing.assert_array_equal(resumed.final_point, full.final_point)


def test_resuming_with_another_optimiser_is_refused(kpca, tmp_path):
    opts = RunOptions(seed=0, checkpoint=tmp_path / "x.ckpt", checkpoint_every=1)
    run_sync(kpca, ServerOptimized(RULES["rfedavg"](), ServerAdam(0.05)), 2, options=opts)
    with pytest.raises(CheckpointMismatchError, match="server_optimizer.lr"):
        run_sync(kpca, ServerOptimized(RULES["rfedavg"](), ServerAdam(0.1)), 3, options=opts)


def test_a_misshapen_optimiser_state_is_refused():
    manifold = riemfl.Stiefel(5, 2)
    opt = ServerAdam(0.1)
    x = manifold.random_point(rng=0)
    opt.reset(manifold, x)
    good = opt.state_dict()
    opt.load_state_dict(good)
    for bad, match in [
        ({**good, "v": np.zeros(2)}, "'v'"),
        ({**good, "v": np.array(-1.0)}, "'v'"),
        ({**good, "m": np.zeros((5, 3))}, "'m'"),
        ({**good, "t": -1}, "'t'"),
        ({"t": 0, "m": good["m"]}, "keys"),
    ]:
        with pytest.raises(CheckpointError, match=match):
            opt.load_state_dict(bad)


# ------------------------------------------------------------------ composition, refusals
def test_differential_privacy_wraps_the_optimised_rule(kpca):
    """run_sync(privacy=...) clips the clients' updates and noises their sum before the
    optimiser; with no clipping and no noise it is the non-private run bit for bit."""
    pytest.importorskip("dp_accounting")
    kw = {"options": RunOptions(seed=1), "clients_per_round": 4}
    make = lambda: ServerOptimized(RULES["rfedavg"](), ServerAdam(0.05))  # noqa: E731
    plain = run_sync(kpca, make(), 4, **kw)
    free = run_sync(kpca, make(), 4, privacy=DPSettings(math.inf, 0.0), **kw)
    np.testing.assert_array_equal(free.final_point, plain.final_point)
    noisy = run_sync(kpca, make(), 4, privacy=DPSettings(0.05, 1.0), **kw)
    assert np.abs(noisy.final_point - plain.final_point).max() > 1e-6
    assert math.isfinite(noisy.epsilon[-1])
    kpca.manifold.check_point(noisy.final_point, atol=1e-12)


class _Undeclared(SyncAlgorithm):
    name = "undeclared"

    def init(self, problem, x0):
        return {"x": x0}, {}

    def client_step(self, ctx, phase, message, clients):
        return {"x": message["x"]}, clients

    def output(self, server):
        return server["x"]


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: ServerSGD(-1.0), "lr"),
        (lambda: ServerSGD(0.0), "lr"),
        (lambda: ServerAdam(math.nan), "lr"),
        (lambda: ServerSGD(1.0, momentum=1.0), "momentum"),
        (lambda: ServerSGD(1.0, momentum=-0.1), "momentum"),
        (lambda: ServerSGD(1.0, momentum=math.nan), "momentum"),
        (lambda: ServerSGD(1.0, nesterov=1), "nesterov"),
        (lambda: ServerAdam(0.1, betas=(1.0, 0.9)), r"betas\[0\]"),
        (lambda: ServerYogi(0.1, betas=(0.9, -0.1)), r"betas\[1\]"),
        (lambda: ServerAdam(0.1, betas=(0.9, math.nan)), r"betas\[1\]"),
        (lambda: ServerAdam(0.1, betas=(0.9,)), "pair"),
        (lambda: ServerAdam(0.1, eps=0.0), "eps"),
        (lambda: ServerYogi(0.1, eps=-1e-3), "eps"),
        (lambda: ServerAdagrad(0.1, eps=math.nan), "eps"),
        (lambda: ServerAdagrad(0.1, initial_accumulator=-1.0), "initial_accumulator"),
        (lambda: ServerAdagrad(math.inf), "lr"),
        (lambda: ServerAdagrad(0.1, momentum=1.0), "momentum"),
    ],
)
def test_bad_optimiser_settings_are_refused(make, match):
    with pytest.raises(ParameterError, match=match):
        make()


def test_rules_the_optimiser_cannot_serve_are_refused():
    adam = ServerAdam(0.1)
    for rule in (RFedAvg(0.1, 2), RFedSVRG(0.1, 2)):  # upload="point": each upload needed
        with pytest.raises(ParameterError, match="upload='tangent'"):
            ServerOptimized(rule, adam)
    once = ServerOptimized(RFedAvg(0.1, 2, upload="tangent"), adam)
    with pytest.raises(ParameterError, match="already has a server optimiser"):
        ServerOptimized(once, ServerSGD(1.0))
    private = PrivateAlgorithm(RFedProj(0.1, 2), DPSettings(1.0, 0.0))
    with pytest.raises(ParameterError, match="privacy= to run_sync"):
        ServerOptimized(private, adam)
    with pytest.raises(ParameterError, match="privacy_space"):
        ServerOptimized(_Undeclared(), adam)
    with pytest.raises(ParameterError, match="ServerOptimizer"):
        ServerOptimized(RFedProj(0.1, 2), "adam")
    assert once.name == "rfedavg+adam"
    assert once.describe()["server_optimizer"] == {
        "name": "adam",
        "lr": 0.1,
        "beta1": 0.9,
        "beta2": 0.99,
        "eps": 1e-3,
        "initial_accumulator": 1e-6,
    }

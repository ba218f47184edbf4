"""Client-level differential privacy: clipping, noise, accounting, exactness and resumption."""

from __future__ import annotations

import math

import numpy as np
import pytest

import riemfl
from riemfl.errors import ParameterError
from riemfl.experiments.registry import build_async_rule
from riemfl.federated import (
    DPSettings,
    FedBuff,
    GaussianSum,
    PrivateAlgorithm,
    ProblemTrainer,
    RFedAvg,
    RFedProj,
    RFedProx,
    RFedSVRG,
    RunOptions,
    run_async,
    run_sync,
)
from riemfl.federated.privacy import update_norms
from riemfl.testing import importorskip

# the epsilon of every private run comes from dp-accounting
dpa = importorskip("dp_accounting")

INF = DPSettings(math.inf, 0.0)

SUM_ONLY = {
    "rfedproj": lambda: RFedProj(0.02, 3),
    "rfedavg": lambda: RFedAvg(0.02, 3, upload="tangent"),
    "rfedsvrg": lambda: RFedSVRG(0.02, 3, upload="tangent"),
}


def _stack(rng, manifold, x, m, scale):
    """m tangent vectors at x of Frobenius norms spread over [0, 2 * scale]."""
    u = manifold.to_tangent(x, rng.standard_normal((m, *x.shape)))
    norms = np.sqrt((u * u).sum(axis=(1, 2)))
    return u * (np.linspace(0.0, 2.0 * scale, m) / norms)[:, None, None]


@pytest.mark.parametrize("manifold", [riemfl.Stiefel(7, 3), riemfl.SPD(3)])
def test_clipping_bounds_the_metric_and_ambient_norms_of_tangent_updates(manifold):
    rng = np.random.default_rng(0)
    x = manifold.random_point(rng=rng)
    u = _stack(rng, manifold, x, 9, 1.0)
    rule = PrivateAlgorithm(RFedAvg(0.1, 2, upload="tangent"), DPSettings(0.7, 0.0))
    out = rule.privatize_uploads(manifold, 0, {"x": x}, {"u": u})["u"]
    anchors = np.broadcast_to(x, u.shape)
    metric = manifold.norm(anchors, out)
    ambient = np.sqrt((out * out).sum(axis=(1, 2)))
    assert np.all(metric <= 0.7 * (1 + 1e-12)) and np.all(ambient <= 0.7 * (1 + 1e-12))
    before = update_norms(manifold, x, {"u": u})
    kept = before <= 0.7
    assert kept.any() and (~kept).any()
    np.testing.assert_array_equal(out[kept], u[kept])  # within the bound: bit for bit
    np.testing.assert_allclose(out[~kept], u[~kept] * (0.7 / before[~kept])[:, None, None])
    np.testing.assert_allclose(update_norms(manifold, x, {"u": out[~kept]}), 0.7)


def test_rfedproj_clips_its_ambient_step_and_uploads_the_projection_plus_it(stiefel_problem):
    rng = np.random.default_rng(1)
    px = stiefel_problem.manifold.random_point(rng=rng)
    z = px + rng.standard_normal((6, *px.shape)) * np.linspace(0.01, 1.0, 6)[:, None, None]
    rule = PrivateAlgorithm(RFedProj(0.1, 2), DPSettings(0.5, 0.0))
    out = rule.privatize_uploads(stiefel_problem.manifold, 0, {"px": px, "x": px}, {"x": z})["x"]
    step = np.sqrt(((out - px) ** 2).sum(axis=(1, 2)))
    assert np.all(step <= 0.5 * (1 + 1e-12)) and np.isclose(step.max(), 0.5)
    long = np.sqrt(((z - px) ** 2).sum(axis=(1, 2))) > 0.5
    np.testing.assert_array_equal(out[~long], z[~long])
    direction = (out - px)[long] / step[long][:, None, None]
    reference = (z - px)[long] / np.sqrt(((z - px)[long] ** 2).sum(axis=(1, 2)))[:, None, None]
    np.testing.assert_allclose(direction, reference, atol=1e-12)


def test_central_noise_has_standard_deviation_sigma_times_c():
    settings = DPSettings(0.5, 1.5)
    agg = GaussianSum(settings, population=4, sample_size=4, central_noise=7)
    uploads = {"x": np.zeros((4, 100, 100))}
    total, count = agg.aggregate(uploads, 0)
    noise = total["x"].ravel()
    # 10^4 draws: the sample std is within 5% of 0.75 by 7 standard errors (fixed seed)
    assert count == 4 and abs(noise.std() / 0.75 - 1) < 0.05 and abs(noise.mean()) < 0.05
    zero = GaussianSum(DPSettings(0.5, 0.0), 4, 4, 7).aggregate(uploads, 0)[0]["x"]
    np.testing.assert_array_equal(zero, 0.0)


def test_local_noise_is_added_by_every_client_with_standard_deviation_sigma_times_c():
    settings = DPSettings(2.0, 0.5, mode="local")
    rule = PrivateAlgorithm(RFedProj(0.1, 2), settings, local_noise=3)
    px = np.zeros((50, 40))
    out = rule.privatize_uploads(
        riemfl.Euclidean(50, 40), 0, {"px": px}, {"x": np.zeros((5, 50, 40))}
    )
    per_client = out["x"].reshape(5, -1).std(axis=1)
    assert np.all(np.abs(per_client / 1.0 - 1) < 0.1)  # 2000 draws each: 10% is 6 std errors
    summed, _ = GaussianSum(settings, 5, 5, 1).aggregate(out, 0)  # no second noise in local mode
    np.testing.assert_allclose(summed["x"], out["x"].sum(0))


def test_the_projected_noise_is_the_tangent_space_s_isotropic_gaussian(stiefel_problem):
    """E|P xi|^2 = sigma^2 C^2 dim T_x M (= 21 - 6 on St(7, 3)), and P xi is tangent."""
    M = stiefel_problem.manifold
    x = M.random_point(rng=np.random.default_rng(3))
    agg = GaussianSum(DPSettings(0.5, 2.0), population=3, sample_size=3, central_noise=5)
    draws = np.stack([agg.aggregate({"u": np.zeros((3, 7, 3))}, 0)[0]["u"] for _ in range(4000)])
    projected = M.to_tangent(np.broadcast_to(x, draws.shape), draws)
    # the squared norm over sigma^2 C^2 is chi^2 with 15 degrees of freedom: variance 30, so the
    # mean of 4000 has standard error 0.087; 0.7 is 8 of them (fixed seed)
    assert abs(np.mean((projected**2).sum(axis=(1, 2))) - 15.0) < 0.7
    np.testing.assert_allclose(
        M.to_tangent(np.broadcast_to(x, draws.shape), projected), projected, atol=1e-12
    )


def test_tangent_rules_project_the_noisy_sum_onto_the_tangent_space(stiefel_problem):
    M = stiefel_problem.manifold
    rng = np.random.default_rng(2)
    x = M.random_point(rng=rng)
    total = {"u": rng.standard_normal(x.shape)}
    inner = RFedAvg(0.1, 2, upload="tangent")
    private = PrivateAlgorithm(inner, DPSettings(1.0, 1.0))
    got = private.server_step_from_sum(M, {"x": x}, 0, {"x": x}, total, 3)
    want = inner.server_step_from_sum(
        M, {"x": x}, 0, {"x": x}, {"u": M.to_tangent(x, total["u"])}, 3
    )
    np.testing.assert_array_equal(got["x"], want["x"])


@pytest.mark.parametrize("name", sorted(SUM_ONLY))
@pytest.mark.parametrize("kw", [{}, {"clients_per_round": 3, "batch_size": 4}])
def test_no_clipping_and_no_noise_is_the_non_private_run_exactly(stiefel_problem, name, kw):
    make = SUM_ONLY[name]
    options = RunOptions(seed=3)
    plain = run_sync(stiefel_problem, make(), 4, options=options, **kw)
    private = run_sync(stiefel_problem, make(), 4, options=options, privacy=INF, **kw)
    np.testing.assert_array_equal(private.final_point, plain.final_point)
    assert private.loss == plain.loss and private.epsilon[-1] == math.inf


def test_fedbuff_without_clipping_or_noise_is_fedbuff(stiefel_problem):
    trainer = ProblemTrainer(stiefel_problem, 0.02, 2)
    options = RunOptions(seed=1, record_every=3)
    plain = run_async(trainer, FedBuff(3), 6, options=options)
    private = run_async(trainer, FedBuff(3, privacy=INF), 6, options=options)
    np.testing.assert_array_equal(private.final_point, plain.final_point)


def _direct_epsilon(event, count, delta):
    acc = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    return acc.compose(event, count).get_epsilon(delta)


def test_epsilon_grows_with_the_rounds_and_is_dp_accounting_s(stiefel_problem):
    settings = DPSettings(1.0, 4.0, delta=1e-5)
    h = run_sync(
        stiefel_problem,
        RFedProj(0.02, 2),
        4,
        clients_per_round=1,
        privacy=settings,
        options=RunOptions(seed=0),
    )
    eps = np.asarray(h.epsilon)
    assert eps[0] == 0 and np.all(np.diff(eps) > 0)
    event = dpa.SampledWithoutReplacementDpEvent(6, 1, dpa.GaussianDpEvent(2.0))
    assert eps[-1] == pytest.approx(_direct_epsilon(event, 4, 1e-5), rel=1e-9)
    assert h.summary["epsilon"] == eps[-1]
    # every client in every round, two releases per RFedSVRG round: Gaussian(sigma/2), 2R times
    svrg = run_sync(
        stiefel_problem, SUM_ONLY["rfedsvrg"](), 3, privacy=settings, options=RunOptions(seed=0)
    )
    direct = _direct_epsilon(dpa.GaussianDpEvent(2.0), 6, 1e-5)
    assert svrg.epsilon[-1] == pytest.approx(direct, rel=1e-9)


@pytest.mark.parametrize("mode", ["central", "local"])
def test_a_resumed_private_run_is_bit_identical(stiefel_problem, tmp_path, mode):
    settings = DPSettings(0.05, 0.8, mode=mode)
    kw = {"clients_per_round": 3, "privacy": settings}
    full = run_sync(stiefel_problem, RFedProj(0.02, 2), 6, options=RunOptions(seed=4), **kw)
    saved = RunOptions(seed=4, checkpoint=tmp_path / "run.rfl")
    run_sync(stiefel_problem, RFedProj(0.02, 2), 3, options=saved, **kw)
    resumed = run_sync(stiefel_problem, RFedProj(0.02, 2), 6, options=saved, **kw)
    np.testing.assert_array_equal(resumed.final_point, full.final_point)
    assert resumed.epsilon == full.epsilon and resumed.loss == full.loss
    other = run_sync(stiefel_problem, RFedProj(0.02, 2), 6, options=RunOptions(seed=5), **kw)
    assert not np.array_equal(other.final_point, full.final_point)  # the noise is drawn


def test_a_resumed_private_fedbuff_run_is_bit_identical(stiefel_problem, tmp_path):
    trainer = ProblemTrainer(stiefel_problem, 0.02, 2)
    settings = DPSettings(0.02, 1.0)
    full = run_async(
        trainer, FedBuff(3, privacy=settings), 6, options=RunOptions(seed=2, record_every=2)
    )
    saved = RunOptions(seed=2, record_every=2, checkpoint=tmp_path / "async.rfl")
    run_async(trainer, FedBuff(3, privacy=settings), 3, options=saved)
    resumed = run_async(trainer, FedBuff(3, privacy=settings), 6, options=saved)
    np.testing.assert_array_equal(resumed.final_point, full.final_point)
    eps = full.metrics["epsilon"]
    assert full.summary["epsilon"] == eps[-1]
    # the interrupted run also recorded its last step (3): compare the rows of both
    rows = dict(zip(resumed.metrics["step"], resumed.metrics["epsilon"], strict=True))
    assert [rows[s] for s in full.metrics["step"]] == eps
    assert eps[0] == 0 and np.all(np.diff(eps) > 0)


def test_rules_whose_server_needs_each_upload_are_refused():
    for rule in (RFedAvg(0.1, 2), RFedProx(0.1, 2), RFedSVRG(0.1, 2)):
        with pytest.raises(ParameterError, match="upload='tangent'"):
            PrivateAlgorithm(rule, DPSettings(1.0, 1.0))
    with pytest.raises(ParameterError, match="staleness_scaling"):
        FedBuff(privacy=DPSettings(1.0, 1.0), staleness_scaling=True)
    with pytest.raises(ParameterError, match="fedbuff only"):
        build_async_rule("fedasync", privacy=DPSettings(1.0, 1.0))


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"clip": 0.0, "noise_multiplier": 1.0}, "clip"),
        ({"clip": math.inf, "noise_multiplier": 1.0}, "infinite noise"),
        ({"clip": 1.0, "noise_multiplier": -1.0}, "noise_multiplier"),
        ({"clip": 1.0, "noise_multiplier": 1.0, "delta": 1.0}, "delta"),
        ({"clip": 1.0, "noise_multiplier": 1.0, "mode": "distributed"}, "mode"),
    ],
)
def test_bad_settings_are_refused(kw, match):
    with pytest.raises(ParameterError, match=match):
        DPSettings(**kw)


def test_torch_models_get_the_same_noise_and_clipping(stiefel_problem):
    """The noise is drawn in numpy and converted: a torch run follows the numpy run."""
    torch = importorskip("torch")
    from riemfl.federated import initial_point
    from riemfl.problems import FunctionProblem

    P = stiefel_problem
    covariances = [torch.from_numpy(c) for c in P.C]
    losses = [lambda x, c=c: -0.5 * torch.sum(x * (c @ x)) for c in covariances]
    torch_problem = FunctionProblem(P.manifold, losses, differentiation="torch")
    x0 = initial_point(P, 0)
    kw = {"clients_per_round": 3, "privacy": DPSettings(0.05, 0.5, mode="local")}
    h = run_sync(torch_problem, SUM_ONLY["rfedavg"](), 3, x0=torch.from_numpy(x0), **kw)
    ref = run_sync(P, SUM_ONLY["rfedavg"](), 3, x0=x0, **kw)
    assert torch.is_tensor(h.final_point)
    np.testing.assert_allclose(h.final_point.numpy(), ref.final_point, atol=1e-12)

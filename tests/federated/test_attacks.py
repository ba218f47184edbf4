"""Byzantine attacks: the forged updates, the attackers, and runs with them."""

from __future__ import annotations

import json
from statistics import NormalDist

import numpy as np
import pytest
from _problems import round_steps
from hypothesis import given, settings
from hypothesis import strategies as st

import riemfl
from riemfl.errors import CheckpointError, NotOnManifoldError, ParameterError
from riemfl.federated import (
    ATTACK_NAMES,
    Byzantine,
    ClientDroppedWarning,
    DPSettings,
    RFedAvg,
    RFedProj,
    RFedSVRG,
    RunOptions,
    initial_point,
    make_attack,
    run_sync,
)
from riemfl.federated.algorithm import ClientContext
from riemfl.federated.attacks import (
    ALittleIsEnough,
    Attackers,
    InnerProductManipulation,
    RandomPoint,
    Scale,
    SignFlip,
    alie_z,
)
from riemfl.federated.engine import StackedClients
from riemfl.testing import importorskip

SPACES = ("tangent", "ambient")
TRAJECTORY = ("round", "loss", "grad_norm", "uplink_matrices", "participants")


def _stacks(seed: int, k: int, h: int, shape=(5, 2)):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(k, *shape)), rng.normal(size=(h, *shape))


def _same_run(a, b) -> None:
    for key in TRAJECTORY:
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=key)
    np.testing.assert_array_equal(a.final_point, b.final_point)


# ----------------------------------------------------------------------------- the formulas
@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(0, 5),
    st.integers(0, 2**31),
    st.sampled_from(SPACES),
    st.floats(-50, -0.01),
)
def test_sign_flip_and_scale_multiply_the_own_updates(k, h, seed, space, factor):
    E = riemfl.Euclidean(5, 2)
    own, honest = _stacks(seed, k, h)
    rng = np.random.default_rng(0)
    flipped = SignFlip(factor).forge(E, np.zeros((5, 2)), own, honest, rng, space)
    scaled = Scale(-factor).forge(E, np.zeros((5, 2)), own, honest, rng, space)
    np.testing.assert_array_equal(flipped, factor * own)
    np.testing.assert_array_equal(scaled, -factor * own)
    np.testing.assert_array_equal(SignFlip().forge(E, own[0], own, honest, rng, space), -own)
    np.testing.assert_array_equal(Scale().forge(E, own[0], own, honest, rng, space), 10 * own)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(0, 6), st.integers(0, 2**31), st.sampled_from(SPACES))
def test_alie_and_ipm_use_the_honest_mean_and_deviation(k, h, seed, space):
    E = riemfl.Euclidean(5, 2)
    own, honest = _stacks(seed, k, h)
    ref = honest if h else own  # no honest participant: the attackers' own updates
    mean = ref.sum(0) / len(ref)
    std = np.sqrt(((ref - mean) ** 2).sum(0) / len(ref))
    n, f = k + h, k
    s = max(int(n / 2 + 1) - f, 1)
    z = NormalDist().inv_cdf((n - s) / n) if n > 1 else 0.0
    rng = np.random.default_rng(0)
    alie = ALittleIsEnough().forge(E, np.zeros((5, 2)), own, honest, rng, space)
    np.testing.assert_allclose(alie, np.broadcast_to(mean - z * std, own.shape), atol=1e-12)
    fixed = ALittleIsEnough(z=1.5).forge(E, np.zeros((5, 2)), own, honest, rng, space)
    np.testing.assert_allclose(fixed, np.broadcast_to(mean - 1.5 * std, own.shape), atol=1e-12)
    ipm = InnerProductManipulation(0.5).forge(E, np.zeros((5, 2)), own, honest, rng, space)
    np.testing.assert_allclose(ipm, np.broadcast_to(-0.5 * mean, own.shape), atol=1e-12)
    default = make_attack("ipm").forge(E, np.zeros((5, 2)), own, honest, rng, space)
    np.testing.assert_allclose(default, np.broadcast_to(-100 * mean, own.shape), atol=1e-10)


@pytest.mark.parametrize("space", SPACES)
def test_a_random_point_update_carries_the_point_drawn(space):
    E = riemfl.Euclidean(5, 2)
    anchor = np.arange(10.0).reshape(5, 2)
    own, honest = _stacks(1, 3, 2)
    forged = RandomPoint().forge(E, anchor, own, honest, np.random.default_rng(9), space)
    q = E.random_point(3, rng=np.random.default_rng(9))
    np.testing.assert_allclose(forged, q - anchor, atol=1e-14)  # Log_x(q) = q - x, flat


def test_alie_z_on_a_known_case():
    # n = 50, f = 12: s = floor(26) - 12 = 14 supporters, Phi(z) = (50 - 14)/50 = 0.72
    assert alie_z(50, 12) == pytest.approx(0.5828415, abs=1e-6)  # normal table
    # an attacker majority (s = floor(6) - 8 < 1) takes s = 1: Phi(z) = 9/10
    assert alie_z(10, 8) == pytest.approx(1.2815516, abs=1e-6)
    assert alie_z(2, 1) == 0.0  # s = 1, Phi(z) = 1/2
    assert alie_z(1, 1) == 0.0  # a lone participant


# ----------------------------------------------------------------------------- validity
@pytest.mark.parametrize("manifold", [riemfl.Stiefel(6, 3), riemfl.Sphere(5)])
@pytest.mark.parametrize("name", ATTACK_NAMES)
def test_forged_tangent_updates_are_tangent(manifold, name):
    rng = np.random.default_rng(3)
    x = manifold.random_point(rng=rng)
    stack = manifold.random_tangent(np.broadcast_to(x, (7, *x.shape)), rng=rng)
    own, honest = stack[:2], stack[2:]
    forged = make_attack(name).forge(manifold, x, own, honest, rng, "tangent")
    assert forged.shape == own.shape
    for row in forged:
        manifold.check_tangent(x, row, atol=1e-12)
    assert np.abs(forged).max() > 0


def test_the_projection_is_what_makes_alie_tangent():
    """The coordinate-wise deviation leaves the tangent space; forge projects it back."""
    M = riemfl.Stiefel(6, 3)
    rng = np.random.default_rng(4)
    x = M.random_point(rng=rng)
    stack = M.random_tangent(np.broadcast_to(x, (6, *x.shape)), rng=rng)
    raw = ALittleIsEnough().propose(M, x, stack[:2], stack[2:], rng, "tangent")
    with pytest.raises(NotOnManifoldError):
        M.check_tangent(x, raw[0], atol=1e-8)
    forged = ALittleIsEnough().forge(M, x, stack[:2], stack[2:], rng, "tangent")
    np.testing.assert_allclose(forged, M.to_tangent(x, raw), atol=0)


@pytest.mark.parametrize("manifold", [riemfl.Stiefel(6, 3), riemfl.Sphere(5)])
def test_random_points_are_on_the_manifold(manifold):
    rng = np.random.default_rng(5)
    x = manifold.random_point(rng=rng)
    own = np.zeros((4, *x.shape))
    ambient = RandomPoint().forge(manifold, x, own, own[:0], np.random.default_rng(6), "ambient")
    manifold.check_point(x + ambient, atol=1e-12)  # the ambient upload x + (q - x) = q
    if isinstance(manifold, riemfl.Sphere):  # Log reaches any non-antipodal point
        tangent = RandomPoint().forge(
            manifold, x, own, own[:0], np.random.default_rng(6), "tangent"
        )
        q = manifold.exp(np.broadcast_to(x, tangent.shape), tangent)
        np.testing.assert_allclose(q, x + ambient, atol=1e-12)


def test_attacks_run_on_torch_tensors():
    torch = importorskip("torch")
    E = riemfl.Euclidean(5, 2)
    own, honest = _stacks(2, 2, 4)
    anchor = np.ones((5, 2))
    for name in ATTACK_NAMES:
        ref = make_attack(name).forge(E, anchor, own, honest, np.random.default_rng(1), "tangent")
        got = make_attack(name).forge(
            E,
            torch.from_numpy(anchor),
            torch.from_numpy(own),
            torch.from_numpy(honest),
            np.random.default_rng(1),
            "tangent",
        )
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
        np.testing.assert_allclose(got.numpy(), ref, atol=1e-12, err_msg=name)


# ----------------------------------------------------------------------------- the attackers
@settings(max_examples=30, deadline=None)
@given(st.floats(0, 0.99), st.integers(1, 40), st.integers(0, 2**31))
def test_the_attackers_are_a_seeded_uniform_draw(fraction, n, seed):
    b = Byzantine(fraction)
    clients = b.clients(n, seed)
    count = round(fraction * n)
    assert len(clients) == count and len(set(clients.tolist())) == count
    assert np.all(np.diff(clients) > 0) and (count == 0 or 0 <= clients[0] <= clients[-1] < n)
    stream = np.random.SeedSequence(seed).spawn(5)[4]  # the run's "byzantine" stream
    direct = np.random.default_rng(stream).choice(n, size=count, replace=False)
    np.testing.assert_array_equal(clients, np.sort(direct))
    np.testing.assert_array_equal(Byzantine(fraction, "alie").clients(n, seed), clients)


def test_another_seed_chooses_other_attackers():
    b = Byzantine(0.3)
    assert not np.array_equal(b.clients(40, 1), b.clients(40, 2))
    assert b.describe(40, 1) == {
        "fraction": 0.3,
        "attack": {"name": "sign-flip", "factor": -1.0},
        "clients": b.clients(40, 1).tolist(),
    }


def test_the_attackers_are_recorded_in_the_history(stiefel_problem, tmp_path):
    b = Byzantine(0.34, "alie")
    h = run_sync(stiefel_problem, RFedProj(0.02, 2), 3, byzantine=b, options=RunOptions(seed=7))
    expected = b.describe(stiefel_problem.n_clients, 7)
    assert h.config["byzantine"] == expected and len(expected["clients"]) == 2
    assert expected["attack"] == {"name": "alie", "z": None}
    h.to_json(tmp_path / "history.json")
    saved = json.loads((tmp_path / "history.json").read_text())
    assert saved["config"]["byzantine"] == expected
    assert h.attacked == [0, 2, 2, 2]  # full participation: both attackers every round


# ----------------------------------------------------------------------------- runs
@pytest.mark.parametrize(
    "make", [lambda: RFedProj(0.02, 2), lambda: RFedAvg(0.02, 2, upload="tangent")]
)
def test_no_attacker_is_the_run_without_byzantine(stiefel_problem, make):
    kw = {"clients_per_round": 4, "batch_size": 3, "options": RunOptions(seed=2)}
    plain = run_sync(stiefel_problem, make(), 4, **kw)
    zero = run_sync(stiefel_problem, make(), 4, byzantine=Byzantine(0.0, "random-point"), **kw)
    _same_run(zero, plain)
    assert zero.attacked == [0] * 5 and zero.config["byzantine"]["clients"] == []


@pytest.mark.parametrize("name", ["rfedavg", "rfedavg-point", "rfedproj"])
def test_a_sign_flip_round_is_the_mean_of_honest_and_flipped_updates(euclidean_problem, name):
    P = euclidean_problem
    algorithm = {
        "rfedavg": RFedAvg(0.05, 3, upload="tangent"),
        "rfedavg-point": RFedAvg(0.05, 3),
        "rfedproj": RFedProj(0.05, 3),
    }[name]
    x0 = initial_point(P, 0)
    b = Byzantine(0.4)
    attackers = b.clients(P.n_clients, 0)
    h = run_sync(P, algorithm, 1, x0=x0, byzantine=b)
    # the hand replay: every client's honest step, the attackers' updates reversed
    server, clients = algorithm.init(P, x0)
    message = algorithm.broadcast(server, 0)
    ctx = ClientContext(P, np.arange(P.n_clients))
    (upload,) = algorithm.client_step(ctx, 0, message, clients)[0].values()
    start = P.manifold.project(x0) if name == "rfedproj" else x0
    updates = upload if name == "rfedavg" else upload - start  # flat: R^{-1}_x(z) = z - x
    updates[attackers] *= -1
    np.testing.assert_allclose(h.final_point, start + updates.mean(0), rtol=0, atol=1e-13)
    assert len(attackers) == 2 and h.attacked == [0, 2]


@pytest.mark.parametrize("name", ["random-point", "alie"])
def test_a_resumed_run_with_attackers_is_bit_identical(stiefel_problem, tmp_path, name):
    P = stiefel_problem
    kw = {"clients_per_round": 4, "byzantine": Byzantine(0.34, name)}
    full = run_sync(P, RFedSVRG(0.02, 2, upload="tangent"), 6, options=RunOptions(seed=4), **kw)
    saved = RunOptions(seed=4, checkpoint=tmp_path / "run.rfl", checkpoint_every=3)
    run_sync(P, RFedSVRG(0.02, 2, upload="tangent"), 3, options=saved, **kw)
    resumed = run_sync(P, RFedSVRG(0.02, 2, upload="tangent"), 6, options=saved, **kw)
    _same_run(resumed, full)
    assert resumed.attacked == full.attacked and sum(full.attacked) > 0
    plain = run_sync(P, RFedSVRG(0.02, 2, upload="tangent"), 6, options=RunOptions(seed=4))
    assert not np.array_equal(plain.final_point, full.final_point)  # the attack acts
    other = {**kw, "byzantine": Byzantine(0.5, name)}
    with pytest.raises(CheckpointError, match="another run"):
        run_sync(P, RFedSVRG(0.02, 2, upload="tangent"), 6, options=saved, **other)


@pytest.mark.parametrize(
    "make",
    [
        lambda: RFedProj(0.02, 2),
        lambda: RFedAvg(0.02, 2, upload="tangent"),
        lambda: RFedAvg(0.02, 2),  # point uploads: the forged ones are retractions, on M
    ],
)
@pytest.mark.parametrize("name", ATTACK_NAMES)
def test_forged_uploads_pass_every_check(stiefel_problem, make, name):
    h = run_sync(stiefel_problem, make(), 2, byzantine=Byzantine(0.5, name))
    assert not h.warnings and h.attacked == [0, 3, 3]
    stiefel_problem.manifold.check_point(h.final_point)


class _Poisoned:
    """An executor whose reply carries a NaN in the rows of the clients ``bad`` (uploads that
    only the round's checks can catch)."""

    def __init__(self, inner: StackedClients, bad: set[int]) -> None:
        self.inner, self.bad = inner, bad

    def run_phase(self, r, phase, message, active, batches):
        reply = self.inner.run_phase(r, phase, message, active, batches)
        rows = [j for j, c in enumerate(active[reply.served]) if int(c) in self.bad]
        for v in reply.uploads.values():
            v[rows] = np.nan
        return reply

    def accept(self, phase, active, kept):
        self.inner.accept(phase, active, kept)

    def finish(self, message, survivors):
        self.inner.finish(message, survivors)

    def state_dict(self):
        return self.inner.state_dict()

    def load_state_dict(self, state):
        self.inner.load_state_dict(state)


class _Spy(Attackers):
    """Attackers that record the phases they forge in."""

    phases: list[int]

    def apply(self, manifold, rule, message, phase, senders, uploads):
        self.phases = [*getattr(self, "phases", []), phase]
        return super().apply(manifold, rule, message, phase, senders, uploads)


def _rounds(problem, algorithm, attack, wrap=lambda inner: inner):
    return round_steps(problem, algorithm, 0, wrap, attack=attack)


def test_an_attacker_whose_upload_fails_the_checks_is_dropped_not_forged(stiefel_problem):
    """The checks run on the honest uploads, before the attack."""
    P, algorithm = stiefel_problem, RFedProj(0.02, 2)
    attack = Byzantine(0.5, "ipm").attackers(algorithm, P.n_clients, 0)
    bad = int(attack.clients[0])
    steps = _rounds(P, algorithm, attack, lambda inner: _Poisoned(inner, {bad}))
    with pytest.warns(ClientDroppedWarning, match=f"client {bad} dropped"):
        steps.advance(1)
    assert steps.row()["attacked"] == 2 and steps.row()["participants"] == 5
    assert np.isfinite(steps.output()).all()


def test_only_the_model_phase_is_forged(stiefel_problem):
    P, algorithm = stiefel_problem, RFedSVRG(0.02, 2, upload="tangent")
    plan = Byzantine(0.5, "scale").attackers(algorithm, P.n_clients, 0)
    spy = _Spy(plan.attack, plan.clients, plan.rng, plan.space, plan.phase)
    steps = _rounds(P, algorithm, spy)
    steps.advance(1)
    steps.advance(2)
    assert spy.phases == [1, 1] and steps.row()["attacked"] == 3


def test_forging_replaces_the_attackers_rows_only(stiefel_problem):
    P, algorithm = stiefel_problem, RFedProj(0.02, 2)
    server, _ = algorithm.init(P, initial_point(P, 0))
    message = algorithm.broadcast(server, 0)
    zhat = message["px"] + 0.1 * np.random.default_rng(0).normal(size=(6, 7, 3))
    senders = np.array([0, 1, 2, 3, 4, 5])
    for name in ("random-point", "sign-flip"):
        attack = Attackers(make_attack(name), np.array([1, 4]), np.random.default_rng(0), "ambient")
        out = attack.apply(P.manifold, algorithm, message, 0, senders, {"x": zhat})["x"]
        np.testing.assert_array_equal(out[[0, 2, 3, 5]], zhat[[0, 2, 3, 5]])
        if name == "random-point":  # the ambient upload of P(x^r) + (q - P(x^r)) is q
            P.manifold.check_point(out[[1, 4]], atol=1e-12)
        else:
            np.testing.assert_allclose(out[[1, 4]], 2 * message["px"] - zhat[[1, 4]], atol=1e-15)
        assert attack.attacked == 2


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5, float("nan"), True, "0.2"])
def test_a_fraction_outside_0_1_is_refused(fraction):
    with pytest.raises(ParameterError, match="Byzantine: fraction"):
        Byzantine(fraction)


def test_unknown_attacks_and_bad_parameters_are_refused():
    with pytest.raises(ParameterError, match="unknown attack 'flip'"):
        make_attack("flip")
    with pytest.raises(ParameterError, match="unknown attack"):
        Byzantine(0.2, "flip")
    with pytest.raises(ParameterError, match="must be a name of"):
        Byzantine(0.2, 3)
    with pytest.raises(ParameterError, match="SignFlip: factor"):
        SignFlip(2.0)
    with pytest.raises(ParameterError, match="space must be one of"):
        SignFlip().forge(
            riemfl.Euclidean(2), np.zeros(2), np.ones((1, 2)), np.ones((0, 2)), None, "x"
        )


class _Undeclared(RFedProj):
    privacy_space = None


def test_a_rule_without_declared_updates_and_privacy_are_refused(stiefel_problem):
    with pytest.raises(ParameterError, match="privacy_space"):
        run_sync(stiefel_problem, _Undeclared(0.02, 2), 1, byzantine=Byzantine(0.3))
    with pytest.raises(ParameterError, match="byzantine with privacy"):
        run_sync(
            stiefel_problem,
            RFedProj(0.02, 2),
            1,
            byzantine=Byzantine(0.3),
            privacy=DPSettings(1.0, 0.0),
        )

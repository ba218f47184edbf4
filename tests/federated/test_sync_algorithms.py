"""Identities of the synchronous algorithms (Zhang et al. 2024, Sec. 3; structural claims 1-5)."""

from __future__ import annotations

import numpy as np
import pytest
from _problems import QuadraticProblem

import riemfl
from riemfl.errors import ParameterError
from riemfl.federated import (
    ClientContext,
    Operators,
    RFedAvg,
    RFedProj,
    RFedProx,
    RFedSVRG,
    initial_point,
    run_sync,
)
from riemfl.manifolds.base import Manifold


def _rounds_by_hand(problem, algorithm, x0, rounds):
    """Run the algorithm's rules directly (no engine): yields (previous server, server, uploads,
    client rows after the round's client step, client rows after client_finish)."""
    M = problem.manifold
    server, clients = algorithm.init(problem, x0)
    ctx = ClientContext(problem, np.arange(problem.n_clients))
    for _ in range(rounds):
        for phase in range(algorithm.n_phases):
            message = algorithm.broadcast(server, phase)
            uploads, clients = algorithm.client_step(ctx, phase, message, clients)
            old = server
            server = algorithm.server_step(M, server, phase, message, uploads)
        stepped = clients
        clients = algorithm.client_finish(algorithm.broadcast(server, 0), clients)
        yield old, server, uploads, stepped, clients


# ----------------------------------------------------------------------------- RFedProj (Alg. 1)
def test_rfedproj_iterates_stay_on_the_manifold(stiefel_problem):
    P = stiefel_problem
    M = P.manifold
    alg = RFedProj(step_size=0.02, local_steps=5)
    x0 = initial_point(P, 0)
    for _, server, uploads, _, _ in _rounds_by_hand(P, alg, x0, 4):
        M.check_point(server["px"], atol=1e-13)
        # the broadcast x^{r+1} and the uploads are not on M (Alg. 1 line 13): the projection is
        assert np.linalg.norm(server["x"] - server["px"]) > 1e-8
        M.check_point(M.project(uploads["x"]), atol=1e-13)


def test_rfedproj_equals_its_compact_form_and_corrections_average_to_zero(stiefel_problem):
    """x^{r+1} = P(x^r) - eta_g eta sum_t gbar_t (eq. (5)); c_i = gbar - g_i; mean c = 0."""
    P = stiefel_problem
    eta, tau, eta_g = 0.02, 4, 1.7
    alg = RFedProj(step_size=eta, local_steps=tau, global_step_size=eta_g)
    for old, server, _, stepped, clients in _rounds_by_hand(P, alg, initial_point(P, 3), 5):
        grad_sums = stepped["grad_sum"]
        np.testing.assert_array_equal(clients["grad_sum"], 0.0)  # spent by client_finish
        compact = old["px"] - eta_g * eta * grad_sums.mean(0)
        np.testing.assert_allclose(server["x"], compact, atol=1e-13)
        c = clients["correction"]
        np.testing.assert_allclose(c.mean(0), 0.0, atol=1e-12)
        g_i = grad_sums / tau
        np.testing.assert_allclose(c, g_i.mean(0) - g_i, atol=1e-12)


def test_rfedproj_tau_one_full_gradients_is_projected_gradient_descent(stiefel_problem):
    """eq. (7): one local step, full gradients -> x = P(P(x) - eta eta_g grad f(P(x)))."""
    P = stiefel_problem
    M = P.manifold
    eta, eta_g = 0.03, 1.5
    x0 = initial_point(P, 5)
    h = run_sync(P, RFedProj(eta, local_steps=1, global_step_size=eta_g), 25, x0=x0)
    x = M.project(x0)
    for _ in range(25):
        x = M.project(x - eta * eta_g * P.rgrad(x))
    np.testing.assert_allclose(h.final_point, x, atol=1e-12)


def test_rfedproj_on_euclidean_space_is_scaffold_like(euclidean_problem):
    P = euclidean_problem
    n, eta, tau, eta_g = P.n_clients, 0.01, 3, 0.8
    x = initial_point(P, 1)
    h = run_sync(P, RFedProj(eta, tau, eta_g), 6, x0=x)
    c = np.zeros((n, *x.shape))
    ids = np.arange(n)
    for _ in range(6):
        z = np.broadcast_to(x, c.shape).copy()
        gsum = np.zeros_like(c)
        for _ in range(tau):
            g = P.client_egrads(ids, z)
            gsum += g
            z = z - eta * (g + c)
        x_new = x + eta_g * (z.mean(0) - x)
        c = (x - x_new) / (eta_g * eta * tau) - gsum / tau
        x = x_new
    np.testing.assert_allclose(h.final_point, x, atol=1e-12)


# ----------------------------------------------------------------------------- Euclidean baselines
def _fedprox_by_hand(P, x, eta, tau, mu, rounds):
    ids = np.arange(P.n_clients)
    for _ in range(rounds):
        z = np.broadcast_to(x, (P.n_clients, *x.shape)).copy()
        for _ in range(tau):
            z = z - eta * (P.client_egrads(ids, z) + mu * (z - x))
        x = z.mean(0)
    return x


@pytest.mark.parametrize("operators", ["approximate", "exact"])
def test_rfedavg_and_rfedprox_on_euclidean_space_are_fedavg_and_fedprox(
    euclidean_problem, operators
):
    P = euclidean_problem
    x0 = initial_point(P, 2)
    avg = run_sync(P, RFedAvg(0.01, 4, operators=operators), 5, x0=x0)
    np.testing.assert_allclose(
        avg.final_point, _fedprox_by_hand(P, x0, 0.01, 4, 0.0, 5), atol=1e-12
    )
    prox = run_sync(P, RFedProx(0.01, 4, mu=0.7, operators=operators), 5, x0=x0)
    np.testing.assert_allclose(
        prox.final_point, _fedprox_by_hand(P, x0, 0.01, 4, 0.7, 5), atol=1e-12
    )


def test_rfedprox_pulls_towards_the_global_model_not_away(stiefel_problem):
    """The correct sign: the proximal term shrinks the client drift |x_i,tau - x^r|."""
    P = stiefel_problem
    x0 = initial_point(P, 4)
    ctx = ClientContext(P, np.arange(P.n_clients))

    def drift(mu):
        alg = RFedProx(0.05, 8, mu=mu)
        server, clients = alg.init(P, x0)
        uploads, _ = alg.client_step(ctx, 0, alg.broadcast(server, 0), clients)
        return np.linalg.norm(uploads["x"] - x0, axis=(1, 2))

    assert np.all(drift(5.0) < drift(0.0))


def test_rfedsvrg_on_euclidean_space_is_svrg_with_anchor_gradients(euclidean_problem):
    P = euclidean_problem
    ids, eta, tau = np.arange(P.n_clients), 0.01, 3
    x = initial_point(P, 6)
    h = run_sync(P, RFedSVRG(eta, tau), 4, x0=x)
    for _ in range(4):
        anchor = P.client_egrads(ids, np.broadcast_to(x, (P.n_clients, *x.shape)))
        z = np.broadcast_to(x, anchor.shape).copy()
        for _ in range(tau):
            z = z - eta * (P.client_egrads(ids, z) - anchor + anchor.mean(0))
        x = z.mean(0)
    np.testing.assert_allclose(h.final_point, x, atol=1e-12)


@pytest.mark.parametrize("operators", ["approximate", "exact"])
def test_baselines_keep_the_global_model_on_the_manifold(operators):
    P = QuadraticProblem(riemfl.Stiefel(6, 2), n=4)
    for alg in (RFedAvg(0.02, 3, operators), RFedProx(0.02, 3, 0.5, operators)):
        h = run_sync(P, alg, 3)
        P.manifold.check_point(h.final_point, atol=1e-10)
    h = run_sync(P, RFedSVRG(0.02, 3, operators), 3)
    P.manifold.check_point(h.final_point, atol=1e-10)
    assert h.config["algorithm"]["operators"] == operators


# ----------------------------------------------------------------------------- accounting
def test_uplink_accounting_rfedsvrg_uploads_twice_rfedproj(stiefel_problem):
    P = stiefel_problem
    d, k = P.manifold.point_shape
    proj = run_sync(P, RFedProj(0.02, 3), 4)
    svrg = run_sync(P, RFedSVRG(0.02, 3), 4)
    avg = run_sync(P, RFedAvg(0.02, 3), 4)
    assert proj.uplink_matrices == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert avg.uplink_matrices == proj.uplink_matrices
    assert svrg.uplink_matrices == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert proj.uplink_bytes[-1] == 4 * d * k * 8
    assert svrg.uplink_bytes[-1] == 2 * proj.uplink_bytes[-1]


# ----------------------------------------------------------------------------- any manifold
class _UnitColumns(Manifold):
    """A manifold written inside the test: matrices with unit-norm columns, retraction only."""

    def __init__(self, n, p):
        self.point_shape = (n, p)
        self.name = f"UnitColumns({n}, {p})"

    dim = property(lambda self: (self.point_shape[0] - 1) * self.point_shape[1])
    reach = 1.0
    diameter = property(lambda self: 2.0 * np.sqrt(self.point_shape[1]))
    injectivity_radius = np.pi

    def _project(self, a):
        return a / np.linalg.norm(a, axis=-2, keepdims=True)

    def _to_tangent(self, x, a):
        return a - x * np.sum(x * a, axis=-2, keepdims=True)

    def _retract(self, x, u):
        return self._project(x + u)

    def _inverse_retract(self, x, y):
        return y / np.sum(x * y, axis=-2, keepdims=True) - x

    def _random_point(self, batch_shape, rng):
        return self._project(rng.standard_normal(batch_shape + self.point_shape))

    def _point_violation(self, x):
        return "unit columns", float(np.max(np.abs(np.linalg.norm(x, axis=-2) - 1.0)))


@pytest.mark.parametrize("algorithm", ["rfedproj", "rfedavg", "rfedprox", "rfedsvrg"])
def test_every_algorithm_runs_on_a_manifold_written_by_the_user(algorithm):
    """kPCA-like objective on a user's manifold: every algorithm decreases the gradient norm."""
    M = _UnitColumns(6, 2)
    P = QuadraticProblem(M, n=4, p=10, seed=3)
    alg = {
        "rfedproj": RFedProj(0.01, 3),
        "rfedavg": RFedAvg(0.01, 3),
        "rfedprox": RFedProx(0.01, 3, mu=0.1),
        "rfedsvrg": RFedSVRG(0.01, 3),
    }[algorithm]
    h = run_sync(P, alg, 60)
    M.check_point(h.final_point, atol=1e-12)
    assert h.grad_norm[-1] < 0.5 * h.grad_norm[0]


def test_exact_operators_need_exp_and_log():
    P = QuadraticProblem(_UnitColumns(5, 2), n=3)
    with pytest.raises(ParameterError, match="exact operators need .*exp"):
        run_sync(P, RFedAvg(0.01, 2, operators="exact"), 1)


def test_rfedproj_needs_the_projection():
    class NoProjection(_UnitColumns):
        _project = Manifold._project

    P = QuadraticProblem(NoProjection(5, 2), n=3)
    with pytest.raises(ParameterError, match="RFedProj needs the metric projection"):
        run_sync(P, RFedProj(0.01, 2), 1)


def test_operators_record_which_transport_ran():
    assert Operators("exact").names(riemfl.Sphere(4))["transport"] == "parallel_transport"
    assert Operators("exact").names(riemfl.Stiefel(4, 2))["transport"] == "transport"
    assert Operators("approximate").names(riemfl.Sphere(4)) == {
        "retract": "retract",
        "inverse_retract": "inverse_retract",
        "transport": "transport",
    }


@pytest.mark.parametrize(
    "make",
    [
        lambda: RFedProj(0.0),
        lambda: RFedProj(np.nan),
        lambda: RFedProj(0.1, local_steps=0),
        lambda: RFedProj(0.1, local_steps=2.5),
        lambda: RFedProj(0.1, global_step_size=-1),
        lambda: RFedProx(0.1, mu=-0.1),
        lambda: RFedAvg(0.1, operators="fast"),
    ],
)
def test_bad_algorithm_parameters_raise(make):
    with pytest.raises(ParameterError):
        make()

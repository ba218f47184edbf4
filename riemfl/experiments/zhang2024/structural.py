"""Claims 2, 3 and 5 of the Zhang et al. 2024 reproduction: exact properties of Algorithm 1,
checked to 1e-12.

* claim 2: RFedProj equals its compact form (5), and the corrections c_i average to 0 (on the
  Fig. 1 problem, three rounds);
* claim 3: with tau = 1 and full gradients it is projected Riemannian gradient descent (7);
* claim 5: on R^{d x k} RFedAvg, RFedProx, RFedSVRG and RFedProj are FedAvg, FedProx, SVRG and a
  SCAFFOLD-like method (on a heterogeneous least-squares problem, against the Euclidean
  formulas written out here).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...federated import (
    ClientContext,
    RFedAvg,
    RFedProj,
    RFedProx,
    RFedSVRG,
    initial_point,
    run_sync,
)
from ...manifolds import Euclidean
from ...problems import FederatedProblem
from .claims import Claim
from .run import Problems

__all__ = ["structural_claims"]

#: the tolerance of every exact claim
EXACT = 1e-12


def structural_claims(problems: Problems) -> list[Claim]:
    """Claims 2, 3 and 5: exact identities, checked on the Fig. 1 problem and on R^{d x k}."""
    P = problems("kpca-mnist")
    eta = 1.0 / float(P.smoothness)
    return [_claim_compact_form(P, eta), _claim_prgd(P, eta), _claim_euclidean()]


def _claim_compact_form(P: FederatedProblem, eta: float, tau: int = 10) -> Claim:
    """Claim 2: compact form (5) and sum_i c_i = 0, over three rounds."""
    M = P.manifold
    alg = RFedProj(eta, tau)
    server, clients = alg.init(P, initial_point(P, 0))
    ctx = ClientContext(P, np.arange(P.n_clients))
    form_err = mean_c = 0.0
    for _ in range(3):
        message = alg.broadcast(server, 0)
        uploads, clients = alg.client_step(ctx, 0, message, clients)
        new = alg.server_step(M, server, 0, message, uploads)
        compact = server["px"] - eta * clients["grad_sum"].mean(0)
        form_err = max(form_err, float(np.max(np.abs(new["x"] - compact))))
        scale = float(np.max(np.abs(clients["grad_sum"]))) / tau
        clients = alg.client_finish(alg.broadcast(new, 0), clients)
        mean_c = max(mean_c, float(np.max(np.abs(clients["correction"].mean(0)))) / scale)
        server = new
    return Claim(
        2,
        "Algorithm 1 equals its compact form (5); the corrections c_i average to 0",
        form_err <= EXACT and mean_c <= EXACT,
        f"max |x^(r+1) - (P(x^r) - eta sum_t gbar_t)| = {form_err:.1e}, "
        f"max |mean_i c_i| / |g| = {mean_c:.1e} (3 rounds, Fig. 1 problem)",
    )


def _claim_prgd(P: FederatedProblem, eta: float, rounds: int = 20) -> Claim:
    """Claim 3: tau = 1 with full gradients is projected Riemannian gradient descent (7)."""
    M = P.manifold
    x0 = initial_point(P, 0)
    h = run_sync(P, RFedProj(eta, 1), rounds, x0=x0)
    x = M.project(x0)
    for _ in range(rounds):
        x = M.project(x - eta * P.rgrad(x))
    err3 = float(np.max(np.abs(h.final_point - x)))
    return Claim(
        3,
        "tau = 1 with full gradients is projected Riemannian gradient descent (7)",
        err3 <= EXACT,
        f"max |RFedProj - C-PRGD| after {rounds} rounds = {err3:.1e}",
    )


class _LeastSquares(FederatedProblem):
    """f_i(x) = 1/2 |A_i x - B_i|^2 on R^{d x k} (heterogeneous clients), for claim 5."""

    name = "least-squares"

    def __init__(self, n: int = 5, m: int = 12, d: int = 6, k: int = 2, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.manifold = Euclidean(d, k)
        self.n_clients = n
        self.A = rng.normal(size=(n, m, d)) * np.arange(1, n + 1)[:, None, None] / n
        self.B = rng.normal(size=(n, m, k))

    def client_egrads(self, clients, xs, batches=None):
        a = self.A[np.asarray(clients)]
        return a.transpose(0, 2, 1) @ (a @ xs - self.B[np.asarray(clients)])

    def client_losses(self, clients, xs):
        r = self.A[np.asarray(clients)] @ xs - self.B[np.asarray(clients)]
        return 0.5 * np.sum(r * r, axis=(1, 2))


class _Formulas:
    """The Euclidean methods written out on ``P`` from ``x0``: each returns x after ``rounds``
    rounds of ``tau`` local steps of size ``eta`` with every client taking part."""

    def __init__(self, P: _LeastSquares, x0: np.ndarray, rounds: int, eta: float, tau: int):
        self.P, self.x0, self.rounds, self.eta, self.tau = P, x0, rounds, eta, tau
        self.ids = np.arange(P.n_clients)
        self.shape = (P.n_clients, *x0.shape)

    def grad(self, z: np.ndarray) -> np.ndarray:
        return self.P.client_egrads(self.ids, z)

    def local(self, x: np.ndarray, direction: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """Every client's ``tau`` steps from ``x`` along ``-direction``."""
        z = np.broadcast_to(x, self.shape).copy()
        for _ in range(self.tau):
            z = z - self.eta * direction(z)
        return z

    def fedprox(self, mu: float) -> np.ndarray:
        """FedProx with proximal weight ``mu`` (FedAvg: ``mu = 0``)."""
        x = self.x0
        for _ in range(self.rounds):
            x = self.local(x, lambda z, x=x: self.grad(z) + mu * (z - x)).mean(0)
        return x

    def svrg(self) -> np.ndarray:
        """Federated SVRG: each local gradient corrected by the round's anchor gradients."""
        x = self.x0
        for _ in range(self.rounds):
            anchor = self.grad(np.broadcast_to(x, self.shape))
            x = self.local(x, lambda z, a=anchor: self.grad(z) - a + a.mean(0)).mean(0)
        return x

    def scaffold_like(self) -> np.ndarray:
        """RFedProj's Euclidean form: a correction c_i from the previous round's drift."""
        eta, tau = self.eta, self.tau
        x, c = self.x0, np.zeros(self.shape)
        for _ in range(self.rounds):
            z, gsum = np.broadcast_to(x, self.shape).copy(), np.zeros(self.shape)
            for _ in range(tau):
                g = self.grad(z)
                gsum += g
                z = z - eta * (g + c)
            x_new = z.mean(0)
            c = (x - x_new) / (eta * tau) - gsum / tau
            x = x_new
        return x


def _claim_euclidean() -> Claim:
    """Claim 5: on R^{d x k} the rules are FedAvg / FedProx / SCAFFOLD-like / SVRG."""
    err5 = _euclidean_reduction_error()
    return Claim(
        5,
        "on Euclidean space the algorithms are FedAvg, FedProx, a SCAFFOLD-like method and SVRG",
        err5 <= EXACT,
        f"max deviation from the Euclidean formulas over 4 algorithms = {err5:.1e}",
    )


def _euclidean_reduction_error(rounds: int = 4, eta: float = 0.05, tau: int = 3) -> float:
    """Claim 5: the largest deviation of the four algorithms' final points on R^{d x k} from the
    Euclidean formulas."""
    P = _LeastSquares()
    x0 = initial_point(P, 0)
    formulas = _Formulas(P, x0, rounds, eta, tau)
    reductions = (
        (RFedAvg(eta, tau), formulas.fedprox(0.0)),
        (RFedProx(eta, tau, mu=0.5), formulas.fedprox(0.5)),
        (RFedSVRG(eta, tau), formulas.svrg()),
        (RFedProj(eta, tau), formulas.scaffold_like()),
    )
    errors = [
        np.max(np.abs(run_sync(P, algorithm, rounds, x0=x0).final_point - x))
        for algorithm, x in reductions
    ]
    return float(max(errors))

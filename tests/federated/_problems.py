"""Small problems for the federated tests (self-contained: no dependency on riemfl.problems
beyond the FederatedProblem interface, so that these tests isolate the algorithms and engine)."""

from __future__ import annotations

import numpy as np

from riemfl.problems.base import FederatedProblem


class QuadraticProblem(FederatedProblem):
    r"""f_i(x) = -1/2 <x, C_i x> + <b_i, x> on any manifold with matrix points (d, k).

    C_i = A_i^T A_i with A_i of p rows (heterogeneous scales), so on Stiefel with b = 0 it is
    kPCA. Per-sample losses f_il = -(p/2)|x^T a_l|^2 + <b_i, x> make mini-batches possible.
    """

    name = "quadratic"

    def __init__(self, manifold, n=6, p=8, seed=0, linear=0.0):
        rng = np.random.default_rng(seed)
        d, k = manifold.point_shape
        self.manifold = manifold
        self.n_clients = n
        self.A = np.stack([rng.normal(0, np.sqrt(2 * (i + 1) / n), (p, d)) for i in range(n)])
        self.C = self.A.transpose(0, 2, 1) @ self.A
        self.b = linear * rng.normal(size=(n, d, k))
        self.n_samples = (p,) * n
        self.p = p

    def client_egrads(self, clients, xs, batches=None):
        clients = np.asarray(clients)
        if batches is None:
            return -self.C[clients] @ xs + self.b[clients]
        a = np.take_along_axis(self.A[clients], batches[:, :, None], axis=1)  # (m, b, d)
        scale = self.p / batches.shape[1]
        return -scale * a.transpose(0, 2, 1) @ (a @ xs) + self.b[clients]

    def client_losses(self, clients, xs):
        clients = np.asarray(clients)
        quad = np.einsum("ndk,nde,nek->n", xs, self.C[clients], xs)
        return -0.5 * quad + np.einsum("ndk,ndk->n", self.b[clients], xs)


class LeastSquares(FederatedProblem):
    """f_i(x) = 1/2 |x - c_i|^2 on R^d (convex; optimum the mean of the c_i)."""

    name = "least-squares"

    def __init__(self, d=4, n=5, seed=0):
        import riemfl

        self.manifold = riemfl.Euclidean(d)
        self.n_clients = n
        self.c = np.random.default_rng(seed).normal(size=(n, d))
        self.n_samples = None
        self.optimum = 0.5 * float(np.mean(np.sum((self.c - self.c.mean(0)) ** 2, axis=1)))

    def client_egrads(self, clients, xs, batches=None):
        return xs - self.c[np.asarray(clients)]

    def client_losses(self, clients, xs):
        return 0.5 * np.sum((xs - self.c[np.asarray(clients)]) ** 2, axis=-1)


class FlakyProblem(FederatedProblem):
    """Wraps a problem; the client oracle misbehaves for chosen clients (metrics stay exact).

    ``mode``: "raise" (an exception), "nan" (a NaN gradient), "shape" (a wrong-shaped
    gradient). ``only_stacked`` makes every stacked call (more than one client) fail, which
    forces the engine's one-client-at-a-time path without dropping anyone.
    """

    def __init__(self, inner, bad=(), mode="raise", only_stacked=False):
        self.inner = inner
        self.manifold = inner.manifold
        self.n_clients = inner.n_clients
        self.n_samples = inner.n_samples
        self.optimum = inner.optimum
        self.name = "flaky-" + inner.name
        self.bad = set(bad)
        self.mode = mode
        self.only_stacked = only_stacked

    def client_egrads(self, clients, xs, batches=None):
        if self.only_stacked and len(clients) > 1:
            raise RuntimeError("stacked call refused")
        g = self.inner.client_egrads(clients, xs, batches)
        hit = [j for j, i in enumerate(clients) if int(i) in self.bad]
        if hit and self.mode == "raise":
            raise RuntimeError(f"client oracle failed for {[clients[j] for j in hit]}")
        if hit and self.mode == "nan":
            g = g.copy()
            g[hit] = np.nan
        if hit and self.mode == "shape":
            return g[..., :-1]
        return g

    def client_losses(self, clients, xs):
        return self.inner.client_losses(clients, xs)

    def egrad(self, x):
        return self.inner.egrad(x)

    def loss(self, x):
        return self.inner.loss(x)


class FaultyTrainer:
    """A trainer whose clients in ``bad`` fail with the fault ``mode``, at each arrival with
    probability ``rate`` (drawn from the client's generator: runs stay reproducible)."""

    run_state_attributes = ("calls",)  # a counter, not a setting of the local training

    def __init__(self, inner, bad=(), mode="raise", rate=1.0):
        self.inner, self.bad, self.mode, self.rate = inner, set(bad), mode, rate
        self.manifold, self.n_clients = inner.manifold, inner.n_clients
        self.calls = 0

    def n_samples(self, i):
        return self.inner.n_samples(i)

    def num_batches(self, i, epochs=None):
        return self.inner.num_batches(i, epochs)

    def evaluate(self, x):
        return self.inner.evaluate(x)

    def train(self, i, start, rng, epochs=None):
        self.calls += 1
        hit = i in self.bad and rng.random() < self.rate
        out = self.inner.train(i, start, rng, epochs)
        if not hit:
            return out
        if self.mode == "raise":
            raise RuntimeError(f"client {i} crashed")
        if self.mode == "nan":
            return np.full_like(out, np.nan)
        if self.mode == "inf":
            return np.full_like(out, np.inf)
        if self.mode == "complex":
            return out + 1e-3j
        if self.mode == "shape":
            return out[..., :-1]
        if self.mode == "int":
            return out.astype(np.int64)
        if self.mode == "float32":  # the right model, in another dtype
            return out.astype(np.float32)
        raise AssertionError(self.mode)


def round_steps(problem, algorithm, seed, wrap=lambda inner: inner, **options):
    """The synchronous rounds of ``algorithm`` on ``problem`` from seed ``seed``'s initial point
    (the executor wrapped by ``wrap``; ``options``: RoundSteps' keywords, e.g. ``aggregator``,
    ``attack``, ``clients_per_round``)."""
    from riemfl.federated.engine import StackedClients, initial_point
    from riemfl.federated.faults import FaultRecorder
    from riemfl.federated.history import History
    from riemfl.federated.rounds import RoundSteps
    from riemfl.federated.seeds import SeedStreams

    server, clients = algorithm.init(problem, initial_point(problem, seed))
    dtype = algorithm.output(server).dtype
    return RoundSteps(
        algorithm,
        wrap(StackedClients(problem, algorithm, clients, dtype)),
        problem,
        server,
        lambda phase: algorithm.upload_shapes(problem, phase),
        SeedStreams(seed).generator("rounds"),
        FaultRecorder(History(config={})),
        dtype=dtype,
        **options,
    )

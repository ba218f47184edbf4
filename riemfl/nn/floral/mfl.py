r"""The algorithm of FLoRAL's theory: MFL by local SGD with the exponential-weights router.

Almansoori et al. 2024 analyse (Sec. 4, eqs. (4)-(5), App. A) not Algorithm 1 but local SGD on
the relaxed objective :math:`\min \sum_c \mathbb E_k[\pi^k_c f^k(w_c)]` with C **full** models
(no weight sharing) and a router set by exponential weights. Every client k keeps a copy
:math:`w^k_{c,t}` of every model and, with :math:`\eta_t = 1/(\mu(t + s))`:

.. math::

    w^k_{c,t+1} = \begin{cases} w^k_{c,t} - \eta_t g^k_{c,t}
        & (t + 1) \bmod H \ne 0 \\
        \hat{\mathbb E}_{k|c,\hat\pi_t}\bigl[w^k_{c,t} - \eta_t g^k_{c,t}\bigr]
        = \sum_{k'} \hat p^{k'}_{c,t}\,(w^{k'}_{c,t} - \eta_t g^{k'}_{c,t}) & \text{otherwise}
    \end{cases}

with :math:`\hat p^k_{c,t} = \hat\pi^k_{c,t} N^k / \sum_{k'} \hat\pi^{k'}_{c,t} N^{k'}`
(eq. (2) with the estimated routers, :math:`p(k) = N^k/N`), and at every synchronisation

.. math::

    \hat\pi^k_{c,t+1} \propto \exp\bigl(-\eta_t f^k(w_{c,t+1})\bigr)

the entropic mirror-descent step of App. C.1, eq. (34). Between synchronisations the routers do
not change. Initialisation: :math:`\hat\pi^k_0 = 1/C` and every client's copy of model c equal
to :math:`w_{c,0}` (the models differ between clusters: from equal models the C copies would
receive equal updates forever).

Choices where the paper leaves room, all options of :func:`run_mfl`:

* ``router="reset"`` is eq. (5) as printed (each synchronisation forgets the previous
  routers); ``"cumulative"`` keeps them, :math:`\hat\pi_{t+1} \propto \hat\pi_t
  \exp(-\eta_t f^k(w_{c,t+1}))` (exponential weights over the rounds, the form App. C.2
  relates to Algorithm 1's softmax-gradient router when it is not reset); ``"oracle"`` is the
  perfect router :math:`\hat\pi = \pi` (then :math:`\delta = 0` and MFL is per-cluster local
  SGD). ``router_scale`` multiplies the router's step (1: the paper's :math:`\eta_t`);
* eq. (5) prints :math:`f_c(w^k_{c,t+1})`, which is the same for every client and cannot
  route; App. C.1's (34) has the client's :math:`f^k(w_c)`, used here (full training loss);
* ``gradients="client"``: every copy takes the gradient of the client's own minibatch (C
  forward passes per step, the data a client holds); ``"cluster"``: copy c of client k takes a
  minibatch of a client drawn from the **true** :math:`p(\cdot|c)` at every synchronisation
  and kept for the round (:math:`i_t = i_{t_0}`), the unbiased oracle
  :math:`\mathbb E_{i|c}\nabla f^i = \nabla f_c` the proofs assume. Only with it is the
  mismatch a variance (Lemma A.2); with the clients' own gradients, the copies of clients routed
  to the wrong cluster pull the model towards their cluster: a bias, outside the theorems;
* the averaged iterate :math:`\hat w_{c,T} = \sum_{t<T} (t + s)^2 \tilde w_{c,t} / \sum_{t<T}
  (t + s)^2` of the virtual iterates :math:`\tilde w_{c,t} = \sum_k \hat p^k_{c,t} w^k_{c,t}`;
  neither the step size nor the average depends on T, so one run of T steps gives
  :math:`\hat w_{c,T'}` for every :math:`T' \le T` (``record_at``).

The problem is least squares (:class:`LeastSquaresClients`, from the synthetic linear task of
App. G.1 with an optional ridge and target noise): each :math:`f_c` is a quadratic, strongly
convex when the cluster's rows span the features (Assumption 4.2), with its exact minimiser,
:math:`\mu` and L. The bounds are in :mod:`riemfl.nn.floral.mfl_theory`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from ..._validation import integer, optional, real
from ...errors import DataError, ParameterError, ShapeError
from .mfl_theory import aggregation_weights, minimum_s, uniformity
from .synthetic import SyntheticTask

__all__ = [
    "MFL_ROUTERS",
    "MFL_GRADIENTS",
    "LeastSquaresClients",
    "least_squares_clients",
    "exp_weights",
    "MFLRun",
    "run_mfl",
    "match_clusters",
    "router_regret",
]

#: router rules of :func:`run_mfl`
MFL_ROUTERS = ("reset", "cumulative", "oracle")
#: gradient oracles of :func:`run_mfl`
MFL_GRADIENTS = ("client", "cluster")

_CHUNK = 256  # models per block in the gradient moments (bounds the memory)


@dataclass
class LeastSquaresClients:
    r"""Clients with :math:`f^k(w) = \frac{1}{2N^k}\|\tilde X_k w^\top - Y_k\|_F^2 +
    \frac\lambda2\|w\|_F^2`, :math:`w \in \mathbb R^{d_y \times p}`.

    Attributes
    ----------
    features : array (K, N_max, p)
        :math:`\tilde X_k` (the inputs with a column of ones for the bias), zero-padded.
    targets : array (K, N_max, d_y)
    n_samples : array (K,) of int
    clusters : array (K,) of int
        The true cluster of every client.
    n_clusters : int
    ridge : float
        :math:`\lambda \ge 0`.
    """

    features: np.ndarray
    targets: np.ndarray
    n_samples: np.ndarray
    clusters: np.ndarray
    n_clusters: int
    ridge: float = 0.0
    gram: np.ndarray = field(init=False, repr=False)
    cross: np.ndarray = field(init=False, repr=False)
    const: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        x, y = self.features, self.targets
        if x.ndim != 3 or y.ndim != 3 or x.shape[:2] != y.shape[:2]:
            raise ShapeError(f"features (K, N, p) and targets (K, N, d_y): {x.shape}, {y.shape}")
        n = self.n_samples.astype(np.float64)
        if (n < 1).any():
            raise DataError("LeastSquaresClients: every client needs training rows")
        self.gram = np.einsum("knp,knq->kpq", x, x) / n[:, None, None]
        self.cross = np.einsum("knp,kny->kpy", x, y) / n[:, None, None]
        self.const = 0.5 * np.einsum("kny,kny->k", y, y) / n

    @property
    def n_clients(self) -> int:
        return int(self.features.shape[0])

    @property
    def shape(self) -> tuple[int, int]:
        """(d_y, p): the shape of one model."""
        return int(self.targets.shape[2]), int(self.features.shape[2])

    def true_router(self) -> np.ndarray:
        """:math:`\\pi^k`: the one-hot true clusters, (K, C)."""
        return np.eye(self.n_clusters)[self.clusters]

    def true_weights(self) -> np.ndarray:
        """:math:`p^k_c = p(k|c)` of the true routers, (K, C)."""
        return aggregation_weights(self.true_router(), self.n_samples)

    def losses(self, w: np.ndarray) -> np.ndarray:
        """:math:`f^k(w_m)` for models ``w`` (M, d_y, p): shape (K, M)."""
        quad = 0.5 * np.einsum("myp,kpq,myq->km", w, self.gram, w)
        lin = np.einsum("myp,kpy->km", w, self.cross)
        ridge = 0.5 * self.ridge * np.einsum("myp,myp->m", w, w)
        return quad - lin + self.const[:, None] + ridge

    def cluster_losses(self, w: np.ndarray) -> np.ndarray:
        """:math:`f_c(w_m) = \\sum_k p^k_c f^k(w_m)` for the true clusters: shape (C, M)."""
        return self.true_weights().T @ self.losses(w)

    def cluster_hessians(self) -> np.ndarray:
        """:math:`\\sum_k p^k_c \\tilde X_k^\\top \\tilde X_k/N^k + \\lambda I` per true cluster
        (C, p, p): the Hessian of :math:`f_c` on every output row."""
        h = np.einsum("kc,kpq->cpq", self.true_weights(), self.gram)
        return h + self.ridge * np.eye(self.gram.shape[1])

    def curvature(self) -> tuple[np.ndarray, np.ndarray]:
        """(mu_c, L_c): the extreme eigenvalues of every true cluster's Hessian."""
        eig = np.linalg.eigvalsh(self.cluster_hessians())
        return eig[:, 0], eig[:, -1]

    def minimisers(self) -> np.ndarray:
        """:math:`w_c^*` of every true cluster, (C, d_y, p)."""
        rhs = np.einsum("kc,kpy->cpy", self.true_weights(), self.cross)
        return np.linalg.solve(self.cluster_hessians(), rhs).transpose(0, 2, 1)

    def gradient_moments(
        self, w: np.ndarray, batch_size: int | None
    ) -> tuple[np.ndarray, np.ndarray]:
        r"""Assumptions 4.3 and 4.4 at models ``w`` (M, d_y, p), per true cluster c:
        :math:`\mathbb E_{k|c}\mathbb E_\xi\|\nabla f^k_\xi(w)\|^2` and
        :math:`\mathbb E_{k|c}\mathbb E_\xi\|\nabla f_c(w) - \nabla f^k_\xi(w)\|^2`, with
        :math:`\xi` a minibatch of ``batch_size`` rows drawn with replacement (None: the full
        gradient). Both (M, C)."""
        p = self.true_weights()
        g2, s2 = [], []
        for start in range(0, len(w), _CHUNK):
            a, b = self._moments(w[start : start + _CHUNK], batch_size, p)
            g2.append(a)
            s2.append(b)
        return np.concatenate(g2), np.concatenate(s2)

    def _moments(
        self, w: np.ndarray, batch_size: int | None, p: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        x, y, n = self.features, self.targets, self.n_samples.astype(np.float64)
        mask = np.arange(x.shape[1])[None, :] < self.n_samples[:, None]  # (K, N)
        pred = np.einsum("myp,knp->mkny", w, x)
        res = (pred - y[None]) * mask[None, :, :, None]
        lam = self.ridge
        mean = np.einsum("mkny,knp->mkyp", res, x) / n[None, :, None, None] + lam * w[:, None]
        mean_sq = np.einsum("mkyp,mkyp->mk", mean, mean)
        rows = np.einsum("mkny,mkny->mkn", res, res) * np.einsum("knp,knp->kn", x, x)[None]
        rows = rows + 2 * lam * np.einsum("mkny,mkny->mkn", res, pred)
        rows = rows.sum(2) / n[None] + lam**2 * np.einsum("myp,myp->m", w, w)[:, None]
        noise = np.zeros_like(rows) if batch_size is None else (rows - mean_sq) / batch_size
        grad_c = np.einsum("kc,mkyp->mcyp", p, mean)
        spread = np.einsum("mcyp,mcyp->mc", grad_c, grad_c)[:, :, None]
        spread = spread - 2 * np.einsum("mcyp,mkyp->mck", grad_c, mean) + mean_sq[:, None]
        g2 = np.einsum("kc,mk->mc", p, mean_sq + noise)
        s2 = np.einsum("kc,mck->mc", p, spread) + np.einsum("kc,mk->mc", p, noise)
        return g2, s2


def least_squares_clients(
    task: SyntheticTask, *, ridge: float = 0.0, noise_std: float = 0.0, seed: int = 0
) -> LeastSquaresClients:
    """The training rows of a synthetic linear task as :class:`LeastSquaresClients`.

    ``noise_std`` adds Gaussian noise to the targets (seeded by ``seed``; the paper's task has
    none), so that the clients' own minimisers differ within a cluster (:math:`\\sigma^2 > 0` at
    :math:`w_c^*`).
    """
    if task.kind != "linear":
        raise DataError(f"least_squares_clients: needs the linear task, got {task.kind!r}")
    ridge = real(ridge, "least_squares_clients: ridge", at_least=0)
    noise_std = real(noise_std, "least_squares_clients: noise_std", at_least=0)
    rng = np.random.default_rng(integer(seed, "least_squares_clients: seed", minimum=0))
    sizes = np.array([len(c[0]) for c in task.clients])
    k, n_max, d_x = len(task.clients), int(sizes.max()), task.sizes["d_x"]
    x = np.zeros((k, n_max, d_x + 1))
    y = np.zeros((k, n_max, task.sizes["d_y"]))
    for i, (x_tr, y_tr, _, _) in enumerate(task.clients):
        n = len(x_tr)
        x[i, :n, :d_x], x[i, :n, d_x] = x_tr, 1.0
        y[i, :n] = y_tr + noise_std * rng.standard_normal(y_tr.shape)
    return LeastSquaresClients(x, y, sizes, np.asarray(task.clusters), task.n_clusters, ridge)


def exp_weights(losses: np.ndarray, eta: float, log_prior: np.ndarray | None = None) -> np.ndarray:
    r"""The router of eqs. (5)/(34): :math:`\pi_c \propto \exp(\log\pi^0_c - \eta\,\ell_c)`
    along the last axis; ``log_prior`` None is the uniform prior (eq. (5)'s reset)."""
    eta = real(eta, "exp_weights: eta", at_least=0)
    z = -eta * np.asarray(losses, dtype=np.float64)
    return _softmax(z if log_prior is None else z + log_prior)


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


@dataclass
class MFLRun:
    """One run of :func:`run_mfl`.

    Attributes
    ----------
    sync_steps : array (R + 1,)
        t = 0, H, 2H, ...: the start and every synchronisation.
    models : array (R + 1, C, d_y, p)
        :math:`w_{c,t}` at those t (the synchronised models).
    routers : array (R + 1, K, C)
        :math:`\\hat\\pi^k_t` at those t (in force until the next synchronisation).
    losses : array (R + 1, K, C)
        :math:`f^k(w_{c,t})` at those t.
    record_steps : array (n,)
        The T of ``averages``.
    averages : array (n, C, d_y, p)
        :math:`\\hat w_{c,T}`.
    settings : dict
        ``mu``, ``L``, ``s``, ``kappa``, ``local_steps``, ``batch_size``, ``router``,
        ``gradients``, ``router_scale``, ``steps``, ``seed`` and ``g2_start`` (the
        :math:`G^2` at the initial models that set the default s).
    """

    sync_steps: np.ndarray
    models: np.ndarray
    routers: np.ndarray
    losses: np.ndarray
    record_steps: np.ndarray
    averages: np.ndarray
    settings: dict[str, Any]


def _gradients(
    clients: LeastSquaresClients,
    copies: np.ndarray,
    source: np.ndarray | None,
    batch_size: int | None,
    rng: np.random.Generator,
) -> np.ndarray:
    """The copies' stochastic gradients (K, C, d_y, p): client k's data (``source`` None) or
    client ``source[k, c]``'s for copy c."""
    k, c = copies.shape[:2]
    n = clients.n_samples
    if batch_size is None:
        if source is None:
            g = (
                np.einsum("kcyp,kpq->kcyq", copies, clients.gram)
                - clients.cross.transpose(0, 2, 1)[:, None]
            )
        else:
            g = np.einsum("kcyp,kcpq->kcyq", copies, clients.gram[source])
            g = g - clients.cross[source].transpose(0, 1, 3, 2)
        return g + clients.ridge * copies
    if source is None:  # one minibatch per client, shared by its C copies
        rows = (rng.random((k, batch_size)) * n[:, None]).astype(np.intp)
        xb = clients.features[np.arange(k)[:, None], rows]
        yb = clients.targets[np.arange(k)[:, None], rows]
        res = np.einsum("kcyp,kbp->kcby", copies, xb) - yb[:, None]
        g = np.einsum("kcby,kbp->kcyp", res, xb)
    else:
        rows = (rng.random((k, c, batch_size)) * n[source][..., None]).astype(np.intp)
        xb = clients.features[source[..., None], rows]
        yb = clients.targets[source[..., None], rows]
        res = np.einsum("kcyp,kcbp->kcby", copies, xb) - yb
        g = np.einsum("kcby,kcbp->kcyp", res, xb)
    return g / batch_size + clients.ridge * copies


def run_mfl(
    clients: LeastSquaresClients,
    n_clusters: int,
    steps: int,
    *,
    local_steps: int = 5,
    batch_size: int | None = 4,
    router: str = "reset",
    gradients: str = "client",
    router_scale: float = 1.0,
    mu: float | None = None,
    s: float | None = None,
    init: np.ndarray | None = None,
    init_std: float = 1.0,
    record_at: Any = None,
    seed: int = 0,
) -> MFLRun:
    """T steps of MFL local SGD with the exponential-weights router (module docstring).

    Parameters
    ----------
    clients : LeastSquaresClients
    n_clusters : int
        C, the number of models (the true number for ``router="oracle"``).
    steps : int
        T >= 1.
    local_steps : int
        H, steps between synchronisations.
    batch_size : int or None
        Rows per stochastic gradient (with replacement); None: the client's full gradient.
    router : {"reset", "cumulative", "oracle"}
    gradients : {"client", "cluster"}
    router_scale : float
        The router's step is ``router_scale`` :math:`\\eta_t`.
    mu : float, optional
        :math:`\\mu` of the step size; default the smallest of the true clusters'.
    s : float, optional
        Default: Theorem A.9's smallest s (:func:`~riemfl.nn.floral.mfl_theory.minimum_s`)
        with the :math:`G^2` of the initial models and the smallest :math:`U_c`.
    init : array (C, d_y, p), optional
        :math:`w_{c,0}`; default: independent normal entries of standard deviation
        ``init_std`` / :math:`\\sqrt p`, drawn per cluster.
    record_at : sequence of int, optional
        The T of the averaged iterates kept (default: T only).
    seed : int
        Seed of the initial models, the minibatches and the sampled clients.

    Raises
    ------
    ParameterError
        For an unknown router or oracle, bad counts, steps, step sizes or recorded T, or the
        oracle router or cluster gradients with C other than the true number.
    ShapeError
        For an ``init`` of another shape.
    """
    c = integer(n_clusters, "run_mfl: n_clusters", minimum=1)
    t_max = integer(steps, "run_mfl: steps", minimum=1)
    h = integer(local_steps, "run_mfl: local_steps", minimum=1)
    b = optional(integer, batch_size, "run_mfl: batch_size", minimum=1)
    if router not in MFL_ROUTERS:
        raise ParameterError(f"run_mfl: router must be one of {MFL_ROUTERS}, got {router!r}")
    if gradients not in MFL_GRADIENTS:
        raise ParameterError(
            f"run_mfl: gradients must be one of {MFL_GRADIENTS}, got {gradients!r}"
        )
    if (router == "oracle" or gradients == "cluster") and c != clients.n_clusters:
        raise ParameterError(
            f"run_mfl: the oracle router and the cluster gradients need C = "
            f"{clients.n_clusters} (the true number), got {c}"
        )
    scale = real(router_scale, "run_mfl: router_scale", at_least=0)
    rng = np.random.default_rng(integer(seed, "run_mfl: seed", minimum=0))
    mus, ls = clients.curvature()
    mu = real(mus.min() if mu is None else mu, "run_mfl: mu (the clusters' smallest)", above=0)
    big_l = float(ls.max())
    shape = clients.shape
    spread = real(init_std, "run_mfl: init_std", at_least=0) / np.sqrt(shape[1])
    w0 = spread * rng.standard_normal((c, *shape)) if init is None else init
    w0 = np.array(w0, dtype=np.float64)
    if w0.shape != (c, *shape):
        raise ShapeError(f"run_mfl: init must have shape {(c, *shape)}, got {w0.shape}")
    g2_start = float(clients.gradient_moments(w0, b)[0].max())
    if s is None:
        u = float(np.nanmin(uniformity(clients.true_router(), clients.n_samples)))
        s = minimum_s(h, max(1.0, big_l / mu), u, g2_start, mu)
    s = real(s, "run_mfl: s", at_least=1)
    record = sorted({t_max} if record_at is None else {int(t) for t in record_at})
    keep = set(record)
    if record[0] < 1 or record[-1] > t_max:
        raise ParameterError(f"run_mfl: record_at must lie in 1..{t_max}, got {record_at!r}")
    k, n = clients.n_clients, clients.n_samples
    truth, p_true = clients.true_router(), clients.true_weights()

    log_pi = np.zeros((k, c))  # log-routers, uniform start
    pi = truth.copy() if router == "oracle" else _softmax(log_pi)
    models, routers, losses = [w0], [pi], [clients.losses(w0)]
    copies = np.broadcast_to(w0, (k, *w0.shape)).copy()
    p_hat = aggregation_weights(pi, n)
    total, weight_sum = np.zeros_like(w0), 0.0
    averages, source = [], None
    for t in range(t_max):
        if gradients == "cluster" and t % h == 0:  # i_t = i_{t0}: one client per round
            source = np.stack([rng.choice(k, size=k, p=p_true[:, j]) for j in range(c)], 1)
        weight = (t + s) ** 2
        total += weight * np.einsum("kc,kcyp->cyp", p_hat, copies)
        weight_sum += weight
        if t + 1 in keep:
            averages.append(total / weight_sum)
        eta = 1.0 / (mu * (t + s))
        copies -= eta * _gradients(clients, copies, source, b, rng)
        if (t + 1) % h:
            continue
        w = np.einsum("kc,kcyp->cyp", p_hat, copies)
        copies[:] = w
        ell = clients.losses(w)
        if router != "oracle":
            log_pi = (log_pi if router == "cumulative" else 0.0) - scale * eta * ell
            log_pi = log_pi - log_pi.max(1, keepdims=True)
            pi = _softmax(log_pi)
            p_hat = aggregation_weights(pi, n)
        models.append(w)
        routers.append(pi)
        losses.append(ell)
    settings = {
        "mu": mu,
        "L": big_l,
        "kappa": big_l / mu,
        "s": s,
        "local_steps": h,
        "batch_size": b,
        "router": router,
        "gradients": gradients,
        "router_scale": scale,
        "steps": t_max,
        "seed": int(seed),
        "g2_start": g2_start,
    }
    return MFLRun(
        np.arange(len(models)) * h,
        np.array(models),
        np.array(routers),
        np.array(losses),
        np.array(record),
        np.array(averages),
        settings,
    )


def match_clusters(clients: LeastSquaresClients, run: MFLRun) -> np.ndarray:
    """``perm`` with ``perm[true c]`` = the run's model for true cluster c: the assignment that
    minimises :math:`\\sum_c f_c(\\hat w_{perm[c], T})` at the last recorded T (the labels of
    MFL's models are arbitrary; the oracle router's are the true ones)."""
    if run.settings["router"] == "oracle":
        return np.arange(clients.n_clusters)
    cost = clients.cluster_losses(run.averages[-1])
    rows, cols = linear_sum_assignment(cost)
    if len(rows) < clients.n_clusters:
        raise ParameterError("match_clusters: the run has fewer models than true clusters")
    perm = np.empty(clients.n_clusters, dtype=np.intp)
    perm[rows] = cols
    return perm


def router_regret(routers: np.ndarray, losses: np.ndarray) -> dict[str, np.ndarray]:
    r"""The routers' regret per client over the rounds.

    The router :math:`\hat\pi^k_r` in force during round r is chosen before the models it
    aggregates are known; its loss is :math:`\ell^k_r = f^k(w_{\cdot,(r+1)H})`, the models of the
    next synchronisation. ``routers`` and ``losses`` are :class:`MFLRun`'s (R + 1, K, C).

    Returns
    -------
    dict
        ``per_round`` (R, K): :math:`\langle\hat\pi^k_r, \ell^k_r\rangle - \min_c \ell^k_{r,c}`;
        ``regret`` (K,): its sum over the rounds (against the best cluster of every round);
        ``static`` (K,): :math:`\sum_r \langle\hat\pi^k_r, \ell^k_r\rangle - \min_c \sum_r
        \ell^k_{r,c}` (against the best fixed cluster).
    """
    routers, losses = np.asarray(routers), np.asarray(losses)
    if routers.shape != losses.shape or routers.ndim != 3:
        raise ShapeError(f"router_regret: (R+1, K, C) twice, got {routers.shape}, {losses.shape}")
    routed = np.einsum("rkc,rkc->rk", routers[:-1], losses[1:])
    per_round = routed - losses[1:].min(2)
    static = routed.sum(0) - losses[1:].sum(0).min(1)
    return {"per_round": per_round, "regret": per_round.sum(0), "static": static}

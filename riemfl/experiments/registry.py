r"""Named problems and methods of the command line (``riemfl run PROBLEM --algorithm ALG``).

Every entry declares what ``riemfl run`` needs to know about it: how to build it, the optional
dependencies it needs (keys of :data:`riemfl.extras.EXTRAS`, checked before anything runs)
and, for a problem, its default step-size rule, number of rounds and the tolerance that those
defaults reach.

Default step sizes (:class:`StepRule`). Zhang et al. 2024 (Theorem 4.3, eq. (11)) bound the
*effective* step size :math:`\tilde\eta = \eta\,\eta_g\,\tau` by a constant over the smoothness L
of the clients' objectives (with :math:`\eta_g` the global step size and :math:`\tau` the number
of local steps), not :math:`\eta` itself: each default is
:math:`\eta = c / (\max(\tau, 10)\,\eta_g\,L)`, so that ``--local-steps`` >= 10 and
``--global-step-size`` leave :math:`\tilde\eta` where it was chosen; with fewer local steps
:math:`\eta` stays at its value for tau = 10, as the local steps need of :math:`\eta` itself
(gradient descent on one client, :math:`\eta L < 2`; a retraction step that stays where the
inverse retraction of the upload is defined: on SPD(3) RFedAvg's clients leave that domain at
tau = 2 with :math:`\eta` = 0.25, the step size that would keep spd-mean's :math:`\tilde\eta`).
The theory's constant (:math:`c \le 1/(24 M_c)`) is far too small to be useful; c comes from
trial runs of RFedProj (tau = 2 ... 40), about a factor 2 or more below the step size at which
it stops converging:

* kPCA (``kpca-*``): L = :math:`\max_i \lambda_{\max}(A_i^\top A_i)`, the largest client's
  smoothness, and c = 1 (:math:`\tilde\eta = 1/L`, the step size of the descent lemma). On the
  synthetic data (L = 122) RFedProj converges up to :math:`\tilde\eta \approx 0.016` and
  oscillates from 0.02 on at tau >= 10 (Zhang et al. 2024's Fig. 6 step size 4e-3 was for
  tau = 5, where the product is 0.02; at the command line's tau = 10 it is 0.04 and the run
  never converges); on the digits the limit is about 4/L.
* softmax regression (``logreg-*``): L = :math:`\max_i \beta_i` (:mod:`riemfl.problems.logreg`),
  an upper bound loose enough that c = 20 is stable (from c = 80 the runs stop converging at
  tau = 5; c = 40 still converges).
* rotation averaging: L = 1 (the chordal objective) and c = 1: eta = 0.1 at tau = 10, where
  twice the step size takes the clients beyond the domain of SO(3)'s polar inverse retraction
  (angles below pi/2: ``CutLocusError``).
* the problems without a smoothness constant (L = 1, c is :math:`\tilde\eta`), from trial runs:
  LRMC 1e-3 (eta = 1e-4 at tau = 10; Zhang et al. 2024 state none, and 5e-3 stalls);
  spd-mean 0.5 (twice the step size takes the clients beyond the domain of SPD's
  affine-invariant inverse retraction, Y > X/2: ``CutLocusError``); hyperbolic-tree 3 (at 6 the
  loss stalls 6% above the reference; 1 needs twice the rounds).

The defaults of every problem, with RFedProj, reach the problem's ``tolerance`` on the relative
gradient norm :math:`\|\operatorname{grad} f(x^R)\| / \|\operatorname{grad} f(x^0)\|` in its
``rounds`` (``tests/test_registry.py`` runs them). RFedAvg and RFedProx, whose clients drift
towards their own minimisers, stop at a floor that grows with :math:`\tilde\eta` and the
clients' heterogeneity (Li & Ma 2022): the stall warning of ``riemfl run`` says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import integer
from ..errors import DataError, ParameterError
from ..federated import AsyncRule, RFedAvg, RFedProj, RFedProx, RFedSVRG, SyncAlgorithm
from ..manifolds.base import Manifold
from ..problems import (
    FederatedProblem,
    HyperbolicEmbeddingProblem,
    KPCAProblem,
    LRMCProblem,
    RotationAveragingProblem,
    SoftmaxRegressionProblem,
    SPDMeanProblem,
)

__all__ = [
    "PROBLEMS",
    "ALGORITHMS",
    "ASYNC_RULES",
    "DEFAULT_LOCAL_STEPS",
    "SyncSettings",
    "AsyncSettings",
    "AsyncRuleEntry",
    "AlgorithmEntry",
    "ALGORITHM_NAMES",
    "ASYNC_RULE_NAMES",
    "CURVE_RULE_NAMES",
    "ProblemEntry",
    "StepRule",
    "build_problem",
    "build_algorithm",
    "build_async_rule",
]

#: tau, the local steps of ``riemfl run`` when ``--local-steps`` is not given (Zhang et al.
#: 2024's kPCA experiments)
DEFAULT_LOCAL_STEPS = 10


@dataclass(frozen=True)
class StepRule:
    r"""A default local step size :math:`\eta = c / (\max(\tau, 10)\,\eta_g\,L)` (module docstring;
    10 is :data:`DEFAULT_LOCAL_STEPS`).

    Attributes
    ----------
    scale : float
        c, the effective step size :math:`\tilde\eta = \eta\,\eta_g\,\tau` times L.
    smoothness : callable or None
        ``smoothness(problem) -> L``, the clients' smoothness constant; None for a problem
        without one (L = 1: ``scale`` is then :math:`\tilde\eta` itself, from trial runs).
    constant : str
        What L is, for ``riemfl run --help``.
    """

    scale: float
    smoothness: Callable[[FederatedProblem], float] | None = None
    constant: str = ""

    def __call__(
        self, problem: FederatedProblem, local_steps: int, global_step_size: float = 1.0
    ) -> float:
        """The step size eta for ``local_steps`` (tau) and the global step size
        ``global_step_size`` (eta_g).

        Raises
        ------
        DataError
            When L is not a finite number > 0 (degenerate data, e.g. all-zero features).
        """
        lipschitz = 1.0 if self.smoothness is None else float(self.smoothness(problem))
        if not (math.isfinite(lipschitz) and lipschitz > 0):
            raise DataError(
                f"problem {problem.name!r}: the default step size needs a smoothness L > 0, got "
                f"L = {lipschitz} (degenerate data, e.g. all-zero features); pass a step size "
                "(--step-size)"
            )
        steps = max(local_steps, DEFAULT_LOCAL_STEPS)
        return self.scale / (steps * global_step_size * lipschitz)

    def describe(self) -> str:
        """The rule in one line, for ``riemfl run --help``."""
        tau = f"max(tau, {DEFAULT_LOCAL_STEPS})"
        if self.smoothness is None:
            return f"eta = {self.scale:g}/({tau} eta_g)"
        return f"eta = {self.scale:g}/({tau} eta_g L), L = {self.constant}"


@dataclass(frozen=True)
class ProblemEntry:
    r"""How to build a named problem, what it needs and its defaults (module docstring).

    Attributes
    ----------
    build : callable
        ``build(n_clients, k, seed, data, progress) -> FederatedProblem``.
    step_size : StepRule
        The rule of the default step size (:meth:`default_step_size`).
    default_clients : int
    needs_data : bool
        Whether it reads a data file (``--data``).
    summary : str
        One line for ``riemfl run --help``.
    extras : tuple of str
        Keys of :data:`~riemfl.extras.EXTRAS` it needs (besides those of ``riemfl run`` itself).
    rounds : int
        The default number of rounds.
    tolerance : float
        The relative gradient norm :math:`\|\operatorname{grad} f(x^R)\| /
        \|\operatorname{grad} f(x^0)\|` that RFedProj reaches with every default; below it
        ``riemfl run`` does not warn of a stall.
    """

    build: Callable[..., FederatedProblem]
    step_size: StepRule
    default_clients: int
    needs_data: bool = False
    summary: str = ""
    extras: tuple[str, ...] = ()
    rounds: int = 200
    tolerance: float = 1e-3

    def default_step_size(
        self,
        problem: FederatedProblem,
        local_steps: int = DEFAULT_LOCAL_STEPS,
        global_step_size: float = 1.0,
    ) -> float:
        """The default step size eta of ``problem`` for tau = ``local_steps`` and eta_g =
        ``global_step_size`` (:class:`StepRule`)."""
        return self.step_size(problem, local_steps, global_step_size)


def _kpca_smoothness(problem: KPCAProblem) -> float:
    """L = max_i lambda_max(A_i^T A_i): the largest smoothness constant of the clients'
    f_i(x) = -tr(x^T A_i^T A_i x) / 2."""
    return float(np.linalg.eigvalsh(problem.covariances)[:, -1].max())


def _smoothness(problem: FederatedProblem) -> float:
    """L = the problem's own ``smoothness`` (NaN when it has none)."""
    return math.nan if problem.smoothness is None else float(problem.smoothness)


_KPCA_STEP = StepRule(1.0, _kpca_smoothness, "max_i lambda_max(A_i^T A_i)")
_LOGREG_STEP = StepRule(20.0, _smoothness, "max_i beta_i (riemfl.problems.logreg)")


def _no_k(name: str, k: int | None) -> dict[str, Any]:
    """Refuse a number of components for a problem that has none (rather than ignore it)."""
    if k:
        raise ParameterError(f"problem {name!r} has no components: leave k (--k) unset, got {k}")
    return {}


def _seeded(name: str, build: Callable[..., FederatedProblem]) -> Callable[..., FederatedProblem]:
    """The builder of a generated problem without components: ``build(n_clients=, seed=)``."""
    return lambda n, k, seed, data, progress: build(n_clients=n, seed=seed, **_no_k(name, k))


PROBLEMS: dict[str, ProblemEntry] = {
    "kpca-synthetic": ProblemEntry(
        lambda n, k, seed, data, progress: KPCAProblem.synthetic(n_clients=n, k=k or 5, seed=seed),
        _KPCA_STEP,
        30,
        summary="kPCA on St(20, 5), 30 clients with A_i ~ N(0, 2i/n) (Figs. 6-7)",
        rounds=1000,
        tolerance=1e-3,
    ),
    "kpca-digits": ProblemEntry(
        lambda n, k, seed, data, progress: KPCAProblem.digits(n_clients=n, k=k or 2),
        _KPCA_STEP,
        10,
        summary="label-sorted kPCA on scikit-learn's digits, the offline MNIST stand-in",
        extras=("data",),
        rounds=500,
        tolerance=1e-3,
    ),
    "kpca-mnist": ProblemEntry(
        lambda n, k, seed, data, progress: KPCAProblem.mnist(data, n_clients=n, k=k or 2),
        _KPCA_STEP,
        10,
        needs_data=True,
        summary="label-sorted kPCA on the user's MNIST file (--data; Figs. 1-3, 5)",
        rounds=500,
        tolerance=1e-3,
    ),
    "lrmc-synthetic": ProblemEntry(
        lambda n, k, seed, data, progress: LRMCProblem.synthetic(n_clients=n, k=k or 2, seed=seed),
        StepRule(1e-3),
        10,
        summary="low-rank matrix completion on St(100, 2), 1000 columns (Figs. 4, 8, 9)",
        tolerance=1e-8,
    ),
    "logreg-digits": ProblemEntry(
        lambda n, k, seed, data, progress: SoftmaxRegressionProblem.digits(
            n_clients=n, seed=seed, progress=progress, **_no_k("logreg-digits", k)
        ),
        _LOGREG_STEP,
        10,
        summary="softmax regression on R^(65 x 10), scikit-learn's digits, Dirichlet(0.5) "
        "clients: Euclidean, so the curve rules (asyncbezier) run on it",
        extras=("data",),
        rounds=500,
        tolerance=1e-2,
    ),
    "logreg-mnist": ProblemEntry(
        lambda n, k, seed, data, progress: SoftmaxRegressionProblem.mnist(
            data, n_clients=n, seed=seed, progress=progress, **_no_k("logreg-mnist", k)
        ),
        _LOGREG_STEP,
        10,
        needs_data=True,
        summary="softmax regression on the user's MNIST file (--data), Dirichlet(0.5) clients",
        tolerance=2e-2,
    ),
    "spd-mean": ProblemEntry(
        _seeded("spd-mean", SPDMeanProblem.synthetic),
        StepRule(0.5),
        10,
        summary="Karcher mean of 20 SPD(3) matrices per client around per-client centres "
        "(affine-invariant metric; f* by the Karcher iteration)",
        tolerance=1e-8,
    ),
    "rotation-averaging": ProblemEntry(
        _seeded("rotation-averaging", RotationAveragingProblem.synthetic),
        StepRule(1.0, _smoothness, "1 (the chordal objective)"),
        10,
        summary="chordal L2 mean of 20 noisy rotations per client on SO(3), biased per client "
        "(f* closed form)",
        tolerance=1e-8,
    ),
    "hyperbolic-tree": ProblemEntry(
        _seeded("hyperbolic-tree", HyperbolicEmbeddingProblem.tree),
        StepRule(3.0),
        4,
        summary="Nickel-Kiela embedding of a balanced binary tree of depth 3 on "
        "(PoincareBall(2))^15, relations split among clients (f* unknown: reference_loss of "
        "a centralised run; |grad f| stays away from 0 at the kinks of the loss)",
        tolerance=0.2,
    ),
}


@dataclass(frozen=True)
class SyncSettings:
    """The parameters of a synchronous algorithm from the command line (``riemfl run``)."""

    step_size: float
    local_steps: int
    global_step_size: float = 1.0
    mu: float = 1.0
    operators: str = "approximate"
    upload: str = "point"


@dataclass(frozen=True)
class AlgorithmEntry:
    """How to build a named synchronous algorithm, what it is in one line, and the keys of
    :data:`~riemfl.extras.EXTRAS` it needs."""

    build: Callable[[SyncSettings], SyncAlgorithm]
    summary: str
    extras: tuple[str, ...] = ()


#: the synchronous algorithms, by name (``riemfl run ... --algorithm NAME``)
ALGORITHMS: dict[str, AlgorithmEntry] = {
    "rfedproj": AlgorithmEntry(
        lambda s: RFedProj(s.step_size, s.local_steps, s.global_step_size),
        "projection-based federated learning (Zhang et al. 2024, Alg. 1): metric projections "
        "only, one upload per client per round",
    ),
    "rfedavg": AlgorithmEntry(
        lambda s: RFedAvg(s.step_size, s.local_steps, s.operators, s.upload),
        "FedAvg on a manifold: local retraction steps, tangent-space mean (Li & Ma 2022)",
    ),
    "rfedprox": AlgorithmEntry(
        lambda s: RFedProx(s.step_size, s.local_steps, s.mu, s.operators, s.upload),
        "RFedAvg with a proximal pull mu d^2(., x^r) / 2 toward the global model",
    ),
    "rfedsvrg": AlgorithmEntry(
        lambda s: RFedSVRG(s.step_size, s.local_steps, s.operators, s.upload),
        "variance-reduced local steps with the server's anchor gradient, two uploads per round "
        "(Li & Ma 2022, Alg. 1)",
    ),
}
ALGORITHM_NAMES = tuple(ALGORITHMS)


@dataclass(frozen=True)
class AsyncSettings:
    """The parameters of an asynchronous server rule from the command line.

    ``server_lr`` None means the rule's default: eta_g = 1, beta = 1/K for FedBuff, and the FEMNIST
    values of Licudi et al. 2025, Table 3: 0.5 (AsyncBezier) and 0.25 (AsyncBezierED).
    """

    server_lr: float | None = None
    buffer_size: int = 10
    operators: str = "approximate"
    staleness: str = "constant"
    manifold: Manifold | None = None
    vartheta: float = 1.0
    #: client-level differential privacy (:class:`~riemfl.federated.privacy.DPSettings`;
    #: FedBuff only)
    privacy: Any = None
    #: FedBuff's aggregator of the buffer (:mod:`riemfl.federated.robust`; FedBuff only)
    aggregator: Any = None
    #: FedBuff's server optimiser (:mod:`riemfl.federated.server_optimizers`; FedBuff only)
    server_optimizer: Any = None
    #: FedBuff's compressor of the clients' updates (:mod:`riemfl.federated.compression`), its
    #: error feedback (None: the compressor's default) and the seed of its draws
    compressor: Any = None
    error_feedback: bool | None = None
    compression_seed: int = 0

    @property
    def common(self) -> dict[str, Any]:
        """The keywords of the point rules: ``server_lr`` (1 when unset) and ``operators``."""
        lr = 1.0 if self.server_lr is None else self.server_lr
        return {"server_lr": lr, "operators": self.operators}

    @property
    def curve(self) -> dict[str, Any]:
        """The keywords of the curve rules: their base manifold, ``vartheta`` and any
        ``server_lr`` given (their own defaults otherwise)."""
        lr = {} if self.server_lr is None else {"server_lr": self.server_lr}
        return {"base": self.manifold, "vartheta": self.vartheta, **lr}


@dataclass(frozen=True)
class AsyncRuleEntry:
    """How to build a named asynchronous rule; ``learns_curves``: its clients learn a Bezier
    curve (it needs the problem's manifold, and a Euclidean problem for
    :class:`~riemfl.federated.BezierProblemTrainer`); ``extras``: the keys of
    :data:`~riemfl.extras.EXTRAS` it needs."""

    build: Callable[[AsyncSettings], AsyncRule]
    summary: str
    learns_curves: bool = False
    extras: tuple[str, ...] = ()


def _async_rules() -> dict[str, AsyncRuleEntry]:
    from ..federated import async_manifold as am
    from ..federated import async_rules as ar

    return {
        "fedasync": AsyncRuleEntry(
            lambda s: ar.FedAsync(staleness=s.staleness, **s.common),
            "mix each arriving local model into the current one (Xie et al. 2020)",
        ),
        "asgd": AsyncRuleEntry(
            lambda s: ar.ASGD(staleness=s.staleness, **s.common),
            "apply each stale update as it is (Dean et al. 2012)",
        ),
        "fedbuff": AsyncRuleEntry(
            lambda s: ar.FedBuff(
                s.buffer_size,
                s.server_lr,
                privacy=s.privacy,
                aggregator=s.aggregator,
                server_optimizer=s.server_optimizer,
                compressor=s.compressor,
                error_feedback=s.error_feedback,
                compression_seed=s.compression_seed,
            ),
            "sum K updates in a buffer, then one server step (Toghani & Uribe 2022)",
        ),
        "dcasgd": AsyncRuleEntry(
            lambda s: ar.DCASGD(**s.common),
            "delay-compensated ASGD with pseudo-gradients (Zheng et al. 2017)",
        ),
        "asyncfeded": AsyncRuleEntry(
            lambda s: ar.AsyncFedED(**s.common),
            "staleness-adaptive server rate and local epochs (Wang et al. 2022)",
        ),
        "fedortho": AsyncRuleEntry(
            lambda s: ar.FedOrtho(**s.common),
            "FedAsync + OrthoDC(vartheta = 1): always keep only the update's part orthogonal to "
            "the drift (Licudi et al. 2025, Sec. 4.1)",
        ),
        "fedgs": AsyncRuleEntry(
            lambda s: ar.FedGS(**s.common),
            "FedAsync + OrthoDC(vartheta = 0): remove the drift component only on conflict "
            "(Licudi et al. 2025, Sec. 4.1)",
        ),
        "orthograd": AsyncRuleEntry(
            lambda s: ar.OrthoGrad(**s.common),
            "OrthoCorrect(alpha = 0, vartheta = 0): ASGD with gradient surgery against the drift",
        ),
        "orthopos": AsyncRuleEntry(
            lambda s: ar.OrthoPos(**s.common),
            "OrthoCorrect(alpha = 1, vartheta = 0): FedAsync with gradient surgery against the "
            "drift",
        ),
        "orthostrict": AsyncRuleEntry(
            lambda s: ar.OrthoStrict(**s.common),
            "OrthoCorrect(vartheta = 1): only the part orthogonal to the drift is applied",
        ),
        "asyncbezier": AsyncRuleEntry(
            lambda s: am.AsyncBezier(**s.curve),
            "clients learn a Bezier curve of models; the server moves along the learned path "
            "(Licudi et al. 2025)",
            learns_curves=True,
        ),
        "asyncbezier-ed": AsyncRuleEntry(
            lambda s: am.AsyncBezierED(**s.curve),
            "AsyncBezier with AsyncFedED's staleness-adaptive rate (Licudi et al. 2025)",
            learns_curves=True,
        ),
    }


#: the asynchronous server rules, by name (``riemfl run ... --engine async --algorithm NAME``)
ASYNC_RULES: dict[str, AsyncRuleEntry] = _async_rules()
ASYNC_RULE_NAMES = tuple(ASYNC_RULES)
#: the rules whose clients learn a Bezier curve
CURVE_RULE_NAMES = tuple(name for name, entry in ASYNC_RULES.items() if entry.learns_curves)


def build_problem(
    name: str,
    *,
    clients: int | None = None,
    k: int | None = None,
    seed: int = 0,
    data: Any = None,
    progress: bool = False,
) -> FederatedProblem:
    """The problem called ``name`` (a key of :data:`PROBLEMS`).

    Parameters
    ----------
    name : str
        A key of :data:`PROBLEMS`.
    clients : int or None
        The number of clients n >= 1; None for the problem's default.
    k : int or None
        The number of components (None: the problem's default; refused by problems without).
    seed : int
        Seed of the synthetic data and splits.
    data : str, PathLike or None
        The data file of a problem that reads one (``needs_data``); refused by the others.
    progress : bool
        Show the progress of a long set-up on stderr (the L-BFGS solve for f* of the softmax
        regressions); the others ignore it.

    Raises
    ------
    ParameterError
        An unknown name, ``clients`` not an int >= 1, a missing ``data`` where the problem needs
        one, or a ``data`` given to a problem that reads none.
    DataError
        From the loaders: a missing, malformed or degenerate data file.
    """
    if name not in PROBLEMS:
        raise ParameterError(f"unknown problem {name!r}; expected one of {sorted(PROBLEMS)}")
    entry = PROBLEMS[name]
    if entry.needs_data and data is None:
        raise ParameterError(f"problem {name!r} needs --data FILE (an MNIST idx or npz file)")
    if not entry.needs_data and data is not None:
        with_data = sorted(n for n, e in PROBLEMS.items() if e.needs_data)
        raise ParameterError(
            f"problem {name!r} reads no data file: expected no --data (only {with_data} take "
            f"one), got --data {data}"
        )
    if clients is None:
        clients = entry.default_clients
    else:
        clients = integer(clients, f"problem {name!r}: number of clients (--clients)", minimum=1)
    return entry.build(clients, k, seed, data, progress)


def build_algorithm(
    name: str,
    *,
    step_size: float,
    local_steps: int,
    global_step_size: float = 1.0,
    mu: float = 1.0,
    operators: str = "approximate",
    upload: str = "point",
) -> SyncAlgorithm:
    """The algorithm called ``name`` (a key of :data:`ALGORITHMS`) with its parameters."""
    if name not in ALGORITHMS:
        raise ParameterError(f"unknown algorithm {name!r}; expected one of {list(ALGORITHMS)}")
    settings = SyncSettings(step_size, local_steps, global_step_size, mu, operators, upload)
    return ALGORITHMS[name].build(settings)


def build_async_rule(
    name: str,
    *,
    server_lr: float | None = None,
    buffer_size: int = 10,
    operators: str = "approximate",
    staleness: str = "constant",
    manifold: Manifold | None = None,
    vartheta: float = 1.0,
    privacy: Any = None,
    aggregator: Any = None,
    server_optimizer: Any = None,
    compressor: Any = None,
    error_feedback: bool | None = None,
    compression_seed: int = 0,
) -> AsyncRule:
    """The asynchronous server rule called ``name`` (a key of :data:`ASYNC_RULES`).

    The parameters are those of :class:`AsyncSettings`. The curve rules
    (:data:`CURVE_RULE_NAMES`) need the problem's ``manifold`` (their embedding's base) and take
    ``vartheta``, the OrthoDC strength of their correction.
    """
    if name not in ASYNC_RULES:
        raise ParameterError(f"unknown async rule {name!r}; expected one of {list(ASYNC_RULES)}")
    entry = ASYNC_RULES[name]
    if entry.learns_curves and manifold is None:
        raise ParameterError(
            f"async rule {name!r} learns Bezier curves on the problem's manifold: pass manifold="
        )
    if privacy is not None and name != "fedbuff":
        raise ParameterError(
            f"async rule {name!r} applies each update on its own: differential privacy (noise "
            "on a sum of updates) runs with the sum-only fedbuff only"
        )
    server_side = (aggregator, server_optimizer, compressor)
    if any(v is not None for v in server_side) and name != "fedbuff":
        raise ParameterError(
            f"async rule {name!r} applies each update on its own: an aggregator, a server "
            "optimiser or a compressor acts on fedbuff's buffer only"
        )
    settings = AsyncSettings(
        server_lr,
        buffer_size,
        operators,
        staleness,
        manifold,
        vartheta,
        privacy,
        aggregator,
        server_optimizer,
        compressor,
        error_feedback,
        compression_seed,
    )
    return entry.build(settings)

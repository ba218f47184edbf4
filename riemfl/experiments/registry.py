"""Named problems and algorithms of the command line (``riemfl run PROBLEM --algorithm ALG``).

Each problem name maps to a builder and to the default step size the paper uses for it
(Zhang et al. 2024, App. A.4): eta = 1/beta for the MNIST/digits kPCA, 4e-3 for the synthetic
kPCA (Fig. 6), 1e-4 for LRMC (not stated in the paper; chosen by trial runs: at tau = 5,
eta = 1e-3 stalls and 1e-4 converges).

The problems on the manifolds of issue 19 have no paper step size; theirs were chosen by trial
runs at the command line's defaults (10 local steps, approximate operators, 50 rounds): every
synchronous algorithm converges with them, while twice the step takes the clients out of the
domain of the approximate operators' inverse retraction (SPD's affine-invariant one needs
Y > X/2, SO(3)'s polar one angles below pi/2: ``CutLocusError``) for spd-mean (eta = 0.1) and
rotation-averaging (eta = 0.2); hyperbolic-tree converges at 0.3 and barely moves at 0.1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
    "SyncSettings",
    "AsyncSettings",
    "AsyncRuleEntry",
    "ALGORITHM_NAMES",
    "ASYNC_RULE_NAMES",
    "CURVE_RULE_NAMES",
    "ProblemEntry",
    "build_problem",
    "build_algorithm",
    "build_async_rule",
]


@dataclass(frozen=True)
class ProblemEntry:
    """How to build a named problem and its default step size."""

    build: Callable[..., FederatedProblem]
    default_step: Callable[[FederatedProblem], float]
    default_clients: int
    needs_data: bool = False
    summary: str = ""


def _inverse_beta(problem: FederatedProblem) -> float:
    """The default step 1/beta; refused (rather than divided by zero) when beta is not > 0."""
    beta = float(problem.smoothness)
    if not (math.isfinite(beta) and beta > 0):
        raise DataError(
            f"problem {problem.name!r}: the default step 1/beta needs a smoothness beta > 0, got "
            f"beta = {beta} (degenerate data, e.g. all-zero features); pass a step size (--step)"
        )
    return 1.0 / beta


def _no_k(name: str, k: int | None) -> dict[str, Any]:
    """Refuse a number of components for a problem that has none (rather than ignore it)."""
    if k:
        raise ParameterError(f"problem {name!r} has no components: leave k (--k) unset, got {k}")
    return {}


def _seeded(name: str, build: Callable[..., FederatedProblem]) -> Callable[..., FederatedProblem]:
    """The builder of a generated problem without components: ``build(n_clients=, seed=)``."""
    return lambda n, k, seed, data: build(n_clients=n, seed=seed, **_no_k(name, k))


PROBLEMS: dict[str, ProblemEntry] = {
    "kpca-synthetic": ProblemEntry(
        lambda n, k, seed, data: KPCAProblem.synthetic(n_clients=n, k=k or 5, seed=seed),
        lambda p: 4e-3,
        30,
        summary="kPCA on St(20, 5), 30 clients with A_i ~ N(0, 2i/n) (Figs. 6-7)",
    ),
    "kpca-digits": ProblemEntry(
        lambda n, k, seed, data: KPCAProblem.digits(n_clients=n, k=k or 2),
        _inverse_beta,
        10,
        summary="label-sorted kPCA on scikit-learn's digits, the offline MNIST stand-in",
    ),
    "kpca-mnist": ProblemEntry(
        lambda n, k, seed, data: KPCAProblem.mnist(data, n_clients=n, k=k or 2),
        _inverse_beta,
        10,
        needs_data=True,
        summary="label-sorted kPCA on the user's MNIST file (--data; Figs. 1-3, 5)",
    ),
    "lrmc-synthetic": ProblemEntry(
        lambda n, k, seed, data: LRMCProblem.synthetic(n_clients=n, k=k or 2, seed=seed),
        lambda p: 1e-4,
        10,
        summary="low-rank matrix completion on St(100, 2), 1000 columns (Figs. 4, 8, 9)",
    ),
    "logreg-digits": ProblemEntry(
        lambda n, k, seed, data: SoftmaxRegressionProblem.digits(
            n_clients=n, seed=seed, **_no_k("logreg-digits", k)
        ),
        _inverse_beta,
        10,
        summary="softmax regression on R^(65 x 10), scikit-learn's digits, Dirichlet(0.5) "
        "clients: Euclidean, so the curve rules (asyncbezier) run on it",
    ),
    "logreg-mnist": ProblemEntry(
        lambda n, k, seed, data: SoftmaxRegressionProblem.mnist(
            data, n_clients=n, seed=seed, **_no_k("logreg-mnist", k)
        ),
        _inverse_beta,
        10,
        needs_data=True,
        summary="softmax regression on the user's MNIST file (--data), Dirichlet(0.5) clients",
    ),
    "spd-mean": ProblemEntry(
        _seeded("spd-mean", SPDMeanProblem.synthetic),
        lambda p: 0.05,
        10,
        summary="Karcher mean of 20 SPD(3) matrices per client around per-client centres "
        "(affine-invariant metric; f* by the Karcher iteration)",
    ),
    "rotation-averaging": ProblemEntry(
        _seeded("rotation-averaging", RotationAveragingProblem.synthetic),
        lambda p: 0.1,
        10,
        summary="chordal L2 mean of 20 noisy rotations per client on SO(3), biased per client "
        "(f* closed form)",
    ),
    "hyperbolic-tree": ProblemEntry(
        _seeded("hyperbolic-tree", HyperbolicEmbeddingProblem.tree),
        lambda p: 0.3,
        4,
        summary="Nickel-Kiela embedding of a balanced binary tree of depth 3 on "
        "(PoincareBall(2))^15, relations split among clients (f* unknown: reference_loss of "
        "a centralised run)",
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
    """How to build a named synchronous algorithm, and what it is in one line."""

    build: Callable[[SyncSettings], SyncAlgorithm]
    summary: str


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
    :class:`~riemfl.federated.BezierProblemTrainer`)."""

    build: Callable[[AsyncSettings], AsyncRule]
    summary: str
    learns_curves: bool = False


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
            lambda s: ar.FedBuff(s.buffer_size, s.server_lr, privacy=s.privacy),
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
    name: str, *, clients: int | None = None, k: int | None = None, seed: int = 0, data: Any = None
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
    elif isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise ParameterError(
            f"problem {name!r}: expected a number of clients (--clients) that is an int >= 1, "
            f"got {clients!r}"
        )
    return entry.build(clients, k, seed, data)


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
    settings = AsyncSettings(
        server_lr, buffer_size, operators, staleness, manifold, vartheta, privacy
    )
    return entry.build(settings)

"""Named problems and algorithms of the command line (``riemfl run PROBLEM --algorithm ALG``).

Each problem name maps to a builder and to the default step size the paper uses for it
(Zhang et al. 2024, App. A.4): eta = 1/beta for the MNIST/digits kPCA, 4e-3 for the synthetic
kPCA (Fig. 6), 1e-4 for LRMC (not stated in the paper; chosen by trial runs: at tau = 5,
eta = 1e-3 stalls and 1e-4 converges).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import DataError, ParameterError
from ..federated import AsyncRule, RFedAvg, RFedProj, RFedProx, RFedSVRG, SyncAlgorithm
from ..manifolds.base import Manifold
from ..problems import FederatedProblem, KPCAProblem, LRMCProblem, SoftmaxRegressionProblem

__all__ = [
    "PROBLEMS",
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
}

ALGORITHM_NAMES = ("rfedproj", "rfedavg", "rfedprox", "rfedsvrg")

#: asynchronous server rules (``riemfl run ... --engine async``)
ASYNC_RULE_NAMES = (
    "fedasync", "asgd", "fedbuff", "dcasgd", "asyncfeded", "fedortho", "fedgs", "orthograd",
    "orthopos", "orthostrict", "asyncbezier", "asyncbezier-ed",
)  # fmt: skip
#: the rules whose clients learn a Bezier curve (they need the problem's manifold, and a
#: Euclidean problem for :class:`~riemfl.federated.BezierProblemTrainer`)
CURVE_RULE_NAMES = ("asyncbezier", "asyncbezier-ed")


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
) -> SyncAlgorithm:
    """The algorithm called ``name`` (one of :data:`ALGORITHM_NAMES`) with its parameters."""
    if name == "rfedproj":
        return RFedProj(step_size, local_steps, global_step_size)
    if name == "rfedavg":
        return RFedAvg(step_size, local_steps, operators)
    if name == "rfedprox":
        return RFedProx(step_size, local_steps, mu, operators)
    if name == "rfedsvrg":
        return RFedSVRG(step_size, local_steps, operators)
    raise ParameterError(f"unknown algorithm {name!r}; expected one of {list(ALGORITHM_NAMES)}")


def build_async_rule(
    name: str,
    *,
    server_lr: float | None = None,
    buffer_size: int = 10,
    operators: str = "approximate",
    staleness: str = "constant",
    manifold: Manifold | None = None,
    vartheta: float = 1.0,
) -> AsyncRule:
    """The asynchronous server rule called ``name`` (one of :data:`ASYNC_RULE_NAMES`).

    ``server_lr`` None means the rule's default: eta_g = 1, beta = 1/K for FedBuff, and the FEMNIST
    values of Licudi et al. 2025, Table 3: 0.5 (AsyncBezier) and 0.25 (AsyncBezierED). The curve
    rules (:data:`CURVE_RULE_NAMES`) need the problem's ``manifold`` (their embedding's base) and
    take ``vartheta``, the OrthoDC strength of their correction.
    """
    from ..federated import async_manifold as am
    from ..federated import async_rules as ar

    if name in CURVE_RULE_NAMES and manifold is None:
        raise ParameterError(
            f"async rule {name!r} learns Bezier curves on the problem's manifold: pass manifold="
        )
    common = {"server_lr": 1.0 if server_lr is None else server_lr, "operators": operators}
    curve = {} if server_lr is None else {"server_lr": server_lr}
    makers: dict[str, Callable[[], AsyncRule]] = {
        "fedasync": lambda: ar.FedAsync(staleness=staleness, **common),
        "asgd": lambda: ar.ASGD(staleness=staleness, **common),
        "fedbuff": lambda: ar.FedBuff(buffer_size, server_lr),
        "dcasgd": lambda: ar.DCASGD(**common),
        "asyncfeded": lambda: ar.AsyncFedED(**common),
        "fedortho": lambda: ar.FedOrtho(**common),
        "fedgs": lambda: ar.FedGS(**common),
        "orthograd": lambda: ar.OrthoGrad(**common),
        "orthopos": lambda: ar.OrthoPos(**common),
        "orthostrict": lambda: ar.OrthoStrict(**common),
        "asyncbezier": lambda: am.AsyncBezier(manifold, vartheta=vartheta, **curve),
        "asyncbezier-ed": lambda: am.AsyncBezierED(manifold, vartheta=vartheta, **curve),
    }
    if name not in makers:
        raise ParameterError(f"unknown async rule {name!r}; expected one of {list(makers)}")
    return makers[name]()

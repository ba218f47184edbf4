r"""The synthetic regression tasks of FLoRAL (Almansoori et al. 2024, Sec. 6 and App. G.1-G.2).

Inputs :math:`x \sim \mathcal N(0, I_{d_x})`; client k belongs to cluster :math:`k \bmod C`
(:math:`\pi^k_c = \delta_{(k \bmod C) c}`). Targets:

* linear, eq. (9)/(43): :math:`y^k(x) = \sum_c \pi^k_c (W + \alpha U_c V_c^\top) x + b`,
  with :math:`W \in \mathbb{R}^{d_y\times d_x}`, :math:`U_c \in \mathbb{R}^{d_y\times r}`,
  :math:`V_c \in \mathbb{R}^{d_x\times r}`;
* MLP, eq. (44): :math:`y^k(x) = \Phi\,\bigl(\sum_c \pi^k_c (W + \alpha U_c V_c^\top)x +
  b\bigr)_+` with :math:`W \in \mathbb{R}^{d_h\times d_x}`, :math:`\Phi \in
  \mathbb{R}^{d_y\times d_h}`.

Each client holds a fixed training sample of :math:`N^k = \lceil f\, d\rceil` points, with d
the target's parameter count (:math:`d_y d_x` for the linear task, f = 0.25; :math:`d_h d_x +
d_y d_h` for the MLP, f = 0.5), so that :math:`N^k < d < \sum_k N^k`: a client cannot fit
alone, and collaboration with the wrong cluster hurts (App. G.1). A test sample per client (default
100 points) measures the personal test loss.

The paper does not give the sizes, scales or biases; riemfl uses the defaults of the authors'
public code (zeligism/FLoRAL), so that its runs compare with theirs:
:math:`d_x = 10`, :math:`d_y = 3` (linear) or 1 (MLP), :math:`d_h = 10`, r = 1,
:math:`\alpha = 2` ("uv_constant"; the MLP's eq. (44) has no :math:`\alpha`, the code applies
it to both); entries of W, U and b with standard deviation :math:`1/\sqrt{d_x}`, V with
:math:`1/\sqrt r`, :math:`\Phi` with :math:`1/\sqrt{d_h}`; a hidden bias b (the code adds one,
eqs. (43)-(44) have none); no observation noise. App. G.1's "N(0, 1/sqrt(d_in))" does not say
whether 1/sqrt(d_in) is the variance or the standard deviation (App. G.2: "variance
proportional to the input dimension"); riemfl reads it as the standard deviation, as the code
draws it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._validation import integer, real
from ...problems.checks import data_rng

__all__ = ["SyntheticTask", "synthetic_linear", "synthetic_mlp"]


@dataclass
class SyntheticTask:
    """Clients' data and the ground truth of a synthetic task.

    Attributes
    ----------
    clients : list of (X_train, y_train, X_test, y_test)
    clusters : numpy.ndarray of int, shape (K,)
        The true cluster :math:`k \\bmod C` of every client.
    n_clusters : int
    kind : {"linear", "mlp"}
    truth : dict
        ``W``, ``U`` (C, ., r), ``V`` (C, d_x, r), ``b``, ``lora_scale``, and ``Phi`` (MLP).
    sizes : dict
        ``d_x``, ``d_y``, ``d_h`` (MLP), ``rank``, ``d`` (target parameter count).
    """

    clients: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    clusters: np.ndarray
    n_clusters: int
    kind: str
    truth: dict[str, Any] = field(repr=False)
    sizes: dict[str, int] = field(default_factory=dict)

    def cluster_weight(self, c: int) -> np.ndarray:
        """The true first-layer weight of cluster c: :math:`W + \\alpha U_c V_c^\\top`."""
        t = self.truth
        return t["W"] + t["lora_scale"] * t["U"][c] @ t["V"][c].T


def _check(n_clients: int, n_clusters: int, fraction: float, n_test: int, name: str) -> None:
    integer(n_clients, f"{name}: n_clients", minimum=1)
    integer(n_clusters, f"{name}: n_clusters (<= n_clients)", minimum=1, maximum=n_clients)
    integer(n_test, f"{name}: n_test", minimum=1)
    real(fraction, f"{name}: samples_fraction", above=0)


def _truth(
    rng: np.random.Generator,
    d_out: int,
    d_x: int,
    rank: int,
    n_clusters: int,
    lora_scale: float,
    bias: bool,
) -> dict[str, Any]:
    s = 1.0 / math.sqrt(d_x)
    return {
        "W": rng.normal(0.0, s, (d_out, d_x)),
        "U": rng.normal(0.0, s, (n_clusters, d_out, rank)),
        "V": rng.normal(0.0, 1.0 / math.sqrt(rank), (n_clusters, d_x, rank)),
        "b": rng.normal(0.0, s, d_out) if bias else np.zeros(d_out),
        "lora_scale": float(lora_scale),
    }


def _build(
    name: str,
    kind: str,
    n_clients: int,
    n_clusters: int,
    d_out: int,
    rank: int,
    fraction: float,
    n_test: int,
    seed: int,
    sizes: dict[str, int],
    truth_args: dict,
    target,
) -> SyntheticTask:
    """Check, draw the truth, then every client's fixed training and test sample."""
    _check(n_clients, n_clusters, fraction, n_test, name)
    d_x = sizes["d_x"]
    integer(rank, f"{name}: rank", minimum=1, maximum=min(d_x, d_out))
    rng = data_rng(seed, name)
    truth = _truth(rng, d_out, d_x, rank, n_clusters, **truth_args)
    if kind == "mlp":
        truth["Phi"] = rng.normal(0.0, 1.0 / math.sqrt(d_out), (sizes["d_y"], d_out))
    clusters = np.arange(n_clients) % n_clusters
    task = SyntheticTask([], clusters, n_clusters, kind, truth, {**sizes, "rank": rank})
    n_train = math.ceil(fraction * sizes["d"])
    for c in clusters:
        x_tr = rng.standard_normal((n_train, d_x))
        x_te = rng.standard_normal((n_test, d_x))
        y_tr, y_te = target(task, x_tr, int(c)), target(task, x_te, int(c))
        task.clients.append(tuple(a.astype(np.float32) for a in (x_tr, y_tr, x_te, y_te)))
    return task


def _linear_target(task: SyntheticTask, x: np.ndarray, c: int) -> np.ndarray:
    return x @ task.cluster_weight(c).T + task.truth["b"]


def _mlp_target(task: SyntheticTask, x: np.ndarray, c: int) -> np.ndarray:
    return np.maximum(_linear_target(task, x, c), 0.0) @ task.truth["Phi"].T


def synthetic_linear(
    n_clients: int = 10,
    n_clusters: int = 2,
    *,
    d_x: int = 10,
    d_y: int = 3,
    rank: int = 1,
    lora_scale: float = 2.0,
    samples_fraction: float = 0.25,
    n_test: int = 100,
    bias: bool = True,
    seed: int = 0,
) -> SyntheticTask:
    """The synthetic linear task, eq. (43) (module docstring; paper: K = 10, C = 2).

    Returns
    -------
    SyntheticTask
        Targets of shape (n, d_y); :math:`N^k = \\lceil` ``samples_fraction`` :math:`d_y d_x
        \\rceil` training rows per client.
    """
    sizes = {"d_x": d_x, "d_y": d_y, "d": d_y * d_x}
    truth_args = {"lora_scale": lora_scale, "bias": bias}
    return _build(
        "synthetic_linear",
        "linear",
        n_clients,
        n_clusters,
        d_y,
        rank,
        samples_fraction,
        n_test,
        seed,
        sizes,
        truth_args,
        _linear_target,
    )


def synthetic_mlp(
    n_clients: int = 20,
    n_clusters: int = 4,
    *,
    d_x: int = 10,
    d_h: int = 10,
    d_y: int = 1,
    rank: int = 1,
    lora_scale: float = 2.0,
    samples_fraction: float = 0.5,
    n_test: int = 100,
    bias: bool = True,
    seed: int = 0,
) -> SyntheticTask:
    """The synthetic MLP task, eq. (44) (module docstring; paper: K = 20, C = 4).

    The model the paper fits is wider, hidden width :math:`m d_h` with m = 2 (G.2).
    """
    sizes = {"d_x": d_x, "d_y": d_y, "d_h": d_h, "d": d_h * d_x + d_y * d_h}
    truth_args = {"lora_scale": lora_scale, "bias": bias}
    return _build(
        "synthetic_mlp",
        "mlp",
        n_clients,
        n_clusters,
        d_h,
        rank,
        samples_fraction,
        n_test,
        seed,
        sizes,
        truth_args,
        _mlp_target,
    )

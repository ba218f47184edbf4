r"""The FLoRAL server: aggregation of a round's uploads, then an optional server optimiser.

:class:`FloralAggregator` applies the averages of Almansoori et al. 2024, Alg. 1 (lines 11-12)
to flat federated vectors (the layout of :class:`~riemfl.nn.floral.FederatedLayout`): base
parameters by :math:`N^k`, cluster parameters by :math:`\hat\pi^k_c N^k`
(``adaptors="factors"``, Algorithm 1) or, for LoRA factor pairs, by averaging products and
retracting to the fixed-rank manifold (``adaptors="products"``, riemfl's addition, see
:mod:`riemfl.nn.floral.aggregation`). The router never reaches the server: the client sends only
:math:`N^k` and :math:`\hat\pi^k` (the aggregation weights Algorithm 1 needs).

**Server optimiser** (not in the paper, whose Alg. 1 only averages; the authors' public code,
zeligism/FLoRAL, has one): the averaged model :math:`\bar w` defines the pseudo-gradient
:math:`g = w - \bar w` and the server steps :math:`w \leftarrow w - \mathrm{opt}(g)`.
:class:`ServerOptimizer` ``"sgd"`` with learning rate 1 is exactly Algorithm 1 (the default);
``"adam"`` is Adam on g (FedAdam-like; the public code's CIFAR-100 setting, learning rate 1e-3,
:math:`\beta = (0.9, 0.999)`, :math:`\epsilon = 10^{-8}`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..._validation import real
from ...errors import ParameterError, ShapeError
from .aggregation import (
    average_base,
    average_clusters,
    average_products,
    cluster_probabilities,
    factor_average_error,
)
from .layout import FederatedLayout

__all__ = ["ServerOptimizer", "FloralAggregator", "ADAPTOR_AGGREGATIONS"]

#: "factors": Algorithm 1 (factor-wise averages); "products": manifold-aware (riemfl's)
ADAPTOR_AGGREGATIONS = ("factors", "products")


class ServerOptimizer:
    """SGD or Adam on the server's pseudo-gradient (module docstring).

    Parameters
    ----------
    kind : {"sgd", "adam"}
    lr : float, optional
        Default 1 for SGD (plain averaging), 1e-3 for Adam.
    betas : (float, float)
    eps : float
    """

    def __init__(
        self,
        kind: str = "sgd",
        lr: float | None = None,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        if kind not in ("sgd", "adam"):
            raise ParameterError(f"ServerOptimizer: kind must be 'sgd' or 'adam', got {kind!r}")
        lr = (1.0 if kind == "sgd" else 1e-3) if lr is None else lr
        self.kind = kind
        self.lr = real(lr, "ServerOptimizer: lr", above=0)
        self.betas = tuple(real(b, "ServerOptimizer: betas", at_least=0, below=1) for b in betas)
        self.eps = real(eps, "ServerOptimizer: eps", above=0)
        self.reset()

    def reset(self) -> None:
        self.t = 0
        self.m: np.ndarray | None = None
        self.v: np.ndarray | None = None

    def step(self, g: np.ndarray) -> np.ndarray:
        """The server's move for pseudo-gradient ``g`` (subtract it from the model)."""
        if self.kind == "sgd":
            return self.lr * g
        b1, b2 = self.betas
        self.t += 1
        self.m = (1 - b1) * g if self.m is None else b1 * self.m + (1 - b1) * g
        self.v = (1 - b2) * g * g if self.v is None else b2 * self.v + (1 - b2) * g * g
        m_hat = self.m / (1 - b1**self.t)
        v_hat = self.v / (1 - b2**self.t)
        return self.lr * m_hat / (np.sqrt(v_hat) + self.eps)

    def apply(self, current: np.ndarray, averaged: np.ndarray) -> np.ndarray:
        r""":math:`w - \mathrm{opt}(w - \bar w)`; exactly ``averaged`` for SGD with lr = 1."""
        if self.kind == "sgd" and self.lr == 1.0:
            return averaged
        return current - self.step(current - averaged)

    def state_dict(self) -> dict[str, Any]:
        return {"t": self.t, "m": self.m, "v": self.v}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.t, self.m, self.v = int(state["t"]), state["m"], state["v"]

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "lr": self.lr, "betas": list(self.betas), "eps": self.eps}


class FloralAggregator:
    """Aggregates flat federated vectors of one round (module docstring).

    Parameters
    ----------
    layout : FederatedLayout
    adaptors : {"factors", "products"}
        Factor-wise averages (Algorithm 1) or the manifold-aware product average + truncated
        SVD on ``FixedRank`` (riemfl's addition). Only LoRA factor pairs differ; bias adaptors
        and the ensemble's models are averaged alike.
    server_optimizer : ServerOptimizer, optional
        Default: SGD with learning rate 1 (exactly the averages).
    """

    def __init__(
        self,
        layout: FederatedLayout,
        adaptors: str = "factors",
        server_optimizer: ServerOptimizer | None = None,
    ) -> None:
        if adaptors not in ADAPTOR_AGGREGATIONS:
            raise ParameterError(
                f"FloralAggregator: adaptors must be one of {ADAPTOR_AGGREGATIONS}, "
                f"got {adaptors!r}"
            )
        self.layout = layout
        self.adaptors = adaptors
        self.server_optimizer = (
            server_optimizer if server_optimizer is not None else ServerOptimizer()
        )

    def aggregate(
        self,
        current: np.ndarray,
        uploads: np.ndarray,
        n_samples: np.ndarray,
        pi: np.ndarray | None = None,
    ) -> tuple[np.ndarray, dict[str, float]]:
        """The new global vector from the participants' uploads.

        Parameters
        ----------
        current : array (D,)
            The global federated vector the round started from.
        uploads : array (K, D)
            The participants' federated vectors after local training.
        n_samples : array (K,)
            :math:`N^k`.
        pi : array (K, C), optional
            :math:`\\hat\\pi^k` at the end of each local epoch; required with cluster parameters.

        Returns
        -------
        (array (D,), dict)
            The new vector, and diagnostics: ``empty_clusters`` (clusters no participant routed
            to), ``product_fallbacks`` (clusters whose product had rank < r), and
            ``factor_average_error`` (mean over adaptors and clusters of
            :func:`~riemfl.nn.floral.aggregation.factor_average_error`; NaN without LoRA).
        """
        lay = self.layout
        uploads = np.asarray(uploads, dtype=np.float64)
        current = np.asarray(current, dtype=np.float64)
        if current.shape != (lay.size,) or uploads.ndim != 2 or uploads.shape[1] != lay.size:
            raise ShapeError(
                f"aggregate: current {current.shape} and uploads {uploads.shape}; expected "
                f"({lay.size},) and (K, {lay.size})"
            )
        bad = np.flatnonzero(~np.isfinite(uploads).all(1))
        if bad.size or not np.isfinite(current).all():
            raise ParameterError(
                f"aggregate: uploads of clients (rows) {bad.tolist()} or the current vector "
                "contain NaN or infinite values; expected finite vectors (drop those clients)"
            )
        clients = lay.split(uploads)
        previous = lay.split(current)
        new = {k: np.array(v) for k, v in previous.items()}
        for name in lay.names("base"):
            new[name] = average_base(clients[name], n_samples)
        info = {"empty_clusters": 0.0, "product_fallbacks": 0.0, "factor_average_error": math.nan}
        if lay.n_clusters is not None:
            if pi is None:
                raise ParameterError("aggregate: this model has cluster parameters; pass pi (K, C)")
            probs = cluster_probabilities(pi, n_samples)
            if probs.p_c.shape != (lay.n_clusters,):
                raise ShapeError(
                    f"pi has {probs.p_c.size} clusters; the model has {lay.n_clusters}"
                )
            info["empty_clusters"] = float(probs.empty.sum())
            for name in lay.names("cluster"):
                new[name] = average_clusters(clients[name], probs, previous[name])
            errors = []
            for pair in lay.factor_pairs:
                a = pair.out_view.to_matrix(clients[pair.out_name])
                b = pair.in_view.to_matrix(clients[pair.in_name])
                err = factor_average_error(a, b, probs.p_k_given_c)
                errors.extend(err[np.isfinite(err)].tolist())
                if self.adaptors == "products":
                    prev = (
                        pair.out_view.to_matrix(previous[pair.out_name]),
                        pair.in_view.to_matrix(previous[pair.in_name]),
                    )
                    na, nb, fb = average_products(a, b, probs, prev)
                    new[pair.out_name] = pair.out_view.from_matrix(na)
                    new[pair.in_name] = pair.in_view.from_matrix(nb)
                    info["product_fallbacks"] += fb
            if errors:
                info["factor_average_error"] = float(np.mean(errors))
        return self.server_optimizer.apply(current, lay.join(new)), info

    def describe(self) -> dict[str, Any]:
        return {"adaptors": self.adaptors, "server_optimizer": self.server_optimizer.describe()}

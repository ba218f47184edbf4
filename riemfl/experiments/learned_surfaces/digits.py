r"""The digits runs: FedAsync, AsyncBezier and AsyncBezierTriangle at equal server steps.

One run: the clients of seed ``seed`` (:func:`riemfl.nn.digits_clients`, the FEMNIST stand-in of
the Licudi et al. 2025 reproduction), an MLP initialised from the same seed, the paper's scheduler
(App. B.0.1: 2 workers, durations proportional to the local batches) and ``s.steps`` server
steps. The clients: plain FedProx Adam for FedAsync,
:class:`~riemfl.nn.BezierClientTrainer` for AsyncBezier and
:class:`~riemfl.nn.surface_trainer.SurfaceClientTrainer` for the triangle (K1 = ``s.epochs``
warm-up epochs, then ``s.curve_epochs`` curve or surface epochs).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...federated import AsyncBezier, FedAsync, RunOptions, run_async
from ...federated.async_manifold.triangle import AsyncBezierTriangle
from ...federated.async_rules import AsyncRule
from ...federated.timing import ProportionalTime
from ...manifolds.euclidean import Euclidean
from .settings import Settings

__all__ = ["base_trainer", "client", "client_data", "rule", "one_run"]


def client_data(s: Settings, seed: int) -> list[Any]:
    """The clients' (X_train, y_train, X_test, y_test) of seed ``seed``."""
    from ...nn import digits_clients

    return digits_clients(n_clients=s.n_clients, alpha=s.alpha, seed=seed)


def base_trainer(s: Settings, seed: int, data: list[Any] | None = None) -> Any:
    """The clients' :class:`~riemfl.nn.TorchClientTrainer` (MLP 64-hidden-10) on ``data``
    (default: :func:`client_data` of seed ``seed``)."""
    from ...nn import MLP, TorchClientTrainer

    data = client_data(s, seed) if data is None else data
    return TorchClientTrainer(
        lambda: MLP([64, s.hidden, 10]),
        data,
        epochs=s.epochs,
        lr=s.local_lr,
        mu=s.mu,
        batch_size=s.batch_size,
    )


def client(method: str, base: Any, s: Settings, curve_epochs: int | None = None) -> Any:
    """The client of ``method`` around the plain trainer ``base``."""
    from ...nn import BezierClientTrainer
    from ...nn.surface_trainer import SurfaceClientTrainer

    epochs = s.curve_epochs if curve_epochs is None else curve_epochs
    if method == "AsyncBezier":
        return BezierClientTrainer(base, curve_epochs=epochs, curve_lr=s.curve_lr)
    if method.startswith("AsyncBezierTriangle"):
        return SurfaceClientTrainer(base, surface_epochs=epochs, surface_lr=s.curve_lr, band=s.band)
    return base


def rule(method: str, dim: int, s: Settings) -> AsyncRule:
    """The server rule of ``method`` with :math:`\\eta_g` = ``s.server_lr``."""
    if method == "FedAsync":
        return FedAsync(server_lr=s.server_lr)
    if method == "AsyncBezier":
        return AsyncBezier(Euclidean(dim), s.server_lr)
    path = "geodesic" if method.endswith("-geodesic") else "segment"
    return AsyncBezierTriangle(Euclidean(dim), s.server_lr, path=path)


def one_run(method: str, seed: int, s: Settings) -> dict[str, Any]:
    """One run: the final test accuracy and loss, the curve of test accuracy and loss against
    server steps, the client updates and mean staleness, and the final model."""
    base = base_trainer(s, seed)
    x0 = base.initial_parameters(seed)
    h = run_async(
        client(method, base, s),
        rule(method, x0.size, s),
        s.steps,
        workers=s.workers,
        timing=ProportionalTime(speed=s.scheduler_k),
        scheduler="paper",
        scheduler_k=s.scheduler_k,
        x0=x0,
        options=RunOptions(seed=seed, record_every=s.record_every),
    )
    return {
        "method": method,
        "seed": seed,
        "accuracy": float(h.metrics["accuracy"][-1]),
        "loss": float(h.metrics["loss"][-1]),
        "updates": len(h.log["client"]),
        "mean_staleness": float(np.mean(h.log["staleness"])),
        "curve": {k: [float(v) for v in h.metrics[k]] for k in ("step", "accuracy", "loss")},
        "final_point": np.asarray(h.final_point, dtype=np.float64),
    }

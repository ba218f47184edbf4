r"""Figure 2 of Almansoori et al. 2024: FLoRAL with Batch NorA on the synthetic MLP + BN task.

The task (App. F.2, "Experiment") is the synthetic MLP of App. G.2, eq. (44), with the hidden
vectors normalised per client before the activation: client k (cluster c) draws its fixed
sample :math:`x^k` (training and test rows), computes :math:`h = (W + \alpha U_c V_c^\top)x + b`,
normalises every coordinate of :math:`h` with the mean and standard deviation over its own
sample, and its targets are :math:`y = \Phi\,(\hat h)_+`. "The normalization is critically
dependent on the sampled :math:`x^k` for each client", which suits a model with a batch
normalisation after its first layer: ``Linear(d_x, 2 d_h) -> BatchNorm1d -> ReLU ->
Linear(2 d_h, d_y)``.

The figure plots the test loss; the paper does not list its curves, so :data:`FIG2_VARIANTS`
compares what App. F.2 sets against each other: FedAvg (no adaptor), FLoRAL with LoRA and bias
adaptors on the linear layers, and FLoRAL with, in addition, App. F.2's scale adaptors on the
batch normalisation, Batch NorA without and with the reparameterisation of eq. (42). The base
batch normalisation's running statistics are shared (averaged like the base, as federated
averaging averages a model's state) and Batch NorA's own statistics are local, the setting the
paper reports ("reparameterized Batch-NorA ... with local statistics"); the last variant keeps
the base statistics local too (where the three adaptors of the batch normalisation coincide,
:mod:`riemfl.nn.floral.norm`).

K = 20 clients and C = 4 clusters as the paper's synthetic MLP (App. G.2). Settings the paper
does not give, from the authors' public code (zeligism/FLoRAL, its synthetic MLP + BN task):
batch size 5, learning rate 0.03, router learning rate 1 with noise 1, adaptors of rank 1, the
statistics over the client's whole sample with the unbiased standard deviation; 300 rounds (the
public code runs 2000). The paper normalises "before feeding them to the activation", the
public code after the activation: the paper's order is used. ``quick`` runs K = 8, C = 2 for
10 rounds (a test, not a result).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..styles import TITLE_FONTSIZE, Styles, legend, pyplot, save

__all__ = ["FIG2_VARIANTS", "Fig2Settings", "QUICK", "FULL", "synthetic_mlp_bn", "run_fig2"]

#: label -> ``floralize`` keywords (None: the plain model, FedAvg)
FIG2_VARIANTS: dict[str, dict[str, Any] | None] = {
    "FedAvg": None,
    "FLoRAL": {"layer_types": ("linear",)},
    "FLoRAL + norm adaptors": {"layer_types": ("linear", "batchnorm"), "norm_variant": "scale"},
    "FLoRAL + Batch NorA": {"layer_types": ("linear", "batchnorm"), "norm_variant": "nora_naive"},
    "FLoRAL + Batch NorA (42)": {"layer_types": ("linear", "batchnorm"), "norm_variant": "nora"},
    "FLoRAL + Batch NorA (42), local statistics": {
        "layer_types": ("linear", "batchnorm"),
        "norm_variant": "nora",
        "norm_statistics": "local",
    },
}


@dataclass(frozen=True)
class Fig2Settings:
    """The run of every variant (module docstring)."""

    n_clients: int
    n_clusters: int
    rounds: int
    record_every: int
    batch_size: int = 5
    lr: float = 0.03
    router_lr: float = 1.0
    router_noise: float = 1.0
    seed: int = 0


#: the figure: the paper's synthetic MLP sizes
FULL = Fig2Settings(n_clients=20, n_clusters=4, rounds=300, record_every=10)
#: a short run of the same code (under 20 s on one core)
QUICK = Fig2Settings(n_clients=8, n_clusters=2, rounds=10, record_every=2)


def synthetic_mlp_bn(n_clients: int = 20, n_clusters: int = 4, *, seed: int = 0) -> Any:
    """The synthetic MLP + BN task (module docstring): :func:`~riemfl.nn.floral.synthetic_mlp`'s
    clients, truth and inputs, with the targets of the normalised hidden layer.

    Returns
    -------
    riemfl.nn.floral.SyntheticTask
        ``kind`` "mlp"; ``truth`` also holds each client's hidden ``mean`` and ``std`` (K, d_h).
    """
    from ...nn.floral import synthetic_mlp

    task = synthetic_mlp(n_clients, n_clusters, seed=seed)
    t = task.truth
    means, stds, clients = [], [], []
    for (x_tr, _, x_te, _), c in zip(task.clients, task.clusters, strict=True):
        x = np.concatenate([x_tr, x_te]).astype(np.float64)
        h = x @ task.cluster_weight(int(c)).T + t["b"]
        mean, std = h.mean(0), h.std(0, ddof=1)
        y = np.maximum((h - mean) / std, 0.0) @ t["Phi"].T
        n = len(x_tr)
        clients.append((x_tr, y[:n].astype(np.float32), x_te, y[n:].astype(np.float32)))
        means.append(mean)
        stds.append(std)
    task.clients = clients
    task.truth = {**t, "mean": np.array(means), "std": np.array(stds)}
    return task


def _model(task: Any, variant: dict[str, Any] | None, seed: int) -> Any:
    import torch
    from torch import nn

    from ...nn.floral import floralize

    z = task.sizes
    width = 2 * z["d_h"]  # the model's hidden width m d_h, m = 2 (App. G.2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        base = nn.Sequential(
            nn.Linear(z["d_x"], width),
            nn.BatchNorm1d(width),
            nn.ReLU(),
            nn.Linear(width, z["d_y"]),
        )
    if variant is None:
        return base
    return floralize(base, task.n_clusters, rank=1, seed=seed, **variant)


def _run(task: Any, variant: dict[str, Any] | None, s: Fig2Settings, progress: bool) -> Any:
    from ...federated.run_core import RunOptions
    from ...nn.floral import FloralTrainer, run_floral

    model = _model(task, variant, s.seed)
    if variant is not None:
        model.router.noise_std = s.router_noise
    trainer = FloralTrainer(
        model,
        task.clients,
        loss="mse",
        lr=s.lr,
        router_lr=s.router_lr,
        batch_size=s.batch_size,
        clusters=task.clusters,
    )
    options = RunOptions(seed=s.seed, record_every=s.record_every, progress=progress)
    return run_floral(trainer, s.rounds, options=options)


def run_fig2(
    out_dir: str | Path,
    quick: bool = True,
    progress: bool = False,
    settings: Fig2Settings | None = None,
) -> dict[str, Any]:
    """Train every variant of :data:`FIG2_VARIANTS`; write ``fig2.json`` and ``fig2.png``.

    Parameters
    ----------
    out_dir : path
        Created if missing.
    quick : bool, default True
        :data:`QUICK` (a short run) instead of :data:`FULL`.
    progress : bool, default False
        Show each run's progress bar.
    settings : Fig2Settings, optional
        Overrides ``quick``.

    Returns
    -------
    dict
        ``settings``; ``variants``: per label ``round``, ``loss`` (personal test MSE pooled over
        clients, at every recorded round) and ``final_loss``; ``files``.
    """
    s = settings if settings is not None else (QUICK if quick else FULL)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    task = synthetic_mlp_bn(s.n_clients, s.n_clusters, seed=s.seed)
    variants = {}
    for label, variant in FIG2_VARIANTS.items():
        history = _run(task, variant, s, progress)
        m = history.metrics
        variants[label] = {
            "round": [int(r) for r in m["round"]],
            "loss": [float(v) for v in m["loss"]],
            "final_loss": float(m["loss"][-1]),
        }
    result = {
        "settings": asdict(s),
        "variants": variants,
        "files": [str(out / "fig2.json"), str(out / "fig2.png")],
    }
    (out / "fig2.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    fig2_plot(result, out / "fig2.png")
    return result


def fig2_plot(result: dict[str, Any], path: str | Path) -> Any:
    """``fig2.png``: personal test loss against the round, one curve per variant (log scale).

    Returns the (closed) figure.
    """
    plt = pyplot()
    styles = Styles(list(FIG2_VARIANTS))
    fig, ax = plt.subplots(figsize=(6, 4.4), layout="constrained")
    for label, curve in result["variants"].items():
        loss = [v if math.isfinite(v) and v > 0 else math.nan for v in curve["loss"]]
        ax.semilogy(curve["round"], loss, **styles.of(label))
    s = result["settings"]
    ax.set_title(
        f"synthetic MLP + BN (K = {s['n_clients']}, C = {s['n_clusters']})",
        fontsize=TITLE_FONTSIZE,
    )
    ax.set_xlabel("round")
    ax.set_ylabel("personal test loss (MSE)")
    ax.grid(True, which="both", alpha=0.3)
    legend(ax)
    return save(fig, path)

"""FLoRAL (Almansoori et al. 2024): Table 1 on the digits stand-in, synthetic curves.

``riemfl reproduce floral [--quick] [--data MNIST_FILE]`` runs

1. **Table 1, MNIST columns**, on rotation and label-shift clusters of scikit-learn's digits
   (the offline MNIST stand-in; the user's MNIST with ``--data``), full and reduced data:
   FedAvg, Local Adaptor, Ensemble (learned and pi* routing), FLoRAL(1%) and FLoRAL(10%)
   (learned and pi*), with the paper's MNIST numbers beside ours and a plain statement of
   where the ordering agrees; with reduced data at the paper's 5% and at 14% (the paper's
   10-row minimum), the FLoRAL-vs-ensemble gap (pi*) paired by seed over more seeds, with a
   verdict rule fixed in advance;
2. **the synthetic tasks** (linear, K = 10, C = 2; MLP, K = 20, C = 4): personal test-loss
   curves of the same methods (Table 3 of the paper is a plot);
3. **factor averaging against the manifold-aware aggregation** (average the adaptor products,
   retract with the truncated SVD on ``FixedRank``; the paper's Algorithm 1 averages the
   factors U and V, which is not gauge-invariant): the same FLoRAL runs with
   both, a FedBuff + FLoRAL asynchronous run with both, and a gauge-invariance check.

Settings (the paper, Sec. 6 and App. G, gives no training hyperparameters; "the authors' code" is
their public implementation, ``zeligism/FLoRAL`` in ``docs/references.md``):

* digits: K = 20 clients (5 per cluster; 1438 training rows, 71-72 per client), 10 sampled
  per round (50%; MNIST: 300 clients, 10%), C = 4, rotations 0/90/180/270 degrees or labels
  y + c mod 10, IID split, client k in cluster k mod 4; the model is the paper's MNIST
  2-layer ReLU MLP with 200 hidden units (64 -> 200 -> 10);
* reduced data: the paper keeps 5% of each client's rows, at least 10 (Sec. 6), which on
  MNIST (200 rows per client) is 10 rows, 5%. On digits the minimum would keep 10 of ~72
  rows, 14%, so there are two reduced regimes: "Reduced 5%" (round(0.05 N^k), at least 1
  row: 4 rows per client, 80 rows in all, 5.6% of the training rows; a cluster's 20 rows
  often lack one or two of the 10 digits, which is the regime, and no client is ever left
  without rows) and "Reduced 14%" (10 rows per client, the paper's per-client count); both
  are compared with the paper's reduced columns; with ``--data`` only the 5% ones (the same
  rows there);
* clients: 1 local epoch of plain SGD (authors' code), batch 16 (the code's 32 would give 2
  steps per round on 72 rows), lr 0.1 (the code's MNIST value); router lr 1.0 and router noise
  1.0 x U[0, 1) (code: 0.1 and 1.0; with 300 rounds instead of 500 the router at 0.1 has
  not separated the label-shift clusters); ScaledGD preconditioning eps = 1e-5 on
  (the paper's only "trick", App. D); bias adaptors on; LoRA init of the authors' code;
* Local Adaptor: FLoRAL with C = 1, rho = 10% and the adaptor kept private (authors' code);
  Ensemble: 4 full models mixed at the output (authors' code);
* evaluation: every client on the whole held-out set (359 images) under its cluster's
  transform, pooled over clients (the authors split the test set among clients: same
  expectation, larger variance on 359 images); accuracy of the last round;
* rounds: 300 with full data, 600 with reduced data (a reduced client takes 1 step per round;
  the authors' code also runs 3 x longer, 1500 rounds against 500); ``--quick``: 80 and 240; seeds 0
  and 1 (``--quick``: 0); mean +/- std over seeds; ``--quick`` runs the 5% columns only;
* the FLoRAL-vs-ensemble gap with reduced data: FLoRAL(rho) (pi*) minus Ensemble (pi*),
  paired by seed; those three rows of the reduced columns run on seeds 0 to 5
  (``GAP_SEEDS``), the other rows on seeds 0 and 1. Rule fixed before the runs: "within 1
  point of the ensemble" (the paper's gaps: -1.2 to +0.0) agrees where the 95% Student-t
  interval of the mean gap lies at or above -1, does not agree where it lies below -1,
  undecided otherwise. Why six seeds: a pilot (seeds 10 to 13) measured a per-seed std of
  the paired gap of 0.5 to 4.4 points; with six seeds the interval's half-width is 1.05 std
  (at most ~4.6 points), narrower than the distance from -1 of every pilot gap (3 to 11
  points), where four seeds would leave the noisiest row undecided; resolving a 1-point
  difference would take 12 to 75 seeds (``docs/floral.md``);
* synthetic: the code's defaults (d_x = 10, d_y = 3 / 1, d_h = 10, r = 1, alpha = 2,
  batch 4 / 8, lr 0.1 / 0.03), 300 / 100 rounds (``--quick``: 100 / 40; the code: 2000),
  full participation,
  FLoRAL with the true rank r = 1;
* the aggregation comparison: FLoRAL(10%) on full label shift, seed 0, with the manifold-aware
  rule (the factor-averaging runs are Table 1's), and FedBuff + FLoRAL (buffer 5, 10 workers,
  exponential compute times, 100 server steps; ``--quick``: 30) with both rules;
* with ``--data`` (real MNIST): K = 300, 30 clients per round, batch 32, 500 / 1500 rounds
  (``--quick``: 50 / 150), router lr 0.1, per-client test shards (the paper's setting).

Completed runs are checkpointed under ``out/checkpoints``; an interrupted reproduction resumes
where it stopped.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..progress import ProgressBar
from ._threads import single_torch_thread
from .spread import mean_spread, mean_std, over_seeds
from .styles import TITLE_FONTSIZE, Styles, pyplot, save, shared_legend

__all__ = [
    "Method",
    "METHODS",
    "Column",
    "COLUMNS",
    "PAPER_COLUMNS",
    "PAPER_MNIST",
    "GAP_METHODS",
    "GAP_SEEDS",
    "Settings",
    "reproduce",
]


@dataclass(frozen=True)
class Method:
    """One row of Table 1: the model kind, its routing and its budget."""

    label: str
    kind: str  # "fedavg" | "local" | "ensemble" | "floral"
    routing: str | None = None  # "learned" | "fixed" (pi*)
    rho: float | None = None

    @property
    def key(self) -> str:
        return (
            self.label.lower()
            .replace(" ", "")
            .replace("(", "-")
            .replace(")", "")
            .replace("%", "pct")
            .replace("*", "star")
        )


METHODS: tuple[Method, ...] = (
    Method("FedAvg", "fedavg"),
    Method("Local Adaptor", "local", rho=0.1),
    Method("Ensemble (learned)", "ensemble", "learned"),
    Method("Ensemble (pi*)", "ensemble", "fixed"),
    Method("FLoRAL(1%) (learned)", "floral", "learned", 0.01),
    Method("FLoRAL(1%) (pi*)", "floral", "fixed", 0.01),
    Method("FLoRAL(10%) (learned)", "floral", "learned", 0.1),
    Method("FLoRAL(10%) (pi*)", "floral", "fixed", 0.1),
)


@dataclass(frozen=True)
class Column:
    """One column of Table 1: a task (transform) and how much of each client's data it keeps.

    ``keep`` is None for the full data, else the reduced regime keeps
    ``max(min_rows, round(keep N^k))`` of each client's N^k training rows
    (:func:`riemfl.nn.floral.reduce_rows`); ``paper`` indexes the paper's MNIST columns
    (``PAPER_COLUMNS``) the column is compared with.
    """

    label: str
    transform: str  # "rotation" | "label_shift"
    paper: int
    keep: float | None = None
    min_rows: int = 1

    @property
    def reduced(self) -> bool:
        return self.keep is not None

    @property
    def ten_row_minimum(self) -> bool:
        """Reduced with the paper's 10-row minimum (on digits: 14% of the rows)."""
        return self.reduced and self.min_rows == 10

    @property
    def key(self) -> str:
        """The run files' name of the regime (``reduced``: the 10-row minimum, as before)."""
        if not self.reduced:
            return "full"
        return "reduced" if self.ten_row_minimum else f"reduced{round(100 * self.keep)}pct"


#: the paper's MNIST columns (Almansoori et al. 2024, Table 1), in PAPER_MNIST order
PAPER_COLUMNS: tuple[str, ...] = ("Full R", "Full LS", "Reduced R", "Reduced LS")

#: Table 1 columns of the digits tasks. The paper's reduced regime keeps 5% of each client's
#: rows, at least 10 (Sec. 6): on MNIST (200 rows per client) that is 10 rows, 5%; on digits
#: (~72 rows per client) the minimum dominates and keeps 14%. "Reduced 5%" drops the minimum
#: (4 rows per client), "Reduced 14%" keeps it (10 rows per client, the paper's count).
COLUMNS: tuple[Column, ...] = (
    Column("Full R", "rotation", 0),
    Column("Full LS", "label_shift", 1),
    Column("Reduced 5% R", "rotation", 2, keep=0.05, min_rows=1),
    Column("Reduced 5% LS", "label_shift", 3, keep=0.05, min_rows=1),
    Column("Reduced 14% R", "rotation", 2, keep=0.05, min_rows=10),
    Column("Reduced 14% LS", "label_shift", 3, keep=0.05, min_rows=10),
)

#: Almansoori et al. 2024, Table 1, MNIST columns: mean and spread, in PAPER_COLUMNS order
PAPER_MNIST: dict[str, tuple[tuple[float, float], ...]] = {
    "FedAvg": ((91.5, 0.6), (25.8, 2.4), (78.2, 0.6), (23.2, 0.9)),
    "Local Adaptor": ((86.6, 0.3), (84.5, 1.8), (47.4, 5.4), (32.0, 2.3)),
    "Ensemble (learned)": ((92.0, 0.1), (93.8, 0.5), (66.7, 5.3), (86.4, 0.4)),
    "Ensemble (pi*)": ((95.8, 0.3), (95.6, 0.3), (88.2, 1.4), (87.6, 1.3)),
    "FLoRAL(1%) (learned)": ((91.3, 0.6), (89.7, 3.2), (73.1, 3.7), (46.0, 9.9)),
    "FLoRAL(1%) (pi*)": ((93.9, 0.8), (93.7, 0.2), (87.5, 2.1), (87.6, 0.5)),
    "FLoRAL(10%) (learned)": ((91.8, 1.0), (93.1, 0.9), (75.7, 2.3), (70.8, 7.1)),
    "FLoRAL(10%) (pi*)": ((94.5, 0.6), (94.2, 0.2), (87.0, 0.7), (86.9, 0.5)),
}

SYNTHETIC_METHODS: tuple[Method, ...] = (
    Method("FedAvg", "fedavg"),
    Method("Local Adaptor", "local"),
    Method("Ensemble (learned)", "ensemble", "learned"),
    Method("Ensemble (pi*)", "ensemble", "fixed"),
    Method("FLoRAL (learned)", "floral", "learned"),
    Method("FLoRAL (pi*)", "floral", "fixed"),
)

#: the rows of the FLoRAL-vs-ensemble gap (oracle routing pi*), run on ``Settings.gap_seeds``
GAP_METHODS: tuple[str, ...] = ("Ensemble (pi*)", "FLoRAL(1%) (pi*)", "FLoRAL(10%) (pi*)")
#: their seeds by default (module docstring: why six)
GAP_SEEDS: tuple[int, ...] = tuple(range(6))


@dataclass
class Settings:
    """Every setting of the reproduction (module docstring)."""

    rounds: int = 300
    reduced_rounds: int = 600
    seeds: tuple[int, ...] = (0, 1)
    n_clients: int = 20
    clients_per_round: int = 10
    n_clusters: int = 4
    hidden: int = 200
    batch_size: int = 16
    lr: float = 0.1
    router_lr: float = 1.0
    router_noise: float = 1.0
    evaluation: str = "full"
    eval_every: int = 10
    columns: tuple[str, ...] = tuple(c.label for c in COLUMNS)
    #: seeds of the reduced columns' GAP_METHODS rows (the other rows: ``seeds``)
    gap_seeds: tuple[int, ...] = GAP_SEEDS
    synthetic_rounds: dict[str, int] = field(default_factory=lambda: {"linear": 300, "mlp": 100})
    async_steps: int = 100
    data: str | None = None

    @classmethod
    def quick(cls) -> Settings:
        return cls(
            rounds=80,
            reduced_rounds=240,
            seeds=(0,),
            gap_seeds=(0,),
            columns=tuple(c.label for c in COLUMNS if not c.ten_row_minimum),  # the paper's 5%
            eval_every=5,
            synthetic_rounds={"linear": 100, "mlp": 40},
            async_steps=30,
        )

    def for_mnist(self, data: str, quick: bool) -> Settings:
        """The paper's MNIST setting (K = 300, 10% per round) for the user's file.

        Without the 10-row minimum's columns: on MNIST 5% of a client's 200 rows is 10 rows.
        """
        return replace(
            self,
            data=data,
            columns=tuple(
                c.label for c in COLUMNS if c.label in self.columns and not c.ten_row_minimum
            ),
            n_clients=300,
            clients_per_round=30,
            batch_size=32,
            router_lr=0.1,
            evaluation="shard",
            rounds=50 if quick else 500,
            reduced_rounds=150 if quick else 1500,
            eval_every=5 if quick else 25,
        )


# --------------------------------------------------------------------------------------- models
def _build(method: Method, base: Any, n_clusters: int, seed: int, s: Settings, rank=None):
    from ..nn.floral import EnsembleModel, floralize

    if method.kind == "fedavg":
        import copy

        return copy.deepcopy(base)
    if method.kind == "local":
        return floralize(base, 1, method.rho or 0.1, rank=rank, private_adaptors=True, seed=seed)
    if method.kind == "ensemble":
        return EnsembleModel(
            base, n_clusters, routing=method.routing, router_noise=s.router_noise, seed=seed
        )
    return floralize(
        base,
        n_clusters,
        method.rho,
        rank=rank,
        routing=method.routing,
        router_noise=s.router_noise,
        seed=seed,
    )


def _mlp(sizes: list[int], seed: int):
    import torch

    from ..nn import MLP

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MLP(sizes)


def _synthetic_base(task, seed: int):
    import torch
    from torch import nn

    z = task.sizes
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if task.kind == "linear":
            return nn.Sequential(nn.Linear(z["d_x"], z["d_y"]))
        width = 2 * z["d_h"]  # the model's hidden width m d_h, m = 2 (G.2)
        return nn.Sequential(nn.Linear(z["d_x"], width), nn.ReLU(), nn.Linear(width, z["d_y"]))


# --------------------------------------------------------------------------------------- runs
class _Runner:
    """Runs (or resumes) single trainings, keeping the progress bar and the run files."""

    def __init__(self, out: Path, bar: ProgressBar) -> None:
        self.out, self.bar = out, bar
        (out / "checkpoints").mkdir(parents=True, exist_ok=True)
        (out / "runs").mkdir(parents=True, exist_ok=True)

    def run(self, key: str, trainer, rounds: int, **kwargs: Any) -> dict[str, Any]:
        from ..nn.floral import parameter_counts, run_floral

        before = self.bar.count
        self.bar.postfix = {"run": key}
        t0 = time.perf_counter()
        h = run_floral(
            trainer,
            rounds,
            seed=kwargs.pop("seed", 0),
            checkpoint=self.out / "checkpoints" / f"{key}.ckpt",
            checkpoint_every=max(rounds // 5, 1),
            on_round=lambda r, _: self.bar.update(1),
            **kwargs,
        )
        trained = self.bar.count - before  # rounds run by this call
        self.bar.skip(rounds - trained)  # the rounds its checkpoint held
        h.to_json(self.out / "runs" / f"{key}.json")
        m = h.metrics
        return {
            "key": key,
            "seconds": time.perf_counter() - t0,
            "resumed": trained < rounds,
            "final": {k: v[-1] for k, v in m.items()},
            "curve": {  # "step": the x axis of the curves (rounds here, server steps async)
                "step": m["round"],
                **{
                    k: m[k]
                    for k in ("accuracy", "loss", "cluster_recovery", "factor_average_error")
                    if k in m
                },
            },
            "parameters": parameter_counts(trainer.model),
            "final_point": h.final_point,
        }


def _digits_task(column: Column, seed: int, s: Settings):
    from ..nn.floral import digits_clusters

    return digits_clusters(
        column.transform,
        data=s.data,
        n_clients=s.n_clients,
        n_clusters=s.n_clusters,
        reduced=column.reduced,
        keep_fraction=column.keep or 1.0,
        min_rows=column.min_rows,
        evaluation=s.evaluation,
        seed=seed,
    )


def _holdings(task) -> dict[str, Any]:
    """What the clients hold: training rows, distinct classes, classes a whole cluster lacks.

    Classes are the images' own digits (label shift undone), so that a cluster "lacks" a digit
    whose images none of its clients holds.
    """
    n_classes = task.n_classes
    digits = [
        (y - (c if task.description["transform"] == "label_shift" else 0)) % n_classes
        for (_, y, _, _), c in zip(task.clients, task.clusters, strict=True)
    ]
    members = [np.flatnonzero(np.asarray(task.clusters) == c) for c in range(task.n_clusters)]
    lacking = [n_classes - np.unique(np.concatenate([digits[k] for k in m])).size for m in members]
    return {
        "train_rows": [int(d.size) for d in digits],
        "classes": [int(np.unique(d).size) for d in digits],
        "cluster_lacks": lacking,
        "test_rows": [int(c[3].size) for c in task.clients],
        "available_rows": int(sum(task.description["available_rows"])),
    }


def _digits_trainer(method: Method, task, seed: int, s: Settings):
    from ..nn.floral import FloralTrainer

    d_in = int(np.prod(task.input_shape))
    base = _mlp([d_in, s.hidden, task.n_classes], seed)
    model = _build(method, base, s.n_clusters, seed, s)
    return FloralTrainer(
        model,
        task.clients,
        lr=s.lr,
        router_lr=s.router_lr,
        batch_size=s.batch_size,
        clusters=task.clusters,
    )


def _column_seeds(column: Column, s: Settings) -> list[tuple[int, tuple[Method, ...]]]:
    """(seed, methods) of a column: every method on ``seeds``; with reduced data the gap's
    methods also on ``gap_seeds``."""
    plan = [(seed, METHODS) for seed in s.seeds]
    if column.reduced:
        gap = tuple(m for m in METHODS if m.label in GAP_METHODS)
        plan += [(seed, gap) for seed in s.gap_seeds if seed not in s.seeds]
    return plan


def _digits_runs(runner: _Runner, s: Settings) -> tuple[list[dict[str, Any]], list[dict]]:
    """Table 1's runs, and what the clients held in each column and seed."""
    results, holdings = [], []
    for column in (c for c in COLUMNS if c.label in s.columns):
        for seed, methods in _column_seeds(column, s):
            task = _digits_task(column, seed, s)
            holdings.append({"column": column.label, "seed": seed, **_holdings(task)})
            for method in methods:
                key = f"digits-{column.transform}-{column.key}-{method.key}-s{seed}"
                trainer = _digits_trainer(method, task, seed, s)
                rounds = s.reduced_rounds if column.reduced else s.rounds
                every = max(1, s.eval_every * rounds // max(s.rounds, 1))
                r = runner.run(
                    key,
                    trainer,
                    rounds,
                    clients_per_round=s.clients_per_round,
                    seed=seed,
                    eval_every=every,
                )
                r.update(column=column.label, method=method.label, seed=seed)
                r.pop("final_point")
                results.append(r)
    return results, holdings


def _synthetic_runs(runner: _Runner, s: Settings) -> list[dict[str, Any]]:
    from ..nn.floral import FloralTrainer, synthetic_linear, synthetic_mlp

    results = []
    for kind, make, batch, lr in (
        ("linear", synthetic_linear, 4, 0.1),
        ("mlp", synthetic_mlp, 8, 0.03),
    ):
        rounds = s.synthetic_rounds[kind]
        task = make(seed=0)
        for method in SYNTHETIC_METHODS:
            model = _build(method, _synthetic_base(task, 0), task.n_clusters, 0, s, rank=1)
            trainer = FloralTrainer(
                model,
                task.clients,
                loss="mse",
                lr=lr,
                router_lr=s.router_lr,
                batch_size=batch,
                clusters=task.clusters,
            )
            r = runner.run(
                f"synthetic-{kind}-{method.key}", trainer, rounds, eval_every=max(rounds // 50, 1)
            )
            r.update(task=kind, method=method.label)
            r.pop("final_point")
            results.append(r)
    return results


# ----------------------------------------------------------------- factor against product averaging
def _aggregation_runs(runner: _Runner, s: Settings, digits: list[dict]) -> dict[str, Any]:
    """FLoRAL(10%) on full label shift: factor averages against product averages (sync, async).

    The factor-averaging runs are Table 1's (same task, seed and settings); the product runs
    differ from them only in the aggregator.
    """
    from ..federated import ExponentialTime, run_async
    from ..nn.floral import FloralAggregator, FloralFedBuff

    column = next(c for c in COLUMNS if c.label == "Full LS")
    seed = s.seeds[0]
    task = _digits_task(column, seed, s)
    sync = []
    for method in (m for m in METHODS if m.kind == "floral" and m.rho == 0.1):
        table_run = next(
            r
            for r in digits
            if r["column"] == column.label and r["seed"] == seed and r["method"] == method.label
        )
        sync.append({**table_run, "adaptors": "factors"})
        trainer = _digits_trainer(method, task, seed, s)
        key = f"aggregation-products-{method.key}-s{seed}"
        r = runner.run(
            key,
            trainer,
            s.rounds,
            clients_per_round=s.clients_per_round,
            seed=seed,
            eval_every=s.eval_every,
            aggregator=FloralAggregator(trainer.layout, "products"),
        )
        r.update(method=method.label, adaptors="products")
        final = r.pop("final_point")
        sync.append(r)
    gauge = _gauge_check(trainer, final, seed)
    asynchronous = []
    method = next(m for m in METHODS if m.label == "FLoRAL(10%) (learned)")
    for adaptors in ("factors", "products"):
        trainer = _digits_trainer(method, task, seed, s)
        rule = FloralFedBuff(
            trainer.layout, trainer.upload_weights, buffer_size=5, adaptors=adaptors
        )
        t0 = time.perf_counter()
        h = run_async(
            trainer,
            rule,
            s.async_steps,
            workers=min(10, s.n_clients),
            timing=ExponentialTime(1.0),
            x0=trainer.global_parameters(),
            seed=seed,
            eval_every=max(s.async_steps // 10, 1),
        )
        runner.bar.update(0, run=f"async-{adaptors}")
        asynchronous.append(
            {
                "adaptors": adaptors,
                "accuracy": h.metrics["accuracy"][-1],
                "curve": {"step": h.metrics["step"], "accuracy": h.metrics["accuracy"]},
                "staleness": h.staleness_stats(),
                "updates": len(h.log["client"]),
                "product_fallbacks": rule.product_fallbacks,
                "seconds": time.perf_counter() - t0,
            }
        )
    return {"sync": sync, "async": asynchronous, "gauge": gauge}


def _gauge_check(trainer, x: np.ndarray, seed: int) -> dict[str, float]:
    """Change every client's factor gauge (A G, B G^-T): which aggregation notices?

    Eight simulated uploads are the trained global vector plus small perturbations of every
    adaptor; each client's factors are then re-expressed in a random gauge G_k (condition
    number <= 4), which leaves its adaptors A B^T unchanged. The aggregate of each rule with
    and without the gauges is compared (relative Frobenius difference of the adaptors).
    """
    from ..nn.floral import FloralAggregator

    lay = trainer.layout
    rng = np.random.default_rng(seed)
    k = 8
    uploads = x + 0.05 * np.abs(x).mean() * rng.standard_normal((k, x.size))
    arrays = lay.split(uploads)
    gauged = {name: np.array(v) for name, v in arrays.items()}
    for pair in lay.factor_pairs:
        a = pair.out_view.to_matrix(arrays[pair.out_name])
        b = pair.in_view.to_matrix(arrays[pair.in_name])
        r = a.shape[-1]
        q = np.linalg.qr(rng.standard_normal((k, a.shape[1], r, r)))[0]
        g = q * rng.uniform(0.5, 2.0, (k, a.shape[1], 1, r))  # orthogonal times scales
        gauged[pair.out_name] = pair.out_view.from_matrix(a @ g)
        gauged[pair.in_name] = pair.in_view.from_matrix(b @ np.linalg.inv(g).swapaxes(-1, -2))
    gauged_uploads = lay.join(gauged)
    n = np.full(k, 10.0)
    pi = rng.dirichlet(np.ones(lay.n_clusters), size=k)
    out = {}
    for adaptors in ("factors", "products"):
        agg = FloralAggregator(lay, adaptors)
        plain, _ = agg.aggregate(x, uploads, n, pi)
        moved, _ = agg.aggregate(x, gauged_uploads, n, pi)
        num = den = 0.0
        for pair in lay.factor_pairs:
            p1 = _products(pair, lay.split(plain))
            p2 = _products(pair, lay.split(moved))
            num += float(np.sum((p1 - p2) ** 2))
            den += float(np.sum(p1**2))
        out[adaptors] = math.sqrt(num / den)
    return out


def _products(pair, arrays: dict[str, np.ndarray]) -> np.ndarray:
    a = pair.out_view.to_matrix(arrays[pair.out_name])
    b = pair.in_view.to_matrix(arrays[pair.in_name])
    return a @ np.swapaxes(b, -1, -2)


# --------------------------------------------------------------------------------------- report
def _column(label: str) -> Column:
    return next(c for c in COLUMNS if c.label == label)


def _accuracy_table(runs: list[dict[str, Any]], s: Settings) -> tuple[str, dict]:
    cols = [c.label for c in COLUMNS if c.label in s.columns]
    accs = {
        (m.label, c): [
            100 * r["final"]["accuracy"]
            for r in runs
            if r["method"] == m.label and r["column"] == c
        ]
        for m in METHODS
        for c in cols
    }
    ours = {m.label: {c: mean_std(accs[m.label, c])[:2] for c in cols} for m in METHODS}
    head = "| Method | " + " | ".join(f"{c}: ours | {c}: paper" for c in cols) + " |"
    lines = [head, "|---|" + "---|---|" * len(cols)]
    for m in METHODS:
        cells = []
        for c in cols:
            pm, ps = PAPER_MNIST[m.label][_column(c).paper]
            cells.append(f"{mean_spread(accs[m.label, c], 1)} | {pm:.1f} +/- {ps:.1f}")
        lines.append(f"| {m.label} | " + " | ".join(cells) + " |")
    return "\n".join(lines), ours


def _spearman(a: list[float], b: list[float]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def _ordering(ours: dict[str, dict[str, tuple[float, float]]], s: Settings) -> list[str]:
    """Plain statements: where the ordering agrees with the paper's MNIST columns, or not."""
    lines = []
    for col in s.columns:
        j = _column(col).paper
        mine = [ours[m.label][col][0] for m in METHODS]
        paper = [PAPER_MNIST[m.label][j][0] for m in METHODS]
        rho = _spearman(mine, paper)
        best_ours = METHODS[int(np.argmax(mine))].label
        best_paper = METHODS[int(np.argmax(paper))].label
        lines.append(
            f"- **{col}**: rank correlation of the 8 rows with the paper's {rho:+.2f}; best row "
            f"ours {best_ours} ({max(mine):.1f}), paper {best_paper} ({max(paper):.1f})."
        )

    def acc(label: str, col: str) -> float:
        return ours[label][col][0]

    for col in (c for c in s.columns if "LS" in c):
        fed = acc("FedAvg", col)
        for label in ("FLoRAL(1%) (learned)", "FLoRAL(10%) (learned)", "FLoRAL(1%) (pi*)"):
            gap = acc(label, col) - fed
            verdict = "agrees" if gap >= 20 else "does NOT agree"
            j = _column(col).paper
            paper_gap = PAPER_MNIST[label][j][0] - PAPER_MNIST["FedAvg"][j][0]
            lines.append(
                f"- {col}: {label} beats FedAvg by {gap:+.1f} points (paper {paper_gap:+.1f}): "
                f"{verdict} with 'a wide margin' (>= 20 points)."
            )
    for col in s.columns:
        ens = acc("Ensemble (pi*)", col)
        for label in ("FLoRAL(1%) (pi*)", "FLoRAL(10%) (pi*)"):
            gap = acc(label, col) - ens
            j = _column(col).paper
            paper_gap = PAPER_MNIST[label][j][0] - PAPER_MNIST["Ensemble (pi*)"][j][0]
            verdict = "close (within 3 points)" if gap >= -3 else "NOT close (more than 3 points)"
            lines.append(
                f"- {col}: {label} vs Ensemble (pi*): {gap:+.1f} points (paper {paper_gap:+.1f}): "
                f"{verdict}."
            )
    return lines


#: the paper's FLoRAL-vs-ensemble gap with reduced data is -1.2 to +0.0 points: "within 1 point"
WITHIN = -1.0


def _paired_gaps(runs: list[dict[str, Any]], column: str, label: str) -> list[float]:
    """FLoRAL minus Ensemble (pi*) accuracy (points), seed by seed (same split and seed)."""
    acc = {
        (r["method"], r["seed"]): 100 * r["final"]["accuracy"]
        for r in runs
        if r["column"] == column
    }
    seeds = sorted(sd for (m, sd) in acc if m == label and ("Ensemble (pi*)", sd) in acc)
    return [acc[label, sd] - acc["Ensemble (pi*)", sd] for sd in seeds]


def _gap_summary(gaps: list[float]) -> dict[str, float]:
    """Mean, std (population, as the tables), standard error (sample std / sqrt n) and the
    95% Student-t interval of the mean gap (NaN with fewer than two seeds)."""
    from scipy.stats import t as student_t

    mean, std, n = mean_std(gaps)
    if n < 2:
        return {"n": n, "mean": mean, "std": std, "se": math.nan, "lo": math.nan, "hi": math.nan}
    se = float(np.std(gaps, ddof=1)) / math.sqrt(n)
    half = float(student_t.ppf(0.975, n - 1)) * se
    return {"n": n, "mean": mean, "std": std, "se": se, "lo": mean - half, "hi": mean + half}


def _gap_verdict(g: dict[str, float]) -> tuple[str, str]:
    """The rule fixed before the runs: the 95% interval of the mean gap against -1 point."""
    if g["n"] < 2:
        return "no verdict (one seed)", ""
    if g["hi"] < WITHIN:
        return (
            "does NOT agree: FLoRAL trails by more than 1 point",
            f"with the same spread, a mean gap {WITHIN - g['hi']:.1f} points higher makes it "
            f"undecided, {WITHIN - g['lo']:.1f} points higher makes it agree",
        )
    if g["lo"] >= WITHIN:
        return "agrees: within 1 point", ""
    return (
        "undecided: the interval straddles -1",
        f"more seeds: the interval is {g['hi'] - g['lo']:.1f} points wide",
    )


def _gap_section(runs: list[dict[str, Any]], s: Settings) -> tuple[list[str], list[dict]]:
    """FLoRAL (pi*) against Ensemble (pi*) with reduced data: paired gaps over the seeds."""
    rows, summary = [], []
    # the reduced columns, then the full ones for reference (seeds 0 and 1; no verdict)
    order = sorted(COLUMNS, key=lambda c: not c.reduced)
    for column in (c for c in order if c.label in s.columns):
        for label in GAP_METHODS[1:]:
            gaps = _paired_gaps(runs, column.label, label)
            g = _gap_summary(gaps)
            j = column.paper
            paper = PAPER_MNIST[label][j][0] - PAPER_MNIST["Ensemble (pi*)"][j][0]
            if not column.reduced:
                g.update(lo=math.nan, hi=math.nan)
                rows.append(
                    f"| {column.label} | {label} | {g['n']} | {mean_spread(gaps, 1)} | - | - | "
                    f"{paper:+.1f} | reference (full data) | - |"
                )
                continue
            verdict, change = _gap_verdict(g)
            summary.append({"column": column.label, "method": label, "gaps": gaps, **g})
            interval = "-" if g["n"] < 2 else f"[{g['lo']:+.1f}, {g['hi']:+.1f}]"
            se = "-" if g["n"] < 2 else f"{g['se']:.1f}"
            rows.append(
                f"| {column.label} | {label} | {g['n']} | {mean_spread(gaps, 1)} | {se} | "
                f"{interval} | {paper:+.1f} | {verdict} | {change or '-'} |"
            )
    lines = [
        "| column | FLoRAL | seeds | gap: mean +/- std | s.e. | 95% interval | paper | "
        "verdict | what would change it |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        *_regime_shift(summary),
    ]
    return lines, summary


def _regime_shift(summary: list[dict]) -> list[str]:
    """Does the paper's 5% move the gap against 14%? Difference of the mean gaps, +/- 2 s.e."""
    lines = []
    for five in (c for c in COLUMNS if c.reduced and not c.ten_row_minimum):
        ten = next(
            (c for c in COLUMNS if c.ten_row_minimum and c.transform == five.transform), None
        )
        for label in GAP_METHODS[1:]:
            a, b = (
                next((g for g in summary if g["column"] == c.label and g["method"] == label), None)
                for c in (five, ten)
            )
            if a is None or b is None or min(a["n"], b["n"]) < 2:
                continue
            half = 2 * math.hypot(a["se"], b["se"])
            lines.append(
                f"- {five.transform}, {label}: gap {a['mean']:+.1f} at 5%, {b['mean']:+.1f} at "
                f"14%; 5% minus 14%: {a['mean'] - b['mean']:+.1f} +/- {half:.1f} (2 s.e.)."
            )
    if lines:
        lines = [
            "",
            "The paper's 5% against 14% (the same seeds; +/- two standard errors, the two "
            "gaps' combined as if independent):",
            "",
            *lines,
        ]
    return lines


def _holdings_table(holdings: list[dict[str, Any]], s: Settings) -> str:
    """Per reduced column, over its seeds: what each client held."""
    lines = [
        "| column | seeds | training rows per client | rows in all (% of the training set) | "
        "digits per client (min / mean / max) | digits a whole cluster lacks (mean / max) | "
        "test rows per client |",
        "|---|---|---|---|---|---|---|",
    ]
    for column in (c for c in COLUMNS if c.label in s.columns):
        hs = [h for h in holdings if h["column"] == column.label]
        if not hs:
            continue
        rows = np.concatenate([h["train_rows"] for h in hs])
        total = [sum(h["train_rows"]) for h in hs]
        share = [100 * sum(h["train_rows"]) / h["available_rows"] for h in hs]
        cls = np.concatenate([h["classes"] for h in hs])
        lack = np.concatenate([h["cluster_lacks"] for h in hs])
        test = np.concatenate([h["test_rows"] for h in hs])
        lines.append(
            f"| {column.label} | {len(hs)} | {_span(rows.min(), rows.max())} | "
            f"{_span(min(total), max(total))} ({_span(min(share), max(share), '.1f')}%) | "
            f"{cls.min()} / {cls.mean():.1f} / {cls.max()} | {lack.mean():.1f} / {lack.max()} | "
            f"{_span(test.min(), test.max())} |"
        )
    return "\n".join(lines)


def _span(lo: float, hi: float, fmt: str = "d") -> str:
    """``"lo to hi"``, or the value alone where both are the same."""
    if fmt == "d":
        lo, hi = int(lo), int(hi)
    return f"{lo:{fmt}}" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}} to {hi:{fmt}}"


def _kept(holdings: list[dict[str, Any]], column: str) -> str:
    """ "COLUMN: N rows per client, P% of the training rows" over the column's seeds."""
    hs = [h for h in holdings if h["column"] == column]
    rows = np.concatenate([h["train_rows"] for h in hs])
    share = [100 * sum(h["train_rows"]) / h["available_rows"] for h in hs]
    return (
        f"{column}: {_span(rows.min(), rows.max())} rows per client, "
        f"{_span(min(share), max(share), '.1f')}% of the training rows"
    )


def _parameter_table(runs: list[dict[str, Any]]) -> str:
    lines = ["| Method | d (one model) | extra parameters | extra / d |", "|---|---|---|---|"]
    seen = set()
    for r in runs:
        if r["method"] in seen:
            continue
        seen.add(r["method"])
        p = r["parameters"]
        lines.append(
            f"| {r['method']} | {p['d']} | {p['extra']} | {100 * p['extra_fraction']:.1f}% |"
        )
    return "\n".join(lines)


def _synthetic_table(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| Method | linear: test loss | linear: cluster recovery | MLP: test loss | "
        "MLP: cluster recovery |",
        "|---|---|---|---|---|",
    ]
    for m in SYNTHETIC_METHODS:
        cells = []
        for kind in ("linear", "mlp"):
            r = next(x for x in runs if x["task"] == kind and x["method"] == m.label)
            rec = r["final"].get("cluster_recovery")
            cells += [f"{r['final']['loss']:.3g}", "-" if rec is None else f"{rec:.2f}"]
        lines.append(f"| {m.label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _aggregation_section(agg: dict[str, Any]) -> list[str]:
    lines = [
        "| run | factor averaging (Algorithm 1) | products + truncated SVD (riemfl) |",
        "|---|---|---|",
    ]
    for label in sorted({r["method"] for r in agg["sync"]}):
        acc = {
            r["adaptors"]: 100 * r["final"]["accuracy"] for r in agg["sync"] if r["method"] == label
        }
        lines.append(f"| sync, {label}, Full LS | {acc['factors']:.1f} | {acc['products']:.1f} |")
    acc = {r["adaptors"]: 100 * r["accuracy"] for r in agg["async"]}
    st = agg["async"][0]["staleness"]
    lines.append(
        f"| FedBuff + FLoRAL(10%) (learned), K = 5, mean staleness {st['mean']:.1f} | "
        f"{acc['factors']:.1f} | {acc['products']:.1f} |"
    )
    err = [
        np.nanmean(r["curve"]["factor_average_error"])
        for r in agg["sync"]
        if r["adaptors"] == "factors" and "factor_average_error" in r["curve"]
    ]
    g = agg["gauge"]
    lines += [
        "",
        f"Gauge check: re-expressing every client's factors in a random gauge (A G, B G^-T), "
        f"which changes no client's adaptor A B^T, moves the aggregated adaptors by "
        f"{g['factors']:.2e} (relative) under factor averaging and by {g['products']:.2e} under "
        "the manifold-aware rule (zero up to rounding: it only reads the products).",
        "",
        "Mean relative gap between the average of the clients' adaptors and the product of the "
        f"averaged factors during the factor-averaging runs: {np.mean(err):.2e} (all clients "
        "start each round from the same factors, so the local moves are small and Algorithm 1 "
        "works in practice).",
    ]
    return lines


def _plots(
    digits: list[dict], gaps: list[dict], synthetic: list[dict], agg: dict, s: Settings, out: Path
) -> None:
    plt = pyplot()
    styles = Styles([m.label for m in METHODS])  # one look per method in every figure
    _curves_plot(digits, s, styles, out)
    _gap_plot(gaps, styles, out)

    fig, axes = plt.subplots(1, 2, figsize=(9, 4.4), layout="constrained")
    for ax, kind in zip(axes, ("linear", "mlp"), strict=True):
        for r in (x for x in synthetic if x["task"] == kind):
            ax.semilogy(r["curve"]["step"], r["curve"]["loss"], **styles.of(r["method"]))
        ax.set_title(f"synthetic {kind}", fontsize=TITLE_FONTSIZE)
        ax.set_xlabel("round")
        ax.set_ylabel("personal test loss (MSE)")
        ax.grid(True, which="both", alpha=0.3)
    shared_legend(fig, list(axes))
    save(fig, out / "synthetic_loss.png")

    fig, ax = plt.subplots(figsize=(6, 4.4), layout="constrained")
    for r in agg["sync"]:
        ax.plot(
            r["curve"]["step"],
            r["curve"]["accuracy"],
            **styles.of(f"{r['method']}, {r['adaptors']}"),
        )
    ax.set_xlabel("round")
    ax.set_ylabel("personal test accuracy (Full LS)")
    ax.grid(True, alpha=0.3)
    shared_legend(fig, [ax], ncols=2)
    save(fig, out / "aggregation.png")


def _curves_plot(digits: list[dict], s: Settings, styles: Styles, out: Path) -> Any:
    """``table1_curves.png``: personal test accuracy against the round per Table 1 column (the
    mean over the seeds, or the one seed's curve); one legend below the panels, where it covers
    no curve. Returns the (closed) matplotlib figure."""
    plt = pyplot()
    cols = [c.label for c in COLUMNS if c.label in s.columns]
    ncols = min(len(cols), 2)
    nrows = math.ceil(len(cols) / ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(5 * ncols, 3.4 * nrows + 0.9),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    for ax in axes.flat[len(cols) :]:
        ax.set_visible(False)
    for ax, col in zip(axes.flat, cols, strict=False):
        for m in METHODS:
            curves = [r["curve"] for r in digits if r["column"] == col and r["method"] == m.label]
            acc = np.mean([c["accuracy"] for c in curves], axis=0)
            ax.plot(curves[0]["step"], acc, **styles.of(m.label))
        ax.set_title(f"digits, {col}", fontsize=TITLE_FONTSIZE)
        ax.set_xlabel("round")
        ax.set_ylabel(f"personal test accuracy ({over_seeds(len(s.seeds))})")
        ax.grid(True, alpha=0.3)
    shared_legend(fig, list(axes.flat[: len(cols)]))
    return save(fig, out / "table1_curves.png")


def _gap_plot(gaps: list[dict], styles: Styles, out: Path) -> None:
    """Per-seed FLoRAL-minus-ensemble gaps with their mean and 95% interval, and the paper's."""
    plt = pyplot()
    cols = list(dict.fromkeys(g["column"] for g in gaps))
    fig, ax = plt.subplots(figsize=(1.9 * max(len(cols), 2) + 1.5, 4.6), layout="constrained")
    for i, label in enumerate(GAP_METHODS[1:]):
        look = styles.of(label)
        shift = 0.15 * (2 * i - 1)
        for x, col in enumerate(cols):
            g = next(g for g in gaps if g["column"] == col and g["method"] == label)
            j = _column(col).paper
            paper = PAPER_MNIST[label][j][0] - PAPER_MNIST["Ensemble (pi*)"][j][0]
            first = x == 0
            ax.scatter(
                np.full(len(g["gaps"]), x + shift),
                g["gaps"],
                s=12,
                alpha=0.5,
                color=look["color"],
                marker=look["marker"],
                label=f"{label}: seeds" if first else None,
            )
            if g["n"] > 1:
                ax.errorbar(
                    x + shift,
                    g["mean"],
                    yerr=[[g["mean"] - g["lo"]], [g["hi"] - g["mean"]]],
                    color=look["color"],
                    fmt=look["marker"],
                    capsize=4,
                    label=f"{label}: mean, 95% interval" if first else None,
                )
            ax.scatter(
                x + shift,
                paper,
                marker="_",
                s=300,
                linewidths=2,
                color="black",
                label="paper (MNIST)" if first and i == 0 else None,
            )
    ax.axhline(WITHIN, color="grey", linestyle=":", label="-1 point")
    ax.axhline(0.0, color="grey", linewidth=0.5)
    ax.set_xticks(range(len(cols)), cols, fontsize=8)
    ax.set_ylabel("FLoRAL - Ensemble (pi*), points")
    ax.grid(True, axis="y", alpha=0.3)
    shared_legend(fig, [ax], ncols=2)
    save(fig, out / "reduced_gap.png")


def _reduced_section(gap_lines: list[str], holdings: list[dict], s: Settings) -> list[str]:
    if not any(_column(c).reduced for c in s.columns):
        return []
    return [
        "## FLoRAL against the ensemble with reduced data: 5% and 14%",
        "",
        "The paper's reduced regime keeps 5% of each client's rows, at least 10 (Sec. 6); on "
        "MNIST that is 10 of 200 rows. On digits (~72 rows per client with K = 20) the 10-row "
        "minimum keeps 14%; the 5% columns drop it (at least 1 row). Both are compared with the "
        "paper's reduced columns. Here: "
        + "; ".join(_kept(holdings, c) for c in s.columns if _column(c).reduced)
        + ".",
        "",
        "Protocol (fixed before the runs): the gap is FLoRAL(rho) (pi*) minus Ensemble (pi*) "
        "accuracy, paired by seed (same split, initial model and client sampling), over seeds "
        f"{sorted(set(s.seeds) | set(s.gap_seeds))}; the paper's gaps are -1.2 to +0.0 points. "
        "'FLoRAL within 1 point of the ensemble' agrees where the 95% Student-t interval of the "
        "mean gap lies at or above -1, does NOT agree where it lies wholly below -1, and is "
        "undecided where it straddles -1. The std is over seeds (population, as in Table 1); "
        "s.e. = sample std / sqrt(seeds).",
        "",
        *gap_lines,
        "",
        "Not tested here, and candidates for what would close the gap: the adaptors' capacity "
        "on so small a model (the first layer's rank is 4 at rho = 10% on 64 inputs, 15 on "
        "MNIST's 784; the output layer's is 1 on both), learning rates or rounds tuned per "
        "method (one schedule serves all here), and real MNIST (`--data`), where a cluster "
        "holds 750 rows at 5% against 20 here.",
        "",
        "![gap](reduced_gap.png)",
        "",
        "What the clients held (every seed of the column; digits: the image's own class, label "
        "shift undone). Clients hold few of the 10 digits with reduced data, and at 5% a "
        f"cluster's {s.n_clients // s.n_clusters} clients together can lack a digit entirely: "
        "that is the regime, not an error. No client is ever left without training rows (at "
        "least 1 row is kept) and "
        + (
            "every client is tested on the whole held-out set under its cluster's transform."
            if s.evaluation == "full"
            else "every client holds at least one test row (a DataError otherwise)."
        ),
        "",
        _holdings_table(holdings, s),
        "",
    ]


def _report(
    digits, holdings, synthetic, agg, s: Settings, quick: bool, seconds: float
) -> tuple[str, str, list[dict]]:
    table, ours = _accuracy_table(digits, s)
    gap_lines, gaps = _gap_section(digits, s)
    data = f"MNIST file {s.data}" if s.data else "scikit-learn digits (offline MNIST stand-in)"
    extra = sorted(set(s.gap_seeds) - set(s.seeds))
    resumed = sum(bool(r.get("resumed")) for r in digits)
    lines = [
        "# FLoRAL (Almansoori, Horvath & Takac), Table 1 (MNIST columns) and synthetic tasks",
        "",
        f"Mode: {'--quick' if quick else 'full'}; data: {data}; {len(s.seeds)} seed(s) "
        f"{list(s.seeds)}; {s.rounds} rounds ({s.reduced_rounds} with reduced data); "
        f"K = {s.n_clients} clients, "
        f"{s.clients_per_round} per round, C = {s.n_clusters}; wall time {seconds:.0f} s"
        + (
            f" ({resumed} of {len(digits)} Table 1 runs resumed from checkpoints). "
            if resumed
            else ". "
        )
        + (
            f"Reduced columns: {', '.join(GAP_METHODS)} also on seeds {extra} "
            f"({len(set(s.seeds) | set(extra))} in all). "
            if extra and any(_column(c).reduced for c in s.columns)
            else ""
        )
        + "Settings and the choices where the paper is silent: `riemfl/experiments/floral.py` "
        "(module docstring) and `docs/floral.md`.",
        "",
        "## Table 1: personal test accuracy (%), ours beside the paper's MNIST numbers",
        "",
        table,
        "",
        "The paper's +/- is a spread over runs whose number it does not state; ours is the std "
        "over our seeds (blank with one seed). The stand-in differs from MNIST (8 x 8 images, "
        "1797 rows, 20 clients): compare orderings, not numbers.",
        "",
        "### Where the ordering agrees",
        "",
        *_ordering(ours, s),
        "",
        "![curves](table1_curves.png)",
        "",
        *_reduced_section(gap_lines, holdings, s),
        "## Parameter counts (C rho d against (C - 1) d)",
        "",
        _parameter_table(digits),
        "",
        "The nominal FLoRAL increase C rho d is 4% (rho = 1%) and 40% (rho = 10%) of d. The "
        "counted one is larger at 1%: the budget rank rho m n / (m + n) of both layers is below "
        "1 here, so the minimum rank 1 applies (Almansoori et al. 2024, Sec. 3.2), and the bias "
        "adaptors (C x 210 parameters, not parameter-efficient, Sec. 3.2) weigh more in so small "
        "a model.",
        "",
        "## Synthetic tasks: final personal test loss (Table 3 of the paper is a plot)",
        "",
        _synthetic_table(synthetic),
        "",
        "![synthetic](synthetic_loss.png)",
        "",
        "## Factor averaging against the manifold-aware aggregation (riemfl's addition)",
        "",
        *_aggregation_section(agg),
        "",
        "![aggregation](aggregation.png)",
    ]
    return "\n".join(lines) + "\n", table, gaps


def reproduce(
    out: str | Path = "results/floral",
    *,
    quick: bool = False,
    data: str | None = None,
    progress: bool = True,
    settings: Settings | None = None,
) -> str:
    """Run everything; write ``report.md``, ``results.json`` and the PNG plots; return the table."""
    s = settings if settings is not None else (Settings.quick() if quick else Settings())
    if data is not None:
        s = s.for_mnist(data, quick)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n_digits = sum(
        (s.reduced_rounds if c.reduced else s.rounds) * len(methods)
        for c in COLUMNS
        if c.label in s.columns
        for _, methods in _column_seeds(c, s)
    )
    total = n_digits + len(SYNTHETIC_METHODS) * sum(s.synthetic_rounds.values()) + 2 * s.rounds
    t0 = time.perf_counter()
    with single_torch_thread(), ProgressBar(total, "floral", enabled=progress) as bar:
        runner = _Runner(out, bar)
        digits, holdings = _digits_runs(runner, s)
        synthetic = _synthetic_runs(runner, s)
        agg = _aggregation_runs(runner, s, digits)
    seconds = time.perf_counter() - t0
    report, table, gaps = _report(digits, holdings, synthetic, agg, s, quick, seconds)
    _plots(digits, gaps, synthetic, agg, s, out)
    (out / "report.md").write_text(report)
    summary = {
        "settings": asdict(s),
        "quick": quick,
        "seconds": seconds,
        "paper_mnist": PAPER_MNIST,
        "digits": digits,
        "reduced_gaps": gaps,
        "holdings": holdings,
        "synthetic": synthetic,
        "aggregation": agg,
    }
    (out / "results.json").write_text(json.dumps(_clean(summary), indent=1))
    return table


def _clean(obj: Any) -> Any:
    """JSON-ready: arrays to lists, NaN/inf to strings (``riemfl.federated`` convention)."""
    from ..federated.serialise import json_float

    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "tolist"):
        return _clean(obj.tolist())
    return json_float(obj)

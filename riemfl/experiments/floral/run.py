"""The runs of the FLoRAL reproduction: Table 1, the synthetic tasks, the aggregation comparison.

:class:`Runner` runs (or resumes from its checkpoint) one training and keeps its run file;
:func:`digits_runs`, :func:`cifar_runs`, :func:`synthetic_runs` and :func:`aggregation_runs`
are the groups of runs, and :func:`total_rounds` counts their rounds for the progress bar.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ...federated.run_core import RunOptions
from ...progress import ProgressBar
from .build import (
    SYNTHETIC_TASKS,
    cifar_base,
    digits_task,
    digits_trainer,
    holdings,
    synthetic_task,
    synthetic_trainer,
)
from .gauge import gauge_check
from .settings import (
    CIFAR_COLUMNS,
    COLUMNS,
    GAP_METHODS,
    METHODS,
    SYNTHETIC_METHODS,
    Column,
    Method,
    Settings,
    cifar_kind,
)

__all__ = [
    "Runner",
    "column_seeds",
    "total_rounds",
    "digits_runs",
    "cifar_columns",
    "CifarTraining",
    "cifar_runs",
    "synthetic_runs",
    "aggregation_runs",
]

#: the metrics of a run's curves, where the run records them
CURVES: tuple[str, ...] = ("accuracy", "loss", "cluster_recovery", "factor_average_error")


class Runner:
    """Runs (or resumes) single trainings, keeping the progress bar and the run files.

    Parameters
    ----------
    out : pathlib.Path
        The output folder: checkpoints under ``out/checkpoints``, run files under ``out/runs``.
    bar : riemfl.progress.ProgressBar
        Advanced by one per round, trained or read from a checkpoint.
    """

    def __init__(self, out: Path, bar: ProgressBar) -> None:
        self.out, self.bar = out, bar
        (out / "checkpoints").mkdir(parents=True, exist_ok=True)
        (out / "runs").mkdir(parents=True, exist_ok=True)

    def run(self, key: str, trainer: Any, rounds: int, **kwargs: Any) -> dict[str, Any]:
        """Train ``rounds`` rounds with :func:`riemfl.nn.floral.run_floral` (resuming).

        Parameters
        ----------
        key : str
            The run's name: its checkpoint and run file.
        trainer : riemfl.nn.floral.FloralTrainer
            The clients, model and local training.
        rounds : int
            Rounds in all.
        **kwargs
            Passed to ``run_floral`` (``seed`` defaults to 0).

        Returns
        -------
        dict
            ``key``, ``seconds``, ``resumed``, the ``final`` metrics, the ``curve`` (against
            ``step``), the ``parameters`` counts and the ``final_point``.
        """
        from ...nn.floral import parameter_counts, run_floral

        before = self.bar.count
        self.bar.postfix = {"run": key}
        t0 = time.perf_counter()
        options = RunOptions(
            seed=kwargs.pop("seed", 0),
            record_every=kwargs.pop("record_every", 1),
            checkpoint=self.out / "checkpoints" / f"{key}.ckpt",
            checkpoint_every=max(rounds // 5, 1),
            on_step=lambda r, _: self.bar.update(1),
        )
        h = run_floral(trainer, rounds, options=options, **kwargs)
        trained = self.bar.count - before  # rounds run by this call
        self.bar.skip(rounds - trained)  # the rounds its checkpoint held
        h.to_json(self.out / "runs" / f"{key}.json")
        m = h.metrics
        return {
            "key": key,
            "seconds": time.perf_counter() - t0,
            "resumed": trained < rounds,
            "final": {k: v[-1] for k, v in m.items()},
            # "step": the x axis of the curves (rounds here, server steps async)
            "curve": {"step": m["round"], **{k: m[k] for k in CURVES if k in m}},
            "parameters": parameter_counts(trainer.model),
            "final_point": h.final_point,
        }


def column_seeds(column: Column, s: Settings) -> list[tuple[int, tuple[Method, ...]]]:
    """(seed, methods) of a column: every method on ``seeds``; with reduced data the gap's
    methods also on ``gap_seeds``.

    Parameters
    ----------
    column : Column
        A Table 1 column.
    s : Settings
        The seeds.

    Returns
    -------
    list of (int, tuple of Method)
    """
    plan = [(seed, METHODS) for seed in s.seeds]
    if column.reduced:
        gap = tuple(m for m in METHODS if m.label in GAP_METHODS)
        plan += [(seed, gap) for seed in s.gap_seeds if seed not in s.seeds]
    return plan


def total_rounds(s: Settings) -> int:
    """Rounds of all the runs that report progress: Table 1, synthetic, synchronous products.

    Parameters
    ----------
    s : Settings
        What runs.

    Returns
    -------
    int
    """
    n_digits = sum(
        (s.reduced_rounds if c.reduced else s.rounds) * len(methods)
        for c in COLUMNS
        if c.label in s.columns
        for _, methods in column_seeds(c, s)
    )
    n_cifar = len(cifar_columns(s)) * len(s.cifar.seeds) * len(METHODS) * s.cifar.rounds
    return (
        n_digits
        + n_cifar
        + len(SYNTHETIC_METHODS) * sum(s.synthetic_rounds.values())
        + 2 * s.rounds
    )


def digits_runs(runner: Runner, s: Settings) -> tuple[list[dict[str, Any]], list[dict]]:
    """Table 1's runs, and what the clients held in each column and seed.

    Parameters
    ----------
    runner : Runner
        Runs and resumes.
    s : Settings
        Columns, seeds, rounds and training settings.

    Returns
    -------
    runs : list of dict
        :meth:`Runner.run`'s results (without ``final_point``) with ``column``, ``method``
        and ``seed``.
    holdings : list of dict
        :func:`~riemfl.experiments.floral.build.holdings` per column and seed.
    """
    results, held = [], []
    for column in (c for c in COLUMNS if c.label in s.columns):
        rounds = s.reduced_rounds if column.reduced else s.rounds
        every = max(1, s.record_every * rounds // max(s.rounds, 1))
        for seed, methods in column_seeds(column, s):
            task = digits_task(column, seed, s)
            held.append({"column": column.label, "seed": seed, **holdings(task)})
            for method in methods:
                key = f"digits-{column.transform}-{column.key}-{method.key}-s{seed}"
                r = runner.run(
                    key,
                    digits_trainer(method, task, seed, s),
                    rounds,
                    clients_per_round=s.clients_per_round,
                    seed=seed,
                    record_every=every,
                )
                r.update(column=column.label, method=method.label, seed=seed)
                r.pop("final_point")
                results.append(r)
    return results, held


def cifar_columns(s: Settings) -> list[Column]:
    """The CIFAR columns that run: ``s.cifar.columns`` where ``s.cifar.data`` is set, else none.

    Parameters
    ----------
    s : Settings

    Returns
    -------
    list of Column
    """
    if s.cifar.data is None:
        return []
    return [c for c in CIFAR_COLUMNS if c.label in s.cifar.columns]


def _cifar_task_settings(s: Settings, kind: str) -> Settings:
    """``s`` with the CIFAR training settings and the paper's (or a scaled-down) K, C, share."""
    from .cifar import cifar_settings

    c = s.cifar
    training = replace(
        s,
        batch_size=c.batch_size,
        lr=c.client_lr(kind),
        router_lr=c.router_lr,
        evaluation=c.evaluation,
        seeds=c.seeds,
    )
    return cifar_settings(training, kind, n_clients=c.clients.get(kind))


class CifarTraining:
    """What every run on one CIFAR kind shares: the training settings (K, C and the share per
    round of :func:`~riemfl.experiments.floral.cifar.cifar_settings`, the learning rates), the
    images (read once, cut to ``s.cifar.rows``, standardised per channel), the augmentation and
    the server (:func:`~riemfl.experiments.floral.cifar.cifar_aggregator`).

    Parameters
    ----------
    s : Settings
        ``s.cifar``: the files and training settings.
    kind : {"cifar10", "cifar100"}
    """

    def __init__(self, s: Settings, kind: str) -> None:
        from .cifar import crop_flip, load_cifar, standardise, subsample

        raw = subsample(load_cifar(s.cifar.data, kind), s.cifar.rows)
        self.kind, self.cifar = kind, s.cifar
        self.data = standardise(raw)
        self.augment = crop_flip(raw) if s.cifar.augment else None
        self.settings = _cifar_task_settings(s, kind)

    def task(self, column: Column, seed: int) -> Any:
        """The clustered task of a CIFAR column (:func:`~riemfl.experiments.floral.cifar.
        cifar_task`)."""
        from .cifar import cifar_task

        return cifar_task(column, seed, self.settings, self.data)

    def trainer(self, method: Method, task: Any, seed: int, **options: Any) -> Any:
        """A row's trainer on the paper's network (``options``: :func:`digits_trainer`'s)."""
        base = cifar_base(self.kind, seed)
        return digits_trainer(
            method, task, seed, self.settings, base=base, augment=self.augment, **options
        )

    def run_options(self, trainer: Any) -> dict[str, Any]:
        """:meth:`Runner.run`'s options of a run: clients per round and the server."""
        from .cifar import cifar_aggregator

        return {
            "clients_per_round": self.settings.clients_per_round,
            "aggregator": cifar_aggregator(trainer, self.kind, self.cifar),
        }


def cifar_runs(runner: Runner, s: Settings) -> list[dict[str, Any]]:
    """Table 1's CIFAR runs: every method in every column of :func:`cifar_columns` and seed,
    each kind set up once (:class:`CifarTraining`).

    Parameters
    ----------
    runner : Runner
        Runs and resumes.
    s : Settings
        ``s.cifar``: the files, columns, seeds, rounds and training settings.

    Returns
    -------
    list of dict
        :meth:`Runner.run`'s results (without ``final_point``) with ``column``, ``method``,
        ``seed``, ``kind`` and the task's ``n_clients`` and ``train_rows``.
    """
    columns = cifar_columns(s)
    results: list[dict[str, Any]] = []
    source = "standin" if s.cifar.standin else "data"
    rounds = s.cifar.rounds
    for kind in ("cifar10", "cifar100"):
        kind_columns = [c for c in columns if cifar_kind(c) == kind]
        if not kind_columns:
            continue
        training = CifarTraining(s, kind)
        for column in kind_columns:
            for seed in s.cifar.seeds:
                task = training.task(column, seed)
                for method in METHODS:
                    key = f"{kind}-{source}-{column.transform}-{column.key}-{method.key}-s{seed}"
                    trainer = training.trainer(method, task, seed)
                    r = runner.run(
                        key,
                        trainer,
                        rounds,
                        seed=seed,
                        record_every=max(1, min(s.cifar.record_every, rounds)),
                        **training.run_options(trainer),
                    )
                    r.update(
                        column=column.label,
                        method=method.label,
                        seed=seed,
                        kind=kind,
                        n_clients=training.settings.n_clients,
                        train_rows=int(sum(task.description["train_rows"])),
                    )
                    r.pop("final_point")
                    results.append(r)
    return results


def synthetic_runs(runner: Runner, s: Settings) -> list[dict[str, Any]]:
    """Every synthetic method on the linear and the MLP task (seed 0, full participation).

    Parameters
    ----------
    runner : Runner
        Runs and resumes.
    s : Settings
        The rounds per task and the router's settings.

    Returns
    -------
    list of dict
        :meth:`Runner.run`'s results (without ``final_point``) with ``task`` and ``method``.
    """
    results = []
    for kind in SYNTHETIC_TASKS:
        rounds = s.synthetic_rounds[kind]
        task = synthetic_task(kind)
        for method in SYNTHETIC_METHODS:
            r = runner.run(
                f"synthetic-{kind}-{method.key}",
                synthetic_trainer(method, task, s),
                rounds,
                record_every=max(rounds // 50, 1),
            )
            r.update(task=kind, method=method.label)
            r.pop("final_point")
            results.append(r)
    return results


def aggregation_runs(runner: Runner, s: Settings, digits: list[dict]) -> dict[str, Any]:
    """FLoRAL(10%) on full label shift: factor averages against product averages (sync, async).

    The factor-averaging runs are Table 1's (same task, seed and settings); the product runs
    differ from them only in the aggregator.

    Parameters
    ----------
    runner : Runner
        Runs and resumes.
    s : Settings
        Rounds, server steps and training settings (seed: the first of ``seeds``).
    digits : list of dict
        Table 1's runs (:func:`digits_runs`).

    Returns
    -------
    dict
        ``sync`` (the runs with their ``adaptors`` rule), ``async`` (FedBuff + FLoRAL with each
        rule) and ``gauge`` (:func:`~riemfl.experiments.floral.gauge.gauge_check`).
    """
    column = next(c for c in COLUMNS if c.label == "Full LS")
    seed = s.seeds[0]
    task = digits_task(column, seed, s)
    sync, (trainer, final) = _sync_aggregation(runner, s, task, column, seed, digits)
    gauge = gauge_check(trainer, final, seed)
    asynchronous = [_async_aggregation(runner, s, task, seed, a) for a in ("factors", "products")]
    return {"sync": sync, "async": asynchronous, "gauge": gauge}


def _sync_aggregation(
    runner: Runner, s: Settings, task: Any, column: Column, seed: int, digits: list[dict]
) -> tuple[list[dict[str, Any]], tuple[Any, np.ndarray]]:
    """Table 1's FLoRAL(10%) runs (factors) beside the same runs with products; the last
    product run's trainer and final point."""
    from ...nn.floral import FloralAggregator

    sync = []
    for method in (m for m in METHODS if m.kind == "floral" and m.rho == 0.1):
        table_run = next(
            r
            for r in digits
            if r["column"] == column.label and r["seed"] == seed and r["method"] == method.label
        )
        sync.append({**table_run, "adaptors": "factors"})
        trainer = digits_trainer(method, task, seed, s)
        r = runner.run(
            f"aggregation-products-{method.key}-s{seed}",
            trainer,
            s.rounds,
            clients_per_round=s.clients_per_round,
            seed=seed,
            record_every=s.record_every,
            aggregator=FloralAggregator(trainer.layout, "products"),
        )
        r.update(method=method.label, adaptors="products")
        final = r.pop("final_point")
        sync.append(r)
    return sync, (trainer, final)


def _async_aggregation(
    runner: Runner, s: Settings, task: Any, seed: int, adaptors: str
) -> dict[str, Any]:
    """FedBuff + FLoRAL(10%) (learned) with the ``adaptors`` rule (buffer 5, 10 workers)."""
    from ...federated import ExponentialTime, run_async
    from ...nn.floral import FloralFedBuff

    method = next(m for m in METHODS if m.label == "FLoRAL(10%) (learned)")
    trainer = digits_trainer(method, task, seed, s)
    rule = FloralFedBuff(trainer.layout, trainer.upload_weights, buffer_size=5, adaptors=adaptors)
    t0 = time.perf_counter()
    h = run_async(
        trainer,
        rule,
        s.async_steps,
        workers=min(10, s.n_clients),
        timing=ExponentialTime(1.0),
        x0=trainer.global_parameters(),
        options=RunOptions(seed=seed, record_every=max(s.async_steps // 10, 1)),
    )
    runner.bar.update(0, run=f"async-{adaptors}")
    return {
        "adaptors": adaptors,
        "accuracy": h.metrics["accuracy"][-1],
        "curve": {"step": h.metrics["step"], "accuracy": h.metrics["accuracy"]},
        "staleness": h.staleness_stats(),
        "updates": len(h.log["client"]),
        "product_fallbacks": rule.product_fallbacks,
        "seconds": time.perf_counter() - t0,
    }

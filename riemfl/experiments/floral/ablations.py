"""The FLoRAL ablations (Almansoori et al. 2024, App. G.3, Tables 2, 4 and 5) on the digits.

:func:`reproduce_table` runs one table (rows and settings:
:mod:`~riemfl.experiments.floral.ablation_settings`) with Table 1's run machinery
(:class:`~riemfl.experiments.floral.run.Runner`, resumable, and
:func:`~riemfl.experiments.floral.build.digits_trainer` with the CNN as the base model) and
writes ``table{N}.md`` (ours beside the paper's numbers, rank correlations, the paper's claims
with verdicts: :mod:`~riemfl.experiments.floral.ablation_analysis`,
:mod:`~riemfl.experiments.floral.ablation_report`), ``table{N}.json``, ``table{N}.png`` and
the counterpart of the table's accuracy-curve figure (Figs. 8-10,
:func:`~riemfl.experiments.floral.curve_figures.ablation_curves`). :func:`table_runs` are its
runs.

Rows of one configuration share their runs (their checkpoint and run file are named by the
configuration, :attr:`AblationRow.key`): Table 5's two "None" rows are one run, and with one
``out`` folder for all three tables, the default row (Table 2's x1 / 1%, Table 4's Balanced 2D,
Table 5's "Both + bias") and Table 4's "None" (Table 5's "LoRA + bias") run once.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ...errors import ParameterError
from ...federated.serialise import json_ready
from ...progress import ProgressBar
from .._threads import single_torch_thread
from .ablation_analysis import check_orderings, correlations, row_accuracies
from .ablation_report import ablation_plot, ablation_report, ablation_table
from .ablation_settings import (
    ABLATION_COLUMNS,
    CIFAR_ABLATION_COLUMNS,
    PAPER_ABLATION_COLUMNS,
    TABLES,
    AblationRow,
    AblationTable,
    ablation_settings,
    cifar_ablation_settings,
)
from .analysis import means
from .build import digits_task, digits_trainer
from .cifar import cifar_kinds
from .curve_figures import ABLATION_FIGURES, ablation_curves
from .run import CifarTraining, Runner
from .settings import Settings, cifar_kind, column

#: the labels of the CIFAR columns an ablation can run (with the user's files)
CIFAR_LABELS: tuple[str, ...] = tuple(label for label, _ in CIFAR_ABLATION_COLUMNS)

__all__ = ["reproduce_table", "table_runs", "cnn_base"]


def cnn_base(task: Any, seed: int) -> Any:
    """The ablations' shared model: :class:`riemfl.nn.SmallCNN` for the task's images, its
    initialisation seeded by ``seed`` (as Table 1's MLP)."""
    import torch

    from ...nn import SmallCNN

    shape = tuple(task.input_shape)
    channels, side = (shape[0], shape[-1]) if len(shape) == 3 else (1, math.isqrt(shape[0]))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return SmallCNN(task.n_classes, in_channels=channels, image_size=side)


def _ranks(model: Any) -> dict[str, tuple[int, int | None]] | None:
    """Adapted layer -> (rank, filter rank or None); None for a model without adaptors."""
    from ...nn.floral import FloralModel, MixtureConv2d

    if not isinstance(model, FloralModel):
        return None
    return {
        name.removeprefix("model."): (
            layer.rank,
            layer.filter_rank if isinstance(layer, MixtureConv2d) else None,
        )
        for name, layer in model.adaptors()
    }


def _distinct(table: AblationTable) -> list[AblationRow]:
    """The table's rows, one per configuration (first label kept)."""
    return list({row.key: row for row in reversed(table.rows)}.values())[::-1]


def table_runs(runner: Runner, table: AblationTable, s: Settings) -> list[dict[str, Any]]:
    """Every row of the table on every column and seed (one run per configuration).

    Parameters
    ----------
    runner : Runner
        Runs and resumes (Table 1's).
    table : AblationTable
        The rows.
    s : Settings
        Columns, seeds, rounds and training settings.

    Returns
    -------
    list of dict
        :meth:`Runner.run`'s results (without ``final_point``) with ``row``, ``column``,
        ``seed`` and the model's adaptor ``ranks``, one per row (rows of one configuration get
        copies of its run).
    """
    done: dict[tuple[str, str, int], dict[str, Any]] = {}
    every = max(1, s.record_every)
    training: dict[str, CifarTraining] = {}  # per CIFAR kind, set up once
    for col in s.columns:
        c = column(col)
        cifar = col in CIFAR_LABELS
        if cifar and cifar_kind(c) not in training:
            training[cifar_kind(c)] = CifarTraining(s, cifar_kind(c))
        for seed in s.seeds:
            if cifar:  # the paper's network and recipe on the user's files
                kind = cifar_kind(c)
                setup = training[kind]
                task = setup.task(c, seed)
                clusters = setup.settings.n_clusters
            else:  # the digits with the CNN
                kind, task, clusters = "digits", digits_task(c, seed, s), s.n_clusters
            for row in _distinct(table):
                options = {"n_clusters": row.n_clusters(clusters), **row.options}
                if cifar:
                    trainer = setup.trainer(row.method, task, seed, **options)
                    run_options = setup.run_options(trainer)
                else:
                    base = cnn_base(task, seed)
                    trainer = digits_trainer(row.method, task, seed, s, base=base, **options)
                    run_options = {"clients_per_round": s.clients_per_round}
                prefix = "ablation" if kind == "digits" else f"ablation-{kind}"
                r = runner.run(
                    f"{prefix}-{c.transform}-{row.key}-s{seed}",
                    trainer,
                    s.rounds,
                    seed=seed,
                    record_every=every,
                    **run_options,
                )
                r.pop("final_point")
                r.update(column=col, seed=seed, ranks=_ranks(trainer.model))
                done[row.key, col, seed] = r
    return [
        {**done[row.key, col, seed], "row": row.label}
        for row in table.rows
        for col in s.columns
        for seed in s.seeds
    ]


def reproduce_table(
    table: int,
    out: str | Path,
    quick: bool,
    data: str | None = None,
    progress: bool = False,
    *,
    settings: Settings | None = None,
) -> str:
    """Run ablation Table 2, 4 or 5; write ``table{N}.md``, ``table{N}.json``, ``table{N}.png``.

    Parameters
    ----------
    table : {2, 4, 5}
        The paper's table number (Almansoori et al. 2024, App. G.3).
    out : str or pathlib.Path
        The output folder (checkpoints and run files under it too; tables run into one folder
        share the runs of their common rows).
    quick : bool
        The quick form (:func:`~riemfl.experiments.floral.ablation_settings.ablation_settings`).
    data : str, optional
        A directory of CIFAR files (:func:`~riemfl.experiments.floral.cifar.cifar_kinds`): the
        table on the paper's CIFAR columns of the kinds found, with the paper's networks and
        Table 1's CIFAR settings (:func:`~riemfl.experiments.floral.ablation_settings.
        cifar_ablation_settings`); else an MNIST file, the paper's MNIST client setting on it
        (``Settings.for_mnist``).
    progress : bool
        Show a progress bar.
    settings : Settings, optional
        Every setting (``quick`` then only names the mode in the report); its ``columns``
        must be among those of :data:`~riemfl.experiments.floral.ablation_settings.
        ABLATION_COLUMNS` (CIFAR columns need ``settings.cifar.data``).

    Returns
    -------
    str
        The report, ``table{N}.md``'s text.

    Raises
    ------
    ParameterError
        For a table the ablations do not have, or columns other than the full-data ones.
    """
    if table not in TABLES:
        raise ParameterError(
            f"reproduce_table: table must be one of {sorted(TABLES)}, got {table!r}"
        )
    spec = TABLES[table]
    kinds = cifar_kinds(data) if data is not None else ()
    if kinds:
        s = cifar_ablation_settings(str(data), kinds, quick)
    else:
        s = settings if settings is not None else ablation_settings(quick)
        if data is not None:
            s = s.for_mnist(data, quick)
    allowed = [c for c, _ in ABLATION_COLUMNS]
    if not s.columns or any(c not in allowed for c in s.columns):
        raise ParameterError(
            f"reproduce_table: columns must be some of {allowed}, got {list(s.columns)}"
        )
    if s.cifar.data is None and any(c in CIFAR_LABELS for c in s.columns):
        raise ParameterError(
            "reproduce_table: the CIFAR columns need the CIFAR files (settings.cifar.data or "
            "data=DIR)"
        )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    total = len(_distinct(spec)) * len(s.columns) * len(s.seeds) * s.rounds
    t0 = time.perf_counter()
    with single_torch_thread(), ProgressBar(total, f"floral-table{table}", enabled=progress) as bar:
        runs = table_runs(Runner(out, bar), spec, s)
    seconds = time.perf_counter() - t0
    accs = row_accuracies(runs, spec, s)
    ours = means(accs)
    details = {r["row"]: {"parameters": r["parameters"], "ranks": r["ranks"]} for r in runs}
    text_table, layers = ablation_table(spec, accs, details, s)
    corr = correlations(ours, spec, s)
    checks = check_orderings(accs, spec, s)
    text = ablation_report(spec, text_table, layers, corr, checks, s, quick, seconds)
    ablation_plot(spec, accs, s, out)
    figure, _ = ablation_curves(table, runs, [row.label for row in spec.rows], s.columns, out)
    text += (
        f"\n### Fig. {ABLATION_FIGURES[table][0]} counterpart: accuracy against the round\n\n"
        f"![Fig. {ABLATION_FIGURES[table][0]}]({figure})\n"
    )
    (out / f"table{table}.md").write_text(text)
    summary = {
        "table": table,
        "title": spec.title,
        "settings": asdict(s),
        "quick": quick,
        "seconds": seconds,
        "paper": {
            "source": spec.source,
            "columns": PAPER_ABLATION_COLUMNS,
            "rows": {row.label: row.paper for row in spec.rows},
        },
        "rows": [{"label": row.label, "key": row.key, **asdict(row)} for row in spec.rows],
        "ours": {
            label: {
                col: {"values": accs[label, col], "mean": m, "std": sd}
                for col, (m, sd) in by_col.items()
            }
            for label, by_col in ours.items()
        },
        "rank_correlation": corr,
        "orderings": checks,
        "runs": runs,
    }
    (out / f"table{table}.json").write_text(json.dumps(json_ready(summary), indent=1))
    return text

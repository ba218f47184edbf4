"""Figs. 3-10's counterparts: which figures the runs give, the curves they draw."""

from __future__ import annotations

import numpy as np
import pytest

from riemfl.testing import importorskip

importorskip("matplotlib")

from riemfl.experiments.floral.curve_figures import (  # noqa: E402
    ABLATION_FIGURES,
    LOSS_FIGURES,
    ablation_curves,
    figures_that_ran,
    loss_figure_lines,
    loss_figures,
    mean_curve,
)
from riemfl.experiments.styles import Styles  # noqa: E402


def _run(column, method, seed, loss, **extra):
    acc = [1 - v for v in loss]
    return {
        "column": column,
        "method": method,
        "seed": seed,
        **extra,
        "curve": {"step": list(range(len(loss))), "loss": loss, "accuracy": acc},
    }


def test_mean_curve_is_the_mean_round_by_round():
    runs = [_run("Full R", "FedAvg", 0, [1.0, 0.5]), _run("Full R", "FedAvg", 1, [3.0, 0.1])]
    steps, mean = mean_curve(runs, "loss")
    assert steps == [0, 1] and np.allclose(mean, [2.0, 0.3])
    assert mean_curve(runs, "cluster_recovery") is None
    assert mean_curve([], "loss") is None


def test_the_figures_follow_the_columns_that_ran():
    runs = [_run("Full LS", "FedAvg", 0, [1.0, 0.5]), _run("C100 Reduced", "FedAvg", 0, [2.0, 1.0])]
    chosen = {spec.number: cols for spec, cols in figures_that_ran(runs)}
    assert chosen == {4: ["Full LS"], 7: ["C100 Reduced"]}
    lines = loss_figure_lines(runs)
    assert "![Fig. 4: MNIST-LS](fig4_mnist_ls_loss.png)" in lines
    assert "![Fig. 7: CIFAR-100](fig7_cifar_100_loss.png)" in lines
    assert loss_figure_lines([]) == []
    # the paper's five loss figures, full data first in each
    assert [f.number for f in LOSS_FIGURES] == [3, 4, 5, 6, 7]
    assert all("Full" in f.columns[0] for f in LOSS_FIGURES)


def test_loss_figures_write_one_png_per_task(tmp_path):
    runs = [
        _run(col, m, sd, [1.0 + sd, 0.5, 0.25])
        for col in ("Full R", "Reduced 5% R", "C10 Full LS")
        for m in ("FedAvg", "Ensemble (pi*)")
        for sd in (0, 1)
    ]
    labels = ["FedAvg", "Ensemble (pi*)"]
    drawn = loss_figures(runs, labels, Styles(labels), tmp_path)
    assert [spec.number for spec, _ in drawn] == [3, 6]
    for _, fig in drawn:  # one legend below the panels, naming every method
        (legend,) = fig.legends
        assert [t.get_text() for t in legend.get_texts()] == labels
    fig3 = drawn[0][1]
    assert len(fig3.axes) == 2  # Full R and Reduced 5% R: the columns that ran
    (line, _) = fig3.axes[0].get_lines()
    assert list(line.get_ydata()) == [1.5, 0.5, 0.25]  # the mean over seeds 0 and 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "fig3_mnist_r_loss.png",
        "fig6_cifar_10_ls_loss.png",
    ]


@pytest.mark.parametrize("table", sorted(ABLATION_FIGURES))
def test_ablation_curves_one_figure_per_table(tmp_path, table):
    runs = [
        _run(col, None, 0, [0.9, 0.4], row=row)
        for col in ("Full R", "Full LS")
        for row in ("a", "b")
    ]
    file, fig = ablation_curves(table, runs, ["a", "b"], ["Full R", "Full LS"], tmp_path)
    number, name = ABLATION_FIGURES[table]
    assert file == f"fig{number}_{name}.png"
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["a", "b"]
    assert (tmp_path / file).read_bytes()[:4] == b"\x89PNG"

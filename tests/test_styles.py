"""Figures of the reports: one look per method across figures, coinciding curves named, and a
layout a reader can read (legends that cover no curve, tick labels that do not collide, readable
font sizes, the number of seeds said as it is)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from riemfl.experiments.spread import over_seeds
from riemfl.experiments.styles import (
    LEGEND_FONTSIZE,
    Styles,
    coinciding,
    legend_styles,
    log_axis,
    pyplot,
    shared_legend,
)
from riemfl.testing import importorskip


def test_a_label_keeps_its_look_and_neighbours_differ():
    styles = Styles(["A", "B"])
    first = styles.of("A")
    styles.of("C")
    assert styles.of("A") == first and first["label"] == "A"
    looks = [styles.of(k) for k in "ABC"]
    for key in ("color", "linestyle", "marker"):
        assert len({look[key] for look in looks}) == 3, key


def test_coinciding_names_the_earlier_of_two_equal_curves():
    x = [0, 1, 2]
    curves = {
        "RFedProx": (x, [3.0, 2.0, 1.0]),
        "RFedAvg": (x, [3.0, 2.0, 1.0 + 1e-12]),
        "B": (x, [3, 2, 0.5]),
    }
    assert coinciding(curves) == {"RFedAvg": "RFedProx"}
    assert coinciding({"a": ([0, 1], [1, 2]), "b": ([0, 2], [1, 2])}) == {}  # other x
    styles = Styles(["B"])
    looks = legend_styles(styles, curves)
    assert looks["RFedAvg"]["label"] == "RFedAvg (= RFedProx)" and looks["B"] == styles.of("B")
    assert looks["RFedProx"] == styles.of("RFedProx")  # the same look as in every other figure


def _kpca_history(rounds=30):
    from riemfl.federated import RFedAvg, run_sync
    from riemfl.problems import KPCAProblem

    P = KPCAProblem.synthetic(n_clients=3, d=6, k=2, p=5, seed=0)
    return run_sync(P, RFedAvg(0.05, 2), rounds)


def _zhang_figure(panels, x=("round",)):
    from riemfl.experiments import zhang2024

    return zhang2024.Figure(1, "a title " * 20, panels, ("grad_norm",), x, "")


def _draw(fig):
    """Draw ``fig`` (closed by the report's ``save``: on a fresh Agg canvas) and return its
    renderer."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _visible_labels(axis):
    """The non-empty tick labels of ``axis`` within its view (after a draw)."""
    lo, hi = sorted(axis.get_view_interval())
    ticks = axis.get_major_ticks() + axis.get_minor_ticks()
    return [
        t.label1
        for t in ticks
        if lo <= t.get_loc() <= hi and t.label1.get_visible() and t.label1.get_text()
    ]


def _colliding_tick_labels(fig):
    """Pairs of tick labels of one axis whose drawn boxes overlap."""
    renderer = _draw(fig)
    bad = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in _visible_labels(axis)]
            bad += [(a, b) for (a, p), (b, q) in itertools.combinations(boxes, 2) if p.overlaps(q)]
    return bad


def _legend_covers_a_panel(fig):
    """Whether a legend of ``fig`` (figure legends and panel legends) lies over a panel."""
    renderer = _draw(fig)
    boxes = [legend.get_window_extent(renderer) for legend in fig.legends]
    panels = [ax.get_window_extent(renderer) for ax in fig.axes if ax.get_visible()]
    return any(box.overlaps(panel) for box in boxes for panel in panels) or any(
        ax.get_legend() is not None for ax in fig.axes
    )


def test_zhang2024_figures_say_when_curves_lie_on_each_other(tmp_path):
    importorskip("matplotlib")
    from riemfl.experiments import zhang2024
    from riemfl.experiments.zhang2024.figures import plot_figure

    h = _kpca_history(3)
    a = zhang2024.Run("kpca", "rfedavg", 2, 3, 0.05)
    b = zhang2024.Run("kpca", "rfedprox", 2, 3, 0.05)
    fig = _zhang_figure([("", [("RFedAvg", a), ("RFedProx", b)])])
    f = plot_figure(fig, {a.key: h, b.key: h}, tmp_path / "f.png", Styles())
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
    (legend,) = f.legends  # one legend, below the panels
    assert [t.get_text() for t in legend.get_texts()] == ["RFedAvg", "RFedProx (= RFedAvg)"]
    assert "\n" in f._suptitle.get_text()  # a long title is wrapped to the figure's width


def test_zhang2024_figures_start_at_round_1_on_a_log_axis_and_share_y(tmp_path):
    """Figs. 1 and 5 squeezed the curves against the left edge (|grad f| falls by orders of
    magnitude in the first rounds, which a linear axis from round 0 gives no room); Fig. 2's
    panels had each their own y range."""
    importorskip("matplotlib")
    from riemfl.experiments import zhang2024
    from riemfl.experiments.zhang2024.figures import plot_figure

    h, g = _kpca_history(40), _kpca_history(10)
    a = zhang2024.Run("kpca", "rfedavg", 2, 40, 0.05)
    b = zhang2024.Run("kpca", "rfedavg", 3, 10, 0.05)
    fig = _zhang_figure(
        [("tau=2", [("RFedAvg", a)]), ("tau=3", [("RFedAvg", b)])], ("round", "uplink_matrices")
    )
    f = plot_figure(fig, {a.key: h, b.key: g}, tmp_path / "f.png", Styles())
    assert len(f.axes) == 4
    for ax in f.axes:
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        xs = np.concatenate([line.get_xdata() for line in ax.get_lines()])
        assert xs.min() == 1  # round 1 (one upload) is the first point, not round 0
        assert ax.get_ylim() == f.axes[0].get_ylim()
        assert f.axes[0].get_shared_y_axes().joined(f.axes[0], ax)
    assert not _colliding_tick_labels(f)
    (legend,) = f.legends
    assert all(t.get_fontsize() >= 9 for t in legend.get_texts())
    assert not _legend_covers_a_panel(f)


def test_a_narrow_log_axis_labels_plain_numbers_that_do_not_collide():
    """privacy.png: epsilon from 2 to 40 on a log axis labelled every minor tick ("2x10^0
    3x10^0 4x10^0 ..."), the labels running into each other."""
    importorskip("matplotlib")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.3, 3.6))
    ax.plot([1.95, 39.3], [10.4, 3.2], "o-")
    log_axis(ax, "x")
    log_axis(ax, "y")
    assert not _colliding_tick_labels(fig)
    shown = [t.get_text() for t in _visible_labels(ax.xaxis)]
    assert shown == ["2", "5", "10", "20"]
    assert not [t for t in ax.xaxis.get_ticklabels(minor=True) if t.get_text()]
    assert "5" in [t.get_text() for t in _visible_labels(ax.yaxis)]
    wide, ax = plt.subplots()
    ax.plot([1.0, 1e6], [1.0, 2.0])
    log_axis(ax, "x")
    _draw(wide)
    assert [t.get_text() for t in _visible_labels(ax.xaxis)][:3] == ["1", "10", "100"]
    # fig9_sweep.png's eta * tau: under a decade, long labels; 1-9 x 10^k ran together
    sweep, ax = plt.subplots(figsize=(4.3, 3.6))
    ax.plot([2e-4, 1.07e-3], [47, 48])
    log_axis(ax, "x")
    assert not _colliding_tick_labels(sweep)
    assert [t.get_text() for t in _visible_labels(ax.xaxis)] == ["0.0002", "0.0005", "0.001"]
    plt.close("all")


def test_one_legend_below_panels_that_show_the_same_curves_else_one_per_panel():
    importorskip("matplotlib")
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, layout="constrained")
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="A")
    legend = shared_legend(fig, list(axes))
    assert fig.legends == [legend] and legend.get_texts()[0].get_fontsize() == LEGEND_FONTSIZE
    assert LEGEND_FONTSIZE >= 9
    fig, axes = plt.subplots(1, 2, layout="constrained")
    axes[0].plot([0, 1], [0, 1], label="A")
    axes[1].plot([0, 1], [0, 1], label="A (= B)")
    assert shared_legend(fig, list(axes)) is None and not fig.legends
    assert all(ax.get_legend() is not None for ax in axes)
    plt.close("all")


def test_one_seed_is_not_called_a_mean():
    assert over_seeds(1) == "one seed" and over_seeds(3) == "mean over 3 seeds"


def test_privacy_figure_tick_labels_do_not_collide(tmp_path):
    importorskip("matplotlib")
    from riemfl.experiments import privacy

    s = privacy.Settings(rounds={"kpca-synthetic": 3, "logreg-digits": 2}, noise=(1.0, 10.0))
    eps = {"kpca-synthetic": (97.6, 4.13), "logreg-digits": (39.3, 1.95)}
    rows = []
    for problem, (big, small) in eps.items():
        for k, rule in enumerate(privacy.RULES):
            for sigma, e in ((None, math.inf), (0.0, math.inf), (1.0, big), (10.0, small)):
                row = {"problem": problem, "rule": rule, "sigma": sigma, "epsilon": e}
                row["gap"] = (1 + k) * (0.5 if sigma is None else 2.0 + (sigma or 0))
                if problem == "logreg-digits":
                    row["accuracy"] = 0.1 + 0.01 * k
                rows.append(row)
    fig = privacy._plot(rows, s, tmp_path)
    assert (tmp_path / "privacy.png").exists()
    assert not _colliding_tick_labels(fig)
    assert not _legend_covers_a_panel(fig)


def test_floral_curves_legend_covers_no_curve(tmp_path):
    importorskip("matplotlib")
    from riemfl.experiments import floral
    from riemfl.experiments.floral.figures import curves_plot

    s = floral.Settings(seeds=(0,), columns=("Full R", "Full LS"))
    steps = list(range(0, 81, 5))
    digits = [
        {
            "column": col,
            "method": m.label,
            "curve": {"step": steps, "accuracy": list(np.linspace(0.1, 0.9 - 0.05 * i, 17))},
        }
        for col in s.columns
        for i, m in enumerate(floral.METHODS)
    ]
    fig = curves_plot(digits, s, Styles([m.label for m in floral.METHODS]), tmp_path)
    assert (tmp_path / "table1_curves.png").exists()
    assert not _legend_covers_a_panel(fig)
    assert all(t.get_fontsize() >= 9 for t in fig.legends[0].get_texts())
    assert fig.axes[0].get_ylabel() == "personal test accuracy (one seed)"


@pytest.mark.parametrize("seeds", [(0,), (0, 1)])
def test_licudi2025_says_one_seed_and_draws_no_error_bar_for_it(tmp_path, seeds):
    importorskip("matplotlib")
    from riemfl.experiments import licudi2025
    from riemfl.experiments.licudi2025 import figures

    s = licudi2025.Settings(seeds=seeds, methods=("FedAsync", "AsyncBezier"))
    runs = [
        {
            "method": m,
            "seed": seed,
            "gini": 0.1 + 0.01 * seed,
            "theil": 0.02 + 0.001 * seed,
            "curve": {
                "step": [0, 10, 20],
                "updates": [0, 10, 20],
                "time": [0.0, 1.0, 2.0],
                "accuracy": [0.1, 0.5 + 0.01 * seed, 0.6],
            },
        }
        for m in s.methods
        for seed in seeds
    ]
    label = figures.plot_accuracy(runs, s, tmp_path / "a.png").axes[0].get_ylabel()
    bars = figures.plot_fairness(runs, s, tmp_path / "f.png")
    from matplotlib.container import BarContainer

    has_error_bars = [
        next(c for c in ax.containers if isinstance(c, BarContainer)).errorbar is not None
        for ax in bars.axes
    ]
    if len(seeds) == 1:
        assert label == "test accuracy (one seed)" and "mean" not in label
        assert not any(has_error_bars)
    else:
        assert label == "test accuracy (mean over 2 seeds)" and all(has_error_bars)

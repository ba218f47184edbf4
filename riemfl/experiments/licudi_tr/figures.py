"""The figures: Fig. 1 (endpoint corrections) and Fig. 3 (control-point corrections).

``fig1_endpoint.png``: left, the averaged normalised relative one-step test loss of the five
endpoint corrections over the server steps (0: the best, 1: the worst), the phase transitions of
the better base as dashed lines and the steps claim 2 leaves out shaded; right, the smoothed test
loss of the two runs' global models (where the runs are in their convergence).

``fig3_control_points.png``: the relative one-step test loss of the control-point corrections on
AsyncCurve's checkpoints, on the gradient-based end point (top) and the position-based one
(bottom), with Fig. 1's transitions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..styles import TITLE_FONTSIZE, Styles, legend, log_axis, pyplot, save
from .settings import CONTROL_PANELS, FIGURE1

__all__ = ["FIG1", "FIG3", "LABELS", "plot_endpoint", "plot_control"]

#: the figures' file names in the output folder
FIG1 = "fig1_endpoint.png"
FIG3 = "fig3_control_points.png"

#: the curves' legend labels
LABELS = {
    "asgd": "ASGD (trust p-grad)",
    "fedasync": "FedAsync (trust position)",
    "orthograd": "OrthoGrad",
    "orthopos": "OrthoPos",
    "dcasgd": "DC-ASGD (adaptive x2.5)",
    "line": "line (no curve)",
    "stale": "curve, stale control point",
    "translation": "curve, translated control point",
    "rotation": "curve, rotated control point (eq. 17)",
    "fedasync-run": "FedAsync run",
    "asynccurve-run": "AsyncCurve run",
}


def _marks(ax: Any, switches: Sequence[int], window: int, n: int) -> None:
    for s in switches:
        ax.axvline(s, color="grey", linestyle="--", linewidth=0.8)
        ax.axvspan(max(0, s - window), min(n - 1, s + window), color="grey", alpha=0.12)


def plot_endpoint(
    curves: Mapping[str, np.ndarray],
    runs: Mapping[str, np.ndarray],
    switches: Sequence[int],
    window: int,
    out: Path,
) -> Any:
    """Write :data:`FIG1`: ``curves`` (method -> relative test loss), ``runs`` (algorithm ->
    smoothed test loss of its global model); returns the (closed) figure."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), layout="constrained")
    styles = Styles([LABELS[m] for m in FIGURE1] + [LABELS[f"{a}-run"] for a in runs])
    n = len(next(iter(curves.values())))
    steps = np.arange(n)
    for m in FIGURE1:
        left.plot(steps, curves[m], **styles.of(LABELS[m]))
    _marks(left, switches, window, n)
    left.set_ylim(-0.03, 1.32)  # room above the curves for the legend
    left.set_yticks(np.linspace(0.0, 1.0, 6))
    left.set_xlabel("server step")
    left.set_ylabel("normalised relative test loss (0 = best)")
    left.set_title(
        "Fig. 1: endpoint corrections, one step from each checkpoint\n"
        "(smoothed, averaged over FedAsync and AsyncCurve; dashed: better base changes)",
        fontsize=TITLE_FONTSIZE,
    )
    legend(left, loc="upper center", ncols=3)
    for a, loss in runs.items():
        look = styles.of(LABELS[f"{a}-run"])
        right.plot(np.arange(len(loss)), loss, **look)
    right.set_xlabel("server step")
    right.set_ylabel("test loss of the global model (smoothed)")
    right.set_title("the runs (no delay correction)", fontsize=TITLE_FONTSIZE)
    log_axis(right, "y")
    legend(right, loc="upper right")
    return save(fig, Path(out) / FIG1)


def plot_control(
    panels: Mapping[str, Mapping[str, np.ndarray]],
    switches: Sequence[int],
    window: int,
    out: Path,
) -> Any:
    """Write :data:`FIG3`: ``panels`` (base -> proposal -> relative test loss); returns the
    (closed) figure."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(9, 7.5), layout="constrained", sharex=True)
    styles = Styles([LABELS[k] for k in ("line", "stale", "translation", "rotation")])
    for ax, base in zip(axes, CONTROL_PANELS, strict=True):
        curves = panels[base]
        n = len(next(iter(curves.values())))
        for name in CONTROL_PANELS[base]:
            ax.plot(np.arange(n), curves[name], **styles.of(LABELS[name.split("/")[1]]))
        _marks(ax, switches, window, n)
        ax.set_ylim(-0.03, 1.32)  # room above the curves for the legend
        ax.set_yticks(np.linspace(0.0, 1.0, 6))
        ax.set_ylabel("normalised relative test loss")
        where = "top" if base == "gradient" else "bottom"
        ax.set_title(
            f"Fig. 3 ({where}): control-point corrections on the {base}-based end point "
            "(AsyncCurve's checkpoints, smoothed)",
            fontsize=TITLE_FONTSIZE,
        )
        legend(ax, loc="upper center", ncols=2)
    axes[-1].set_xlabel("server step")
    return save(fig, Path(out) / FIG3)

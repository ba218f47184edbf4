r"""The figure: suboptimality against client updates, one panel per problem.

Each method's curve is the mean over the seeds (its seeds' range shaded), read at its
evaluations; the grey dashed line is the target e of :math:`T_e`. The x axis counts client
updates, the clock on which every method has done the same work (FedBuff takes K of them per
server step). The y axis is linear: the tree's suboptimality is measured from a reference loss
and may dip below 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..styles import TITLE_FONTSIZE, Styles, pyplot, save, shared_legend
from .settings import METHODS

__all__ = ["FIGURE", "plot"]

#: the figure's file name in the output folder
FIGURE = "curved_curves.png"


def plot(results: Sequence[dict], out: Path) -> Any:
    """Write :data:`FIGURE` into ``out``; returns the (closed) figure."""
    plt = pyplot()
    fig, axes = plt.subplots(
        1, len(results), figsize=(5.5 * len(results), 4.2), layout="constrained", squeeze=False
    )
    styles = Styles(METHODS)
    for ax, r in zip(axes[0], results, strict=True):
        for method in METHODS:
            summary = r["summary"][method]
            if summary["curve"] is None:
                continue
            look = {**styles.of(method), "label": f"{method} (lambda {r['rates'][method]:g})"}
            x = np.asarray(summary["curve"]["updates"])
            runs = [run for run in r["runs"][method] if run["error"] is None]
            ys = np.array([run["subopt"] for run in runs])
            ax.plot(x, ys.mean(axis=0), **look)
            ax.fill_between(x, ys.min(axis=0), ys.max(axis=0), color=look["color"], alpha=0.15)
        ax.axhline(r["target"], color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(r["case"].title, fontsize=TITLE_FONTSIZE, wrap=True)
        ax.set_xlabel("client updates")
        reference = "f*" if r["case"].exact else "the reference loss"
        ax.set_ylabel(f"f - {reference} (mean over seeds)")
    shared_legend(fig, list(axes[0]))
    return save(fig, Path(out) / FIGURE)

"""The figure of the Table 2 report: macro AUROC against client updates and virtual time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..spread import over_seeds
from ..styles import Styles, legend_styles, log_axis, pyplot, save, shared_legend
from .figures import mean_curve
from .table2_settings import Table2Settings

__all__ = ["plot_table2"]

#: clock -> the label of its axis
_AXES = {"updates": "client updates received", "time": "virtual time"}


def plot_table2(runs: list[dict[str, Any]], s: Table2Settings, path: Path) -> Any:
    """Macro AUROC (the mean over the seeds, or the one seed's) of every method against client
    updates and against virtual time (log scales: FedBuff takes K = 10 updates per server step),
    with T_e's target 1 - e dotted. Returns the (closed) matplotlib figure."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8), layout="constrained", sharey=True)
    styles = Styles(s.methods)  # the same look per method in both panels
    for ax, (axis, label) in zip(axes, _AXES.items(), strict=True):
        curves = {}
        for method in s.methods:
            x, auroc = mean_curve([r for r in runs if r["method"] == method], axis, "auroc")
            curves[method] = (x[x > 0], auroc[x > 0])
        looks = legend_styles(styles, curves)
        for method, (x, auroc) in curves.items():
            ax.plot(x, auroc, **looks[method])
        ax.axhline(1 - s.error_target, color="k", linestyle=":", linewidth=1, label="1 - e")
        log_axis(ax, "x")
        ax.set_xlabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel(f"test macro AUROC ({over_seeds(len(s.seeds))})")
    shared_legend(fig, list(axes), ncols=5)
    return save(fig, path, dpi=110)

"""One look per method across all the figures of a report, and a word where curves coincide.

:class:`Styles` gives each label (a method, a batch size, a local-epoch count) a colour, a line
style and a marker the first time it is asked, and the same ones every later time, so that a
method looks the same in every figure of a report. The line styles and markers differ between
neighbours in the palette, so two curves that lie on top of each other stay distinguishable
(a dashed line over a solid one, markers at different places), and :func:`coinciding` finds such
curves so that the legend can say so.

The rest is the layout every report figure shares: :func:`pyplot` (the file-only backend),
:data:`LEGEND_FONTSIZE` and :data:`TITLE_FONTSIZE`, :func:`legend` (one panel's legend, at a
readable size), :func:`shared_legend` (one legend below the panels when they all show the same
curves, so that no legend covers a curve), :func:`log_axis` (a log scale whose tick labels do not
collide) and :func:`save`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "Styles",
    "coinciding",
    "legend_styles",
    "COLOURS",
    "LEGEND_FONTSIZE",
    "TITLE_FONTSIZE",
    "pyplot",
    "legend",
    "shared_legend",
    "log_axis",
    "LOG_TICKS",
    "save",
]

#: matplotlib's "tab10" colours, in order
COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
_LINES = ("-", "--", "-.", ":")
_MARKERS = ("o", "s", "^", "D", "v", "x", "P", "*")


class Styles:
    """Colour, line style and marker per label, fixed for the lifetime of the object.

    Parameters
    ----------
    labels : sequence of str, optional
        Labels to assign first, in this order (e.g. every method of a report).
    """

    def __init__(self, labels: Sequence[str] = ()) -> None:
        self._index: dict[str, int] = {}
        for label in labels:
            self.of(label)

    def of(self, label: str) -> dict[str, Any]:
        """Keyword arguments for ``Axes.plot`` (``color``, ``linestyle``, ``marker``,
        ``markevery``, ``label``)."""
        i = self._index.setdefault(label, len(self._index))
        return {
            "color": COLOURS[i % len(COLOURS)],
            "linestyle": _LINES[i % len(_LINES)],
            "marker": _MARKERS[i % len(_MARKERS)],
            # markers spread along the curve, shifted per label so coinciding ones alternate
            "markevery": (0.02 * (i % 5), 0.1),
            "markersize": 4,
            "label": label,
        }


def coinciding(
    curves: Mapping[str, tuple[Sequence[float], Sequence[float]]], rtol: float = 1e-9
) -> dict[str, str]:
    """Labels whose curve equals an earlier label's (same x, y within ``rtol``): label -> the
    earlier label it lies on."""
    out: dict[str, str] = {}
    seen: list[tuple[str, np.ndarray, np.ndarray]] = []
    for label, (x, y) in curves.items():
        xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        for other, ox, oy in seen:
            same = xs.shape == ox.shape and np.array_equal(xs, ox)
            if same and np.allclose(ys, oy, rtol=rtol, atol=0.0, equal_nan=True):
                out[label] = other
                break
        else:
            seen.append((label, xs, ys))
    return out


def legend_styles(
    styles: Styles, curves: Mapping[str, tuple[Sequence[float], Sequence[float]]]
) -> dict[str, dict[str, Any]]:
    """``styles.of(label)`` for every curve, its legend label saying which earlier curve it lies
    on (:func:`coinciding`): "B (= A)"."""
    under = coinciding(curves)
    out = {label: styles.of(label) for label in curves}
    for label, other in under.items():
        out[label]["label"] = f"{label} (= {other})"
    return out


# ----------------------------------------------------------------------------------- the layout
#: font size (points) of every legend of a report figure: readable at the figures' 100 dpi
LEGEND_FONTSIZE = 9
#: font size (points) of panel titles and figure titles
TITLE_FONTSIZE = 10


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend: the reports write files and open no window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def legend(ax: Any, **kwargs: Any) -> Any:
    """``ax.legend`` at :data:`LEGEND_FONTSIZE` (``kwargs`` go to it: ``loc``, ``ncols``...)."""
    return ax.legend(fontsize=LEGEND_FONTSIZE, **kwargs)


def shared_legend(fig: Any, axes: Sequence[Any], *, ncols: int | None = None) -> Any:
    """One legend for the figure, below its panels, when every panel of ``axes`` that has
    curves shows the same labels; else :func:`legend` per panel (e.g. where one panel notes a
    coinciding curve, :func:`legend_styles`, and another does not).

    The figure needs ``layout="constrained"`` (``plt.subplots(..., layout="constrained")``), which
    makes room for the legend outside the panels. Returns the figure's legend, or None.
    """
    entries = [ax.get_legend_handles_labels() for ax in axes]
    entries = [(handles, labels) for handles, labels in entries if labels]
    if not entries:
        return None
    handles, labels = entries[0]
    if any(other != labels for _, other in entries[1:]):
        for ax in axes:
            if ax.get_legend_handles_labels()[1]:
                legend(ax)
        return None
    columns = ncols if ncols is not None else min(len(labels), 4)
    return fig.legend(
        handles, labels, loc="outside lower center", ncols=columns, fontsize=LEGEND_FONTSIZE
    )


#: the most labelled ticks :func:`log_axis` puts on an x axis and on a y axis
LOG_TICKS = {"x": 6, "y": 8}


def log_axis(ax: Any, axis: str = "x") -> None:
    """Put ``axis`` ("x" or "y") of ``ax`` on a log scale whose tick labels do not collide.

    The labels are plain numbers ("0.01", "5", "100") at the densest of 1-9 x 10^k, 1, 2 and
    5 x 10^k, or the powers of ten that puts at most :data:`LOG_TICKS` labels on the axis;
    minor ticks are unlabelled. (matplotlib labels every minor tick of a log axis that spans
    less than a decade or two, "2x10^0 3x10^0 4x10^0 ...", and the labels run into each
    other.) Call it after the curves are drawn: it reads the limits.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    getattr(ax, f"set_{axis}scale")("log")
    which = ax.xaxis if axis == "x" else ax.yaxis
    low, high = sorted(getattr(ax, f"get_{axis}lim")())
    for subs in ((1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0), (1.0, 2.0, 5.0), (1.0,)):
        if _log_ticks_within(low, high, subs) <= LOG_TICKS[axis]:
            break
    which.set_major_locator(LogLocator(base=10.0, subs=subs))
    which.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    which.set_minor_formatter(NullFormatter())


def _log_ticks_within(low: float, high: float, subs: Sequence[float]) -> int:
    """How many of ``s x 10^k`` (s in ``subs``) lie in [low, high]."""
    if not 0 < low <= high < math.inf:
        return 0
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    return sum(low <= s * 10.0**k <= high for k in decades for s in subs)


def save(fig: Any, path: Any, dpi: int = 100) -> Any:
    """Lay ``fig`` out (``tight_layout`` unless it has a layout engine), write it to ``path``
    and close it; returns the figure (closed, still readable: tests inspect its axes)."""
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return fig

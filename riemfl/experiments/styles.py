"""One look per method across all the figures of a report, and a word where curves coincide.

:class:`Styles` gives each label (a method, a batch size, a local-epoch count) a colour, a line
style and a marker the first time it is asked, and the same ones every later time, so that a
method looks the same in every figure of a report. The line styles and markers differ between
neighbours in the palette, so two curves that lie on top of each other stay distinguishable
(a dashed line over a solid one, markers at different places), and :func:`coinciding` finds such
curves so that the legend can say so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["Styles", "coinciding", "legend_styles", "COLOURS"]

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

r"""The figure: measured average against Theorem 1's bound, and their ratio, over T (log-log).

Left: per tau, the measured :math:`\frac1T\sum_{t<T}\mathbb E\|\nabla f(w^t)\|^2` (solid, one
marker per T), :math:`\min_{t<T}` of the same expectation (dotted) and the bound (dashed), in the
tau's colour, with a :math:`1/\sqrt T` guide (grey) through the first measured point. Right: the
measured average over the bound (linear axis; 1, the bound, in grey).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..styles import TITLE_FONTSIZE, Styles, log_axis, pyplot, save, shared_legend

__all__ = ["FIGURE", "plot"]

#: the figure's file name in the output folder
FIGURE = "fedbuff_bound.png"


def plot(rows: Sequence[dict], out: Path) -> Any:
    """Write :data:`FIGURE` into ``out``; returns the (closed) figure."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4), layout="constrained")
    taus = list(dict.fromkeys(r["tau"] for r in rows))
    styles = Styles([f"tau={tau}" for tau in taus])
    for tau in taus:
        mine = [r for r in rows if r["tau"] == tau]
        Ts = np.array([r["T"] for r in mine], dtype=float)
        look = styles.of(f"tau={tau}")
        colour = look["color"]
        average = [r["average"] for r in mine]
        left.plot(Ts, average, color=colour, marker=look["marker"], label=f"tau={tau}: measured")
        left.plot(Ts, [r["minimum"] for r in mine], color=colour, linestyle=":", linewidth=1)
        left.plot(Ts, [r["bound"] for r in mine], color=colour, linestyle="--")
        ratio = [r["average"] / r["bound"] for r in mine]
        right.plot(Ts, ratio, color=colour, marker=look["marker"], label=f"tau={tau}: measured")
    first = rows[0]
    guide = np.array(sorted({r["T"] for r in rows}), dtype=float)
    left.plot(guide, first["average"] * np.sqrt(first["T"] / guide), color="grey", linewidth=0.8)
    left.set_title(
        "measured (solid), min over t (dotted), Theorem 1 (dashed); grey: 1/sqrt(T)",
        fontsize=TITLE_FONTSIZE,
    )
    left.set_xlabel("T (server steps)")
    left.set_ylabel("mean squared gradient norm")
    right.axhline(1.0, color="grey", linewidth=0.8)
    right.set_ylim(0.0, 1.1 * max(1.0, *(r["average"] / r["bound"] for r in rows)))
    right.set_title("measured average / bound (grey: the bound)", fontsize=TITLE_FONTSIZE)
    right.set_xlabel("T (server steps)")
    log_axis(left, "x")
    log_axis(left, "y")
    log_axis(right, "x")
    shared_legend(fig, [left, right])
    return save(fig, Path(out) / FIGURE)

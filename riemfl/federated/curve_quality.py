r"""How good is a learned curve? The manifold-quality diagnostic Q and loss-along-path plots.

Licudi 2025 (TR), Sec. 4, measures a learned connection by the ratio of the mean loss along the
straight line between two models to the mean loss along the learned curve between the same end
points:

.. math::  Q = \frac{\frac{1}{|S|}\sum_{s \in S} L((1-s)\,\Theta_a + s\,\Theta_b)}
                {\frac{1}{|S|}\sum_{s \in S} L(\iota_\phi(s))},

on a uniform grid S of [0, 1] (uniform in the curve parameter, as both Licudi papers sample it,
not in arc length). Q > 1 means the curve runs through lower loss than the line (the technical
report finds Q about 1.0275 on FEMNIST test loss, Sec. 4; Q is its Assumption 6).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import integer
from ..errors import ParameterError
from ..manifolds.bezier import BezierCurve

__all__ = ["path_losses", "manifold_quality", "plot_loss_along_path"]


def path_losses(
    loss: Callable[[Any], float], control_points: Any, n_points: int = 21
) -> dict[str, np.ndarray]:
    """Losses along the learned curve and along the straight line between its end points.

    Parameters
    ----------
    loss : callable
        ``loss(x) -> float`` for a model x (e.g. ``lambda x: trainer.evaluate(x)["loss"]``).
    control_points : array, shape (degree + 1, *point_shape)
        The learned curve (Euclidean).
    n_points : int
        Grid size on [0, 1] (>= 2).

    Returns
    -------
    dict
        ``s`` (the grid), ``curve`` and ``line`` (the losses).
    """
    n_points = integer(n_points, "path_losses: n_points", minimum=2)
    cp = np.asarray(control_points, dtype=np.float64)
    curve = BezierCurve(cp)
    s = np.linspace(0.0, 1.0, int(n_points))
    on_curve = np.array([float(loss(curve(float(t)))) for t in s])
    on_line = np.array([float(loss((1 - t) * cp[0] + t * cp[-1])) for t in s])
    if not (np.isfinite(on_curve).all() and np.isfinite(on_line).all()):
        raise ParameterError("path_losses: the loss is not finite somewhere on the path")
    return {"s": s, "curve": on_curve, "line": on_line}


def manifold_quality(
    loss: Callable[[Any], float], control_points: Any, n_points: int = 21
) -> float:
    """Q: mean loss on the straight line over mean loss on the learned curve (module docstring)."""
    losses = path_losses(loss, control_points, n_points)
    mean_curve = float(losses["curve"].mean())
    if mean_curve <= 0:
        raise ParameterError("manifold_quality needs a positive loss along the curve")
    return float(losses["line"].mean()) / mean_curve


def plot_loss_along_path(
    losses: dict[str, np.ndarray],
    path: str | Path | None = None,
    *,
    title: str = "loss along the path",
):
    """Plot :func:`path_losses`' curve and line losses against s (PNG when ``path`` is given)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.8, 3.4))
    ax.plot(losses["s"], losses["line"], "--", label="straight line")
    ax.plot(losses["s"], losses["curve"], label="learned curve")
    ax.set_xlabel("s")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
        plt.close(fig)
    return fig

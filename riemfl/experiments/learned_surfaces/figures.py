r"""The three figures: the toy surface (Fig. 2's counterpart), the plane of a learned curve (Fig.
1's counterpart) and the digits comparison.

* ``surface.png``: left, the learned triangle in :math:`\mathbb R^3` coloured by the toy loss, the
  flat triangle it started from (grey outline), the chord (red, dashed) through the obstruction
  (the bump's 1-sigma circle on the valley, red), the server's paths (edge: black; geodesic:
  orange, dotted) and their step points; right, the latent triangle (global model at (0, 0), local
  model :math:`\omega` at (1, 0), third vertex at the top) coloured by the same loss pulled back
  through :math:`\iota_\phi`, with the latent paths and step points.
* ``landscape.png``: the client's training loss and the pooled test loss on the plane of A (global),
  C (local) and B (control point) in the simplex coordinates (:mod:`.plane`), the simplex outline,
  the learned curve and the chord.
* ``comparison.png``: mean test accuracy against server steps (band: +/- one seed std) and the
  final accuracy of every seed, per method.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...federated.async_manifold.triangle import polyline, triangle_bernstein
from ..styles import TITLE_FONTSIZE, Styles, legend, pyplot, save
from .plane import VERTICES
from .toy import BUMP, CURVATURE, WIDTH, latent_grid, loss

__all__ = ["COMPARISON", "LANDSCAPE", "SURFACE", "plot_comparison", "plot_landscape", "plot_toy"]

#: the figures' file names in the output folder
SURFACE, LANDSCAPE, COMPARISON = "surface.png", "landscape.png", "comparison.png"


def _drawing(x: np.ndarray) -> np.ndarray:
    """Barycentric (u, v, w) -> the drawing's (X, Y): start (0, 0), omega (1, 0), apex on top."""
    return x @ VERTICES


def plot_toy(toy: dict[str, Any], out: Path) -> Any:
    """Write :data:`SURFACE` into ``out``; returns the (closed) figure."""
    from matplotlib import colors
    from matplotlib.tri import Triangulation
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    plt = pyplot()
    fig = plt.figure(figsize=(12, 5.2), layout="constrained")
    ax3 = fig.add_subplot(1, 2, 1, projection="3d")
    ax2 = fig.add_subplot(1, 2, 2)
    phi = toy["learned"]
    latent = latent_grid(24)
    tri = Triangulation(*_drawing(latent).T)
    points = triangle_bernstein(latent) @ phi
    values = loss(points)
    norm = colors.Normalize(0.0, max(float(values.max()), 1e-12))
    faces = points[tri.triangles]
    surf = Poly3DCollection(
        faces,
        facecolors=plt.cm.viridis(norm(values[tri.triangles].mean(axis=1))),
        edgecolors="none",
        alpha=0.85,
    )
    ax3.add_collection3d(surf)
    start = toy["initial"][[0, 2, 5, 0]]
    ax3.plot(*start.T, color="grey", linestyle="--", linewidth=0.8, label="flat start")
    ax3.plot(*toy["chord"].T, color="tab:red", linestyle="--", label="chord")
    angle = np.linspace(0.0, 2 * math.pi, 60)
    cx, cy = BUMP[0] + WIDTH * np.cos(angle), BUMP[1] + WIDTH * np.sin(angle)
    ax3.plot(
        cx, cy, CURVATURE * (cx * cx + cy * cy), color="tab:red", linewidth=1.0, label="obstruction"
    )
    looks = {"segment": ("black", "-"), "geodesic": ("tab:orange", ":")}
    for name, path in toy["paths"].items():
        colour, style = looks[name]
        ax3.plot(*path["points"].T, color=colour, linestyle=style, label=f"server path: {name}")
        ax3.scatter(*path["step"], color=colour, s=25)
        ax2.plot(*_drawing(path["nodes"]).T, color=colour, linestyle=style, marker=".")
        ax2.scatter(*_drawing(polyline(path["nodes"], path["r"])), color=colour, s=40, zorder=3)
    for p, word in zip(phi[[0, 2, 5]], ("global", "local", "third"), strict=True):
        ax3.text(*p, f" {word}", fontsize=8)
    shown = np.vstack([points, toy["initial"]])
    low, high = shown.min(axis=0), shown.max(axis=0)
    ax3.set(xlim=(low[0], high[0]), ylim=(min(low[1], -0.7), high[1]), zlim=(0.0, high[2]))
    ax3.set_xlabel("x")
    ax3.set_ylabel("y")
    ax3.set_zlabel("z")
    ax3.set_title("learned Bezier triangle in R^3 (colour: loss)", fontsize=TITLE_FONTSIZE)
    legend(ax3, loc="upper left")
    image = ax2.tricontourf(tri, values, levels=20, cmap="viridis", norm=norm)
    ax2.triplot(Triangulation(*VERTICES.T), color="black", linewidth=0.8)
    for x, word in zip(VERTICES, ("start (global)", "omega (local)", "third vertex"), strict=True):
        ax2.annotate(word, x, textcoords="offset points", xytext=(-20, -14 if x[1] == 0 else 4))
    ax2.set_aspect("equal")
    ax2.set_axis_off()
    ax2.set_title(
        "latent triangle M, loss pulled back\n(black: edge path, orange: geodesic, dots: steps)",
        fontsize=TITLE_FONTSIZE,
        pad=18,
    )
    fig.colorbar(image, ax=ax2, shrink=0.8, label="toy loss")
    return save(fig, Path(out) / SURFACE)


def plot_landscape(plane: dict[str, Any], out: Path) -> Any:
    """Write :data:`LANDSCAPE` into ``out``; returns the (closed) figure."""
    from matplotlib import colors

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2), layout="constrained")
    outline = VERTICES[[0, 1, 2, 0]]
    for ax, key, title in (
        (axes[0], "client_loss", f"client {plane['client']}'s training loss"),
        (axes[1], "test_loss", "pooled test loss"),
    ):
        grid = plane[key]
        low, high = float(grid.min()), float(grid.max())
        norm = colors.LogNorm(low, high) if low > 0 and high > 1.01 * low else None
        levels = np.geomspace(low, high, 25) if norm is not None else 25
        image = ax.contourf(plane["X"], plane["Y"], grid, levels=levels, norm=norm, cmap="magma")
        ax.contour(plane["X"], plane["Y"], grid, levels=levels, colors="white", linewidths=0.3)
        ax.plot(*outline.T, color="white", linewidth=0.8)
        ax.plot(*plane["curve_xy"].T, color="tab:cyan", linewidth=2, label="learned curve")
        ax.plot([0, 1], [0, 0], color="tab:green", linestyle="--", linewidth=1.5, label="chord")
        for x, word in zip(VERTICES, ("A (global)", "C (local)", "B (control)"), strict=True):
            ax.scatter(*x, color="white", edgecolor="black", zorder=3)
            ax.annotate(word, x, color="white", textcoords="offset points", xytext=(4, 4))
        ax.set_aspect("equal")
        q = plane["Q_client"] if key == "client_loss" else plane["Q_test"]
        ax.set_title(f"{title} (Q = {q:.4f})", fontsize=TITLE_FONTSIZE)
        ax.set_xlabel("simplex coordinate X")
        ax.set_ylabel("simplex coordinate Y")
        fig.colorbar(image, ax=ax, shrink=0.8, format="%.3g")
    legend(axes[0], loc="upper right")
    return save(fig, Path(out) / LANDSCAPE)


def plot_comparison(rows: Sequence[dict[str, Any]], methods: Sequence[str], out: Path) -> Any:
    """Write :data:`COMPARISON` into ``out``; returns the (closed) figure."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), layout="constrained")
    styles = Styles(methods)
    for j, method in enumerate(methods):
        mine = [r for r in rows if r["method"] == method]
        if not mine:
            continue
        look = styles.of(method)
        steps = np.asarray(mine[0]["curve"]["step"], dtype=float)
        acc = 100 * np.array([r["curve"]["accuracy"] for r in mine])
        mean, std = acc.mean(axis=0), acc.std(axis=0)
        left.plot(steps, mean, **look)
        left.fill_between(steps, mean - std, mean + std, color=look["color"], alpha=0.15)
        finals = 100 * np.array([r["accuracy"] for r in mine])
        right.scatter(np.full(finals.size, j), finals, color=look["color"], marker=look["marker"])
        right.errorbar(j + 0.15, finals.mean(), yerr=finals.std(), color=look["color"], capsize=4)
    left.set_xlabel("server step")
    left.set_ylabel("test accuracy (%)")
    left.set_title("mean over seeds (band: +/- one std)", fontsize=TITLE_FONTSIZE)
    legend(left, loc="lower right")
    right.set_xticks(range(len(methods)), [m.replace("-", "-\n") for m in methods], fontsize=8)
    right.set_ylabel("final test accuracy (%)")
    right.set_title("every seed (bar: mean +/- std)", fontsize=TITLE_FONTSIZE)
    return save(fig, Path(out) / COMPARISON)

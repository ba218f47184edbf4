"""Draw docs/figures/learned_curve.png: a quadratic Bezier curve learned between two minima.

The loss surface has two minima joined by a curved low-loss valley and separated by a ridge on
the straight segment. The end points are fixed and the middle control point is trained with Adam
on the expected loss along the curve, t drawn uniformly per step (the curve-learning step of
mode connectivity and of AsyncBezier's clients), using riemfl's differentiable ``BezierCurve``.

Run: ``python docs/learned_curve.py`` (a few seconds; needs torch and matplotlib).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from riemfl.manifolds.bezier import BezierCurve

OUT = Path(__file__).resolve().parent / "figures" / "learned_curve.png"
START = (-1.0, 0.0)
END = (1.0, 0.0)


def loss(p):
    """A ring-shaped valley |p| = 1, slightly deeper above the x axis; works on (..., 2)."""
    x, y = p[..., 0], p[..., 1]
    lib = torch if isinstance(p, torch.Tensor) else np
    return (x**2 + y**2 - 1.0) ** 2 - 0.1 * y * lib.exp(-(x**2))


def learn(steps: int = 400, batch: int = 32, lr: float = 0.05, seed: int = 0):
    """Train the middle control point; returns (control points, loss history)."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.tensor(START, dtype=torch.float64)
    c = torch.tensor(END, dtype=torch.float64)
    middle = torch.tensor([0.0, 0.05], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([middle], lr=lr)
    history = []
    for _ in range(steps):
        curve = BezierCurve(torch.stack([a, middle, c]))
        t = torch.rand(batch, generator=gen, dtype=torch.float64)
        value = loss(curve(t)).mean()
        opt.zero_grad()
        value.backward()
        opt.step()
        history.append(float(value.detach()))
    return torch.stack([a, middle.detach(), c]).numpy(), history


def max_loss_along(control_points: np.ndarray) -> float:
    ts = np.linspace(0.0, 1.0, 401)
    return float(loss(np.asarray(BezierCurve(control_points)(ts))).max())


def draw(control_points: np.ndarray, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs, ys = np.meshgrid(np.linspace(-1.6, 1.6, 300), np.linspace(-1.2, 2.4, 300))
    zs = loss(np.stack([xs, ys], axis=-1))
    straight = np.array([START, [0.0, 0.0], END])
    ts = np.linspace(0.0, 1.0, 200)
    fig, ax = plt.subplots(figsize=(6.4, 5.0), dpi=120)
    contours = ax.contourf(xs, ys, np.log1p(zs - zs.min()), levels=30, cmap="viridis")
    fig.colorbar(contours, ax=ax, label="log(1 + loss - min loss)")
    line = np.asarray(BezierCurve(straight)(ts))
    learned = np.asarray(BezierCurve(control_points)(ts))
    ax.plot(
        line[:, 0],
        line[:, 1],
        "w--",
        lw=2,
        label=f"straight segment (max loss {max_loss_along(straight):.2f})",
    )
    ax.plot(
        learned[:, 0],
        learned[:, 1],
        "r-",
        lw=2.5,
        label=f"learned quadratic (max loss {max_loss_along(control_points):.2f})",
    )
    ax.plot(
        control_points[:, 0], control_points[:, 1], "o:", color="orange", label="control points"
    )
    ax.set_title("A quadratic Bezier curve learned between two minima")
    ax.set_aspect("equal")
    ax.legend(loc="lower center", fontsize=8)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    control_points, history = learn(steps=args.steps)
    draw(control_points, args.out)
    print(f"middle control point {control_points[1]}, final expected loss {history[-1]:.4f}")
    print(
        f"max loss: straight {max_loss_along(np.array([START, [0, 0], END])):.3f}, "
        f"learned {max_loss_along(control_points):.3f}; wrote {args.out}"
    )
    return args.out


if __name__ == "__main__":
    main()

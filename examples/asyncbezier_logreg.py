"""Asynchronous federated softmax regression: straight-line rules against learned curves.

Ten clients hold Dirichlet(0.5) shares of scikit-learn's digits (``logreg-digits``: multinomial
logistic regression on R^(65 x 10), a Euclidean problem). The asynchronous simulator runs them
with three workers and exponential client times, and four server rules on the same timeline:

* FedAsync and FedBuff: the server moves along the straight line to each (stale) local model;
* AsyncBezier and AsyncBezierED (Licudi et al. 2025): each client learns a quadratic Bezier
  curve from the model it received to its local model, and the server moves along the
  corrected curve (``BezierProblemTrainer`` clients: K1 steps on the end point, then K - K1
  steps of curve learning).

Printed: for each rule, the optimality gap f - f* and the pooled accuracy of the final model,
the mean staleness of the updates, and the client updates and virtual time the server steps
took (FedBuff applies K updates per step); written: ``asyncbezier_logreg.png`` (gap against server
steps and against virtual time).

Usage::

    python examples/asyncbezier_logreg.py [--steps 200] [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from riemfl.federated import (
    AsyncBezier,
    AsyncBezierED,
    BezierProblemTrainer,
    ExponentialTime,
    FedAsync,
    FedBuff,
    ProblemTrainer,
    RunOptions,
    run_async,
)
from riemfl.problems import SoftmaxRegressionProblem


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--steps", type=int, default=200, help="server steps per rule")
    cli.add_argument("--out", default=".", help="folder of the plot")
    opts = cli.parse_args(argv)

    problem = SoftmaxRegressionProblem.digits(10, seed=0)
    step = 1.0 / problem.smoothness  # eta = 1/beta
    point = ProblemTrainer(problem, step, 4)
    curve = BezierProblemTrainer(problem, step, warmup_steps=2, curve_steps=2)
    runs = {
        "FedAsync": (FedAsync(server_lr=1.0), point),
        "FedBuff (K = 3)": (FedBuff(3), point),
        "AsyncBezier": (AsyncBezier(problem.manifold), curve),
        "AsyncBezierED": (AsyncBezierED(problem.manifold), curve),
    }
    summary: dict[str, dict[str, float]] = {}
    histories = {}
    options = RunOptions(seed=0, record_every=max(opts.steps // 20, 1))
    for name, (rule, trainer) in runs.items():
        history = run_async(
            trainer, rule, opts.steps, workers=3, timing=ExponentialTime(1.0),
            x0=np.zeros(problem.manifold.point_shape), options=options,
        )  # fmt: skip
        histories[name] = history
        summary[name] = {
            "optimality_gap": history.metrics["optimality_gap"][-1],
            "accuracy": problem.accuracy(history.final_point),
            "mean_staleness": history.staleness_stats()["mean"],
            "client_updates": history.metrics["updates"][-1],
            "virtual_time": history.metrics["time"][-1],
        }
        s = summary[name]
        print(
            f"{name:16s} f - f* {s['optimality_gap']:.3e}  accuracy {100 * s['accuracy']:.1f}%  "
            f"mean staleness {s['mean_staleness']:.2f}  ({s['client_updates']:.0f} client "
            f"updates, virtual time {s['virtual_time']:.0f})"
        )
    best = 100 * problem.accuracy(problem.solution)
    print(f"f* = {problem.optimum:.4f}, accuracy at the optimum {best:.1f}%")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for name, history in histories.items():
        for ax, x in zip(axes, ("step", "time"), strict=True):
            ax.semilogy(history.metrics[x], history.metrics["optimality_gap"], label=name)
            ax.set_xlabel("server step" if x == "step" else "virtual time")
    axes[0].set_ylabel("f - f*")
    axes[0].legend()
    path = Path(opts.out) / "asyncbezier_logreg.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")
    return summary


if __name__ == "__main__":
    main()

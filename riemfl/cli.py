"""The ``riemfl`` command (also ``python -m riemfl``).

Subcommands:

* ``riemfl run PROBLEM --algorithm ALG [--rounds R --local-steps T --step ETA ...]``: one
  federated run; writes ``DIR/history.json``, ``DIR/history.csv`` and ``DIR/history.png``;
* ``riemfl reproduce zhang2024 [--figure N] [--quick] [--data FILE]``: Figures 1-9 of Zhang et
  al. (NeurIPS 2024), a markdown report with the plots, one PASS/FAIL line per claim;
* ``riemfl manifolds [--json PATH]`` (also plain ``riemfl``): the manifolds riemfl ships, their
  constants, the maps they implement and a measured exp/log round trip.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ParameterError, RiemflError
from .federated.interrupt import RunInterrupted, handle_interrupts
from .manifolds import (
    Euclidean,
    FixedRank,
    Grassmann,
    Lorentz,
    Manifold,
    Product,
    Simplex,
    Sphere,
    Stiefel,
)

__all__ = ["main", "describe", "EXAMPLES"]

#: one representative instance per manifold family
EXAMPLES: tuple[Manifold, ...] = (
    Euclidean(5, 2),
    Sphere(10),
    Stiefel(20, 5),
    Stiefel(20, 5, retraction="qr"),
    Grassmann(20, 5),
    Lorentz(10),
    Product(Sphere(3), Stiefel(6, 2)),
    FixedRank(20, 10, 3),
    # points away from the boundary, so that the exp/log round trip (|u|_p = 0.5) stays inside
    Simplex(5, concentration=50),
)

_MAPS = ("project", "inverse_retract", "exp", "log", "parallel_transport")


def _constant(manifold: Manifold, name: str) -> float | None:
    try:
        return float(getattr(manifold, name))
    except NotImplementedError:
        return None


def describe(manifold: Manifold, seed: int = 0) -> dict:
    """Constants, capabilities and a measured round-trip error of one manifold."""
    rng = np.random.default_rng(seed)
    x = manifold.random_point(8, rng=rng)
    u = manifold.random_tangent(x, rng=rng)
    u = u * np.reshape(0.5 / np.maximum(manifold.norm(x, u), 1e-300), (8,) + (1,) * manifold.ndim)
    record = {
        "manifold": manifold.name,
        "dim": manifold.dim,
        "point_shape": list(manifold.point_shape),
        "proximal_smoothness": _constant(manifold, "proximal_smoothness"),
        "diameter": _constant(manifold, "diameter"),
        "injectivity_radius": _constant(manifold, "injectivity_radius"),
        "maps": {name: manifold.supports(name)[0] for name in _MAPS},
    }
    y = manifold.retract(x, u)
    record["retraction_constraint_error"] = manifold._point_violation(y)[1]
    if record["maps"]["exp"] and record["maps"]["log"]:
        err = np.max(np.abs(manifold.log(x, manifold.exp(x, u)) - u))
        record["exp_log_roundtrip_error"] = float(err)
    return record


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:.4g}"


def _manifolds(args: argparse.Namespace) -> int:
    rows = [describe(m, seed=args.seed) for m in EXAMPLES]
    header = (
        f"{'manifold':<34} {'dim':>5} {'reach':>7} {'diam':>7} {'inj':>7}  "
        f"{'maps (P inv exp log PT)':<24} {'|log(exp u)-u|':>15}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        maps = " ".join("y" if r["maps"][k] else "-" for k in _MAPS)
        roundtrip = r.get("exp_log_roundtrip_error")
        print(
            f"{r['manifold']:<34} {r['dim']:>5} {_fmt(r['proximal_smoothness']):>7} "
            f"{_fmt(r['diameter']):>7} {_fmt(r['injectivity_radius']):>7}  {maps:<24} "
            f"{_fmt(roundtrip):>15}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)
        print(f"wrote {args.json}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from .experiments.registry import (
        ALGORITHM_NAMES,
        ASYNC_RULE_NAMES,
        PROBLEMS,
        build_algorithm,
        build_problem,
    )
    from .federated import run_sync

    problem = build_problem(
        args.problem, clients=args.clients, k=args.k, seed=args.seed, data=args.data
    )
    step = args.step if args.step is not None else PROBLEMS[args.problem].default_step(problem)
    sync = args.algorithm in ALGORITHM_NAMES
    if (args.engine == "sync") != sync:
        names = ALGORITHM_NAMES if args.engine == "sync" else ASYNC_RULE_NAMES
        raise ParameterError(
            f"--engine {args.engine} runs the algorithms {', '.join(names)}; got {args.algorithm}"
        )
    if not sync:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        return _run_async(args, problem, step, out)
    algorithm = build_algorithm(
        args.algorithm,
        step_size=step,
        local_steps=args.local_steps,
        global_step_size=args.global_step,
        mu=args.mu,
        operators=args.operators,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    history = run_sync(
        problem,
        algorithm,
        args.rounds,
        seed=args.seed,
        clients_per_round=args.clients_per_round,
        batch_size=args.batch_size,
        **_checkpointing(args, out),
        progress=not args.no_progress,
        grad_tol=args.grad_tol,
    )
    history.config["command"] = "riemfl " + " ".join(sys.argv[1:])
    history.to_json(out / "history.json")
    history.to_csv(out / "history.csv")
    y = ("grad_norm", "optimality_gap") if problem.optimum is not None else ("grad_norm", "loss")
    history.plot(out / "history.png", y=y)
    print(
        f"{algorithm.name} on {problem.name}: {history.round[-1]} rounds, "
        f"|grad f| {history.grad_norm[0]:.3e} -> {history.grad_norm[-1]:.3e}, "
        f"f - f* {history.optimality_gap[-1]:.3e}, uplink {history.uplink_matrices[-1]:.0f} "
        f"matrices/client, CPU {history.cpu_time[-1]:.2f} s; wrote {out}/history.json, "
        "history.csv, history.png"
    )
    return 0


#: The checkpoint file of ``riemfl run`` inside its output folder.
CHECKPOINT_NAME = "checkpoint.rfl"


def _checkpointing(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The engines' checkpoint arguments: ``out/checkpoint.rfl`` every ``--checkpoint-every``
    steps, at the end and when interrupted (``--checkpoint-every 0``: no checkpoint file)."""
    if args.checkpoint_every == 0:
        return {"checkpoint": None}
    return {"checkpoint": out / CHECKPOINT_NAME, "checkpoint_every": args.checkpoint_every}


def _run_async(args: argparse.Namespace, problem, step: float, out: Path) -> int:
    from .experiments.registry import CURVE_RULE_NAMES, build_async_rule
    from .federated import (
        BezierProblemTrainer,
        ExponentialTime,
        LogNormalTime,
        ProblemTrainer,
        ProportionalTime,
        run_async,
    )

    timing = {
        "proportional": ProportionalTime(),
        "exponential": ExponentialTime(1.0),
        "lognormal": LogNormalTime(1.0, 0.8),
    }[args.timing]
    rule = build_async_rule(
        args.algorithm,
        server_lr=args.server_lr,
        buffer_size=args.buffer_size,
        operators=args.operators,
        staleness=args.staleness,
        manifold=problem.manifold,
        vartheta=1.0 if args.vartheta is None else args.vartheta,
    )
    curve = args.algorithm in CURVE_RULE_NAMES
    curve_only = (args.warmup_steps, args.curve_steps, args.vartheta)
    if not curve and any(v is not None for v in curve_only):
        raise ParameterError(
            f"--warmup-steps, --curve-steps and --vartheta set the curve rules {CURVE_RULE_NAMES}; "
            f"{args.algorithm} trains a point (--local-steps)"
        )
    if curve:
        trainer = BezierProblemTrainer(
            problem,
            step,
            args.local_steps if args.warmup_steps is None else args.warmup_steps,
            args.local_steps if args.curve_steps is None else args.curve_steps,
            batch_size=args.batch_size,
        )
    else:
        trainer = ProblemTrainer(problem, step, args.local_steps, args.batch_size)
    history = run_async(
        trainer,
        rule,
        args.rounds,
        workers=args.workers,
        timing=timing,
        seed=args.seed,
        scheduler=args.scheduler,
        max_staleness=args.max_staleness,
        staleness_policy=args.staleness_policy,
        eval_every=args.eval_every,
        progress=not args.no_progress,
        **_checkpointing(args, out),
    )
    history.config["problem"] = problem.describe()
    history.config["command"] = "riemfl " + " ".join(sys.argv[1:])
    history.to_json(out / "history.json")
    history.to_csv(out / "history.csv")
    history.plot(out / "history.png", y=("grad_norm", "optimality_gap"))
    g = history.metrics["grad_norm"]
    stats = history.staleness_stats()
    print(
        f"{rule.name} (async) on {problem.name}: {int(history.metrics['step'][-1])} server steps, "
        f"{len(history.log['client'])} client updates, |grad f| {g[0]:.3e} -> {g[-1]:.3e}, "
        f"staleness mean {stats['mean']:.2f} max {stats['max']:.0f}; wrote {out}/history.json, "
        "history.csv, history.png"
    )
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    if args.paper == "floral":
        from .experiments import floral

        out = args.out or ("results/floral-quick" if args.quick else "results/floral")
        table = floral.reproduce(
            out, quick=args.quick, data=args.data, progress=not args.no_progress
        )
        print(table)
        print(f"report: {out}/report.md")
        return 0
    if args.paper in ("licudi2025", "licudi2025-baselines"):
        from .experiments import licudi2025

        out = args.out or f"results/{args.paper}" + ("-quick" if args.quick else "")
        settings = (
            licudi2025.Settings.baselines(args.quick)
            if args.paper == "licudi2025-baselines"
            else (licudi2025.Settings.quick() if args.quick else licudi2025.Settings())
        )
        settings.dataset, settings.data, settings.device = args.dataset, args.data, args.device
        print(licudi2025.reproduce(out, settings=settings, progress=not args.no_progress))
        print(f"report: {out}/report.md")
        return 0
    from .experiments import zhang2024

    out = args.out or ("results/zhang2024-quick" if args.quick else "results/zhang2024")
    claims = zhang2024.reproduce(
        out, figure=args.figure, quick=args.quick, data=args.data, progress=not args.no_progress
    )
    for line in zhang2024.claim_lines(claims):
        print(line)
    passed = sum(c.passed is True for c in claims)
    checked = sum(c.passed is not None for c in claims)
    print(f"{passed}/{checked} claims pass; report: {out}/report.md")
    return 0


def _kernels() -> int:
    """Build (or load from the cache) the compiled FLoRAL layer; 0 if FLoRAL models use it."""
    from .nn.floral import kernels

    module = kernels.load()
    if module is None:
        why = kernels.build_failure() or f"{kernels.KERNEL_ENV}=off"
        print(f"compiled FLoRAL layer: not used ({why}); FLoRAL models run the torch path")
        return 1
    print(f"compiled FLoRAL layer: loaded from {module.__file__}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``riemfl`` command."""
    from .experiments.registry import ALGORITHM_NAMES, ASYNC_RULE_NAMES, PROBLEMS

    parser = argparse.ArgumentParser(prog="riemfl", description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH", help="(manifolds) also write the table as JSON")
    parser.add_argument("--seed", type=int, default=0)
    sub = parser.add_subparsers(dest="command")

    m = sub.add_parser("manifolds", help="the manifolds riemfl ships and a self-check")
    m.add_argument("--json", metavar="PATH", help="also write the table as JSON")
    m.add_argument("--seed", type=int, default=0)

    sub.add_parser(
        "kernels",
        help="build the compiled FLoRAL layer now (else it is built on first use) and report",
    )

    r = sub.add_parser("run", help="one federated run on a named problem")
    r.add_argument("problem", choices=sorted(PROBLEMS))
    r.add_argument("--algorithm", required=True, choices=ALGORITHM_NAMES + ASYNC_RULE_NAMES)
    r.add_argument("--engine", choices=("sync", "async"), default="sync")
    r.add_argument(
        "--rounds", type=int, default=200, help="communication rounds R (async: server steps)"
    )
    r.add_argument("--local-steps", type=int, default=10, help="tau")
    r.add_argument("--step", type=float, default=None, help="eta (default: the paper's)")
    r.add_argument("--global-step", type=float, default=1.0, help="eta_g (RFedProj)")
    r.add_argument("--mu", type=float, default=1.0, help="proximal weight (RFedProx)")
    r.add_argument("--operators", choices=("approximate", "exact"), default="approximate")
    r.add_argument("--clients", type=int, default=None, help="number of clients n")
    r.add_argument("--clients-per-round", type=int, default=None)
    r.add_argument("--batch-size", type=int, default=None, help="mini-batch size b")
    r.add_argument("-k", type=int, default=None, help="number of components (Stiefel k)")
    r.add_argument("--data", default=None, help="MNIST idx/npz file (kpca-mnist)")
    r.add_argument("--grad-tol", type=float, default=None, help="stop at |grad f| <= this")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", default="results/run", help="output directory")
    r.add_argument(
        "--checkpoint-every", type=int, default=10,
        help=f"write DIR/{CHECKPOINT_NAME} every k rounds or server steps, at the end and when "
        "interrupted (0: never); the same command resumes from it",
    )  # fmt: skip
    r.add_argument("--no-progress", action="store_true")
    a = r.add_argument_group("asynchronous engine (--engine async)")
    a.add_argument("--workers", type=int, default=None, help="clients training at once")
    a.add_argument(
        "--timing", choices=("proportional", "exponential", "lognormal"), default="exponential"
    )
    a.add_argument("--scheduler", choices=("fifo", "paper"), default="fifo")
    a.add_argument("--server-lr", type=float, default=None, help="eta_g (FedBuff: beta)")
    a.add_argument("--buffer-size", type=int, default=10, help="FedBuff's K")
    a.add_argument("--staleness", choices=("constant", "polynomial", "hinge"), default="constant")
    a.add_argument("--max-staleness", type=int, default=None, help="the staleness bound tau")
    a.add_argument(
        "--staleness-policy", choices=("drop", "block"), default="drop",
        help="enforce --max-staleness by dropping staler updates or by making fast clients wait",
    )  # fmt: skip
    a.add_argument("--eval-every", type=int, default=10, help="metrics every k server steps")
    a.add_argument(
        "--warmup-steps", type=int, default=None,
        help="curve rules (asyncbezier, asyncbezier-ed): K1 steps on the end point "
        "(default: --local-steps)",
    )  # fmt: skip
    a.add_argument(
        "--curve-steps", type=int, default=None,
        help="curve rules: K - K1 steps of curve learning (default: --local-steps)",
    )  # fmt: skip
    a.add_argument(
        "--vartheta", type=float, default=None, help="curve rules: OrthoDC strength (default 1)"
    )

    p = sub.add_parser("reproduce", help="reproduce a paper's figures and check its claims")
    p.add_argument("paper", choices=("zhang2024", "licudi2025", "licudi2025-baselines", "floral"))
    p.add_argument("--figure", type=int, action="append", help="figure number (repeatable)")
    p.add_argument("--quick", action="store_true", help="shortened runs (under 3 minutes)")
    p.add_argument(
        "--data", default=None,
        help="zhang2024: MNIST idx/npz file; licudi2025: LEAF data directory (train/, test/)",
    )  # fmt: skip
    p.add_argument(
        "--dataset", choices=("digits", "femnist", "shakespeare"), default="digits",
        help="licudi2025: the offline stand-in, or LEAF's files given by --data",
    )  # fmt: skip
    p.add_argument("--device", default="cpu", help="licudi2025: torch device (e.g. cuda)")
    p.add_argument("--out", default=None, help="output directory")
    p.add_argument("--no-progress", action="store_true")
    return parser


#: The exit status of a run stopped by SIGINT or SIGTERM (128 + SIGINT, the shells' convention).
EXIT_INTERRUPTED = 130


def _command_line(argv: Sequence[str] | None) -> str:
    words = sys.argv[1:] if argv is None else list(argv)
    return "riemfl " + " ".join(shlex.quote(w) for w in words)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with handle_interrupts():
            if args.command == "run":
                return _run(args)
            if args.command == "reproduce":
                return _reproduce(args)
            if args.command == "kernels":
                return _kernels()
            return _manifolds(args)
    except RunInterrupted as exc:
        where = f"checkpoint saved to {exc.checkpoint}" if exc.checkpoint else "no checkpoint"
        print(
            f"riemfl: interrupted after step {exc.step} ({where}); to resume, run the same "
            f"command again: {_command_line(argv)}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print(
            "riemfl: interrupted at once (second signal); the last checkpoint written, if any, "
            f"is intact: run the same command again to resume: {_command_line(argv)}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except RiemflError as exc:
        print(f"riemfl: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The ``riemfl`` command (also ``python -m riemfl``).

Subcommands:

* ``riemfl run PROBLEM --algorithm ALG [--rounds R --local-steps T --step ETA ...]``: one
  federated run; writes ``DIR/history.json``, ``DIR/history.csv`` and ``DIR/history.png``;
  a non-empty ``--out`` is resumed when it holds this run's checkpoint, else refused unless
  ``--overwrite`` (``docs/federated/engine.md``, "The output folder");
* ``riemfl reproduce zhang2024 [--figure N] [--quick] [--data FILE] [--strict]``: Figures 1-9
  of Zhang et al. (NeurIPS 2024), a markdown report with the plots, one PASS/FAIL line per
  claim (``--strict``: exit status 1 when one FAILs);
* ``riemfl manifolds [--json PATH]`` (also plain ``riemfl``): the manifolds riemfl ships, their
  constants, the maps they implement and a measured exp/log round trip.

Every user error is one line on stderr (``riemfl: error: ...``) and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .errors import CheckpointMismatchError, DataError, ParameterError, RiemflError
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


#: What ``riemfl run`` writes in its output folder besides the checkpoint.
RUN_FILES = ("history.json", "history.csv", "history.png")

#: The checkpoint file of ``riemfl run`` inside its output folder.
CHECKPOINT_NAME = "checkpoint.rfl"

#: Options of the asynchronous engine and their defaults (``None`` in the parser, so that an
#: option given with ``--engine sync`` is refused rather than ignored).
ASYNC_DEFAULTS: dict[str, Any] = {
    "workers": None,
    "timing": "exponential",
    "scheduler": "fifo",
    "server_lr": None,
    "buffer_size": 10,
    "staleness": "constant",
    "max_staleness": None,
    "staleness_policy": "drop",
    "eval_every": 10,
    "warmup_steps": None,
    "curve_steps": None,
    "vartheta": None,
}
#: Options of the synchronous engine only, and the algorithms each one applies to (None: all).
SYNC_ONLY: dict[str, tuple[str, ...] | None] = {
    "clients_per_round": None,
    "grad_tol": None,
    "global_step": ("rfedproj",),
    "mu": ("rfedprox",),
}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _check_applicable(args: argparse.Namespace) -> None:
    """Refuse options that the chosen engine or algorithm would ignore.

    Raises
    ------
    ParameterError
        When an asynchronous option is given with ``--engine sync``, or a synchronous one with
        ``--engine async`` or with an algorithm that does not use it.
    """
    other = "async" if args.engine == "sync" else "sync"
    foreign = ASYNC_DEFAULTS if args.engine == "sync" else SYNC_ONLY
    given = [_flag(d) for d in foreign if getattr(args, d) is not None]
    if given:
        kind = "asynchronous" if other == "async" else "synchronous"
        raise ParameterError(
            f"{', '.join(given)}: options of the {kind} engine; expected them only with "
            f"--engine {other}, got them with --engine {args.engine} (--algorithm {args.algorithm})"
        )
    if args.engine == "sync":
        for dest, algorithms in SYNC_ONLY.items():
            if getattr(args, dest) is not None and algorithms and args.algorithm not in algorithms:
                raise ParameterError(
                    f"{_flag(dest)}: used by --algorithm {' or '.join(algorithms)} only; "
                    f"got it with --algorithm {args.algorithm}"
                )
        return
    for dest, default in ASYNC_DEFAULTS.items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)


def _build_problem(args: argparse.Namespace) -> Any:
    """The problem of ``riemfl run``; a data error names ``--data`` and the file."""
    from .experiments.registry import build_problem

    try:
        return build_problem(
            args.problem, clients=args.clients, k=args.k, seed=args.seed, data=args.data
        )
    except DataError as exc:
        if args.data is None:
            raise
        raise DataError(f"--data {args.data}: {exc}") from None


def _run(args: argparse.Namespace) -> int:
    from .experiments.registry import (
        ALGORITHM_NAMES,
        ASYNC_RULE_NAMES,
        PROBLEMS,
        build_algorithm,
    )
    from .federated import run_sync

    sync = args.algorithm in ALGORITHM_NAMES
    if (args.engine == "sync") != sync:
        names = ALGORITHM_NAMES if args.engine == "sync" else ASYNC_RULE_NAMES
        raise ParameterError(
            f"--engine {args.engine} runs the algorithms {', '.join(names)}; got {args.algorithm}"
        )
    _check_applicable(args)
    problem = _build_problem(args)
    step = args.step if args.step is not None else PROBLEMS[args.problem].default_step(problem)
    if not sync:
        trainer, rule, timing = _async_parts(args, problem, step)
        with _output_folder(args) as out:
            return _run_async(args, problem, trainer, rule, timing, out)
    algorithm = build_algorithm(
        args.algorithm,
        step_size=step,
        local_steps=args.local_steps,
        global_step_size=1.0 if args.global_step is None else args.global_step,
        mu=1.0 if args.mu is None else args.mu,
        operators=args.operators,
    )
    if args.clients_per_round is not None and args.clients_per_round > problem.n_clients:
        raise ParameterError(
            f"--clients-per-round: expected at most the {problem.n_clients} clients of "
            f"{args.problem}, got {args.clients_per_round}"
        )
    with _output_folder(args) as out:
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
    _warn_divergence(history)
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


def _warn_divergence(history: Any) -> None:
    """Record a divergence warning in ``history.warnings`` and print it on stderr."""
    entry = history.check_divergence()
    if entry is not None:
        print(f"riemfl: warning: {entry['reason']}", file=sys.stderr)


class _output_folder:
    """The ``--out`` folder of ``riemfl run``, checked, cleared (``--overwrite``) or created.

    Used as a context manager around the run: when the run raises, a folder this command created
    is removed again if it is still empty, so a refused run leaves nothing behind.

    Rules (``docs/federated/engine.md``, "The output folder"): a missing folder is created; an
    empty one is used; one holding this run's ``checkpoint.rfl`` (and only the files ``riemfl
    run`` writes) is resumed from it; anything else needs ``--overwrite``, which empties it.

    Raises
    ------
    ParameterError
        When ``--out`` names a file, lies under a file, cannot be created or written, or holds
        other files (or a checkpoint that this run would not read) and ``--overwrite`` is unset.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.path = Path(args.out)
        self.created: list[Path] = []
        self.resuming = False

    def _fail(self, expected: str, got: str) -> ParameterError:
        return ParameterError(f"--out {self.args.out}: expected {expected}, got {got}")

    def _check_existing(self, out: Path) -> None:
        entries = sorted(p.name for p in out.iterdir())
        if not entries:
            return
        if self.args.overwrite:
            here = Path.cwd().resolve()
            target = out.resolve()
            if target == here or target in here.parents or target == Path.home().resolve():
                raise self._fail(
                    "a folder that --overwrite may empty", "the current folder or one above it"
                )
            for entry in out.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
            return
        checkpointing = self.args.checkpoint_every != 0
        own = {CHECKPOINT_NAME, *RUN_FILES}
        others = [
            e
            for e in entries
            if e not in own and not (e.startswith(CHECKPOINT_NAME + ".") and e.endswith(".tmp"))
        ]
        if checkpointing and CHECKPOINT_NAME in entries and not others:
            self.resuming = True
            return
        shown = ", ".join(entries[:5]) + (
            f" and {len(entries) - 5} more" if len(entries) > 5 else ""
        )
        raise self._fail(
            f"an empty or new folder, or one holding this run's {CHECKPOINT_NAME} to resume "
            "(pass --overwrite to empty it, or choose another --out)",
            f"a folder holding {shown}",
        )

    def __enter__(self) -> Path:
        try:
            return self._prepare()
        except OSError as exc:  # e.g. a name too long to look up
            self._remove_created()
            raise self._fail("a usable folder path", f"{exc.strerror}") from None

    def _prepare(self) -> Path:
        out = self.path
        if out.exists() and not out.is_dir():
            raise self._fail("a folder", "an existing file")
        missing = []
        base = out
        while not base.exists() and base != base.parent:
            missing.append(base)
            base = base.parent
        if not base.is_dir():
            raise self._fail("a path under folders", f"a path under the file {str(base)!r}")
        if not os.access(base, os.W_OK | os.X_OK):
            raise self._fail("a writable location", f"{str(base)!r}, which is not writable")
        if out.is_dir():
            self._check_existing(out)
            return out
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except OSError as exc:
                self._remove_created()
                raise self._fail(
                    "a folder that can be created", f"{exc.strerror} for {str(folder)!r}"
                ) from None
            self.created.append(folder)
        return out

    def _remove_created(self) -> None:
        for folder in reversed(self.created):
            try:
                folder.rmdir()  # only if still empty
            except OSError:
                return
        self.created = []

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if isinstance(exc, CheckpointMismatchError) and self.resuming:
            raise ParameterError(
                f"--out {self.args.out}: expected this run's checkpoint or none, got the "
                f"checkpoint of another run ({exc.differences}); pass --overwrite to empty the "
                "folder and start afresh, or choose another --out"
            ) from None
        if isinstance(exc, RiemflError) and not isinstance(exc, KeyboardInterrupt):
            self._remove_created()


def _checkpointing(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The engines' checkpoint arguments: ``out/checkpoint.rfl`` every ``--checkpoint-every``
    steps, at the end and when interrupted (``--checkpoint-every 0``: no checkpoint file)."""
    if args.checkpoint_every == 0:
        return {"checkpoint": None}
    return {"checkpoint": out / CHECKPOINT_NAME, "checkpoint_every": args.checkpoint_every}


def _async_parts(args: argparse.Namespace, problem: Any, step: float) -> tuple[Any, Any, Any]:
    """The trainer, server rule and timing model of an asynchronous run (built before the
    output folder, so that their errors leave no folder behind)."""
    from .experiments.registry import CURVE_RULE_NAMES, build_async_rule
    from .federated import (
        BezierProblemTrainer,
        ExponentialTime,
        LogNormalTime,
        ProblemTrainer,
        ProportionalTime,
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
    return trainer, rule, timing


def _run_async(
    args: argparse.Namespace, problem: Any, trainer: Any, rule: Any, timing: Any, out: Path
) -> int:
    from .federated import run_async

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
    _warn_divergence(history)
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


#: Why ``--strict`` does not apply to a paper (one with no pass/fail verdicts to enforce).
NO_VERDICTS = {
    "floral": "its report compares with the paper's numbers in prose, with no pass/fail claims",
    "licudi2025": "it reports tables and plots, with no pass/fail claims",
    "licudi2025-baselines": "it reports tables and plots, with no pass/fail claims",
}


def _reproduce(args: argparse.Namespace) -> int:
    if args.strict and args.paper in NO_VERDICTS:
        raise ParameterError(
            f"--strict: expected a paper with pass/fail claims (zhang2024), got {args.paper}: "
            f"{NO_VERDICTS[args.paper]}"
        )
    if args.figure and args.paper != "zhang2024":
        raise ParameterError(
            f"--figure: selects figures of zhang2024 only; got it with {args.paper}"
        )
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
    failed = [c.number for c in claims if c.passed is False]
    if args.strict and failed:
        print(
            f"riemfl: error: --strict: claims {', '.join(map(str, failed))} FAIL",
            file=sys.stderr,
        )
        return 1
    return 0


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (no usage block), exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        """Print ``PROG: error: MESSAGE (see PROG --help)`` and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def _real(text: str, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        expected = "a finite number > 0" if positive else "a finite number >= 0"
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def _positive(text: str) -> float:
    """An argparse type: a finite float > 0."""
    return _real(text, positive=True)


def _nonnegative(text: str) -> float:
    """An argparse type: a finite float >= 0."""
    return _real(text, positive=False)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``riemfl`` command."""
    from .experiments.registry import ALGORITHM_NAMES, ASYNC_RULE_NAMES, PROBLEMS

    parser = _Parser(prog="riemfl", description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH", help="(manifolds) also write the table as JSON")
    parser.add_argument("--seed", type=int, default=0)
    sub = parser.add_subparsers(dest="command")

    m = sub.add_parser("manifolds", help="the manifolds riemfl ships and a self-check")
    m.add_argument("--json", metavar="PATH", help="also write the table as JSON")
    m.add_argument("--seed", type=int, default=0)

    r = sub.add_parser(
        "run", help="one federated run on a named problem",
        epilog="Output folder: a new or empty --out is used; one holding this run's "
        f"{CHECKPOINT_NAME} is resumed; anything else needs --overwrite. Every user error is "
        "one line on stderr and exit status 2, checked before the folder is made.",
    )  # fmt: skip
    r.add_argument("problem", choices=sorted(PROBLEMS))
    r.add_argument("--algorithm", required=True, choices=ALGORITHM_NAMES + ASYNC_RULE_NAMES)
    r.add_argument("--engine", choices=("sync", "async"), default="sync")
    r.add_argument(
        "--rounds", type=_int_at_least(1), default=200,
        help="communication rounds R >= 1 (async: server steps)",
    )  # fmt: skip
    r.add_argument("--local-steps", type=_int_at_least(1), default=10, help="tau >= 1")
    r.add_argument("--step", type=_positive, default=None, help="eta > 0 (default: the paper's)")
    r.add_argument("--global-step", type=_positive, default=None, help="eta_g (RFedProj; 1)")
    r.add_argument("--mu", type=_nonnegative, default=None, help="proximal weight (RFedProx; 1)")
    r.add_argument("--operators", choices=("approximate", "exact"), default="approximate")
    r.add_argument(
        "--clients", type=_int_at_least(1), default=None,
        help="number of clients n >= 1 (default: the problem's)",
    )  # fmt: skip
    r.add_argument("--clients-per-round", type=_int_at_least(1), default=None)
    r.add_argument("--batch-size", type=_int_at_least(1), default=None, help="mini-batch size b")
    r.add_argument("-k", type=_int_at_least(1), default=None, help="components (Stiefel k)")
    r.add_argument(
        "--data", default=None,
        help="MNIST idx/npz file (kpca-mnist, logreg-mnist only; refused by the others)",
    )  # fmt: skip
    r.add_argument("--grad-tol", type=_nonnegative, default=None, help="stop at |grad f| <= this")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", default="results/run", help="output folder (default results/run)")
    r.add_argument(
        "--overwrite", action="store_true",
        help="empty a non-empty --out first (needed unless it holds this run's checkpoint)",
    )  # fmt: skip
    r.add_argument(
        "--checkpoint-every", type=_int_at_least(0), default=10,
        help=f"write DIR/{CHECKPOINT_NAME} every k rounds or server steps, at the end and when "
        "interrupted (0: never); the same command resumes from it",
    )  # fmt: skip
    r.add_argument("--no-progress", action="store_true")
    a = r.add_argument_group("asynchronous engine (--engine async; refused with sync)")
    a.add_argument(
        "--workers", type=_int_at_least(1), default=None, help="clients training at once"
    )
    a.add_argument(
        "--timing", choices=("proportional", "exponential", "lognormal"), default=None,
        help="client time model (default exponential)",
    )  # fmt: skip
    a.add_argument("--scheduler", choices=("fifo", "paper"), default=None, help="default fifo")
    a.add_argument("--server-lr", type=_positive, default=None, help="eta_g (FedBuff: beta)")
    a.add_argument("--buffer-size", type=_int_at_least(1), default=None, help="FedBuff's K (10)")
    a.add_argument(
        "--staleness", choices=("constant", "polynomial", "hinge"), default=None,
        help="default constant",
    )  # fmt: skip
    a.add_argument(
        "--max-staleness", type=_int_at_least(0), default=None, help="the staleness bound tau"
    )
    a.add_argument(
        "--staleness-policy", choices=("drop", "block"), default=None,
        help="enforce --max-staleness by dropping staler updates (default) or by making fast "
        "clients wait",
    )  # fmt: skip
    a.add_argument(
        "--eval-every", type=_int_at_least(1), default=None,
        help="metrics every k server steps (10)",
    )  # fmt: skip
    a.add_argument(
        "--warmup-steps", type=_int_at_least(0), default=None,
        help="curve rules (asyncbezier, asyncbezier-ed): K1 steps on the end point "
        "(default: --local-steps)",
    )  # fmt: skip
    a.add_argument(
        "--curve-steps", type=_int_at_least(0), default=None,
        help="curve rules: K - K1 steps of curve learning (default: --local-steps)",
    )  # fmt: skip
    a.add_argument(
        "--vartheta", type=_nonnegative, default=None,
        help="curve rules: OrthoDC strength (default 1)",
    )  # fmt: skip

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
    p.add_argument(
        "--strict", action="store_true",
        help="zhang2024: exit with status 1 when a claim FAILs (the others have no pass/fail "
        "claims and refuse it)",
    )  # fmt: skip
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

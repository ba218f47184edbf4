"""``riemfl run PROBLEM --algorithm ALG``: one federated run, synchronous or asynchronous.

Writes ``history.json``, ``history.csv`` and ``history.png`` into the output folder
(:mod:`.output`) and checkpoints there every ``--checkpoint-every`` steps; the same command
resumes an interrupted run, and starts afresh where a run was killed inside its first checkpoint
write (the temporary file such a writer leaves is removed first).

Before the folder is made, every check that can fail does: the options, the optional
dependencies (:data:`RUN_EXTRAS`, the problem's and the method's ``extras`` in the registry,
:data:`DP_EXTRAS`), the problem, and the maps and constants the method needs of the problem's
manifold (the method's ``validate``, which the engines also call when they start). After the
run, a divergence or a stall (:meth:`~riemfl.federated.History.check_divergence`,
:meth:`~riemfl.federated.History.check_stall`) is recorded in the history and said on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import DataError, ParameterError
from ..experiments.run_settings import ServerSide, async_rule_settings, compressed, server_side
from .output import CHECKPOINT_NAME, OutputFolder, write_history

__all__ = ["run", "ASYNC_DEFAULTS", "SYNC_ONLY", "RUN_EXTRAS", "DP_EXTRAS"]

#: The extras every ``riemfl run`` needs: matplotlib draws ``history.png``.
RUN_EXTRAS = ("data",)
#: The extras of a run with differential privacy (``--dp-clip``): the epsilon's accountant.
DP_EXTRAS = ("privacy",)

#: Options of the asynchronous engine and their defaults (``None`` in the parser, so that an
#: option given with ``--engine sync`` is refused rather than ignored).
ASYNC_DEFAULTS: dict[str, Any] = {
    "workers": None,
    "timing": "exponential",
    "scheduler": "fifo",
    "buffer_size": 10,
    "staleness": "constant",
    "max_staleness": None,
    "staleness_policy": "drop",
    "record_every": 10,
    "warmup_steps": None,
    "curve_steps": None,
    "vartheta": None,
}
#: Options of the synchronous engine only, and the algorithms each one applies to (None: all).
SYNC_ONLY: dict[str, tuple[str, ...] | None] = {
    "clients_per_round": None,
    "grad_tol": None,
    "global_step_size": ("rfedproj",),
    "mu": ("rfedprox",),
    "upload": ("rfedavg", "rfedprox", "rfedsvrg"),
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


#: the options of differential privacy; ``--dp-clip`` turns it on
DP_OPTIONS = ("dp_clip", "dp_noise", "dp_delta", "dp_mode")


def _privacy(args: argparse.Namespace) -> Any:
    """The :class:`~riemfl.federated.privacy.DPSettings` of ``--dp-*``, or None without them.

    Raises
    ------
    ParameterError
        A ``--dp-*`` option without ``--dp-clip`` and ``--dp-noise``, or with an algorithm whose
        server needs each upload (``--upload point``, the asynchronous rules but fedbuff).
    """
    given = [_flag(d) for d in DP_OPTIONS if getattr(args, d) is not None]
    if not given:
        return None
    if args.dp_clip is None or args.dp_noise is None:
        raise ParameterError(
            f"{', '.join(given)}: differential privacy needs both --dp-clip C and --dp-noise SIGMA"
        )
    if args.algorithm in ("rfedavg", "rfedprox", "rfedsvrg") and args.upload != "tangent":
        raise ParameterError(
            f"--dp-clip: {args.algorithm}'s server needs each uploaded point; differential "
            "privacy adds noise to their sum: add --upload tangent"
        )
    if args.engine == "async" and args.algorithm != "fedbuff":
        raise ParameterError(
            f"--dp-clip: {args.algorithm} applies each client update on its own; "
            "differential privacy (noise on a sum of updates) runs with --algorithm fedbuff only"
        )
    from ..federated.privacy import DPSettings

    delta = 1e-5 if args.dp_delta is None else args.dp_delta
    return DPSettings(args.dp_clip, args.dp_noise, delta, args.dp_mode or "central")


def _require_extras(args: argparse.Namespace, private: bool) -> None:
    """Refuse a run whose problem, method or options (``private``: differential privacy) need
    an optional dependency that is not installed: one line naming the ``pip install`` command,
    before anything is built."""
    from ..experiments.registry import ALGORITHMS, ASYNC_RULES, PROBLEMS
    from ..extras import require_extras

    method = (ALGORITHMS if args.engine == "sync" else ASYNC_RULES)[args.algorithm]
    dp = DP_EXTRAS if private else ()
    needed = (*RUN_EXTRAS, *PROBLEMS[args.problem].extras, *method.extras, *dp)
    engine = "" if args.engine == "sync" else " --engine async"
    require_extras(needed, f"riemfl run {args.problem} --algorithm {args.algorithm}{engine}")


def _build_problem(args: argparse.Namespace) -> Any:
    """The problem of ``riemfl run``; a data error names ``--data`` and the file."""
    from ..experiments.registry import build_problem

    try:
        return build_problem(
            args.problem,
            clients=args.clients,
            k=args.k,
            seed=args.seed,
            data=args.data,
            progress=not args.no_progress,
        )
    except DataError as exc:
        if args.data is None:
            raise
        raise DataError(f"--data {args.data}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    """``riemfl run``: check the options, build the problem and the method, run, write."""
    from ..experiments.registry import (
        ALGORITHM_NAMES,
        ASYNC_RULE_NAMES,
        PROBLEMS,
        build_algorithm,
    )
    from ..federated import ServerOptimized, run_sync

    sync = args.algorithm in ALGORITHM_NAMES
    if (args.engine == "sync") != sync:
        names = ALGORITHM_NAMES if args.engine == "sync" else ASYNC_RULE_NAMES
        raise ParameterError(
            f"--engine {args.engine} runs the algorithms {', '.join(names)}; got {args.algorithm}"
        )
    _check_applicable(args)
    privacy = _privacy(args)
    _require_extras(args, privacy is not None)
    entry = PROBLEMS[args.problem]
    if args.steps is None:
        args.steps = entry.rounds
    problem = _build_problem(args)
    server = server_side(args, problem.n_clients, sync=sync)
    step_size = args.step_size
    if step_size is None:
        eta_g = 1.0 if args.global_step_size is None else args.global_step_size
        step_size = entry.default_step_size(problem, args.local_steps, eta_g)
    if not sync:
        trainer, rule, timing = _async_parts(args, problem, step_size, privacy, server)
        with _output_folder(args) as out:
            return _run_async(args, problem, trainer, rule, timing, out)
    algorithm = build_algorithm(
        args.algorithm,
        step_size=step_size,
        local_steps=args.local_steps,
        global_step_size=1.0 if args.global_step_size is None else args.global_step_size,
        mu=1.0 if args.mu is None else args.mu,
        operators=args.operators,
        upload=args.upload or "point",
    )
    if server.optimizer is not None:
        algorithm = ServerOptimized(algorithm, server.optimizer)
    algorithm = compressed(args, algorithm)
    if args.clients_per_round is not None and args.clients_per_round > problem.n_clients:
        raise ParameterError(
            f"--clients-per-round: expected at most the {problem.n_clients} clients of "
            f"{args.problem}, got {args.clients_per_round}"
        )
    algorithm.validate(problem)  # the maps it needs of the manifold, before the folder is made
    with _output_folder(args) as out:
        history = run_sync(
            problem,
            algorithm,
            args.steps,
            options=_run_options(args, out),
            clients_per_round=args.clients_per_round,
            batch_size=args.batch_size,
            grad_tol=args.grad_tol,
            aggregator=server.aggregator,
            privacy=privacy,
            byzantine=server.byzantine,
        )
    _warn(history, args)
    history.config["command"] = "riemfl " + " ".join(sys.argv[1:])
    y = ("grad_norm", "optimality_gap") if problem.optimum is not None else ("grad_norm", "loss")
    write_history(history, out, y)
    print(
        f"{algorithm.name} on {problem.name}: {history.round[-1]} rounds, "
        f"|grad f| {history.grad_norm[0]:.3e} -> {history.grad_norm[-1]:.3e}, "
        f"f - f* {history.optimality_gap[-1]:.3e}, uplink {history.uplink_matrices[-1]:.0f} "
        f"matrices/client, CPU {history.cpu_time[-1]:.2f} s{_epsilon(history, args)}; wrote "
        f"{out}/history.json, history.csv, history.png"
    )
    return 0


def _output_folder(args: argparse.Namespace) -> OutputFolder:
    """The ``--out`` folder, once the temporary checkpoint files of writers that are no longer
    running are gone: a run killed inside its first checkpoint write leaves only such a file,
    and the same command then starts afresh."""
    from ..federated.checkpoint import remove_stale_temporaries

    remove_stale_temporaries(Path(args.out) / CHECKPOINT_NAME)
    return OutputFolder(args)


def _epsilon(history: Any, args: argparse.Namespace) -> str:
    """``, epsilon E (delta D)`` of a private run, else empty."""
    eps = history.metrics.get("epsilon")
    if not eps:
        return ""
    delta = 1e-5 if args.dp_delta is None else args.dp_delta
    return f", epsilon {eps[-1]:.3g} (delta {delta:g})"


def _warn(history: Any, args: argparse.Namespace) -> None:
    """Record a divergence, else a stall, in ``history.warnings`` and print it on stderr.

    A stall is watched only while the gradient norm is above the problem's tolerance (the
    registry's, relative to its initial value) and above ``--grad-tol``.
    """
    from ..experiments.registry import PROBLEMS

    entry = history.check_divergence()
    if entry is None:
        floor = PROBLEMS[args.problem].tolerance
        g = history.metrics.get("grad_norm", [])
        if args.grad_tol and g and g[0] > 0:
            floor = max(floor, args.grad_tol / g[0])
        entry = history.check_stall(floor=floor) if floor < 1 else None
    if entry is not None:
        print(f"riemfl: warning: {entry['reason']}", file=sys.stderr)


def _run_options(args: argparse.Namespace, out: Path, record_every: int | None = 1) -> Any:
    """The run's :class:`~riemfl.federated.RunOptions`: ``--seed``, the progress bar, and the
    checkpoint ``out/checkpoint.rfl`` every ``--checkpoint-every`` steps, at the end and when
    interrupted (``--checkpoint-every 0``: no checkpoint file)."""
    from ..federated import RunOptions

    saved = args.checkpoint_every != 0
    return RunOptions(
        seed=args.seed,
        record_every=record_every,
        checkpoint=out / CHECKPOINT_NAME if saved else None,
        checkpoint_every=args.checkpoint_every if saved else 10,
        progress=not args.no_progress,
    )


def _async_parts(
    args: argparse.Namespace,
    problem: Any,
    step_size: float,
    privacy: Any,
    server: ServerSide,
) -> tuple[Any, Any, Any]:
    """The trainer, server rule and timing model of an asynchronous run (built before the
    output folder, so that their errors leave no folder behind)."""
    from ..experiments.registry import CURVE_RULE_NAMES, build_async_rule
    from ..federated import (
        BezierProblemTrainer,
        ExponentialTime,
        LogNormalTime,
        ManifoldBezierTrainer,
        ProblemTrainer,
        ProportionalTime,
    )
    from ..manifolds import Euclidean

    timing = {
        "proportional": ProportionalTime(),
        "exponential": ExponentialTime(1.0),
        "lognormal": LogNormalTime(1.0, 0.8),
    }[args.timing]
    rule = build_async_rule(
        args.algorithm,
        **async_rule_settings(args, server),
        buffer_size=args.buffer_size,
        operators=args.operators,
        staleness=args.staleness,
        manifold=problem.manifold,
        vartheta=1.0 if args.vartheta is None else args.vartheta,
        privacy=privacy,
    )
    rule.validate(problem.manifold)  # the maps and constants it needs, before the folder
    curve = args.algorithm in CURVE_RULE_NAMES
    curve_only = (args.warmup_steps, args.curve_steps, args.vartheta)
    if not curve and any(v is not None for v in curve_only):
        raise ParameterError(
            f"--warmup-steps, --curve-steps and --vartheta set the curve rules {CURVE_RULE_NAMES}; "
            f"{args.algorithm} trains a point (--local-steps)"
        )
    if curve:  # the learned curve's client: flat space, or geodesic de Casteljau in torch
        flat = isinstance(problem.manifold, Euclidean)
        trainer = (BezierProblemTrainer if flat else ManifoldBezierTrainer)(
            problem,
            step_size,
            args.local_steps if args.warmup_steps is None else args.warmup_steps,
            args.local_steps if args.curve_steps is None else args.curve_steps,
            batch_size=args.batch_size,
        )
    else:
        trainer = ProblemTrainer(problem, step_size, args.local_steps, args.batch_size)
    return trainer, rule, timing


def _run_async(
    args: argparse.Namespace, problem: Any, trainer: Any, rule: Any, timing: Any, out: Path
) -> int:
    from ..federated import run_async

    history = run_async(
        trainer,
        rule,
        args.steps,
        workers=args.workers,
        timing=timing,
        options=_run_options(args, out, record_every=args.record_every),
        scheduler=args.scheduler,
        max_staleness=args.max_staleness,
        staleness_policy=args.staleness_policy,
    )
    _warn(history, args)
    history.config["problem"] = problem.describe()
    history.config["command"] = "riemfl " + " ".join(sys.argv[1:])
    write_history(history, out, ("grad_norm", "optimality_gap"))
    g = history.metrics["grad_norm"]
    stats = history.staleness_stats()
    print(
        f"{rule.name} (async) on {problem.name}: {int(history.metrics['step'][-1])} server steps, "
        f"{len(history.log['client'])} client updates, |grad f| {g[0]:.3e} -> {g[-1]:.3e}, "
        f"staleness mean {stats['mean']:.2f} max {stats['max']:.0f}"
        f"{_epsilon(history, args)}; wrote {out}/history.json, history.csv, history.png"
    )
    return 0

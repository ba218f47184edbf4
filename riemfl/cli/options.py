"""The argument parser of the ``riemfl`` command: every option defined once.

Options shared by several subcommands live in parent parsers (:func:`_shared`); the choices of
problems, algorithms, rules and papers come from their registries.
"""

from __future__ import annotations

import argparse
import math
import textwrap
from collections.abc import Callable

from .. import __version__
from .compression import add_compression_options
from .output import CHECKPOINT_NAME
from .reproduce import PAPERS
from .server_side import add_server_side_options

__all__ = ["build_parser"]


class _Help(argparse.RawDescriptionHelpFormatter):
    """Help with each option's default where it has one (not for flags, nor for options whose
    default is None: their help says what happens without them); epilogs printed as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        plain = default is None or isinstance(default, bool) or default is argparse.SUPPRESS
        if plain or not action.option_strings or "%(default)" in text:
            return text
        return f"{text} (default: %(default)s)".lstrip()


def _listing(title: str, entries: dict[str, str]) -> str:
    """An epilog section: ``title:`` then ``name  summary`` lines, summaries wrapped."""
    lines = [f"{title}:"]
    for name, summary in entries.items():
        wrapped = textwrap.wrap(summary, width=76 - 22) or [""]
        lines.append(f"  {name:<20}{wrapped[0]}")
        lines.extend(" " * 22 + more for more in wrapped[1:])
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (no usage block), exit status 2."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

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


def _fraction(text: str) -> float:
    """An argparse type: a float in [0, 1)."""
    value = _real(text, positive=False)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}")
    return value


def _probability(text: str) -> float:
    """An argparse type: a float in (0, 1)."""
    value = _real(text, positive=True)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return value


def _shared() -> dict[str, argparse.ArgumentParser]:
    """Parent parsers of the options that several (sub)commands take, each defined once."""
    table = argparse.ArgumentParser(add_help=False)
    table.add_argument("--json", metavar="PATH", help="also write the table as JSON")
    table.add_argument(
        "--markdown",
        action="store_true",
        help="print the catalogue's markdown table (as in the README) instead of the self-check",
    )
    seed = argparse.ArgumentParser(add_help=False)
    seed.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    progress = argparse.ArgumentParser(add_help=False)
    progress.add_argument("--no-progress", action="store_true", help="no progress bar")
    return {"table": table, "seed": seed, "progress": progress}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``riemfl`` command."""
    from ..experiments.registry import (
        ALGORITHM_NAMES,
        ALGORITHMS,
        ASYNC_RULE_NAMES,
        ASYNC_RULES,
        DEFAULT_LOCAL_STEPS,
        PROBLEMS,
    )
    from ..federated.tangent import UPLOADS

    shared = _shared()
    tau = DEFAULT_LOCAL_STEPS
    doc = (
        "The riemfl command: manifolds, federated runs and paper reproductions. With no "
        "command, riemfl is 'riemfl manifolds' and takes its options (--json, --markdown, "
        "--seed)."
    )
    parser = _Parser(prog="riemfl", description=doc, parents=[shared["table"], shared["seed"]])
    parser.add_argument("--version", action="version", version=f"riemfl {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    sub.add_parser(
        "manifolds",
        help="the manifolds riemfl ships and a self-check",
        parents=[shared["table"], shared["seed"]],
    )

    r = sub.add_parser(
        "run",
        help="one federated run on a named problem",
        parents=[shared["seed"], shared["progress"]],
        description="One federated run of an algorithm (--engine sync) or an asynchronous "
        "rule (--engine async) on a named problem; writes history.json, history.csv and "
        "history.png into --out.",
        epilog="\n\n".join(
            [
                _listing(
                    "problems (their defaults: step-size rule, rounds, and the relative |grad f| "
                    "RFedProj reaches with them)",
                    {
                        k: f"{e.summary}. Defaults: {e.step_size.describe()}; {e.rounds} rounds; "
                        f"|grad f| <= {e.tolerance:g} x initial"
                        for k, e in sorted(PROBLEMS.items())
                    },
                ),
                textwrap.fill(
                    f"Default step sizes: eta = c/(max(tau, {tau}) eta_g L) keeps the "
                    "effective step size eta eta_g tau, which Zhang et al. 2024 (Theorem 4.3) "
                    "bound by a constant over the clients' smoothness L, where it was chosen "
                    "(about a factor 2 or more below where RFedProj stops converging in trial "
                    "runs) for "
                    f"any --local-steps (tau) >= {tau} and --global-step-size (eta_g); with fewer "
                    f"local steps eta keeps its value at tau = {tau}. rfedavg and rfedprox stop "
                    "at a client-drift floor above 0 on heterogeneous clients. A run whose "
                    "|grad f| (and f - f*) stops improving while above the problem's tolerance "
                    "warns of a stall.",
                    width=76,
                    break_on_hyphens=False,
                ),
                _listing(
                    "algorithms (--engine sync)", {k: e.summary for k, e in ALGORITHMS.items()}
                ),
                _listing("rules (--engine async)", {k: e.summary for k, e in ASYNC_RULES.items()}),
                "Output folder: a new or empty --out is used; one holding this run's "
                f"{CHECKPOINT_NAME} is resumed; anything else needs --overwrite. Every user "
                "error is one line on stderr and exit status 2, checked before the folder is "
                "made.",
            ]
        ),
    )
    r.add_argument("problem", choices=sorted(PROBLEMS))
    r.add_argument(
        "--algorithm",
        required=True,
        choices=ALGORITHM_NAMES + ASYNC_RULE_NAMES,
        metavar="NAME",
        help="a synchronous algorithm or an asynchronous rule (listed below)",
    )
    r.add_argument("--engine", choices=("sync", "async"), default="sync", help="which engine")
    r.add_argument(
        "--steps",
        type=_int_at_least(1),
        default=None,
        help="steps R >= 1: communication rounds (sync) or server steps (async); default: "
        "the problem's, listed below",
    )
    r.add_argument(
        "--local-steps", type=_int_at_least(1), default=DEFAULT_LOCAL_STEPS, help="tau >= 1"
    )
    r.add_argument(
        "--step-size",
        type=_positive,
        default=None,
        help="eta > 0 (default: the problem's rule below, from the smoothness L, tau and eta_g)",
    )
    r.add_argument(
        "--global-step-size", type=_positive, default=None, help="eta_g (RFedProj only; default 1)"
    )
    r.add_argument(
        "--mu", type=_nonnegative, default=None, help="proximal weight (RFedProx only; default 1)"
    )
    r.add_argument(
        "--operators",
        choices=("approximate", "exact"),
        default="approximate",
        help="retraction and its inverse, or exp and log",
    )
    r.add_argument(
        "--upload",
        choices=UPLOADS,
        default=None,
        help="what RFedAvg/RFedProx/RFedSVRG clients upload: their points (default) or the "
        "tangent vectors at x^r, whose sum alone the server then needs",
    )
    r.add_argument(
        "--clients",
        type=_int_at_least(1),
        default=None,
        help="number of clients n >= 1 (default: the problem's)",
    )
    r.add_argument(
        "--clients-per-round",
        type=_int_at_least(1),
        default=None,
        help="clients sampled per round, without replacement (default: all)",
    )
    r.add_argument(
        "--batch-size",
        type=_int_at_least(1),
        default=None,
        help="mini-batch size b (default: full local gradients)",
    )
    r.add_argument(
        "-k",
        type=_int_at_least(1),
        default=None,
        help="components (Stiefel k; default: the problem's)",
    )
    r.add_argument(
        "--data",
        default=None,
        help="MNIST idx/npz file (kpca-mnist, logreg-mnist only; refused by the others)",
    )
    r.add_argument("--grad-tol", type=_nonnegative, default=None, help="stop at |grad f| <= this")
    r.add_argument("--out", default="results/run", help="output folder")
    r.add_argument(
        "--overwrite",
        action="store_true",
        help="empty a non-empty --out first (needed unless it holds this run's checkpoint)",
    )
    r.add_argument(
        "--checkpoint-every",
        type=_int_at_least(0),
        default=10,
        help=f"write DIR/{CHECKPOINT_NAME} every k rounds or server steps, at the end and when "
        "interrupted (0: never); the same command resumes from it",
    )
    d = r.add_argument_group(
        "client-level differential privacy (rfedproj; rfedavg, rfedprox, rfedsvrg with "
        "--upload tangent; async fedbuff)"
    )
    d.add_argument(
        "--dp-clip",
        type=_positive,
        default=None,
        help="C: clip every client's update to norm C (turns differential privacy on)",
    )
    d.add_argument(
        "--dp-noise",
        type=_nonnegative,
        default=None,
        help="sigma: Gaussian noise of std sigma*C (required with --dp-clip)",
    )
    d.add_argument(
        "--dp-delta", type=_probability, default=None, help="delta of the reported epsilon (1e-5)"
    )
    d.add_argument(
        "--dp-mode",
        choices=("central", "local"),
        default=None,
        help="noise added once to the sum (central, default) or by every client",
    )
    add_server_side_options(r, _positive, _fraction)
    add_compression_options(r)
    a = r.add_argument_group("asynchronous engine (--engine async; refused with sync)")
    a.add_argument(
        "--workers", type=_int_at_least(1), default=None, help="clients training at once"
    )
    a.add_argument(
        "--timing",
        choices=("proportional", "exponential", "lognormal"),
        default=None,
        help="client time model (default: exponential)",
    )
    a.add_argument(
        "--scheduler",
        choices=("fifo", "paper"),
        default=None,
        help="which waiting client trains next (default: fifo)",
    )
    a.add_argument(
        "--buffer-size", type=_int_at_least(1), default=None, help="FedBuff's K (default: 10)"
    )
    a.add_argument(
        "--staleness",
        choices=("constant", "polynomial", "hinge"),
        default=None,
        help="staleness weighting of FedAsync and ASGD (default: constant)",
    )
    a.add_argument(
        "--max-staleness", type=_int_at_least(0), default=None, help="the staleness bound tau"
    )
    a.add_argument(
        "--staleness-policy",
        choices=("drop", "block"),
        default=None,
        help="enforce --max-staleness by dropping staler updates (default) or by making fast "
        "clients wait",
    )
    a.add_argument(
        "--record-every",
        type=_int_at_least(1),
        default=None,
        help="record a row with metrics every k server steps (default: 10)",
    )
    a.add_argument(
        "--warmup-steps",
        type=_int_at_least(0),
        default=None,
        help="curve rules (asyncbezier, asyncbezier-ed): K1 steps on the end point "
        "(default: --local-steps)",
    )
    a.add_argument(
        "--curve-steps",
        type=_int_at_least(0),
        default=None,
        help="curve rules: K - K1 steps of curve learning (default: --local-steps)",
    )
    a.add_argument(
        "--vartheta",
        type=_nonnegative,
        default=None,
        help="curve rules: OrthoDC strength (default: 1)",
    )

    p = sub.add_parser(
        "reproduce",
        help="reproduce a paper's figures and check its claims",
        parents=[shared["progress"]],
    )
    p.add_argument("paper", choices=list(PAPERS), help="which reproduction")
    p.add_argument(
        "--figure",
        type=int,
        action="append",
        help="zhang2024: figure number (repeatable); floral: 2 (the synthetic MLP with batch "
        "normalisation: norm adaptors and Batch NorA)",
    )
    p.add_argument(
        "--table",
        type=int,
        default=None,
        help="floral: table 1 (default), 2 (rho x C), 4 (ConvLoRA variants) or 5 (bias "
        "adaptors); licudi2025: table 1 (default) or 2 (chest X-rays: CXR8 files in --data, "
        "else the offline multi-label stand-in)",
    )
    p.add_argument("--quick", action="store_true", help="shortened runs (under 3 minutes)")
    p.add_argument(
        "--data",
        default=None,
        help="zhang2024: MNIST idx/npz file; licudi2025: LEAF data directory (train/, test/), "
        "with --table 2 the NIH ChestX-ray14 directory (Data_Entry_2017.csv, images/); floral: "
        "an MNIST file, or a directory of CIFAR-10/100 python batches (Table 1's CIFAR columns)",
    )
    p.add_argument(
        "--cifar-standin",
        action="store_true",
        help="floral: also run Table 1's CIFAR columns on generated files in the CIFAR format "
        "(the code paths, not CIFAR numbers)",
    )
    p.add_argument(
        "--dataset",
        choices=("digits", "femnist", "shakespeare"),
        default="digits",
        help="licudi2025: the offline stand-in, or LEAF's files given by --data",
    )
    p.add_argument("--device", default="cpu", help="licudi2025: torch device (e.g. cuda)")
    p.add_argument("--out", default=None, help="output directory (default: results/PAPER)")
    p.add_argument(
        "--strict",
        action="store_true",
        help="zhang2024: exit with status 1 when a claim FAILs (the others have no pass/fail "
        "claims and refuse it)",
    )
    return parser

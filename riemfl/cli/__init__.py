"""The ``riemfl`` command (also ``python -m riemfl``).

Subcommands:

* ``riemfl run PROBLEM --algorithm ALG [--steps R --local-steps T --step-size ETA ...]``: one
  federated run; writes ``DIR/history.json``, ``DIR/history.csv`` and ``DIR/history.png``;
  a non-empty ``--out`` is resumed when it holds this run's checkpoint, else refused unless
  ``--overwrite`` (``docs/federated/engine.md``, "The output folder");
* ``riemfl reproduce PAPER [--quick] ...``: a paper's experiments, a markdown report with the
  plots; for zhang2024 (Figures 1-9 of Zhang et al. 2024) one PASS/FAIL line per claim
  (``--strict``: exit status 1 when one FAILs);
* ``riemfl manifolds [--json PATH] [--markdown]`` (also plain ``riemfl``): the manifolds riemfl
  ships, their constants, the maps they implement and a measured exp/log round trip.

Every user error is one line on stderr (``riemfl: error: ...``) and exit status 2.

One module per job: :mod:`.options` (the parser), :mod:`.manifolds_table`, :mod:`.run` (with
:mod:`.output`, the output folder) and :mod:`.reproduce`.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence

from ..errors import RiemflError
from ..federated.interrupt import RunInterrupted, handle_interrupts
from .manifolds_table import describe, print_manifolds
from .options import build_parser
from .output import CHECKPOINT_NAME, RUN_FILES
from .reproduce import reproduce
from .run import run

__all__ = ["main", "build_parser", "describe", "CHECKPOINT_NAME", "RUN_FILES", "EXIT_INTERRUPTED"]

#: The exit status of a run stopped by SIGINT or SIGTERM (128 + SIGINT, the shells' convention).
EXIT_INTERRUPTED = 130


def _command_line(argv: Sequence[str] | None) -> str:
    words = sys.argv[1:] if argv is None else list(argv)
    return "riemfl " + " ".join(shlex.quote(w) for w in words)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``riemfl`` command with ``argv`` (default ``sys.argv[1:]``); its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    commands = {"run": run, "reproduce": reproduce}
    try:
        with handle_interrupts():
            return commands.get(args.command, print_manifolds)(args)
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

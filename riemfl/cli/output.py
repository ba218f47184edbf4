"""The ``--out`` folder of ``riemfl run``: checked, created, cleared or resumed, and the files
written into it (:func:`write_history`: the history as JSON and CSV, and its plot titled with
the problem and the algorithm)."""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import CheckpointMismatchError, ParameterError, RiemflError
from ..experiments.styles import TITLE_FONTSIZE, log_axis, save, shared_legend

__all__ = ["OutputFolder", "CHECKPOINT_NAME", "RUN_FILES", "run_title", "write_history"]

#: What ``riemfl run`` writes in its output folder besides the checkpoint.
RUN_FILES = ("history.json", "history.csv", "history.png")

#: The checkpoint file of ``riemfl run`` inside its output folder.
CHECKPOINT_NAME = "checkpoint.rfl"


class OutputFolder:
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


def run_title(history: Any) -> str:
    """The title of ``history.png``, from the run's configuration: the problem, the algorithm
    (or the asynchronous rule) with its step size and local steps, and the length of the run,
    e.g. ``"kpca-synthetic: rfedproj, eta = 0.000817, tau = 10, 50 rounds"`` or
    ``"kpca-synthetic: fedbuff (async), eta_g = 0.1, 20 server steps"``."""
    config = history.config
    problem = config.get("problem", {}).get("name", "user problem")
    if "rule" in config:
        rule = config["rule"]
        parts = [f"{history.label} (async)"]
        if "server_lr" in rule:
            parts.append(f"eta_g = {rule['server_lr']:.3g}")
        parts.append(f"{config.get('steps', len(history) - 1)} server steps")
    else:
        algorithm = config.get("algorithm", {})
        parts = [history.label]
        if "step_size" in algorithm:
            parts.append(f"eta = {algorithm['step_size']:.3g}")
        if "local_steps" in algorithm:
            parts.append(f"tau = {algorithm['local_steps']}")
        parts.append(f"{config.get('rounds', len(history) - 1)} rounds")
    return f"{problem}: {', '.join(parts)}"


def write_history(history: Any, out: Path, y: Sequence[str]) -> None:
    """Write :data:`RUN_FILES` into ``out``: ``history.json``, ``history.csv`` and
    ``history.png`` (:meth:`~riemfl.federated.History.plot` of the ``y`` columns, titled by
    :func:`run_title`, its legend below the panels and log-axis labels that do not collide)."""
    history.to_json(out / "history.json")
    history.to_csv(out / "history.csv")
    fig = history.plot(y=y)
    fig.set_layout_engine("constrained")  # room for the title and the legend below the panels
    for ax in fig.axes:
        if ax.get_legend() is not None:
            ax.get_legend().remove()
        log_axis(ax, "y")
    shared_legend(fig, fig.axes)
    fig.suptitle(run_title(history), fontsize=TITLE_FONTSIZE)
    save(fig, out / "history.png", dpi=110)

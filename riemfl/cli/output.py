"""The ``--out`` folder of ``riemfl run``: checked, created, cleared or resumed."""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path
from typing import Any

from ..errors import CheckpointMismatchError, ParameterError, RiemflError

__all__ = ["OutputFolder", "CHECKPOINT_NAME", "RUN_FILES"]

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

"""Shared pieces of the run-core scripts (``campaign_faults.py``, ``bench_run_core.py``).

Fixed-width tables, goal verdicts, and the environment of their subprocesses (one BLAS thread,
as in the parent, so that a subprocess computes bit for bit what its peer in another process
computes).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["table", "verdict", "median", "child_env"]


def table(head: Sequence[str], rows: Iterable[Sequence[Any]], left: Iterable[int] = (0,)) -> str:
    """Fixed-width columns: the ``left`` columns left-aligned, the others right-aligned.

    Parameters
    ----------
    head : sequence of str
        Column names.
    rows : iterable of sequences
        One sequence of cells per row (formatted with ``str``).
    left : iterable of int
        Indices of the text columns.

    Returns
    -------
    str
        Header, a rule of dashes and the rows, one per line.
    """
    lines = [list(map(str, head)), *([str(v) for v in r] for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    lines.insert(1, ["-" * w for w in widths])
    align = ["<" if i in set(left) else ">" for i in range(len(head))]
    return "\n".join(
        "  ".join(f"{v:{a}{w}}" for v, a, w in zip(line, align, widths, strict=True)).rstrip()
        for line in lines
    )


def verdict(met: bool | None) -> str:
    """``yes`` / ``NO`` (``-`` when the goal was not checked)."""
    return "-" if met is None else ("yes" if met else "NO")


def median(values: Iterable[float]) -> float:
    """The median of ``values`` as a float."""
    return float(statistics.median(list(values)))


def child_env() -> dict[str, str]:
    """This process's environment with one BLAS/OpenMP thread (for every subprocess)."""
    from _harness import THREAD_ENV  # here: _harness imports torch, which children may not need

    return {**os.environ, **dict.fromkeys(THREAD_ENV, "1")}

"""A checked claim of the Zhang et al. 2024 reproduction: its record, its line on the terminal,
and the measurement the checks share (the first round at a tolerance).

The claims themselves are listed in the package docstring of :mod:`riemfl.experiments.zhang2024`;
:mod:`~riemfl.experiments.zhang2024.checks` checks them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ...federated import History

__all__ = ["Claim", "claim_lines", "reach"]


@dataclass
class Claim:
    """One checked claim about the paper's figures (the package docstring) and its verdict (None:
    not checked)."""

    number: int
    text: str
    passed: bool | None
    detail: str
    figures: tuple[int, ...] = field(default_factory=tuple)
    #: "" for a claim checked under one reading; "a", "b", ... for the readings of a claim whose
    #: check depends on a setting the paper leaves open (claim 8: the LRMC step size)
    part: str = ""
    #: whether ``--strict`` counts this verdict (False: a reading reported beside the gated one)
    gated: bool = True
    #: for a FAIL: what would change the verdict
    would_change: str = ""

    @property
    def verdict(self) -> str:
        """``PASS``, ``FAIL`` or ``SKIP`` (not checked)."""
        return {True: "PASS", False: "FAIL", None: "SKIP"}[self.passed]

    @property
    def label(self) -> str:
        """The claim's number and part, e.g. "8b"."""
        return f"{self.number}{self.part}"


def claim_lines(claims: Sequence[Claim]) -> list[str]:
    """One ``PASS``/``FAIL``/``SKIP`` line per claim, for the terminal (readings that
    ``--strict`` does not count say so)."""
    return [
        f"{c.verdict} claim {c.label}{'' if c.gated else ' (reading, not --strict)'}: "
        f"{c.text} -- {c.detail}"
        for c in claims
    ]


def reach(h: History, tol: float) -> tuple[int, float, float] | None:
    """(round, uplink per client, CPU seconds) of the first round with |grad f| <= tol (None:
    no round reaches it)."""
    for i, g in enumerate(h.grad_norm):
        if g <= tol:
            return h.round[i], h.uplink_matrices[i], h.cpu_time[i]
    return None

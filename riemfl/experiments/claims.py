"""One checked claim of a reproduction: :class:`Claim`, what ``riemfl reproduce --strict`` counts.

A reproduction whose report states pass/fail claims returns a list of :class:`Claim`; the CLI
prints :meth:`Claim.line` for each and counts the failures.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Claim"]


@dataclass(frozen=True)
class Claim:
    """One claim of a paper checked against our runs.

    Attributes
    ----------
    label : str
        Its name for ``--strict`` (``dcasgd-never-optimal``, ``bound/tau=1``).
    passed : bool
        Whether our runs agree with the claim under the rule fixed before the runs.
    measured : str
        What we measured, formatted for one line (``"optimal at 0 of 412 steps"``).
    reference : str
        The paper's statement or value.
    change : str
        What would change the verdict (the margin, the seeds it would take); empty when the
        verdict is far from its threshold.
    """

    label: str
    passed: bool
    measured: str
    reference: str
    change: str = ""

    def line(self) -> str:
        """One line: PASS or FAIL, the label, ours and the paper's."""
        word = "PASS" if self.passed else "FAIL"
        return f"{word} {self.label}: {self.measured} (paper: {self.reference})"

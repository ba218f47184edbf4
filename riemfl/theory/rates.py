r"""Table I of Toghani & Uribe 2022: convergence rates of federated analyses, as data.

The table compares analyses for smooth non-convex objectives by three properties (asynchronous
update, buffered aggregation, unbounded gradient) and the rate in T, the number of server
updates, where :math:`\tau` is the maximum delay. :data:`TABLE_I` holds its rows in the paper's
order; :func:`render_table` writes them as a markdown table.

The marks of the three property columns are taken from what the paper's text says of each
analysis: FedAvg is synchronous; FedAsync (Xie et al. 2020) updates asynchronously without a
buffer; FedBuff (Nguyen et al. 2022) buffers, and its original analysis bounds the gradient norm
("FedBuff [1] is shown to converge [...] under the boundedness of the gradient norm"); Toghani &
Uribe's is "the first analysis for (a variant of) asynchronous federated learning with no
boundedness assumption on the gradient norm", so FedAsync's analysis bounds it too. The text does
not say whether the FedAvg analyses bound the gradient: those marks are ``None`` ("not stated").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ParameterError

__all__ = ["RateRow", "TABLE_I", "render_table"]

_SQRT_T = "O(1/sqrt(T))"
_ASYNC = "O(1/sqrt(T)) + O(tau^2/T)"


@dataclass(frozen=True)
class RateRow:
    r"""One row of Table I.

    Attributes
    ----------
    algorithm : str
        The method analysed ("FedAvg", "FedAsync", "FedBuff").
    analysis : str
        The analysis, as a citation key of ``docs/references.md``.
    asynchronous, buffered, unbounded_gradient : bool or None
        The table's three property columns; None where the paper's text does not settle it.
    rate : str or None
        The rate in T (server updates) and :math:`\tau` (maximum delay); None where the table
        gives none ("-").
    terms : tuple of (float, int)
        The rate's O-terms as (power of T, power of tau): ``((-0.5, 0), (-1.0, 2))`` is
        :math:`O(1/\sqrt T) + O(\tau^2/T)`.
    """

    algorithm: str
    analysis: str
    asynchronous: bool | None
    buffered: bool | None
    unbounded_gradient: bool | None
    rate: str | None
    terms: tuple[tuple[float, int], ...]


#: Table I of Toghani & Uribe 2022, in the paper's order (its last row is Theorem 1)
TABLE_I: tuple[RateRow, ...] = (
    RateRow("FedAvg", "McMahan et al. 2017", False, False, None, None, ()),
    RateRow("FedAvg", "Yu et al. 2019", False, False, None, _SQRT_T, ((-0.5, 0),)),
    RateRow("FedAvg", "Wang et al. 2020", False, False, None, _SQRT_T, ((-0.5, 0),)),
    RateRow("FedAsync", "Xie et al. 2020", True, False, False, _ASYNC, ((-0.5, 0), (-1.0, 2))),
    RateRow("FedBuff", "Nguyen et al. 2022", True, True, False, _ASYNC, ((-0.5, 0), (-1.0, 2))),
    RateRow("FedBuff", "Toghani & Uribe 2022", True, True, True, _ASYNC, ((-0.5, 0), (-1.0, 2))),
)

_MARKS = {True: "yes", False: "no", None: "not stated"}
_HEADER = (
    "| algorithm | analysis | asynchronous update | buffered aggregation | unbounded gradient "
    "| rate |\n|---|---|---|---|---|---|"
)


def render_table(rows: Sequence[RateRow] = TABLE_I) -> str:
    """``rows`` (default: all of Table I) as a markdown table, one line per row.

    The property columns read "yes", "no" or "not stated"; a row without a rate reads "-".

    Raises
    ------
    ParameterError
        ``rows`` holds something other than :class:`RateRow`.
    """
    lines = [_HEADER]
    for row in rows:
        if not isinstance(row, RateRow):
            raise ParameterError(f"render_table: rows must be RateRow objects, got {row!r}")
        marks = (row.asynchronous, row.buffered, row.unbounded_gradient)
        cells = (row.algorithm, row.analysis, *(_MARKS[m] for m in marks), row.rate or "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)

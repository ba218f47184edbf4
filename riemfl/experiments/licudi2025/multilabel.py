"""The metrics of Licudi et al. 2025, Table 2 (CXR8): macro AUROC, macro AUPRC and T_e.

* :func:`multilabel_scores`: the per-label AUROC (rank, i.e. Mann-Whitney, formula; tied scores
  count 1/2 per positive/negative pair) and average precision (the step-wise area under the
  precision-recall curve, no interpolation) of :func:`riemfl.nn.binary_auroc` and
  :func:`riemfl.nn.average_precision`, and their unweighted means over the labels ("macro");
  the same means as :func:`riemfl.nn.macro_auroc_auprc`, with the per-label values and the labels
  left out of each mean;
* :func:`auroc_t_e`: T_e on CXR8, the first clock reading whose error 1 - AUROC is at most e
  (Licudi et al. 2025, Sec. 4.2: e = 0.25, :data:`CXR8_TARGET_ERROR`), by
  :func:`riemfl.experiments.equal_work.first_reached` (the T_e of Table 1).

**Labels with one class.** A label whose evaluation rows are all negative or all positive has no
AUROC (no positive/negative pair); one without a positive row has no average precision. Such a
label is left out of that mean and named in :attr:`MultilabelScores.skipped_auroc` /
:attr:`~MultilabelScores.skipped_auprc` (an all-positive label keeps its average precision, 1).
scikit-learn's ``roc_auc_score(average="macro")`` raises on such a label instead; on labels with
both classes the means are equal to scikit-learn's (tested). A mean over no label is NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ShapeError
from ..equal_work import first_reached

__all__ = ["CXR8_TARGET_ERROR", "MultilabelScores", "auroc_t_e", "multilabel_scores"]

#: T_e's target error on CXR8, error = 1 - macro AUROC (Licudi et al. 2025, Sec. 4.2)
CXR8_TARGET_ERROR = 0.25


@dataclass(frozen=True)
class MultilabelScores:
    """Macro and per-label AUROC and average precision of one evaluation.

    Attributes
    ----------
    macro_auroc, macro_auprc : float
        Unweighted means over the labels where each is defined (NaN if none is).
    auroc, auprc : tuple of float
        Per label, in the column order; NaN where undefined.
    labels : tuple of str
        The label names (the column indices as strings when none were given).
    skipped_auroc, skipped_auprc : tuple of str
        The labels left out of each mean (one class only; no positive).
    """

    macro_auroc: float
    macro_auprc: float
    auroc: tuple[float, ...]
    auprc: tuple[float, ...]
    labels: tuple[str, ...]
    skipped_auroc: tuple[str, ...]
    skipped_auprc: tuple[str, ...]


def _mean(values: np.ndarray) -> float:
    defined = values[~np.isnan(values)]
    return float(defined.mean()) if defined.size else math.nan


def multilabel_scores(
    y_true: Any, scores: Any, labels: Sequence[str] | None = None
) -> MultilabelScores:
    """Macro AUROC and macro AUPRC of multi-hot targets and per-label scores.

    Parameters
    ----------
    y_true : array-like, shape (n, K)
        Multi-hot targets, 0 or 1.
    scores : array-like, shape (n, K)
        Any score increasing with the label's probability (logits or probabilities), finite.
    labels : sequence of str, optional
        The K label names (e.g. :data:`riemfl.experiments.licudi2025.cxr8.PAPER_CONDITIONS`).

    Returns
    -------
    MultilabelScores

    Raises
    ------
    ShapeError
        For shapes that are not one (n, K), targets other than 0/1, non-finite scores, or a
        number of label names other than K.
    """
    from ...nn import average_precision, binary_auroc

    y = np.asarray(y_true)
    s = np.asarray(scores, dtype=np.float64)
    if y.ndim != 2 or y.shape != s.shape:
        raise ShapeError(
            f"multilabel_scores: targets {y.shape} and scores {s.shape} must be one (n, K)"
        )
    if y.size and not np.isin(y, (0, 1)).all():
        raise ShapeError("multilabel_scores: targets must be 0 or 1")
    if not np.isfinite(s).all():
        raise ShapeError("multilabel_scores: scores contain NaN or infinite values")
    names = tuple(str(k) for k in range(y.shape[1])) if labels is None else tuple(labels)
    if len(names) != y.shape[1]:
        raise ShapeError(f"multilabel_scores: {len(names)} label names for {y.shape[1]} labels")
    roc = np.array([binary_auroc(y[:, k], s[:, k]) for k in range(y.shape[1])])
    ap = np.array([average_precision(y[:, k], s[:, k]) for k in range(y.shape[1])])
    return MultilabelScores(
        macro_auroc=_mean(roc),
        macro_auprc=_mean(ap),
        auroc=tuple(float(v) for v in roc),
        auprc=tuple(float(v) for v in ap),
        labels=names,
        skipped_auroc=tuple(n for n, v in zip(names, roc, strict=True) if np.isnan(v)),
        skipped_auprc=tuple(n for n, v in zip(names, ap, strict=True) if np.isnan(v)),
    )


def auroc_t_e(
    clock: Sequence[float], aurocs: Sequence[float], e: float = CXR8_TARGET_ERROR
) -> float | None:
    """T_e on CXR8: the reading of ``clock`` at the first evaluation with 1 - AUROC <= ``e``.

    Parameters
    ----------
    clock : sequence of float
        The clock of each evaluation (server steps for the paper's T_e, in rounds), non-decreasing.
    aurocs : sequence of float
        The global model's macro AUROC at each evaluation (NaN never reaches the target).
    e : float, default 0.25
        The target error (Licudi et al. 2025, Sec. 4.2).

    Returns
    -------
    float or None
        None when no evaluation reaches the target.
    """
    errors = 1.0 - np.asarray(aurocs, dtype=np.float64)
    return first_reached(clock, errors, e)

r"""Reporting metrics of the asynchronous experiments: fairness, time to target error, staleness.

* :func:`gini`, :func:`theil`: inequality of the per-client accuracies of the best global model,
  unweighted over the clients (Licudi et al. 2025, Sec. 4.2.1, App. B.4, eqs. (48)-(49); Sen &
  Foster 1973). 0 means every client has the same accuracy; both are invariant to scaling all
  accuracies by c > 0.
* :func:`time_to_error`: :math:`T_e`, the first server step whose error is at most e
  (Licudi et al. 2025, Sec. 4.2 and Table 1; e = 0.20 FEMNIST, 0.50 Shakespeare, 0.25 CXR8 with
  error = 1 - AUROC).
* :func:`staleness_summary`: mean, standard deviation, max and percentiles of the staleness
  tau - t (server steps between a client's download and its update's arrival).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._validation import real
from ..errors import ParameterError

__all__ = ["gini", "theil", "time_to_error", "staleness_summary"]


def _accuracies(acc: Any, name: str) -> np.ndarray:
    try:
        x = np.asarray(acc, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(f"{name}: acc must be a 1-D array of numbers") from None
    if x.ndim != 1 or x.size == 0:
        raise ParameterError(f"{name}: acc must be a non-empty 1-D array, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ParameterError(
            f"{name}: acc contains NaN or infinite values (drop the clients without test data, "
            "e.g. acc[~np.isnan(acc)])"
        )
    if (x < 0).any():
        raise ParameterError(f"{name}: acc must be >= 0, got min {x.min()}")
    if x.mean() == 0:
        raise ParameterError(f"{name}: the mean accuracy is 0, so the index is undefined")
    return x


def gini(acc: Any) -> float:
    r"""Gini coefficient of the per-client accuracies (Licudi et al. 2025, eq. (48)):

    .. math::

        \mathrm{Gini}(X) = \frac{1}{2 N^2 \bar X} \sum_{i=1}^N \sum_{j=1}^N |x_i - x_j|.

    Computed in O(N log N) with the sorted values :math:`x_{(1)} \le \dots \le x_{(N)}`:
    :math:`\sum_{i,j} |x_i - x_j| = 2 \sum_k (2k - N - 1)\, x_{(k)}`.

    Parameters
    ----------
    acc : array-like, shape (N,)
        Non-negative values with a positive mean (accuracies, or AUROCs for CXR8).

    Returns
    -------
    float
        In [0, 1 - 1/N]; 0 iff all values are equal.

    Raises
    ------
    ParameterError
        For an empty or non-1-D input, NaN/inf, negative values or a zero mean.
    """
    x = np.sort(_accuracies(acc, "gini"))
    n = x.size
    k = np.arange(1, n + 1)
    pair_sum = 2.0 * np.dot(2 * k - n - 1, x)
    return float(max(pair_sum, 0.0) / (2.0 * n * n * x.mean()))


def theil(acc: Any) -> float:
    r"""Theil index (T_T) of the per-client accuracies (Licudi et al. 2025, eq. (49)):

    .. math::

        \mathrm{Theil}(X) = \frac{1}{N \bar X} \sum_{i=1}^N x_i \log\frac{x_i}{\bar X},

    natural logarithm, with :math:`0 \log 0 = 0` (a client at accuracy 0 contributes 0).

    Returns
    -------
    float
        In [0, log N]; 0 iff all values are equal.

    Raises
    ------
    ParameterError
        As :func:`gini`.
    """
    x = _accuracies(acc, "theil")
    m = x.mean()
    pos = x[x > 0]
    value = float(np.sum(pos * np.log(pos / m)) / (x.size * m))
    return max(value, 0.0)  # >= 0 by Jensen; clip the -1e-17 of rounding


def time_to_error(
    errors: Sequence[float] | np.ndarray, e: float, steps: Sequence[int] | None = None
) -> int | None:
    r"""T_e: the first server step whose error is at most ``e``; None if never reached.

    Parameters
    ----------
    errors : sequence of float
        The global model's error (1 - accuracy, or 1 - AUROC) in the order evaluated.
    e : float
        The target error.
    steps : sequence of int, optional
        The server step of each entry of ``errors``. Default: ``errors[k]`` is step k (so
        ``errors[0]`` is the initial model, step 0); pass ``steps`` when the history evaluates
        every few steps or starts at step 1.

    Returns
    -------
    int or None
        ``steps[k]`` for the first k with ``errors[k] <= e`` (NaN never qualifies).
    """
    err = np.asarray(errors, dtype=np.float64)
    if err.ndim != 1:
        raise ParameterError(f"time_to_error: errors must be 1-D, got shape {err.shape}")
    real(e, "time_to_error: e")
    if steps is not None:
        st = np.asarray(steps)
        if st.shape != err.shape or not (st.size == 0 or np.issubdtype(st.dtype, np.integer)):
            raise ParameterError(
                f"time_to_error: steps must be ints of shape {err.shape}, got {st.shape} {st.dtype}"
            )
    hits = np.flatnonzero(err <= e)
    if hits.size == 0:
        return None
    k = int(hits[0])
    return int(steps[k]) if steps is not None else k


def staleness_summary(staleness_list: Sequence[int] | np.ndarray) -> dict[str, float]:
    """Summary of the staleness tau - t of the applied updates.

    Parameters
    ----------
    staleness_list : sequence of int
        One non-negative staleness per received update.

    Returns
    -------
    dict
        ``count``, ``mean``, ``std`` (population, ddof = 0), ``max``, ``p50`` and ``p90``
        (numpy's linear-interpolation percentiles); every value but ``count`` is NaN for an empty
        list.
    """
    s = np.asarray(staleness_list, dtype=np.float64)
    if s.ndim != 1:
        raise ParameterError(f"staleness_summary: expected a 1-D list, got shape {s.shape}")
    if s.size == 0:
        nan = float("nan")
        return {"count": 0.0, "mean": nan, "std": nan, "max": nan, "p50": nan, "p90": nan}
    if not np.isfinite(s).all() or (s < 0).any():
        raise ParameterError("staleness_summary: staleness values must be finite and >= 0")
    p50, p90 = np.percentile(s, [50, 90])
    return {
        "count": float(s.size),
        "mean": float(s.mean()),
        "std": float(s.std()),
        "max": float(s.max()),
        "p50": float(p50),
        "p90": float(p90),
    }

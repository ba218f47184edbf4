r"""Routing diagnostics when the true clusters are known (synthetic and clustered tasks).

* :func:`cluster_recovery`: the fraction of clients whose router's most likely cluster is their
  true cluster, under the best matching of learned to true cluster labels (the labels of a
  learned mixture are arbitrary: any permutation of the adaptors is the same model);
* :func:`aggregation_mismatch`: the total variation :math:`\|\delta_c\|_1 = \sum_k |\hat
  p(k|c) - p(k|c)|` between the estimated and the true aggregation weights of eq. (2), the
  "aggregation mismatch" of Almansoori et al. 2024 (Sec. 4, before Theorem 4.5), after that
  matching.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from ...errors import ShapeError
from .aggregation import cluster_probabilities

__all__ = ["cluster_recovery", "aggregation_mismatch"]


def _check(pi: np.ndarray, clusters: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pi = np.asarray(pi, dtype=np.float64)
    clusters = np.asarray(clusters)
    if pi.ndim != 2 or clusters.shape != (pi.shape[0],):
        raise ShapeError(
            f"pi must be (K, C) and clusters (K,), got {pi.shape} and {clusters.shape}"
        )
    if clusters.size and (clusters.min() < 0 or clusters.max() >= pi.shape[1]):
        raise ShapeError(f"cluster labels must lie in 0..{pi.shape[1] - 1}")
    return pi, clusters.astype(np.intp)


def best_matching(pi: np.ndarray, clusters: np.ndarray) -> np.ndarray:
    """``perm`` with ``perm[true] = learned``: the matching that maximises agreement."""
    pi, clusters = _check(pi, clusters)
    c = pi.shape[1]
    agree = np.zeros((c, c))
    np.add.at(agree, (clusters, pi.argmax(1)), 1.0)
    rows, cols = linear_sum_assignment(-agree)
    perm = np.empty(c, dtype=np.intp)
    perm[rows] = cols
    return perm


def cluster_recovery(pi: np.ndarray, clusters: np.ndarray) -> float:
    """Fraction of clients with ``argmax pi^k`` = their true cluster, best label matching.

    Parameters
    ----------
    pi : array (K, C)
        Router probabilities.
    clusters : array (K,) of int
        True clusters in 0..C-1.
    """
    pi, clusters = _check(pi, clusters)
    perm = best_matching(pi, clusters)
    return float(np.mean(pi.argmax(1) == perm[clusters]))


def aggregation_mismatch(pi: np.ndarray, clusters: np.ndarray, n_samples: np.ndarray) -> np.ndarray:
    r""":math:`\|\delta_c\|_1` per true cluster c, with :math:`\pi^*` the one-hot truth.

    Returns
    -------
    array (C,)
        In [0, 2]; 0 when the router puts all mass on the (matched) true cluster.
    """
    pi, clusters = _check(pi, clusters)
    c = pi.shape[1]
    perm = best_matching(pi, clusters)
    truth = np.eye(c)[clusters]
    estimated = cluster_probabilities(pi[:, perm], n_samples).p_k_given_c
    exact = cluster_probabilities(truth, n_samples).p_k_given_c
    return np.abs(estimated - exact).sum(0)

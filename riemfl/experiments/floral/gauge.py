"""The gauge check: which aggregation of FLoRAL's adaptors notices a change of factor gauge?

A client's adaptor A B^T is unchanged when its factors become (A G, B G^-T) for any invertible
G. Averaging the factors (the paper's Algorithm 1) depends on the gauge; averaging the products
and retracting with the truncated SVD (riemfl's manifold-aware rule) does not.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["gauge_check", "products"]


def gauge_check(trainer: Any, x: np.ndarray, seed: int) -> dict[str, float]:
    """Change every client's factor gauge (A G, B G^-T): which aggregation notices?

    Eight simulated uploads are the trained global vector plus small perturbations of every
    adaptor; each client's factors are then re-expressed in a random gauge G_k (condition
    number <= 4), which leaves its adaptors A B^T unchanged. The aggregate of each rule with
    and without the gauges is compared (relative Frobenius difference of the adaptors).

    Parameters
    ----------
    trainer : riemfl.nn.floral.FloralTrainer
        Its ``layout`` names the factor pairs.
    x : numpy.ndarray
        The trained global parameter vector.
    seed : int
        Seed of the perturbations, gauges and routing weights.

    Returns
    -------
    dict
        ``{"factors": ..., "products": ...}``: each rule's relative change of the aggregated
        adaptors.
    """
    from ...nn.floral import FloralAggregator

    lay = trainer.layout
    rng = np.random.default_rng(seed)
    k = 8
    uploads = x + 0.05 * np.abs(x).mean() * rng.standard_normal((k, x.size))
    arrays = lay.split(uploads)
    gauged = {name: np.array(v) for name, v in arrays.items()}
    for pair in lay.factor_pairs:
        a = pair.out_view.to_matrix(arrays[pair.out_name])
        b = pair.in_view.to_matrix(arrays[pair.in_name])
        r = a.shape[-1]
        q = np.linalg.qr(rng.standard_normal((k, a.shape[1], r, r)))[0]
        g = q * rng.uniform(0.5, 2.0, (k, a.shape[1], 1, r))  # orthogonal times scales
        gauged[pair.out_name] = pair.out_view.from_matrix(a @ g)
        gauged[pair.in_name] = pair.in_view.from_matrix(b @ np.linalg.inv(g).swapaxes(-1, -2))
    gauged_uploads = lay.join(gauged)
    n = np.full(k, 10.0)
    pi = rng.dirichlet(np.ones(lay.n_clusters), size=k)
    out = {}
    for adaptors in ("factors", "products"):
        agg = FloralAggregator(lay, adaptors)
        plain, _ = agg.aggregate(x, uploads, n, pi)
        moved, _ = agg.aggregate(x, gauged_uploads, n, pi)
        num = den = 0.0
        for pair in lay.factor_pairs:
            p1 = products(pair, lay.split(plain))
            p2 = products(pair, lay.split(moved))
            num += float(np.sum((p1 - p2) ** 2))
            den += float(np.sum(p1**2))
        out[adaptors] = math.sqrt(num / den)
    return out


def products(pair: Any, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """The adaptors A B^T of one factor pair (:class:`riemfl.nn.floral.layout.FactorPair`).

    Parameters
    ----------
    pair : riemfl.nn.floral.layout.FactorPair
        Names and matrix views of the factors A (``out``) and B (``in``).
    arrays : dict of str to numpy.ndarray
        A split parameter vector (or a stack of them).

    Returns
    -------
    numpy.ndarray
    """
    a = pair.out_view.to_matrix(arrays[pair.out_name])
    b = pair.in_view.to_matrix(arrays[pair.in_name])
    return a @ np.swapaxes(b, -1, -2)

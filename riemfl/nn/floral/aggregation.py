r"""Server aggregation of FLoRAL (Almansoori et al. 2024, eq. (2), Alg. 1): pure functions.

**Probabilities, eq. (2).** With :math:`p(k) = N^k/N` and :math:`p(c|k) = \pi^k_c`:

.. math::

    p(k, c) = \frac{N^k}{N}\pi^k_c,\qquad p(c) = \sum_k \frac{N^k}{N}\pi^k_c,\qquad
    p(k|c) = \frac{\pi^k_c N^k}{\sum_{k'} \pi^{k'}_c N^{k'}} =: p^k_c.

Over a round's participants S (N = their total), these are the aggregation weights of
Algorithm 1 ("Simple FLoRAL Averaging"):

.. math::

    u \leftarrow \frac{\sum_{k\in S} N^k u^k}{\sum_{k\in S} N^k},\qquad
    a_c \leftarrow \frac{\sum_{k\in S} \hat\pi^k_c N^k a^k_c}{\sum_{k\in S} \hat\pi^k_c N^k}
    = \mathbb{E}_{k|c}[a^k_c],

with :math:`\hat\pi^k` the client's router at the end of its local epoch (Alg. 1, line 12:
:math:`\hat\pi^k_{c,\tau+H}`). The adaptors are averaged **factor-wise**: Sec. 4 writes a LoRA
adaptor as :math:`a_c = (\mathrm{vec}\,U_c, \mathrm{vec}\,V_c)`, so Alg. 1 multiplies each
factor by :math:`p(k|c)` and sums.

**Manifold-aware aggregation (riemfl's addition; not in the paper).** Factor averaging is not
gauge-invariant: :math:`(A, B) \sim (AG, BG^{-\top})` give the same adaptor :math:`AB^\top` for
every invertible G, but
:math:`\sum_k p_k A_k B_k^\top \ne (\sum_k p_k A_k)(\sum_k p_k B_k)^\top`.
:func:`average_products` averages the adaptor products in the ambient space and retracts to the
fixed-rank manifold :math:`\mathcal M_r` with the truncated SVD
(:class:`~riemfl.manifolds.FixedRank` ``project``, Eckart-Young):

.. math::

    \bar X_c = \sum_k p^k_c A^k_c B^{k\top}_c,\qquad X_c = P_r(\bar X_c) = U_r S_r V_r^\top,
    \qquad (A_c, B_c) = (U_r S_r^{1/2}, V_r S_r^{1/2}),

which depends on the clients' products only, hence is gauge-invariant (the new factors are the
balanced representative, ``FixedRank.to_factors``). The retraction is the truncated SVD with
p = q = 2 that the paper's LoRA centering uses (App. E, eq. (37)), where it notes that
factor-wise operations "would not really preserve the parameterization".

**Centering (App. E; "experimental", not used in the paper's results).** The model
:math:`u + \sum_c \pi_c a_c` is unchanged by :math:`u \leftarrow u + \mathbb E_c[a_c]`,
:math:`a_c \leftarrow a_c - \mathbb E_c[a_c]` (:math:`\mathbb E_c` with the weights
:math:`p(c)` of eq. (2)), which centres the adaptors around zero. For a LoRA the products are
centred and the factors taken back by the truncated SVD, eq. (37):

.. math::

    (U, \Sigma, V) = \text{TruncSVD}_r\bigl(A_c B_c^\top - \mathbb E_c[A_c B_c^\top]\bigr),
    \qquad A_c \leftarrow U\Sigma^{1/p},\quad B_c \leftarrow V\Sigma^{1/q},\quad
    \tfrac1p + \tfrac1q = 1

(:func:`center_products`; additive adaptors: :func:`center_additive`; a whole model, in place:
:func:`center_adaptors`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..._validation import real
from ...errors import ParameterError, ProjectionError, ShapeError
from .adaptor import MixtureAdaptor
from .norm import MixtureNorm

__all__ = [
    "ClusterProbabilities",
    "cluster_probabilities",
    "average_base",
    "average_clusters",
    "average_products",
    "retract_products",
    "factor_average_error",
    "center_additive",
    "center_products",
    "center_adaptors",
]

_SIMPLEX_TOL = 1e-5


@dataclass(frozen=True)
class ClusterProbabilities:
    """The joint and conditional probabilities of eq. (2) over K clients and C clusters.

    Attributes
    ----------
    p_k : (K,)
        :math:`p(k) = N^k / N`.
    p_c_given_k : (K, C)
        :math:`p(c|k) = \\pi^k_c`.
    p_kc : (K, C)
        :math:`p(k, c) = p(k)\\,\\pi^k_c`.
    p_c : (C,)
        :math:`p(c) = \\sum_k p(k, c)`.
    p_k_given_c : (K, C)
        :math:`p(k|c) = p(k, c) / p(c)`; column c is 0 where :math:`p(c) = 0`.
    empty : (C,) bool
        Clusters with :math:`p(c) = 0` (no participant routes to them): their
        :math:`p(k|c)` is undefined and they keep their previous adaptors.
    """

    p_k: np.ndarray
    p_c_given_k: np.ndarray
    p_kc: np.ndarray
    p_c: np.ndarray
    p_k_given_c: np.ndarray
    empty: np.ndarray


def _check_weights(pi: np.ndarray, n_samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pi = np.asarray(pi, dtype=np.float64)
    n = np.asarray(n_samples, dtype=np.float64)
    if pi.ndim != 2:
        raise ShapeError(f"pi must have shape (K, C), got {pi.shape}")
    if n.shape != (pi.shape[0],):
        raise ShapeError(
            f"n_samples must have shape ({pi.shape[0]},) (one per client), got {n.shape}"
        )
    if not (np.isfinite(pi).all() and np.isfinite(n).all()):
        raise ParameterError("pi and n_samples must be finite")
    if (pi < 0).any() or np.abs(pi.sum(1) - 1).max(initial=0) > _SIMPLEX_TOL:
        raise ParameterError(
            "every row of pi must lie on the simplex (entries >= 0 summing to 1); row sums "
            f"{pi.sum(1)}"
        )
    if (n < 0).any() or n.sum() <= 0:
        raise ParameterError(f"n_samples must be >= 0 with a positive total, got {n}")
    return pi, n


def cluster_probabilities(pi: np.ndarray, n_samples: np.ndarray) -> ClusterProbabilities:
    """Eq. (2): :math:`p(k), p(c|k), p(k,c), p(c), p(k|c)` from routers and sample counts.

    Parameters
    ----------
    pi : array (K, C)
        The clients' router probabilities (rows on the simplex, within 1e-5).
    n_samples : array (K,)
        :math:`N^k` (>= 0, positive total).

    Raises
    ------
    ShapeError, ParameterError
        For mismatched shapes, non-finite values, rows off the simplex, or no samples at all.
    """
    pi, n = _check_weights(pi, n_samples)
    p_k = n / n.sum()
    p_kc = p_k[:, None] * pi
    p_c = p_kc.sum(0)
    empty = p_c <= 0
    p_k_given_c = np.where(empty, 0.0, p_kc / np.where(empty, 1.0, p_c))
    return ClusterProbabilities(p_k, pi, p_kc, p_c, p_k_given_c, empty)


def average_base(values: np.ndarray, n_samples: np.ndarray) -> np.ndarray:
    r""":math:`\sum_k N^k u^k / \sum_k N^k` over the leading (client) axis of ``values``."""
    values = np.asarray(values, dtype=np.float64)
    n = np.asarray(n_samples, dtype=np.float64)
    if values.shape[:1] != n.shape or n.ndim != 1:
        raise ShapeError(f"{values.shape[0]} client rows but n_samples of shape {n.shape}")
    if (n < 0).any() or n.sum() <= 0:
        raise ParameterError(f"n_samples must be >= 0 with a positive total, got {n}")
    return np.tensordot(n / n.sum(), values, axes=1)


def average_clusters(
    values: np.ndarray,
    probabilities: ClusterProbabilities,
    previous: np.ndarray | None = None,
) -> np.ndarray:
    r"""Per-cluster averages :math:`\sum_k p(k|c)\, a^k_c` (Algorithm 1's adaptor step).

    Parameters
    ----------
    values : array (K, C, ...)
        Each client's C cluster slices (adaptor factors, or the ensemble's models).
    probabilities : ClusterProbabilities
        From :func:`cluster_probabilities` of the same K clients.
    previous : array (C, ...), optional
        Kept for the empty clusters (:math:`p(c) = 0`); required when one is empty.

    Returns
    -------
    array (C, ...)
    """
    values = np.asarray(values, dtype=np.float64)
    w = probabilities.p_k_given_c
    if values.shape[:2] != w.shape:
        raise ShapeError(f"values have leading shape {values.shape[:2]}; expected {w.shape} (K, C)")
    out = np.einsum("kc,kc...->c...", w, values)
    if probabilities.empty.any():
        if previous is None:
            raise ParameterError(
                f"clusters {np.flatnonzero(probabilities.empty).tolist()} have p(c) = 0 (no "
                "participant routes to them): pass previous to keep their adaptors"
            )
        out[probabilities.empty] = np.asarray(previous, dtype=np.float64)[probabilities.empty]
    return out


def retract_products(
    x: np.ndarray, rank: int, fallback: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, int]:
    r"""Balanced rank-r factors of :math:`P_r(X_c)` for a stack of matrices (C, m, n).

    :math:`P_r` is ``FixedRank(m, n, r).project`` (truncated SVD), the factors
    ``FixedRank.to_factors`` (:math:`U_r S_r^{1/2}`, :math:`V_r S_r^{1/2}`). Where
    :math:`P_r(X_c)` does not exist on :math:`\mathcal M_r` because :math:`X_c` has numerical
    rank below r (e.g. every output factor is still zero in the first round) the ``fallback``
    factors of that cluster are returned instead, and counted.

    Returns
    -------
    (A (C, m, r), B (C, n, r), number of fallbacks)

    Raises
    ------
    ProjectionError
        When :math:`\sigma_r(X_c) = \sigma_{r+1}(X_c) > 0`: the truncation is not unique.
    """
    from ...manifolds import FixedRank

    c, m, n = x.shape
    manifold = FixedRank(m, n, rank)
    tol = max(m, n) * np.finfo(np.float64).eps  # FixedRank's default relative tolerance
    a_out = np.array(fallback[0], dtype=np.float64, copy=True)
    b_out = np.array(fallback[1], dtype=np.float64, copy=True)
    fallbacks = 0
    for j in range(c):
        s = np.linalg.svd(x[j], compute_uv=False)
        if s[0] == 0 or s[rank - 1] <= tol * s[0]:
            fallbacks += 1
            continue
        try:
            point = manifold.project(x[j])
        except ProjectionError as exc:
            raise ProjectionError(f"manifold-aware aggregation, cluster {j}: {exc}") from exc
        a_out[j], b_out[j] = manifold.to_factors(point)
    return a_out, b_out, fallbacks


def average_products(
    a: np.ndarray,
    b: np.ndarray,
    probabilities: ClusterProbabilities,
    previous: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    r"""Manifold-aware adaptor aggregation (module docstring): average products, retract.

    Parameters
    ----------
    a : array (K, C, m, r)
        Output-side factors :math:`A^k_c` of the K clients.
    b : array (K, C, n, r)
        Input-side factors :math:`B^k_c`.
    probabilities : ClusterProbabilities
    previous : (array (C, m, r), array (C, n, r)), optional
        The current global factors: kept for empty clusters.

    Returns
    -------
    (A (C, m, r), B (C, n, r), fallbacks)
        Balanced factors of :math:`P_r(\sum_k p(k|c) A^k_c B^{k\top}_c)`; where that
        product has rank < r, the factor average (Algorithm 1) and a count of such clusters.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 4 or b.ndim != 4 or a.shape[:2] != b.shape[:2] or a.shape[3] != b.shape[3]:
        raise ShapeError(f"factors must be (K, C, m, r) and (K, C, n, r), got {a.shape}, {b.shape}")
    w = probabilities.p_k_given_c
    x = np.einsum("kc,kcmr,kcnr->cmn", w, a, b)
    prev_a = None if previous is None else previous[0]
    prev_b = None if previous is None else previous[1]
    fallback = (
        average_clusters(a, probabilities, prev_a),
        average_clusters(b, probabilities, prev_b),
    )
    new_a, new_b, fallbacks = retract_products(x, a.shape[3], fallback)
    if probabilities.empty.any():  # keep the previous factors, not a retraction of zero
        new_a[probabilities.empty] = fallback[0][probabilities.empty]
        new_b[probabilities.empty] = fallback[1][probabilities.empty]
    return new_a, new_b, fallbacks


def factor_average_error(a: np.ndarray, b: np.ndarray, weights: np.ndarray) -> np.ndarray:
    r"""How far factor averaging is from averaging adaptors, per cluster (riemfl's diagnostic).

    .. math::

        e_c = \frac{\|\sum_k p_k A_k B_k^\top - (\sum_k p_k A_k)(\sum_k p_k B_k)^\top\|_F}
                   {\|\sum_k p_k A_k B_k^\top\|_F}

    with :math:`p_k = p(k|c)` (``weights``, (K, C)); 0 when all clients hold the same factors,
    NaN for a cluster whose mean product is 0.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    mean_product = np.einsum("kc,kcmr,kcnr->cmn", w, a, b)
    product_of_means = np.einsum("kc,kcmr->cmr", w, a) @ np.swapaxes(
        np.einsum("kc,kcnr->cnr", w, b), -1, -2
    )
    num = np.linalg.norm(mean_product - product_of_means, axis=(1, 2))
    den = np.linalg.norm(mean_product, axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


# ----------------------------------------------------------------------------- centering (App. E)
def _cluster_weights(p_c: Any, n_clusters: int) -> np.ndarray:
    p = np.asarray(p_c, dtype=np.float64)
    if p.shape != (n_clusters,):
        raise ShapeError(f"centering: p(c) must have shape ({n_clusters},), got {p.shape}")
    if not np.isfinite(p).all() or (p < 0).any() or abs(p.sum() - 1.0) > _SIMPLEX_TOL:
        raise ParameterError(
            f"centering: p(c) must lie on the simplex (entries >= 0 summing to 1), got {p}"
        )
    return p


def center_additive(values: np.ndarray, p_c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""App. E for additive adaptors: :math:`\mathbb E_c[a_c] = \sum_c p(c)\, a_c` and the
    centred :math:`a_c - \mathbb E_c[a_c]`.

    Parameters
    ----------
    values : array (C, ...)
        The C adaptors (bias or normalisation adaptors).
    p_c : array (C,)
        :math:`p(c)` (eq. (2); :attr:`ClusterProbabilities.p_c`), on the simplex.

    Returns
    -------
    (array (...), array (C, ...))
        The mean, which the base absorbs, and the centred adaptors.

    Raises
    ------
    ShapeError, ParameterError
        For ``p_c`` not of length C or off the simplex.
    """
    values = np.asarray(values, dtype=np.float64)
    p = _cluster_weights(p_c, values.shape[0])
    mean = np.tensordot(p, values, axes=1)
    return mean, values - mean


def center_products(
    a: np.ndarray, b: np.ndarray, p_c: np.ndarray, p: float = 2.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""App. E, eq. (37): centre the LoRA products and take rank-r factors back.

    Parameters
    ----------
    a : array (C, m, r)
        Output-side factors :math:`A_c` (the paper's :math:`U_c`).
    b : array (C, n, r)
        Input-side factors :math:`B_c` (:math:`V_c`).
    p_c : array (C,)
        :math:`p(c)`, on the simplex.
    p : float, default 2
        The exponent of eq. (37), :math:`p \ge 1` (:math:`1/q = 1 - 1/p`); 2 is "standard",
        the paper leaves the best choice open.

    Returns
    -------
    (array (m, n), array (C, m, r), array (C, n, r))
        :math:`M = \mathbb E_c[A_c B_c^\top]` (the base absorbs it) and the factors
        :math:`U\Sigma^{1/p}`, :math:`V\Sigma^{1/q}` of the truncated SVD of
        :math:`A_c B_c^\top - M`. The truncation keeps the products exactly where the centred
        product has rank at most r (e.g. C = 2: :math:`A_1B_1^\top - M = p(2)(A_1B_1^\top -
        A_2B_2^\top)`, rank up to 2r); otherwise it is the closest rank-r matrix
        (Eckart-Young), as eq. (37) intends. Zero singular values give zero columns in both
        factors, which then receive no gradient (C = 1 centres the adaptor to zero).

    Raises
    ------
    ShapeError, ParameterError
        For factors of mismatched shapes, ``p_c`` off the simplex, or ``p < 1``.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[2]:
        raise ShapeError(f"factors must be (C, m, r) and (C, n, r), got {a.shape}, {b.shape}")
    weights = _cluster_weights(p_c, a.shape[0])
    p = real(p, "center_products: p", at_least=1)
    rank = a.shape[2]
    products = a @ np.swapaxes(b, -1, -2)
    mean = np.tensordot(weights, products, axes=1)
    u, sv, vt = np.linalg.svd(products - mean, full_matrices=False)
    u, sv, v = u[..., :rank], sv[..., :rank], np.swapaxes(vt, -1, -2)[..., :rank]
    return mean, u * sv[:, None, :] ** (1.0 / p), v * sv[:, None, :] ** (1.0 - 1.0 / p)


@torch.no_grad()
def center_adaptors(model: Any, p_c: Any, *, p: float = 2.0) -> None:
    r"""Centre every adaptor of a FLoRAL model in place (App. E; module docstring).

    Per adapted layer, with :math:`\alpha` the model's ``lora_scale``: LoRA layers
    :math:`W \leftarrow W + \alpha K(\mathbb E_c[A_c B_c^\top])` and the factors of
    :func:`center_products`; bias adaptors :math:`b \leftarrow b + \alpha\mathbb E_c[L_{b,c}]`
    (where the base has a bias); normalisation adaptors :math:`\gamma \leftarrow \gamma +
    \alpha\mathbb E_c[L_{\gamma,c}]` and likewise :math:`\beta`
    (:class:`~riemfl.nn.floral.MixtureNorm`). The model's output is unchanged when the mixture
    weights sum to :math:`\alpha` (no ``min_prob`` clamp in effect) up to the rank-r truncation
    of LoRA products; Batch NorA (eq. (42)) is unchanged in evaluation mode, and in training
    mode while the statistics ratio :math:`\hat s` is 1.

    Parameters
    ----------
    model : FloralModel
        Changed in place (e.g. the server's copy after aggregation, at synchronisation).
    p_c : array (C,)
        :math:`p(c)` (eq. (2)), on the simplex.
    p : float, default 2
        The exponent of eq. (37).

    Raises
    ------
    ShapeError, ParameterError
        For ``p_c`` not of length C or off the simplex, ``p < 1``, or a Batch NorA layer
        without the reparameterisation (``"nora_naive"``: its adaptor normalises with its own
        statistics, so moving the mean into the base changes the output).
    """
    alpha = float(model.context.lora_scale)
    for _, layer in model.named_modules():
        if isinstance(layer, MixtureAdaptor):
            a, b = (t.detach().double().cpu().numpy() for t in layer.factor_matrices())
            mean, new_a, new_b = center_products(a, b, p_c, p)
            base = layer.base
            delta = layer.weight_from_matrix(torch.from_numpy(alpha * mean))
            base.weight.add_(delta.to(base.weight))
            layer.lora_out.copy_(layer.out_view.from_matrix(torch.from_numpy(new_a)))
            layer.lora_in.copy_(layer.in_view.from_matrix(torch.from_numpy(new_b)))
            _center_into(layer.lora_bias, base.bias, p_c, alpha)
        elif isinstance(layer, MixtureNorm):
            if layer.variant == "nora_naive":
                raise ParameterError(
                    "center_adaptors: a Batch NorA layer without the reparameterisation "
                    "(variant 'nora_naive') normalises its adaptor with its own statistics; "
                    "centering would change its output"
                )
            _center_into(layer.lora_gamma, layer.base.weight, p_c, alpha)
            _center_into(layer.lora_bias, layer.base.bias, p_c, alpha)


def _center_into(
    lora: torch.Tensor | None, base: torch.Tensor | None, p_c: Any, alpha: float
) -> None:
    r"""Move :math:`\alpha\mathbb E_c` of the adaptors ``lora`` (C, ...) into ``base``."""
    if lora is None or base is None:
        return
    mean, centred = center_additive(lora.detach().double().cpu().numpy(), p_c)
    base.add_(torch.from_numpy(alpha * mean).to(base))
    lora.copy_(torch.from_numpy(centred).to(lora))

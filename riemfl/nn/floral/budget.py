r"""Adaptor ranks from the relative parameter budget rho, and parameter-count accounting.

**Rank from the budget** (Almansoori et al. 2024, Sec. 3.2). A LoRA of an m x n weight with
rank r has :math:`(m + n) r` parameters; the budget :math:`(m + n) r \le \rho\, m n` gives

.. math::

    r = \max\Bigl(1, \Bigl\lfloor \frac{\rho\, m n}{m + n} \Bigr\rfloor\Bigr),

with the minimum rank 1 enforced when :math:`\rho m n / (m + n) < 1` (then the adaptor exceeds
the budget, as Sec. 3.2 says). A convolution adaptor is a product of two convolutions whose
kernel, seen as a matrix, is :math:`A B^\top` with :math:`A \in \mathbb{R}^{m\times r}`,
:math:`B \in \mathbb{R}^{n\times r}`; the same rule applies to its matrix sizes m and n
(App. F.1 constrains the Balanced 2D adaptor "similarly to the linear layer"; the authors'
public code (zeligism/FLoRAL) computes ``resolve_rank(rho, c_in |k_in|, c_out |k_out|)``), see
:mod:`riemfl.nn.floral.conv`.

**Parameter increase** (Sec. 6, "Discussion"). With d base parameters and C clusters, FLoRAL
adds about :math:`C \rho d` parameters (plus the bias adaptors, which are not
parameter-efficient, Sec. 3.2), an ensemble of C full models adds :math:`(C - 1) d`.
:func:`nominal_increase` gives these two numbers; :func:`parameter_counts` counts a built model
exactly.
"""

from __future__ import annotations

import math
from typing import Any

from ..._validation import integer, real

__all__ = ["lora_rank", "check_rho", "nominal_increase", "parameter_counts"]


def check_rho(rho: Any, where: str) -> float:
    """``rho`` as a float in (0, 1], or :class:`ParameterError` naming ``where``."""
    return real(rho, f"{where}: rho", above=0, at_most=1)


def lora_rank(rho: float, m: int, n: int) -> int:
    r"""Rank of an m x n adaptor under the budget rho (Almansoori et al. 2024, Sec. 3.2).

    .. math::

        r = \max(1, \lfloor \rho\, m n / (m + n) \rfloor).

    Parameters
    ----------
    rho : float
        Relative budget in (0, 1] (FLoRAL uses 0.01 and 0.1).
    m, n : int
        Matrix sizes (linear: ``out_features``, ``in_features``).

    Returns
    -------
    int
        Never above ``min(m, n)`` (the budget itself keeps r below ``min(m, n)`` for rho <= 1,
        since :math:`mn/(m+n) < \min(m, n)`; the cap only matters for the enforced minimum on
        1 x n matrices).

    Examples
    --------
    >>> lora_rank(0.01, 200, 784), lora_rank(0.1, 200, 64), lora_rank(0.01, 10, 200)
    (1, 4, 1)
    """
    rho = check_rho(rho, "lora_rank")
    m, n = integer(m, "lora_rank: m", minimum=1), integer(n, "lora_rank: n", minimum=1)
    # the small guard keeps exact products such as 0.1 * 200 * 50 / 250 = 4 from flooring to 3
    r = math.floor(rho * m * n / (m + n) + 1e-9)
    return min(max(1, r), m, n)


def nominal_increase(d: int, n_clusters: int, rho: float) -> dict[str, float]:
    r"""The paper's parameter accounting: :math:`C\rho d` (FLoRAL) against :math:`(C-1)d`.

    Returns
    -------
    dict
        ``floral`` = :math:`C \rho d`, ``ensemble`` = :math:`(C - 1) d`, and the same as
        fractions of d (``floral_fraction``, ``ensemble_fraction``). Example (Sec. 6): d = 1000,
        C = 4, rho = 1% gives 40 against 3000.
    """
    d = integer(d, "nominal_increase: d", minimum=1)
    n_clusters = integer(n_clusters, "nominal_increase: n_clusters", minimum=1)
    rho = check_rho(rho, "nominal_increase")
    floral = n_clusters * rho * d
    ensemble = float((n_clusters - 1) * d)
    return {
        "floral": floral,
        "ensemble": ensemble,
        "floral_fraction": floral / d,
        "ensemble_fraction": ensemble / d,
    }


def parameter_counts(model: Any) -> dict[str, int | float]:
    """Exact parameter counts of a built model, by federated role.

    Parameters
    ----------
    model : torch.nn.Module
        A plain model (every parameter is "base"), a :class:`~riemfl.nn.floral.FloralModel`
        or an :class:`~riemfl.nn.floral.EnsembleModel` (their ``parameter_roles``).

    Returns
    -------
    dict
        ``base`` (d, the shared model), ``cluster`` (all adaptors, or the C stacked models of
        an ensemble), ``private`` (client-local adaptors), ``router`` (C logits per client),
        ``extra`` = cluster + private - (d for an ensemble, whose C models replace the base),
        and ``extra_fraction`` = extra / d where d is the size of one underlying model.
    """
    from .hooks import Ensemble
    from .layout import parameter_roles

    counts = {"base": 0, "cluster": 0, "private": 0, "router": 0}
    roles = parameter_roles(model)
    for name, p in model.named_parameters():
        counts[roles[name]] += p.numel()
    d = int(model.single_model_size) if isinstance(model, Ensemble) else counts["base"]
    extra = counts["cluster"] + counts["private"] + counts["base"] - d
    out: dict[str, int | float] = dict(counts)
    out["d"] = d
    out["extra"] = extra
    out["extra_fraction"] = extra / d if d else math.nan
    return out

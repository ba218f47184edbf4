"""The staleness penalty :math:`S^{t,\tau}` of Licudi et al. 2025, eq. (10)."""

from __future__ import annotations

from ...errors import ParameterError


def staleness_penalty(
    alpha: float, local_distance: float, drift_distance: float, eps: float = 0.1
) -> float:
    r"""Licudi et al. 2025, eq. (10): the staleness penalty, with the zero-drift case made finite.

    :math:`S^{t,\tau} = 1 + \alpha\,(\|\Theta^\tau - \hat\Theta^\tau\| / \|\Theta^t -
    \Theta^\tau\| - 1)` (printed :math:`S^{\tau,\tau}` in eq. (10), :math:`S^{t,\tau}` in eq.
    (11)).

    The ratio is :math:`1/\gamma` with AsyncFedED's staleness :math:`\gamma = \|\Theta^t -
    \Theta^\tau\| / \|\Theta^\tau - \hat\Theta^\tau\|` (Wang et al. 2022; the paper says eq. (10)
    is "inspired by" it, Sec. 3). Eq. (10) divides by zero when the global model has not moved
    (:math:`\gamma = 0`), and the paper does not say what to do; the guard replaces
    :math:`\gamma` by :math:`\max(\gamma, \varepsilon)`:

    .. math::  S = 1 + \alpha\left(\frac{1}{\max(\gamma, \varepsilon)} - 1\right),

    which is eq. (10) exactly wherever :math:`\gamma \ge \varepsilon` (with
    :math:`\alpha = 1`: 5 at :math:`\gamma = 0.2`, 2 at 0.5, 1 at 1) and the largest penalty,
    :math:`1 + \alpha(1/\varepsilon - 1)`, below. (AsyncFedED's own rate divides by
    :math:`\gamma + \varepsilon`, which changes every value: 3.33, 1.67 and 0.909 at those
    points.) A zero update (:math:`\hat\Theta^\tau = \Theta^\tau`) gives :math:`S = 1 - \alpha`.
    ``alpha = 0`` gives S = 1 (AsyncBezier), ``alpha = 1`` the AsyncFedED-style rate
    (AsyncBezierED).
    """
    if not 0.0 <= alpha <= 1.0:
        raise ParameterError(f"staleness decay alpha must be in [0, 1], got {alpha!r}")
    if alpha == 0.0:
        return 1.0
    if local_distance <= 0.0:
        return 1.0 - alpha
    gamma = drift_distance / local_distance
    return 1.0 + alpha * (1.0 / max(gamma, eps) - 1.0)

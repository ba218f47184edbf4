r"""Theorem 1 of Toghani & Uribe 2022: FedBuff's rate without a bounded-gradient assumption.

The setting (their Assumptions 1-4): n clients with L-smooth :math:`f_i` (eq. (4)) whose global
:math:`f = \frac1n\sum_i f_i` is bounded below by :math:`f^\star` (eq. (5)); per-sample gradient
variance at most :math:`\sigma^2` (eq. (6)), so a batch of at least b samples has variance at
most :math:`\hat\sigma^2 = \sigma^2/b` (eq. (7)); population diversity
:math:`\frac1n\sum_i\|\nabla f_i(w) - \nabla f(w)\|^2 \le \gamma^2` (eq. (8)); staleness at most
:math:`\tau` server steps and uniform arrivals :math:`i_{t,k} \sim \mathrm{Uniform}([n])`
(eq. (3)). Each client runs Q local SGD steps of size :math:`\eta`; the server sums K updates
and steps with :math:`\beta = 1/K`.

**Theorem 1.** With :math:`\beta = 1/K` and :math:`\eta = 1/(Q\sqrt{LT})`, for every number of
server steps :math:`T \ge 160\,L\,(Q+7)(\tau+1)^3`,

.. math::

    \frac1T\sum_{t=0}^{T-1}\mathbb E\|\nabla f(w^t)\|^2
    \le \frac{8\sqrt L\,(f(w^0) - f^\star)}{\sqrt T}
      + \frac{16\sqrt L\,(\sigma^2/b + \gamma^2)}{\sqrt T}
      + \frac{320\,L\,(Q+1)(\tau^2+1)(\sigma^2/b + n\gamma^2)}{T}.

Under the uniform diversity bound :math:`\max_i\sup_w\|\nabla f_i(w) - \nabla f(w)\|^2 \le
\gamma^2` (their eq. (9)), Remark 2 replaces :math:`n\gamma^2` by :math:`\gamma^2` in the third
term. T counts server steps: a run of T steps costs TK client updates and TKQ local gradients.

The horizon condition multiplies L, a constant with units (the inverse square of the parameters'
units, times the loss's), by plain numbers, as the paper does: rescaling f by c rescales L, and
so the horizon, by c.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from .._validation import integer, real
from ..errors import ParameterError

__all__ = [
    "FedBuffBound",
    "fedbuff_bound",
    "fedbuff_horizon",
    "fedbuff_horizon_ok",
    "fedbuff_server_step",
    "fedbuff_step_size",
]


def fedbuff_step_size(Q: int, L: float, T: int) -> float:
    r"""The clients' step size of Theorem 1: :math:`\eta = \dfrac{1}{Q\sqrt{LT}}`.

    Parameters
    ----------
    Q : int
        Local SGD steps per client update, >= 1.
    L : float
        The smoothness constant of Assumption 2 (eq. (4)), > 0.
    T : int
        Server steps of the run, >= 1 (fixed in advance: the step size depends on it).

    Returns
    -------
    float

    Raises
    ------
    ParameterError
        An argument of the wrong type or out of range, named in the message.
    """
    Q = integer(Q, "fedbuff_step_size: Q", minimum=1)
    L = real(L, "fedbuff_step_size: L", above=0)
    T = integer(T, "fedbuff_step_size: T", minimum=1)
    return 1.0 / (Q * math.sqrt(L * T))


def fedbuff_server_step(K: int) -> float:
    r"""The server step of Theorem 1: :math:`\beta = 1/K` for a buffer of K updates.

    (Remark 1: the proof holds for any :math:`\beta` with :math:`\beta K = O(1)`.)

    Raises
    ------
    ParameterError
        K is not an integer >= 1.
    """
    return 1.0 / integer(K, "fedbuff_server_step: K", minimum=1)


def _threshold(L: float, Q: int, tau: int) -> Fraction:
    r""":math:`160L(Q+7)(\tau+1)^3` exactly, L read as the shortest decimal of its float
    (``repr``): L = 0.1 is 1/10, not the binary float just above it."""
    return 160 * Fraction(repr(L)) * (Q + 7) * (tau + 1) ** 3


def _horizon_inputs(owner: str, L: float, Q: int, tau: int) -> tuple[float, int, int]:
    return (
        real(L, f"{owner}: L", above=0),
        integer(Q, f"{owner}: Q", minimum=1),
        integer(tau, f"{owner}: tau", minimum=0),
    )


def fedbuff_horizon(L: float, Q: int, tau: int) -> int:
    r"""The fewest server steps T that Theorem 1 covers: the least integer
    :math:`T \ge 160\,L\,(Q+7)(\tau+1)^3` (and at least 1).

    Computed exactly in rational arithmetic, with L read as the shortest decimal that its float
    rounds to, so that ``fedbuff_horizon(0.1, 1, 0)`` is 128 and
    ``fedbuff_horizon_ok(T, ...)`` holds from the result on and not at one step less.

    Parameters
    ----------
    L : float
        Smoothness constant (Assumption 2), > 0.
    Q : int
        Local steps, >= 1.
    tau : int
        The staleness bound of Assumption 1, >= 0.

    Returns
    -------
    int

    Raises
    ------
    ParameterError
        An argument of the wrong type or out of range, named in the message.
    """
    L, Q, tau = _horizon_inputs("fedbuff_horizon", L, Q, tau)
    return max(1, math.ceil(_threshold(L, Q, tau)))


def fedbuff_horizon_ok(T: int, L: float, Q: int, tau: int) -> bool:
    r"""Whether T server steps meet Theorem 1's condition :math:`T \ge 160\,L\,(Q+7)(\tau+1)^3`.

    Raises
    ------
    ParameterError
        T is not an integer >= 1, or L, Q, tau as in :func:`fedbuff_horizon`.
    """
    L, Q, tau = _horizon_inputs("fedbuff_horizon_ok", L, Q, tau)
    T = integer(T, "fedbuff_horizon_ok: T", minimum=1)
    return T >= _threshold(L, Q, tau)


@dataclass(frozen=True)
class FedBuffBound:
    r"""The right-hand side of Theorem 1, term by term.

    Attributes
    ----------
    optimisation : float
        :math:`8\sqrt L\,(f(w^0) - f^\star)/\sqrt T`.
    noise : float
        :math:`16\sqrt L\,(\sigma^2/b + \gamma^2)/\sqrt T`.
    staleness : float
        :math:`320\,L\,(Q+1)(\tau^2+1)(\sigma^2/b + n\gamma^2)/T` (:math:`\gamma^2` in place of
        :math:`n\gamma^2` under Remark 2).
    T : int
        Server steps.
    horizon : int
        The least T the theorem covers (:func:`fedbuff_horizon`).
    step_size : float
        The theorem's :math:`\eta = 1/(Q\sqrt{LT})`.
    """

    optimisation: float
    noise: float
    staleness: float
    T: int
    horizon: int
    step_size: float

    @property
    def total(self) -> float:
        r"""The bound on :math:`\frac1T\sum_{t<T}\mathbb E\|\nabla f(w^t)\|^2`: the sum of the
        three terms."""
        return self.optimisation + self.noise + self.staleness

    @property
    def covered(self) -> bool:
        """Whether T meets the horizon condition (the bound is only proved then)."""
        return self.T >= self.horizon


def fedbuff_bound(
    T: int,
    *,
    L: float,
    Q: int,
    tau: int,
    sigma2: float,
    b: int,
    gamma2: float,
    n: int,
    gap: float,
    uniform_diversity: bool = False,
    require_horizon: bool = True,
) -> FedBuffBound:
    r"""The right-hand side of Theorem 1 of Toghani & Uribe 2022 (module docstring).

    .. math::

        \frac{8\sqrt L\,(f(w^0) - f^\star)}{\sqrt T}
        + \frac{16\sqrt L\,(\sigma^2/b + \gamma^2)}{\sqrt T}
        + \frac{320\,L\,(Q+1)(\tau^2+1)(\sigma^2/b + n\gamma^2)}{T}

    Parameters
    ----------
    T : int
        Server steps, >= 1.
    L : float
        Smoothness constant of every :math:`f_i` (eq. (4)), > 0.
    Q : int
        Local steps per client update, >= 1.
    tau : int
        Staleness bound (eq. (3)), >= 0.
    sigma2 : float
        :math:`\sigma^2`, the per-sample gradient variance bound (eq. (6)), >= 0.
    b : int
        The smallest batch size, >= 1.
    gamma2 : float
        :math:`\gamma^2`, the population-diversity bound (eq. (8); eq. (9) with
        ``uniform_diversity``), >= 0.
    n : int
        Number of clients, >= 1.
    gap : float
        :math:`f(w^0) - f^\star`, >= 0.
    uniform_diversity : bool
        ``gamma2`` bounds every client's diversity uniformly (eq. (9)): the third term carries
        :math:`\gamma^2` instead of :math:`n\gamma^2` (Remark 2).
    require_horizon : bool
        Refuse a T below the horizon, where the theorem proves nothing (default); False
        returns the formula's value all the same (``covered`` is then False).

    Returns
    -------
    FedBuffBound

    Raises
    ------
    ParameterError
        An argument of the wrong type or out of range, named in the message; or T below the
        horizon :math:`160L(Q+7)(\tau+1)^3` with ``require_horizon``.
    """
    owner = "fedbuff_bound"
    T = integer(T, f"{owner}: T", minimum=1)
    L, Q, tau = _horizon_inputs(owner, L, Q, tau)
    sigma2 = real(sigma2, f"{owner}: sigma2", at_least=0)
    b = integer(b, f"{owner}: b", minimum=1)
    gamma2 = real(gamma2, f"{owner}: gamma2", at_least=0)
    n = integer(n, f"{owner}: n", minimum=1)
    gap = real(gap, f"{owner}: gap", at_least=0)
    for name, flag in (
        ("uniform_diversity", uniform_diversity),
        ("require_horizon", require_horizon),
    ):
        if not isinstance(flag, bool):
            raise ParameterError(f"{owner}: {name} must be True or False, got {flag!r}")
    horizon = max(1, math.ceil(_threshold(L, Q, tau)))
    if require_horizon and T < horizon:
        raise ParameterError(
            f"{owner}: T must be an integer >= {horizon} (160 L (Q+7) (tau+1)^3 with L={L!r}, "
            f"Q={Q}, tau={tau}: Theorem 1 proves nothing below it), got {T!r}; pass "
            "require_horizon=False for the formula's value all the same"
        )
    noise = sigma2 / b
    diversity = gamma2 if uniform_diversity else n * gamma2
    root = math.sqrt(L)
    return FedBuffBound(
        optimisation=8.0 * root * gap / math.sqrt(T),
        noise=16.0 * root * (noise + gamma2) / math.sqrt(T),
        staleness=320.0 * L * (Q + 1) * (tau**2 + 1) * (noise + diversity) / T,
        T=T,
        horizon=horizon,
        step_size=1.0 / (Q * math.sqrt(L * T)),
    )

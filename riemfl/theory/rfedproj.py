r"""The step-size rule (11) of Theorem 4.3 of Zhang et al. 2024 (RFedProj).

Theorem 4.3 (under Assumptions 2.3, 4.1 and 4.2) asks for

.. math::

    \tilde\eta := \eta_g\,\eta\,\tau \le \min\Big\{\frac{1}{24\,M L},\ \frac{\gamma}{6 D_f},\
    \frac{1}{D_f L_{\mathcal P}}\Big\}, \qquad \eta_g = \sqrt n, \qquad (11)

with

* :math:`\gamma`: half the proximal-smoothness constant of M (Assumption 2.3 writes that constant
  as :math:`2\gamma`); riemfl's ``manifold.reach`` is that constant :math:`\hat\gamma = 2\gamma`
  (Stiefel: 1, so :math:`\gamma = 1/2`);
* :math:`M = \max\{\mathrm{diam}(\mathcal M)/\gamma, 2\}` (Lemma A.1), with the ambient diameter
  :math:`\mathrm{diam}(\mathcal M) = \max_{x,y\in\mathcal M}\|x - y\|` (``manifold.diameter``);
* :math:`L`: the constant of Assumption 4.1 on M, which exists with :math:`\hat L \le L` for the
  Euclidean gradient Lipschitz constant :math:`\hat L` of every :math:`f_{il}` on
  :math:`\mathrm{conv}(\mathcal M)` (after Deng and Hu 2023, Lemma 4.2; the paper gives no
  formula for L, so the caller supplies it);
* :math:`D_f = \max_{i,l,x\in\mathcal M}\|\nabla f_{il}(x)\|`, the largest Euclidean gradient;
* :math:`L_{\mathcal P} = \max_{x\in\bar U_{\mathcal M}(\gamma)}\|D^2 P_{\mathcal M}(x)\|`, the
  largest second derivative of the projection on the closed :math:`\gamma`-tube (the paper gives
  no value for any manifold, and riemfl's manifolds do not declare one: the caller supplies it).

Then :math:`\frac1R\sum_r\mathbb E\|G_{\tilde\eta}(P_{\mathcal M}(x^r))\|^2 \le 8\Omega^1/(\sqrt n
\eta\tau R) + 64\sigma^2/(n\tau b)` (eq. (12)). The theorem covers compact manifolds only: a
manifold of infinite diameter is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._validation import integer, optional, real
from ..errors import ParameterError
from ..problems.base import FederatedProblem

__all__ = [
    "RFedProjStepSize",
    "projection_constant",
    "rfedproj_step_size",
    "rfedproj_step_size_for",
]


def _reach(value: float, name: str) -> float:
    """A proximal-smoothness constant: a finite number > 0, or infinity (a convex set)."""
    if value == math.inf:
        return math.inf
    return real(value, name, above=0)


def projection_constant(diameter: float, gamma: float) -> float:
    r"""The constant :math:`M = \max\{\mathrm{diam}(\mathcal M)/\gamma, 2\}` of Lemma A.1 of
    Zhang et al. 2024: :math:`\|P_{\mathcal M}(x + u) - x\| \le M\|u\|` for x on M and every u.

    Parameters
    ----------
    diameter : float
        The ambient diameter of M, a finite number > 0.
    gamma : float
        Half the proximal-smoothness constant, > 0 (infinite for a convex set: M = 2).

    Raises
    ------
    ParameterError
        An argument of the wrong type or out of range, named in the message.
    """
    diameter = real(diameter, "projection_constant: diameter", above=0)
    gamma = _reach(gamma, "projection_constant: gamma")
    return max(diameter / gamma, 2.0)


@dataclass(frozen=True)
class RFedProjStepSize:
    r"""The step sizes of rule (11), with the bounds whose minimum sets them.

    Attributes
    ----------
    step_size : float
        :math:`\eta = \tilde\eta / (\eta_g\tau)`, the clients' step (``RFedProj(step_size=...)``).
    global_step_size : float
        :math:`\eta_g = \sqrt n` (``RFedProj(global_step_size=...)``).
    effective : float
        :math:`\tilde\eta = \eta_g\eta\tau`, the minimum of the three bounds.
    smoothness_bound : float
        :math:`1/(24 M L)`.
    tube_bound : float
        :math:`\gamma/(6 D_f)` (infinite for a convex set).
    curvature_bound : float
        :math:`1/(D_f L_{\mathcal P})` (infinite when :math:`L_{\mathcal P} = 0`).
    gamma : float
        :math:`\gamma`, half the proximal-smoothness constant.
    projection_constant : float
        M of Lemma A.1.
    """

    step_size: float
    global_step_size: float
    effective: float
    smoothness_bound: float
    tube_bound: float
    curvature_bound: float
    gamma: float
    projection_constant: float

    @property
    def binding(self) -> str:
        """Which bound sets :math:`\\tilde\\eta`: ``"smoothness"``, ``"tube"`` or
        ``"curvature"`` (the first of them in that order on a tie)."""
        bounds = {
            "smoothness": self.smoothness_bound,
            "tube": self.tube_bound,
            "curvature": self.curvature_bound,
        }
        return min(bounds, key=bounds.__getitem__)


def rfedproj_step_size(
    *,
    lipschitz: float,
    grad_bound: float,
    projection_curvature: float,
    reach: float,
    diameter: float,
    n_clients: int,
    local_steps: int,
) -> RFedProjStepSize:
    r"""The largest step sizes that rule (11) of Zhang et al. 2024 allows (module docstring).

    :math:`\tilde\eta = \min\{1/(24ML),\ \gamma/(6D_f),\ 1/(D_f L_{\mathcal P})\}`,
    :math:`\eta_g = \sqrt n` and :math:`\eta = \tilde\eta/(\eta_g\tau)`, with
    :math:`\gamma = \hat\gamma/2` and :math:`M = \max\{\mathrm{diam}/\gamma, 2\}`.

    Parameters
    ----------
    lipschitz : float
        L of Assumption 4.1, > 0.
    grad_bound : float
        :math:`D_f`, the largest Euclidean sample gradient on M, > 0.
    projection_curvature : float
        :math:`L_{\mathcal P}`, >= 0.
    reach : float
        :math:`\hat\gamma = 2\gamma`, the proximal-smoothness constant (``manifold.reach``),
        > 0 or infinite.
    diameter : float
        The ambient diameter of M (``manifold.diameter``), finite and > 0.
    n_clients : int
        n, >= 1.
    local_steps : int
        :math:`\tau`, the local steps per round, >= 1.

    Returns
    -------
    RFedProjStepSize

    Raises
    ------
    ParameterError
        An argument of the wrong type or out of range, named in the message (an infinite
        diameter: Theorem 4.3 covers compact manifolds only).
    """
    owner = "rfedproj_step_size"
    L = real(lipschitz, f"{owner}: lipschitz", above=0)
    D_f = real(grad_bound, f"{owner}: grad_bound", above=0)
    L_P = real(projection_curvature, f"{owner}: projection_curvature", at_least=0)
    gamma = _reach(reach, f"{owner}: reach") / 2.0
    if diameter == math.inf:
        raise ParameterError(
            f"{owner}: diameter must be finite (Theorem 4.3 of Zhang et al. 2024 covers compact "
            f"manifolds), got {diameter!r}"
        )
    diameter = real(diameter, f"{owner}: diameter", above=0)
    n = integer(n_clients, f"{owner}: n_clients", minimum=1)
    tau = integer(local_steps, f"{owner}: local_steps", minimum=1)
    M = projection_constant(diameter, gamma)
    smoothness = 1.0 / (24.0 * M * L)
    tube = gamma / (6.0 * D_f)
    curvature = math.inf if L_P == 0 else 1.0 / (D_f * L_P)
    effective = min(smoothness, tube, curvature)
    eta_g = math.sqrt(n)
    return RFedProjStepSize(
        step_size=effective / (eta_g * tau),
        global_step_size=eta_g,
        effective=effective,
        smoothness_bound=smoothness,
        tube_bound=tube,
        curvature_bound=curvature,
        gamma=gamma,
        projection_constant=M,
    )


def rfedproj_step_size_for(
    problem: FederatedProblem,
    *,
    local_steps: int,
    lipschitz: float,
    grad_bound: float,
    projection_curvature: float,
) -> RFedProjStepSize:
    r"""Rule (11) for a riemfl problem: n, :math:`\hat\gamma` and the diameter come from it.

    The problem gives ``n_clients``, ``manifold.reach`` (:math:`\hat\gamma = 2\gamma`) and
    ``manifold.diameter``. Its ``smoothness`` is the Euclidean constant :math:`\hat L`, which
    Assumption 4.1 only bounds L from below: the caller passes L (``lipschitz``), and a value
    below ``problem.smoothness`` is refused. :math:`D_f` and :math:`L_{\mathcal P}` are the
    caller's too (no riemfl problem or manifold declares them).

    Parameters
    ----------
    problem : FederatedProblem
    local_steps : int
        :math:`\tau`, >= 1.
    lipschitz, grad_bound, projection_curvature : float
        L, :math:`D_f` and :math:`L_{\mathcal P}` (:func:`rfedproj_step_size`).

    Returns
    -------
    RFedProjStepSize

    Raises
    ------
    ParameterError
        ``problem`` is not a FederatedProblem; its manifold declares no reach or no diameter,
        or an infinite diameter; ``lipschitz`` is below ``problem.smoothness``; or an argument
        is out of range (:func:`rfedproj_step_size`).
    """
    owner = "rfedproj_step_size_for"
    if not isinstance(problem, FederatedProblem):
        raise ParameterError(f"{owner}: problem must be a FederatedProblem, got {problem!r}")
    manifold = problem.manifold
    try:
        reach = manifold.reach
        diameter = manifold.diameter
    except NotImplementedError as exc:
        raise ParameterError(
            f"{owner}: rule (11) needs the reach and the diameter of {manifold.name}: {exc}"
        ) from None
    L = real(lipschitz, f"{owner}: lipschitz", above=0)
    L_hat = optional(real, problem.smoothness, f"{owner}: problem.smoothness", above=0)
    if L_hat is not None and L < L_hat:
        raise ParameterError(
            f"{owner}: lipschitz must be >= problem.smoothness = {L_hat!r} (Assumption 4.1: "
            f"L >= L-hat, the Euclidean constant), got {lipschitz!r}"
        )
    return rfedproj_step_size(
        lipschitz=L,
        grad_bound=grad_bound,
        projection_curvature=projection_curvature,
        reach=reach,
        diameter=diameter,
        n_clients=problem.n_clients,
        local_steps=local_steps,
    )

r"""The papers' theorems as functions: step sizes, horizons and bounds, with their constants.

* :mod:`riemfl.theory.fedbuff`: Theorem 1 of Toghani & Uribe 2022 (FedBuff without bounded
  gradients): the step size :math:`\eta = 1/(Q\sqrt{LT})`, the horizon condition
  :math:`T \ge 160L(Q+7)(\tau+1)^3` and the three-term bound;
* :mod:`riemfl.theory.rates`: Table I of the same paper (the rates of FedAvg, FedAsync and
  FedBuff analyses) as data, and its rendering;
* :mod:`riemfl.theory.rfedproj`: the step-size rule (11) of Theorem 4.3 of Zhang et al. 2024,
  from the constants of the manifold and the problem.

Every input is checked (:mod:`riemfl._validation`): a bad one raises
:class:`~riemfl.errors.ParameterError` naming the argument and what was expected.
"""

from .fedbuff import (
    FedBuffBound,
    fedbuff_bound,
    fedbuff_horizon,
    fedbuff_horizon_ok,
    fedbuff_server_step,
    fedbuff_step_size,
)
from .rates import TABLE_I, RateRow, render_table
from .rfedproj import (
    RFedProjStepSize,
    projection_constant,
    rfedproj_step_size,
    rfedproj_step_size_for,
)

__all__ = [
    "FedBuffBound",
    "fedbuff_bound",
    "fedbuff_horizon",
    "fedbuff_horizon_ok",
    "fedbuff_server_step",
    "fedbuff_step_size",
    "TABLE_I",
    "RateRow",
    "render_table",
    "RFedProjStepSize",
    "projection_constant",
    "rfedproj_step_size",
    "rfedproj_step_size_for",
]

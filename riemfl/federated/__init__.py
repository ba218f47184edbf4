"""Federated optimisation on manifolds: algorithms as pure client/server rules, and engines.

Synchronous algorithms (Zhang et al. 2024 and the baselines of Li & Ma 2022):
:class:`RFedProj`, :class:`RFedAvg`, :class:`RFedProx`, :class:`RFedSVRG`; run them with
:func:`run_sync`, which returns a :class:`History`.
"""

from .algorithm import ClientContext, Operators, SyncAlgorithm
from .engine import ClientDroppedWarning, initial_point, run_sync
from .history import METRICS, History
from .rfedproj import RFedProj
from .tangent import RFedAvg, RFedProx, RFedSVRG

ALGORITHMS = {
    "rfedproj": RFedProj,
    "rfedavg": RFedAvg,
    "rfedprox": RFedProx,
    "rfedsvrg": RFedSVRG,
}

__all__ = [
    "ALGORITHMS",
    "ClientContext",
    "ClientDroppedWarning",
    "History",
    "METRICS",
    "Operators",
    "RFedAvg",
    "RFedProj",
    "RFedProx",
    "RFedSVRG",
    "SyncAlgorithm",
    "initial_point",
    "run_sync",
]

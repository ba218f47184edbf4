"""riemfl: optimisation on Riemannian manifolds with exact geometry, and federated learning."""

from . import errors, tuning
from .errors import (
    ConvergenceError,
    CutLocusError,
    NotOnManifoldError,
    ParameterError,
    ProjectionError,
    RiemflError,
    ShapeError,
)
from .manifolds import (
    SPD,
    BezierCurve,
    BezierGraph,
    ControlPoints,
    EpsilonTunnel,
    Euclidean,
    FixedRank,
    Grassmann,
    Lorentz,
    Manifold,
    PlaneRotation,
    PoincareBall,
    Product,
    Simplex,
    Sphere,
    Stiefel,
)

__version__ = "0.1.0"

__all__ = [
    "errors",
    "tuning",
    "RiemflError",
    "ShapeError",
    "NotOnManifoldError",
    "ProjectionError",
    "ConvergenceError",
    "CutLocusError",
    "ParameterError",
    "Manifold",
    "Euclidean",
    "Sphere",
    "Stiefel",
    "Grassmann",
    "Lorentz",
    "PoincareBall",
    "Product",
    "FixedRank",
    "Simplex",
    "SPD",
    "BezierCurve",
    "BezierGraph",
    "ControlPoints",
    "EpsilonTunnel",
    "PlaneRotation",
]

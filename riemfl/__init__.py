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
    BezierCurve,
    BezierGraph,
    ControlPoints,
    EpsilonTunnel,
    Euclidean,
    FixedRank,
    Grassmann,
    Lorentz,
    Manifold,
    Oblique,
    PlaneRotation,
    Product,
    Simplex,
    SkewSymmetric,
    SpecialOrthogonal,
    Sphere,
    Stiefel,
    Symmetric,
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
    "Product",
    "FixedRank",
    "Simplex",
    "BezierCurve",
    "BezierGraph",
    "ControlPoints",
    "EpsilonTunnel",
    "PlaneRotation",
    "SpecialOrthogonal",
    "Oblique",
    "Symmetric",
    "SkewSymmetric",
]

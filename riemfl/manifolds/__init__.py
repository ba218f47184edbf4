"""Manifolds implementing the riemfl contract (:class:`~riemfl.manifolds.base.Manifold`)."""

from .base import Manifold
from .bezier import BezierCurve
from .bezier_graph import BezierGraph
from .control_points import ControlPoints
from .euclidean import Euclidean
from .fixedrank import FixedRank
from .grassmann import Grassmann
from .lorentz import Lorentz
from .product import Product
from .rotation import PlaneRotation
from .simplex import Simplex
from .sphere import Sphere
from .stiefel import Stiefel
from .tunnel import EpsilonTunnel

__all__ = [
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
]

#: every manifold family shipped with riemfl (used by ``python -m riemfl`` and the docs)
FAMILIES = (Euclidean, Sphere, Stiefel, Grassmann, Lorentz, Product, FixedRank, Simplex)

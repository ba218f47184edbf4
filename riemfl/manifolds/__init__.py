"""Manifolds implementing the riemfl contract (:class:`~riemfl.manifolds.base.Manifold`).

The families are listed once, in :mod:`riemfl.manifolds.catalogue`; these exports and those of
:mod:`riemfl` are checked against it (``tests/manifolds/test_catalogue.py``).
"""

from .base import Manifold
from .bezier import BezierCurve
from .bezier_graph import BezierGraph
from .birkhoff import BirkhoffPolytope
from .control_points import ControlPoints
from .elliptope import Elliptope
from .euclidean import Euclidean
from .fixedrank import FixedRank
from .grassmann import Grassmann
from .lorentz import Lorentz
from .oblique import Oblique
from .poincare import PoincareBall
from .positive import Positive
from .product import Product
from .psd_fixed_rank import PSDFixedRank
from .rotation import PlaneRotation
from .simplex import Simplex
from .spd import SPD
from .special_orthogonal import SpecialOrthogonal
from .sphere import Sphere
from .stiefel import Stiefel
from .symmetric import SkewSymmetric, Symmetric
from .tunnel import EpsilonTunnel

__all__ = [
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
    "SpecialOrthogonal",
    "Oblique",
    "Symmetric",
    "SkewSymmetric",
    "Positive",
    "Elliptope",
    "PSDFixedRank",
    "BirkhoffPolytope",
]

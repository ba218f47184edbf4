"""Manifolds implementing the riemfl contract (:class:`~riemfl.manifolds.base.Manifold`)."""

from .base import Manifold
from .euclidean import Euclidean
from .grassmann import Grassmann
from .lorentz import Lorentz
from .product import Product
from .sphere import Sphere
from .stiefel import Stiefel

__all__ = ["Manifold", "Euclidean", "Sphere", "Stiefel", "Grassmann", "Lorentz", "Product"]

#: every manifold family shipped with riemfl (used by ``python -m riemfl`` and the docs)
FAMILIES = (Euclidean, Sphere, Stiefel, Grassmann, Lorentz, Product)

r"""Statistics of points on a manifold: the weighted Fréchet (Karcher) mean and the weighted
geometric median, for numpy arrays and torch tensors on every manifold with ``exp`` and ``log``.

They are the server's aggregation primitives: :func:`frechet_mean` averages client models on a
manifold, :func:`geometric_median` is its robust counterpart (a minority of arbitrarily bad
points moves it a bounded amount). See the statistics guide (``docs/stats.md``) for the
formulas, the uniqueness condition and the references.
"""

from .frechet import MEAN_METHODS, FrechetResult, frechet_mean
from .median import MedianResult, geometric_median
from .uniqueness import (
    NonUniqueMeanError,
    NonUniqueMeanWarning,
    curvature_bound,
    uniqueness_radius,
)

__all__ = [
    "frechet_mean",
    "FrechetResult",
    "MEAN_METHODS",
    "geometric_median",
    "MedianResult",
    "NonUniqueMeanWarning",
    "NonUniqueMeanError",
    "curvature_bound",
    "uniqueness_radius",
]

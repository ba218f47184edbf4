r"""When the weighted Karcher mean is unique: a sufficient condition, checked with what the
manifold offers.

**The condition** (Afsari 2011). Let :math:`\Delta` be an upper bound of the sectional curvature
of a complete manifold M and

.. math:: r^* = \tfrac12 \min\{\operatorname{inj} M,\ \pi/\sqrt{\Delta}\}

(:math:`\pi/\sqrt\Delta = \infty` for :math:`\Delta \le 0`). If every point of positive weight
lies in an open geodesic ball :math:`B(o, \rho)` with :math:`\rho < r^*`, the minimiser of
:math:`f(m) = \tfrac12\sum_i w_i d(m, p_i)^2` is unique (and lies in that ball). Karcher (1977)
proved it for the smaller radius :math:`\pi/(4\sqrt\Delta)`. On a Hadamard manifold (complete,
simply connected, :math:`\Delta \le 0`: the Euclidean spaces, SPD with the affine-invariant or
log-Euclidean metric, the hyperbolic spaces) :math:`r^* = \infty`: f is strictly geodesically
convex and the mean is always unique.

**The check.** The ball is centred at each of two candidates, the computed mean and the start
point (a data point by default), and :math:`\rho` is the largest distance from the centre to a
point of positive weight; the condition holds when :math:`\rho < r^*` for one of them. Centred
at a data point, :math:`\rho` is at most the diameter of the point set, so the check is never
weaker than comparing the diameter with :math:`r^*`, and it costs 2n distances, not
:math:`n^2/2`. It is a sufficient condition: where it fails, uniqueness is not known (it is not
disproved).

**The curvature bounds** are declared by the manifolds
(:meth:`~riemfl.manifolds.base.Manifold.curvature_bound`; a subclass that changes the metric
overrides it again):

* 0 (flat): ``Euclidean``, ``Symmetric``, ``SkewSymmetric``, ``Positive`` (the entrywise
  logarithm is an isometry onto a Euclidean space), ``SPD(metric="log-euclidean")`` (Arsigny
  et al. 2007);
* :math:`\le 0`: ``SPD`` with the affine-invariant metric (Pennec, Fillard & Ayache 2006;
  Bhatia 2007), ``Lorentz(n, beta)`` (:math:`-1/\beta`), ``PoincareBall(n, c)`` (:math:`-c`);
* 1: ``Sphere`` and ``Oblique`` (a product of unit spheres);
* ``Stiefel``: 1 with the embedded metric and 5/4 with the canonical one; ``Grassmann``: 2
  (Zimmermann and Stoye 2024b, arXiv:2403.01879);
* ``SpecialOrthogonal`` with the Frobenius metric: 1/2, from the bi-invariant formula
  :math:`K(X, Y) = \tfrac14\|[X, Y]\|^2` for orthonormal X, Y (Milnor 1976) and
  :math:`\|[X, Y]\|_F \le \sqrt2\|X\|_F\|Y\|_F` (Böttcher and Wenzel 2008);
* ``Product``: the largest of the factors' bounds and 0 (a plane spanned by vectors of two
  factors has a curvature between 0 and theirs).

Any other manifold (``SPD(metric="bures-wasserstein")``, ``Simplex``, the fixed-rank
manifolds, a user's own that declares none) has no known bound, and the check says so.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np

from ..backend import Array, ops_for, to_numpy
from ..errors import RiemflError
from ..manifolds.base import Manifold
from ._inputs import repeat

__all__ = [
    "NonUniqueMeanWarning",
    "NonUniqueMeanError",
    "UNIQUENESS_MODES",
    "curvature_bound",
    "uniqueness_radius",
    "check_uniqueness",
    "report_uniqueness",
]

#: the values of ``uniqueness`` that :func:`~riemfl.stats.frechet_mean` accepts
UNIQUENESS_MODES = ("warn", "raise", "ignore")


class NonUniqueMeanWarning(RuntimeWarning):
    """The sufficient condition for a unique Karcher mean could not be verified: the points are
    spread beyond the radius :math:`r^*`, or the manifold has no known curvature bound."""


class NonUniqueMeanError(RiemflError, ValueError):
    """Raised instead of :class:`NonUniqueMeanWarning` when ``uniqueness="raise"``: the data
    do not meet the sufficient condition for a unique mean (a ``ValueError``: the arguments are
    valid, but their mean is not known to be well defined)."""


def curvature_bound(manifold: Manifold) -> tuple[float | None, str]:
    r"""An upper bound :math:`\Delta` of the sectional curvature of ``manifold``, with its
    source.

    Returns
    -------
    delta : float or None
        The bound (module docstring), or ``None`` when riemfl knows none.
    reason : str
        Where the bound comes from, or why there is none.
    """
    return manifold.curvature_bound()


def uniqueness_radius(manifold: Manifold) -> tuple[float | None, str]:
    r"""The radius :math:`r^* = \tfrac12\min\{\operatorname{inj} M, \pi/\sqrt\Delta\}` of the
    sufficient condition for a unique Karcher mean (Afsari 2011; module docstring).

    Returns
    -------
    radius : float or None
        :math:`r^*` (``inf`` on a Hadamard manifold), or ``None`` where the manifold has no
        known curvature bound or injectivity radius.
    reason : str
        How the radius was found, or why it is not known.
    """
    delta, source = curvature_bound(manifold)
    if delta is None:
        return None, source
    try:
        inj = float(manifold.injectivity_radius)
    except NotImplementedError as exc:
        return None, f"{manifold.name} has no injectivity radius ({exc})"
    focal = math.inf if delta <= 0 else math.pi / math.sqrt(delta)
    radius = 0.5 * min(inj, focal)
    return radius, f"r* = 1/2 min(inj = {inj:.4g}, pi/sqrt(Delta) = {focal:.4g}); Delta: {source}"


def check_uniqueness(
    manifold: Manifold, points: Array, centres: Sequence[Array]
) -> tuple[bool | None, str]:
    r"""Whether the points lie in a ball of radius :math:`< r^*` around one of ``centres``.

    Parameters
    ----------
    manifold : Manifold
    points : array, shape (n, \*point_shape)
        The points of positive weight.
    centres : sequence of arrays of shape ``point_shape``
        Candidate centres (the computed mean, the start point).

    Returns
    -------
    unique : True or None
        True: the sufficient condition holds and the mean is unique; None: not known.
    message : str
        Why (the radius found and :math:`r^*`, or the missing bound).
    """
    radius, reason = uniqueness_radius(manifold)
    if radius is None:
        return None, f"{reason}, so the uniqueness of the mean is not known"
    if radius == math.inf:
        return True, f"{manifold.name}: unique ({reason})"
    spread = math.inf
    for centre in centres:
        try:
            d = manifold.dist(repeat(centre, tuple(points.shape)), points)
        except RiemflError:  # a point in the cut locus of the centre: beyond r* anyway
            continue
        spread = min(spread, float(np.max(to_numpy(ops_for(d).detach(d)))))
    if spread < radius:
        return True, f"{manifold.name}: unique, the points lie within {spread:.4g} < {reason}"
    return None, (
        f"{manifold.name}: the points lie within {spread:.4g} of the mean and of the start "
        f"point, not below the radius that guarantees a unique mean ({reason}; Afsari 2011): "
        f"the mean may not be unique"
    )


def report_uniqueness(mode: str, unique: bool | None, message: str, where: str) -> None:
    """Warn (``"warn"``) or raise (``"raise"``) when ``unique`` is not True."""
    if unique or mode == "ignore":
        return
    text = f"{where}: {message}"
    if mode == "raise":
        raise NonUniqueMeanError(text)
    warnings.warn(text, NonUniqueMeanWarning, stacklevel=3)

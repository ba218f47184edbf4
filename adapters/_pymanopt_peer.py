r"""pymanopt's per-class conventions, answered for riemfl manifolds.

:func:`~riemfl.adapters.pymanopt.to_pymanopt` stands in for pymanopt's own classes, whose
public API has a few maps that riemfl's manifold contract lacks. This module gives them their
pymanopt meaning for a riemfl manifold:

* :func:`typical_dist`: the scale pymanopt's trust regions take as the maximal radius
  (``Delta_bar``; the initial radius is an eighth of it). pymanopt 2.2.1's value per class,
  computed from the riemfl manifold's parameters for the family that matches;
* :func:`weingarten`: the Weingarten map :math:`\mathrm{W}_x(u, n)` of a Riemannian
  submanifold (pymanopt's ``RiemannianSubmanifold.weingarten``), which is what the
  Riemannian Hessian adds to the projected Euclidean Hessian for the normal part n of the
  Euclidean gradient: :math:`\operatorname{Hess} f(x)[u] = P_x(\nabla^2\bar f(x)[u]) +
  \mathrm{W}_x(u, P^\perp_x\nabla\bar f(x))` (Absil, Mahony & Trumpf 2013). So for a normal n,
  :math:`\mathrm{W}_x(u, n)` is riemfl's ``ehess_to_rhess(x, n, 0, u)``;
* :func:`pair_mean`: the midpoint of the minimising geodesic, :math:`\exp_x(\tfrac12\log_x
  y)`, where riemfl has exp and log.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from riemfl.backend import Array
from riemfl.manifolds import (
    SPD,
    Elliptope,
    Euclidean,
    FixedRank,
    Grassmann,
    Oblique,
    PoincareBall,
    Positive,
    Product,
    PSDFixedRank,
    SkewSymmetric,
    SpecialOrthogonal,
    Sphere,
    Stiefel,
    Symmetric,
)
from riemfl.manifolds.base import Manifold

__all__ = ["TYPICAL_DIST", "typical_dist", "is_riemannian_submanifold", "weingarten", "pair_mean"]


def _sqrt_dim(m: Manifold) -> float:
    return math.sqrt(m.dim)


#: riemfl family -> pymanopt 2.2.1's ``typical_dist`` of the matching class (k = 1), in the
#: riemfl manifold's parameters. pymanopt's values are scales, not geometric constants: Stiefel's
#: sqrt(p) is neither its diameter (2 sqrt(p)) nor its injectivity radius (pi); PoincareBall's
#: dim/8 and FixedRankEmbedded's dim grow with the dimension although the former has curvature
#: -1 and the latter is a cone.
TYPICAL_DIST: dict[type, Callable[[Manifold], float]] = {
    Euclidean: _sqrt_dim,
    Symmetric: _sqrt_dim,
    SkewSymmetric: _sqrt_dim,
    Positive: _sqrt_dim,
    SPD: _sqrt_dim,  # sqrt(n (n + 1) / 2), whatever riemfl's SPD metric
    Sphere: lambda m: math.pi,
    Oblique: lambda m: math.pi * math.sqrt(m.m),  # pi sqrt(number of columns)
    Stiefel: lambda m: math.sqrt(m.p),
    Grassmann: lambda m: math.sqrt(m.p),
    SpecialOrthogonal: lambda m: math.pi * math.sqrt(m.n),
    PSDFixedRank: lambda m: 10.0 + m.k,
    Elliptope: lambda m: 10.0 * m.k,
    PoincareBall: lambda m: m.dim / 8,
    FixedRank: lambda m: float(m.dim),
    Product: lambda m: math.sqrt(sum(typical_dist(f) ** 2 for f in m.manifolds)),
}

#: riemfl families whose metric is the one induced by their embedding in a Euclidean space
#: (pymanopt's ``RiemannianSubmanifold``; Grassmann, Elliptope and PSDFixedRank are quotients,
#: SPD, Positive and PoincareBall carry other metrics)
_SUBMANIFOLDS = (
    Euclidean,
    Symmetric,
    SkewSymmetric,
    Sphere,
    Oblique,
    Stiefel,
    SpecialOrthogonal,
    FixedRank,
)


def typical_dist(manifold: Manifold) -> float:
    """pymanopt's ``typical_dist`` for a riemfl manifold.

    The value of pymanopt's class for the matching family (:data:`TYPICAL_DIST`); for a family
    pymanopt lacks, the injectivity radius, else the diameter, where finite.

    Raises
    ------
    NotImplementedError
        Neither applies (pymanopt's trust regions then take :math:`\\sqrt{\\dim M}`).
    """
    for family, value in TYPICAL_DIST.items():
        if isinstance(manifold, family):
            return float(value(manifold))
    for what in ("injectivity_radius", "diameter"):
        try:
            scale = float(getattr(manifold, what))
        except NotImplementedError:
            continue
        if math.isfinite(scale):
            return scale
    raise NotImplementedError(
        f"{manifold.name} has no pymanopt counterpart and neither a finite injectivity radius "
        "nor a finite diameter (pymanopt's trust regions then use sqrt(dim))"
    )


def is_riemannian_submanifold(manifold: Manifold) -> bool:
    """Whether the metric is the one induced by the embedding (for products: every factor's)."""
    if isinstance(manifold, Product):
        return all(is_riemannian_submanifold(f) for f in manifold.manifolds)
    # a family that offers other metrics names its metric; only the embedded one qualifies
    metric = getattr(manifold, "metric", "euclidean")
    return isinstance(manifold, _SUBMANIFOLDS) and metric in ("euclidean", "embedded")


def weingarten(manifold: Manifold, x: Array, u: Array, n: Array) -> Array:
    r"""The Weingarten map :math:`\mathrm{W}_x(u, n)` for a normal vector n at x.

    ``ehess_to_rhess(x, n, 0, u)``: the Riemannian Hessian of :math:`\bar f = \langle n,
    \cdot\rangle` (gradient n, Hessian 0), which is :math:`\mathrm{W}_x(u, P^\perp_x n)`
    (Absil, Mahony & Trumpf 2013).

    Raises
    ------
    NotImplementedError
        The metric is not induced by the embedding (no Weingarten map in pymanopt's sense), or
        the manifold has no ``ehess_to_rhess``.
    """
    if not is_riemannian_submanifold(manifold):
        raise NotImplementedError(
            f"{manifold.name}'s metric is not the one induced by its embedding, so it has no "
            "Weingarten map in pymanopt's sense (use euclidean_to_riemannian_hessian)"
        )
    ok, why = manifold.supports("ehess_to_rhess")
    if not ok:
        raise NotImplementedError(why)
    return manifold.ehess_to_rhess(x, n, np.zeros_like(n), u)


def pair_mean(manifold: Manifold, x: Array, y: Array) -> Array:
    r"""Midpoint of x and y: :math:`\exp_x(\tfrac12\log_x y)`, the midpoint of the minimising
    geodesic (pymanopt's definition).

    Where riemfl has no exp/log but an exact inverse retraction: :math:`R_x(\tfrac12
    R_x^{-1}(y))`, the midpoint of the retraction curve from x to y (not a geodesic midpoint;
    symmetric in x and y only to second order).

    Raises
    ------
    NotImplementedError
        Neither pair of maps exists (e.g. the elliptope).
    """
    for forward, backward in (("exp", "log"), ("retract", "inverse_retract")):
        if manifold.supports(forward)[0] and manifold.supports(backward)[0]:
            step = getattr(manifold, backward)(x, y)
            return getattr(manifold, forward)(x, 0.5 * step)
    raise NotImplementedError(
        f"{manifold.name} has neither exp and log nor a retraction and its inverse, so no "
        f"midpoint: {manifold.supports('log')[1]}"
    )

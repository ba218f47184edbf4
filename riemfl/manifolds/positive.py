r"""The positive orthant :math:`\mathbb{R}^{\text{shape}}_{>0}` with the log (Fisher-type)
metric :math:`\langle u, v\rangle_x = \sum_i u_i v_i / x_i^2`, as pymanopt's ``Positive`` (the
affine-invariant metric of positive-definite matrices, entry by entry).

The entrywise logarithm :math:`x \mapsto \log x` is an isometry onto the Euclidean space
:math:`\mathbb{R}^{\text{shape}}` (:math:`d(\log x) = dx/x`), so the manifold is flat and
complete and every map is the Euclidean one in log coordinates.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import integer
from ..backend import Array, is_torch, ops_for, to_numpy
from ..check_levels import refuse
from ..errors import NotOnManifoldError, ParameterError, ProjectionError
from .base import Manifold, dist_from_squared, result_checked
from .elementary import nonzero
from .inputs import first_nonpositive, positive_or_nan

__all__ = ["Positive"]


def _lib(*arrays: Array):
    """numpy, or torch if any argument is a tensor (for log and exp)."""
    for a in arrays:
        if type(a) is not np.ndarray and is_torch(a):
            import torch

            return torch
    return np


class Positive(Manifold):
    r"""Arrays with strictly positive entries, :math:`\{x \in \mathbb{R}^{\text{shape}} : x_i >
    0\}`, with the metric :math:`\langle u, v\rangle_x = \sum_i u_iv_i/x_i^2`.

    Sizes: ``shape`` is the ambient shape (the point shape); ``dim`` is its product (an open
    set).

    In log coordinates :math:`z = \log x` the metric is Euclidean, so (elementwise products and
    quotients):

    * ``to_tangent``: the identity (an open set: :math:`T_x = \mathbb{R}^{\text{shape}}`);
      ``egrad_to_rgrad``: :math:`x^2 g` (the metric is :math:`\mathrm{diag}(1/x^2)`);
    * ``exp`` = ``retract``: :math:`x\,e^{u/x}` (the straight line :math:`\log x + tu/x`),
      defined for every u; an entry whose exact value underflows (:math:`u/x` below about
      -700 in float64, -85 in float32) is the smallest normal number instead of 0
      (:func:`~riemfl.manifolds.elementary.nonzero`), so the result is always strictly
      positive (no sum is involved, so no summation order matters); ``log`` =
      ``inverse_retract``: :math:`x\log(y/x)`;
      ``dist``: :math:`\|\log(y/x)\|`; ``squared_dist``: :math:`\|\log(y/x)\|^2`;
    * ``parallel_transport``: :math:`(y/x)\,u` (constant in log coordinates); ``transport`` is
      the same map (the default projection would be the identity, which is not an isometry);
    * ``ehess_to_rhess``: :math:`x^2 h + x\,u\,g`. The Christoffel symbols of
      :math:`\mathrm{diag}(1/x^2)` are :math:`\Gamma^i_{ii} = -1/x_i`, so
      :math:`\nabla_u\,\mathrm{grad}f = D(x^2 g)[u] + \Gamma(u, x^2 g) = x^2 h + 2xug - xug`;
    * ``project``: the Euclidean nearest point of the open orthant exists only for
      :math:`a > 0` (then it is a itself); for an entry :math:`\le 0` the nearest point of the
      closed orthant has a zero there, which the open orthant does not contain, and ``project``
      raises ``ProjectionError`` naming the entries (as :class:`~riemfl.manifolds.Simplex`
      does: no clipping to a floor, which would not be a nearest point).

    The kit's second-order check of ``exp`` assumes a metric induced by the ambient space; here
    the geodesics accelerate, :math:`x'' = x'^2/x` (tested directly instead).

    Constants. ``injectivity_radius`` is infinite (complete and flat: exp is a global
    diffeomorphism); ``diameter`` is infinite (Euclidean and geodesic). ``reach``
    raises: the open orthant is not closed and its local radius :meth:`local_reach`
    :math:`= \min_i x_i`, the Euclidean distance to the boundary, tends to 0 there.

    Parameters
    ----------
    *shape : int
        Shape of one point, e.g. ``Positive(3)`` for vectors, ``Positive(4, 2)`` for matrices.
    """

    def curvature_bound(self) -> tuple[float | None, str]:
        return 0.0, "flat (an isometric image of a Euclidean space)"

    unsupported = {
        "reach": (
            "the open positive orthant is not closed: a point x has a nearest point in it only "
            "within min(x) of x (beyond, the nearest point of the closure is on the boundary), "
            "which tends to 0 at the boundary, so the uniform constant is 0; use "
            "local_reach(x)"
        ),
    }

    def __init__(self, *shape: int) -> None:
        if not shape:
            raise ParameterError(f"Positive(*shape) needs positive integer dimensions, got {shape}")
        self.point_shape = tuple(
            integer(s, "Positive(*shape): every dimension", minimum=1) for s in shape
        )
        self.name = f"Positive{self.point_shape if len(shape) > 1 else '(' + str(shape[0]) + ')'}"

    @property
    def dim(self) -> int:
        return math.prod(self.point_shape)

    diameter = math.inf
    injectivity_radius = math.inf

    def local_reach(self, x: Array) -> Array:
        r""":math:`\min_i x_i`, the Euclidean distance from x to the boundary: every ambient a
        with :math:`\|a - x\| <` this is positive, so ``project(a) = a`` (one value per point, in
        x's type); a step of that length towards the smallest entry reaches the boundary."""
        self._shape(x, "point x")
        return -ops_for(x).amax(-x, axis=self._axes)

    # the maps checked through their result (see Manifold._result_checked): products and sums of
    # their arguments, where a NaN or an infinity stays non-finite (inf * 0 is NaN), and of the
    # points read through positive_or_nan (NaN for a NaN entry, and for an entry <= 0, on or
    # beyond the boundary, where 1/x^2 and log x are infinite, which
    # Manifold._refuse_boundary then names, also where the formula would be finite: the
    # gradient x^2 g is 0 there). x is not read by
    # to_tangent, and checked first where it divides (1/inf is 0: inner, norm, the
    # transports); exp checks u first (exp(-inf) is 0); log and the distances check every
    # argument first (log(inf/inf) is NaN, but log(1/inf) is -inf, log(inf/1) inf: a clean
    # diagnosis needs the arguments), and their result for a point on the boundary
    _result_checked = result_checked(
        "egrad_to_rgrad",
        "ehess_to_rhess",
        to_tangent=(0,),
        inner=(0,),
        norm=(0,),
        exp=(1,),
        retract=(1,),
        log=(0, 1),
        inverse_retract=(0, 1),
        dist=(0, 1),
        squared_dist=(0, 1),
        transport=(0,),
        parallel_transport=(0,),
    )

    def _first_nonpositive(self, x) -> tuple[tuple[int, ...], float] | None:
        """``(entry, value)`` for the smallest entry of the first point of x with an entry <= 0
        (the entry's index includes the batch dimensions), or None."""
        found = first_nonpositive(x, self.ndim)
        return None if found is None else (found[0] + found[1], found[2])

    def _boundary_violation(self, x: Array, name: str = "x") -> tuple[str, str] | None:
        """The first point of x with an entry <= 0 (see
        :meth:`~riemfl.manifolds.base.Manifold._boundary_violation`), where the metric
        :math:`\\sum_i u_i v_i/x_i^2` is infinite."""
        found = self._first_nonpositive(x)
        if found is None:
            return None
        entry, value = found
        where = "on" if value == 0 else "beyond"
        return (
            f"its entry {entry} (the index includes the batch dimensions) is {value:.3e}, not "
            f"> 0: the point is {where} the boundary of the open positive orthant, where the "
            f"metric sum_i u_i v_i/{name}_i^2 is infinite",
            f"a point with every entry {name}_i > 0",
        )

    # ------------------------------------------------------------------ maps
    def _project(self, a):
        # (a is finite: the input policy refuses a non-finite a before the map)
        refuse(a <= 0, ProjectionError, _no_nearest_message, self.name, self._axes, a)
        return a

    def _to_tangent(self, x, a):
        return a

    def _egrad_to_rgrad(self, x, g):
        x = positive_or_nan(x)
        return x * x * g

    def _ehess_to_rhess(self, x, g, h, u):
        x = positive_or_nan(x)
        return x * (x * h + u * g)

    def _inner(self, x, u, v):
        x = positive_or_nan(x)
        return ops_for(x, u, v).sum(u * v / (x * x), axis=self._axes)

    def _exp(self, x, u):
        x = positive_or_nan(x)
        return nonzero(x * _lib(x, u).exp(u / x))

    def _log(self, x, y):
        x = positive_or_nan(x)
        return x * _lib(x, y).log(positive_or_nan(y) / x)

    _retract = _exp
    _inverse_retract = _log

    def _squared_dist(self, x, y):
        z = _lib(x, y).log(positive_or_nan(y) / positive_or_nan(x))
        return ops_for(z).sum(z * z, axis=self._axes)

    _dist = dist_from_squared

    def _parallel_transport(self, x, y, u):
        return (positive_or_nan(y) / positive_or_nan(x)) * u

    _transport = _parallel_transport

    # ------------------------------------------------------------------ sampling and checks
    def _random_point(self, batch_shape, rng):
        """Log-normal entries, :math:`e^{N(0, 1)}`."""
        return np.exp(rng.standard_normal(batch_shape + self.point_shape))

    def _point_violation(self, x):
        """The largest magnitude of a negative entry (``check_point`` refuses zeros too)."""
        return "x > 0 (every entry)", max(0.0, ops_for(x).to_float(-x))

    def _tangent_violation(self, x, u):
        return "u finite", 0.0

    def _check_point(self, x: Array, tol: float) -> None:
        """Positivity is strict, without tolerance: an entry 0 is on the boundary, where
        :math:`1/x^2` and :math:`\\log x` are infinite."""
        found = self._first_nonpositive(x)
        if found is not None:
            entry, value = found
            raise NotOnManifoldError(
                f"{self.name}: point is not in the open positive orthant: constraint x > 0 is "
                f"violated by the entry {entry} = {value:.3e} (the index includes the batch "
                f"dimensions)"
            )


def _no_nearest_message(name: str, axes: tuple[int, ...], a: Array) -> str:
    values = to_numpy(a)
    low = values.min(axis=axes)
    i = tuple(int(k) for k in np.argwhere(np.atleast_1d(low <= 0))[0]) if low.ndim else ()
    entries = [tuple(int(k) for k in e) for e in np.argwhere(values[i] <= 0)][:5]
    where = f" (batch element {i})" if i else ""
    return (
        f"{name}: a has no nearest point in the open positive orthant{where}: its "
        f"entries {entries} are <= 0 (smallest {float(low[i]):.3e}), so the nearest "
        f"point of the closed orthant has zeros there, on the boundary, which the open "
        f"orthant does not contain. Expected a > 0"
    )

r"""The Euclidean space :math:`\mathbb{R}^{n_1 \times \dots \times n_k}` as a (flat) manifold."""

from __future__ import annotations

import math

import numpy as np

from .._validation import integer
from ..backend import ops_for
from ..errors import ParameterError
from .base import Manifold, result_checked

__all__ = ["Euclidean"]


def _check_shape_parameters(name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    if not shape:
        raise ParameterError(f"{name} needs positive integer dimensions, got {shape}")
    return tuple(integer(s, f"{name}(*shape): every dimension", minimum=1) for s in shape)


class Euclidean(Manifold):
    r"""Euclidean space :math:`\mathbb{R}^{\text{shape}}` with the Frobenius inner product.

    Sizes: ``shape`` is the ambient shape (the point shape); ``dim`` is its product.

    Every map is the flat one: :math:`\mathrm{Exp}_x(u) = R_x(u) = x + u`,
    :math:`\mathrm{Log}_x(y) = y - x`, transport is the identity, and the Riemannian Hessian is
    the Euclidean one, :math:`\operatorname{Hess} f(x)[u] = \nabla^2 f(x)[u]`. ``P_M`` is the
    identity, so the proximal smoothness, diameter and injectivity radius are infinite.

    Parameters
    ----------
    *shape : int
        Shape of one point, e.g. ``Euclidean(3)`` for vectors, ``Euclidean(5, 2)`` for matrices.
    """

    def curvature_bound(self) -> tuple[float | None, str]:
        return 0.0, "flat"

    def __init__(self, *shape: int) -> None:
        self.point_shape = _check_shape_parameters("Euclidean", shape)
        self.name = f"Euclidean{self.point_shape if len(shape) > 1 else '(' + str(shape[0]) + ')'}"

    @property
    def dim(self) -> int:
        return math.prod(self.point_shape)

    reach = math.inf
    diameter = math.inf
    injectivity_radius = math.inf

    # every map is a sum or difference of its arguments (see Manifold._result_checked); x is not
    # read by the metric nor by to_tangent, x and y not by the transports
    _result_checked = result_checked(
        "retract",
        "inverse_retract",
        "exp",
        "log",
        "dist",
        "squared_dist",
        to_tangent=(0,),
        egrad_to_rgrad=(0,),
        inner=(0,),
        norm=(0,),
        transport=(0, 1),
        parallel_transport=(0, 1),
    )

    def _project(self, a):
        return a

    def _to_tangent(self, x, a):
        return a

    def _retract(self, x, u):
        return x + u

    def _inverse_retract(self, x, y):
        return y - x

    _exp = _retract
    _log = _inverse_retract

    def _squared_dist(self, x, y):
        d = y - x
        return self._inner(x, d, d)

    def _dist(self, x, y):
        if type(x) is np.ndarray:  # a sum of squares: never negative, no clamp needed
            return np.sqrt(self._squared_dist(x, y))
        return ops_for(x).safe_sqrt(self._squared_dist(x, y))

    def _transport(self, x, y, u):
        return u + ops_for(u).zeros_like(y)

    _parallel_transport = _transport

    def _ehess_to_rhess(self, x, g, h, u):
        return self._to_tangent(x, h)

    def _random_point(self, batch_shape, rng):
        return rng.standard_normal(batch_shape + self.point_shape)

    def _point_violation(self, x):
        return "x finite", 0.0

    def _tangent_violation(self, x, u):
        return "u finite", 0.0

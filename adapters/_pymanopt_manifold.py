r"""The ``pymanopt`` manifold classes behind :func:`~riemfl.adapters.pymanopt.to_pymanopt`.

:class:`~riemfl.adapters.pymanopt.PymanoptManifold` gives a riemfl manifold pymanopt's manifold
API; ``PymanoptPoincareBall`` and ``PymanoptProduct`` add the public names of pymanopt's class
of that family. They subclass pymanopt's base class, so each is built on first use
(:data:`LAZY`) and belongs to :mod:`riemfl.adapters.pymanopt`, whose ``__getattr__`` hands it
out (pickle finds it there). :func:`require_pymanopt` imports pymanopt for every part of the
adapter.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
from riemfl.adapters._lazy import LazyClass, require
from riemfl.adapters._pymanopt_peer import pair_mean as midpoint
from riemfl.adapters._pymanopt_peer import typical_dist as pymanopt_typical_dist
from riemfl.adapters._pymanopt_peer import weingarten as weingarten_map

from riemfl.backend import RandomState, as_generator
from riemfl.manifolds import PoincareBall, Product
from riemfl.manifolds.base import Manifold

__all__ = [
    "PUBLIC_MODULE",
    "require_pymanopt",
    "as_float64",
    "PYMANOPT_MANIFOLD",
    "LAZY",
    "SPECIFIC",
]

#: the module that the classes built on first use belong to (``__module__``): pickle finds
#: them there, through its ``__getattr__``
PUBLIC_MODULE = __name__.rpartition(".")[0] + ".pymanopt"


def require_pymanopt(feature: str) -> ModuleType:
    """pymanopt, or :class:`~riemfl.errors.MissingDependencyError` naming ``feature``."""
    return require("pymanopt", "pymanopt", feature)


def as_float64(a: Any) -> np.float64:
    """A numpy float64 scalar, as pymanopt's scalar maps return (numpy scalars or 0-d arrays):
    its solvers divide by them, and a numpy zero gives inf or NaN with a warning where a Python
    float raises ``ZeroDivisionError`` (steepest descent's initial step at a zero gradient)."""
    return np.float64(np.asarray(a))


def _propagating(fn: Callable[..., Any], point: Any, *vectors: Any, scalar: bool = False) -> Any:
    """``fn(point, *vectors)``, or NaN (a NaN scalar, else a point of NaN) where a tangent
    vector has a non-finite entry.

    pymanopt's own maps propagate NaN, and its solvers rely on it: trust regions' truncated CG
    divides 0 by 0 once it has solved the subproblem exactly (an identity Hessian: a quadratic
    cost on a flat manifold), then evaluates the model at the NaN step (``inner_product``) and
    rejects the proposal (``retraction``) through its NaN cost. riemfl's maps refuse non-finite
    input (``NonFiniteError``), so the adapter answers NaN itself."""
    if all(np.all(np.isfinite(v)) for v in vectors):
        out = fn(point, *vectors)
        return as_float64(out) if scalar else out
    return np.float64(np.nan) if scalar else np.full(np.shape(point), np.nan)


def _build_pymanopt_manifold() -> type:
    require_pymanopt("riemfl.adapters.pymanopt.PymanoptManifold")
    from pymanopt.manifolds.manifold import Manifold as PymanoptBase

    class PymanoptManifold(PymanoptBase):
        r"""A riemfl manifold behind pymanopt's ``Manifold`` API (made by :func:`to_pymanopt`).

        Points and tangent vectors are numpy arrays of riemfl's ``point_shape``. Random draws
        come from the generator given to :func:`to_pymanopt` (``self.rng``), never from numpy's
        global state. ``euclidean_to_riemannian_hessian`` is the riemfl manifold's
        ``ehess_to_rhess`` (every riemfl manifold family has it; a manifold without it raises
        ``NotImplementedError`` with its reason, and :func:`solve` then uses finite differences
        of the gradient). As pymanopt's own classes, ``inner_product``, ``norm`` and ``dist``
        return numpy float64 scalars, and ``inner_product``, ``norm``, ``retraction`` and
        ``exp`` of a non-finite tangent vector return NaN (a point of NaN; riemfl's maps would
        raise ``NonFiniteError``): pymanopt's solvers divide by those scalars and reject NaN
        proposals.
        """

        def __init__(self, manifold: Manifold, rng: RandomState = None) -> None:
            super().__init__(f"riemfl.{manifold.name}", int(manifold.dim))
            self.riemfl_manifold = manifold
            self.rng = as_generator(rng)

        @property
        def typical_dist(self) -> float:
            return pymanopt_typical_dist(self.riemfl_manifold)

        def inner_product(self, point, tangent_vector_a, tangent_vector_b) -> np.float64:
            inner = self.riemfl_manifold.inner
            return _propagating(inner, point, tangent_vector_a, tangent_vector_b, scalar=True)

        def norm(self, point, tangent_vector) -> np.float64:
            return _propagating(self.riemfl_manifold.norm, point, tangent_vector, scalar=True)

        def projection(self, point, vector):
            return self.riemfl_manifold.to_tangent(point, vector)

        to_tangent_space = projection

        def euclidean_to_riemannian_gradient(self, point, euclidean_gradient):
            return self.riemfl_manifold.egrad_to_rgrad(point, euclidean_gradient)

        def euclidean_to_riemannian_hessian(
            self, point, euclidean_gradient, euclidean_hessian, tangent_vector
        ):
            m = self.riemfl_manifold
            ok, why = m.supports("ehess_to_rhess")
            if not ok:
                raise NotImplementedError(
                    f"{why}, so a Euclidean Hessian cannot be turned into a Riemannian one; "
                    "riemfl.adapters.pymanopt.solve approximates the Riemannian Hessian by "
                    "finite differences of the gradient instead"
                )
            return m.ehess_to_rhess(point, euclidean_gradient, euclidean_hessian, tangent_vector)

        def retraction(self, point, tangent_vector):
            return _propagating(self.riemfl_manifold.retract, point, tangent_vector)

        def exp(self, point, tangent_vector):
            return _propagating(self.riemfl_manifold.exp, point, tangent_vector)

        def log(self, point_a, point_b):
            return self.riemfl_manifold.log(point_a, point_b)

        def dist(self, point_a, point_b) -> np.float64:
            return as_float64(self.riemfl_manifold.dist(point_a, point_b))

        def transport(self, point_a, point_b, tangent_vector_a):
            return self.riemfl_manifold.transport(point_a, point_b, tangent_vector_a)

        def random_point(self):
            return self.riemfl_manifold.random_point(rng=self.rng)

        def random_tangent_vector(self, point):
            m = self.riemfl_manifold
            u = m.random_tangent(point, rng=self.rng)
            return u / as_float64(m.norm(point, u))

        def zero_vector(self, point):
            return self.riemfl_manifold.zero_tangent(point)

        def pair_mean(self, point_a, point_b):
            return midpoint(self.riemfl_manifold, point_a, point_b)

        def embedding(self, point, tangent_vector):
            # riemfl's tangent vectors are ambient already (pymanopt's base: the identity too)
            return tangent_vector

        def weingarten(self, point, tangent_vector, normal_vector):
            return weingarten_map(self.riemfl_manifold, point, tangent_vector, normal_vector)

    return PymanoptManifold


def _build_pymanopt_poincare_ball() -> type:
    class PymanoptPoincareBall(PYMANOPT_MANIFOLD.get()):
        r"""A riemfl :class:`~riemfl.manifolds.PoincareBall` behind pymanopt's ``PoincareBall``
        API: :class:`PymanoptManifold` plus ``conformal_factor`` and ``mobius_addition``, with
        the ball's curvature :math:`-c` (pymanopt's ball has c = 1)."""

        def conformal_factor(self, point):
            r""":math:`\lambda_x = 2/(1 - c\|x\|^2)`, shaped like pymanopt's (a trailing
            axis of length 1)."""
            c = self.riemfl_manifold.c
            return 2 / (1 - c * np.sum(point * point, axis=-1, keepdims=True))

        def mobius_addition(self, point_a, point_b):
            return self.riemfl_manifold.mobius_add(point_a, point_b)

    return PymanoptPoincareBall


def _build_pymanopt_product() -> type:
    class PymanoptProduct(PYMANOPT_MANIFOLD.get()):
        """A riemfl :class:`~riemfl.manifolds.Product` behind pymanopt's ``Product`` API:
        :class:`PymanoptManifold` plus ``manifolds``, the factors as adapters. Points stay
        riemfl's flat vectors (``point_layout`` 1), not pymanopt's lists of arrays."""

        @property
        def manifolds(self) -> list[Any]:
            # imported on use: riemfl.adapters.pymanopt imports this module
            from riemfl.adapters.pymanopt import to_pymanopt

            return [to_pymanopt(f, rng=self.rng) for f in self.riemfl_manifold.manifolds]

    return PymanoptProduct


PYMANOPT_MANIFOLD = LazyClass(PUBLIC_MODULE, "PymanoptManifold", _build_pymanopt_manifold)
_PYMANOPT_POINCARE_BALL = LazyClass(
    PUBLIC_MODULE, "PymanoptPoincareBall", _build_pymanopt_poincare_ball
)
_PYMANOPT_PRODUCT = LazyClass(PUBLIC_MODULE, "PymanoptProduct", _build_pymanopt_product)
LAZY = {c.name: c for c in (PYMANOPT_MANIFOLD, _PYMANOPT_POINCARE_BALL, _PYMANOPT_PRODUCT)}
#: riemfl family -> the adapter class with that pymanopt class's extra public names
SPECIFIC = ((PoincareBall, _PYMANOPT_POINCARE_BALL), (Product, _PYMANOPT_PRODUCT))

"""Hypothesis strategies that draw test data for any :class:`~riemfl.manifolds.Manifold`.

Every strategy draws an integer seed and builds its data from the manifold's own samplers
(``random_point``, ``random_tangent``) with an explicit :class:`numpy.random.Generator`, so a
failing example is reproduced exactly by its seed and shrinks to a small one. Data come back as
numpy float64 arrays; convert them with :meth:`riemfl.testing.Config.convert`.

Examples
--------
>>> from hypothesis import given
>>> from riemfl import Sphere
>>> from riemfl.testing import strategies as rst
>>> sphere = Sphere(3)
>>> @given(rst.points(sphere, batch_shape=(2,)))
... def test_on_sphere(x):
...     sphere.check_point(x)
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..manifolds.base import Manifold

__all__ = [
    "seeds",
    "points",
    "tangent_vectors",
    "points_and_tangents",
    "ambient_points_near",
    "scaled_tangent",
    "unit_ambient",
]


def seeds() -> st.SearchStrategy[int]:
    """Seeds for :func:`numpy.random.default_rng`."""
    return st.integers(min_value=0, max_value=2**32 - 1)


def _expand(values: np.ndarray, manifold: Manifold) -> np.ndarray:
    return np.reshape(values, np.shape(values) + (1,) * manifold.ndim)


def scaled_tangent(
    manifold: Manifold, x: np.ndarray, norm: float | np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """A random tangent vector at ``x`` with Riemannian norm ``norm`` (per batch element)."""
    u = manifold.random_tangent(x, rng=rng)
    current = np.asarray(manifold.norm(x, u), dtype=np.float64)
    current = np.where(current > 0, current, 1.0)
    return u * _expand(np.asarray(norm) / current, manifold)


def unit_ambient(manifold: Manifold, batch_shape: tuple[int, ...], rng: np.random.Generator):
    """Gaussian ambient directions of unit Euclidean norm (per batch element)."""
    w = rng.standard_normal(tuple(batch_shape) + manifold.point_shape)
    axes = tuple(range(-manifold.ndim, 0))
    return w / np.sqrt(np.sum(w * w, axis=axes, keepdims=True))


@st.composite
def points(draw, manifold: Manifold, batch_shape: tuple[int, ...] = ()) -> np.ndarray:
    """Points of ``manifold`` with leading ``batch_shape`` (numpy float64)."""
    return manifold.random_point(*batch_shape, rng=draw(seeds()))


@st.composite
def tangent_vectors(
    draw, manifold: Manifold, x: np.ndarray, max_norm: float = 1.0, min_norm: float = 0.0
) -> np.ndarray:
    """Tangent vectors at ``x`` with norms drawn uniformly in ``[min_norm, max_norm]``."""
    rng = np.random.default_rng(draw(seeds()))
    batch = np.shape(x)[: np.ndim(x) - manifold.ndim]
    norms = rng.uniform(min_norm, max_norm, size=batch)
    return scaled_tangent(manifold, x, norms, rng)


@st.composite
def points_and_tangents(
    draw,
    manifold: Manifold,
    batch_shape: tuple[int, ...] = (),
    max_norm: float = 1.0,
    min_norm: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs ``(x, u)``: points and tangent vectors at them with bounded norms."""
    x = draw(points(manifold, batch_shape))
    return x, draw(tangent_vectors(manifold, x, max_norm=max_norm, min_norm=min_norm))


@st.composite
def ambient_points_near(
    draw, manifold: Manifold, max_distance: float, batch_shape: tuple[int, ...] = ()
) -> tuple[np.ndarray, np.ndarray]:
    """Ambient points ``a = x + s w`` within ``max_distance`` of M, with their base points x.

    ``w`` is a unit ambient direction and ``s`` uniform in ``[0, max_distance)``, so
    :math:`d(a, M) \\le \\|a - x\\| < ` ``max_distance``.
    """
    rng = np.random.default_rng(draw(seeds()))
    x = manifold.random_point(*batch_shape, rng=rng)
    s = rng.uniform(0.0, max_distance, size=tuple(batch_shape))
    return x + _expand(s, manifold) * unit_ambient(manifold, batch_shape, rng), x

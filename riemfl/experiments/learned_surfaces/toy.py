r"""The counterpart of Licudi et al. 2025, Fig. 2: a Bezier triangle learned in :math:`\mathbb R^3`.

The loss is a bowl-shaped valley, the sheet :math:`z = \kappa(x^2 + y^2)`, with a bump (the
obstruction) next to the straight segment between the two fixed models:

.. math::  l(p) = (z - \kappa(x^2 + y^2))^2 + H\exp\!\left(-\frac{(x - x_0)^2 + (y - y_0)^2}
           {2\sigma^2}\right).

The global model :math:`A = (-1, 0, \kappa)` and the local model :math:`C = (1, 0, \kappa)` lie on
the sheet; the chord between them runs above the sheet and through the bump. The triangle starts
flat, through A, C and a third vertex D off the sheet, its edge points at the midpoints (the
linear triangle), and learns :math:`P_{110}, P_{101}, P_{011}` and D by gradient descent on the
mean loss at latent points drawn by area on the band (the client's objective, without the prox
term): :math:`\nabla_{P_k} = b_k(x)\,\nabla l(\iota(x))`. A quadratic triangle can lie exactly on
the sheet (a paraboloid over a triangle is quadratic in the barycentric coordinates), so the
learned surface can reach zero sheet loss while it bends around the bump.

The toy starts from the flat triangle rather than the point parametrisation of the torch client
(:class:`~riemfl.nn.surface_trainer.SurfaceClientTrainer`), so that the whole latent triangle is
two-dimensional from the first step and the picture shows a surface, not a ribbon.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...federated.async_manifold.triangle import (
    BezierTriangleEmbedding,
    band_point,
    triangle_bernstein,
)
from ...manifolds.euclidean import Euclidean
from .settings import Settings

__all__ = ["BUMP", "CURVATURE", "HEIGHT", "WIDTH", "learn", "loss", "gradient", "latent_grid"]

#: :math:`\kappa`, the valley's curvature
CURVATURE = 0.25
#: :math:`(x_0, y_0)`, the obstruction's centre (off the chord, so that the surface bends one way)
BUMP = (0.0, -0.25)
#: H and :math:`\sigma`
HEIGHT, WIDTH = 1.5, 0.35


def loss(p: Any) -> np.ndarray:
    """The toy loss at points of shape (..., 3)."""
    p = np.asarray(p, dtype=np.float64)
    x, y, z = p[..., 0], p[..., 1], p[..., 2]
    sheet = z - CURVATURE * (x * x + y * y)
    bump = HEIGHT * np.exp(-((x - BUMP[0]) ** 2 + (y - BUMP[1]) ** 2) / (2 * WIDTH**2))
    return sheet * sheet + bump


def gradient(p: np.ndarray) -> np.ndarray:
    """The toy loss's gradient at points of shape (..., 3)."""
    x, y, z = p[..., 0], p[..., 1], p[..., 2]
    sheet = z - CURVATURE * (x * x + y * y)
    bump = HEIGHT * np.exp(-((x - BUMP[0]) ** 2 + (y - BUMP[1]) ** 2) / (2 * WIDTH**2))
    gx = -4 * CURVATURE * sheet * x - bump * (x - BUMP[0]) / WIDTH**2
    gy = -4 * CURVATURE * sheet * y - bump * (y - BUMP[1]) / WIDTH**2
    return np.stack([gx, gy, 2 * sheet], axis=-1)


def latent_grid(n: int) -> np.ndarray:
    """Barycentric points of a regular grid of the triangle, n + 1 per side, shape (m, 3)."""
    return np.array(
        [(1 - (i + j) / n, i / n, j / n) for i in range(n + 1) for j in range(n + 1 - i)]
    )


def initial_triangle() -> np.ndarray:
    """The flat (linear) triangle through A, C and D: edge points at the midpoints."""
    a = np.array([-1.0, 0.0, CURVATURE])
    c = np.array([1.0, 0.0, CURVATURE])
    d = np.array([0.0, 1.5, 1.2])
    return np.stack([a, (a + c) / 2, c, (a + d) / 2, (c + d) / 2, d])


def learn(s: Settings) -> dict[str, Any]:
    """Learn the toy triangle; return it with the server's paths and the numbers of the claims.

    Returns
    -------
    dict
        ``initial`` and ``learned`` control points (6, 3); ``paths``: for ``"segment"`` and
        ``"geodesic"`` the latent nodes, the points of the path, the step point at
        ``s.toy_fraction`` and its latent fraction r; ``chord``: points of the straight segment;
        the highest loss on the chord and on each path, and the mean loss over a latent grid of
        the initial and of the learned triangle.
    """
    rng = np.random.default_rng(s.toy_seed)
    phi = initial_triangle()
    initial = phi.copy()
    trained = [1, 3, 4, 5]
    for _ in range(s.toy_steps):
        draws = rng.uniform(size=(s.toy_batch, 2))
        x = np.array([band_point(a, b, s.toy_band) for a, b in draws])
        weights = triangle_bernstein(x)
        g = weights.T @ gradient(weights @ phi) / s.toy_batch
        phi[trained] -= s.toy_lr * g[trained]
    rs = np.linspace(0.0, 1.0, 201)
    chord = np.outer(1 - rs, phi[0]) + np.outer(rs, phi[2])
    grid = triangle_bernstein(latent_grid(30))
    out: dict[str, Any] = {
        "initial": initial,
        "learned": phi,
        "chord": chord,
        "chord_max_loss": float(loss(chord).max()),
        "initial_mean_loss": float(loss(grid @ initial).mean()),
        "learned_mean_loss": float(loss(grid @ phi).mean()),
        "paths": {},
    }
    for path in ("segment", "geodesic"):
        emb = BezierTriangleEmbedding(Euclidean(3), path=path)
        points = np.array([emb.path_point(phi, float(r)) for r in rs])
        step, r = emb.step_point(phi, s.toy_fraction)
        out["paths"][path] = {
            "nodes": emb.latent_path(phi),
            "points": points,
            "max_loss": float(loss(points).max()),
            "length": float(emb.arc_length(phi, 1.0)),
            "step": step,
            "r": float(r),
        }
    return out

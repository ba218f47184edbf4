r"""What a digits client's triangle looks like: how far it opens, and where the two server paths
step.

From the final model A of the first AsyncBezierTriangle run, the client with the most training
rows learns a triangle with the runs' settings
(:class:`~riemfl.nn.surface_trainer.SurfaceClientTrainer`). Reported: the distance of each
control point from A (the local vertex C against the edge point and the three points towards the
third vertex), how deep the surface geodesic goes into the latent triangle (its largest w), and
the server's step on the edge and on the geodesic at the client's step :math:`f = w_i\eta_g`
(eq. (12), chordal): their latent fractions, the distance between the two new models, and the
pooled test loss at each.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...federated.async_manifold.triangle import BezierTriangleEmbedding
from ...manifolds.euclidean import Euclidean
from .digits import base_trainer, client
from .settings import Settings

__all__ = ["surface_probe"]


def surface_probe(s: Settings, seed: int, final: np.ndarray) -> dict[str, Any]:
    """The triangle learned from ``final`` (seed ``seed``) and the two server steps on it."""
    base = base_trainer(s, seed)
    sizes = np.array([base.n_samples(k) for k in range(base.n_clients)], dtype=float)
    i = int(np.argmax(sizes))
    phi = client("AsyncBezierTriangle", base, s).train(i, final, np.random.default_rng(seed))
    f = s.server_lr * sizes[i] / sizes.sum()
    steps = {}
    for path in ("segment", "geodesic"):
        emb = BezierTriangleEmbedding(Euclidean(final.size), path=path)
        point, r = emb.step_point(phi, f)
        steps[path] = {
            "r": float(r),
            "depth": float(emb.latent_path(phi)[:, 2].max()),
            "test_loss": float(base.evaluate(point)["loss"]),
            "point": point,
        }
    gap = float(np.linalg.norm(steps["segment"]["point"] - steps["geodesic"]["point"]))
    moved = float(np.linalg.norm(steps["segment"]["point"] - phi[0]))
    for step in steps.values():
        del step["point"]
    names = ("edge point", "local vertex", "start-third edge point", "local-third edge point",
             "third vertex")  # fmt: skip
    distances = [float(np.linalg.norm(p - phi[0])) for p in phi[1:]]
    return {
        "seed": seed,
        "client": i,
        "fraction": float(f),
        "distances": dict(zip(names, distances, strict=True)),
        "steps": steps,
        "step_gap": gap,
        "step_length": moved,
    }

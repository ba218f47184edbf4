r"""The counterpart of Licudi et al. 2025, Fig. 1: the loss in the plane of a learned curve.

From the final global model A of the first AsyncBezier run, the client with the most training
rows learns a curve (:class:`~riemfl.nn.BezierClientTrainer`): its local model C and control point
B. A quadratic Bezier curve lies in the plane of its three control points; as in the paper's
figure, the plane is drawn in the coordinates of the standard 2-simplex, A, C and B at the
vertices (0, 0), (1, 0) and (1/2, sqrt(3)/2), so that a point (X, Y) of the drawing is the model
:math:`\lambda_A A + \lambda_C C + \lambda_B B` with :math:`\lambda_B = 2Y/\sqrt3`,
:math:`\lambda_C = X - \lambda_B/2`, :math:`\lambda_A = 1 - \lambda_B - \lambda_C` (the map is
affine, so the drawing distorts lengths but not the plane's contours). The curve is then the
parabola :math:`(t, \sqrt3\,t(1 - t))` whatever was learned; the landscape under it is what the
client learned it on.

Two losses on a grid of the plane: the client's own training loss (the objective the curve was
trained on, without the prox term) and the pooled test loss (what the server's model is judged
by). Along the curve and along the chord A-C at ``s.path_points`` parameters, both losses and
the diagnostic Q = mean chord loss / mean curve loss (Licudi 2025 (TR), Sec. 4).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .digits import base_trainer, client, client_data
from .settings import Settings

__all__ = ["VERTICES", "landscape", "to_barycentric"]

#: the drawing coordinates of the global model A, the local model C and the control point B
VERTICES = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, math.sqrt(3) / 2]])


def to_barycentric(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Drawing coordinates (X, Y) -> weights (lambda_A, lambda_C, lambda_B), shape (..., 3)."""
    lam_b = 2 * Y / math.sqrt(3)
    lam_c = X - lam_b / 2
    return np.stack([1 - lam_b - lam_c, lam_c, lam_b], axis=-1)


def landscape(s: Settings, seed: int, final: np.ndarray) -> dict[str, Any]:
    """The losses on the plane through (A, C, B) learned from the model ``final`` of seed
    ``seed``'s AsyncBezier run (module docstring)."""
    from ...nn import MLP, TorchClientTrainer

    data = client_data(s, seed)
    base = base_trainer(s, seed, data)
    i = int(np.argmax([base.n_samples(k) for k in range(base.n_clients)]))
    curve_client = client("AsyncBezier", base, s, curve_epochs=s.plane_curve_epochs)
    A, B, C = curve_client.train(i, final, np.random.default_rng(seed))
    x_i, y_i = data[i][0], data[i][1]
    own = TorchClientTrainer(lambda: MLP([64, s.hidden, 10]), [(x_i, y_i, x_i, y_i)])

    def losses(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        flat = weights.reshape(-1, 3)
        mine, test = np.empty(len(flat)), np.empty(len(flat))
        for k, (a, c, b) in enumerate(flat):
            model = a * A + c * C + b * B
            mine[k] = own.evaluate(model, "train")["loss"]
            test[k] = base.evaluate(model, "test")["loss"]
        return mine.reshape(weights.shape[:-1]), test.reshape(weights.shape[:-1])

    m = s.plane_margin
    X, Y = np.meshgrid(
        np.linspace(-m, 1 + m, s.plane_grid),
        np.linspace(-m * math.sqrt(3) / 2, (1 + m) * math.sqrt(3) / 2, s.plane_grid),
    )
    grid_client, grid_test = losses(to_barycentric(X, Y))
    t = np.linspace(0.0, 1.0, s.path_points)
    on_curve = np.stack([(1 - t) ** 2, t * t, 2 * t * (1 - t)], axis=-1)
    on_chord = np.stack([1 - t, t, 0 * t], axis=-1)
    curve_client_loss, curve_test_loss = losses(on_curve)
    chord_client_loss, chord_test_loss = losses(on_chord)
    return {
        "seed": seed,
        "client": i,
        "client_rows": base.n_samples(i),
        "distance_AC": float(np.linalg.norm(C - A)),
        "distance_AB": float(np.linalg.norm(B - A)),
        "X": X,
        "Y": Y,
        "client_loss": grid_client,
        "test_loss": grid_test,
        "t": t,
        "curve_xy": np.stack([t, math.sqrt(3) * t * (1 - t)], axis=-1),
        "curve_client_loss": curve_client_loss,
        "chord_client_loss": chord_client_loss,
        "curve_test_loss": curve_test_loss,
        "chord_test_loss": chord_test_loss,
        "Q_client": float(chord_client_loss.mean() / curve_client_loss.mean()),
        "Q_test": float(chord_test_loss.mean() / curve_test_loss.mean()),
    }

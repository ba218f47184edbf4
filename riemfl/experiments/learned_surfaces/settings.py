r"""What the learned-surfaces experiment fixes: the toy surface, the digits runs, the claims' rule.

Licudi et al. 2025 run no two-dimensional manifold; every number here is riemfl's. The digits
settings are those of the Licudi et al. 2025 reproduction (:mod:`riemfl.experiments.licudi2025`:
N = 30 Dirichlet(0.5) clients of scikit-learn's digits, local Adam on the FedProx objective, 2
epochs, the paper's scheduler, 2 curve epochs with Adam 1e-3 on the control points) with a small
MLP (64-32-10) in place of the CNN, and one global rate for every method.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..licudi2025.settings import Settings as _Licudi

__all__ = ["METHODS", "Settings"]

_L = _Licudi()

#: the methods of the comparison, in the report's order
METHODS = ("FedAsync", "AsyncBezier", "AsyncBezierTriangle", "AsyncBezierTriangle-geodesic")


@dataclass(frozen=True)
class Settings:
    """The experiment's settings (defaults: the full form; :meth:`quick`: the quick one).

    Attributes
    ----------
    toy_steps, toy_batch, toy_lr : int, int, float
        Gradient steps, latent points per step and step size of the toy surface's learning.
    toy_band : float
        The band of the triangle the toy samples (1: the whole triangle).
    toy_fraction : float
        The server step f drawn on the toy surface.
    toy_seed : int
    n_clients, alpha, hidden : int, float, int
        The digits clients (Dirichlet(alpha)) and the MLP's hidden width.
    local_lr, epochs, mu, batch_size : float, int, float, int
        The clients' FedProx Adam (K1 = ``epochs`` warm-up epochs for the curve and surface).
    curve_epochs, curve_lr : int, float
        Curve and surface epochs and their Adam step.
    band : float
        The surface client's band (:class:`~riemfl.nn.surface_trainer.SurfaceClientTrainer`).
    server_lr : float
        :math:`\\eta_g` of every method.
    workers, scheduler_k : int, float
        The paper's scheduler (2 workers, k = 2).
    steps, seeds, record_every : int, tuple of int, int
        Server steps, seeds (data split, initialisation and schedule) and evaluation cadence.
    methods : tuple of str
    plane_grid, plane_margin : int, float
        The landscape's grid (points per side) and how far it extends beyond the simplex (in
        barycentric units).
    plane_curve_epochs : int
        Curve epochs of the curve drawn in the plane (learned from the final AsyncBezier model).
    path_points : int
        Points on the curve and on the chord where the loss is compared.
    """

    toy_steps: int = 3000
    toy_batch: int = 16
    toy_lr: float = 0.1
    toy_band: float = 1.0
    toy_fraction: float = 0.5
    toy_seed: int = 0
    n_clients: int = _L.n_clients
    alpha: float = _L.alpha
    hidden: int = 32
    local_lr: float = _L.local_lr
    epochs: int = _L.epochs
    mu: float = _L.mu
    batch_size: int = _L.batch_size
    curve_epochs: int = _L.curve_epochs
    curve_lr: float = _L.curve_lr
    band: float = 0.5
    server_lr: float = 3.0
    workers: int = _L.workers
    scheduler_k: float = _L.scheduler_k
    steps: int = 360
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    record_every: int = 30
    methods: tuple[str, ...] = METHODS
    plane_grid: int = 41
    plane_margin: float = 0.5
    plane_curve_epochs: int = 10
    path_points: int = 21

    @classmethod
    def quick(cls) -> Settings:
        """A shorter toy, 60 server steps, two seeds, a coarse landscape (under a minute)."""
        return replace(
            cls(),
            toy_steps=800,
            steps=60,
            seeds=(0, 1),
            record_every=20,
            plane_grid=15,
            plane_curve_epochs=4,
            path_points=11,
        )

    def runs(self) -> int:
        """Progress units: the toy, every (method, seed) run, the landscape and the probe."""
        return 1 + len(self.methods) * len(self.seeds) + 1

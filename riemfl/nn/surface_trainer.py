r"""The AsyncBezierTriangle client on a torch model: a learned quadratic Bezier triangle.

:class:`SurfaceClientTrainer` follows the protocol of :class:`~riemfl.nn.BezierClientTrainer`
(Licudi et al. 2025, App. C, Alg. 2, with Adam as in App. B) with the two-dimensional latent
manifold of their Sec. 3 (:mod:`riemfl.federated.async_manifold.triangle`): ``train`` returns the
six control points, float64 of shape (6, D) in the order of
:data:`~riemfl.federated.async_manifold.triangle.MULTI_INDICES`, the upload of
:func:`~riemfl.federated.async_manifold.triangle.AsyncBezierTriangle`.

From the received :math:`\Theta^t`:

1. all six control points start at :math:`\Theta^t` (the point parametrisation, as Alg. 2 starts
   the curve); ``warmup_epochs`` (K1) epochs of the wrapped trainer's FedProx Adam training give
   the local model, the vertex :math:`P_{020}` (:math:`\omega`);
2. ``surface_epochs`` epochs of surface learning: per mini-batch a latent point
   :math:`x = (u, v, w)` uniform by area on the band :math:`\{w \le \text{band}\}` along the edge
   from the global to the local model (:func:`~riemfl.federated.async_manifold.triangle.band_point`;
   the curve client samples that edge, ``band = 0`` is exactly its :math:`s \sim U[0, 1]`), one
   forward/backward of :math:`F_i = l_i + \frac{\mu}{2}\|\theta - \Theta^t\|^2` at
   :math:`\theta = \iota_\phi(x)` (eq. (6), prox at the sampled point), and an Adam step on the
   trained control points with :math:`\nabla_{P_k} F = b_k(x)\,\nabla_\theta F` (b the Bernstein
   weights): :math:`P_{110}, P_{101}, P_{011}, P_{002}`, and the local vertex when
   ``freeze_end=False``. The global vertex :math:`P_{200} = \Theta^t` is never trained, so the
   surface passes through the global model the client received.

The third vertex starts at :math:`\Theta^t` like the edge point, so the surface grows out of the
segment where the loss pulls it; with ``band = 0`` its three control points get no gradient and
the edge is the curve of :class:`~riemfl.nn.BezierClientTrainer` with the same draws.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from .._validation import integer, real
from ..federated.async_manifold.triangle import band_point, triangle_bernstein
from .trainer import TorchClientTrainer
from .wrapped_trainer import WrappedClientTrainer
from .wrapped_trainer import warmup_epochs as warmup_epochs_of

__all__ = ["SurfaceClientTrainer", "TRAINED"]

#: rows of the control points trained after the warm-up (the edge point and the three towards
#: the third vertex); the local vertex (row 2) joins them when ``freeze_end=False``
TRAINED = (1, 3, 4, 5)


class SurfaceClientTrainer(WrappedClientTrainer):
    """AsyncBezierTriangle's client: K1 FedProx epochs on the local vertex, then surface epochs.

    Parameters
    ----------
    trainer : TorchClientTrainer
        Data, model, loss, ``lr``, ``mu``, ``batch_size`` (the wrapped trainer's settings).
    warmup_epochs : int, optional
        K1 (default: the wrapped trainer's ``epochs``).
    surface_epochs : int
        Surface-learning epochs (the curve client's ``curve_epochs``).
    surface_lr : float, optional
        Adam's step for the control points (default: the trainer's ``lr``).
    band : float in [0, 1]
        Latent points are sampled on ``w <= band`` (0: the edge only; 1: the whole triangle).
    freeze_end : bool
        Keep the local vertex fixed during surface learning (as the curve client's end point).
    """

    def __init__(
        self,
        trainer: TorchClientTrainer,
        *,
        warmup_epochs: int | None = None,
        surface_epochs: int = 2,
        surface_lr: float | None = None,
        band: float = 0.5,
        freeze_end: bool = True,
    ) -> None:
        name = "SurfaceClientTrainer"
        super().__init__(trainer, name)
        self.warmup_epochs = warmup_epochs_of(trainer, warmup_epochs, name)
        self.surface_epochs = integer(surface_epochs, f"{name}: surface_epochs", minimum=0)
        self.surface_lr = (
            trainer.lr if surface_lr is None else real(surface_lr, f"{name}: surface_lr", above=0)
        )
        self.band = real(band, f"{name}: band", at_least=0, at_most=1)
        self.freeze_end = bool(freeze_end)

    # ------------------------------------------------------------------ protocol
    def num_batches(self, i: int, epochs: int | None = None) -> int:
        """Batches of K1 warm-up epochs plus the surface epochs (all cost compute time)."""
        warm = self.warmup_epochs if epochs is None else epochs
        return self.trainer.num_batches(i, warm + self.surface_epochs)

    def describe(self) -> dict[str, Any]:
        return {
            "warmup_epochs": self.warmup_epochs,
            "surface_epochs": self.surface_epochs,
            "surface_lr": self.surface_lr,
            "band": self.band,
            "freeze_end": self.freeze_end,
        }

    def train(
        self, i: int, start: np.ndarray, rng: np.random.Generator, epochs: int | None = None
    ) -> np.ndarray:
        """The six control points, float64 of shape (6, D), learned by client ``i``."""
        tr = self.trainer
        end = tr.train(i, start, rng, self.warmup_epochs if epochs is None else epochs)
        theta0 = np.asarray(start, dtype=np.float64)
        phi = np.repeat(theta0[None], 6, axis=0)
        phi[2] = end
        lo, hi = (int(v) for v in tr._offsets["train"][i : i + 2])
        if self.surface_epochs == 0 or hi == lo:
            return phi
        seed = int(rng.integers(0, 2**63 - 1))
        model = tr.model
        params = list(model.parameters())
        dtype, device = params[0].dtype, params[0].device
        points = [torch.from_numpy(p).to(device, dtype) for p in phi]
        rows = TRAINED if self.freeze_end else (2, *TRAINED)
        for k in rows:
            points[k].requires_grad_(True)
        opt = torch.optim.Adam([points[k] for k in rows], lr=self.surface_lr)
        gen = torch.Generator(device="cpu").manual_seed(seed)
        x, y = tr._x["train"][lo:hi], tr._y["train"][lo:hi]
        loss_fn = tr._loss_fn()
        anchor = points[0]
        model.train()
        with torch.random.fork_rng(devices=tr._fork_devices()):
            torch.manual_seed(seed)
            for _ in range(self.surface_epochs):
                perm = torch.randperm(hi - lo, generator=gen).to(device)
                for b in range(0, hi - lo, tr.batch_size):
                    idx = perm[b : b + tr.batch_size]
                    weights = self._latent_weights(gen)
                    with torch.no_grad():
                        theta = sum(float(c) * p for c, p in zip(weights, points, strict=True))
                    g = self._gradient(model, params, loss_fn, theta, anchor, x[idx], y[idx])
                    opt.zero_grad(set_to_none=False)
                    for k in rows:
                        points[k].grad = float(weights[k]) * g
                    opt.step()
        for k in rows:
            phi[k] = points[k].detach().double().cpu().numpy()
        return phi

    def _latent_weights(self, gen: torch.Generator) -> np.ndarray:
        """The Bernstein weights at a latent point of the band (one draw along the edge, a
        second towards the third vertex when the band is not the edge)."""
        a = float(torch.rand((), generator=gen))
        b = float(torch.rand((), generator=gen)) if self.band > 0 else 0.0
        return triangle_bernstein(band_point(a, b, self.band))

    def _gradient(self, model, params, loss_fn, point, anchor, xb, yb) -> torch.Tensor:
        r""":math:`\nabla_\theta F_i` at the sampled surface point (one forward/backward)."""
        vector_to_parameters(point, params)
        for p in params:
            p.grad = None
        loss_fn(model(xb), yb).backward()
        g = parameters_to_vector([p.grad for p in params])
        mu = self.trainer.mu
        return g + mu * (point - anchor) if mu else g

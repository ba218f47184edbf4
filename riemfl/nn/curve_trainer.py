r"""The AsyncBezier client on a torch model ([P] Algorithm 2 with Adam, as in [P]'s experiments).

:class:`BezierClientTrainer` wraps a :class:`~riemfl.nn.TorchClientTrainer` (its data, model,
loss, FedProx weight and Adam settings) and follows the same trainer protocol, except that
``train`` returns the learned control points :math:`(A, B, C)` as a float64 array of shape
(3, D): the upload of :class:`~riemfl.federated.async_manifold.AsyncManifold`.

From the received :math:`\Theta^t` (digest 1.12):

1. ``warmup_epochs`` (K1) epochs of the wrapped trainer's FedProx Adam training give the end
   point C (the curve at t = 1); A = B = :math:`\Theta^t`;
2. ``curve_epochs`` epochs of curve learning: per mini-batch, :math:`s \sim U[0, 1]`, one
   forward/backward of :math:`F_i = l_i + \frac{\mu}{2}\|\theta - \Theta^t\|^2` at
   :math:`\theta = (1-s)^2 A + 2s(1-s) B + s^2 C` ([P] eq. 6, prox at the sampled point), and an
   Adam step on B with :math:`\nabla_B F = 2s(1-s)\,\nabla_\theta F` (and on C with
   :math:`s^2 \nabla_\theta F` when ``freeze_end=False``; [P]'s experiments freeze both ends).

Option ``tunnel_eps`` > 0 trains the curve's epsilon-tunnel instead ([P] section 3;
:class:`~riemfl.manifolds.EpsilonTunnel`): the loss is evaluated at :math:`\theta + u` with u
uniform in the eps-ball (``tunnel="uniform"``) or at the SAM-style adversarial point
:math:`\theta + \epsilon\,g/\|g\|` of the tunnel (``tunnel="adversarial"``, one extra
forward/backward per batch); the gradient at that point drives B as above.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from ..errors import ParameterError
from ..problems._checks import int_in_range
from .trainer import TorchClientTrainer

__all__ = ["BezierClientTrainer"]


class BezierClientTrainer:
    """AsyncBezier's client: K1 FedProx epochs on the end point, then curve epochs on B.

    Parameters
    ----------
    trainer : TorchClientTrainer
        Data, model, loss, ``lr``, ``mu``, ``batch_size`` (the wrapped trainer's settings).
    warmup_epochs : int, optional
        K1 (default: the wrapped trainer's ``epochs``; [P]: 2).
    curve_epochs : int
        Curve-learning epochs ([P]: 2).
    curve_lr : float, optional
        Adam's step for the control point (default: the trainer's ``lr``, as [P]).
    freeze_end : bool
        Keep C fixed during curve learning ([P]: True).
    tunnel_eps : float
        Radius of the epsilon-tunnel (0: train the curve itself).
    tunnel : {"uniform", "adversarial"}
    """

    def __init__(
        self,
        trainer: TorchClientTrainer,
        *,
        warmup_epochs: int | None = None,
        curve_epochs: int = 2,
        curve_lr: float | None = None,
        freeze_end: bool = True,
        tunnel_eps: float = 0.0,
        tunnel: str = "uniform",
    ) -> None:
        name = "BezierClientTrainer"
        if not isinstance(trainer, TorchClientTrainer):
            raise ParameterError(f"{name} wraps a TorchClientTrainer, got {type(trainer).__name__}")
        self.trainer = trainer
        inf = float("inf")
        self.warmup_epochs = (
            trainer.epochs
            if warmup_epochs is None
            else int_in_range(warmup_epochs, 1, inf, name, "warmup_epochs")
        )
        self.curve_epochs = int_in_range(curve_epochs, 0, inf, name, "curve_epochs")
        self.curve_lr = trainer.lr if curve_lr is None else float(curve_lr)
        if not (math.isfinite(self.curve_lr) and self.curve_lr > 0):
            raise ParameterError(f"{name}: curve_lr must be finite and > 0, got {curve_lr!r}")
        if not (math.isfinite(float(tunnel_eps)) and tunnel_eps >= 0):
            raise ParameterError(f"{name}: tunnel_eps must be finite and >= 0, got {tunnel_eps!r}")
        if tunnel not in ("uniform", "adversarial"):
            raise ParameterError(f"{name}: tunnel must be 'uniform' or 'adversarial'")
        self.freeze_end = bool(freeze_end)
        self.tunnel_eps, self.tunnel = float(tunnel_eps), tunnel
        self.n_clients = trainer.n_clients

    # ------------------------------------------------------------------ protocol
    def n_samples(self, i: int) -> int:
        return self.trainer.n_samples(i)

    def num_batches(self, i: int, epochs: int | None = None) -> int:
        """Batches of K1 warm-up epochs plus the curve epochs (all cost compute time)."""
        warm = self.warmup_epochs if epochs is None else epochs
        return self.trainer.num_batches(i, warm + self.curve_epochs)

    def initial_parameters(self, seed: int = 0) -> np.ndarray:
        return self.trainer.initial_parameters(seed)

    def evaluate(self, flat: np.ndarray, split: str = "test") -> dict[str, float]:
        return self.trainer.evaluate(flat, split)

    def per_client_accuracy(self, flat: np.ndarray, split: str = "test") -> np.ndarray:
        return self.trainer.per_client_accuracy(flat, split)

    def train(
        self, i: int, start: np.ndarray, rng: np.random.Generator, epochs: int | None = None
    ) -> np.ndarray:
        """The control points (A, B, C), float64 of shape (3, D), learned by client ``i``."""
        tr = self.trainer
        end = tr.train(i, start, rng, self.warmup_epochs if epochs is None else epochs)
        phi = np.stack([np.asarray(start, dtype=np.float64), np.asarray(start, np.float64), end])
        lo, hi = (int(v) for v in tr._offsets["train"][i : i + 2])
        if self.curve_epochs == 0 or hi == lo:
            return phi
        seed = int(rng.integers(0, 2**63 - 1))
        model = tr.model
        params = list(model.parameters())
        dtype, device = params[0].dtype, params[0].device
        A, B, C = (torch.from_numpy(p).to(device, dtype) for p in phi)
        B.requires_grad_(True)
        trained = [B] if self.freeze_end else [B, C.requires_grad_(True)]
        opt = torch.optim.Adam(trained, lr=self.curve_lr)
        gen = torch.Generator(device="cpu").manual_seed(seed)
        x, y = tr._x["train"][lo:hi], tr._y["train"][lo:hi]
        loss_fn = tr._loss_fn()
        model.train()
        with torch.random.fork_rng(devices=tr._fork_devices()):
            torch.manual_seed(seed)
            for _ in range(self.curve_epochs):
                perm = torch.randperm(hi - lo, generator=gen).to(device)
                for b in range(0, hi - lo, tr.batch_size):
                    idx = perm[b : b + tr.batch_size]
                    s = float(torch.rand((), generator=gen))
                    with torch.no_grad():
                        theta = (1 - s) ** 2 * A + 2 * s * (1 - s) * B + s * s * C
                    g = self._gradient(model, params, loss_fn, theta, A, x[idx], y[idx], gen)
                    opt.zero_grad(set_to_none=False)
                    B.grad = (2 * s * (1 - s)) * g
                    if not self.freeze_end:
                        C.grad = (s * s) * g
                    opt.step()
        phi[1] = B.detach().double().cpu().numpy()
        phi[2] = C.detach().double().cpu().numpy()
        return phi

    def _gradient(self, model, params, loss_fn, theta, anchor, xb, yb, gen) -> torch.Tensor:
        r""":math:`\nabla_\theta F_i` at the sampled curve point (or its tunnel point)."""
        point = theta
        if self.tunnel_eps > 0:
            if self.tunnel == "uniform":
                u = torch.randn(theta.shape, generator=gen, dtype=theta.dtype)
                radius = self.tunnel_eps * float(torch.rand((), generator=gen)) ** (1 / u.numel())
                point = theta + (radius / torch.linalg.vector_norm(u)) * u
            else:  # SAM: ascend to the tunnel's boundary along the gradient
                g0 = self._flat_grad(model, params, loss_fn, theta, anchor, xb, yb)
                norm = torch.linalg.vector_norm(g0)
                if float(norm) > 0:
                    point = theta + (self.tunnel_eps / norm) * g0
        return self._flat_grad(model, params, loss_fn, point, anchor, xb, yb)

    def _flat_grad(self, model, params, loss_fn, point, anchor, xb, yb) -> torch.Tensor:
        vector_to_parameters(point, params)
        for p in params:
            p.grad = None
        loss_fn(model(xb), yb).backward()
        g = parameters_to_vector([p.grad for p in params])
        mu = self.trainer.mu
        return g + mu * (point - anchor) if mu else g

    def describe(self) -> dict[str, Any]:
        return {
            "warmup_epochs": self.warmup_epochs,
            "curve_epochs": self.curve_epochs,
            "curve_lr": self.curve_lr,
            "freeze_end": self.freeze_end,
            "tunnel_eps": self.tunnel_eps,
            "tunnel": self.tunnel,
        }

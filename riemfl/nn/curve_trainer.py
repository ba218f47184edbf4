r"""The AsyncBezier client on a torch model (Licudi et al. 2025, Alg. 2, with Adam as in App. B).

:class:`BezierClientTrainer` wraps a :class:`~riemfl.nn.TorchClientTrainer` (its data, model,
loss, FedProx weight and Adam settings) and follows the same trainer protocol, except that
``train`` returns the learned control points :math:`(A, B, C)` as a float64 array of shape
(3, D): the upload of :class:`~riemfl.federated.async_manifold.AsyncManifold`.

From the received :math:`\Theta^t` (Licudi et al. 2025, Sec. 3 and App. C, Alg. 2):

1. ``warmup_epochs`` (K1) epochs of the wrapped trainer's FedProx Adam training give the end
   point C (the curve at t = 1); A = B = :math:`\Theta^t`;
2. ``curve_epochs`` epochs of curve learning: per mini-batch, :math:`s \sim U[0, 1]`, one
   forward/backward of :math:`F_i = l_i + \frac{\mu}{2}\|\theta - \Theta^t\|^2` at
   :math:`\theta = (1-s)^2 A + 2s(1-s) B + s^2 C` (eq. (6), prox at the sampled point), and an
   Adam step on B with :math:`\nabla_B F = 2s(1-s)\,\nabla_\theta F` (and on C with
   :math:`s^2 \nabla_\theta F` when ``freeze_end=False``; the paper's experiments freeze both
   ends, Sec. 3).

Option ``tunnel_eps`` > 0 trains the curve's epsilon-tunnel instead (Licudi et al. 2025, Sec. 3,
after Dold et al. 2025; the paper gives no formula, so the sampling below is riemfl's;
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

from .._validation import integer
from ..errors import ParameterError
from .trainer import TorchClientTrainer
from .wrapped_trainer import WrappedClientTrainer
from .wrapped_trainer import warmup_epochs as warmup_epochs_of

__all__ = ["BezierClientTrainer"]


class BezierClientTrainer(WrappedClientTrainer):
    """AsyncBezier's client: K1 FedProx epochs on the end point, then curve epochs on B.

    Parameters
    ----------
    trainer : TorchClientTrainer
        Data, model, loss, ``lr``, ``mu``, ``batch_size`` (the wrapped trainer's settings).
    warmup_epochs : int, optional
        K1 (default: the wrapped trainer's ``epochs``; Licudi et al. 2025, App. B: 2).
    curve_epochs : int
        Curve-learning epochs (Licudi et al. 2025, Sec. 4.2.2: 2, "as in the main results").
    curve_lr : float, optional
        Adam's step for the control point (default: the trainer's ``lr``; Licudi et al. 2025
        give no separate rate).
    freeze_end : bool
        Keep C fixed during curve learning (Licudi et al. 2025, Sec. 3: True).
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
        super().__init__(trainer, name)
        self.warmup_epochs = warmup_epochs_of(trainer, warmup_epochs, name)
        self.curve_epochs = integer(curve_epochs, f"{name}: curve_epochs", minimum=0)
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
    def num_batches(self, i: int, epochs: int | None = None) -> int:
        """Batches of K1 warm-up epochs plus the curve epochs (all cost compute time)."""
        warm = self.warmup_epochs if epochs is None else epochs
        return self.trainer.num_batches(i, warm + self.curve_epochs)

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
        g = _flat_loss_grad(model, params, loss_fn, point, xb, yb)
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


# ---------------------------------------------------------- AsyncCurve (Licudi 2025 (TR), Sec. 5.2)
#: Largest exponent of the Lorentz prox factor exp(d / sigma) (float64 exp(80) ~ 5.5e34).
LORENTZ_EXPONENT_CAP = 80.0


def lorentz_prox(
    theta: torch.Tensor,
    anchor: torch.Tensor,
    mu: float,
    sigma: float,
    beta: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    r"""Lorentz prox term :math:`\frac{\mu}{2}\exp(d/\sigma)` and its gradient in theta.

    Licudi 2025 (TR), eq. (24). With the lift :math:`\pi_L(x) = (\sqrt{\beta + \|x\|^2}, x)`
    onto the hyperboloid (eq. (27)) and :math:`x_0 = \sqrt{\beta + \|\theta\|^2}`, :math:`y_0 =
    \sqrt{\beta + \|\Theta^t\|^2}`, the squared Lorentzian distance (Lorentz inner product,
    eq. (26)) is

    .. math::  d = \|\pi_L(\theta) - \pi_L(\Theta^t)\|_L^2 = \|\delta\|^2 - (x_0 - y_0)^2,
               \qquad \delta = \theta - \Theta^t,

    evaluated without cancellation as :math:`x_0 - y_0 = \langle\delta, \theta + \Theta^t\rangle /
    (x_0 + y_0)` (so :math:`d \ge 0` holds in floating point as it does exactly). Gradient (the
    report does not write it; chain rule through :math:`\pi_L`): :math:`\frac{\mu}{2\sigma}
    e^{d/\sigma}\,(2\delta - 2(x_0 - y_0)\,\theta/x_0)`. Overflow-safe: the exponent is capped at
    :data:`LORENTZ_EXPONENT_CAP`; the third return value says whether the cap was hit (the value and
    gradient are then those of the capped factor, finite).

    Returns
    -------
    value, gradient, capped
    """
    delta = theta - anchor
    x0 = torch.sqrt(beta + torch.dot(theta, theta))
    y0 = torch.sqrt(beta + torch.dot(anchor, anchor))
    gap0 = torch.dot(delta, theta + anchor) / (x0 + y0)
    d = torch.clamp(torch.dot(delta, delta) - gap0 * gap0, min=0.0)
    exponent = float(d) / sigma
    capped = exponent > LORENTZ_EXPONENT_CAP
    factor = math.exp(min(exponent, LORENTZ_EXPONENT_CAP))
    grad_d = 2.0 * delta - (2.0 * gap0 / x0) * theta
    return (
        torch.as_tensor(0.5 * mu * factor, dtype=theta.dtype),
        (0.5 * mu * factor / sigma) * grad_d,
        capped,
    )


class CurveClientTrainer(WrappedClientTrainer):
    r"""AsyncCurve client (Licudi 2025 (TR), Algorithm 2, Adam form).

    Uploads :math:`(\Theta^t, \phi, \theta)` for
    :class:`~riemfl.federated.async_manifold.AsyncCurve`.

    Per epoch e = 1..E:

    1. **end point**: a pass of Adam (state kept across epochs, as in the report's Alg. 2) on
       :math:`l_i(\theta) + \frac{\mu}{2}\exp(\|\pi_L(\theta) - \pi_L(\Theta^t)\|_L^2/\sigma)`
       (eq. (24), :func:`lorentz_prox`);
    2. **control point**: with :math:`M = (\Theta^t + \theta)/2` and the pseudo-gradient
       :math:`u = \Theta^t - \theta`, a pass of a fresh Adam on the displacement
       :math:`\delta\phi` of :math:`\phi = M + (\delta\phi - \gamma P_u\,\delta\phi)`
       (eq. (30)), sampling :math:`\lambda \sim U[0,1]` per batch, loss :math:`l_i` (no prox, as
       in the report's Alg. 2) at :math:`(1-\lambda)^2\Theta^t + 2\lambda(1-\lambda)\phi +
       \lambda^2\theta`, gradient :math:`2\lambda(1-\lambda)(I - \gamma P_u) g`.

    Choices where the report is ambiguous or inconsistent: the curve uses the Bernstein weight
    :math:`2\lambda(1-\lambda)` of Licudi et al. 2025, eq. (8), not the report's
    :math:`\lambda(1-\lambda)` (eq. (28)), which with the midpoint control point does not give
    the straight line; E epochs, not the E + 1 of Alg. 2's inclusive loop; the uploaded control
    point is the projected :math:`\phi` that was trained, not the :math:`M + \delta\phi` that
    Alg. 2 returns; a fresh end-point Adam per call (no warm start of the moments from the
    server, Alg. 1); ``sigma`` defaults to D, so that the exponent is a per-parameter mean (the
    report gives no value, and :math:`e^{d/\sigma}` overflows for large D otherwise); the lift
    applies to the whole parameter vector, as eq. (24) is written (not per layer).

    Parameters
    ----------
    trainer : TorchClientTrainer
        Data, model, loss, ``lr`` (end point), ``batch_size``, ``epochs`` (E).
    control_lr : float, optional
        Adam step of the control point (default ``trainer.lr / 10``: "10x smaller than for the
        endpoints", Licudi 2025 (TR), Sec. 4).
    gamma : float in [0, 1]
        Orthogonality strength (Licudi 2025 (TR), eq. (30); 1: the control displacement is
        orthogonal to u).
    mu, sigma, beta : float
        Lorentz prox weight, temperature (default D) and hyperboloid constant.
    """

    #: a diagnostic counter that grows during a run: not a setting of the run's fingerprint
    run_state_attributes = ("capped",)

    def __init__(
        self,
        trainer: TorchClientTrainer,
        *,
        control_lr: float | None = None,
        gamma: float = 1.0,
        mu: float | None = None,
        sigma: float | None = None,
        beta: float = 1.0,
    ) -> None:
        name = "CurveClientTrainer"
        super().__init__(trainer, name)
        self.control_lr = trainer.lr / 10 if control_lr is None else float(control_lr)
        self.gamma = float(gamma)
        self.mu = trainer.mu if mu is None else float(mu)
        self.sigma = float(trainer.n_parameters) if sigma is None else float(sigma)
        self.beta = float(beta)
        checks = {
            "control_lr": self.control_lr > 0,
            "gamma": 0.0 <= self.gamma <= 1.0,
            "mu": self.mu >= 0,
            "sigma": self.sigma > 0,
            "beta": self.beta > 0,
        }
        for key, ok in checks.items():
            if not (ok and math.isfinite(getattr(self, key))):
                raise ParameterError(f"{name}: {key} out of range, got {getattr(self, key)!r}")
        self.capped = 0  # batches whose Lorentz prox exponent hit the cap (diagnostic)

    def num_batches(self, i: int, epochs: int | None = None) -> int:
        """Two passes (end point, control point) per epoch."""
        return 2 * self.trainer.num_batches(i, epochs)

    def train(
        self, i: int, start: np.ndarray, rng: np.random.Generator, epochs: int | None = None
    ) -> np.ndarray:
        r"""Upload :math:`(\Theta^t, \phi, \theta)`, float64 of shape (3, D)."""
        tr = self.trainer
        i = tr._client(i)
        n_epochs = tr.epochs if epochs is None else tr._epochs(epochs)
        tr._load(start, "train")
        seed = int(rng.integers(0, 2**63 - 1))
        model = tr.model
        params = list(model.parameters())
        anchor = parameters_to_vector(params).detach().clone()
        lo, hi = (int(v) for v in tr._offsets["train"][i : i + 2])
        theta = anchor.clone()
        delta_phi = torch.zeros_like(anchor)
        if hi == lo:
            return np.stack([anchor.double().numpy()] * 3)
        x, y = tr._x["train"][lo:hi], tr._y["train"][lo:hi]
        loss_fn = tr._loss_fn()
        gen = torch.Generator(device="cpu").manual_seed(seed)
        theta.requires_grad_(True)
        end_opt = torch.optim.Adam([theta], lr=tr.lr)
        model.train()
        with torch.random.fork_rng(devices=tr._fork_devices()):
            torch.manual_seed(seed)
            for _ in range(n_epochs):
                for idx in self._batches(hi - lo, gen, x.device):
                    g = self._loss_grad(model, params, loss_fn, theta.detach(), x[idx], y[idx])
                    _, prox_grad, capped = lorentz_prox(
                        theta.detach(), anchor, self.mu, self.sigma, self.beta
                    )
                    self.capped += int(capped)
                    theta.grad = g + prox_grad
                    end_opt.step()
                delta_phi = self._control_epoch(
                    model, params, loss_fn, anchor, theta.detach(), delta_phi, x, y, gen
                )
        phi = self._control_point(anchor, theta.detach(), delta_phi)
        out = torch.stack([anchor, phi, theta.detach()])
        return out.double().cpu().numpy()

    def _batches(self, n: int, gen: torch.Generator, device) -> list[torch.Tensor]:
        perm = torch.randperm(n, generator=gen).to(device)
        bs = self.trainer.batch_size
        return [perm[b : b + bs] for b in range(0, n, bs)]

    def _control_point(self, anchor, theta, delta_phi) -> torch.Tensor:
        """Licudi 2025 (TR), eq. (30): :math:`M + (\\delta\\phi - \\gamma P_u\\,\\delta\\phi)`."""
        return 0.5 * (anchor + theta) + self._orthogonalise(delta_phi, anchor - theta)

    def _orthogonalise(self, v: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        uu = torch.dot(u, u)
        if float(uu) == 0.0 or self.gamma == 0.0:
            return v
        return v - (self.gamma * torch.dot(v, u) / uu) * u

    def _control_epoch(self, model, params, loss_fn, anchor, theta, delta_phi, x, y, gen):
        delta_phi = delta_phi.clone().requires_grad_(True)
        opt = torch.optim.Adam([delta_phi], lr=self.control_lr)  # fresh state every epoch
        u = anchor - theta
        for idx in self._batches(x.shape[0], gen, x.device):
            lam = float(torch.rand((), generator=gen))
            with torch.no_grad():
                phi = self._control_point(anchor, theta, delta_phi)
                point = (1 - lam) ** 2 * anchor + 2 * lam * (1 - lam) * phi + lam * lam * theta
            g = self._loss_grad(model, params, loss_fn, point, x[idx], y[idx])
            delta_phi.grad = (2 * lam * (1 - lam)) * self._orthogonalise(g, u)
            opt.step()
        return delta_phi.detach()

    @staticmethod
    def _loss_grad(model, params, loss_fn, point, xb, yb) -> torch.Tensor:
        return _flat_loss_grad(model, params, loss_fn, point, xb, yb)


def _flat_loss_grad(model, params, loss_fn, point, xb, yb) -> torch.Tensor:
    """The flat gradient of the mini-batch loss at the flat parameters ``point`` (one
    forward/backward; ``point`` is copied into the model's parameters)."""
    vector_to_parameters(point, params)
    for p in params:
        p.grad = None
    loss_fn(model(xb), yb).backward()
    return parameters_to_vector([p.grad for p in params])

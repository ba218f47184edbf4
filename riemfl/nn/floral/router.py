r"""The client's router: mixture weights :math:`\pi^k \in \Delta^{C-1}` over the C clusters.

.. math::

    \pi^k = \operatorname{softmax}(\theta^k),\qquad
    \pi^k_c = \frac{\exp\theta^k_c}{\sum_{c'}\exp\theta^k_{c'}}

(Almansoori et al. 2024, Sec. 5 "Learning the mixture weights"; Alg. 1, line 6). The logits
:math:`\theta^k \in \mathbb{R}^C` are **personal**: "a local parameter and not aggregated"
(Sec. 5); the trainer keeps one row per client and never uploads them. Initialisation
:math:`\theta = 0`, i.e. :math:`\pi = 1/C`, the uniform start of the paper's analysis
(Theorem 4.5). One router is shared by all adapted layers of a model (a choice: the paper does
not say whether routers are per model or per layer).

Modes
-----
``"learned"``
    :math:`\theta` is a trainable parameter (the softmax-parameterised gradient step of Alg. 1,
    line 7, with its own learning rate in :class:`~riemfl.nn.floral.FloralTrainer`). Optional
    exploration noise ``noise_std * U[0, 1)`` added to the logits in training mode only (the
    authors' public code, zeligism/FLoRAL; 0 by default, the paper has none).
``"fixed"``
    :math:`\pi` is a given point of the simplex, not trained; the oracle :math:`\pi^*` of the
    synthetic and clustered tasks is the one-hot vector of the client's true cluster
    (:meth:`Router.set_fixed`). The authors' public code emulates it with logits -100 and router
    learning rate 0; an exact one-hot is used here so that other clusters get weight exactly 0.
``"exp-weights"`` and ``"exp-weights-cumulative"``
    The router of the paper's theory (eq. (5); App. C.1, eq. (34): the entropic mirror-descent
    step): not trained by gradient but set from the client's per-cluster losses
    :math:`\ell_c = f^k(w_c)` (:meth:`Router.exp_weights_update`), :math:`\theta = -\eta\ell`
    so that :math:`\pi_c \propto \exp(-\eta f^k(w_c))`; the cumulative form keeps the
    previous logits, :math:`\theta \leftarrow \theta - \eta\ell`, i.e.
    :math:`\pi_{t+1} \propto \pi_t \exp(-\eta \ell)` (App. C.2). The trainer computes
    :math:`\ell` with C forward passes, one per cluster (:meth:`Router.one_hot`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from ..._validation import integer, is_int, real
from ...errors import ParameterError, ShapeError

__all__ = ["Router", "ROUTER_MODES", "EXP_WEIGHTS_MODES"]

#: the accepted router modes
ROUTER_MODES = ("learned", "fixed", "exp-weights", "exp-weights-cumulative")
#: the modes set by exponential weights from per-cluster losses
EXP_WEIGHTS_MODES = ("exp-weights", "exp-weights-cumulative")


class Router(nn.Module):
    """Softmax router over ``n_clusters`` clusters (module docstring).

    Parameters
    ----------
    n_clusters : int
        C >= 1.
    mode : {"learned", "fixed", "exp-weights", "exp-weights-cumulative"}
    noise_std : float, default 0
        Uniform noise ``noise_std * U[0, 1)`` on the logits in training mode ("learned" only).

    Attributes
    ----------
    logits : torch.nn.Parameter, shape (C,)
        :math:`\\theta`; ``requires_grad`` only in "learned" mode.
    fixed : torch.Tensor, shape (C,)
        The fixed probabilities of "fixed" mode (a buffer; uniform until :meth:`set_fixed`).
    """

    def __init__(self, n_clusters: int, mode: str = "learned", noise_std: float = 0.0) -> None:
        super().__init__()
        n_clusters = integer(n_clusters, "Router: n_clusters", minimum=1)
        if mode not in ROUTER_MODES:
            raise ParameterError(f"Router: mode must be one of {ROUTER_MODES}, got {mode!r}")
        noise_std = real(noise_std, "Router: noise_std", at_least=0)
        self.n_clusters = n_clusters
        self.mode = mode
        self.noise_std = float(noise_std)
        self.logits = nn.Parameter(torch.zeros(n_clusters), requires_grad=mode == "learned")
        #: the noise's generator (set by the trainer per local run, so runs are reproducible)
        self.generator: torch.Generator | None = None
        self.register_buffer("fixed", torch.full((n_clusters,), 1.0 / n_clusters))
        #: a one-hot vector that replaces pi while :meth:`one_hot` is active
        self.forced: torch.Tensor | None = None

    def forward(self) -> torch.Tensor:
        """:math:`\\pi` of shape (C,), differentiable in the logits in "learned" mode."""
        if self.forced is not None:
            return self.forced
        if self.mode == "fixed":
            return self.fixed
        theta = self.logits
        if self.training and self.noise_std > 0:
            # drawn on the CPU from the (CPU) generator, then moved: the same noise on any device
            noise = torch.rand(theta.shape, generator=self.generator, dtype=theta.dtype)
            theta = theta + self.noise_std * noise.to(theta.device)
        return torch.softmax(theta, dim=0)

    def probabilities(self) -> torch.Tensor:
        """:math:`\\pi` without noise and without gradient (what aggregation weights use)."""
        with torch.no_grad():
            if self.mode == "fixed":
                return self.fixed.clone()
            return torch.softmax(self.logits.detach(), dim=0)

    def set_fixed(self, pi: torch.Tensor | list[float] | int) -> None:
        """Set the fixed probabilities: a vector on the simplex, or a cluster index (one-hot).

        Raises
        ------
        ShapeError
            For a vector that is not of length C.
        ParameterError
            For negative entries, entries not summing to 1 (within 1e-6), or an index outside
            ``0..C-1``.
        """
        c = self.n_clusters
        if is_int(pi):
            pi = integer(pi, "Router.set_fixed: cluster index pi", minimum=0, maximum=c - 1)
            vec = torch.zeros(c)
            vec[pi] = 1.0
        else:
            vec = torch.as_tensor(pi, dtype=torch.float32).detach().reshape(-1)
            if vec.numel() != c:
                raise ShapeError(
                    f"Router.set_fixed: pi has {vec.numel()} entries, expected C = {c}"
                )
            if bool((vec < 0).any()) or abs(float(vec.sum()) - 1.0) > 1e-6:
                raise ParameterError(
                    "Router.set_fixed: pi must lie on the simplex (entries >= 0 summing to 1), "
                    f"got {vec.tolist()}"
                )
        self.fixed.copy_(vec.to(self.fixed))

    @contextmanager
    def one_hot(self, c: int) -> Iterator[None]:
        """Route every forward pass to cluster ``c`` alone while the context is active."""
        c = integer(c, "Router.one_hot: cluster c", minimum=0, maximum=self.n_clusters - 1)
        forced = torch.zeros_like(self.fixed)
        forced[c] = 1.0
        self.forced = forced
        try:
            yield
        finally:
            self.forced = None

    @torch.no_grad()
    def exp_weights_update(self, losses: torch.Tensor, eta: float) -> None:
        """Exponential weights from the per-cluster losses (C,) with step ``eta`` (>= 0):
        :math:`\\theta = -\\eta\\ell` ("exp-weights") or :math:`\\theta - \\eta\\ell`
        ("exp-weights-cumulative"), shifted so that the largest logit is 0.

        Raises
        ------
        ParameterError
            In another mode, or for a negative or non-finite ``eta`` or non-finite losses.
        ShapeError
            For losses that are not C numbers.
        """
        if self.mode not in EXP_WEIGHTS_MODES:
            raise ParameterError(f"Router.exp_weights_update: mode is {self.mode!r}")
        eta = real(eta, "Router.exp_weights_update: eta", at_least=0)
        ell = torch.as_tensor(losses).to(self.logits).reshape(-1)
        if ell.numel() != self.n_clusters:
            raise ShapeError(f"exp_weights_update: {ell.numel()} losses for C = {self.n_clusters}")
        if not bool(torch.isfinite(ell).all()):
            raise ParameterError("Router.exp_weights_update: the losses must be finite")
        prior = self.logits if self.mode == "exp-weights-cumulative" else 0.0
        theta = prior - eta * ell
        self.logits.copy_(theta - theta.max())

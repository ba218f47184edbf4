r"""The mixture-of-adaptors contract shared by every adapted layer type.

An adapted layer keeps its base module ``base`` (weight W, bias b) and, per cluster
c = 1..C, a low-rank adaptor whose weight change is a rank-r matrix in a fixed reshaping of the
weight (Almansoori et al. 2024, Sec. 3.2, eq. (1); App. F.1 for convolutions):

.. math::

    L_c = A_c B_c^\top,\qquad A_c \in \mathbb{R}^{m\times r}\ (\text{output side, "U"}),\quad
    B_c \in \mathbb{R}^{n\times r}\ (\text{input side, "V"}),

plus an optional bias adaptor :math:`L_{b,c} \in \mathbb{R}^{d_{out}}` (zero at start; Sec. 3.2
"Bias"). The layer mixes the adaptor **outputs** (equivalently their products, never the factors)
with the client's router, as the paper's synthetic targets do (Sec. 6, eq. (9); App. G.1,
eq. (43)):

.. math::

    y = W x + b + \alpha \sum_c w_c\,(L_c x + L_{b,c}),\qquad w_c = \max(\pi_c, \pi_{min}),

which, being linear in the adaptors, equals the layer with the merged weight
:math:`W + \alpha\sum_c w_c L_c` (:meth:`MixtureAdaptor.delta_weight`; the inference
``merge``). :math:`\alpha` is ``lora_scale`` (default 1; the :math:`\alpha` of eq. (9)) and
:math:`\pi_{min}` the clamp of the authors' public code, zeligism/FLoRAL (default 0: no clamp).

Parameters of every adapted layer (names used by the federated layout):

* ``lora_out``: the output-side factors, leading axis C;
* ``lora_in``: the input-side factors, leading axis C;
* ``lora_bias``: shape (C, d_out), or absent;
* ``base.*``: the original module's parameters.

:class:`MatrixView` maps a factor tensor to its matrix :math:`A_c` or :math:`B_c` (and back) for
numpy arrays and torch tensors alike, with any leading axes; the manifold-aware aggregation and
the ScaledGD preconditioner work on these matrices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..._validation import real
from ...errors import ParameterError, ShapeError

__all__ = ["MatrixView", "MixtureContext", "MixtureAdaptor", "INITS", "PRECONDITIONERS"]

#: factor initialisations: "lora" (input side random, output side zero: the authors' public code,
#: zeligism/FLoRAL, and standard LoRA) or "paper" (output side random, input side zero: the text
#: of Almansoori et al. 2024, Sec. 3.2)
INITS = ("lora", "paper")

#: ScaledGD with the r x r Gram matrices (Almansoori et al. 2024, App. D, eq. (36)), or the
#: Frobenius-norm scaling App. D uses for convolutions
PRECONDITIONERS = ("scaled_gd", "frobenius")


@dataclass(frozen=True)
class MatrixView:
    """Reshape ``(*lead, *tail)`` factor tensors into ``(*lead, rows, r)`` matrices and back.

    ``perm`` permutes the tail axes (so that the rank axis comes last), then the permuted tail
    is flattened into ``(rows, r)``.
    """

    tail: tuple[int, ...]
    perm: tuple[int, ...]

    @property
    def rows(self) -> int:
        return math.prod(self.tail[i] for i in self.perm[:-1])

    @property
    def rank(self) -> int:
        return self.tail[self.perm[-1]]

    def _axes(self, lead: int, perm: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(range(lead)) + tuple(lead + p for p in perm)

    @property
    def identity(self) -> bool:
        """True when the factor already is the matrix (linear layers)."""
        return len(self.tail) == 2 and self.perm == (0, 1)

    def to_matrix(self, t: Any) -> Any:
        if self.identity:
            return t
        lead = t.ndim - len(self.tail)
        axes = self._axes(lead, self.perm)
        moved = t.permute(*axes) if isinstance(t, torch.Tensor) else np.transpose(t, axes)
        return moved.reshape(*t.shape[:lead], self.rows, self.rank)

    def from_matrix(self, m: Any) -> Any:
        if self.identity:
            return m
        lead = m.ndim - 2
        permuted = tuple(self.tail[p] for p in self.perm)
        inverse = tuple(int(i) for i in np.argsort(self.perm))
        t = m.reshape(*m.shape[:lead], *permuted)
        axes = self._axes(lead, inverse)
        return t.permute(*axes) if isinstance(t, torch.Tensor) else np.transpose(t, axes)


class MixtureContext:
    r"""What every adapted layer of one model reads at forward time: the mixture weights.

    :class:`~riemfl.nn.floral.FloralModel` calls :meth:`set` with the router's :math:`\pi` before
    running its model and clears it afterwards; the mixture weights
    :math:`w = \alpha\max(\pi, \pi_{min})` are computed once per forward pass for all layers
    (:meth:`weights`).
    """

    def __init__(self, n_clusters: int, lora_scale: float = 1.0, min_prob: float = 0.0) -> None:
        self.n_clusters = n_clusters
        self.lora_scale = real(lora_scale, "MixtureAdaptor: lora_scale")
        self.min_prob = real(min_prob, "MixtureAdaptor: min_prob", at_least=0, below=1)
        self._w: torch.Tensor | None = None

    def mixture_weights(self, pi: torch.Tensor) -> torch.Tensor:
        r""":math:`\alpha\max(\pi, \pi_{min})` of a given :math:`\pi`.

        Raises
        ------
        ShapeError
            When ``pi`` is not a vector of length C.
        """
        if pi.shape != (self.n_clusters,):
            raise ShapeError(
                f"mixture weights: pi has shape {tuple(pi.shape)}, expected ({self.n_clusters},)"
            )
        if self.min_prob > 0:
            pi = pi.clamp(min=self.min_prob)
        return pi if self.lora_scale == 1.0 else self.lora_scale * pi

    def set(self, pi: torch.Tensor | None) -> None:
        r"""The :math:`\pi` of the coming forward pass (None: clear)."""
        self._w = None if pi is None else self.mixture_weights(pi)

    def weights(self, pi: torch.Tensor | None = None) -> torch.Tensor:
        """The mixture weights of ``pi``, or of the pi :meth:`set` for this forward pass.

        Raises
        ------
        ParameterError
            When no ``pi`` is given and none was set.
        """
        if pi is not None:
            return self.mixture_weights(pi)
        if self._w is None:
            raise ParameterError(
                "the adapted layer has no router probabilities: call it through its FloralModel "
                "(which sets them), or pass pi to delta_weight"
            )
        return self._w


class MixtureAdaptor(nn.Module):
    """Base class of the adapted layers (module docstring).

    Subclasses set ``base``, ``lora_out``, ``lora_in``, ``lora_bias`` (or None), ``rank``,
    ``out_view``, ``in_view`` and implement :meth:`_base_call`, :meth:`_merged_weight` (the
    batched merge), :meth:`weight_from_matrix` and :meth:`factored_output`.
    """

    base: nn.Module
    lora_out: nn.Parameter
    lora_in: nn.Parameter
    lora_bias: nn.Parameter | None
    out_view: MatrixView
    in_view: MatrixView
    rank: int

    def __init__(self, context: MixtureContext) -> None:
        super().__init__()
        self.context = context

    @property
    def n_clusters(self) -> int:
        return self.context.n_clusters

    # ------------------------------------------------------------------ construction helpers
    def _init_factors(self, init: str, fan_in_in: int, fan_in_out: int) -> None:
        """Uniform(+-sqrt(6 / fan_in)) on one side, zeros on the other (the authors' public
        code, zeligism/FLoRAL)."""
        if init not in INITS:
            raise ParameterError(f"adaptor init must be one of {INITS}, got {init!r}")
        random, zero = (
            (self.lora_in, self.lora_out) if init == "lora" else (self.lora_out, self.lora_in)
        )
        fan_in = fan_in_in if init == "lora" else fan_in_out
        bound = math.sqrt(6.0 / fan_in)
        with torch.no_grad():
            random.uniform_(-bound, bound)
            zero.zero_()

    def _make_bias(self, bias: bool, d_out: int, like: torch.Tensor) -> None:
        if bias:
            self.lora_bias = nn.Parameter(
                torch.zeros(self.n_clusters, d_out, dtype=like.dtype, device=like.device)
            )
        else:
            self.register_parameter("lora_bias", None)

    # ------------------------------------------------------------------ the forward pass
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The base operation with the merged weight and bias of the current mixture.

        Mixing adaptor outputs and merging are the same linear map, so the layer folds the
        mixture into the weight (:meth:`merged_parameters`: a few weight-sized operations,
        independent of the batch) and runs the base operation once, instead of running every
        adaptor on the data (:meth:`factored_output`, the reference the tests compare
        against), unless running them on the data costs fewer multiply-adds
        (:meth:`_prefers_factored`: large linear layers on few rows).
        """
        w = self.context.weights()
        if self._prefers_factored(x):
            return self._factored_forward(x, w)
        if _autocast_enabled(x.device.type):
            # merged in the parameters' dtype, as the base model's own weights are: autocast
            # casts the base operation that uses them
            with torch.autocast(x.device.type, enabled=False):
                merged = self.merged_parameters(w)
            return self._base_call(x, *merged)
        return self._base_call(x, *self.merged_parameters(w))

    def merged_parameters(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        r"""``(W', b')`` for mixture weights ``w``: :math:`W + K(\sum_c w_c A_c B_c^\top)` and
        :math:`b + \sum_c w_c L_{b,c}`.

        The formula of :func:`~riemfl.nn.floral.merge.reference_merge`, with all clusters in
        one product (:meth:`_merged_weight`); plain differentiable torch operations, no output
        a view of an input.
        """
        base = self.base
        return self._merged_weight(w, base.weight), self._merged_bias(w, base.bias)

    def _merged_weight(self, w: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        r""":math:`K(\sum_c w_c A_c B_c^\top)` in the base weight's shape, added to ``weight``
        unless it is None."""
        raise NotImplementedError

    def _merged_bias(self, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
        r""":math:`b + \sum_c w_c L_{b,c}` (``bias`` b may be None; without bias adaptors:
        ``bias`` itself)."""
        lora_bias = self.lora_bias
        if lora_bias is None:
            return bias
        if bias is None:
            return torch.mv(lora_bias.T, w)
        return torch.addmv(bias, lora_bias.T, w)

    def _w_repeated(self, w: torch.Tensor) -> torch.Tensor:
        """:math:`(w_1, ..., w_1, ..., w_C, ..., w_C)`, each weight r times (the columns of
        the stacked factors)."""
        return w if self.rank == 1 else w.repeat_interleave(self.rank)

    def _prefers_factored(self, x: torch.Tensor) -> bool:
        """Whether running the adaptors on ``x`` (:meth:`_factored_forward`) costs fewer
        multiply-adds than merging them into the weight (never, unless a subclass says so)."""
        return False

    def _factored_forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        r"""The layer without the merged weight: base, plus the mixture of adaptor outputs."""
        raise NotImplementedError

    def _base_call(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        """The base module's operation with the given weight and bias."""
        raise NotImplementedError

    def weight_from_matrix(self, matrix: torch.Tensor) -> torch.Tensor:
        r"""The :math:`m \times n` matrix of a weight change as a tensor of the base weight's
        shape (rows and columns as in :meth:`factor_matrices`)."""
        raise NotImplementedError

    def factored_output(self, x: torch.Tensor, pi: torch.Tensor | None = None) -> torch.Tensor:
        r""":math:`\alpha\sum_c w_c (L_c x + L_{b,c})` computed factor by factor (no base)."""
        raise NotImplementedError

    def delta_weight(self, pi: torch.Tensor | None = None) -> torch.Tensor:
        r""":math:`\alpha\sum_c w_c L_c` in the base weight's shape (for ``merge``)."""
        return self._merged_weight(self.context.weights(pi), None)

    def delta_bias(self, pi: torch.Tensor | None = None) -> torch.Tensor | None:
        r""":math:`\alpha\sum_c w_c L_{b,c}`, or None without bias adaptors."""
        return self._merged_bias(self.context.weights(pi), None)

    def factor_matrices(self) -> tuple[torch.Tensor, torch.Tensor]:
        r""":math:`(A, B)` of shapes (C, m, r) and (C, n, r): :math:`L_c = A_c B_c^\top`."""
        return self.out_view.to_matrix(self.lora_out), self.in_view.to_matrix(self.lora_in)

    def merged_base(self) -> nn.Module:
        """A copy of the base module with the adaptor mixture folded in (current pi)."""
        import copy

        merged = copy.deepcopy(self.base)
        with torch.no_grad():
            merged.weight.add_(self.delta_weight().to(merged.weight))
            db = self.delta_bias()
            if db is not None:
                if merged.bias is None:
                    merged.bias = nn.Parameter(db.detach().clone())
                else:
                    merged.bias.add_(db.to(merged.bias))
        return merged

    # ------------------------------------------------------------------ preconditioning
    @torch.no_grad()
    def precondition_grads(
        self,
        grad_out: torch.Tensor,
        grad_in: torch.Tensor,
        eps: float = 1e-5,
        kind: str = "scaled_gd",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        r"""Preconditioned factor gradients (Almansoori et al. 2024, App. D, eq. (36)); returns
        new tensors.

        With :math:`G_A`, :math:`G_B` the gradients of the matrix views of ``lora_out`` and
        ``lora_in`` (per cluster):

        * ``"scaled_gd"``: :math:`G_A \leftarrow G_A (B^\top B + \epsilon I)^{-1}`,
          :math:`G_B \leftarrow G_B (A^\top A + \epsilon I)^{-1}` (the preconditioner App. D
          takes from low-rank estimation, Tong et al. 2021). As :math:`\epsilon \to 0` the
          product moves by :math:`-\eta(P_A G + G P_B)` to first order (App. D), whatever the
          factorisation of :math:`A B^\top`. App. D writes the input-side gradient as
          :math:`G_V = G U`; with :math:`G = \nabla f(W + U V^\top)` the chain rule gives
          :math:`G^\top U`, which is what the factor gradients here are;
        * ``"frobenius"``: App. D's rule for convolutions,
          :math:`G_A / (\|B^\top B\|_F + \epsilon)` and :math:`G_B / (\|A^\top A\|_F + \epsilon)`
          (:math:`\epsilon` added to the norm as in the authors' public code, zeligism/FLoRAL).

        The r x r inverses of all clusters and both sides come from one batched call.
        """
        if kind not in PRECONDITIONERS:
            raise ParameterError(f"preconditioner must be one of {PRECONDITIONERS}, got {kind!r}")
        a, b = self.factor_matrices()
        ga = self.out_view.to_matrix(grad_out)
        gb = self.in_view.to_matrix(grad_in)
        grams = torch.cat([b.mT @ b, a.mT @ a])  # (2C, r, r): B^T B for G_A, A^T A for G_B
        c = a.shape[0]
        if kind == "scaled_gd" and self.rank == 1:  # 1 x 1 Gram matrices: a division
            scale = 1.0 / (grams[:, 0, 0] + eps)
            new_ga, new_gb = ga * scale[:c, None, None], gb * scale[c:, None, None]
        elif kind == "scaled_gd":
            eye = eps * torch.eye(self.rank, dtype=a.dtype, device=a.device)
            inv = torch.linalg.inv(grams + eye)
            new_ga, new_gb = ga @ inv[:c], gb @ inv[c:]
        else:
            scale = 1.0 / (torch.linalg.matrix_norm(grams) + eps)
            new_ga, new_gb = ga * scale[:c, None, None], gb * scale[c:, None, None]
        return self.out_view.from_matrix(new_ga), self.in_view.from_matrix(new_gb)


def _autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` ("cpu", "cuda", ...)."""
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 takes no device type
        if device_type == "cpu":
            return torch.is_autocast_cpu_enabled()
        return torch.is_autocast_enabled()

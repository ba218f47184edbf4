r"""The mixture-of-adaptors contract shared by every adapted layer type.

An adapted layer keeps its base module ``base`` (weight W, bias b) and, per cluster
c = 1..C, a low-rank adaptor whose weight change is a rank-r matrix in a fixed reshaping of the
weight (digest-002-003 B.2):

.. math::

    L_c = A_c B_c^\top,\qquad A_c \in \mathbb{R}^{m\times r}\ (\text{output side, "U"}),\quad
    B_c \in \mathbb{R}^{n\times r}\ (\text{input side, "V"}),

plus an optional bias adaptor :math:`L_{b,c} \in \mathbb{R}^{d_{out}}` (zero at start). The
layer mixes the adaptor **outputs** with the client's router (B.9 item 2, eq. (9)/(43)):

.. math::

    y = W x + b + \alpha \sum_c w_c\,(L_c x + L_{b,c}),\qquad w_c = \max(\pi_c, \pi_{min}),

which, being linear in the adaptors, equals the layer with the merged weight
:math:`W + \alpha\sum_c w_c L_c` (:meth:`MixtureAdaptor.delta_weight`; the inference
``merge``). :math:`\alpha` is ``lora_scale`` (default 1) and :math:`\pi_{min}` the [OUTSIDE]
code's clamp (default 0: no clamp).

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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ...errors import ParameterError
from .fused import _layer_tensors, merge_layers

__all__ = ["MatrixView", "MixtureContext", "MixtureAdaptor", "INITS", "PRECONDITIONERS"]

#: factor initialisations: "lora" (input side random, output side zero: the [OUTSIDE] code and
#: standard LoRA) or "paper" (output side random, input side zero: the paper's text, B.8 item 3)
INITS = ("lora", "paper")

#: ScaledGD (eq. 36) with the r x r Gram matrices, or the Frobenius-norm scaling of Appendix D
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

    :class:`~riemfl.nn.floral.FloralModel` calls :meth:`set` with the router's pi and its adapted
    layers once per forward pass: the mixture weights :math:`w = \alpha\,\max(\pi,
    \pi_{min})` are computed once for all layers (:meth:`weights`), and so are the merged
    weights and biases of the given layers, in one autograd node
    (:func:`~riemfl.nn.floral.fused.merge_layers`); each layer reads its own with
    :meth:`merged`.
    """

    def __init__(self, n_clusters: int, lora_scale: float = 1.0, min_prob: float = 0.0) -> None:
        if not (isinstance(lora_scale, (int, float)) and math.isfinite(lora_scale)):
            raise ParameterError(f"lora_scale must be a finite number, got {lora_scale!r}")
        if not (isinstance(min_prob, (int, float)) and 0 <= min_prob < 1):
            raise ParameterError(f"min_prob must be in [0, 1), got {min_prob!r}")
        self.n_clusters = n_clusters
        self.lora_scale = float(lora_scale)
        self.min_prob = float(min_prob)
        self._w: torch.Tensor | None = None
        #: the router's logits of this forward pass when the compiled layer makes w from them
        self._logits: torch.Tensor | None = None
        #: whether a layer outside the compiled chains asked for w in a pass that gave logits
        #: (FloralModel then gives pi: one softmax node for all the layers)
        self.layers_need_weights = False
        self._merged: dict = {}
        #: the compiled layer of this forward pass (:meth:`set_compiled`), or None
        self._kernel: Any = None
        #: whether runs of linear layers and activations run as compiled chains in this pass
        self._chains = False

    def mixture_weights(self, pi: torch.Tensor) -> torch.Tensor:
        r""":math:`\alpha\max(\pi, \pi_{min})` of a given pi."""
        if self.min_prob > 0:
            pi = pi.clamp(min=self.min_prob)
        return pi if self.lora_scale == 1.0 else self.lora_scale * pi

    def set(self, pi: torch.Tensor | None, layers: Sequence[MixtureAdaptor] = ()) -> None:
        """The pi of the coming forward pass (None: clear), and the layers to merge now.

        The merged weights of ``layers`` are computed here, once, from the parameters as they
        are now: call :meth:`set` again after changing them. A layer not given here merges its
        own weights at each call.
        """
        self._merged = {}
        self._kernel = None
        self._chains = False
        self._logits = None
        self._w = None if pi is None else self.mixture_weights(pi)
        if self._w is not None and layers:
            self._merged = merge_layers(layers, self._w)

    def set_compiled(
        self,
        kernel: Any,
        pi: torch.Tensor | None = None,
        logits: torch.Tensor | None = None,
        chains: bool = True,
    ) -> None:
        r"""The coming forward pass runs the adapted layers in the compiled extension ``kernel``
        (:mod:`~riemfl.nn.floral.kernels`): nothing is merged here.

        Give the pass's pi, or the router's ``logits`` :math:`\theta` (learned routing): then
        the compiled chains (:mod:`~riemfl.nn.floral.chain`) make
        :math:`w = \alpha\max(\operatorname{softmax}(\theta), \pi_{min})` and its gradient
        themselves, and :meth:`weights` makes w with torch operations only for the layers that
        ask for it. ``chains=False`` runs every adapted layer in its own node (no chains).
        """
        if (pi is None) == (logits is None):
            raise ParameterError("set_compiled: give exactly one of pi and logits")
        self._merged = {}
        self._logits = logits
        self._w = None if pi is None else self.mixture_weights(pi)
        self._kernel = kernel
        self._chains = chains

    def weights(self, pi: torch.Tensor | None = None) -> torch.Tensor:
        """The mixture weights of ``pi``, or of the pi :meth:`set` for this forward pass."""
        if pi is not None:
            return self.mixture_weights(pi)
        if self._w is None and self._logits is not None:
            self._w = self.mixture_weights(torch.softmax(self._logits, 0))
            self.layers_need_weights = True
        if self._w is None:
            raise ParameterError(
                "the adapted layer has no router probabilities: call it through its FloralModel "
                "(which sets them), or pass pi to delta_weight"
            )
        return self._w

    def __setstate__(self, state: dict) -> None:
        state.setdefault("_merged", {})  # contexts pickled before the fused merge
        state.setdefault("_logits", None)  # ... and before the router was folded in
        state.setdefault("layers_need_weights", False)
        state["_chains"] = False
        state["_kernel"] = None  # an extension module does not pickle (see __getstate__)
        self.__dict__.update(state)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_kernel"] = None
        return state

    def merged(self, layer: MixtureAdaptor) -> tuple[torch.Tensor, torch.Tensor | None]:
        r"""``(merged weight, merged bias)`` of ``layer`` for the pi of this forward pass.

        :math:`W + \sum_c w_c A_c B_c^\top` and :math:`b + \sum_c w_c L_{b,c}`: those computed
        by :meth:`set` for its layers, or computed now for another layer.

        Raises
        ------
        ParameterError
            When no pi was set.
        """
        got = self._merged.get(layer)
        if got is None:
            got = merge_layers((layer,), self.weights())[layer]
        return got


#: methods whose meaning the compiled layer (and the factored torch path) reproduces: a
#: subclass that overrides any of them runs the merge of the torch path
_COMPILED_CONTRACT = (
    "_delta",
    "_prefers_factored",
    "_factored_forward",
    "_base_call",
    "_kernel_spec_values",
    "_compiled_input",
    "_fusion_views",
    "_fused_weight",
    "_fused_weight_backward",
)
_compilable_classes: dict[type, bool] = {}


def _compilable(cls: type) -> bool:
    """Whether layers of class ``cls`` may run in the compiled layer: the class, or the class
    it inherits from that declares ``_compiled_kind``, defines the whole contract, and ``cls``
    overrides none of it."""
    got = _compilable_classes.get(cls)
    if got is None:
        owner = next((k for k in cls.__mro__ if "_compiled_kind" in k.__dict__), None)
        got = bool(
            owner is not None
            and owner.__dict__["_compiled_kind"] is not None
            and all(getattr(cls, name) is getattr(owner, name) for name in _COMPILED_CONTRACT)
        )
        _compilable_classes[cls] = got
    return got


class MixtureAdaptor(nn.Module):
    """Base class of the adapted layers (module docstring); subclasses define the views.

    Subclasses set ``base``, ``lora_out``, ``lora_in``, ``lora_bias`` (or None), ``rank``,
    ``out_view``, ``in_view`` and implement ``_base_call``, ``_delta`` and
    :meth:`factored_output`; for the fused merge of :mod:`~riemfl.nn.floral.fused` also
    ``_fusion_views``, ``_fused_weight`` and ``_fused_weight_backward`` (a subclass without
    them is merged with ``_delta`` and ordinary autograd).
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
        """Uniform(+-sqrt(6 / fan_in)) on one side, zeros on the other ([OUTSIDE] code)."""
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

    # ------------------------------------------------------------------ the contract
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The base operation with the merged weight and bias of the current mixture.

        Mixing adaptor outputs and merging are the same linear map, so the forward pass folds
        the mixture into the weight (a few small weight-sized operations, independent of the
        batch, done for all the layers of a model at once by :meth:`MixtureContext.set`) and
        runs the base operation once, instead of running every adaptor on the data
        (:meth:`factored_output`, the reference path the tests compare against), unless running
        them on the data is cheaper (:meth:`_prefers_factored`: large linear layers on few
        rows). Inside a :class:`~riemfl.nn.floral.FloralModel` on the CPU the whole layer runs in
        the compiled layer of :mod:`~riemfl.nn.floral.kernels` where it is available.
        """
        context = self.context
        kernel = context._kernel
        if kernel is not None and _compilable(type(self)) and self._compiled_input(x):
            weight, bias, lora_out, lora_in, lora_bias = _layer_tensors(self)
            spec = self.__dict__.get("_kernel_spec")
            if spec is None:
                spec = self.__dict__["_kernel_spec"] = kernel.Spec(self._kernel_spec_values())
            w = context.weights()
            return kernel.floral_op(x, weight, bias, lora_out, lora_in, lora_bias, w, spec)
        # a large linear layer on few rows runs factored; FloralModel reads the hint at the next
        # pass and leaves the layer out of the merge (this pass uses a merge already made)
        factored = _compilable(type(self)) and self._prefers_factored(x)
        self.__dict__["_factored_hint"] = factored
        got = context._merged.get(self)
        if got is None:
            if factored:
                return self._factored_forward(x, context.weights())
            got = context.merged(self)
        return self._base_call(x, *got)

    def _prefers_factored(self, x: torch.Tensor) -> bool:
        """Whether running the adaptors on ``x`` (:meth:`_factored_forward`) costs fewer
        multiply-adds than merging them into the weight (never, unless a subclass says so)."""
        return False

    def _factored_forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        r"""The layer without the merged weight: base, plus the mixture of adaptor outputs."""
        raise NotImplementedError

    #: the compiled layer's kind for this class ("linear", "conv2d"; None: not compiled)
    _compiled_kind: str | None = None

    def _compiled_input(self, x: torch.Tensor) -> bool:
        """Whether the compiled layer takes this input (else: the torch path)."""
        return True

    def _kernel_spec_values(self) -> list[int]:
        """The layer's description for the compiled layer: kind (0 linear, 1 conv2d), C, r, m,
        n, c_out, c_in, the out and in kernels' (height, width), stride, padding, dilation
        (``csrc/floral_ops.cpp``)."""
        raise NotImplementedError

    def _base_call(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
        raise NotImplementedError

    def _delta(self, w: torch.Tensor) -> torch.Tensor:
        r""":math:`\sum_c w_c L_c` in the base weight's shape, for mixture weights w."""
        raise NotImplementedError

    def _fusion_views(
        self,
        lora_out: torch.Tensor,
        lora_in: torch.Tensor,
        lora_bias: torch.Tensor | None,
    ) -> tuple:
        r"""Reshapings of the factors that :meth:`_fused_weight` uses, last :math:`L_b^\top`.

        Views of the given tensors where possible (then cached across passes by
        :mod:`~riemfl.nn.floral.fused`), None where a copy would be needed; the last entry is
        the transposed bias adaptors (d_out, C), or None.
        """
        raise NotImplementedError

    def _fused_weight(
        self,
        w: torch.Tensor,
        shared: dict,
        weight: torch.Tensor,
        lora_out: torch.Tensor,
        views: tuple,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        r"""Forward of :class:`~riemfl.nn.floral.fused.MixtureMerge` for this layer.

        Returns :math:`W + \sum_c w_c A_c B_c^\top` in the weight's shape and the scaled
        factor kept for the backward pass; ``shared`` holds reshapings of w common to all
        layers (:func:`~riemfl.nn.floral.fused.weight_vector`).
        """
        raise NotImplementedError

    _fused_weight.fusion_missing = True  # type: ignore[attr-defined]  # subclasses override

    def _fused_weight_backward(
        self,
        g: torch.Tensor,
        w: torch.Tensor,
        shared: dict,
        lora_out: torch.Tensor,
        views: tuple,
        scaled: torch.Tensor | None,
        need_out: bool,
        need_in: bool,
        need_w: bool,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        r"""Backward of :meth:`_fused_weight` for the weight gradient ``g``.

        Returns the gradients of ``lora_out`` and ``lora_in`` (None where not needed) and, if
        ``need_w``, :math:`(\langle G, A_c B_c^\top\rangle)_c`. ``scaled`` is what
        :meth:`_fused_weight` kept, or None to remake it.
        """
        raise NotImplementedError

    def factored_output(self, x: torch.Tensor, pi: torch.Tensor | None = None) -> torch.Tensor:
        r""":math:`\alpha\sum_c w_c (L_c x + L_{b,c})` computed factor by factor (no base)."""
        raise NotImplementedError

    def __getstate__(self) -> dict:
        state = dict(super().__getstate__())
        state.pop("_fusion_cache", None)  # views of this module's own parameters
        state.pop("_kernel_spec", None)  # an extension object (remade on first use)
        return state

    def delta_weight(self, pi: torch.Tensor | None = None) -> torch.Tensor:
        r""":math:`\alpha\sum_c w_c L_c` in the base weight's shape (for ``merge``)."""
        return self._delta(self.context.weights(pi))

    def delta_bias(self, pi: torch.Tensor | None = None) -> torch.Tensor | None:
        r""":math:`\alpha\sum_c w_c L_{b,c}`, or None without bias adaptors."""
        if self.lora_bias is None:
            return None
        return self.context.weights(pi) @ self.lora_bias

    def factor_matrices(self) -> tuple[torch.Tensor, torch.Tensor]:
        """:math:`(A, B)` of shapes (C, m, r) and (C, n, r): :math:`L_c = A_c B_c^\\top`."""
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
        r"""Preconditioned factor gradients (Appendix D, eq. (36)); returns new tensors.

        With :math:`G_A`, :math:`G_B` the gradients of the matrix views of ``lora_out`` and
        ``lora_in`` (per cluster):

        * ``"scaled_gd"``: :math:`G_A \leftarrow G_A (B^\top B + \epsilon I)^{-1}`,
          :math:`G_B \leftarrow G_B (A^\top A + \epsilon I)^{-1}` (ScaledGD, Tong et al. 2021;
          Riemannian gradient descent on the quotient by GL(r), digest B.10). To first order
          the product moves by :math:`-\eta(P_A G + G P_B)` (B.4). The paper's
          :math:`G_V = GU` is read as :math:`G^\top U` (B.8 item 4);
        * ``"frobenius"``: the paper's conv rule, :math:`G_A / (\|B^\top B\|_F + \epsilon)`
          and :math:`G_B / (\|A^\top A\|_F + \epsilon)` ([OUTSIDE] code).

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

r"""One autograd node for the merged weights and biases of every adapted layer of a model.

For a model's adapted layers :math:`\ell = 1..L` (weight :math:`W_\ell`, bias :math:`b_\ell`,
factors :math:`A_{\ell c}`, :math:`B_{\ell c}`, bias adaptors :math:`L_{b,\ell c}`) and the
mixture weights :math:`w = \alpha\max(\pi, \pi_{min})` of the forward pass,
:class:`MixtureMerge` computes

.. math::

    M_\ell = W_\ell + \sum_c w_c A_{\ell c} B_{\ell c}^\top,\qquad
    \beta_\ell = b_\ell + \sum_c w_c L_{b,\ell c}

(:math:`M_\ell` in the base weight's shape, e.g. a convolution kernel) with autograd off, and
its backward pass maps the gradients :math:`G_\ell = \partial f/\partial M_\ell` and
:math:`g_\ell = \partial f/\partial\beta_\ell` to

.. math::

    \frac{\partial f}{\partial W_\ell} = G_\ell,\quad
    \frac{\partial f}{\partial A_{\ell c}} = w_c\,G_\ell B_{\ell c},\quad
    \frac{\partial f}{\partial B_{\ell c}} = w_c\,G_\ell^\top A_{\ell c},\quad
    \frac{\partial f}{\partial b_\ell} = g_\ell,\quad
    \frac{\partial f}{\partial L_{b,\ell c}} = w_c\,g_\ell,

    \frac{\partial f}{\partial w_c} = \sum_\ell \langle G_\ell B_{\ell c}, A_{\ell c}\rangle
        + \langle g_\ell, L_{b,\ell c}\rangle,

(the matrix views :math:`A`, :math:`B` of :class:`~riemfl.nn.floral.adaptor.MatrixView`), the
same numbers as autograd through the plain formula (:func:`plain_merge`; the tests compare
them) with one node for the whole model instead of some ten per layer: at the digits MLP's
size the training step is dominated by the per-operation overhead, not by arithmetic. Per
layer the forward pass is one scaling of a factor, one ``addmm`` (linear) or product and add
(convolution), one ``addmv`` for the bias; the backward pass two products and a few
element-wise operations; the w-scaled factor of the forward pass is kept for it, and the
reshapings of the parameters (views) are cached across passes (:func:`_views`). The backward
pass is written in differentiable torch operations on the saved inputs, so second derivatives
(``create_graph=True``) stay available; under ``torch.func`` transforms :func:`merge_layers`
falls back to :func:`plain_merge`.

This is the **torch path** of :meth:`~riemfl.nn.floral.FloralModel.forward` (on the CPU the
compiled layer of :mod:`~riemfl.nn.floral.kernels` is used where it is available): it calls
:func:`merge_layers` once per pass (through
:meth:`~riemfl.nn.floral.adaptor.MixtureContext.set`); each adapted layer then runs its base
operation with its merged weight and bias, exactly as the base model runs its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from ...errors import ShapeError

if TYPE_CHECKING:  # pragma: no cover
    from .adaptor import MixtureAdaptor

__all__ = [
    "MixtureMerge",
    "merge_layers",
    "plain_merge",
    "weight_vector",
    "weight_column",
    "autocast_enabled",
]

#: tensors per layer passed to :class:`MixtureMerge`: weight, bias, lora_out, lora_in, lora_bias
_PER_LAYER = 5


class MixtureMerge(torch.autograd.Function):
    r"""Merged weights and biases of several adapted layers, one autograd node (module docstring).

    ``MixtureMerge.apply(layers, w, *tensors)`` with ``tensors`` the concatenation, layer by
    layer, of ``(base.weight, base.bias, lora_out, lora_in, lora_bias)`` (biases may be None)
    returns, layer by layer, the merged weight and, for a layer with bias adaptors, the merged
    bias. Prefer :func:`merge_layers`, which builds the arguments and checks them.
    """

    @staticmethod
    def forward(ctx: Any, layers: tuple, w: torch.Tensor, *tensors: torch.Tensor | None):
        outs: list[torch.Tensor] = []
        saved: list[Any] = []
        views: list[tuple] = []
        shared: dict = {}  # reshapings of w, made once for all layers
        i = 0
        for layer in layers:
            weight, bias, lora_out, lora_in, lora_bias = tensors[i : i + _PER_LAYER]
            i += _PER_LAYER
            v = _views(layer, lora_out, lora_in, lora_bias)
            merged, extra = layer._fused_weight(w, shared, weight, lora_out, v)
            outs.append(merged)
            saved.append(extra)
            views.append(v)
            if lora_bias is not None:  # b + L_b^T w
                outs.append(torch.mv(v[-1], w) if bias is None else torch.addmv(bias, v[-1], w))
        ctx.layers = layers
        ctx.extra = saved
        ctx.views = views
        ctx.shared = shared
        # the backward pass reads the factors, not the base weight and bias
        ctx.save_for_backward(
            w, *(t for i in range(0, len(tensors), _PER_LAYER) for t in tensors[i + 2 : i + 5])
        )
        ctx.set_materialize_grads(False)
        return tuple(outs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None):
        w, *factors = ctx.saved_tensors  # (lora_out, lora_in, lora_bias) of every layer
        needs = ctx.needs_input_grad
        need_w = needs[1]
        layers = ctx.layers
        if torch.is_grad_enabled():
            # second derivatives: remake from the saved inputs what the forward pass made
            # without autograd, so that the graph of this backward pass reaches them
            shared, extra = {}, [None] * len(layers)
            views = [
                layer._fusion_views(*factors[3 * j : 3 * j + 3]) for j, layer in enumerate(layers)
            ]
        else:
            shared, extra, views = ctx.shared, ctx.extra, ctx.views
        dw = None
        out: list[torch.Tensor | None] = [None, None]
        i = k = 0
        for j, layer in enumerate(layers):
            lora_bias = factors[3 * j + 2]
            g = grads[k]
            k += 1
            gb = None
            if lora_bias is not None:
                gb = grads[k]
                k += 1
            d_out = d_in = d_lbias = dw_layer = None
            if g is not None:
                d_out, d_in, dw_layer = layer._fused_weight_backward(
                    g,
                    w,
                    shared,
                    factors[3 * j],
                    views[j],
                    extra[j],
                    needs[i + 4],
                    needs[i + 5],
                    need_w,
                )
            if gb is not None:
                if needs[i + 6]:
                    d_lbias = weight_column(shared, w, 1) * gb  # w_c g_b
                if need_w:  # <g_b, L_b,c>
                    dw_layer = (
                        torch.mv(lora_bias, gb)
                        if dw_layer is None
                        else torch.addmv(dw_layer, lora_bias, gb)
                    )
            if dw_layer is not None:
                dw = dw_layer if dw is None else dw + dw_layer
            out += (g if needs[i + 2] else None, gb if needs[i + 3] else None, d_out, d_in, d_lbias)
            i += _PER_LAYER
        out[1] = dw
        return tuple(out)


def _views(layer: MixtureAdaptor, lora_out, lora_in, lora_bias) -> tuple:
    """The layer's reshapings of its factors (:meth:`MixtureAdaptor._fusion_views`), cached.

    They are views of the parameters' storage, made once and detached (the merge runs without
    autograd); they are remade when a parameter is replaced or its storage changes (``.data``
    assignment, ``.to()``, a deep copy), which the identities and data pointers detect.
    """
    cached = layer.__dict__.get("_fusion_cache")
    if (
        cached is not None
        and cached[0] is lora_out
        and cached[1] is lora_in
        and cached[2] is lora_bias
        and cached[3] == lora_out.data_ptr()
        and cached[4] == lora_in.data_ptr()
        and (lora_bias is None or cached[5] == lora_bias.data_ptr())
    ):
        return cached[6]
    factors = (lora_out, lora_in, lora_bias)
    views = layer._fusion_views(*(None if t is None else t.detach() for t in factors))
    if all(t is None or t.is_contiguous() for t in factors):  # else reshapes may copy
        ptrs = tuple(None if t is None else t.data_ptr() for t in factors)
        layer.__dict__["_fusion_cache"] = (*factors, *ptrs, views)
    return views


def weight_vector(shared: dict, w: torch.Tensor, r: int) -> torch.Tensor:
    """:math:`(w_1, ..., w_1, ..., w_C, ..., w_C)`, each r times (made once per pass)."""
    got = shared.get(r)
    if got is None:
        got = shared[r] = w if r == 1 else w.repeat_interleave(r)
    return got


def weight_column(shared: dict, w: torch.Tensor, r: int) -> torch.Tensor:
    """:func:`weight_vector` as a (C r, 1) column (made once per pass)."""
    got = shared.get(-r)
    if got is None:
        got = shared[-r] = weight_vector(shared, w, r).view(-1, 1)
    return got


def _layer_tensors(layer: MixtureAdaptor) -> tuple[torch.Tensor | None, ...]:
    """``(base.weight, base.bias, lora_out, lora_in, lora_bias)`` (the parameter dictionaries
    read directly: attribute access on a module is slow next to the operations themselves)."""
    own = layer._parameters
    base = layer._modules["base"]
    try:
        weight, bias = base._parameters["weight"], base._parameters["bias"]
    except KeyError:  # e.g. a parametrised base weight
        weight, bias = base.weight, base.bias
    return weight, bias, own["lora_out"], own["lora_in"], own["lora_bias"]


def merge_layers(
    layers: Sequence[MixtureAdaptor], w: torch.Tensor
) -> dict[MixtureAdaptor, tuple[torch.Tensor, torch.Tensor | None]]:
    r"""``{layer: (merged weight, merged bias)}`` for mixture weights ``w``, one autograd node.

    The merged weight is :math:`W + \sum_c w_c A_c B_c^\top` in the base weight's shape and
    the merged bias :math:`b + \sum_c w_c L_{b,c}` (the base bias itself, possibly None, for a
    layer without bias adaptors). Under a ``torch.func`` transform (which custom autograd
    functions without a vmap rule do not support) the same numbers come from
    :func:`plain_merge`.

    Parameters
    ----------
    layers : sequence of MixtureAdaptor
        Adapted layers sharing the C of ``w``.
    w : torch.Tensor, shape (C,)
        Mixture weights (:meth:`~riemfl.nn.floral.adaptor.MixtureContext.weights`).

    Raises
    ------
    ShapeError
        When ``w`` is not a vector of length C of every layer.
    """
    if not layers:
        return {}
    tensors: list[torch.Tensor | None] = []
    fusable = True
    for layer in layers:
        tensors += _layer_tensors(layer)
        fusable = fusable and _fusable(layer)
    shape = w.shape
    for t in tensors[2::_PER_LAYER]:
        if len(shape) != 1 or t.shape[0] != shape[0]:
            raise ShapeError(
                f"merge_layers: mixture weights of shape {tuple(shape)} do not match the "
                f"layers' cluster counts {sorted({t.shape[0] for t in tensors[2::_PER_LAYER]})}"
            )
    if autocast_enabled(w.device.type):
        # the merged weights in the parameters' dtype, as the base model's own weights: the
        # base operations that use them are the ones autocast casts
        with torch.autocast(w.device.type, enabled=False):
            return merge_layers(layers, w)
    if _transforms_active():
        return plain_merge(layers, w)
    if not fusable:
        plain = [layer for layer in layers if not _fusable(layer)]
        merged = plain_merge(plain, w)
        fused = [layer for layer in layers if _fusable(layer)]
        return {**merge_layers(fused, w), **merged} if fused else merged
    outs = MixtureMerge.apply(tuple(layers), w, *tensors)
    merged = {}
    k = 0
    for i, layer in enumerate(layers):
        if tensors[_PER_LAYER * i + 4] is None:
            merged[layer] = (outs[k], tensors[_PER_LAYER * i + 1])
            k += 1
        else:
            merged[layer] = (outs[k], outs[k + 1])
            k += 2
    return merged


def _fusable(layer: MixtureAdaptor) -> bool:
    """Whether the layer's class implements the fused merge (else: :func:`plain_merge`)."""
    return not getattr(type(layer)._fused_weight, "fusion_missing", False)


def plain_merge(
    layers: Sequence[MixtureAdaptor], w: torch.Tensor
) -> dict[MixtureAdaptor, tuple[torch.Tensor, torch.Tensor | None]]:
    r""":func:`merge_layers` with ordinary autograd operations, layer by layer (the reference).

    :math:`W + \sum_c w_c A_c B_c^\top` (:meth:`MixtureAdaptor.delta_weight`'s formula) and
    :math:`b + L_b^\top w`; the gradients of :func:`merge_layers` are tested against these.
    """
    merged = {}
    for layer in layers:
        weight, bias, _, _, lora_bias = _layer_tensors(layer)
        if lora_bias is not None:
            bias = lora_bias.T @ w if bias is None else torch.addmv(bias, lora_bias.T, w)
        merged[layer] = (weight + layer._delta(w), bias)
    return merged


def autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` ("cpu", "cuda", ...)."""
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 takes no device type
        if device_type == "cpu":
            return torch.is_autocast_cpu_enabled()
        return torch.is_autocast_enabled()


def _transforms_active() -> bool:
    """Whether a ``torch.func`` transform (vmap, grad, jvp, ...) is running."""
    active = getattr(torch._C, "_are_functorch_transforms_active", None)
    return bool(active is not None and active())

r"""Runs of adapted linear layers and activations in one compiled autograd node.

Inside an ``nn.Sequential`` of a FLoRAL model, a run of
:class:`~riemfl.nn.floral.MixtureLinear` layers, each followed by at most one ``nn.ReLU``,
``nn.Tanh`` or ``nn.Sigmoid``, is the chain

.. math::

    h_0 = x,\qquad z_l = h_{l-1} W_l'^\top + b_l',\qquad h_l = \mathrm{act}_l(z_l),

with the merged weights :math:`W_l' = W_l + \sum_c w_c A_{l,c} B_{l,c}^\top` and biases
:math:`b_l' = b_l + \sum_c w_c L_{b,l,c}` of the current mixture (eq. (1) of the paper, digest
B.2). The compiled extension (:mod:`~riemfl.nn.floral.kernels`) runs such a run as **one**
autograd node, ``floral_chain``: every layer's forward and backward pass is the compiled
layer's (the merge or the factored pass, by the same rule), the activations' backward passes
are done in the same node, and torch's fixed costs per module call, per operation and per
autograd node (a few microseconds each, the bulk of a small model's training step) are paid once
per run instead of once per layer and activation. The numbers are those of running the modules
one by one (tests compare them, and the second derivatives).

:func:`~riemfl.nn.floral.floralize` makes every plain ``nn.Sequential`` holding an adapted
linear layer a :class:`FloralSequential` (same children, same parameter names and state dict;
:meth:`FloralModel.merge <riemfl.nn.floral.FloralModel.merge>` gives back plain ones). A run is
left to the modules themselves, one by one, when the compiled layer is not in use (the torch
path: :mod:`~riemfl.nn.floral.fused`), with ``FloralModel.backend = "layers"``, when a module
of the run has hooks (or global module hooks are set), or when a layer's class overrides the
compiled layer's contract.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as _module_globals

from .adaptor import MixtureAdaptor, _compilable
from .fused import _layer_tensors
from .linear import MixtureLinear

__all__ = ["FloralSequential", "ACTIVATION_CODES"]

#: activation modules a run may hold after a layer, and their codes in the extension
#: (``csrc/floral_ops.cpp``, ``Activation``); exact types only (a subclass may change forward)
ACTIVATION_CODES: dict[type, int] = {nn.ReLU: 1, nn.Tanh: 2, nn.Sigmoid: 3}

#: a module's hook dictionaries (torch registers hooks into them in place)
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
#: torch's global module hooks (``register_module_forward_hook`` etc.), also filled in place
_GLOBAL_HOOK_DICTS = tuple(
    getattr(_module_globals, f"_global_{name[1:]}")
    for name in _HOOK_DICTS
    if hasattr(_module_globals, f"_global_{name[1:]}")
)


class _Run:
    """A run of adapted linear layers (each with its activation or none) of one context."""

    def __init__(self, modules: list[nn.Module]) -> None:
        self.modules = tuple(modules)
        self.layers: list[MixtureLinear] = []
        self.acts: list[int] = []
        for m in modules:
            if isinstance(m, MixtureLinear):
                self.layers.append(m)
                self.acts.append(0)
            else:
                self.acts[-1] = ACTIVATION_CODES[type(m)]
        self.context = self.layers[0].context
        self.classes = tuple(map(type, modules))  # a class may be swapped later
        self.specs = [layer._kernel_spec_values() for layer in self.layers]
        self._hook_dicts = tuple(getattr(m, name) for m in modules for name in _HOOK_DICTS)
        self._chain: Any = None
        self._chain_key: tuple | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        context = self.context
        kernel = context._kernel
        if (
            not context._chains
            or any(self._hook_dicts)
            or any(_GLOBAL_HOOK_DICTS)
            or tuple(map(type, self.modules)) != self.classes
        ):
            for m in self.modules:
                x = m(x)
            return x
        params: list[torch.Tensor] = []
        flags = []
        for layer in self.layers:
            weight, bias, lora_out, lora_in, lora_bias = _layer_tensors(layer)
            params.append(weight)
            if bias is not None:
                params.append(bias)
            params.append(lora_out)
            params.append(lora_in)
            if lora_bias is not None:
                params.append(lora_bias)
            flags.append((bias is not None, lora_bias is not None))
        key = (id(kernel), tuple(flags))
        if key != self._chain_key:
            self._chain = kernel.Chain(
                self.specs, self.acts, [f[0] for f in flags], [f[1] for f in flags]
            )
            self._chain_key = key
        logits = context._logits
        if logits is not None:  # the router folded in: w = scale max(softmax(logits), min_prob)
            return kernel.floral_chain(
                x, logits, params, self._chain, True, context.lora_scale, context.min_prob
            )
        return kernel.floral_chain(x, context.weights(), params, self._chain)


def _runs(modules: tuple[nn.Module, ...]) -> list[nn.Module | _Run]:
    """The modules, with each maximal run of fusable layers and activations made a _Run."""
    items: list[nn.Module | _Run] = []
    run: list[nn.Module] = []

    def close() -> None:
        if run:
            items.append(_Run(run))
            run.clear()

    for m in modules:
        fusable_layer = (
            isinstance(m, MixtureLinear)
            and _compilable(type(m))
            and type(m)._compiled_kind == "linear"
            and (not run or run[0].context is m.context)  # type: ignore[union-attr]
        )
        if fusable_layer:
            run.append(m)
        elif type(m) in ACTIVATION_CODES and run and isinstance(run[-1], MixtureAdaptor):
            run.append(m)
        else:
            close()
            items.append(m)
    close()
    return items


class FloralSequential(nn.Sequential):
    """``nn.Sequential`` whose runs of adapted linear layers and activations run as one
    compiled autograd node (module docstring); otherwise an ``nn.Sequential``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        modules = tuple(self._modules.values())
        plan = self.__dict__.get("_chain_plan")
        if plan is None or plan[0] != modules:
            plan = self.__dict__["_chain_plan"] = (modules, _runs(modules))
        for item in plan[1]:
            x = item(x)
        return x

    def __getstate__(self) -> dict:
        state = dict(super().__getstate__())
        state.pop("_chain_plan", None)  # holds extension objects; remade at the next call
        return state


def make_fusable(model: nn.Module) -> None:
    """Make every plain ``nn.Sequential`` of ``model`` holding an adapted linear layer a
    :class:`FloralSequential` (in place; children, names and state dict unchanged)."""
    for m in model.modules():
        if type(m) is nn.Sequential and any(isinstance(c, MixtureLinear) for c in m.children()):
            m.__class__ = FloralSequential


def make_plain(model: nn.Module) -> None:
    """Undo :func:`make_fusable` (in place): every :class:`FloralSequential` becomes a plain
    ``nn.Sequential``."""
    for m in model.modules():
        if type(m) is FloralSequential:
            m.__dict__.pop("_chain_plan", None)
            m.__class__ = nn.Sequential

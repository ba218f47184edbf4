"""Helpers shared by the FLoRAL test modules (imported by name: pytest puts this directory on
``sys.path`` for the test modules in it)."""

from __future__ import annotations

import torch

from riemfl.nn.floral.adaptor import MixtureAdaptor
from riemfl.nn.floral.merge import reference_merge


def randomise(model, seed=0):
    """Non-zero factors, bias adaptors and router logits (the LoRA init zeroes one side)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, layer in model.adaptors():
            for p in (layer.lora_out, layer.lora_in, layer.lora_bias):
                if p is not None:
                    p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
        logits = model.router.logits
        logits.copy_(torch.randn(logits.shape, generator=g, dtype=logits.dtype))
    return model


def _reference_forward(self, x):
    return self._base_call(x, *reference_merge(self, self.context.weights()))


def use_reference_merge(monkeypatch):
    """Make every adapted layer run its base operation with the weight and bias of
    :func:`~riemfl.nn.floral.merge.reference_merge` (no batched merge, no factored pass)."""
    monkeypatch.setattr(MixtureAdaptor, "forward", _reference_forward)

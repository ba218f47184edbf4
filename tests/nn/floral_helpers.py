"""Helpers shared by the FLoRAL test modules (imported by name: pytest puts this directory on
``sys.path`` for the test modules in it)."""

from __future__ import annotations

import torch


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

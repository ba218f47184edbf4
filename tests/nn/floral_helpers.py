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


def graph_names(t):
    """Names of every autograd node behind ``t``."""
    seen, stack, names = set(), [t.grad_fn], []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(node.name())
        stack.extend(f for f, _ in node.next_functions)
    return names


def assert_same_passes(out, ref, inputs):
    """``out`` equals ``ref`` (float64) and so do their gradients with respect to ``inputs`` for
    one random upstream gradient."""
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(out)
    got = torch.autograd.grad(out, inputs, upstream)
    want = torch.autograd.grad(ref, inputs, upstream)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)

"""ConvLoRA variants of Almansoori et al. 2024, App. F.1: every variant against the kernel built
by hand from its factors, its parameter count against the paper's formula, zero start, dtypes
and refused settings."""

from __future__ import annotations

import math

import pytest

from riemfl.testing import importorskip

torch = importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from riemfl.errors import ParameterError  # noqa: E402
from riemfl.nn.floral import CONV_VARIANTS, MixtureContext, MixtureConv2d, floralize  # noqa: E402

VARIANTS = ("balanced_2d", "in_layer", "out_layer", "filter_wise", "reshaped_linear")

CONVS = [
    dict(in_channels=3, out_channels=5, kernel_size=3, padding=1),
    dict(in_channels=4, out_channels=2, kernel_size=(3, 2), stride=(2, 1), padding=(1, 0)),
    dict(in_channels=2, out_channels=3, kernel_size=3, dilation=2, padding="valid"),
]


def hand_kernels(layer):
    """The adaptors L_c, (C, c_out, c_in, k1, k2), from the factors by the index formulas of
    App. F.1 (eqs. (38)-(41)), written out per variant."""
    u, v = layer.lora_out, layer.lora_in
    c_out, c_in, k1, k2 = layer.base.weight.shape
    if layer.variant == "balanced_2d":  # U: c_out x r x k1 x 1, V: r x c_in x 1 x k2
        return torch.einsum("cika,ckjb->cijab", u[..., 0], v[:, :, :, 0])
    if layer.variant == "in_layer":  # U: c_out x r x 1 x 1, V: r x c_in x k1 x k2
        return torch.einsum("cik,ckjab->cijab", u[..., 0, 0], v)
    if layer.variant == "out_layer":  # eq. (38): U_ikab V_kj11
        return torch.einsum("cikab,ckj->cijab", u, v[..., 0, 0])
    if layer.variant == "filter_wise":  # eqs. (39)-(40): U_{i m 1 b} V_{m j a 1}, m < r c_out
        return torch.einsum("cimb,cmja->cijab", u[:, :, :, 0], v[..., 0])
    assert layer.variant == "reshaped_linear"  # eq. (41): L_ijab = Lin_{(k1 k2 i + k2 a + b) j}
    lin = u @ v  # (C, c_out k1 k2, c_in)
    out = torch.empty(lin.shape[0], c_out, c_in, k1, k2, dtype=lin.dtype)
    for i in range(c_out):
        for a in range(k1):
            for b in range(k2):
                out[:, i, :, a, b] = lin[:, k1 * k2 * i + k2 * a + b, :]
    return out


def paper_count(variant, c_out, c_in, k1, k2, r):
    """Parameters of one cluster's adaptor (App. F.1), with r the variant's rank."""
    return {
        # the paper writes (c_out k2 + c_in k1) r with V holding k1; here V holds the width
        # k2 (conv.py), the same count for square kernels
        "balanced_2d": (c_in * k2 + c_out * k1) * r,
        "in_layer": (c_in * k1 * k2 + c_out) * r,
        "out_layer": (c_out * k1 * k2 + c_in) * r,  # channel-wise, eq. (38)
        "filter_wise": (c_out * k2 + c_in * k1) * c_out * r,  # eq. (39)
        "reshaped_linear": (c_out * k1 * k2 + c_in) * r,  # eq. (41)
    }[variant]


def variant_rank(layer):
    return layer.filter_rank if layer.variant == "filter_wise" else layer.rank


def randomised(conv, variant, dtype=torch.float32, n_clusters=3, rho=0.5, seed=0):
    base = nn.Sequential(nn.Conv2d(**conv)).to(dtype)
    fl = floralize(base, n_clusters, rho, conv_variant=variant, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for _, layer in fl.adaptors():
            for p in (layer.lora_out, layer.lora_in, layer.lora_bias):
                p.copy_(torch.randn(p.shape, generator=g, dtype=dtype))
        fl.router.logits.copy_(torch.randn(n_clusters, generator=g, dtype=dtype))
    return fl


def test_every_variant_is_listed():
    assert set(CONV_VARIANTS) == set(VARIANTS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("conv", CONVS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_forward_is_the_convolution_with_the_hand_built_kernel(variant, conv, dtype):
    fl = randomised(conv, variant, dtype)
    (_, layer), pi = fl.adaptors()[0], fl.router.probabilities()
    assert layer.lora_out.dtype == layer.lora_in.dtype == dtype
    x = torch.randn(2, conv["in_channels"], 9, 8, dtype=dtype)
    kernels = hand_kernels(layer)
    weight = layer.base.weight + torch.einsum("c,cijab->ijab", pi, kernels)
    bias = layer.base.bias + pi @ layer.lora_bias
    base = layer.base
    expected = F.conv2d(x, weight, bias, base.stride, base.padding, base.dilation)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-4)
    got = fl(x)
    assert got.dtype == dtype
    torch.testing.assert_close(got, expected, **tol)
    # the two convolutions U * (V * x) and the merged model give the same
    torch.testing.assert_close(base(x) + layer.factored_output(x, pi), expected, **tol)
    torch.testing.assert_close(fl.merge()(x), expected, **tol)
    # the matrix views (aggregation, preconditioning) describe the same adaptors: A_c B_c^T
    a, b = layer.factor_matrices()
    assert a.shape[-1] == b.shape[-1] == layer.rank
    for c in range(kernels.shape[0]):
        torch.testing.assert_close(layer.weight_from_matrix(a[c] @ b[c].T), kernels[c], **tol)
    ga, gb = layer.precondition_grads(torch.ones_like(layer.lora_out), layer.lora_in)
    assert ga.shape == layer.lora_out.shape and gb.shape == layer.lora_in.shape


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize(
    "shape",
    [(32, 16, 3, 3), (16, 32, 5, 5), (2, 64, 5, 5), (1, 64, 3, 3), (8, 3, 3, 1), (6, 4, 2, 3)],
)
@pytest.mark.parametrize("rho", [0.01, 0.1, 0.3, 0.5, 1.0])
def test_parameter_count_is_the_papers_and_the_rank_fits_the_budget(variant, shape, rho):
    c_out, c_in, k1, k2 = shape
    base = nn.Conv2d(c_in, c_out, (k1, k2))
    layer = MixtureConv2d(base, MixtureContext(1), rho=rho, bias=False, variant=variant)
    r = variant_rank(layer)
    count = layer.lora_out.numel() + layer.lora_in.numel()
    assert count == paper_count(variant, c_out, c_in, k1, k2, r)
    # the largest r within the budget rho c_out c_in k1 k2 (at least 1), with each variant's
    # cap: the matrix sizes, or a filter's rank for filter-wise
    budget = rho * c_out * c_in * k1 * k2 * (1 + 1e-12)
    m, n = layer.factor_matrices()[0].shape[1], layer.factor_matrices()[1].shape[1]
    cap = min(k1, k2) if variant == "filter_wise" else min(m, n)
    assert r == 1 or paper_count(variant, c_out, c_in, k1, k2, r) <= budget
    assert r == cap or paper_count(variant, c_out, c_in, k1, k2, r + 1) > budget
    if variant == "filter_wise":
        assert layer.rank == r * c_out
        expected = max(1, math.floor(rho * c_in * k1 * k2 / (c_out * k2 + c_in * k1) + 1e-9))
        assert r == min(expected, min(k1, k2))


def test_the_papers_example_counts():
    # 16 -> 32 channels, 3 x 3 kernel, rank 1: App. F.1's counts side by side
    base = nn.Conv2d(16, 32, 3)
    counts = {}
    for v in VARIANTS:
        layer = MixtureConv2d(base, MixtureContext(1), rank=1, bias=False, variant=v)
        counts[v] = layer.lora_out.numel() + layer.lora_in.numel()
    assert counts == {
        "balanced_2d": (32 * 3 + 16 * 3) * 1,
        "in_layer": (16 * 9 + 32) * 1,
        "out_layer": (32 * 9 + 16) * 1,
        "filter_wise": (32 * 3 + 16 * 3) * 32,
        "reshaped_linear": (32 * 9 + 16) * 1,
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("init", ["lora", "paper"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_zero_start_is_the_base_model(variant, init, dtype):
    conv = CONVS[1]
    base = nn.Sequential(nn.Conv2d(**conv)).to(dtype)
    fl = floralize(base, 4, 0.3, conv_variant=variant, init=init, seed=3)
    with torch.no_grad():
        fl.router.logits.copy_(torch.tensor([1.0, -2.0, 0.5, 0.0], dtype=dtype))
    x = torch.randn(3, conv["in_channels"], 7, 6, dtype=dtype)
    assert torch.equal(fl(x), base(x))
    (_, layer) = fl.adaptors()[0]
    assert torch.count_nonzero(layer.delta_weight(fl.router.probabilities())) == 0


def test_reshaped_linear_equals_out_layer_with_the_same_factors():
    # the same adaptors stored two ways (eq. (41) against eq. (38))
    conv = CONVS[0]
    a = randomised(conv, "out_layer", torch.float64)
    b = floralize(nn.Sequential(nn.Conv2d(**conv)).double(), 3, 0.5, conv_variant="reshaped_linear")
    la, lb = a.adaptors()[0][1], b.adaptors()[0][1]
    assert la.rank == lb.rank
    with torch.no_grad():
        lb.base.load_state_dict(la.base.state_dict())
        lb.lora_out.copy_(la.lora_out.permute(0, 1, 3, 4, 2).reshape(lb.lora_out.shape))
        lb.lora_in.copy_(la.lora_in[..., 0, 0])
        lb.lora_bias.copy_(la.lora_bias)
        b.router.logits.copy_(a.router.logits)
    x = torch.randn(2, conv["in_channels"], 6, 6, dtype=torch.float64)
    torch.testing.assert_close(a(x), b(x), rtol=1e-12, atol=1e-12)


def test_reshaped_linear_starts_from_out_layers_draw():
    # the default init draws the input side with the same shape's worth of numbers
    base = nn.Sequential(nn.Conv2d(3, 5, 3))
    a = floralize(base, 2, 0.5, conv_variant="out_layer", seed=4).adaptors()[0][1]
    b = floralize(base, 2, 0.5, conv_variant="reshaped_linear", seed=4).adaptors()[0][1]
    assert torch.equal(a.lora_in[..., 0, 0], b.lora_in)
    assert not a.lora_out.any() and not b.lora_out.any()


def test_filter_wise_filters_have_the_filter_rank_per_block():
    # each output channel's block of r middle channels: L_ij is a sum of r c_out rank-1 filters
    fl = randomised(dict(in_channels=4, out_channels=3, kernel_size=5), "filter_wise", rho=1.0)
    layer = fl.adaptors()[0][1]
    assert layer.filter_rank == min(5, math.floor(4 * 25 / (3 * 5 + 4 * 5)))
    assert "filter_rank=2" in repr(layer)
    assert layer.lora_out.shape[1:] == (3, 2 * 3, 1, 5)
    assert layer.lora_in.shape[1:] == (2 * 3, 4, 5, 1)


def test_bad_settings_are_refused_with_typed_errors():
    conv = nn.Conv2d(4, 6, 3)
    ctx = MixtureContext(2)
    with pytest.raises(ParameterError, match="variant"):
        MixtureConv2d(conv, ctx, variant="filter")
    with pytest.raises(ParameterError, match="filter_wise rank"):
        MixtureConv2d(conv, ctx, rank=4, variant="filter_wise")
    with pytest.raises(ParameterError, match="filter_wise rank"):
        MixtureConv2d(conv, ctx, rank=0, variant="filter_wise")
    with pytest.raises(ParameterError, match="filter_wise rank"):
        MixtureConv2d(conv, ctx, rank=1.5, variant="filter_wise")
    with pytest.raises(ParameterError, match="rank"):
        MixtureConv2d(conv, ctx, rank=5, variant="reshaped_linear")  # min(6 * 9, 4) = 4
    for variant in ("filter_wise", "reshaped_linear"):
        with pytest.raises(ParameterError, match="rho"):
            MixtureConv2d(conv, ctx, rho=0.0, variant=variant)
        with pytest.raises(ParameterError, match="rho"):
            MixtureConv2d(conv, ctx, rho=1.5, variant=variant)
        with pytest.raises(ParameterError, match="rho"):
            MixtureConv2d(conv, ctx, rho=None, variant=variant)
        with pytest.raises(ParameterError, match="groups=1"):
            MixtureConv2d(nn.Conv2d(4, 6, 3, groups=2), ctx, variant=variant)
        with pytest.raises(ParameterError, match="padding_mode"):
            MixtureConv2d(nn.Conv2d(4, 6, 3, padding_mode="circular"), ctx, variant=variant)
        with pytest.raises(ParameterError, match="init"):
            MixtureConv2d(conv, ctx, init="zeros", variant=variant)
        with pytest.raises(ParameterError, match="nn.Conv2d"):
            MixtureConv2d(nn.Linear(3, 3), ctx, variant=variant)
    with pytest.raises(ParameterError, match="variant"):
        floralize(nn.Sequential(conv), 2, conv_variant="reshaped")

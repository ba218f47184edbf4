"""FLoRAL adaptor layers: rank budget, mixture of outputs, merge, ConvLoRA variants, ScaledGD."""

from __future__ import annotations

import math

import numpy as np
import pytest

from riemfl.testing import importorskip

torch = importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch import nn  # noqa: E402

from riemfl.errors import ParameterError, ShapeError  # noqa: E402
from riemfl.nn import MLP, SmallCNN  # noqa: E402
from riemfl.nn.floral import (  # noqa: E402
    EnsembleModel,
    MixtureConv2d,
    MixtureLinear,
    Router,
    floralize,
    lora_rank,
    nominal_increase,
    parameter_counts,
)


def randomise(model, seed=0):
    """Non-zero output factors, bias adaptors and router logits (the LoRA init zeroes them)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, layer in model.adaptors():
            layer.lora_out.copy_(torch.randn(layer.lora_out.shape, generator=g))
            if layer.lora_bias is not None:
                layer.lora_bias.copy_(torch.randn(layer.lora_bias.shape, generator=g))
        model.router.logits.copy_(torch.randn(model.router.logits.shape, generator=g))
    return model


# ------------------------------------------------------------------------------ rank budget
def test_rank_formula_examples():
    # MnistNN 784 -> 200 -> 10 at 1%: floor(1.59) = 1 and floor(0.095) -> minimum 1
    assert lora_rank(0.01, 200, 784) == 1
    assert lora_rank(0.01, 10, 200) == 1
    assert lora_rank(0.1, 200, 64) == 4  # floor(1280 / 264 = 4.85)
    assert lora_rank(0.1, 200, 50) == 4  # exactly 4.0: no rounding down to 3
    assert lora_rank(1.0, 100, 100) == 50  # m = n: r <= rho n / 2


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 300), st.integers(1, 300), st.floats(1e-3, 1.0))
def test_rank_is_the_largest_within_budget(m, n, rho):
    r = lora_rank(rho, m, n)
    # rho m n / (m + n) < min(m, n) for rho <= 1, so only the enforced minimum can reach the cap
    assert r == 1 or r < min(m, n)
    if r > 1:  # within budget ...
        assert (m + n) * r <= rho * m * n * (1 + 1e-9)
    # ... and one more would exceed it (unless capped by min(m, n))
    if r < min(m, n):
        assert (m + n) * (r + 1) > rho * m * n


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, "0.1", True])
def test_rank_rejects_bad_rho(bad):
    with pytest.raises(ParameterError, match="rho"):
        lora_rank(bad, 10, 10)


def test_parameter_counts_floral_and_ensemble():
    base = MLP([64, 200, 10])
    d = sum(p.numel() for p in base.parameters())
    c = 4
    fl = floralize(base, c, 0.1, seed=0)
    ranks = [layer.rank for _, layer in fl.adaptors()]
    assert ranks == [lora_rank(0.1, 200, 64), lora_rank(0.1, 10, 200)]
    per_cluster = (200 + 64) * ranks[0] + 200 + (10 + 200) * ranks[1] + 10  # factors + bias
    counts = parameter_counts(fl)
    assert counts["base"] == d and counts["router"] == c and counts["private"] == 0
    assert counts["cluster"] == counts["extra"] == c * per_cluster
    ens = parameter_counts(EnsembleModel(base, c))
    assert ens["d"] == d and ens["extra"] == (c - 1) * d and ens["extra_fraction"] == c - 1
    local = parameter_counts(floralize(base, 1, 0.1, private_adaptors=True))
    assert local["cluster"] == 0 and local["private"] == local["extra"] > 0


def test_nominal_increase_matches_the_paper_example():
    # Almansoori et al. 2024, Sec. 6: d = 1000, C = 4: FLoRAL(1%) adds 40 against 3000 for the
    # ensemble
    out = nominal_increase(1000, 4, 0.01)
    assert out["floral"] == pytest.approx(40) and out["ensemble"] == 3000
    assert nominal_increase(1000, 10, 0.01)["ensemble"] == 9000


# ------------------------------------------------------------------------------ mixture
def test_linear_mixes_adaptor_outputs_not_factors():
    fl = randomise(floralize(nn.Sequential(nn.Linear(6, 5)), 3, rank=2, seed=1))
    (_, layer), x = fl.adaptors()[0], torch.randn(4, 6, dtype=torch.float32)
    pi = torch.softmax(fl.router.logits, 0)
    w, b = layer.base.weight, layer.base.bias
    a_, b_ = layer.factor_matrices()  # A_c (5 x 2), B_c (6 x 2)
    assert a_.shape == (3, 5, 2) and b_.shape == (3, 6, 2)
    by_hand = x @ w.T + b
    for c in range(3):
        by_hand = by_hand + pi[c] * (x @ (a_[c] @ b_[c].T).T + layer.lora_bias[c])
    torch.testing.assert_close(fl(x), by_hand, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.base(x) + layer.factored_output(x, pi), by_hand)
    mixed_factors = (pi[:, None, None] * a_).sum(0) @ (pi[:, None, None] * b_).sum(0).T
    assert (fl(x) - (x @ (w + mixed_factors).T + b + pi @ layer.lora_bias)).abs().max() > 1e-3


@pytest.mark.parametrize("variant", ["balanced_2d", "in_layer", "out_layer"])
@pytest.mark.parametrize(
    "conv",
    [
        dict(in_channels=3, out_channels=5, kernel_size=3, padding=1),
        dict(in_channels=4, out_channels=2, kernel_size=(3, 2), stride=(2, 1), padding=(1, 0)),
        dict(in_channels=2, out_channels=3, kernel_size=3, dilation=2, padding="valid"),
    ],
)
def test_conv_adaptor_is_a_convolution_with_the_merged_kernel(variant, conv):
    fl = randomise(
        floralize(nn.Sequential(nn.Conv2d(**conv)), 3, 0.5, conv_variant=variant, seed=2)
    )
    (_, layer), x = fl.adaptors()[0], torch.randn(2, conv["in_channels"], 9, 8)
    merged = fl.merge()
    assert isinstance(merged[0], nn.Conv2d) and not isinstance(merged[0], MixtureConv2d)
    # the forward pass (merged kernel) equals the two convolutions U * (V * x) of every cluster
    pi = fl.router.probabilities()
    torch.testing.assert_close(
        fl(x), layer.base(x) + layer.factored_output(x, pi), rtol=1e-4, atol=1e-4
    )
    torch.testing.assert_close(fl(x), merged(x), rtol=1e-4, atol=1e-4)
    # the kernel, seen as a matrix, is A B^T of rank r per cluster
    a, b = layer.factor_matrices()
    assert a.shape[-1] == b.shape[-1] == layer.rank
    assert torch.linalg.matrix_rank((a @ b.mT)[0].detach()) <= layer.rank


def test_conv_variant_parameter_counts_and_ranks():
    c_in, c_out, k = 16, 32, 3
    base = nn.Sequential(nn.Conv2d(c_in, c_out, k))
    expected = {
        "balanced_2d": (c_out * k, c_in * k),
        "in_layer": (c_out, c_in * k * k),
        "out_layer": (c_out * k * k, c_in),
    }
    for variant, (m, n) in expected.items():
        layer = floralize(base, 1, 0.1, conv_variant=variant, bias=False).adaptors()[0][1]
        assert layer.rank == lora_rank(0.1, m, n)
        n_params = layer.lora_out.numel() + layer.lora_in.numel()
        assert n_params == (m + n) * layer.rank, variant


@pytest.mark.parametrize("model", [MLP([64, 32, 10]), SmallCNN()])
def test_merge_equals_unmerged(model):
    fl = randomise(floralize(model, 4, 0.1, seed=3), seed=4)
    fl.eval()
    x = torch.randn(7, 1, 8, 8)
    merged = fl.merge()
    torch.testing.assert_close(fl(x), merged(x), rtol=1e-4, atol=1e-4)
    # the merged model is the plain architecture: no adaptor parameters left
    assert sum(p.numel() for p in merged.parameters()) == sum(p.numel() for p in model.parameters())
    # an explicit pi is used as given
    pi = torch.tensor([0.1, 0.2, 0.3, 0.4])
    with torch.no_grad():
        fl.router.logits.copy_(pi.log())
    torch.testing.assert_close(fl(x), fl.merge(pi)(x), rtol=1e-4, atol=1e-4)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 12),
    st.integers(1, 12),
    st.integers(1, 4),
    st.floats(0.05, 1.0),
    st.integers(0, 2**16),
)
def test_merge_equals_unmerged_linear_property(m, n, c, rho, seed):
    torch.manual_seed(seed)
    fl = randomise(floralize(nn.Sequential(nn.Linear(n, m)), c, rho, seed=seed), seed)
    x = torch.randn(3, n)
    torch.testing.assert_close(fl(x), fl.merge()(x), rtol=1e-4, atol=1e-4)


def test_min_prob_clamp_without_renormalising():
    fl = randomise(floralize(nn.Sequential(nn.Linear(4, 3)), 3, rank=1, min_prob=0.2))
    fl.router.mode = "fixed"
    fl.router.set_fixed(0)  # pi = (1, 0, 0) -> weights (1, 0.2, 0.2)
    layer = fl.adaptors()[0][1]
    a, b = layer.factor_matrices()
    expected = sum(wc * a[c] @ b[c].T for c, wc in enumerate((1, 0.2, 0.2)))
    fl.context.set(fl.router())
    torch.testing.assert_close(layer.delta_weight(), expected)


# ------------------------------------------------------------------------------ router
def test_router_softmax_fixed_and_errors():
    r = Router(3)
    torch.testing.assert_close(r(), torch.full((3,), 1 / 3))
    with torch.no_grad():
        r.logits.copy_(torch.tensor([0.0, math.log(2), math.log(5)]))
    torch.testing.assert_close(r.probabilities(), torch.tensor([1 / 8, 2 / 8, 5 / 8]))
    f = Router(3, "fixed")
    f.set_fixed(2)
    assert f().tolist() == [0.0, 0.0, 1.0] and not f.logits.requires_grad
    with pytest.raises(ParameterError, match="simplex"):
        f.set_fixed([0.5, 0.6, -0.1])
    with pytest.raises(ShapeError, match="C = 3"):
        f.set_fixed([0.5, 0.5])
    with pytest.raises(ParameterError, match="mode"):
        Router(3, "oracle")


def test_router_noise_only_in_training():
    r = Router(4, noise_std=1.0)
    r.generator = torch.Generator().manual_seed(0)
    r.train()
    assert not torch.allclose(r(), torch.full((4,), 0.25))
    r.eval()
    torch.testing.assert_close(r(), torch.full((4,), 0.25))


# ------------------------------------------------------------------------------ wrapper errors
def test_floralize_errors_name_the_problem():
    with pytest.raises(ParameterError, match="no layer"):
        floralize(nn.Sequential(nn.ReLU()), 2)
    with pytest.raises(ParameterError, match="not modules"):
        floralize(MLP([4, 3]), 2, exclude=["nope"])
    with pytest.raises(ParameterError, match="groups=1"):
        floralize(nn.Sequential(nn.Conv2d(4, 4, 3, groups=2)), 2)
    with pytest.raises(ParameterError, match="variant"):
        floralize(nn.Sequential(nn.Conv2d(4, 4, 3)), 2, conv_variant="filter")
    with pytest.raises(ParameterError, match="rank"):
        floralize(nn.Sequential(nn.Linear(4, 3)), 2, rank=4)
    fl = floralize(SmallCNN(), 2, 0.1, exclude=["classifier.3"], layer_types=["linear"])
    assert [n for n, _ in fl.adaptors()] == ["model.classifier.1"]


def test_original_model_untouched():
    base = MLP([5, 4, 3])
    before = [p.detach().clone() for p in base.parameters()]
    floralize(base, 2)
    assert all(torch.equal(a, b) for a, b in zip(before, base.parameters(), strict=True))
    assert all(type(m) is not MixtureConv2d for m in base.modules())


# ------------------------------------------------------------------------------ ScaledGD
def _grads(layer, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(layer.lora_out.shape, generator=g), torch.randn(
        layer.lora_in.shape, generator=g
    )


@pytest.mark.parametrize("rank", [1, 3])
def test_scaled_gd_matches_equation_36(rank):
    fl = randomise(floralize(nn.Sequential(nn.Linear(7, 6)), 2, rank=rank, seed=5))
    layer = fl.adaptors()[0][1]
    ga_param, gb_param = _grads(layer)
    eps = 1e-5
    mat_a, mat_b = layer.out_view.to_matrix, layer.in_view.to_matrix
    ga, gb = mat_a(ga_param), mat_b(gb_param)
    new_a, new_b = (
        f(g)
        for f, g in zip(
            (mat_a, mat_b),
            layer.precondition_grads(ga_param, gb_param, eps, "scaled_gd"),
            strict=True,
        )
    )
    a, b = (m.detach() for m in layer.factor_matrices())
    eye = torch.eye(rank)
    for c in range(2):
        torch.testing.assert_close(new_a[c], ga[c] @ torch.linalg.inv(b[c].T @ b[c] + eps * eye))
        torch.testing.assert_close(new_b[c], gb[c] @ torch.linalg.inv(a[c].T @ a[c] + eps * eye))
    fa, fb = layer.precondition_grads(ga_param, gb_param, eps, "frobenius")
    fa, fb = mat_a(fa), mat_b(fb)
    for c in range(2):
        torch.testing.assert_close(fa[c], ga[c] / (torch.linalg.matrix_norm(b[c].T @ b[c]) + eps))
        torch.testing.assert_close(fb[c], gb[c] / (torch.linalg.matrix_norm(a[c].T @ a[c]) + eps))
    with pytest.raises(ParameterError, match="preconditioner"):
        layer.precondition_grads(ga_param, gb_param, eps, "adam")


def test_scaled_gd_moves_the_product_independently_of_the_gauge():
    """First-order product change dA B^T + A dB^T = P_A G + G P_B: the same in every gauge."""
    torch.manual_seed(6)
    fl = floralize(nn.Sequential(nn.Linear(8, 6)), 1, rank=2, seed=6).double()
    layer = fl.adaptors()[0][1]
    a0, b0 = torch.randn(1, 6, 2, dtype=torch.float64), torch.randn(1, 8, 2, dtype=torch.float64)
    g_x = torch.randn(6, 8, dtype=torch.float64)  # dL/dX for X = A B^T

    out_view, in_view = layer.out_view, layer.in_view

    def product_move(a, b):
        with torch.no_grad():
            layer.lora_out.copy_(out_view.from_matrix(a))
            layer.lora_in.copy_(in_view.from_matrix(b))
        grads = (out_view.from_matrix(g_x @ b), in_view.from_matrix(g_x.T @ a))  # dL/dA, dL/dB
        da, db = layer.precondition_grads(*grads, 1e-12, "scaled_gd")
        da, db = out_view.to_matrix(da), in_view.to_matrix(db)
        return (da @ b.mT + a @ db.mT)[0]

    gauge = torch.tensor([[2.0, 1.0], [0.0, 0.5]], dtype=torch.float64)
    plain = product_move(a0, b0)
    moved = product_move(a0 @ gauge, b0 @ torch.linalg.inv(gauge).T)
    torch.testing.assert_close(plain, moved, rtol=1e-7, atol=1e-7)
    pa = a0[0] @ torch.linalg.pinv(a0[0])
    pb = b0[0] @ torch.linalg.pinv(b0[0])
    torch.testing.assert_close(plain, pa @ g_x + g_x @ pb, rtol=1e-7, atol=1e-7)
    # without preconditioning the move depends on the gauge
    raw_plain = (g_x @ b0[0]) @ b0[0].T + a0[0] @ (g_x.T @ a0[0]).T
    b1, a1 = b0[0] @ torch.linalg.inv(gauge).T, a0[0] @ gauge
    raw_moved = (g_x @ b1) @ b1.T + a1 @ (g_x.T @ a1).T
    assert (raw_plain - raw_moved).abs().max() > 1e-2


def test_initialisation_sides():
    lora = floralize(nn.Sequential(nn.Linear(9, 4)), 2, rank=2, seed=0).adaptors()[0][1]
    assert torch.count_nonzero(lora.lora_out) == 0 and torch.count_nonzero(lora.lora_in) > 0
    bound = math.sqrt(6 / 9)
    assert float(lora.lora_in.detach().abs().max()) <= bound
    paper = floralize(nn.Sequential(nn.Linear(9, 4)), 2, rank=2, init="paper").adaptors()[0][1]
    assert torch.count_nonzero(paper.lora_in) == 0 and torch.count_nonzero(paper.lora_out) > 0
    # one adaptor per cluster, drawn independently
    assert not torch.equal(lora.lora_in[0], lora.lora_in[1])
    np.testing.assert_array_equal(lora.lora_bias.detach().numpy(), 0.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layer", ["linear", "conv2d"])
def test_floralize_keeps_the_models_dtype(dtype, layer):
    """Router and adaptors in the base model's dtype: a float64 model runs forward and backward
    in float64, and with the LoRA start (one factor zero) its output is the base model's."""
    torch.manual_seed(0)
    if layer == "linear":
        base, x = nn.Sequential(nn.Linear(3, 2, dtype=dtype)), torch.randn(4, 3, dtype=dtype)
    else:
        base, x = (
            nn.Sequential(nn.Conv2d(2, 3, 3, dtype=dtype)),
            torch.randn(4, 2, 5, 5, dtype=dtype),
        )
    model = floralize(base, 2, rank=1, layer_types=[layer], seed=1)
    assert {p.dtype for p in model.parameters()} == {dtype}
    out = model(x)
    assert out.dtype == dtype
    torch.testing.assert_close(out, base(x), rtol=0, atol=0)
    out.square().sum().backward()
    assert model.router.logits.grad is not None and model.router.logits.grad.dtype == dtype


def test_floralize_rank_per_layer_and_rho_for_the_rest():
    base = nn.Sequential(nn.Linear(64, 200), nn.ReLU(), nn.Linear(200, 10))
    m = floralize(base, 4, 0.1, rank={"0": 15}, seed=0)
    ranks = {n: mod.rank for n, mod in m.named_modules() if isinstance(mod, MixtureLinear)}
    # the named layer takes its rank; the other its rank from rho (floor(0.1 * 2000 / 210) -> 1)
    assert ranks == {"model.0": 15, "model.2": lora_rank(0.1, 200, 10)}
    assert m(torch.zeros(2, 64)).shape == (2, 10)
    with pytest.raises(ParameterError, match=r"rank names layers \['1'\]"):
        floralize(base, 4, 0.1, rank={"1": 3})
    with pytest.raises(ParameterError, match="rank"):
        floralize(base, 4, 0.1, rank={"0": 0})

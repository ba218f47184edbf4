"""FLoRAL's normalisation adaptors (App. F.2), Batch NorA (eq. (42)), where the running statistics
live, centering (App. E) and Figure 2's synthetic MLP + BN experiment."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from riemfl.testing import importorskip

torch = importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch import nn  # noqa: E402

from riemfl.errors import ParameterError, ShapeError  # noqa: E402
from riemfl.nn.floral import (  # noqa: E402
    ACCEPTED_LAYER_TYPES,
    LAYER_TYPES,
    FederatedLayout,
    FloralAggregator,
    FloralTrainer,
    MixtureContext,
    MixtureNorm,
    center_adaptors,
    center_additive,
    center_products,
    cluster_probabilities,
    floralize,
    parameter_roles,
)

DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}
C = 3


def context_with(pi: torch.Tensor, n_clusters: int = C) -> MixtureContext:
    context = MixtureContext(n_clusters)
    context.set(pi)
    return context


def randomise_norm(layer: MixtureNorm, seed: int = 0) -> MixtureNorm:
    """Non-zero base affine parameters, adaptors and (Batch NorA) adaptor statistics."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
        stats = dict(layer.base.named_buffers())
        if "running_mean" in stats:
            stats["running_mean"].copy_(torch.randn(stats["running_mean"].shape, generator=g))
            stats["running_var"].copy_(torch.rand(stats["running_var"].shape, generator=g) + 0.5)
        if layer.variant != "scale":
            layer.lora_running_mean.copy_(torch.randn(layer.lora_running_mean.shape, generator=g))
            layer.lora_running_var.copy_(
                torch.rand(layer.lora_running_var.shape, generator=g) + 0.2
            )
    return layer


def normalised(x, dims, mean=None, var=None, eps=1e-5):
    """(x - mean) / sqrt(var + eps) over ``dims`` (batch statistics unless given)."""
    if mean is None:
        mean = x.mean(dims, keepdim=True)
        var = x.var(dims, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps)


def channel(t, ndim):
    """A per-channel vector shaped to broadcast over (N, C, ...)."""
    return t.view(-1, *([1] * (ndim - 2)))


def mixture(lora, w):
    return torch.tensordot(w, lora, dims=1)


# ------------------------------------------------------------------------------ the scale adaptor
NORMS = {
    "batchnorm1d": (lambda: nn.BatchNorm1d(4), (6, 4)),
    "batchnorm1d_seq": (lambda: nn.BatchNorm1d(4), (6, 4, 5)),
    "batchnorm2d": (lambda: nn.BatchNorm2d(4), (5, 4, 3, 3)),
    "instancenorm1d": (lambda: nn.InstanceNorm1d(4, affine=True), (3, 4, 7)),
    "instancenorm2d_tracked": (
        lambda: nn.InstanceNorm2d(4, affine=True, track_running_stats=True),
        (3, 4, 3, 5),
    ),
    "layernorm": (lambda: nn.LayerNorm((3, 5)), (4, 2, 3, 5)),
    "groupnorm": (lambda: nn.GroupNorm(2, 4), (3, 4, 5)),
}


def direct_scale_forward(layer: MixtureNorm, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """(gamma + sum_c w_c L_gamma^c) * h_hat + beta + sum_c w_c L_beta^c, normalised by hand."""
    base = layer.base
    gamma = base.weight + mixture(layer.lora_gamma, w)
    beta = base.bias + mixture(layer.lora_bias, w)
    if isinstance(base, nn.LayerNorm):
        dims = tuple(range(x.dim() - len(base.normalized_shape), x.dim()))
        return normalised(x, dims, eps=base.eps) * gamma + beta
    if isinstance(base, nn.GroupNorm):
        n, c = x.shape[:2]
        grouped = x.reshape(n, base.num_groups, -1)
        h = normalised(grouped, (2,), eps=base.eps).reshape(x.shape)
        return h * channel(gamma, x.dim()) + channel(beta, x.dim())
    if isinstance(base, nn.BatchNorm1d | nn.BatchNorm2d):
        dims = (0, *range(2, x.dim()))
    else:  # instance normalisation: per sample and channel
        dims = tuple(range(2, x.dim()))
    if layer.training or not base.track_running_stats:
        h = normalised(x, dims, eps=base.eps)
    else:
        mean = channel(base.running_mean, x.dim())
        var = channel(base.running_var, x.dim())
        h = normalised(x, dims, mean, var, base.eps)
    return h * channel(gamma, x.dim()) + channel(beta, x.dim())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(NORMS))
@pytest.mark.parametrize("training", [True, False])
def test_scale_adaptor_matches_the_direct_computation(name, dtype, training):
    make, shape = NORMS[name]
    pi = torch.tensor([0.5, 0.2, 0.3], dtype=dtype)
    layer = randomise_norm(MixtureNorm(make().to(dtype), context_with(pi)).to(dtype))
    layer.train(training)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
    expected = direct_scale_forward(layer, x, pi)
    got = layer(x)
    assert got.dtype == dtype
    torch.testing.assert_close(got, expected, atol=TOL[dtype] * 10, rtol=TOL[dtype] * 10)


ZERO_CASES = [(n, "scale") for n in sorted(NORMS)] + [
    (n, v) for n in sorted(NORMS) if n.startswith("batchnorm") for v in ("nora", "nora_naive")
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("name", "variant"), ZERO_CASES)
def test_zero_adaptors_give_the_base_layer_exactly(name, dtype, variant):
    make, shape = NORMS[name]
    torch.manual_seed(0)
    base = make().to(dtype)
    with torch.no_grad():
        for p in base.parameters():
            p.copy_(torch.randn_like(p))
    plain = copy.deepcopy(base)
    pi = torch.tensor([0.5, 0.2, 0.3], dtype=dtype)
    layer = MixtureNorm(base, context_with(pi), variant=variant).to(dtype)
    x = torch.randn(shape, dtype=dtype)
    for training in (True, True, False):  # two training passes move the running statistics
        layer.train(training)
        plain.train(training)
        assert torch.equal(layer(x), plain(x))
    for a, b in zip(layer.base.buffers(), plain.buffers(), strict=True):
        assert torch.equal(a, b)


# ------------------------------------------------------------------------------ Batch NorA
def direct_nora_forward(layer: MixtureNorm, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """BN(x; gamma, beta) + sum_c w_c BN_a(x; gamma~_c, beta~_c) of App. F.2, written out."""
    base = layer.base
    dims = (0, *range(2, x.dim()))
    nd = x.dim()
    mean, var = base.running_mean, base.running_var
    mean_a, var_a = layer.lora_running_mean, layer.lora_running_var
    if layer.training:  # both normalise with the batch's statistics
        h = h_a = normalised(x, dims, eps=base.eps)
    else:
        h = normalised(x, dims, channel(mean, nd), channel(var, nd), base.eps)
        h_a = normalised(x, dims, channel(mean_a, nd), channel(var_a, nd), base.eps)
    out = h * channel(base.weight, nd) + channel(base.bias, nd)
    for c in range(layer.n_clusters):
        gamma_c, beta_c = layer.lora_gamma[c], layer.lora_bias[c]
        if layer.variant == "nora":  # eq. (42), epsilon inside the square roots
            s = torch.sqrt(var_a + base.eps) / torch.sqrt(var + base.eps)
            m = (mean_a - mean) / torch.sqrt(var + base.eps)
            beta_c = beta_c + m * gamma_c.detach()
            gamma_c = s * gamma_c
        out = out + w[c] * (h_a * channel(gamma_c, nd) + channel(beta_c, nd))
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", ["nora", "nora_naive"])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(7, 4), (5, 4, 3, 2)])
def test_batch_nora_matches_the_direct_computation(variant, dtype, training, shape):
    bn = nn.BatchNorm1d(4) if len(shape) == 2 else nn.BatchNorm2d(4)
    pi = torch.tensor([0.6, 0.1, 0.3], dtype=dtype, requires_grad=True)
    layer = randomise_norm(MixtureNorm(bn.to(dtype), context_with(pi), variant=variant).to(dtype))
    layer.train(training)
    reference = copy.deepcopy(layer)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(2), dtype=dtype)
    expected = direct_nora_forward(reference, x, pi)  # before the statistics move
    got = layer(x)
    tol = TOL[dtype] * 10
    torch.testing.assert_close(got, expected, atol=tol, rtol=tol)
    # gradients, the stop-gradient of eq. (42) included
    g = torch.randn(shape, generator=torch.Generator().manual_seed(3), dtype=dtype)
    params = [layer.lora_gamma, layer.lora_bias, layer.base.weight, layer.base.bias]
    ref_params = [reference.lora_gamma, reference.lora_bias]
    ref_params += [reference.base.weight, reference.base.bias]
    grads = torch.autograd.grad((got * g).sum(), [*params, pi])
    pi.grad = None
    ref_grads = torch.autograd.grad((expected * g).sum(), [*ref_params, pi])
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, atol=tol * 10, rtol=tol * 10)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.floats(-3, 3),
    st.floats(0.05, 20.0),
    st.lists(st.floats(0.01, 1.0), min_size=C, max_size=C),
)
def test_batch_nora_eval_output_is_invariant_to_the_adaptor_statistics(seed, shift, scale, raw):
    """Eq. (42): normalised by the base's statistics, whatever the adaptor's own ones."""
    g = torch.Generator().manual_seed(seed)
    pi = torch.tensor(raw, dtype=torch.float64)
    pi = pi / pi.sum()
    layer = MixtureNorm(nn.BatchNorm1d(5).double(), context_with(pi), variant="nora").double()
    randomise_norm(layer, seed)
    layer.eval()
    x = torch.randn(9, 5, generator=g, dtype=torch.float64)
    before = layer(x)
    with torch.no_grad():
        layer.lora_running_mean.add_(shift * torch.randn(5, generator=g, dtype=torch.float64))
        layer.lora_running_var.mul_(scale)
    after = layer(x)
    base = layer.base
    h = (x - base.running_mean) / torch.sqrt(base.running_var + base.eps)
    closed = h * (base.weight + pi @ layer.lora_gamma) + base.bias + pi @ layer.lora_bias
    torch.testing.assert_close(before, closed, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(after, closed, atol=1e-10, rtol=1e-10)


def test_batch_nora_reparameterisation_is_the_identity_when_the_statistics_agree():
    """With the adaptor's statistics equal to the base's (local base statistics), eq. (42) and
    the naive Batch NorA compute the scale adaptor's output."""
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(4)
    pi = torch.tensor([0.2, 0.5, 0.3])
    layers = {
        v: MixtureNorm(copy.deepcopy(bn), context_with(pi), variant=v)
        for v in ("scale", "nora", "nora_naive")
    }
    with torch.no_grad():
        for layer in layers.values():
            layer.lora_gamma.copy_(torch.arange(12.0).view(3, 4) / 10)
            layer.lora_bias.copy_(-torch.arange(12.0).view(3, 4) / 7)
    x = torch.randn(16, 4) * 3 + 1
    for training in (True, True, False):
        outs = []
        for layer in layers.values():
            layer.train(training)
            outs.append(layer(x))
        torch.testing.assert_close(outs[1], outs[0])
        torch.testing.assert_close(outs[2], outs[0])


def test_batch_nora_statistics_update_like_the_base_and_only_in_training():
    pi = torch.tensor([0.2, 0.5, 0.3])
    for momentum in (0.1, None):
        layer = MixtureNorm(nn.BatchNorm1d(3, momentum=momentum), context_with(pi), variant="nora")
        plain = nn.BatchNorm1d(3, momentum=momentum)
        for step in range(3):
            x = torch.randn(8, 3) * (step + 1) + step
            layer.train()
            plain.train()
            layer(x)
            plain(x)
        torch.testing.assert_close(layer.lora_running_mean, plain.running_mean)
        torch.testing.assert_close(layer.lora_running_var, plain.running_var)
        assert int(layer.lora_num_batches_tracked) == 3
        frozen = [b.clone() for b in layer.buffers()]
        layer.eval()
        layer(torch.randn(8, 3))
        assert all(torch.equal(a, b) for a, b in zip(frozen, layer.buffers(), strict=True))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", ["scale", "nora", "nora_naive"])
def test_gradients_reach_the_adaptors_and_the_router(variant, dtype):
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2)).to(dtype)
    model = floralize(base, C, rank=1, layer_types=["linear", "batchnorm"], norm_variant=variant)
    norm = model.model[1]
    randomise_norm(norm)
    model.train()
    out = model(torch.randn(10, 3, dtype=dtype))
    assert out.dtype == dtype
    out.square().sum().backward()
    for p in (norm.lora_gamma, norm.lora_bias, model.router.logits):
        assert p.grad is not None and p.grad.dtype == dtype
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0


# ------------------------------------------------------------------------------ floralize, merge
def test_default_layer_types_are_unchanged_and_norm_types_are_accepted():
    assert LAYER_TYPES == ("linear", "conv2d")
    assert set(ACCEPTED_LAYER_TYPES) == {
        "linear",
        "conv2d",
        "batchnorm",
        "instancenorm",
        "layernorm",
        "groupnorm",
    }
    base = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.LayerNorm(4), nn.Linear(4, 2))
    default = floralize(base, 2, rank=1)
    assert not any(isinstance(m, MixtureNorm) for m in default.modules())
    assert type(default.model[1]) is nn.BatchNorm1d
    only_bn = floralize(base, 2, rank=1, layer_types=["batchnorm"], norm_variant="nora")
    assert isinstance(only_bn.model[1], MixtureNorm) and only_bn.model[1].variant == "nora"
    assert type(only_bn.model[2]) is nn.LayerNorm and type(only_bn.model[0]) is nn.Linear
    both = floralize(base, 2, layer_types=["batchnorm", "layernorm"], norm_variant="nora")
    assert both.model[2].variant == "scale"  # Batch NorA is for batch normalisation only


@pytest.mark.parametrize("variant", ["scale", "nora", "nora_naive"])
def test_merge_equals_the_model_in_eval_mode(variant):
    torch.manual_seed(0)
    base = nn.Sequential(
        nn.Conv2d(2, 4, 3),
        nn.BatchNorm2d(4),
        nn.GroupNorm(2, 4),
        nn.Flatten(),
        nn.Linear(16, 6),
        nn.LayerNorm(6, bias=False),
        nn.Linear(6, 2),
    )
    model = floralize(
        base,
        C,
        rank=1,
        layer_types=["linear", "conv2d", "batchnorm", "groupnorm", "layernorm"],
        norm_variant=variant,
    )
    for m in model.modules():
        if isinstance(m, MixtureNorm):
            randomise_norm(m)
    with torch.no_grad():
        model.router.logits.copy_(torch.tensor([0.3, -1.0, 2.0]))
    model.eval()
    x = torch.randn(5, 2, 4, 4)
    merged = model.merge()
    assert type(merged[1]) is nn.BatchNorm2d and type(merged[5]) is nn.LayerNorm
    assert merged[5].bias is not None  # the bias adaptor of a LayerNorm without bias
    torch.testing.assert_close(merged(x), model(x), atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------ sharing rules
def bn_model(variant="nora", statistics="shared"):
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 1))
    return floralize(
        base,
        2,
        rank=1,
        layer_types=["linear", "batchnorm"],
        norm_variant=variant,
        norm_statistics=statistics,
        seed=0,
    )


@pytest.mark.parametrize("statistics", ["shared", "local"])
def test_layout_federates_the_adaptors_and_keeps_the_adaptor_statistics_local(statistics):
    model = bn_model("nora", statistics)
    roles = parameter_roles(model)
    assert roles["model.1.lora_gamma"] == "cluster" and roles["model.1.lora_bias"] == "cluster"
    assert roles["model.1.base.weight"] == "base" and roles["model.1.base.bias"] == "base"
    for name in ("lora_running_mean", "lora_running_var", "lora_num_batches_tracked"):
        assert roles[f"model.1.{name}"] == "private"
    main = "base" if statistics == "shared" else "private"
    assert roles["model.1.base.running_mean"] == main
    assert roles["model.1.base.running_var"] == main
    assert roles["model.1.base.num_batches_tracked"] == "private"
    assert "router.fixed" not in roles
    layout = FederatedLayout(model)
    assert layout.n_clusters == 2
    fed = {e.name: e.role for e in layout.entries}
    private = {e.name for e in layout.private}
    assert fed["model.1.lora_gamma"] == "cluster"
    assert "model.1.lora_running_mean" in private and "model.1.lora_running_mean" not in fed
    assert ("model.1.base.running_mean" in fed) == (statistics == "shared")
    assert "router.fixed" not in fed and "router.fixed" not in private


def test_plain_models_share_their_running_statistics():
    plain = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    roles = parameter_roles(plain)
    assert roles["1.running_mean"] == "base" and roles["1.num_batches_tracked"] == "private"
    layout = FederatedLayout(plain)
    assert layout.size == sum(p.numel() for p in plain.parameters()) + 8
    assert layout.private_size == 1
    without = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    assert FederatedLayout(without).size == sum(p.numel() for p in without.parameters())


def test_aggregation_averages_norm_adaptors_per_cluster_and_statistics_by_samples():
    model = bn_model("nora", "shared")
    layout = FederatedLayout(model)
    rng = np.random.default_rng(0)
    uploads = rng.standard_normal((3, layout.size))
    views = layout.split(uploads)
    views["model.1.base.running_var"][:] = np.abs(views["model.1.base.running_var"]) + 0.1
    uploads = layout.join(views)
    n = np.array([10.0, 20.0, 30.0])
    pi = np.array([[1.0, 0.0], [0.25, 0.75], [0.5, 0.5]])
    new, _ = FloralAggregator(layout).aggregate(layout.flatten(model), uploads, n, pi)
    got = layout.split(new)
    clients = layout.split(uploads)
    probs = cluster_probabilities(pi, n)
    for name in ("model.1.lora_gamma", "model.1.lora_bias"):
        expected = np.einsum("kc,kc...->c...", probs.p_k_given_c, clients[name])
        np.testing.assert_allclose(got[name], expected, rtol=1e-12)
    for name in ("model.1.base.running_mean", "model.1.base.running_var", "model.1.base.weight"):
        np.testing.assert_allclose(got[name], n @ clients[name] / n.sum(), rtol=1e-12)


def test_trainer_keeps_each_clients_adaptor_statistics():
    model = bn_model("nora", "shared")
    rng = np.random.default_rng(0)
    clients = []
    for k in range(2):
        x = (rng.standard_normal((12, 3)) * (1 + 2 * k) + 3 * k).astype(np.float32)
        y = rng.standard_normal((12, 1)).astype(np.float32)
        clients.append((x, y, x, y))
    trainer = FloralTrainer(model, clients, loss="mse", lr=0.01, batch_size=4)
    layout = trainer.layout
    names = [e.name for e in layout.private]
    at = {n: slice(e.offset, e.stop) for n, e in zip(names, layout.private, strict=True)}
    start = trainer.global_parameters()
    gen = np.random.default_rng(1)
    x0 = trainer.train(0, start, gen)
    trainer.train(1, start, gen)
    mean0 = trainer.private[0, at["model.1.lora_running_mean"]]
    mean1 = trainer.private[1, at["model.1.lora_running_mean"]]
    assert not np.allclose(mean0, mean1)  # each client's own statistics
    # the base statistics travel in the federated vector; a client's statistics come back
    main = layout.split(x0)["model.1.base.running_mean"]
    assert not np.allclose(main, 0)
    trainer.client_outputs(0, start)
    torch.testing.assert_close(model.model[1].lora_running_mean.double(), torch.from_numpy(mean0))


# ------------------------------------------------------------------------------ errors
def test_bad_settings_raise_typed_errors_naming_the_problem():
    base = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    with pytest.raises(ParameterError, match="unknown layer types"):
        floralize(base, 2, layer_types=["batchnorm", "rmsnorm"])
    with pytest.raises(ParameterError, match="norm_variant"):
        floralize(base, 2, layer_types=["batchnorm"], norm_variant="fedbn")
    with pytest.raises(ParameterError, match="norm_statistics"):
        floralize(base, 2, layer_types=["batchnorm"], norm_statistics="global")
    context = context_with(torch.tensor([0.5, 0.5]), 2)
    with pytest.raises(ParameterError, match="no affine parameters"):
        MixtureNorm(nn.LayerNorm(4, elementwise_affine=False), context)
    with pytest.raises(ParameterError, match="no affine parameters"):
        floralize(
            nn.Sequential(nn.Linear(3, 4), nn.InstanceNorm1d(4)), 2, layer_types=["instancenorm"]
        )
    with pytest.raises(ParameterError, match="tracks running statistics"):
        MixtureNorm(nn.BatchNorm1d(4, track_running_stats=False), context, variant="nora")
    with pytest.raises(ParameterError, match="Batch NorA"):
        MixtureNorm(nn.LayerNorm(4), context, variant="nora_naive")
    with pytest.raises(ParameterError, match="MixtureNorm adapts"):
        MixtureNorm(nn.Linear(3, 4), context)
    with pytest.raises(ParameterError, match="statistics"):
        MixtureNorm(nn.BatchNorm1d(4), context, statistics="global")
    layer = MixtureNorm(nn.BatchNorm2d(4), context)
    with pytest.raises(ShapeError, match="expected an input with 4 dimensions"):
        layer(torch.randn(3, 4))
    empty = MixtureNorm(nn.BatchNorm1d(4), MixtureContext(2))
    with pytest.raises(ParameterError, match="no router probabilities"):
        empty(torch.randn(3, 4))
    with pytest.raises(ShapeError, match="p\\(c\\) must have shape"):
        center_additive(np.zeros((2, 3)), np.ones(3) / 3)
    with pytest.raises(ParameterError, match="simplex"):
        center_additive(np.zeros((2, 3)), np.array([0.7, 0.7]))
    with pytest.raises(ParameterError, match="p must be"):
        center_products(np.ones((2, 3, 1)), np.ones((2, 4, 1)), np.array([0.5, 0.5]), p=0.5)
    with pytest.raises(ParameterError, match="nora_naive"):
        center_adaptors(bn_model("nora_naive"), np.array([0.5, 0.5]))


# ------------------------------------------------------------------------------ centering
@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.lists(st.floats(0.0, 1.0), min_size=2, max_size=2).filter(lambda v: sum(v) > 0.05),
    st.lists(st.floats(0.01, 1.0), min_size=2, max_size=2),
    st.floats(1.0, 4.0),
)
def test_centering_keeps_the_model_and_centres_the_adaptors(seed, raw_p, raw_pi, p):
    """App. E: u + E_c[a_c], a_c - E_c[a_c] is the same model (Sum_c pi_c = 1); exact for LoRA
    where the centred products keep rank r (here r = min(m, n))."""
    torch.manual_seed(seed % 1000)
    base = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2), nn.LayerNorm(2), nn.Linear(2, 2))
    model = floralize(
        base.double(),
        2,
        rank=2,
        layer_types=["linear", "batchnorm", "layernorm"],
        norm_variant="nora",
        lora_scale=1.5,
        seed=seed % 1000,
    )
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p_ in model.parameters():
            p_.copy_(torch.randn(p_.shape, generator=g, dtype=p_.dtype))
        pi = torch.tensor(raw_pi, dtype=torch.float64)
        model.router.logits.copy_(torch.log(pi))
    model.eval()
    x = torch.randn(6, 3, generator=g, dtype=torch.float64)
    before = model(x)
    p_c = np.array(raw_p) / sum(raw_p)
    center_adaptors(model, p_c, p=p)
    torch.testing.assert_close(model(x), before, atol=1e-9, rtol=1e-9)
    for _, layer in model.adaptors():
        a, b = layer.factor_matrices()
        products = (a @ b.mT).detach().numpy()
        np.testing.assert_allclose(np.tensordot(p_c, products, axes=1), 0, atol=1e-10)
    for m in model.modules():
        if isinstance(m, MixtureNorm):
            np.testing.assert_allclose(p_c @ m.lora_gamma.detach().numpy(), 0, atol=1e-10)
            np.testing.assert_allclose(p_c @ m.lora_bias.detach().numpy(), 0, atol=1e-10)


def test_center_products_is_eq_37():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 5, 2)), rng.standard_normal((3, 4, 2))
    p_c = np.array([0.2, 0.3, 0.5])
    mean, na, nb = center_products(a, b, p_c, p=4.0)
    products = a @ b.swapaxes(-1, -2)
    np.testing.assert_allclose(mean, np.tensordot(p_c, products, axes=1))
    for c in range(3):
        u, s, vt = np.linalg.svd(products[c] - mean)
        np.testing.assert_allclose(na[c] @ nb[c].T, (u[:, :2] * s[:2]) @ vt[:2], atol=1e-12)
        # the split of eq. (37): U S^(1/p), V S^(1/q) with 1/p + 1/q = 1
        np.testing.assert_allclose(np.linalg.norm(na[c], axis=0), s[:2] ** 0.25, atol=1e-12)
        np.testing.assert_allclose(np.linalg.norm(nb[c], axis=0), s[:2] ** 0.75, atol=1e-12)
    m, centred = center_additive(np.array([[4.0], [6.0]]), np.array([0.5, 0.5]))
    assert m.tolist() == [5.0] and centred.ravel().tolist() == [-1.0, 1.0]  # App. E's example


# ------------------------------------------------------------------------------ Figure 2
@pytest.mark.slow  # trains six variants (about 8 s)
def test_fig2_quick_writes_its_files_and_the_adaptors_beat_fedavg(tmp_path):
    from riemfl.experiments.floral.fig2 import FIG2_VARIANTS, QUICK, run_fig2

    result = run_fig2(tmp_path, quick=True)
    assert (tmp_path / "fig2.png").stat().st_size > 0
    saved = json.loads((tmp_path / "fig2.json").read_text(encoding="utf-8"))
    assert saved["variants"].keys() == result["variants"].keys() == FIG2_VARIANTS.keys()
    length = QUICK.rounds // QUICK.record_every + 1
    for curve in result["variants"].values():
        assert len(curve["round"]) == len(curve["loss"]) == length
        assert curve["round"][-1] == QUICK.rounds
        assert all(math.isfinite(v) and v > 0 for v in curve["loss"])
        assert curve["final_loss"] < curve["loss"][0]
    fedavg = result["variants"]["FedAvg"]["final_loss"]
    for label in ("FLoRAL", "FLoRAL + Batch NorA (42)"):
        assert result["variants"][label]["final_loss"] < fedavg, label

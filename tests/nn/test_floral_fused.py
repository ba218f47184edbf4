"""The fused merge of the torch path (one autograd node for all merged weights): gradients,
caches, fallbacks."""

from __future__ import annotations

import copy
import pickle

import pytest

torch = pytest.importorskip("torch")

from floral_helpers import randomise  # noqa: E402
from torch import nn  # noqa: E402

from riemfl.errors import ParameterError, ShapeError  # noqa: E402
from riemfl.nn import MLP, SmallCNN  # noqa: E402
from riemfl.nn.floral import adaptor as adaptor_module  # noqa: E402
from riemfl.nn.floral import floralize  # noqa: E402
from riemfl.nn.floral.fused import MixtureMerge, merge_layers, plain_merge  # noqa: E402

F = torch.nn.functional


@pytest.fixture(autouse=True)
def torch_path(monkeypatch):
    """This module tests the pure-torch merge: FloralModel forward passes do not take the
    compiled layer (tests/nn/test_floral_kernel.py compares the two)."""
    monkeypatch.setenv("RIEMFL_FLORAL_KERNEL", "off")


def _arguments(layers, w):
    tensors = []
    for layer in layers:
        tensors += [layer.base.weight, layer.base.bias, layer.lora_out, layer.lora_in]
        tensors.append(layer.lora_bias)
    return w, tensors


def _grads_of_step(model, x, y):
    params = [p for p in model.parameters() if p.requires_grad]
    loss = F.cross_entropy(model(x), y)
    return loss.detach(), torch.autograd.grad(loss, params)


# a mix of everything the merge handles: linear and conv layers, ranks 1 and 2, all variants,
# bias adaptors on and off, a base layer without bias, stride / padding / dilation
NETS = {
    "linear": lambda: nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3, bias=False)),
    "balanced_2d": lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 2, (3, 2))),
    "in_layer": lambda: nn.Sequential(nn.Conv2d(2, 3, 3, stride=2, padding=1)),
    "out_layer": lambda: nn.Sequential(nn.Conv2d(2, 3, (2, 3), dilation=2, bias=False)),
}


def _layers(kind, rank, bias, dtype=torch.float64):
    variant = kind if kind != "linear" else "balanced_2d"
    model = floralize(NETS[kind]().to(dtype), 3, rank=rank, conv_variant=variant, bias=bias)
    return randomise(model, seed=rank)


def _merge_function(fl):
    """``MixtureMerge.apply`` over the model's adapted layers as a function of (w, *tensors),
    for gradcheck, and its float64 inputs."""
    layers = tuple(m for _, m in fl.adaptors())
    w = torch.rand(3, dtype=torch.float64, requires_grad=True)
    w0, tensors = _arguments(layers, w)

    def merged(*args):
        it = iter(args[1:])
        given = [None if t is None else next(it) for t in tensors]
        return MixtureMerge.apply(layers, args[0], *given)

    return merged, [w0] + [t for t in tensors if t is not None]


@pytest.mark.parametrize("kind", list(NETS))
@pytest.mark.parametrize("rank", [1, 2])
@pytest.mark.parametrize("bias", [True, False])
def test_merge_function_gradcheck(kind, rank, bias):
    merged, inputs = _merge_function(_layers(kind, rank, bias))
    assert torch.autograd.gradcheck(merged, inputs, eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", list(NETS))
def test_second_derivatives(kind):
    merged, inputs = _merge_function(_layers(kind, 2, True))
    assert torch.autograd.gradgradcheck(merged, inputs, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("kind", list(NETS))
@pytest.mark.parametrize("rank", [1, 2])
def test_fused_equals_plain_formula(kind, rank):
    fl = _layers(kind, rank, True)
    layers = tuple(m for _, m in fl.adaptors())
    w = torch.rand(3, dtype=torch.float64, requires_grad=True)
    params = [w] + [p for p in fl.parameters() if p.requires_grad and p is not fl.router.logits]
    results = []
    for merge in (merge_layers, plain_merge):
        out = merge(layers, w)
        flat = [t for pair in out.values() for t in pair if t is not None]
        g = torch.Generator().manual_seed(7)
        upstream = [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in flat]
        grads = torch.autograd.grad(flat, params, upstream)
        results.append(([t.detach() for t in flat], grads))
    for a, b in zip(*results, strict=True):
        for ta, tb in zip(a, b, strict=True):
            torch.testing.assert_close(ta, tb, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("make", [lambda: MLP([64, 20, 10]), SmallCNN], ids=["mlp", "cnn"])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"lora_scale": 2.0, "min_prob": 0.2},
        {"routing": "fixed"},
        {"init": "paper", "bias": False},
    ],
    ids=["default", "scale-clamp", "fixed", "paper-nobias"],
)
def test_training_step_gradients_equal_the_plain_path(make, options, monkeypatch):
    """Outputs and the gradients of every parameter (router included) are the plain ones."""
    torch.manual_seed(0)
    fl = randomise(floralize(make(), 4, 0.1, seed=1, **options), seed=2)
    with torch.no_grad():  # two clusters under the clamp
        fl.router.logits.copy_(torch.tensor([2.0, -1.5, 0.3, -2.0]))
    x, y = torch.rand(6, 1, 8, 8), torch.randint(0, 10, (6,))
    loss, grads = _grads_of_step(fl, x, y)
    monkeypatch.setattr(adaptor_module, "merge_layers", plain_merge)
    ref_loss, ref_grads = _grads_of_step(fl, x, y)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    assert len(grads) == len(ref_grads)
    for g, ref in zip(grads, ref_grads, strict=True):  # float32 sums in another order
        torch.testing.assert_close(g, ref, rtol=1e-4, atol=1e-5 * float(ref.abs().max()))


def test_cached_views_follow_parameter_changes():
    fl = randomise(floralize(MLP([6, 5, 3]), 2, rank=2, seed=0))
    x = torch.randn(4, 6)

    def reference():
        pi = fl.router.probabilities()
        out = x
        for i, (_, layer) in enumerate(fl.adaptors()):
            out = layer.base(out) + layer.factored_output(out, pi)
            out = torch.relu(out) if i == 0 else out
        return out

    fl.eval()
    torch.testing.assert_close(fl(x), reference())
    layer = fl.adaptors()[0][1]
    with torch.no_grad():  # in place: the cached views see it
        layer.lora_in.mul_(-2.0)
        layer.base.weight.add_(1.0)
    torch.testing.assert_close(fl(x), reference())
    # new storage for the same parameter object, and a new parameter object
    layer.lora_out.data = torch.randn(layer.lora_out.shape)
    layer.lora_bias = nn.Parameter(torch.randn(layer.lora_bias.shape))
    torch.testing.assert_close(fl(x), reference())
    # a non-contiguous parameter (its reshapes copy, so nothing is cached)
    layer.lora_in.data = torch.randn(tuple(reversed(layer.lora_in.shape))).permute(2, 1, 0)
    assert not layer.lora_in.is_contiguous()
    torch.testing.assert_close(fl(x), reference())
    with torch.no_grad():
        layer.lora_in.mul_(0.5)
    torch.testing.assert_close(fl(x), reference())
    # dtype conversion and deep copy
    fl.double()
    fl.router.logits.data = fl.router.logits.data.double()
    x = x.double()
    torch.testing.assert_close(fl(x), reference())
    twin = copy.deepcopy(fl)
    with torch.no_grad():
        twin.adaptors()[1][1].lora_out.add_(1.0)
    torch.testing.assert_close(fl(x), reference())
    assert not torch.allclose(twin(x), fl(x))
    restored = pickle.loads(pickle.dumps(fl))
    assert all("_fusion_cache" not in m.__dict__ for _, m in restored.adaptors())
    torch.testing.assert_close(restored(x), fl(x))


def test_layers_put_in_later_and_layers_called_directly():
    fl = randomise(floralize(MLP([6, 5, 3]), 2, rank=1, seed=0))
    x = torch.randn(4, 6)
    fl(x)
    fresh = randomise(floralize(nn.Sequential(nn.Linear(5, 3)), 2, rank=1, seed=3), seed=4)
    new_layer = fresh.adaptors()[0][1]
    new_layer.context = fl.context
    fl.model.net[2] = new_layer  # not in the listed layers: merges its own weights
    pi = fl.router.probabilities()
    hidden = torch.relu(fl.model.net[0].base(x) + fl.model.net[0].factored_output(x, pi))
    expected = new_layer.base(hidden) + new_layer.factored_output(hidden, pi)
    torch.testing.assert_close(fl.eval()(x), expected)
    fl.refresh_layers()
    torch.testing.assert_close(fl(x), expected)
    # a layer called outside its model, with pi set by hand
    fl.context.set(pi)
    torch.testing.assert_close(new_layer(hidden), expected)
    fl.context.set(None)
    with pytest.raises(ParameterError, match="router probabilities"):
        new_layer(hidden)


def test_merge_layers_checks_the_mixture_weights():
    fl = floralize(MLP([6, 5, 3]), 3, rank=1)
    layers = [m for _, m in fl.adaptors()]
    with pytest.raises(ShapeError, match="cluster counts"):
        merge_layers(layers, torch.ones(2))
    with pytest.raises(ShapeError, match="cluster counts"):
        merge_layers(layers, torch.ones(3, 1))
    assert merge_layers([], torch.ones(3)) == {}


def test_frozen_parameters_get_no_gradient():
    fl = randomise(floralize(SmallCNN(), 2, 0.1, seed=0))
    for _, layer in fl.adaptors():
        layer.base.requires_grad_(False)
    x, y = torch.rand(3, 1, 8, 8), torch.randint(0, 10, (3,))
    loss, grads = _grads_of_step(fl, x, y)
    names = [n for n, p in fl.named_parameters() if p.requires_grad]
    assert not any(".base." in n for n in names)
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("mode", ["off", "auto"])
def test_torch_func_transforms_use_the_plain_path(mode, monkeypatch):
    monkeypatch.setenv("RIEMFL_FLORAL_KERNEL", mode)  # "auto": the compiled layer steps aside too
    fl = randomise(floralize(MLP([6, 5, 3]), 2, rank=1, seed=0))
    x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
    params = {n: p.detach() for n, p in fl.named_parameters()}

    def loss(p):
        return F.cross_entropy(torch.func.functional_call(fl, p, (x,)), y)

    grads = torch.func.grad(loss)(params)
    expected = torch.autograd.grad(F.cross_entropy(fl(x), y), list(fl.parameters()))
    for (name, _), ref in zip(fl.named_parameters(), expected, strict=True):
        torch.testing.assert_close(grads[name], ref, rtol=1e-5, atol=1e-6)


def test_adaptor_without_the_fused_methods_uses_the_plain_merge():
    from riemfl.nn.floral import MixtureLinear

    class Plain(MixtureLinear):  # a user subclass that only knows the original contract
        _fusion_views = adaptor_module.MixtureAdaptor._fusion_views
        _fused_weight = adaptor_module.MixtureAdaptor._fused_weight
        _fused_weight_backward = adaptor_module.MixtureAdaptor._fused_weight_backward

    fl = randomise(floralize(MLP([6, 5, 3]), 2, rank=1, seed=0))
    x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
    loss, grads = _grads_of_step(fl, x, y)
    for _, layer in fl.adaptors()[:1]:
        layer.__class__ = Plain
    loss2, grads2 = _grads_of_step(fl, x, y)
    torch.testing.assert_close(loss, loss2)
    for g, ref in zip(grads, grads2, strict=True):
        torch.testing.assert_close(g, ref)


def test_large_linear_layers_on_few_rows_run_factored():
    """C r (m n - rows (m + n)) > FACTORED_SAVING: the layer runs x -> B^T x -> A (w-scaled)
    instead of merging, from the pass after the one that saw those rows; same numbers."""
    model = randomise(
        floralize(nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 3)), 2, rank=2)
    ).double()
    first, last = (m for _, m in model.adaptors())
    x, y = torch.randn(4, 256, dtype=torch.float64), torch.randint(0, 3, (4,))
    pi = model.router.probabilities()

    def reference():
        hidden = torch.relu(first.base(x) + first.factored_output(x, pi))
        return last.base(hidden) + last.factored_output(hidden, pi)

    model.eval()
    passes = [_grads_of_step(model, x, y) for _ in range(2)]
    assert first.__dict__["_factored_hint"] and not last.__dict__["_factored_hint"]
    for (loss, grads), (loss2, grads2) in zip(passes, passes[1:], strict=False):
        torch.testing.assert_close(loss, loss2, rtol=1e-12, atol=0)
        for g, g2 in zip(grads, grads2, strict=True):
            torch.testing.assert_close(g, g2, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(model(x), reference(), rtol=1e-12, atol=1e-12)
    # many rows: back to the merge
    _grads_of_step(model, torch.randn(200, 256, dtype=torch.float64), torch.zeros(200).long())
    assert not first.__dict__["_factored_hint"]
    # second derivatives through the factored layer
    xg = x.clone().requires_grad_(True)
    (gx,) = torch.autograd.grad(model(xg).square().sum(), xg, create_graph=True)
    assert torch.autograd.grad(gx.square().sum(), first.lora_in)[0].abs().sum() > 0

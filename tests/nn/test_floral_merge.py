"""The adapted layers' batched merge against the reference formula (riemfl.nn.floral.merge):
values, gradients, second derivatives, whole training steps, and what a layer sees."""

from __future__ import annotations

import copy
import pickle

import pytest

from riemfl.testing import importorskip

torch = importorskip("torch")

from floral_helpers import randomise, use_reference_merge  # noqa: E402
from torch import nn  # noqa: E402

from riemfl.errors import ParameterError, ShapeError  # noqa: E402
from riemfl.nn import MLP, SmallCNN  # noqa: E402
from riemfl.nn.floral import MixtureLinear, floralize  # noqa: E402
from riemfl.nn.floral.merge import reference_merge  # noqa: E402

F = torch.nn.functional


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
    return [m for _, m in randomise(model, seed=rank).adaptors()]


def _merge_function(layer, merge):
    """``merge(layer, w)`` as a function of (w, weight, bias, factors), for gradcheck."""
    names = [("base", "weight"), ("base", "bias"), ("", "lora_out"), ("", "lora_in")]
    names.append(("", "lora_bias"))
    owners = [layer.base if owner else layer for owner, _ in names]
    present = [(o, n) for o, (_, n) in zip(owners, names, strict=True) if getattr(o, n) is not None]
    w = torch.rand(3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    inputs = [w.requires_grad_(True)]
    inputs += [getattr(o, n).detach().clone().requires_grad_(True) for o, n in present]

    def merged(w, *tensors):
        saved = {(o, n): getattr(o, n) for o, n in present}
        try:
            for (o, n), t in zip(present, tensors, strict=True):
                o._parameters[n] = t  # a plain tensor in the parameter's place, for gradcheck
            return tuple(t for t in merge(layer, w) if t is not None)
        finally:
            for (o, n), p in saved.items():
                o._parameters[n] = p

    return merged, inputs


def _batched(layer, w):
    return layer.merged_parameters(w)


@pytest.mark.parametrize("kind", list(NETS))
@pytest.mark.parametrize("rank", [1, 2])
@pytest.mark.parametrize("bias", [True, False])
def test_batched_merge_equals_the_reference(kind, rank, bias):
    """Values and gradients of every input (w included) for one random upstream gradient."""
    for layer in _layers(kind, rank, bias):
        results = []
        for merge in (_batched, reference_merge):
            fn, inputs = _merge_function(layer, merge)
            out = fn(*inputs)
            g = torch.Generator().manual_seed(7)
            upstream = [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in out]
            results.append((out, torch.autograd.grad(out, inputs, upstream)))
        (out, grads), (ref, ref_grads) = results
        for a, b in zip(out + grads, ref + ref_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", list(NETS))
def test_batched_merge_gradcheck_and_second_derivatives(kind):
    for layer in _layers(kind, 2, True):
        fn, inputs = _merge_function(layer, _batched)
        assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-6)
        assert torch.autograd.gradgradcheck(fn, inputs, eps=1e-6, atol=1e-5)


def test_no_output_is_a_view_of_an_input():
    """What broke torch.compile in the merge this replaced: outputs aliasing inputs."""
    for kind in NETS:
        for layer in _layers(kind, 1, True):
            for t in layer.merged_parameters(torch.rand(3, dtype=torch.float64)):
                assert t._base is None
                ptr = t.untyped_storage().data_ptr()
                assert all(ptr != p.untyped_storage().data_ptr() for p in layer.parameters())


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
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_training_step_equals_the_reference(make, options, dtype, monkeypatch):
    """Loss and the gradients of every parameter (router included) are the reference's."""
    torch.manual_seed(0)
    fl = randomise(floralize(make(), 4, 0.1, seed=1, **options).to(dtype), seed=2)
    with torch.no_grad():  # two clusters under the clamp
        fl.router.logits.copy_(torch.tensor([2.0, -1.5, 0.3, -2.0]))
    x, y = torch.rand(6, 1, 8, 8, dtype=dtype), torch.randint(0, 10, (6,))
    loss, grads = _grads_of_step(fl, x, y)
    use_reference_merge(monkeypatch)
    ref_loss, ref_grads = _grads_of_step(fl, x, y)
    tight = dtype == torch.float64
    torch.testing.assert_close(loss, ref_loss, rtol=1e-12 if tight else 1e-5, atol=1e-6)
    assert len(grads) == len(ref_grads)
    for g, ref in zip(grads, ref_grads, strict=True):  # float32 sums in another order
        scale = float(ref.abs().max())
        if tight:
            torch.testing.assert_close(g, ref, rtol=1e-10, atol=1e-12 * max(scale, 1.0))
        else:
            torch.testing.assert_close(g, ref, rtol=1e-4, atol=1e-5 * scale)


def test_frozen_parts_and_an_input_that_needs_its_gradient(monkeypatch):
    """Every subset of requires_grad gives the reference's gradients."""
    model = randomise(floralize(SmallCNN(), 3, 0.1, seed=0).double())
    x = torch.rand(3, 1, 8, 8, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 10, (3,))
    for freeze in ("base", "lora_out", "lora_in", "lora_bias", "router"):
        for name, p in model.named_parameters():
            p.requires_grad_(freeze not in name)
        wrt = [x] + [p for p in model.parameters() if p.requires_grad]
        results = []
        with monkeypatch.context() as patch:
            for reference in (False, True):
                if reference:
                    use_reference_merge(patch)
                loss = F.cross_entropy(model(x), y)
                results.append(torch.autograd.grad(loss, wrt))
        for a, b in zip(*results, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_second_derivatives_through_a_model(monkeypatch):
    """A gradient penalty (create_graph) differentiates to the reference's numbers."""
    model = randomise(floralize(SmallCNN(), 2, 0.1, seed=0).double())
    x = torch.rand(2, 1, 8, 8, dtype=torch.float64, requires_grad=True)
    params = [p for p in model.parameters() if p.requires_grad]
    results = []
    for reference in (False, True):
        if reference:
            use_reference_merge(monkeypatch)
        (gx,) = torch.autograd.grad(model(x).square().sum(), x, create_graph=True)
        results.append(torch.autograd.grad(gx.square().sum(), params))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_parameter_changes_are_seen():
    """In place, new storage, a new parameter object, a non-contiguous parameter, another
    dtype, copies and pickles: the model always computes from its current parameters."""
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
    with torch.no_grad():
        layer.lora_in.mul_(-2.0)
        layer.base.weight.add_(1.0)
    torch.testing.assert_close(fl(x), reference())
    layer.lora_out.data = torch.randn(layer.lora_out.shape)
    layer.lora_bias = nn.Parameter(torch.randn(layer.lora_bias.shape))
    torch.testing.assert_close(fl(x), reference())
    layer.lora_in.data = torch.randn(tuple(reversed(layer.lora_in.shape))).permute(2, 1, 0)
    assert not layer.lora_in.is_contiguous()
    torch.testing.assert_close(fl(x), reference())
    fl.double()
    x = x.double()
    torch.testing.assert_close(fl(x), reference())
    twin = copy.deepcopy(fl)
    with torch.no_grad():
        twin.adaptors()[1][1].lora_out.add_(1.0)
    torch.testing.assert_close(fl(x), reference())
    assert not torch.allclose(twin(x), fl(x))
    restored = pickle.loads(pickle.dumps(fl))
    torch.testing.assert_close(restored(x), fl(x))


def test_non_contiguous_input(monkeypatch):
    model = randomise(floralize(MLP([6, 5, 3]), 2, rank=2, seed=0).double())
    x = torch.randn(6, 4, dtype=torch.float64).T  # (4, 6), not contiguous
    y = torch.randint(0, 3, (4,))
    loss, grads = _grads_of_step(model, x, y)
    use_reference_merge(monkeypatch)
    ref_loss, ref_grads = _grads_of_step(model, x.contiguous(), y)
    torch.testing.assert_close(loss, ref_loss)
    for g, ref in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, ref)


def test_layers_put_in_later_and_layers_called_directly():
    fl = randomise(floralize(MLP([6, 5, 3]), 2, rank=1, seed=0))
    x = torch.randn(4, 6)
    fresh = randomise(floralize(nn.Sequential(nn.Linear(5, 3)), 2, rank=1, seed=3), seed=4)
    new_layer = fresh.adaptors()[0][1]
    new_layer.context = fl.context
    fl.model.net[2] = new_layer
    pi = fl.router.probabilities()
    hidden = torch.relu(fl.model.net[0].base(x) + fl.model.net[0].factored_output(x, pi))
    expected = new_layer.base(hidden) + new_layer.factored_output(hidden, pi)
    torch.testing.assert_close(fl.eval()(x), expected)
    # a layer called outside its model, with pi set by hand
    fl.context.set(pi)
    torch.testing.assert_close(new_layer(hidden), expected)
    fl.context.set(None)
    with pytest.raises(ParameterError, match="router probabilities"):
        new_layer(hidden)


def test_mixture_weights_of_the_wrong_shape_are_refused():
    fl = floralize(MLP([6, 5, 3]), 3, rank=1)
    layer = fl.adaptors()[0][1]
    for bad in (torch.ones(2), torch.ones(3, 1)):
        with pytest.raises(ShapeError, match="expected"):
            fl.context.set(bad)
        with pytest.raises(ShapeError, match="expected"):
            layer.delta_weight(bad)
        with pytest.raises(ShapeError, match="expected"):
            reference_merge(layer, bad)


def test_torch_func_transforms():
    fl = randomise(floralize(MLP([6, 5, 3]), 2, rank=1, seed=0))
    x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
    params = {n: p.detach() for n, p in fl.named_parameters()}

    def loss(p):
        return F.cross_entropy(torch.func.functional_call(fl, p, (x,)), y)

    grads = torch.func.grad(loss)(params)
    expected = torch.autograd.grad(F.cross_entropy(fl(x), y), list(fl.parameters()))
    for (name, _), ref in zip(fl.named_parameters(), expected, strict=True):
        torch.testing.assert_close(grads[name], ref, rtol=1e-5, atol=1e-6)


def test_a_subclass_that_changes_the_merge_is_used():
    """There is one path: a subclass's own merge is what its layers run (none is bypassed)."""

    class Doubled(MixtureLinear):
        def _merged_weight(self, w, weight):
            delta = 2.0 * super()._merged_weight(w, None)
            return delta if weight is None else weight + delta

    fl = randomise(floralize(MLP([6, 5, 3]), 2, rank=1, seed=0)).eval()
    x = torch.randn(4, 6)
    twice = copy.deepcopy(fl)  # the same model with every L_c doubled
    with torch.no_grad():
        for _, layer in twice.adaptors():
            layer.lora_out.mul_(2.0)
    before = fl(x)
    for _, layer in fl.adaptors():
        layer.__class__ = Doubled
    torch.testing.assert_close(fl(x), twice(x))
    assert not torch.allclose(fl(x), before)


def test_an_unbatched_image():
    model = randomise(floralize(SmallCNN(), 2, 0.1, seed=0)).eval()
    conv = model.adaptors()[0][1]
    image = torch.rand(1, 8, 8)
    model.context.set(model.router())
    try:
        torch.testing.assert_close(conv(image), conv(image[None])[0])
    finally:
        model.context.set(None)


def test_cpu_autocast():
    model = randomise(floralize(SmallCNN(), 2, 0.1, seed=0))
    x = torch.rand(3, 1, 8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    # under autocast the model computes what its merged (plain) model computes, to bfloat16's
    # precision
    merged = model.eval().merge()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = model(x).detach().float(), merged(x).detach().float()
    torch.testing.assert_close(got, want, rtol=0, atol=2e-2 * float(want.abs().max()))


def test_router_noise_is_drawn_once_per_pass():
    model = randomise(floralize(MLP([6, 5, 4]), 3, rank=1, router_noise=0.5))
    x = torch.randn(4, 6)
    model.router.generator = torch.Generator().manual_seed(7)
    first, second = model(x), model(x)
    assert not torch.allclose(first, second)  # new noise each pass
    replay = torch.Generator().manual_seed(7)
    for out in (first, second):
        noise = torch.rand(3, generator=replay)
        model.context.set(torch.softmax(model.router.logits + 0.5 * noise, 0))
        try:
            expected = model.model(x)
        finally:
            model.context.set(None)
        torch.testing.assert_close(out, expected)
    assert torch.equal(model.router.generator.get_state(), replay.get_state())


def test_large_linear_layers_on_few_rows_run_factored(monkeypatch):
    """C r (m n - rows (m + n)) > FACTORED_SAVING: the layer runs x -> B^T x -> A (w-scaled)
    instead of merging, decided at each pass; the reference's numbers, second derivatives
    included."""
    model = randomise(
        floralize(nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 3)), 2, rank=2)
    ).double()
    first, last = (m for _, m in model.adaptors())
    x, y = torch.randn(4, 256, dtype=torch.float64), torch.randint(0, 3, (4,))
    assert first._prefers_factored(x) and not last._prefers_factored(torch.relu(first.base(x)))
    assert not first._prefers_factored(torch.randn(200, 256, dtype=torch.float64))
    calls = []
    factored = type(first)._factored_forward
    monkeypatch.setattr(
        type(first), "_factored_forward", lambda s, *a: calls.append(s) or factored(s, *a)
    )
    loss, grads = _grads_of_step(model, x, y)
    assert calls == [first]
    xg = x.clone().requires_grad_(True)
    (gx,) = torch.autograd.grad(model(xg).square().sum(), xg, create_graph=True)
    second = torch.autograd.grad(gx.square().sum(), first.lora_in)[0]
    assert second.abs().sum() > 0
    use_reference_merge(monkeypatch)
    ref_loss, ref_grads = _grads_of_step(model, x, y)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-12, atol=0)
    for g, ref in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, ref, rtol=1e-10, atol=1e-12)
    (gx_ref,) = torch.autograd.grad(model(xg).square().sum(), xg, create_graph=True)
    second_ref = torch.autograd.grad(gx_ref.square().sum(), first.lora_in)[0]
    torch.testing.assert_close(second, second_ref, rtol=1e-9, atol=1e-12)

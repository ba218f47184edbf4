"""FLoRAL models under ``torch.compile``: one graph (``fullgraph=True``), and the outputs,
gradients and training steps of eager mode, for the MLP (linear layers, merged and factored)
and the SmallCNN (convolutions and linear layers).

The SmallCNN with a factored classifier layer (4 rows) is compiled with Inductor's
``max_fusion_size=1``: with fusion, torch 2.13.0's CPU Inductor schedules a fused backward kernel
of conv -> ReLU -> max-pool -> flatten -> linear before the kernel that writes its input, at some
batch sizes, and the convolutions' gradients come out zero (plain models too, without FLoRAL;
``docs/floral.md``, "Speed and torch.compile")."""

from __future__ import annotations

import copy
import shutil

import pytest

from riemfl.testing import importorskip

torch = importorskip("torch")

from floral_helpers import randomise  # noqa: E402

from riemfl.nn import MLP, SmallCNN  # noqa: E402
from riemfl.nn.floral import floralize  # noqa: E402

F = torch.nn.functional

pytestmark = [
    pytest.mark.slow,  # each model compiles for 10 to 30 s
    pytest.mark.skipif(
        not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
        reason="torch.compile's CPU backend needs a C++ compiler",
    ),
]

MODELS = {
    # the first layer (64 -> 256, r = 4 at rho = 10%, C = 4) runs factored on 4 rows
    "mlp": (lambda: MLP([64, 256, 10]), (64,)),
    # the classifier's 128 -> 64 layer runs factored on 4 rows, merged on 32
    "cnn": (SmallCNN, (1, 8, 8)),
}

#: (model, batch, Inductor options, floralize options) of the compiled-against-eager test
CASES = {
    "mlp-4": ("mlp", 4, {}, {}),
    "mlp-4-scale-clamp": ("mlp", 4, {}, {"lora_scale": 2.0, "min_prob": 0.2}),
    "cnn-32": ("cnn", 32, {}, {}),
    "cnn-4-unfused": ("cnn", 4, {"max_fusion_size": 1}, {}),  # module docstring
}


def _model(name, batch=4, **options):
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = randomise(floralize(make(), 4, 0.1, seed=1, **options), seed=2)
    with torch.no_grad():  # small adaptors, as after training: the loss stays in range
        for _, layer in model.adaptors():
            layer.lora_out.mul_(0.05)
            layer.lora_in.mul_(0.05)
    g = torch.Generator().manual_seed(3)
    x = torch.rand((batch, *shape), generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    return model, x, y


@pytest.mark.parametrize("case", list(CASES))
def test_compiled_model_equals_eager(case):
    """Outputs and the gradients of every parameter and of the input, and a few SGD steps."""
    name, batch, inductor, options = CASES[case]
    torch._dynamo.reset()
    model, x, y = _model(name, batch, **options)
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, fullgraph=True, options=inductor)
    for eager_model, run in ((model, model), (twin, compiled)):
        xg = x.clone().requires_grad_(True)
        out = run(xg)
        params = [p for p in eager_model.parameters() if p.requires_grad]
        grads = torch.autograd.grad(F.cross_entropy(out, y), [xg, *params])
        if run is model:
            ref_out, ref_grads = out.detach(), grads
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    for g, ref in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, ref, rtol=1e-4, atol=1e-6 * max(1.0, float(ref.abs().max())))
    assert any(float(g.abs().max()) > 0 for g in ref_grads[1:])

    # training steps: forward, backward and an SGD update of every parameter, three times
    for _ in range(3):
        for eager_model, run in ((model, model), (twin, compiled)):
            params = [p for p in eager_model.parameters() if p.requires_grad]
            grads = torch.autograd.grad(F.cross_entropy(run(x), y), params)
            with torch.no_grad():
                for p, g in zip(params, grads, strict=True):
                    p.sub_(0.1 * g)
    for (n, p), (_, q) in zip(model.named_parameters(), twin.named_parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5, msg=n)
    start = _model(name, batch, **options)[0]
    assert all(  # the steps moved every parameter
        not torch.equal(p, q) for p, q in zip(model.parameters(), start.parameters(), strict=True)
    )


def test_factored_layers_in_the_cases():
    """The cases run the factored pass where they say so, and the merge elsewhere."""
    for case, factored in (("mlp-4", True), ("cnn-4-unfused", True), ("cnn-32", False)):
        name, batch, _, options = CASES[case]
        model, x, _ = _model(name, batch, **options)
        layer = model.adaptors()[0 if name == "mlp" else 2][1]
        rows = torch.zeros(batch, layer.base.in_features)
        assert layer._prefers_factored(rows) is factored, case


def test_compiled_merged_model_equals_eager():
    torch._dynamo.reset()
    model, x, _ = _model("cnn", 32)
    merged = model.eval().merge()
    compiled = torch.compile(merged, fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)

"""The compiled FLoRAL layer (riemfl/nn/floral/csrc/floral_ops.cpp) against the torch path.

The extension is built on first use (a C++ compiler is needed; about 30 s once). These tests
require it unless ``RIEMFL_FLORAL_KERNEL=off`` is set, in which case they are skipped.
"""

from __future__ import annotations

import copy
import math
import pickle
import warnings

import pytest

torch = pytest.importorskip("torch")

from floral_helpers import assert_same_passes, graph_names, randomise  # noqa: E402
from torch import nn  # noqa: E402

from riemfl.errors import MissingDependencyError, ParameterError  # noqa: E402
from riemfl.nn import MLP, SmallCNN  # noqa: E402
from riemfl.nn.floral import MixtureLinear, floralize, kernels  # noqa: E402

F = torch.nn.functional

if kernels.mode() == "off":  # pragma: no cover - a run that asked for the torch path only
    pytest.skip("RIEMFL_FLORAL_KERNEL=off", allow_module_level=True)


def uses_kernel(t):
    return any("FloralOp" in n or "FloralChain" in n for n in graph_names(t))


# one adapted layer of every kind the extension handles: (base layer, input shape, options)
LAYERS = {
    "linear": (lambda: nn.Linear(5, 4), (3, 5), {}),
    "linear-nobias": (lambda: nn.Linear(5, 4, bias=False), (3, 5), {}),
    "linear-leading-axes": (lambda: nn.Linear(5, 4), (2, 3, 5), {}),
    # few rows for the layer's size: run factored, x B then A, not with the merged weight (the
    # thin products in loops at these sizes; ATen's products: "linear-factored-aten" below)
    "linear-factored": (lambda: nn.Linear(160, 160), (2, 160), {}),
    "linear-factored-leading-axes": (lambda: nn.Linear(160, 150, bias=False), (2, 1, 160), {}),
    "linear-factored-one-row": (lambda: nn.Linear(160, 160), (160,), {}),
    "balanced_2d": (
        lambda: nn.Conv2d(3, 4, 3, padding=1),
        (2, 3, 5, 5),
        {"conv_variant": "balanced_2d"},
    ),
    "balanced_2d-rect": (
        lambda: nn.Conv2d(2, 3, (3, 2), stride=(2, 1)),
        (2, 2, 6, 5),
        {"conv_variant": "balanced_2d"},
    ),
    "in_layer": (
        lambda: nn.Conv2d(2, 3, 3, stride=2, padding=1),
        (2, 2, 5, 5),
        {"conv_variant": "in_layer"},
    ),
    "out_layer": (
        lambda: nn.Conv2d(2, 3, (2, 3), dilation=2, bias=False),
        (2, 2, 6, 7),
        {"conv_variant": "out_layer"},
    ),
}


def one_layer(kind, rank, bias, dtype=torch.float64):
    make, shape, options = LAYERS[kind]
    model = floralize(nn.Sequential(make()), 3, rank=rank, bias=bias, seed=rank, **options)
    model = randomise(model.to(dtype), seed=rank)
    layer = model.adaptors()[0][1]
    return model, layer, shape


def op_inputs(kernel, layer, shape, dtype=torch.float64):
    """``floral_op``'s arguments as a function of its differentiable tensors, and those."""
    spec = kernel.Spec(layer._kernel_spec_values())
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    w = torch.rand(3, dtype=dtype, requires_grad=True)
    named = [x, layer.base.weight, layer.base.bias, layer.lora_out, layer.lora_in, layer.lora_bias]
    tensors = [t for t in [*named, w] if t is not None]
    present = [t is not None for t in [*named, w]]

    def op(*args):
        it = iter(args)
        full = [next(it) if p else None for p in present]
        return kernel.floral_op(*full[:6], full[6], spec)

    return op, tensors


@pytest.mark.parametrize("kind", list(LAYERS))
@pytest.mark.parametrize("rank", [1, 2])
@pytest.mark.parametrize("bias", [True, False], ids=["bias-adaptors", "no-bias-adaptors"])
def test_gradcheck(kernel, kind, rank, bias):
    _, layer, shape = one_layer(kind, rank, bias)
    op, inputs = op_inputs(kernel, layer, shape)
    # the factored layers are large: gradcheck's fast mode (random projections) for them
    fast = "factored" in kind
    assert torch.autograd.gradcheck(op, inputs, eps=1e-6, atol=1e-6, fast_mode=fast)


@pytest.mark.parametrize(
    "kind", ["linear", "balanced_2d", "in_layer", "out_layer", "linear-factored"]
)
def test_second_derivatives(kernel, kind):
    _, layer, shape = one_layer(kind, 2, True)
    op, inputs = op_inputs(kernel, layer, shape)
    fast = "factored" in kind
    assert torch.autograd.gradgradcheck(op, inputs, eps=1e-6, atol=1e-5, fast_mode=fast)


def rows_of(layer, shape):
    return 0 if isinstance(layer.base, nn.Conv2d) else math.prod(shape[:-1])


MERGED, FACTORED, FACTORED_LOOPS = 0, 1, 2  # the extension's layer_pass codes


@pytest.mark.parametrize(
    ("kind", "rank", "expected"),
    [("linear", 1, MERGED), ("linear-leading-axes", 1, MERGED), ("balanced_2d", 1, MERGED)]
    + [(k, 1, FACTORED_LOOPS) for k in LAYERS if "factored" in k]
    + [("linear-factored-aten", 10, FACTORED), ("linear-blas", 10, MERGED)],
)
def test_the_layers_take_the_intended_pass(kernel, kind, rank, expected, monkeypatch):
    """Linear layers run factored when that saves multiply-adds (module docstring of kernels):
    in loops when small, with ATen's products when large; convolutions merge."""
    if kind in LARGE:
        monkeypatch.setitem(LAYERS, kind, LARGE[kind][:3])
    _, layer, shape = one_layer(kind, rank, True)
    spec = kernel.Spec(layer._kernel_spec_values())
    assert kernel.layer_pass(spec, rows_of(layer, shape)) == expected


@pytest.mark.parametrize("size", [(64, 200), (200, 10), (160, 160), (784, 200), (1024, 1024)])
@pytest.mark.parametrize("rank", [1, 5])
def test_torch_path_and_compiled_layer_choose_alike(kernel, size, rank):
    """The torch path's rule (MixtureLinear._prefers_factored) is the extension's rule for its
    ATen-factored pass, row for row, and it picks the merge for the digits MLP at batch 32 (where
    the factored pass with torch operations is slower); the extension runs that layer factored
    in loops, which costs no more than the multiply-adds it saves."""
    from riemfl.nn.floral.linear import FACTORED_SAVING

    assert kernel.FACTORED_SAVING == FACTORED_SAVING
    n, m = size
    model = floralize(nn.Sequential(nn.Linear(n, m)), 4, rank=min(rank, m, n))
    layer = model.adaptors()[0][1]
    spec = kernel.Spec(layer._kernel_spec_values())
    for rows in (1, 2, 7, 32, 100, 256, 1000, 5000):
        x = torch.empty(rows, n, device="meta")
        assert layer._prefers_factored(x) is kernel.runs_factored(spec, rows), rows
    if size == (64, 200) and rank == 1:  # rho = 1%
        assert not kernel.runs_factored(spec, 32)
        assert kernel.layer_pass(spec, 32) == FACTORED_LOOPS
    if size == (1024, 1024):
        assert kernel.runs_factored(spec, 256)


# layers whose merge is large enough for ATen's products (C r m n >= BLAS_WORK): compared with
# the reference only (gradcheck would take too long)
LARGE = {
    "linear-blas": (lambda: nn.Linear(512, 64), (80, 512), {}, 10),
    "linear-factored-aten": (lambda: nn.Linear(1024, 512), (2, 4, 1024), {}, 10),
    "conv-blas": (lambda: nn.Conv2d(16, 32, 3, padding=1), (2, 16, 6, 6), {}, 10),
}


@pytest.mark.parametrize("kind", list(LAYERS) + list(LARGE))
@pytest.mark.parametrize("rank", [1, 2])
def test_layer_equals_the_differentiable_reference(kernel, kind, rank, monkeypatch):
    """The forward and backward passes (loops, ATen products, factored) against the same layer
    written in differentiable ATen operations."""
    if kind in LARGE:
        make, shape, options, rank = LARGE[kind]
        monkeypatch.setitem(LAYERS, kind, (make, shape, options))
    _, layer, shape = one_layer(kind, rank, True)
    if kind in LARGE:
        spec = kernel.Spec(layer._kernel_spec_values())
        values = layer._kernel_spec_values()
        if kind == "linear-factored-aten":
            assert kernel.layer_pass(spec, rows_of(layer, shape)) == FACTORED
        else:
            assert values[1] * values[2] * values[3] * values[4] >= kernel.BLAS_WORK
            assert kernel.layer_pass(spec, rows_of(layer, shape)) == MERGED
    op, inputs = op_inputs(kernel, layer, shape)
    spec = kernel.Spec(layer._kernel_spec_values())
    out = op(*inputs)
    ref = kernel.floral_op_reference(*inputs[:6], inputs[6], spec) if len(inputs) == 7 else None
    if ref is None:  # a layer without base bias: rebuild the argument list with None there
        ref = kernel.floral_op_reference(inputs[0], inputs[1], None, *inputs[2:5], inputs[5], spec)
    assert_same_passes(out, ref, inputs)


def step(model, x, y, backend):
    model.backend = backend
    params = [p for p in model.parameters() if p.requires_grad]
    out = model(x)
    loss = F.cross_entropy(out, y)
    return out, loss.detach(), torch.autograd.grad(loss, params)


@pytest.mark.parametrize("make", [lambda: MLP([64, 20, 10]), SmallCNN], ids=["mlp", "cnn"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"lora_scale": 2.0, "min_prob": 0.2},
        {"routing": "fixed"},
        {"init": "paper", "bias": False},
        {"conv_variant": "in_layer", "rank": 2},
        {"conv_variant": "out_layer"},
    ],
    ids=["default", "scale-clamp", "fixed", "paper-nobias", "in-layer-r2", "out-layer"],
)
def test_training_step_equals_the_torch_path(kernel, make, dtype, options):
    """Outputs and the gradients of every parameter (router included) of whole models."""
    torch.manual_seed(0)
    rho = None if "rank" in options else 0.1
    model = randomise(floralize(make(), 4, rho, seed=1, **options).to(dtype), seed=2)
    with torch.no_grad():  # two clusters under the clamp
        model.router.logits.copy_(torch.tensor([2.0, -1.5, 0.3, -2.0]))
    x = torch.rand(6, 1, 8, 8, dtype=dtype)
    y = torch.randint(0, 10, (6,))
    out, loss, grads = step(model, x, y, "auto")
    assert uses_kernel(out)
    ref_out, ref_loss, ref_grads = step(model, x, y, "torch")
    assert not uses_kernel(ref_out)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 0.0}
    torch.testing.assert_close(loss, ref_loss, **tol)
    for g, ref in zip(grads, ref_grads, strict=True):
        scale = float(ref.abs().max())
        if dtype == torch.float32:
            torch.testing.assert_close(g, ref, rtol=1e-4, atol=1e-5 * scale)
        else:
            torch.testing.assert_close(g, ref, rtol=1e-10, atol=1e-12 * max(scale, 1.0))


def test_frozen_parts_and_an_input_that_needs_its_gradient(kernel):
    """Every subset of requires_grad gives the torch path's gradients, None where frozen."""
    model = randomise(floralize(SmallCNN(), 3, 0.1, seed=0).double())
    x = torch.rand(3, 1, 8, 8, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 10, (3,))
    for freeze in ("base", "lora_out", "lora_in", "lora_bias", "router"):
        for name, p in model.named_parameters():
            p.requires_grad_(freeze not in name)
        wrt = [x] + [p for p in model.parameters() if p.requires_grad]
        results = []
        for backend in ("auto", "torch"):
            model.backend = backend
            loss = F.cross_entropy(model(x), y)
            results.append(torch.autograd.grad(loss, wrt))
        for a, b in zip(*results, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_non_contiguous_inputs_and_parameters(kernel):
    model = randomise(floralize(MLP([6, 5, 3]), 2, rank=2, seed=0).double())
    x = torch.randn(6, 4, dtype=torch.float64).T  # (4, 6), not contiguous
    layer = model.adaptors()[0][1]
    layer.lora_in.data = torch.randn(tuple(reversed(layer.lora_in.shape))).double().permute(2, 1, 0)
    assert not layer.lora_in.is_contiguous() and not x.is_contiguous()
    y = torch.randint(0, 3, (4,))
    out, loss, grads = step(model, x, y, "auto")
    assert uses_kernel(out)
    _, ref_loss, ref_grads = step(model, x, y, "torch")
    torch.testing.assert_close(loss, ref_loss)
    for g, ref in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, ref)


def test_second_derivatives_through_a_model(kernel):
    """A gradient penalty (create_graph) differentiates to the torch path's numbers."""
    model = randomise(floralize(SmallCNN(), 2, 0.1, seed=0).double())
    x = torch.rand(2, 1, 8, 8, dtype=torch.float64, requires_grad=True)
    params = [p for p in model.parameters() if p.requires_grad]
    results = []
    for backend in ("auto", "torch"):
        model.backend = backend
        (gx,) = torch.autograd.grad(model(x).square().sum(), x, create_graph=True)
        results.append(torch.autograd.grad(gx.square().sum(), params))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_an_unbatched_image_takes_the_torch_path(kernel):
    """(torch.func transforms too: tests/nn/test_floral_fused.py, in both modes.)"""
    model = randomise(floralize(SmallCNN(), 2, 0.1, seed=0)).eval()
    image = torch.rand(1, 8, 8)
    conv = model.adaptors()[0][1]
    model.context.set_compiled(kernel, pi=model.router())
    try:
        out = conv(image)  # (C, H, W): the compiled layer takes batches only
        assert not uses_kernel(out)
        torch.testing.assert_close(out, conv(image[None])[0])
    finally:
        model.context.set(None)


def test_a_subclass_that_changes_the_layer_takes_the_torch_path(kernel):
    from riemfl.nn.floral.adaptor import MixtureAdaptor

    class Doubled(MixtureLinear):  # a user's variant, with the plain merge: twice the adaptor
        _fusion_views = MixtureAdaptor._fusion_views
        _fused_weight = MixtureAdaptor._fused_weight
        _fused_weight_backward = MixtureAdaptor._fused_weight_backward

        def _delta(self, w):
            return 2.0 * super()._delta(w)

    class Renamed(MixtureLinear):  # same meaning, new name: still compiled
        pass

    model = randomise(floralize(MLP([6, 5, 3]), 2, rank=1, seed=0))
    x = torch.randn(4, 6)
    plain = model(x)
    assert uses_kernel(plain)
    first = model.adaptors()[0][1]
    first.__class__ = Renamed
    out = model(x)
    assert uses_kernel(out)
    torch.testing.assert_close(out, plain)
    first.__class__ = Doubled
    doubled = model.eval()(x)
    pi = model.router.probabilities()
    bias_part = pi @ first.lora_bias
    adaptor_part = first.factored_output(x, pi) - bias_part
    hidden = torch.relu(first.base(x) + 2.0 * adaptor_part + bias_part)
    second = model.adaptors()[1][1]
    expected = second.base(hidden) + second.factored_output(hidden, pi)
    torch.testing.assert_close(doubled, expected)


def test_copies_and_pickles_after_a_compiled_pass(kernel):
    model = randomise(floralize(SmallCNN(), 2, 0.1, seed=0))
    x = torch.rand(3, 1, 8, 8)
    out = model(x)
    convs = [m for _, m in model.adaptors() if isinstance(m.base, nn.Conv2d)]
    assert convs and all("_kernel_spec" in m.__dict__ for m in convs)
    assert "_chain_plan" in model.model.classifier.__dict__  # the linear layers: one chain
    for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert all("_kernel_spec" not in m.__dict__ for _, m in twin.adaptors())
        assert "_chain_plan" not in twin.model.classifier.__dict__
        assert twin.backend == "auto" and twin.context._kernel is None
        again = twin(x)
        assert uses_kernel(again)
        torch.testing.assert_close(again, out)


def test_backend_attribute_is_checked():
    model = floralize(MLP([6, 5, 3]), 2, rank=1)
    with pytest.raises(ParameterError, match="backend"):
        model.backend = "cuda"


def test_the_extension_checks_its_inputs(kernel):
    _, layer, shape = one_layer("linear", 1, True)
    spec = kernel.Spec(layer._kernel_spec_values())
    args = [layer.base.weight, layer.base.bias, layer.lora_out, layer.lora_in, layer.lora_bias]
    x = torch.randn(shape, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="dtype"):
        kernel.floral_op(x, *args, torch.rand(3), spec)  # float32 mixture weights
    with pytest.raises(RuntimeError, match="mixture weights"):
        kernel.floral_op(x, *args, torch.rand(2, dtype=torch.float64), spec)
    with pytest.raises(RuntimeError, match="spec"):
        kernel.Spec([0, 1, 2])


# ------------------------------------------------------------------ building and choosing


@pytest.mark.parametrize(
    ("value", "mode"),
    [("auto", "auto"), ("", "auto"), ("OFF", "off"), ("0", "off"), ("1", "require")],
)
def test_mode_from_the_environment(monkeypatch, value, mode):
    monkeypatch.setenv(kernels.KERNEL_ENV, value)
    assert kernels.mode() == mode


def test_bad_mode_is_refused(monkeypatch):
    monkeypatch.setenv(kernels.KERNEL_ENV, "sometimes")
    with pytest.raises(ParameterError, match="RIEMFL_FLORAL_KERNEL"):
        kernels.load()


def test_mode_off_runs_the_torch_path(monkeypatch, kernel):
    model = randomise(floralize(MLP([6, 5, 3]), 2, rank=1, seed=0))
    x = torch.randn(4, 6)
    assert uses_kernel(model(x))
    monkeypatch.setenv(kernels.KERNEL_ENV, "off")
    assert kernels.load() is None and kernels.backend() == "torch"
    assert not uses_kernel(model(x))


def test_a_failed_build_falls_back_with_one_warning_or_raises(monkeypatch):
    monkeypatch.setattr(kernels, "_loaded", None)
    monkeypatch.setattr(kernels, "_failed", None)
    monkeypatch.setattr(kernels, "_build", lambda: (None, "OSError: no C++ compiler"))
    model = randomise(floralize(MLP([6, 5, 3]), 2, rank=1, seed=0))
    x = torch.randn(4, 6)
    with pytest.warns(RuntimeWarning, match="no C\\+\\+ compiler"):
        out = model(x)
    assert not uses_kernel(out)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once only
        model(x)
    monkeypatch.setenv(kernels.KERNEL_ENV, "require")
    with pytest.raises(MissingDependencyError, match="no C\\+\\+ compiler"):
        model(x)


def test_build_directory_and_stale_locks(monkeypatch, tmp_path):
    import os
    import time

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    directory = kernels.build_directory()
    assert directory.parent == tmp_path and torch.__version__ in directory.name
    directory.mkdir()
    lock = directory / "lock"
    lock.touch()
    kernels._remove_stale_lock(directory)  # a build in progress: kept
    assert lock.exists()
    old = time.time() - kernels.STALE_LOCK_SECONDS - 60
    os.utime(lock, (old, old))
    kernels._remove_stale_lock(directory)  # left over from a killed build: removed
    assert not lock.exists()
    kernels._remove_stale_lock(directory)  # no lock: nothing to do


def test_cpu_autocast_takes_the_torch_path(kernel):
    model = randomise(floralize(SmallCNN(), 2, 0.1, seed=0))
    x = torch.rand(3, 1, 8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    assert out.dtype == torch.bfloat16 and not uses_kernel(out)
    out.float().sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    # under autocast the model computes what its merged (plain) model computes, to bfloat16's
    # precision (the large linear layers run factored on 3 rows: other roundings)
    merged = model.eval().merge()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = model(x).detach().float(), merged(x).detach().float()
    torch.testing.assert_close(got, want, rtol=0, atol=2e-2 * float(want.abs().max()))
    with torch.inference_mode():  # and inference mode runs the compiled layer
        torch.testing.assert_close(model(x), merged(x), rtol=1e-4, atol=1e-4)


def test_a_build_failure_names_the_compiler_error():
    exc = RuntimeError(
        "Error building extension 'riemfl_floral_ops': [1/2] c++ -MMD ...\n"
        "floral_ops.cpp:372:31: error: call of overloaded 'linear' is ambiguous\n"
        "ninja: build stopped: subcommand failed."
    )
    got = kernels._failure_summary(exc)
    assert got.startswith("RuntimeError: Error building extension 'riemfl_floral_ops'")
    assert got.endswith("floral_ops.cpp:372:31: error: call of overloaded 'linear' is ambiguous")
    assert kernels._failure_summary(OSError("no compiler")) == "OSError: no compiler"

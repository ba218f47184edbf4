"""Runs of adapted linear layers and activations in one compiled node (riemfl/nn/floral/chain.py).

The compiled chain (``floral_chain`` in csrc/floral_ops.cpp) against its differentiable
reference and against the modules run one by one (the torch path); which runs are fused.
Skipped when ``RIEMFL_FLORAL_KERNEL=off``.
"""

from __future__ import annotations

import copy
import pickle

import pytest

torch = pytest.importorskip("torch")

from floral_helpers import assert_same_passes, graph_names, randomise  # noqa: E402
from torch import nn  # noqa: E402

from riemfl.nn import MLP  # noqa: E402
from riemfl.nn.floral import floralize, kernels  # noqa: E402
from riemfl.nn.floral.chain import ACTIVATION_CODES, FloralSequential, _Run  # noqa: E402
from riemfl.nn.floral.fused import _layer_tensors  # noqa: E402

F = torch.nn.functional

if kernels.mode() == "off":  # pragma: no cover - a run that asked for the torch path only
    pytest.skip("RIEMFL_FLORAL_KERNEL=off", allow_module_level=True)


def count(t, word):
    return sum(word in n for n in graph_names(t))


def chain_inputs(kernel, model, acts):
    """``floral_chain``'s arguments for the adapted layers of ``model`` (one run)."""
    layers = [m for _, m in model.adaptors()]
    params, has_bias, has_lora_bias = [], [], []
    for layer in layers:
        weight, bias, lora_out, lora_in, lora_bias = _layer_tensors(layer)
        params += [t for t in (weight, bias, lora_out, lora_in, lora_bias) if t is not None]
        has_bias.append(bias is not None)
        has_lora_bias.append(lora_bias is not None)
    specs = [layer._kernel_spec_values() for layer in layers]
    return params, kernel.Chain(specs, acts, has_bias, has_lora_bias)


# (widths, base biases, input rows): the 160-wide layers on 2 rows run factored in loops, the
# small ones with the merged weight (test_floral_kernel.py checks which layer takes which pass)
CHAINS = {
    "merged": ([5, 4, 3], True, (3,)),
    "factored": ([160, 150, 4], True, (2,)),
    "no-base-bias": ([5, 160, 150], False, (2,)),
    "leading-axes": ([5, 4, 3], True, (2, 3)),
}


@pytest.mark.parametrize("kind", list(CHAINS))
@pytest.mark.parametrize("acts", [[1, 0], [2, 3], [0, 1]], ids=["relu", "tanh-sigmoid", "last"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias-adaptors", "no-bias-adaptors"])
def test_chain_gradients_and_reference(kernel, kind, acts, bias):
    """gradcheck (fast mode for the wide chains) and the differentiable reference."""
    widths, base_bias, rows = CHAINS[kind]
    layers = []
    for n, m in zip(widths[:-1], widths[1:], strict=True):
        layers.append(nn.Linear(n, m, bias=base_bias))
    model = floralize(nn.Sequential(*layers), 3, rank=2, bias=bias, seed=0)
    model = randomise(model.double(), seed=1)
    params, chain = chain_inputs(kernel, model, acts)
    x = torch.randn(*rows, widths[0], dtype=torch.float64, requires_grad=True)
    w = torch.rand(3, dtype=torch.float64, requires_grad=True)
    inputs = [x, w, *params]
    n_rows = x.numel() // widths[0]
    passes = [
        kernel.layer_pass(kernel.Spec(m._kernel_spec_values()), n_rows) for _, m in model.adaptors()
    ]
    assert passes == {"merged": [0, 0], "leading-axes": [0, 0]}.get(kind, [2, 2])

    def op(*args):
        return kernel.floral_chain(args[0], args[1], list(args[2:]), chain)

    out = op(*inputs)
    ref = kernel.floral_chain_reference(x, w, params, chain)
    assert_same_passes(out, ref, inputs)
    wide = max(widths) > 10
    assert torch.autograd.gradcheck(op, inputs, eps=1e-6, atol=1e-6, fast_mode=wide)


@pytest.mark.parametrize("kind", ["merged", "factored"])
def test_chain_second_derivatives(kernel, kind):
    widths, _, rows = CHAINS[kind]
    layers = [nn.Linear(n, m) for n, m in zip(widths[:-1], widths[1:], strict=True)]
    model = randomise(floralize(nn.Sequential(*layers), 3, rank=1, seed=0).double(), seed=1)
    params, chain = chain_inputs(kernel, model, [2, 1])
    x = torch.randn(*rows, widths[0], dtype=torch.float64, requires_grad=True)
    w = torch.rand(3, dtype=torch.float64, requires_grad=True)

    def op(*args):
        return kernel.floral_chain(args[0], args[1], list(args[2:]), chain)

    assert torch.autograd.gradgradcheck(
        op, [x, w, *params], eps=1e-6, atol=1e-5, fast_mode=kind == "factored"
    )


def test_only_the_requested_gradients(kernel):
    """Frozen parameters and an input without gradient: the others as with everything asked."""
    model = randomise(floralize(MLP([6, 5, 4, 3]), 2, rank=2, seed=0).double(), seed=1)
    params, chain = chain_inputs(kernel, model, [1, 1, 0])
    x = torch.randn(4, 6, dtype=torch.float64)
    w = torch.rand(2, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(4, 3, dtype=torch.float64)
    full = torch.autograd.grad(kernel.floral_chain(x, w, params, chain), [w, *params], upstream)
    for frozen in range(len(params)):
        wrt = [w] + [p for i, p in enumerate(params) if i != frozen]
        for i, p in enumerate(params):
            p.requires_grad_(i != frozen)
        got = torch.autograd.grad(kernel.floral_chain(x, w, params, chain), wrt, upstream)
        want = [full[0]] + [g for i, g in enumerate(full[1:]) if i != frozen]
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
    for p in params:
        p.requires_grad_(True)


def test_chain_checks_its_description(kernel):
    spec_a = [0, 2, 1, 4, 5] + [0] * 6 + [1, 1, 0, 0, 1, 1]  # 5 -> 4
    spec_b = [0, 2, 1, 3, 4] + [0] * 6 + [1, 1, 0, 0, 1, 1]  # 4 -> 3
    spec_bad = [0, 2, 1, 3, 7] + [0] * 6 + [1, 1, 0, 0, 1, 1]  # 7 -> 3
    assert kernel.Chain([spec_a, spec_b], [1, 0], [True, False], [True, True]).n_params == 9
    with pytest.raises(RuntimeError, match="takes 7 features"):
        kernel.Chain([spec_a, spec_bad], [1, 0], [True, True], [True, True])
    with pytest.raises(RuntimeError, match="activation code"):
        kernel.Chain([spec_a], [9], [True], [True])
    with pytest.raises(RuntimeError, match="at least one layer"):
        kernel.Chain([], [], [], [])
    with pytest.raises(RuntimeError, match="one activation"):
        kernel.Chain([spec_a], [1, 0], [True], [True])
    conv_spec = [1] + spec_a[1:]
    with pytest.raises(RuntimeError, match="linear layers only"):
        kernel.Chain([conv_spec], [0], [True], [True])
    chain = kernel.Chain([spec_a], [0], [True], [True])
    with pytest.raises(RuntimeError, match="5 parameter tensors expected"):
        kernel.floral_chain(torch.randn(2, 5), torch.rand(2), [torch.randn(4, 5)], chain)


# ------------------------------------------------------------------ models


def plan_of(sequential):
    return sequential.__dict__["_chain_plan"][1]


def step(model, x, y, backend):
    model.backend = backend
    params = [p for p in model.parameters() if p.requires_grad]
    out = model(x)
    loss = F.cross_entropy(out, y)
    return out, torch.autograd.grad(loss, params)


def test_runs_split_where_a_module_cannot_join(kernel):
    """Flatten, Dropout, GELU and a layer of another model end a run; the numbers are the
    modules' own."""
    base = nn.Sequential(
        nn.Flatten(),
        nn.Linear(12, 9),
        nn.ReLU(),
        nn.Linear(9, 8),
        nn.Tanh(),
        nn.Dropout(0.0),
        nn.Linear(8, 7),
        nn.Sigmoid(),
        nn.Linear(7, 6),
        nn.GELU(),
        nn.Linear(6, 5),
    )
    model = randomise(floralize(base, 3, rank=1, seed=0).double(), seed=1)
    assert type(model.model) is FloralSequential
    x = torch.randn(4, 3, 4, dtype=torch.float64)
    y = torch.randint(0, 5, (4,))
    out, grads = step(model, x, y, "auto")
    kinds = [
        "run" if isinstance(item, _Run) else type(item).__name__ for item in plan_of(model.model)
    ]
    assert kinds == ["Flatten", "run", "Dropout", "run", "GELU", "run"]
    assert [len(item.layers) for item in plan_of(model.model) if isinstance(item, _Run)] == [
        2,
        2,
        1,
    ]
    assert count(out, "FloralChain") == 3 and count(out, "FloralOp") == 0
    ref_out, ref_grads = step(model, x, y, "torch")
    assert count(ref_out, "FloralChain") == 0
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_every_activation_code_is_a_module_type():
    assert sorted(ACTIVATION_CODES.values()) == [1, 2, 3]
    assert all(issubclass(t, nn.Module) for t in ACTIVATION_CODES)


def test_a_hooked_module_runs_by_itself(kernel):
    """Hooks of a module in a run (or global module hooks) are honoured: the run falls back to
    the modules one by one."""
    model = randomise(floralize(MLP([6, 5, 4]), 2, rank=1, seed=0))
    x = torch.randn(3, 6)
    plain = model(x)
    assert count(plain, "FloralChain") == 1
    seen = []
    relu = model.model.net[1]
    handle = relu.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    hooked = model(x)
    assert seen == [torch.Size([3, 5])]
    assert count(hooked, "FloralChain") == 0 and count(hooked, "FloralOp") == 2
    torch.testing.assert_close(hooked, plain)
    handle.remove()
    assert count(model(x), "FloralChain") == 1
    handle = nn.modules.module.register_module_forward_hook(lambda m, i, o: None)
    try:
        assert count(model(x), "FloralChain") == 0
    finally:
        handle.remove()


def test_a_replaced_module_is_seen(kernel):
    model = randomise(floralize(MLP([6, 5, 4]), 2, rank=1, seed=0))
    x = torch.randn(3, 6)
    model(x)
    model.model.net[1] = nn.Tanh()
    out = model(x)
    first, second = (m for _, m in model.adaptors())
    pi = model.router.probabilities()
    hidden = torch.tanh(first.base(x) + first.factored_output(x, pi))
    expected = second.base(hidden) + second.factored_output(hidden, pi)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    assert count(out, "FloralChain") == 1


def test_merge_gives_plain_sequentials_and_names_stay(kernel):
    base = MLP([6, 5, 4])
    model = randomise(floralize(base, 2, rank=1, seed=0))
    names = [n for n, _ in model.named_parameters()]
    assert type(model.model.net) is FloralSequential
    x = torch.randn(3, 6)
    out = model.eval()(x)
    merged = model.merge()
    assert type(merged.net) is nn.Sequential
    assert "_chain_plan" not in merged.net.__dict__
    torch.testing.assert_close(merged(x), out, rtol=1e-5, atol=1e-6)
    assert [n for n, _ in model.named_parameters()] == names
    assert all(".net.0." in n or ".net.2." in n or n == "router.logits" for n in names)


def test_copies_and_pickles_keep_fusing(kernel):
    model = randomise(floralize(MLP([6, 5, 4]), 2, rank=1, seed=0))
    x = torch.randn(3, 6)
    out = model(x)
    for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert type(twin.model.net) is FloralSequential
        assert "_chain_plan" not in twin.model.net.__dict__
        again = twin(x)
        assert count(again, "FloralChain") == 1
        torch.testing.assert_close(again, out)


def test_a_users_sequential_subclass_is_left_alone(kernel):
    class Mine(nn.Sequential):
        pass

    model = floralize(nn.Sequential(Mine(nn.Linear(4, 3), nn.ReLU())), 2, rank=1)
    assert type(model.model) is nn.Sequential  # no adapted layer directly inside
    assert type(model.model[0]) is Mine
    out = model(torch.randn(2, 4))
    assert count(out, "FloralChain") == 0 and count(out, "FloralOp") == 1


# ------------------------------------------------------------------ the router folded in


@pytest.mark.parametrize(("scale", "min_prob"), [(1.0, 0.0), (2.5, 0.0), (1.0, 0.2), (0.5, 0.3)])
def test_chain_takes_the_router_logits(kernel, scale, min_prob):
    """logits=True: w = scale max(softmax(theta), min_prob) made in the node, and theta's
    gradient (zero through the entries the clamp holds) matches the reference and gradcheck."""
    model = randomise(floralize(MLP([5, 4, 3]), 4, rank=2, seed=0).double(), seed=1)
    params, chain = chain_inputs(kernel, model, [2, 0])
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    theta = torch.tensor([1.5, -1.0, 0.2, -2.5], dtype=torch.float64, requires_grad=True)
    if min_prob > 0:  # some entries under the clamp, none at it
        pi = torch.softmax(theta.detach(), 0)
        assert bool((pi < min_prob).any()) and bool((pi > min_prob).any())

    def op(*args):
        return kernel.floral_chain(args[0], args[1], list(args[2:]), chain, True, scale, min_prob)

    inputs = [x, theta, *params]
    out = op(*inputs)
    w = scale * torch.softmax(theta, 0).clamp(min=min_prob)
    by_weights = kernel.floral_chain(x, w, params, chain)
    ref = kernel.floral_chain_reference(x, theta, params, chain, True, scale, min_prob)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    assert_same_passes(out, by_weights, inputs)
    assert torch.autograd.gradcheck(op, inputs, eps=1e-6, atol=1e-6)
    assert torch.autograd.gradgradcheck(op, inputs, eps=1e-6, atol=1e-5)


def test_chain_checks_the_mixture_shape(kernel):
    model = floralize(MLP([5, 4, 3]), 2, rank=1)
    params, chain = chain_inputs(kernel, model, [1, 0])
    with pytest.raises(RuntimeError, match="shape \\(C,\\)"):
        kernel.floral_chain(torch.randn(2, 5), torch.rand(1, 2), params, chain, True)
    with pytest.raises(RuntimeError, match="mixture weights of shape"):
        kernel.floral_chain(torch.randn(2, 5), torch.rand(3), params, chain, True)


def test_a_chain_only_model_gives_the_chains_the_logits(kernel):
    """No softmax node: the chain takes the logits; the router's gradient is the torch path's."""
    model = randomise(floralize(MLP([6, 5, 4]), 3, rank=1, min_prob=0.1, lora_scale=2.0))
    x, y = torch.randn(4, 6), torch.randint(0, 4, (4,))
    out, grads = step(model, x, y, "auto")
    assert count(out, "Softmax") == 0 and count(out, "FloralChain") == 1
    assert not model.context.layers_need_weights
    ref_out, ref_grads = step(model, x, y, "torch")
    assert count(ref_out, "Softmax") == 1
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_a_model_with_layers_outside_chains_shares_one_softmax(kernel):
    """The CNN's convolutions need w: from the second pass on the chains get w, not the
    logits (one softmax node for all the layers); every pass gives the torch path's numbers."""
    from riemfl.nn import SmallCNN

    model = randomise(floralize(SmallCNN(), 3, 0.1, seed=0).double(), seed=1)
    x, y = torch.rand(4, 1, 8, 8, dtype=torch.float64), torch.randint(0, 10, (4,))
    _, ref_grads = step(model, x, y, "torch")
    for first in (True, False):
        out, grads = step(model, x, y, "auto")
        assert model.context.layers_need_weights
        assert count(out, "Softmax") == 1
        assert count(out, "FloralChain") == 1 and count(out, "FloralOp") == 2
        for a, b in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
        if first:
            assert chain_mixture_source(out) == "logits"
        else:
            assert chain_mixture_source(out) == "weights"


def chain_mixture_source(out):
    """Whether the chain node's mixture input comes from the router's logits directly (an
    AccumulateGrad) or from the softmax."""
    stack, seen = [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if "FloralChain" in node.name():
            source = node.next_functions[1][0]
            return "logits" if "AccumulateGrad" in source.name() else "weights"
        stack.extend(f for f, _ in node.next_functions)
    raise AssertionError("no chain in the graph")


def test_router_noise_is_drawn_once_per_pass(kernel):
    """With training noise on the logits, the compiled pass and the torch path draw the same
    noise from the router's generator (once per pass) and give the same numbers."""
    model = randomise(floralize(MLP([6, 5, 4]), 3, rank=1, router_noise=0.5))
    x = torch.randn(4, 6)
    results = []
    for backend in ("auto", "torch"):
        model.backend = backend
        model.router.generator = torch.Generator().manual_seed(7)
        first, second = model(x), model(x)
        assert not torch.allclose(first, second)  # new noise each pass
        results.append((first, second, model.router.generator.get_state()))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=1e-5, atol=1e-6)
    assert torch.equal(results[0][2], results[1][2])


def test_backend_layers_runs_one_node_per_layer(kernel):
    model = randomise(floralize(MLP([6, 5, 4]), 3, rank=1, seed=0).double(), seed=1)
    x, y = torch.randn(4, 6, dtype=torch.float64), torch.randint(0, 4, (4,))
    chained, chained_grads = step(model, x, y, "auto")
    per_layer, per_layer_grads = step(model, x, y, "layers")
    assert count(chained, "FloralChain") == 1 and count(chained, "FloralOp") == 0
    assert count(per_layer, "FloralChain") == 0 and count(per_layer, "FloralOp") == 2
    torch.testing.assert_close(per_layer, chained, rtol=1e-12, atol=1e-12)
    for a, b in zip(per_layer_grads, chained_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)

"""SmallCNN, MLP and the flat-parameter round trip (order = module.parameters(), no buffers)."""

import numpy as np
import pytest

from riemfl.testing import importorskip

torch = importorskip("torch")

from riemfl.errors import ParameterError, ShapeError  # noqa: E402
from riemfl.nn import (  # noqa: E402
    MLP,
    SmallCNN,
    flatten_parameters,
    load_flat_parameters,
    n_parameters,
)


def test_small_cnn_shapes():
    torch.manual_seed(0)
    net = SmallCNN()
    x = torch.rand(5, 1, 8, 8)
    out = net(x)
    assert out.shape == (5, 10)
    assert torch.allclose(net(x.reshape(5, 64)), out)  # flat rows are reshaped row-major
    assert n_parameters(net) == 13706
    assert SmallCNN(n_classes=62, image_size=28)(torch.rand(2, 1, 28, 28)).shape == (2, 62)
    with pytest.raises(ShapeError):
        net(torch.rand(2, 1, 7, 7))
    with pytest.raises(ParameterError):
        SmallCNN(image_size=10)
    with pytest.raises(ParameterError):
        SmallCNN(n_classes=0)


def test_mlp():
    net = MLP([64, 16, 10])
    assert net(torch.rand(3, 1, 8, 8)).shape == (3, 10)
    assert n_parameters(net) == 64 * 16 + 16 + 16 * 10 + 10
    assert sum(isinstance(m, torch.nn.ReLU) for m in net.modules()) == 1
    with pytest.raises(ShapeError):
        net(torch.rand(3, 63))
    with pytest.raises(ParameterError):
        MLP([64])
    with pytest.raises(ParameterError):
        MLP([64, 0])


def test_flat_round_trip_and_order():
    torch.manual_seed(1)
    net = MLP([3, 4, 2])
    flat = flatten_parameters(net)
    expected = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    assert torch.equal(flat, expected)
    # the first entries are the first layer's weight, row-major
    assert torch.equal(flat[:12], net.net[0].weight.detach().reshape(-1))
    new = torch.arange(flat.numel(), dtype=torch.float64)
    load_flat_parameters(net, new.numpy())
    assert torch.equal(flatten_parameters(net), new.float())
    assert net.net[0].bias.detach().tolist() == [12.0, 13.0, 14.0, 15.0]
    flat[0] = 99.0  # a copy: editing it leaves the module alone
    assert float(net.net[0].weight.detach()[0, 0]) == 0.0


def test_buffers_are_excluded():
    net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    assert flatten_parameters(net).numel() == 3 * 2 + 2 + 2 + 2  # running stats excluded
    before = [b.clone() for b in net.buffers()]
    load_flat_parameters(net, np.zeros(12))
    assert all(torch.equal(a, b) for a, b in zip(before, net.buffers(), strict=True))


def test_load_rejects_wrong_length():
    net = MLP([3, 2])
    with pytest.raises(ShapeError):
        load_flat_parameters(net, np.zeros(7))
    with pytest.raises(ShapeError):
        load_flat_parameters(net, np.zeros((2, 4)))
    with pytest.raises(ShapeError):
        load_flat_parameters(net, [0.0] * 8)

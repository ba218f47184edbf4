"""LeNet-5: the three input geometries, flat rows, and the errors."""

import pytest

from riemfl.testing import importorskip

torch = importorskip("torch")

from riemfl.errors import ParameterError, ShapeError  # noqa: E402
from riemfl.nn import n_parameters  # noqa: E402
from riemfl.nn.lenet import LeNet5, lenet_feature_side  # noqa: E402


@pytest.mark.parametrize(
    ("size", "padding", "side", "params"),
    [(32, (0, 0), 5, 61706), (28, (2, 0), 5, 61706), (8, (2, 2), 2, 21386)],
)
def test_lenet_geometries(size, padding, side, params):
    assert lenet_feature_side(size, padding) == side
    torch.manual_seed(0)
    net = LeNet5(10, 1, image_size=size, padding=padding)
    assert n_parameters(net) == params  # 61,706: the classic LeNet-5 with ReLU and max-pooling
    x = torch.rand(3, 1, size, size)
    out = net(x)
    assert out.shape == (3, 10)
    assert torch.allclose(net(x.reshape(3, -1)), out)  # flat rows are reshaped row-major


def test_lenet_classes_and_errors():
    assert LeNet5(62, image_size=28, padding=(2, 0))(torch.rand(2, 1, 28, 28)).shape == (2, 62)
    net = LeNet5(image_size=8, padding=(2, 2))
    with pytest.raises(ShapeError):
        net(torch.rand(2, 1, 7, 7))
    with pytest.raises(ParameterError):
        LeNet5(image_size=8)  # no padding: the second convolution has nothing left
    with pytest.raises(ParameterError):
        LeNet5(padding=(1,))

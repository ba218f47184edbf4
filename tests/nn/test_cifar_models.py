"""Cifar10CNN and VGG-8: parameter counts by hand, shapes, dtypes, initialisation, FLoRAL."""

import pytest

from riemfl.testing import importorskip

torch = importorskip("torch")

from riemfl.errors import ParameterError, ShapeError  # noqa: E402
from riemfl.nn import floralize, n_parameters  # noqa: E402
from riemfl.nn.cifar_models import VGG8, VGG8_CHANNELS, Cifar10CNN  # noqa: E402


def _conv(c_in, c_out, k):
    return c_in * c_out * k * k + c_out


def _linear(n_in, n_out):
    return n_in * n_out + n_out


def test_cifar10cnn_parameter_count_by_hand():
    # 32 -conv5-> 28 -pool2-> 14 -conv3-> 12 -pool3-> 4: 64 * 4 * 4 = 1024 features
    expected = _conv(3, 32, 5) + _conv(32, 64, 3) + _linear(1024, 64) + _linear(64, 10)
    assert expected == 87_178
    assert n_parameters(Cifar10CNN()) == expected
    assert n_parameters(Cifar10CNN(n_classes=4)) == expected - 6 * 65


def test_vgg8_parameter_count_by_hand():
    widths = (3, *VGG8_CHANNELS)
    convs = sum(_conv(a, b, 3) for a, b in zip(widths[:-1], widths[1:], strict=True))
    expected = convs + 2 * _linear(512, 512) + _linear(512, 100)
    assert expected == 1_264_388
    net = VGG8()
    assert n_parameters(net) == expected
    # eight weight layers: five convolutions and three linear layers
    weights = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d | torch.nn.Linear)]
    assert len(weights) == 8
    # batch normalisation adds a scale and a shift per channel
    assert n_parameters(VGG8(batch_norm=True)) == expected + 2 * sum(VGG8_CHANNELS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_forward_shapes_and_dtypes(dtype):
    torch.manual_seed(0)
    x = torch.rand(3, 3, 32, 32, dtype=dtype)
    out = Cifar10CNN(dtype=dtype)(x)
    assert out.shape == (3, 10) and out.dtype == dtype
    vgg = VGG8(dtype=dtype).eval()
    out = vgg(x)
    assert out.shape == (3, 100) and out.dtype == dtype
    assert torch.equal(vgg(x), out)  # dropout is off in eval mode
    assert torch.isfinite(out).all()


def test_vgg8_convolution_initialisation():
    torch.manual_seed(0)
    convs = [m for m in VGG8().modules() if isinstance(m, torch.nn.Conv2d)]
    last = convs[-1]  # 128 -> 512: std sqrt(2 / (9 * 512))
    assert abs(last.weight.std().item() / (2.0 / (9 * 512)) ** 0.5 - 1) < 0.02
    assert all(torch.count_nonzero(c.bias) == 0 for c in convs)


def test_bad_arguments():
    with pytest.raises(ShapeError):
        Cifar10CNN()(torch.rand(2, 1, 28, 28))
    with pytest.raises(ShapeError):
        VGG8()(torch.rand(2, 3072))
    with pytest.raises(ParameterError):
        Cifar10CNN(dtype=torch.float16)
    with pytest.raises(ParameterError):
        VGG8(dropout=1.0)
    with pytest.raises(ParameterError):
        VGG8(n_classes=0)


def test_floral_rows_build_on_both_models():
    torch.manual_seed(0)
    x = torch.rand(2, 3, 32, 32)
    for base, c, n_out in ((Cifar10CNN(), 4, 10), (VGG8(), 10, 100)):
        model = floralize(base, c, 0.01, seed=0)
        assert model(x).shape == (2, n_out)
        assert n_parameters(model) > n_parameters(base)

"""ShuffleNet V2 (Ma et al. 2018) as built from its architecture: the parameter count of x1.5,
shapes, the channel split and shuffle, gradients, and torchvision's network where installed."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from riemfl.errors import ParameterError, ShapeError  # noqa: E402 - after the torch skip
from riemfl.nn import ShuffleNetV2, n_parameters  # noqa: E402
from riemfl.nn.shufflenet import STAGE_CHANNELS, STAGE_REPEATS, channel_shuffle  # noqa: E402


def _expected_parameters(channels, repeats, in_channels, num_classes):
    """The parameter count written out from the architecture (module docstring): weights of
    the bias-free convolutions, 2 per channel of each BN, the linear layer with its bias."""

    def bn(c):
        return 2 * c

    total = in_channels * channels[0] * 9 + bn(channels[0])  # conv1
    inp = channels[0]
    for out, r in zip(channels[1:4], repeats, strict=True):
        half = out // 2
        # downsampling unit: branch1 (depthwise 3x3 on inp, 1x1 inp -> half), branch2
        total += inp * 9 + bn(inp) + inp * half + bn(half)
        total += inp * half + bn(half) + half * 9 + bn(half) + half * half + bn(half)
        # r - 1 basic units on half of the channels
        total += (r - 1) * (half * half + bn(half) + half * 9 + bn(half) + half * half + bn(half))
        inp = out
    total += inp * channels[4] + bn(channels[4])  # conv5
    return total + channels[4] * num_classes + num_classes  # fc


@pytest.fixture(scope="module")
def imagenet_model():
    torch.manual_seed(0)
    return ShuffleNetV2()  # x1.5, 3 channels, 1000 classes


def test_x1_5_has_the_known_parameter_count(imagenet_model):
    expected = _expected_parameters(STAGE_CHANNELS[1.5], STAGE_REPEATS, 3, 1000)
    assert expected == 3_503_624  # torchvision's shufflenet_v2_x1_5 (1000 classes)
    assert n_parameters(imagenet_model) == expected
    assert sum(p.numel() for p in imagenet_model.parameters()) == expected


@pytest.mark.parametrize(
    "width, count", [(0.5, 1_366_792), (1.0, 2_278_604), (1.5, 3_503_624), (2.0, 7_393_996)]
)
def test_the_hand_count_gives_torchvisions_counts_for_every_width(width, count):
    # torchvision's documented num_params of shufflenet_v2_x0_5 ... x2_0 (1000 classes)
    assert _expected_parameters(STAGE_CHANNELS[width], STAGE_REPEATS, 3, 1000) == count


def test_other_inputs_and_outputs_change_only_conv1_and_fc():
    small = ShuffleNetV2(num_classes=14, in_channels=1, width=0.5)
    expected = _expected_parameters(STAGE_CHANNELS[0.5], STAGE_REPEATS, 1, 14)
    assert n_parameters(small) == expected


def test_state_dict_keys_are_torchvisions(imagenet_model):
    keys = set(imagenet_model.state_dict())
    for key in (
        "conv1.0.weight",
        "conv1.1.running_mean",
        "stage2.0.branch1.0.weight",
        "stage2.0.branch1.2.weight",
        "stage2.1.branch2.3.weight",
        "stage3.7.branch2.6.running_var",
        "stage4.3.branch2.5.weight",
        "conv5.0.weight",
        "fc.weight",
        "fc.bias",
    ):
        assert key in keys, key
    assert not any(k.startswith("stage2.1.branch1") for k in keys)  # basic units: no branch1


@pytest.mark.parametrize("side, spatial", [(32, 1), (64, 2), (128, 4)])
def test_forward_shapes(side, spatial):
    torch.manual_seed(0)
    model = ShuffleNetV2(num_classes=14, in_channels=1, width=0.5).eval()
    x = torch.randn(2, 1, side, side)
    with torch.no_grad():
        assert model(x).shape == (2, 14)
        stage4 = model.stage4(model.stage3(model.stage2(model.maxpool(model.conv1(x)))))
    assert stage4.shape == (2, 192, spatial, spatial)


def test_channel_shuffle_by_hand():
    x = torch.arange(6.0).view(1, 6, 1, 1)
    assert channel_shuffle(x, 2).flatten().tolist() == [0, 3, 1, 4, 2, 5]
    assert channel_shuffle(x, 3).flatten().tolist() == [0, 2, 4, 1, 3, 5]
    assert channel_shuffle(x, 1).flatten().tolist() == list(range(6))
    # the spatial content of a channel moves with it
    y = torch.randn(2, 4, 3, 5)
    z = channel_shuffle(y, 2)
    for new, old in enumerate([0, 2, 1, 3]):
        assert torch.equal(z[:, new], y[:, old])
    with pytest.raises(ShapeError, match="divisible"):
        channel_shuffle(torch.zeros(1, 5, 2, 2), 2)


def test_basic_unit_passes_half_the_channels_through_unchanged():
    torch.manual_seed(0)
    unit = ShuffleNetV2(width=0.5).stage2[1].eval()  # a basic unit on 48 channels
    x = torch.randn(2, 48, 6, 6)
    with torch.no_grad():
        out = unit(x)
    unshuffled = channel_shuffle(out, 24)  # the inverse of the 2-group shuffle
    assert torch.equal(unshuffled[:, :24], x[:, :24])
    assert not torch.allclose(unshuffled[:, 24:], x[:, 24:])


def test_downsampling_unit_halves_the_side():
    unit = ShuffleNetV2(width=0.5).stage3[0].eval()
    with torch.no_grad():
        assert unit(torch.randn(1, 48, 8, 8)).shape == (1, 96, 4, 4)


def test_gradients_reach_every_parameter():
    torch.manual_seed(0)
    model = ShuffleNetV2(num_classes=8, in_channels=1).train()
    x = torch.randn(4, 1, 64, 64)
    target = torch.randint(0, 2, (4, 8)).float()
    loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), target)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_bad_arguments():
    with pytest.raises(ParameterError, match="width"):
        ShuffleNetV2(width=1.25)
    with pytest.raises(ParameterError, match="num_classes"):
        ShuffleNetV2(num_classes=0)
    with pytest.raises(ShapeError, match=r"\(n, 1, h, w\)"):
        ShuffleNetV2(in_channels=1, width=0.5)(torch.zeros(1, 3, 32, 32))


def test_matches_torchvision_with_the_same_weights(imagenet_model):
    models = pytest.importorskip("torchvision.models")
    reference = models.shufflenet_v2_x1_5(weights=None)
    assert sum(p.numel() for p in reference.parameters()) == n_parameters(imagenet_model)
    reference.load_state_dict(imagenet_model.state_dict(), strict=True)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = imagenet_model.eval()(x).numpy()
        theirs = reference.eval()(x).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)

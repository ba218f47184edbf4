r"""ShuffleNet V2 (Ma et al. 2018), the CXR8 model of Licudi et al. 2025 (Sec. 4.1, App. B.3).

Licudi et al. 2025 fine-tune the x1.5 network from torchvision's ImageNet weights on 128 x 128
chest X-rays replicated to 3 channels. :class:`ShuffleNetV2` is the same architecture written
from Ma et al. 2018 (Sec. 4, Table 5 and Fig. 3 (c), (d)), with torchvision's module names, so
that a state dict of torchvision's ``shufflenet_v2_x1_5`` loads into it unchanged (strict) when
``in_channels=3, num_classes=1000``. **Nothing is downloaded**: the weights are initialised
randomly (torch's defaults); a user who has the pretrained file loads it with
``model.load_state_dict(torch.load(path))``.

Layers, for an input of shape (n, in_channels, s, s)::

    conv1:  conv3x3(in_channels -> c0, stride 2, pad 1) - BN - ReLU        -> s/2
    maxpool 3x3, stride 2, pad 1                                            -> s/4
    stage2: one downsampling unit (c0 -> c1), then 3 basic units           -> s/8
    stage3: one downsampling unit (c1 -> c2), then 7 basic units           -> s/16
    stage4: one downsampling unit (c2 -> c3), then 3 basic units           -> s/32
    conv5:  conv1x1(c3 -> c4) - BN - ReLU; global average pool; linear(c4 -> num_classes)

with channels (c0, ..., c4) = (24, 176, 352, 704, 1024) for x1.5 (:data:`STAGE_CHANNELS` lists
the four widths of the paper), stage repeats (4, 8, 4). A **basic unit** (Fig. 3 (c)) splits the
channels in two halves, keeps the first and passes the second through conv1x1 - BN - ReLU -
depthwise conv3x3 - BN - conv1x1 - BN - ReLU, concatenates the halves and shuffles the channels
(:func:`channel_shuffle`, 2 groups). A **downsampling unit** (Fig. 3 (d)) feeds the whole input
to two branches (depthwise conv3x3 stride 2 - BN - conv1x1 - BN - ReLU, and the basic unit's
branch with a stride-2 depthwise convolution), each with half the output channels, then
concatenates and shuffles. Convolutions have no bias (a BN follows each).

With 3 input channels and 1000 classes x1.5 has 3,503,624 parameters (torchvision's count). The
output is the logits; for CXR8's multi-hot labels the head is read as one sigmoid per condition
(binary cross-entropy: :class:`riemfl.nn.TorchClientTrainer` with ``loss="bce_multilabel"``; the
paper does not name the head). The BN running statistics are buffers: they are not in the flat
parameter vector the asynchronous rules exchange (:func:`riemfl.nn.flatten_parameters`), each
client keeps its own.
"""

from __future__ import annotations

import torch
from torch import nn

from .._validation import integer, real
from ..errors import ParameterError, ShapeError

__all__ = ["STAGE_CHANNELS", "STAGE_REPEATS", "ShuffleNetV2", "channel_shuffle"]

#: width multiplier -> output channels of conv1, stage2, stage3, stage4 and conv5
#: (Ma et al. 2018, Table 5)
STAGE_CHANNELS: dict[float, tuple[int, int, int, int, int]] = {
    0.5: (24, 48, 96, 192, 1024),
    1.0: (24, 116, 232, 464, 1024),
    1.5: (24, 176, 352, 704, 1024),
    2.0: (24, 244, 488, 976, 2048),
}
#: units of stage2, stage3, stage4, the first of each a downsampling unit (Ma et al. 2018, Table 5)
STAGE_REPEATS = (4, 8, 4)


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Interleave the channels of ``groups`` equal groups (the channel shuffle of Ma et al.
    2018, Fig. 3 (c), (d)).

    Channel ``g * m + j`` of the input (group g of ``groups``, position j of m = C / groups)
    becomes channel ``j * groups + g``: with 2 groups of 3, channels (0, 1, 2, 3, 4, 5) come out
    in the order (0, 3, 1, 4, 2, 5).

    Parameters
    ----------
    x : torch.Tensor, shape (n, C, h, w)
    groups : int
        A divisor of C.
    """
    groups = integer(groups, "channel_shuffle: groups", minimum=1)
    if x.ndim != 4 or x.shape[1] % groups:
        raise ShapeError(
            f"channel_shuffle: expected (n, C, h, w) with C divisible by {groups}, "
            f"got {tuple(x.shape)}"
        )
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)


def _conv_bn(inp: int, out: int, kernel: int, stride: int = 1, *, depthwise: bool = False):
    """conv (no bias) and batch norm: a depthwise conv keeps the channels (``inp == out``)."""
    conv = nn.Conv2d(
        inp, out, kernel, stride, kernel // 2, bias=False, groups=inp if depthwise else 1
    )
    return [conv, nn.BatchNorm2d(out)]


class _Unit(nn.Module):
    """A basic unit (``stride=1``, ``inp == out``) or a downsampling unit (``stride=2``)."""

    def __init__(self, inp: int, out: int, stride: int) -> None:
        super().__init__()
        half = out // 2
        self.stride = stride
        if stride == 1:
            self.branch1 = nn.Sequential()  # the identity half (torchvision's name, no weights)
        else:
            self.branch1 = nn.Sequential(
                *_conv_bn(inp, inp, 3, stride, depthwise=True),
                *_conv_bn(inp, half, 1),
                nn.ReLU(inplace=True),
            )
        self.branch2 = nn.Sequential(
            *_conv_bn(inp if stride > 1 else half, half, 1),
            nn.ReLU(inplace=True),
            *_conv_bn(half, half, 3, stride, depthwise=True),
            *_conv_bn(half, half, 1),
            nn.ReLU(inplace=True),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            kept, passed = x.chunk(2, dim=1)
            out = torch.cat((kept, self.branch2(passed)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """ShuffleNet V2 (Ma et al. 2018) with a chosen width, input channels and outputs.

    Parameters
    ----------
    num_classes : int, default 1000
        Outputs of the final linear layer (logits); 8 for the CXR8 conditions of Licudi et al.
        2025 (14 for every finding of ChestX-ray14).
    in_channels : int, default 3
        Channels of the input image: 3 as in ImageNet (and the paper, which replicates the
        grey X-ray to match the pretrained weights), 1 for a grey image trained from scratch.
    width : {0.5, 1.0, 1.5, 2.0}, default 1.5
        The width multiplier (:data:`STAGE_CHANNELS`); the paper's network is x1.5.

    Notes
    -----
    Any spatial size works (the pooling is global); 128 x 128 (the paper's) gives 4 x 4 maps
    after stage4, 32 x 32 gives 1 x 1. No pretrained weights are downloaded (module docstring).
    """

    def __init__(self, num_classes: int = 1000, in_channels: int = 3, width: float = 1.5) -> None:
        super().__init__()
        num_classes = integer(num_classes, "ShuffleNetV2: num_classes", minimum=1)
        in_channels = integer(in_channels, "ShuffleNetV2: in_channels", minimum=1)
        width = real(width, "ShuffleNetV2: width")
        if width not in STAGE_CHANNELS:
            raise ParameterError(
                f"ShuffleNetV2: width must be one of {sorted(STAGE_CHANNELS)}, got {width!r}"
            )
        channels = STAGE_CHANNELS[width]
        self.in_channels = in_channels
        self.conv1 = nn.Sequential(*_conv_bn(in_channels, channels[0], 3, 2), nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        inp = channels[0]
        for name, repeats, out in zip(
            ("stage2", "stage3", "stage4"), STAGE_REPEATS, channels[1:4], strict=True
        ):
            units = [_Unit(inp, out, 2)] + [_Unit(out, out, 1) for _ in range(repeats - 1)]
            setattr(self, name, nn.Sequential(*units))
            inp = out
        self.conv5 = nn.Sequential(*_conv_bn(inp, channels[4], 1), nn.ReLU(inplace=True))
        self.fc = nn.Linear(channels[4], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of shape (n, num_classes) for images of shape (n, in_channels, h, w)."""
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise ShapeError(
                f"ShuffleNetV2: expected images (n, {self.in_channels}, h, w), got {tuple(x.shape)}"
            )
        x = self.maxpool(self.conv1(x))
        x = self.conv5(self.stage4(self.stage3(self.stage2(x))))
        return self.fc(x.mean(dim=(2, 3)))

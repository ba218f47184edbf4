r"""LeNet-5 (LeCun et al. 1998) in its common modern form, for any small square input.

The model of the exploratory studies of Licudi 2025 (TR), Sec. 3-4 (LeNet-5 on FEMNIST). The
layers are LeNet-5's: two 5 x 5 convolutions with 6 and 16 channels, each followed by a 2 x 2
pooling, then dense layers of 120 and 84 units and the classifier. The modern form uses ReLU and
max-pooling (the 1998 network used scaled tanh, trainable sub-sampling and a partially connected
second convolution; the report does not say which form it trained).

LeNet-5 was designed for 32 x 32 inputs (LeCun et al. 1998 padded the 28 x 28 MNIST digits to
32 x 32). Other sizes are met with zero ``padding`` in the two convolutions:

* 32 x 32: ``padding=(0, 0)``, the original geometry (32 -> 28 -> 14 -> 10 -> 5, 16 x 5 x 5 = 400
  features into the first dense layer, 61,706 parameters with 10 classes);
* 28 x 28 (MNIST, FEMNIST): ``padding=(2, 0)``, the same geometry as the padded original;
* 8 x 8 (scikit-learn's digits): ``padding=(2, 2)``, "same" convolutions (8 -> 8 -> 4 -> 4 -> 2,
  16 x 2 x 2 = 64 features, 21,386 parameters with 10 classes). Upsampling the digits to 32 x 32
  would keep the original geometry but costs about 6 times the arithmetic per image for no
  information the 8 x 8 image does not hold.
"""

from __future__ import annotations

import torch
from torch import nn

from .._validation import integer
from ..errors import ParameterError
from .models import image_batch

__all__ = ["LeNet5", "lenet_feature_side"]


def lenet_feature_side(image_size: int, padding: tuple[int, int]) -> int:
    """The side of LeNet-5's last feature map: two (5 x 5 convolution, 2 x 2 pooling) stages.

    Raises
    ------
    ParameterError
        When a stage leaves no feature (side < 1).
    """
    side = int(image_size)
    for stage, pad in enumerate(padding, start=1):
        side = side + 2 * int(pad) - 4
        if side < 2:
            raise ParameterError(
                f"LeNet5: a {image_size} x {image_size} input with padding {tuple(padding)} "
                f"leaves a {side} x {side} map after convolution {stage}; pad more"
            )
        side //= 2
    return side


class LeNet5(nn.Module):
    """LeNet-5: conv5x5(6) - pool - conv5x5(16) - pool - dense 120 - dense 84 - classifier.

    Layers, for an input of shape (n, in_channels, s, s)::

        conv5x5(in_channels -> 6, pad p1) - ReLU - maxpool 2
        conv5x5(6 -> 16, pad p2)          - ReLU - maxpool 2      -> (n, 16, f, f)
        flatten - linear(16 f^2 -> 120) - ReLU - linear(120 -> 84) - ReLU - linear(84 -> n_classes)

    with f from :func:`lenet_feature_side` (module docstring: the paddings per input size). The
    output is the logits (no softmax).

    Parameters
    ----------
    n_classes : int, default 10
    in_channels : int, default 1
    image_size : int, default 32
        Side s of the square input.
    padding : (int, int), default (0, 0)
        Zero padding (p1, p2) of the two convolutions.

    Notes
    -----
    :meth:`forward` also accepts flat rows of shape (n, in_channels s^2), reshaped row-major.
    """

    def __init__(
        self,
        n_classes: int = 10,
        in_channels: int = 1,
        image_size: int = 32,
        padding: tuple[int, int] = (0, 0),
    ) -> None:
        super().__init__()
        n_classes = integer(n_classes, "LeNet5: n_classes", minimum=1)
        self.in_channels = integer(in_channels, "LeNet5: in_channels", minimum=1)
        self.image_size = integer(image_size, "LeNet5: image_size", minimum=1)
        if len(padding) != 2:
            raise ParameterError(f"LeNet5: padding must be two ints, got {padding!r}")
        p1, p2 = (integer(p, "LeNet5: padding", minimum=0) for p in padding)
        side = lenet_feature_side(self.image_size, (p1, p2))
        self.features = nn.Sequential(
            nn.Conv2d(self.in_channels, 6, 5, padding=p1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5, padding=p2),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(16 * side * side, 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
            nn.Linear(84, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = image_batch(x, self.in_channels, self.image_size, "LeNet5")
        return self.classifier(self.features(x))

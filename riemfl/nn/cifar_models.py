r"""The CIFAR models of Almansoori et al. 2024 (Sec. 6, Table 6): Cifar10CNN and VGG-8.

The paper describes them in words only: for CIFAR-10 "two convolution layers followed by a
2-layer ReLU net classifier", for CIFAR-100 "VGG-8, a custom-sized model from the VGG-family
(Simonyan & Zisserman 2015) that is specifically able to fit 10 labels but not 100". The layer
sizes below are those of the authors' code (zeligism/FLoRAL, ``floral/model/simple_cnn.py`` and
``floral/model/vgg8.py``):

* :class:`Cifar10CNN`, for (n, 3, 32, 32) inputs::

      conv5x5(3 -> 32)  - ReLU - maxpool 2     -> (n, 32, 14, 14)
      conv3x3(32 -> 64) - ReLU - maxpool 3     -> (n, 64, 4, 4)
      flatten - linear(1024 -> 64) - ReLU - linear(64 -> 10)

  87,178 parameters.
* :class:`VGG8`: five 3 x 3 convolutions (padding 1) of 16, 32, 64, 128 and 512 channels,
  each followed by ReLU and a 2 x 2 max-pool (32 -> 1 pixels), then
  ``dropout - linear(512 -> 512) - ReLU - dropout - linear(512 -> 512) - ReLU -
  linear(512 -> 100)``: eight weight layers, 1,264,388 parameters. No batch normalisation in
  Table 1 (``batch_norm=True`` adds it after each convolution, the variant of App. G.3). The
  convolutions are initialised as the authors' code does: weights normal with standard
  deviation :math:`\sqrt{2 / (k^2 c_{out})}`, biases zero.

Both output logits. ``dtype`` builds the parameters in float32 (default) or float64.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .._validation import integer
from ..errors import ParameterError, ShapeError

__all__ = ["Cifar10CNN", "VGG8", "VGG8_CHANNELS"]

#: VGG-8's convolution widths
VGG8_CHANNELS: tuple[int, ...] = (16, 32, 64, 128, 512)


def _dtype(dtype: torch.dtype, what: str) -> torch.dtype:
    if dtype not in (torch.float32, torch.float64):
        raise ParameterError(f"{what}: dtype must be torch.float32 or torch.float64, got {dtype}")
    return dtype


def _check_input(x: torch.Tensor, what: str) -> None:
    if x.ndim != 4 or tuple(x.shape[1:]) != (3, 32, 32):
        raise ShapeError(f"{what} expects input of shape (n, 3, 32, 32), got {tuple(x.shape)}")


class Cifar10CNN(nn.Module):
    """Two convolutions, then a 2-layer ReLU classifier (module docstring), 87,178 parameters.

    Parameters
    ----------
    n_classes : int, default 10
    dtype : torch.dtype, default torch.float32
    """

    def __init__(self, n_classes: int = 10, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        n_classes = integer(n_classes, "Cifar10CNN: n_classes", minimum=1)
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3),
            nn.ReLU(),
            nn.MaxPool2d(3),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64 * 4 * 4, 64),
            nn.ReLU(),
            nn.Linear(64, n_classes),
        )
        self.to(_dtype(dtype, "Cifar10CNN"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, "Cifar10CNN")
        return self.classifier(self.features(x))


class VGG8(nn.Module):
    """VGG-8 of the paper's CIFAR-100 task (module docstring), 1,264,388 parameters.

    Parameters
    ----------
    n_classes : int, default 100
    batch_norm : bool, default False
        Batch normalisation after each convolution (not in Table 1).
    dropout : float, default 0.5
        The classifier's dropout probability (PyTorch's default, as in the authors' code).
    dtype : torch.dtype, default torch.float32
    """

    def __init__(
        self,
        n_classes: int = 100,
        batch_norm: bool = False,
        dropout: float = 0.5,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        n_classes = integer(n_classes, "VGG8: n_classes", minimum=1)
        if not 0 <= dropout < 1:
            raise ParameterError(f"VGG8: dropout must be in [0, 1), got {dropout!r}")
        layers: list[nn.Module] = []
        c_in = 3
        for c_out in VGG8_CHANNELS:
            conv = nn.Conv2d(c_in, c_out, 3, padding=1)
            nn.init.normal_(conv.weight, 0.0, math.sqrt(2.0 / (9 * c_out)))
            nn.init.zeros_(conv.bias)
            layers.append(conv)
            if batch_norm:
                layers.append(nn.BatchNorm2d(c_out))
            layers += [nn.ReLU(), nn.MaxPool2d(2)]
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Dropout(dropout),
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Linear(512, n_classes),
        )
        self.to(_dtype(dtype, "VGG8"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, "VGG8")
        return self.classifier(self.features(x))

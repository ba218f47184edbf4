r"""Small torch models for the offline stand-ins, and the flat-vector view of their parameters.

The asynchronous algorithms work on flat parameter vectors :math:`\Theta \in \mathbb{R}^D`
(the Euclidean parameter space :math:`\mathbb{R}^\Theta`, the only one Licudi et al. 2025 use in
experiments);
:func:`flatten_parameters` and :func:`load_flat_parameters` convert between a
:class:`torch.nn.Module` and such a vector.

**Order and content of the flat vector.** The entries are the tensors of
``module.parameters()``, in that order (registration order, shared parameters once), each
flattened row-major (``tensor.reshape(-1)``) and concatenated. Buffers (batch-norm running
statistics and the like) are **not** included: they are not trained by the optimiser and are not
exchanged; a model with buffers keeps its own.

Models
------
* :class:`SmallCNN` -- the FEMNIST stand-in: "a simple 2-conv, 2-dense CNN" with ReLU
  (Licudi et al. 2025, Sec. 4.1; its layer sizes are only drawn in App. B.1, Fig. 5, so the
  sizes here are riemfl's choice) for 8 x 8 digits (or any square single-channel image size
  divisible by 4).
* :class:`MLP` -- fully connected layers with ReLU between them, for quick runs and benchmarks.
* :class:`CharTransformer` -- the Shakespeare model of Licudi et al. 2025: a GPT-like character
  transformer that predicts the next character of an 80-character window.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from .._validation import integer
from ..backend import is_torch
from ..errors import ParameterError, ShapeError

__all__ = [
    "image_batch",
    "SmallCNN",
    "MLP",
    "CharTransformer",
    "flatten_parameters",
    "load_flat_parameters",
    "n_parameters",
]


class SmallCNN(nn.Module):
    """Two 3 x 3 convolutions with max-pooling, then two dense layers (ReLU throughout).

    Layers, for an input of shape (n, in_channels, s, s) with s divisible by 4::

        conv3x3(in_channels -> c1, pad 1) - ReLU - maxpool 2      -> (n, c1, s/2, s/2)
        conv3x3(c1 -> c2, pad 1)          - ReLU - maxpool 2      -> (n, c2, s/4, s/4)
        flatten - linear(c2 (s/4)^2 -> hidden) - ReLU - linear(hidden -> n_classes)

    The output is the logits (no softmax). With the defaults and s = 8 (scikit-learn's digits,
    the offline FEMNIST stand-in) the model has 13,706 parameters; s = 28 (FEMNIST itself) and
    ``n_classes=62`` give the LEAF FEMNIST shape.

    Parameters
    ----------
    n_classes : int, default 10
    in_channels : int, default 1
    image_size : int, default 8
        Side s of the square input, a multiple of 4.
    channels : (int, int), default (16, 32)
        c1, c2.
    hidden : int, default 64

    Notes
    -----
    :meth:`forward` also accepts flat rows of shape (n, in_channels s^2), reshaped row-major
    (the layout of :func:`riemfl.problems.load_digits`).
    """

    def __init__(
        self,
        n_classes: int = 10,
        in_channels: int = 1,
        image_size: int = 8,
        channels: tuple[int, int] = (16, 32),
        hidden: int = 64,
    ) -> None:
        super().__init__()
        n_classes = integer(n_classes, "SmallCNN: n_classes", minimum=1)
        self.in_channels = integer(in_channels, "SmallCNN: in_channels", minimum=1)
        self.image_size = integer(image_size, "SmallCNN: image_size", minimum=1)
        if self.image_size % 4:
            raise ParameterError(f"SmallCNN: image_size must be a multiple of 4, got {image_size}")
        if len(channels) != 2:
            raise ParameterError(f"SmallCNN: channels must be two ints, got {channels!r}")
        c1, c2 = (integer(c, "SmallCNN: channels", minimum=1) for c in channels)
        hidden = integer(hidden, "SmallCNN: hidden", minimum=1)
        side = self.image_size // 4
        self.features = nn.Sequential(
            nn.Conv2d(self.in_channels, c1, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(c2 * side * side, hidden),
            nn.ReLU(),
            nn.Linear(hidden, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = image_batch(x, self.in_channels, self.image_size, "SmallCNN")
        return self.classifier(self.features(x))


class MLP(nn.Module):
    """Fully connected network ``sizes[0] -> sizes[1] -> ... -> sizes[-1]``, ReLU in between.

    No activation after the last layer (it outputs logits). The input is flattened from the
    second dimension on, so (n, 1, 8, 8) digits and (n, 64) rows both work with
    ``sizes[0] = 64``.

    Parameters
    ----------
    sizes : sequence of int
        At least two layer widths, each >= 1.
    """

    def __init__(self, sizes: Sequence[int]) -> None:
        super().__init__()
        sizes = list(sizes)
        if len(sizes) < 2:
            raise ParameterError(f"MLP: sizes needs at least two widths, got {sizes!r}")
        sizes = [integer(s, "MLP: every size", minimum=1) for s in sizes]
        layers: list[nn.Module] = []
        for j, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            if j:
                layers.append(nn.ReLU())
            layers.append(nn.Linear(a, b))
        self.net = nn.Sequential(*layers)
        self.sizes = tuple(sizes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        if x.shape[1] != self.sizes[0]:
            raise ShapeError(
                f"MLP expects {self.sizes[0]} input features per row, got {x.shape[1]} "
                f"(input shape {tuple(x.shape)})"
            )
        return self.net(x)


class CharTransformer(nn.Module):
    r"""GPT-like character model (Licudi et al. 2025, Sec. 4.1): logits of the next character.

    Token and learned position embeddings, ``n_layers`` pre-norm transformer blocks with causal
    self-attention (GELU MLP of width 4 d, dropout), a final layer norm and a linear head on the
    last position. The paper (App. B.2, nanoGPT) gives 6 layers, 6 heads, d = 128 and dropout
    0.1; 128 is not divisible by 6 (nanoGPT requires ``d % heads == 0``), so ``n_heads``
    defaults to 4 (riemfl's choice). Inputs are character indices in 0..vocab-1 of shape
    (n, context), as any numeric dtype (the trainers hand features over as float32; they are
    rounded to int here).
    """

    def __init__(
        self,
        vocab: int = 80,
        context: int = 80,
        n_layers: int = 6,
        n_heads: int = 4,
        d_model: int = 128,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        vocab = integer(vocab, "CharTransformer: vocab", minimum=1)
        context = integer(context, "CharTransformer: context", minimum=1)
        n_layers = integer(n_layers, "CharTransformer: n_layers", minimum=1)
        n_heads = integer(n_heads, "CharTransformer: n_heads", minimum=1)
        d_model = integer(d_model, "CharTransformer: d_model", minimum=1)
        if d_model % n_heads:
            raise ParameterError(
                f"CharTransformer: d_model = {d_model} must be divisible by n_heads = {n_heads}"
            )
        self.vocab, self.context = vocab, context
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(context, d_model)
        block = nn.TransformerEncoderLayer(
            d_model,
            n_heads,
            4 * d_model,
            dropout,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.blocks = nn.TransformerEncoder(block, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idx = torch.round(x).long() if x.is_floating_point() else x.long()
        if idx.ndim != 2 or idx.shape[1] > self.context:
            raise ShapeError(
                f"CharTransformer: input must be (n, L) with L <= {self.context}, got "
                f"{tuple(x.shape)}"
            )
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= self.vocab):
            raise ParameterError(
                f"CharTransformer: character indices must be in 0..{self.vocab - 1}"
            )
        length = idx.shape[1]
        h = self.tokens(idx) + self.positions(torch.arange(length, device=idx.device))
        causal = nn.Transformer.generate_square_subsequent_mask(length, device=idx.device)
        h = self.blocks(self.drop(h), mask=causal, is_causal=True)
        return self.head(self.norm(h[:, -1]))


def image_batch(x: torch.Tensor, channels: int, side: int, model: str) -> torch.Tensor:
    """``x`` as a batch of square images, shape (n, channels, side, side); flat rows of
    ``channels * side * side`` values are reshaped.

    Parameters
    ----------
    x : torch.Tensor
        Shape (n, channels, side, side) or (n, channels * side * side).
    channels, side : int
        The images' channels and side.
    model : str
        The model's name, for the error message.

    Raises
    ------
    ShapeError
        For any other shape.
    """
    c, s = channels, side
    if x.ndim == 2 and x.shape[1] == c * s * s:
        x = x.reshape(-1, c, s, s)
    if x.ndim != 4 or tuple(x.shape[1:]) != (c, s, s):
        raise ShapeError(
            f"{model} expects input of shape (n, {c}, {s}, {s}) or (n, {c * s * s}), "
            f"got {tuple(x.shape)}"
        )
    return x


def n_parameters(module: nn.Module) -> int:
    """D, the length of the flat parameter vector of ``module``."""
    return sum(p.numel() for p in module.parameters())


def flatten_parameters(module: nn.Module) -> torch.Tensor:
    """The parameters of ``module`` as one flat tensor (a detached copy).

    Order: ``module.parameters()``, each tensor flattened row-major; buffers excluded (see the
    module docstring). The dtype and device are those of the parameters (float32 for a default
    torch model); all parameters must share them.

    Returns
    -------
    torch.Tensor, shape (D,)
    """
    params = list(module.parameters())
    if not params:
        return torch.zeros(0)
    with torch.no_grad():
        return torch.cat([p.detach().reshape(-1) for p in params]).clone()


def load_flat_parameters(module: nn.Module, flat: torch.Tensor | np.ndarray) -> None:
    """Copy a flat vector into the parameters of ``module``, in place (inverse of flatten).

    Parameters
    ----------
    module : torch.nn.Module
    flat : torch.Tensor or numpy.ndarray, shape (D,)
        In the order of :func:`flatten_parameters`; cast to each parameter's dtype and device
        (a float64 vector loaded into a float32 model is rounded to float32).

    Raises
    ------
    ShapeError
        When ``flat`` is not 1-D of length D = :func:`n_parameters` (``module``).
    """
    if isinstance(flat, np.ndarray):
        flat = torch.from_numpy(flat)
    elif not is_torch(flat):
        raise ShapeError(
            f"load_flat_parameters: flat must be a torch tensor or numpy array, got "
            f"{type(flat).__name__}"
        )
    d = n_parameters(module)
    if flat.ndim != 1 or flat.shape[0] != d:
        raise ShapeError(
            f"load_flat_parameters: flat has shape {tuple(flat.shape)}; the module has D = {d} "
            f"parameters, so expected ({d},)"
        )
    offset = 0
    with torch.no_grad():
        for p in module.parameters():
            k = p.numel()
            p.copy_(flat[offset : offset + k].reshape(p.shape))
            offset += k

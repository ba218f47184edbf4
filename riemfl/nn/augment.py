"""Random crops and horizontal flips of image batches, on the device, from a torch generator.

:class:`CropFlip` is the training augmentation of the CIFAR experiments in the authors' public
code of Almansoori et al. 2024 (zeligism/FLoRAL, after the common CIFAR recipe of He et al.
2016): pad each image by ``padding`` pixels, crop a window of the original size at a uniformly
random offset, and mirror it left-right with probability 1/2. It works on a whole batch with
index arithmetic (no per-image loop and no host read), and its draws come from the generator the
caller passes, so a seeded training run is reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .._validation import integer
from ..errors import ShapeError

__all__ = ["CropFlip"]


class CropFlip:
    """Random crop after zero-padding, then a random horizontal flip, per image.

    Parameters
    ----------
    padding : int, default 4
        Pixels added on each side before cropping (the crop keeps the image's size).
    fill : sequence of float, optional
        The value of the padding per channel (default 0). For standardised images, pass the
        standardised black, :math:`-\\mu_c / \\sigma_c`, to pad as on raw images.
    flip : bool, default True
        Mirror each image left-right with probability 1/2.
    """

    def __init__(
        self, padding: int = 4, fill: Sequence[float] | None = None, flip: bool = True
    ) -> None:
        self.padding = integer(padding, "CropFlip: padding", minimum=0)
        self.fill = None if fill is None else tuple(float(v) for v in fill)
        self.flip = bool(flip)

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """The augmented batch.

        Parameters
        ----------
        x : torch.Tensor
            Images, shape (B, C, H, W).
        generator : torch.Generator
            The source of the offsets and flips (on ``x``'s device).

        Returns
        -------
        torch.Tensor
            Shape (B, C, H, W), ``x``'s dtype and device.

        Raises
        ------
        ShapeError
            For a batch that is not 4-D, or a ``fill`` whose length is not C.
        """
        if x.ndim != 4:
            raise ShapeError(f"CropFlip: images must be (B, C, H, W), got shape {tuple(x.shape)}")
        b, c, h, w = x.shape
        p = self.padding
        padded = x.new_zeros((b, c, h + 2 * p, w + 2 * p))
        if self.fill is not None:
            if len(self.fill) != c:
                raise ShapeError(f"CropFlip: fill has {len(self.fill)} values for {c} channels")
            padded += torch.tensor(self.fill, dtype=x.dtype, device=x.device).view(1, c, 1, 1)
        padded[:, :, p : p + h, p : p + w] = x
        dev = x.device
        top = torch.randint(0, 2 * p + 1, (b, 1), generator=generator, device=dev)
        left = torch.randint(0, 2 * p + 1, (b, 1), generator=generator, device=dev)
        cols = torch.arange(w, device=dev).expand(b, w)
        if self.flip:
            mirror = torch.rand((b, 1), generator=generator, device=dev) < 0.5
            cols = torch.where(mirror, (w - 1) - cols, cols)
        rows = top + torch.arange(h, device=dev)  # (B, H)
        cols = left + cols  # (B, W)
        batch = torch.arange(b, device=dev).view(b, 1, 1)
        # (B, H, W, C) from advanced indexing of the two spatial axes; back to (B, C, H, W)
        out = padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]]
        return out.permute(0, 3, 1, 2).contiguous()

    def __repr__(self) -> str:
        return f"CropFlip(padding={self.padding}, fill={self.fill}, flip={self.flip})"

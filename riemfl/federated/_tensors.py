"""torch tensors as numpy arrays, without importing torch (shared by checkpoints and digests).

A tensor can only exist once torch has been imported, so :func:`as_tensor` looks torch up in
:data:`sys.modules` instead of importing it: ``import riemfl`` needs numpy alone.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..backend import is_torch

__all__ = ["as_tensor", "is_model_part", "tensor_to_numpy"]


def as_tensor(obj: Any) -> Any:
    """``obj`` when it is a torch tensor (any subclass, e.g. a Parameter), else ``None``."""
    return obj if is_torch(obj) else None


def is_model_part(obj: Any) -> bool:
    """Whether ``obj`` is a ``torch.nn.Module`` or ``Parameter`` (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module | torch.nn.Parameter)


def tensor_to_numpy(tensor: Any) -> tuple[np.ndarray, str]:
    """A C-contiguous CPU numpy array with the bytes of ``tensor``, and the tensor's dtype name.

    A contiguous CPU tensor is not copied (the array shares its memory). Dtypes numpy lacks
    (bfloat16, complex32, the float8 types, ...) come back reinterpreted as the signed integer
    type of the same width; ``torch.from_numpy(array).view(getattr(torch, name))`` inverts it.

    Raises
    ------
    ValueError
        For a tensor without data of its own: a sparse or otherwise non-strided layout, or one on
        the ``meta`` device.
    """
    import torch

    if tensor.layout != torch.strided or tensor.device.type == "meta":
        raise ValueError(f"a tensor with layout {tensor.layout} on {tensor.device} has no data")
    name = str(tensor.dtype).removeprefix("torch.")
    cpu = tensor.detach().to("cpu").resolve_conj().resolve_neg().contiguous()
    try:
        array = cpu.numpy()
    except TypeError:  # no numpy dtype for it: the same bytes as integers of the same width
        width = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        array = cpu.view(width[cpu.element_size()]).numpy()
    return array, name

"""One torch thread while a reproduction runs: the models are small, and intra-op threads only
add contention (measured on a loaded 2-core machine: 1.9 s per client training with 2 threads,
41 ms with 1)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def single_torch_thread() -> Iterator[None]:
    """Set torch's intra-op threads to 1 inside the block, then restore the previous count."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)

"""One thread while a reproduction runs (torch's, and BLAS's): the models are small, and
intra-op threads only add contention (measured on a loaded 2-core machine: 1.9 s per client
training with 2 threads, 41 ms with 1)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def single_torch_thread() -> Iterator[None]:
    """One torch intra-op thread (and one BLAS thread, through threadpoolctl when installed)
    inside the block; the previous settings are restored after it.

    Raises
    ------
    MissingDependencyError
        Without torch, naming its extra (:func:`~riemfl.extras.require_extras`).
    """
    from ..extras import require_extras

    require_extras(("torch",), "the torch-based reproductions (single_torch_thread)")
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with _blas_limit():
            yield
    finally:
        torch.set_num_threads(previous)


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """One BLAS thread inside the block (threadpoolctl, which scikit-learn brings): the matrices
    are small, and a second thread only contends with other processes for the cores (on a
    loaded 2-core machine Stiefel's logarithm, the random-point attack's, ran 3x slower with
    two threads)."""
    with _blas_limit():
        yield


def _blas_limit() -> contextlib.AbstractContextManager:
    """threadpoolctl's limit to one BLAS thread (a no-op without threadpoolctl). threadpoolctl
    limits the libraries loaded when the block starts, and scipy ships its own BLAS, loaded by
    the first import of ``scipy.linalg``: that import comes first, so the limit reaches it."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return contextlib.nullcontext()
    import scipy.linalg  # noqa: F401 - loads scipy's BLAS before the limit is set

    return threadpool_limits(limits=1)

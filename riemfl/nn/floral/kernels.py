r"""The compiled FLoRAL layer (``csrc/floral_ops.cpp``): building it, loading it, choosing it.

An adapted layer's training step in pure torch pays torch's fixed cost per operation and per
autograd node many times over for a few weight-sized products (at the digits MLP's size that
cost, not arithmetic, is the whole difference to the base model). The C++ extension does the
layer in **one autograd node**: the merged weight

.. math::

    W' = W + \sum_c w_c A_c B_c^\top,\qquad b' = b + \sum_c w_c L_{b,c}

in plain loops (ATen's products for large ones), the base operation (``linear`` or ``conv2d``)
and its backward with ATen, and the backward pass of the merge (:mod:`riemfl.nn.floral.fused`
has the formulas) in plain loops, for float32 and float64 CPU tensors. A linear layer on few
input rows runs the factored pass instead, ``x W^T + b' + ((x B) diag(w)) A^T``: with its thin
products (C r columns) in loops whenever that is fewer multiply-adds and the layer is small
(``layer_pass``), with ATen's products for large layers by the rule of
:data:`~riemfl.nn.floral.linear.FACTORED_SAVING` (the torch path's). Runs of adapted linear
layers and activations run as one node, ``floral_chain`` (:mod:`~riemfl.nn.floral.chain`),
which can take the router's logits and do the softmax and its backward itself. Under
``create_graph=True`` the backward passes differentiate the same layers written in
differentiable ATen operations, so second derivatives stay exact.

It is built with :func:`torch.utils.cpp_extension.load` (a C++ compiler and ninja; about 30 s,
once: the build is cached in :func:`build_directory`, under ``TORCH_EXTENSIONS_DIR``, by
default ``~/.cache/torch_extensions``) the first time a :class:`~riemfl.nn.floral.FloralModel` runs
on the CPU, or ahead of time with ``riemfl kernels``. Where it cannot be
built the models run the pure-torch path (:mod:`~riemfl.nn.floral.fused`), with one warning;
both give the same numbers (tests compare them).

The environment variable ``RIEMFL_FLORAL_KERNEL`` chooses:

* ``auto`` (default): the compiled layer where it builds, else the torch path with a warning;
* ``off`` (or ``0``): always the torch path;
* ``require`` (or ``1``): the compiled layer, or :class:`~riemfl.errors.MissingDependencyError`.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import warnings
from pathlib import Path
from types import ModuleType

import torch

from ...errors import MissingDependencyError, ParameterError

__all__ = [
    "KERNEL_ENV",
    "MODES",
    "SOURCE",
    "backend",
    "build_directory",
    "build_failure",
    "load",
    "mode",
]

KERNEL_ENV = "RIEMFL_FLORAL_KERNEL"
MODES = ("auto", "off", "require")
_ALIASES = {"0": "off", "1": "require", "": "auto"}
#: the C++ source of the extension
SOURCE = Path(__file__).with_name("csrc") / "floral_ops.cpp"
#: dtypes the compiled layer takes (others run the torch path)
DTYPES = (torch.float32, torch.float64)

#: os.environ's own dictionary and the variable's key in it: checking it costs a twentieth of
#: ``KERNEL_ENV in os.environ`` (load() runs at every forward pass); None where os.environ is
#: built differently (then the plain check)
_ENVIRON_DATA = getattr(os.environ, "_data", None)
_ENVIRON_KEY = (
    os.environ.encodekey(KERNEL_ENV)  # type: ignore[attr-defined]
    if _ENVIRON_DATA is not None and hasattr(os.environ, "encodekey")
    else None
)

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_loaded: ModuleType | None = None
_failed: str | None = None  # why the build failed (then the torch path is used)


def mode() -> str:
    """The mode chosen by ``RIEMFL_FLORAL_KERNEL`` (module docstring).

    Raises
    ------
    ParameterError
        For a value that is none of ``auto``, ``off``, ``require``, ``0``, ``1``.
    """
    raw = os.environ.get(KERNEL_ENV, "auto").strip().lower()
    chosen = _ALIASES.get(raw, raw)
    if chosen not in MODES:
        raise ParameterError(
            f"{KERNEL_ENV}={raw!r}: expected one of {MODES} (or 0 / 1 for off / require)"
        )
    return chosen


def load() -> ModuleType | None:
    """The compiled extension, building it on first use; None for the torch path.

    Returns None when the mode is ``off``, or (mode ``auto``) when the build failed, after one
    :class:`RuntimeWarning` naming the reason.

    Raises
    ------
    MissingDependencyError
        In mode ``require``, when the extension cannot be built or loaded.
    """
    global _loaded, _failed
    if _loaded is not None and not _mode_variable_set():  # the default mode, built: fast
        return _loaded
    chosen = mode()
    if chosen == "off":
        return None
    if _loaded is not None:
        return _loaded
    if _failed is None:
        with _lock:
            if _loaded is None and _failed is None:
                _loaded, _failed = _build()
                if _failed is not None and chosen == "auto":
                    warnings.warn(
                        f"riemfl: the compiled FLoRAL layer could not be built ({_failed}); "
                        "FLoRAL models run the (slower) pure-torch path. Set "
                        f"{KERNEL_ENV}=off to silence this.",
                        RuntimeWarning,
                        stacklevel=2,
                    )
    if _loaded is None and chosen == "require":
        raise MissingDependencyError(
            f"{KERNEL_ENV}=require, but the compiled FLoRAL layer could not be built: {_failed}"
        )
    return _loaded


def _mode_variable_set() -> bool:
    if _ENVIRON_KEY is not None:
        return _ENVIRON_KEY in _ENVIRON_DATA  # type: ignore[operator]
    return KERNEL_ENV in os.environ


#: a build lock older than this is left over from a killed build (torch would wait forever)
STALE_LOCK_SECONDS = 900.0


def build_directory() -> Path:
    """Where the extension is built and cached: ``$TORCH_EXTENSIONS_DIR`` (else torch's default
    root), one folder per torch and Python version."""
    from torch.utils.cpp_extension import get_default_build_root

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()
    tag = f"torch{torch.__version__}-py{sys.version_info.major}{sys.version_info.minor}"
    return Path(root) / f"riemfl_floral_ops-{tag}"


def _remove_stale_lock(directory: Path) -> None:
    lock = directory / "lock"
    try:
        age = time.time() - lock.stat().st_mtime
    except OSError:
        return
    if age > STALE_LOCK_SECONDS:
        _log.warning("removing the stale build lock %s (%.0f s old)", lock, age)
        lock.unlink(missing_ok=True)


def _build() -> tuple[ModuleType | None, str | None]:
    try:
        from torch.utils.cpp_extension import load as load_extension

        directory = build_directory()
        directory.mkdir(parents=True, exist_ok=True)
        _remove_stale_lock(directory)
        _log.info("building the compiled FLoRAL layer in %s (once; about 30 s)", directory)
        module = load_extension(
            name="riemfl_floral_ops",
            sources=[str(SOURCE)],
            extra_cflags=["-O3", "-fopenmp-simd"],
            build_directory=str(directory),
            verbose=False,
        )
    except Exception as exc:  # noqa: BLE001  (any build failure: no compiler, no ninja, ...)
        return None, _failure_summary(exc)
    return module, None


def _failure_summary(exc: Exception) -> str:
    """The exception's first line, and the compiler's first error line if it has one."""
    lines = [line.strip() for line in str(exc).strip().splitlines()]
    summary = f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]
    error = next((line for line in lines[1:] if "error:" in line), None)
    return summary if error is None else f"{summary} ... {error[:300]}"


def build_failure() -> str | None:
    """Why the extension could not be built (None: it was built, or not tried yet)."""
    return _failed


def backend() -> str:
    """``"compiled"`` when FLoRAL models on the CPU use the extension, else ``"torch"``."""
    return "compiled" if load() is not None else "torch"

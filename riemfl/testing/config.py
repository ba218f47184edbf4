"""Backends, dtypes and tolerance tables of the conformance kit.

A :class:`Config` names one array backend (``"numpy"`` or ``"torch"``) and one dtype
(``"float64"`` or ``"float32"``). Test data are drawn in numpy float64 (so every configuration
sees the same points for the same seed) and converted with :meth:`Config.convert`.

The tolerance table :data:`TOLERANCES` gives, per dtype, the absolute and relative tolerances
of identity checks. A manifold whose maps lose more precision (iterative solvers, far-from-origin
hyperbolic points) can widen them with a per-manifold ``tolerance_scale``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import backend
from ..extras import extra_of, installed

__all__ = [
    "Config",
    "Tolerance",
    "TOLERANCES",
    "FLOAT32_EPS_MULTIPLES",
    "METHODS",
    "CONFIGS",
    "CUDA_CONFIGS",
    "torch_available",
    "cuda_available",
    "importorskip",
    "to_numpy",
]


def importorskip(module: str, reason: str | None = None) -> Any:
    """``pytest.importorskip(module)``, with a skip reason that names the extra installing it.

    The extra comes from :data:`riemfl.extras.EXTRAS` (``importorskip("sklearn")`` skips with
    "sklearn is not installed: pip install 'riemfl[data]'"); ``reason`` replaces the message,
    e.g. for a module that an extra installs indirectly (Flower's Ray).

    Returns
    -------
    module
        The imported module.
    """
    import pytest

    if reason is None:
        extra = extra_of(module)
        how = f": pip install 'riemfl[{extra}]'" if extra else ""
        reason = f"{module} is not installed{how}"
    return pytest.importorskip(module, reason=reason)


def torch_available() -> bool:
    """Whether torch can be imported (torch configurations are skipped otherwise)."""
    return installed("torch")


def cuda_available() -> bool:
    """Whether torch sees a CUDA device (CUDA configurations are skipped otherwise)."""
    if not torch_available():
        return False
    import torch

    return bool(torch.cuda.is_available())


@dataclass(frozen=True)
class Tolerance:
    """Absolute and relative tolerance of an identity check: ``|a - b| <= atol + rtol |b|``."""

    atol: float
    rtol: float

    def scaled(self, factor: float) -> Tolerance:
        return Tolerance(self.atol * factor, self.rtol * factor)


#: identity-check tolerances per dtype
TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(atol=1e-9, rtol=1e-8),
    "float32": Tolerance(atol=2e-4, rtol=2e-4),
}


#: maps exercised by the batch, backend, autograd and type tests
METHODS = (
    "project",
    "to_tangent",
    "egrad_to_rgrad",
    "inner",
    "norm",
    "retract",
    "inverse_retract",
    "exp",
    "log",
    "dist",
    "squared_dist",
    "transport",
    "parallel_transport",
    "retraction_transport",
    "ehess_to_rhess",
)

#: float32 accuracy per map, in float32 eps relative to max(1, |result|): a float32 call may
#: differ from the float64 call on the same (float32-rounded) arguments by this much. Measured
#: worst cases of the built-in manifolds are 2-7 eps for the closed-form maps and about 13 for
#: the iterative Stiefel logarithm; torch's float32 matrix exponential, at about 150 eps in
#: Stiefel.exp, is what the table is tight enough to catch.
FLOAT32_EPS_MULTIPLES: dict[str, float] = {
    "project": 32.0,
    "to_tangent": 16.0,
    "egrad_to_rgrad": 16.0,
    "inner": 16.0,
    "norm": 16.0,
    "retract": 32.0,
    "inverse_retract": 32.0,
    "exp": 32.0,
    "log": 64.0,
    "dist": 64.0,
    "squared_dist": 64.0,
    "transport": 32.0,
    "parallel_transport": 32.0,
    "retraction_transport": 32.0,
    "ehess_to_rhess": 16.0,
}


@dataclass(frozen=True)
class Config:
    """One backend, dtype and device under test, e.g. ``Config("torch", "float32")``."""

    backend: str
    dtype: str
    device: str = "cpu"

    def __str__(self) -> str:
        device = "" if self.device == "cpu" else f"-{self.device}"
        return f"{self.backend}-{self.dtype}{device}"

    @property
    def tolerance(self) -> Tolerance:
        return TOLERANCES[self.dtype]

    def convert(self, a: np.ndarray):
        """Convert a numpy array to this configuration's backend and dtype."""
        if self.backend == "numpy":
            return np.asarray(a, dtype=self.dtype)
        import torch

        return torch.as_tensor(np.asarray(a), dtype=getattr(torch, self.dtype), device=self.device)


#: the four CPU configurations the kit runs everywhere
CONFIGS = tuple(Config(b, d) for b in ("numpy", "torch") for d in ("float64", "float32"))

#: torch on a CUDA device (run only where ``cuda_available()``)
CUDA_CONFIGS = tuple(Config("torch", d, "cuda") for d in ("float64", "float32"))


def to_numpy(a) -> np.ndarray:
    """A numpy array, torch tensor or Python scalar as numpy float64, the precision every check
    compares in (:func:`riemfl.backend.to_numpy` with ``dtype=numpy.float64``)."""
    return backend.to_numpy(a, np.float64)

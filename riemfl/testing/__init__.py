"""riemfl's public conformance kit: check any :class:`~riemfl.manifolds.Manifold`.

Three layers, use whichever fits:

* :mod:`riemfl.testing.strategies`: hypothesis strategies drawing points, tangent vectors and
  ambient points at a controlled distance from any manifold;
* :mod:`riemfl.testing.checks`: one plain function per geometric identity (raises
  ``AssertionError`` with the measured discrepancy);
* :class:`ManifoldTests`: a pytest class running every check, for numpy and torch in float64 and
  float32, skipping (with the manifold's reason) the maps a manifold does not implement.

This module needs ``pytest`` and ``hypothesis`` (the ``dev`` extra); ``import riemfl`` does not
import it. :mod:`riemfl.testing.host_reads` counts the calls that read a torch tensor's value back
to the host (it needs torch). A suite running :class:`ManifoldTests` on many manifolds should enable
:mod:`riemfl.testing.pytest_plugin` (``pytest_plugins = ["riemfl.testing.pytest_plugin"]`` in its
``conftest.py``): it stops hypothesis' settings chains of the shared test methods from growing.
"""

from . import bad_input, checks, strategies
from .config import (
    CONFIGS,
    CUDA_CONFIGS,
    FLOAT32_EPS_MULTIPLES,
    TOLERANCES,
    Config,
    Tolerance,
    cuda_available,
    importorskip,
    to_numpy,
    torch_available,
)
from .profiles import register_profiles

__all__ = [
    "bad_input",
    "checks",
    "strategies",
    "Config",
    "CONFIGS",
    "CUDA_CONFIGS",
    "cuda_available",
    "importorskip",
    "Tolerance",
    "TOLERANCES",
    "FLOAT32_EPS_MULTIPLES",
    "to_numpy",
    "torch_available",
    "register_profiles",
    "ManifoldTests",
    "METHODS",
]


def __getattr__(name: str):
    # The suite is imported lazily: hypothesis fixes a test's settings when ``@given`` decorates
    # it, so a profile loaded in conftest.py (or by ``--hypothesis-profile``) must come first.
    if name in ("ManifoldTests", "METHODS"):
        from . import suite

        return getattr(suite, name)
    raise AttributeError(f"module 'riemfl.testing' has no attribute {name!r}")

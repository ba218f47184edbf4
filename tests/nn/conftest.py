"""Fixtures of the FLoRAL test modules in this directory."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def kernel():
    """The compiled FLoRAL extension (built on first use); fails the test if it did not build."""
    from riemfl.nn.floral import kernels

    module = kernels.load()
    assert module is not None, f"the compiled FLoRAL layer did not build: {kernels._failed}"
    return module

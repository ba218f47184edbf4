"""Fixtures of the FLoRAL test modules in this directory."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def kernel():
    """The compiled FLoRAL extension (built on first use); fails the test if it did not build."""
    from floral_helpers import compiled_kernel

    return compiled_kernel()

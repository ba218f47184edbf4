"""A pytest plugin for suites that run :class:`~riemfl.testing.ManifoldTests` on many manifolds.

Enable it in a ``conftest.py`` with ``pytest_plugins = ["riemfl.testing.pytest_plugin"]``.

Why: for every *parametrized* run of a hypothesis test, hypothesis' pytest plugin (6.x) replaces
the test function's settings by ``Settings(parent=<its current settings>, ...)``. The kit's tests
are methods of one base class, so every manifold class shares the same function objects, and
the parent chain grows by one link per parametrized run. A suite with a few dozen manifold
classes reaches thousands of links and fails with ``RecursionError`` inside
``settings.database`` (riemfl's own suite did). This hook restores each test function's
settings after its run, so the chain never grows.

It also registers the ``slow`` marker that the kit's larger families (bad input, float32
accuracy, broadcasting) carry, so that ``pytest -m "not slow"`` gives a quick subset.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: long-running tests (the full run includes them)")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    obj = getattr(item, "obj", None)
    fn = getattr(obj, "__func__", obj)
    saved = getattr(fn, "_hypothesis_internal_use_settings", None)
    try:
        yield
    finally:
        if saved is not None:
            fn._hypothesis_internal_use_settings = saved

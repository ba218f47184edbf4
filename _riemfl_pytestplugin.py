"""riemfl's pytest plugin, loaded automatically by pytest wherever riemfl is installed.

It lives outside the ``riemfl`` package so that loading it costs nothing: it imports pytest alone,
not riemfl, numpy or hypothesis (pytest loads every installed plugin at start-up, for every
project). The public description is :mod:`riemfl.testing.pytest_plugin`.

It does two things for suites that run :class:`riemfl.testing.ManifoldTests`:

* registers the ``slow`` marker that the kit's larger families carry, so that a user's suite
  gets no ``PytestUnknownMarkWarning`` and collects under ``--strict-markers``, and
  ``pytest -m "not slow"`` gives a quick subset;
* restores each test function's hypothesis settings after its run. For every *parametrized* run
  of a hypothesis test, hypothesis' pytest plugin (6.x) replaces the function's settings by
  ``Settings(parent=<its current settings>, ...)``. The kit's tests are methods of one base class
  that every manifold class shares, so without this the parent chain grows by one link per run
  and a suite of a few dozen manifold classes fails with ``RecursionError``.

Disable it with ``pytest -p no:_riemfl_pytestplugin``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

#: the marker line that pytest's ``--markers`` lists
SLOW_MARKER = "slow: long-running tests (the full run includes them)"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", SLOW_MARKER)


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

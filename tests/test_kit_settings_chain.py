"""The kit's shared hypothesis tests keep a short settings chain (riemfl.testing.pytest_plugin).

Runs after tests/manifolds/ (file order), where dozens of manifold classes have run the same
inherited test methods thousands of times; without the plugin the chain below would be that long
and hypothesis would hit RecursionError.
"""

from __future__ import annotations

from riemfl.testing import ManifoldTests
from riemfl.testing.pytest_plugin import pytest_runtest_call


def _depth(fn) -> int:
    settings, depth = fn._hypothesis_internal_use_settings, 0
    while settings is not None:
        settings, depth = settings._fallback, depth + 1
    return depth


def test_the_shared_kit_methods_keep_a_short_settings_chain():
    fn = ManifoldTests.test_batch_equals_loop
    assert _depth(fn) <= 4


def test_the_hook_restores_what_a_run_changed():
    fn = ManifoldTests.test_batch_equals_loop
    before = fn._hypothesis_internal_use_settings

    class Item:
        obj = fn

    hook = pytest_runtest_call(Item())
    next(hook)
    fn._hypothesis_internal_use_settings = object()  # what hypothesis' plugin does per run
    try:
        next(hook)
    except StopIteration:
        pass
    assert fn._hypothesis_internal_use_settings is before

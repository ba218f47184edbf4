"""riemfl's pytest plugin (``_riemfl_pytestplugin``): loaded by itself, it registers the kit's
marker and keeps the settings chains of the kit's shared hypothesis tests short.

Each test runs a small suite of its own (pytester: in-process where the test inspects the kit's
function objects, in a subprocess where the marker must be looked up afresh, as the kit's module
is imported only once per process), so it does not depend on which other tests ran before it
in this process, or on the order pytest-xdist gives.
"""

from __future__ import annotations

import pytest

from riemfl.testing import ManifoldTests

#: a user's test file: several manifold classes sharing the kit's methods
USER_SUITE = """
from riemfl import Euclidean, Sphere
from riemfl.testing import ManifoldTests

{classes}
"""
N_CLASSES = 3
#: options of every inner run: no cache files; no pytest-benchmark, which warns under xdist
INNER = ("-p", "no:cacheprovider", "-p", "no:benchmark")


def _user_suite(n: int) -> str:
    classes = "\n".join(
        f"class TestM{i}(ManifoldTests):\n    manifold = {'Sphere' if i % 2 else 'Euclidean'}"
        f"({3 + i})\n"
        for i in range(n)
    )
    return USER_SUITE.format(classes=classes)


def _depth(fn) -> int:
    settings, depth = fn._hypothesis_internal_use_settings, 0
    while settings is not None:
        settings, depth = settings._fallback, depth + 1
    return depth


@pytest.mark.parametrize("plugin", [True, False])
def test_the_settings_chain_stays_short_with_the_plugin_and_grows_without(pytester, plugin):
    """One shared method, run under 3 classes x 4 configurations: 12 parametrized runs."""
    fn = ManifoldTests.test_batch_equals_loop
    pytester.makepyfile(test_user=_user_suite(N_CLASSES))
    before = _depth(fn)
    args = ["-q", *INNER, "-k", "test_batch_equals_loop"]
    if not plugin:
        args += ["-p", "no:_riemfl_pytestplugin"]
    saved = fn._hypothesis_internal_use_settings
    try:
        result = pytester.runpytest_inprocess(*args)
        runs = result.parseoutcomes().get("passed", 0) + result.parseoutcomes().get("skipped", 0)
        grown = _depth(fn) - before
    finally:
        fn._hypothesis_internal_use_settings = saved  # leave this process as it was
    assert runs >= N_CLASSES
    if plugin:
        assert grown == 0
    else:
        assert grown >= N_CLASSES  # what the plugin prevents: a link per parametrized run


def test_a_users_suite_collects_the_kits_slow_marker_strictly_and_without_warnings(pytester):
    """A fresh process (the marker is looked up when the kit's module is imported), with
    ``--strict-markers`` and warnings as errors; ``-m slow`` selects the kit's larger families."""
    pytester.makepyfile(test_user=_user_suite(1))
    args = [*INNER, "--co", "-q", "--strict-markers", "-W", "error", "-m", "slow"]
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == 0, result.stdout.str()
    assert "test_user.py::TestM0::test_bad_input" in result.stdout.str()


def test_without_the_plugin_the_marker_is_unknown(pytester):
    """The failure the plugin prevents (so that the test above can fail)."""
    pytester.makepyfile(test_user=_user_suite(1))
    args = [*INNER, "--co", "-q", "--strict-markers", "-p", "no:_riemfl_pytestplugin"]
    result = pytester.runpytest_subprocess(*args)
    assert result.ret != 0 and "'slow' not found in `markers`" in result.stdout.str()


def test_an_old_conftest_that_lists_the_module_registers_the_plugin_once(pytester):
    """riemfl 0.1 asked for ``pytest_plugins = ["riemfl.testing.pytest_plugin"]`` in a conftest:
    with the entry point loaded too, pytest must not refuse a second registration."""
    pytester.makeconftest('pytest_plugins = ["riemfl.testing.pytest_plugin"]\n')
    pytester.makepyfile(test_user=_user_suite(1))
    result = pytester.runpytest_inprocess("-q", *INNER, "--co")
    assert result.ret == 0, result.stdout.str()

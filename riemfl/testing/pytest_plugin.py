"""riemfl's pytest plugin: nothing to enable, pytest loads it wherever riemfl is installed.

The plugin (the top-level module ``_riemfl_pytestplugin``, registered under pytest's
``pytest11`` entry point so that it loads without importing riemfl) does two things for suites
that run :class:`~riemfl.testing.ManifoldTests`:

* it registers the ``slow`` marker that the kit's larger families (bad input, float32 accuracy,
  broadcasting) carry: a user's suite gets no ``PytestUnknownMarkWarning``, collects under
  ``--strict-markers``, and ``pytest -m "not slow"`` gives a quick subset;
* it keeps hypothesis' settings chains of the kit's shared test methods short. For every
  *parametrized* run of a hypothesis test, hypothesis' pytest plugin (6.x) replaces the test
  function's settings by ``Settings(parent=<its current settings>, ...)``. The kit's tests are
  methods of one base class, so every manifold class shares the same function objects, and the
  parent chain would grow by one link per parametrized run: a suite with a few dozen manifold
  classes reaches thousands of links and fails with ``RecursionError`` inside
  ``settings.database`` (riemfl's own suite did). The plugin restores each test function's
  settings after its run.

A ``conftest.py`` that still lists this module in ``pytest_plugins`` (as riemfl 0.1's docs
asked) keeps working: the name below points pytest at the plugin, which it registers once. Where
plugin autoloading is off (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``), pass ``-p _riemfl_pytestplugin``
or keep that line.
"""

from __future__ import annotations

pytest_plugins = ["_riemfl_pytestplugin"]

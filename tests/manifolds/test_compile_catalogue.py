"""Every map of every family compiles whole (``torch.compile(fullgraph=True)``) at the check level
``deferred``, with eager values and gradients (:func:`riemfl.testing.levels.check_compiles_whole`).

One manifold per family (the catalogue's first example), every map it supports; the maps a
family lists in ``deferred_reads`` read values by design and are skipped with the reason. The
level ``off`` runs the same code without the records; the conformance kit checks both levels
for host reads (``test_deferred_reads_nothing``).
"""

from __future__ import annotations

import pytest

from riemfl.manifolds.catalogue import FAMILIES
from riemfl.testing import importorskip
from riemfl.testing.config import METHODS
from riemfl.testing.levels import check_compiles_whole
from riemfl.testing.suite import method_arguments

importorskip("torch")

pytestmark = pytest.mark.slow  # a compilation per map (0.1 to 1 s): part of the full run

_CASES = [(f.name, method) for f in FAMILIES if f.examples for method in METHODS]


@pytest.mark.parametrize("family, method", _CASES, ids=[f"{f}-{m}" for f, m in _CASES])
def test_every_map_compiles_whole_when_deferred(family, method):
    manifold = next(f for f in FAMILIES if f.name == family).examples[0]()
    ok, why = manifold.supports(method)
    if not ok:
        pytest.skip(why)
    reason = manifold.deferred_reads.get(method)
    if reason is not None:
        pytest.skip(f"{manifold.name}.{method} reads values: {reason}")
    try:
        args, _ = method_arguments(manifold, method)
    except NotImplementedError as exc:  # the arguments need a map the family lacks (log: exp)
        pytest.skip(str(exc))
    check_compiles_whole(manifold, method, args, levels=("deferred",), backend="eager")

"""Optional hooks are declared, never probed.

Every optional member of a rule, trainer, aggregator, executor, problem or manifold is declared
on its base class or Protocol with a neutral default (``AsyncRule.output``, ``Aggregator.row``,
``SyncAlgorithm.sum_only_hint``, ``FederatedProblem.array_like``, the Protocols of
``riemfl.nn.floral.hooks``, ...), so the library calls it directly or tests ``isinstance``.
What is left of ``hasattr(...)`` and of ``getattr(obj, name, default)`` outside the testing kit
inspects values that riemfl does not define (arrays, torch modules, the ``os`` module, Flower's
objects, a user's pymanopt problem, numpy's version): each such probe is listed below with the
reason it is not a contract, and a new probe fails this test until it is declared instead (or
listed, with its reason).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from riemfl.federated import AsyncRule, FedAsync, FedBuff, RFedAvg, RFedProj
from riemfl.federated.aggregation import Aggregator, PlainSum
from riemfl.problems import KPCAProblem

ROOT = Path(__file__).resolve().parents[1]

ARRAY = "duck typing of an array (numpy, torch or a scalar)"
PLATFORM = "what the platform or an installed version offers"
FOREIGN = "an object of another library"
DISPATCH = "a map looked up by name, with the base class's as the reference"
VALUES = "serialisation of arbitrary values"

#: (file, probe) -> why it is not a contract probe
ALLOWED: dict[tuple[str, str], str] = {
    ("adapters/_geoopt_from.py", "getattr(m, 'random_normal', m.random)"): FOREIGN,
    ("adapters/_lazy.py", "getattr(base, name, None)"): DISPATCH,
    ("adapters/_lazy.py", "getattr(type(wrapped), name, None)"): DISPATCH,
    ("adapters/_pymanopt_known.py", "getattr(manifold, '_transport', None)"): FOREIGN,
    ("adapters/_pymanopt_peer.py", "getattr(manifold, 'metric', 'euclidean')"): FOREIGN,
    ("adapters/_pymanopt_solve.py", "getattr(problem, 'differentiation', None)"): FOREIGN,
    ("adapters/_pymanopt_solve.py", "getattr(problem, 'egrad', None)"): FOREIGN,
    ("adapters/_pymanopt_solve.py", "getattr(problem, 'ehess', None)"): FOREIGN,
    ("adapters/_pymanopt_solve.py", "getattr(problem, 'f', None)"): FOREIGN,
    ("adapters/_pymanopt_solve.py", "getattr(problem, 'loss', None)"): FOREIGN,
    ("adapters/_pymanopt_solve.py", "getattr(problem, 'losses', None)"): FOREIGN,
    ("adapters/pymanopt.py", "getattr(problem, 'manifold', None)"): FOREIGN,
    ("adapters/flower/secure.py", "getattr(error, 'reason', error)"): FOREIGN,
    ("adapters/flower/secure.py", "getattr(f, 'args', None)"): FOREIGN,
    ("adapters/flower/simulation.py", "hasattr(constants, 'ENABLE_RAY_CLUSTER')"): PLATFORM,
    ("adapters/flower/simulation.py", "hasattr(job, k)"): "the fields of the job's dataclass",
    ("riemfl/backend.py", "hasattr(np, 'vecdot')"): PLATFORM,
    ("riemfl/manifolds/oblique.py", "getattr(np, 'vecdot', None)"): PLATFORM,
    ("riemfl/federated/checkpoint.py", "getattr(os, 'O_BINARY', 0)"): PLATFORM,
    ("riemfl/federated/checkpoint.py", "getattr(os, 'O_DIRECTORY', 0)"): PLATFORM,
    ("riemfl/federated/checkpoint.py", "getattr(os, 'fdatasync', os.fsync)"): PLATFORM,
    ("riemfl/federated/_payload.py", "getattr(torch, value[1], None)"): PLATFORM,
    ("riemfl/progress.py", "getattr(self.stream, 'isatty', lambda: False)"): FOREIGN,
    ("riemfl/nn/floral/ensemble.py", "getattr(sub, 'reset_parameters', None)"): FOREIGN,
    ("riemfl/nn/trainer.py", "getattr(m, 'reset_parameters', None)"): FOREIGN,
    ("riemfl/nn/trainer.py", "hasattr(item, '__len__')"): VALUES,
    ("riemfl/federated/serialise.py", "getattr(obj, '__dict__', {})"): VALUES,
    ("riemfl/federated/serialise.py", "getattr(v, 'kind', v)"): VALUES,
    ("riemfl/federated/serialise.py", "hasattr(obj, 'item')"): VALUES,
    ("riemfl/federated/serialise.py", "hasattr(obj, 'tolist')"): VALUES,
    ("riemfl/federated/serialise.py", "hasattr(obj, name)"): VALUES,
    ("riemfl/manifolds/base.py", "getattr(Manifold, '_' + method, None)"): DISPATCH,
    ("riemfl/manifolds/base.py", "getattr(type(self), '_' + method, None)"): DISPATCH,
    ("riemfl/federated/async_engine.py", "getattr(x0, 'dtype', None)"): ARRAY,
    ("riemfl/federated/engine.py", "getattr(self.dtype, 'itemsize', None)"): ARRAY,
    ("riemfl/federated/checkpoint.py", "hasattr(got, 'shape')"): ARRAY,
    ("riemfl/federated/checkpoint.py", "hasattr(want, 'shape')"): ARRAY,
    ("riemfl/federated/faults.py", "getattr(a, 'dtype', None)"): ARRAY,
    ("riemfl/federated/faults.py", "getattr(a, 'dtype', type(a).__name__)"): ARRAY,
    ("riemfl/federated/faults.py", "getattr(getattr(a, 'dtype', None), 'kind', 'O')"): ARRAY,
    ("riemfl/federated/faults.py", "getattr(value, 'shape', ())"): ARRAY,
    ("riemfl/federated/faults.py", "hasattr(v, 'shape')"): ARRAY,
    ("riemfl/federated/faults.py", "hasattr(value, 'shape')"): ARRAY,
    ("riemfl/manifolds/bezier.py", "hasattr(control_points, 'shape')"): ARRAY,
    ("riemfl/manifolds/bezier.py", "hasattr(g, 'shape')"): ARRAY,
    ("riemfl/manifolds/bezier.py", "hasattr(t, 'shape')"): ARRAY,
    ("riemfl/manifolds/bezier.py", "hasattr(t, 'to')"): ARRAY,
    ("riemfl/manifolds/bezier.py", "hasattr(x, 'device')"): ARRAY,
    ("riemfl/manifolds/bezier_closest.py", "hasattr(a, 'shape')"): ARRAY,
    ("riemfl/manifolds/rotation.py", "hasattr(like, 'shape')"): ARRAY,
}


def _probes() -> Counter[tuple[str, str]]:
    """(file, source) of every ``hasattr(...)`` and three-argument ``getattr(...)`` of the
    library and the adapters, outside the testing kit."""
    found: Counter[tuple[str, str]] = Counter()
    for top in ("riemfl", "adapters"):
        for path in sorted((ROOT / top).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name.startswith("riemfl/testing/"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                    continue
                if node.func.id == "hasattr" or (node.func.id == "getattr" and len(node.args) == 3):
                    found[(name, ast.unparse(node))] += 1
    return found


def test_no_hook_is_found_by_probing():
    found = _probes()
    new = sorted(set(found) - set(ALLOWED))
    assert not new, (
        "optional members probed with hasattr/getattr; declare them on the base class or a "
        f"Protocol (or list them here with the reason they are not a contract): {new}"
    )
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"listed probes that no longer exist (remove them): {stale}"


def test_the_scan_sees_a_probe():
    """The scan is not vacuous: it finds the probes this file lists, and one written here."""
    assert sum(_probes().values()) >= len(ALLOWED)
    tree = ast.parse("hasattr(rule, 'row') or getattr(rule, 'seed', None)")
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert [ast.unparse(c) for c in calls if c.func.id in ("hasattr", "getattr")] == [
        "hasattr(rule, 'row')",
        "getattr(rule, 'seed', None)",
    ]


class _Minimal(AsyncRule):
    def apply(self, manifold, a):
        return a.local


@pytest.mark.parametrize(
    ("member", "neutral"),
    [
        (lambda r: r.local_epochs(0), None),
        (lambda r: r.output("model"), "model"),
        (lambda r: r.row(), {}),
        (lambda r: r.privacy_delta(), None),
        (lambda r: r.buffer_size, 1),
        (lambda r: r.sum_only, False),
    ],
)
def test_an_async_rule_declares_its_optional_members(member, neutral):
    assert member(_Minimal()) == neutral


def test_the_optional_members_are_overridden_where_they_mean_something():
    assert FedBuff(buffer_size=4).buffer_size == 4
    assert FedAsync().row() == {}
    assert RFedAvg(0.1, 2).sum_only_hint().startswith("use upload='tangent'")
    assert RFedAvg(0.1, 2, upload="tangent").sum_only_hint() == ""
    assert RFedProj(0.1, 2).sum_only_hint() == ""
    assert KPCAProblem.synthetic(n_clients=2, d=4, k=2, p=3).array_like is None
    assert isinstance(PlainSum(), Aggregator) and PlainSum().takes_totals

"""Every asynchronous server rule saves and restores its run state exactly.

For each rule configuration (the registry's rules, the experiments' methods, and the settings
with momentum, SWA, buffers, adaptive rates and stateful schedules) on a small problem: after k
random arrivals, its ``state_dict`` loaded into a freshly built and reset rule continues bit for
bit like an uninterrupted copy, and every attribute of the restored rule equals the original's
(which catches state that ``state_dict`` forgot). States hold only checkpointable types, and
corrupt states raise :class:`CheckpointError` naming the rule and the key and change nothing.
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
import struct
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import riemfl
from riemfl.backend import is_torch
from riemfl.errors import CheckpointError
from riemfl.experiments.licudi2025 import METHODS
from riemfl.experiments.licudi_tr.checkpoints import RecordedAsyncCurve, RecordedFedAsync
from riemfl.experiments.registry import ASYNC_RULE_NAMES, CURVE_RULE_NAMES, build_async_rule
from riemfl.federated import (
    DCASGD,
    Arrival,
    AsyncBezier,
    AsyncBezierED,
    AsyncCurve,
    AsyncFedED,
    AsyncManifold,
    AsyncRule,
    BezierEmbedding,
    FedAsync,
    FedBuff,
    LinearCorrection,
    OrthoCorrect,
    OrthoDC,
    OrthoDCCorrection,
    OrthoDyn,
    SumBuffer,
    orthocorrect_lambda,
    squared_update,
    switch_schedule,
)
from riemfl.federated.compression import make_compressor
from riemfl.federated.orthodyn_switch import UpdateNormSwitch
from riemfl.federated.rule_state import Checkpointable
from riemfl.testing import importorskip

torch = importorskip("torch")

K = 8  # arrivals before the snapshot in the deterministic tests


# ------------------------------------------------------------------------ the comparison helper
def difference(a: Any, b: Any, path: str = "", seen: set | None = None) -> str | None:
    """The first place where ``a`` and ``b`` differ, or None when they are the same bit for bit.

    Arrays and tensors compare by kind, dtype, shape and bytes, floats by their bits (NaN equals
    NaN), containers item by item, functions by code and closure, and other objects by type and
    then attribute by attribute (``vars``), recursively.
    """
    seen = set() if seen is None else seen
    if a is b:
        return None
    where = path or "<top>"
    if type(a) is not type(b):
        return f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, float | np.floating):
        same = struct.pack("<d", float(a)) == struct.pack("<d", float(b))
        return None if same else f"{where}: {a!r} != {b!r}"
    if isinstance(a, np.ndarray | np.generic):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
            return f"{where}: arrays differ ({a.dtype}{a.shape} vs {b.dtype}{b.shape})"
        return None
    if is_torch(a):
        same = (a.dtype, a.shape, a.device, a.requires_grad) == (
            b.dtype,
            b.shape,
            b.device,
            b.requires_grad,
        )
        if not same or a.detach().cpu().numpy().tobytes() != b.detach().cpu().numpy().tobytes():
            return f"{where}: tensors differ"
        return None
    if isinstance(a, int | str | bytes | complex | type(None)):
        return None if a == b else f"{where}: {a!r} != {b!r}"
    if (id(a), id(b)) in seen:
        return None
    seen.add((id(a), id(b)))
    if isinstance(a, list | tuple):
        if len(a) != len(b):
            return f"{where}: lengths {len(a)} != {len(b)}"
        pairs = [(f"{path}[{i}]", x, y) for i, (x, y) in enumerate(zip(a, b, strict=True))]
    elif isinstance(a, dict):
        if set(a) != set(b):
            return f"{where}: keys {sorted(map(str, a))} != {sorted(map(str, b))}"
        pairs = [(f"{path}[{k!r}]", a[k], b[k]) for k in a]
    elif isinstance(a, types.FunctionType):
        if a.__code__ is not b.__code__:
            return f"{where}: different functions {a.__qualname__}, {b.__qualname__}"
        pairs = [
            (f"{path}.<closure>", _closure(a), _closure(b)),
            (f"{path}.<defaults>", a.__defaults__, b.__defaults__),
        ]
    elif isinstance(a, types.MethodType | types.BuiltinMethodType):
        if getattr(a, "__name__", None) != getattr(b, "__name__", None):
            return f"{where}: methods {a!r} != {b!r}"
        pairs = [(f"{path}.__self__", a.__self__, b.__self__)]
    elif isinstance(a, functools.partial):
        pairs = [(f"{path}.<partial>", (a.func, a.args, a.keywords), (b.func, b.args, b.keywords))]
    elif hasattr(a, "__dict__"):
        pairs = [(f"{path}.<vars>", vars(a), vars(b))]
    else:
        return None if a == b else f"{where}: {a!r} != {b!r}"
    for sub, x, y in pairs:
        found = difference(x, y, sub, seen)
        if found is not None:
            return found
    return None


def _closure(f: types.FunctionType) -> list[Any]:
    return [cell.cell_contents for cell in f.__closure__ or ()]


def assert_same(a: Any, b: Any, what: str) -> None:
    found = difference(a, b, what)
    assert found is None, found


def test_the_comparison_sees_every_kind_of_change():
    rule = AsyncManifold(BezierEmbedding(riemfl.Euclidean(2)), momentum=0.5, swa_start=0)
    rule.reset(riemfl.Euclidean(2), 3)
    rule.velocity = (np.zeros(2), np.ones(2))
    rule.last = {"r": math.nan}
    same = copy.deepcopy(rule)
    assert difference(vars(same), vars(rule)) is None
    changes = [
        lambda r: r.counts.__setitem__(1, 1.0),
        lambda r: setattr(r, "velocity", (np.zeros(2), np.array([1.0, -0.0]) + 1)),
        lambda r: setattr(r, "velocity", [np.zeros(2), np.ones(2)]),
        lambda r: r.last.update(r=0.0),
        lambda r: setattr(r, "swa_models", 1),
        lambda r: setattr(r, "swa_point", np.zeros(2, dtype=np.float32)),
        lambda r: setattr(r.correction, "projections", 2),
        lambda r: setattr(r.embedding.base, "extra", 1),
        lambda r: setattr(r, "_s", lambda d: 2.0),
    ]
    for change in changes:
        other = copy.deepcopy(rule)
        change(other)
        assert difference(vars(other), vars(rule)) is not None


# ------------------------------------------------------------------------ problems and arrivals
@dataclass(frozen=True)
class World:
    """A model space, its clients, the initial model and the clients' uploads from a base."""

    manifold: Any
    n_clients: int
    x0: Any
    upload: Callable[[Any, np.random.Generator], Any]


def _moved(m, base, rng, scale=0.3):
    """A point at distance ``scale`` from ``base`` in a random direction (numpy points)."""
    t = m.random_tangent(base, rng=rng)
    return m.retract(base, (scale / float(m.norm(base, t))) * t)


def _point_world(m) -> World:
    rng = np.random.default_rng(100)
    return World(m, 4, m.random_point(rng=rng), lambda base, rng: _moved(m, base, rng))


def _torch_world() -> World:
    m = riemfl.Euclidean(4)

    def upload(base, rng):
        return base + torch.from_numpy(0.3 * rng.normal(size=4))

    return World(m, 4, torch.from_numpy(np.random.default_rng(101).normal(size=4)), upload)


def _bezier_world(m) -> World:
    """Uploads: the control points (Theta^t, P_1, P_2) of a client's learned curve."""
    rng = np.random.default_rng(102)

    def upload(base, rng):
        return np.stack([base, _moved(m, base, rng, 0.2), _moved(m, base, rng, 0.4)])

    return World(m, 4, m.random_point(rng=rng), upload)


def _curve_world() -> World:
    """Uploads: (Theta^t, phi, Theta_i) of a CurveClientTrainer."""
    m = riemfl.Euclidean(4)

    def upload(base, rng):
        return np.stack([base, base + 0.2 * rng.normal(size=4), base + 0.4 * rng.normal(size=4)])

    return World(m, 4, np.random.default_rng(103).normal(size=4), upload)


@functools.cache
def _floral_layout():
    from torch import nn

    from riemfl.nn.floral import FederatedLayout, floralize

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    return FederatedLayout(floralize(model, 2, rank=1, seed=0))


#: the FLoRAL clients' (N^k, pi^k): mixed clusters, or cluster 1 never routed to
FLORAL_WEIGHTS = {
    "mixed": {
        0: (10.0, np.array([0.75, 0.25])),
        1: (30.0, np.array([0.5, 0.5])),
        2: (60.0, np.array([0.0, 1.0])),
    },
    "one-cluster": {k: (10.0 * (k + 1), np.array([1.0, 0.0])) for k in range(3)},
}


def _floral_world(weights: str) -> World:
    lay = _floral_layout()
    x0 = np.random.default_rng(104).standard_normal(lay.size)
    if weights == "one-cluster":  # cluster 1's products stay 0: the rule falls back and counts it
        parts = lay.split(x0.copy())
        for pair in lay.factor_pairs:
            parts[pair.out_name][1] = 0.0
        x0 = lay.join(parts)

    def upload(base, rng):
        return base + 0.1 * rng.standard_normal(lay.size)

    return World(riemfl.Euclidean(lay.size), 3, x0, upload)


WORLDS: dict[str, Callable[[], World]] = {
    "euclidean": lambda: _point_world(riemfl.Euclidean(4)),
    "stiefel": lambda: _point_world(riemfl.Stiefel(5, 2)),
    "torch": _torch_world,
    "bezier-euclidean": lambda: _bezier_world(riemfl.Euclidean(4)),
    "bezier-sphere": lambda: _bezier_world(riemfl.Sphere(4)),
    "curve": _curve_world,
    "floral-mixed": lambda: _floral_world("mixed"),
    "floral-one-cluster": lambda: _floral_world("one-cluster"),
}


class Run:
    """Random arrivals as the asynchronous engine makes them: a client trained from one of the
    last few global models (stale by 1 to 3 versions after the first) uploads against the
    newest one."""

    def __init__(self, world: World, seed: int) -> None:
        self.world = world
        self.rng = np.random.default_rng(seed)
        self.models = [world.x0]

    def arrival(self) -> Arrival:
        tau = len(self.models) - 1
        staleness = int(self.rng.integers(min(tau, 1), min(tau, 3) + 1))  # 0 only at first
        base = self.models[tau - staleness]
        client = int(self.rng.integers(self.world.n_clients))
        local = self.world.upload(base, self.rng)
        weight = float(self.rng.uniform(0.1, 0.6))
        return Arrival(client, base, local, self.models[-1], staleness, weight, tau)

    def advance(self, new: Any) -> None:
        if new is not None:
            self.models.append(new)


# ------------------------------------------------------------------------ the rules
class CountingSchedule:
    """A user's schedule with a state of its own: it cycles through ``values`` call by call."""

    def __init__(self, values: list) -> None:
        self.values = values
        self.calls = 0

    def __call__(self, _: Any) -> Any:
        self.calls += 1
        return self.values[self.calls % len(self.values)]

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state) != {"calls"} or type(state["calls"]) is not int:
            raise CheckpointError(f"CountingSchedule: expected {{'calls': int}}, found {state}")
        self.calls = state["calls"]


@dataclass(frozen=True)
class Case:
    name: str
    world: str
    make: Callable[[], AsyncRule]
    static: bool = False  # True: its arrivals never change its state (nothing to exercise)

    def fresh(self, world: World) -> AsyncRule:
        rule = self.make()
        rule.reset(world.manifold, world.n_clients)
        return rule


def _drop(checkpoint):
    """A checkpoint sink that keeps nothing."""


def _e4():
    return riemfl.Euclidean(4)


def _sphere():
    return riemfl.Sphere(4)


_POINT_RULES = [n for n in ASYNC_RULE_NAMES if n not in CURVE_RULE_NAMES]
_STATELESS = {"fedasync", "asgd"}


def _cases() -> list[Case]:
    cases = []
    for world in ("euclidean", "stiefel"):
        cases += [
            Case(
                f"registry-{name}-{world}",
                world,
                functools.partial(build_async_rule, name, buffer_size=3),
                static=name in _STATELESS,
            )
            for name in _POINT_RULES
        ]
        cases += [
            Case(
                f"fedbuff-scaled-{world}",
                world,
                lambda: FedBuff(3, staleness_scaling=True, outside_reach="shrink"),
            ),
            Case(
                f"fedbuff-compressed-{world}",
                world,
                lambda: FedBuff(3, compressor=make_compressor("topk:0.5"), outside_reach="shrink"),
            ),
            Case(
                f"asyncfeded-short-warmup-{world}",
                world,
                lambda: AsyncFedED(0.5, kappa=0.25, warmup=1, initial_epochs=3, max_epochs=6),
            ),
            Case(f"orthodyn-{world}", world, lambda: OrthoDyn(switch_schedule(3))),
        ]
    cases.append(
        Case(
            "fedbuff-powersgd-stiefel",
            "stiefel",
            lambda: FedBuff(3, compressor=make_compressor("rank:1"), outside_reach="shrink"),
        )
    )
    cases += [
        Case(
            f"experiments-{name}",
            "bezier-euclidean" if name.startswith("AsyncBezier") else "euclidean",
            functools.partial(make, 4, 0.5),
            static=name == "FedAsync",
        )
        for name, make in METHODS.items()
    ]
    cases += [
        Case(
            "dcasgd-fixed-lambda",
            "euclidean",
            lambda: DCASGD(lambda0=0.5, adaptive=False),
            static=True,
        ),
        Case("orthodc-update", "euclidean", lambda: OrthoDC(0.5, "update")),
        Case(
            "orthodyn-switch-on-update-norm",  # switches at an update no longer than the first
            "euclidean",
            lambda: OrthoDyn(UpdateNormSwitch(threshold=1.0, warmup=1, beta=0.0)),
        ),
        Case(
            "linear-correction",
            "euclidean",
            lambda: LinearCorrection(orthocorrect_lambda(0.5), squared_update),
            static=True,
        ),
        Case(
            "orthodyn-stateful-schedule",
            "euclidean",
            lambda: OrthoDyn(CountingSchedule([(0.0, 0.0), (1.0, 0.0), (0.5, -0.2)])),
        ),
        Case("torch-dcasgd", "torch", DCASGD),
        Case("torch-fedbuff", "torch", lambda: FedBuff(3, staleness_scaling=True)),
        Case("torch-asyncfeded", "torch", lambda: AsyncFedED(warmup=1)),
        Case("torch-orthocorrect", "torch", lambda: OrthoCorrect(0.5, 0.0)),
        Case("torch-fedasync", "torch", FedAsync, static=True),
        Case(
            "asyncbezier-stacked",
            "bezier-euclidean",
            lambda: AsyncBezier(_e4(), vartheta=0.0, variant="stacked"),
        ),
        Case(
            "asyncmanifold-momentum-swa-dominance",
            "bezier-euclidean",
            lambda: AsyncManifold(
                BezierEmbedding(_e4()),
                0.5,
                dominance=True,
                momentum=0.5,
                swa_start=2,
                swa_every=2,
                swa_cycle=3,
            ),
        ),
        Case(
            "asyncbezier-ed-momentum-swa",
            "bezier-euclidean",
            lambda: AsyncBezierED(_e4(), momentum=0.3, swa_start=1),
        ),
        Case(
            "asyncmanifold-arc-length",
            "bezier-euclidean",
            lambda: AsyncManifold(
                BezierEmbedding(_e4()),
                0.7,
                step_mode="arc_length",
                correction=OrthoDCCorrection(0.0, "stacked"),
                alpha=0.5,
            ),
        ),
        Case(
            "asyncmanifold-sphere",
            "bezier-sphere",
            lambda: AsyncManifold(
                BezierEmbedding(_sphere()),
                0.5,
                dominance=True,
                momentum=0.5,
                swa_start=1,
                swa_every=2,
            ),
        ),
        Case("asyncbezier-sphere", "bezier-sphere", lambda: AsyncBezier(_sphere(), vartheta=0.0)),
        Case("asynccurve", "curve", lambda: AsyncCurve(_e4())),
        Case(
            "asynccurve-orthodyn-momentum-swa",
            "curve",
            lambda: AsyncCurve(
                _e4(),
                0.8,
                endpoint=OrthoDyn(switch_schedule(3)),
                momentum=0.5,
                swa_start=2,
                swa_every=1,
                swa_cycle=4,
            ),
        ),
        Case(
            "asynccurve-weight-schedule",
            "curve",
            lambda: AsyncCurve(
                _e4(),
                endpoint=FedAsync(),
                weighting="weight",
                schedule=CountingSchedule([1.0, 0.5, 0.25]),
                rotate=False,
            ),
        ),
        Case(
            "asynccurve-orthocorrect",
            "curve",
            lambda: AsyncCurve(_e4(), 0.6, endpoint=OrthoCorrect(0.5, 0.0)),
        ),
        # the exploratory study's rules, recording a checkpoint per step (to a sink that drops it)
        Case("recorded-fedasync", "euclidean", lambda: RecordedFedAsync(_drop), static=True),
        Case("recorded-asynccurve", "curve", lambda: RecordedAsyncCurve(_drop, 4)),
        Case(
            "recorded-asynccurve-orthodyn-momentum-swa",
            "curve",
            lambda: RecordedAsyncCurve(
                _drop,
                4,
                0.8,
                endpoint=OrthoDyn(switch_schedule(3)),
                rotate=True,
                weighting="dominance",
                momentum=0.5,
                swa_start=2,
                swa_every=1,
                swa_cycle=4,
            ),
        ),
    ]
    cases += [
        Case(
            f"floral-fedbuff-{adaptors}-{weights}",
            f"floral-{weights}",
            functools.partial(_floral_rule, adaptors, weights),
        )
        for adaptors in ("factors", "products")
        for weights in FLORAL_WEIGHTS
    ]
    return cases


def _floral_rule(adaptors: str, weights: str) -> AsyncRule:
    from riemfl.nn.floral import FloralFedBuff

    lookup = FLORAL_WEIGHTS[weights].__getitem__
    return FloralFedBuff(_floral_layout(), lookup, buffer_size=3, adaptors=adaptors)


CASES = _cases()
BY_NAME = {case.name: case for case in CASES}
case_names = pytest.mark.parametrize("name", list(BY_NAME))


def _world(case: Case) -> World:
    return WORLDS[case.world]()


def _drive(rules: list[AsyncRule], world: World, run: Run, steps: int) -> None:
    """Apply the same ``steps`` arrivals to every rule (each its own copy) and check that they
    all return the same thing bit for bit: new models, ``output``, ``local_epochs``, state."""
    m = world.manifold
    for _ in range(steps):
        a = run.arrival()
        outs = [rule.apply(m, copy.deepcopy(a)) for rule in rules]
        reference = rules[0]
        for rule, out in zip(rules[1:], outs[1:], strict=True):
            assert_same(out, outs[0], "apply")
            if hasattr(reference, "output"):
                assert_same(rule.output(a.current), reference.output(a.current), "output")
            if hasattr(reference, "local_epochs"):
                epochs = [reference.local_epochs(c) for c in range(world.n_clients)]
                assert [rule.local_epochs(c) for c in range(world.n_clients)] == epochs
            assert_same(vars(rule), vars(reference), "vars")
        run.advance(outs[0])


@functools.cache
def _advanced(name: str) -> tuple[AsyncRule, dict[str, Any]]:
    """The rule of case ``name`` after K arrivals, and its state (shared: do not modify)."""
    case = BY_NAME[name]
    world = _world(case)
    rule = case.fresh(world)
    run = Run(world, seed=7)
    for _ in range(K):
        run.advance(rule.apply(world.manifold, run.arrival()))
    return rule, rule.state_dict()


# ------------------------------------------------------------------------ the identities
@case_names
@settings(max_examples=4)
@given(k=st.integers(0, 8), seed=st.integers(0, 2**32 - 1))
def test_a_restored_rule_continues_bit_for_bit(name, k, seed):
    case = BY_NAME[name]
    world = _world(case)
    reference, saved = case.fresh(world), case.fresh(world)
    run = Run(world, seed)
    _drive([reference, saved], world, run, k)
    state = saved.state_dict()
    snapshot = copy.deepcopy(state)
    restored = case.fresh(world)
    restored.load_state_dict(state)
    assert_same(vars(restored), vars(reference), "vars after load")
    assert_same(restored.state_dict(), state, "state after load")
    _drive([reference, saved, restored], world, run, 6)
    assert_same(state, snapshot, "the saved state after the runs went on")  # a snapshot


@case_names
def test_a_state_holds_only_checkpointable_values(name):
    _, state = _advanced(name)
    fresh = BY_NAME[name].fresh(_world(BY_NAME[name]))
    for value in (state, fresh.state_dict()):
        _check_checkpointable(value, "state")


def _check_checkpointable(value: Any, path: str) -> None:
    if type(value) is dict:
        for key, item in value.items():
            assert type(key) is str, f"{path}: key {key!r} is not a str"
            _check_checkpointable(item, f"{path}.{key}")
    elif type(value) is list:
        for i, item in enumerate(value):
            _check_checkpointable(item, f"{path}[{i}]")
    elif type(value) is np.ndarray:
        assert value.dtype.kind in "biufc", f"{path}: dtype {value.dtype}"
    elif not is_torch(value):
        assert value is None or type(value) in (bool, int, float, str), (
            f"{path}: {type(value).__name__} is not checkpointable"
        )


@case_names
def test_forgetting_any_field_is_detected(name):
    """A rule whose ``state_dict`` left out a field restores that field's reset value: for every
    field these arrivals changed, the comparison of the test above then fails."""
    case = BY_NAME[name]
    world = _world(case)
    original, state = _advanced(name)
    reset_state = case.fresh(world).state_dict()
    changed = [key for key in state if difference(state[key], reset_state[key]) is not None]
    assert changed or case.static, f"{name}: K arrivals left the whole state at its reset value"
    for key in changed:
        forgetful = case.fresh(world)
        forgetful.load_state_dict({**state, key: reset_state[key]})
        assert difference(vars(forgetful), vars(original)) is not None, key


def test_every_field_of_every_stateful_class_is_exercised():
    """Some case changes each key of each class's state (so the test above covers it)."""
    keys: dict[str, set[str]] = {}
    changed: dict[str, set[str]] = {}
    for case in CASES:
        world = _world(case)
        _, state = _advanced(case.name)
        fresh = case.fresh(world)
        for obj, saved, reset in _stateful_parts(fresh, state, fresh.state_dict()):
            kind = type(obj).__name__
            keys.setdefault(kind, set()).update(saved)
            changed.setdefault(kind, set()).update(
                k for k in saved if difference(saved[k], reset[k]) is not None
            )
    missing = {kind: sorted(keys[kind] - changed[kind]) for kind in keys}
    assert not any(missing.values()), missing


def _stateful_parts(obj: Any, saved: dict, reset: dict) -> Iterator[tuple[Any, dict, dict]]:
    """``obj`` and its helpers with state, each with its saved and its reset state."""
    yield obj, saved, reset
    for name in getattr(obj, "_state_helpers", ()):
        helper = getattr(obj, name, None)
        if isinstance(helper, Checkpointable) and name in saved:
            yield from _stateful_parts(helper, saved[name], reset[name])
    if isinstance(obj, FedBuff):
        yield obj.buffer, saved["buffer"], reset["buffer"]


def test_every_rule_class_has_a_case():
    import riemfl.nn.floral  # noqa: F401 - registers FloralFedBuff

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    ours = {c for c in subclasses(Checkpointable) if c.__module__.startswith("riemfl.")}
    covered = set()
    for case in CASES:
        rule = case.make()
        state = rule.state_dict()
        covered |= {type(o) for o, _, _ in _stateful_parts(rule, state, state)}
    assert {c for c in ours if not inspect.isabstract(c)} - covered == set()
    assert {AsyncManifold, AsyncCurve, OrthoDCCorrection, SumBuffer} <= covered


# ------------------------------------------------------------------------ corrupt states
#: nested dicts whose keys are free: the diagnostics ``last``, a user's schedule's own state
FREE = ("last", "schedule")


def _paths(state: dict, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every key path of a state, except inside the dicts of :data:`FREE`."""
    for key, value in state.items():
        yield (*prefix, key)
        if type(value) is dict and key not in FREE:
            yield from _paths(value, (*prefix, key))


def _edit(state: dict, path: tuple[str, ...], change: Callable[[dict, str], None]) -> dict:
    out = copy.deepcopy(state)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    change(parent, path[-1])
    return out


def _corruptions(state: dict) -> Iterator[tuple[str, dict]]:
    """(the dotted key the error must name, a corrupt state): each key missing, of the wrong
    kind (arrays: a list, the wrong shape; lists: the wrong length or items), and an extra key
    in each dict."""
    paths = list(_paths(state))
    for parent in [(), *(p for p in paths if type(_get(state, p)) is dict and p[-1] not in FREE)]:
        bogus = (*parent, "bogus")
        yield ".".join(bogus), _edit(state, bogus, lambda d, k: d.__setitem__(k, 1))
    for path in paths:
        dotted = ".".join(path)
        yield dotted, _edit(state, path, lambda d, k: d.pop(k))
        yield dotted, _edit(state, path, lambda d, k: d.__setitem__(k, "corrupt"))
        value = _get(state, path)
        if isinstance(value, np.ndarray) or is_torch(value):
            yield dotted, _edit(state, path, lambda d, k: d.__setitem__(k, d[k].tolist()))
            yield dotted, _edit(state, path, lambda d, k: d.__setitem__(k, d[k].reshape(-1)[1:]))
            yield dotted, _edit(state, path, lambda d, k: d.__setitem__(k, d[k][None]))
        if type(value) is list:
            yield dotted, _edit(state, path, lambda d, k: d[k].append(1))
            yield dotted, _edit(state, path, lambda d, k: d.__setitem__(k, [0.5] * len(d[k])))


def _get(state: dict, path: tuple[str, ...]) -> Any:
    for key in path:
        state = state[key]
    return state


@case_names
def test_a_corrupt_state_is_refused_naming_the_key(name):
    case = BY_NAME[name]
    world = _world(case)
    _, state = _advanced(name)
    fresh, untouched = case.fresh(world), case.fresh(world)
    for saved in (state, untouched.state_dict()):
        for dotted, bad in _corruptions(saved):
            with pytest.raises(CheckpointError) as info:
                fresh.load_state_dict(bad)
            message = str(info.value)
            assert repr(dotted) in message and repr(fresh.name) in message, (dotted, message)
            assert_same(vars(fresh), vars(untouched), f"vars after refusing {dotted}")
    for not_a_dict in ([], None, "state"):
        with pytest.raises(CheckpointError, match=repr(fresh.name)):
            fresh.load_state_dict(not_a_dict)


def test_an_inconsistent_buffer_and_a_wrong_count_are_refused():
    _, state = _advanced("registry-fedbuff-euclidean")
    assert state["buffer"]["count"] > 0
    world = WORLDS["euclidean"]()
    fresh = BY_NAME["registry-fedbuff-euclidean"].fresh(world)
    bad = {"buffer": {"sum": None, "count": 2}}
    with pytest.raises(CheckpointError, match="'buffer.count'"):
        fresh.load_state_dict(bad)
    for count in (-1, True, 2.0):
        with pytest.raises(CheckpointError, match="'buffer.count'"):
            fresh.load_state_dict({"buffer": {**state["buffer"], "count": count}})
    buf = SumBuffer()
    buf.load_state_dict({"sum": np.ones(3), "count": 2})
    assert buf.count == 2 and np.array_equal(buf.total(), np.ones(3))
    with pytest.raises(CheckpointError, match="SumBuffer: state key 'count'"):
        buf.load_state_dict({"sum": None, "count": 1})


def test_asyncfeded_epochs_outside_their_range_are_refused():
    case = BY_NAME["asyncfeded-short-warmup-euclidean"]
    world = _world(case)
    _, state = _advanced(case.name)
    fresh = case.fresh(world)
    for epochs in ([0, 3, 3, 3], [3, 3, 3, 7], [3, 3, 3, True]):
        with pytest.raises(CheckpointError, match="'epochs'"):
            fresh.load_state_dict({**state, "epochs": epochs})

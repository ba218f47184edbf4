"""riemfl._validation: the one rule for integer and real scalar parameters, and no hand-written
copy of it left in the library."""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from riemfl._validation import integer, is_int, is_real, optional, real
from riemfl.errors import ParameterError

ROOT = Path(__file__).resolve().parents[1]

NUMPY_INTS = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
NOT_NUMBERS = (None, "3", b"3", [3], (3,), {3}, 3j, np.array([3]), object())
BOOLS = (True, False, np.True_, np.False_)
NON_FINITE = (math.nan, math.inf, -math.inf, np.float64("nan"), np.float32("inf"))

bounds = st.one_of(st.none(), st.integers(-(2**70), 2**70))


def _name(value) -> str:
    """A test id that is the same in every process (no memory address)."""
    return f"{type(value).__name__}:{value!r}" if type(value) is not object else "object"


def _numpy_int(value: int):
    """``value`` as the first numpy integer type that holds it, or None."""
    for kind in NUMPY_INTS:
        info = np.iinfo(kind)
        if info.min <= value <= info.max:
            return kind(value)
    return None


# ---------------------------------------------------------------------- integer
@given(st.integers(-(2**70), 2**70), bounds, bounds)
def test_integer_accepts_exactly_the_ints_within_bounds(value, low, high):
    inside = (low is None or value >= low) and (high is None or value <= high)
    candidates = [value] + ([] if _numpy_int(value) is None else [_numpy_int(value)])
    for v in candidates:
        if inside:
            got = integer(v, "Owner(n): n", low, high)
            assert got == value and type(got) is int
        else:
            with pytest.raises(ParameterError) as info:
                integer(v, "Owner(n): n", minimum=low, maximum=high)
            message = str(info.value)
            assert message.startswith("Owner(n): n must be an integer")
            assert message.endswith(f"got {v!r}")


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_integer_refuses_every_float_even_a_whole_one(value):
    with np.errstate(over="ignore"):  # a float32 of a large float is inf, refused all the same
        as_float32 = np.float32(value)
    for v in (value, np.float64(value), as_float32):
        with pytest.raises(ParameterError, match=r"^f: k must be an integer, got "):
            integer(v, "f: k")


@pytest.mark.parametrize("value", BOOLS + NOT_NUMBERS, ids=_name)
def test_integer_refuses_bools_and_non_numbers(value):
    assert not is_int(value)
    with pytest.raises(ParameterError, match=r"^f: k must be an integer >= 0, got "):
        integer(value, "f: k", minimum=0)


def test_integer_message_names_the_parameter_the_bounds_and_the_value():
    with pytest.raises(ParameterError) as info:
        integer(1, "Sphere(n): n", minimum=2)
    assert str(info.value) == "Sphere(n): n must be an integer >= 2, got 1"
    with pytest.raises(ParameterError) as info:
        integer(7, "f: k", 1, 4)
    assert str(info.value) == "f: k must be an integer >= 1 and <= 4, got 7"


# ---------------------------------------------------------------------- real
finite = st.floats(allow_nan=False, allow_infinity=False)
real_bounds = st.one_of(st.none(), finite)


@given(finite, real_bounds, real_bounds, st.booleans(), st.booleans())
def test_real_accepts_exactly_the_finite_numbers_within_bounds(
    value, low, high, strict_low, strict_high
):
    lower = {} if low is None else {"above" if strict_low else "at_least": low}
    upper = {} if high is None else {"below" if strict_high else "at_most": high}
    inside = low is None or (value > low if strict_low else value >= low)
    inside = inside and (high is None or (value < high if strict_high else value <= high))
    for v in (value, np.float64(value)):
        if inside:
            got = real(v, "Owner: rate", **lower, **upper)
            assert got == value and type(got) is float
        else:
            with pytest.raises(ParameterError) as info:
                real(v, "Owner: rate", **lower, **upper)
            assert str(info.value).startswith("Owner: rate must be a finite number")
            assert str(info.value).endswith(f"got {v!r}")


@given(st.integers(-(2**60), 2**60))
def test_real_accepts_python_and_numpy_integers(value):
    for v in [value] + ([] if _numpy_int(value) is None else [_numpy_int(value)]):
        assert is_real(v)
        got = real(v, "f: x")
        assert got == float(value) and type(got) is float


@pytest.mark.parametrize("value", BOOLS + NOT_NUMBERS + NON_FINITE, ids=_name)
def test_real_refuses_bools_non_numbers_and_non_finite_values(value):
    assert not is_real(value)
    with pytest.raises(ParameterError, match=r"^f: x must be a finite number, got "):
        real(value, "f: x")


def test_real_bounds_are_strict_or_inclusive_as_named():
    assert real(0, "f: x", at_least=0) == 0.0
    assert real(1, "f: x", at_most=1) == 1.0
    with pytest.raises(ParameterError) as info:
        real(0, "f: x", above=0, at_most=1)
    assert str(info.value) == "f: x must be a finite number > 0 and <= 1, got 0"
    with pytest.raises(ParameterError) as info:
        real(math.nan, "f: x", above=0)
    assert str(info.value) == "f: x must be a finite number > 0, got nan"
    with pytest.raises(ParameterError, match=r"must be a finite number >= 0 and < 1, got 1"):
        real(1, "f: x", at_least=0, below=1)


# ---------------------------------------------------------------------- optional
def test_optional_passes_none_through_and_checks_anything_else():
    assert optional(integer, None, "f: k", minimum=1) is None
    assert optional(real, None, "f: x", above=0) is None
    assert optional(integer, np.int64(3), "f: k", 1, 5) == 3
    assert optional(real, 0.5, "f: x", above=0, below=1) == 0.5
    with pytest.raises(ParameterError, match=r"^f: k must be an integer >= 1, got 0$"):
        optional(integer, 0, "f: k", minimum=1)


# ---------------------------------------------------------------------- the library's use
def test_constructors_follow_the_rule():
    from riemfl.manifolds import Lorentz, Simplex, Sphere, Stiefel

    assert Sphere(np.int64(3)).n == 3 and type(Sphere(np.int64(3)).n) is int
    assert Lorentz(2, beta=np.float32(2.0)).beta == 2.0
    for build in (lambda: Sphere(True), lambda: Lorentz(True), lambda: Simplex(3, True)):
        with pytest.raises(ParameterError, match="got True"):
            build()
    with pytest.raises(ParameterError, match=r"^Sphere\(n\): n must be an integer >= 2, got 1$"):
        Sphere(1)
    with pytest.raises(ParameterError, match=r"Stiefel\(n, p\): p \(p <= n\) .* <= 3, got 4$"):
        Stiefel(3, 4)
    with pytest.raises(ParameterError, match=r"^Lorentz: beta must be a finite number > 0"):
        Lorentz(2, beta=math.inf)


#: every number check outside riemfl._validation, by (file, function): why it stays
ALLOWED = {
    ("riemfl/federated/async_engine.py", "EventLoop._validate_client"): (
        "a client index read from a checkpoint (CheckpointError, not ParameterError)"
    ),
    ("riemfl/federated/checkpoint.py", "require_count"): (
        "a count read from a checkpoint (CheckpointError, not ParameterError)"
    ),
    ("riemfl/federated/checkpoint.py", "require_amount"): (
        "an amount read from a checkpoint (CheckpointError, not ParameterError)"
    ),
    ("adapters/flower/deploy.py", "_toml_value"): "writes a run-config value by its type",
    ("adapters/flower/wire.py", "_config_value"): "encodes a config value by its type",
    ("riemfl/check_levels_torch.py", "_constant"): (
        "which values a compiled graph holds as constants (a type test, not a parameter check)"
    ),
    ("riemfl/federated/faults.py", "_json_value"): "writes a non-finite float as text",
    ("riemfl/federated/fingerprint.py", "_key"): "a fingerprint's key by its type",
    ("riemfl/federated/history.py", "History.to_csv"): "writes floats with repr",
    ("riemfl/federated/serialise.py", "json_float"): "writes a non-finite float as text",
    ("riemfl/federated/serialise.py", "_is_scalar"): "which values JSON holds as they are",
    ("riemfl/manifolds/bezier.py", "BezierCurve.__call__"): "one parameter t, or an array",
    ("riemfl/manifolds/bezier.py", "BezierCurve.point_and_grad"): "one parameter t, or an array",
    ("riemfl/manifolds/inputs.py", "all_finite"): "a Python or numpy scalar, or an array",
    ("riemfl/manifolds/poincare.py", "mobius_scalar_mul"): "a number r, or an array",
    ("riemfl/progress.py", "_fmt"): "formats a float for the progress bar",
    (
        "riemfl/testing/checks_backends.py",
        "check_backends_agree",
    ): "the result type of a map under test",
    (
        "riemfl/testing/checks_backends.py",
        "check_types_preserved",
    ): "the result type of a map under test",
}

NUMBER_TYPES = {"int", "float", "Integral", "Real", "integer", "floating"}


def _type_names(node: ast.AST) -> set[str]:
    """The names in an isinstance type argument: ``(int, np.integer)``, ``int | float``."""
    if isinstance(node, ast.Tuple):
        return set().union(*(_type_names(e) for e in node.elts))
    if isinstance(node, ast.BinOp):
        return _type_names(node.left) | _type_names(node.right)
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    return set()


def _is_number_check(node: ast.AST) -> bool:
    """``isinstance(x, <a number type>)``, or ``int(x) != x`` (a whole-number test)."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
        return len(node.args) == 2 and bool(_type_names(node.args[1]) & NUMBER_TYPES)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = node.left, node.comparators[0]
        if isinstance(node.ops[0], ast.NotEq | ast.Eq):
            for a, b in ((left, right), (right, left)):
                if isinstance(a, ast.Call) and getattr(a.func, "id", None) == "int" and a.args:
                    if ast.dump(a.args[0]) == ast.dump(b):
                        return True
    return False


def _number_checks(path: Path) -> Iterator[tuple[str, int]]:
    """(qualified name of the enclosing function, line) of every number check in ``path``."""

    def visit(node: ast.AST, scope: list[str]) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                yield from visit(child, scope + [child.name])
                continue
            if _is_number_check(child):
                yield ".".join(scope) or "<module>", child.lineno
            yield from visit(child, scope)

    yield from visit(ast.parse(path.read_text(encoding="utf-8")), [])


def _library_checks() -> dict[tuple[str, str], list[int]]:
    found: dict[tuple[str, str], list[int]] = {}
    for folder in (ROOT / "riemfl", ROOT / "adapters"):
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "riemfl/_validation.py":
                continue
            for where, line in _number_checks(path):
                found.setdefault((rel, where), []).append(line)
    return found


def test_the_scan_finds_hand_written_checks():
    source = (
        "def f(n, k, x):\n"
        "    if not isinstance(n, (int, np.integer)) or n < 2: pass\n"
        "    if isinstance(k, bool) or int(k) != k: pass\n"
        "    ok = isinstance(x, float | np.floating)\n"
        "    isinstance(x, str)\n"
    )
    tree = ast.parse(source)
    lines = sorted({n.lineno for n in ast.walk(tree) if _is_number_check(n)})
    assert lines == [2, 3, 4]


def test_no_hand_written_number_check_outside_validation():
    found = _library_checks()
    unexplained = {key: lines for key, lines in found.items() if key not in ALLOWED}
    assert not unexplained, (
        "integer/real checks written by hand; use riemfl._validation (integer, real, is_int, "
        "is_real) or add the site to ALLOWED with the reason it stays:\n"
        + "\n".join(f"{path}:{lines} in {where}" for (path, where), lines in unexplained.items())
    )
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"ALLOWED lists sites that no longer check a number's type: {stale}"

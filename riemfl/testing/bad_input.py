"""The bad-input family of the conformance kit: every public map against the input policy.

For one map and valid numpy float64 arguments, :func:`check_bad_input` feeds the map each kind
of bad input of :data:`BAD_INPUT_KINDS` and asserts the outcome the input policy
(``docs/manifolds.md``, "Input policy"; :mod:`riemfl.manifolds.inputs`) prescribes:

``list``
    one argument as a nested Python list: the same outcome as the numpy float64 call;
``integer``
    every argument rounded to integers, as an int64 array: the same outcome as the float64
    array of those integers, with a float64 result;
``float16``
    one argument in float16 (and torch float16, bfloat16): :class:`~riemfl.errors.DTypeError`;
``complex``
    one argument complex: ``DTypeError`` (unless the manifold sets ``supports_complex``);
``nan``, ``inf``
    one entry of one argument non-finite: :class:`~riemfl.errors.NonFiniteError`;
``empty``
    every argument with an empty batch: an empty result of the right shape and dtype (``None``
    from ``check_*``) without error;
``mixed``
    one argument a torch float64 tensor, the others numpy: a torch result equal to the numpy one.

"The same outcome" is the same value, or a typed error of the same class. Any other exception
(``TypeError``, ``LinAlgError``, ...) fails the check with the call that raised it.

:func:`check_boundary_points` feeds a map finite points that lie on (or beyond) the boundary
of an open manifold, where its metric or maps blow up (the sphere ``|x| = 1`` of the Poincare
ball, a zero component of a simplex point, a singular matrix of the SPD cone): each map
refuses them with :class:`~riemfl.errors.NotOnManifoldError` naming the map (``project``: a
typed error, :class:`~riemfl.errors.ProjectionError` for a set without a nearest point),
never NaN or inf.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence

import numpy as np

from ..backend import is_torch
from ..errors import DTypeError, NonFiniteError, NotOnManifoldError, RiemflError
from ..manifolds.base import Manifold
from .config import METHODS, Tolerance, to_numpy, torch_available

__all__ = [
    "BAD_INPUT_KINDS",
    "BAD_INPUT_METHODS",
    "check_bad_input",
    "check_boundary_points",
    "boundary_arguments",
    "map_caller",
]

BAD_INPUT_KINDS = ("list", "integer", "float16", "complex", "nan", "inf", "empty", "mixed")

#: every public map taking arrays (the kit's METHODS plus sampling and checks)
BAD_INPUT_METHODS = METHODS + ("random_tangent", "zero_tangent", "check_point", "check_tangent")

#: the same computation, only the input's route differs: equal to rounding
_SAME = Tolerance(atol=1e-12, rtol=1e-12)
_BACKENDS = Tolerance(atol=1e-9, rtol=1e-9)


def map_caller(manifold: Manifold, method: str) -> Callable:
    """The public map as a function of its array arguments (``random_tangent`` seeded)."""
    if method == "random_tangent":
        return lambda x: manifold.random_tangent(x, rng=0)
    return getattr(manifold, method)


def _outcome(call: Callable, args: Sequence):
    """``("value", result)`` or ``("error", class)`` for typed errors; others propagate."""
    try:
        return "value", call(*args)
    except RiemflError as exc:
        return "error", type(exc)


def _describe(outcome) -> str:
    kind, what = outcome
    if kind == "error":
        return what.__name__
    if what is None:
        return "None"
    return f"{type(what).__name__}[{what.dtype}] of shape {tuple(what.shape)}"


def _same(manifold, what, got, want, tol: Tolerance) -> None:
    if got[0] != want[0] or (got[0] == "error" and got[1] is not want[1]):
        raise AssertionError(
            f"{manifold.name}.{what}: {_describe(got)}, but the input policy prescribes the "
            f"outcome of the float64 call, {_describe(want)}"
        )
    if got[0] == "error" or want[1] is None:
        return
    a, e = to_numpy(got[1]), to_numpy(want[1])
    finite = np.isfinite(e)
    same = a.shape == e.shape and np.array_equal(np.isfinite(a), finite)
    if same and finite.any():
        err = float(np.max(np.abs(a[finite] - e[finite])))
        same = err <= tol.atol + tol.rtol * max(1.0, float(np.max(np.abs(e[finite]))))
    if not same:
        raise AssertionError(f"{manifold.name}.{what}: the result differs from the float64 call")


def _expect_error(manifold, what, call, args, error: type[RiemflError]) -> None:
    got = _outcome(call, args)
    if got[0] != "error" or not issubclass(got[1], error):
        raise AssertionError(
            f"{manifold.name}.{what}: {_describe(got)}, but the input policy prescribes "
            f"{error.__name__}"
        )


def _replaced(args: Sequence, i: int, value) -> list:
    out = list(args)
    out[i] = value
    return out


def _with_entry(a: np.ndarray, value: float) -> np.ndarray:
    out = np.array(a, dtype=np.float64)
    out.flat[out.size // 2] = value
    return out


def check_bad_input(manifold: Manifold, method: str, args: Sequence, roles: Sequence[str]) -> None:
    """Run every kind of :data:`BAD_INPUT_KINDS` through one map (see the module docstring).

    ``args`` are valid numpy float64 arguments of ``method`` (batched), ``roles`` their roles.
    """
    call = map_caller(manifold, method)
    args = [np.asarray(a, dtype=np.float64) for a in args]
    reference = _outcome(call, args)
    for i, role in enumerate(roles):
        what = f"{method} with {role} #{i}"
        _same(
            manifold,
            f"{what} as a list",
            _outcome(call, _replaced(args, i, args[i].tolist())),
            reference,
            _SAME,
        )
        for dtype in (np.float16, np.complex128)[: 1 if manifold.supports_complex else 2]:
            bad = _replaced(args, i, args[i].astype(dtype))
            _expect_error(manifold, f"{what} in {np.dtype(dtype)}", call, bad, DTypeError)
        for value in (np.nan, np.inf, -np.inf):
            bad = _replaced(args, i, _with_entry(args[i], value))
            # the maps checked through their result compute on the non-finite entry before
            # they refuse it: numpy's "invalid value" warnings are expected there
            with np.errstate(all="ignore"):
                _expect_error(manifold, f"{what} with a {value} entry", call, bad, NonFiniteError)
    _check_integers(manifold, method, call, args)
    _check_empty(manifold, method, call, args, reference)
    if torch_available():
        _check_torch(manifold, method, call, args, roles, reference)


def check_boundary_points(
    manifold: Manifold,
    method: str,
    args: Sequence,
    roles: Sequence[str],
    points: Sequence[np.ndarray],
    convert: Callable = np.asarray,
    skip: Collection[int] = (),
) -> None:
    """Each boundary point in each point argument of one map: a typed error naming the map.

    ``args`` are valid numpy float64 arguments of ``method`` with a leading batch dimension,
    ``roles`` their roles (``"point"``, ``"tangent"``, ``"ambient"``), ``points`` finite single
    points on or beyond the boundary of the manifold, ``convert`` the configuration's
    conversion (numpy or torch, float64 or float32) and ``skip`` the positions of point
    arguments the map does not read (the first point of a projection transport, say).
    ``check_point`` must refuse each point (:class:`~riemfl.errors.NotOnManifoldError`). Each
    point replaces batch element 1 of one argument of role ``"point"`` (of ``"ambient"`` for
    ``project``) at a time, the other elements and arguments staying valid, and the map must
    raise
    :class:`~riemfl.errors.NotOnManifoldError` whose message names the map
    (``Manifold.method``) and that is not a :class:`~riemfl.errors.NonFiniteError` (the
    arguments are finite); ``project`` must raise a typed error
    (:class:`~riemfl.errors.RiemflError`).
    """
    call = map_caller(manifold, method)
    for j, b in enumerate(points):
        check = (manifold.check_point, [convert(b)])
        _expect_error(manifold, f"check_point of boundary point #{j}", *check, NotOnManifoldError)
    for what, bad_args in boundary_arguments(method, args, roles, points, skip):
        try:
            with np.errstate(all="ignore"):  # numpy's warnings on the way to the error
                got = call(*[convert(a) for a in bad_args])
        except RiemflError as exc:
            _judge_boundary_error(manifold, method, what, exc)
            continue
        kind = "finite" if got is None or np.isfinite(to_numpy(got)).all() else "NON-FINITE"
        expected = "a typed error" if method == "project" else "NotOnManifoldError"
        raise AssertionError(
            f"{manifold.name}.{what}: a {kind} {_describe(('value', got))}; expected "
            f"{expected} naming the map and the boundary"
        )


def boundary_arguments(
    method: str,
    args: Sequence,
    roles: Sequence[str],
    points: Sequence[np.ndarray],
    skip: Collection[int] = (),
) -> Iterator[tuple[str, list[np.ndarray]]]:
    """``(what, arguments)``: ``args`` (numpy float64 copies) with one boundary point of
    ``points`` in batch element 1 of one argument of role ``"point"`` (``"ambient"`` for
    ``project``) at a time, the positions ``skip`` left out; ``what`` names the case."""
    args = [np.asarray(a, dtype=np.float64) for a in args]
    want = "ambient" if method == "project" else "point"
    for j, b in enumerate(points):
        for i, role in enumerate(roles):
            if role != want or i in skip:
                continue
            bad = np.array(args[i])
            bad[min(1, len(bad) - 1)] = b
            what = f"{method} with boundary point #{j} as {role} #{i} (batch element 1)"
            yield what, _replaced(args, i, bad)


def _judge_boundary_error(manifold, method: str, what: str, exc: RiemflError) -> None:
    if method == "project":  # any typed error: the open set has no nearest point there
        return
    name = f"{manifold.name}.{method}"
    if not isinstance(exc, NotOnManifoldError) or isinstance(exc, NonFiniteError):
        raise AssertionError(
            f"{manifold.name}.{what}: {type(exc).__name__} ({exc}); expected NotOnManifoldError "
            f"naming the map and the boundary (not NonFiniteError: the arguments are finite)"
        ) from exc
    if name not in str(exc):
        raise AssertionError(
            f"{manifold.name}.{what}: the NotOnManifoldError does not name the map {name}: {exc}"
        ) from exc


def _check_integers(manifold, method, call, args) -> None:
    rounded = [np.rint(a) for a in args]
    with np.errstate(all="ignore"):  # rounded points are off M: overflow and 0/0 are expected
        got = _outcome(call, [a.astype(np.int64) for a in rounded])
        want = _outcome(call, rounded)
    _same(manifold, f"{method} on integers", got, want, _SAME)
    if got[0] == "value" and got[1] is not None and got[1].dtype != np.float64:
        raise AssertionError(
            f"{manifold.name}.{method}: integer input gave {got[1].dtype}; the input policy "
            f"promotes integers to float64"
        )


def _check_empty(manifold, method, call, args, reference) -> None:
    if reference[0] == "error":
        return
    got = _outcome(call, [a[:0] for a in args])
    if reference[1] is None:
        ok = got[0] == "value" and got[1] is None
        want = "None"
    else:
        shape = (0,) + tuple(reference[1].shape[1:])
        ok = got[0] == "value" and tuple(got[1].shape) == shape and got[1].dtype == np.float64
        want = f"an empty float64 result of shape {shape}"
    if not ok:
        raise AssertionError(
            f"{manifold.name}.{method} with an empty batch: {_describe(got)}; expected {want}"
        )


def _check_torch(manifold, method, call, args, roles, reference) -> None:
    import torch

    for i, role in enumerate(roles):
        mixed = _replaced(args, i, torch.as_tensor(args[i]))
        got = _outcome(call, mixed)
        if got[0] == "value" and got[1] is not None and not is_torch(got[1]):
            raise AssertionError(
                f"{manifold.name}.{method} with {role} #{i} a tensor, the others numpy: "
                f"{_describe(got)}; the input policy makes it a torch call"
            )
        _same(manifold, f"{method} with {role} #{i} a torch tensor", got, reference, _BACKENDS)
        tensors = [torch.as_tensor(a) for a in args]
        low = (torch.float16, torch.bfloat16, torch.complex128)
        for dtype in low[: 2 if manifold.supports_complex else 3]:
            bad = _replaced(tensors, i, tensors[i].to(dtype))
            what = f"{method} with {role} #{i} in torch {dtype}"
            _expect_error(manifold, what, call, bad, DTypeError)

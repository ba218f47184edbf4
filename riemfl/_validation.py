"""Checks of scalar parameters, in one place: integers and real numbers within bounds.

Every constructor and function of riemfl that takes a count, a size, a rate or a tolerance checks
it here, so the rules (``bool`` is not an integer; numpy scalars are accepted; a real number must
be finite) and the wording of the error are the same everywhere. Each check returns the value
converted to a Python ``int`` or ``float`` and raises :class:`~riemfl.errors.ParameterError`
naming the parameter, the bound and the value received.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from .errors import ParameterError

__all__ = ["is_int", "is_real", "integer", "real", "optional"]

_T = TypeVar("_T")


def is_int(value: Any) -> bool:
    """True for Python and numpy integers; ``bool`` is excluded."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_real(value: Any) -> bool:
    """True for Python and numpy integers and floats that are finite; ``bool`` is excluded."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        return False
    return math.isfinite(value)


def _bounds(
    low: float | None, high: float | None, low_open: bool = False, high_open: bool = False
) -> str:
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low}")
    if high is not None:
        parts.append(f"{'<' if high_open else '<='} {high}")
    return " and ".join(parts)


def integer(value: Any, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an ``int`` after checking ``minimum <= value <= maximum``.

    Parameters
    ----------
    value
        What the caller passed.
    name
        How the error names the parameter, with its owner, e.g. ``"Sphere(n): n"``.
    minimum, maximum
        Inclusive bounds; ``None`` leaves that side open.

    Raises
    ------
    ParameterError
        ``value`` is not an integer (``bool`` included) or lies outside the bounds.
    """
    inside = is_int(value) and (minimum is None or value >= minimum)
    inside = inside and (maximum is None or value <= maximum)
    if not inside:
        bound = _bounds(minimum, maximum)
        raise ParameterError(
            f"{name} must be an integer{' ' + bound if bound else ''}, got {value!r}"
        )
    return int(value)


def real(
    value: Any,
    name: str,
    *,
    above: float | None = None,
    at_least: float | None = None,
    below: float | None = None,
    at_most: float | None = None,
) -> float:
    """``value`` as a finite ``float`` after checking its bounds.

    Parameters
    ----------
    value
        What the caller passed.
    name
        How the error names the parameter, with its owner, e.g. ``"Lorentz: beta"``.
    above, at_least
        Strict and inclusive lower bound (give at most one).
    below, at_most
        Strict and inclusive upper bound (give at most one).

    Raises
    ------
    ParameterError
        ``value`` is not a finite real number (``bool`` included) or lies outside the bounds.
    """
    low, low_open = (above, True) if above is not None else (at_least, False)
    high, high_open = (below, True) if below is not None else (at_most, False)
    inside = is_real(value)
    if inside and low is not None:
        inside = value > low if low_open else value >= low
    if inside and high is not None:
        inside = value < high if high_open else value <= high
    if not inside:
        bound = _bounds(low, high, low_open, high_open)
        raise ParameterError(
            f"{name} must be a finite number{' ' + bound if bound else ''}, got {value!r}"
        )
    return float(value)


def optional(
    check: Callable[..., _T], value: Any, name: str, *args: Any, **bounds: Any
) -> _T | None:
    """``None`` when ``value`` is ``None``, else ``check(value, name, *args, **bounds)``.

    For the parameters whose ``None`` means "not set", e.g.
    ``optional(real, tol, "BirkhoffPolytope: tol", above=0, below=1)``.
    """
    return None if value is None else check(value, name, *args, **bounds)

"""Taylor-slope fitting: the order of a remainder from the slope of its log-log plot over a
fixed set of small steps, above the rounding floor."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..manifolds.base import Manifold
from .config import to_numpy

__all__ = [
    "TAYLOR_TS",
    "taylor_slope",
    "fitted_slope",
    "check_slope",
]


def taylor_slope(ts: np.ndarray, errors: np.ndarray, floor: float) -> float | None:
    """Slope of ``log(error)`` against ``log(t)``, fitted where the error is above ``floor``.

    Returns None when fewer than three errors are above the noise floor (the map is exact to
    rounding along this curve, i.e. of higher order than any slope test could show).
    """
    mask = errors > floor
    if mask.sum() < 3:
        return None
    return float(np.polyfit(np.log(ts[mask]), np.log(errors[mask]), 1)[0])


#: the steps t of every Taylor-slope fit of the checks
TAYLOR_TS = np.logspace(-3.5, -1.5, 9)


def fitted_slope(errors, x, scale: float = 0.0, window: int = 0) -> float | None:
    """:func:`taylor_slope` over :data:`TAYLOR_TS` above the rounding floor, which the size of
    ``x`` or ``scale`` sets (whichever is larger); with ``window``, over that many of the
    smallest steps above the floor only."""
    size = max(1.0, float(np.max(np.abs(to_numpy(x)))), scale)
    floor = 1e3 * np.finfo(np.float64).eps * size
    ts = TAYLOR_TS
    if window:
        kept = np.flatnonzero(errors > floor)[:window]
        ts, errors = ts[kept], errors[kept]
    return taylor_slope(ts, errors, floor)


def _norms(vectors: Sequence[np.ndarray]) -> np.ndarray:
    return np.array([float(np.sqrt(np.sum(v * v))) for v in vectors])


def check_slope(
    manifold: Manifold, remainder: Callable[[float], np.ndarray], x, order: float, what: str
) -> None:
    r"""Assert that the Taylor remainder :math:`r(t)` (a vector) is :math:`O(t^p)`, p = ``order``.

    First the slope of :math:`\|r(t)\|` over :data:`TAYLOR_TS`, which passes at >= p - 0.25
    (the fit's noise). That fit assumes the lowest term dominates over all the steps, which fails
    where its coefficient is small beside the next one's. Beside the inflection point of a
    curve, the normal remainder of its exp, :math:`\tfrac12\kappa t^2 + \tfrac16\kappa' t^3 +
    \dots` (unit speed), vanishes near :math:`t = -3\kappa/\kappa'`, inside the steps, and the
    tangential one, :math:`-\tfrac16\kappa^2 t^3 - \tfrac18\kappa\kappa' t^4 - \tfrac1{40}
    \kappa'^2 t^5 + \dots` (to leading order in a small :math:`\kappa`, with :math:`\kappa''`
    neglected), dips 16-fold near :math:`t = -2.5\kappa/\kappa'`: the fit gives a slope below
    p for remainders exact to rounding. Terms of consecutive degree have opposite parity, so the
    check then splits r into its even and odd parts, :math:`(r(t) \pm r(-t))/2`, each a series
    in every other power of t (the terms that cancelled sit in different parts), and passes if
    each part's slope, fitted over the four smallest steps above rounding, is >= p - 0.25. A
    term of degree k < p lies in the part of k's parity and gives it slope k, so a map that is
    not of order p fails the fit of the part as it fails that of the whole. A part can cancel
    within itself only where its lowest coefficient is below :math:`t^2 \le 10^{-3}` times the
    next over the steps.

    The floor of :func:`fitted_slope`, :math:`10^3\,\varepsilon\max(1, |x|)`: each
    :math:`r(\pm t)` is a difference of computed points, accurate to a few
    :math:`\varepsilon\,|x|` for a backward-stable map (the cubic Bezier graph's: 4
    :math:`\varepsilon\,|x|` against a 40-digit reference), and so are the half sum and
    difference; the floor leaves a margin of 100 or more above that.
    """
    plus = [remainder(t) for t in TAYLOR_TS]
    errors = _norms(plus)
    slope = fitted_slope(errors, x)
    if slope is None or slope >= order - 0.25:
        return
    minus = [remainder(-t) for t in TAYLOR_TS]
    parts = {
        "even": _norms([(p + m) / 2 for p, m in zip(plus, minus, strict=True)]),
        "odd": _norms([(p - m) / 2 for p, m in zip(plus, minus, strict=True)]),
    }
    slopes = {name: fitted_slope(part, x, window=4) for name, part in parts.items()}
    failed = {name: s for name, s in slopes.items() if s is not None and s < order - 0.25}
    if failed:
        raise AssertionError(
            f"{manifold.name}: {what}: Taylor slope {slope:.2f} < {order} "
            f"(errors {errors[0]:.2e} .. {errors[-1]:.2e}); slope of its "
            + ", ".join(f"{name} part {s:.2f}" for name, s in failed.items())
        )

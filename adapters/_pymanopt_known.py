"""What pymanopt 2.2.1 computes exactly, per class: the table behind ``from_pymanopt``.

For each pymanopt class, each map of :data:`~riemfl.adapters._lazy.EXACT_MAPS` but
``project`` (pymanopt has no metric projection): ``""`` where pymanopt's method computes the
map exactly in riemfl's sense, else why not. Measured against riemfl's exact maps in
``tests/adapters/test_pymanopt_known.py``: "exact" means agreement to rounding, also at
distance :math:`10^{-7}`, where an ``arccos``/``arccosh`` of a number near 1 loses half the
digits.
"""

from __future__ import annotations

from typing import Any

from riemfl.adapters._lazy import EXACT_MAPS

__all__ = ["KNOWN", "known_for"]

_PROJECTION = "pymanopt's transport is the projection onto T_y M, not parallel transport"
_IDENTITY = "pymanopt's transport is the identity (a transporter), not parallel transport"
_NO_INVERSE = "pymanopt's {cls} has no inverse of its retraction (its log inverts exp)"
_FLAT = {m: "" for m in EXACT_MAPS if m != "project"}


def _arccos(cls: str, what: str) -> str:
    return (
        f"pymanopt's {cls}.{what} goes through arccos of an inner product near 1, which loses "
        "half the digits for close points (relative errors near 1e-2 at distance 1e-7)"
    )


#: pymanopt class name -> {map: "" (exact) or why not}
KNOWN: dict[str, dict[str, str]] = {
    "Euclidean": dict(_FLAT),
    "Symmetric": dict(_FLAT),
    "SkewSymmetric": dict(_FLAT),
    "Sphere": {
        "exp": "",
        "log": "pymanopt's Sphere.log scales by dist, which inherits its error",
        "dist": _arccos("Sphere", "dist"),
        "parallel_transport": _PROJECTION,
        "inverse_retract": _NO_INVERSE.format(cls="Sphere"),
    },
    "Oblique": {
        "exp": "",
        "log": _arccos("Oblique", "log") + ", and adds eps to numerator and denominator",
        "dist": _arccos("Oblique", "dist"),
        "parallel_transport": _PROJECTION,
        "inverse_retract": _NO_INVERSE.format(cls="Oblique"),
    },
    "Stiefel": {
        "exp": "",
        "log": "pymanopt's Stiefel has no log",
        "dist": "pymanopt's Stiefel has no dist",
        "parallel_transport": _PROJECTION,
        "inverse_retract": _NO_INVERSE.format(cls="Stiefel"),
    },
    "Grassmann": {
        "exp": "",
        "log": "",  # arctan of the singular values: accurate for close points too
        "dist": _arccos("Grassmann", "dist") + " (the principal angles by arccos of singular "
        "values)",
        "parallel_transport": _PROJECTION,
        "inverse_retract": _NO_INVERSE.format(cls="Grassmann"),
    },
    "SymmetricPositiveDefinite": {
        "exp": "",
        "log": "",
        "dist": "",
        "parallel_transport": _IDENTITY,
        "inverse_retract": "pymanopt's retraction is the second-order X + U + U X^-1 U / 2, "
        "which its log (the inverse of exp) does not invert",
    },
    "SpecialOrthogonalGroup": {
        "exp": "",
        "log": "",
        "dist": "",
        "parallel_transport": "pymanopt's transport keeps the Lie-algebra element (U = X Omega "
        "-> Y Omega, a left translation), not parallel transport (Y E^T Omega E)",
        "inverse_retract": _NO_INVERSE.format(cls="SpecialOrthogonalGroup"),
    },
    "Positive": {
        "exp": "",
        "log": "",
        "dist": "",
        "parallel_transport": "pymanopt's Positive transports by the identity unless built "
        "with use_parallel_transport=True",
        "inverse_retract": "pymanopt's retraction is the second-order X + U + U^2 / (2X), which "
        "its log (the inverse of exp) does not invert",
    },
    "PSDFixedRank": {
        "exp": "",  # Y + U: a horizontal line (Massart & Absil 2020)
        "log": "",  # Procrustes alignment
        "dist": "",
        "parallel_transport": _PROJECTION.replace("the projection", "the horizontal projection"),
        "inverse_retract": "",  # the retraction is exp
    },
    "Elliptope": {
        "exp": "pymanopt's Elliptope.exp is its retraction (row normalisation of Y + U), not "
        "the exponential map; moreover its projection is not the horizontal projection "
        "(Y^T U is not symmetric after it, and applying it twice changes the result)",
        "log": "pymanopt's Elliptope has no log",
        "dist": "pymanopt's Elliptope has no dist",
        "parallel_transport": _PROJECTION,
        "inverse_retract": _NO_INVERSE.format(cls="Elliptope"),
    },
    "PoincareBall": {
        "exp": "",
        "log": "",
        "dist": "pymanopt's PoincareBall.dist is arccosh(1 + 2|x - y|^2 / ...), which loses "
        "half the digits for close points (relative errors near 1e-2 at distance 1e-7)",
        "parallel_transport": "pymanopt's PoincareBall has no transport",
        "inverse_retract": "",  # the retraction is exp
    },
}


def known_for(manifold: Any) -> dict[str, dict[str, str]]:
    """:data:`KNOWN`, with the entries that depend on how the instance was built."""
    kind = type(manifold).__name__
    if kind == "Positive" and getattr(manifold, "_transport", None) is not None:
        if manifold._transport.__func__ is type(manifold)._parallel_transport:
            return {**KNOWN, kind: {**KNOWN[kind], "parallel_transport": ""}}
    return KNOWN

"""What riemfl knows of geoopt's own classes, per map: the table behind ``from_geoopt``.

For each geoopt class, each map of :data:`~riemfl.adapters._lazy.EXACT_MAPS`: ``""`` where
geoopt's method computes the map exactly in riemfl's sense, else why not (the reason riemfl's
conformance kit reports when it skips the map). Measured in ``tests/adapters``; the module
docstring of :mod:`riemfl.adapters.geoopt` lists the differences.
"""

from __future__ import annotations

from riemfl.adapters._lazy import EXACT_MAPS

__all__ = ["KNOWN"]

_FLOOR = (
    "geoopt.Sphere.dist clamps <x, y> to 1 - eps, so distances below arccos(1 - eps) (4.5e-4 "
    "in float64, 1.4e-2 in float32) come back as that floor"
)
_CLAMP = (
    "geoopt.Lorentz clamps the Minkowski norm at 1e-4 (<u, u>_L at 1e-8), so {} is wrong for "
    "tangent norms and distances below 1e-4"
)
_PROJECTION_TRANSP = "geoopt's transp is the projection onto T_y M, not parallel transport"
#: what riemfl knows of geoopt's own classes, per map: "" where it is exact, else why not
KNOWN: dict[str, dict[str, str]] = {
    "Euclidean": dict.fromkeys(EXACT_MAPS, ""),
    "Sphere": {
        "project": "",
        "exp": "",
        "log": _FLOOR + ", and logmap inherits it",
        "dist": _FLOOR,
        "parallel_transport": _PROJECTION_TRANSP,
        "inverse_retract": "geoopt.Sphere has no inverse of its retraction",
    },
    "EuclideanStiefel": {
        "project": "",
        "exp": "",
        "log": "geoopt.EuclideanStiefel has no logmap",
        "dist": "geoopt.EuclideanStiefel has no dist",
        "parallel_transport": _PROJECTION_TRANSP,
        "inverse_retract": "geoopt.EuclideanStiefel has no inverse of its retraction",
    },
    "CanonicalStiefel": {
        "project": "",
        "exp": "geoopt.CanonicalStiefel.expmap is the Cayley retraction, not the exponential map",
        "log": "geoopt.CanonicalStiefel has no logmap",
        "dist": "geoopt.CanonicalStiefel has no dist",
    },
    "Lorentz": {
        "project": "geoopt.Lorentz.projx is the lift x_0 = sqrt(k + |x_1:|^2), not the metric "
        "projection",
        "exp": _CLAMP.format("expmap"),
        "log": _CLAMP.format("logmap"),
        "dist": "geoopt.Lorentz.dist is arccosh(-<x, y>_L / k), which loses half the digits for "
        "close points",
        "parallel_transport": _CLAMP.format("transp"),
        "inverse_retract": _CLAMP.format("logmap"),
    },
}
_BALL_CANCELS = (
    "geoopt.PoincareBall.{} takes artanh(sqrt(c)|-x (+) y|), which cancels near the boundary: "
    "relative error 0.15 at radius 1 - 1e-4 (float64 and float32), 4e-3 at 1 - 1e-3 (float32)"
)
KNOWN["PoincareBall"] = {
    "project": "geoopt.PoincareBall.projx clamps onto the radius (1 - 1e-5)/sqrt(c) in float64, "
    "(1 - 4e-3)/sqrt(c) in float32, moving points of the ball; the open ball has no nearest point "
    "outside it",
    "exp": "geoopt.PoincareBall.expmap clamps its result onto that radius: points beyond "
    "hyperbolic distance 6.2/sqrt(c) from the origin (float32; 12.2/sqrt(c) in float64) come "
    "back at that distance",
    "log": _BALL_CANCELS.format("logmap"),
    "dist": _BALL_CANCELS.format("dist"),
    "parallel_transport": "",
    "inverse_retract": "geoopt.PoincareBall.retr is x + u (clamped), which logmap does not invert",
}
KNOWN["PoincareBallExact"] = {
    **KNOWN["PoincareBall"],
    "inverse_retract": _BALL_CANCELS.format("logmap") + " (its retr is expmap)",
}
KNOWN["SymmetricPositiveDefinite"] = {
    "project": "geoopt.SymmetricPositiveDefinite.projx replaces the eigenvalues of sym(a) by "
    "their absolute values, which is not the nearest point for an indefinite sym(a) (the open "
    "cone has none)",
    "exp": "",
    "log": "",
    "dist": "",
    "parallel_transport": "",
    "inverse_retract": "geoopt.SymmetricPositiveDefinite.retr is X + U + U X^-1 U / 2, which "
    "its logmap does not invert",
}
KNOWN["BirkhoffPolytope"] = {
    "project": "geoopt.BirkhoffPolytope.projx stops Sinkhorn at tol (default 1e-5: column sums "
    "off by 4e-6) and adds eps (1e-12) to its denominators; built with tol=1e-13, eps=0 it is "
    "riemfl's Sinkhorn (KL) projection to rounding: pass exact=['project']",
    "exp": "geoopt.BirkhoffPolytope.expmap is its retraction (the Fisher geodesics have no "
    "closed form)",
    "log": "geoopt.BirkhoffPolytope has no logmap",
    "dist": "geoopt.BirkhoffPolytope has no dist",
    "parallel_transport": "geoopt.BirkhoffPolytope.transp is Pi_Y(v * y), not parallel transport",
    "inverse_retract": "geoopt.BirkhoffPolytope has no inverse of its retraction",
}
KNOWN["SphereExact"] = KNOWN["Sphere"]
KNOWN["EuclideanStiefelExact"] = KNOWN["EuclideanStiefel"]

"""The stand-ins for geoopt's classes that :func:`~riemfl.adapters.geoopt.to_geoopt` returns.

A riemfl manifold with a geoopt counterpart gets ``Geoopt`` + that class's name
(``GeooptPoincareBall``, ...): its API mixin from :mod:`riemfl.adapters.geoopt_api` on the
generic ``GeooptManifold``, with the geoopt class's ``__scaling__`` table. Each is built on first
use (:data:`PEER_CLASSES`) and belongs to :mod:`riemfl.adapters.geoopt`; :func:`peer_name`
picks the stand-in of a riemfl manifold.
"""

from __future__ import annotations

import inspect
from typing import Any

from riemfl.adapters._geoopt_manifold import GEOOPT_MANIFOLD, PUBLIC_MODULE, require_geoopt
from riemfl.adapters._lazy import LazyClass

from riemfl.manifolds.base import Manifold

__all__ = ["PEER_CLASSES", "peer_name"]

#: riemfl manifold with a geoopt counterpart -> (adapter class: "Geoopt" + the geoopt class's
#: name, its API mixin in geoopt_api); the canonical-metric Stiefel is keyed by its metric
_PEERS: dict[str, tuple[str, str]] = {
    "Euclidean": ("GeooptEuclidean", "EuclideanAPI"),
    "Sphere": ("GeooptSphere", "SphereAPI"),
    "Stiefel": ("GeooptEuclideanStiefel", "StiefelAPI"),
    "Stiefel-canonical": ("GeooptCanonicalStiefel", "CanonicalStiefelAPI"),
    "Lorentz": ("GeooptLorentz", "LorentzAPI"),
    "PoincareBall": ("GeooptPoincareBall", "PoincareBallAPI"),
    "SPD": ("GeooptSymmetricPositiveDefinite", "SPDAPI"),
    "BirkhoffPolytope": ("GeooptBirkhoffPolytope", "BirkhoffPolytopeAPI"),
}
#: stand-ins that geoopt's isinstance checks accept as a subclass of one of its classes (a
#: virtual subclass: the stand-in has that class's whole API): StereographicProductManifold
#: takes only Stereographic factors
_VIRTUAL_BASES = {"GeooptPoincareBall": "Stereographic"}


def _build_peer(name: str, mixin: str) -> Any:
    def build() -> type:
        geoopt = require_geoopt(f"riemfl.adapters.geoopt.{name}")
        from riemfl.adapters import geoopt_api

        peer = getattr(geoopt, name[len("Geoopt") :])
        cls = type(mixin, (getattr(geoopt_api, mixin), GEOOPT_MANIFOLD.get()), {})
        cls.__scaling__ = _scaling_table(peer, cls)
        if name in _VIRTUAL_BASES:
            getattr(geoopt, _VIRTUAL_BASES[name]).register(cls)
        return cls

    return build


def _scaling_table(peer: type, cls: type) -> Any:
    """geoopt's ``__scaling__`` table of the peer class, for ``geoopt.Scaled``: how each method
    scales with the radius (the stand-in's methods have the peer's names and parameters).
    A method whose scaled parameter the stand-in's method lacks (its own sampler in place of
    geoopt's ``random``) is marked ``NotCompatible``: ``Scaled`` then raises
    ``NotImplementedError`` for it."""
    from geoopt.manifolds.base import ScalingInfo

    table = peer.__scaling__.copy()
    for method, info in table.items():
        if info is ScalingInfo.NotCompatible:
            continue
        accepted = inspect.signature(getattr(cls, method)).parameters
        if any(k not in accepted for k in info.kwargs):
            table[method] = ScalingInfo.NotCompatible
    return table


PEER_CLASSES = {
    name: LazyClass(PUBLIC_MODULE, name, _build_peer(name, mixin))
    for name, mixin in _PEERS.values()
}


def peer_name(manifold: Manifold) -> str | None:
    """The adapter class name for a riemfl manifold with a geoopt counterpart, else None."""
    from riemfl.manifolds import (
        SPD,
        BirkhoffPolytope,
        Euclidean,
        Lorentz,
        PoincareBall,
        Sphere,
        Stiefel,
    )

    kinds = (Euclidean, Sphere, Stiefel, Lorentz, PoincareBall, SPD, BirkhoffPolytope)
    for kind in kinds:
        if type(manifold) is kind:
            if kind is SPD and manifold.metric != "affine-invariant":
                return None  # geoopt implements only the affine-invariant metric ("AIM")
            if kind is Stiefel and manifold.metric == "canonical":
                return _PEERS["Stiefel-canonical"][0]
            return _PEERS[kind.__name__][0]
    return None

"""``riemfl manifolds``: the manifolds riemfl ships, their constants and a self-check.

The families and their example instances come from :mod:`riemfl.manifolds.catalogue`;
``--markdown`` prints the catalogue's table as it stands in the README and ``docs/manifolds.md``.
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from ..manifolds.base import Manifold
from ..manifolds.catalogue import examples, markdown_table

__all__ = ["describe", "print_manifolds", "MAPS"]

#: the optional maps whose availability the table shows
MAPS = ("project", "inverse_retract", "exp", "log", "parallel_transport")


def _constant(manifold: Manifold, name: str) -> float | None:
    try:
        return float(getattr(manifold, name))
    except NotImplementedError:
        return None


def describe(manifold: Manifold, seed: int = 0) -> dict:
    """Constants, capabilities and a measured round-trip error of one manifold.

    Eight random points ``x`` and tangent vectors ``u`` of norm 0.5 (seeded by ``seed``): the
    constraint violation of ``retract(x, u)`` and, where exp and log exist,
    ``max |log(x, exp(x, u)) - u|``.
    """
    rng = np.random.default_rng(seed)
    x = manifold.random_point(8, rng=rng)
    u = manifold.random_tangent(x, rng=rng)
    u = u * np.reshape(0.5 / np.maximum(manifold.norm(x, u), 1e-300), (8,) + (1,) * manifold.ndim)
    record = {
        "manifold": manifold.name,
        "dim": manifold.dim,
        "point_shape": list(manifold.point_shape),
        "reach": _constant(manifold, "reach"),
        "diameter": _constant(manifold, "diameter"),
        "injectivity_radius": _constant(manifold, "injectivity_radius"),
        "maps": {name: manifold.supports(name)[0] for name in MAPS},
    }
    y = manifold.retract(x, u)
    record["retraction_constraint_error"] = manifold.point_violation(y)[1]
    if record["maps"]["exp"] and record["maps"]["log"]:
        err = np.max(np.abs(manifold.log(x, manifold.exp(x, u)) - u))
        record["exp_log_roundtrip_error"] = float(err)
    return record


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:.4g}"


def print_manifolds(args: argparse.Namespace) -> int:
    """Print the self-check table (or, with ``--markdown``, the catalogue's markdown table)."""
    if args.markdown:
        print(markdown_table())
        return 0
    rows = [describe(m, seed=args.seed) for m in examples()]
    header = (
        f"{'manifold':<34} {'dim':>5} {'reach':>7} {'diam':>7} {'inj':>7}  "
        f"{'maps (P inv exp log PT)':<24} {'|log(exp u)-u|':>15}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        maps = " ".join("y" if r["maps"][k] else "-" for k in MAPS)
        roundtrip = r.get("exp_log_roundtrip_error")
        print(
            f"{r['manifold'][:34]:<34} {r['dim']:>5} {_fmt(r['reach']):>7} "
            f"{_fmt(r['diameter']):>7} {_fmt(r['injectivity_radius']):>7}  {maps:<24} "
            f"{_fmt(roundtrip):>15}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)
        print(f"wrote {args.json}")
    return 0

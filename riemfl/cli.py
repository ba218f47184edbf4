"""The ``riemfl`` command (also ``python -m riemfl``).

Until the federated reproductions land, the command describes the manifolds riemfl ships: for
each one its dimension, its constants (proximal smoothness, diameter, injectivity radius), the
maps it implements, and a measured self-check (exp/log round trip and retraction error on random
data). ``--json PATH`` also writes the table as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence

import numpy as np

from .manifolds import Euclidean, Grassmann, Lorentz, Manifold, Product, Sphere, Stiefel

__all__ = ["main", "describe", "EXAMPLES"]

#: one representative instance per manifold family
EXAMPLES: tuple[Manifold, ...] = (
    Euclidean(5, 2),
    Sphere(10),
    Stiefel(20, 5),
    Stiefel(20, 5, retraction="qr"),
    Grassmann(20, 5),
    Lorentz(10),
    Product(Sphere(3), Stiefel(6, 2)),
)

_MAPS = ("project", "inverse_retract", "exp", "log", "parallel_transport")


def _constant(manifold: Manifold, name: str) -> float | None:
    try:
        return float(getattr(manifold, name))
    except NotImplementedError:
        return None


def describe(manifold: Manifold, seed: int = 0) -> dict:
    """Constants, capabilities and a measured round-trip error of one manifold."""
    rng = np.random.default_rng(seed)
    x = manifold.random_point(8, rng=rng)
    u = manifold.random_tangent(x, rng=rng)
    u = u * np.reshape(0.5 / np.maximum(manifold.norm(x, u), 1e-300), (8,) + (1,) * manifold.ndim)
    record = {
        "manifold": manifold.name,
        "dim": manifold.dim,
        "point_shape": list(manifold.point_shape),
        "proximal_smoothness": _constant(manifold, "proximal_smoothness"),
        "diameter": _constant(manifold, "diameter"),
        "injectivity_radius": _constant(manifold, "injectivity_radius"),
        "maps": {name: manifold.supports(name)[0] for name in _MAPS},
    }
    y = manifold.retract(x, u)
    record["retraction_constraint_error"] = manifold._point_violation(y)[1]
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="riemfl", description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH", help="also write the table as JSON")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    rows = [describe(m, seed=args.seed) for m in EXAMPLES]
    header = (
        f"{'manifold':<34} {'dim':>5} {'reach':>7} {'diam':>7} {'inj':>7}  "
        f"{'maps (P inv exp log PT)':<24} {'|log(exp u)-u|':>15}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        maps = " ".join("y" if r["maps"][k] else "-" for k in _MAPS)
        roundtrip = r.get("exp_log_roundtrip_error")
        print(
            f"{r['manifold']:<34} {r['dim']:>5} {_fmt(r['proximal_smoothness']):>7} "
            f"{_fmt(r['diameter']):>7} {_fmt(r['injectivity_radius']):>7}  {maps:<24} "
            f"{_fmt(roundtrip):>15}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

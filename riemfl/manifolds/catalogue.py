"""The one list of the manifold families riemfl ships.

Everything that enumerates manifolds reads :data:`FAMILIES`: the package exports
(:mod:`riemfl` and :mod:`riemfl.manifolds`), the self-check table of ``riemfl manifolds``
(:func:`examples`) and the table of the README and of ``docs/manifolds.md`` (printed by
``riemfl manifolds --markdown``; ``tests/manifolds/test_catalogue.py`` checks that all of them
agree). A new manifold is one new :class:`Family` here (see ``docs/architecture.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .base import Manifold
from .bezier import BezierCurve
from .bezier_graph import BezierGraph
from .birkhoff import BirkhoffPolytope
from .control_points import ControlPoints
from .elliptope import Elliptope
from .euclidean import Euclidean
from .fixedrank import FixedRank
from .grassmann import Grassmann
from .lorentz import Lorentz
from .oblique import Oblique
from .poincare import PoincareBall
from .positive import Positive
from .product import Product
from .psd_fixed_rank import PSDFixedRank
from .simplex import Simplex
from .spd import SPD
from .special_orthogonal import SpecialOrthogonal
from .sphere import Sphere
from .stiefel import Stiefel
from .symmetric import SkewSymmetric, Symmetric
from .tunnel import EpsilonTunnel

__all__ = ["Family", "FAMILIES", "examples", "markdown_table", "deferred_reads_markdown"]


@dataclass(frozen=True)
class Family:
    """One manifold family: its class, how it is called and what is exact about it.

    Attributes
    ----------
    cls : type of Manifold
        The class; its ``__name__`` is the exported name.
    signature : str
        The constructor as a user writes it, e.g. ``"Sphere(n)"``.
    exact : str
        What is exact (closed form or exact to rounding), for the tables.
    constants : str
        ``reach / diameter / injectivity_radius`` as formulas, or why one has none.
    examples : tuple of callables
        Factories of representative instances for the self-check of ``riemfl manifolds``
        (factories, so that importing the catalogue builds nothing).
    """

    cls: type[Manifold]
    signature: str
    exact: str
    constants: str
    examples: tuple[Callable[[], Manifold], ...] = ()

    @property
    def name(self) -> str:
        """The exported class name."""
        return self.cls.__name__


def _quadratic_curve() -> BezierCurve:
    """A fixed quadratic Bezier curve in R^3 (for the curve manifolds' examples)."""
    return BezierCurve(np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0], [2.0, 0.0, 0.5]]))


FAMILIES: tuple[Family, ...] = (
    Family(
        Euclidean,
        "Euclidean(*shape)",
        "everything",
        "inf / inf / inf",
        (lambda: Euclidean(5, 2),),
    ),
    Family(
        Sphere,
        "Sphere(n)",
        "exp, log, parallel transport, `P_M(a) = a/\\|a\\|`",
        "1 / 2 / pi",
        (lambda: Sphere(10),),
    ),
    Family(
        Stiefel,
        'Stiefel(n, p, retraction="polar"\\|"qr"\\|"cayley", metric="embedded"\\|"canonical")',
        "polar projection, exp (closed form), inverse polar, QR and Cayley retractions, log "
        "(iterative, with tolerance); canonical metric: exp (closed form), log (Zimmermann's "
        "algorithm, with tolerance), Cayley retraction (second order)",
        "1 / 2 sqrt(p) / pi (canonical: sqrt(4/5) pi, a lower bound)",
        (
            lambda: Stiefel(20, 5),
            lambda: Stiefel(20, 5, retraction="qr"),
            lambda: Stiefel(20, 5, metric="canonical"),
        ),
    ),
    Family(
        Grassmann,
        "Grassmann(n, p)",
        "exp, log, dist (principal angles), parallel transport",
        "1 / (pi/2) sqrt(min(p, n-p)) / pi/2",
        (lambda: Grassmann(20, 5),),
    ),
    Family(
        Lorentz,
        "Lorentz(n, beta)",
        "exp, log, dist, parallel transport, exact Euclidean `project` and the cheap `lift`",
        "sqrt(beta) / inf / inf",
        (lambda: Lorentz(10),),
    ),
    Family(
        PoincareBall,
        "PoincareBall(n, c=1)",
        "exp, log, dist, parallel transport (gyrovector formulas, stable up to the boundary in "
        "float32), Mobius addition, scalar multiplication and gyration, isometries "
        "`to_lorentz`/`from_lorentz` with `Lorentz(n, 1/c)`",
        "local only (`1/sqrt(c) - \\|x\\|`) / 2/sqrt(c) / inf",
        (lambda: PoincareBall(10), lambda: PoincareBall(5, c=0.5)),
    ),
    Family(
        Product,
        "Product(*manifolds)",
        "componentwise, flat packing with `split`/`pack`",
        "min / root-sum-square / min",
        (lambda: Product(Sphere(3), Stiefel(6, 2)),),
    ),
    Family(
        FixedRank,
        "FixedRank(m, n, r)",
        "truncated-SVD `project`, its second-order retraction and that retraction's closed-form "
        "inverse (embedded metric; no exp/log)",
        "local only (`local_reach(X) = sigma_r(X)/sqrt(2)`) / inf / none (not complete)",
        (lambda: FixedRank(20, 10, 3),),
    ),
    Family(
        Simplex,
        "Simplex(C, concentration=1)",
        "Fisher-Rao exp, log, dist and parallel transport (through the sphere `2 sqrt(p)`), "
        "the entropic retraction and its inverse, `project` onto the open simplex",
        "local only (the distance to the boundary) / sqrt(2) / local only",
        # points away from the boundary, so that the exp/log round trip (|u|_p = 0.5) stays inside
        (lambda: Simplex(5, concentration=50),),
    ),
    Family(
        SPD,
        'SPD(n, metric="affine-invariant"\\|"log-euclidean"\\|"bures-wasserstein")',
        "affine-invariant and log-Euclidean: exp, log, dist, parallel transport (affine-invariant: "
        "second-order retraction and its inverse); Bures-Wasserstein: exp (on its domain), log, "
        "dist; `project` onto the open cone",
        "local only (`local_reach(X) = lambda_min(X)`) / inf / inf "
        "(Bures-Wasserstein: local only, `sqrt(lambda_min(X))`)",
        (
            lambda: SPD(5),
            lambda: SPD(5, metric="log-euclidean"),
            lambda: SPD(5, metric="bures-wasserstein"),
        ),
    ),
    Family(
        BezierGraph,
        "BezierGraph(curve)",
        "a learned Bezier curve's image as a 1-D manifold: arc-length exp/log/dist, nearest point",
        "curve reach (exact for quadratics) / inf / inf",
        (lambda: BezierGraph(_quadratic_curve()),),
    ),
    Family(
        ControlPoints,
        "ControlPoints(manifold, n)",
        "`M^n` of control points, `phi(theta) = (theta, ..., theta)` and its inverse",
        "those of M",
        (lambda: ControlPoints(Sphere(3), 3),),
    ),
    Family(
        EpsilonTunnel,
        "EpsilonTunnel(curve, eps)",
        "eps-neighbourhood of a curve: membership, exact projection, sampling, SAM point",
        "reach - eps / chord + 2 eps / -",
        (lambda: EpsilonTunnel(_quadratic_curve(), 0.1),),
    ),
    Family(
        SpecialOrthogonal,
        "SpecialOrthogonal(n)",
        "exp, log (principal; closed forms for n = 2, 3), dist, parallel transport, `project` "
        "(polar factor with the determinant fixed), the polar retraction and its inverse",
        "sqrt(2) / 2 sqrt(2 floor(n/2)) / sqrt(2) pi",
        (lambda: SpecialOrthogonal(3), lambda: SpecialOrthogonal(6)),
    ),
    Family(
        Oblique,
        "Oblique(n, m)",
        "exp, log, dist, parallel transport (the sphere's, column by column), `project` "
        "(column normalisation)",
        "1 / 2 sqrt(m) / pi",
        (lambda: Oblique(10, 4),),
    ),
    Family(
        Symmetric,
        "Symmetric(n)",
        "everything (flat; `project` = `sym`)",
        "inf / inf / inf",
        (lambda: Symmetric(5),),
    ),
    Family(
        SkewSymmetric,
        "SkewSymmetric(n)",
        "everything (flat; `project` = `skew`)",
        "inf / inf / inf",
        (lambda: SkewSymmetric(5),),
    ),
    Family(
        Positive,
        "Positive(*shape)",
        "log metric `<u, v>_x = sum u v / x^2`: exp `x e^(u/x)`, log, dist, parallel transport "
        "(flat in `log x`), `project` onto the open orthant",
        "local only (`local_reach(x) = min x`) / inf / inf",
        (lambda: Positive(5, 2),),
    ),
    Family(
        Elliptope,
        "Elliptope(n, k)",
        "quotient of unit-row n x k factors by O(k): horizontal projection (Lyapunov solve), "
        "row-normalisation retraction (second order), Hessian, `project` (row normalisation); "
        "no exp/log",
        "1 (the total space) / sqrt(2) n (a bound on `\\|C1 - C2\\|_F`) / none (no exp)",
        (lambda: Elliptope(6, 3),),
    ),
    Family(
        PSDFixedRank,
        "PSDFixedRank(n, k)",
        "quotient of full-rank n x k factors by O(k): horizontal projection, exp = retract "
        "`Y + U` (on `Y^T (Y + U) > 0`), log = inverse retract (Procrustes), dist, Hessian; "
        "no parallel transport",
        "local only (`local_reach(Y) = sigma_k(Y)`) / inf / none (not complete)",
        (lambda: PSDFixedRank(6, 2),),
    ),
    Family(
        BirkhoffPolytope,
        "BirkhoffPolytope(n)",
        "Fisher metric `<u, v>_x = sum u v / x`: tangent projection (pseudo-inverse solve), "
        "Riemannian gradient and Hessian, retraction `Sinkhorn(X e^(U/X))`, `project` = "
        "Sinkhorn (KL, not metric); no exp/log",
        "none (`project` is not metric) / sqrt(2n) / none (not complete)",
        (lambda: BirkhoffPolytope(5),),
    ),
)


def examples() -> list[Manifold]:
    """One instance of every example of every family, in catalogue order."""
    return [make() for family in FAMILIES for make in family.examples]


def markdown_table() -> str:
    """The table of the README and ``docs/manifolds.md`` (``riemfl manifolds --markdown``)."""
    lines = [
        "| manifold | what is exact | constants (reach / diameter / injectivity radius) |",
        "|---|---|---|",
    ]
    lines += [f"| `{f.signature}` | {f.exact} | {f.constants} |" for f in FAMILIES]
    return "\n".join(lines)


def deferred_reads_markdown() -> str:
    """The list of ``docs/check-levels.md``: the maps each family lists in
    ``Manifold.deferred_reads`` (they read values at every check level), grouped by reason."""
    lines = []
    for family in FAMILIES:
        if not family.examples:
            continue
        reads = family.examples[0]().deferred_reads
        by_reason: dict[str, list[str]] = {}
        for method, reason in reads.items():
            by_reason.setdefault(reason, []).append(method)
        for reason, methods in by_reason.items():
            listed = ", ".join(f"`{m}`" for m in methods)
            lines.append(f"- `{family.name}`: {listed}: {reason}")
    return "\n".join(lines) if lines else "- (none)"

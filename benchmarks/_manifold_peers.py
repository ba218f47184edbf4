"""The operations of ``bench_manifolds.py`` for the families added after Stiefel, Sphere and
Lorentz, each mapped to the peer methods that compute the same thing.

Every family's builder returns the :class:`Op` rows of one size and batch. A peer method is
listed only where it means what riemfl's map means (the benchmark checks that the outputs agree);
where a peer's method of the same name means something else the row says so in ``note``:

* ``SPD``: the affine-invariant metric (riemfl's default) against pymanopt
  ``SymmetricPositiveDefinite(n)`` and geoopt ``SymmetricPositiveDefinite()``, whose default
  metric is the affine-invariant one ("AIM") too. geoopt's ``projx`` (|eigenvalues|) is not the
  metric projection and is left out; geoopt's ``transp`` is the parallel transport
  (riemfl ``parallel_transport``), pymanopt's ``transport`` the identity (riemfl ``transport``).
* ``PoincareBall(n)``: pymanopt ``PoincareBall(n)`` and geoopt ``PoincareBall()`` (c = 1);
  riemfl's retraction is exp (pymanopt's too), geoopt's ``retr`` is x + u (left out); geoopt
  0.5.1's ``inner(x, u, v)`` keeps the axis of the conformal factor and broadcasts it against
  the reduced product (shape (1,) for one point, (b, b) for a batch), so it is left out.
* ``SpecialOrthogonal(n)``: pymanopt ``SpecialOrthogonalGroup(n, retraction="polar")``, whose
  tangent vectors are the skew factors :math:`\\Omega = X^\\top U` (riemfl's are :math:`X\\Omega`):
  pymanopt gets :math:`\\Omega` as input, and its tangent outputs are multiplied by X before the
  comparison (not in the timed call). pymanopt's ``transport`` (:math:`X\\Omega \\mapsto
  Y\\Omega`) is neither riemfl's transport nor its parallel transport, and is left out.
* ``Oblique(n, m)``: pymanopt ``Oblique(n, m)``; both are n x m matrices with unit-norm
  *columns*, so no transposition is needed.
* ``Positive(m, n)``: pymanopt ``Positive(m, n, use_parallel_transport=True)`` (riemfl's
  transport is the parallel transport); pymanopt's retraction is second order, riemfl's is exp.
* ``Symmetric(n)``, ``SkewSymmetric(n)``: pymanopt's.
* ``Elliptope(n, k)``, ``PSDFixedRank(n, k)``: pymanopt's; pymanopt's
  ``euclidean_to_riemannian_gradient`` does not remove the vertical part (riemfl's is the
  horizontal projection) and is left out. pymanopt 2.2.1's ``Elliptope.projection`` is not the
  horizontal projection either (its result U has :math:`Y^\top U` not symmetric and the map is
  not idempotent: its Lyapunov right-hand side mixes A and the row-projected A), so of the
  elliptope only ``inner`` and ``retract`` (row normalisation) are compared. pymanopt's
  ``PSDFixedRank`` ``retraction`` and ``exp`` are both ``Y + U`` without a check: where
  ``Y + U`` has rank below k they return a matrix outside the manifold, where riemfl refuses;
  these rows are timed and compared on valid data, but carry ``other_math`` (the benchmark
  reports them apart from its goals).
* ``BirkhoffPolytope(n)``: geoopt ``BirkhoffPolytope()`` (pymanopt has none), with Sinkhorn's
  ``eps`` 0 and its tolerance riemfl's, so that ``projx`` is riemfl's ``project`` (Sinkhorn
  scaling); geoopt's ``proju`` multiplies by X, i.e. it is riemfl's ``egrad_to_rgrad``
  (Fisher metric); its ``inner`` divides by n and its ``transp`` is ``proju`` at y (left out).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from riemfl import (
    SPD,
    BirkhoffPolytope,
    Elliptope,
    Oblique,
    PoincareBall,
    Positive,
    PSDFixedRank,
    SkewSymmetric,
    SpecialOrthogonal,
    Symmetric,
)

try:  # optional peers: a missing one is reported, not fatal
    import geoopt
except ImportError:  # pragma: no cover - depends on the environment
    geoopt = None
try:
    import pymanopt.manifolds as pymanopt_manifolds
except ImportError:  # pragma: no cover - depends on the environment
    pymanopt_manifolds = None

__all__ = ["Op", "FAMILIES", "pymanopt_manifolds", "geoopt"]


@dataclass
class Op:
    """One benchmarked operation (one table row per size and batch).

    ``riemfl`` is called with the arrays named in ``args``; ``pymanopt``/``geoopt`` are the peer's
    single-point callables (or None: no peer), ``pymanopt_batched`` a natively batched pymanopt
    callable (geoopt's single-point callable batches natively). ``geoopt_copies`` lists argument
    positions the geoopt call writes into (they get a private copy). ``pymanopt_args`` names
    pymanopt's inputs where they differ from riemfl's (another representation of the same
    vectors), and ``pymanopt_out(data, out)`` carries pymanopt's (stacked) output into riemfl's
    representation for the agreement check. ``other_math`` maps a peer ("pymanopt" or
    "geoopt") to why its method, though its output agrees on the benchmark's data, computes other
    mathematics than riemfl's map (the benchmark reports such rows apart from its goals).
    """

    name: str
    args: tuple[str, ...]
    riemfl: Callable[..., Any]
    pymanopt: Callable[..., Any] | None = None
    pymanopt_batched: Callable[..., Any] | None = None
    geoopt: Callable[..., Any] | None = None
    pymanopt_name: str | None = None
    geoopt_name: str | None = None
    geoopt_copies: tuple[int, ...] = ()
    note: str = ""
    pymanopt_args: tuple[str, ...] | None = None
    pymanopt_out: Callable[[dict, Any], Any] | None = None
    other_math: dict[str, str] = field(default_factory=dict)


#: riemfl map -> (arguments, pymanopt method); the maps whose pymanopt method has the same meaning
_PM = {
    "to_tangent": (("x", "a"), "projection"),
    "egrad_to_rgrad": (("x", "g"), "euclidean_to_riemannian_gradient"),
    "ehess_to_rhess": (("x", "g", "h", "u"), "euclidean_to_riemannian_hessian"),
    "inner": (("x", "u", "v"), "inner_product"),
    "retract": (("x", "u"), "retraction"),
    "exp": (("x", "u"), "exp"),
    "log": (("x", "y"), "log"),
    "dist": (("x", "y"), "dist"),
    "transport": (("x", "y", "u"), "transport"),
}
#: maps that reduce the point axes: a pymanopt product manifold (k > 1) sums over its factors
_REDUCING = {"inner", "dist"}
#: the riemfl maps' arguments (also for geoopt-only rows)
_ARGS = {
    **{k: v[0] for k, v in _PM.items()},
    "project": ("a",),
    "parallel_transport": ("x", "y", "u"),
}


def _rows(
    rf: Any,
    batch: int,
    pm_class: Callable[..., Any] | None,
    pm_maps: list[str],
    go: Any = None,
    go_maps: dict[str, str] | None = None,
    *,
    batched: bool = False,
    notes: dict[str, str] | None = None,
    pm_args: dict[str, tuple[str, ...]] | None = None,
    pm_out: dict[str, Callable[[dict, Any], Any]] | None = None,
    other_math: dict[str, dict[str, str]] | None = None,
) -> list[Op]:
    """The rows of one family: the maps of ``pm_maps`` (pymanopt) and ``go_maps`` (riemfl map ->
    geoopt method, or a callable), in a fixed order.

    ``pm_class(k)`` builds the pymanopt manifold (k > 1: its product of k copies, used natively
    batched where ``batched``).
    """
    go_maps = go_maps or {}
    notes = notes or {}
    pm = pmb = None
    if pymanopt_manifolds is not None and pm_class is not None and pm_maps:
        pm = pm_class(1)
        if batched and batch > 1:
            pmb = pm_class(batch)
    ops = []
    order = ["project", *_PM, "parallel_transport"]
    for name in order:
        if name not in pm_maps and name not in go_maps:
            continue
        pmf = pmbf = gof = None
        pm_name = go_name = None
        if name in pm_maps and pm is not None:
            pm_name = _PM[name][1]
            pmf = getattr(pm, pm_name)
            if pmb is not None and name not in _REDUCING:
                pmbf = getattr(pmb, pm_name)
        if name in go_maps and go is not None:
            meth = go_maps[name]
            if callable(meth):
                gof, go_name = meth, getattr(meth, "__doc__", None) or meth.__name__
            else:
                gof, go_name = getattr(go, meth), meth
        ops.append(
            Op(
                name,
                _ARGS[name],
                getattr(rf, name),
                pmf,
                pmbf,
                gof,
                pm_name,
                go_name,
                note=notes.get(name, ""),
                pymanopt_args=(pm_args or {}).get(name),
                pymanopt_out=(pm_out or {}).get(name),
                other_math=dict((other_math or {}).get(name, {})),
            )
        )
    return ops


# --------------------------------------------------------------------------------------- families
def _spd_ops(n: int, batch: int) -> list[Op]:
    go = geoopt.SymmetricPositiveDefinite() if geoopt is not None else None
    return _rows(
        SPD(n),
        batch,
        lambda k: pymanopt_manifolds.SymmetricPositiveDefinite(n, k=k),
        ["to_tangent", "egrad_to_rgrad", "ehess_to_rhess", "inner", "retract", "exp", "log"]
        + ["dist", "transport"],
        go,
        {
            "to_tangent": "proju",
            "egrad_to_rgrad": "egrad2rgrad",
            "inner": "inner",
            "retract": "retr",
            "exp": "expmap",
            "log": "logmap",
            "dist": "dist",
            "parallel_transport": "transp",
        },
        batched=True,
        notes={
            "transport": "pymanopt's transport is the identity, as riemfl's",
            "parallel_transport": "geoopt's transp is the parallel transport",
        },
    )


def _poincare_ops(n: int, batch: int) -> list[Op]:
    go = geoopt.PoincareBall(c=1.0) if geoopt is not None else None

    def go_exp(x: Any, u: Any) -> Any:
        """expmap(project=False)"""
        return go.expmap(x, u, project=False)

    return _rows(
        PoincareBall(n),
        batch,
        lambda k: pymanopt_manifolds.PoincareBall(n, k=k),
        ["to_tangent", "egrad_to_rgrad", "ehess_to_rhess", "inner", "retract", "exp", "log"]
        + ["dist"],
        go,
        {
            "to_tangent": "proju",
            "egrad_to_rgrad": "egrad2rgrad",
            "exp": go_exp,
            "log": "logmap",
            "dist": "dist",
            "parallel_transport": "transp",
        },
        batched=True,
        notes={"retract": "riemfl's and pymanopt's retraction are exp; geoopt's retr is x + u"},
    )


def _so_ops(n: int, batch: int) -> list[Op]:
    def embed(data: dict, out: Any) -> Any:
        return data["x"] @ out

    lie = {
        "ehess_to_rhess": ("x", "g", "h", "xu"),
        "inner": ("x", "xu", "xv"),
        "retract": ("x", "xu"),
        "exp": ("x", "xu"),
    }
    return _rows(
        SpecialOrthogonal(n),
        batch,
        lambda k: pymanopt_manifolds.SpecialOrthogonalGroup(n, k=k, retraction="polar"),
        ["to_tangent", "egrad_to_rgrad", "ehess_to_rhess", "inner", "retract", "exp", "log"]
        + ["dist"],
        batched=True,
        pm_args=lie,
        pm_out=dict.fromkeys(["to_tangent", "egrad_to_rgrad", "ehess_to_rhess", "log"], embed),
        notes=dict.fromkeys(
            ["to_tangent", "egrad_to_rgrad", "ehess_to_rhess", "log"],
            "pymanopt returns Omega = X^T U (compared as X Omega)",
        )
        | dict.fromkeys(["inner", "retract", "exp"], "pymanopt takes Omega = X^T U"),
    )


def _oblique_ops(n: int, m: int, batch: int) -> list[Op]:
    return _rows(
        Oblique(n, m),
        batch,
        lambda k: pymanopt_manifolds.Oblique(n, m),
        ["to_tangent", "egrad_to_rgrad", "ehess_to_rhess", "inner", "retract", "exp", "log"]
        + ["dist", "transport"],
    )


def _positive_ops(m: int, n: int, batch: int) -> list[Op]:
    return _rows(
        Positive(m, n),
        batch,
        lambda k: pymanopt_manifolds.Positive(m, n, k=k, use_parallel_transport=True),
        ["to_tangent", "egrad_to_rgrad", "ehess_to_rhess", "inner", "exp", "log", "dist"]
        + ["transport"],
        batched=True,
        notes={"transport": "pymanopt's parallel transport (use_parallel_transport=True)"},
    )


def _linear_ops(cls: type, pm_name: str) -> Callable[[int, int], list[Op]]:
    def build(n: int, batch: int) -> list[Op]:
        return _rows(
            cls(n),
            batch,
            lambda k: getattr(pymanopt_manifolds, pm_name)(n, k=k),
            ["to_tangent", "egrad_to_rgrad", "ehess_to_rhess", "inner", "retract", "exp", "log"]
            + ["dist", "transport"],
            batched=True,
        )

    return build


def _elliptope_ops(n: int, k: int, batch: int) -> list[Op]:
    return _rows(
        Elliptope(n, k),
        batch,
        lambda _: pymanopt_manifolds.Elliptope(n, k),
        ["inner", "retract"],
    )


def _psd_fixed_rank_ops(n: int, k: int, batch: int) -> list[Op]:
    return _rows(
        PSDFixedRank(n, k),
        batch,
        lambda _: pymanopt_manifolds.PSDFixedRank(n, k),
        ["to_tangent", "ehess_to_rhess", "inner", "retract", "exp", "log", "dist", "transport"],
        notes={
            "retract": "riemfl checks that Y + U has rank k; pymanopt does not",
            "exp": "riemfl checks that Y^T (Y + U) is positive definite; pymanopt does not",
        },
        other_math={
            "retract": {
                "pymanopt": "pymanopt's retraction is Y + U unchecked: where Y + U has rank "
                "below k it returns a matrix outside PSDFixedRank(n, k) (riemfl refuses it)"
            },
            "exp": {
                "pymanopt": "pymanopt's exp is its retraction Y + U unchecked: where the segment "
                "Y + tU loses rank it is no geodesic (riemfl refuses it)"
            },
        },
    )


def _birkhoff_ops(n: int, batch: int) -> list[Op]:
    rf = BirkhoffPolytope(n)
    go = None
    if geoopt is not None:
        tol = 100.0 * n * float(np.finfo(np.float64).eps)
        go = geoopt.BirkhoffPolytope(max_iter=1000, tol=tol, eps=0.0)
    ops = _rows(
        rf,
        batch,
        None,
        [],
        go,
        {"egrad_to_rgrad": "egrad2rgrad", "retract": "retr"},
    )
    project = Op(
        "project",
        ("a_pos",),
        rf.project,
        geoopt=go.projx if go is not None else None,
        geoopt_name="projx (Sinkhorn, eps=0)",
        note="both Sinkhorn scaling (the KL projection), not the metric projection",
    )
    return [project, *ops]


#: family -> (sizes of the default run, sizes of the quick run, builder(*size, batch));
#: a size is a tuple of the constructor's integers; size class "large" where its first is >= 100
#: (>= 6 in the quick run, so that its one size per family covers both classes)
FAMILIES: dict[str, tuple[list[tuple[int, ...]], list[tuple[int, ...]], Callable[..., list]]] = {
    "SPD": ([(5,), (100,)], [(4,)], _spd_ops),
    "PoincareBall": ([(10,), (1000,)], [(6,)], _poincare_ops),
    "SpecialOrthogonal": ([(3,), (100,)], [(4,)], _so_ops),
    "Oblique": ([(5, 10), (200, 100)], [(5, 3)], _oblique_ops),
    "Positive": ([(5, 4), (200, 100)], [(4, 3)], _positive_ops),
    "Symmetric": ([(5,), (100,)], [(4,)], _linear_ops(Symmetric, "Symmetric")),
    "SkewSymmetric": ([(5,), (100,)], [(4,)], _linear_ops(SkewSymmetric, "SkewSymmetric")),
    "Elliptope": ([(10, 3), (200, 10)], [(6, 2)], _elliptope_ops),
    "PSDFixedRank": ([(10, 3), (200, 10)], [(6, 2)], _psd_fixed_rank_ops),
    "BirkhoffPolytope": ([(5,), (100,)], [(4,)], _birkhoff_ops),
}

#: the riemfl class of each family (for the data: random points and tangent vectors)
CLASSES: dict[str, Callable[..., Any]] = {
    "SPD": SPD,
    "PoincareBall": PoincareBall,
    "SpecialOrthogonal": SpecialOrthogonal,
    "Oblique": Oblique,
    "Positive": Positive,
    "Symmetric": Symmetric,
    "SkewSymmetric": SkewSymmetric,
    "Elliptope": Elliptope,
    "PSDFixedRank": PSDFixedRank,
    "BirkhoffPolytope": BirkhoffPolytope,
}


def peer_args(op: Op, data: dict) -> list[np.ndarray]:
    """pymanopt's inputs of ``op`` (numpy)."""
    return [data[k] for k in (op.pymanopt_args or op.args)]

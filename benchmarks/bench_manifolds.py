"""Benchmark riemfl's manifold maps at each check level against pymanopt and geoopt, in one process.

Times ``project``, ``to_tangent``, ``retract``, ``inverse_retract``, ``exp``, ``log``,
``transport`` and ``egrad_to_rgrad`` for

* ``Stiefel(n, p)`` with (n, p) in {(200, 5), (2000, 10), (10000, 20)}, both retractions;
* ``Sphere(1000)`` (unit vectors in R^1000);
* ``Lorentz(100)`` (points in R^101), including the cheap ``lift`` next to the exact ``project``;
* ``SPD(n)`` (affine-invariant) n in {5, 100}, ``PoincareBall(n)`` n in {10, 1000},
  ``SpecialOrthogonal(n)`` n in {3, 100}, ``Oblique(n, m)`` (5, 10) and (200, 100),
  ``Positive(m, n)`` (5, 4) and (200, 100), ``Symmetric(n)`` and ``SkewSymmetric(n)`` n in
  {5, 100}, ``Elliptope(n, k)`` and ``PSDFixedRank(n, k)`` (10, 3) and (200, 10),
  ``BirkhoffPolytope(n)`` n in {5, 100}: the maps ``project``, ``to_tangent``,
  ``egrad_to_rgrad``, ``ehess_to_rhess``, ``inner``, ``retract``, ``exp``, ``log``, ``dist``,
  ``transport`` and ``parallel_transport`` wherever a peer has a method of the same meaning
  (``_manifold_peers.py`` says which, and why the others are left out: geoopt's SPD default
  metric is the affine-invariant one too; pymanopt's ``Oblique(n, m)`` has unit columns like
  riemfl's, so nothing is transposed; pymanopt's SO(n) tangent vectors are the skew factors
  ``X^T U``; pymanopt's ``Elliptope.projection``, which is not a projection, is not timed);

at batch size 1 (one point, no batch axis) and 64 (riemfl does the 64 points in one call).

riemfl runs in both backends (numpy float64 and torch float64 on the CPU). The peers are pymanopt
(numpy) and geoopt (torch; ``EuclideanStiefel``, ``Sphere`` and ``Lorentz``). At batch 64 each
peer is timed as a Python loop of 64 single-point calls and, where it batches natively (geoopt
always, pymanopt's product Stiefel ``Stiefel(n, p, k=64)``), as one batched call.

Check levels (``--levels``, default ``eager,deferred,off``; see :mod:`riemfl.check_levels`):
riemfl's numpy and torch calls of every cell are timed at each level, inside ``with
riemfl.checks(level):`` (entered around each timing sample, outside its clock). At
``"deferred"`` each sample ends with one ``riemfl.raise_deferred()`` inside the clock, not one
per call: the pending records stay bounded (one sample's calls) and the boundary's read is
included, amortised over the sample's calls (a sample lasts >= 2 ms). The peers have no levels
and are timed once per cell. The *reference level* is ``"eager"`` (riemfl's default for numpy
arrays and CPU tensors) where it is timed, else the first level of ``--levels``: the cell's
``times_ms``, ``ratio`` and batch speed-up are riemfl's at that level.

Goals (the issue's), per level:

* ``"eager"``: riemfl numpy / fastest peer variant <= 1.0 where the first size parameter is
  >= 100 (Stiefel's n, Sphere's and Lorentz's n, the first integer of the other families'
  sizes; ``large_from``), <= 1.3 below;
* ``"deferred"``: riemfl torch (CPU tensors) / geoopt (its fastest variant) <= 1.0 per call at
  every size, in the cells where geoopt has the map;
* ``"off"``: fastest riemfl backend / fastest peer variant <= 1.0 everywhere;
* at batch 64, at the reference level: ``speedup_vs_loop`` = (Python loop over the fastest
  single-point peer) / (fastest riemfl batched call) >= 5 for Stiefel, Sphere and Lorentz,
  >= 1 for the other families (at least as fast as the loop).

Two kinds of cells are reported apart from the goal counts (their ratios are still computed and
shown, in parentheses in the table), each with a note per peer (``peer_caveats`` per cell,
``summary["peer_caveats"]``, the table's last column):

* "peer computes other mathematics: ...": ``_manifold_peers.Op.other_math`` says why
  (pymanopt's ``PSDFixedRank`` retraction and exp, ``Y + U`` unchecked: a matrix outside the
  manifold where riemfl refuses; pymanopt's ``Elliptope.projection`` would be one, but it is not
  timed at all);
* "peer returns its argument: ...": found at run time, the peer's output is one of its input
  arrays while riemfl's is a new array (pymanopt's identity ``transport`` of ``SPD``,
  ``Symmetric`` and ``SkewSymmetric``; riemfl's is the identity on tangent vectors too: the ratio
  measures riemfl's call against no work at all). Where riemfl also returns its argument
  (``to_tangent`` of ``Positive`` and ``PoincareBall``) the cell counts.

Every missed level goal is explained by a measurement (``goal["miss"]`` per level, the
summary's ``missed_by_kind``, ``[call]`` or ``[arithmetic]`` in the table's last column): the
private map behind the public one (``M._exp`` for ``M.exp``, the arithmetic without the input
policy) is timed too, under ``checks("off")``, in both backends (``bare_ms``). Where it alone
exceeds the goal's bound times the peer's time the miss is ``"arithmetic"`` (the mathematics or
its implementation costs more than the peer's); otherwise it is ``"call"``: the bare map meets
the goal and the public call's fixed cost does not, split into ``dispatch_us`` (the ``"off"``
call minus the bare map: shape, dtype and device checks and the dispatch) and ``checks_us``
(this level's call minus the ``"off"`` call: the finite checks, the boundary guards of open
sets, the deferred verdict).

Also reported per cell: ``ratio`` = fastest riemfl backend / fastest peer variant, and
``ratio_numpy_vs_pymanopt`` and ``ratio_torch_vs_geoopt`` (reference level; per level in
``levels``).

Timing: one BLAS and one torch thread, glibc's allocator keeping freed memory
(:func:`_harness.steady_allocator`: a batched call allocates MiBs, which glibc would otherwise map
and unmap at every call), warm-up calls, then the median over repeats of
``time.perf_counter`` samples, each sample running enough inner calls to last >= 2 ms, with the
number of repeats capped (at most 20 samples, about 0.2 s, per measurement; at most 1.5 s for a
slow call). These bounds are half of what one level had: with the six riemfl measurements of a
cell (two backends, three levels) a run takes about 1.2 to 1.5 times as long as the one-level run
did, not three times. The samples of a cell's measurements (every level and peer) are taken
round robin. Every peer output is also compared with riemfl's output for the same input
(``agreement``: largest absolute difference relative to the output's size), which checks that the
operations are mapped like for like, and riemfl's output at each level with its output at the
reference level.

Usage::

    python benchmarks/bench_manifolds.py [--quick] [--manifolds SPD,Oblique,...]
                                         [--levels eager,deferred,off] [--max-repeats N]
                                         [--out results/bench_manifolds.json]
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    # Before numpy is imported: one BLAS/OpenMP thread (a library's pool size is fixed at load).
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = "1"

import argparse  # noqa: E402
import contextlib  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared harness beside this script
from _harness import machine_info, single_thread, steady_allocator  # noqa: E402
from _manifold_peers import CLASSES, FAMILIES, Op, geoopt, peer_args, pymanopt_manifolds  # noqa: E402

import riemfl  # noqa: E402
from riemfl import Lorentz, SpecialOrthogonal, Sphere, Stiefel  # noqa: E402
from riemfl.backend import is_torch, to_numpy  # noqa: E402
from riemfl.check_levels import LEVELS  # noqa: E402

#: the pseudo-level of the timing of a bare private map (under ``checks("off")``)
BARE = "bare"
#: the kinds of a missed level goal (:func:`_explain_miss`), as the summary words them
MISS_KINDS = {
    "call": "call: the bare map meets the goal; the call's checks and dispatch do not",
    "arithmetic": "arithmetic: the bare map alone misses the goal",
}

try:  # optional peer: a missing one is reported, not fatal
    import pymanopt
except ImportError:  # pragma: no cover - depends on the environment
    pymanopt = None

__all__ = ["Settings", "run_benchmark", "format_table", "format_summary", "main"]

DEFAULT_OUT = "results/bench_manifolds.json"
BATCHED = 64
LORENTZ_FLIP_NOTE = "geoopt Lorentz egrad2rgrad writes into its argument, so it gets its own copy"
#: every family, in the order of the run (``--manifolds`` selects among them)
FAMILY_NAMES = ("Stiefel", "Sphere", "Lorentz", *FAMILIES)
#: the check levels timed by default (``--levels``)
DEFAULT_LEVELS = ("eager", "deferred", "off")
#: level -> what its goal compares (``Settings`` holds the bounds)
GOAL_RATIOS = {
    "eager": "riemfl numpy / fastest peer",
    "deferred": "riemfl torch / geoopt",
    "off": "fastest riemfl backend / fastest peer",
}
OTHER_MATH = "peer computes other mathematics"
RETURNS_ARGUMENT = "peer returns its argument"


# --------------------------------------------------------------------------------------- settings
@dataclass
class Settings:
    """Sizes, check levels and timing budget of one benchmark run.

    Attributes
    ----------
    stiefel_sizes : list of (n, p)
        Stiefel sizes.
    sphere_n, lorentz_n : int
        ``Sphere(sphere_n)`` and ``Lorentz(lorentz_n)``.
    batches : list of int
        Batch sizes; 1 means a single point without a batch axis.
    levels : list of str
        riemfl's check levels to time (of ``riemfl.check_levels.LEVELS``).
    min_sample_s : float
        Inner loops are repeated until one timing sample lasts at least this long.
    budget_s : float
        Target time spent on the repeats of one measurement (one library or level, one cell).
    cap_s : float
        Hard cap on the repeats of one measurement; a slow call gets fewer repeats (at least 1).
    min_repeats, max_repeats : int
        Bounds on the number of timing samples (the cap wins over ``min_repeats``).
    warmup_calls : int
        Untimed calls before timing (one only when a call takes longer than ``slow_call_s``).
    slow_call_s : float
        A call at least this slow is warmed up once.
    seed : int
        Seed of the data (the same points and vectors for every library).
    new_sizes : dict
        Family of ``_manifold_peers.FAMILIES`` -> its sizes (tuples of the constructor's
        integers).
    large_from : int
        A size is "large" where its first size parameter (Stiefel's n, Sphere's and Lorentz's n,
        the first integer of ``new_sizes``) is at least this.
    eager_goal_large, eager_goal_small : float
        Goal of ``"eager"``: riemfl numpy / fastest peer at most this, at the large and the
        small sizes.
    deferred_goal : float
        Goal of ``"deferred"``: riemfl torch / geoopt at most this (cells where geoopt has the
        map).
    off_goal : float
        Goal of ``"off"``: fastest riemfl backend / fastest peer at most this.
    speedup_goal, speedup_goal_new : float
        Batch-64 speed-up goal over a loop of the fastest peer: Stiefel, Sphere and Lorentz, and
        the families of ``new_sizes`` (at least as fast as the loop).
    manifolds : list of str, optional
        The families to run (names of ``FAMILY_NAMES``); None runs all.
    tangent_norm : float
        Riemannian norm of the tangent vectors ``u``; ``y = retract(x, u)``.
    """

    stiefel_sizes: list[tuple[int, int]] = field(
        default_factory=lambda: [(200, 5), (2000, 10), (10000, 20)]
    )
    sphere_n: int = 1000
    lorentz_n: int = 100
    batches: list[int] = field(default_factory=lambda: [1, BATCHED])
    levels: list[str] = field(default_factory=lambda: list(DEFAULT_LEVELS))
    min_sample_s: float = 2e-3
    budget_s: float = 0.2
    cap_s: float = 1.5
    min_repeats: int = 5
    max_repeats: int = 20
    warmup_calls: int = 3
    slow_call_s: float = 0.1
    seed: int = 0
    tangent_norm: float = 0.5
    eager_goal_large: float = 1.0
    eager_goal_small: float = 1.3
    deferred_goal: float = 1.0
    off_goal: float = 1.0
    speedup_goal: float = 5.0
    new_sizes: dict[str, list[tuple[int, ...]]] = field(
        default_factory=lambda: {name: spec[0] for name, spec in FAMILIES.items()}
    )
    large_from: int = 100
    speedup_goal_new: float = 1.0
    manifolds: list[str] | None = None
    is_quick: bool = False

    @classmethod
    def quick(cls) -> Settings:
        """Tiny sizes and few repeats: the full structure in a few seconds."""
        return cls(
            stiefel_sizes=[(12, 2), (24, 3), (40, 4)],
            sphere_n=30,
            lorentz_n=8,
            min_sample_s=2e-4,
            budget_s=2e-3,
            cap_s=0.02,
            min_repeats=3,
            max_repeats=3,
            warmup_calls=2,
            new_sizes={name: spec[1] for name, spec in FAMILIES.items()},
            large_from=6,
            is_quick=True,
        )

    @property
    def reference_level(self) -> str:
        """``"eager"`` where it is timed, else the first level."""
        return "eager" if "eager" in self.levels else self.levels[0]

    def level_goal(self, level: str, first_size: int) -> float | None:
        """The bound of ``level``'s goal at a size whose first parameter is ``first_size``."""
        if level == "eager":
            large = first_size >= self.large_from
            return self.eager_goal_large if large else self.eager_goal_small
        return {"deferred": self.deferred_goal, "off": self.off_goal}.get(level)


# --------------------------------------------------------------------------------------- timing
def _boundary(level: str | None) -> None:
    """End of a sample at ``level``: read the deferred checks (None: a peer, nothing to do)."""
    if level == "deferred":
        riemfl.raise_deferred()


def _measure(
    fns: dict[str, Callable[[], Any]], s: Settings, levels: dict[str, str] | None = None
) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """Time every ``fn()`` of ``fns``; return timing records (ms per call) and the outputs.

    Each callable is warmed up and calibrated (inner calls per sample, number of samples) on its
    own; the samples are then taken round-robin across the callables, so that a change in the
    background load of the machine affects all libraries and levels of a cell alike.
    ``levels[key]`` is riemfl's check level for ``fns[key]`` (absent: a peer): each of its
    samples (and warm-up calls) runs inside ``with riemfl.checks(level):``, entered and left
    outside the clock; at ``"deferred"`` the sample ends with ``riemfl.raise_deferred()`` inside
    the clock (one boundary per sample).
    """
    levels = levels or {}

    def level_block(key: str) -> contextlib.AbstractContextManager:
        level = levels.get(key)
        return contextlib.nullcontext() if level is None else riemfl.checks(level)

    plans: dict[str, tuple[int, int]] = {}
    outputs: dict[str, Any] = {}
    for key, fn in fns.items():
        level = levels.get(key)
        t_est = math.inf
        for _ in range(max(1, s.warmup_calls)):
            with level_block(key):
                t0 = time.perf_counter()
                outputs[key] = fn()
                _boundary(level)
                t_est = min(t_est, time.perf_counter() - t0)
            if t_est >= s.slow_call_s:
                break
        t_est = max(t_est, 1e-7)
        number = max(1, math.ceil(s.min_sample_s / t_est))
        sample = number * t_est
        repeats = min(max(int(s.budget_s // sample), s.min_repeats), s.max_repeats)
        if repeats * sample > s.cap_s:
            repeats = max(1, int(s.cap_s // sample))
        plans[key] = (number, repeats)
    samples: dict[str, list[float]] = {key: [] for key in fns}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for round_ in range(max((r for _, r in plans.values()), default=0)):
            for key, fn in fns.items():
                number, repeats = plans[key]
                if round_ >= repeats:
                    continue
                level = levels.get(key)
                with level_block(key):
                    t0 = time.perf_counter()
                    for _ in range(number):
                        fn()
                    _boundary(level)
                    samples[key].append((time.perf_counter() - t0) / number)
    finally:
        if gc_was_enabled:
            gc.enable()
    records = {
        key: {
            "median_ms": 1e3 * statistics.median(samples[key]),
            "min_ms": 1e3 * min(samples[key]),
            "number": plans[key][0],
            "repeats": plans[key][1],
        }
        for key in fns
    }
    return records, outputs


# --------------------------------------------------------------------------------------- operations
def _stiefel_ops(n: int, p: int, batch: int) -> list[Op]:
    rf = Stiefel(n, p)
    rfq = Stiefel(n, p, retraction="qr")
    pm = pmq = pmb = pmbq = None
    if pymanopt_manifolds is not None:
        pm = pymanopt_manifolds.Stiefel(n, p, retraction="polar")
        pmq = pymanopt_manifolds.Stiefel(n, p, retraction="qr")
        if batch > 1:
            pmb = pymanopt_manifolds.Stiefel(n, p, k=batch, retraction="polar")
            pmbq = pymanopt_manifolds.Stiefel(n, p, k=batch, retraction="qr")
    go = geoopt.EuclideanStiefel() if geoopt is not None else None

    def pmf(m: Any, meth: str) -> Callable[..., Any] | None:
        return None if m is None else getattr(m, meth)

    def gof(meth: str) -> Callable[..., Any] | None:
        return None if go is None else getattr(go, meth)

    return [
        Op("project", ("a",), rf.project, geoopt=gof("projx"), geoopt_name="projx"),
        Op(
            "to_tangent",
            ("x", "a"),
            rf.to_tangent,
            pmf(pm, "projection"),
            pmf(pmb, "projection"),
            gof("proju"),
            "projection",
            "proju",
        ),
        Op(
            "retract[polar]",
            ("x", "u"),
            rf.retract,
            pmf(pm, "retraction"),
            pmf(pmb, "retraction"),
            None,
            "retraction (polar)",
            None,
        ),
        Op(
            "retract[qr]",
            ("x", "u"),
            rfq.retract,
            pmf(pmq, "retraction"),
            pmf(pmbq, "retraction"),
            gof("retr"),
            "retraction (qr)",
            "retr (qr)",
        ),
        Op("inverse_retract[polar]", ("x", "y"), rf.inverse_retract),
        Op("inverse_retract[qr]", ("x", "y_qr"), rfq.inverse_retract),
        Op(
            "exp",
            ("x", "u"),
            rf.exp,
            pmf(pm, "exp"),
            pmf(pmb, "exp"),
            gof("expmap"),
            "exp",
            "expmap",
        ),
        Op("log", ("x", "y"), rf.log),
        Op(
            "transport",
            ("x", "y", "u"),
            rf.transport,
            pmf(pm, "transport"),
            pmf(pmb, "transport"),
            gof("transp"),
            "transport",
            "transp",
        ),
        Op(
            "egrad_to_rgrad",
            ("x", "g"),
            rf.egrad_to_rgrad,
            pmf(pm, "euclidean_to_riemannian_gradient"),
            pmf(pmb, "euclidean_to_riemannian_gradient"),
            gof("egrad2rgrad"),
            "euclidean_to_riemannian_gradient",
            "egrad2rgrad",
        ),
    ]


def _sphere_ops(n: int, batch: int) -> list[Op]:
    rf = Sphere(n)
    pm = pymanopt_manifolds.Sphere(n) if pymanopt_manifolds is not None else None
    go = geoopt.Sphere() if geoopt is not None else None

    def pmf(meth: str) -> Callable[..., Any] | None:
        return None if pm is None else getattr(pm, meth)

    def gof(meth: str) -> Callable[..., Any] | None:
        return None if go is None else getattr(go, meth)

    return [
        Op("project", ("a",), rf.project, geoopt=gof("projx"), geoopt_name="projx"),
        Op(
            "to_tangent",
            ("x", "a"),
            rf.to_tangent,
            pmf("projection"),
            None,
            gof("proju"),
            "projection",
            "proju",
        ),
        Op(
            "retract",
            ("x", "u"),
            rf.retract,
            pmf("retraction"),
            None,
            gof("retr"),
            "retraction",
            "retr",
        ),
        Op("inverse_retract", ("x", "y"), rf.inverse_retract),
        Op("exp", ("x", "u"), rf.exp, pmf("exp"), None, gof("expmap"), "exp", "expmap"),
        Op("log", ("x", "y"), rf.log, pmf("log"), None, gof("logmap"), "log", "logmap"),
        Op(
            "transport",
            ("x", "y", "u"),
            rf.transport,
            pmf("transport"),
            None,
            gof("transp"),
            "transport",
            "transp",
        ),
        Op(
            "egrad_to_rgrad",
            ("x", "g"),
            rf.egrad_to_rgrad,
            pmf("euclidean_to_riemannian_gradient"),
            None,
            gof("egrad2rgrad"),
            "euclidean_to_riemannian_gradient",
            "egrad2rgrad",
        ),
    ]


def _lorentz_ops(n: int, batch: int) -> list[Op]:
    rf = Lorentz(n)
    go = None
    if geoopt is not None:
        go = geoopt.Lorentz(k=torch.tensor(1.0, dtype=torch.float64))

    # geoopt's expmap/retr by default also project u onto T_x and the result onto M; riemfl's
    # exp does neither, so the like-for-like call switches both extras off (cheaper for geoopt).
    def go_exp(x: Any, u: Any) -> Any:
        return go.expmap(x, u, norm_tan=False, project=False)

    def go_retr(x: Any, u: Any) -> Any:
        return go.retr(x, u, norm_tan=False, project=False)

    have = go is not None
    return [
        Op(
            "lift (~projx)",
            ("a",),
            rf.lift,
            geoopt=go.projx if have else None,
            geoopt_name="projx (cheap lift)",
            note="geoopt's projx is the cheap lift x0 = sqrt(1 + |a_1:|^2)",
        ),
        Op(
            "project (exact)",
            ("a",),
            rf.project,
            note="exact Euclidean nearest point; no peer offers it",
        ),
        Op(
            "to_tangent",
            ("x", "a"),
            rf.to_tangent,
            geoopt=go.proju if have else None,
            geoopt_name="proju",
        ),
        Op(
            "retract",
            ("x", "u"),
            rf.retract,
            geoopt=go_retr if have else None,
            geoopt_name="retr(norm_tan=False, project=False)",
            note="riemfl's and geoopt's retraction are both the exponential map",
        ),
        Op(
            "inverse_retract",
            ("x", "y"),
            rf.inverse_retract,
            geoopt=go.logmap if have else None,
            geoopt_name="logmap (inverse of retr=expmap)",
            note="both retractions are exp, so their inverse is log",
        ),
        Op(
            "exp",
            ("x", "u"),
            rf.exp,
            geoopt=go_exp if have else None,
            geoopt_name="expmap(norm_tan=False, project=False)",
        ),
        Op("log", ("x", "y"), rf.log, geoopt=go.logmap if have else None, geoopt_name="logmap"),
        Op(
            "transport",
            ("x", "y", "u"),
            rf.transport,
            geoopt=go.transp if have else None,
            geoopt_name="transp (parallel transport)",
            note="both are the exact parallel transport",
        ),
        Op(
            "egrad_to_rgrad",
            ("x", "g"),
            rf.egrad_to_rgrad,
            geoopt=go.egrad2rgrad if have else None,
            geoopt_name="egrad2rgrad",
            geoopt_copies=(1,),
            note=LORENTZ_FLIP_NOTE,
        ),
    ]


# --------------------------------------------------------------------------------------- data
def _batch_norm(manifold: Any, x: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Riemannian norm of u, shaped to broadcast against u."""
    nrm = np.asarray(manifold.norm(x, u), dtype=float)
    return nrm.reshape(nrm.shape + (1,) * manifold.ndim)


def _make_data(
    manifold: Any, batch: int, s: Settings, rng: np.random.Generator, extended: bool = False
) -> dict:
    """Points, tangent vectors and ambient arrays (numpy float64), shared by all libraries;
    ``extended``: also a second tangent vector ``v``, a Hessian-vector product ``h`` and a
    positive ambient array ``a_pos`` (the families of ``_manifold_peers``)."""
    shape = () if batch == 1 else (batch,)
    x = manifold.random_point(*shape, rng=rng)
    u = manifold.random_tangent(x, rng=rng)
    u = u * (s.tangent_norm / _batch_norm(manifold, x, u))
    noise = rng.standard_normal(x.shape)
    axes = tuple(range(-manifold.ndim, 0))
    noise *= 0.1 / np.sqrt(np.sum(noise * noise, axis=axes, keepdims=True))
    data = {
        "x": x,
        "u": u,
        "y": manifold.retract(x, u),
        "a": x + noise,  # an ambient point near M (project, lift) / ambient vector (to_tangent)
        "g": rng.standard_normal(x.shape),  # a Euclidean gradient
    }
    if isinstance(manifold, Stiefel):
        data["y_qr"] = Stiefel(manifold.n, manifold.p, retraction="qr").retract(x, u)
    if extended:
        data["v"] = manifold.random_tangent(x, rng=rng)  # a second tangent vector (inner)
        data["h"] = rng.standard_normal(x.shape)  # a Euclidean Hessian-vector product
        # a positive ambient matrix near a positive x (Sinkhorn scaling)
        data["a_pos"] = np.abs(x) * np.exp(0.1 * rng.standard_normal(x.shape))
    if isinstance(manifold, SpecialOrthogonal):  # pymanopt's tangent vectors: Omega = X^T U
        xt = np.swapaxes(x, -1, -2)
        data["xu"] = xt @ data["u"]
        data["xv"] = xt @ data["v"]
    return {k: np.ascontiguousarray(v) for k, v in data.items()}


def _stacked(out: Any) -> Any:
    """A list of per-point outputs (of a peer's loop) as one array; other outputs as they are."""
    if isinstance(out, list):
        return torch.stack(out) if is_torch(out[0]) else np.stack(out)
    return out


def _rel_diff(ref: Any, out: Any) -> float:
    """max |ref - out| / max(1, max |ref|) (numpy or torch, or lists of per-point outputs)."""
    ref_np, out_np = to_numpy(ref), to_numpy(_stacked(out))
    if ref_np.shape != out_np.shape:
        return math.inf
    scale = max(1.0, float(np.max(np.abs(ref_np))))
    return float(np.max(np.abs(ref_np - out_np))) / scale


# --------------------------------------------------------------------------------------- one cell
def _key(backend: str, level: str) -> str:
    """The timing key of riemfl's ``backend`` ("numpy" or "torch") at check level ``level``."""
    return f"riemfl_{backend}@{level}"


def _is_input(out: Any, args: Sequence[Any]) -> bool:
    """Whether ``out`` is one of the arrays ``args`` itself (not a copy)."""
    return any(out is a for a in args)


def _run_cell(op: Op, data: dict, batch: int, s: Settings) -> dict[str, Any]:
    """Time one operation at one size and batch for riemfl (both backends, every check level of
    ``s.levels``) and the peers."""
    np_args = [data[k] for k in op.args]
    pm_args = peer_args(op, data)
    # torch.from_numpy shares memory: no copies of the large batched arrays
    t_args = [torch.from_numpy(a) for a in np_args]

    def geoopt_args() -> list[Any]:
        """Inputs of geoopt, with a private copy of each argument it writes into."""
        return [a.clone() if i in op.geoopt_copies else a for i, a in enumerate(t_args)]

    g_args = geoopt_args()
    f, pm, pmb, go = op.riemfl, op.pymanopt, op.pymanopt_batched, op.geoopt
    fns: dict[str, Callable[[], Any]] = {}
    levels: dict[str, str] = {}
    for level in s.levels:
        fns[_key("numpy", level)] = lambda: f(*np_args)
        fns[_key("torch", level)] = lambda: f(*t_args)
        levels[_key("numpy", level)] = levels[_key("torch", level)] = level
    #: peer key -> the inputs of each of its calls (one tuple per call of a loop)
    calls: dict[str, list[Sequence[Any]]] = {}
    pm_items = [tuple(a[i] for a in pm_args) for i in range(batch)]
    g_items = [tuple(a[i] for a in g_args) for i in range(batch)]
    if batch == 1:
        if pm is not None:
            fns["pymanopt"] = lambda: pm(*pm_args)
            calls["pymanopt"] = [pm_args]
        if go is not None:
            fns["geoopt"] = lambda: go(*g_args)
            calls["geoopt"] = [g_args]
    else:
        if pm is not None:
            fns["pymanopt_loop"] = lambda: [pm(*it) for it in pm_items]
            calls["pymanopt_loop"] = pm_items
        if pmb is not None:
            fns["pymanopt_batched"] = lambda: pmb(*pm_args)
            calls["pymanopt_batched"] = [pm_args]
        if go is not None:
            fns["geoopt_loop"] = lambda: [go(*it) for it in g_items]
            calls["geoopt_loop"] = g_items
            fns["geoopt_batched"] = lambda: go(*g_args)
            calls["geoopt_batched"] = [g_args]
    bare = _bare_map(f)
    if bare is not None:  # the private map alone, for the decomposition of a missed goal
        fns[_key("numpy", BARE)] = lambda: bare(*np_args)
        fns[_key("torch", BARE)] = lambda: bare(*t_args)
        levels[_key("numpy", BARE)] = levels[_key("torch", BARE)] = "off"
    timing, outputs = _measure(fns, s, levels)
    ref = s.reference_level
    ref_np, ref_t = outputs[_key("numpy", ref)], outputs[_key("torch", ref)]

    # a peer that hands back one of its input arrays where riemfl returns a new array does no
    # work at all (an identity map); checked before the geoopt re-run below replaces outputs
    caveats: dict[str, dict[str, str]] = {}
    for key, args_per_call in calls.items():
        lib = key.split("_")[0]
        out = outputs[key]
        outs = out if isinstance(out, list) else [out]
        rf_out, rf_args = (ref_t, t_args) if lib == "geoopt" else (ref_np, np_args)
        if all(map(_is_input, outs, args_per_call)) and not _is_input(rf_out, rf_args):
            method = op.geoopt_name if lib == "geoopt" else op.pymanopt_name
            caveats[lib] = {
                "kind": RETURNS_ARGUMENT,
                "note": f"{RETURNS_ARGUMENT}: {lib}'s {method} hands back an input array itself "
                f"(the identity, no new array, no work), riemfl's {op.name} returns a new array; "
                "the ratio measures riemfl's call against nothing",
            }
    for lib, why in op.other_math.items():
        if any(k.split("_")[0] == lib for k in calls):
            caveats[lib] = {"kind": OTHER_MATH, "note": f"{OTHER_MATH}: {why}"}

    # like-for-like check: numpy peers against riemfl-numpy, torch peers against riemfl-torch
    agreement: dict[str, float] = {"riemfl_torch": _rel_diff(ref_np, ref_t)}
    for key, out in outputs.items():
        if key.startswith("riemfl"):
            continue
        ref_out = ref_t if key.startswith("geoopt") else ref_np
        if key.startswith("geoopt") and op.geoopt_copies:
            # the timed calls flipped an argument in place: check on untouched inputs
            fresh = geoopt_args()
            if key.endswith("_loop"):
                out = [go(*(a[i] for a in fresh)) for i in range(batch)]
            else:
                out = go(*fresh)
        if key.startswith("pymanopt") and op.pymanopt_out is not None:
            out = op.pymanopt_out(data, _stacked(out))  # into riemfl's representation
        agreement[key] = _rel_diff(ref_out, out)
    peers = [key for key in fns if not key.startswith("riemfl")]
    times = {
        "riemfl_numpy": timing[_key("numpy", ref)]["median_ms"],
        "riemfl_torch": timing[_key("torch", ref)]["median_ms"],
        **{key: timing[key]["median_ms"] for key in peers},
    }
    per_level = {
        level: {
            "numpy_ms": timing[_key("numpy", level)]["median_ms"],
            "torch_ms": timing[_key("torch", level)]["median_ms"],
            "timing": {b: timing[_key(b, level)] for b in ("numpy", "torch")},
            # the same maps at every level: the outputs agree with the reference level's
            "agreement_with_reference": {
                "numpy": _rel_diff(ref_np, outputs[_key("numpy", level)]),
                "torch": _rel_diff(ref_t, outputs[_key("torch", level)]),
            },
        }
        for level in s.levels
    }
    bare_ms = (
        None
        if bare is None
        else {b: timing[_key(b, BARE)]["median_ms"] for b in ("numpy", "torch")}
    )
    return {
        "times_ms": times,
        "bare_ms": bare_ms,
        "timing": {
            "riemfl_numpy": timing[_key("numpy", ref)],
            "riemfl_torch": timing[_key("torch", ref)],
            **{key: timing[key] for key in peers},
        },
        "agreement": agreement,
        "peer_caveats": caveats,
        "levels": per_level,
    }


def _bare_map(f: Callable[..., Any]) -> Callable[..., Any] | None:
    """The private map behind a public map ``f`` (a bound method ``M.name``): ``M._name``, the
    arithmetic without the input policy, or None where ``f`` is not such a method."""
    owner, name = getattr(f, "__self__", None), getattr(f, "__name__", "")
    if not isinstance(owner, riemfl.Manifold):
        return None
    return getattr(owner, "_" + name, None)


def _explain_miss(
    level: str,
    goal: dict[str, Any],
    lv: dict[str, Any],
    bare_ms: dict[str, float] | None,
    off: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """Why a level's goal is missed, measured: the cost of riemfl's bare arithmetic against the
    peer's, and of the call around it.

    ``kind`` is ``"arithmetic"`` where riemfl's private map alone (under ``checks("off")``, no
    input policy) already exceeds the goal's bound times the peer's time: the mathematics or
    its implementation costs more. Otherwise it is ``"call"``: the bare map meets the goal and
    the miss is the public call's fixed cost (``dispatch_us``: shape, dtype and device checks
    and the dispatch, measured as the ``"off"`` call minus the bare map; ``checks_us``: the
    check level's own work, this level's call minus the ``"off"`` call). None where the goal is
    met or unchecked, or the bare map was not timed.
    """
    if goal["met"] is not False or bare_ms is None:
        return None
    backend = "torch" if level == "deferred" else lv["goal_backend"]
    mine = lv[f"{backend}_ms"]
    peer = mine / goal["ratio"]
    arithmetic = bare_ms[backend]
    off_ms = mine if off is None else off[f"{backend}_ms"]
    return {
        "kind": "arithmetic" if arithmetic > goal["max"] * peer else "call",
        "backend": backend,
        "bare_ratio": arithmetic / peer,
        "dispatch_us": 1e3 * (off_ms - arithmetic),
        "checks_us": 1e3 * (mine - off_ms),
    }


def _lib(key: str) -> str:
    """The library of a peer's timing key ("pymanopt_loop" -> "pymanopt")."""
    return key.split("_")[0]


def _level_goal(
    lv: dict[str, Any],
    level: str,
    bound: float | None,
    peers: dict[str, float],
    caveats: dict[str, dict[str, str]],
) -> dict[str, Any]:
    """The goal record of one level of one cell: the ratio it compares, its bound and verdict.

    ``met`` is None where the goal does not apply (no peer, no geoopt method, a level without a
    goal) or where every peer it compares with computes other mathematics (``excluded``; its
    ratio against those peers is kept for reference).
    """
    if level == "deferred":
        backend, others = "torch", {k: v for k, v in peers.items() if _lib(k) == "geoopt"}
        absent = "geoopt has no such map"
    else:
        others, absent = peers, "no peer"
        backend = "torch" if level != "eager" and lv["torch_ms"] < lv["numpy_ms"] else "numpy"
    lv["goal_backend"] = backend
    mine = lv[f"{backend}_ms"]
    goal: dict[str, Any] = {
        "ratio_of": GOAL_RATIOS.get(level),
        "max": bound,
        "ratio": None,
        "met": None,
        "excluded": False,
        "why_unchecked": None,
    }
    if bound is None:
        goal["why_unchecked"] = f"no goal at level {level!r}"
    if not others:
        goal["why_unchecked"] = goal["why_unchecked"] or absent
        return goal
    comparable = {k: v for k, v in others.items() if _lib(k) not in caveats}
    goal["ratio"] = mine / min((comparable or others).values())
    if not comparable:
        goal["excluded"] = True
        kinds = sorted({caveats[_lib(k)]["kind"] for k in others})
        goal["why_unchecked"] = "; ".join(kinds)
    elif bound is not None:
        goal["met"] = bool(goal["ratio"] <= bound)
    return goal


def _summarise_cell(cell: dict[str, Any], batch: int, s: Settings, speedup_goal: float) -> None:
    """Add ratios, speed-up and goal verdicts (per level) to a cell record (in place)."""
    t = cell["times_ms"]
    caveats = cell["peer_caveats"]
    rf_backend = min(("riemfl_numpy", "riemfl_torch"), key=lambda k: t[k])
    rf_ms = t[rf_backend]
    peers = {k: v for k, v in t.items() if not k.startswith("riemfl")}
    pm_times = [v for k, v in peers.items() if k.startswith("pymanopt")]
    go_times = [v for k, v in peers.items() if k.startswith("geoopt")]
    cell["riemfl_ms"] = rf_ms
    cell["riemfl_fastest_backend"] = rf_backend.removeprefix("riemfl_")
    cell["fastest_peer"] = min(peers, key=peers.get) if peers else None
    cell["fastest_peer_ms"] = min(peers.values()) if peers else None
    cell["ratio"] = rf_ms / cell["fastest_peer_ms"] if peers else None
    cell["ratio_numpy_vs_pymanopt"] = t["riemfl_numpy"] / min(pm_times) if pm_times else None
    cell["ratio_torch_vs_geoopt"] = t["riemfl_torch"] / min(go_times) if go_times else None
    loops = {k: v for k, v in peers.items() if k.endswith("_loop")}
    fair_loops = {k: v for k, v in loops.items() if _lib(k) not in caveats}
    pick = fair_loops or loops
    cell["loop_peer"] = min(pick, key=pick.get) if pick else None
    cell["loop_peer_ms"] = min(pick.values()) if pick else None
    cell["speedup_vs_loop"] = cell["loop_peer_ms"] / rf_ms if pick else None
    goals: dict[str, Any] = {}
    if batch > 1:
        goals["speedup_min"] = speedup_goal
        goals["speedup_met"] = None
        goals["speedup_excluded"] = bool(loops) and not fair_loops
        if fair_loops:
            goals["speedup_met"] = bool(cell["speedup_vs_loop"] >= speedup_goal)
    goals["levels"] = {}
    for level, lv in cell["levels"].items():
        rf_level = min(lv["numpy_ms"], lv["torch_ms"])
        fastest = cell["fastest_peer_ms"]
        lv["ratio"] = rf_level / fastest if peers else None
        lv["ratio_numpy_vs_fastest_peer"] = lv["numpy_ms"] / fastest if peers else None
        lv["ratio_numpy_vs_pymanopt"] = lv["numpy_ms"] / min(pm_times) if pm_times else None
        lv["ratio_torch_vs_geoopt"] = lv["torch_ms"] / min(go_times) if go_times else None
        if batch > 1:
            lv["speedup_vs_loop"] = cell["loop_peer_ms"] / rf_level if pick else None
        lv["goal"] = _level_goal(lv, level, s.level_goal(level, cell["first_size"]), peers, caveats)
        goals["levels"][level] = lv["goal"]["met"]
    for level, lv in cell["levels"].items():
        off = cell["levels"].get("off")
        lv["goal"]["miss"] = _explain_miss(level, lv["goal"], lv, cell["bare_ms"], off)
    cell["goals"] = goals


# --------------------------------------------------------------------------------------- driver
@dataclass
class _Family:
    """One size of one family: what the driver needs to build its data and rows."""

    name: str
    manifold: Any
    size: str
    first_size: int
    build: Callable[[int], list[Op]]
    speedup_goal: float
    extended: bool = False


def _families(s: Settings) -> list[_Family]:
    """Every size of every family selected by ``s.manifolds`` (all when None)."""
    out: list[_Family] = []
    for n, p in s.stiefel_sizes:
        out.append(
            _Family(
                "Stiefel",
                Stiefel(n, p),
                f"{n}x{p}",
                n,
                lambda b, n=n, p=p: _stiefel_ops(n, p, b),
                s.speedup_goal,
            )
        )
    out.append(
        _Family(
            "Sphere",
            Sphere(s.sphere_n),
            f"n={s.sphere_n}",
            s.sphere_n,
            lambda b: _sphere_ops(s.sphere_n, b),
            s.speedup_goal,
        )
    )
    out.append(
        _Family(
            "Lorentz",
            Lorentz(s.lorentz_n),
            f"n={s.lorentz_n}",
            s.lorentz_n,
            lambda b: _lorentz_ops(s.lorentz_n, b),
            s.speedup_goal,
        )
    )
    for name, sizes in s.new_sizes.items():
        build = FAMILIES[name][2]
        for size in sizes:
            out.append(
                _Family(
                    name,
                    CLASSES[name](*size),
                    "x".join(map(str, size)) if len(size) > 1 else f"n={size[0]}",
                    size[0],
                    lambda b, build=build, size=size: build(*size, b),
                    s.speedup_goal_new,
                    extended=True,
                )
            )
    if s.manifolds is not None:
        unknown = set(s.manifolds) - {f.name for f in out}
        if unknown:
            raise ValueError(f"unknown manifolds {sorted(unknown)}; known: {list(FAMILY_NAMES)}")
        out = [f for f in out if f.name in s.manifolds]
    return out


def _check_levels(levels: Sequence[str]) -> None:
    unknown = [level for level in levels if level not in LEVELS]
    if unknown or not levels or len(set(levels)) != len(levels):
        raise ValueError(
            f"levels {list(levels)}: expected distinct levels of {', '.join(LEVELS)}, at least one"
        )


def run_benchmark(
    quick: bool = False,
    out: str | os.PathLike[str] | None = DEFAULT_OUT,
    settings: Settings | None = None,
    verbose: bool = False,
) -> dict[str, Any]:
    """Run the whole benchmark and return (and optionally write) the results.

    Parameters
    ----------
    quick : bool
        Tiny sizes and few repeats (a few seconds); ignored when ``settings`` is given.
    out : path or None
        Where to write the JSON results (parent folders are created); None writes nothing.
    settings : Settings, optional
        Full control over sizes, check levels and timing budget.
    verbose : bool
        Print one progress line per cell to stderr.

    Returns
    -------
    dict
        ``{"machine": ..., "settings": ..., "cells": [...], "summary": ..., "total_s": ...}``.
        Each cell has the median times in milliseconds at the reference level (``times_ms``:
        ``riemfl_numpy``, ``riemfl_torch`` and every peer variant), the ratios and the batch-64
        speed-up at that level, ``levels`` (per check level: riemfl's ``numpy_ms`` and
        ``torch_ms``, their timing records, the ratios, ``speedup_vs_loop`` at batch 64, the
        agreement of the outputs with the reference level's and ``goal``: ``ratio_of``,
        ``ratio``, ``max``, ``met``, ``excluded``, ``why_unchecked``), ``goals`` (the batch
        speed-up's and ``levels``: level -> met, None where unchecked), ``peer_caveats``
        (library -> ``kind`` and ``note`` where a peer computes other mathematics or returns
        its argument) and the agreement of every peer's output with riemfl's.
    """
    s = settings if settings is not None else (Settings.quick() if quick else Settings())
    _check_levels(s.levels)
    started = time.perf_counter()
    cells: list[dict[str, Any]] = []
    rng = np.random.default_rng(s.seed)
    # no page faults from re-mapping freed stacks: the batched calls allocate MiBs per call
    allocator = steady_allocator()
    with single_thread() as thread_info:
        machine = machine_info(
            thread_info,
            geoopt=getattr(geoopt, "__version__", None),
            pymanopt=getattr(pymanopt, "__version__", None),
            **allocator,
        )  # before the run: the load average is of others
        for fam in _families(s):
            family, size = fam.name, fam.size
            size_class = "large" if fam.first_size >= s.large_from else "small"
            for batch in s.batches:
                data = _make_data(fam.manifold, batch, s, rng, fam.extended)
                for op in fam.build(batch):
                    t0 = time.perf_counter()
                    cell: dict[str, Any] = {
                        "manifold": family,
                        "size": size,
                        "first_size": fam.first_size,
                        "size_class": size_class,
                        "batch": batch,
                        "op": op.name,
                        "peer_methods": {"pymanopt": op.pymanopt_name, "geoopt": op.geoopt_name},
                        "pymanopt_batched": op.pymanopt_batched is not None,
                        "note": op.note,
                    }
                    cell.update(_run_cell(op, data, batch, s))
                    _summarise_cell(cell, batch, s, fam.speedup_goal)
                    cell["wall_s"] = time.perf_counter() - t0
                    cells.append(cell)
                    if verbose:
                        print(
                            f"  {family} {size} b={batch} {op.name}: {cell['wall_s']:.2f} s",
                            file=sys.stderr,
                        )
                del data
    result = {
        "machine": machine,
        "settings": {
            **asdict(s),
            "reference_level": s.reference_level,
            "sphere_note": f"Sphere(n) with n = {s.sphere_n}: unit vectors in R^{s.sphere_n}",
            "lorentz_note": f"Lorentz(n) with n = {s.lorentz_n}: points in R^{s.lorentz_n + 1}",
            "dtype": "float64",
            "ratio_definition": "fastest riemfl backend / fastest peer variant (loop or batched)",
            "level_goal_ratios": {lv: GOAL_RATIOS.get(lv) for lv in s.levels},
            "deferred_boundary": "one riemfl.raise_deferred() per timing sample, inside the clock",
            "speedup_definition": (
                "Python loop of single-point calls of the fastest peer / "
                "fastest riemfl batched call (reference level)"
            ),
        },
        "cells": cells,
        "summary": _summary(cells, s.levels),
        "total_s": time.perf_counter() - started,
    }
    if out is not None:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1))
    return result


def _cell_id(c: dict[str, Any]) -> str:
    return f"{c['manifold']} {c['size']} b={c['batch']} {c['op']}"


def _summary(cells: list[dict[str, Any]], levels: Sequence[str]) -> dict[str, Any]:
    speed_cells = [c for c in cells if c["goals"].get("speedup_met") is not None]
    disagree = [
        f"{_cell_id(c)} vs {k}: {v:.1e}"
        for c in cells
        for k, v in c["agreement"].items()
        if not v <= 1e-6
    ]
    disagree += [
        f"{_cell_id(c)} riemfl_{b} at {level} vs the reference level: {v:.1e}"
        for c in cells
        for level, lv in c["levels"].items()
        for b, v in lv["agreement_with_reference"].items()
        if not v <= 1e-6
    ]
    per_level: dict[str, Any] = {}
    for level in levels:
        checked = [c for c in cells if c["levels"][level]["goal"]["met"] is not None]
        by_family: dict[str, dict[str, int]] = {}
        for c in checked:
            fam = by_family.setdefault(c["manifold"], {"checked": 0, "met": 0})
            fam["checked"] += 1
            fam["met"] += c["levels"][level]["goal"]["met"]
        per_level[level] = {
            "ratio_of": GOAL_RATIOS.get(level),
            "checked": len(checked),
            "met": sum(c["levels"][level]["goal"]["met"] for c in checked),
            "missed": [_cell_id(c) for c in checked if not c["levels"][level]["goal"]["met"]],
            "missed_by_kind": {
                kind: [
                    _cell_id(c)
                    for c in checked
                    if (c["levels"][level]["goal"]["miss"] or {}).get("kind") == kind
                ]
                for kind in MISS_KINDS
            },
            "excluded": sum(c["levels"][level]["goal"]["excluded"] for c in cells),
            "by_family": by_family,
        }
    return {
        "levels": per_level,
        "speedup_goal": {
            "checked": len(speed_cells),
            "met": sum(c["goals"]["speedup_met"] for c in speed_cells),
            "missed": [_cell_id(c) for c in speed_cells if not c["goals"]["speedup_met"]],
            "excluded": sum(bool(c["goals"].get("speedup_excluded")) for c in cells),
        },
        "peer_caveats": [
            {
                "cell": _cell_id(c),
                "peers": c["peer_caveats"],
                "ratios": {level: lv["goal"]["ratio"] for level, lv in c["levels"].items()},
            }
            for c in cells
            if c["peer_caveats"]
        ],
        "no_peer": [_cell_id(c) for c in cells if c["ratio"] is None],
        "disagreements": disagree,
    }


# --------------------------------------------------------------------------------------- output
def _fmt_ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def _peer_col(t: dict[str, float], lib: str) -> str:
    if lib in t:
        return _fmt_ms(t[lib])
    variants = {k: v for k, v in t.items() if k.startswith(lib + "_")}
    if not variants:
        return "-"
    best = min(variants, key=variants.get)
    return f"{_fmt_ms(variants[best])} {'B' if best.endswith('_batched') else 'L'}"


def _level_col(goal: dict[str, Any]) -> str:
    """A level's goal ratio: ``!`` where missed, in parentheses where excluded, - without."""
    r = goal["ratio"]
    if r is None:
        return "-"
    text = f"{r:.2f}"
    if goal["excluded"]:
        return f"({text})"
    return text + "!" if goal["met"] is False else text


def _goal_col(c: dict[str, Any]) -> str:
    g = c["goals"]
    misses = [
        level + (f"[{miss['kind']}]" if (miss := c["levels"][level]["goal"]["miss"]) else "")
        for level, met in g["levels"].items()
        if met is False
    ]
    if g.get("speedup_met") is False:
        misses.append("speedup")
    if misses:
        return "NO: " + ",".join(misses)
    if any(met for met in g["levels"].values()) or g.get("speedup_met"):
        return "yes"
    if c["peer_caveats"]:
        return "excluded"
    return "n/a"


def _caveat_col(c: dict[str, Any]) -> str:
    short = {OTHER_MATH: "other math", RETURNS_ARGUMENT: "returns arg"}
    return ", ".join(f"{lib}: {short[v['kind']]}" for lib, v in c["peer_caveats"].items())


def format_table(result: dict[str, Any]) -> str:
    """The results as one fixed-width text table (median milliseconds per call; one ratio column
    per check level: the ratio its goal compares, ``!`` where the goal is missed)."""
    levels = result["settings"]["levels"]
    head = (
        "manifold",
        "size",
        "batch",
        "op",
        "riemfl-np ms",
        "riemfl-torch ms",
        "pymanopt ms",
        "geoopt ms",
        *levels,
        "speedup",
        "goal met?",
        "peer caveat",
    )
    rows = []
    for c in result["cells"]:
        t = c["times_ms"]
        rows.append(
            (
                c["manifold"],
                c["size"],
                str(c["batch"]),
                c["op"],
                _fmt_ms(t["riemfl_numpy"]),
                _fmt_ms(t["riemfl_torch"]),
                _peer_col(t, "pymanopt"),
                _peer_col(t, "geoopt"),
                *(_level_col(c["levels"][level]["goal"]) for level in levels),
                "-" if c["speedup_vs_loop"] is None else f"{c['speedup_vs_loop']:.1f}x",
                _goal_col(c),
                _caveat_col(c),
            )
        )
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    left = {0, 1, 3, len(head) - 2, len(head) - 1}

    def line(r: Sequence[str]) -> str:
        return "  ".join(
            v.ljust(w) if i in left else v.rjust(w)
            for i, (v, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()

    out = [line(head), "  ".join("-" * w for w in widths)]
    previous = None
    for c, r in zip(result["cells"], rows, strict=True):
        key = (c["manifold"], c["size"], c["batch"])
        if previous is not None and key != previous:
            out.append("")
        previous = key
        out.append(line(r))
    return "\n".join(out)


def _grouped(ids: Sequence[str]) -> list[str]:
    """Cell ids ("Family size b=B op") as one line per family and size."""
    groups: dict[str, list[str]] = {}
    for cid in ids:
        family, size, rest = cid.split(" ", 2)
        groups.setdefault(f"{family} {size}", []).append(rest)
    return [f"{k}: {', '.join(v)}" for k, v in groups.items()]


def _level_rule(s: dict[str, Any], level: str) -> str:
    if level == "eager":
        return (
            f"<= {s['eager_goal_large']} where the first size parameter >= {s['large_from']}, "
            f"<= {s['eager_goal_small']} below"
        )
    if level == "deferred":
        return f"<= {s['deferred_goal']} where geoopt has the map"
    if level == "off":
        return f"<= {s['off_goal']} everywhere"
    return "no goal"


def format_summary(result: dict[str, Any]) -> str:
    """Goals met and missed per check level and family, the batched speed-up goal, the cells
    whose peer computes other mathematics, and any output that disagrees."""
    s = result["settings"]
    summ = result["summary"]
    lines = []
    for level, lv in summ["levels"].items():
        lines.append(
            f"{level}: {lv['ratio_of'] or 'fastest riemfl backend / fastest peer'} "
            f"{_level_rule(s, level)}: met in {lv['met']}/{lv['checked']} cells"
            + (f" ({lv['excluded']} excluded: peer caveat)" if lv["excluded"] else "")
        )
        if lv["by_family"]:
            fams = ", ".join(f"{k} {v['met']}/{v['checked']}" for k, v in lv["by_family"].items())
            lines.append(f"  by family: {fams}")
        explained = {cid for ids in lv["missed_by_kind"].values() for cid in ids}
        for kind, ids in lv["missed_by_kind"].items():
            lines += [f"  missed ({MISS_KINDS[kind]}), {g}" for g in _grouped(ids)]
        lines += [
            f"  missed, {g}"
            for g in _grouped([cid for cid in lv["missed"] if cid not in explained])
        ]
    sp = summ["speedup_goal"]
    lines.append(
        f"batched speed-up goal (at {s['reference_level']}, over a Python loop of the fastest "
        f"peer: >= {s['speedup_goal']}x for Stiefel, Sphere and Lorentz, >= "
        f"{s['speedup_goal_new']}x for the other families): met in {sp['met']}/{sp['checked']} "
        "cells" + (f" ({sp['excluded']} excluded: peer caveat)" if sp["excluded"] else "")
    )
    lines += [f"  missed, {g}" for g in _grouped(sp["missed"])]
    if summ["peer_caveats"]:
        lines.append(
            f"reported apart from the goals ({len(summ['peer_caveats'])} cells; their ratios per "
            "level in parentheses in the table):"
        )
        for item in summ["peer_caveats"]:
            for note in item["peers"].values():
                lines.append(f"  {item['cell']}: {note['note']}")
    lines.append(f"no peer (riemfl timed only): {len(summ['no_peer'])} cells")
    if summ["disagreements"]:
        lines.append("outputs differing from riemfl's by more than 1e-6 (relative):")
        lines += [f"  {d}" for d in summ["disagreements"]]
    else:
        lines.append(
            "every peer output agrees with riemfl's, and riemfl's at every level with its "
            "output at the reference level, to 1e-6 (relative)"
        )
    return "\n".join(lines)


def _header(result: dict[str, Any]) -> str:
    m, s = result["machine"], result["settings"]
    level_cols = "; ".join(
        f"{lv}: {GOAL_RATIOS.get(lv) or 'fastest riemfl backend / fastest peer'}"
        for lv in s["levels"]
    )
    return "\n".join(
        [
            f"riemfl {m['riemfl']} vs pymanopt {m['pymanopt']} / geoopt {m['geoopt']}; "
            f"numpy {m['numpy']}, torch {m['torch']}, python {m['python']}",
            f"{m['processor']} ({m['cpu_count']} CPUs, load average {m['load_average_1min']}), "
            f"torch threads {m['torch_threads']}, BLAS threads {m['blas_threads']}",
            f"float64; {s['sphere_note']}; {s['lorentz_note']}; tangent norm "
            f"{s['tangent_norm']}, y = retract(x, u)",
            f"median ms per call (riemfl at check level {s['reference_level']!r}). batch 1: one "
            "point, no batch axis. batch 64: riemfl one call; peer column = its fastest variant, "
            "L = Python loop of 64 calls, B = its own batched call",
            f"check-level columns (riemfl under riemfl.checks(level); deferred: one "
            f"raise_deferred() per sample): {level_cols}; ! = goal missed, (...) = peer caveat, "
            "not counted",
            f"speedup = loop over the fastest peer / fastest riemfl batched call "
            f"({s['reference_level']})",
        ]
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command-line entry point: run, print the table and the summary, write the JSON.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments (default: ``sys.argv[1:]``): ``--quick``, ``--out PATH``, ``--budget S``,
        ``--max-repeats N``, ``--verbose``, ``--manifolds A,B`` (families of
        ``FAMILY_NAMES``), ``--levels L1,L2`` (check levels, default ``eager,deferred,off``).

    Returns
    -------
    dict
        The result of :func:`run_benchmark`.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a few seconds")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    parser.add_argument(
        "--budget", type=float, default=None, help="seconds of repeats per measurement"
    )
    parser.add_argument(
        "--max-repeats", type=int, default=None, help="most timing samples per measurement"
    )
    parser.add_argument("--verbose", action="store_true", help="progress per cell on stderr")
    parser.add_argument(
        "--manifolds",
        default=None,
        help=f"comma-separated families to run (default all: {','.join(FAMILY_NAMES)})",
    )
    parser.add_argument(
        "--levels",
        default=",".join(DEFAULT_LEVELS),
        help=f"comma-separated check levels to time riemfl at, of {', '.join(LEVELS)} "
        f"(default {','.join(DEFAULT_LEVELS)})",
    )
    args = parser.parse_args(argv)
    settings = Settings.quick() if args.quick else Settings()
    if args.manifolds is not None:
        settings.manifolds = [m.strip() for m in args.manifolds.split(",") if m.strip()]
    settings.levels = [lv.strip() for lv in args.levels.split(",") if lv.strip()]
    try:
        _check_levels(settings.levels)
    except ValueError as exc:
        parser.error(str(exc))
    if args.budget is not None:
        settings.budget_s = args.budget
    if args.max_repeats is not None:
        settings.max_repeats = args.max_repeats
    result = run_benchmark(out=args.out, settings=settings, verbose=args.verbose)
    print(_header(result))
    print()
    print(format_table(result))
    print()
    print(format_summary(result))
    print(f"\ntotal {result['total_s']:.0f} s; results written to {args.out}")
    return result


if __name__ == "__main__":
    main()

"""Benchmark riemfl's manifold maps against pymanopt and geoopt, in one process.

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
  ``X^T U``);

at batch size 1 (one point, no batch axis) and 64 (riemfl does the 64 points in one call).

riemfl runs in both backends (numpy float64 and torch float64 on the CPU). The peers are pymanopt
(numpy) and geoopt (torch; ``EuclideanStiefel``, ``Sphere`` and ``Lorentz``). At batch 64 each
peer is timed as a Python loop of 64 single-point calls and, where it batches natively (geoopt
always, pymanopt's product Stiefel ``Stiefel(n, p, k=64)``), as one batched call.

Reported per cell:

* ``ratio`` = fastest riemfl backend / fastest peer variant (goal <= 1.5 at the small sizes,
  Sphere and Lorentz included, <= 1.1 at the two larger Stiefel sizes and, for the other
  families, where the first size parameter is >= 100);
* ``ratio_numpy_vs_pymanopt`` and ``ratio_torch_vs_geoopt``;
* at batch 64, ``speedup_vs_loop`` = (Python loop over the fastest single-point peer) / (fastest
  riemfl batched call) (goal >= 5 for Stiefel, Sphere and Lorentz, >= 1 for the other
  families: at least as fast as the loop).

Timing: one BLAS and one torch thread, glibc's allocator keeping freed memory
(:func:`_harness.steady_allocator`: a batched call allocates MiBs, which glibc would otherwise map
and unmap at every call), warm-up calls, then the median over repeats of
``time.perf_counter`` samples, each sample running enough inner calls to last >= 2 ms, with the
number of repeats capped so that slow cells take a bounded time. Every peer output is also
compared with riemfl's output for the same input (``agreement``: largest absolute difference
relative to the output's size), which checks that the operations are mapped like for like.

Usage::

    python benchmarks/bench_manifolds.py [--quick] [--manifolds SPD,Oblique,...]
                                         [--out results/bench_manifolds.json]
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    # Before numpy is imported: one BLAS/OpenMP thread (a library's pool size is fixed at load).
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = "1"

import argparse  # noqa: E402
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

from riemfl import Lorentz, SpecialOrthogonal, Sphere, Stiefel  # noqa: E402
from riemfl.backend import is_torch, to_numpy  # noqa: E402

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


# --------------------------------------------------------------------------------------- settings
@dataclass
class Settings:
    """Sizes and timing budget of one benchmark run.

    Attributes
    ----------
    stiefel_sizes : list of (n, p)
        Stiefel sizes; the first is the "small" size (ratio goal ``ratio_goal_small``), the others
        are "large" (``ratio_goal_large``).
    sphere_n, lorentz_n : int
        ``Sphere(sphere_n)`` and ``Lorentz(lorentz_n)``; both count as "small".
    batches : list of int
        Batch sizes; 1 means a single point without a batch axis.
    min_sample_s : float
        Inner loops are repeated until one timing sample lasts at least this long.
    budget_s : float
        Target time spent on the repeats of one measurement (one library, one cell).
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
        integers); a size is "large" where its first integer is at least ``large_from``.
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
    min_sample_s: float = 2e-3
    budget_s: float = 0.4
    cap_s: float = 3.0
    min_repeats: int = 5
    max_repeats: int = 40
    warmup_calls: int = 3
    slow_call_s: float = 0.1
    seed: int = 0
    tangent_norm: float = 0.5
    ratio_goal_small: float = 1.5
    ratio_goal_large: float = 1.1
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


# --------------------------------------------------------------------------------------- timing
def _measure(
    fns: dict[str, Callable[[], Any]], s: Settings
) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """Time every ``fn()`` of ``fns``; return timing records (ms per call) and the outputs.

    Each callable is warmed up and calibrated (inner calls per sample, number of samples) on its
    own; the samples are then taken round-robin across the callables, so that a change in the
    background load of the machine affects all libraries of a cell alike.
    """
    plans: dict[str, tuple[int, int]] = {}
    outputs: dict[str, Any] = {}
    for key, fn in fns.items():
        t_est = math.inf
        for _ in range(max(1, s.warmup_calls)):
            t0 = time.perf_counter()
            outputs[key] = fn()
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
                t0 = time.perf_counter()
                for _ in range(number):
                    fn()
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
def _run_cell(op: Op, data: dict, batch: int, s: Settings) -> dict[str, Any]:
    """Time one operation at one size and batch for riemfl (both backends) and the peers."""
    np_args = [data[k] for k in op.args]
    pm_args = peer_args(op, data)
    # torch.from_numpy shares memory: no copies of the large batched arrays
    t_args = [torch.from_numpy(a) for a in np_args]

    def geoopt_args() -> list[Any]:
        """Inputs of geoopt, with a private copy of each argument it writes into."""
        return [a.clone() if i in op.geoopt_copies else a for i, a in enumerate(t_args)]

    g_args = geoopt_args()
    f, pm, pmb, go = op.riemfl, op.pymanopt, op.pymanopt_batched, op.geoopt
    fns: dict[str, Callable[[], Any]] = {
        "riemfl_numpy": lambda: f(*np_args),
        "riemfl_torch": lambda: f(*t_args),
    }
    if batch == 1:
        if pm is not None:
            fns["pymanopt"] = lambda: pm(*pm_args)
        if go is not None:
            fns["geoopt"] = lambda: go(*g_args)
    else:
        pm_items = [tuple(a[i] for a in pm_args) for i in range(batch)]
        g_items = [tuple(a[i] for a in g_args) for i in range(batch)]
        if pm is not None:
            fns["pymanopt_loop"] = lambda: [pm(*it) for it in pm_items]
        if pmb is not None:
            fns["pymanopt_batched"] = lambda: pmb(*pm_args)
        if go is not None:
            fns["geoopt_loop"] = lambda: [go(*it) for it in g_items]
            fns["geoopt_batched"] = lambda: go(*g_args)
    timing, outputs = _measure(fns, s)

    # like-for-like check: numpy peers against riemfl-numpy, torch peers against riemfl-torch
    agreement: dict[str, float] = {}
    for key, out in outputs.items():
        if key == "riemfl_numpy":
            continue
        ref = outputs["riemfl_torch" if key.startswith("geoopt") else "riemfl_numpy"]
        if key.startswith("geoopt") and op.geoopt_copies:
            # the timed calls flipped an argument in place: check on untouched inputs
            fresh = geoopt_args()
            if key.endswith("_loop"):
                out = [go(*(a[i] for a in fresh)) for i in range(batch)]
            else:
                out = go(*fresh)
        if key.startswith("pymanopt") and op.pymanopt_out is not None:
            out = op.pymanopt_out(data, _stacked(out))  # into riemfl's representation
        agreement[key] = _rel_diff(ref, out)
    times = {key: rec["median_ms"] for key, rec in timing.items()}
    return {"times_ms": times, "timing": timing, "agreement": agreement}


def _summarise_cell(
    cell: dict[str, Any], batch: int, ratio_goal: float, speedup_goal: float
) -> None:
    """Add ratios, speed-up and goal verdicts to a cell record (in place)."""
    t = cell["times_ms"]
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
    cell["loop_peer"] = min(loops, key=loops.get) if loops else None
    cell["loop_peer_ms"] = min(loops.values()) if loops else None
    cell["speedup_vs_loop"] = cell["loop_peer_ms"] / rf_ms if loops else None
    goals: dict[str, Any] = {"ratio_max": ratio_goal, "ratio_met": None}
    if cell["ratio"] is not None:
        goals["ratio_met"] = bool(cell["ratio"] <= ratio_goal)
    if batch > 1:
        goals["speedup_min"] = speedup_goal
        goals["speedup_met"] = bool(cell["speedup_vs_loop"] >= speedup_goal) if loops else None
    cell["goals"] = goals


# --------------------------------------------------------------------------------------- driver
@dataclass
class _Family:
    """One size of one family: what the driver needs to build its data and rows."""

    name: str
    manifold: Any
    size: str
    size_class: str
    build: Callable[[int], list[Op]]
    speedup_goal: float
    extended: bool = False


def _families(s: Settings) -> list[_Family]:
    """Every size of every family selected by ``s.manifolds`` (all when None)."""
    out: list[_Family] = []
    for i, (n, p) in enumerate(s.stiefel_sizes):
        out.append(
            _Family(
                "Stiefel",
                Stiefel(n, p),
                f"{n}x{p}",
                "small" if i == 0 else "large",
                lambda b, n=n, p=p: _stiefel_ops(n, p, b),
                s.speedup_goal,
            )
        )
    out.append(
        _Family(
            "Sphere",
            Sphere(s.sphere_n),
            f"n={s.sphere_n}",
            "small",
            lambda b: _sphere_ops(s.sphere_n, b),
            s.speedup_goal,
        )
    )
    out.append(
        _Family(
            "Lorentz",
            Lorentz(s.lorentz_n),
            f"n={s.lorentz_n}",
            "small",
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
                    "large" if size[0] >= s.large_from else "small",
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
        Full control over sizes and timing budget.
    verbose : bool
        Print one progress line per cell to stderr.

    Returns
    -------
    dict
        ``{"machine": ..., "settings": ..., "cells": [...], "summary": ...}``; each cell has the
        median times in milliseconds (``times_ms``), the ratios, the batch-64 speed-up, the goal
        verdicts and the agreement of every peer's output with riemfl's.
    """
    s = settings if settings is not None else (Settings.quick() if quick else Settings())
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
            family, size, size_class = fam.name, fam.size, fam.size_class
            ratio_goal = s.ratio_goal_small if size_class == "small" else s.ratio_goal_large
            for batch in s.batches:
                data = _make_data(fam.manifold, batch, s, rng, fam.extended)
                for op in fam.build(batch):
                    t0 = time.perf_counter()
                    cell: dict[str, Any] = {
                        "manifold": family,
                        "size": size,
                        "size_class": size_class,
                        "batch": batch,
                        "op": op.name,
                        "peer_methods": {"pymanopt": op.pymanopt_name, "geoopt": op.geoopt_name},
                        "pymanopt_batched": op.pymanopt_batched is not None,
                        "note": op.note,
                    }
                    cell.update(_run_cell(op, data, batch, s))
                    _summarise_cell(cell, batch, ratio_goal, fam.speedup_goal)
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
            "sphere_note": f"Sphere(n) with n = {s.sphere_n}: unit vectors in R^{s.sphere_n}",
            "lorentz_note": f"Lorentz(n) with n = {s.lorentz_n}: points in R^{s.lorentz_n + 1}",
            "dtype": "float64",
            "ratio_definition": "fastest riemfl backend / fastest peer variant (loop or batched)",
            "speedup_definition": (
                "Python loop of single-point calls of the fastest peer / "
                "fastest riemfl batched call"
            ),
        },
        "cells": cells,
        "summary": _summary(cells),
        "total_s": time.perf_counter() - started,
    }
    if out is not None:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1))
    return result


def _cell_id(c: dict[str, Any]) -> str:
    return f"{c['manifold']} {c['size']} b={c['batch']} {c['op']}"


def _summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
    ratio_cells = [c for c in cells if c["goals"]["ratio_met"] is not None]
    speed_cells = [c for c in cells if c["goals"].get("speedup_met") is not None]
    disagree = [
        f"{_cell_id(c)} vs {k}: {v:.1e}"
        for c in cells
        for k, v in c["agreement"].items()
        if not v <= 1e-6
    ]
    return {
        "ratio_goal": {
            "checked": len(ratio_cells),
            "met": sum(c["goals"]["ratio_met"] for c in ratio_cells),
            "missed": [_cell_id(c) for c in ratio_cells if not c["goals"]["ratio_met"]],
        },
        "speedup_goal": {
            "checked": len(speed_cells),
            "met": sum(c["goals"]["speedup_met"] for c in speed_cells),
            "missed": [_cell_id(c) for c in speed_cells if not c["goals"]["speedup_met"]],
        },
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


def _goal_col(c: dict[str, Any]) -> str:
    g = c["goals"]
    misses = []
    if g["ratio_met"] is False:
        misses.append("ratio")
    if g.get("speedup_met") is False:
        misses.append("speedup")
    if misses:
        return "NO: " + "+".join(misses)
    if g["ratio_met"] is None and g.get("speedup_met") is None:
        return "n/a"
    return "yes"


def format_table(result: dict[str, Any]) -> str:
    """The results as one fixed-width text table (median milliseconds per call)."""
    head = (
        "manifold",
        "size",
        "batch",
        "op",
        "riemfl-np ms",
        "riemfl-torch ms",
        "pymanopt ms",
        "geoopt ms",
        "ratio",
        "speedup",
        "goal met?",
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
                "no peer" if c["ratio"] is None else f"{c['ratio']:.2f}",
                "-" if c["speedup_vs_loop"] is None else f"{c['speedup_vs_loop']:.1f}x",
                _goal_col(c),
            )
        )
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    left = {0, 1, 3, 10}

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


def format_summary(result: dict[str, Any]) -> str:
    """Goals met and missed, plus any peer output that disagrees with riemfl's."""
    s = result["settings"]
    summ = result["summary"]
    r, sp = summ["ratio_goal"], summ["speedup_goal"]
    lines = [
        f"ratio goal (<= {s['ratio_goal_small']} at the small sizes, <= {s['ratio_goal_large']} "
        f"at the large ones: the two larger Stiefel sizes, n >= {s['large_from']} elsewhere): "
        f"met in {r['met']}/{r['checked']} cells with a peer",
    ]
    lines += [f"  missed: {m}" for m in r["missed"]]
    lines.append(
        f"batched speed-up goal (over a Python loop of the fastest peer: >= {s['speedup_goal']}x "
        f"for Stiefel, Sphere and Lorentz, >= {s['speedup_goal_new']}x for the other families): "
        f"met in {sp['met']}/{sp['checked']} cells"
    )
    lines += [f"  missed: {m}" for m in sp["missed"]]
    lines.append(f"no peer (riemfl timed only): {len(summ['no_peer'])} cells")
    if summ["disagreements"]:
        lines.append("peer outputs differing from riemfl's by more than 1e-6 (relative):")
        lines += [f"  {d}" for d in summ["disagreements"]]
    else:
        lines.append("every peer output agrees with riemfl's to 1e-6 (relative)")
    return "\n".join(lines)


def _header(result: dict[str, Any]) -> str:
    m, s = result["machine"], result["settings"]
    return "\n".join(
        [
            f"riemfl {m['riemfl']} vs pymanopt {m['pymanopt']} / geoopt {m['geoopt']}; "
            f"numpy {m['numpy']}, torch {m['torch']}, python {m['python']}",
            f"{m['processor']} ({m['cpu_count']} CPUs, load average {m['load_average_1min']}), "
            f"torch threads {m['torch_threads']}, BLAS threads {m['blas_threads']}",
            f"float64; {s['sphere_note']}; {s['lorentz_note']}; tangent norm "
            f"{s['tangent_norm']}, y = retract(x, u)",
            "median ms per call. batch 1: one point, no batch axis. batch 64: riemfl one "
            "call; peer column = its fastest variant, L = Python loop of 64 calls, B = its own "
            "batched call",
            "ratio = fastest riemfl backend / fastest peer; speedup = loop over the fastest peer "
            "/ fastest riemfl batched call",
        ]
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command-line entry point: run, print the table and the summary, write the JSON.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments (default: ``sys.argv[1:]``): ``--quick``, ``--out PATH``, ``--budget S``,
        ``--verbose``, ``--manifolds A,B`` (families of ``FAMILY_NAMES``).

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
    parser.add_argument("--verbose", action="store_true", help="progress per cell on stderr")
    parser.add_argument(
        "--manifolds",
        default=None,
        help=f"comma-separated families to run (default all: {','.join(FAMILY_NAMES)})",
    )
    args = parser.parse_args(argv)
    settings = Settings.quick() if args.quick else Settings()
    if args.manifolds is not None:
        settings.manifolds = [m.strip() for m in args.manifolds.split(",") if m.strip()]
    if args.budget is not None:
        settings.budget_s = args.budget
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

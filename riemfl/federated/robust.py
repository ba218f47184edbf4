r"""Robust aggregators for the sum-only phases of the synchronous rules.

An :class:`~riemfl.federated.aggregation.Aggregator` receives the stacked uploads of a sum-only
phase and returns ``(total, count)``; the rule's server step reads the mean ``total / count``
(:meth:`~riemfl.federated.algorithm.SyncAlgorithm.server_step_from_sum`). Every aggregator here
computes a robust centre :math:`c` of the uploads and returns ``({key: c * m}, m)``, m the number
of uploads: the rule's mean is then :math:`c` (up to one rounding of the product and the
quotient), and ``count`` stays the number of contributors, which a server optimiser or a rule may
read as such.

The uploads of the sum-only phases live in a flat space: tangent vectors at the broadcast point
:math:`x^r` (RFedAvg, RFedProx, RFedSVRG with ``upload="tangent"``, key ``u``; RFedSVRG's anchor
gradients, key ``grad``) or ambient arrays (RFedProj, key ``x``). An upload is one vector, the
concatenation of its flattened keys, and distances are Frobenius (Euclidean) ones. For a
submanifold with the embedded metric (Sphere, Stiefel's embedded metric) this is the tangent
metric; for another metric the Frobenius norm approximates it.

* :class:`GeometricMedian`: :math:`\arg\min_c \sum_i \|c - u_i\|` (Weiszfeld's algorithm,
  :func:`riemfl.stats.geometric_median` on :class:`~riemfl.manifolds.Euclidean`).
* :class:`TrimmedMean`: the mean of the uploads left after dropping the
  :math:`\lfloor \beta m \rfloor` farthest from the geometric median.
* :class:`Krum`, :class:`MultiKrum` (Blanchard et al. 2017): the upload, or the mean of the
  ``n_selected`` uploads, of smallest score :math:`s_i = \sum_{j \in N_i} \|u_i - u_j\|^2`,
  :math:`N_i` the :math:`m - f - 2` nearest other uploads.
* :class:`CenteredClipping` (Karimireddy, He & Jaggi 2021): :math:`v \leftarrow v + \frac1m
  \sum_i \mathrm{clip}_\tau(u_i - v)` from the previous round's aggregate (or from 0).

Ties are broken by the stack position: among equal scores or distances the lower position is
kept. None of these can act on a sum computed elsewhere (``takes_totals`` is False): secure
aggregation, which hands the server only the sum, refuses them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._validation import integer, real
from ..backend import ops_for, to_like, to_numpy
from ..errors import ParameterError
from ..manifolds.euclidean import Euclidean
from ..stats.median import geometric_median
from .aggregation import Aggregator, State
from .rounds import take_rows

__all__ = [
    "GeometricMedian",
    "TrimmedMean",
    "Krum",
    "MultiKrum",
    "CenteredClipping",
    "CENTERS",
    "AGGREGATOR_NAMES",
    "build_aggregator",
]

#: where :class:`CenteredClipping` starts its iteration each round
CENTERS = ("previous", "zero")


# ------------------------------------------------------------------------------- flat uploads
class _Flat:
    """The stacked uploads as one matrix of shape (m, D), the concatenation of the flattened
    keys, and the way back to ``{key: array}``."""

    def __init__(self, uploads: State, owner: str) -> None:
        if not uploads:
            raise ParameterError(f"{owner}: no uploads to aggregate")
        self.keys = list(uploads)
        first = uploads[self.keys[0]]
        self.m = int(first.shape[0])
        if self.m < 1:
            raise ParameterError(f"{owner}: no uploads to aggregate (a stack of 0 rows)")
        self.ops = ops_for(first)
        self.shapes = [tuple(uploads[k].shape[1:]) for k in self.keys]
        parts = [self.ops.reshape(uploads[k], (self.m, -1)) for k in self.keys]
        self.matrix = parts[0] if len(parts) == 1 else self.ops.concatenate(parts, axis=1)

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def unflatten(self, vector: Any) -> State:
        """``{key: array}`` of one flat vector of length D."""
        out, start = {}, 0
        for key, shape in zip(self.keys, self.shapes, strict=True):
            size = math.prod(shape)
            out[key] = self.ops.reshape(vector[start : start + size], shape)
            start += size
        return out

    def answer(self, centre: Any) -> tuple[State, int]:
        """``({key: centre * m}, m)``: the rule's mean ``total / count`` is the centre."""
        return {k: v * self.m for k, v in self.unflatten(centre).items()}, self.m

    def mean_of(self, rows: np.ndarray) -> Any:
        """The mean of the rows at the stack positions ``rows``."""
        chosen = take_rows(self.matrix, rows)
        return self.ops.sum(chosen, axis=0) / len(rows)

    def numpy64(self) -> np.ndarray:
        return to_numpy(self.matrix).astype(np.float64)


def squared_distances(points: np.ndarray) -> np.ndarray:
    """The (m, m) matrix of squared Euclidean distances between the rows of ``points``, exactly
    symmetric (each entry is a sum of squared differences, not a Gram-matrix expansion)."""
    m = points.shape[0]
    out = np.empty((m, m))
    for i in range(m):
        diff = points - points[i]
        out[i] = np.einsum("ij,ij->i", diff, diff)
    return out


def _median(flat: _Flat, tol: float, max_iter: int) -> tuple[Any, int]:
    """The geometric median of the rows (type, dtype and device of the uploads) and the number
    of Weiszfeld steps taken."""
    result = geometric_median(Euclidean(flat.dim), flat.matrix, tol=tol, max_iter=max_iter)
    return result.point, result.iterations


# ------------------------------------------------------------------------------- aggregators
class GeometricMedian(Aggregator):
    r"""The geometric median :math:`\arg\min_c \sum_i \|c - u_i\|_F` of the uploads.

    Its breakdown point is 1/2: fewer than half of the uploads, moved arbitrarily far, move it
    a bounded amount (with k of m replaced, it stays within :math:`2(m-k)/(m-2k)` times the
    radius of the others about any centre). ``row()``: ``median_iterations``, the Weiszfeld
    steps of the last aggregation.

    Parameters
    ----------
    tol : float
        Stop when the norm of the smallest subgradient of the normalised objective (a number in
        [0, 1]) is at most ``tol``; > 0 (:func:`riemfl.stats.geometric_median`).
    max_iter : int
        The largest number of Weiszfeld steps, >= 0.
    """

    sums = False  # count times a robust centre, not the sum

    def __init__(self, tol: float = 1e-10, max_iter: int = 1000) -> None:
        self.tol = real(tol, "GeometricMedian: tol", above=0)
        self.max_iter = integer(max_iter, "GeometricMedian: max_iter", minimum=0)
        self.iterations = 0

    def aggregate(self, uploads: State, phase: int) -> tuple[State, int]:
        flat = _Flat(uploads, type(self).__name__)
        centre, self.iterations = _median(flat, self.tol, self.max_iter)
        return flat.answer(centre)

    def row(self) -> dict[str, Any]:
        return {"median_iterations": self.iterations}

    def describe(self) -> dict[str, Any]:
        return {"name": "geometric_median", "tol": self.tol, "max_iter": self.max_iter}


class TrimmedMean(Aggregator):
    r"""The mean of the uploads left after dropping the :math:`\lfloor \beta m\rfloor` farthest
    (Frobenius distance) from their geometric median.

    With k < m/2 uploads replaced by arbitrary ones and :math:`\lfloor \beta m\rfloor \ge k`,
    every replaced upload farther from the median than all the others is dropped and the mean
    stays within the others' hull. Ties in distance: the upload of lower stack position is kept.
    ``row()``: ``trimmed``, the number of uploads dropped in the last aggregation.

    Parameters
    ----------
    trim : float
        :math:`\beta \in [0, 0.5)`, the fraction dropped.
    tol, max_iter
        Of the geometric median (:class:`GeometricMedian`).
    """

    sums = False  # count times a robust centre, not the sum

    def __init__(self, trim: float = 0.2, tol: float = 1e-10, max_iter: int = 1000) -> None:
        self.trim = real(trim, "TrimmedMean: trim", at_least=0, below=0.5)
        self.tol = real(tol, "TrimmedMean: tol", above=0)
        self.max_iter = integer(max_iter, "TrimmedMean: max_iter", minimum=0)
        self.trimmed = 0

    def aggregate(self, uploads: State, phase: int) -> tuple[State, int]:
        flat = _Flat(uploads, type(self).__name__)
        drop = math.floor(self.trim * flat.m)
        self.trimmed = drop
        if drop == 0:
            return flat.answer(flat.mean_of(np.arange(flat.m)))
        centre, _ = _median(flat, self.tol, self.max_iter)
        points = flat.numpy64()
        diff = points - to_numpy(centre).astype(np.float64)
        dist = np.einsum("ij,ij->i", diff, diff)
        keep = np.sort(np.argsort(dist, kind="stable")[: flat.m - drop])
        return flat.answer(flat.mean_of(keep))

    def row(self) -> dict[str, Any]:
        return {"trimmed": self.trimmed}

    def describe(self) -> dict[str, Any]:
        return {"name": "trimmed_mean", "trim": self.trim, "tol": self.tol}


def krum_scores(points: np.ndarray, n_byzantine: int) -> np.ndarray:
    r"""Krum's score of each row: the sum of its squared distances to its :math:`m - f - 2`
    nearest other rows (Blanchard et al. 2017), m >= 2f + 3 checked by the caller."""
    m = points.shape[0]
    sq = squared_distances(points)
    np.fill_diagonal(sq, np.inf)  # a row is not its own neighbour
    nearest = m - n_byzantine - 2
    return np.sort(sq, axis=1)[:, :nearest].sum(axis=1)


class MultiKrum(Aggregator):
    r"""Multi-Krum (Blanchard et al. 2017): the mean of the ``n_selected`` uploads of smallest
    Krum score.

    Upload i's score is :math:`s_i = \sum_{j \in N_i} \|u_i - u_j\|_F^2`, :math:`N_i` the
    :math:`m - f - 2` uploads nearest to :math:`u_i` (itself excluded); the selection is made in
    one pass over the scores. Krum's guarantee needs :math:`m \ge 2f + 3` and the selection at
    most the :math:`m - f` honest uploads; an aggregation of fewer uploads, or of
    ``n_selected > m - f``, raises :class:`~riemfl.errors.ParameterError`. Ties in score: the
    lower stack position is selected. ``row()``: ``krum_selected``, the stack position of the
    best-scored upload of the last aggregation (-1 before any), and ``krum_dropped``, how many
    uploads were left out. :attr:`selected` holds all the positions selected.

    Parameters
    ----------
    n_byzantine : int
        f >= 0, the number of Byzantine uploads tolerated.
    n_selected : int, optional
        The number of uploads averaged, >= 1 (1: Krum). Default: :math:`m - f`, every upload
        the guarantee allows (Blanchard et al. 2017's choice for Multi-Krum).
    """

    sums = False  # count times a robust centre, not the sum

    def __init__(self, n_byzantine: int, n_selected: int | None = None) -> None:
        name = type(self).__name__
        self.n_byzantine = integer(n_byzantine, f"{name}: n_byzantine", minimum=0)
        self.n_selected = (
            None if n_selected is None else integer(n_selected, f"{name}: n_selected", minimum=1)
        )
        self.selected: tuple[int, ...] = ()
        self.dropped = 0

    def aggregate(self, uploads: State, phase: int) -> tuple[State, int]:
        flat = _Flat(uploads, type(self).__name__)
        m, f = flat.m, self.n_byzantine
        if m < 2 * f + 3:
            raise ParameterError(
                f"{type(self).__name__}: m = {m} uploads with n_byzantine f = {f}; Krum needs "
                f"m >= 2f + 3 = {2 * f + 3}"
            )
        n_selected = m - f if self.n_selected is None else self.n_selected
        if n_selected > m - f:
            raise ParameterError(
                f"{type(self).__name__}: n_selected = {n_selected} exceeds m - f = "
                f"{m - f} (m = {m} uploads, f = {f}): the selection could include a Byzantine "
                "upload"
            )
        scores = krum_scores(flat.numpy64(), f)
        order = np.argsort(scores, kind="stable")[:n_selected]
        self.selected = tuple(int(i) for i in order)
        self.dropped = m - n_selected
        if n_selected == 1:
            return flat.answer(flat.matrix[self.selected[0]])
        return flat.answer(flat.mean_of(np.sort(order)))

    def row(self) -> dict[str, Any]:
        return {
            "krum_selected": self.selected[0] if self.selected else -1,
            "krum_dropped": self.dropped,
        }

    def describe(self) -> dict[str, Any]:
        return {
            "name": "multi_krum",
            "n_byzantine": self.n_byzantine,
            "n_selected": self.n_selected,
        }


class Krum(MultiKrum):
    """Krum (Blanchard et al. 2017): the upload of smallest score (:class:`MultiKrum` with
    ``n_selected=1``)."""

    def __init__(self, n_byzantine: int) -> None:
        super().__init__(n_byzantine, 1)

    def describe(self) -> dict[str, Any]:
        return {"name": "krum", "n_byzantine": self.n_byzantine}


class CenteredClipping(Aggregator):
    r"""Centered clipping (Karimireddy, He & Jaggi 2021):
    :math:`v \leftarrow v + \frac1m \sum_i \mathrm{clip}_\tau(u_i - v)`, ``iterations`` times,
    with :math:`\mathrm{clip}_\tau(z) = z \min(1, \tau/\|z\|_F)`.

    ``center="previous"``: v starts from the previous aggregate of the same phase (0 in the
    first round), a run state checkpointed with the round (``state_dict``). The tangent uploads
    of two rounds lie in the tangent spaces of two different points; v is kept as the previous
    aggregate's ambient array and is not transported. ``center="zero"``: v starts from 0 every
    round (no state), which suits uploads that are displacements (tangent vectors), not points
    (RFedProj's uploads are points: use ``"previous"`` there).

    Every upload within :math:`\tau` of v moves v onto the mean; an upload farther moves it by at
    most :math:`\tau/m` per iteration, so identical uploads u are returned only when
    :math:`\|u - v\|_F \le \tau` (else v moves :math:`\tau` towards u per iteration).
    ``row()``: ``clipped``, the number of uploads clipped in the last iteration of the last
    aggregation.

    Parameters
    ----------
    tau : float
        The clipping radius, > 0.
    iterations : int
        The number of clipping iterations per aggregation, >= 1.
    center : {"previous", "zero"}
        Where v starts each round.
    """

    sums = False  # count times a robust centre, not the sum

    def __init__(self, tau: float, iterations: int = 1, center: str = "previous") -> None:
        self.tau = real(tau, "CenteredClipping: tau", above=0)
        self.iterations = integer(iterations, "CenteredClipping: iterations", minimum=1)
        if center not in CENTERS:
            raise ParameterError(
                f"CenteredClipping: center must be one of {list(CENTERS)}, got {center!r}"
            )
        self.center = center
        self.centres: dict[str, np.ndarray] = {}
        self.clipped = 0

    def _start(self, flat: _Flat, phase: int) -> Any:
        """The starting v of ``phase``: the previous aggregate, or zeros."""
        zero = 0 * flat.matrix[0]
        previous = self.centres.get(str(phase)) if self.center == "previous" else None
        if previous is None:
            return zero
        if previous.shape != (flat.dim,):
            raise ParameterError(
                f"CenteredClipping: the previous aggregate of phase {phase} has "
                f"{previous.shape[0]} entries, the uploads {flat.dim}"
            )
        return to_like(previous, zero)

    def aggregate(self, uploads: State, phase: int) -> tuple[State, int]:
        flat = _Flat(uploads, type(self).__name__)
        ops = flat.ops
        v = self._start(flat, phase)
        for _ in range(self.iterations):
            diff = flat.matrix - v
            norms = to_numpy(ops.sqrt(ops.sum(diff * diff, axis=1))).astype(np.float64)
            over = norms > self.tau
            factor = np.where(over, self.tau / np.where(over, norms, 1.0), 1.0)
            scaled = diff * to_like(factor.reshape(-1, 1), diff)
            v = v + ops.sum(scaled, axis=0) / flat.m
            self.clipped = int(over.sum())
        if self.center == "previous":
            self.centres[str(phase)] = to_numpy(v).copy()
        return flat.answer(v)

    def row(self) -> dict[str, Any]:
        return {"clipped": self.clipped}

    def state_dict(self) -> dict[str, Any]:
        return {"centres": {k: v.copy() for k, v in self.centres.items()}, "clipped": self.clipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.centres = {str(k): np.asarray(v).copy() for k, v in state["centres"].items()}
        self.clipped = int(state["clipped"])

    def describe(self) -> dict[str, Any]:
        return {
            "name": "centered_clipping",
            "tau": self.tau,
            "iterations": self.iterations,
            "center": self.center,
        }


#: the names of :func:`build_aggregator` (``riemfl run --aggregator``)
AGGREGATOR_NAMES = ("mean", "median", "trimmed", "krum", "multikrum", "clipped")


def build_aggregator(
    name: str,
    *,
    n_byzantine: int = 0,
    trim: float = 0.2,
    tau: float = 1.0,
    clip_iterations: int = 1,
) -> Aggregator | None:
    """The aggregator called ``name`` (one of :data:`AGGREGATOR_NAMES`).

    ``"mean"``: None (the rule's plain mean); ``"median"``: :class:`GeometricMedian`;
    ``"trimmed"``: :class:`TrimmedMean` dropping the fraction ``trim``; ``"krum"``,
    ``"multikrum"``: :class:`Krum`, :class:`MultiKrum` (averaging :math:`m - f`) with
    ``n_byzantine`` f; ``"clipped"``: :class:`CenteredClipping` of radius ``tau`` from the
    previous aggregate, ``clip_iterations`` iterations.

    Raises
    ------
    ParameterError
        An unknown name, or a parameter the aggregator refuses.
    """
    if name == "mean":
        return None
    if name == "median":
        return GeometricMedian()
    if name == "trimmed":
        return TrimmedMean(trim)
    if name == "krum":
        return Krum(n_byzantine)
    if name == "multikrum":
        return MultiKrum(n_byzantine)
    if name == "clipped":
        return CenteredClipping(tau, clip_iterations)
    raise ParameterError(f"aggregator must be one of {list(AGGREGATOR_NAMES)}, got {name!r}")

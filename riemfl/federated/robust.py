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

Point uploads (RFedAvg, RFedProx, RFedSVRG with ``upload="point"``) are aggregated in the
tangent space at :math:`x^r` through the rule's inverse retraction (the default) or on the
manifold with geodesic distances and :mod:`riemfl.stats` (``geometry="geodesic"``);
:class:`RobustAggregator` says how and why the default is the tangent space.

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
from ..stats.frechet import frechet_mean
from ..stats.median import geometric_median
from .aggregation import Aggregator, State
from .rounds import take_rows

__all__ = [
    "RobustAggregator",
    "GeometricMedian",
    "TrimmedMean",
    "Krum",
    "MultiKrum",
    "CenteredClipping",
    "CENTERS",
    "GEOMETRIES",
    "AGGREGATOR_NAMES",
    "build_aggregator",
]

#: where :class:`CenteredClipping` starts its iteration each round
CENTERS = ("previous", "zero")
#: how a robust aggregator treats point uploads (:class:`RobustAggregator`)
GEOMETRIES = ("tangent", "geodesic")


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
class RobustAggregator(Aggregator):
    r"""An aggregator that returns ``count`` times a robust centre of the uploads (``sums`` is
    False), for sum-only phases and for point uploads.

    Point uploads (a phase of a rule that declares
    :meth:`~riemfl.federated.algorithm.SyncAlgorithm.point_uploads`: RFedAvg, RFedProx and
    RFedSVRG with ``upload="point"``) are replaced by one centre, from which the rule takes its
    own server step (:func:`~riemfl.federated.aggregation.server_update`):

    * ``geometry="tangent"`` (the default): the centre of the rule's updates
      :math:`R^{-1}_{x^r}(x_i)` (:meth:`~riemfl.federated.algorithm.SyncAlgorithm.update_of`)
      with Frobenius distances, carried back by :math:`R_{x^r}`: what the same aggregator
      computes for ``upload="tangent"``. The inverse retraction is defined for any upload, so
      no upload can stop the server.
    * ``geometry="geodesic"``: the centre on the manifold with geodesic distances
      (:mod:`riemfl.stats`): needs ``exp``, ``log`` and ``dist``, and a log that converges
      for the spread of the uploads; Stiefel's converges below a distance of about
      :math:`\pi/2`, so one far upload (a Byzantine one) can make it raise
      :class:`~riemfl.errors.ConvergenceError`.
    """

    sums = False  # count times a robust centre, not the sum

    def __init__(self, geometry: str = "tangent") -> None:
        if geometry not in GEOMETRIES:
            raise ParameterError(
                f"{type(self).__name__}: geometry must be one of {list(GEOMETRIES)}, got "
                f"{geometry!r}"
            )
        self.geometry = geometry

    def centre_of_points(
        self, rule: Any, manifold: Any, message: State, uploads: State, phase: int
    ) -> Any:
        key = rule.point_uploads(phase)
        if self.geometry == "geodesic":
            _PointStack.require(manifold, type(self).__name__)
            return self.geodesic_centre(manifold, uploads[key])
        updates = rule.update_of(message, {key: uploads[key]}, phase)
        total, count = self.aggregate(updates, phase)
        centre = {k: (v / count)[None] for k, v in total.items()}
        return rule.upload_of(message, centre, phase)[key][0]

    def geodesic_centre(self, manifold: Any, points: Any) -> Any:
        """The centre of the stacked ``points`` on ``manifold`` (``geometry="geodesic"``)."""
        raise ParameterError(f"{type(self).__name__} has no geodesic version")

    def _base_description(self) -> dict[str, Any]:
        return {"geometry": self.geometry}


class _PointStack:
    """Geodesic distances between stacked points of a manifold."""

    MAPS = ("exp", "log", "dist")

    @classmethod
    def require(cls, manifold: Any, owner: str) -> None:
        for name in cls.MAPS:
            ok, why = manifold.supports(name)
            if not ok:
                raise ParameterError(
                    f"{owner}: geometry='geodesic' needs {manifold.name}.{name}: {why}; "
                    "geometry='tangent' works with the rule's inverse retraction"
                )

    @staticmethod
    def distances(manifold: Any, centre: Any, points: Any) -> np.ndarray:
        """Float64 geodesic distances from ``centre`` to each of ``points``."""
        ops = ops_for(points)
        anchors = ops.broadcast_to(centre, points.shape)
        return to_numpy(manifold.dist(anchors, points)).astype(np.float64)

    @classmethod
    def squared_distances(cls, manifold: Any, points: Any) -> np.ndarray:
        """The (m, m) symmetric matrix of squared geodesic distances (the mean of d(i, j) and
        d(j, i), which can differ by rounding)."""
        m = int(points.shape[0])
        d = np.stack([cls.distances(manifold, points[i], points) for i in range(m)])
        d = (d + d.T) / 2
        np.fill_diagonal(d, 0.0)
        return d * d

    @staticmethod
    def mean(manifold: Any, points: Any, rows: np.ndarray) -> Any:
        """The Frechet mean of the points at stack positions ``rows``."""
        chosen = take_rows(points, np.sort(rows))
        if len(rows) == 1:
            return chosen[0]
        return frechet_mean(manifold, chosen, uniqueness="ignore").point


class GeometricMedian(RobustAggregator):
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
    geometry : {"tangent", "geodesic"}
        Of point uploads (:class:`RobustAggregator`): "geodesic" is
        :func:`riemfl.stats.geometric_median` on the manifold (Fletcher et al. 2009).
    """

    def __init__(self, tol: float = 1e-10, max_iter: int = 1000, geometry: str = "tangent") -> None:
        super().__init__(geometry)
        self.tol = real(tol, "GeometricMedian: tol", above=0)
        self.max_iter = integer(max_iter, "GeometricMedian: max_iter", minimum=0)
        self.iterations = 0

    def aggregate(self, uploads: State, phase: int) -> tuple[State, int]:
        flat = _Flat(uploads, type(self).__name__)
        centre, self.iterations = _median(flat, self.tol, self.max_iter)
        return flat.answer(centre)

    def geodesic_centre(self, manifold: Any, points: Any) -> Any:
        result = geometric_median(manifold, points, tol=self.tol, max_iter=self.max_iter)
        self.iterations = result.iterations
        return result.point

    def row(self) -> dict[str, Any]:
        return {"median_iterations": self.iterations}

    def describe(self) -> dict[str, Any]:
        return {
            "name": "geometric_median",
            "tol": self.tol,
            "max_iter": self.max_iter,
            **self._base_description(),
        }


class TrimmedMean(RobustAggregator):
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
    geometry : {"tangent", "geodesic"}
        Of point uploads (:class:`RobustAggregator`): "geodesic" drops the points farthest
        in geodesic distance from their geometric median on the manifold and returns the
        Frechet mean of the rest (:func:`riemfl.stats.frechet_mean`).
    """

    def __init__(
        self, trim: float = 0.2, tol: float = 1e-10, max_iter: int = 1000, geometry: str = "tangent"
    ) -> None:
        super().__init__(geometry)
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

    def geodesic_centre(self, manifold: Any, points: Any) -> Any:
        m = int(points.shape[0])
        drop = self.trimmed = math.floor(self.trim * m)
        if drop == 0:
            return _PointStack.mean(manifold, points, np.arange(m))
        median = geometric_median(manifold, points, tol=self.tol, max_iter=self.max_iter).point
        dist = _PointStack.distances(manifold, median, points)
        return _PointStack.mean(manifold, points, np.argsort(dist, kind="stable")[: m - drop])

    def row(self) -> dict[str, Any]:
        return {"trimmed": self.trimmed}

    def describe(self) -> dict[str, Any]:
        return {
            "name": "trimmed_mean",
            "trim": self.trim,
            "tol": self.tol,
            **self._base_description(),
        }


def krum_scores(sq: np.ndarray, n_byzantine: int) -> np.ndarray:
    r"""Krum's score of each upload from the (m, m) matrix ``sq`` of squared distances: the
    sum of its squared distances to its :math:`m - f - 2` nearest others (Blanchard et al.
    2017), m >= 2f + 3 checked by the caller."""
    m = sq.shape[0]
    sq = sq.copy()
    np.fill_diagonal(sq, np.inf)  # an upload is not its own neighbour
    nearest = m - n_byzantine - 2
    return np.sort(sq, axis=1)[:, :nearest].sum(axis=1)


class MultiKrum(RobustAggregator):
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
    geometry : {"tangent", "geodesic"}
        Of point uploads (:class:`RobustAggregator`): "geodesic" scores with squared geodesic
        distances and averages the selected points by their Frechet mean.
    """

    def __init__(
        self, n_byzantine: int, n_selected: int | None = None, geometry: str = "tangent"
    ) -> None:
        super().__init__(geometry)
        name = type(self).__name__
        self.n_byzantine = integer(n_byzantine, f"{name}: n_byzantine", minimum=0)
        self.n_selected = (
            None if n_selected is None else integer(n_selected, f"{name}: n_selected", minimum=1)
        )
        self.selected: tuple[int, ...] = ()
        self.dropped = 0

    def _select(self, sq: np.ndarray) -> np.ndarray:
        """The stack positions selected from the squared distances ``sq``, best score first,
        after the checks of m and n_selected."""
        m, f = sq.shape[0], self.n_byzantine
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
        order = np.argsort(krum_scores(sq, f), kind="stable")[:n_selected]
        self.selected = tuple(int(i) for i in order)
        self.dropped = m - n_selected
        return order

    def aggregate(self, uploads: State, phase: int) -> tuple[State, int]:
        flat = _Flat(uploads, type(self).__name__)
        order = self._select(squared_distances(flat.numpy64()))
        if len(order) == 1:
            return flat.answer(flat.matrix[int(order[0])])
        return flat.answer(flat.mean_of(np.sort(order)))

    def geodesic_centre(self, manifold: Any, points: Any) -> Any:
        order = self._select(_PointStack.squared_distances(manifold, points))
        return _PointStack.mean(manifold, points, order)

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
            **self._base_description(),
        }


class Krum(MultiKrum):
    """Krum (Blanchard et al. 2017): the upload of smallest score (:class:`MultiKrum` with
    ``n_selected=1``)."""

    def __init__(self, n_byzantine: int, geometry: str = "tangent") -> None:
        super().__init__(n_byzantine, 1, geometry)

    def describe(self) -> dict[str, Any]:
        return {"name": "krum", "n_byzantine": self.n_byzantine, **self._base_description()}


class CenteredClipping(RobustAggregator):
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

    Point uploads are clipped in the tangent space at :math:`x^r` (the rule's
    :math:`R^{-1}_{x^r}(x_i)`, ``geometry="tangent"`` of :class:`RobustAggregator`), as
    Karimireddy et al. clip displacements; there is no geodesic version.

    Parameters
    ----------
    tau : float
        The clipping radius, > 0.
    iterations : int
        The number of clipping iterations per aggregation, >= 1.
    center : {"previous", "zero"}
        Where v starts each round.
    """

    def __init__(self, tau: float, iterations: int = 1, center: str = "previous") -> None:
        super().__init__("tangent")
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

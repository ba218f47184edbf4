r"""A two-dimensional learned manifold: the quadratic Bezier triangle, and AsyncBezierTriangle.

Licudi et al. 2025, Sec. 3, let the latent manifold M be any geodesically connected manifold with
boundary (their Fig. 2 draws a learned disk embedded in :math:`\mathbb R^3`); their experiments use
the curve M = [0, 1] only. Here M is the standard 2-simplex, points in barycentric coordinates
:math:`x = (u, v, w)`, :math:`u + v + w = 1`, and :math:`\iota_\phi` is the quadratic Bezier
triangle of six control points :math:`P_{ijk}`, :math:`i + j + k = 2`:

.. math::  \iota_\phi(x) = \sum_{i+j+k=2} \frac{2}{i!\,j!\,k!}\,u^i v^j w^k\,P_{ijk}
           = u^2 P_{200} + 2uv\,P_{110} + v^2 P_{020} + 2uw\,P_{101} + 2vw\,P_{011}
             + w^2 P_{002},

stored in the order of :data:`MULTI_INDICES`. The vertex :math:`P_{200}` is the global model the
client received (latent ``start`` = (1, 0, 0)), :math:`P_{020}` its local model (:math:`\omega`
= (0, 1, 0)), :math:`P_{002}` a third, learned vertex. On the edge w = 0 the triangle is the
quadratic Bezier curve :math:`(P_{200}, P_{110}, P_{020})` of eq. (8): the first three control
points are AsyncBezier's (A, B, C). The point parametrisation :math:`\phi_\Theta` (all six equal
to :math:`\Theta`) gives :math:`\iota_{\phi_\Theta}(M) = \{\Theta\}`, the compression requirement
(i) of Sec. 3.

The server's latent path from ``start`` to :math:`\omega` (:class:`BezierTriangleEmbedding`,
``path``):

* ``"segment"`` (default): the straight latent segment, i.e. the edge w = 0. The step of eq. (12)
  is then exactly AsyncBezier's on the edge curve; the interior of the triangle enters through
  what the client learned (the edge control point is trained with samples off the edge too).
* ``"geodesic"``: the shortest path on the learned surface, in the metric pulled back from
  :math:`M_\Theta` (the framework's :math:`v^\tau = \exp^{-1}(\omega)` in :math:`M_\phi`, Sec. 3).
  It is the minimiser of the discrete path energy :math:`\sum_k\|\iota(x_{k+1}) -
  \iota(x_k)\|^2` over ``nodes`` latent segments inside the triangle (L-BFGS-B from the edge;
  riemfl's discretisation, the paper gives none). On a Euclidean base every distance on the
  surface is a quadratic form in the Bernstein weights with the 5 x 5 Gram matrix of
  :math:`P_{ijk} - P_{200}`, so after one pass over the control points for that matrix the
  search runs on an isometric copy of the surface in :math:`\mathbb R^5` (:func:`isometric_copy`),
  at a cost independent of the model size.

On a curved base the triangle is evaluated by de Casteljau's algorithm for triangles with every
three-point combination :math:`uP + vQ + wR` replaced by two geodesic interpolations,
:math:`\mathrm{Exp}_q(w\,\mathrm{Log}_q R)` with :math:`q = \mathrm{Exp}_P(\tfrac{v}{u+v}
\mathrm{Log}_P Q)` (exact on a Euclidean base; on an edge it is the geodesic de Casteljau
construction of the curve). The geodesic path needs the Euclidean base.

:func:`AsyncBezierTriangle` is the AsyncManifold rule (App. C, Alg. 1) over this embedding with
OrthoDC per control point; its client for torch models is
:class:`riemfl.nn.surface_trainer.SurfaceClientTrainer`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..._validation import integer
from ...backend import Array, is_torch, to_like
from ...errors import ParameterError, ShapeError
from ...manifolds.base import Manifold
from ...manifolds.control_points import ControlPoints
from ...manifolds.euclidean import Euclidean
from .correction import OrthoDCCorrection
from .embedding import BezierEmbedding, Embedding
from .rule import AsyncManifold

__all__ = [
    "MULTI_INDICES",
    "PATHS",
    "AsyncBezierTriangle",
    "BezierTriangleEmbedding",
    "band_point",
    "barycentric",
    "isometric_copy",
    "polyline",
    "surface_geodesic",
    "triangle_bernstein",
]

#: the multi-indices (i, j, k) of the six control points, in their storage order: the edge curve
#: from the global model to the local one first, then the points towards the third vertex
MULTI_INDICES = ((2, 0, 0), (1, 1, 0), (0, 2, 0), (1, 0, 1), (0, 1, 1), (0, 0, 2))
#: the server's latent path: the straight latent segment (the edge) or the surface geodesic
PATHS = ("segment", "geodesic")

_START = np.array([1.0, 0.0, 0.0])
_OMEGA = np.array([0.0, 1.0, 0.0])


def triangle_bernstein(x: Any) -> np.ndarray:
    r"""The six quadratic Bernstein polynomials :math:`\frac{2}{i!j!k!}u^i v^j w^k` at
    barycentric points x of shape (..., 3), in the order of :data:`MULTI_INDICES`.

    They sum to :math:`(u + v + w)^2 = 1` (a partition of unity) and are non-negative on the
    triangle.
    """
    x = np.asarray(x, dtype=np.float64)
    u, v, w = x[..., 0], x[..., 1], x[..., 2]
    return np.stack([u * u, 2 * u * v, v * v, 2 * u * w, 2 * v * w, w * w], axis=-1)


def _bernstein_jacobian(x: np.ndarray) -> np.ndarray:
    """d(weights)/d(u, v, w), shape (..., 6, 3)."""
    u, v, w = x[..., 0], x[..., 1], x[..., 2]
    z = np.zeros_like(u)
    rows = [
        (2 * u, z, z),
        (2 * v, 2 * u, z),
        (z, 2 * v, z),
        (2 * w, z, 2 * u),
        (z, 2 * w, 2 * v),
        (z, z, 2 * w),
    ]
    return np.stack([np.stack(r, axis=-1) for r in rows], axis=-2)


def barycentric(x: Any, where: str = "BezierTriangleEmbedding") -> np.ndarray:
    """``x`` as float64 barycentric coordinates of shape (..., 3) summing to 1.

    Coordinates may be negative (the polynomial extends beyond the triangle, as a curve's
    parameter extends beyond [0, 1]).

    Raises
    ------
    ShapeError
        The last axis is not of length 3.
    ParameterError
        The coordinates do not sum to 1 (to 1e-9) or are not finite.
    """
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 0 or arr.shape[-1] != 3:
        raise ShapeError(
            f"{where}: a latent point is barycentric (u, v, w), shape (..., 3); got shape "
            f"{arr.shape}"
        )
    if not np.isfinite(arr).all() or np.abs(arr.sum(axis=-1) - 1.0).max() > 1e-9:
        raise ParameterError(f"{where}: barycentric coordinates must be finite and sum to 1")
    return arr


def band_point(a: float, b: float, band: float) -> np.ndarray:
    r"""The latent point of two uniform draws a, b in [0, 1): uniform by area on the band
    :math:`\{w \le \text{band}\}` of the triangle along the edge from ``start`` to :math:`\omega`.

    :math:`w = 1 - \sqrt{1 - b\,(1 - (1 - \text{band})^2)}` (the band's area density of w is
    proportional to 1 - w), then :math:`v = (1 - w)\,a`, :math:`u = 1 - v - w`. ``band = 0``
    gives the edge point (1 - a, a, 0), the curve client's :math:`s = a` (b is then unused);
    ``band = 1`` the whole triangle.
    """
    band = float(band)
    if not 0.0 <= band <= 1.0:
        raise ParameterError(f"band must be in [0, 1], got {band!r}")
    w = 0.0 if band == 0.0 else 1.0 - np.sqrt(1.0 - float(b) * (1.0 - (1.0 - band) ** 2))
    v = (1.0 - w) * float(a)
    return np.array([1.0 - v - w, v, w])


def _sheared(r: np.ndarray, h: np.ndarray) -> np.ndarray:
    """(r, h) in the unit square -> ((1-h)(1-r), (1-h) r, h): r along the edge, h to the apex."""
    return np.stack([(1 - h) * (1 - r), (1 - h) * r, h], axis=-1)


def isometric_copy(phi: Array) -> np.ndarray:
    r"""Control points (6, 5) in :math:`\mathbb R^5` of a triangle isometric to
    :math:`\iota_\phi` (Euclidean base).

    With :math:`U_k = P_k - P_{200}` (k = 1..5) and :math:`G = UU^\top = R R^\top`
    (eigendecomposition), :math:`\iota(x) - \iota(y) = \sum_k (b_k(x) - b_k(y))\,U_k` has the
    norm of :math:`\sum_k (b_k(x) - b_k(y))\,R_k`: the copy with control points
    :math:`(0, R_1, \dots, R_5)` has every distance of the original. One pass over phi.
    """
    flat = np.asarray(phi, dtype=np.float64).reshape(6, -1)
    diff = flat[1:] - flat[0]
    lam, q = np.linalg.eigh(diff @ diff.T)
    return np.vstack([np.zeros(5), q * np.sqrt(np.clip(lam, 0.0, None))])


def surface_geodesic(points: np.ndarray, nodes: int = 8) -> np.ndarray:
    r"""The latent nodes (nodes + 1, 3) of the shortest path on the triangle with control points
    ``points`` (6, k) in :math:`\mathbb R^k`, from ``start`` (1, 0, 0) to :math:`\omega`
    (0, 1, 0).

    Minimises the discrete energy :math:`\sum_k \|\iota(x_{k+1}) - \iota(x_k)\|^2` (its minimiser
    spaces the images evenly and converges to the geodesic as the nodes grow) over the interior
    nodes, parametrised as :math:`x = ((1-h)(1-r), (1-h)r, h)` with (r, h) in the unit square so
    that the nodes stay in the triangle (L-BFGS-B with the exact gradient, started on the edge).
    A degenerate surface (zero energy gradient) keeps the edge.
    """
    from scipy.optimize import minimize  # on first use (scipy.optimize is ~20 MB)

    m = integer(nodes, "surface_geodesic: nodes", minimum=2)
    pts = np.asarray(points, dtype=np.float64)
    scale = float(np.abs(pts).max())
    if scale == 0.0:
        return _sheared(np.linspace(0.0, 1.0, m + 1), np.zeros(m + 1))
    pts = pts / scale

    def unpack(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        r = np.concatenate([[0.0], z[: m - 1], [1.0]])
        h = np.concatenate([[0.0], z[m - 1 :], [0.0]])
        return r, h

    def energy(z: np.ndarray) -> tuple[float, np.ndarray]:
        r, h = unpack(z)
        x = _sheared(r, h)
        y = triangle_bernstein(x) @ pts
        d = np.diff(y, axis=0)
        gy = 2.0 * (d[:-1] - d[1:])  # dE/dy at the interior nodes
        jac = np.swapaxes(_bernstein_jacobian(x[1:-1]), -1, -2) @ pts  # (m-1, 3, k): dy/d(u,v,w)
        ri, hi = r[1:-1, None], h[1:-1, None]
        dy_dr = (1 - hi) * (jac[:, 1] - jac[:, 0])
        dy_dh = -(1 - ri) * jac[:, 0] - ri * jac[:, 1] + jac[:, 2]
        grad = np.concatenate([(dy_dr * gy).sum(-1), (dy_dh * gy).sum(-1)])
        return float((d * d).sum()), grad

    z0 = np.concatenate([np.linspace(0.0, 1.0, m + 1)[1:-1], np.zeros(m - 1)])
    with _one_blas_thread():
        res = minimize(
            energy,
            z0,
            jac=True,
            method="L-BFGS-B",
            bounds=[(0.0, 1.0)] * (2 * (m - 1)),
            options={"maxiter": 500, "ftol": 1e-10, "gtol": 1e-8},
        )
    return _sheared(*unpack(res.x))


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """One BLAS thread for a problem of 2 (nodes - 1) variables: measured on a loaded 2-core
    machine, L-BFGS-B took 0.47 s per geodesic with the default threads, 0.024 s with one."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        yield
        return
    with threadpool_limits(limits=1):
        yield


def polyline(nodes: np.ndarray, r: float) -> np.ndarray:
    """The latent point at fraction r of a polyline of m + 1 nodes (node k at r = k/m); beyond
    [0, 1] it continues along the first or last segment."""
    m = nodes.shape[0] - 1
    pos = float(r) * m
    k = int(min(max(np.floor(pos), 0), m - 1))
    t = pos - k
    return (1.0 - t) * nodes[k] + t * nodes[k + 1]


class BezierTriangleEmbedding(Embedding):
    r"""The quadratic Bezier triangle as the learned manifold (module docstring).

    Parameters
    ----------
    base : Manifold
        :math:`M_\Theta`.
    path : {"segment", "geodesic"}
        The server's latent path from the global model's preimage to :math:`\omega`.
    nodes : int
        Latent segments of the discrete geodesic (``path="geodesic"``).

    Attributes
    ----------
    parameters : ControlPoints
        :math:`M_\Phi = (M_\Theta)^6`, points of shape ``(6, *point_shape)``.
    start, omega : numpy.ndarray
        (1, 0, 0) and (0, 1, 0): the latent points of the global and the local model.
    edge : BezierEmbedding
        The quadratic curve on the edge w = 0 (control points ``phi[:3]``).
    """

    #: the last geodesic found (a cache, not a setting)
    run_state_attributes = ("_cache",)

    def __init__(self, base: Manifold, *, path: str = "segment", nodes: int = 8) -> None:
        name = "BezierTriangleEmbedding"
        if not isinstance(base, Manifold):
            raise ParameterError(f"{name}(base) needs a Manifold base")
        if path not in PATHS:
            raise ParameterError(f"{name}: path must be one of {PATHS}, got {path!r}")
        self.euclidean = isinstance(base, Euclidean)
        if path == "geodesic" and not self.euclidean:
            raise ParameterError(
                f"{name}: path='geodesic' needs a Euclidean base (the surface's shortest path is "
                f"found on its Gram matrix); {base.name} supports path='segment' only"
            )
        self.base = base
        self.path = path
        self.nodes = integer(nodes, f"{name}: nodes", minimum=2)
        self.parameters = ControlPoints(base, 6)
        self.edge = BezierEmbedding(base, 2)
        self.start = _START.copy()
        self.omega = _OMEGA.copy()
        self._cache: tuple[bytes, np.ndarray] | None = None

    def describe(self) -> dict[str, Any]:
        """The embedding's settings."""
        return {"name": type(self).__name__, "path": self.path, "nodes": self.nodes}

    # ------------------------------------------------------------------ the map
    def point_parameters(self, theta: Array) -> Array:
        return self.parameters.phi(theta)

    def embed(self, phi: Array, s: Any) -> Array:
        r""":math:`\iota_\phi(x)` at barycentric x of shape (3,) or (..., 3)."""
        x = barycentric(s)
        if self.euclidean:
            w = triangle_bernstein(x)
            if is_torch(phi):
                import torch

                return torch.tensordot(to_like(w, phi), phi, dims=([-1], [0]))
            return np.tensordot(w, np.asarray(phi), axes=([-1], [0]))
        return self._geodesic_de_casteljau(phi, x)

    def _geodesic_de_casteljau(self, phi: Array, x: np.ndarray) -> Array:
        m = self.base
        lead = x.shape[:-1] + (1,) * m.ndim
        u, v, w = x[..., 0], x[..., 1], x[..., 2]
        s = u + v
        t1 = np.divide(v, s, out=np.zeros_like(v), where=s != 0)
        t1, w = to_like(t1.reshape(lead), phi), to_like(w.reshape(lead), phi)

        def combine(p: Array, q: Array, r: Array) -> Array:
            mid = m.exp(p, t1 * m.log(p, q))
            r = r + 0 * mid  # broadcast a control point to the batch of latent points
            return m.exp(mid, w * m.log(mid, r))

        p200, p110, p020, p101, p011, p002 = (phi[k] for k in range(6))
        first = combine(p200, p110, p101)
        second = combine(p110, p020, p011)
        third = combine(p101, p011, p002)
        return combine(first, second, third)

    # ------------------------------------------------------------------ the latent path
    def latent_path(self, phi: Array) -> np.ndarray:
        """The nodes (barycentric, shape (m + 1, 3)) of the server's latent path for ``phi``:
        the two end points for ``"segment"``, the discrete geodesic otherwise (:meth:`latent`,
        which does not see phi, is the straight segment)."""
        if self.path == "segment":
            return np.stack([self.start, self.omega])
        return self._geodesic(isometric_copy(phi))

    def _geodesic(self, copy: np.ndarray) -> np.ndarray:
        """The geodesic's nodes on the isometric copy (the last one is kept: the root search
        of a step and the new model ask for the same surface)."""
        key = copy.tobytes()
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, surface_geodesic(copy, self.nodes))
        return self._cache[1]

    def path_latent(self, phi: Array, r: float) -> np.ndarray:
        """The latent point at fraction r of the server's path (r = 0: start, r = 1: omega)."""
        return polyline(self.latent_path(phi), r)

    def path_point(self, phi: Array, r: float) -> Array:
        if self.path == "segment":
            return self.edge.path_point(phi[:3], r)
        return self.embed(phi, self.path_latent(phi, r))

    def arc_length(self, phi: Array, r: float, *, panels: int = 64) -> float:
        if self.path == "segment":
            return self.edge.arc_length(phi[:3], r, panels=panels)
        copy = isometric_copy(phi)
        return _FixedPath(copy.shape[1], self._geodesic(copy)).arc_length(copy, r, panels=panels)

    def step_point(
        self, phi: Array, fraction: float, mode: str = "chordal", beyond: str = "extend"
    ) -> tuple[Array, float]:
        r"""Licudi et al. 2025, eq. (12) on the server's latent path (the readings of
        :meth:`Embedding.step_point`).

        ``"segment"``: AsyncBezier's step on the edge curve ``phi[:3]`` (exact on a Euclidean
        base). ``"geodesic"``: the root search of :class:`Embedding` on the isometric copy of the
        surface along the discrete geodesic (cheap: the copy lives in :math:`\mathbb R^5`), then
        one evaluation of :math:`\iota_\phi`.
        """
        if self.path == "segment":
            return self.edge.step_point(phi[:3], fraction, mode, beyond)
        copy = isometric_copy(phi)
        nodes = self._geodesic(copy)
        _, r = _FixedPath(copy.shape[1], nodes).step_point(copy, fraction, mode, beyond)
        return self.embed(phi, polyline(nodes, r)), r


class _FixedPath(Embedding):
    """A Euclidean triangle along a fixed latent polyline: what the base class's root searches
    of eq. (12) see of a geodesic path."""

    def __init__(self, dim: int, nodes: np.ndarray) -> None:
        self.base = Euclidean(dim)
        self.parameters = ControlPoints(self.base, 6)
        self.nodes = nodes

    def point_parameters(self, theta: Array) -> Array:
        return self.parameters.phi(theta)

    def embed(self, phi: Array, s: Any) -> Array:
        return triangle_bernstein(s) @ phi

    def path_point(self, phi: Array, r: float) -> Array:
        return self.embed(phi, polyline(self.nodes, r))


def AsyncBezierTriangle(  # noqa: N802 - named like AsyncBezier
    base: Manifold,
    server_lr: float = 0.5,
    *,
    vartheta: float = 1.0,
    variant: str = "per_point",
    path: str = "segment",
    nodes: int = 8,
    **kw: Any,
) -> AsyncManifold:
    r"""AsyncManifold over the quadratic Bezier triangle (Licudi et al. 2025, App. C, Alg. 1 with
    the two-dimensional M of their Sec. 3 and Fig. 2).

    The settings of :func:`AsyncBezier`: OrthoDC(:math:`\vartheta`) on each control point's
    displacement (the six of the triangle; the global vertex does not move, so the corrected
    triangle still contains :math:`\Theta^\tau`, as Sec. 3 asks of :math:`\pi`), staleness decay
    ``alpha`` (default 0), the chordal step of eq. (12) on the latent ``path``
    (:class:`BezierTriangleEmbedding`). The client uploads the six control points, shape
    ``(6, *point_shape)`` (:class:`riemfl.nn.surface_trainer.SurfaceClientTrainer`).

    The rule's name is ``"asyncbeziertriangle"``, with ``"-geodesic"`` for the geodesic path.
    """
    rule = AsyncManifold(
        BezierTriangleEmbedding(base, path=path, nodes=nodes),
        server_lr,
        alpha=kw.pop("alpha", 0.0),
        correction=OrthoDCCorrection(vartheta, variant),
        **kw,
    )
    rule.name = "asyncbeziertriangle" + ("-geodesic" if path == "geodesic" else "")
    return rule

r"""The oblique manifold :math:`\mathrm{OB}(n, m) = \{X \in \mathbb{R}^{n\times m} :
\|X_{:,j}\| = 1,\ j = 1, \dots, m\}`, the product of m unit spheres :math:`S^{n-1}` (the
columns), with the embedded metric.

Every map is the sphere's (:class:`~riemfl.manifolds.sphere.Sphere`) applied to the columns:
the sphere's formulas run on the n x m arrays as they are, with their inner products taken over
the columns (axis -2) instead of the last axis (:class:`_ColumnSphere`), so that no transposed,
strided view goes through the arithmetic. ``project`` (whose overflow guard scales along the
last axis) moves the columns to the last axis instead.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import integer
from ..backend import NUMPY, Array, ops_for, to_numpy
from ..check_levels import refuse
from ..errors import ProjectionError
from .base import Manifold, delegated_map, dist_from_squared
from .elementary import squared_angle
from .sphere import Sphere, ambient_norm

__all__ = ["Oblique"]

_NP_VECDOT = getattr(np, "vecdot", None)  # numpy >= 2


class _ColumnSphere:
    """The sphere's private maps on the columns of n x m arrays: its formulas with the inner
    products taken over axis -2 and kept as a row axis (shape ``(..., 1, m)``), so that each
    formula broadcasts column by column. (Not a manifold: only the formulas are borrowed.)"""

    def __init__(self, n: int, name: str) -> None:
        # the sphere's messages start with the name: "Oblique(n, m), a column: Sphere(n): ..."
        self.name = f"{name}, a column: {Sphere(n).name}"

    def _dot(self, u, v):
        if type(u) is np.ndarray and type(v) is np.ndarray:
            if u.ndim == v.ndim == 2 and _NP_VECDOT is not None:
                return _NP_VECDOT(u, v, axis=-2)[None, :]
            # a stack: einsum's reduction over a strided axis is faster than vecdot's
            return np.einsum("...ij,...ij->...j", u, v)[..., None, :]
        return ops_for(u, v).sum(u * v, axis=-2, keepdims=True)

    _to_tangent = Sphere._to_tangent
    _retract = Sphere._retract
    _inverse_retract = Sphere._inverse_retract
    _exp = Sphere._exp
    _log_parts = Sphere._log_parts
    _log = Sphere._log
    _parallel_transport = Sphere._parallel_transport


class Oblique(Manifold):
    r"""Oblique manifold :math:`\mathrm{OB}(n, m) = (S^{n-1})^m`: n x m matrices whose m
    columns have unit norm, with the Frobenius metric :math:`\langle U, V\rangle_X =
    \mathrm{tr}(U^\top V)` (the product metric of the spheres).

    Sizes: ``n`` and ``m`` are ambient sizes (points are n x m: m columns in
    :math:`\mathbb{R}^n`); ``dim`` is :math:`(n - 1)m`.

    With :math:`x_j, u_j, y_j` the columns of X, U, Y (Absil, Mahony & Sepulchre 2008; Absil
    and Gallivan 2006 for the name and its use in ICA):

    * ``to_tangent``: :math:`u_j = a_j - \langle x_j, a_j\rangle x_j` (also
      ``egrad_to_rgrad``); ``inner``: Frobenius;
    * ``exp``: :math:`\cos\|u_j\|\,x_j + \sin\|u_j\|\,u_j/\|u_j\|` per column;
    * ``log``: the sphere's per column, :math:`\theta_j\,w_j/\|w_j\|` with :math:`w_j = y_j -
      \langle x_j, y_j\rangle x_j`, :math:`\theta_j = \mathrm{atan2}(\|w_j\|, \langle x_j,
      y_j\rangle)`; ``CutLocusError`` where a column of Y is antipodal to that of X;
    * ``dist``: :math:`\sqrt{\sum_j\theta_j^2}` (the product distance); ``squared_dist``:
      :math:`\sum_j\theta_j^2`, each term the sphere's smooth squared angle;
    * ``parallel_transport``: per column along the minimising geodesic, :math:`v_j -
      \frac{\langle y_j, v_j\rangle}{1 + \langle x_j, y_j\rangle}(x_j + y_j)`: the geodesic of a
      product is the product of the geodesics, and so is its parallel transport;
    * ``retract``: column normalisation of :math:`X + U` (the metric projection, second order);
      ``inverse_retract``: :math:`y_j/\langle x_j, y_j\rangle - x_j` (needs :math:`\langle x_j,
      y_j\rangle > 0`);
    * ``project``: column normalisation :math:`a_j/\|a_j\|`, the nearest point (the squared
      distance is a sum over columns); ``ProjectionError`` at a zero column, where every unit
      vector is nearest;
    * ``ehess_to_rhess``: :math:`P_X(H) - U\,\mathrm{diag}(\langle x_j, g_j\rangle)`, the
      sphere's Hessian per column (Absil, Mahony & Trumpf 2013).

    Constants: ``reach`` 1 (:math:`d(A, \mathrm{OB})^2 = \sum_j d(a_j, S)^2`, so
    within 1 of OB no column is 0; a zeroed column of a point is at distance 1); ``diameter``
    :math:`2\sqrt m` (X and -X); ``injectivity_radius`` :math:`\pi` (one column moving to its
    antipode).

    Parameters
    ----------
    n : int
        Length of the columns, ``n >= 2``.
    m : int
        Number of columns, ``m >= 1``.
    """

    def curvature_bound(self) -> tuple[float | None, str]:
        return 1.0, "a product of unit spheres, sectional curvature in [0, 1]"

    def __init__(self, n: int, m: int) -> None:
        self.n = integer(n, "Oblique(n, m): n", minimum=2)
        self.m = integer(m, "Oblique(n, m): m", minimum=1)
        self.point_shape = (self.n, self.m)
        self.name = f"Oblique({self.n}, {self.m})"
        self._sphere = Sphere(self.n)
        self._column_sphere = _ColumnSphere(self.n, self.name)

    @property
    def dim(self) -> int:
        return (self.n - 1) * self.m

    reach = 1.0
    injectivity_radius = math.pi

    @property
    def diameter(self) -> float:
        return 2.0 * math.sqrt(self.m)

    # the sphere's table holds column by column (see Manifold._result_checked)
    _result_checked = Sphere._result_checked

    def _columns(self, method: str, *arrays):
        """The sphere's ``_<method>`` on the columns (:class:`_ColumnSphere`, whose errors name
        the oblique manifold and the column)."""
        return getattr(self._column_sphere, "_" + method)(*arrays)

    def _project(self, a):
        ops = ops_for(a)
        columns = ops.mT(a)
        nrm = ambient_norm(columns)
        refuse(nrm <= ops.eps(a) * 10, ProjectionError, _zero_column_message, self.name, a)
        return ops.mT(columns / nrm)

    def _to_tangent(self, x, a):  # (no cut locus to name: the sphere's formula directly)
        return self._column_sphere._to_tangent(x, a)

    _egrad_to_rgrad = _to_tangent
    _retract = delegated_map("retract", "_columns")
    _inverse_retract = delegated_map("inverse_retract", "_columns")
    _exp = delegated_map("exp", "_columns")
    _log = delegated_map("log", "_columns")
    _parallel_transport = delegated_map("parallel_transport", "_columns")

    def _ehess_to_rhess(self, x, g, h, u):
        return self._to_tangent(x, h) - u * self._column_sphere._dot(x, g)

    def _squared_dist(self, x, y):
        ops, c, _, s2 = self._column_sphere._log_parts(x, y)
        if ops is NUMPY:  # no derivative to keep finite at s2 = 0: the angles by atan2
            angles = np.arctan2(np.sqrt(np.maximum(s2, 0.0)), c)
            return NUMPY.vecdot(angles, angles)[..., 0, 0]
        return ops.sum(squared_angle(c, s2), axis=(-2, -1))  # the column angles, (..., 1, m)

    _dist = dist_from_squared

    def _random_point(self, batch_shape, rng):
        """Independent uniform columns (normalised Gaussian vectors)."""
        return np.swapaxes(self._sphere._random_point(batch_shape + (self.m,), rng), -1, -2)

    def _point_violation(self, x):
        _, violation = self._sphere._point_violation(ops_for(x).mT(x))
        return "|x_j| = 1 for every column x_j", violation

    def _tangent_violation(self, x, u):
        ops = ops_for(x, u)
        _, violation = self._sphere._tangent_violation(ops.mT(x), ops.mT(u))
        return "<x_j, u_j> = 0 for every column", violation


def _zero_column_message(name: str, a: Array) -> str:
    ops = ops_for(a)
    norms = to_numpy(ops.sqrt(ops.sum(a * a, axis=-2)))
    index = tuple(int(i) for i in np.argwhere(norms == norms.min())[0])
    where = f" of batch element {index[:-1]}" if len(index) > 1 else ""
    return (
        f"{name}: column {index[-1]}{where} of the ambient matrix has norm "
        f"{float(norms.min()):.3e} (zero to rounding), so every unit vector is nearest to "
        f"it and P_M is not unique; expected nonzero columns"
    )

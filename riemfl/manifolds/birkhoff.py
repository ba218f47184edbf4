r"""The Birkhoff polytope's interior, the doubly stochastic n x n matrices with positive
entries, :math:`\mathcal{DP}_n = \{X \in \mathbb{R}^{n\times n} : X > 0,\ X\mathbf 1 = \mathbf
1,\ X^\top\mathbf 1 = \mathbf 1\}`, with the Fisher information metric, as in Douik & Hassibi
(2019) and Manopt's ``multinomialdoublystochasticfactory``.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import integer, optional, real
from ..backend import Array, is_torch, ops_for, to_like, to_numpy
from ..check_levels import level_of, refuse
from ..errors import ConvergenceError, NotOnManifoldError, ProjectionError
from .base import Manifold, result_checked
from .elementary import nonzero
from .inputs import first_nonpositive, positive_or_nan

__all__ = ["BirkhoffPolytope", "FIXED_SWEEPS", "sinkhorn"]


#: Sinkhorn sweeps at the check levels "deferred" and "off", where no stopping test can read the
#: residual (at most ``max_iter``). The eager loop reaches the default ``tol`` (float64) within
#: 27 sweeps on the conformance kit's retractions (median 9), within 43 on its projections
#: (median 14), and within 76 on exp(Z), Z a standard Gaussian matrix of 2 to 128 rows (a
#: moderate dynamic range); float32 within 6. 100 leaves a margin over all of them (a sweep
#: divides the residual by a constant factor) at the price of extra sweeps on easy matrices.
FIXED_SWEEPS = 100


def sinkhorn(
    a: Array, tol: float, max_iter: int, what: str = "matrix", *, sweeps: int | None = None
) -> Array:
    r"""Sinkhorn-Knopp scaling :math:`D_1 A D_2` of positive matrices to doubly stochastic ones.

    Alternately divides the rows and the columns by their sums (batched; torch autograd
    differentiates through the iterations) until every row sum is within ``tol`` of 1 (the
    column sums are then exact to rounding); the iterate is kept as its scalings,
    :math:`\mathrm{diag}(r)\,A\,\mathrm{diag}(c)`, so a sweep costs two matrix-vector products.
    :math:`D_1AD_2` is the unique doubly stochastic
    matrix of this form (Sinkhorn 1964) and the minimiser of the Kullback-Leibler divergence
    :math:`\sum_{ij} x_{ij}\log(x_{ij}/a_{ij}) - x_{ij} + a_{ij}` over the doubly stochastic
    matrices: a KL (Bregman) projection, not the Euclidean one.

    At the check level ``"eager"`` the sweeps stop at the first residual within ``tol`` (one
    read per sweep); so do numpy arrays at ``"off"``, where the last iterate is returned after
    ``max_iter`` sweeps (no checks). At ``"deferred"``, and for torch tensors at ``"off"``
    (:mod:`riemfl.check_levels`), no residual is read: a fixed number of sweeps runs,
    ``sweeps`` (default :data:`FIXED_SWEEPS`, at most ``max_iter``), and the residual after
    the last one is checked at the level's boundary. The
    scaling converges linearly, so the extra sweeps move a converged result by rounding only.

    Raises
    ------
    ConvergenceError
        After ``max_iter`` sweeps (``"eager"``) or the fixed sweeps (``"deferred"``, at the
        boundary) with a row-sum residual above ``tol`` (also a NaN one); the message names the
        residual, the tolerance and the number of sweeps.
    """
    level = level_of(a)
    if level == "eager":
        return _sinkhorn_adaptive(a, tol, max_iter, what)
    if level == "off" and type(a) is np.ndarray:  # a numpy read synchronises no device
        return _sinkhorn_adaptive(a, tol, max_iter, what, refuse_miss=False)
    count = min(max_iter, FIXED_SWEEPS if sweeps is None else sweeps)
    ops = ops_for(a)
    at = ops.mT(a)
    r = 1.0 / ops.sum(a, axis=-1)
    for _ in range(count - 1):  # r / rows = 1 / (A c): two products and two inversions a sweep
        r = _reciprocal(a @ _reciprocal(at @ r[..., None]))[..., 0]
    c = 1.0 / (at @ r[..., None])[..., 0]
    rows = r * (a @ c[..., None])[..., 0]
    if level == "deferred":
        residual = ops.amax(ops.abs(rows - 1.0))
        # ~(residual <= tol): a NaN residual fails too, as the eager loop's test does
        bad = ~(residual <= tol)
        refuse(bad, ConvergenceError, _sinkhorn_message, residual, tol, count, max_iter, what)
    return r[..., :, None] * a * c[..., None, :]


def _reciprocal(a: Array) -> Array:
    """1 / a, entrywise, in one kernel (torch's ``1.0 / a`` is a reciprocal and a product)."""
    return a.reciprocal() if is_torch(a) else np.reciprocal(a)


def _sinkhorn_adaptive(
    a: Array, tol: float, max_iter: int, what: str, *, refuse_miss: bool = True
) -> Array:
    """:func:`sinkhorn` with the stopping test of the level ``"eager"``; after ``max_iter``
    sweeps without reaching ``tol`` a :class:`~riemfl.errors.ConvergenceError`, or, without
    ``refuse_miss`` (numpy at the level ``"off"``: no checks), the last iterate."""
    ops = ops_for(a)
    # the iterate is diag(r) A diag(c): a sweep updates the scalings by two matrix-vector
    # products (A read, not rewritten); the row sums after the column step are r * (A c)
    at = ops.mT(a)
    r = 1.0 / ops.sum(a, axis=-1)
    residual = math.inf
    for _ in range(max_iter):
        c = 1.0 / (at @ r[..., None])[..., 0]
        rows = r * (a @ c[..., None])[..., 0]
        residual = ops.to_float(ops.amax(ops.abs(rows - 1.0)))
        if residual <= tol:
            return r[..., :, None] * a * c[..., None, :]
        r = r / rows
    if not refuse_miss:
        return r[..., :, None] * a * c[..., None, :]
    raise ConvergenceError(_sinkhorn_message(residual, tol, max_iter, max_iter, what))


def _sinkhorn_message(residual, tol: float, sweeps: int, max_iter: int, what: str) -> str:
    """The ConvergenceError of :func:`sinkhorn`: ``residual`` (a float, or a 0-d array read
    here) after ``sweeps`` sweeps, ``max_iter`` the limit of the adaptive sweeps."""
    residual = float(to_numpy(residual))
    if sweeps == max_iter:
        after, remedy = f"max_iter = {max_iter} sweeps", "raise max_iter"
    else:
        after = (
            f"the {sweeps} fixed sweeps of the deferred check level (eager mode stops at tol "
            f"within max_iter = {max_iter})"
        )
        remedy = "raise BirkhoffPolytope's fixed_sweeps"
    return (
        f"Sinkhorn scaling of the {what} did not converge: the largest row-sum residual "
        f"|X 1 - 1| is {residual:.3e} > tol {tol:.1e} after {after}; expected entries of "
        f"moderate dynamic range (or {remedy})"
    )


def _nonpositive_message(name: str, a: Array) -> str:
    """The ProjectionError of project: ``a`` has an entry <= 0."""
    low = float(np.max(-to_numpy(a)))
    return (
        f"{name}: project is Sinkhorn scaling, which needs positive entries; the ambient matrix "
        f"has an entry {-low:.3e} <= 0. Expected a positive matrix"
    )


class BirkhoffPolytope(Manifold):
    r"""Doubly stochastic n x n matrices with positive entries and the Fisher information
    metric :math:`\langle U, V\rangle_X = \sum_{ij} u_{ij}v_{ij}/x_{ij}` (Douik & Hassibi 2019).

    Sizes: ``n`` is the ambient matrix size (points are n x n); ``dim`` is :math:`(n-1)^2`.

    Tangent space :math:`T_X = \{U : U\mathbf 1 = 0,\ U^\top\mathbf 1 = 0\}`, dimension
    :math:`(n-1)^2`. With :math:`\odot`, :math:`\oslash` entrywise:

    * ``to_tangent``: the Fisher-orthogonal projection :math:`\Pi_X(Z) = Z - (\alpha\mathbf
      1^\top + \mathbf 1\beta^\top)\odot X`, where :math:`(\alpha, \beta)` solve
      :math:`\alpha + X\beta = Z\mathbf 1`, :math:`X^\top\alpha + \beta = Z^\top\mathbf 1`. The
      system matrix :math:`A = \begin{pmatrix} I & X\\ X^\top & I\end{pmatrix}` is singular
      (:math:`w = (\mathbf 1, -\mathbf 1)/\sqrt{2n}` spans its kernel for positive X, which
      changes nothing in :math:`\alpha\mathbf 1^\top + \mathbf 1\beta^\top`); riemfl solves
      :math:`(A + ww^\top)s = b`, whose solution is the pseudo-inverse (least-squares,
      minimum-norm) solution :math:`A^+b` because :math:`b \perp w`: one dense solve of size
      2n, the same in numpy and torch;
    * ``egrad_to_rgrad``: :math:`\Pi_X(G \odot X)`;
    * ``ehess_to_rhess`` (Douik & Hassibi 2019): with :math:`\gamma = G\odot X`,
      :math:`\dot\gamma = H\odot X + G\odot U`, :math:`(\alpha, \beta)` for :math:`\gamma` and
      :math:`(\dot\alpha, \dot\beta)` for :math:`\dot\gamma\mathbf 1 - U\beta`,
      :math:`\dot\gamma^\top\mathbf 1 - U^\top\alpha`, :math:`S = \alpha\mathbf 1^\top +
      \mathbf 1\beta^\top`: :math:`\delta = \gamma - S\odot X` (the gradient), :math:`\dot\delta
      = \dot\gamma - (\dot\alpha\mathbf 1^\top + \mathbf 1\dot\beta^\top)\odot X - S\odot U`
      (its derivative along U), and :math:`\operatorname{Hess} f(X)[U] = \Pi_X(\dot\delta -
      \tfrac12\,\delta\odot U\oslash X)` (the Levi-Civita connection of the Fisher metric,
      whose Christoffel term on the positive orthant is :math:`-uv/(2x)`);
    * ``retract``: :math:`\mathrm{Sinkhorn}(X\odot\exp(U\oslash X))` (Douik & Hassibi 2019),
      first order, not second order (its covariant acceleration is :math:`\Pi_X(U\odot U
      \oslash (2X))`); an entry whose exact value underflows to 0 is returned as the
      smallest normal number (:func:`~riemfl.manifolds.elementary.nonzero`), so the result has
      positive entries;
    * ``transport``: :math:`\Pi_Y(U\odot\sqrt{Y\oslash X})`, the Fisher parallel transport of
      the positive orthant (flat in :math:`2\sqrt x`) followed by the projection, so that its
      derivative at Y = X is the Levi-Civita connection;
    * ``project``: Sinkhorn scaling of a positive matrix, the KL projection (see
      :func:`sinkhorn`), not the metric projection; ``ProjectionError`` on an entry <= 0;
    * exp, log, dist, parallel transport and ``inverse_retract``: unsupported (no closed form).

    Sinkhorn runs to the row-sum residual ``tol`` (default :math:`100\,n\,\varepsilon` of the
    dtype) within ``max_iter`` sweeps, else :class:`~riemfl.errors.ConvergenceError`. At the
    check levels ``"deferred"`` and ``"off"`` it runs ``fixed_sweeps`` sweeps without a stopping
    test (no value read), and the residual after them is checked at the boundary (see
    :func:`sinkhorn`).

    Constants: ``diameter`` :math:`\sqrt{2n}` (the ambient supremum, approached at two
    permutation matrices with no common entry); ``reach`` and
    ``injectivity_radius``: unsupported (see ``unsupported``).

    Parameters
    ----------
    n : int
        Size, ``n >= 2``.
    tol : float, optional
        Row-sum residual at which Sinkhorn stops; default :math:`100\,n\,\varepsilon`.
    max_iter : int
        Sinkhorn sweeps before ``ConvergenceError`` (default 1000).
    fixed_sweeps : int, optional
        Sinkhorn sweeps at the check levels ``"deferred"`` and ``"off"``; default
        :data:`FIXED_SWEEPS` (100), at most ``max_iter``. Raise it for matrices of a large
        dynamic range, whose scaling converges slowly.
    """

    unsupported = {
        "exp": "the Fisher geodesics of the Birkhoff polytope have no closed form",
        "log": "the Fisher geodesics of the Birkhoff polytope have no closed form, so no log",
        "dist": "the Fisher distance on the Birkhoff polytope has no closed form",
        "parallel_transport": (
            "the Fisher geodesics of the Birkhoff polytope have no closed form, so no parallel "
            "transport; transport follows the connection to first order"
        ),
        "inverse_retract": (
            "inverting Sinkhorn(X exp(U / X)) means finding the tangent U and the scalings "
            "D1, D2 with X exp(U / X) = D1 Y D2, a nonlinear problem with no closed form"
        ),
        "reach": (
            "project is the Sinkhorn (KL) projection, not the metric projection, and the open "
            "polytope comes arbitrarily close to its boundary (entries 0), where no metric "
            "projection onto the open set exists, so there is no positive reach"
        ),
        "injectivity_radius": (
            "the open Birkhoff polytope is not complete (the boundary, where entries vanish, is "
            "at finite Fisher distance), so its injectivity radius has no positive lower bound; "
            "exp is not provided either"
        ),
    }

    def __init__(
        self,
        n: int,
        *,
        tol: float | None = None,
        max_iter: int = 1000,
        fixed_sweeps: int | None = None,
    ) -> None:
        self.n = integer(n, "BirkhoffPolytope(n): n", minimum=2)
        self.tol = optional(real, tol, "BirkhoffPolytope: tol", above=0, below=1)
        self.max_iter = integer(max_iter, "BirkhoffPolytope: max_iter", minimum=1)
        sweeps = optional(integer, fixed_sweeps, "BirkhoffPolytope: fixed_sweeps", minimum=1)
        self.fixed_sweeps = FIXED_SWEEPS if sweeps is None else sweeps
        self.point_shape = (self.n, self.n)
        self.name = f"BirkhoffPolytope({self.n})"

    @property
    def dim(self) -> int:
        return (self.n - 1) ** 2

    @property
    def diameter(self) -> float:
        return math.sqrt(2.0 * self.n)

    # ------------------------------------------------------------------ helpers
    def _sinkhorn(self, a, what: str):
        tol = self.tol if self.tol is not None else 100.0 * self.n * ops_for(a).eps(a)
        what = f"{what} of {self.name}"
        return sinkhorn(a, tol, self.max_iter, what, sweeps=self.fixed_sweeps)

    def _multipliers(self, x, rows, cols):
        r"""The pseudo-inverse solution :math:`(\alpha, \beta)` of :math:`\alpha + X\beta =`
        rows, :math:`X^\top\alpha + \beta =` cols (see the class docstring)."""
        ops = ops_for(x, rows, cols)
        n = self.n
        eye = ops.broadcast_to(ops.eye(n, x), tuple(x.shape))
        top = ops.concatenate([eye, x], axis=-1)
        bottom = ops.concatenate([ops.mT(x), eye], axis=-1)
        w = to_like(np.concatenate([np.ones(n), -np.ones(n)]) / math.sqrt(2.0 * n), x)
        system = ops.concatenate([top, bottom], axis=-2) + w[:, None] * w[None, :]
        rhs = ops.concatenate([rows, cols], axis=-1)
        batch = np.broadcast_shapes(tuple(system.shape[:-2]), tuple(rhs.shape[:-1]))
        system = ops.broadcast_to(system, batch + (2 * n, 2 * n))
        rhs = ops.broadcast_to(rhs, batch + (2 * n,))
        s = ops.solve(system, rhs[..., None])[..., 0]
        return s[..., :n], s[..., n:]

    def _normal_part(self, x, alpha, beta):
        return (alpha[..., :, None] + beta[..., None, :]) * x

    def _to_tangent(self, x, a):
        ops = ops_for(x, a)
        alpha, beta = self._multipliers(x, ops.sum(a, axis=-1), ops.sum(a, axis=-2))
        return a - self._normal_part(x, alpha, beta)

    # ------------------------------------------------------------------ the boundary
    # every argument is checked first (see Manifold._result_checked; the maps solve and iterate),
    # and the result too: the maps read their points through positive_or_nan, so a point with
    # an entry <= 0, on or beyond the boundary, where the Fisher metric sum u v/x is infinite,
    # gives a NaN result (or makes Sinkhorn fail), also where the formula would be finite (the
    # gradient P_X(G X)), which Manifold._refuse_boundary traces to it. to_tangent does not
    # read 1/X: it is defined there
    _result_checked = result_checked(
        egrad_to_rgrad=(0, 1),
        ehess_to_rhess=(0, 1, 2, 3),
        inner=(0, 1, 2),
        norm=(0, 1),
        retract=(0, 1),
        transport=(0, 1, 2),
    )

    def _boundary_violation(self, x: Array, name: str = "x") -> tuple[str, str] | None:
        """The first point of x with an entry <= 0 (see
        :meth:`~riemfl.manifolds.base.Manifold._boundary_violation`)."""
        found = first_nonpositive(x, 2)
        if found is None:
            return None
        i, entry, value = found
        at = f" in batch element {i}" if i else ""
        where = "on" if value == 0 else "beyond"
        return (
            f"its entry {entry}{at} is {value:.3e}, not > 0: the point is {where} the boundary "
            f"of the open Birkhoff polytope, where the Fisher metric sum u_ij v_ij/{name}_ij is "
            f"infinite",
            f"a doubly stochastic matrix with every entry {name}_ij > 0",
        )

    # ------------------------------------------------------------------ maps
    def _egrad_to_rgrad(self, x, g):
        x = positive_or_nan(x)
        return self._to_tangent(x, g * x)

    def _ehess_to_rhess(self, x, g, h, u):
        ops = ops_for(x, g, h, u)
        x = positive_or_nan(x)
        gamma = g * x
        gamma_dot = h * x + g * u
        alpha, beta = self._multipliers(x, ops.sum(gamma, axis=-1), ops.sum(gamma, axis=-2))
        rows = ops.sum(gamma_dot, axis=-1) - (u @ beta[..., None])[..., 0]
        cols = ops.sum(gamma_dot, axis=-2) - (ops.mT(u) @ alpha[..., None])[..., 0]
        alpha_dot, beta_dot = self._multipliers(x, rows, cols)
        s = alpha[..., :, None] + beta[..., None, :]
        delta = gamma - s * x
        delta_dot = gamma_dot - self._normal_part(x, alpha_dot, beta_dot) - s * u
        return self._to_tangent(x, delta_dot - 0.5 * delta * u / x)

    def _inner(self, x, u, v):
        return ops_for(x, u, v).sum(u * v / positive_or_nan(x), axis=(-2, -1))

    def _retract(self, x, u):
        # an entry of X exp(U / X) that underflowed to 0 stays 0 through Sinkhorn: made the
        # smallest normal number after it (no row underflows entirely: U 1 = 0)
        x = positive_or_nan(x)
        step = self._sinkhorn(x * ops_for(x, u).exp(u / x), "X exp(U / X) in retract")
        return nonzero(step)

    def _transport(self, x, y, u):
        y = positive_or_nan(y)
        return self._to_tangent(y, u * ops_for(x, y, u).sqrt(y / positive_or_nan(x)))

    def _project(self, a):
        if level_of(a) != "off":
            low = ops_for(a).amax(-a)
            refuse(low >= 0.0, ProjectionError, _nonpositive_message, self.name, a)
        return self._sinkhorn(a, "ambient matrix given to project")

    # ------------------------------------------------------------------ sampling and checks
    def _random_point(self, batch_shape, rng):
        """Sinkhorn scaling of :math:`\\exp(Z/2)`, Z Gaussian (entries of moderate range)."""
        a = np.exp(0.5 * rng.standard_normal(batch_shape + self.point_shape))
        tol = 100.0 * self.n * np.finfo(np.float64).eps
        return _sinkhorn_adaptive(a, tol, 10_000, "random matrix")  # numpy: no read to spare

    def _point_violation(self, x):
        ops = ops_for(x)
        rows = ops.amax(ops.abs(ops.sum(x, axis=-1) - 1.0))
        cols = ops.amax(ops.abs(ops.sum(x, axis=-2) - 1.0))
        sums = max(ops.to_float(rows), ops.to_float(cols))
        return "X 1 = 1, X^T 1 = 1 and X > 0", max(sums, max(0.0, ops.to_float(ops.amax(-x))))

    def _check_point(self, x: Array, tol: float) -> None:
        """Positivity is strict, without tolerance (an entry 0 is on the boundary, where the
        Fisher metric is infinite); the row and column sums within ``atol``."""
        found = first_nonpositive(x, 2)
        if found is not None:
            i, entry, value = found
            raise NotOnManifoldError(
                f"{self.name}: point is not in the open Birkhoff polytope: constraint X > 0 is "
                f"violated by the entry {entry} = {value:.3e}"
                + (f" in batch element {i}" if i else "")
            )
        super()._check_point(x, tol)  # the sums, through _point_violation

    def _tangent_violation(self, x, u):
        ops = ops_for(x, u)
        rows = ops.to_float(ops.amax(ops.abs(ops.sum(u, axis=-1))))
        cols = ops.to_float(ops.amax(ops.abs(ops.sum(u, axis=-2))))
        return "U 1 = 0 and U^T 1 = 0", max(rows, cols)

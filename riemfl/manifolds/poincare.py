r"""The Poincare ball model of hyperbolic space, :math:`\mathbb B^n_c = \{x \in \mathbb{R}^n :
c\|x\|^2 < 1\}` with the metric :math:`\lambda_x^2 \langle u, v\rangle`,
:math:`\lambda_x = 2/(1 - c\|x\|^2)` (sectional curvature :math:`-c`), and the gyrovector
operations of Ungar (2008) in the form of Ganea, Becigneul & Hofmann (2018).

**Stability near the boundary.** Every map is written with :math:`\sigma_x = 1 - c\|x\|^2` and
differences of points, never with :math:`1 - c\|x\|^2` formed from a rounded :math:`\|x\|` or
with :math:`\operatorname{artanh}` of an argument near 1:

* :math:`\sigma_x` of a float32 point is accumulated in float64 (each :math:`x_i^2` is exact
  there), so it has full float32 accuracy however close to the boundary the point is (1 - 1e-7
  is the last float32 radius below 1); a float64 point has no wider type, and its
  :math:`\sigma_x` has an absolute error of a few eps, so float64 maps are accurate to about
  :math:`\varepsilon/\sigma_x` relative (ten digits at :math:`1 - 10^{-5}`);
* the Mobius sum's coefficients are sums of positive terms: :math:`1 + 2c\langle x, y\rangle +
  c\|y\|^2 = \sigma_x + c\|x + y\|^2` and :math:`1 + 2c\langle x, y\rangle +
  c^2\|x\|^2\|y\|^2 = \sigma_x\sigma_y + c\|x + y\|^2`;
* :math:`d(x, y) = \tfrac{2}{\sqrt c}\operatorname{arsinh}\sqrt{c\|x - y\|^2/(\sigma_x\sigma_y)}`
  (equal to :math:`\tfrac{2}{\sqrt c}\operatorname{artanh}(\sqrt c\|{-x}\oplus_c y\|)`, without
  its cancellation in :math:`1 - \sqrt c\|{-x}\oplus_c y\|`).

geoopt (0.5) instead projects the results of its maps onto the radius :math:`(1 - 4\cdot
10^{-3})/\sqrt c` in float32 (:math:`1 - 10^{-5}` in float64), so none of its float32 points
lies beyond hyperbolic distance 6.2 from the origin, and its float32 ``dist`` and ``logmap`` of
points at :math:`1 - 10^{-5}` are off by about 20%. riemfl clamps nothing: a point with
:math:`c\|x\|^2 \ge 1` fails ``check_point``, every map but the identity ``to_tangent`` refuses
it (:class:`~riemfl.errors.NotOnManifoldError` naming the map, where the conformal factor is
infinite or negative; no NaN or inf is returned), and only ``exp``/``retract`` move a result whose
*rounding* put it on, outside or within a few units of rounding of the boundary, onto a radius
from which no summation order of its norm reaches the boundary (:meth:`PoincareBall.pull_inside`).

``exp`` over a long step is ill-conditioned near the boundary (moving x by one unit of rounding
moves :math:`\mathrm{Exp}_x(u)` by about :math:`e^{\sqrt c\|u\|_x/2}` units): its float32
error stays below that, not below a few eps.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .._validation import integer, real
from ..backend import NUMPY, Array, cast_like, ops_for, to_numpy, widen
from ..check_levels import refuse
from ..errors import NotOnManifoldError, ProjectionError
from .base import Manifold, result_checked
from .elementary import artanh_sqrt_over, asinh_sqrt_over, sech2_sqrt, tanh_sqrt_over
from .inputs import nan_unless
from .lorentz import Lorentz

__all__ = ["PoincareBall", "mobius_add", "mobius_scalar_mul", "gyration", "conformal_sigma"]

_EPS64 = float(np.finfo(np.float64).eps)


# --------------------------------------------------------------------------- helpers
def _dot(u, v):
    return ops_for(u, v).vecdot(u, v)


def conformal_sigma(x: Array, c: float = 1.0) -> Array:
    r""":math:`\sigma_x = 1 - c\|x\|^2 = 2/\lambda_x` (last axis kept, size 1). For float32 points
    the squares are summed in float64 (exactly), so the result has full float32 accuracy up to
    the boundary; for float64 points its absolute error is a few eps."""
    if type(x) is np.ndarray and x.dtype == np.float64:  # nothing to widen: one dot per point
        return 1.0 - c * NUMPY.vecdot(x, x)
    wide = widen(x)
    return cast_like(1.0 - c * ops_for(wide).sum(wide * wide, axis=-1, keepdims=True), x)


def _add(x, sx, y, sy, c):
    r""":math:`x \oplus_c y` given :math:`\sigma_x, \sigma_y` (see :func:`mobius_add`)."""
    s = c * _dot(x + y, x + y)
    return ((sx + s) * x + sx * y) / (sx * sy + s)


def mobius_add(x: Array, y: Array, c: float = 1.0) -> Array:
    r"""Mobius addition (Ungar 2008; Ganea, Becigneul & Hofmann 2018, eq. (1))

    .. math::
        x \oplus_c y = \frac{(1 + 2c\langle x, y\rangle + c\|y\|^2)\,x + (1 - c\|x\|^2)\,y}
        {1 + 2c\langle x, y\rangle + c^2\|x\|^2\|y\|^2}
        = \frac{(\sigma_x + c\|x + y\|^2)\,x + \sigma_x\,y}{\sigma_x\sigma_y + c\|x + y\|^2},

    evaluated in the second form (:math:`\sigma = 1 - c\|\cdot\|^2`), whose coefficients do not
    cancel. Not commutative: :math:`x \oplus y = \operatorname{gyr}[x, y](y \oplus x)`. Points on
    the last axis; batch dimensions broadcast; numpy or torch.
    """
    return _add(x, conformal_sigma(x, c), y, conformal_sigma(y, c), c)


def _artanh_over(z2, sigma):
    r""":math:`\operatorname{artanh}(z)/z` from :math:`z^2` and :math:`\sigma = 1 - z^2`:
    the series below :math:`z^2 = 1/4`, else :math:`(\log(1 + z) - \tfrac12\log\sigma)/z`."""
    ops = ops_for(z2)
    small = z2 < 0.25
    z = ops.sqrt(ops.where(small, 0.25 + 0.0 * z2, z2))
    direct = (ops.log1p(z) - 0.5 * ops.log(ops.where(small, 0.5 + 0.0 * sigma, sigma))) / z
    return ops.where(small, artanh_sqrt_over(ops.where(small, z2, 0.0 * z2)), direct)


def mobius_scalar_mul(r: float | Array, x: Array, c: float = 1.0) -> Array:
    r"""Mobius scalar multiplication (Ganea, Becigneul & Hofmann 2018, eq. (3))

    .. math::
        r \otimes_c x = \tanh\!\big(r \operatorname{artanh}(\sqrt c\|x\|)\big)
        \frac{x}{\sqrt c\|x\|},

    the point at hyperbolic distance :math:`|r|\,d(0, x)` from the origin along x (r < 0:
    through the origin). :math:`\operatorname{artanh}(\sqrt c\|x\|) = \log(1 + \sqrt c\|x\|) -
    \tfrac12\log\sigma_x` near the boundary; finite (with gradients) at x = 0. ``r``: a number or
    an array broadcasting against the batch of x.
    """
    sigma = conformal_sigma(x, c)
    z2 = c * _dot(x, x)
    a_over = _artanh_over(z2, sigma)
    if not isinstance(r, (int, float)):
        r = r[..., None]
    t2 = r * r * z2 * a_over * a_over
    return (tanh_sqrt_over(t2) * r * a_over) * x


def _gyration(u, v, w, su, sv, c):
    r""":math:`\operatorname{gyr}[u, v]w` given :math:`\sigma_u, \sigma_v` (see
    :func:`gyration`)."""
    delta = u + v
    q = c * _dot(delta, delta)
    p = 0.5 * (su + sv + q)  # 1 + c<u, v>
    d = su * sv + q  # 1 + 2c<u, v> + c^2 |u|^2 |v|^2

    def k(z):  # (v u^T - u v^T) z, written with u + v
        return delta * _dot(u, z) - u * _dot(delta, z)

    kw = k(w)
    return w + (2.0 * c / d) * (c * k(kw) - p * kw)


def gyration(u: Array, v: Array, w: Array, c: float = 1.0) -> Array:
    r"""The gyration :math:`\operatorname{gyr}[u, v]w = \ominus(u \oplus_c v) \oplus_c (u
    \oplus_c (v \oplus_c w))` (Ungar 2008), the rotation of the plane of u and v that repairs
    the associativity of :math:`\oplus_c`.

    In closed form (Ganea, Becigneul & Hofmann 2018, supplementary material)
    :math:`\operatorname{gyr}[u, v]w = w + 2\,(A u + B v)/D` with :math:`A = -c^2\langle u,
    w\rangle\|v\|^2 + c\langle v, w\rangle + 2c^2\langle u, v\rangle\langle v, w\rangle`,
    :math:`B = -c^2\langle v, w\rangle\|u\|^2 - c\langle u, w\rangle`, :math:`D = 1 + 2c\langle
    u, v\rangle + c^2\|u\|^2\|v\|^2`; evaluated as the rotation it is,
    :math:`w + \tfrac{2c}{D}(c K^2 w - p K w)` with :math:`K = vu^\top - uv^\top`, :math:`p = 1
    + c\langle u, v\rangle = \tfrac12(\sigma_u + \sigma_v + c\|u + v\|^2)` and :math:`D =
    \sigma_u\sigma_v + c\|u + v\|^2` (:math:`Kw` written with :math:`u + v`), so that nothing
    cancels for points near the boundary with :math:`u \approx -v`. An isometry of the
    Euclidean norm: :math:`\|\operatorname{gyr}[u, v]w\| = \|w\|`.
    """
    return _gyration(u, v, w, conformal_sigma(u, c), conformal_sigma(v, c), c)


# --------------------------------------------------------------------------- the manifold
class PoincareBall(Manifold):
    r"""The Poincare ball :math:`\mathbb B^n_c = \{x : c\|x\|^2 < 1\}`, curvature :math:`-c`.

    Sizes: ``n`` is both the ambient size and the intrinsic dimension (an open ball of
    :math:`\mathbb{R}^n`): ``dim`` is n.

    With :math:`\sigma_x = 1 - c\|x\|^2` and the conformal factor :math:`\lambda_x =
    2/\sigma_x`:

    * metric :math:`\langle u, v\rangle_x = \lambda_x^2\langle u, v\rangle`; every
      :math:`u \in \mathbb{R}^n` is tangent (``to_tangent`` is the identity);
      ``egrad_to_rgrad`` :math:`g/\lambda_x^2`; ``ehess_to_rhess``
      :math:`(h + c\lambda_x(\langle x, g\rangle u - \langle x, u\rangle g - \langle u,
      g\rangle x))/\lambda_x^2` (the Levi-Civita connection of the conformal metric
      :math:`e^{2\phi}\delta`, :math:`\nabla\phi = c\lambda_x x`);
    * :math:`\mathrm{Exp}_x(u) = x \oplus_c \big(\tanh(\sqrt c\lambda_x\|u\|/2)\,u/(\sqrt c\|u\|)
      \big)` (Ganea, Becigneul & Hofmann 2018, Lemma 2), also ``retract``. If the rounded
      result lies beyond the radius :math:`\sqrt c\|y\| = r = 1 - 2\varepsilon - (n + 4)
      \varepsilon_{64}` (:math:`\varepsilon` the eps of its dtype, :math:`\varepsilon_{64}`
      float64's; the exact point then lies within a few units of rounding of the boundary:
      beyond hyperbolic distance about :math:`15/\sqrt c` from the origin in float32,
      :math:`35/\sqrt c` in float64), it is moved radially onto that radius
      (:meth:`pull_inside`), a change of a few units of rounding of :math:`\|y\|`, so that the
      result is a point of the ball however its norm is summed;
    * :math:`\mathrm{Log}_x(y) = \tfrac{2}{\sqrt c\lambda_x}\operatorname{artanh}(\sqrt
      c\|w\|)\,w/\|w\|`, :math:`w = -x \oplus_c y`, evaluated as
      :math:`\frac{\operatorname{arsinh}s}{s}\sqrt{\sigma_x}\,\tilde w / \sqrt{D\sigma_y}` with
      :math:`\tilde w = \sigma_x(y - x) - c\|y - x\|^2 x` (the numerator of w),
      :math:`D = \sigma_x\sigma_y + c\|x - y\|^2` and :math:`s^2 = c\|x - y\|^2/(\sigma_x
      \sigma_y)` (also ``inverse_retract``);
    * :math:`d(x, y) = \tfrac{2}{\sqrt c}\operatorname{artanh}(\sqrt c\|{-x}\oplus_c y\|) =
      \tfrac{2}{\sqrt c}\operatorname{arsinh}(s)`; ``squared_dist``
      :math:`\tfrac4c\,s^2(\operatorname{arsinh}(s)/s)^2` (a function of :math:`s^2`, smooth
      at :math:`y = x`);
    * parallel transport along the geodesic :math:`\tfrac{\lambda_x}{\lambda_y}
      \operatorname{gyr}[y, -x]\,v` (Ungar 2008; also ``transport``);
    * isometries with the hyperboloid :class:`~riemfl.manifolds.lorentz.Lorentz` with
      :math:`\beta = 1/c` (both have curvature :math:`-c = -1/\beta`): :meth:`to_lorentz`
      :math:`x \mapsto ((\lambda_x - 1)/\sqrt c,\ \lambda_x x)` and :meth:`from_lorentz`
      :math:`(y_0, \bar y) \mapsto \bar y/(1 + \sqrt c\,y_0)` (the stereographic projection from
      :math:`(-1/\sqrt c, 0)`), with their differentials :meth:`to_lorentz_tangent` and
      :meth:`from_lorentz_tangent`.

    Constants. The open ball is not closed: an ambient point outside it has no nearest point in
    it (the nearest point of the closed ball is on the sphere :math:`c\|x\|^2 = 1`), and such
    points lie within :math:`1/\sqrt c - \|x\|` of x, so ``reach`` raises
    ``NotImplementedError`` with the reason; :meth:`local_reach` is that
    distance. ``project(a)`` is a itself inside the ball and raises ``ProjectionError``
    outside. ``diameter`` :math:`2/\sqrt c` (the ambient Euclidean supremum; the geodesic
    diameter is infinite); ``injectivity_radius`` :math:`\infty` (complete, simply connected,
    negatively curved).

    ``random_point`` returns the images under :meth:`from_lorentz` of ``Lorentz(n, 1/c)``'s
    random points (spatial part standard normal).

    Parameters
    ----------
    n : int
        Dimension, ``n >= 1``.
    c : float
        Curvature magnitude: the ball has radius :math:`1/\sqrt c` and curvature :math:`-c`.
    """

    def curvature_bound(self) -> tuple[float | None, str]:
        return -self.c, "constant curvature -c"

    unsupported = {
        "reach": (
            "the open Poincare ball is not closed: an ambient point outside it has no nearest "
            "point in it, and such points lie within 1/sqrt(c) - |x| of x, which tends to 0 at "
            "the boundary, so the uniform constant is 0; use local_reach(x)"
        ),
    }

    def __init__(self, n: int, c: float = 1.0) -> None:
        self.n = integer(n, "PoincareBall(n): n", minimum=1)
        self.c = real(c, "PoincareBall: c", above=0)
        self.point_shape = (self.n,)
        self.name = f"PoincareBall({self.n})" if c == 1.0 else f"PoincareBall({self.n}, c={c})"
        self.lorentz = Lorentz(self.n, beta=1.0 / self.c)

    @property
    def dim(self) -> int:
        return self.n

    @property
    def diameter(self) -> float:
        return 2.0 / math.sqrt(self.c)

    injectivity_radius = math.inf

    # ------------------------------------------------------------------ gyrovector operations
    def mobius_add(self, x: Array, y: Array) -> Array:
        r""":math:`x \oplus_c y` (:func:`mobius_add` with this ball's c)."""
        return mobius_add(x, y, self.c)

    def mobius_scalar_mul(self, r: float | Array, x: Array) -> Array:
        r""":math:`r \otimes_c x` (:func:`mobius_scalar_mul` with this ball's c)."""
        return mobius_scalar_mul(r, x, self.c)

    def gyration(self, u: Array, v: Array, w: Array) -> Array:
        r""":math:`\operatorname{gyr}[u, v]w` (:func:`gyration` with this ball's c)."""
        return gyration(u, v, w, self.c)

    def pull_inside(self, y: Array) -> Array:
        r"""``y`` moved radially onto the radius :math:`\sqrt c\|y\| = r = 1 - 2\varepsilon -
        (n + 4)\varepsilon_{64}` where it lies beyond it, unchanged (bit for bit) elsewhere.

        :math:`\varepsilon` is the eps of y's dtype, :math:`\varepsilon_{64} = 2^{-52}`. The
        norm is computed once, :math:`q = c\|y\|^2` summed in float64 (the squares of a float32
        point are exact there), and the *scale factor* :math:`s = r/\sqrt q` (where
        :math:`q > r^2`) is applied: :math:`y' = s\,y`, rounded to y's dtype.

        **Why the radius holds for every summation order.** With the unit roundoffs
        :math:`u = \varepsilon/2` and :math:`u_{64} = \varepsilon_{64}/2`, a float64 sum of n
        squares has relative error at most :math:`\gamma_n = nu_{64}/(1 - nu_{64})` (the
        classical bound of a dot product, which holds for every order and blocking of the
        sum). So :math:`\sqrt q` is within :math:`(n + 3)u_{64}/2` of :math:`\sqrt c\|y\|`,
        and :math:`\sqrt c\|y'\| \le r(1 + 2u + (n + 4)u_{64}/2)`
        (the division, the rounding of s to y's dtype and the n products add
        :math:`u_{64} + 2u`). Any later evaluation of :math:`c\|y'\|^2` accumulated in
        float64 (numpy's and torch's kernels in any order, BLAS dots of any blocking, and every
        map of this class, which sums float32 points in float64) adds at most :math:`(n +
        1)u_{64}`, so it is below :math:`r^2(1 + 4u + (2n + 5)u_{64}) < 1` as soon as
        :math:`1 - r > 2u + (n + 3)u_{64}`, i.e. :math:`\varepsilon + (n + 3)\varepsilon_{64}/2`:
        the margin :math:`2\varepsilon + (n + 4)\varepsilon_{64}` is about twice that (more
        than twice in float64). Points not moved have :math:`q \le r^2` and the same
        guarantee. For a float32 point the margin is about 2 float32 units of rounding
        (:math:`2.4\cdot 10^{-7}`), so float32 points keep their digits up to the boundary; a
        sum of its squares accumulated *in float32* (which riemfl never forms) has an error of
        up to :math:`(n + 1)\varepsilon/2` and is not covered. In torch the scale is a ``where``
        on the device (no host synchronisation) and differentiable.
        """
        self._shape(y, "point y")
        ops = ops_for(y)
        wide = widen(y)
        q = self.c * _dot(wide, wide)
        r = 1.0 - 2.0 * ops.eps(y) - (self.n + 4) * _EPS64
        r2 = r * r
        beyond = q > r2
        if not ops.is_torch and not beyond.any():  # numpy: nothing to move, no copy
            return y
        scale = ops.where(beyond, r / ops.sqrt(ops.where(beyond, q, r2 + 0.0 * q)), 1.0 + 0.0 * q)
        return cast_like(scale, y) * y

    def local_reach(self, x: Array) -> Array:
        r""":math:`1/\sqrt c - \|x\|`, the distance to the boundary: every ambient a that close
        to x is in the ball (its own nearest point). Evaluated as :math:`\sigma_x/(\sqrt c(1 +
        \sqrt c\|x\|))`; one value per point, in x's type."""
        self._shape(x, "point x")
        ops = ops_for(x)
        root_c = math.sqrt(self.c)
        norm = ops.sqrt(ops.sum(x * x, axis=-1))
        return conformal_sigma(x, self.c)[..., 0] / (root_c * (1.0 + root_c * norm))

    # ------------------------------------------------------------------ the hyperboloid
    def to_lorentz(self, x: Array) -> Array:
        r"""The isometry onto ``self.lorentz`` (:math:`\beta = 1/c`): :math:`x \mapsto
        ((\lambda_x - 1)/\sqrt c,\ \lambda_x x)`, with :math:`\lambda_x - 1 = (1 +
        c\|x\|^2)/\sigma_x` (no cancellation)."""
        self._shape(x, "point x")
        ops = ops_for(x)
        sigma = conformal_sigma(x, self.c)
        x0 = (2.0 - sigma) / (sigma * math.sqrt(self.c))
        return ops.concatenate([x0, (2.0 / sigma) * x], axis=-1)

    def from_lorentz(self, y: Array) -> Array:
        r"""The inverse isometry, :math:`(y_0, \bar y) \mapsto \bar y/(1 + \sqrt c\,y_0)`."""
        self.lorentz._shape(y, "point y of the hyperboloid")
        return y[..., 1:] / (1.0 + math.sqrt(self.c) * y[..., :1])

    def to_lorentz_tangent(self, x: Array, u: Array) -> Array:
        r"""The differential of :meth:`to_lorentz` at x: :math:`u \mapsto (\lambda_x^2\sqrt
        c\langle x, u\rangle,\ \lambda_x^2 c\langle x, u\rangle x + \lambda_x u)`."""
        self._shape(x, "point x")
        self._shape(u, "tangent vector u")
        ops = ops_for(x, u)
        lam = 2.0 / conformal_sigma(x, self.c)
        xu = lam * lam * _dot(x, u)
        return ops.concatenate([math.sqrt(self.c) * xu, self.c * xu * x + lam * u], axis=-1)

    def from_lorentz_tangent(self, y: Array, v: Array) -> Array:
        r"""The differential of :meth:`from_lorentz` at y: :math:`v \mapsto \bar v/(1 + \sqrt
        c\,y_0) - \sqrt c\,v_0\,\bar y/(1 + \sqrt c\,y_0)^2`."""
        self.lorentz._shape(y, "point y of the hyperboloid")
        self.lorentz._shape(v, "tangent vector v of the hyperboloid")
        root_c = math.sqrt(self.c)
        den = 1.0 + root_c * y[..., :1]
        return v[..., 1:] / den - (root_c * v[..., :1] / (den * den)) * y[..., 1:]

    # ------------------------------------------------------------------ maps
    def _first_outside(self, x: Array) -> tuple[float, tuple[int, ...], str] | None:
        """:func:`first_outside` at this curvature."""
        return first_outside(x, self.c)

    def _outside(
        self, x: Array, error: type[Exception], message: Callable[[float, str], str]
    ) -> None:
        r"""Raise ``error(message(sigma, at))`` for the first point of x with :math:`\sigma_x
        \le 0` (``at``: its batch index, or "" for a single point)."""
        found = self._first_outside(x)
        if found is not None:
            raise error(message(found[0], found[2]))

    def _boundary_violation(self, x: Array, name: str = "x") -> tuple[str, str] | None:
        r"""The first point of x with :math:`c\|x\|^2 \ge 1` (see
        :meth:`~riemfl.manifolds.base.Manifold._boundary_violation`), where the conformal
        factor :math:`\lambda_x = 2/\sigma_x` is infinite (on the sphere :math:`c\|x\|^2 = 1`)
        or negative (beyond it)."""
        found = self._first_outside(x)
        if found is None:
            return None
        sigma, i, at = found
        norm = float(np.linalg.norm(to_numpy(x, np.float64)[i]))
        bound = "1" if self.c == 1.0 else f"1/sqrt(c) = {1.0 / math.sqrt(self.c):.9g}"
        on = sigma >= -8.0 * _EPS64  # 0 to rounding
        where, factor = ("on", "infinite") if on else ("beyond", "negative")
        return (
            f"|{name}| = {norm:.9g} is not < {bound}{at}: the point is {where} the ball's "
            f"boundary (1 - c|{name}|^2 = {sigma:.3e}), where the conformal factor "
            f"2/(1 - c|{name}|^2) of the metric is {factor}",
            f"a point of the open ball, c|{name}|^2 < 1",
        )

    def _project(self, a):
        refuse(
            conformal_sigma(a, self.c) <= 0,
            ProjectionError,
            _no_nearest_message,
            self.name,
            self.c,
            a,
        )
        return a

    # every map (see Manifold._result_checked) but to_tangent, which does not read x: the maps
    # read their points through sigma, NaN for a non-finite point (and for a finite one on or
    # beyond the boundary, which Manifold._refuse_boundary then names; see _sigma), and their
    # other arguments through products, sums and the gyrovector formulas, where a NaN or an
    # infinity stays non-finite (in exp, tanh(t)/t * u is 0 * inf = NaN for an infinite u)
    _result_checked = result_checked(
        "egrad_to_rgrad",
        "ehess_to_rhess",
        "inner",
        "norm",
        "exp",
        "retract",
        "log",
        "inverse_retract",
        "dist",
        "squared_dist",
        "transport",
        "parallel_transport",
        to_tangent=(0,),
    )

    def _sigma(self, x):
        r""":math:`\sigma_x = 1 - c\|x\|^2` (:func:`conformal_sigma`), NaN where
        :math:`\sigma_x \le 0` (:func:`~riemfl.manifolds.inputs.nan_unless`). Every map reads
        its points through it, so that a point on or beyond the boundary gives a NaN result,
        which the input policy traces to the point, also where the formula would be finite
        (the gradient :math:`\sigma_x^2 g/4` is 0 on the boundary)."""
        sigma = conformal_sigma(x, self.c)
        return nan_unless(sigma > 0, sigma)

    def _to_tangent(self, x, a):
        return a

    def _inner(self, x, u, v):
        sigma = self._sigma(x)
        return (4.0 * _dot(u, v) / (sigma * sigma))[..., 0]

    def _norm(self, x, u):
        return (2.0 * ops_for(u).safe_sqrt(_dot(u, u)) / self._sigma(x))[..., 0]

    def _egrad_to_rgrad(self, x, g):
        sigma = self._sigma(x)
        return (0.25 * sigma * sigma) * g

    def _ehess_to_rhess(self, x, g, h, u):
        sigma = self._sigma(x)
        turn = _dot(x, g) * u - _dot(x, u) * g - _dot(u, g) * x
        return (0.25 * sigma * sigma) * h + (0.5 * self.c * sigma) * turn

    def _exp(self, x, u):
        r""":math:`x \oplus_c v`, :math:`v = \tanh(t)\,u/(\sqrt c\|u\|)`, :math:`t =
        \sqrt c\|u\|/\sigma_x`, with :math:`\sigma_v = 1/\cosh^2 t` taken from t (v itself
        may round onto the boundary); results that rounded within :math:`2\varepsilon +
        (n + 4)\varepsilon_{64}` of the boundary, or beyond, are moved inside
        (:meth:`pull_inside`)."""
        sx = self._sigma(x)
        t2 = self.c * _dot(u, u) / (sx * sx)
        v = tanh_sqrt_over(t2) * u / sx
        return self.pull_inside(_add(x, sx, v, sech2_sqrt(t2), self.c))

    _retract = _exp

    def _log_parts(self, x, y):
        """(ops, sigma_x, sigma_y, y - x, c |y - x|^2, s^2)."""
        ops = ops_for(x, y)
        sx, sy = self._sigma(x), self._sigma(y)
        delta = y - x
        q = self.c * _dot(delta, delta)
        return ops, sx, sy, delta, q, q / (sx * sy)

    def _log(self, x, y):
        ops, sx, sy, delta, q, s2 = self._log_parts(x, y)
        w = sx * delta - q * x
        return asinh_sqrt_over(s2) * ops.sqrt(sx / ((sx * sy + q) * sy)) * w

    _inverse_retract = _log

    def _dist(self, x, y):
        ops, *_, s2 = self._log_parts(x, y)
        return (2.0 / math.sqrt(self.c)) * ops.arcsinh(ops.safe_sqrt(s2))[..., 0]

    def _squared_dist(self, x, y):
        *_, s2 = self._log_parts(x, y)
        ratio = asinh_sqrt_over(s2)
        return ((4.0 / self.c) * s2 * ratio * ratio)[..., 0]

    def _parallel_transport(self, x, y, v):
        sx, sy = self._sigma(x), self._sigma(y)
        return (sy / sx) * _gyration(y, -x, v, sy, sx, self.c)

    _transport = _parallel_transport

    # ------------------------------------------------------------------ sampling and checks
    def _random_point(self, batch_shape, rng):
        return self.from_lorentz(self.lorentz.random_point(*batch_shape, rng=rng))

    def _point_violation(self, x):
        if ops_for(x).any(conformal_sigma(x, self.c) <= 0):
            return "c|x|^2 < 1", math.inf
        return "c|x|^2 < 1", 0.0

    def _check_point(self, x: Array, tol: float) -> None:
        r"""Raise :class:`~riemfl.errors.NotOnManifoldError` unless :math:`c\|x\|^2 < 1`
        strictly (no tolerance: the boundary is at infinite distance)."""
        self._outside(
            x,
            NotOnManifoldError,
            lambda sigma, at: (
                f"{self.name}: point is not in the open ball: constraint c|x|^2 < 1 is violated: "
                f"1 - c|x|^2 = {sigma:.3e} <= 0{at}"
            ),
        )

    def _tangent_violation(self, x, u):
        return "u in R^n (every vector is tangent)", 0.0


def first_outside(x: Array, c: float) -> tuple[float, tuple[int, ...], str] | None:
    r"""``(sigma, i, at)`` for the first point of x with :math:`\sigma_x \le 0` (curvature
    -c): its batch index i and ``at``, " (batch element i)" or "" for a single point; None if
    none."""
    sigma = to_numpy(conformal_sigma(x, c), np.float64)[..., 0]
    if not np.any(sigma <= 0):
        return None
    i = tuple(int(k) for k in np.argwhere(np.atleast_1d(sigma <= 0))[0]) if x.ndim > 1 else ()
    return float(sigma[i]), i, f" (batch element {i})" if i else ""


def _no_nearest_message(name: str, c: float, a: Array) -> str:
    sigma, _, at = first_outside(a, c)
    return (
        f"{name}: a has no nearest point in the open ball{at}: c|a|^2 = "
        f"{1.0 - sigma:.9g} >= 1, so the nearest point of the closed ball is on the sphere "
        f"c|x|^2 = 1, which the open ball does not contain. Expected c|a|^2 < 1"
    )

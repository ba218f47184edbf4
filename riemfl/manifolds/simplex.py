r"""The open probability simplex :math:`\Delta^{C-1}_\circ = \{p \in \mathbb{R}^C : p_i > 0,\
\sum_i p_i = 1\}` with the Fisher-Rao metric.

Tangent vectors at p are the vectors of :math:`T = \{u \in \mathbb{R}^C : \sum_i u_i = 0\}`
(the same space at every p) and the metric is :math:`\langle u, v\rangle_p = \sum_i u_i v_i /
p_i`. The *sphere map* :math:`\varphi(p) = 2\sqrt p` (componentwise) is an isometry onto the
open positive orthant of the sphere of radius 2: :math:`d\varphi_p(u) = u/\sqrt p` and
:math:`\|u/\sqrt p\|^2 = \sum_i u_i^2/p_i`. Every geodesic map is the round sphere's, moved
through :math:`x = \sqrt p` on the unit sphere (angles are halved, tangent vectors become
:math:`u/(2\sqrt p)`), so all are exact and closed form.

FLoRAL's routers live here (Almansoori et al. 2024, Sec. 5 and App. C): :math:`\pi^k =
\mathrm{softmax}(\theta^k)`, and the exponential-weights update of their eq. (5)/(34) is the
entropic step that is this manifold's retraction.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import integer, real
from ..backend import Array, is_torch, ops_for, to_numpy
from ..check_levels import refuse
from ..errors import CutLocusError, NotOnManifoldError, ProjectionError
from .base import Manifold, result_checked
from .elementary import angle_over_sine, cos_sqrt, nonzero, sinc_sqrt, squared_angle
from .inputs import first_nonpositive, nan_unless, positive_or_nan

__all__ = ["Simplex", "project_closed_simplex"]


def _lib(*arrays: Array):
    """numpy, or torch if any argument is a tensor (for the functions the backend lacks)."""
    if any(is_torch(a) for a in arrays):
        import torch

        return torch
    return np


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(np.atleast_1d(mask))[0]) if mask.ndim else ()


def project_closed_simplex(a: Array) -> Array:
    r"""Euclidean projection onto the *closed* simplex :math:`\Delta = \{p \ge 0, \sum p = 1\}`.

    The sort-based algorithm of Duchi, Shalev-Shwartz, Singer and Chandra (ICML 2008, Fig. 1):
    with :math:`\mu` the entries of ``a`` sorted in decreasing order,
    :math:`\rho = \max\{j : \mu_j - (\sum_{i\le j}\mu_i - 1)/j > 0\}`,
    :math:`\tau = (\sum_{i\le\rho}\mu_i - 1)/\rho` and :math:`P_\Delta(a) = \max(a - \tau, 0)`.
    :math:`O(C\log C)`, batched over leading dimensions, numpy or torch (differentiable almost
    everywhere). The result can lie on the boundary (zero entries), which the open simplex
    :class:`Simplex` does not contain; :meth:`Simplex.project` is its open counterpart.
    """
    lib = _lib(a)
    ops = ops_for(a)
    if a.ndim < 1 or not ops.all_finite(a):
        raise NotOnManifoldError(
            f"project_closed_simplex needs a finite array with the components on its last axis, "
            f"got shape {tuple(a.shape)}" + ("" if a.ndim < 1 else " with NaN or infinite entries")
        )
    c = a.shape[-1]
    if is_torch(a):
        mu = lib.sort(a, dim=-1, descending=True).values
        css = lib.cumsum(mu, dim=-1) - 1.0
        j = lib.arange(1, c + 1, dtype=a.dtype, device=a.device)
    else:
        mu = -np.sort(-a, axis=-1)
        css = np.cumsum(mu, axis=-1) - 1.0
        j = np.arange(1, c + 1, dtype=a.dtype)
    rho = ops.sum(ops.where(mu - css / j > 0, ops.ones_like(mu), 0.0 * mu), axis=-1, keepdims=True)
    if is_torch(a):
        tau = lib.gather(css, -1, rho.long() - 1) / rho
    else:
        tau = np.take_along_axis(css, rho.astype(np.intp) - 1, axis=-1) / rho
    return ops.maximum(a - tau, 0.0)


class Simplex(Manifold):
    r"""The open probability simplex of C components with the Fisher-Rao metric.

    Sizes: ``C`` is the ambient size (points are vectors of C probabilities); ``dim`` is C - 1.

    Points are length-C vectors with strictly positive entries summing to 1.

    * ``to_tangent``: :math:`P_p(a) = a - (\sum_i a_i)\,p`, the orthogonal projection onto
      :math:`T = \{\sum u = 0\}` for the metric :math:`\mathrm{diag}(1/p)` extended to the ambient
      space (:math:`\langle a - P_p a, w\rangle_p = (\sum a)\sum_i w_i = 0` for w in T), as
      :class:`~riemfl.manifolds.lorentz.Lorentz` projects Minkowski-orthogonally.
    * ``egrad_to_rgrad``: :math:`\mathrm{grad} f(p) = p \odot (g - \langle p, g\rangle)`. The
      Riemannian gradient is the u in T with :math:`\langle u, v\rangle_p = \sum_i g_i v_i` for
      all v in T. Try :math:`u = p\odot(g - c\mathbf 1)`: :math:`\langle u, v\rangle_p =
      \sum_i (g_i - c) v_i = \sum_i g_i v_i` for every c since :math:`\sum v = 0`, and
      :math:`u \in T` fixes :math:`c = \sum_i p_i g_i`. (It is :math:`P_p(p\odot g)`.)
    * ``ehess_to_rhess``: :math:`\operatorname{Hess} f(p)[u] = P_p\big(p\odot h +
      \tfrac12\,u\odot(g - \langle p, g\rangle)\big)` with :math:`g = \nabla\bar f(p)`,
      :math:`h = \nabla^2\bar f(p)[u]`, i.e. :math:`p\odot(h - \langle p, h\rangle) +
      \tfrac12(u\odot(g - \langle p, g\rangle) - \langle u, g\rangle\,p)` for tangent u
      (derived here). The metric :math:`\mathrm{diag}(1/p)` on the positive orthant has the
      Christoffel symbols :math:`\Gamma(u, v) = -u\odot v/(2p)` (the only non-zero
      :math:`\Gamma^k_{kk} = -1/(2p_k)`); the simplex is a Riemannian submanifold of it, so its
      connection is :math:`\nabla_u V = P_p(\mathrm{D}V[u] + \Gamma(u, V))` with the
      metric-orthogonal :math:`P_p` above. With :math:`V = \mathrm{grad} f = p\odot(g -
      \langle p, g\rangle)`, :math:`\mathrm{D}V[u] = u\odot(g - \langle p, g\rangle) +
      p\odot(h - \langle u, g\rangle - \langle p, h\rangle)` and :math:`\Gamma(u, V) =
      -\tfrac12 u\odot(g - \langle p, g\rangle)`; :math:`P_p` removes the multiples of p.
      (The same follows from the sphere map: the sphere's Hessian of :math:`\bar f(x^2/4)` at
      :math:`x = 2\sqrt p`, pulled back.) Self-adjoint: :math:`\langle \operatorname{Hess}
      f[u], v\rangle_p = \langle h, v\rangle + \tfrac12\sum_i u_i v_i (g_i - \langle p,
      g\rangle)/p_i`.
    * ``retract``: the entropic (exponentiated-gradient) step
      :math:`R_p(u) = p\odot e^{u/p} / \sum_i p_i e^{u_i/p_i} = \mathrm{softmax}(\log p +
      u/p)`, the exponential weights of FLoRAL (Almansoori et al. 2024, eqs. (5), (34)) with the
      Fisher-Rao gradient step :math:`u = -\eta\,p\odot(f - \langle p, f\rangle)`. A weight
      :math:`e^{z_i - \max z}` that underflows to 0 is the smallest normal number instead
      (:func:`~riemfl.manifolds.elementary.nonzero`), so every component stays positive for
      every step (the normalising sum only scales them: its order does not matter). First order:
      :math:`R_p(tu) = p + tu + \tfrac{t^2}{2}(u^2/p - p\sum_i u_i^2/p_i) + O(t^3)`; not
      second order (the geodesic's :math:`t^2` term is half of that: the EG curve is the
      exponential-family e-geodesic, not the Levi-Civita one). Defined for every u.
    * ``inverse_retract``: exact and global, :math:`R_p^{-1}(q) = p\odot(\ell - \langle p,
      \ell\rangle)` with :math:`\ell = \log(q/p)`: :math:`\log p + u/p = \log q + c` and
      :math:`\sum u = 0` gives :math:`c = -\mathrm{KL}(p\,\|\,q)`.
    * ``exp``: with :math:`x = \sqrt p`, :math:`w = u/(2\sqrt p)`, :math:`\theta = \|w\| =
      \|u\|_p/2`: :math:`\mathrm{Exp}_p(u) = (\cos\theta\,x + \sin\theta\,w/\theta)^{\odot 2}`.
      The simplex is not complete: the great circle can leave the positive orthant, where the
      squared curve is no geodesic of the open simplex (it folds back off the face). ``exp``
      raises ``CutLocusError`` when the geodesic reaches the boundary for some t in (0, 1]
      (exactly: :math:`\theta \ge \pi/2` or a component of the endpoint's square root is
      :math:`\le 0`; a geodesic segment inside the open orthant is shorter than
      :math:`\pi/2`, and for :math:`\theta < \pi` a component crosses 0 at most once).
      It is defined on the whole Fisher ball of radius :meth:`local_injectivity_radius`
      :math:`= 2\arcsin\sqrt{\min_i p_i}`, the distance from p to the boundary. A positive
      component of the square root whose square underflows is squared to the smallest normal
      number instead of 0 (:func:`~riemfl.manifolds.elementary.nonzero`).
    * ``log``: :math:`\mathrm{Log}_p(q) = 2\sqrt p\odot\frac{\alpha}{\sin\alpha}(\sqrt q -
      \cos\alpha\sqrt p)`, :math:`\cos\alpha = \sum_i\sqrt{p_i q_i}`; ``dist``:
      :math:`d(p, q) = 2\arccos\sum_i\sqrt{p_i q_i}` (evaluated as :math:`2\,\mathrm{atan2}
      (\|\sqrt q - \cos\alpha\sqrt p\|, \cos\alpha)`, accurate for close points; ``squared_dist``
      :math:`4\alpha^2` with the sphere's smooth squared angle). Both are
      defined everywhere: the open orthant is convex with angles below :math:`\pi/2`, so the
      minimising geodesic is unique and stays inside.
    * ``parallel_transport``: the sphere's along the minimising geodesic, :math:`v = u/(2x)`,
      :math:`v' = v - \frac{\langle y, v\rangle}{1 + \langle x, y\rangle}(x + y)`, :math:`u' =
      2y\odot v'` with :math:`y = \sqrt q`; ``transport`` is the projection onto
      :math:`T_q`, which is the identity on tangent vectors (every tangent space is T).
    * ``project``: the Euclidean nearest point in the *open* simplex. The closure is convex,
      so the nearest point is unique when it exists, and it exists iff the projection onto the
      affine hull, :math:`a - \tau\mathbf 1` with :math:`\tau = (\sum_i a_i - 1)/C`, is
      strictly positive; then it is that point. Otherwise the nearest point of the closed
      simplex is on the boundary, not attained in the open simplex, and ``project`` raises
      ``ProjectionError`` naming the components (it does not clip to a floor: that would not
      be a nearest point). :func:`project_closed_simplex` (Duchi et al. 2008) projects onto the
      closed simplex.

    Constants. ``diameter`` :math:`\sqrt2` (the ambient Euclidean supremum, approached at two
    vertices; the Fisher-Rao diameter is :math:`\pi`). The open simplex is not closed, and both
    local radii vanish at the boundary, so ``reach`` and ``injectivity_radius``
    raise ``NotImplementedError`` with the reason (the conformance kit skips their tests); the
    per-point radii are :meth:`local_reach` (:math:`\sqrt{C/(C-1)}\min_i p_i`,
    the Euclidean distance to the boundary: within it every ambient point has its nearest point
    inside, since the closed-simplex projection is 1-Lipschitz) and
    :meth:`local_injectivity_radius`.

    Parameters
    ----------
    C : int
        Number of components, ``C >= 2``.
    concentration : float
        Parameter :math:`\alpha` of the symmetric Dirichlet distribution ``random_point`` draws
        from: 1 is uniform on the simplex; larger values concentrate the points around the
        barycentre, away from the boundary.
    """

    unsupported = {
        "reach": (
            "the open simplex is not closed: a point p has a nearest point in it only within "
            "sqrt(C/(C-1)) * min(p) of p (beyond, the nearest point of the closure is on the "
            "boundary), which tends to 0 at the boundary, so the uniform constant is 0; use "
            "local_reach(p) (project_closed_simplex has reach inf)"
        ),
        "injectivity_radius": (
            "the open simplex with the Fisher-Rao metric is not complete: exp_p is defined on "
            "the Fisher ball of radius 2 arcsin(sqrt(min p)) (the distance to the boundary), "
            "which tends to 0 at the boundary; use local_injectivity_radius(p)"
        ),
    }

    def __init__(self, C: int, concentration: float = 1.0) -> None:
        self.C = integer(C, "Simplex(C): C", minimum=2)
        self.concentration = real(concentration, "Simplex: concentration", above=0)
        self.point_shape = (self.C,)
        suffix = "" if concentration == 1.0 else f", concentration={concentration:g}"
        self.name = f"Simplex({self.C}{suffix})"

    @property
    def dim(self) -> int:
        return self.C - 1

    diameter = math.sqrt(2.0)

    # ------------------------------------------------------------------ local constants
    def local_reach(self, p: Array) -> Array:
        r""":math:`\sqrt{C/(C-1)}\,\min_i p_i`: every ambient a with :math:`\|a - p\| <` this
        has a nearest point in the open simplex (one value per point, in p's type).

        It is the Euclidean distance from p to the boundary within the hyperplane
        :math:`\sum = 1` (to the face :math:`p_i = 0` along :math:`e_i - \mathbf 1/C`, of norm
        :math:`\sqrt{(C-1)/C}`), and the closed-simplex projection is 1-Lipschitz; stepping that
        far towards the nearest face reaches it, so the radius is exact.
        """
        self._shape(p, "point p")
        return -ops_for(p).amax(-p, axis=-1) * math.sqrt(self.C / (self.C - 1))

    def local_injectivity_radius(self, p: Array) -> Array:
        r""":math:`2\arcsin\sqrt{\min_i p_i}`, the Fisher-Rao distance from p to the boundary:
        ``exp(p, u)`` is defined and injective for :math:`\|u\|_p <` this."""
        self._shape(p, "point p")
        ops = ops_for(p)
        low = -ops.amax(-p, axis=-1)
        return 2.0 * _lib(p).arcsin(ops.sqrt(low))

    # ------------------------------------------------------------------ maps
    # the maps checked through their result (see Manifold._result_checked): they read their
    # points through positive_or_nan (NaN for a NaN entry, and for an entry <= 0, on or beyond
    # the boundary, where 1/p and log p are infinite, which Manifold._refuse_boundary then
    # names, also where the formula would be finite: log, dist and the gradient extend
    # continuously to the closed simplex; retract guards only where a weight is 0), and their
    # other arguments through sums, products and quotients, where a NaN or an infinity stays
    # non-finite (exp: an infinite u makes theta infinite, the cut-locus test raises). Checked
    # first: x of the metric (u v/inf is 0), u of retract (u/p = -inf gives the weight
    # exp(-inf) = 0), both points of the distances (an infinite entry makes both arguments of
    # atan2 infinite)
    _result_checked = result_checked(
        "egrad_to_rgrad",
        "ehess_to_rhess",
        "inverse_retract",
        "exp",
        "log",
        "parallel_transport",
        inner=(0,),
        norm=(0,),
        retract=(1,),
        dist=(0, 1),
        squared_dist=(0, 1),
    )

    def _boundary_violation(self, x: Array, name: str = "x") -> tuple[str, str] | None:
        """The first point of x with a component <= 0 (see
        :meth:`~riemfl.manifolds.base.Manifold._boundary_violation`), where the Fisher metric
        :math:`\\sum_i u_i v_i/p_i` is infinite."""
        found = self._first_nonpositive(x)
        if found is None:
            return None
        k, low, at = found
        where = "on" if low == 0 else "beyond"
        return (
            f"its component {k}{at} is {low:.3e}, not > 0: the point is {where} the "
            f"boundary of the open simplex, where the Fisher metric sum_i u_i v_i/{name}_i is "
            f"infinite",
            f"a point of the open simplex, {name} > 0 with sum({name}) = 1",
        )

    def _project(self, a):
        ops = ops_for(a)
        tau = (ops.sum(a, axis=-1, keepdims=True) - 1.0) / self.C
        p = a - tau
        refuse(p <= 0, ProjectionError, _no_nearest_message, self.name, p, tau)
        return p

    def _to_tangent(self, x, a):
        return a - ops_for(x, a).sum(a, axis=-1, keepdims=True) * x

    def _egrad_to_rgrad(self, x, g):
        x = positive_or_nan(x)
        return x * (g - ops_for(x, g).sum(x * g, axis=-1, keepdims=True))

    def _ehess_to_rhess(self, x, g, h, u):
        x = positive_or_nan(x)
        shift = g - ops_for(x, g).sum(x * g, axis=-1, keepdims=True)
        return self._to_tangent(x, x * h + 0.5 * u * shift)

    def _inner(self, x, u, v):
        return ops_for(x, u, v).sum(u * v / positive_or_nan(x), axis=-1)

    def _retract(self, x, u):
        ops = ops_for(x, u)
        z = _lib(x).log(x) + u / x
        e = _lib(z).exp(z - ops.amax(z, axis=-1, keepdims=True))
        if ops.is_torch or not e.all():
            # a weight 0 is an underflow, floored by nonzero, or comes from a component
            # p_i = 0 with u_i < 0 (z_i = -inf, made NaN here: the guard of the boundary,
            # needed only where a weight is 0; at any other p_i <= 0, z_i is NaN already)
            e = nan_unless(z > -math.inf, nonzero(e))
        return e / ops.sum(e, axis=-1, keepdims=True)

    def _inverse_retract(self, x, y):
        lib = _lib(x, y)  # (x through the gradient's guard)
        return self._egrad_to_rgrad(x, lib.log(positive_or_nan(y)) - lib.log(x))

    def _exp(self, x, u):
        ops = ops_for(x, u)
        root = ops.sqrt(positive_or_nan(x))
        w = u / (2.0 * root)
        theta2 = ops.sum(w * w, axis=-1, keepdims=True)
        y = cos_sqrt(theta2) * root + sinc_sqrt(theta2) * w
        out = (ops.sqrt(theta2[..., 0]) >= math.pi / 2) | (-ops.amax(-y, axis=-1) <= 0)
        refuse(out, CutLocusError, _exp_leaves_message, self.name, theta2, y)
        q = nonzero(y * y)
        return q / ops.sum(q, axis=-1, keepdims=True)

    def _sphere_log_parts(self, x, y):
        """(ops, sqrt p, sqrt q, cos alpha, w = sqrt q - cos alpha sqrt p, |w|^2)."""
        ops = ops_for(x, y)
        rx, ry = ops.sqrt(positive_or_nan(x)), ops.sqrt(positive_or_nan(y))
        c = ops.sum(rx * ry, axis=-1, keepdims=True)
        w = ry - c * rx
        return ops, rx, ry, c, w, ops.sum(w * w, axis=-1, keepdims=True)

    def _log(self, x, y):
        _, rx, _, c, w, s2 = self._sphere_log_parts(x, y)
        return 2.0 * rx * angle_over_sine(c, s2) * w

    def _dist(self, x, y):
        ops, _, _, c, _, s2 = self._sphere_log_parts(x, y)
        return 2.0 * ops.arctan2(ops.safe_sqrt(s2), c)[..., 0]

    def _squared_dist(self, x, y):
        _, _, _, c, _, s2 = self._sphere_log_parts(x, y)
        return 4.0 * squared_angle(c, s2)[..., 0]

    def _parallel_transport(self, x, y, u):
        ops, rx, ry, c, _, _ = self._sphere_log_parts(x, y)
        v = u / (2.0 * rx)
        v = v - ops.sum(ry * v, axis=-1, keepdims=True) / (1.0 + c) * (rx + ry)
        return 2.0 * ry * v

    # ------------------------------------------------------------------ sampling and checks
    def _random_point(self, batch_shape, rng):
        """Symmetric Dirichlet(``concentration``) points; entries that underflow to 0 (only for
        concentrations well below 1) are floored at the smallest normal float."""
        p = rng.dirichlet(np.full(self.C, self.concentration), size=batch_shape)
        p = np.maximum(p, np.finfo(np.float64).tiny)
        return p / p.sum(axis=-1, keepdims=True)

    def _point_violation(self, x):
        ops = ops_for(x)
        return "sum(p) = 1", ops.to_float(ops.abs(ops.sum(x, axis=-1) - 1.0))

    def _tangent_violation(self, x, u):
        ops = ops_for(x, u)
        return "sum(u) = 0", ops.to_float(ops.abs(ops.sum(u, axis=-1)))

    def _check_point(self, x: Array, tol: float) -> None:
        r"""Raise :class:`~riemfl.errors.NotOnManifoldError` unless x is in the open simplex.

        Positivity is strict (:math:`p_i > 0`; no tolerance: a zero entry is on the boundary,
        where :math:`1/p` and :math:`\log p` are infinite); :math:`|\sum_i p_i - 1| \le`
        ``atol``. The message names the constraint, the component or the violation, and the
        batch element.
        """
        found = self._first_nonpositive(x)
        if found is not None:
            k, low, at = found
            raise NotOnManifoldError(
                f"{self.name}: point is not in the open simplex: constraint p > 0 is violated by "
                f"component {k} = {low:.3e}{at}"
            )
        super()._check_point(x, tol)  # sum(p) = 1, through _point_violation

    @staticmethod
    def _first_nonpositive(x: Array) -> tuple[int, float, str] | None:
        """``(k, p_k, at)`` for the smallest component of the first point of x with a component
        <= 0 (``at``: " in batch element i", or "" for a single point), or None."""
        found = first_nonpositive(x, 1)
        if found is None:
            return None
        i, (k,), low = found
        return k, low, f" in batch element {i}" if i else ""


def _no_nearest_message(name: str, p: Array, tau: Array) -> str:
    low = to_numpy(p).min(axis=-1)
    i = _first(low <= 0)
    row = to_numpy(p)[i]
    zeros = [int(k) for k in np.flatnonzero(row <= 0)]
    where = f" (batch element {i})" if i else ""
    return (
        f"{name}: a has no nearest point in the open simplex{where}: its projection "
        f"onto the hyperplane sum = 1, a - tau with tau = (sum(a) - 1)/C = "
        f"{float(to_numpy(tau)[i].squeeze()):.6g}, has components {zeros} <= 0 (smallest "
        f"{float(low[i]):.3e}), so the nearest point of the closed simplex lies on the "
        f"boundary, which the open simplex does not contain. Expected a - tau > 0; "
        f"project_closed_simplex(a) projects onto the closed simplex"
    )


def _exp_leaves_message(name: str, theta2: Array, y: Array) -> str:
    theta = np.sqrt(to_numpy(theta2)[..., 0])
    low = to_numpy(y).min(axis=-1)
    i = _first((theta >= math.pi / 2) | (low <= 0))
    where = f" (batch element {i})" if i else ""
    length = 2 * float(theta[i])
    if length >= math.pi:
        why = f"its Fisher length |u|_p = {length:.4g} is longer than pi, the diameter"
    else:
        k = int(np.argmin(to_numpy(y)[i]))
        why = f"along the geodesic of Fisher length |u|_p = {length:.4g}, component {k} "
        why += "reaches 0 before t = 1"
    return (
        f"{name}: exp leaves the open simplex{where}: {why}; expected |u|_p below "
        f"the distance to the boundary along u (at least local_injectivity_radius(p) = "
        f"2 arcsin(sqrt(min p)))"
    )

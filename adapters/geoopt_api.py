r"""geoopt's per-class public API on top of riemfl's maps (the mixins of ``to_geoopt``'s classes).

:func:`riemfl.adapters.geoopt.to_geoopt` gives a riemfl manifold that has a geoopt counterpart
the whole public API of that geoopt class, with geoopt's parameter names, keyword-only markers
and defaults, so that code written against geoopt's class runs unchanged on riemfl's geometry.
Each mixin here holds one geoopt class's extra methods; the adapter module combines it with its
generic ``GeooptManifold`` (imported on first use, like geoopt itself, which this module needs).

Every value is computed by riemfl: the manifold's own maps, riemfl's gyrovector functions
(:mod:`riemfl.manifolds.poincare`), or formulas over them, never by calling geoopt. The maps
"at the origin" are riemfl's maps with one argument fixed at the origin (``expmap0(u) =
exp(o, u)``, ``transp0back(x, u) = parallel_transport(x, o, u)``). Samplers draw from torch's
global generator, as geoopt's do.

``dim=`` (the axis that holds a point, geoopt's hyperbolic classes) is honoured by moving that
axis last and back. ``project=`` and ``norm_tan=`` are accepted and do nothing: geoopt uses them
to clamp results onto a ball of radius :math:`(1 - 4\cdot10^{-3})/\sqrt c` (float32) or to
re-lift them onto the hyperboloid, while riemfl's maps return points of the manifold to rounding
and clamp nothing (the module docstring of :mod:`riemfl.adapters.geoopt` lists the differences).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import geoopt
import torch
from geoopt.utils import size2shape

from riemfl.errors import ShapeError
from riemfl.manifolds.lorentz import minkowski_inner
from riemfl.manifolds.poincare import conformal_sigma, gyration, mobius_add, mobius_scalar_mul

__all__ = [
    "EuclideanAPI",
    "SphereAPI",
    "StiefelAPI",
    "CanonicalStiefelAPI",
    "LorentzAPI",
    "PoincareBallAPI",
    "SPDAPI",
    "BirkhoffPolytopeAPI",
]

Tensor = torch.Tensor


def _vector(fn: Callable[..., Tensor], dim: int, *tensors: Tensor) -> Tensor:
    """``fn`` on the tensors with axis ``dim`` moved last; the result's last axis put back."""
    return fn(*(t.movedim(dim, -1) for t in tensors)).movedim(-1, dim)


def _scalar(fn: Callable[..., Tensor], dim: int, keepdim: bool, *tensors: Tensor) -> Tensor:
    """``fn`` (one value a point) on the tensors with axis ``dim`` moved last."""
    out = fn(*(t.movedim(dim, -1) for t in tensors))
    return out.unsqueeze(dim) if keepdim else out


def _tensor(self: Any, x: Tensor) -> Any:
    return geoopt.ManifoldTensor(x, manifold=self)


def _normal(size, mean, std, dtype, device) -> Tensor:
    """geoopt's draw: ``mean + std * N(0, 1)`` of the shape, from torch's global generator."""
    dtype = dtype or torch.get_default_dtype()
    return torch.randn(*size, dtype=dtype, device=device) * std + mean


class _Curvature:
    r"""The curvature parameter as a module buffer ``k`` (geoopt keeps its ``k`` as a module
    parameter), so that ``.to()``, ``.float()``, ``Manifold.dtype`` and ``Manifold.device``
    see it, as geoopt's ``ProductManifold`` needs to check dtypes. It starts in float64, the
    precision of riemfl's parameter; the maps are computed by riemfl from its own parameter,
    in the dtype of their arguments, whatever the buffer's dtype."""

    def __init__(self, manifold: Any) -> None:
        super().__init__(manifold)
        self.register_buffer("k", torch.tensor(self._curvature_k(), dtype=torch.float64))

    def _curvature_k(self) -> float:
        raise NotImplementedError


class _Identity:
    """``origin``: the identity matrix (geoopt's Stiefel, SPD and Birkhoff origins)."""

    def origin(self, *size, dtype=None, device=None, seed=42):
        shape = size2shape(*size)
        self._assert_check_shape(shape, "x")
        eye = torch.zeros(*shape, dtype=dtype, device=device)
        eye.diagonal(dim1=-2, dim2=-1).fill_(1.0)
        return _tensor(self, eye)


# ------------------------------------------------------------------------------- flat and round
class EuclideanAPI:
    """``geoopt.Euclidean``: normal samples, the zero origin, componentwise inner products."""

    _metric_ignores_point = True

    def random_normal(self, *size, mean=0.0, std=1.0, device=None, dtype=None):
        shape = size2shape(*size)
        self._assert_check_shape(shape, "x")
        return _tensor(self, _normal(shape, mean, std, dtype, device))

    random = random_normal

    def origin(self, *size, dtype=None, device=None, seed=42):
        shape = size2shape(*size)
        self._assert_check_shape(shape, "x")
        return _tensor(self, torch.zeros(*shape, dtype=dtype, device=device))

    def component_inner(self, x, u, v=None):
        return u * (u if v is None else v)


class SphereAPI:
    """``geoopt.Sphere``: uniform samples (riemfl's sampler: a normalised Gaussian)."""

    #: geoopt's projector onto a subspace the sphere is intersected with: riemfl's has none
    projector = None
    _metric_ignores_point = True

    def random_uniform(self, *size, dtype=None, device=None):
        return self._sample(size, dtype, device)

    random = random_uniform


class _Naive(_Identity):
    """``random_naive`` (and ``random``): riemfl's sampler (geoopt's Stiefel and Birkhoff
    classes name theirs so)."""

    def random_naive(self, *size, dtype=None, device=None):
        return self._sample(size, dtype, device)

    random = random_naive


class _NaiveStiefel(_Naive):
    """geoopt's Stiefel classes: ``random_naive`` is geoopt's recipe (the Q factor of a
    standard Gaussian drawn from torch's global generator, no sign correction: the same points
    as geoopt's class for the same seed, which its tests count on), ``random`` riemfl's Haar
    sampler (QR with a positive diag(R))."""

    def random_naive(self, *size, dtype=None, device=None):
        shape = size2shape(*size)
        ok, reason = self._check_shape(shape, "x")
        if not ok:
            raise ShapeError(reason)
        q = torch.linalg.qr(torch.randn(*shape, dtype=dtype, device=device))[0]
        return geoopt.ManifoldTensor(q, manifold=self)


class StiefelAPI(_NaiveStiefel):
    """``geoopt.EuclideanStiefel``."""

    _metric_ignores_point = True


class CanonicalStiefelAPI(_NaiveStiefel):
    r"""``geoopt.CanonicalStiefel`` (``geoopt.Stiefel()``): riemfl's ``Stiefel(n, p,
    metric="canonical")``, Haar samples, and ``retr_transp``, ``transp_follow_retr`` by the
    differential of the retraction (riemfl's ``retraction_transport``, Cayley's by default).

    geoopt's class differs: its ``proju`` (= ``egrad2rgrad``) is :math:`u - xu^\top x`, the
    canonical gradient map, not a projection (it doubles the skew part of a tangent vector);
    its ``retr`` and ``expmap`` build the Cayley W as :math:`ux^\top - xu^\top` from their
    argument, a retraction only for :math:`x^\top u = 0`; it transports by the Cayley rotation
    itself and has no ``transp``. riemfl's ``expmap`` is the exact exponential map."""


# ------------------------------------------------------------------------------- the hyperboloid
class LorentzAPI(_Curvature):
    r"""``geoopt.Lorentz(k)``: riemfl's ``Lorentz(n, beta=k)``, maps at the origin
    :math:`o = (\sqrt k, 0, \dots, 0)`, the Minkowski norm, ``dim=``. The buffer ``k`` is
    :math:`\beta` (curvature :math:`-1/k`). Steps and transported vectors are projected onto
    the tangent space first (geoopt's ``expmap`` and ``retr`` project u too, with
    ``norm_tan=True``)."""

    _metric_ignores_point = True

    def _curvature_k(self) -> float:
        return self.riemfl_manifold.beta

    def _o(self, like: Tensor) -> Tensor:
        o = torch.zeros_like(like)
        o[..., 0] = math.sqrt(self.riemfl_manifold.beta)
        return o

    # maps with geoopt's keywords
    def projx(self, x, *, dim=-1):
        return _vector(self.riemfl_manifold.project, dim, x)

    def proju(self, x, v, *, dim=-1):
        return _vector(self.riemfl_manifold.to_tangent, dim, x, v)

    def egrad2rgrad(self, x, u, *, dim=-1):
        return _vector(self.riemfl_manifold.egrad_to_rgrad, dim, x, u)

    def inner(self, x, u, v=None, *, keepdim=False, dim=-1):
        x = self._base_point(x, u, "inner")
        return _scalar(self.riemfl_manifold.inner, dim, keepdim, x, u, u if v is None else v)

    def norm(self, u, *, keepdim=False, dim=-1):
        r""":math:`\sqrt{\langle u, u\rangle_L}`, 0 where it is not positive (geoopt clamps
        at :math:`10^{-4}`)."""
        return _scalar(lambda u: minkowski_inner(u, u).clamp_min(0.0).sqrt(), dim, keepdim, u)

    def expmap(self, x, u, *, norm_tan=True, project=True, dim=-1):
        return _vector(lambda x, u: self.riemfl_manifold.exp(x, self.proju(x, u)), dim, x, u)

    def retr(self, x, u, *, norm_tan=True, project=True, dim=-1):
        return _vector(lambda x, u: self.riemfl_manifold.retract(x, self.proju(x, u)), dim, x, u)

    def logmap(self, x, y, *, dim=-1):
        return _vector(self.riemfl_manifold.log, dim, x, y)

    def dist(self, x, y, *, keepdim=False, dim=-1):
        return _scalar(self.riemfl_manifold.dist, dim, keepdim, x, y)

    def transp(self, x, y, v, *, dim=-1):
        pt = self.riemfl_manifold.parallel_transport
        return _vector(lambda x, y, v: pt(x, y, self.proju(x, v)), dim, x, y, v)

    def transp_follow_expmap(self, x, u, v, *, dim=-1, project=True):
        return self.transp(x, self.expmap(x, u, dim=dim), v, dim=dim)

    def geodesic_unit(self, t, x, u, *, dim=-1, project=True):
        r""":math:`\mathrm{Exp}_x(t\,u/\|u\|)` (geoopt assumes :math:`\|u\| = 1`)."""
        return self.expmap(x, t * u / self.norm(u, keepdim=True, dim=dim), dim=dim)

    # maps at the origin
    def expmap0(self, u, *, project=True, dim=-1):
        return _vector(lambda u: self.expmap(self._o(u), u), dim, u)

    def logmap0(self, y, *, dim=-1):
        return _vector(lambda y: self.riemfl_manifold.log(self._o(y), y), dim, y)

    def logmap0back(self, x, *, dim=-1):
        return _vector(lambda x: self.riemfl_manifold.log(x, self._o(x)), dim, x)

    def dist0(self, x, *, dim=-1, keepdim=False):
        return _scalar(lambda x: self.riemfl_manifold.dist(self._o(x), x), dim, keepdim, x)

    def inner0(self, v=None, *, keepdim=False, dim=-1):
        r""":math:`\langle o, v\rangle_L = -\sqrt k\,v_0` (geoopt's meaning)."""
        return _scalar(lambda v: minkowski_inner(self._o(v), v), dim, keepdim, v)

    def transp0(self, y, u, *, dim=-1):
        return _vector(lambda y, u: self.transp(self._o(y), y, u), dim, y, u)

    def transp0back(self, x, u, *, dim=-1):
        return _vector(lambda x, u: self.transp(x, self._o(x), u), dim, x, u)

    # sampling
    def origin(self, *size, dtype=None, device=None, seed=42):
        shape = size2shape(*size)
        self._assert_check_shape(shape, "x")
        return _tensor(self, self._o(torch.zeros(*shape, dtype=dtype, device=device)))

    def random_normal(self, *size, mean=0, std=1, dtype=None, device=None):
        r""":math:`\mathrm{Exp}_o(0, \bar v)`, :math:`\bar v \sim N(\text{mean}, \text{std}^2)`
        (geoopt first scales its draw to unit length)."""
        shape = size2shape(*size)
        self._assert_check_shape(shape, "x")
        u = _normal(shape, mean, std, dtype, device)
        u[..., 0] = 0.0
        return _tensor(self, self.expmap0(u))


# ------------------------------------------------------------------------------- the ball
class PoincareBallAPI(_Curvature):
    r"""``geoopt.PoincareBall(c)``: riemfl's ``PoincareBall(n, c)``, its gyrovector operations
    (Ganea, Becigneul & Hofmann 2018), maps at the origin, ``dim=``. The buffer ``k`` is
    geoopt's signed curvature :math:`-c`. Every vector of :math:`\mathbb{R}^n` is tangent to
    the (open) ball, so no step needs a projection."""

    def _curvature_k(self) -> float:
        return -self.riemfl_manifold.c

    @property
    def c(self) -> Tensor:
        """Curvature magnitude :math:`-k` (curvature :math:`-c`)."""
        return -self.k

    @property
    def isp_c(self) -> Tensor:
        r"""geoopt's parameter :math:`\log(e^c - 1)` (c is its softplus)."""
        return torch.log(torch.expm1(self.c))

    @property
    def radius(self) -> Tensor:
        r""":math:`1/\sqrt c`."""
        return self.c.rsqrt()

    def _c(self) -> float:
        return self.riemfl_manifold.c

    # maps with geoopt's keywords
    def projx(self, x, *, dim=-1):
        return _vector(self.riemfl_manifold.project, dim, x)

    def proju(self, x, u, *, dim=-1):
        return _vector(self.riemfl_manifold.to_tangent, dim, *torch.broadcast_tensors(x, u))

    def egrad2rgrad(self, x, u, *, dim=-1):
        return _vector(self.riemfl_manifold.egrad_to_rgrad, dim, x, u)

    def inner(self, x, u, v=None, *, keepdim=False, dim=-1):
        x = self._base_point(x, u, "inner")
        return _scalar(self.riemfl_manifold.inner, dim, keepdim, x, u, u if v is None else v)

    def norm(self, x, u, *, keepdim=False, dim=-1):
        x = self._base_point(x, u, "norm")
        return _scalar(self.riemfl_manifold.norm, dim, keepdim, x, u)

    def expmap(self, x, u, *, project=True, dim=-1):
        return _vector(self.riemfl_manifold.exp, dim, x, u)

    def retr(self, x, u, *, dim=-1):
        return _vector(self.riemfl_manifold.retract, dim, x, u)

    def logmap(self, x, y, *, dim=-1):
        return _vector(self.riemfl_manifold.log, dim, x, y)

    def dist(self, x, y, *, keepdim=False, dim=-1):
        return _scalar(self.riemfl_manifold.dist, dim, keepdim, x, y)

    def dist2(self, x, y, *, keepdim=False, dim=-1):
        return self.dist(x, y, keepdim=keepdim, dim=dim) ** 2

    def transp(self, x, y, v, *, dim=-1):
        return _vector(self.riemfl_manifold.parallel_transport, dim, x, y, v)

    def transp_follow_retr(self, x, u, v, *, dim=-1):
        return self.transp(x, self.retr(x, u, dim=dim), v, dim=dim)

    def transp_follow_expmap(self, x, u, v, *, dim=-1, project=True):
        return self.transp(x, self.expmap(x, u, dim=dim), v, dim=dim)

    def expmap_transp(self, x, u, v, *, dim=-1, project=True):
        y = self.expmap(x, u, dim=dim)
        return y, self.transp(x, y, v, dim=dim)

    def retr_transp(self, x, u, v, *, dim=-1):
        y = self.retr(x, u, dim=dim)
        return y, self.transp(x, y, v, dim=dim)

    def lambda_x(self, x, *, dim=-1, keepdim=False):
        r""":math:`\lambda_x = 2/\sigma_x` (riemfl's :func:`conformal_sigma`)."""
        return _scalar(lambda x: 2.0 / conformal_sigma(x, self._c())[..., 0], dim, keepdim, x)

    # gyrovector operations
    def mobius_add(self, x, y, *, dim=-1, project=True):
        return _vector(lambda x, y: mobius_add(x, y, self._c()), dim, x, y)

    def mobius_sub(self, x, y, *, dim=-1, project=True):
        return self.mobius_add(x, -y, dim=dim)

    def gyration(self, x, y, z, *, dim=-1):
        return _vector(lambda x, y, z: gyration(x, y, z, self._c()), dim, x, y, z)

    def mobius_coadd(self, x, y, *, dim=-1, project=True):
        r""":math:`x \boxplus y = x \oplus \operatorname{gyr}[x, \ominus y]y` (Ungar 2008)."""
        return self.mobius_add(x, self.gyration(x, -y, y, dim=dim), dim=dim)

    def mobius_cosub(self, x, y, *, dim=-1, project=True):
        return self.mobius_coadd(x, -y, dim=dim)

    def mobius_scalar_mul(self, r, x, *, dim=-1, project=True):
        if isinstance(r, Tensor) and r.dim() > 0:
            r = r.movedim(dim, -1)[..., 0]  # geoopt's r keeps the point axis (size 1)
        return _vector(lambda x: mobius_scalar_mul(r, x, self._c()), dim, x)

    def _through_origin(self, fn, x, dim):
        """:math:`\\mathrm{Exp}_0(f(\\mathrm{Log}_0 x))` (Ganea, Becigneul & Hofmann 2018)."""
        return self.expmap0(fn(self.logmap0(x, dim=dim)), dim=dim)

    def mobius_matvec(self, m, x, *, dim=-1, project=True):
        r""":math:`M \otimes_c x = \mathrm{Exp}_0(M\,\mathrm{Log}_0 x)`."""
        if dim not in (-1, x.dim() - 1):
            return self._through_origin(lambda u: torch.tensordot(u, m, ([dim], [1])), x, dim)
        return self._through_origin(lambda u: (m @ u.unsqueeze(-1)).squeeze(-1), x, dim)

    def mobius_pointwise_mul(self, w, x, *, dim=-1, project=True):
        return self._through_origin(lambda u: w * u, x, dim)

    def mobius_fn_apply(self, fn, x, *args, dim=-1, project=True, **kwargs):
        return self._through_origin(lambda u: fn(u, *args, **kwargs), x, dim)

    def mobius_fn_apply_chain(self, x, *fns, project=True, dim=-1):
        def chain(u):
            for fn in fns:
                u = fn(u)
            return u

        return self._through_origin(chain, x, dim)

    def geodesic(self, t, x, y, *, dim=-1):
        r""":math:`\mathrm{Exp}_x(t\,\mathrm{Log}_x y) = x \oplus (t \otimes (\ominus x
        \oplus y))`."""
        return self.expmap(x, t * self.logmap(x, y, dim=dim), dim=dim)

    def geodesic_unit(self, t, x, u, *, dim=-1, project=True):
        r""":math:`\mathrm{Exp}_x(t\,u/\|u\|_x)`, the unit-speed geodesic (geoopt's
        :math:`x \oplus \tanh(\sqrt c\,t/2)\,u/(\sqrt c\|u\|)`)."""
        return self.expmap(x, t * u / self.norm(x, u, keepdim=True, dim=dim), dim=dim)

    def antipode(self, x, *, dim=-1):
        """:math:`-x` (negative curvature)."""
        return -x

    def dist2plane(self, x, p, a, *, dim=-1, keepdim=False, signed=False, scaled=False):
        r"""Distance from x to the gyroplane through p with normal a (Ganea, Becigneul &
        Hofmann 2018, Thm. 5): :math:`\tfrac1{\sqrt c}\operatorname{arsinh}\big(2\sqrt c
        |\langle z, a\rangle| / (\sigma_z\|a\|)\big)`, :math:`z = \ominus p \oplus x`, with
        :math:`\sigma_z = 1 - c\|z\|^2` from :func:`conformal_sigma`; ``signed`` keeps the
        sign of :math:`\langle z, a\rangle`, ``scaled`` multiplies by :math:`\|a\|`."""
        c = self._c()

        def distance(x, p, a):
            z = mobius_add(-p, x, c)
            za = (z * a).sum(-1)
            za = za if signed else za.abs()
            a_norm = a.norm(dim=-1)
            out = torch.asinh(2.0 * math.sqrt(c) * za / (conformal_sigma(z, c)[..., 0] * a_norm))
            out = out / math.sqrt(c)
            return out * a_norm if scaled else out

        return _scalar(distance, dim, keepdim, x, p, a)

    # maps at the origin
    def expmap0(self, u, *, dim=-1, project=True):
        return _vector(lambda u: self.riemfl_manifold.exp(torch.zeros_like(u), u), dim, u)

    def logmap0(self, x, *, dim=-1):
        return _vector(lambda x: self.riemfl_manifold.log(torch.zeros_like(x), x), dim, x)

    def dist0(self, x, *, dim=-1, keepdim=False):
        dist = self.riemfl_manifold.dist
        return _scalar(lambda x: dist(torch.zeros_like(x), x), dim, keepdim, x)

    def transp0(self, y, u, *, dim=-1):
        pt = self.riemfl_manifold.parallel_transport
        return _vector(lambda y, u: pt(torch.zeros_like(y), y, u), dim, y, u)

    def transp0back(self, y, u, *, dim=-1):
        pt = self.riemfl_manifold.parallel_transport
        return _vector(lambda y, u: pt(y, torch.zeros_like(y), u), dim, y, u)

    # the hyperboloid, time coordinate last (geoopt's sproj)
    def sproj(self, x, *, dim: int = -1):
        """Hyperboloid (time last) -> ball: riemfl's ``from_lorentz``."""
        return _vector(lambda x: self.riemfl_manifold.from_lorentz(x.roll(1, -1)), dim, x)

    def inv_sproj(self, x, *, dim: int = -1):
        """Ball -> hyperboloid (time last): riemfl's ``to_lorentz``."""
        return _vector(lambda x: self.riemfl_manifold.to_lorentz(x).roll(-1, -1), dim, x)

    def weighted_midpoint(
        self,
        xs,
        weights=None,
        *,
        reducedim=None,
        dim: int = -1,
        keepdim: bool = False,
        lincomb: bool = False,
        posweight=False,
        project=True,
    ):
        r"""The gyromidpoint :math:`\tfrac12 \otimes_c \big(\sum_i w_i\lambda_{x_i}x_i /
        \sum_i w_i(\lambda_{x_i} - 1)\big)` (Ungar 2008; geoopt's reduction conventions:
        ``reducedim`` defaults to every axis but ``dim``; ``lincomb`` scales by the total
        weight; ``posweight`` replaces negatively weighted points by their antipodes)."""
        c = self._c()
        if reducedim is None:
            reducedim = [d for d in range(xs.dim()) if d != dim % xs.dim()]
        lam = 2.0 / conformal_sigma(xs.movedim(dim, -1), c).movedim(-1, dim)
        w = xs.new_tensor(1.0) if weights is None else weights.unsqueeze(dim)
        if posweight and bool((w < 0).any()):
            xs, w = torch.where(w < 0, -xs, xs), w.abs()
        two_mean = (lam * w * xs).sum(reducedim, keepdim=True) / ((lam - 1.0) * w).sum(
            reducedim, keepdim=True
        )
        mean = self.mobius_scalar_mul(0.5, two_mean, dim=dim)
        if lincomb:
            if w.numel() == 1:
                alpha = w * math.prod(xs.size(d) for d in reducedim)
            else:
                alpha = torch.broadcast_tensors(w, lam)[0].sum(reducedim, keepdim=True)
            mean = self.mobius_scalar_mul(alpha, mean, dim=dim)
        if not keepdim:
            for d in sorted((d % xs.dim() for d in reducedim), reverse=True):
                mean = mean.squeeze(d)
        return mean

    # sampling
    def origin(self, *size, dtype=None, device=None, seed=42):
        return _tensor(self, torch.zeros(*size, dtype=dtype, device=device))

    def random_normal(self, *size, mean=0, std=1, dtype=None, device=None):
        r""":math:`\mathrm{Exp}_0(v)`, :math:`v \sim N(\text{mean}, \text{std}^2/n)` (geoopt's
        recipe)."""
        shape = size2shape(*size)
        self._assert_check_shape(shape, "x")
        return _tensor(
            self, self.expmap0(_normal(shape, mean, std / shape[-1] ** 0.5, dtype, device))
        )

    random = random_normal

    def wrapped_normal(self, *size, mean, std=1, dtype=None, device=None):
        r""":math:`\mathrm{Exp}_\mu(v/\lambda_\mu)`, :math:`v \sim N(0, \text{std}^2)` (Mathieu
        et al. 2019; geoopt's recipe)."""
        shape = size2shape(*size)
        self._assert_check_shape(shape, "x")
        dtype = dtype or mean.dtype
        v = _normal(shape, 0.0, std, dtype, device or mean.device)
        return _tensor(self, self.expmap(mean, v / self.lambda_x(mean, keepdim=True)))


# ------------------------------------------------------------------------------- matrices
class SPDAPI(_Identity):
    """``geoopt.SymmetricPositiveDefinite()`` (affine-invariant metric, geoopt's "AIM"):
    geoopt's positional ``keepdim``, ``logmap(x, u)`` and parallel transport as ``transp``."""

    @property
    def default_metric(self) -> Any:
        """geoopt's ``SPDMetric.AIM``: riemfl's affine-invariant metric."""
        from geoopt.manifolds.symmetric_positive_definite import SPDMetric

        return SPDMetric.AIM

    def inner(self, x, u, v=None, keepdim=False):
        x = self._base_point(x, u, "inner")
        return self._keep(self.riemfl_manifold.inner(x, u, u if v is None else v), keepdim)

    def dist(self, x, y, keepdim=False):
        return self._keep(self.riemfl_manifold.dist(x, y), keepdim)

    def logmap(self, x, u):
        return self.riemfl_manifold.log(x, u)

    def transp(self, x, y, v):
        return self.riemfl_manifold.parallel_transport(x, y, self.proju(x, v))

    def extra_repr(self) -> str:
        return "default_metric=SPDMetric.AIM"


class BirkhoffPolytopeAPI(_Naive):
    """``geoopt.BirkhoffPolytope()``: ``expmap`` is the retraction (geoopt's convention),
    Sinkhorn's ``max_iter`` and ``tol`` are riemfl's."""

    @property
    def max_iter(self) -> int:
        return self.riemfl_manifold.max_iter

    @property
    def tol(self) -> float | None:
        """riemfl's Sinkhorn row-sum tolerance (None: :math:`100\\,n\\,\\varepsilon`)."""
        return self.riemfl_manifold.tol

    #: geoopt adds ``eps`` to Sinkhorn's denominators; riemfl's scaling adds nothing
    eps = 0.0

    def expmap(self, x, u):
        return self.retr(x, u)

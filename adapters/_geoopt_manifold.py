r"""The generic ``geoopt.Manifold`` behind :func:`~riemfl.adapters.geoopt.to_geoopt`.

:class:`~riemfl.adapters.geoopt.GeooptManifold` calls the riemfl map of the same meaning for
every geoopt method. It subclasses ``geoopt.Manifold``, so it is built on first use
(:data:`GEOOPT_MANIFOLD`) and belongs to :mod:`riemfl.adapters.geoopt`, whose ``__getattr__``
hands it out (pickle finds it there). :func:`require_geoopt` imports geoopt for every part of
the adapter.
"""

from __future__ import annotations

from types import ModuleType

from riemfl.adapters._lazy import LazyClass, require

from riemfl.errors import NotOnManifoldError, ParameterError, ShapeError
from riemfl.manifolds.base import Manifold

__all__ = ["PUBLIC_MODULE", "require_geoopt", "GEOOPT_MANIFOLD"]

#: the module that the classes built on first use belong to (``__module__``): pickle,
#: ``copy.deepcopy`` and ``torch.save`` find them there, through its ``__getattr__``
PUBLIC_MODULE = __name__.rpartition(".")[0] + ".geoopt"


def require_geoopt(feature: str) -> ModuleType:
    """geoopt, or :class:`~riemfl.errors.MissingDependencyError` naming ``feature``."""
    return require("geoopt", "geoopt", feature)


def _build_geoopt_manifold() -> type:
    geoopt = require_geoopt("riemfl.adapters.geoopt.GeooptManifold")
    import torch
    from geoopt.utils import size2shape

    class GeooptManifold(geoopt.Manifold):
        r"""A riemfl manifold behind geoopt's ``Manifold`` API (made by :func:`to_geoopt`).

        Every geoopt method calls the riemfl map of the same meaning (see the module docstring
        for the name map); batch dimensions, dtype, device and autograd are riemfl's. The only
        state is the riemfl manifold (``riemfl_manifold``), so the object pickles, deep-copies
        and travels with ``torch.save`` whenever the riemfl manifold does.

        ``projx`` is riemfl's metric projection :math:`P_M(a) = \arg\min_{x\in M}\|x - a\|`
        (geoopt's own ``Lorentz.projx`` is a cheaper lift); it raises
        :class:`~riemfl.errors.ProjectionError` where :math:`P_M` is not unique and
        ``NotImplementedError`` for a manifold without a projection. ``random`` seeds riemfl's
        sampler from torch's global generator, as geoopt's own ``random`` uses that generator
        (so ``origin()``, which fixes it, is deterministic).

        ``retr``, ``expmap`` and ``transp`` project their vector onto :math:`T_xM` first
        (``proju``), so that the non-tangent steps of geoopt's optimisers land on M;
        ``retr_transp`` and ``transp_follow_retr`` carry vectors by the retraction's differential
        where the riemfl manifold has ``retraction_transport`` (see the module docstring).
        """

        reversible = False

        def __init__(self, manifold: Manifold) -> None:
            super().__init__()
            self.riemfl_manifold = manifold
            self.ndim = manifold.ndim
            self.name = f"riemfl.{manifold.name}"

        # -------------------------------------------------------------- checks
        def _check_shape(self, shape, name):
            ps = self.riemfl_manifold.point_shape
            shape = tuple(shape)
            if len(shape) < len(ps) or shape[len(shape) - len(ps) :] != ps:
                expected = ", ".join(["..."] + [str(s) for s in ps])
                return False, f"'{name}' has shape {shape}; {self.name} expects ({expected})"
            return True, None

        def _check_point_on_manifold(self, x, *, atol=1e-5, rtol=1e-5):
            # riemfl measures each constraint on a scale of its own (relative for Lorentz):
            # geoopt's atol is riemfl's tolerance, rtol has no counterpart
            return _explain(self.riemfl_manifold.check_point, x, atol=atol)

        def _check_vector_on_tangent(self, x, u, *, atol=1e-5, rtol=1e-5):
            return _explain(self.riemfl_manifold.check_tangent, x, u, atol=atol)

        # -------------------------------------------------------------- geometry
        #: whether the metric does not depend on the point, so that ``inner(None, u, v)`` and
        #: ``norm(None, u)`` are defined (geoopt's Euclidean, Sphere, EuclideanStiefel and
        #: Lorentz ignore x there); set by the stand-ins of those classes
        _metric_ignores_point = False

        def projx(self, x):
            return self.riemfl_manifold.project(x)

        def proju(self, x, u):
            return self.riemfl_manifold.to_tangent(x, u)

        def egrad2rgrad(self, x, u):
            return self.riemfl_manifold.egrad_to_rgrad(x, u)

        def inner(self, x, u, v=None, *, keepdim=False):
            x = self._base_point(x, u, "inner")
            out = self.riemfl_manifold.inner(x, u, u if v is None else v)
            return self._keep(out, keepdim)

        def norm(self, x, u, *, keepdim=False):
            x = self._base_point(x, u, "norm")
            return self._keep(self.riemfl_manifold.norm(x, u), keepdim)

        def retr(self, x, u):
            return self.riemfl_manifold.retract(x, self.proju(x, u))

        def expmap(self, x, u):
            return self.riemfl_manifold.exp(x, self.proju(x, u))

        def logmap(self, x, y):
            return self.riemfl_manifold.log(x, y)

        def dist(self, x, y, *, keepdim=False):
            return self._keep(self.riemfl_manifold.dist(x, y), keepdim)

        def transp(self, x, y, v):
            return self.riemfl_manifold.transport(x, y, self.proju(x, v))

        def retr_transp(self, x, u, v):
            r""":math:`(R_x(u), \mathcal T(v))` with u and v projected onto :math:`T_xM` and
            :math:`\mathcal T` the differential of the retraction where riemfl has it
            (``retraction_transport``), else ``transp``."""
            u = self.proju(x, u)
            y = self.retr(x, u)
            return y, self._follow_retraction(x, u, v, y)

        def transp_follow_retr(self, x, u, v):
            return self._follow_retraction(x, self.proju(x, u), v)

        def _follow_retraction(self, x, u, v, y=None):
            """v carried along the retraction step u (tangent) from x to :math:`R_x(u)`."""
            m = self.riemfl_manifold
            if m.supports("retraction_transport")[0]:
                return m.retraction_transport(x, u, self.proju(x, v))
            return self.transp(x, self.retr(x, u) if y is None else y, v)

        def _base_point(self, x, u, what):
            """x, or where geoopt ignores it and the metric does not read it, u in its place."""
            if x is not None:
                return x
            if not self._metric_ignores_point:
                raise ParameterError(
                    f"{self.name}.{what}: x is None, but the metric of "
                    f"{self.riemfl_manifold.name} depends on the point; expected the point x "
                    "(only stand-ins whose metric does not depend on x accept x=None)"
                )
            return u  # any array of the point's shape: the metric does not read it

        def _keep(self, out, keepdim):
            return out.reshape(tuple(out.shape) + (1,) * self.ndim) if keepdim else out

        # -------------------------------------------------------------- sampling
        def random(self, *size, dtype=None, device=None, **kwargs):
            return self._sample(size, dtype, device)

        def _sample(self, size, dtype, device):
            """riemfl's sampler, seeded from torch's global generator, as a ManifoldTensor."""
            shape = size2shape(*size)
            ok, reason = self._check_shape(shape, "x")
            if not ok:
                raise ShapeError(reason)
            seed = int(torch.randint(0, 2**62, (1,)).item())
            like = torch.empty((), dtype=dtype or torch.get_default_dtype(), device=device)
            batch = shape[: len(shape) - self.ndim]
            x = self.riemfl_manifold.random_point(*batch, rng=seed, like=like)
            return geoopt.ManifoldTensor(x, manifold=self)

        def extra_repr(self) -> str:
            return ""

    return GeooptManifold


def _explain(check, *args, atol: float):
    try:
        check(*args, atol=atol)
    except NotOnManifoldError as exc:
        return False, str(exc)
    return True, None


GEOOPT_MANIFOLD = LazyClass(PUBLIC_MODULE, "GeooptManifold", _build_geoopt_manifold)

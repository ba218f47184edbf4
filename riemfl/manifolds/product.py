r"""Product manifolds :math:`M_1 \times \dots \times M_k` with points packed into flat vectors."""

from __future__ import annotations

import math

import numpy as np

from ..backend import Array, ops_for
from ..errors import NotOnManifoldError, ParameterError, ShapeError
from .base import MAP_ROLES, Manifold, dist_from_squared

__all__ = ["Product"]


class Product(Manifold):
    r"""Product :math:`M_1 \times \dots \times M_k` with the product metric.

    Sizes: no size parameter; points are the factors' points flattened and concatenated (ambient
    size the sum of the factors' sizes), and ``dim`` is the sum of the factors' ``dim``.

    A point is one flat vector of length :math:`\sum_i \prod(\text{point\_shape}_i)` (any leading
    batch dimensions), so products go through every solver and check like any other manifold.
    :meth:`split` unpacks it into component arrays and :meth:`pack` packs components back.
    Every map acts componentwise (the Riemannian Hessian too: the product metric's Levi-Civita
    connection is the factors'); inner products and squared distances add.

    Constants: reach and injectivity radius are the minimum over the factors; the diameter is
    :math:`\sqrt{\sum_i \mathrm{diam}(M_i)^2}`. Where a factor has only a local reach (an open
    set, a fixed-rank manifold), :meth:`local_reach` is the minimum of the factors' local values.
    """

    def curvature_bound(self) -> tuple[float | None, str]:
        bounds = [m.curvature_bound() for m in self.manifolds]
        for delta, reason in bounds:
            if delta is None:
                return None, reason
        return max([0.0] + [d for d, _ in bounds]), "the largest of the factors' bounds and 0"

    def __init__(self, *manifolds: Manifold) -> None:
        if not manifolds or not all(isinstance(m, Manifold) for m in manifolds):
            raise ParameterError("Product(*manifolds) needs one or more Manifold instances")
        self.manifolds = tuple(manifolds)
        self.sizes = tuple(math.prod(m.point_shape) for m in manifolds)
        self.offsets = tuple(int(sum(self.sizes[:i])) for i in range(len(manifolds) + 1))
        self.point_shape = (self.offsets[-1],)
        self.name = "Product(" + ", ".join(m.name for m in manifolds) + ")"
        self._result_checked = _result_checked(self.manifolds)

    @property
    def dim(self) -> int:
        return sum(m.dim for m in self.manifolds)

    @property
    def reach(self) -> float:
        return min(m.reach for m in self.manifolds)

    @property
    def diameter(self) -> float:
        return math.sqrt(sum(m.diameter**2 for m in self.manifolds))

    @property
    def injectivity_radius(self) -> float:
        return min(m.injectivity_radius for m in self.manifolds)

    def local_reach(self, x: Array) -> Array:
        r"""The radius around x on which the metric projection is single-valued: :math:`\min_i
        \rho_i(x_i)` over the factors, :math:`\rho_i` the factor's ``local_reach`` at its
        component :math:`x_i` (its uniform ``reach`` where it has no local one).

        The projection of a product is componentwise, :math:`P(a) = (P_1(a_1), \dots,
        P_k(a_k))`, and :math:`\|a_i - x_i\| \le \|a - x\|`, so every a with :math:`\|a - x\| <
        \min_i \rho_i(x_i)` has a unique nearest point; a move of one component alone shows
        that no larger radius works where the factors' radii are exact.

        Parameters
        ----------
        x : array
            Points (any leading batch dimensions).

        Returns
        -------
        array
            One value per point, in x's type.

        Raises
        ------
        NotImplementedError
            When a factor has neither constant; the reason names the factor (so that a caller
            can refuse before a run).
        """
        self._shape(x, "point x")
        ops = ops_for(x)
        out = ops.zeros(tuple(x.shape[:-1]), x) + math.inf
        for m, part in zip(self.manifolds, self.split(x), strict=True):
            try:
                radius = m.local_reach(part)
            except NotImplementedError as exc:
                raise NotImplementedError(
                    f"{self.name}: factor {m.name} has neither a local_reach nor a reach ({exc}), "
                    "so the product has no local reach"
                ) from exc
            out = -ops.maximum(-out, -radius)
        return out

    def supports(self, method: str) -> tuple[bool, str]:
        for m in self.manifolds:
            ok, why = m.supports(method)
            if not ok:
                return False, f"factor {m.name}: {why}"
        return True, ""

    # ----------------------------------------------------------------- packing helpers
    def split(self, a: Array) -> list[Array]:
        """Component arrays (each shaped ``batch + point_shape_i``) of a packed array."""
        self._shape(a, "packed array")
        batch = tuple(a.shape[:-1])
        ops = ops_for(a)
        return [
            ops.reshape(a[..., lo:hi], batch + m.point_shape)
            for m, lo, hi in zip(self.manifolds, self.offsets[:-1], self.offsets[1:], strict=True)
        ]

    def pack(self, *parts: Array) -> Array:
        """Pack component arrays (same batch shape) into one flat array."""
        if len(parts) != len(self.manifolds):
            raise ParameterError(
                f"{self.name}.pack needs {len(self.manifolds)} components, got {len(parts)}"
            )
        for m, part in zip(self.manifolds, parts, strict=True):
            m._shape(part, "component")
        ops = ops_for(*parts)
        batches = [
            tuple(p.shape[: p.ndim - m.ndim]) for m, p in zip(self.manifolds, parts, strict=True)
        ]
        batch = batches[0]
        if any(b != batch for b in batches):  # components that broadcast (one point, a batch)
            try:
                batch = tuple(np.broadcast_shapes(*batches))
            except ValueError:
                raise ShapeError(
                    f"{self.name}.pack: the components' batch shapes {batches} do not broadcast"
                ) from None
            parts = [
                ops.broadcast_to(p, batch + m.point_shape)
                for m, p in zip(self.manifolds, parts, strict=True)
            ]
        flat = [ops.reshape(p, batch + (size,)) for p, size in zip(parts, self.sizes, strict=True)]
        return ops.concatenate(flat, axis=-1)

    def _map(self, method: str, *arrays):
        pieces = [self.split(a) if a.shape[-1:] == self.point_shape else None for a in arrays]
        outs = [getattr(m, method)(*(p[i] for p in pieces)) for i, m in enumerate(self.manifolds)]
        return self.pack(*outs)

    def _reduce(self, method: str, *arrays):
        pieces = [self.split(a) for a in arrays]
        return [getattr(m, method)(*(p[i] for p in pieces)) for i, m in enumerate(self.manifolds)]

    # ----------------------------------------------------------------- contract
    def _project(self, a):
        return self._map("_project", a)

    def _to_tangent(self, x, a):
        return self._map("_to_tangent", x, a)

    def _egrad_to_rgrad(self, x, g):
        return self._map("_egrad_to_rgrad", x, g)

    def _ehess_to_rhess(self, x, g, h, u):
        return self._map("_ehess_to_rhess", x, g, h, u)

    def _inner(self, x, u, v):
        return sum(self._reduce("_inner", x, u, v))

    def _retract(self, x, u):
        return self._map("_retract", x, u)

    def _inverse_retract(self, x, y):
        return self._map("_inverse_retract", x, y)

    def _exp(self, x, u):
        return self._map("_exp", x, u)

    def _log(self, x, y):
        return self._map("_log", x, y)

    def _squared_dist(self, x, y):
        return sum(self._reduce("_squared_dist", x, y))

    _dist = dist_from_squared

    def _transport(self, x, y, u):
        return self._map("_transport", x, y, u)

    def _parallel_transport(self, x, y, u):
        return self._map("_parallel_transport", x, y, u)

    def _random_point(self, batch_shape, rng):
        parts = [m._random_point(batch_shape, rng) for m in self.manifolds]
        return self.pack(*parts)

    def _worst(self, method: str, *arrays):
        """The component constraint with the largest violation, named after its factor."""
        worst = ("", 0.0)
        for m, *parts in zip(self.manifolds, *(self.split(a) for a in arrays), strict=True):
            what, v = getattr(m, method)(*parts)
            if v >= worst[1]:
                worst = (f"{m.name}: {what}", v)
        return worst

    def _point_violation(self, x):
        return self._worst("_point_violation", x)

    def _check_point(self, x: Array, tol: float) -> None:
        """The factors' largest violation (as every manifold), then each factor's own check of
        its component (strict constraints included, e.g. the open ball's or the open
        simplex's), the message naming the factor."""
        super()._check_point(x, tol)
        for m, part in zip(self.manifolds, self.split(x), strict=True):
            try:
                m._check_point(part, tol)
            except NotOnManifoldError as exc:
                raise NotOnManifoldError(f"{self.name}: factor {exc}") from None

    def _boundary_violation(self, x: Array, name: str = "x") -> tuple[str, str] | None:
        """The first factor's boundary violation (see
        :meth:`~riemfl.manifolds.base.Manifold._boundary_violation`), named after the factor."""
        for m, part in zip(self.manifolds, self.split(x), strict=True):
            found = m._boundary_violation(part, f"{name}'s {m.name} component")
            if found is not None:
                return found
        return None

    def _tangent_violation(self, x, u):
        return self._worst("_tangent_violation", x, u)

    def _point_gap(self, x, y):
        ops = ops_for(x, y)
        gaps = self._reduce("_point_gap", x, y)
        return ops.sqrt(sum(g * g for g in gaps))


def _result_checked(manifolds: tuple[Manifold, ...]) -> dict[str, tuple[int, ...]]:
    """The maps every factor checks through its result (see ``Manifold._result_checked``).

    A product map packs, adds or (``norm``, ``dist``) adds squares of its factors' results, so a
    non-finite factor result stays in the product's; the arguments checked first are those any
    factor checks first. ``norm`` clamps the sum of the factors' inner products at 0, which is
    safe where every factor's own (clamped) norm is listed.

    A map that some factors check through its result and others do not checks every argument
    first and its result too: a factor that checks its result may make it non-finite on
    purpose for a point on its boundary (:func:`~riemfl.manifolds.inputs.nan_unless`), which
    the product then traces to that factor (``Manifold._refuse_boundary``).
    """
    tables = [m._result_checked for m in manifolds]
    common = set(tables[0]).intersection(*tables[1:])
    some = set().union(*tables) - common
    return {
        **{k: tuple(range(len(MAP_ROLES[k]))) for k in sorted(some)},
        **{k: tuple(sorted(set().union(*(t[k] for t in tables)))) for k in sorted(common)},
    }

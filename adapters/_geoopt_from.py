r"""The riemfl manifolds backed by a geoopt manifold, which ``from_geoopt`` returns.

:class:`~riemfl.adapters.geoopt.FromGeoopt` puts any ``geoopt.Manifold`` behind riemfl's
manifold contract; :class:`FromGeooptBirkhoff` translates ``geoopt.BirkhoffPolytope`` to
riemfl's Fisher conventions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
from riemfl.adapters._geoopt_known import KNOWN
from riemfl.adapters._geoopt_manifold import require_geoopt
from riemfl.adapters._lazy import ForeignManifold

from riemfl.backend import Array, is_torch, to_numpy
from riemfl.errors import NotOnManifoldError, ParameterError, ShapeError

__all__ = ["FromGeoopt", "FromGeooptBirkhoff"]


class FromGeoopt(ForeignManifold):
    r"""A geoopt manifold behind riemfl's manifold contract (made by :func:`from_geoopt`).

    numpy input is copied into a torch tensor of the same dtype (CPU), passed to geoopt and
    returned as numpy; torch input goes to geoopt as it is, so dtype, device and autograd are
    geoopt's. Copies are also what keeps riemfl's inputs intact where geoopt writes in place
    (``Lorentz.egrad2rgrad``). geoopt's own buffers and parameters (a Lorentz ``k``, a
    ``Sphere`` subspace projector) stay on the dtype and device the user gave them.

    Maps taken from geoopt: ``to_tangent`` (``proju``), ``egrad_to_rgrad``, ``inner``,
    ``retract`` (``retr``), ``transport`` (``transp``, or the projection onto :math:`T_yM` when
    geoopt has none) always; ``project``, ``exp``, ``log``, ``dist``, ``parallel_transport`` and
    ``inverse_retract`` only where they are exact (see :func:`from_geoopt`), the others are
    declared unsupported with the reason, so :mod:`riemfl.testing` skips them. The norm is
    :math:`\sqrt{\langle u, u\rangle_x}` from geoopt's ``inner`` (geoopt's ``Lorentz.norm``
    clamps at ``1e-4`` and has no ``x`` argument).

    ``check_point`` measures :math:`\|\mathrm{projx}(x) - x\|` (geoopt's ``projx`` fixes
    exactly the points of M); ``random_point`` runs geoopt's ``random`` (which draws from
    torch's global generator) under a generator seeded from ``rng`` and restores the global
    state after.
    """

    library = "geoopt"
    methods = {
        "project": "projx",
        "to_tangent": "proju",
        "egrad_to_rgrad": "egrad2rgrad",
        "inner": "inner",
        "retract": "retr",
        "exp": "expmap",
        "log": "logmap",
        "inverse_retract": "logmap",
        "dist": "dist",
        "transport": "transp",
        "parallel_transport": "transp",
    }

    def __init__(
        self,
        manifold: Any,
        point_shape: Iterable[int],
        dim: int | None,
        exact: Iterable[str] | None,
        constants: dict[str, float | None],
    ) -> None:
        geoopt = require_geoopt("riemfl.adapters.geoopt.from_geoopt")
        if not isinstance(manifold, geoopt.Manifold):
            raise ParameterError(
                f"from_geoopt needs a geoopt.Manifold, got {type(manifold).__name__} "
                "(for a riemfl manifold, use it directly or wrap it with to_geoopt)"
            )
        shape = tuple(int(s) for s in point_shape)
        ndim = manifold.ndim
        ok, reason = manifold._check_shape(shape, "point_shape")
        if not ok or (ndim is not None and len(shape) != ndim) or not shape:
            raise ShapeError(
                f"from_geoopt: point_shape {shape} does not fit {manifold!r} (it needs {ndim} "
                f"trailing dimensions{'; ' + reason if reason else ''})"
            )
        self.point_shape = shape
        self.name = f"from_geoopt({type(manifold).__name__}, {shape})"
        self._wrap(manifold, geoopt.Manifold, KNOWN, exact, constants)
        self._has_random = type(manifold).random is not geoopt.Manifold.random
        self._dim = self._tangent_rank() if dim is None else int(dim)

    @property
    def geoopt_manifold(self) -> Any:
        """The wrapped ``geoopt.Manifold``."""
        return self.wrapped

    def _tangent_rank(self) -> int:
        """Rank of ``proju`` at a sample point: the intrinsic dimension."""
        x = self._random_point((), np.random.default_rng(0))
        size = math.prod(self.point_shape)
        basis = np.eye(size).reshape((size,) + self.point_shape)
        images = np.reshape(self._to_tangent(x, basis), (size, size))
        s = np.linalg.svd(images, compute_uv=False)
        return int(np.sum(s > 1e-8 * max(float(s[0]), 1e-300)))

    # ------------------------------------------------------------------ translation
    def _call(self, fn, *arrays: Array, scalar: bool = False) -> Array:
        """Run a geoopt map on numpy or torch arrays; the result has the input's type.

        The arguments are broadcast to one shape first: riemfl's contract broadcasts every
        map, geoopt's maps do not all (``EuclideanStiefel.expmap`` concatenates x and u).
        """
        import torch

        if any(is_torch(a) for a in arrays):
            ref = next(a for a in arrays if is_torch(a))
            tensors = [
                a
                if is_torch(a)
                else torch.as_tensor(np.asarray(a), dtype=ref.dtype, device=ref.device)
                for a in arrays
            ]
            return fn(*torch.broadcast_tensors(*tensors))
        dtype = np.result_type(*arrays)
        arrays = np.broadcast_arrays(*(np.asarray(a, dtype=dtype) for a in arrays))
        out = fn(*(torch.tensor(a) for a in arrays))
        return out.detach().cpu().numpy()

    def _inner(self, x, u, v):
        # keepdim=True, then drop the point's axes: geoopt's Stereographic.inner with
        # keepdim=False multiplies (B, 1) by (B,) and returns a B x B matrix for B points
        inner, ndim = self.wrapped.inner, len(self.point_shape)

        def kept(x, u, v):
            out = inner(x, u, v, keepdim=True)
            return out.reshape(out.shape[: out.dim() - ndim])

        return self._call(kept, x, u, v, scalar=True)

    def _egrad_to_rgrad(self, x, g):
        # geoopt's Lorentz.egrad2rgrad writes into its argument: hand it a copy
        egrad2rgrad = self.wrapped.egrad2rgrad
        return self._call(lambda x, g: egrad2rgrad(x, g.clone()), x, g)

    def _random_point(self, batch_shape, rng):
        import torch

        m = self.wrapped
        # geoopt's Lorentz registers its sampler as random_normal only
        sample = m.random if self._has_random else getattr(m, "random_normal", m.random)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(rng.integers(2**62)))
            try:
                x = sample(*(tuple(batch_shape) + self.point_shape), dtype=torch.float64)
            except ValueError as exc:  # the dtype is fixed by a parameter (Lorentz k)
                raise ParameterError(
                    f"{self.name}: geoopt samples in the dtype of the manifold's own parameters "
                    f"({exc}); riemfl samples float64 points: build the geoopt manifold in "
                    "float64 (e.g. geoopt.Lorentz(k=torch.tensor(1.0, dtype=torch.float64)) or "
                    "call .double() on it)"
                ) from exc
        return np.asarray(to_numpy(x), dtype=np.float64)

    def _point_violation(self, x):
        d = to_numpy(self._call(self.wrapped.projx, x) - x)
        violation = float(np.sqrt(np.max(np.sum(d * d, axis=self._axes))))
        return "x = projx(x) (geoopt's projx fixes the points of M)", violation


class FromGeooptBirkhoff(FromGeoopt):
    r"""``geoopt.BirkhoffPolytope`` in riemfl's conventions (the Fisher metric of Douik &
    Hassibi 2019, which geoopt's ``egrad2rgrad`` and riemfl use).

    geoopt's ``proju(x, u)`` is :math:`\Pi_X(u \odot X)` (its ``egrad2rgrad``), not a
    projection: ``to_tangent(x, a)`` is ``proju(x, a / x)`` = :math:`\Pi_X(a)`. geoopt's
    ``inner`` is the Fisher metric divided by n: ``inner`` multiplies it by n, so that
    ``egrad_to_rgrad`` is the gradient of that metric. geoopt's ``transp`` is
    :math:`\Pi_Y(v \odot Y)`, which does not fix tangent vectors at Y = X: ``transport`` is the
    projection :math:`\Pi_Y(v)`.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._available.discard("transport")

    def _solved(self, fn, *arrays):
        """``_call`` of a geoopt map that solves geoopt's (singular at x <= 0) linear system."""
        try:
            return self._call(fn, *arrays)
        except RuntimeError as exc:  # torch.linalg.solve inside geoopt's TorchScript
            raise NotOnManifoldError(
                f"{self.name}: geoopt's tangent projection failed at x ({exc}); expected a point "
                "with positive entries (doubly stochastic)"
            ) from exc

    def _to_tangent(self, x, a):
        proju = self.wrapped.proju
        return self._solved(lambda x, a: proju(x, a / x), x, a)

    def _egrad_to_rgrad(self, x, g):
        return self._solved(self.wrapped.egrad2rgrad, x, g)

    def _inner(self, x, u, v):
        return self.point_shape[-1] * super()._inner(x, u, v)

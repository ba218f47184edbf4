r"""The riemfl manifold backed by a pymanopt manifold, which ``from_pymanopt`` returns.

:class:`~riemfl.adapters.pymanopt.FromPymanopt` puts a pymanopt manifold (one array a point)
behind riemfl's manifold contract: it loops over riemfl's batch dimensions, translates
pymanopt's Lie-algebra tangent vectors and declares the maps pymanopt does not compute exactly
unsupported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from riemfl.adapters._lazy import ForeignManifold
from riemfl.adapters._pymanopt_known import known_for
from riemfl.adapters._pymanopt_manifold import require_pymanopt

from riemfl.backend import Array, is_torch, to_numpy
from riemfl.errors import ParameterError
from riemfl.manifolds.base import MAP_ROLES

__all__ = ["FromPymanopt"]

_NO_PROJECTION = "pymanopt manifolds have no metric projection onto M"
#: pymanopt's classes whose tangent vectors are Lie-algebra elements Omega (U = X Omega)
_LIE_GROUPS = ("SpecialOrthogonalGroup", "UnitaryGroup")
#: riemfl map -> (positions of tangent-vector arguments, position of the point whose tangent
#: space holds the result, or None for a point or a number), for the Lie-algebra translation
_LIE_ARGUMENTS: dict[str, tuple[tuple[int, ...], int | None]] = {
    "to_tangent": ((), 0),
    "egrad_to_rgrad": ((), 0),
    "inner": ((1, 2), None),
    "retract": ((1,), None),
    "exp": ((1,), None),
    "log": ((), 0),
    "inverse_retract": ((), 0),
    "dist": ((), None),
    "transport": ((2,), 1),
    "parallel_transport": ((2,), 1),
}


class FromPymanopt(ForeignManifold):
    r"""A pymanopt manifold behind riemfl's manifold contract (made by :func:`from_pymanopt`).

    pymanopt computes one float64 numpy point at a time: leading batch dimensions are looped
    over (broadcast first), and the result takes the input's type and dtype (a torch input gives
    a torch output on the input's device). Gradients do not flow through pymanopt's numpy code:
    a torch input that requires a gradient raises :class:`~riemfl.errors.ParameterError` rather
    than silently returning a constant.

    Maps taken from pymanopt: ``to_tangent`` (``projection``), ``egrad_to_rgrad``, ``inner``
    (``inner_product``), ``retract`` (``retraction``) and ``transport`` always; ``exp``,
    ``log``, ``dist``, ``parallel_transport`` (``transport``) and ``inverse_retract``
    (``log``, where the retraction is ``exp``) only where they are exact (see
    :func:`from_pymanopt`); ``project`` never (pymanopt has no metric projection).

    pymanopt's ``SpecialOrthogonalGroup`` represents a tangent vector by its Lie-algebra element
    :math:`\Omega = X^\top U`; the wrapper translates, so riemfl sees ambient :math:`U =
    X\Omega` as for its own :class:`~riemfl.manifolds.SpecialOrthogonal`.

    ``check_point`` measures :math:`\|R_x(0) - x\|` with pymanopt's retraction (which maps its
    input onto M: a QR or polar factor, a normalisation); ``random_point`` seeds numpy's global
    state from ``rng`` around pymanopt's sampler and restores it after.
    """

    #: pymanopt computes in numpy: a torch argument is copied to the host and the result back
    deferred_reads = dict.fromkeys(
        MAP_ROLES, "pymanopt computes in numpy: a torch argument is copied to the host"
    )

    library = "pymanopt"
    methods = {
        "to_tangent": "projection",
        "egrad_to_rgrad": "euclidean_to_riemannian_gradient",
        "inner": "inner_product",
        "retract": "retraction",
        "exp": "exp",
        "log": "log",
        "inverse_retract": "log",
        "dist": "dist",
        "transport": "transport",
        "parallel_transport": "transport",
    }

    def __init__(
        self,
        manifold: Any,
        point_shape: Iterable[int] | None,
        exact: Iterable[str] | None,
        constants: dict[str, float | None],
    ) -> None:
        require_pymanopt("riemfl.adapters.pymanopt.from_pymanopt")
        from pymanopt.manifolds.manifold import Manifold as PymanoptBase

        if not isinstance(manifold, PymanoptBase):
            raise ParameterError(
                f"from_pymanopt needs a pymanopt manifold, got {type(manifold).__name__} "
                "(for a riemfl manifold, use it directly or wrap it with to_pymanopt)"
            )
        if manifold.point_layout != 1:
            raise ParameterError(
                f"from_pymanopt: {manifold} represents a point by {manifold.point_layout} "
                "arrays; riemfl points are single arrays (point_layout 1)"
            )
        self.wrapped = manifold
        if point_shape is None:
            point_shape = np.shape(self._sample(np.random.default_rng(0)))
        self.point_shape = tuple(int(s) for s in point_shape)
        self.name = f"from_pymanopt({type(manifold).__name__}, {self.point_shape})"
        self._dim = int(manifold.dim)
        self._wrap(manifold, PymanoptBase, known_for(manifold), exact, constants)
        # pymanopt's SO(n) (and O(n), U(n)) tangent vectors are Lie-algebra elements Omega,
        # U = X Omega; riemfl's are ambient U: the wrapper translates
        self._lie = any(c.__name__ in _LIE_GROUPS for c in type(manifold).__mro__)
        self.unsupported["project"] = f"{self.name}: project: {_NO_PROJECTION}"

    @property
    def pymanopt_manifold(self) -> Any:
        """The wrapped pymanopt manifold."""
        return self.wrapped

    # ------------------------------------------------------------------ translation
    def _sample(self, rng: np.random.Generator) -> np.ndarray:
        # pymanopt draws from numpy's global state: seed it from rng, restore it after
        state = np.random.get_state()  # noqa: NPY002
        np.random.seed(int(rng.integers(2**32)))  # noqa: NPY002
        try:
            return np.asarray(self.wrapped.random_point(), dtype=np.float64)
        finally:
            np.random.set_state(state)  # noqa: NPY002

    def _call(self, fn: Callable[..., Any], *arrays: Array, scalar: bool = False) -> Array:
        """Apply a single-point pymanopt map over the broadcast batch of ``arrays``."""
        ref = next((a for a in arrays if is_torch(a)), None)
        if ref is not None and any(is_torch(a) and a.requires_grad for a in arrays):
            import torch

            if torch.is_grad_enabled():
                raise ParameterError(
                    f"{self.name}: pymanopt computes in numpy, so gradients cannot flow through "
                    "its maps; detach the input (or use a riemfl manifold for autograd)"
                )
        nps = [to_numpy(a) for a in arrays]
        dtype = np.result_type(*nps)
        k = len(self.point_shape)
        batch = np.broadcast_shapes(*(a.shape[: a.ndim - k] for a in nps))
        full = [np.broadcast_to(a, batch + a.shape[a.ndim - k :]) for a in nps]
        out = np.empty(batch + (() if scalar else self.point_shape))
        for idx in np.ndindex(*batch):
            out[idx] = fn(*(np.asarray(a[idx], dtype=np.float64) for a in full))
        out = out.astype(dtype, copy=False)
        if ref is None:
            return out
        import torch

        return torch.as_tensor(out, dtype=ref.dtype, device=ref.device)

    def _apply(self, what: str, *arrays: Array, scalar: bool = False) -> Array:
        if not self._lie or what not in self._available:
            return super()._apply(what, *arrays, scalar=scalar)
        fn = getattr(self.wrapped, self.methods[what])
        tangents, at = _LIE_ARGUMENTS[what]

        def translated(*args):
            # U = X Omega <-> Omega = X^T U, with X the first point (the tangent's base)
            args = [a if i not in tangents else args[0].T @ a for i, a in enumerate(args)]
            out = fn(*args)
            return out if at is None else args[at] @ out

        return self._call(translated, *arrays, scalar=scalar)

    def _random_point(self, batch_shape, rng):
        out = np.empty(tuple(batch_shape) + self.point_shape)
        for idx in np.ndindex(*batch_shape):
            out[idx] = self._sample(rng)
        return out

    def _point_violation(self, x):
        m = self.wrapped

        def gap(p):
            d = m.retraction(p, m.zero_vector(p)) - p
            return float(np.sqrt(np.sum(d * d)))

        violation = self._call(gap, x, scalar=True)
        return "x = R_x(0) (pymanopt's retraction maps onto M)", float(np.max(to_numpy(violation)))

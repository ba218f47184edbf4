r"""The manifold contract: :class:`Manifold`.

A manifold M is embedded in an ambient Euclidean space :math:`\mathbb{R}^{\text{point\_shape}}`.
Points, tangent vectors and ambient arrays all have trailing shape ``point_shape``; any leading
dimensions are batch dimensions and broadcast. numpy arrays and torch tensors go through the same
code and come back as the type (dtype, device) that came in.

Argument order is point first: ``x``, ``y`` are points, ``u``, ``v`` tangent vectors, ``a`` an
ambient array.

Subclasses implement the private maps (``_project``, ``_to_tangent``, ``_retract``, ...). The
public methods of this class check the trailing shapes of their arguments (a cheap tuple compare,
raising :class:`~riemfl.errors.ShapeError`) and then call the private map. A map a manifold does
not have raises :class:`NotImplementedError` with the reason, which the conformance kit
(:mod:`riemfl.testing`) turns into a skip.

Constants
---------
``reach``
    The reach :math:`\hat\gamma` of M: the largest r such that every ambient point a with
    :math:`d(a, M) < r` has a unique nearest point :math:`P_M(a)` on M, i.e. the radius of the
    open tube :math:`U_M(\hat\gamma) = \{a : d(a, M) < \hat\gamma\}` on which the metric
    projection is single-valued. Zhang et al. (NeurIPS 2024, Assumption 2.3) call M
    :math:`\gamma`-proximally smooth and write this radius as :math:`2\gamma`; riemfl stores
    :math:`\hat\gamma` itself, so their :math:`\gamma` is ``reach / 2``.
``local_reach(x)``
    Per point: a radius around x within which every ambient point has a unique nearest point
    on M. It defaults to ``reach`` broadcast to the batch shape of x; families whose uniform
    reach is 0 (open sets, fixed-rank matrices, the simplex, the Poincare ball) give the
    positive local value.
``diameter``
    The diameter of M as a subset of the ambient Euclidean space, :math:`\sup_{x,y\in M}
    \|x - y\|` (the constant of the projection-based FL theory; Stiefel :math:`2\sqrt p`).
``injectivity_radius``
    The largest r such that ``exp`` is a diffeomorphism on every tangent ball of radius r.
"""

from __future__ import annotations

import math
import sys
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from ..backend import NUMPY, Array, RandomState, as_generator, ops_for, to_like, to_numpy
from ..check_levels import (
    ArgumentsFirst,
    compiling,
    discard_pending,
    largest_entries,
    level_of,
    pending_position,
    record,
)
from ..errors import (
    ConvergenceError,
    NonFiniteError,
    NotOnManifoldError,
    ShapeError,
)
from .inputs import all_finite, check_finite, coerce, common_shape

__all__ = ["Manifold", "as_generator", "RandomState"]  # the last two re-exported from backend


class Manifold(ABC):
    """Abstract Riemannian manifold embedded in a Euclidean ambient space.

    Subclasses set ``name`` and ``point_shape`` and implement at least ``_to_tangent``,
    ``_retract``, ``_random_point`` and ``_check_point_constraint``; everything else is optional
    and raises :class:`NotImplementedError` with a reason when absent.
    """

    name: str = "Manifold"
    point_shape: tuple[int, ...] = ()
    #: methods deliberately not provided, mapped to the reason (used in errors and test skips)
    unsupported: dict[str, str] = {}
    #: whether complex arrays are accepted (the input policy refuses them otherwise)
    supports_complex: bool = False
    #: maps that read tensor values back to the host even at the check levels ``"deferred"``
    #: and ``"off"`` (:mod:`riemfl.check_levels`), mapped to the reason: their arithmetic
    #: itself depends on a value (roots of a polynomial found on the host, say). Every other
    #: map reads nothing there; the conformance kit checks both.
    deferred_reads: dict[str, str] = {}

    # ------------------------------------------------------------------ constants
    @property
    @abstractmethod
    def dim(self) -> int:
        """Intrinsic dimension of the manifold."""

    @property
    def reach(self) -> float:
        r"""The reach :math:`\hat\gamma` of M (Federer's reach).

        The largest r such that every ambient point within distance r of M has a unique
        nearest point on M: the metric projection :math:`P_M` is single-valued on the open tube
        :math:`\{a : d(a, M) < \hat\gamma\}`. This is :math:`2\gamma` for a
        :math:`\gamma`-proximally smooth M in the sense of Zhang et al. (NeurIPS 2024); the
        papers call it the proximal smoothness constant. ``inf`` for a closed convex set or a
        linear space. A family overrides it with a property or a class attribute.

        Raises
        ------
        NotImplementedError
            When M has no positive uniform reach, with the reason (see ``unsupported``, key
            ``"reach"``).
        """
        return self._not_implemented("reach")

    def local_reach(self, x: Array) -> Array:
        r"""A radius around each point x within which :math:`P_M` is single-valued.

        Every ambient point a with :math:`\|a - x\| < \rho(x)` has a unique nearest point on
        M. The default is the uniform :attr:`reach`, broadcast to the batch shape of x (the
        leading dimensions before ``point_shape``); a family whose uniform reach is 0 (an open
        set, fixed-rank matrices) overrides it with a positive value that depends on x.

        Parameters
        ----------
        x : array
            Points (any leading batch dimensions).

        Returns
        -------
        array
            One value per point, in x's type (shape: the batch shape of x).

        Raises
        ------
        ShapeError
            x does not end in ``point_shape``.
        NotImplementedError
            When M has neither a local radius nor a uniform reach, with the reason.
        """
        self._shape(x, "point x")
        radius = self.reach
        batch = tuple(x.shape[: x.ndim - len(self.point_shape)])
        return ops_for(x).zeros(batch, x) + radius

    @property
    def diameter(self) -> float:
        r"""Ambient Euclidean diameter :math:`\sup_{x, y \in M}\|x - y\|`."""
        return self._not_implemented("diameter")

    @property
    def injectivity_radius(self) -> float:
        """Injectivity radius of the exponential map (``inf`` if exp is a global diffeomorphism)."""
        return self._not_implemented("injectivity_radius")

    def curvature_bound(self) -> tuple[float | None, str]:
        r"""An upper bound :math:`\Delta` of the sectional curvature of M, with its source.

        What :mod:`riemfl.stats` needs to certify that a Karcher mean is unique (points within
        :math:`\tfrac12\min\{\operatorname{inj} M, \pi/\sqrt\Delta\}` of one another's
        centre; Karcher 1977, Afsari 2011). The default, ``(None, why)``, declares no bound; a
        family overrides it, and a subclass that changes the metric must override it again.
        """
        return None, f"{self.name} declares no upper bound of its sectional curvature"

    @property
    def ndim(self) -> int:
        """Number of trailing array dimensions that form one point."""
        return len(self.point_shape)

    @property
    def _axes(self) -> tuple[int, ...]:
        return _AXES[len(self.point_shape)]

    def __repr__(self) -> str:
        return self.name

    # ------------------------------------------------------------------ validation helpers
    def _not_implemented(self, what: str):
        reason = self.unsupported.get(what)
        if reason is None:
            reason = f"{self.name} does not implement {what}"
        raise NotImplementedError(reason)

    def supports(self, method: str) -> tuple[bool, str]:
        """Whether ``method`` (e.g. ``"log"``) is available, and if not, why."""
        reason = self.unsupported.get(method)
        if reason is not None:
            return False, reason
        if method == "dist" and type(self)._dist is Manifold._dist:
            return self.supports("log")
        if method == "squared_dist" and type(self)._squared_dist is Manifold._squared_dist:
            return self.supports("dist")
        impl = getattr(type(self), "_" + method, None)
        base = getattr(Manifold, "_" + method, None)
        if impl is None or (base is not None and impl is base and method not in _DEFAULTED):
            return False, f"{self.name} does not implement {method}"
        return True, ""

    def _shape(self, a: Array, role: str) -> None:
        ps = self.point_shape
        if a.shape[-len(ps) :] != ps or a.ndim < len(ps):
            self._raise_shape(a, role)

    def _raise_shape(self, a: Array, role: str) -> None:
        expected = ", ".join(["..."] + [str(s) for s in self.point_shape])
        raise ShapeError(
            f"{self.name}: {role} has shape {tuple(a.shape)}; expected ({expected}) "
            f"(trailing point shape {self.point_shape}, any leading batch dimensions)"
        )

    def default_atol(self, a: Array) -> float:
        """Absolute tolerance of :meth:`check_point` / :meth:`check_tangent` for ``a``'s dtype."""
        return 1e3 * ops_for(a).eps(a) * max(1.0, math.sqrt(self.dim))

    # ------------------------------------------------------------------ the boundary
    #: The maps whose result shows a non-finite argument: each NaN or infinite entry of an
    #: argument makes some entry of the result non-finite, or makes the map raise (only sums,
    #: products, matrix products, square roots and divisions by finite values lie between them;
    #: a factorisation on the way is guarded by :func:`riemfl.linalg.require_finite`). For
    #: these maps the input policy checks the result, not the arguments, and diagnoses the
    #: arguments only when the result is non-finite or the map raised. Each entry names the
    #: arguments (by position) that are still checked first: those the map does not read, or
    #: reads only through a clamp, ``where``, comparison, saturating function or a division by
    #: them. Maps not listed check every argument first. A subclass does not inherit the table
    #: (its maps may differ): it declares its own or checks every argument.
    _result_checked: dict[str, tuple[int, ...]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Give each subclass its own ``_result_checked`` table."""
        super().__init_subclass__(**kwargs)
        if "_result_checked" not in cls.__dict__:
            cls._result_checked = {}

    def _checked_inputs(
        self, method: str, arrays: tuple, roles: tuple[str, ...], verdict: bool = False
    ) -> tuple:
        """The input policy (:mod:`riemfl.manifolds.inputs`): types, dtypes, backend, shapes and
        finite values of a public map's arguments.

        ``verdict``: the method's job is a verdict on its arguments (``check_point``), read at
        once at every check level; otherwise the finite values are checked at the level of
        the call (:func:`~riemfl.check_levels.level_of`).
        """
        shape = common_shape(arrays)
        ps = self.point_shape
        if shape is None or shape[len(shape) - len(ps) :] != ps:
            arrays = coerce(f"{self.name}.{method}", arrays, roles, self.supports_complex)
            for a, role in zip(arrays, roles, strict=True):
                self._shape(a, role)
        level = "eager" if verdict else level_of(arrays[0])
        if level == "eager":
            self._refuse_nonfinite(method, arrays, roles)
        elif level == "deferred" and 0 not in arrays[0].shape:
            record(
                largest_entries(arrays),
                self._refuse_nonfinite,
                (method, arrays, roles),
                NonFiniteError,
                f"{self.name}.{method}: an argument held NaN or infinite entries",
                (diagnose_compiled_call, (f"{self.name}.{method}", roles, None)),
            )
        return arrays

    def _run_map(self, method: str, reduces: bool, *arrays):
        """Run the private map ``_<method>`` under the input policy.

        Batch shapes must broadcast (else :class:`~riemfl.errors.ShapeError`); a result is
        broadcast to the batch of all arguments, and an empty batch gives an empty result without
        calling the map. ``reduces``: the map reduces the point axes (inner, norm, dist).
        Non-finite arguments are found before the map, or through its result for the maps of
        ``_result_checked``; either way they raise :class:`~riemfl.errors.NonFiniteError`.
        A non-finite result of such a map, or an exception of any map, from finite arguments
        is then traced to a point argument on the boundary of M (:meth:`_refuse_boundary`).
        The arguments' roles are the map's :data:`MAP_ROLES`.

        All of this at the check level ``"eager"``; at ``"deferred"`` the checks wait for the
        boundary and at ``"off"`` there are none (:mod:`riemfl.check_levels`;
        :meth:`_unchecked_map`). Shapes, dtypes and devices are checked at every level (they
        read no value).
        """
        roles = MAP_ROLES[method]
        ps = self.point_shape
        shape = common_shape(arrays)
        same = True
        if shape == ps:  # the fast path, one point
            batch = ()
        elif shape is not None and shape[len(shape) - len(ps) :] == ps:  # the fast path, a batch
            batch = shape[: len(shape) - len(ps)]
        else:
            arrays = coerce(f"{self.name}.{method}", arrays, roles, self.supports_complex)
            for a, role in zip(arrays, roles, strict=True):
                self._shape(a, role)
            shape = arrays[0].shape
            same = all(a.shape == shape for a in arrays[1:])
            batch = shape[: len(shape) - len(ps)] if same else self._broadcast_batch(arrays, roles)
        level = level_of(arrays[0])
        if batch and 0 in batch:
            if level == "eager":
                self._refuse_nonfinite(method, arrays, roles)
            if not self.supports(method)[0]:
                self._not_implemented(method)
            full = tuple(batch) if reduces else tuple(batch) + ps
            return ops_for(*arrays).zeros(full, arrays[0])
        if level != "eager":
            out = self._unchecked_map(method, level, arrays, roles)
        else:
            out = self._eager_map(method, arrays, roles)
        if not same:
            full = tuple(batch) if reduces else tuple(batch) + ps
            if tuple(out.shape) != full:  # a map that ignored a batch argument
                out = out + ops_for(out).zeros(full, out)
        return out

    def _eager_map(self, method: str, arrays: tuple, roles: tuple[str, ...]):
        """The map at the level ``"eager"``: non-finite arguments are refused before the map
        or, for the maps of ``_result_checked``, through its result."""
        first = self._result_checked.get(method)
        if first is None:
            self._refuse_nonfinite(method, arrays, roles)
        else:
            for i in first:
                if not all_finite(arrays[i]):
                    check_finite(f"{self.name}.{method}", arrays[i], roles[i])
        try:
            out = getattr(self, _PRIVATE[method])(*arrays)
        except Exception as exc:
            self._map_failed(method, arrays, roles, exc)
            raise
        if first is not None and not all_finite(out):
            self._refuse_nonfinite(method, arrays, roles)
            self._refuse_boundary(method, arrays, roles)  # else the map made it: returned as is
        return out

    def _unchecked_map(self, method: str, level: str, arrays: tuple, roles: tuple[str, ...]):
        """The map at the levels ``"deferred"`` and ``"off"``: no read before or after it.

        Deferred, the largest entry of the result and of each argument the result does not
        show (all of them, or, for the maps of ``_result_checked``, those it checks first) is
        recorded (:func:`~riemfl.check_levels.largest_entries`: one reduction where only the
        result is needed); at the boundary a non-finite one is diagnosed by
        :meth:`_diagnose_call`. An exception of the map is translated at once, as in eager mode
        (it has already stopped the call).
        """
        start = pending_position() if level == "deferred" else None  # this call's checks
        try:
            out = getattr(self, _PRIVATE[method])(*arrays)
        except Exception as exc:
            if start is not None and not compiling():  # the checks made inside the map: the
                discard_pending(start)  # exception replaces them
            self._map_failed(method, arrays, roles, exc)
            raise
        if level == "deferred":
            first = self._result_checked.get(method)
            traced = compiling()
            # a compiled graph keeps no arguments: its verdict names each (fused reductions)
            shown = _ALL[len(arrays)] if first is None or traced else first
            verdict = largest_entries((*(arrays[i] for i in shown), out))
            name = f"{self.name}.{method}"
            # a graph keeps copies of the points where eager mode may look for one on the
            # boundary of M (a failed check inside the map; a non-finite result it checks)
            points = None
            if traced and self._has_boundary:
                points = self._boundary_points(method, arrays, roles)
            record(
                verdict,
                self._diagnose_call,
                (method, arrays, roles, verdict, shown),
                NonFiniteError,
                f"{name}: an argument or the result held NaN or infinite entries",
                (diagnose_compiled_call, (name, roles, None if first is None else points)),
                ArgumentsFirst(  # eager mode refuses such arguments before the map runs
                    start,
                    (self._refuse_arguments, (method, arrays, roles)),
                    (diagnose_compiled_arguments, (name, roles, points)),
                ),
            )
        return out

    def _diagnose_call(
        self,
        method: str,
        arrays: tuple,
        roles: tuple[str, ...],
        verdict: Array,
        shown: tuple[int, ...],
    ) -> None:
        """The boundary's diagnosis of a deferred map call whose verdict holds a non-finite
        value: the error eager mode raises at the call.

        ``verdict`` holds the largest entry, at the call, of the arguments at the positions
        ``shown`` and, last, of the result. The arguments as they are now are diagnosed as
        eager mode does (a non-finite argument; else a point on the boundary of M). An argument
        whose entries were non-finite at the call but are finite now (it was changed in place
        since) is still named; a non-finite result of finite arguments that the map checks
        through its result, whose arguments are finite now, raises naming the result (eager
        mode returns it where the arguments were finite at the call: after an in-place change
        the two cases cannot be told apart). Returns (no violation) for a non-finite result
        of a map that does not check its result, as eager mode returns it.
        """
        self._refuse_nonfinite(method, arrays, roles)
        largest = to_numpy(verdict, np.float64).reshape(-1)
        for value, i in zip(largest, shown, strict=False):
            if not math.isfinite(value):
                raise NonFiniteError(
                    f"{self.name}.{method}: {roles[i]} contained NaN or infinite entries when "
                    f"the map was called (a deferred check: its largest entry was {value}); it "
                    f"has been changed in place since; expected finite values"
                )
        self._refuse_boundary(method, arrays, roles)
        if len(shown) < len(arrays) and not math.isfinite(largest[-1]):
            unseen = ", ".join(roles[i] for i in range(len(arrays)) if i not in shown)
            raise NonFiniteError(
                f"{self.name}.{method}: the result held NaN or infinite entries (a deferred "
                f"check: its largest entry was {largest[-1]}), which shows a non-finite "
                f"{unseen} at the call or an overflow in the map; the arguments are finite now "
                f"(changed in place since?); expected finite values"
            )

    def _refuse_arguments(
        self, method: str, arrays: tuple, roles: tuple[str, ...], boundary: bool = True
    ) -> None:
        """What eager mode refuses before a map's exception propagates (:meth:`_map_failed`): a
        non-finite argument, then (with ``boundary``) a point argument on the boundary of M.
        At the level ``"deferred"``, the map call's check of its arguments, which runs where
        the call's verdict or a check made inside the map failed."""
        self._refuse_nonfinite(method, arrays, roles)
        if boundary:
            self._refuse_boundary(method, arrays, roles)

    def _refuse_nonfinite(self, method: str, arrays: tuple, roles: tuple[str, ...]) -> None:
        """Raise :class:`~riemfl.errors.NonFiniteError` naming the first non-finite argument."""
        for a, role in zip(arrays, roles, strict=True):
            if not all_finite(a):
                check_finite(f"{self.name}.{method}", a, role)

    def _map_failed(
        self, method: str, arrays: tuple, roles: tuple[str, ...], exc: Exception
    ) -> None:
        """Translate an exception of a private map; return to let it propagate unchanged.

        A map meets non-finite arguments (a map of ``_result_checked`` at every level, any map
        at the levels ``"deferred"`` and ``"off"``): whatever it raised on them
        (a guard's :class:`~riemfl.errors.NonFiniteError`, a cut-locus test that compared a NaN,
        a linear-algebra error) becomes the policy's ``NonFiniteError`` naming the argument.
        Linear-algebra exceptions on finite arguments become
        :class:`~riemfl.errors.ConvergenceError` (every factorisation is guarded; this is the
        last net).
        """
        # (every map: at the levels "deferred" and "off" its arguments were not checked before)
        try:
            self._refuse_arguments(method, arrays, roles, not isinstance(exc, NotImplementedError))
        except (NonFiniteError, NotOnManifoldError) as err:
            raise err from exc
        if isinstance(exc, linalg_errors()):
            raise ConvergenceError(
                f"{self.name}.{method}: a matrix factorisation failed on finite arguments ({exc}); "
                f"expected arguments of moderate size and condition"
            ) from exc

    def _boundary_violation(self, x: Array, name: str = "x") -> tuple[str, str] | None:
        """Where the finite point ``x`` (a batch) lies on or beyond the boundary of M, or None.

        A manifold that is an open set whose metric or maps blow up at its boundary (the
        Poincare ball, the open simplex, the positive orthant, the positive-definite cone,
        matrices of a fixed rank, ...) returns ``(violation, expected)``: what its first such
        batch element violates, with the measured value ("|x| = 1 is not < 1: the point is on
        the ball's boundary"), and what a point must satisfy, both writing the point as
        ``name`` (the argument's name in the map, "x" or "y"). Points of M and points off M in
        other ways give None. Run only on the failure path of a map (see
        :meth:`_refuse_boundary`), so it may cost a factorisation; the default (a manifold
        without such a boundary) is None.
        """
        return None

    def _refuse_boundary(self, method: str, arrays: tuple, roles: tuple[str, ...]) -> None:
        """Raise :class:`~riemfl.errors.NotOnManifoldError` naming the map and the first point
        argument on or beyond the boundary of M (:meth:`_boundary_violation`).

        Called where a map's result is non-finite, or the map raised, for finite arguments: a
        point on the boundary is what makes the metric (a conformal factor, ``1/x``, an
        inverse) infinite, so the map's own guards (the result check of
        ``_result_checked``, a factorisation's) find it at no cost to the common path. The
        maps whose formulas stay finite there read the point through
        :func:`~riemfl.manifolds.inputs.nan_unless`.
        """
        for a, role in zip(arrays, roles, strict=True):
            if role.startswith("point"):
                found = self._boundary_violation(a, role.rsplit(" ", 1)[-1])
                if found is not None:
                    violation, expected = found
                    raise NotOnManifoldError(
                        f"{self.name}.{method}: {role} is not a point of the manifold: "
                        f"{violation}; expected {expected} (check_point refuses this point)"
                    )

    @property
    def _has_boundary(self) -> bool:
        """Whether this manifold diagnoses points on its boundary (overrides
        :meth:`_boundary_violation`)."""
        return type(self)._boundary_violation is not Manifold._boundary_violation

    def _boundary_points(self, method: str, arrays: tuple, roles: tuple[str, ...]) -> tuple:
        """``(number, method, points, roles)``: what :meth:`_refuse_boundary` reads, for a map
        call recorded inside a compiled function (:func:`diagnose_compiled_call`): the graph
        holds the manifold by number (:func:`riemfl.check_levels_torch.hold`) and copies the
        point arguments."""
        from ..check_levels_torch import hold

        at = tuple(i for i, role in enumerate(roles) if role.startswith("point"))
        return (hold(self), method, tuple(arrays[i] for i in at), tuple(roles[i] for i in at))

    def _broadcast_batch(self, arrays: tuple, roles: tuple[str, ...]) -> tuple[int, ...]:
        batches = [tuple(a.shape[: a.ndim - self.ndim]) for a in arrays]
        try:
            return tuple(np.broadcast_shapes(*batches))
        except ValueError:
            listed = ", ".join(f"{r} {b}" for r, b in zip(roles, batches, strict=True))
            raise ShapeError(
                f"{self.name}: the batch shapes of the arguments do not broadcast ({listed}); "
                f"expected leading dimensions that broadcast against each other"
            ) from None

    # ------------------------------------------------------------------ public contract
    def project(self, a: Array) -> Array:
        """Metric projection :math:`P_M(a) = \\arg\\min_{x\\in M}\\|x - a\\|` (ambient norm).

        Raises :class:`~riemfl.errors.ProjectionError` where the nearest point is not unique.
        """
        return self._run_map("project", False, a)

    def to_tangent(self, x: Array, a: Array) -> Array:
        """Orthogonal projection of the ambient vector ``a`` onto :math:`T_xM`."""
        return self._run_map("to_tangent", False, x, a)

    def egrad_to_rgrad(self, x: Array, g: Array) -> Array:
        """Riemannian gradient at ``x`` from the Euclidean gradient ``g`` of a smooth extension."""
        return self._run_map("egrad_to_rgrad", False, x, g)

    def ehess_to_rhess(self, x: Array, g: Array, h: Array, u: Array) -> Array:
        r"""The Riemannian Hessian applied to ``u``, :math:`\operatorname{Hess} f(x)[u]`, from the
        Euclidean gradient ``g`` :math:`= \nabla \bar f(x)` and the Euclidean Hessian-vector
        product ``h`` :math:`= \nabla^2 \bar f(x)[u]` of a smooth extension :math:`\bar f`.

        For a Riemannian submanifold of a Euclidean space this is
        :math:`P_{T_x M}(h) + \mathrm{W}_x(u, P^\perp_x g)`, the projected Hessian plus the
        Weingarten map applied to the normal part of the gradient (Absil, Mahony & Trumpf 2013;
        Boumal 2023, Prop. 5.40); manifolds with another metric say theirs.
        """
        return self._run_map("ehess_to_rhess", False, x, g, h, u)

    def inner(self, x: Array, u: Array, v: Array) -> Array:
        """Riemannian metric :math:`\\langle u, v\\rangle_x`; reduces the point axes."""
        return self._run_map("inner", True, x, u, v)

    def norm(self, x: Array, u: Array) -> Array:
        """Riemannian norm :math:`\\|u\\|_x = \\sqrt{\\langle u, u\\rangle_x}`."""
        return self._run_map("norm", True, x, u)

    def retract(self, x: Array, u: Array) -> Array:
        """The manifold's default retraction :math:`R_x(u)`."""
        return self._run_map("retract", False, x, u)

    def inverse_retract(self, x: Array, y: Array) -> Array:
        """Inverse of :meth:`retract`: the tangent ``u`` at ``x`` with :math:`R_x(u) = y`."""
        return self._run_map("inverse_retract", False, x, y)

    def exp(self, x: Array, u: Array) -> Array:
        """Riemannian exponential map :math:`\\mathrm{Exp}_x(u)`."""
        return self._run_map("exp", False, x, u)

    def log(self, x: Array, y: Array) -> Array:
        """Riemannian logarithm :math:`\\mathrm{Log}_x(y)` (inverse of exp near ``x``)."""
        return self._run_map("log", False, x, y)

    def dist(self, x: Array, y: Array) -> Array:
        """Geodesic distance :math:`d(x, y)`; reduces the point axes.

        In torch its gradient is finite everywhere, also at ``y = x``, where :math:`d` is not
        differentiable and the gradient is the zero subgradient wherever the computed distance
        is exactly 0 (:meth:`squared_dist` is the smooth function to differentiate there).
        """
        return self._run_map("dist", True, x, y)

    def squared_dist(self, x: Array, y: Array) -> Array:
        r"""Squared geodesic distance :math:`d(x, y)^2`; reduces the point axes.

        Equal to ``dist(x, y)**2`` to rounding, and defined wherever ``dist`` is. Unlike
        :math:`d`, :math:`d^2` is smooth at :math:`y = x` (within the injectivity radius):
        :math:`\nabla_y \tfrac12 d(x, y)^2 = -\mathrm{Log}_y(x)`, which vanishes at
        :math:`y = x`. Every family evaluates it without a square root of a vanishing
        argument, so its torch gradient is finite everywhere and 0 at :math:`y = x` (up to the
        rounding of the computed :math:`\mathrm{Log}_x(x)`; exactly 0 where that is 0): a
        Karcher mean :math:`\arg\min_y \sum_i d(x_i, y)^2` can start at a data point. The
        default is :math:`\langle \mathrm{Log}_x y, \mathrm{Log}_x y\rangle_x` where ``dist``
        is the norm of ``log``, and :math:`d^2` otherwise (families with a closed-form
        distance override it).
        """
        return self._run_map("squared_dist", True, x, y)

    def transport(self, x: Array, y: Array, u: Array) -> Array:
        """A cheap vector transport :math:`T_xM \\to T_yM` (default: project onto :math:`T_yM`)."""
        return self._run_map("transport", False, x, y, u)

    def parallel_transport(self, x: Array, y: Array, u: Array) -> Array:
        """Parallel transport of ``u`` along the minimising geodesic from ``x`` to ``y``."""
        return self._run_map("parallel_transport", False, x, y, u)

    def retraction_transport(self, x: Array, u: Array, v: Array) -> Array:
        r"""Vector transport by differentiated retraction (optional map): :math:`\mathcal
        T_u(v) = \mathrm{D}R_x(u)[v] = \tfrac{d}{dt}R_x(u + tv)\big|_{t=0} \in T_{R_x(u)}M`
        for :meth:`retract` (Absil, Mahony & Sepulchre 2008, Sec. 8.1.2).

        The transport a line search needs: :math:`\tfrac{d}{dt}f(R_x(tu)) = \langle
        \operatorname{grad} f(R_x(tu)), \mathcal T_{tu}(u)\rangle_{R_x(tu)}`, which
        :meth:`transport` (any transport from x to y) does not give in general.
        """
        return self._run_map("retraction_transport", False, x, u, v)

    def random_point(
        self, *batch_shape: int, rng: RandomState = None, like: Array | None = None
    ) -> Array:
        """Draw points with leading ``batch_shape``.

        Parameters
        ----------
        *batch_shape : int
            Leading batch dimensions (none for a single point).
        rng : None, int or numpy.random.Generator
            Explicit source of randomness; global random state is never used.
        like : array, optional
            Numpy array or torch tensor whose type, dtype and device the result takes.
            Default: numpy float64.
        """
        arr = self._random_point(tuple(batch_shape), as_generator(rng))
        return arr if like is None else to_like(arr, like)

    def random_tangent(self, x: Array, rng: RandomState = None) -> Array:
        """A random tangent vector at each point of ``x`` (Gaussian ambient, projected)."""
        (x,) = self._checked_inputs("random_tangent", (x,), _X)
        g = to_like(as_generator(rng).standard_normal(tuple(x.shape)), x)
        if 0 in x.shape:
            return g
        try:
            out = self._to_tangent(x, g)
        except Exception as exc:
            self._map_failed("random_tangent", (x,), _X, exc)
            raise
        # the projection of a finite g: non-finite only at a point on the boundary, where a
        # manifold that checks to_tangent's result makes it NaN (see _refuse_boundary)
        if "to_tangent" in self._result_checked and level_of(x) == "eager" and not all_finite(out):
            self._refuse_boundary("random_tangent", (x,), _X)
        return out

    def zero_tangent(self, x: Array) -> Array:
        """The zero tangent vector at ``x``."""
        (x,) = self._checked_inputs("zero_tangent", (x,), _X)
        return ops_for(x).zeros_like(x)

    def check_point(self, x: Array, atol: float | None = None) -> None:
        """Raise :class:`~riemfl.errors.NotOnManifoldError` unless ``x`` is on M within ``atol``.

        The message names the constraint that failed and the largest violation measured.
        """
        (x,) = self._checked_inputs("check_point", (x,), _X, verdict=True)
        if 0 in x.shape:
            return
        self._check_point(x, self.default_atol(x) if atol is None else atol)

    def point_violation(self, x: Array) -> tuple[str, float]:
        """The constraint of M that ``x`` violates most, as text, and its largest violation over
        the batch (0 up to rounding on M): what :meth:`check_point` compares with ``atol``."""
        (x,) = self._checked_inputs("point_violation", (x,), _X, verdict=True)
        if 0 in x.shape:
            return "(empty batch)", 0.0
        return self._point_violation(x)

    def _check_point(self, x: Array, tol: float) -> None:
        constraint, violation = self._point_violation(x)
        if violation > tol:
            raise NotOnManifoldError(
                f"{self.name}: point is not on the manifold: constraint {constraint} is violated "
                f"by {violation:.3e} > atol {tol:.1e}"
            )

    def check_tangent(self, x: Array, u: Array, atol: float | None = None) -> None:
        """Raise :class:`~riemfl.errors.NotOnManifoldError` unless ``u`` is tangent at ``x``."""
        x, u = self._checked_inputs("check_tangent", (x, u), _XU, verdict=True)
        if 0 in x.shape or 0 in u.shape:
            return
        tol = self.default_atol(x) if atol is None else atol
        constraint, violation = self._tangent_violation(x, u)
        scale = max(1.0, ops_for(u).to_float(self._norm(x, u)) if self._euclidean_norm_ok else 1.0)
        if violation > tol * scale:
            raise NotOnManifoldError(
                f"{self.name}: vector is not tangent at x: constraint {constraint} is violated "
                f"by {violation:.3e} > atol {tol * scale:.1e}"
            )

    def point_gap(self, x: Array, y: Array) -> Array:
        """Ambient distance between two point representations (used to compare points).

        For manifolds whose points are equivalence classes (Grassmann) this compares the classes,
        not the representatives.
        """
        return self._run_map("point_gap", True, x, y)

    def _point_gap(self, x, y):
        ops = ops_for(x, y)
        d = x - y
        return ops.sqrt(ops.sum(d * d, axis=self._axes))

    # ------------------------------------------------------------------ default implementations
    _euclidean_norm_ok = True

    def _project(self, a):
        return self._not_implemented("project")

    @abstractmethod
    def _to_tangent(self, x, a): ...

    def _egrad_to_rgrad(self, x, g):
        return self._to_tangent(x, g)

    def _inner(self, x, u, v):
        if type(u) is np.ndarray and type(v) is np.ndarray and u.shape == v.shape:
            if u.dtype.kind == "f" and v.dtype.kind == "f":  # (vecdot conjugates complex u)
                # one dot per point over its flattened axes: no temporary u * v of the stack
                if u.ndim == self.ndim:
                    return np.vdot(u, v)
                flat = u.shape[: u.ndim - self.ndim] + (-1,)
                return NUMPY.vecdot(u.reshape(flat), v.reshape(flat))[..., 0]
        return ops_for(u, v).sum(u * v, axis=self._axes)

    def _norm(self, x, u):
        return ops_for(u).safe_sqrt(self._inner(x, u, u))

    @abstractmethod
    def _retract(self, x, u): ...

    def _inverse_retract(self, x, y):
        return self._not_implemented("inverse_retract")

    def _exp(self, x, u):
        return self._not_implemented("exp")

    def _log(self, x, y):
        return self._not_implemented("log")

    def _dist(self, x, y):
        return self._norm(x, self._log(x, y))

    def _squared_dist(self, x, y):
        if type(self)._dist is Manifold._dist:  # dist = |log|: its square without the root
            return self._squared_log_norm(x, y)
        d = self._dist(x, y)
        return d * d

    def _squared_log_norm(self, x, y):
        r""":math:`\langle \mathrm{Log}_x y, \mathrm{Log}_x y\rangle_x` (clamped at 0): smooth
        at :math:`y = x` wherever ``log`` is."""
        v = self._log(x, y)
        return ops_for(v).maximum(self._inner(x, v, v), 0.0)

    def _transport(self, x, y, u):
        return self._to_tangent(y, u)

    def _parallel_transport(self, x, y, u):
        return self._not_implemented("parallel_transport")

    def _retraction_transport(self, x, u, v):
        return self._not_implemented("retraction_transport")

    def _ehess_to_rhess(self, x, g, h, u):
        return self._not_implemented("ehess_to_rhess")

    @abstractmethod
    def _random_point(self, batch_shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        """numpy float64 points of shape ``batch_shape + point_shape``."""

    @abstractmethod
    def _point_violation(self, x) -> tuple[str, float]:
        """(constraint as text, largest violation over the batch)."""

    def _tangent_violation(self, x, u) -> tuple[str, float]:
        ops = ops_for(x, u)
        d = u - self._to_tangent(x, u)
        return "u = P_{T_x M}(u)", ops.to_float(ops.sqrt(ops.sum(d * d, axis=self._axes)))


#: ``_ALL[n]``: the positions of n arguments (every one shown by a verdict)
_ALL = tuple(tuple(range(n)) for n in range(8))


def diagnose_compiled_arguments(
    verdict: Array, name: str, roles: tuple[str, ...], boundary: tuple | None
) -> None:
    """The check of a map call's arguments recorded inside a compiled function
    (:meth:`Manifold._refuse_arguments` from the verdict): a non-finite argument raises
    :class:`~riemfl.errors.NonFiniteError` naming it (:func:`diagnose_compiled_call`); then,
    with ``boundary`` (:meth:`Manifold._boundary_points`: the manifold held by number, the
    points copied by the graph), a point on the boundary of M raises eager mode's
    :class:`~riemfl.errors.NotOnManifoldError`, word for word."""
    diagnose_compiled_call(verdict, name, roles, None)
    if boundary is not None:
        _refuse_compiled_boundary(boundary)


def _refuse_compiled_boundary(boundary: tuple) -> None:
    """Eager mode's boundary diagnosis (:meth:`Manifold._refuse_boundary`) on the copies of a
    compiled call's points (:meth:`Manifold._boundary_points`)."""
    from ..check_levels_torch import held

    number, method, points, point_roles = boundary
    held(number)._refuse_boundary(method, points, point_roles)


def diagnose_compiled_call(
    verdict: Array, name: str, roles: tuple[str, ...], boundary: tuple | None
) -> None:
    """The boundary's diagnosis of a map call recorded inside a compiled function, from its
    verdict (the graph keeps no copy of the arguments) and, for a map that checks its arguments
    through its result on a manifold with a boundary, copies of its point arguments.

    ``verdict`` holds the largest entry in absolute value, at the call, of each argument (their
    ``roles``) and, where it has one entry more, of the result. A non-finite argument raises
    :class:`~riemfl.errors.NonFiniteError` naming it, as eager mode does, without the index
    of the entry. A non-finite result of finite arguments is what eager mode traces to a point
    on the boundary of M: ``boundary`` (:meth:`Manifold._boundary_points`: the manifold held
    by number, the points copied by the graph) runs that diagnosis, eager mode's
    :class:`~riemfl.errors.NotOnManifoldError` word for word; without a boundary point, or
    without ``boundary`` (no boundary to look for, or a map that does not check its result),
    it is no violation, as in eager mode, which returns the result.
    """
    largest = to_numpy(verdict, np.float64).reshape(-1)
    where = (
        "; a deferred check inside a function compiled with torch.compile, which keeps no copy "
        "of the arguments: run the step uncompiled, or under riemfl.checks('eager'), for the "
        "index of the entry"
    )
    for value, role in zip(largest, roles, strict=False):
        if not math.isfinite(value):
            raise NonFiniteError(
                f"{name}: {role} contains NaN or infinite entries (the largest in absolute "
                f"value is {value}{where}); expected finite values"
            )
    if boundary is not None and len(largest) > len(roles) and not math.isfinite(largest[-1]):
        _refuse_compiled_boundary(boundary)


def delegated_map(method: str, via: str) -> Any:
    """A private map ``_<method>`` that calls ``self.<via>(method, *arrays)``.

    For a manifold whose maps all go through one dispatcher (a column loop, a metric object):
    ``_exp = delegated_map("exp", "_columns")``. ``supports`` sees an override of the hook.
    """

    def run(self, *arrays):
        return getattr(self, via)(method, *arrays)

    run.__name__ = run.__qualname__ = "_" + method
    return run


def dist_from_squared(self: Manifold, x: Array, y: Array) -> Array:
    r"""A private map ``_dist`` for a family whose closed form is ``_squared_dist``:
    :math:`d = \sqrt{d^2}` by ``safe_sqrt``, whose torch derivative at :math:`d^2 = 0`
    (coincident points) is the zero subgradient instead of NaN. Assign it:
    ``_dist = dist_from_squared``."""
    return ops_for(x, y).safe_sqrt(self._squared_dist(x, y))


def result_checked(*maps: str, **first: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """A ``Manifold._result_checked`` table.

    Parameters
    ----------
    *maps : str
        Maps that check no argument before they run (their result shows every argument).
    **first : tuple of int
        Maps that check the arguments at these positions first (the other arguments show in
        the result), e.g. ``inner=(0,)`` for a metric that does not read the base point.

    Returns
    -------
    dict
        Map name to the positions of the arguments checked first.
    """
    return {**dict.fromkeys(maps, ()), **first}


def linalg_errors() -> tuple[type[BaseException], ...]:
    """numpy's and (where loaded) torch's linear-algebra exceptions."""
    torch = sys.modules.get("torch")
    return (np.linalg.LinAlgError,) + ((torch.linalg.LinAlgError,) if torch is not None else ())


#: the point axes of a point of ndim d: ``_AXES[d] == tuple(range(-d, 0))``
_AXES = tuple(tuple(range(-d, 0)) for d in range(33))

#: roles of the arguments of the public maps (named in error messages)
_A = ("ambient point a",)
_X = ("point x",)
_XA = ("point x", "ambient vector a")
_XG = ("point x", "Euclidean gradient g")
_XU = ("point x", "tangent vector u")
_XY = ("point x", "point y")
_XUV = ("point x", "tangent vector u", "tangent vector v")
_XGHU = (
    "point x",
    "Euclidean gradient g",
    "Euclidean Hessian-vector product h",
    "tangent vector u",
)
_XYU = ("point x", "point y", "tangent vector u")

#: the roles of the arguments of each public map that runs under the input policy, in order
MAP_ROLES: dict[str, tuple[str, ...]] = {
    "project": _A,
    "to_tangent": _XA,
    "egrad_to_rgrad": _XG,
    "ehess_to_rhess": _XGHU,
    "inner": _XUV,
    "norm": _XU,
    "retract": _XU,
    "inverse_retract": _XY,
    "exp": _XU,
    "log": _XY,
    "dist": _XY,
    "squared_dist": _XY,
    "transport": _XYU,
    "parallel_transport": _XYU,
    "retraction_transport": _XUV,
    "point_gap": _XY,
}
#: the private map behind each public one
_PRIVATE = {method: "_" + method for method in MAP_ROLES}

#: methods whose base-class default is a real implementation (not a NotImplementedError stub)
_DEFAULTED = {"egrad_to_rgrad", "inner", "norm", "transport", "dist", "squared_dist", "point_gap"}

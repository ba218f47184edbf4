r"""Bezier curves in a Euclidean space or on a manifold.

A Bezier curve of degree n with control points :math:`P_0, \dots, P_n` is

.. math::
    c(t) = \sum_{i=0}^n B_i^n(t)\,P_i,\qquad B_i^n(t) = \binom{n}{i} t^i (1-t)^{n-i},

the quadratic case :math:`c(t) = (1-t)^2 A + 2t(1-t) B + t^2 C` being the curve of AsyncBezier
(Licudi et al. 2025, eq. (8)). On a manifold the curve is defined by the geodesic de Casteljau
construction (the one of Manopt.jl's ``bezier_curves``): every linear interpolation :math:`(1-t)P +
tQ` becomes :math:`\mathrm{Exp}_P(t\,\mathrm{Log}_P Q)`.

*A choice where the papers differ.* The technical report writes the same curve as :math:`(1-t)^2
A + t(1-t)\,\varphi + t^2 C` (Licudi 2025 (TR), eq. (28)), without the factor 2. Its weights sum
to :math:`1 - t + t^2 \ne 1`, so the curve is not affine-invariant and, with :math:`\varphi` at
the chord midpoint (where the report initialises it), shrinks towards the origin (derived here).
riemfl uses the Bernstein form of the paper and reads the report's :math:`\varphi` as B.

Any real t is allowed: the polynomial extends beyond [0, 1] (Licudi et al. 2025, Sec. 3, footnote:
the parameter domain "can be sensibly extended" to the real line).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from ..backend import Array, RandomState, as_generator, is_torch, ops_for, to_like, to_numpy
from ..errors import ParameterError, ShapeError
from . import bezier_arclength, bezier_closest
from .base import Manifold
from .bezier_buffers import check_buffer, check_call_buffers
from .bezier_closest import real_polynomial_roots
from .bezier_eval import (
    bernstein_weights,
    contract,
    difference_weights,
    geodesic_de_casteljau,
    power_basis_matrix,
    scalar_bernstein_weights,
)
from .euclidean import Euclidean

__all__ = [
    "BezierCurve",
    "bernstein_weights",
    "power_basis_matrix",
    "real_polynomial_roots",
    "scalar_bernstein_weights",
]


class BezierCurve:
    r"""A Bezier curve of any degree >= 1, in Euclidean space or on a manifold.

    Parameters
    ----------
    control_points : array, shape (degree + 1, *point_shape)
        numpy array or torch tensor; with torch, every quantity below is differentiable with
        respect to the control points (train a curve of network parameter vectors with any torch
        optimiser).
    manifold : Manifold, optional
        Base manifold (default: the Euclidean space of the control points' shape). The control
        points must lie on it.

    Notes
    -----
    *Euclidean base.* Evaluation contracts the control points with the Bernstein weights computed
    by de Casteljau's recursion (:func:`bernstein_weights`): one pass over the control points,
    stable for t in [0, 1]. Derivatives use the hodograph (the derivative of a degree-n Bezier
    curve is the degree n-1 curve of the scaled differences :math:`n(P_{i+1} - P_i)`). The arc
    length of a quadratic is in closed form; other degrees use composite Gauss-Legendre.

    *Manifold base.* Evaluation is the geodesic de Casteljau construction with the base manifold's
    ``exp`` and ``log``. Derivatives are taken by central differences of the ambient coordinates
    (step :math:`\epsilon^{1/3}`, error :math:`O(\epsilon^{2/3})`) and projected onto the tangent
    space; the speed is their Riemannian norm.
    """

    def __init__(self, control_points: Array, manifold: Manifold | None = None) -> None:
        cp = control_points if hasattr(control_points, "shape") else np.asarray(control_points)
        if cp.ndim < 2 or cp.shape[0] < 2:
            raise ShapeError(
                f"BezierCurve needs control points of shape (degree + 1, *point_shape) with "
                f"degree >= 1; got shape {tuple(cp.shape)}"
            )
        if not ops_for(cp).all_finite(cp):
            raise ParameterError("BezierCurve: control points contain NaN or infinite entries")
        if manifold is None:
            manifold = Euclidean(*cp.shape[1:])
        if tuple(cp.shape[1:]) != tuple(manifold.point_shape):
            expected = ", ".join(map(str, manifold.point_shape))
            raise ShapeError(
                f"BezierCurve: control points of shape {tuple(cp.shape)} do not match "
                f"{manifold.name} (expected (degree + 1, {expected}))"
            )
        self.control_points = cp
        self.manifold = manifold
        self._weight_cache: tuple[Any, Any] | None = None
        self.euclidean = isinstance(manifold, Euclidean)
        if not self.euclidean:
            manifold.check_point(cp)

    # ------------------------------------------------------------------ basics
    @property
    def degree(self) -> int:
        return int(self.control_points.shape[0]) - 1

    @property
    def point_shape(self) -> tuple[int, ...]:
        return tuple(self.manifold.point_shape)

    def __repr__(self) -> str:
        return f"BezierCurve(degree={self.degree}, manifold={self.manifold.name})"

    def _t(self, t: Any) -> Array:
        """Parameters as an array of the control points' type, dtype and device."""
        if hasattr(t, "shape") and is_torch(t) == is_torch(self.control_points):
            return (
                t.to(self.control_points.dtype)
                if hasattr(t, "to")
                else t.astype(self.control_points.dtype)
            )
        return to_like(np.asarray(t, dtype=np.float64), self.control_points)

    def _scalar_weight_array(self, t: float) -> Array:
        """The Bernstein weights at a Python-float t as a 1-D array like the control points.

        The last one is cached by (t, degree, dtype, device): a training loop that evaluates
        at a fixed t pays for the weights once. The cached array is never written to, so it is
        safe to hand to autograd repeatedly.
        """
        cp = self.control_points
        torch_cp = is_torch(cp)
        key = (t, self.degree, cp.dtype, cp.device if torch_cp else None)
        cached = self._weight_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        weights = scalar_bernstein_weights(self.degree, t)
        if torch_cp:
            import torch

            w = torch.tensor(weights, dtype=cp.dtype, device=cp.device)
        else:
            w = np.asarray(weights, dtype=cp.dtype)
            w.flags.writeable = False
        self._weight_cache = (key, w)
        return w

    # ------------------------------------------------------------------ evaluation
    def __call__(
        self, t: Any, *, out: Array | None = None, grad_buffer: Array | None = None
    ) -> Array:
        r"""Curve points :math:`c(t) = \sum_i B_i^n(t) P_i` at parameters ``t``.

        Parameters
        ----------
        t : float or array
            Scalar or array of parameters (any real value; beyond [0, 1] the polynomial
            extrapolates).
        out : array, optional
            Preallocated result of shape ``t.shape + point_shape``, of the control points' array
            type, dtype and device, C-contiguous, not overlapping the control points. The points
            are written into it (no allocation: a training loop that evaluates a curve of
            D-dimensional parameter vectors at every step reuses one buffer) and it is returned;
            in torch, when a graph is recorded, the returned tensor is a new tensor object that
            shares ``out``'s memory and carries the graph (``out`` itself stays free of autograd
            history).
        grad_buffer : torch.Tensor, optional
            Torch only, shape of the control points: the backward pass of this evaluation writes
            :math:`\partial L/\partial P_i = \sum_k B_i^n(t_k)\,\bar c_k` (for an incoming
            gradient :math:`\bar c`) into it instead of allocating a new (n + 1, D) tensor, and
            that tensor is the gradient autograd returns for the control points. It is
            overwritten by the next backward pass through a call with the same buffer: copy it
            if you keep it (``loss.backward()`` already does: torch copies or adds it into
            ``.grad``). Ignored when no graph is recorded, and when a higher-order graph is
            requested (``create_graph=True``), where a fresh differentiable tensor is returned.

        Returns
        -------
        array
            Shape ``t.shape + point_shape``; ``out`` (or a view of its memory) when given.

        Raises
        ------
        ShapeError
            ``out`` or ``grad_buffer`` has the wrong shape.
        ParameterError
            A buffer of another array type, dtype or device, not contiguous, overlapping the
            control points or each other, a torch leaf that requires grad, or ``grad_buffer``
            with numpy control points (see :meth:`point_and_grad`).
        """
        scalar = self.euclidean and isinstance(t, (int, float, np.floating))
        if out is not None or grad_buffer is not None:
            check_call_buffers(self, () if scalar else tuple(np.shape(t)), out, grad_buffer)
        if scalar:
            return contract(
                self.control_points,
                self.point_shape,
                self._scalar_weight_array(float(t)),
                out,
                grad_buffer,
            )
        t = self._t(t)
        if self.euclidean:
            return contract(
                self.control_points,
                self.point_shape,
                bernstein_weights(self.degree, t),
                out,
                grad_buffer,
            )
        res = geodesic_de_casteljau(self.manifold, self.control_points, t)
        if out is None:
            return res
        if type(out) is np.ndarray:
            out[...] = res
            return out
        out.detach().copy_(res.detach())  # manifold base: computed, then copied into out
        return res if res.requires_grad else out

    def point_and_grad(
        self, t: Any, g: Array, *, out: Array | None = None, grad_out: Array | None = None
    ) -> tuple[Array, Array]:
        r"""The curve point and the gradient of :math:`L = \langle c(t), g\rangle` with respect
        to the control points, without autograd.

        .. math::
            c(t) = \sum_i B_i^n(t)\,P_i, \qquad
            \frac{\partial L}{\partial P_i} = \sum_k B_i^n(t_k)\, g_k

        (for a scalar t simply :math:`B_i^n(t)\,g`: the outer product of the Bernstein weights
        with g). This is the chain rule step of every loss of the curve point: pass the loss's
        gradient at :math:`c(t)` as g. Euclidean base only; numpy and torch (torch: values only,
        no graph is recorded).

        Parameters
        ----------
        t : float or array
            Curve parameter(s).
        g : array, shape ``t.shape + point_shape``
            Gradient of the loss with respect to the curve point(s).
        out : array, optional
            Preallocated point(s), shape ``t.shape + point_shape`` (as in :meth:`__call__`).
        grad_out : array, optional
            Preallocated gradient, shape of the control points (dtype and array type of the
            control points, C-contiguous, overlapping neither the inputs nor ``out``).

        Returns
        -------
        point, grad : arrays
            ``out`` and ``grad_out`` when given, otherwise new arrays.

        Raises
        ------
        ShapeError
            g, out or grad_out of the wrong shape.
        ParameterError
            A non-Euclidean base, or a buffer that cannot be written in place (see
            :meth:`__call__`).
        """
        if not self.euclidean:
            raise ParameterError("BezierCurve.point_and_grad needs a Euclidean base")
        scalar = isinstance(t, (int, float, np.floating))
        t_shape = () if scalar else tuple(np.shape(t))
        cp = self.control_points
        g = g if hasattr(g, "shape") else np.asarray(g)
        if tuple(g.shape) != t_shape + self.point_shape:
            raise ShapeError(
                f"BezierCurve.point_and_grad: g has shape {tuple(g.shape)}; expected "
                f"{t_shape + self.point_shape}"
            )
        if is_torch(g) != is_torch(cp) or g.dtype != cp.dtype:
            # a copy: g must share no memory with the buffers written below
            g = to_like(np.array(to_numpy(g), dtype=np.float64), cp)
        if out is not None:
            check_buffer(cp, "out", out, t_shape + self.point_shape, g)
        if grad_out is not None:
            check_buffer(cp, "grad_out", grad_out, tuple(cp.shape), g, out)
        w = (
            self._scalar_weight_array(float(t))
            if scalar
            else bernstein_weights(self.degree, self._t(t))
        )
        k = self.degree + 1
        w2 = w if w.ndim == 1 else w.reshape(-1, k)
        g2 = g.reshape(w2.shape[:-1] + (-1,))
        if type(cp) is np.ndarray:
            point = contract(self.control_points, self.point_shape, w, out)
            target = None if grad_out is None else grad_out.reshape(k, -1)
            if w2.ndim == 1:
                grad = np.multiply.outer(w2, g2, out=target)
            else:
                grad = np.matmul(w2.T, g2, out=target)
            return point, grad_out if grad_out is not None else grad.reshape(cp.shape)
        import torch

        with torch.no_grad():
            point = contract(self.control_points, self.point_shape, w, out)
            target = None if grad_out is None else grad_out.view(k, -1)
            grad = (
                torch.outer(w2, g2, out=target) if w2.ndim == 1 else torch.mm(w2.T, g2, out=target)
            )
        return point, grad_out if grad_out is not None else grad.view(cp.shape)

    def derivative(self, t: Any, order: int = 1) -> Array:
        r""":math:`c^{(k)}(t)` for ``order`` k in {1, 2} (ambient coordinates)."""
        if order not in (1, 2):
            raise ParameterError(f"BezierCurve.derivative: order must be 1 or 2, got {order!r}")
        t = self._t(t)
        if self.euclidean:
            n = self.degree
            if order > n:
                return ops_for(t).zeros_like(self(t))
            weights = bernstein_weights(n - order, t)
            for k in range(order):
                weights = difference_weights(weights, n - order + k + 1)
            return contract(self.control_points, self.point_shape, weights)
        return self._numerical_derivative(t, order)

    def _numerical_derivative(self, t: Array, order: int) -> Array:
        ops = ops_for(t)
        m = self.manifold
        eps = ops.eps(t)
        h = eps ** (1 / 3) if order == 1 else eps ** (1 / 4)
        plus, mid, minus = self(t + h), self(t), self(t - h)
        if order == 1:
            return m.to_tangent(mid, (plus - minus) / (2 * h))
        return (plus - 2 * mid + minus) / (h * h)

    def velocity(self, t: Any) -> Array:
        """First derivative :math:`c'(t)`."""
        return self.derivative(t, 1)

    def acceleration(self, t: Any) -> Array:
        """Second derivative :math:`c''(t)` (ambient)."""
        return self.derivative(t, 2)

    def speed(self, t: Any) -> Array:
        r""":math:`\|c'(t)\|` in the base manifold's metric."""
        t = self._t(t)
        v = self.velocity(t)
        return self.manifold.norm(self(t), v)

    # ------------------------------------------------------------------ arc length
    def arc_length(self, t0: float = 0.0, t1: float = 1.0, *, panels: int = 16) -> Array:
        r"""Arc length :math:`\int_{t_0}^{t_1}\|c'(t)\|\,dt` (negative if ``t1 < t0``).

        Euclidean quadratic: closed form of :math:`\int 2\sqrt{|b|^2u^2 + 2(a\cdot b)u +
        |a|^2}\,du` (derived here); otherwise ``panels`` panels of 8-point Gauss-Legendre,
        exact to rounding for smooth speeds (polynomial of degree < 16 per panel).
        """
        return bezier_arclength.arc_length(self, t0, t1, panels)

    def arc_length_at(self, t: Any, *, panels: int = 16) -> Array:
        r""":math:`s(t) = \int_0^t \|c'\|`, elementwise and batched over t (differentiable in
        torch with respect to t and the control points); negative for t < 0."""
        return bezier_arclength.arc_length_at(self, t, panels)

    def parameter_at_arc_length(self, s: Any, *, tol: float = 1e-15) -> np.ndarray:
        """Inverse of :meth:`arc_length_at`: the t with s(t) = s (numpy float64).

        Safeguarded Newton (:math:`ds/dt = \\|c'(t)\\|`) within a bracket grown until it contains
        the target, so values beyond [0, length] extrapolate along the extended curve. All
        targets are solved together (one batched :meth:`arc_length_at` and :meth:`speed` per
        iteration).
        """
        return bezier_arclength.parameter_at_arc_length(self, s, tol)

    def sample(
        self, n: int, rng: RandomState = None, *, uniform: str = "parameter"
    ) -> tuple[np.ndarray, Array]:
        """``n`` random curve points: ``(t, c(t))`` with t uniform in the parameter (default) or
        in arc length (``uniform="arc_length"``, density proportional to the speed)."""
        gen = as_generator(rng)
        if uniform == "parameter":
            t = gen.uniform(0.0, 1.0, size=n)
        elif uniform == "arc_length":
            t = self.parameter_at_arc_length(
                gen.uniform(0.0, 1.0, size=n) * float(to_numpy(self.arc_length()))
            )
        else:
            raise ParameterError(f"uniform must be 'parameter' or 'arc_length', got {uniform!r}")
        return t, self(t)

    # ------------------------------------------------------------------ closest point
    def closest_point(
        self, a: Array, *, extended: bool = False, starts: int = 9
    ) -> tuple[np.ndarray, Array]:
        r"""Parameter :math:`t^*(a)` of the curve point nearest to ``a`` (ambient norm), and the
        distance.

        ``a`` may carry leading batch dimensions. The search runs over [0, 1], or over the whole
        real line with ``extended`` (the extrapolated curve). Euclidean quadratic: the stationary
        points are the real roots of the cubic :math:`(b\cdot b)t^3 + 3(a\cdot b)t^2 + (2a\cdot a +
        (A-\theta)\cdot b)t + (A-\theta)\cdot a` (derived here), compared with the
        endpoints. Euclidean of another degree n: the real roots of the degree-(2n - 1) derivative
        of the squared distance, a polynomial whose coefficients come from the power-basis
        coefficients of the curve
        (:func:`~riemfl.manifolds.bezier_closest.polynomial_closest`; global, all queries at once).
        Manifold base: a safeguarded Newton iteration on :math:`\tfrac12\|c(t)-a\|^2` from
        ``starts`` equally spaced starting points (``starts`` is used there only). Returns
        ``(t, distance)``; t as numpy float64, the distance in the control points' array type.
        """
        return bezier_closest.closest_point(self, a, extended, starts)

    def like(self, x: Array, *, validate: bool = True) -> BezierCurve:
        """This curve with control points of x's array type, dtype and device (self if same).

        Like ``torch.as_tensor`` and ``Tensor.numpy()``, the new control points may share memory
        with these (a CPU tensor and a numpy array of one dtype do). Without ``validate`` the
        converted control points are not checked for finiteness (which reads a value back from
        a device): for the check levels ``"deferred"`` and ``"off"``, where an entry that
        overflows a narrower dtype shows as a non-finite result instead.
        """
        cp = self.control_points
        same = is_torch(x) == is_torch(cp) and x.dtype == cp.dtype
        if same and (not hasattr(x, "device") or x.device == cp.device):
            return self
        converted = to_like(to_numpy(cp, np.float64), x)
        if validate:
            return BezierCurve(converted, self.manifold)
        curve = copy.copy(self)
        curve.control_points, curve._weight_cache = converted, None
        return curve

    def closest_parameter(self, a: Array, *, extended: bool = False) -> Array:
        r""":math:`t^*(a)` as an array of a's type; differentiable in torch.

        The parameter is found by :meth:`closest_point`; with torch inputs one Newton step on
        :math:`g(t) = \langle c'(t), c(t) - a\rangle` at the solution then gives the exact first
        derivative :math:`dt^*/da = -\partial_a g / g'` (implicit function theorem), applied
        where :math:`t^*` is interior (at a clipped endpoint the derivative is 0).
        """
        return bezier_closest.closest_parameter(self, a, extended)

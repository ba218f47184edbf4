r"""Bezier curves in a Euclidean space or on a manifold.

A Bezier curve of degree n with control points :math:`P_0, \dots, P_n` is

.. math::
    c(t) = \sum_{i=0}^n B_i^n(t)\,P_i,\qquad B_i^n(t) = \binom{n}{i} t^i (1-t)^{n-i},

the quadratic case :math:`c(t) = (1-t)^2 A + 2t(1-t) B + t^2 C` being the curve of AsyncBezier
([P] eq. of section 3; digest-000-001 section 2.3, which also explains why the ``t(1-t)`` variant
of [TR] eq. 28 is read as this Bernstein form). On a manifold the curve is defined by the geodesic
de Casteljau construction (the one of Manopt.jl's ``bezier_curves``): every linear interpolation
:math:`(1-t)P + tQ` becomes :math:`\mathrm{Exp}_P(t\,\mathrm{Log}_P Q)`.

Any real t is allowed: the polynomial extends beyond [0, 1] ([P]'s footnote allows extrapolation
past the local endpoint).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..backend import Array, is_torch, ops_for, to_like
from ..errors import ParameterError, ShapeError
from .base import Manifold, RandomState, as_generator
from .euclidean import Euclidean

__all__ = ["BezierCurve", "bernstein_weights", "power_basis_matrix", "real_polynomial_roots"]


def bernstein_weights(degree: int, t: Array) -> Array:
    r"""Bernstein basis :math:`B_0^n(t), \dots, B_n^n(t)` by de Casteljau's recursion.

    Returns an array of shape ``t.shape + (degree + 1,)``. The recursion is de Casteljau's
    algorithm applied to the unit control points: for t in [0, 1] every step is a convex
    combination, which is what makes de Casteljau evaluation numerically stable; contracting these
    weights with the control points is then exactly de Casteljau's result in one pass over them.
    """
    ops = ops_for(t)
    one_minus = 1.0 - t
    weights = [ops.ones_like(t)]
    for r in range(1, degree + 1):
        nxt = [one_minus * weights[0]]
        for i in range(1, r):
            nxt.append(t * weights[i - 1] + one_minus * weights[i])
        nxt.append(t * weights[r - 1])
        weights = nxt
    return _stack_last(ops, weights)


def power_basis_matrix(degree: int) -> np.ndarray:
    r"""The (n + 1, n + 1) matrix W of the power-basis coefficients of a Bezier curve.

    .. math::
        c(t) = \sum_{j=0}^n t^j a_j, \qquad a_j = \sum_i W_{ji} P_i = \binom{n}{j}\Delta^j P_0,
        \qquad W_{ji} = \binom{n}{j}(-1)^{j-i}\binom{j}{i} \ (i \le j),\ 0 \text{ otherwise}

    (lower triangular; row 0 is :math:`a_0 = P_0`). Exact small integers for the degrees in use.
    """
    n = int(degree)
    if n < 0:
        raise ParameterError(f"power_basis_matrix: degree must be >= 0, got {degree}")
    w = np.zeros((n + 1, n + 1))
    for j in range(n + 1):
        for i in range(j + 1):
            w[j, i] = math.comb(n, j) * (-1) ** (j - i) * math.comb(j, i)
    return w


def _scalar_weights(degree: int, t: float) -> list[float]:
    """Bernstein weights at one Python-float t, by the same de Casteljau recursion."""
    s = 1.0 - t
    w = [1.0]
    for r in range(1, degree + 1):
        w = [s * w[0]] + [t * w[i - 1] + s * w[i] for i in range(1, r)] + [t * w[r - 1]]
    return w


def real_polynomial_roots(coeffs: list[float]) -> list[float]:
    r"""Real roots of a real polynomial of degree <= 3 (coefficients, highest first; the leading
    one nonzero), in closed form, each polished by Newton steps on the polynomial itself.

    Degree 2: the cancellation-free pair :math:`q/a, c/q`, :math:`q = -\tfrac12(b +
    \operatorname{sign}(b)\sqrt{b^2 - 4ac})`. Degree 3: the real root of largest magnitude from
    the depressed cubic (Cardano when it has one real root, the trigonometric formula when
    three), polished, then deflation to a quadratic: *backward*, :math:`P(t) = (1 - t/r)(e_0 +
    e_1 t + e_2 t^2)` (:math:`e_0 = d`, :math:`e_1 = c + e_0/r`, :math:`e_2 = b + e_1/r`), when r
    is large (:math:`|r|^3 \ge |d/a|`), so the small roots of a nearly quadratic cubic stay
    accurate; *forward* (:math:`P(t) = (t - r)(a t^2 + \dots)`) when r is the small real root
    beside a complex pair. Each deflation is the stable one for its root. About 50 times cheaper
    than ``numpy.roots`` (a companion-matrix eigenvalue problem) for the one cubic of every
    closest-point query; agreement with it is tested.
    """
    degree = len(coeffs) - 1
    if degree <= 0:
        return []
    if degree == 1:
        return [-coeffs[1] / coeffs[0]]
    if degree == 2:
        return _quadratic_roots(*coeffs)
    a, b, c, d = coeffs

    def newton(t: float) -> float:
        for _ in range(3):
            f = ((a * t + b) * t + c) * t + d
            df = (3 * a * t + 2 * b) * t + c
            if df == 0 or not math.isfinite(f / df):
                break
            t -= f / df
        return t

    bn, cn, dn = b / a, c / a, d / a
    p = cn - bn * bn / 3
    q = 2 * bn**3 / 27 - bn * cn / 3 + dn
    delta = (q / 2) ** 2 + (p / 3) ** 3
    if delta > 0:
        u = -q / 2 - math.copysign(math.sqrt(delta), q)
        u = math.copysign(abs(u) ** (1 / 3), u)
        candidates = [u - p / (3 * u) - bn / 3 if u != 0 else -bn / 3]
    elif p == 0:
        candidates = [-bn / 3]
    else:
        r = 2 * math.sqrt(-p / 3)
        phi = math.acos(max(-1.0, min(1.0, 3 * q / (p * r)))) / 3
        candidates = [r * math.cos(phi - 2 * math.pi * k / 3) - bn / 3 for k in range(3)]
    root = newton(max(candidates, key=abs))
    if root == 0:
        return [0.0] + [newton(t) for t in _quadratic_roots(a, b, c) if t != 0]
    if abs(root) ** 3 >= abs(dn):  # a large root (|r|^3 >= |product of roots|): backward
        e0, e1 = d, c + d / root
        e2 = b + e1 / root
    else:  # the one real root is small beside a complex pair: forward deflation
        e2, e1 = a, b + a * root
        e0 = c + e1 * root
    rest = _quadratic_roots(e2, e1, e0) if e2 != 0 else ([-e0 / e1] if e1 != 0 else [])
    return [root] + [newton(t) for t in rest]


def _quadratic_roots(a: float, b: float, c: float) -> list[float]:
    disc = b * b - 4 * a * c
    if disc < 0:
        return []
    q = -0.5 * (b + math.copysign(math.sqrt(disc), b))
    return [q / a, c / q] if q != 0 else [0.0]


def _stack_last(ops, arrays):
    return ops.concatenate([a[..., None] for a in arrays], axis=-1)


def _difference_weights(weights: Array, degree: int) -> Array:
    r"""Weights of the derivative: :math:`c' = \sum_i P_i\, n (B^{n-1}_{i-1} - B^{n-1}_i)`."""
    ops = ops_for(weights)
    zero = ops.zeros_like(weights[..., :1])
    padded_left = ops.concatenate([zero, weights], axis=-1)
    padded_right = ops.concatenate([weights, zero], axis=-1)
    return degree * (padded_left - padded_right)


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
        if hasattr(t, "shape") and ops_for(t).is_torch == ops_for(self.control_points).is_torch:
            return (
                t.to(self.control_points.dtype)
                if hasattr(t, "to")
                else t.astype(self.control_points.dtype)
            )
        return to_like(np.asarray(t, dtype=np.float64), self.control_points)

    def _contract(
        self, weights: Array, out: Array | None = None, grad_buffer: Array | None = None
    ) -> Array:
        r""":math:`\sum_i w_{\dots i} P_i`, shaped ``weights.shape[:-1] + point_shape``.

        One matrix product of the (m, n + 1) weights with the (n + 1, D) control points, written
        into ``out`` when given. In torch, when a graph is recorded, the product goes through
        :class:`BernsteinContraction` (backward: one outer product, into ``grad_buffer`` when
        given and no higher-order graph is requested).
        """
        cp = self.control_points
        k = self.degree + 1
        flat = cp if cp.ndim == 2 else cp.reshape(k, -1)
        lead = tuple(weights.shape[:-1])
        w2 = weights if weights.ndim == 1 else weights.reshape(-1, k)
        if type(cp) is np.ndarray:
            # np.matmul, not np.dot: with out= np.dot is 5-25% slower below ~10^7 entries
            # (measured by benchmarks/bench_curves.py), matmul writes in place at full speed
            if out is None:
                return np.matmul(w2, flat).reshape(lead + self.point_shape)
            np.matmul(w2, flat, out=out.reshape(w2.shape[:-1] + flat.shape[1:]))
            return out
        import torch

        shape = w2.shape[:-1] + flat.shape[1:]
        graph = torch.is_grad_enabled() and (flat.requires_grad or w2.requires_grad)
        if out is None:
            target = None
        elif graph or out.requires_grad or out.shape != shape:
            target = _flat_alias(out, shape)  # out itself must stay free of autograd history
        else:  # the common case: a plain buffer of the right shape, used as it is
            target = out
        if graph:
            gbuf = None if grad_buffer is None else _flat_alias(grad_buffer, flat.shape)
            res = _contraction_function().apply(flat, w2, (target, gbuf))
            return (
                res if res.shape == lead + self.point_shape else res.view(lead + self.point_shape)
            )
        if w2.ndim == 1:
            res = torch.mv(flat.T, w2, out=target)
        else:
            res = torch.mm(w2, flat, out=target)
        return out if out is not None else res.view(lead + self.point_shape)

    def _scalar_weight_array(self, t: float) -> Array:
        """The Bernstein weights at a Python-float t as a 1-D array like the control points.

        The last one is cached by (t, degree, dtype, device): a training loop that evaluates
        at a fixed t pays for the weights once. The cached array is never written to, so it is
        safe to hand to autograd repeatedly.
        """
        cp = self.control_points
        torch_cp = type(cp) is not np.ndarray
        key = (t, self.degree, cp.dtype, cp.device if torch_cp else None)
        cached = self._weight_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        weights = _scalar_weights(self.degree, t)
        if torch_cp:
            import torch

            w = torch.tensor(weights, dtype=cp.dtype, device=cp.device)
        else:
            w = np.asarray(weights, dtype=cp.dtype)
            w.flags.writeable = False
        self._weight_cache = (key, w)
        return w

    def _check_buffer(self, name: str, buf: Array, shape: tuple[int, ...], *others: Array) -> None:
        """Raise a typed error unless ``buf`` can receive a result of ``shape`` in place."""
        cp = self.control_points
        if type(cp) is not np.ndarray:
            self._check_torch_buffer(name, buf, shape, others)
            return
        if not isinstance(buf, np.ndarray):
            raise ParameterError(
                f"BezierCurve: {name} must be a ndarray like the control points, got "
                f"{type(buf).__name__}"
            )
        self._check_shape_dtype(name, buf, shape)
        if not (buf.flags.c_contiguous and buf.flags.writeable):
            raise ParameterError(f"BezierCurve: {name} must be C-contiguous and writeable")
        for other in (cp, *others):
            if other is not None and np.may_share_memory(buf, other):
                raise ParameterError(
                    f"BezierCurve: {name} overlaps an input or another output in memory"
                )

    def _check_shape_dtype(self, name: str, buf: Array, shape: tuple[int, ...]) -> None:
        if tuple(buf.shape) != tuple(shape):
            raise ShapeError(
                f"BezierCurve: {name} has shape {tuple(buf.shape)}; expected {tuple(shape)}"
            )
        if buf.dtype != self.control_points.dtype:
            raise ParameterError(
                f"BezierCurve: {name} has dtype {buf.dtype}; expected "
                f"{self.control_points.dtype} (that of the control points)"
            )

    def _check_torch_buffer(
        self, name: str, buf: Array, shape: tuple[int, ...], others: tuple[Array, ...]
    ) -> None:
        """The torch half of :meth:`_check_buffer`, in few tensor-attribute reads: it runs on
        every call of a training loop that passes buffers, where D may be small."""
        cp = self.control_points
        if not is_torch(buf):
            raise ParameterError(
                f"BezierCurve: {name} must be a {type(cp).__name__} like the control points, "
                f"got {type(buf).__name__}"
            )
        if buf.shape != shape or buf.dtype is not cp.dtype:
            self._check_shape_dtype(name, buf, shape)
        if not buf.is_contiguous() or buf.device != cp.device:
            raise ParameterError(
                f"BezierCurve: {name} must be a contiguous tensor on {cp.device}, like the "
                f"control points"
            )
        if buf.requires_grad and buf.is_leaf:
            raise ParameterError(
                f"BezierCurve: {name} is a leaf tensor that requires grad; it cannot be written "
                f"in place"
            )
        lo = buf.data_ptr()  # contiguous (checked above)
        hi = lo + buf.nbytes
        for other in (cp, *others):
            if other is not None:
                olo, ohi = _byte_span(other)
                if lo < ohi and olo < hi:
                    raise ParameterError(
                        f"BezierCurve: {name} overlaps an input or another output in memory"
                    )

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
            self._check_call_buffers(() if scalar else tuple(np.shape(t)), out, grad_buffer)
        if scalar:
            return self._contract(self._scalar_weight_array(float(t)), out, grad_buffer)
        t = self._t(t)
        if self.euclidean:
            return self._contract(bernstein_weights(self.degree, t), out, grad_buffer)
        res = self._geodesic_de_casteljau(t)
        if out is None:
            return res
        if type(out) is np.ndarray:
            out[...] = res
            return out
        out.detach().copy_(res.detach())  # manifold base: computed, then copied into out
        return res if res.requires_grad else out

    def _check_call_buffers(
        self, t_shape: tuple[int, ...], out: Array | None, grad_buffer: Array | None
    ) -> None:
        if out is not None:
            self._check_buffer("out", out, t_shape + self.point_shape)
        if grad_buffer is not None:
            if type(self.control_points) is np.ndarray:
                raise ParameterError(
                    "BezierCurve: grad_buffer is for torch control points (autograd); with numpy "
                    "use point_and_grad(t, g, out=..., grad_out=...)"
                )
            if not self.euclidean:
                raise ParameterError("BezierCurve: grad_buffer needs a Euclidean base")
            self._check_buffer("grad_buffer", grad_buffer, tuple(self.control_points.shape), out)

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
        if ops_for(g).is_torch != ops_for(cp).is_torch or g.dtype != cp.dtype:
            g = to_like(_numpy(g), cp)
        if out is not None:
            self._check_buffer("out", out, t_shape + self.point_shape, g)
        if grad_out is not None:
            self._check_buffer("grad_out", grad_out, tuple(cp.shape), g, out)
        w = (
            self._scalar_weight_array(float(t))
            if scalar
            else bernstein_weights(self.degree, self._t(t))
        )
        k = self.degree + 1
        w2 = w if w.ndim == 1 else w.reshape(-1, k)
        g2 = g.reshape(w2.shape[:-1] + (-1,))
        if type(cp) is np.ndarray:
            point = self._contract(w, out)
            target = None if grad_out is None else grad_out.reshape(k, -1)
            if w2.ndim == 1:
                grad = np.multiply.outer(w2, g2, out=target)
            else:
                grad = np.matmul(w2.T, g2, out=target)
            return point, grad_out if grad_out is not None else grad.reshape(cp.shape)
        import torch

        with torch.no_grad():
            point = self._contract(w, out)
            target = None if grad_out is None else grad_out.view(k, -1)
            grad = (
                torch.outer(w2, g2, out=target) if w2.ndim == 1 else torch.mm(w2.T, g2, out=target)
            )
        return point, grad_out if grad_out is not None else grad.view(cp.shape)

    def _geodesic_de_casteljau(self, t: Array) -> Array:
        m = self.manifold
        ops = ops_for(t, self.control_points)
        tt = ops.reshape(t, tuple(t.shape) + (1,) * m.ndim)
        points = [self.control_points[i] for i in range(self.degree + 1)]
        for _ in range(self.degree):
            points = [
                m.exp(p, tt * m.log(p, q)) for p, q in zip(points[:-1], points[1:], strict=True)
            ]
        return points[0] + ops.zeros_like(tt)  # broadcast to t's shape when t is not batched

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
                weights = _difference_weights(weights, n - order + k + 1)
            return self._contract(weights)
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
    def _quadratic_coefficients(self):
        """a = B - A, b = A - 2B + C (c(t) = A + 2t a + t^2 b), flattened."""
        ops = ops_for(self.control_points)
        flat = ops.reshape(self.control_points, (3, -1))
        return flat[0], flat[1] - flat[0], flat[0] - 2 * flat[1] + flat[2]

    def arc_length(self, t0: float = 0.0, t1: float = 1.0, *, panels: int = 16) -> Array:
        r"""Arc length :math:`\int_{t_0}^{t_1}\|c'(t)\|\,dt` (negative if ``t1 < t0``).

        Euclidean quadratic: closed form of :math:`\int 2\sqrt{|b|^2u^2 + 2(a\cdot b)u +
        |a|^2}\,du` (digest section 2.3); otherwise ``panels`` panels of 8-point Gauss-Legendre,
        exact to rounding for smooth speeds (polynomial of degree < 16 per panel).
        """
        if self.euclidean and self.degree == 2:
            closed = self._quadratic_arc_length(t0, t1)
            if closed is not None:
                return closed
        return self._gauss_legendre_length(t0, t1, panels)

    def _quadratic_arc_length(self, t0: float, t1: float):
        ops = ops_for(self.control_points)
        _, a, b = self._quadratic_coefficients()
        qa = ops.sum(b * b)  # speed/2 = sqrt(qa t^2 + qb t + qc)
        qb = 2 * ops.sum(a * b)
        qc = ops.sum(a * a)
        scale = ops.to_float(qa) + ops.to_float(qc) + 1e-300
        disc = 4 * qa * qc - qb * qb
        if ops.to_float(qa) <= 1e-12 * scale or ops.to_float(disc) <= 1e-8 * scale * scale:
            return None  # straight (or nearly) curves: Gauss-Legendre is exact and safe there

        def antiderivative(t):
            # int sqrt(qa t^2 + qb t + qc) dt, valid for a positive discriminant 4 qa qc - qb^2
            q = ops.sqrt(qa * t * t + qb * t + qc)
            root = ops.sqrt(qa)
            return (2 * qa * t + qb) * q / (4 * qa) + disc / (8 * qa * root) * ops.arcsinh(
                (2 * qa * t + qb) / ops.sqrt(disc)
            )

        return 2 * (antiderivative(self._t(t1)) - antiderivative(self._t(t0)))

    def _gauss_legendre_length(self, t0: float, t1: float, panels: int) -> Array:
        nodes, weights = np.polynomial.legendre.leggauss(8)
        edges = np.linspace(t0, t1, panels + 1)
        half = 0.5 * (edges[1:] - edges[:-1])
        centre = 0.5 * (edges[1:] + edges[:-1])
        ts = (centre[:, None] + half[:, None] * nodes[None, :]).ravel()
        ws = (half[:, None] * weights[None, :]).ravel()
        speeds = self.speed(ts)
        ops = ops_for(speeds)
        return ops.sum(speeds * self._t(ws))

    def arc_length_at(self, t: Any, *, panels: int = 16) -> Array:
        r""":math:`s(t) = \int_0^t \|c'\|`, elementwise and batched over t (differentiable in
        torch with respect to t and the control points); negative for t < 0."""
        t = self._t(t)
        if self.euclidean and self.degree == 2:
            closed = self._quadratic_arc_length(0.0, t)
            if closed is not None:
                return closed
        nodes, weights = np.polynomial.legendre.leggauss(8)
        edges = np.linspace(0.0, 1.0, panels + 1)
        half = 0.5 * (edges[1:] - edges[:-1])
        taus = (0.5 * (edges[1:] + edges[:-1])[:, None] + half[:, None] * nodes).ravel()
        ws = (half[:, None] * weights).ravel()
        ops = ops_for(t)
        tt = t[..., None] * self._t(taus)
        return t * ops.sum(self.speed(tt) * self._t(ws), axis=-1)

    def parameter_at_arc_length(self, s: Any, *, tol: float = 1e-15) -> np.ndarray:
        """Inverse of :meth:`arc_length_at`: the t with s(t) = s (numpy float64).

        Safeguarded Newton (:math:`ds/dt = \\|c'(t)\\|`) within a bracket grown until it contains
        the target, so values beyond [0, length] extrapolate along the extended curve. All
        targets are solved together (one batched :meth:`arc_length_at` and :meth:`speed` per
        iteration).
        """
        targets = np.asarray(s, dtype=np.float64)
        length = float(_as_float(self.arc_length()))
        if length <= 0:
            raise ParameterError("BezierCurve: the curve has zero length; no arc-length inverse")
        flat = targets.ravel()
        if flat.size == 0:
            return np.empty(targets.shape)

        def s_of(t: np.ndarray) -> np.ndarray:
            return _to_numpy(self.arc_length_at(t))

        lo, hi = np.zeros_like(flat), np.ones_like(flat)
        s_lo, s_hi = s_of(lo), s_of(hi)
        while np.any(grow := s_lo > flat):
            lo = np.where(grow, lo - np.maximum(1.0, hi - lo), lo)
            s_lo = s_of(lo)
        while np.any(grow := s_hi < flat):
            hi = np.where(grow, hi + np.maximum(1.0, hi - lo), hi)
            s_hi = s_of(hi)
        t = lo + (hi - lo) * (flat - s_lo) / np.maximum(s_hi - s_lo, 1e-300)
        threshold = tol * np.maximum(max(1.0, length), np.abs(flat))
        for _ in range(100):
            f = s_of(t) - flat
            active = np.abs(f) > threshold
            if not active.any():
                break
            hi = np.where(active & (f > 0), t, hi)
            lo = np.where(active & (f <= 0), t, lo)
            speed = _to_numpy(self.speed(t))
            mid = 0.5 * (lo + hi)
            with np.errstate(divide="ignore", invalid="ignore"):
                step = np.where(speed > 0, t - f / speed, mid)
            step = np.where((lo < step) & (step < hi), step, mid)
            t = np.where(active, step, t)
        return t.reshape(targets.shape)

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
                gen.uniform(0.0, 1.0, size=n) * float(_as_float(self.arc_length()))
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
        (A-\theta)\cdot b)t + (A-\theta)\cdot a` (digest section 2.3), compared with the
        endpoints. Euclidean of another degree n: the real roots of the degree-(2n - 1) derivative
        of the squared distance, a polynomial whose coefficients come from the power-basis
        coefficients of the curve (:meth:`_polynomial_closest`; global, all queries at once).
        Manifold base: a safeguarded Newton iteration on :math:`\tfrac12\|c(t)-a\|^2` from
        ``starts`` equally spaced starting points (``starts`` is used there only). Returns
        ``(t, distance)``; t as numpy float64, the distance in the control points' array type.
        """
        ops = ops_for(self.control_points)
        a = a if hasattr(a, "shape") else np.asarray(a)
        a = to_like(a, self.control_points) if ops.is_torch != ops_for(a).is_torch else a
        ps = self.point_shape
        if tuple(a.shape[len(a.shape) - len(ps) :]) != ps:
            raise ShapeError(
                f"BezierCurve.closest_point: a has shape {tuple(a.shape)}; expected (..., "
                f"{', '.join(map(str, ps))})"
            )
        batch = tuple(a.shape[: len(a.shape) - len(ps)])
        if self.euclidean and self.degree == 2:
            thetas = ops.reshape(a, (-1, math.prod(ps)))
            cp_view, theta_view = _numpy_views(self.control_points, thetas)
            if cp_view is not None:  # CPU tensors, no graph: the same memory through numpy
                t, dist = self._quadratic_closest(theta_view, extended, cp_view)
                return t.reshape(batch), to_like(dist, a).reshape(batch)
            t, dist = self._quadratic_closest(thetas, extended)
            return t.reshape(batch), ops.reshape(dist, batch)
        flat = np.reshape(_numpy(a), (-1, math.prod(ps)))
        if self.euclidean:
            t = self._polynomial_closest(flat, extended)
        else:
            t = np.array([self._newton_closest(row, extended, starts) for row in flat])
        t = t.reshape(batch)
        diff = self(t) - a
        axes = tuple(range(-len(ps), 0))
        return t, ops_for(diff).sqrt(ops_for(diff).sum(diff * diff, axis=axes))

    def like(self, x: Array) -> BezierCurve:
        """This curve with control points of x's array type, dtype and device (self if same)."""
        cp = self.control_points
        same = ops_for(x).is_torch == ops_for(cp).is_torch and x.dtype == cp.dtype
        if same and (not hasattr(x, "device") or x.device == cp.device):
            return self
        return BezierCurve(to_like(_numpy(cp), x), self.manifold)

    def closest_parameter(self, a: Array, *, extended: bool = False) -> Array:
        r""":math:`t^*(a)` as an array of a's type; differentiable in torch.

        The parameter is found by :meth:`closest_point`; with torch inputs one Newton step on
        :math:`g(t) = \langle c'(t), c(t) - a\rangle` at the solution then gives the exact first
        derivative :math:`dt^*/da = -\partial_a g / g'` (implicit function theorem), applied
        where :math:`t^*` is interior (at a clipped endpoint the derivative is 0).
        """
        t_np, _ = self.closest_point(_numpy(a), extended=extended)
        curve = self.like(a)
        t = curve._t(t_np)
        if ops_for(a).is_torch and a.requires_grad:
            ops = ops_for(a)
            axes = tuple(range(-len(self.point_shape), 0))
            c, v, acc = curve(t), curve.velocity(t), curve.acceleration(t)
            g = ops.sum(v * (c - a), axis=axes)
            h = ops.sum(v * v, axis=axes) + ops.sum(acc * (c - a), axis=axes)
            step = t - g / h
            if not extended:
                interior = (t > 0) & (t < 1)
                step = ops.where(interior, step, t)
            t = step
        return t

    def _quadratic_closest(
        self, thetas: Array, extended: bool, control_points: Array | None = None
    ) -> tuple[np.ndarray, Array]:
        r"""Closest parameters and distances of a quadratic for the rows of ``thetas`` (m, D).

        Everything comes from inner products of D-vectors, computed in the data's own backend and
        dtype by :func:`_gram_products`, without forming :math:`u = B - A`, :math:`v = A - 2B +
        C` or :math:`d = A - \theta` (each would be another pass over D values): the Gram matrix
        :math:`G = P P^\top` of the control points, the products :math:`P\theta` and
        :math:`\theta^\top\theta`. With the fixed coefficient vectors :math:`\alpha = (-1, 1,
        0)` and :math:`\beta = (1, -2, 1)` (:math:`u = \alpha^\top P`, :math:`v = \beta^\top
        P`),

        .. math::
            u\cdot u = \alpha^\top G\alpha,\quad u\cdot v = \alpha^\top G\beta,\quad
            v\cdot v = \beta^\top G\beta,\quad d\cdot u = G_0\alpha - \alpha^\top P\theta,
            \quad d\cdot v = G_0\beta - \beta^\top P\theta,

        and the stationary points of :math:`\|c(t) - \theta\|^2` are the real roots of
        :math:`(v\cdot v)t^3 + 3(u\cdot v)t^2 + (2u\cdot u + d\cdot v)t + d\cdot u`; the cubic
        and the choice among its roots are small float64 algebra. The distance is
        :math:`\sqrt{w^\top G w - 2 w^\top P\theta + \theta^\top\theta}`, recomputed
        explicitly from :math:`c(t) - \theta` where that difference of squares would cancel
        (below 1e-6 of :math:`\theta^\top\theta`). Differentiable in torch (the distance's
        derivative with respect to t vanishes at the optimum).
        """
        cp = self.control_points if control_points is None else control_points
        ops = ops_for(thetas, cp)
        flat = ops.reshape(cp, (3, -1))
        gram_t, cross_t, norms_t = _gram_products(flat, thetas)
        gram, cross = _numpy(gram_t), _numpy(cross_t)
        alpha = np.array([-1.0, 1.0, 0.0])  # a = B - A
        beta = np.array([1.0, -2.0, 1.0])  # b = A - 2B + C
        bb, ab, aa = beta @ gram @ beta, alpha @ gram @ beta, alpha @ gram @ alpha
        db = gram[0] @ beta - beta @ cross  # (A - theta) . b
        da = gram[0] @ alpha - alpha @ cross  # (A - theta) . a
        gl = gram.tolist()
        ts = np.empty(thetas.shape[0])
        best_d2 = np.empty(thetas.shape[0])
        for k in range(thetas.shape[0]):
            coeffs = np.array([bb, 3 * ab, 2 * aa + db[k], da[k]])
            scale = np.max(np.abs(coeffs)) or 1.0
            lead = int(np.argmax(np.abs(coeffs) > 1e-13 * scale))
            cands = real_polynomial_roots(coeffs[lead:].tolist()) if lead < 3 else []
            if not extended:
                cands = [min(max(c, 0.0), 1.0) for c in cands] + [0.0, 1.0]
            ck = cross[:, k].tolist()
            best_d2[k] = np.inf
            for c in cands or [0.0]:  # |c(t) - theta|^2 - |theta|^2 = w.G.w - 2 w.(P theta)
                w = _scalar_weights(2, float(c))
                d2 = sum(
                    w[i] * (sum(gl[i][j] * w[j] for j in range(3)) - 2 * ck[i]) for i in range(3)
                )
                if d2 < best_d2[k]:
                    ts[k], best_d2[k] = c, d2
        if ops.is_torch:
            return ts, self._closest_distance_torch(ts, flat, thetas, gram_t, cross_t, norms_t)
        norms = norms_t.astype(np.float64)
        d2 = best_d2 + norms
        bad = d2 <= 1e-6 * norms
        if bad.any():  # cancellation: recompute those explicitly (one pass each, in place)
            weights = np.asarray(bernstein_weights(2, ts[bad]))
            for k, row in zip(np.flatnonzero(bad), weights, strict=True):
                diff = np.matmul(row.astype(flat.dtype), flat)
                diff -= thetas[k]
                d2[k] = float(np.dot(diff, diff))
        return ts, np.sqrt(np.maximum(d2, 0.0)).astype(thetas.dtype)

    @staticmethod
    def _closest_distance_torch(ts, flat, thetas, gram_t, cross_t, norms_t):
        """Distances at the parameters ``ts`` in torch ops (differentiable in the data)."""
        ops = ops_for(thetas)
        weights = ops.asarray(np.asarray(bernstein_weights(2, ts)), thetas)  # (m, 3)
        quad = ops.sum((weights @ gram_t) * weights, axis=-1)
        lin = ops.sum(weights * ops.mT(cross_t), axis=-1)
        d2 = quad - 2 * lin + norms_t
        bad = d2 <= 1e-6 * norms_t
        if ops.any(bad):  # cancellation: recompute those explicitly
            import torch

            diff = torch.addmm(thetas, weights, flat, beta=-1.0)  # c(t_k) - theta_k, one pass
            if diff.shape[0] <= _GEMV_ROWS:
                exact = torch.stack([torch.dot(row, row) for row in diff])
            else:
                exact = ops.sum(diff * diff, axis=-1)
            d2 = ops.where(bad, exact, d2)
        return ops.sqrt(ops.maximum(d2, 0.0))

    def _polynomial_closest(self, thetas: np.ndarray, extended: bool) -> np.ndarray:
        r"""Global closest parameters of a Euclidean curve of any degree for the rows of
        ``thetas`` (m, D), all rows at once.

        With the power-basis coefficients :math:`a_j` (:func:`power_basis_matrix`) and
        :math:`e = P_0 - \theta`, the squared distance is the polynomial

        .. math::
            f(t) = \|c(t) - \theta\|^2 = \sum_{s=0}^{2n} t^s \sum_{j+l=s} H_{jl},
            \qquad H = \begin{pmatrix} e\cdot e & e\cdot a_l \\ a_j\cdot e & a_j\cdot a_l
            \end{pmatrix}_{j,l\ge1}

        (only the first row and column depend on the query; :math:`e` is formed explicitly, so
        nothing cancels however far :math:`\theta` is from the origin). The stationary points
        are the roots of :math:`f'`, of degree 2n - 1 (the trailing zero coefficients of a
        curve of lower true degree removed): the eigenvalues of its companion matrix, batched
        over the queries. The real ones (up to a relative imaginary part of 1e-6: rounding splits
        a double root into a close complex pair) and, on [0, 1], the endpoints are the
        candidates; each is clipped to the range, polished by guarded Newton steps on
        :math:`f'` to convergence and scored by f; the best is returned. Global for every
        degree, unlike a multi-start local search, and O(k^2) per query after one pass over
        the query (the quadratic has its own cheaper path)."""
        k = self.degree + 1
        flat = np.reshape(_numpy(self.control_points), (k, -1))
        coef = power_basis_matrix(self.degree) @ flat
        norms = np.sqrt(np.einsum("ij,ij->i", coef[1:], coef[1:]))
        # the curve's true degree: drop power coefficients at the rounding level of the control
        # points (a degree-elevated curve, a segment at uniform speed, a single point)
        scale = float(np.sqrt(np.einsum("ij,ij->i", flat, flat)).max())
        top = k - 1
        while top > 0 and norms[top - 1] <= 64 * np.finfo(float).eps * scale:
            top -= 1
        m = thetas.shape[0]
        if top == 0:  # every point of the curve is the same: any parameter is closest
            return np.zeros(m)
        gram = coef[1 : top + 1] @ coef[1 : top + 1].T
        ts = np.empty(m)
        chunk = max(1, (1 << 22) // max(1, thetas.shape[1]))  # bound the (rows, D) temporary
        for lo in range(0, m, chunk):
            e = coef[0] - thetas[lo : lo + chunk]
            rows = e.shape[0]
            h = np.empty((rows, top + 1, top + 1))
            h[:, 0, 0] = np.einsum("ij,ij->i", e, e)
            h[:, 0, 1:] = e @ coef[1 : top + 1].T
            h[:, 1:, 0] = h[:, 0, 1:]
            h[:, 1:, 1:] = gram
            ts[lo : lo + rows] = _minimise_quadratic_form_polynomial(h, extended)
        return ts

    def _newton_closest(self, theta: np.ndarray, extended: bool, starts: int) -> float:
        curve = self if not ops_for(self.control_points).is_torch else self._numpy_copy()

        def parts(t):
            c = np.reshape(np.asarray(curve(t)), -1) - theta
            v = np.reshape(np.asarray(curve.velocity(t)), -1)
            acc = np.reshape(np.asarray(curve.acceleration(t)), -1)
            return c, v, acc

        lo, hi = (-np.inf, np.inf) if extended else (0.0, 1.0)
        best_t, best = 0.0, np.inf
        candidates = list(np.linspace(0.0, 1.0, starts)) + ([] if extended else [0.0, 1.0])
        for t in candidates:
            for _ in range(50):
                c, v, acc = parts(t)
                g, h = c @ v, v @ v + c @ acc
                step = g / h if h > 0 else g / max(v @ v, 1e-300)
                new = min(max(t - step, lo), hi)
                if abs(new - t) <= 1e-14 * max(1.0, abs(t)):
                    t = new
                    break
                t = new
            c = np.reshape(np.asarray(curve(t)), -1) - theta
            if c @ c < best:
                best_t, best = float(t), float(c @ c)
        return best_t

    def _numpy_copy(self) -> BezierCurve:
        return BezierCurve(_numpy(self.control_points), self.manifold)


#: most Newton steps polishing the closest-point candidates (the loop stops as soon as none
#: moves). A root of f' a real part 1e-2 off is exact in four (quadratic convergence), but an
#: end point of [0, 1] is a candidate too and may start far from the stationary point its Newton
#: steps reach: left half-way, it can tie with that point in f to rounding and be ranked first
#: while not stationary (found by the thorough hypothesis profile: slope 3.7e-8 after 8 steps)
_POLISH_STEPS = 64
#: largest |imaginary part| / max(1, |real part|) of an eigenvalue taken as a real root of f'
_REAL_ROOT_TOL = 1e-6


def _minimise_quadratic_form_polynomial(h: np.ndarray, extended: bool) -> np.ndarray:
    r"""Global minimisers of :math:`f_r(t) = T^\top H_r T`, :math:`T = (1, t, \dots, t^q)`, for
    each of the (r, q + 1, q + 1) symmetric positive semidefinite ``h``; over [0, 1], or the real
    line with ``extended`` (f has positive leading coefficient :math:`H_{qq}`, so a minimiser
    exists). See :meth:`BezierCurve._polynomial_closest`.
    """
    rows, q1 = h.shape[0], h.shape[1]
    q = q1 - 1
    # f's coefficients, lowest first: sums of the anti-diagonals of H
    f = np.zeros((rows, 2 * q + 1))
    for j in range(q1):
        f[:, j : j + q1] += h[:, j, :]
    df = f[:, 1:] * np.arange(1, 2 * q + 1)  # f', degree 2q - 1, leading coefficient > 0
    d2f = df[:, 1:] * np.arange(1, 2 * q)
    deg = 2 * q - 1
    companion = np.zeros((rows, deg, deg))
    if deg > 1:
        companion[:, np.arange(1, deg), np.arange(deg - 1)] = 1.0
    companion[:, :, -1] = -df[:, :deg] / df[:, deg : deg + 1]
    roots = np.linalg.eigvals(companion)
    # a root is real up to rounding (a double root of f' splits into a pair about sqrt(eps)
    # apart); a pair further off the axis is not a stationary point at all and is left out
    real = np.abs(roots.imag) <= _REAL_ROOT_TOL * np.maximum(1.0, np.abs(roots.real))
    cands = roots.real
    lo, hi = (-np.inf, np.inf) if extended else (0.0, 1.0)
    if not extended:
        cands = np.clip(np.concatenate([cands, np.zeros((rows, 1)), np.ones((rows, 1))], 1), 0, 1)
        real = np.concatenate([real, np.ones((rows, 2), dtype=bool)], 1)
    # f' has odd degree, so every row keeps a real root; a left-out slot repeats the row's
    # first kept candidate (harmless in the ranking below)
    first = cands[np.arange(rows), np.argmax(real, axis=1)]
    cands = np.where(real, cands, first[:, None])
    # polish: Newton on f' where f is convex, kept in range, to convergence (quadratic: a few
    # steps) so that f ranks exact stationary points
    for _ in range(_POLISH_STEPS):
        g, curv = _horner(df, cands), _horner(d2f, cands)
        with np.errstate(divide="ignore", invalid="ignore"):
            stepped = np.clip(cands - g / curv, lo, hi)
        new = np.where((curv > 0) & np.isfinite(stepped), stepped, cands)
        moved = np.abs(new - cands) > 4 * np.finfo(float).eps * np.maximum(1.0, np.abs(cands))
        cands = new
        if not moved.any():
            break
    best = np.argmin(_horner(f, cands), axis=1)
    return cands[np.arange(rows), best]


def _horner(coeffs: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Row r of the polynomials ``coeffs`` (rows, degree + 1; lowest first) at the (rows, c)
    points ``t[r]``."""
    out = np.broadcast_to(coeffs[:, -1:], t.shape).copy()
    for j in range(coeffs.shape[1] - 2, -1, -1):
        out *= t
        out += coeffs[:, j : j + 1]
    return out


def _gram_products(flat: Array, thetas: Array) -> tuple[Array, Array, Array]:
    r"""Inner products for the closest-point query: :math:`G = P P^\top` (k, k), :math:`P
    \Theta^\top` (k, m) and the squared norms of the rows of :math:`\Theta` (m,).

    ``flat`` is (k, D), ``thetas`` (m, D). The k(k+1)/2 distinct entries of G are dot products of
    rows (each reads two D-vectors at the speed of the memory, where a BLAS ``syrk``/``gemm`` of
    such flat matrices is several times slower than a memory pass), :math:`P\theta` one
    matrix-vector product per query row (a product with an (D, 1) matrix would go through
    ``gemm`` too), the norms dot products. Nothing of size D is allocated. Differentiable in torch.
    """
    k, m = flat.shape[0], thetas.shape[0]
    entries = {(i, j): flat[i] @ flat[j] for i in range(k) for j in range(i, k)}
    rows = [[entries[min(i, j), max(i, j)] for j in range(k)] for i in range(k)]
    if type(flat) is np.ndarray and type(thetas) is np.ndarray:
        gram = np.array(rows)
        if m <= _GEMV_ROWS:
            cross = np.stack([flat @ row for row in thetas], axis=-1)
            norms = np.array([row @ row for row in thetas])
        else:
            cross = flat @ thetas.T
            norms = np.einsum("ij,ij->i", thetas, thetas)
        return gram, cross, norms
    import torch

    gram = torch.stack([torch.stack(r) for r in rows])
    if m <= _GEMV_ROWS:
        cross = torch.stack([torch.mv(flat, row) for row in thetas], dim=-1)
        norms = torch.stack([torch.dot(row, row) for row in thetas])
    else:
        cross = flat @ thetas.T
        norms = torch.sum(thetas * thetas, dim=-1)
    return gram, cross, norms


# up to this many closest-point queries at once, one matrix-vector product per query
_GEMV_ROWS = 8


def _numpy_views(cp: Array, thetas: Array) -> tuple[np.ndarray | None, np.ndarray | None]:
    """numpy views of CPU torch tensors that need no autograd graph (no copy), else Nones.

    Lets the closest-point query of such tensors run its many small steps at numpy's (lower)
    per-call cost; numpy inputs come back as they are.
    """
    if type(cp) is np.ndarray:
        return cp, thetas
    import torch

    needs_graph = torch.is_grad_enabled() and (cp.requires_grad or thetas.requires_grad)
    if (
        needs_graph
        or cp.device.type != "cpu"
        or thetas.device.type != "cpu"
        or cp.dtype not in (torch.float32, torch.float64)
        or thetas.dtype != cp.dtype
    ):
        return None, None
    return cp.detach().numpy(), thetas.detach().numpy()


def _flat_alias(buf, shape):
    """A tensor sharing ``buf``'s (contiguous) memory, of ``shape``, without autograd history."""
    alias = buf.detach()
    return alias if alias.shape == shape else alias.view(shape)


def _byte_span(x) -> tuple[int, int]:
    """Half-open byte range ``[lo, hi)`` spanned by a torch tensor (non-negative strides)."""
    lo = x.data_ptr()
    if x.is_contiguous():
        return lo, lo + x.nbytes
    extent = 1 + sum((n - 1) * st for n, st in zip(x.shape, x.stride(), strict=True) if n > 0)
    return lo, lo + (extent if x.numel() else 0) * x.element_size()


@functools.cache
def _contraction_function():
    """Build :class:`BernsteinContraction` on first use (torch is an optional dependency)."""
    import torch

    class BernsteinContraction(torch.autograd.Function):
        r"""The Bernstein contraction :math:`c = W P` as one autograd node.

        ``flat`` (k, D) holds the control points, ``weights`` is (k,) (one point) or (m, k); the
        output is (D,) or (m, D). Backward:

        .. math::
            \frac{\partial L}{\partial P} = W^\top \bar c \quad(\text{for one point the outer
            product } w \bar c^\top), \qquad \frac{\partial L}{\partial W} = \bar c P^\top,

        each one pass over the (k, D) data: autograd's generic matrix-product node would form the
        same products through transposed views and an extra reshape node. ``buffers`` =
        ``(out, grad_buffer)`` (either None): the forward result is written into ``out`` and, when
        no higher-order graph is requested, the gradient of ``flat`` into ``grad_buffer``. They
        are passed inside a tuple so that autograd does not treat them as inputs.
        """

        @staticmethod
        def forward(ctx, flat, weights, buffers):
            out, grad_buffer = buffers
            ctx.save_for_backward(weights, flat if ctx.needs_input_grad[1] else None)
            ctx.grad_buffer = grad_buffer
            if weights.ndim == 1:
                return torch.mv(flat.T, weights, out=out)
            return torch.mm(weights, flat, out=out)

        @staticmethod
        def backward(ctx, grad):
            weights, flat = ctx.saved_tensors
            grad_flat = grad_weights = None
            if ctx.needs_input_grad[0]:
                # reuse the caller's buffer only when the gradient itself needs no graph
                buf = None if torch.is_grad_enabled() else ctx.grad_buffer
                if weights.ndim == 1:
                    grad_flat = torch.outer(weights, grad, out=buf)
                else:
                    grad_flat = torch.mm(weights.T, grad, out=buf)
            if ctx.needs_input_grad[1]:
                grad_weights = torch.mv(flat, grad) if weights.ndim == 1 else grad @ flat.T
            return grad_flat, grad_weights, None

    return BernsteinContraction


def _numpy(a) -> np.ndarray:
    if hasattr(a, "detach"):
        return a.detach().cpu().numpy().astype(np.float64)
    return np.asarray(a, dtype=np.float64)


def _as_float(a) -> float:
    return float(a.detach()) if hasattr(a, "detach") else float(a)


def _to_numpy(a) -> np.ndarray:
    """A float64 numpy copy of an array or tensor (detached)."""
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.asarray(a, dtype=np.float64)

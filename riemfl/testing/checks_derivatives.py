"""Checks of the gradient and Hessian conversions: ``egrad_to_rgrad`` against finite
differences, and ``ehess_to_rhess`` (for the quadratic test function
:class:`QuadraticFunction`) self-adjoint, second-order Taylor accurate and the derivative of the
transported Riemannian gradient."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..manifolds.base import Manifold
from .assertions import assert_close
from .config import Tolerance, to_numpy
from .slopes import TAYLOR_TS, fitted_slope

__all__ = [
    "check_egrad_to_rgrad",
    "QuadraticFunction",
    "quadratic_function",
    "check_ehess_to_rhess_symmetric",
    "check_ehess_to_rhess_taylor",
    "check_ehess_to_rhess_gradient",
]


def check_egrad_to_rgrad(manifold: Manifold, x: np.ndarray, v: np.ndarray, rng) -> None:
    """Riemannian gradient of a random smooth function against finite differences.

    :math:`f(a) = \\langle C, a\\rangle + \\tfrac12\\langle D \\circ a, a\\rangle`; then
    :math:`\\frac{d}{dt} f(R_x(tv))|_{t=0} = \\langle \\mathrm{grad} f(x), v\\rangle_x`, the
    derivative taken by central differences (float64).
    """
    c = rng.standard_normal(x.shape)
    d = rng.standard_normal(x.shape)

    def f(a):
        a = to_numpy(a)
        return float(np.sum(c * a) + 0.5 * np.sum(d * a * a))

    rgrad = manifold.egrad_to_rgrad(x, c + d * x)
    manifold.check_tangent(x, rgrad)
    h = 1e-5
    fd = (f(manifold.retract(x, h * v)) - f(manifold.retract(x, -h * v))) / (2 * h)
    exact = float(to_numpy(manifold.inner(x, rgrad, v)))
    scale = float(np.sqrt(np.sum(c * c)) + np.sqrt(np.sum((d * x) ** 2))) * float(
        np.sqrt(np.sum(v * v))
    )
    if abs(fd - exact) > 1e-6 * max(1.0, scale):
        raise AssertionError(
            f"{manifold.name}: <egrad_to_rgrad(x, g), v> = {exact:.8e} but the finite-difference "
            f"derivative along R_x(tv) is {fd:.8e}"
        )


# --------------------------------------------------------------------------- second order
@dataclass(frozen=True)
class QuadraticFunction:
    r"""The test function of the Hessian checks, :math:`\bar f(a) = \langle c, a\rangle +
    \tfrac12\langle a, B a\rangle` on the ambient space, B symmetric on the flattened
    coordinates: :math:`\nabla\bar f(a) = c + Ba` and :math:`\nabla^2\bar f(a)[u] = Bu` in
    closed form. numpy float64, batched over leading dimensions (:func:`quadratic_function`
    draws one).

    Attributes
    ----------
    c : numpy.ndarray
        Shape ``point_shape``.
    b : numpy.ndarray
        Symmetric, shape ``(N, N)`` with N the number of ambient coordinates.
    """

    c: np.ndarray
    b: np.ndarray

    def _flat(self, a) -> np.ndarray:
        a = to_numpy(a)
        return np.reshape(a, a.shape[: a.ndim - self.c.ndim] + (self.c.size,))

    def _shaped(self, flat: np.ndarray) -> np.ndarray:
        return np.reshape(flat, flat.shape[:-1] + self.c.shape)

    def cost(self, a) -> np.ndarray:
        r""":math:`\bar f(a)`, one value per point."""
        fa = self._flat(a)
        return fa @ self.c.ravel() + 0.5 * np.sum(fa * (fa @ self.b), axis=-1)

    def egrad(self, a) -> np.ndarray:
        """The Euclidean gradient :math:`c + Ba`."""
        return self._shaped(self.c.ravel() + self._flat(a) @ self.b)

    def ehess(self, a, u) -> np.ndarray:
        """The Euclidean Hessian-vector product :math:`Bu` (the same at every a)."""
        return self._shaped(self._flat(u) @ self.b) + 0.0 * to_numpy(a)


def quadratic_function(
    shape: tuple[int, ...], rng: np.random.Generator, *, rotation_invariant: bool = False
) -> QuadraticFunction:
    r"""A random :class:`QuadraticFunction` on the ambient space of points of ``shape``.

    Gaussian c and :math:`B = (W + W^\top)/2`, W Gaussian. With ``rotation_invariant`` (points
    that are n x p matrices): :math:`\bar f(X) = \tfrac12\mathrm{tr}(X^\top S X)`, S symmetric
    n x n, unchanged by :math:`X \mapsto XQ` for orthogonal Q, so a function of the column
    space (of a point of the Grassmann quotient); the Hessian of a quotient is only defined for
    such functions.
    """
    shape = tuple(int(s) for s in shape)
    size = math.prod(shape)
    if rotation_invariant:
        if len(shape) != 2:
            raise ValueError(f"rotation_invariant needs matrix points, got shape {shape}")
        w = rng.standard_normal((shape[0], shape[0]))
        return QuadraticFunction(np.zeros(shape), np.kron(0.5 * (w + w.T), np.eye(shape[1])))
    w = rng.standard_normal((size, size))
    return QuadraticFunction(rng.standard_normal(shape), 0.5 * (w + w.T))


def check_ehess_to_rhess_symmetric(manifold: Manifold, x, u, v, g, hu, hv, tol: Tolerance) -> None:
    r"""The Riemannian Hessian of a function is self-adjoint in the metric, tangent and linear.

    ``g`` is the Euclidean gradient :math:`\nabla\bar f(x)` and ``hu``, ``hv`` the Euclidean
    Hessian-vector products :math:`\nabla^2\bar f(x)[u]`, :math:`\nabla^2\bar f(x)[v]` of
    one function (e.g. a :class:`QuadraticFunction`). Checks :math:`\langle \operatorname{Hess}
    f(x)[u], v\rangle_x = \langle u, \operatorname{Hess} f(x)[v]\rangle_x`, that the result
    is tangent, and that the map is linear in :math:`(h, u)`.
    """
    hess_u = manifold.ehess_to_rhess(x, g, hu, u)
    hess_v = manifold.ehess_to_rhess(x, g, hv, v)
    manifold.check_tangent(x, hess_u, atol=max(tol.atol, manifold.default_atol(x)) * 10)
    left, right = manifold.inner(x, hess_u, v), manifold.inner(x, u, hess_v)
    assert_close(left, right, tol, "<Hess[u], v> = <u, Hess[v]> (self-adjoint)", manifold)
    both = manifold.ehess_to_rhess(x, g, 2.0 * hu - 3.0 * hv, 2.0 * u - 3.0 * v)
    expected = 2.0 * to_numpy(hess_u) - 3.0 * to_numpy(hess_v)
    assert_close(both, expected, tol, "Hess f(x) linear", manifold)


def _second_order_curve(manifold: Manifold) -> tuple[Callable, str]:
    if manifold.supports("exp")[0]:
        return manifold.exp, "exp"
    return manifold.retract, "the retraction (no exp: it must be second order)"


def check_ehess_to_rhess_taylor(
    manifold: Manifold, x: np.ndarray, u: np.ndarray, function: QuadraticFunction
) -> None:
    r"""The second-order Taylor expansion of f along exp holds to :math:`O(t^3)` (float64).

    With :math:`c(t) = \mathrm{Exp}_x(tu)` (or :math:`R_x(tu)` where the manifold has no exp;
    the retraction must then be second order), the error

    .. math::
        e(t) = \big|f(c(t)) - f(x) - t\langle \operatorname{grad} f(x), u\rangle_x
        - \tfrac{t^2}{2}\langle \operatorname{Hess} f(x)[u], u\rangle_x\big|

    has Taylor slope 3 on a log-log plot (pymanopt's ``check_hessian`` fits the same slope
    along its retraction), fitted over the four smallest steps above rounding; the check accepts
    >= 2.75 (the fit's noise). A wrong Hessian
    leaves a :math:`t^2` term: slope 2. Where the :math:`t^3` coefficient happens to be small, the
    :math:`t^4` term can cancel it within the steps (or rounding hide the small steps) and bend the
    fit below 3. The check then looks at the even part :math:`|f(c(t)) + f(c(-t)) - 2f(x) -
    t^2\langle \operatorname{Hess} f(x)[u], u\rangle_x|`, which has no odd terms (the gradient
    drops out): :math:`O(t^4)` for the right Hessian, :math:`t^2` times the error of a wrong one.
    It passes if that slope is >= 3.5.
    """
    curve, along = _second_order_curve(manifold)
    g = function.egrad(x)
    f0 = float(function.cost(x))
    slope1 = float(to_numpy(manifold.inner(x, manifold.egrad_to_rgrad(x, g), u)))
    hess_u = manifold.ehess_to_rhess(x, g, function.ehess(x, u), u)
    slope2 = float(to_numpy(manifold.inner(x, hess_u, u)))

    def f(t: float) -> float:
        return float(function.cost(to_numpy(curve(x, t * u))))

    ts = TAYLOR_TS
    errors = np.array([abs(f(t) - f0 - t * slope1 - 0.5 * t * t * slope2) for t in ts])
    scale = max(abs(f0), abs(slope1), abs(slope2))
    slope = fitted_slope(errors, x, scale, window=4)
    if slope is None or slope >= 2.75:
        return
    even = np.array([abs(f(t) + f(-t) - 2.0 * f0 - t * t * slope2) for t in ts])
    even_slope = fitted_slope(even, x, scale, window=4)
    if even_slope is None or even_slope >= 3.5:
        return
    raise AssertionError(
        f"{manifold.name}: f(c(t)) - (f(x) + t <grad, u> + t^2/2 <Hess[u], u>) along {along} is "
        f"not O(t^3): Taylor slope {slope:.2f} < 3 (errors {errors[0]:.2e} .. {errors[-1]:.2e}); "
        f"its even part has slope {even_slope if even_slope is None else round(even_slope, 2)} "
        "(4 expected)"
    )


def check_ehess_to_rhess_gradient(
    manifold: Manifold, x: np.ndarray, u: np.ndarray, function: QuadraticFunction
) -> None:
    r""":math:`\operatorname{Hess} f(x)[u] = \frac{d}{dt}\mathcal T_{c(t)\to x}
    \operatorname{grad} f(c(t))\big|_{t=0}`, by central differences (float64).

    Where the manifold has exp and parallel transport, :math:`c(t) = \mathrm{Exp}_x(tu)` and
    :math:`\mathcal T` the parallel transport back to x: this is the definition of the
    Levi-Civita connection, for any metric. Otherwise c is the retraction and
    :math:`\mathcal T` the manifold's ``transport``, which is right when the transport's
    derivative at t = 0 is the connection: the projection onto :math:`T_xM` of a Riemannian
    submanifold of a Euclidean space (the covariant derivative is the projected derivative,
    whatever the curve). The finite-difference Hessian of Boumal 2015 is the one-sided version of
    this quotient.
    """
    if manifold.supports("exp")[0] and manifold.supports("parallel_transport")[0]:
        curve, back, how = manifold.exp, manifold.parallel_transport, "exp, parallel transport"
    else:
        curve, back, how = manifold.retract, manifold.transport, "retraction, transport"

    def transported_gradient(s: float) -> np.ndarray:
        y = curve(x, s * u)
        return to_numpy(back(y, x, manifold.egrad_to_rgrad(y, function.egrad(y))))

    h = 1e-5
    fd = (transported_gradient(h) - transported_gradient(-h)) / (2 * h)
    exact = to_numpy(manifold.ehess_to_rhess(x, function.egrad(x), function.ehess(x, u), u))
    err = float(np.max(np.abs(fd - exact)))
    scale = max(1.0, float(np.max(np.abs(exact))), float(np.max(np.abs(function.egrad(x)))))
    if err > 1e-6 * scale:
        raise AssertionError(
            f"{manifold.name}: ehess_to_rhess differs from the derivative of the transported "
            f"Riemannian gradient ({how}; central differences) by {err:.3e} > {1e-6 * scale:.1e}"
        )

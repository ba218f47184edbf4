r"""What :func:`~riemfl.adapters.pymanopt.solve` is made of: its choices, objective, Hessian.

The optimizers, backends and Hessian modes it accepts, the :class:`SolveResult` it returns, the
objective it hands pymanopt (a problem's or a cost function), and the Riemannian Hessian for
trust regions: exact where a Euclidean Hessian-vector product exists, else
:func:`finite_difference_hessian`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from riemfl.adapters._pymanopt_manifold import as_float64

from riemfl.errors import ParameterError
from riemfl.manifolds.base import Manifold

__all__ = [
    "OPTIMIZERS",
    "BACKENDS",
    "HESSIANS",
    "SolveResult",
    "finite_difference_hessian",
    "cost_and_gradient",
    "exact_hessian",
]

#: pymanopt optimizers :func:`solve` runs, by riemfl name
OPTIMIZERS = {
    "trust_regions": "TrustRegions",
    "steepest_descent": "SteepestDescent",
    "conjugate_gradient": "ConjugateGradient",
}
#: riemfl backend name -> pymanopt's decorator in ``pymanopt.function``
BACKENDS = {"numpy": "numpy", "autograd": "autograd", "torch": "pytorch"}
#: how :func:`solve` gives trust regions Hessian-vector products
HESSIANS = ("auto", "exact", "finite_difference")


@dataclass
class SolveResult:
    """What :func:`solve` returns.

    Attributes
    ----------
    point : numpy.ndarray
        The last iterate (a point of the riemfl manifold).
    cost : float
        f at ``point``.
    iterations : int
        Outer iterations pymanopt ran.
    gradient_norm : float or None
        Riemannian gradient norm at ``point`` as pymanopt reports it.
    stopping_criterion : str
        pymanopt's reason for stopping.
    hessian : str
        How trust regions got Hessian-vector products: ``"exact"`` (a Euclidean Hessian-vector
        product, from the backend or ``ehess=``, through the manifold's ``ehess_to_rhess``),
        ``"finite_difference"`` (:func:`finite_difference_hessian`) or ``"none"`` (first-order
        optimizers).
    pymanopt_result : pymanopt.optimizers.optimizer.OptimizerResult
        pymanopt's own result (time, cost evaluations, log, ...).
    """

    point: np.ndarray
    cost: float
    iterations: int
    gradient_norm: float | None
    stopping_criterion: str
    hessian: str
    pymanopt_result: Any


def finite_difference_hessian(
    manifold: Manifold, rgrad: Callable[[np.ndarray], np.ndarray], step: float = 2.0**-14
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    r"""Riemannian Hessian-vector products by finite differences of the Riemannian gradient.

    .. math::
        \operatorname{Hess} f(x)[u] \approx \frac{\mathcal T_{y \to x}\operatorname{grad}f(y)
        - \operatorname{grad} f(x)}{c}, \qquad y = R_x(c\,u),\quad c = \frac{h}{\|u\|_x},

    with the manifold's retraction R and vector transport :math:`\mathcal T`, and
    :math:`h = 2^{-14}` (Manopt's ``getHessianFD``; Boumal 2015 proves trust regions converge
    globally with it). Linear in u only up to :math:`O(h)`; exact where the gradient is linear
    in the ambient coordinates and the transport is the projection (e.g. kPCA on the sphere).
    The gradient at x is cached, as trust regions ask for many products at one x.

    Parameters
    ----------
    manifold : Manifold
        Supplies ``norm``, ``retract``, ``transport`` and ``zero_tangent``.
    rgrad : callable
        ``rgrad(x)``: the Riemannian gradient at one point.
    step : float
        h, the length of the step along u.
    """
    cache: dict[str, Any] = {"x": None, "g": None}

    def hessian(point: np.ndarray, tangent_vector: np.ndarray) -> np.ndarray:
        norm = as_float64(manifold.norm(point, tangent_vector))
        if norm == 0.0:
            return manifold.zero_tangent(point)
        if cache["x"] is None or not np.array_equal(cache["x"], point):
            cache["x"], cache["g"] = np.array(point, copy=True), rgrad(point)
        c = step / norm
        moved = manifold.retract(point, c * tangent_vector)
        back = manifold.transport(moved, point, rgrad(moved))
        return (back - cache["g"]) / c

    return hessian


def cost_and_gradient(problem: Any, backend: str, cost: Any, egrad: Any) -> tuple[Any, Any]:
    """(cost, Euclidean gradient or None) for :func:`solve` from a problem or a callable."""
    if cost is not None:
        if backend == "numpy" and egrad is None:
            raise ParameterError(
                "solve: backend='numpy' has no automatic differentiation; pass egrad= with the "
                "cost, or choose backend='autograd' or 'torch'"
            )
        return cost, egrad
    if backend == "numpy":
        loss = getattr(problem, "loss", None) or getattr(problem, "f", None)
        grad = getattr(problem, "egrad", None)
        if loss is None or grad is None:
            raise ParameterError(
                f"solve: {type(problem).__name__} has no loss/f and egrad; pass a riemfl "
                "FederatedProblem, or cost= (and egrad=) with manifold="
            )
        return loss, grad
    losses = getattr(problem, "losses", None)
    if losses is None or getattr(problem, "differentiation", None) != backend:
        raise ParameterError(
            f"solve: backend={backend!r} differentiates the objective itself, so it must be "
            f"written for {backend}; {type(problem).__name__}'s objective is not (use "
            f"backend='numpy' with the problem's own egrad, a FunctionProblem with "
            f"differentiation={backend!r}, or cost= written with {backend})"
        )
    sample = problem.n_samples is not None

    def federated_cost(x):
        # f = (1/n) sum_i f_i: the mean of the clients' full objectives
        total = sum((f(x, None) if sample else f(x)) for f in losses)
        return total / len(losses)

    return federated_cost, None


def exact_hessian(
    problem: Any, backend: str, ehess: Any, manifold: Manifold, hessian: str
) -> Callable[[Any, Any], Any] | bool | None:
    """The exact Hessian :func:`solve` can give trust regions: a Euclidean Hessian-vector
    product ``ehess(x, u)`` to hand to pymanopt, ``True`` where pymanopt differentiates the cost
    twice itself (autograd, torch), or ``None`` (finite differences instead)."""
    if hessian == "finite_difference":
        return None
    if ehess is None and backend == "numpy":
        ehess = getattr(problem, "ehess", None)
    source = ehess if ehess is not None else backend != "numpy"
    supported, why = manifold.supports("ehess_to_rhess")
    if supported and source:
        return source
    if hessian == "exact":
        missing = why if not supported else "backend='numpy' has no Euclidean Hessian"
        raise ParameterError(
            f"solve: hessian='exact' needs the Riemannian Hessian, but {missing}; pass "
            "ehess=(x, u) -> the Euclidean Hessian-vector product, choose backend='autograd' or "
            "'torch', or hessian='finite_difference'"
        )
    return None

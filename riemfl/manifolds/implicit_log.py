r"""The torch derivative of a logarithm computed by an iteration: implicit differentiation.

A log :math:`\xi = \mathrm{Log}_X(Y)` found by a solver is the fixed point of a map
:math:`\xi = F(X, Y, \xi)` (for Stiefel: :math:`F = P_{T_X}(\xi + Y - \mathrm{Exp}_X(\xi))`).
Autograd through the solver's iterations differentiates the solver (its step sizes, Anderson's
mixing weights), not the function it solves for: the error of that derivative depends on how
many iterations ran, so on the BLAS kernel's rounding. The implicit function theorem gives the
derivative of the solution itself: with :math:`J = \partial F/\partial\xi`,
:math:`\bar X = (\partial F/\partial X)^\top w`, :math:`\bar Y = (\partial F/\partial Y)^\top w`,
where :math:`(I - J^\top) w = \bar\xi`, solved by GMRES (Saad and Schultz 1986) with
vector-Jacobian products. The forward pass is the solver itself, untouched.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["implicit_log", "gmres"]


def implicit_log(
    solve: Callable[[Any, Any], Any],
    fixed_point: Callable[[Any, Any, Any], Any],
    x: Any,
    y: Any,
    tol: float,
    max_iter: int,
    failure: Callable[[str], Exception],
) -> Any:
    """``solve(x, y)`` (torch tensors) with the derivative of the implicit function
    ``xi = fixed_point(x, y, xi)``.

    Parameters
    ----------
    solve : callable
        ``solve(x, y) -> xi``, the solver (run without a graph).
    fixed_point : callable
        ``fixed_point(x, y, xi)``, the map F whose fixed point the log is.
    tol, max_iter : float, int
        Relative residual and iteration limit of the adjoint system's GMRES.
    failure : callable
        ``failure(what)``: the exception to raise when GMRES does not converge.
    """
    import torch

    class _Log(torch.autograd.Function):
        @staticmethod
        def forward(ctx, xa, ya):
            xi = solve(xa, ya)
            ctx.save_for_backward(xa, ya, xi)
            return xi

        @staticmethod
        def backward(ctx, grad):
            xa, ya, xi = (a.detach() for a in ctx.saved_tensors)
            with torch.enable_grad():
                xa, ya, xi = (a.requires_grad_(True) for a in (xa, ya, xi))
                out = fixed_point(xa, ya, xi)

                def operator(w):  # (I - J^T) w, J the Jacobian of the fixed point in xi
                    (jw,) = torch.autograd.grad(out, xi, w, retain_graph=True)
                    return w - jw

                w = gmres(operator, grad, tol, max_iter, failure)
                gx, gy = torch.autograd.grad(out, (xa, ya), w)
            return gx, gy

    return _Log.apply(x, y)


def gmres(
    operator: Callable[[Any], Any],
    b: Any,
    tol: float,
    max_iter: int,
    failure: Callable[[str], Exception],
) -> Any:
    """GMRES without restarts (Saad and Schultz 1986) for ``operator(w) = b``, torch tensors of
    any shape (the whole batch is one system); the small least-squares problems in numpy."""
    size = float(b.norm())
    if size == 0.0:
        return b
    basis, hess = [b / size], np.zeros((max_iter + 1, max_iter))
    residual = math.inf
    for j in range(max_iter):
        w = operator(basis[j])
        for i, v in enumerate(basis):  # modified Gram-Schmidt
            hess[i, j] = float((w * v).sum())
            w = w - hess[i, j] * v
        hess[j + 1, j] = float(w.norm())
        rhs = np.zeros(j + 2)
        rhs[0] = size
        coef = np.linalg.lstsq(hess[: j + 2, : j + 1], rhs, rcond=None)[0]
        residual = float(np.linalg.norm(hess[: j + 2, : j + 1] @ coef - rhs))
        if residual <= tol * size or hess[j + 1, j] <= 1e-14 * size:
            return sum(c * v for c, v in zip(coef, basis, strict=False))
        basis.append(w / hess[j + 1, j])
    raise failure(
        f"the adjoint system of the log's derivative did not converge in {max_iter} GMRES steps "
        f"(relative residual {residual / size:.3e})"
    )

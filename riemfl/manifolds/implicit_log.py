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

At the check level ``"eager"`` GMRES stops when its residual is small enough (one read per
step). At ``"deferred"`` and ``"off"`` (:mod:`riemfl.check_levels`) nothing is read: every batch
element gets its own Krylov space of :data:`ADJOINT_STEPS` vectors (:func:`fixed_gmres`), the
vector-Jacobian products come from :func:`torch.func.vjp` (which ``torch.compile`` traces, unlike
``torch.autograd.grad`` in a backward pass), and the final residual is a deferred check. This
module imports torch: the maps import it where a torch tensor needs a derivative.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..check_levels import level_of, refuse
from ..errors import ConvergenceError

__all__ = ["ADJOINT_STEPS", "implicit_log", "gmres", "fixed_gmres"]

#: Krylov vectors per batch element of the adjoint solve at the check levels ``"deferred"`` and
#: ``"off"`` (at most the solver's ``max_iter``). The spectrum of :math:`I - J^\top` clusters
#: around 1 with radius :math:`O(\|\xi\|^2)`: on the Stiefel logs (both metrics, (n, p) up to
#: (20, 5)) the relative residual falls below 1e3 eps in 16 steps at the distance 1 (the
#: conformance kit's largest), 18 at 1.3 and 20 at 1.5, near the end of the embedded solver's
#: range.
ADJOINT_STEPS = 30


def implicit_log(
    solve: Callable[[Any, Any], Any],
    fixed_point: Callable[[Any, Any, Any], Any],
    x: Any,
    y: Any,
    tol: float,
    max_iter: int,
    failure: Callable[[str], ConvergenceError],
) -> Any:
    """``solve(x, y)`` (torch tensors) with the derivative of the implicit function
    ``xi = fixed_point(x, y, xi)``.

    Parameters
    ----------
    solve : callable
        ``solve(x, y) -> xi``, the solver (run without a graph).
    fixed_point : callable
        ``fixed_point(x, y, xi)``, the map F whose fixed point the log is (a module-level
        function: ``torch.compile`` traces the backward pass with it).
    tol, max_iter : float, int
        Relative residual and iteration limit of the adjoint system's GMRES.
    failure : callable
        ``failure(what)``: the :class:`~riemfl.errors.ConvergenceError` to raise when GMRES
        does not converge.
    """
    with torch.no_grad():
        xi = solve(x.detach(), y.detach())
    eager = level_of(x) == "eager"
    return ImplicitLog.apply(x, y, xi, fixed_point, tol, max_iter, failure, eager)


class ImplicitLog(torch.autograd.Function):
    """``apply(x, y, xi, fixed_point, tol, max_iter, failure, eager)``: ``xi`` (the solver's
    result, found without a graph) with the implicit function's derivative as backward; GMRES
    with reads where ``eager``, else :func:`fixed_gmres`.

    Defined at module level, once, so that ``torch.compile`` traces it (dynamo cannot trace the
    definition of a class inside a traced function)."""

    @staticmethod
    def forward(ctx, xa, ya, xi, fixed_point, tol, max_iter, failure, eager):
        ctx.save_for_backward(xa, ya, xi)
        ctx.fixed_point, ctx.failure, ctx.eager = fixed_point, failure, eager
        ctx.tol, ctx.max_iter = tol, max_iter
        return xi.clone()

    @staticmethod
    def backward(ctx, grad):
        xa, ya, xi = (a.detach() for a in ctx.saved_tensors)
        if ctx.eager:
            with torch.enable_grad():
                xa, ya, xi = (a.requires_grad_(True) for a in (xa, ya, xi))
                out = ctx.fixed_point(xa, ya, xi)

                def operator(w):  # (I - J^T) w, J the Jacobian of the fixed point in xi
                    (jw,) = torch.autograd.grad(out, xi, w, retain_graph=True)
                    return w - jw

                w = gmres(operator, grad, ctx.tol, ctx.max_iter, ctx.failure)
                gx, gy = torch.autograd.grad(out, (xa, ya), w)
        else:
            _, vjp = torch.func.vjp(ctx.fixed_point, xa, ya, xi)
            steps = min(ctx.max_iter, ADJOINT_STEPS)
            w = fixed_gmres(lambda v: v - vjp(v)[2], grad, ctx.tol, steps, ctx.failure)
            gx, gy, _ = vjp(w)
        return gx, gy, None, None, None, None, None, None


def _adjoint_failure(steps: int, relative: float) -> str:
    return (
        f"the adjoint system of the log's derivative did not converge in {steps} GMRES steps "
        f"(relative residual {relative:.3e})"
    )


def _adjoint_message(failure: Callable[[str], Exception], steps: int, relative: Any) -> str:
    return str(failure(_adjoint_failure(steps, float(relative.max()))))


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
    raise failure(_adjoint_failure(max_iter, residual / size))


def fixed_gmres(
    operator: Callable[[Any], Any],
    b: Any,
    tol: float,
    steps: int,
    failure: Callable[[str], ConvergenceError],
) -> Any:
    r"""GMRES with ``steps`` Krylov vectors per batch element, without a read: ``operator(w) =
    b`` for torch tensors ``(..., n, p)`` whose operator acts on each n x p matrix of the batch
    alone (as :math:`I - J^\top` does).

    Each element has its own Arnoldi basis (classical Gram-Schmidt, twice; after a breakdown,
    where the solution lies in the basis already, the next vectors are 0) and its own
    least-squares problem, solved by the normal equations of the Hessenberg matrix H, whose
    condition number is that of :math:`I - J^\top` (near 1), regularised by
    :math:`10^{-30}\max\mathrm{diag}(H^\top H)` for the zero columns of a breakdown. The
    factorisations are the ``_ex`` ones, which neither raise nor synchronise. A relative residual
    above ``tol`` (or NaN) is a deferred :class:`~riemfl.errors.ConvergenceError`, ``failure``'s,
    recorded outside ``torch.compile`` only: dynamo cannot trace a record in a backward pass, and
    a compiled graph runs the same steps without the check.
    """
    axes = (-2, -1)
    size = torch.linalg.vector_norm(b, dim=axes)
    safe = torch.where(size > 0, size, torch.ones_like(size))
    basis = [b / safe[..., None, None]]
    columns = []
    for j in range(steps):
        w = operator(basis[j])
        stacked = torch.stack(basis, dim=-3)
        coef = torch.zeros_like(stacked[..., 0, 0])
        for _ in range(2):  # classical Gram-Schmidt and its repetition
            c = (stacked * w[..., None, :, :]).sum(dim=axes)
            w = w - (c[..., None, None] * stacked).sum(dim=-3)
            coef = coef + c
        norm = torch.linalg.vector_norm(w, dim=axes)
        pad = torch.zeros(coef.shape[:-1] + (steps - j - 1,), dtype=b.dtype, device=b.device)
        columns.append(torch.cat([coef, norm[..., None], pad], dim=-1))
        alive = norm > 1e-14
        unit = torch.where(alive, norm, torch.ones_like(norm))
        basis.append(torch.where(alive[..., None, None], w / unit[..., None, None], 0.0 * w))
    if not columns:
        return b
    hess = torch.stack(columns, dim=-1)  # (..., steps + 1, steps)
    gram = hess.mT @ hess
    diagonal = torch.diagonal(gram, dim1=-2, dim2=-1)
    floor = 1e-30 * diagonal.amax(dim=-1) + torch.finfo(b.dtype).tiny
    eye = torch.eye(steps, dtype=b.dtype, device=b.device)
    coef = torch.linalg.solve_ex(
        gram + floor[..., None, None] * eye, hess[..., 0, :, None] * size[..., None, None]
    )[0]
    rhs = torch.cat([size[..., None], torch.zeros_like(hess[..., 1:, 0])], dim=-1)
    residual = torch.linalg.vector_norm((hess @ coef)[..., 0] - rhs, dim=-1)
    if not torch.compiler.is_compiling():
        relative = residual / safe
        refuse(~(relative <= tol), ConvergenceError, _adjoint_message, failure, steps, relative)
    return (coef[..., None] * torch.stack(basis[:-1], dim=-3)).sum(dim=-3)

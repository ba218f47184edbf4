r"""The torch autograd functions of :mod:`riemfl.linalg`: factorisations with their own backward.

Defined at module level, once, so that ``torch.compile`` traces them whole (dynamo cannot trace
the definition of a class inside a traced function, which a per-call factory would make). The
functions they evaluate (``f``, its divided differences, the Daleckii-Krein weights) are passed to
``apply`` as constants, beside the tensors. :mod:`riemfl.linalg` imports this module where a torch
tensor reaches it (``import riemfl`` does not import torch).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .linalg import generic_divided_differences, signed_svd

__all__ = ["Polar", "PolarEigh", "SymFunction", "DaleckiiKrein", "polar_backward"]


def polar_backward(grad, u, s, v):
    r"""Adjoint of the polar factor's derivative at :math:`A = U\Sigma V^\top` (any order of s,
    signed values too): :math:`\bar A = U[(K - K^\top)_{ij}/(\sigma_i + \sigma_j)]V^\top + (I -
    UU^\top)\bar Q V\Sigma^{-1}V^\top` with :math:`K = U^\top\bar Q V` (Higham, *Functions of
    Matrices*, 2008, sec. 8.1). The diagonal of :math:`K - K^\top` is 0 and is not divided (a
    zero singular value of a square A leaves it finite); for square A, :math:`I - UU^\top = 0`
    and the second term is left out."""
    vh = v.transpose(-1, -2)
    k = u.transpose(-1, -2) @ grad @ v
    pair = s[..., :, None] + s[..., None, :]
    diagonal = torch.eye(s.shape[-1], dtype=torch.bool, device=s.device)
    inner = (k - k.transpose(-1, -2)) / torch.where(diagonal, torch.ones_like(pair), pair)
    if u.shape[-2] == u.shape[-1]:
        return u @ inner @ vh
    rest = grad - u @ (u.transpose(-1, -2) @ grad)
    return u @ inner @ vh + (rest @ (v / s[..., None, :])) @ vh


class Polar(torch.autograd.Function):
    """``apply(a, signed)``: :math:`UV^\\top` and the singular values from the thin SVD (the
    signed SVD for the special polar factor), with the polar factor's own derivative as
    backward."""

    @staticmethod
    def forward(ctx, a, signed: bool):
        u, s, vh = signed_svd(a) if signed else torch.linalg.svd(a, full_matrices=False)
        ctx.save_for_backward(u, s, vh)
        ctx.mark_non_differentiable(s)
        return u @ vh, s

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad, _grad_s):
        u, s, vh = ctx.saved_tensors
        return polar_backward(grad, u, s, vh.transpose(-1, -2)), None


class PolarEigh(torch.autograd.Function):
    """``apply(a, v, lam)``: :math:`A V \\Lambda^{-1/2} V^\\top` from the Gram eigenpairs
    (computed by the caller without grad), with the polar factor's own derivative as backward
    (:math:`U = QV`)."""

    @staticmethod
    def forward(ctx, a, v, lam):
        s = torch.sqrt(lam)
        q = a @ ((v / s[..., None, :]) @ v.transpose(-1, -2))
        ctx.save_for_backward(q, s, v)
        return q

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        q, s, v = ctx.saved_tensors
        return polar_backward(grad, q @ v, s, v), None, None


class SymFunction(torch.autograd.Function):
    """``apply(g, f, df, divided_differences)``: :math:`f(G) = V f(\\Lambda) V^\\top` and the
    eigenvalues, with the Daleckii-Krein backward :math:`\\bar G = V(F \\circ V^\\top
    \\operatorname{sym}(\\bar Y)V)V^\\top`; F from ``divided_differences(lam, f_lam)`` where
    given, else the generic first divided differences of f (``df`` at ties)."""

    @staticmethod
    def forward(ctx, g, f: Callable, df: Callable | None, divided_differences: Callable | None):
        lam, v = torch.linalg.eigh(g)
        f_lam = f(lam)
        ctx.save_for_backward(v, lam, f_lam)
        ctx.mark_non_differentiable(lam)
        ctx.df, ctx.divided_differences = df, divided_differences
        return (v * f_lam.unsqueeze(-2)) @ v.transpose(-1, -2), lam

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out, _grad_lam):
        v, lam, f_lam = ctx.saved_tensors
        gs = 0.5 * (grad_out + grad_out.transpose(-1, -2))
        inner = v.transpose(-1, -2) @ gs @ v
        if ctx.divided_differences is not None:
            weights = ctx.divided_differences(lam, f_lam)
        else:
            weights = generic_divided_differences(lam, f_lam, ctx.df)
        return v @ (inner * weights) @ v.transpose(-1, -2), None, None, None


class DaleckiiKrein(torch.autograd.Function):
    """``apply(g, e, weights, weight_differences)``: :math:`V(W \\circ V^\\top E V)V^\\top`,
    exact in both arguments (see :func:`riemfl.linalg.daleckii_krein`)."""

    @staticmethod
    def forward(ctx, g, e, weights: Callable, weight_differences: Callable):
        lam, v = torch.linalg.eigh(g)
        w = weights(lam)
        et = v.transpose(-1, -2) @ e @ v
        ctx.save_for_backward(v, lam, w, et)
        ctx.weight_differences = weight_differences
        return v @ (w * et) @ v.transpose(-1, -2)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        v, lam, w, et = ctx.saved_tensors
        gt = v.transpose(-1, -2) @ grad @ v
        grad_g = grad_e = None
        if ctx.needs_input_grad[1]:
            grad_e = v @ (w * gt) @ v.transpose(-1, -2)
        if ctx.needs_input_grad[0]:
            omega = ctx.weight_differences(lam)
            h = torch.einsum("...abj,...aj,...bj->...ab", omega, gt, et)
            h = h + torch.einsum("...abj,...ja,...jb->...ab", omega, et, gt)
            grad_g = v @ (0.5 * (h + h.transpose(-1, -2))) @ v.transpose(-1, -2)
        return grad_g, grad_e, None, None

"""The torch autograd function of :class:`~riemfl.manifolds.FixedRank`'s truncation
:math:`P_r`, defined at module level so that ``torch.compile`` traces it (dynamo cannot trace the
definition of a class inside a traced function). :mod:`riemfl.manifolds.fixedrank` imports this
module where a torch tensor reaches the truncation (``import riemfl`` does not import torch).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..linalg import require_finite
from .fixedrank import truncated_svd_derivative

__all__ = ["Truncate"]


class Truncate(torch.autograd.Function):
    """``apply(a, r, check)``: :math:`P_r(A) = U_r S_r V_r^\\top` from the thin SVD, after
    ``check(s)`` (the truncation's existence and uniqueness checks, on the singular values),
    with the backward of :func:`~riemfl.manifolds.fixedrank.truncated_svd_derivative`."""

    @staticmethod
    def forward(ctx, a, r: int, check: Callable):
        a = require_finite(a, "matrix FixedRank truncates")
        u, s, vh = torch.linalg.svd(a, full_matrices=False)
        check(s)
        ctx.save_for_backward(u, s, vh)
        ctx.r = r
        return (u[..., :, :r] * s[..., None, :r]) @ vh[..., :r, :]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        u, s, vh = ctx.saved_tensors
        return truncated_svd_derivative(u, s, vh, ctx.r, grad), None, None

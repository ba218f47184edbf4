r"""The Bernstein contraction of a Bezier curve as one torch autograd node.

A Euclidean Bezier curve evaluated at parameters :math:`t_1, \dots, t_m` is the matrix product
:math:`c = W P` of the (m, n + 1) Bernstein weights :math:`W_{ki} = B_i^n(t_k)` with the (n + 1,
D) control points (:mod:`riemfl.manifolds.bezier_eval`). :func:`contraction_function` builds,
on first use, the :class:`torch.autograd.Function` whose backward pass forms :math:`W^\top \bar
c` in one pass and can write it into a caller's buffer (``BezierCurve(..., grad_buffer=...)``).
torch is imported only when it is called.
"""

from __future__ import annotations

import functools

__all__ = ["contraction_function"]


@functools.cache
def contraction_function() -> type:
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

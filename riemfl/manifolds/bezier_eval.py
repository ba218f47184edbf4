r"""Evaluation of Bezier curves: Bernstein weights, their contraction with the control points, the
geodesic de Casteljau construction.

A Bezier curve of degree n with control points :math:`P_0, \dots, P_n` is

.. math::
    c(t) = \sum_{i=0}^n B_i^n(t)\,P_i,\qquad B_i^n(t) = \binom{n}{i} t^i (1-t)^{n-i}.

In Euclidean space :func:`bernstein_weights` computes the weights by de Casteljau's recursion
and :func:`contract` forms :math:`\sum_i B_i^n(t_k) P_i` as one matrix product (written into a
caller's ``out`` buffer when given; :mod:`riemfl.manifolds.bezier_buffers` checks it). The
derivative of the curve is the degree n - 1 curve of the differences :math:`n(P_{i+1} - P_i)`
(:func:`difference_weights`). On a manifold, :func:`geodesic_de_casteljau` replaces every linear
interpolation by a geodesic one.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .._validation import integer
from ..backend import Array, ops_for
from ..check_levels import compiling
from .bezier_autograd import contraction_function
from .bezier_buffers import flat_alias

if TYPE_CHECKING:
    from .base import Manifold

__all__ = [
    "bernstein_weights",
    "contract",
    "difference_weights",
    "geodesic_de_casteljau",
    "power_basis_matrix",
    "scalar_bernstein_weights",
]


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
    n = integer(degree, "power_basis_matrix: degree", minimum=0)
    w = np.zeros((n + 1, n + 1))
    for j in range(n + 1):
        for i in range(j + 1):
            w[j, i] = math.comb(n, j) * (-1) ** (j - i) * math.comb(j, i)
    return w


def scalar_bernstein_weights(degree: int, t: float) -> list[float]:
    r"""The Bernstein weights :math:`B_0^n(t), \dots, B_n^n(t)` at one Python-float t, as Python
    floats, by the same de Casteljau recursion as :func:`bernstein_weights`."""
    s = 1.0 - t
    w = [1.0]
    for r in range(1, degree + 1):
        w = [s * w[0]] + [t * w[i - 1] + s * w[i] for i in range(1, r)] + [t * w[r - 1]]
    return w


def difference_weights(weights: Array, degree: int) -> Array:
    r"""Weights of the derivative: :math:`c' = \sum_i P_i\, n (B^{n-1}_{i-1} - B^{n-1}_i)`."""
    ops = ops_for(weights)
    zero = ops.zeros_like(weights[..., :1])
    padded_left = ops.concatenate([zero, weights], axis=-1)
    padded_right = ops.concatenate([weights, zero], axis=-1)
    return degree * (padded_left - padded_right)


def contract(
    control_points: Array,
    point_shape: tuple[int, ...],
    weights: Array,
    out: Array | None = None,
    grad_buffer: Array | None = None,
) -> Array:
    r""":math:`\sum_i w_{\dots i} P_i`, shaped ``weights.shape[:-1] + point_shape``.

    One matrix product of the (m, n + 1) weights with the (n + 1, D) control points, written
    into ``out`` when given. In torch, when a graph is recorded, the product goes through
    :func:`~riemfl.manifolds.bezier_autograd.contraction_function`'s
    ``BernsteinContraction`` (backward: one outer product, into ``grad_buffer`` when
    given and no higher-order graph is requested); inside ``torch.compile``, torch's own
    product, whose backward the compiler fuses (``grad_buffer`` is not written there).
    """
    cp = control_points
    k = int(cp.shape[0])
    flat = cp if cp.ndim == 2 else cp.reshape(k, -1)
    lead = tuple(weights.shape[:-1])
    w2 = weights if weights.ndim == 1 else weights.reshape(-1, k)
    if type(cp) is np.ndarray:
        # np.matmul, not np.dot: with out= np.dot is 5-25% slower below ~10^7 entries
        # (measured by benchmarks/bench_curves.py), matmul writes in place at full speed
        if out is None:
            return np.matmul(w2, flat).reshape(lead + point_shape)
        np.matmul(w2, flat, out=out.reshape(w2.shape[:-1] + flat.shape[1:]))
        return out
    import torch

    shape = w2.shape[:-1] + flat.shape[1:]
    graph = torch.is_grad_enabled() and (flat.requires_grad or w2.requires_grad)
    if out is None:
        target = None
    elif graph or out.requires_grad or out.shape != shape:
        target = flat_alias(out, shape)  # out itself must stay free of autograd history
    else:  # the common case: a plain buffer of the right shape, used as it is
        target = out
    if graph and not compiling():  # dynamo cannot trace the Function's class being built
        gbuf = None if grad_buffer is None else flat_alias(grad_buffer, flat.shape)
        res = contraction_function().apply(flat, w2, (target, gbuf))
        return res if res.shape == lead + point_shape else res.view(lead + point_shape)
    if w2.ndim == 1:
        res = torch.mv(flat.T, w2, out=target)
    else:
        res = torch.mm(w2, flat, out=target)
    return out if out is not None else res.view(lead + point_shape)


def geodesic_de_casteljau(manifold: Manifold, control_points: Array, t: Array) -> Array:
    r"""Points of the Bezier curve with ``control_points`` on ``manifold`` at parameters ``t``.

    De Casteljau's construction with every linear interpolation replaced by the geodesic one,
    :math:`(1-t)P + tQ \mapsto \mathrm{Exp}_P(t\,\mathrm{Log}_P Q)`, repeated n times on the
    n + 1 control points. Returns shape ``t.shape + point_shape``.
    """
    m = manifold
    ops = ops_for(t, control_points)
    degree = int(control_points.shape[0]) - 1
    tt = ops.reshape(t, tuple(t.shape) + (1,) * m.ndim)
    points = [control_points[i] for i in range(degree + 1)]
    for _ in range(degree):
        points = [m.exp(p, tt * m.log(p, q)) for p, q in zip(points[:-1], points[1:], strict=True)]
    return points[0] + ops.zeros_like(tt)  # broadcast to t's shape when t is not batched


def _stack_last(ops, arrays):
    return ops.concatenate([a[..., None] for a in arrays], axis=-1)

r"""The mixture merge, written once as the plain formula: the reference the tests check against.

An adapted layer (:class:`~riemfl.nn.floral.adaptor.MixtureAdaptor`) has a base weight
:math:`W`, a base bias :math:`b` (or none), per cluster :math:`c = 1..C` the factors
:math:`A_c \in \mathbb{R}^{m\times r}` and :math:`B_c \in \mathbb{R}^{n\times r}` of its
low-rank adaptor :math:`L_c = A_c B_c^\top` (Almansoori et al. 2024, Sec. 3.2, eq. (1)) and
optionally a bias adaptor :math:`L_{b,c}`. For the mixture weights
:math:`w = \alpha\max(\pi, \pi_{min})` of a forward pass the layer runs its base operation with

.. math::

    W' = W + K\Bigl(\sum_c w_c A_c B_c^\top\Bigr),\qquad b' = b + \sum_c w_c L_{b,c},

where :math:`K` reshapes the :math:`m\times n` matrix into the base weight's shape (the identity
for a linear layer, a convolution kernel for :class:`~riemfl.nn.floral.MixtureConv2d`).
Mixing the adaptors' outputs, :math:`W x + b + \sum_c w_c (L_c x + L_{b,c})`, is the same
linear map (Almansoori et al. 2024, Sec. 5 "Mixture of adaptors": the weights "can be merged
into one").

:func:`reference_merge` computes exactly this, one cluster at a time, from the matrix views of
the factors (:meth:`~riemfl.nn.floral.adaptor.MixtureAdaptor.factor_matrices`): it is written
to be read, and the tests use it as the oracle. The forward pass uses each layer class's
batched form of the same formula, all clusters in one product
(:meth:`~riemfl.nn.floral.adaptor.MixtureAdaptor.merged_parameters`); the tests compare the two,
values and gradients.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ...errors import ShapeError

if TYPE_CHECKING:  # pragma: no cover
    from .adaptor import MixtureAdaptor

__all__ = ["reference_merge"]


def reference_merge(
    layer: MixtureAdaptor, w: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""``(W', b')`` of ``layer`` for mixture weights ``w``, one cluster at a time.

    Parameters
    ----------
    layer : MixtureAdaptor
        An adapted layer.
    w : torch.Tensor, shape (C,)
        Mixture weights (:meth:`~riemfl.nn.floral.adaptor.MixtureContext.weights`).

    Returns
    -------
    weight : torch.Tensor
        :math:`W + K(\sum_c w_c A_c B_c^\top)`, in the base weight's shape.
    bias : torch.Tensor or None
        :math:`b + \sum_c w_c L_{b,c}`; the base bias itself (possibly None) for a layer
        without bias adaptors.

    Raises
    ------
    ShapeError
        When ``w`` is not a vector of length C.
    """
    a, b = layer.factor_matrices()  # (C, m, r), (C, n, r)
    n_clusters = a.shape[0]
    if w.shape != (n_clusters,):
        raise ShapeError(
            f"reference_merge: mixture weights of shape {tuple(w.shape)}, expected ({n_clusters},)"
        )
    delta = sum(w[c] * (a[c] @ b[c].T) for c in range(n_clusters))
    weight = layer.base.weight + layer.weight_from_matrix(delta)
    bias = layer.base.bias
    if layer.lora_bias is not None:
        mixed = sum(w[c] * layer.lora_bias[c] for c in range(n_clusters))
        bias = mixed if bias is None else bias + mixed
    return weight, bias

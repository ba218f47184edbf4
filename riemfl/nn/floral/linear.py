r"""LinearLoRA mixture: a linear layer with one low-rank adaptor per cluster.

For a base ``nn.Linear`` with weight :math:`W \in \mathbb{R}^{m\times n}` (m = out_features,
n = in_features) the adaptor of cluster c is :math:`L_c = A_c B_c^\top` (Almansoori et al. 2024,
Sec. 3.2, eq. (1)) with :math:`A_c \in \mathbb{R}^{m\times r}` (the paper's U) and
:math:`B_c \in \mathbb{R}^{n\times r}` (the paper's V), stored with the rank components as rows
like a weight: ``lora_out[c]`` = :math:`A_c^\top` (r x m), ``lora_in[c]`` = :math:`B_c^\top`
(r x n), so that the stacked factors of all clusters are reshapes without a copy. The layer
computes

.. math::

    y = W x + b + \alpha\sum_c w_c\,(A_c B_c^\top x + L_{b,c})
      = \bigl(W + [A_1 \cdots A_C][w_1 B_1 \cdots w_C B_C]^\top\bigr) x
        + b + \alpha\sum_c w_c L_{b,c},

the second form with one ``addmm`` for the merged weight (all clusters at once) and one
``linear``; or, for a large layer on few input rows, the first form with the adaptors run on
the input (:data:`FACTORED_SAVING`). Rank :math:`r = \max(1, \lfloor\rho mn/(m+n)\rfloor)`
(:func:`~riemfl.nn.floral.budget.lora_rank`) unless given.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..._validation import integer
from ...errors import ParameterError
from .adaptor import MatrixView, MixtureAdaptor, MixtureContext
from .budget import lora_rank

__all__ = ["MixtureLinear", "FACTORED_SAVING"]

#: multiply-adds per pass that running the adaptors on the input (``x B``, then ``A``) must
#: save against merging them into the weight before it does so: the factored pass has more,
#: smaller operations, each with a fixed cost of a few microseconds
FACTORED_SAVING = 1 << 16


class MixtureLinear(MixtureAdaptor):
    """A ``nn.Linear`` plus C rank-r adaptors mixed by the router (module docstring).

    Parameters
    ----------
    base : torch.nn.Linear
        The layer to adapt (kept as ``self.base``; its parameters are the federated base).
    context : MixtureContext
        Shared with the other layers of the model (router probabilities, scale, clamp).
    rho : float, optional
        Relative budget; ignored when ``rank`` is given.
    rank : int, optional
        Explicit rank r (e.g. the synthetic tasks' true rank).
    bias : bool, default True
        Add the bias adaptors :math:`L_{b,c}` (zero at start).
    init : {"lora", "paper"}
        Which factor starts random (see :data:`~riemfl.nn.floral.adaptor.INITS`).
    """

    def __init__(
        self,
        base: nn.Linear,
        context: MixtureContext,
        *,
        rho: float | None = 0.01,
        rank: int | None = None,
        bias: bool = True,
        init: str = "lora",
    ) -> None:
        super().__init__(context)
        if not isinstance(base, nn.Linear):
            raise ParameterError(f"MixtureLinear adapts nn.Linear, got {type(base).__name__}")
        m, n = base.out_features, base.in_features
        r = resolve_rank(rho, rank, m, n, "MixtureLinear")
        c = context.n_clusters
        w = base.weight
        self.base = base
        self.rank = r
        # rank components as rows, like a weight: lora_out[c] = A_c^T, lora_in[c] = B_c^T
        self.lora_out = nn.Parameter(torch.empty(c, r, m, dtype=w.dtype, device=w.device))
        self.lora_in = nn.Parameter(torch.empty(c, r, n, dtype=w.dtype, device=w.device))
        self.out_view = MatrixView((r, m), (1, 0))
        self.in_view = MatrixView((r, n), (1, 0))
        self._dims = (c * r, m, n)
        self._init_factors(init, fan_in_in=n, fan_in_out=r)
        self._make_bias(bias, m, w)

    def _base_call(self, x, weight, bias):
        return F.linear(x, weight, bias)

    def weight_from_matrix(self, matrix: torch.Tensor) -> torch.Tensor:
        return matrix

    def _merged_weight(self, w, weight):
        # W + [A_1 ... A_C][w_1 B_1 ... w_C B_C]^T in one addmm: the stored factors are the rows
        # A_c^T and B_c^T, so the stacks (C r x m and C r x n) are reshapes of them
        cr, m, n = self._dims
        scaled = self.lora_in.reshape(cr, n) * self._w_repeated(w)[:, None]  # rows w_c B_c^T
        stacked_out = self.lora_out.reshape(cr, m).T  # [A_1 ... A_C], m x C r
        if weight is None:
            return stacked_out @ scaled
        return torch.addmm(weight, stacked_out, scaled)

    def _prefers_factored(self, x: torch.Tensor) -> bool:
        # rows (m + n) C r multiply-adds against m n C r for the merge, and a saving that pays
        # for the extra operations
        cr, m, n = self._dims
        return cr * (m * n - (x.numel() // n) * (m + n)) > FACTORED_SAVING

    def _factored_forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        # W x + b' + A diag(w) (B^T x): [B_1 ... B_C]^T and [A_1 ... A_C] are reshapes of the
        # factors
        cr, m, n = self._dims
        h = F.linear(x, self.lora_in.reshape(cr, n)) * self._w_repeated(w)  # (..., C r)
        base = self.base
        out = F.linear(x, base.weight, self._merged_bias(w, base.bias))
        return out + F.linear(h, self.lora_out.reshape(cr, m).T)

    def factored_output(self, x: torch.Tensor, pi: torch.Tensor | None = None) -> torch.Tensor:
        w = self.context.weights(pi)
        h = torch.matmul(x.unsqueeze(-3), self.lora_in.mT)  # (..., C, batch, r): B_c^T x
        out = torch.matmul(h * w[:, None, None], self.lora_out).sum(-3)
        return out if self.lora_bias is None else out + w @ self.lora_bias

    def extra_repr(self) -> str:
        return f"clusters={self.n_clusters}, rank={self.rank}, bias={self.lora_bias is not None}"


def resolve_rank(rho: float | None, rank: int | None, m: int, n: int, where: str) -> int:
    """The adaptor rank of an (m x n) layer: ``rank`` checked (an int in [1, min(m, n)]), or
    the rank of the relative budget ``rho`` (:func:`lora_rank`); ``where`` names the layer in
    the :class:`~riemfl.errors.ParameterError` raised otherwise."""
    if rank is None:
        if rho is None:
            raise ParameterError(f"{where}: give rho (relative budget) or rank")
        return lora_rank(rho, m, n)
    return integer(rank, f"{where}: rank (<= min(m, n))", minimum=1, maximum=min(m, n))

r"""LinearLoRA mixture: a linear layer with one low-rank adaptor per cluster (digest B.2, eq. (1)).

For a base ``nn.Linear`` with weight :math:`W \in \mathbb{R}^{m\times n}` (m = out_features,
n = in_features) the adaptor of cluster c is :math:`L_c = A_c B_c^\top` with
:math:`A_c \in \mathbb{R}^{m\times r}` (the paper's U) and :math:`B_c \in \mathbb{R}^{n\times r}`
(the paper's V), stored with the rank components as rows like a weight: ``lora_out[c]`` =
:math:`A_c^\top` (r x m), ``lora_in[c]`` = :math:`B_c^\top` (r x n), so that the stacked factors
of all clusters are views. The layer computes

.. math::

    y = W x + b + \alpha\sum_c w_c\,(A_c B_c^\top x + L_{b,c})
      = \bigl(W + [w_1 A_1 \cdots w_C A_C][B_1 \cdots B_C]^\top\bigr) x
        + b + \alpha\sum_c w_c L_{b,c},

the second form in one ``addmm`` (the merged weight, computed with those of the model's other
adapted layers in one autograd node: :mod:`~riemfl.nn.floral.fused`) and one ``linear``. Rank
:math:`r = \max(1, \lfloor\rho mn/(m+n)\rfloor)` (:func:`~riemfl.nn.floral.budget.lora_rank`)
unless given.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import ParameterError
from .adaptor import MatrixView, MixtureAdaptor, MixtureContext
from .budget import lora_rank
from .fused import weight_column

__all__ = ["MixtureLinear", "FACTORED_SAVING"]

#: multiply-adds per pass that running the adaptors on the input (``x B``, then ``A``) must
#: save against merging them into the weight before it does so: the factored pass has more,
#: smaller operations, each with a fixed cost of a few microseconds (the compiled layer's
#: ``kFactoredSaving``)
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
        r = _resolve_rank(rho, rank, m, n, "MixtureLinear")
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
        self._shape_out, self._shape_in = (c, r, m), (c, r, n)
        self._init_factors(init, fan_in_in=n, fan_in_out=r)
        self._make_bias(bias, m, w)

    def _base_call(self, x, weight, bias):
        return F.linear(x, weight, bias)

    _compiled_kind = "linear"

    def _kernel_spec_values(self) -> list[int]:
        cr, m, n = self._dims
        return [0, cr // self.rank, self.rank, m, n] + [0] * 6 + [1, 1, 0, 0, 1, 1]

    def _prefers_factored(self, x: torch.Tensor) -> bool:
        # rows (m + n) C r multiply-adds against m n C r for the merge, and a saving that pays
        # for the extra operations (the compiled layer's rule, csrc/floral_ops.cpp)
        cr, m, n = self._dims
        return cr * (m * n - (x.numel() // n) * (m + n)) > FACTORED_SAVING

    def _factored_forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        # W x + b' + A diag(w) (B^T x): [B_1 ... B_C]^T and [A_1 ... A_C] are views of the factors
        cr, m, n = self._dims
        h = F.linear(x, self.lora_in.reshape(cr, n))  # (..., C r)
        h = h * (w if self.rank == 1 else w.repeat_interleave(self.rank))
        bias = self.base.bias
        if self.lora_bias is not None:
            mixed = self.lora_bias.T @ w
            bias = mixed if bias is None else bias + mixed
        return F.linear(x, self.base.weight, bias) + F.linear(h, self.lora_out.reshape(cr, m).T)

    def _scaled_factors(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r""":math:`[w_1 A_1 \cdots w_C A_C]^\top` (C r x m) and :math:`[B_1 \cdots B_C]^\top`
        (C r x n): views of the stored factors, one multiplication."""
        c, r, m = self.lora_out.shape
        return (self.lora_out * w[:, None, None]).reshape(c * r, m), self.lora_in.reshape(c * r, -1)

    def _delta(self, w: torch.Tensor) -> torch.Tensor:
        a, b = self._scaled_factors(w)
        return a.T @ b

    def _fusion_views(self, lora_out, lora_in, lora_bias):
        # the stored factors are the transposed matrices A_c^T (r x m), B_c^T (r x n): the
        # stacks [A_1 ... A_C]^T (C r x m) and [B_1 ... B_C]^T (C r x n) are views
        cr, m, n = self._dims
        out2, in2 = lora_out.reshape(cr, m), lora_in.reshape(cr, n)
        in_flat = in2 if self.rank == 1 else lora_in.reshape(lora_in.shape[0], -1)
        return out2, out2.T, in2, in_flat, None if lora_bias is None else lora_bias.T

    def _fused_weight(self, w, shared, weight, lora_out, views):
        # W + [A_1 ... A_C][w_1 B_1 ... w_C B_C]^T in one addmm
        _, out2t, in2, _, _ = views
        scaled = in2 * weight_column(shared, w, self.rank)  # rows w_c B_c^T
        return torch.addmm(weight, out2t, scaled), scaled

    def _fused_weight_backward(
        self, g, w, shared, lora_out, views, scaled, need_out, need_in, need_w
    ):
        # G (m x n): d A_c^T = w_c B_c^T G^T, d B_c^T = w_c A_c^T G, dw_c = <A_c^T G, B_c^T>
        out2, _, in2, in_flat, _ = views
        r = self.rank
        if scaled is None:
            scaled = in2 * weight_column(shared, w, r)
        d_out = F.linear(scaled, g).view(self._shape_out) if need_out else None  # (C r, m)
        d_in = dw = None
        if need_in or need_w:
            e = torch.mm(out2, g)  # (C r, n): rows A_k^T G
            if need_in:
                d_in = (e * weight_column(shared, w, r)).view(self._shape_in)
            if need_w:
                dw = (
                    torch.linalg.vecdot(e, in2)
                    if r == 1
                    else torch.linalg.vecdot(e.view(in_flat.shape), in_flat)
                )
        return d_out, d_in, dw

    def factored_output(self, x: torch.Tensor, pi: torch.Tensor | None = None) -> torch.Tensor:
        w = self.context.weights(pi)
        h = torch.matmul(x.unsqueeze(-3), self.lora_in.mT)  # (..., C, batch, r): B_c^T x
        out = torch.matmul(h * w[:, None, None], self.lora_out).sum(-3)
        return out if self.lora_bias is None else out + w @ self.lora_bias

    def extra_repr(self) -> str:
        return f"clusters={self.n_clusters}, rank={self.rank}, bias={self.lora_bias is not None}"


def _resolve_rank(rho: float | None, rank: int | None, m: int, n: int, where: str) -> int:
    if rank is None:
        if rho is None:
            raise ParameterError(f"{where}: give rho (relative budget) or rank")
        return lora_rank(rho, m, n)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= min(m, n):
        raise ParameterError(
            f"{where}: rank must be an int in 1..min(m, n) = 1..{min(m, n)}, got {rank!r}"
        )
    return rank

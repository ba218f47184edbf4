r"""ConvLoRA mixture: a 2-D convolution with one low-rank adaptor per cluster.

A convolution adaptor is two convolutions in sequence, :math:`(W + L) * x = W * x + U * (V * x)`
(Almansoori et al. 2024, Sec. 3.2 "Convolution layer"; App. F.1): ``lora_in`` (:math:`V`, r
output channels) then ``lora_out`` (:math:`U`, c_out output channels). Each spatial axis of the
base kernel :math:`k_1 \times k_2` (height, width) is held by exactly one of the two, which also
takes the base's stride, padding and dilation on that axis; the other is 1 wide there with
stride 1 and no padding. The composite is then
*exactly* a convolution with the base's geometry and the kernel

.. math::

    L_{ijab} = \sum_{k=1}^r U_{i k a_o b_o} V_{k j a_i b_i},

so the adaptor merges into the base kernel (:meth:`MixtureConv2d.delta_weight`; the forward pass
runs the base convolution once with the merged kernel, the two convolutions being
:meth:`MixtureConv2d.factored_output`), and seen as a
matrix (rows: c_out and the axes held by U; columns: c_in and the axes held by V) it is
:math:`A B^\top` of rank r. Variants (``variant``; App. F.1 and the ablation of Table 4,
App. G.3):

=================  =======================  =======================  ==========================
variant            V (in)                   U (out)                  parameters per cluster
=================  =======================  =======================  ==========================
``balanced_2d``    r x c_in x 1 x k_2       c_out x r x k_1 x 1      (c_in k_2 + c_out k_1) r
``in_layer``       r x c_in x k_1 x k_2     c_out x r x 1 x 1        (c_in k_1 k_2 + c_out) r
``out_layer``      r x c_in x 1 x 1         c_out x r x k_1 x k_2    (c_in + c_out k_1 k_2) r
=================  =======================  =======================  ==========================

``balanced_2d`` is the paper's choice ("channel+filter-wise" with :math:`r_f = 1`, App. F.1);
``in_layer`` and ``out_layer`` are Table 4's channel-only variants with the kernel kept in the in
or out convolution. The rank is :math:`\max(1, \lfloor\rho\, m n/(m+n)\rfloor)` with m and n
the matrix sizes (e.g. :math:`m = c_{out} k_1`, :math:`n = c_{in} k_2` for balanced 2D), as the
authors' public code (zeligism/FLoRAL) computes it from :math:`c_{in} |k_{in}|` and
:math:`c_{out} |k_{out}|`.

Choice where the paper is ambiguous: App. F.1 writes V with the kernel :math:`k_1 \times 1` and
U with :math:`1 \times k_2`, and says the split of the kernel "can be done adaptively"; the
authors' public code gives the in convolution :math:`(1, k_{min})` or :math:`(1, k_{max})` by
comparing c_in and c_out. Here the in convolution always holds the width axis and the out
convolution the height axis, so that the adaptor keeps the base kernel's shape and merges
exactly. For square kernels (every model of the paper) this and the public code's rule coincide.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..._validation import is_int
from ...errors import ParameterError
from .adaptor import MatrixView, MixtureAdaptor, MixtureContext
from .linear import resolve_rank

__all__ = ["MixtureConv2d", "CONV_VARIANTS"]

#: variant -> (axes held by the in convolution V, axes held by the out convolution U)
CONV_VARIANTS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "balanced_2d": ((1,), (0,)),
    "in_layer": ((0, 1), ()),
    "out_layer": ((), (0, 1)),
}


def _pair(v, name: str) -> tuple[int, int]:
    if is_int(v):
        return (int(v), int(v))
    if isinstance(v, tuple) and len(v) == 2 and all(is_int(e) for e in v):
        return (int(v[0]), int(v[1]))
    raise ParameterError(f"MixtureConv2d: unsupported {name} {v!r}; expected an int or a pair")


class MixtureConv2d(MixtureAdaptor):
    """A ``nn.Conv2d`` plus C ConvLoRA adaptors mixed by the router (module docstring).

    Parameters
    ----------
    base : torch.nn.Conv2d
        ``groups=1`` and ``padding_mode="zeros"`` (an adaptor of a grouped or circularly padded
        convolution would not merge into it); padding an int, a pair or ``"valid"``.
    context : MixtureContext
    rho, rank, bias, init
        As :class:`~riemfl.nn.floral.MixtureLinear`.
    variant : {"balanced_2d", "in_layer", "out_layer"}
    """

    def __init__(
        self,
        base: nn.Conv2d,
        context: MixtureContext,
        *,
        rho: float | None = 0.01,
        rank: int | None = None,
        bias: bool = True,
        init: str = "lora",
        variant: str = "balanced_2d",
    ) -> None:
        super().__init__(context)
        if not isinstance(base, nn.Conv2d):
            raise ParameterError(f"MixtureConv2d adapts nn.Conv2d, got {type(base).__name__}")
        if variant not in CONV_VARIANTS:
            raise ParameterError(
                f"MixtureConv2d: variant must be one of {sorted(CONV_VARIANTS)}, got {variant!r}"
            )
        if base.groups != 1 or base.padding_mode != "zeros":
            raise ParameterError(
                f"MixtureConv2d needs groups=1 and padding_mode='zeros' (got groups="
                f"{base.groups}, padding_mode={base.padding_mode!r}); exclude this layer"
            )
        padding = (0, 0) if base.padding == "valid" else _pair(base.padding, "padding")
        stride = _pair(base.stride, "stride")
        dilation = _pair(base.dilation, "dilation")
        c_out, c_in, k1, k2 = base.weight.shape
        held_in, held_out = CONV_VARIANTS[variant]
        kernel = (k1, k2)
        k_in = tuple(kernel[a] if a in held_in else 1 for a in (0, 1))
        k_out = tuple(kernel[a] if a in held_out else 1 for a in (0, 1))

        def geometry(held: tuple[int, ...]) -> dict[str, tuple[int, int]]:
            pick = [
                (stride[a], padding[a], dilation[a]) if a in held else (1, 0, 1) for a in (0, 1)
            ]
            return {
                "stride": (pick[0][0], pick[1][0]),
                "padding": (pick[0][1], pick[1][1]),
                "dilation": (pick[0][2], pick[1][2]),
            }

        self._in_geometry = geometry(held_in)
        self._out_geometry = geometry(held_out)
        m, n = c_out * k_out[0] * k_out[1], c_in * k_in[0] * k_in[1]
        r = resolve_rank(rho, rank, m, n, "MixtureConv2d")
        c = context.n_clusters
        w = base.weight
        self.base = base
        self.variant = variant
        self.rank = r
        self.lora_out = nn.Parameter(
            torch.empty(c, c_out, r, *k_out, dtype=w.dtype, device=w.device)
        )
        self.lora_in = nn.Parameter(torch.empty(c, r, c_in, *k_in, dtype=w.dtype, device=w.device))
        # A: rows (i, a_o, b_o), B: rows (j, a_i, b_i); the rank axis last
        self.out_view = MatrixView((c_out, r, *k_out), (0, 2, 3, 1))
        self.in_view = MatrixView((r, c_in, *k_in), (1, 2, 3, 0))
        self._dims = (c_out, c_in, *k_out, *k_in, m, n, c * r)
        self._init_factors(init, fan_in_in=n, fan_in_out=r * k_out[0] * k_out[1])
        self._make_bias(bias, c_out, w)

    def _base_call(self, x, weight, bias):
        return self.base._conv_forward(x, weight, bias)

    def _merged_weight(self, w, weight):
        # K([w_1 A_1 ... w_C A_C][B_1 ... B_C]^T): one (m, C r) x (C r, n) product, whose
        # right factor is a reshape of lora_in, then the (m, n) matrix seen as a kernel
        _, n, cr = self._dims[6:]
        scaled = self._out_matrix(self.lora_out) * self._w_repeated(w)
        delta = self.weight_from_matrix(scaled @ self.lora_in.reshape(cr, n))
        return delta if weight is None else weight + delta

    def _out_matrix(self, lora_out: torch.Tensor) -> torch.Tensor:
        r""":math:`[A_1 \cdots A_C]`, shape (m, C r), rows (i, a_o, b_o), columns (c, k)."""
        m, _, cr = self._dims[6:]
        return lora_out.permute(1, 3, 4, 0, 2).reshape(m, cr)

    def weight_from_matrix(self, matrix: torch.Tensor) -> torch.Tensor:
        # rows (i, a_o, b_o) and columns (j, a_i, b_i) -> (i, j, a_o a_i, b_o b_i); one of a_o,
        # a_i and one of b_o, b_i has size 1, so this is a view of the matrix
        c_out, c_in, kh_o, kw_o, kh_i, kw_i = self._dims[:6]
        kernel = matrix.view(c_out, kh_o, kw_o, c_in, kh_i, kw_i).permute(0, 3, 1, 4, 2, 5)
        return kernel.reshape(self.base.weight.shape)

    def factored_output(self, x: torch.Tensor, pi: torch.Tensor | None = None) -> torch.Tensor:
        """The two convolutions :math:`U * (V * x)` of every cluster, weighted (no base)."""
        w = self.context.weights(pi)
        c, r = self.lora_in.shape[:2]
        v = self.lora_in.reshape(c * r, *self.lora_in.shape[2:])
        h = F.conv2d(x, v, **self._in_geometry)
        h = h * self._w_repeated(w)[:, None, None]
        u = self.lora_out.transpose(0, 1).reshape(
            self.lora_out.shape[1], c * r, *self.lora_out.shape[3:]
        )
        out = F.conv2d(h, u, **self._out_geometry)
        return out if self.lora_bias is None else out + (w @ self.lora_bias)[:, None, None]

    def extra_repr(self) -> str:
        return (
            f"clusters={self.n_clusters}, rank={self.rank}, variant={self.variant}, "
            f"bias={self.lora_bias is not None}"
        )

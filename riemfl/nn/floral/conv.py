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
:math:`A B^\top` of rank r. Variants (``variant``; App. F.1, eqs. (38)-(41), and the ablation
of Table 4, App. G.3):

===================  =======================  ========================  ============================
variant              V (in)                   U (out)                   parameters per cluster
===================  =======================  ========================  ============================
``balanced_2d``      r x c_in x 1 x k2        c_out x r x k1 x 1        (c_in k2 + c_out k1) r
``in_layer``         r x c_in x k1 x k2       c_out x r x 1 x 1         (c_in k1 k2 + c_out) r
``out_layer``        r x c_in x 1 x 1         c_out x r x k1 x k2       (c_in + c_out k1 k2) r
``filter_wise``      r c_out x c_in x k1 x 1  c_out x r c_out x 1 x k2  (c_out k2 + c_in k1) c_out r
``reshaped_linear``  r x c_in                 c_out k1 k2 x r           (c_out k1 k2 + c_in) r
===================  =======================  ========================  ============================

with k1 x k2 the base kernel (height x width). ``balanced_2d`` is the paper's choice
("channel+filter-wise" with :math:`r_f = 1`, App. F.1, eq. (40)); ``in_layer`` and
``out_layer`` are Table 4's channel-only variants with the kernel kept in the in or out
convolution (``out_layer`` is App. F.1's "channel-wise", eq. (38)). For these and
``reshaped_linear`` the rank is :math:`\max(1, \lfloor\rho\, m n/(m+n)\rfloor)` with m and n
the matrix sizes (e.g. :math:`m = c_{out} k_1`, :math:`n = c_{in} k_2` for balanced 2D), as the
authors' public code (zeligism/FLoRAL) computes it from :math:`c_{in} |k_{in}|` and
:math:`c_{out} |k_{out}|`; the parameters per cluster are then at most :math:`\rho` times the
kernel's (apart from the minimum rank 1).

**Filter-wise** (App. F.1, eq. (39)): the shapes and the parameter count are the paper's,
:math:`U \in \mathbb{R}^{c_{out}\times r c_{out}\times 1\times k_2}`,
:math:`V \in \mathbb{R}^{r c_{out}\times c_{in}\times k_1\times 1}`, two full convolutions with
the kernels :math:`k_1 \times 1` and :math:`1 \times k_2` (V holds the height axis, U the
width axis, as App. F.1 writes them). Their composite is

.. math::

    L_{ijab} = \sum_{m=1}^{r c_{out}} U_{i m 1 b} V_{m j a 1},

eq. (40) with the channel rank left full (:math:`r_c = c_{out}`) and the filter rank
:math:`r_f = r`; eq. (39) writes the middle index as :math:`(rj + k)` "with some abuse of
notation", which this reads as that block index (a block per output channel, r filters each).
The matrix rank of the adaptor (``rank``, the columns of A and B) is therefore
:math:`r c_{out}`; the filter rank r is ``filter_rank``. The budget
:math:`(c_{out} k_2 + c_{in} k_1) c_{out} r \le \rho\, c_{out} c_{in} k_1 k_2` gives
:math:`r = \max(1, \lfloor \rho\, c_{in} k_1 k_2 / (c_{out} k_2 + c_{in} k_1)\rfloor)`, at most
:math:`\min(k_1, k_2)` (a :math:`k_1 \times k_2` filter has no higher rank); an explicit
``rank`` is this r. The bound is at most :math:`\rho k_2`, so r is 1 for every kernel narrower
than :math:`2/\rho` (20 at :math:`\rho = 10\%`), and the adaptor then has :math:`c_{out}` times
the parameters of a rank-1 balanced 2D one, "significantly more" (App. F.1) than the budget.
Another reading of eq. (39), a depthwise V (each input channel its own r filters), would have
:math:`(c_{out} k_2 + k_1) c_{in} r` parameters, which is not the count App. F.1 gives.

**Reshaped linear** (App. F.1, eq. (41)): a linear LoRA
:math:`U \in \mathbb{R}^{c_{out} k_1 k_2\times r}`, :math:`V \in \mathbb{R}^{r\times c_{in}}`
whose product, rows :math:`(k_1 k_2 i + k_2 a + b)`, is reshaped into the kernel. The factors are
stored as these matrices (``lora_out`` (C, c_out k_1 k_2, r), ``lora_in`` (C, r, c_in)); the
kernel and the rank rule are those of ``out_layer`` (the same m and n), so the two variants
describe the same adaptors and differ only in how the factors are stored and, with
``init="paper"``, in the random factor's fan-in (r, a linear LoRA's, against
:math:`r k_1 k_2`).

Choice where the paper is ambiguous: App. F.1 writes V with the kernel :math:`k_1 \times 1` and
U with :math:`1 \times k_2`, and says the split of the kernel "can be done adaptively"; the
authors' public code gives the in convolution :math:`(1, k_{min})` or :math:`(1, k_{max})` by
comparing c_in and c_out. Here ``balanced_2d``'s in convolution always holds the width axis and
its out convolution the height axis, so that the adaptor keeps the base kernel's shape and
merges exactly. For square kernels (every model of the paper) this and the public code's rule
coincide. ``filter_wise`` keeps App. F.1's orientation, so that its count is the paper's for
any kernel.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..._validation import integer, is_int
from ...errors import ParameterError
from .adaptor import MatrixView, MixtureAdaptor, MixtureContext
from .budget import check_rho
from .linear import resolve_rank

__all__ = ["MixtureConv2d", "CONV_VARIANTS", "filter_rank"]

#: variant -> (axes held by the in convolution V, axes held by the out convolution U)
CONV_VARIANTS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "balanced_2d": ((1,), (0,)),
    "in_layer": ((0, 1), ()),
    "out_layer": ((), (0, 1)),
    "filter_wise": ((0,), (1,)),
    "reshaped_linear": ((), (0, 1)),
}


def _pair(v, name: str) -> tuple[int, int]:
    if is_int(v):
        return (int(v), int(v))
    if isinstance(v, tuple) and len(v) == 2 and all(is_int(e) for e in v):
        return (int(v[0]), int(v[1]))
    raise ParameterError(f"MixtureConv2d: unsupported {name} {v!r}; expected an int or a pair")


def filter_rank(
    rho: float | None, rank: int | None, c_out: int, c_in: int, kernel: tuple[int, int]
) -> int:
    r"""The filter rank r of a filter-wise ConvLoRA (module docstring; App. F.1, eq. (39)).

    Parameters
    ----------
    rho : float, optional
        Relative budget in (0, 1]; ignored where ``rank`` is given.
    rank : int, optional
        An explicit filter rank, in [1, min(k1, k2)].
    c_out, c_in : int
        The base convolution's channels.
    kernel : (int, int)
        Its kernel (k1, k2).

    Returns
    -------
    int
        :math:`\max(1, \lfloor\rho\, c_{in} k_1 k_2 / (c_{out} k_2 + c_{in} k_1)\rfloor)`, the
        largest r whose :math:`(c_{out} k_2 + c_{in} k_1) c_{out} r` parameters fit the budget
        :math:`\rho\, c_{out} c_{in} k_1 k_2` (at least 1, at most min(k1, k2)); or ``rank``.

    Raises
    ------
    ParameterError
        Neither given, ``rho`` outside (0, 1], or ``rank`` outside [1, min(k1, k2)].
    """
    k1, k2 = kernel
    top = min(k1, k2)
    if rank is not None:
        return integer(
            rank, "MixtureConv2d: filter_wise rank (<= min(k1, k2))", minimum=1, maximum=top
        )
    if rho is None:
        raise ParameterError("MixtureConv2d: give rho (relative budget) or rank")
    rho = check_rho(rho, "MixtureConv2d")
    # the small guard keeps exact quotients from flooring one below, as lora_rank's
    r = math.floor(rho * c_in * k1 * k2 / (c_out * k2 + c_in * k1) + 1e-9)
    return min(max(1, r), top)


class MixtureConv2d(MixtureAdaptor):
    """A ``nn.Conv2d`` plus C ConvLoRA adaptors mixed by the router (module docstring).

    Parameters
    ----------
    base : torch.nn.Conv2d
        ``groups=1`` and ``padding_mode="zeros"`` (an adaptor of a grouped or circularly padded
        convolution would not merge into it); padding an int, a pair or ``"valid"``.
    context : MixtureContext
    rho, rank, bias, init
        As :class:`~riemfl.nn.floral.MixtureLinear`; for ``filter_wise`` the rank (given or
        from ``rho``) is the filter rank (:func:`filter_rank`) and ``self.rank``, the matrix
        rank, is c_out times it.
    variant : {"balanced_2d", "in_layer", "out_layer", "filter_wise", "reshaped_linear"}
        The factorisation (module docstring).

    Raises
    ------
    ParameterError
        For a base that is not a plain ``nn.Conv2d`` (grouped, circular padding), an unknown
        variant or init, a rank out of range, or a rho outside (0, 1].
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
        #: the filter rank of a filter-wise adaptor (None for the other variants)
        self.filter_rank: int | None = None
        if variant == "filter_wise":
            self.filter_rank = filter_rank(rho, rank, c_out, c_in, kernel)
            r = self.filter_rank * c_out  # r filters per output channel: r c_out middle channels
        else:
            r = resolve_rank(rho, rank, m, n, "MixtureConv2d")
        c = context.n_clusters
        w = base.weight
        self.base = base
        self.variant = variant
        self.rank = r
        self._reshaped = variant == "reshaped_linear"
        if self._reshaped:
            # the linear LoRA's matrices: U (c_out k1 k2) x r, rows (i, a, b); V r x c_in
            self.lora_out = nn.Parameter(torch.empty(c, m, r, dtype=w.dtype, device=w.device))
            self.lora_in = nn.Parameter(torch.empty(c, r, n, dtype=w.dtype, device=w.device))
            self.out_view = MatrixView((m, r), (0, 1))
            self.in_view = MatrixView((r, n), (1, 0))
            fan_in_out = r
        else:
            self.lora_out = nn.Parameter(
                torch.empty(c, c_out, r, *k_out, dtype=w.dtype, device=w.device)
            )
            self.lora_in = nn.Parameter(
                torch.empty(c, r, c_in, *k_in, dtype=w.dtype, device=w.device)
            )
            # A: rows (i, a_o, b_o), B: rows (j, a_i, b_i); the rank axis last
            self.out_view = MatrixView((c_out, r, *k_out), (0, 2, 3, 1))
            self.in_view = MatrixView((r, c_in, *k_in), (1, 2, 3, 0))
            fan_in_out = r * k_out[0] * k_out[1]
        self._dims = (c_out, c_in, *k_out, *k_in, m, n, c * r)
        self._init_factors(init, fan_in_in=n, fan_in_out=fan_in_out)
        self._make_bias(bias, c_out, w)

    def _base_call(self, x, weight, bias):
        return self.base._conv_forward(x, weight, bias)

    def _merged_weight(self, w, weight):
        # K([w_1 A_1 ... w_C A_C][B_1 ... B_C]^T): one (m, C r) x (C r, n) product, whose
        # right factor is a reshape of lora_in, then the (m, n) matrix seen as a kernel
        _, n, cr = self._dims[6:]
        scaled = self._out_matrix() * self._w_repeated(w)
        delta = self.weight_from_matrix(scaled @ self.lora_in.reshape(cr, n))
        return delta if weight is None else weight + delta

    def _out_kernels(self) -> torch.Tensor:
        """``lora_out`` as the out convolutions' kernels, (C, c_out, r, k_h, k_w)."""
        if not self._reshaped:
            return self.lora_out
        c_out, _, kh_o, kw_o = self._dims[:4]
        c, _, r = self.lora_out.shape
        return self.lora_out.view(c, c_out, kh_o, kw_o, r).permute(0, 1, 4, 2, 3)

    def _in_kernels(self) -> torch.Tensor:
        """``lora_in`` as the in convolutions' kernels, (C, r, c_in, k_h, k_w)."""
        if not self._reshaped:
            return self.lora_in
        return self.lora_in[..., None, None]

    def _out_matrix(self) -> torch.Tensor:
        r""":math:`[A_1 \cdots A_C]`, shape (m, C r), rows (i, a_o, b_o), columns (c, k)."""
        m, _, cr = self._dims[6:]
        return self._out_kernels().permute(1, 3, 4, 0, 2).reshape(m, cr)

    def weight_from_matrix(self, matrix: torch.Tensor) -> torch.Tensor:
        # rows (i, a_o, b_o) and columns (j, a_i, b_i) -> (i, j, a_o a_i, b_o b_i); one of a_o,
        # a_i and one of b_o, b_i has size 1, so this is a view of the matrix
        c_out, c_in, kh_o, kw_o, kh_i, kw_i = self._dims[:6]
        kernel = matrix.view(c_out, kh_o, kw_o, c_in, kh_i, kw_i).permute(0, 3, 1, 4, 2, 5)
        return kernel.reshape(self.base.weight.shape)

    def factored_output(self, x: torch.Tensor, pi: torch.Tensor | None = None) -> torch.Tensor:
        """The two convolutions :math:`U * (V * x)` of every cluster, weighted (no base)."""
        w = self.context.weights(pi)
        v_k, u_k = self._in_kernels(), self._out_kernels()
        c, r = v_k.shape[:2]
        h = F.conv2d(x, v_k.reshape(c * r, *v_k.shape[2:]), **self._in_geometry)
        h = h * self._w_repeated(w)[:, None, None]
        u = u_k.transpose(0, 1).reshape(u_k.shape[1], c * r, *u_k.shape[3:])
        out = F.conv2d(h, u, **self._out_geometry)
        return out if self.lora_bias is None else out + (w @ self.lora_bias)[:, None, None]

    def extra_repr(self) -> str:
        filters = "" if self.filter_rank is None else f", filter_rank={self.filter_rank}"
        return (
            f"clusters={self.n_clusters}, rank={self.rank}{filters}, variant={self.variant}, "
            f"bias={self.lora_bias is not None}"
        )

r"""A plain torch model turned into its FLoRAL version, and the merged model for inference.

:func:`floralize` copies a model and replaces, by layer type, every ``nn.Linear`` by a
:class:`~riemfl.nn.floral.MixtureLinear` and every ``nn.Conv2d`` by a
:class:`~riemfl.nn.floral.MixtureConv2d`; all of them read the mixture weights of one shared
:class:`~riemfl.nn.floral.Router` (one router per client for the whole model, the paper's
default; per-layer routers are a choice it leaves open). The result, :class:`FloralModel`,
computes the model of the FML objective (Almansoori et al. 2024, Sec. 5) with weight sharing
(Sec. 3.1, MFL-WS)

.. math::

    f^k\Bigl(\sum_c \pi^k_c w_c\Bigr),\qquad w_c = (u, a_c),

with the mixture taken over adaptor **outputs** (equivalently products), never over the
factors (a choice: the FML objective mixes parameter vectors, the paper's synthetic targets,
Sec. 6 eq. (9), mix products). :meth:`FloralModel.merge` folds the adaptors into the base for a
given :math:`\pi`: :math:`W_{eff} = W + \alpha\sum_c \pi_c L_c`,
:math:`b_{eff} = b + \alpha\sum_c \pi_c L_{b,c}`, a plain model with the base's architecture and
speed whose outputs equal the unmerged model's (Sec. 5: for inference "the weights can be merged
once").

A FloralModel is plain torch: it runs on any device and dtype the base model runs on, under
``torch.func`` transforms and autocast, and under ``torch.compile`` (tested against eager).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from ..._validation import integer
from ...errors import ParameterError
from .adaptor import MixtureAdaptor, MixtureContext
from .budget import check_rho
from .conv import MixtureConv2d
from .linear import MixtureLinear
from .router import Router

__all__ = ["FloralModel", "floralize", "LAYER_TYPES"]

#: layer-type names accepted by ``floralize(layer_types=...)``
LAYER_TYPES = ("linear", "conv2d")


class FloralModel(nn.Module):
    """A base model with C adaptors per adapted layer and one router (module docstring).

    Build it with :func:`floralize`. Parameter names: ``model.<path>.base.*`` (the federated
    base), ``model.<path>.lora_out/lora_in/lora_bias`` (adaptors, leading axis C),
    ``router.logits`` (personal). :meth:`parameter_roles` tells the federated layout which is
    which.

    Attributes
    ----------
    model : torch.nn.Module
        The copy of the base model with adapted layers in place.
    router : Router
    context : MixtureContext
    private_adaptors : bool
        True for the "Local Adaptor" baseline: the adaptors stay on the client.
    """

    def __init__(
        self,
        model: nn.Module,
        router: Router,
        context: MixtureContext,
        private_adaptors: bool = False,
    ) -> None:
        super().__init__()
        self.model = model
        self.router = router
        self.context = context
        self.private_adaptors = bool(private_adaptors)

    @property
    def n_clusters(self) -> int:
        return self.context.n_clusters

    def adaptors(self) -> list[tuple[str, MixtureAdaptor]]:
        """The adapted layers, as ``(qualified name, layer)`` pairs in module order."""
        return [(n, m) for n, m in self.named_modules() if isinstance(m, MixtureAdaptor)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The model's output for the router's current pi.

        The mixture weights are computed once (:meth:`MixtureContext.set`); every adapted layer
        then merges its own weight and bias and runs its base operation
        (:meth:`MixtureAdaptor.forward`), so the model runs as the base model does.
        """
        context = self.context
        context.set(self.router())
        try:
            return self.model(x)
        finally:
            context.set(None)

    def parameter_roles(self) -> dict[str, str]:
        """``name -> "base" | "cluster" | "private" | "router"`` for every parameter."""
        adaptor_role = "private" if self.private_adaptors else "cluster"
        roles = {}
        for name, _ in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if name == "router.logits":
                roles[name] = "router"
            elif leaf in ("lora_out", "lora_in", "lora_bias"):
                roles[name] = adaptor_role
            else:
                roles[name] = "base"
        return roles

    def factor_pairs(self) -> list[tuple[str, MixtureAdaptor]]:
        """``(prefix, layer)`` of every adaptor: its factors are ``prefix + ".lora_out"`` etc."""
        return self.adaptors()

    @torch.no_grad()
    def merge(self, pi: torch.Tensor | Sequence[float] | None = None) -> nn.Module:
        """A plain copy of the base model with :math:`\\alpha\\sum_c \\pi_c L_c` folded in.

        Parameters
        ----------
        pi : tensor or sequence of float, shape (C,), optional
            Mixture weights (default: the router's noiseless probabilities).

        Returns
        -------
        torch.nn.Module
            The original architecture (``nn.Linear``/``nn.Conv2d`` where the adapted layers
            were), independent of this model; its outputs equal this model's (in eval mode:
            the router's training noise is not part of the merge).
        """
        p = self.router.probabilities() if pi is None else torch.as_tensor(pi)
        if p.shape != (self.n_clusters,):
            raise ParameterError(
                f"merge: pi must have shape ({self.n_clusters},), got {tuple(p.shape)}"
            )
        merged = copy.deepcopy(self.model)
        self.context.set(p.to(next(self.parameters()).dtype))
        try:
            for name, layer in list(_adapted_children(self.model)):
                _set_submodule(merged, name, layer.merged_base())
        finally:
            self.context.set(None)
        return merged


def _adapted_children(model: nn.Module):
    for name, m in model.named_modules():
        if isinstance(m, MixtureAdaptor):
            yield name, m


def _set_submodule(root: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, leaf = name.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, leaf, new)


def floralize(
    model: nn.Module,
    n_clusters: int,
    rho: float | None = 0.01,
    *,
    rank: int | None = None,
    layer_types: Sequence[str] = LAYER_TYPES,
    exclude: Sequence[str] = (),
    conv_variant: str = "balanced_2d",
    bias: bool = True,
    lora_scale: float = 1.0,
    min_prob: float = 0.0,
    init: str = "lora",
    routing: str = "learned",
    router_noise: float = 0.0,
    private_adaptors: bool = False,
    seed: int | None = None,
) -> FloralModel:
    """The FLoRAL version of ``model``: adaptors on every layer of the given types.

    Parameters
    ----------
    model : torch.nn.Module
        Left untouched; a deep copy is adapted.
    n_clusters : int
        C, adaptors per adapted layer.
    rho : float, default 0.01
        Relative parameter budget per adaptor (Almansoori et al. 2024, Sec. 3.2); ignored where
        ``rank`` is given.
    rank : int, optional
        One explicit rank for every adapted layer (the synthetic tasks' r).
    layer_types : sequence of {"linear", "conv2d"}
        Which layer types get adaptors.
    exclude : sequence of str
        Qualified module names (as in ``model.named_modules()``) to leave plain.
    conv_variant : {"balanced_2d", "in_layer", "out_layer"}
        The ConvLoRA factorisation (:mod:`riemfl.nn.floral.conv`).
    bias : bool, default True
        Bias adaptors (Almansoori et al. 2024, Sec. 3.2, "can be crucial"; App. G.3).
    lora_scale : float, default 1
        :math:`\\alpha`, the adaptor output scale (eq. (9)'s :math:`\\alpha`; the authors' public
        code, zeligism/FLoRAL, calls it ``alpha``).
    min_prob : float, default 0
        Clamp of the mixture weights from below without renormalising (not in the paper; the
        authors' public code clamps at 0.01).
    init : {"lora", "paper"}
        Which factor starts random (:data:`~riemfl.nn.floral.adaptor.INITS`: the paper's text,
        Sec. 3.2, and the authors' public code differ).
    routing : {"learned", "fixed"}
        Router mode (:mod:`riemfl.nn.floral.router`); "fixed" for the oracle :math:`\\pi^*`.
    router_noise : float, default 0
        Training noise on the router logits (the public code's ``noise_std``; not in the paper).
    private_adaptors : bool, default False
        Keep the adaptors on the client (the "Local Adaptor" baseline, with C = 1).
    seed : int, optional
        Seed of the adaptor initialisation (``torch.manual_seed`` inside ``fork_rng``).

    Raises
    ------
    ParameterError
        For an unknown layer type or variant, a layer that cannot be adapted (grouped
        convolution), an ``exclude`` name that is not a module, or a model with no layer to
        adapt.
    """
    n_clusters = integer(n_clusters, "floralize: n_clusters", minimum=1)
    if rank is None:
        check_rho(rho, "floralize")
    bad = [t for t in layer_types if t not in LAYER_TYPES]
    if bad:
        raise ParameterError(
            f"floralize: unknown layer types {bad}; expected some of {LAYER_TYPES}"
        )
    names = {n for n, _ in model.named_modules()}
    missing = [n for n in exclude if n not in names]
    if missing:
        raise ParameterError(f"floralize: exclude names {missing} are not modules of the model")
    copied = copy.deepcopy(model)
    context = MixtureContext(n_clusters, lora_scale, min_prob)
    kinds = {"linear": (nn.Linear, MixtureLinear), "conv2d": (nn.Conv2d, MixtureConv2d)}
    chosen = [kinds[t] for t in layer_types]
    targets = []
    for name, module in copied.named_modules():
        if name in exclude or not name:
            continue
        for cls, wrapper in chosen:
            if type(module) is cls:
                targets.append((name, module, wrapper))
    if not targets:
        raise ParameterError(
            f"floralize: the model has no layer of the types {list(layer_types)} to adapt "
            "(a bare nn.Linear must be wrapped, e.g. in nn.Sequential)"
        )
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(int(seed))
        for name, module, wrapper in targets:
            extra = {"variant": conv_variant} if wrapper is MixtureConv2d else {}
            layer = wrapper(module, context, rho=rho, rank=rank, bias=bias, init=init, **extra)
            _set_submodule(copied, name, layer)
    router = Router(n_clusters, routing, router_noise)
    weight = next(p for p in model.parameters() if p.is_floating_point())  # an adapted layer's
    router = router.to(dtype=weight.dtype, device=weight.device)  # the mixture weights' dtype
    return FloralModel(copied, router, context, private_adaptors)

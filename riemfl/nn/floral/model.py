r"""A plain torch model turned into its FLoRAL version, and the merged model for inference.

:func:`floralize` copies a model and replaces, by layer type, every ``nn.Linear`` by a
:class:`~riemfl.nn.floral.MixtureLinear`, every ``nn.Conv2d`` by a
:class:`~riemfl.nn.floral.MixtureConv2d` and, when asked, every normalisation layer by a
:class:`~riemfl.nn.floral.MixtureNorm` (App. F.2); all of them read the mixture weights of one
shared :class:`~riemfl.nn.floral.Router` (one router per client for the whole model, the paper's
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
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from ..._validation import integer
from ...errors import ParameterError
from .adaptor import MixtureAdaptor, MixtureContext
from .budget import check_rho
from .conv import MixtureConv2d
from .linear import MixtureLinear
from .norm import NORM_LAYERS, NORM_STATISTICS, NORM_VARIANTS, MixtureNorm, statistics_roles
from .router import Router

__all__ = ["FloralModel", "floralize", "LAYER_TYPES", "ACCEPTED_LAYER_TYPES"]

#: the layer types ``floralize`` adapts by default (the paper's experiments adapt linear and
#: convolution layers only)
LAYER_TYPES = ("linear", "conv2d")

#: every layer-type name ``floralize(layer_types=...)`` accepts: the defaults and one name per
#: normalisation family of App. F.2 (batch, instance, layer, group), so that a model's batch
#: normalisations (Batch NorA) can be adapted without its layer normalisations, or the reverse
ACCEPTED_LAYER_TYPES = LAYER_TYPES + tuple(NORM_LAYERS)

#: the adaptor parameters of every adapted layer (their role: "cluster", or "private")
_ADAPTOR_LEAVES = ("lora_out", "lora_in", "lora_bias", "lora_gamma")


class FloralModel(nn.Module):
    """A base model with C adaptors per adapted layer and one router (module docstring).

    Build it with :func:`floralize`. Parameter names: ``model.<path>.base.*`` (the federated
    base), ``model.<path>.lora_out/lora_in/lora_bias/lora_gamma`` (adaptors, leading axis C),
    ``router.logits`` (personal). :meth:`parameter_roles` tells the federated layout which is
    which, and where the normalisation layers' running statistics go.

    Attributes
    ----------
    model : torch.nn.Module
        The copy of the base model with adapted layers in place.
    router : Router
    context : MixtureContext
    private_adaptors : bool
        True for the "Local Adaptor" baseline: the adaptors stay on the client.
    norm_statistics : {"shared", "local"}
        Where the running statistics of the plain normalisation layers live
        (:data:`~riemfl.nn.floral.norm.NORM_STATISTICS`).
    """

    def __init__(
        self,
        model: nn.Module,
        router: Router,
        context: MixtureContext,
        private_adaptors: bool = False,
        norm_statistics: str = "shared",
    ) -> None:
        super().__init__()
        if norm_statistics not in NORM_STATISTICS:
            choices = NORM_STATISTICS
            raise ParameterError(
                f"FloralModel: norm_statistics must be one of {choices}, got {norm_statistics!r}"
            )
        self.model = model
        self.router = router
        self.context = context
        self.private_adaptors = bool(private_adaptors)
        self.norm_statistics = norm_statistics

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
        """``name -> "base" | "cluster" | "private" | "router"`` for every parameter, and for
        the running statistics of the normalisation layers
        (:func:`~riemfl.nn.floral.norm.statistics_roles`)."""
        adaptor_role = "private" if self.private_adaptors else "cluster"
        roles = {}
        for name, _ in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if name == "router.logits":
                roles[name] = "router"
            elif leaf in _ADAPTOR_LEAVES:
                roles[name] = adaptor_role
            else:
                roles[name] = "base"
        roles.update(statistics_roles(self, self.norm_statistics == "shared"))
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
            The original architecture (``nn.Linear``/``nn.Conv2d``/the normalisation layer
            where the adapted layers were), independent of this model; its outputs equal this
            model's (in eval mode: the router's training noise is not part of the merge, and
            normalisation layers merge for their running statistics).
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
        if isinstance(m, (MixtureAdaptor, MixtureNorm)):
            yield name, m


def _set_submodule(root: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, leaf = name.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, leaf, new)


def _layer_ranks(rank: int | Mapping[str, int] | None, names: list[str]) -> dict:
    """The explicit rank of each adapted linear or convolution layer (None: from rho)."""
    if not isinstance(rank, Mapping):
        return dict.fromkeys(names, rank)
    unknown = sorted(set(rank) - set(names))
    if unknown:
        raise ParameterError(
            f"floralize: rank names layers {unknown} that are not adapted; adapted linear and "
            f"convolution layers: {names}"
        )
    return {
        n: integer(rank[n], f"floralize: rank[{n!r}]", minimum=1) if n in rank else None
        for n in names
    }


def floralize(
    model: nn.Module,
    n_clusters: int,
    rho: float | None = 0.01,
    *,
    rank: int | Mapping[str, int] | None = None,
    layer_types: Sequence[str] = LAYER_TYPES,
    exclude: Sequence[str] = (),
    conv_variant: str = "balanced_2d",
    norm_variant: str = "scale",
    norm_statistics: str = "shared",
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
    rank : int or mapping of str to int, optional
        One explicit rank for every adapted layer (the synthetic tasks' r), or a rank per
        layer keyed by its qualified name (as in ``model.named_modules()``); the layers a
        mapping does not name take their rank from ``rho``.
    layer_types : sequence of str
        Which layer types get adaptors, among :data:`ACCEPTED_LAYER_TYPES` ("linear",
        "conv2d", "batchnorm", "instancenorm", "layernorm", "groupnorm"; default
        :data:`LAYER_TYPES`, linear and convolution layers). The normalisation types adapt
        ``nn.BatchNorm1d/2d/3d``, ``nn.InstanceNorm1d/2d/3d``, ``nn.LayerNorm`` and
        ``nn.GroupNorm`` (:class:`~riemfl.nn.floral.MixtureNorm`, App. F.2).
    exclude : sequence of str
        Qualified module names (as in ``model.named_modules()``) to leave plain.
    conv_variant : {"balanced_2d", "in_layer", "out_layer"}
        The ConvLoRA factorisation (:mod:`riemfl.nn.floral.conv`).
    norm_variant : {"scale", "nora", "nora_naive"}
        The adaptor of the batch normalisations (:mod:`riemfl.nn.floral.norm`): App. F.2's
        scale adaptor, or Batch NorA reparameterised (eq. (42)) or not; the other
        normalisation types always get the scale adaptor.
    norm_statistics : {"shared", "local"}
        The base normalisation layers' running statistics: averaged with the weights
        :math:`N^k` like the base, or kept by each client (Batch NorA's own statistics are
        always kept by the client).
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
        For an unknown layer type, variant or ``norm_statistics``, a layer that cannot be
        adapted (grouped convolution, normalisation without affine parameters, Batch NorA on
        a batch normalisation without running statistics), an ``exclude`` name that is not a
        module, a ``rank`` mapping naming a layer that is not an adapted linear or convolution
        layer, or a model with no layer to adapt.
    """
    n_clusters = integer(n_clusters, "floralize: n_clusters", minimum=1)
    if rank is None or isinstance(rank, Mapping):
        check_rho(rho, "floralize")
    bad = [t for t in layer_types if t not in ACCEPTED_LAYER_TYPES]
    if bad:
        raise ParameterError(
            f"floralize: unknown layer types {bad}; expected some of {ACCEPTED_LAYER_TYPES}"
        )
    if norm_variant not in NORM_VARIANTS:
        raise ParameterError(
            f"floralize: norm_variant must be one of {NORM_VARIANTS}, got {norm_variant!r}"
        )
    if norm_statistics not in NORM_STATISTICS:
        choices = NORM_STATISTICS
        raise ParameterError(
            f"floralize: norm_statistics must be one of {choices}, got {norm_statistics!r}"
        )
    names = {n for n, _ in model.named_modules()}
    missing = [n for n in exclude if n not in names]
    if missing:
        raise ParameterError(f"floralize: exclude names {missing} are not modules of the model")
    copied = copy.deepcopy(model)
    context = MixtureContext(n_clusters, lora_scale, min_prob)
    kinds = {"linear": ((nn.Linear,), MixtureLinear), "conv2d": ((nn.Conv2d,), MixtureConv2d)}
    kinds.update({t: (classes, MixtureNorm) for t, classes in NORM_LAYERS.items()})
    chosen = [kinds[t] for t in layer_types]
    targets = []
    for name, module in copied.named_modules():
        if name in exclude or not name:
            continue
        for classes, wrapper in chosen:
            if type(module) in classes:
                targets.append((name, module, wrapper))
    if not targets:
        raise ParameterError(
            f"floralize: the model has no layer of the types {list(layer_types)} to adapt "
            "(a bare nn.Linear must be wrapped, e.g. in nn.Sequential)"
        )
    ranks = _layer_ranks(rank, [n for n, _, wrapper in targets if wrapper is not MixtureNorm])
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(int(seed))
        for name, module, wrapper in targets:
            if wrapper is MixtureNorm:
                batch = type(module) in NORM_LAYERS["batchnorm"]
                variant = norm_variant if batch else "scale"
                layer = MixtureNorm(
                    module, context, bias=bias, variant=variant, statistics=norm_statistics
                )
            else:
                extra = {"variant": conv_variant} if wrapper is MixtureConv2d else {}
                layer = wrapper(
                    module, context, rho=rho, rank=ranks[name], bias=bias, init=init, **extra
                )
            _set_submodule(copied, name, layer)
    router = Router(n_clusters, routing, router_noise)
    weight = next(p for p in model.parameters() if p.is_floating_point())  # an adapted layer's
    router = router.to(dtype=weight.dtype, device=weight.device)  # the mixture weights' dtype
    return FloralModel(copied, router, context, private_adaptors, norm_statistics)

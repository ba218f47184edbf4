r"""A plain torch model turned into its FLoRAL version, and the merged model for inference.

:func:`floralize` copies a model and replaces, by layer type, every ``nn.Linear`` by a
:class:`~riemfl.nn.floral.MixtureLinear` and every ``nn.Conv2d`` by a
:class:`~riemfl.nn.floral.MixtureConv2d`; all of them read the mixture weights of one shared
:class:`~riemfl.nn.floral.Router` (one router per client for the whole model, B.11 item 2). The
result, :class:`FloralModel`, computes the FML objective's model (digest B.1)

.. math::

    f^k\Bigl(\sum_c \pi^k_c w_c\Bigr),\qquad w_c = (u, a_c),

with the mixture taken over adaptor **outputs** (equivalently products), never over the
factors (B.11 item 1). :meth:`FloralModel.merge` folds the adaptors into the base for a given
:math:`\pi`: :math:`W_{eff} = W + \alpha\sum_c \pi_c L_c`, :math:`b_{eff} = b + \alpha\sum_c
\pi_c L_{b,c}` (B.9 item 2), a plain model with the base's architecture and speed whose outputs
equal the unmerged model's.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from ...errors import ParameterError
from . import kernels
from .adaptor import MixtureAdaptor, MixtureContext
from .budget import check_rho
from .chain import make_fusable, make_plain
from .conv import MixtureConv2d
from .fused import _transforms_active, autocast_enabled
from .linear import MixtureLinear
from .router import Router

__all__ = ["FloralModel", "floralize", "LAYER_TYPES", "BACKENDS"]

#: layer-type names accepted by ``floralize(layer_types=...)``
LAYER_TYPES = ("linear", "conv2d")
#: values of :attr:`FloralModel.backend`
BACKENDS = ("auto", "layers", "torch")


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
    backend : {"auto", "layers", "torch"}
        How the adapted layers run in :meth:`forward`: ``"auto"`` (default) in the compiled
        FLoRAL layer on the CPU where it is available (:mod:`~riemfl.nn.floral.kernels`), runs
        of adapted linear layers and activations in one autograd node each
        (:mod:`~riemfl.nn.floral.chain`), every other adapted layer in one node; ``"layers"``:
        the same with one node per adapted layer (no chains); else, and always with
        ``"torch"``, with the merge of :mod:`~riemfl.nn.floral.fused` and the base operations.
        Same numbers either way.
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
        self.backend = "auto"

    @property
    def backend(self) -> str:
        return self.__dict__["_backend"]

    @backend.setter
    def backend(self, value: str) -> None:
        if value not in BACKENDS:
            raise ParameterError(f"FloralModel.backend must be one of {BACKENDS}, got {value!r}")
        self.__dict__["_backend"] = value

    def __setstate__(self, state: dict) -> None:
        state.setdefault("_backend", "auto")  # models pickled before the compiled layer
        super().__setstate__(state)

    @property
    def n_clusters(self) -> int:
        return self.context.n_clusters

    def adaptors(self) -> list[tuple[str, MixtureAdaptor]]:
        """The adapted layers, as ``(qualified name, layer)`` pairs in module order."""
        return [(n, m) for n, m in self.named_modules() if isinstance(m, MixtureAdaptor)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The model's output for the router's current pi.

        On the CPU with the compiled layer (:attr:`backend` ``"auto"``) every adapted layer runs
        in it, and runs of adapted linear layers and activations in one compiled node each
        (:mod:`~riemfl.nn.floral.chain`), which take the router's logits and do the softmax
        themselves. Otherwise the merged weights of all adapted layers are computed first, in
        one autograd node (:meth:`MixtureContext.set`), then the model runs as the base model
        does. The adapted layers are listed at the first call; a layer put into the model later
        still works (it merges its own weights) and :meth:`refresh_layers` lists it again.
        """
        router, context = self._modules["router"], self.__dict__["context"]
        backend = self.__dict__["_backend"]
        kernel = None if backend == "torch" else _compiled_layer(router._parameters["logits"])
        if kernel is not None:
            chains = backend == "auto"
            logits = router.pass_logits()
            if logits is None:
                context.set_compiled(kernel, pi=router.fixed, chains=chains)
            elif context.layers_need_weights or not chains:  # one softmax node for all layers
                context.set_compiled(kernel, pi=torch.softmax(logits, 0), chains=chains)
            else:  # only chains so far: they take the logits
                context.set_compiled(kernel, logits=logits)
        else:  # merged in one node: the layers that ran factored last time do so again
            layers = self.__dict__.get("_adapted_layers")
            if layers is None:
                layers = self.__dict__["_adapted_layers"] = tuple(m for _, m in self.adaptors())
            context.set(router(), [m for m in layers if not m.__dict__.get("_factored_hint")])
        try:
            return self._modules["model"](x)
        finally:
            context.set(None)

    def refresh_layers(self) -> None:
        """Forget the list of adapted layers (after replacing modules of ``self.model``)."""
        self.__dict__.pop("_adapted_layers", None)

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
        make_plain(merged)
        return merged


def _compiled_layer(like: torch.Tensor):
    """The compiled FLoRAL layer (:mod:`~riemfl.nn.floral.kernels`) for a forward pass of a
    model whose router logits are ``like``, or None for the torch path (other devices and
    dtypes, ``torch.func`` transforms, CPU autocast, the extension off or not buildable)."""
    if (
        not like.is_cpu
        or like.dtype not in kernels.DTYPES
        or _transforms_active()
        or autocast_enabled("cpu")
    ):
        return None
    return kernels.load()


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
        Relative parameter budget per adaptor (digest B.2); ignored where ``rank`` is given.
    rank : int, optional
        One explicit rank for every adapted layer (the synthetic tasks' r).
    layer_types : sequence of {"linear", "conv2d"}
        Which layer types get adaptors.
    exclude : sequence of str
        Qualified module names (as in ``model.named_modules()``) to leave plain.
    conv_variant : {"balanced_2d", "in_layer", "out_layer"}
        The ConvLoRA factorisation (:mod:`riemfl.nn.floral.conv`).
    bias : bool, default True
        Bias adaptors (the paper calls them "crucial", Section G.3).
    lora_scale : float, default 1
        :math:`\\alpha`, the adaptor output scale (the [OUTSIDE] code's ``alpha``).
    min_prob : float, default 0
        Clamp of the mixture weights from below without renormalising ([OUTSIDE] code: 0.01).
    init : {"lora", "paper"}
        Which factor starts random (B.8 item 3).
    routing : {"learned", "fixed"}
        Router mode (:mod:`riemfl.nn.floral.router`); "fixed" for the oracle :math:`\\pi^*`.
    router_noise : float, default 0
        Training noise on the router logits ([OUTSIDE] ``noise_std``).
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
    if isinstance(n_clusters, bool) or not isinstance(n_clusters, int) or n_clusters < 1:
        raise ParameterError(f"floralize: n_clusters must be an int >= 1, got {n_clusters!r}")
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
    make_fusable(copied)
    router = Router(n_clusters, routing, router_noise)
    return FloralModel(copied, router, context, private_adaptors)

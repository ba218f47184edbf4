r"""Normalisation adaptors (Almansoori et al. 2024, App. F.2), with Batch NorA (eq. (42)).

A normalisation layer (batch, instance, layer or group normalisation) normalises its input
along some axes, :math:`\hat h`, then scales and shifts it channel- or element-wise,
:math:`\gamma \odot \hat h + \beta`. Its adaptor (App. F.2) is a tensor of :math:`\gamma`'s
shape, zero at start, per cluster: :math:`L_{\gamma,c}` (``lora_gamma``), and, as every adapted
layer has one (Sec. 3.2, "Bias"), a bias adaptor :math:`L_{\beta,c}` (``lora_bias``). The router
mixes them as it mixes the other adaptors (:class:`~riemfl.nn.floral.MixtureContext`,
:math:`w_c = \alpha\max(\pi_c, \pi_{min})`):

.. math::

    y = \Bigl(\gamma + \sum_c w_c L_{\gamma,c}\Bigr) \odot \hat h + \beta
        + \sum_c w_c L_{\beta,c}
    \qquad (\text{variant } \texttt{"scale"}),

which is the base layer's output at start and is a plain normalisation layer with the merged
:math:`\gamma, \beta` (:meth:`MixtureNorm.merged_base`).

**Batch NorA** (App. F.2, exploratory). A batch normalisation normalises with statistics
(:math:`\hat\mu, \hat\sigma^2`: the batch's in training, the running estimates in evaluation),
and its adaptor is a batch normalisation of its own, with its own statistics
:math:`\hat\mu_a, \hat\sigma_a^2`, zero affine parameters at start, added to the base's output:

.. math::

    \text{BN-Adaptor}(x) = \text{BN}(x;\gamma,\beta)
        + \sum_c w_c\,\text{BN}_a(x; \gamma_c, \beta_c)
    \qquad (\texttt{"nora\_naive"}).

The reparameterisation of eq. (42) (``"nora"``) feeds :math:`\text{BN}_a` with

.. math::

    \gamma_c \to \hat s\,\gamma_c,\qquad
    \beta_c \to \beta_c + \hat m\,\mathrm{sg}(\gamma_c),\qquad
    \hat s = \frac{\sqrt{\hat\sigma_a^2 + \epsilon}}{\sqrt{\hat\sigma^2 + \epsilon}},\quad
    \hat m = \frac{\hat\mu_a - \hat\mu}{\sqrt{\hat\sigma^2 + \epsilon}},

(sg: stop-gradient), so that wherever both layers normalise with their running statistics
(evaluation) the output is

.. math::

    y = \frac{x - \hat\mu}{\sqrt{\hat\sigma^2 + \epsilon}}
        \Bigl(\gamma + \sum_c w_c \gamma_c\Bigr) + \beta + \sum_c w_c \beta_c

whatever the adaptor's statistics (the identity eq. (42) is built on; the tests check it), while
the gradient of :math:`\gamma_c` is taken through the adaptor's own normalisation.

Sharing (App. F.2: "those parameters are federated, but the statistics are local"; not FedBN,
where both are local): the adaptors :math:`L_{\gamma,c}, L_{\beta,c}` are cluster parameters,
aggregated per cluster like every adaptor; the adaptor's running statistics
(``lora_running_mean``, ``lora_running_var``, ``lora_num_batches_tracked``) stay on the client.
The base layer's running statistics are shared (averaged with the weights :math:`N^k`, as
federated averaging averages a model's state) or local, by ``statistics``
(:data:`NORM_STATISTICS`; :func:`statistics_roles` gives the federated layout every running
statistic's role).

Choices where the paper is silent:

* the C adaptor normalisations of a layer see the same batches, so their running statistics
  would coincide: one copy is kept per layer;
* :math:`\hat s, \hat m` use the running statistics in training too (the batch statistics of the
  base and the adaptor are equal there, which would make eq. (42) the identity); they are read
  before the batch updates them, and :math:`\epsilon` is inside both square roots (eq. (42) is
  written with :math:`\epsilon = 0`; so placed, the identity above holds exactly);
* with the base statistics local, the adaptor's statistics equal the base's (same batches, same
  start), :math:`\hat s = 1`, :math:`\hat m = 0` and the three variants coincide; they differ
  when the base statistics are shared;
* ``lora_bias`` exists with ``bias=True`` even where the base has no :math:`\beta`
  (``nn.LayerNorm(bias=False)``), as for linear layers.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import ParameterError, ShapeError
from .adaptor import MixtureContext

__all__ = [
    "MixtureNorm",
    "NORM_LAYERS",
    "NORM_VARIANTS",
    "NORM_STATISTICS",
    "statistics_roles",
]

#: layer type (a name ``floralize(layer_types=...)`` accepts) -> the torch modules it adapts
NORM_LAYERS: dict[str, tuple[type[nn.Module], ...]] = {
    "batchnorm": (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d),
    "instancenorm": (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d),
    "layernorm": (nn.LayerNorm,),
    "groupnorm": (nn.GroupNorm,),
}

#: "scale": the App. F.2 adaptor; "nora": Batch NorA reparameterised, eq. (42); "nora_naive":
#: Batch NorA without the reparameterisation (batch normalisation only for the last two)
NORM_VARIANTS = ("scale", "nora", "nora_naive")

#: where the base layers' running statistics live: "shared" (federated, weights N^k) or "local"
NORM_STATISTICS = ("shared", "local")

#: input dimensions each module accepts (with and without the batch axis)
_INPUT_DIMS: dict[type[nn.Module], tuple[int, ...]] = {
    nn.BatchNorm1d: (2, 3),
    nn.BatchNorm2d: (4,),
    nn.BatchNorm3d: (5,),
    nn.InstanceNorm1d: (2, 3),
    nn.InstanceNorm2d: (3, 4),
    nn.InstanceNorm3d: (4, 5),
}

#: the modules whose running statistics (buffers) a federated layout places
_WITH_STATISTICS = NORM_LAYERS["batchnorm"] + NORM_LAYERS["instancenorm"] + (nn.SyncBatchNorm,)
_STATISTICS = ("running_mean", "running_var", "num_batches_tracked")
_ADAPTOR_STATISTICS = tuple(f"lora_{name}" for name in _STATISTICS)


def norm_kind(module: nn.Module) -> str | None:
    """The layer type of ``module`` (a key of :data:`NORM_LAYERS`; exact class), or None."""
    for kind, classes in NORM_LAYERS.items():
        if type(module) in classes:
            return kind
    return None


class MixtureNorm(nn.Module):
    """A normalisation layer plus C scale (and bias) adaptors mixed by the router.

    Parameters
    ----------
    base : torch.nn.Module
        ``nn.BatchNorm1d/2d/3d``, ``nn.InstanceNorm1d/2d/3d``, ``nn.LayerNorm`` or
        ``nn.GroupNorm``, with affine parameters (``affine=True`` /
        ``elementwise_affine=True``); kept as ``self.base``.
    context : MixtureContext
        Shared with the other adapted layers of the model.
    bias : bool, default True
        Add the bias adaptors :math:`L_{\\beta,c}` (zero at start).
    variant : {"scale", "nora", "nora_naive"}
        :data:`NORM_VARIANTS`; the Batch NorA variants need a batch normalisation that tracks
        running statistics.
    statistics : {"shared", "local"}
        Where the base layer's running statistics live (:data:`NORM_STATISTICS`); the Batch
        NorA adaptor's own statistics are always local.

    Raises
    ------
    ParameterError
        For another module type, a layer without affine parameters, an unknown variant or
        statistics, or a Batch NorA variant on a layer that is not a batch normalisation
        tracking running statistics.
    """

    lora_bias: nn.Parameter | None

    def __init__(
        self,
        base: nn.Module,
        context: MixtureContext,
        *,
        bias: bool = True,
        variant: str = "scale",
        statistics: str = "shared",
    ) -> None:
        super().__init__()
        kind = norm_kind(base)
        if kind is None:
            raise ParameterError(
                "MixtureNorm adapts nn.BatchNorm1d/2d/3d, nn.InstanceNorm1d/2d/3d, nn.LayerNorm "
                f"or nn.GroupNorm, got {type(base).__name__}"
            )
        if variant not in NORM_VARIANTS:
            raise ParameterError(
                f"MixtureNorm: variant must be one of {NORM_VARIANTS}, got {variant!r}"
            )
        if statistics not in NORM_STATISTICS:
            raise ParameterError(
                f"MixtureNorm: statistics must be one of {NORM_STATISTICS}, got {statistics!r}"
            )
        gamma = base.weight
        if gamma is None:
            raise ParameterError(
                f"MixtureNorm: the {type(base).__name__} has no affine parameters (affine=False "
                "or elementwise_affine=False), so there is no gamma to adapt; exclude this layer"
            )
        if variant != "scale" and not (kind == "batchnorm" and base.track_running_stats):
            raise ParameterError(
                f"MixtureNorm: variant {variant!r} (Batch NorA) needs a batch normalisation that "
                f"tracks running statistics, got {type(base).__name__}"
                + (" with track_running_stats=False" if kind == "batchnorm" else "")
            )
        c = context.n_clusters
        self.context = context
        self.base = base
        self.kind = kind
        self.variant = variant
        self.statistics = statistics
        like = {"dtype": gamma.dtype, "device": gamma.device}
        self.lora_gamma = nn.Parameter(torch.zeros(c, *gamma.shape, **like))
        if bias:
            self.lora_bias = nn.Parameter(torch.zeros(c, *gamma.shape, **like))
        else:
            self.register_parameter("lora_bias", None)
        if variant != "scale":  # the adaptor's own statistics, from the base's current ones
            own = dict(base.named_buffers(recurse=False))
            for name, lora_name in zip(_STATISTICS, _ADAPTOR_STATISTICS, strict=True):
                self.register_buffer(lora_name, own[name].detach().clone())

    @property
    def n_clusters(self) -> int:
        return self.context.n_clusters

    # ------------------------------------------------------------------ mixtures
    @staticmethod
    def _mixed(start: torch.Tensor | None, lora: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        r""":math:`start + \sum_c w_c L_c` (``start`` None: the sum alone), in ``lora[0]``'s
        shape."""
        flat = lora.reshape(lora.shape[0], -1).T
        if start is None:
            return torch.mv(flat, w).view(lora.shape[1:])
        return torch.addmv(start.reshape(-1), flat, w).view(lora.shape[1:])

    def _adaptor_bias(self, w: torch.Tensor) -> torch.Tensor | None:
        return None if self.lora_bias is None else self._mixed(None, self.lora_bias, w)

    def _ratios(self) -> tuple[torch.Tensor, torch.Tensor]:
        r""":math:`(\hat s, \hat m)` of eq. (42) from the running statistics (module
        docstring)."""
        base = self.base
        sigma = torch.sqrt(base.running_var + base.eps)
        s = torch.sqrt(self.lora_running_var + base.eps) / sigma
        m = (self.lora_running_mean - base.running_mean) / sigma
        return s, m

    # ------------------------------------------------------------------ the forward pass
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The base normalisation with the adapted scale and shift of the current mixture."""
        w = self.context.weights()
        if self.kind == "batchnorm":
            return self._batch_norm(x, w)
        base = self.base
        weight = self._mixed(base.weight, self.lora_gamma, w)
        bias = base.bias
        if self.lora_bias is not None:
            bias = self._mixed(bias, self.lora_bias, w)
        if self.kind == "layernorm":
            return F.layer_norm(x, base.normalized_shape, weight, bias, base.eps)
        if self.kind == "groupnorm":
            return F.group_norm(x, base.num_groups, weight, bias, base.eps)
        return self._instance_norm(x, weight, bias)

    def _check_dims(self, x: torch.Tensor) -> None:
        dims = _INPUT_DIMS[type(self.base)]
        if x.dim() not in dims:
            raise ShapeError(
                f"MixtureNorm({type(self.base).__name__}): expected an input with "
                f"{' or '.join(map(str, dims))} dimensions, got shape {tuple(x.shape)}"
            )

    def _instance_norm(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        """``nn.InstanceNorm*``'s forward with the given affine parameters."""
        self._check_dims(x)
        base = self.base
        unbatched = x.dim() == _INPUT_DIMS[type(base)][0]
        if unbatched:
            x = x.unsqueeze(0)
        out = F.instance_norm(
            x,
            base.running_mean,
            base.running_var,
            weight,
            bias,
            self.training or not base.track_running_stats,
            base.momentum if base.momentum is not None else 0.0,
            base.eps,
        )
        return out.squeeze(0) if unbatched else out

    @staticmethod
    def _momentum(module: nn.Module, counter: torch.Tensor | None, training: bool) -> float:
        """The running statistics' update factor of one training batch (``nn.BatchNorm``'s
        rule: ``momentum``, or the cumulative 1 / n when it is None), counting the batch."""
        factor = 0.0 if module.momentum is None else module.momentum
        if training and module.track_running_stats and counter is not None:
            counter.add_(1)
            factor = 1.0 / float(counter) if module.momentum is None else module.momentum
        return factor

    def _batch_norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """Batch normalisation with its adaptors (module docstring), in training or evaluation
        mode as ``nn.BatchNorm`` (batch statistics in training, running ones in evaluation,
        unless the layer tracks none)."""
        self._check_dims(x)
        base = self.base
        training = self.training
        track = base.track_running_stats
        mean = base.running_mean if not training or track else None
        var = base.running_var if not training or track else None
        batch_stats = training or (mean is None and var is None)
        bias = self._adaptor_bias(w)
        if self.variant == "scale":
            factor = self._momentum(base, base.num_batches_tracked, training)
            weight = self._mixed(base.weight, self.lora_gamma, w)
            shift = base.bias if bias is None else base.bias + bias
            return F.batch_norm(x, mean, var, weight, shift, batch_stats, factor, base.eps)
        gamma = self._mixed(None, self.lora_gamma, w)  # sum_c w_c gamma_c
        scale, shift = gamma, bias
        if self.variant == "nora":  # eq. (42), read before this batch updates the statistics
            s, m = self._ratios()
            scale = s * gamma
            fixed = m * self._mixed(None, self.lora_gamma.detach(), w)  # m sg(gamma_c), mixed
            shift = fixed if shift is None else shift + fixed
        shift = base.bias if shift is None else base.bias + shift
        if batch_stats:  # the base and the adaptor normalise with the same batch statistics
            factor = self._momentum(base, base.num_batches_tracked, training)
            out = F.batch_norm(x, mean, var, base.weight + scale, shift, True, factor, base.eps)
            factor = self._momentum(base, self.lora_num_batches_tracked, training)
            with torch.no_grad():  # the adaptor's statistics see the same batch
                F.batch_norm(
                    x,
                    self.lora_running_mean,
                    self.lora_running_var,
                    None,
                    None,
                    True,
                    factor,
                    base.eps,
                )
            return out
        out = F.batch_norm(x, mean, var, base.weight, shift, False, 0.0, base.eps)
        x_a = F.batch_norm(
            x, self.lora_running_mean, self.lora_running_var, None, None, False, 0.0, base.eps
        )
        return out + x_a * scale.view(-1, *([1] * (x.dim() - 2)))

    # ------------------------------------------------------------------ merge
    @torch.no_grad()
    def merged_affine(
        self, pi: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        r"""The plain layer's :math:`(\gamma', \beta')` equal to this one for mixture ``pi``
        (default: the pi set for this pass), in evaluation mode.

        ``"scale"`` and ``"nora"``: :math:`\gamma + \sum_c w_c L_{\gamma,c}`,
        :math:`\beta + \sum_c w_c L_{\beta,c}`; ``"nora_naive"``, whose adaptor normalises with
        its own running statistics: :math:`\gamma + \frac{\sigma}{\sigma_a}\sum_c w_c\gamma_c`,
        :math:`\beta + \sum_c w_c\beta_c + \frac{\hat\mu - \hat\mu_a}{\sigma_a}\sum_c w_c
        \gamma_c` (:math:`\sigma = \sqrt{\hat\sigma^2 + \epsilon}`).
        """
        w = self.context.weights(pi)
        base = self.base
        gamma = self._mixed(None, self.lora_gamma, w)
        bias = self._adaptor_bias(w)
        if self.variant == "nora_naive":
            sigma = torch.sqrt(base.running_var + base.eps)
            sigma_a = torch.sqrt(self.lora_running_var + base.eps)
            shift = gamma * (base.running_mean - self.lora_running_mean) / sigma_a
            bias = shift if bias is None else bias + shift
            gamma = gamma * sigma / sigma_a
        weight = base.weight + gamma
        if bias is not None and base.bias is not None:
            bias = base.bias + bias
        elif bias is None:
            bias = base.bias
        return weight, bias

    def merged_base(self) -> nn.Module:
        """A copy of the base layer with the adaptor mixture folded in (the pi set for this
        pass; its running statistics are the base's): equal to this layer in evaluation mode."""
        merged = copy.deepcopy(self.base)
        weight, bias = self.merged_affine()
        with torch.no_grad():
            merged.weight.copy_(weight)
            if bias is not None:
                if merged.bias is None:
                    merged.bias = nn.Parameter(bias.detach().clone())
                else:
                    merged.bias.copy_(bias)
        return merged

    def extra_repr(self) -> str:
        return (
            f"clusters={self.n_clusters}, variant={self.variant}, statistics={self.statistics}, "
            f"bias={self.lora_bias is not None}"
        )


def statistics_roles(model: nn.Module, shared: bool = True) -> dict[str, str]:
    """The federated role of every running statistic (buffer) of ``model``'s normalisation
    layers.

    Parameters
    ----------
    model : torch.nn.Module
    shared : bool, default True
        The role of the running means and variances of the plain normalisation layers (those
        not inside a :class:`MixtureNorm`): "base" (averaged with the weights :math:`N^k`) when
        True, else "private"; a :class:`MixtureNorm`'s base statistics follow its own
        ``statistics``.

    Returns
    -------
    dict
        ``buffer name -> role``: running means and variances "base" (shared) or "private"
        (local); batch counters (``num_batches_tracked``) "private" (a count of the client's own
        batches); a Batch NorA adaptor's statistics "private" (App. F.2: local).
    """
    roles: dict[str, str] = {}
    inside: dict[str, bool] = {}
    for prefix, module in model.named_modules():
        if isinstance(module, MixtureNorm):
            inside[f"{prefix}.base" if prefix else "base"] = module.statistics == "shared"
            own = dict(module.named_buffers(recurse=False))
            for lora_name in _ADAPTOR_STATISTICS:
                if lora_name in own:
                    roles[_join(prefix, lora_name)] = "private"
    for prefix, module in model.named_modules():
        if not isinstance(module, _WITH_STATISTICS):
            continue
        share = inside.get(prefix, shared)
        own = dict(module.named_buffers(recurse=False))
        for name in _STATISTICS:
            if own.get(name) is None:
                continue
            counter = name == "num_batches_tracked"
            roles[_join(prefix, name)] = "base" if share and not counter else "private"
    return roles


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name

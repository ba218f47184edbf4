r"""The Ensemble baseline: C full models mixed at the output level by the client's router.

.. math::

    \hat y^k(x) = \sum_c \pi^k_c\, g(x; w_c)

with model c aggregated by the per-cluster weights :math:`p(k|c)` of eq. (2), exactly as an
adaptor of FLoRAL. It costs :math:`(C - 1) d` extra parameters against FLoRAL's
:math:`C\rho d` (Almansoori et al. 2024, Sec. 6) and C forward passes. Routing is learned or the
oracle :math:`\pi^*` (Table 1 has both; :class:`~riemfl.nn.floral.Router` modes).

The paper names the baseline and its cost but says neither where the C models are mixed nor
how they are aggregated; riemfl mixes their outputs and aggregates model c with :math:`p(k|c)`,
as the authors' public code (zeligism/FLoRAL) does: mixing outputs keeps the C models
separate, the point of an ensemble.

The C models are held as stacked parameters (leading axis C, named ``stacked.<name with dots as
'__'>``) and evaluated with :func:`torch.func.functional_call` on a template copy, so that the
federated layout treats them like adaptors (role "cluster", slice c = model c).
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.func import functional_call

from ..._validation import integer
from ...errors import ParameterError
from .router import Router

__all__ = ["EnsembleModel"]


class EnsembleModel(nn.Module):
    """C independently initialised copies of ``model`` mixed by a router (module docstring).

    Parameters
    ----------
    model : torch.nn.Module
        The architecture (copied C times; each copy re-initialised by its ``reset_parameters``
        under ``seed + c``). Models with buffers (batch norm) are not supported.
    n_clusters : int
        C.
    routing : {"learned", "fixed"}
    router_noise : float
    seed : int, default 0
    """

    def __init__(
        self,
        model: nn.Module,
        n_clusters: int,
        *,
        routing: str = "learned",
        router_noise: float = 0.0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        n_clusters = integer(n_clusters, "EnsembleModel: n_clusters", minimum=1)
        if any(True for _ in model.buffers()):
            raise ParameterError(
                "EnsembleModel: models with buffers (e.g. batch norm) are not supported"
            )
        copies = []
        for c in range(n_clusters):
            m = copy.deepcopy(model)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(seed) + c)
                for sub in m.modules():
                    reset = getattr(sub, "reset_parameters", None)
                    if callable(reset):
                        reset()
            copies.append(m)
        template = copy.deepcopy(model)
        object.__setattr__(self, "_template", template)  # not registered: no parameters of its own
        self._names = [n for n, _ in template.named_parameters()]
        self.stacked = nn.ParameterDict(
            {
                n.replace(".", "__"): nn.Parameter(
                    torch.stack([dict(m.named_parameters())[n].detach() for m in copies])
                )
                for n in self._names
            }
        )
        self.router = Router(n_clusters, routing, router_noise)
        self.n_clusters = n_clusters
        self.single_model_size = sum(p.numel() for p in template.parameters())

    def member_outputs(self, x: torch.Tensor) -> torch.Tensor:
        """:math:`g(x; w_c)` for every c, stacked: shape (C, *output)."""
        outs = []
        for c in range(self.n_clusters):
            params = {n: self.stacked[n.replace(".", "__")][c] for n in self._names}
            outs.append(functional_call(self._template, params, (x,)))
        return torch.stack(outs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pi = self.router()
        return torch.einsum("c,c...->...", pi, self.member_outputs(x))

    def parameter_roles(self) -> dict[str, str]:
        return {
            name: "router" if name == "router.logits" else "cluster"
            for name, _ in self.named_parameters()
        }

"""The optional members a model may have for FLoRAL's trainer, layout and budget: declared here
as Protocols, tested with ``isinstance``. A plain ``torch.nn.Module`` has none of them and is
trained as FedAvg trains it (every parameter is a shared base parameter)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["HasParameterRoles", "HasFactorPairs", "Mergeable", "Routed", "Ensemble"]


@runtime_checkable
class HasParameterRoles(Protocol):
    """A model that gives each parameter a role: ``"base"`` (one shared copy), ``"cluster"``
    (one per cluster, leading axis C), ``"private"`` (kept by the client) or ``"router"``."""

    def parameter_roles(self) -> dict[str, str]: ...


@runtime_checkable
class HasFactorPairs(Protocol):
    """A model with LoRA adaptors: ``(prefix, adaptor)`` of each pair of factors
    (``prefix.lora_out``, ``prefix.lora_in``), aggregated as a pair."""

    def factor_pairs(self) -> list[tuple[str, Any]]: ...


@runtime_checkable
class Mergeable(Protocol):
    """A model that folds its adaptors, weighted by a client's router, into the base
    architecture (a FLoRAL model's personal model for inference)."""

    def merge(self, pi: Any = None) -> Any: ...


@runtime_checkable
class Routed(Protocol):
    """A model with a router over its C clusters (FLoRAL, the ensemble)."""

    router: Any


@runtime_checkable
class Ensemble(Protocol):
    """A model made of C copies of one model: ``single_model_size`` is the number of
    parameters of one copy, d in the parameter budget."""

    single_model_size: int

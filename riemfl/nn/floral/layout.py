r"""The federated layout: which parameters travel, how, and the flat vectors they travel in.

Every parameter of a FLoRAL-style model has a *role*: Almansoori et al. 2024 average the base u
and the adaptors :math:`a_c` (Alg. 1, lines 11-12), while the router :math:`\theta^k` "is a local
parameter and not aggregated" (Sec. 5):

======== ======================================== ==============================================
role     parameters                               aggregation
======== ======================================== ==============================================
base     the original weights and biases (u)      weights :math:`N^k` (Algorithm 1)
cluster  adaptors :math:`a_c` (leading axis C);   per cluster, weights :math:`\hat\pi^k_c N^k`
         the ensemble's stacked models
private  the Local Adaptor baseline's adaptors    never: they stay on the client
router   the logits :math:`\theta^k`              never: they stay on the client
======== ======================================== ==============================================

A model without ``parameter_roles()`` (a plain model: FedAvg) has every parameter in "base".
:class:`FederatedLayout` fixes the order of the **federated vector** (base and cluster
parameters, in ``named_parameters()`` order, each flattened row-major, as float64 numpy) and of
the **private vector**, and converts between them, the model, and per-parameter arrays with
any leading axes (e.g. one row per client).

The running statistics of normalisation layers (buffers, not parameters) travel by the same
roles, after the parameters, in ``named_buffers()`` order: a model's ``parameter_roles()`` may
name them (:class:`~riemfl.nn.floral.FloralModel` does, by its ``norm_statistics``), a plain
model's are "base", averaged as federated averaging averages a model's state
(:func:`~riemfl.nn.floral.norm.statistics_roles`); batch counters and Batch NorA's own
statistics are "private" (Almansoori et al. 2024, App. F.2: the adaptors are federated, "the
statistics are local"). Other buffers (the router's fixed probabilities) have no role and stay
out of both vectors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ...errors import ParameterError, ShapeError
from .adaptor import MatrixView
from .hooks import HasFactorPairs, HasParameterRoles
from .norm import statistics_roles

__all__ = ["parameter_roles", "FederatedLayout", "FactorPair", "ROLES"]

ROLES = ("base", "cluster", "private", "router")


def parameter_roles(model: nn.Module) -> dict[str, str]:
    """``name -> role`` of every parameter, and of the normalisation layers' running statistics
    (all parameters "base" for a model without roles; its statistics as
    :func:`~riemfl.nn.floral.norm.statistics_roles` places them)."""
    if not isinstance(model, HasParameterRoles):
        roles = {name: "base" for name, _ in model.named_parameters()}
        roles.update(statistics_roles(model))
        return roles
    roles = model.parameter_roles()
    bad = {n: r for n, r in roles.items() if r not in ROLES}
    if bad:
        raise ParameterError(f"unknown parameter roles {bad}; expected one of {ROLES}")
    return roles


@dataclass(frozen=True)
class FactorPair:
    """The two factor parameters of one adapted layer and their matrix views (A B^T)."""

    out_name: str
    in_name: str
    out_view: MatrixView
    in_view: MatrixView


@dataclass(frozen=True)
class _Entry:
    name: str
    shape: tuple[int, ...]
    role: str
    offset: int

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def stop(self) -> int:
        return self.offset + self.size


class FederatedLayout:
    """The flat federated and private vectors of a model (module docstring).

    Attributes
    ----------
    entries : list
        Federated parameters in vector order: ``name``, ``shape``, ``role``, ``offset``.
    private : list
        Private parameters in private-vector order.
    size, private_size : int
        D (federated) and P (private).
    n_clusters : int or None
        C, the leading axis of every "cluster" parameter (None without cluster parameters).
    factor_pairs : list of FactorPair
        The federated LoRA factor pairs (for the manifold-aware aggregation).
    """

    def __init__(self, model: nn.Module) -> None:
        roles = parameter_roles(model)
        self.entries: list[_Entry] = []
        self.private: list[_Entry] = []
        offsets = {"fed": 0, "private": 0}
        clusters = set()
        buffers = [(n, b) for n, b in model.named_buffers() if n in roles]
        for name, p in [*model.named_parameters(), *buffers]:
            role = roles[name]
            if role == "router":
                continue
            kind = "private" if role == "private" else "fed"
            entry = _Entry(name, tuple(p.shape), role, offsets[kind])
            offsets[kind] += entry.size
            (self.private if kind == "private" else self.entries).append(entry)
            if role == "cluster":
                clusters.add(p.shape[0])
        if len(clusters) > 1:
            raise ShapeError(f"cluster parameters have different leading axes {sorted(clusters)}")
        self._cache: dict[tuple[int, int], tuple[nn.Module, list[torch.Tensor]]] = {}
        self.size = offsets["fed"]
        self.private_size = offsets["private"]
        self.n_clusters = clusters.pop() if clusters else None
        self._by_name = {e.name: e for e in self.entries}
        self.factor_pairs: list[FactorPair] = []
        for prefix, layer in model.factor_pairs() if isinstance(model, HasFactorPairs) else []:
            out_name, in_name = f"{prefix}.lora_out", f"{prefix}.lora_in"
            if out_name in self._by_name and self._by_name[out_name].role == "cluster":
                self.factor_pairs.append(
                    FactorPair(out_name, in_name, layer.out_view, layer.in_view)
                )

    # ------------------------------------------------------------------ vectors <-> model
    def flatten(self, model: nn.Module) -> np.ndarray:
        """The federated vector (D,) of ``model``, float64."""
        return self._gather(model, self.entries, self.size)

    def flatten_private(self, model: nn.Module) -> np.ndarray:
        """The private vector (P,) of ``model``, float64."""
        return self._gather(model, self.private, self.private_size)

    def load(self, model: nn.Module, flat: np.ndarray) -> None:
        """Copy a federated vector into ``model`` (in place)."""
        self._scatter(model, self.entries, self._check(flat, self.size, "federated"))

    def load_private(self, model: nn.Module, flat: np.ndarray) -> None:
        """Copy a private vector into ``model`` (in place)."""
        self._scatter(model, self.private, self._check(flat, self.private_size, "private"))

    @staticmethod
    def _check(flat: Any, size: int, what: str) -> np.ndarray:
        arr = np.asarray(flat, dtype=np.float64)
        if arr.shape != (size,):
            raise ShapeError(f"the {what} vector has shape {arr.shape}; expected ({size},)")
        if not np.isfinite(arr).all():
            raise ParameterError(f"the {what} vector contains NaN or infinite values")
        return arr

    def _tensors(self, model: nn.Module, entries: list[_Entry]) -> list[torch.Tensor]:
        """The parameters of ``entries`` in ``model``, looked up once per model."""
        key = (id(model), id(entries))
        cached = self._cache.get(key)
        if cached is None or cached[0] is not model:
            params = {**dict(model.named_parameters()), **dict(model.named_buffers())}
            missing = [e.name for e in entries if e.name not in params]
            if missing:
                raise ShapeError(f"the model has no parameters {missing[:3]} of this layout")
            cached = (model, [params[e.name] for e in entries])
            self._cache[key] = cached
        return cached[1]

    def _gather(self, model: nn.Module, entries: list[_Entry], size: int) -> np.ndarray:
        if not entries:
            return np.zeros(0)
        with torch.no_grad():
            flat = torch.cat([p.detach().reshape(-1) for p in self._tensors(model, entries)])
        return flat.double().cpu().numpy()

    def _scatter(self, model: nn.Module, entries: list[_Entry], flat: np.ndarray) -> None:
        params = self._tensors(model, entries)
        if not params:
            return
        vec = torch.from_numpy(flat).to(params[0])
        with torch.no_grad():
            for p, chunk in zip(params, vec.split([e.size for e in entries]), strict=True):
                p.copy_(chunk.view_as(p))

    # ------------------------------------------------------------------ vectors <-> arrays
    def split(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Per-parameter views ``(*lead, *shape)`` of federated vectors ``(*lead, D)``."""
        flat = np.asarray(flat)
        if flat.shape[-1:] != (self.size,):
            raise ShapeError(
                f"federated vectors have shape {flat.shape}; expected (..., {self.size})"
            )
        lead = flat.shape[:-1]
        return {e.name: flat[..., e.offset : e.stop].reshape(*lead, *e.shape) for e in self.entries}

    def join(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """Inverse of :meth:`split`: federated vectors ``(*lead, D)``."""
        first = arrays[self.entries[0].name]
        lead = first.shape[: first.ndim - len(self.entries[0].shape)]
        out = np.empty((*lead, self.size), dtype=np.float64)
        for e in self.entries:
            out[..., e.offset : e.stop] = np.asarray(arrays[e.name]).reshape(*lead, e.size)
        return out

    def weight_vector(self, n_samples: float, pi: np.ndarray | None) -> np.ndarray:
        r"""Per-entry aggregation weights of one client: :math:`N^k` on base entries,
        :math:`\hat\pi^k_c N^k` on the entries of cluster c (Algorithm 1's weights, so that
        :math:`\sum_k w^k \odot x^k / \sum_k w^k` is the FLoRAL average entry by entry)."""
        out = np.empty(self.size, dtype=np.float64)
        for e in self.entries:
            if e.role == "cluster":
                if pi is None or np.shape(pi) != (self.n_clusters,):
                    raise ShapeError(f"weight_vector: pi must have shape ({self.n_clusters},)")
                w = np.repeat(np.asarray(pi, dtype=np.float64) * n_samples, e.size // e.shape[0])
                out[e.offset : e.stop] = w
            else:
                out[e.offset : e.stop] = n_samples
        return out

    def names(self, role: str) -> list[str]:
        """Federated parameter names of one role, in vector order."""
        return [e.name for e in self.entries if e.role == role]

    def describe(self) -> dict[str, Any]:
        return {
            "federated_size": self.size,
            "private_size": self.private_size,
            "n_clusters": self.n_clusters,
            "base": sum(e.size for e in self.entries if e.role == "base"),
            "cluster": sum(e.size for e in self.entries if e.role == "cluster"),
            "factor_pairs": len(self.factor_pairs),
        }

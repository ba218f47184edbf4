r"""FedBuff + FLoRAL: FLoRAL's per-cluster aggregation in a sum-only asynchronous buffer.

The combination is riemfl's: Almansoori et al. 2024 run FLoRAL in synchronous rounds (Alg. 1),
and FedBuff (Nguyen et al. 2022; Toghani & Uribe 2022, Algs. 1-2) buffers plain model updates.
riemfl offers it on :func:`riemfl.federated.run_async` with
:class:`~riemfl.nn.floral.FloralTrainer` as the trainer. Client k arrives with its local vector
:math:`x_k` trained from a possibly stale version :math:`x^{t_k}`, and its weights
:math:`(N^k, \hat\pi^k)`. The buffer keeps only sums
(the secure-aggregation interface of :class:`~riemfl.federated.SumBuffer`):

.. math::

    S = \sum_k w^k \odot \Delta_k,\qquad Z = \sum_k w^k,\qquad \Delta_k = x^{t_k} - x_k,

with the per-entry weights :math:`w^k` equal to :math:`N^k` on the base and
:math:`\hat\pi^k_c N^k` on cluster c's entries (:meth:`FederatedLayout.weight_vector`), and after
K arrivals the server steps :math:`x \leftarrow x - \eta\, S \oslash Z` (entries with Z = 0
unchanged). With zero staleness and :math:`\eta = 1` this is exactly Algorithm 1's average
(tested).

``adaptors="products"`` (riemfl's; none of these papers has it): stale clients start from different
factors, so their gauges drift apart and averaging factors depends on them more than in
synchronous rounds. For each LoRA factor pair the buffer also sums the product deltas
:math:`\hat\pi^k_c N^k (A^{t_k}_c B^{t_k\top}_c - A^k_c B^{k\top}_c)`, and the server sets
:math:`X_c = P_r(A_c B_c^\top - \eta\,S^X_c / Z_c)` with the truncated SVD on
:class:`~riemfl.manifolds.FixedRank`, then balanced factors
(:func:`~riemfl.nn.floral.aggregation.retract_products`); each client's delta is computed in its
own gauge, so the step does not depend on how the factors are represented.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..._validation import integer
from ...errors import ParameterError
from ...federated.async_rules import Arrival, AsyncRule, SumBuffer
from ...federated.rule_state import Commit, StateReader, commit_all, setter
from .aggregation import retract_products
from .layout import FederatedLayout
from .server import ADAPTOR_AGGREGATIONS

__all__ = ["FloralFedBuff"]


class FloralFedBuff(AsyncRule):
    """FedBuff with FLoRAL's weights (module docstring).

    Parameters
    ----------
    layout : FederatedLayout
        The trainer's layout (``FloralTrainer.layout``).
    weights_of : callable(client) -> (N^k, pi^k)
        The client's aggregation weights after its run (``FloralTrainer.upload_weights``).
    buffer_size : int
        K, arrivals per server step.
    server_lr : float
        :math:`\\eta` (1: the buffer's weighted mean).
    adaptors : {"factors", "products"}

    Notes
    -----
    The run state (:meth:`state_dict`) is the buffers' sums and counts and the number of
    product fallbacks; the clients' weights are the trainer's (``weights_of``), not the rule's.
    """

    name = "floral-fedbuff"
    _state_counters = ("product_fallbacks",)

    def __init__(
        self,
        layout: FederatedLayout,
        weights_of: Callable[[int], tuple[float, np.ndarray]],
        buffer_size: int = 10,
        server_lr: float = 1.0,
        adaptors: str = "factors",
    ) -> None:
        super().__init__(server_lr)
        buffer_size = integer(buffer_size, "FloralFedBuff: buffer_size", minimum=1)
        if adaptors not in ADAPTOR_AGGREGATIONS:
            raise ParameterError(f"FloralFedBuff: adaptors must be one of {ADAPTOR_AGGREGATIONS}")
        self.layout = layout
        self.weights_of = weights_of
        self.buffer_size = buffer_size
        self.adaptors = adaptors
        self._buffers: dict[str, SumBuffer] = {}
        self.product_fallbacks = 0

    def validate(self, manifold) -> None:  # flat Euclidean vectors: nothing to check
        return None

    def reset(self, manifold, n_clients: int) -> None:
        self._buffers = {}
        self.product_fallbacks = 0

    def _state(self) -> dict[str, Any]:
        return {"buffers": {key: buf.state_dict() for key, buf in self._buffers.items()}}

    def _read_state(self, reader: StateReader) -> Commit:
        section = reader.section("buffers")
        shapes = self._buffer_shapes()
        if not any(key in section for key in shapes):  # no buffer (just reset or stepped)
            shapes = {}
        buffers = {key: SumBuffer() for key in shapes}
        commits = [buffers[key].read_state(section.section(key), shapes[key]) for key in shapes]
        return commit_all(*commits, setter(self, _buffers=buffers))

    def _buffer_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape of each buffer's sum, in the order :meth:`apply` creates them."""
        lay = self.layout
        shapes = {"num": (lay.size,), "den": (lay.size,)}
        if self.adaptors == "products":
            for pair in lay.factor_pairs:
                shapes[pair.out_name] = (lay.n_clusters, pair.out_view.rows, pair.in_view.rows)
        return shapes

    def _add(self, key: str, value: np.ndarray) -> None:
        self._buffers.setdefault(key, SumBuffer()).add(value)

    def apply(self, manifold, a: Arrival):
        n_k, pi_k = self.weights_of(a.client)
        lay = self.layout
        w = lay.weight_vector(n_k, pi_k if lay.n_clusters is not None else None)
        self._add("num", w * (a.base - a.local))
        self._add("den", w)
        if self.adaptors == "products":
            base, local = lay.split(a.base), lay.split(a.local)
            for pair in lay.factor_pairs:
                delta = _product(pair, base) - _product(pair, local)
                self._add(pair.out_name, (pi_k * n_k)[:, None, None] * delta)
        if self._buffers["den"].count < self.buffer_size:
            return None
        num, den = self._buffers["num"].total(), self._buffers["den"].total()
        step = np.divide(num, den, out=np.zeros_like(num), where=den > 0)
        new = a.current - self.server_lr * step
        if self.adaptors == "products":
            current, arrays = lay.split(a.current), lay.split(new)
            z_all = lay.split(den)
            for pair in lay.factor_pairs:
                zc = z_all[pair.out_name]
                z = zc.reshape(zc.shape[0], -1)[:, 0]  # Z_c: the same on all of cluster c's entries
                delta = self._buffers[pair.out_name].total()
                scale = np.divide(self.server_lr, z, out=np.zeros_like(z), where=z > 0)
                x = _product(pair, current) - scale[:, None, None] * delta
                fallback = (
                    pair.out_view.to_matrix(arrays[pair.out_name]),
                    pair.in_view.to_matrix(arrays[pair.in_name]),
                )
                na, nb, fb = retract_products(x, pair.out_view.rank, fallback)
                keep = z <= 0  # clusters no arrival routed to: unchanged
                na[keep], nb[keep] = fallback[0][keep], fallback[1][keep]
                self.product_fallbacks += fb
                arrays[pair.out_name] = pair.out_view.from_matrix(na)
                arrays[pair.in_name] = pair.in_view.from_matrix(nb)
            new = lay.join(arrays)
        self._buffers = {}
        return new


def _product(pair, arrays: dict[str, np.ndarray]) -> np.ndarray:
    a = pair.out_view.to_matrix(arrays[pair.out_name])
    b = pair.in_view.to_matrix(arrays[pair.in_name])
    return a @ np.swapaxes(b, -1, -2)

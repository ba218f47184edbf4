r"""The client side of FLoRAL: local training (Algorithm 1's inner loop) and personal evaluation.

:class:`FloralTrainer` holds the clients' data and their **personal state** (router logits
:math:`\theta^k`, and the private adaptors of the Local Adaptor baseline), and trains one
client at a time on a shared torch model. Per call of :meth:`FloralTrainer.train`
(Almansoori et al. 2024, Alg. 1, lines 5-9):

1. load the received global federated vector (base :math:`u`, adaptors :math:`a_c`) and the
   client's own state (:math:`\theta^k`; zeros in stateless mode, Sec. 5: "the clients can
   learn the theta^k from scratch every round"; the one-hot :math:`\pi^*` in fixed-routing
   mode);
2. run ``local_epochs`` epochs of mini-batch SGD over the client's shuffled rows on the FML
   loss :math:`f^k(\sum_c \hat\pi^k_c w_c)`, updating :math:`u`, every :math:`a_c` and
   :math:`\theta^k` simultaneously, with separate learning rates for the weights and the
   router (Algorithm 1 uses one :math:`\eta_t`; riemfl separates them, as the authors' public
   code (zeligism/FLoRAL) does with ``lora_lr`` and ``router_lr``), and
   optionally the ScaledGD preconditioning (36) of every adaptor's factor gradients;
3. keep :math:`\theta^k` (and private adaptors) on the client, record
   :math:`\hat\pi^k` at the end of the epoch (Alg. 1, line 12 weighs by
   :math:`\hat\pi^k_{c,\tau+H}`), and return the federated vector.

With a router of the paper's theory (``"exp-weights"`` modes of
:class:`~riemfl.nn.floral.Router`), step 1 also sets the router, before training, from the
received models: :math:`\hat\pi^k_c \propto \exp(-\eta f^k(w_c))` (eq. (5)) with
:math:`f^k(w_c)` the client's mean training loss under cluster c alone (C forward passes, the
model in eval mode, rows in chunks of ``batch_size``) and :math:`\eta` = ``router_lr``; the
router is then fixed during the local run and its :math:`\hat\pi^k` weighs the upload, as
eq. (4)'s synchronisation weighs by the router set at the previous one. Local steps stay
Algorithm 1's (one forward pass of the mixture); :mod:`riemfl.nn.floral.mfl` is the theory's
whole algorithm (C full models, one gradient per model).

What leaves the client is therefore the federated vector plus the aggregation weights
:meth:`upload_weights` (:math:`N^k` and :math:`\hat\pi^k`); never :math:`\theta^k`.

The trainer follows the protocol of :func:`riemfl.federated.run_async` (``n_clients``,
``n_samples``, ``num_batches``, ``train``, ``evaluate``), so FLoRAL also runs asynchronously
(:class:`~riemfl.nn.floral.FloralFedBuff`).

Losses: ``"cross_entropy"`` (mean over the batch) and ``"mse"``, the synthetic tasks'
:math:`\tfrac12\|\hat y - y\|^2` (summed over outputs, mean over the batch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ..._validation import integer, real
from ...errors import DataError, ParameterError, ShapeError
from .adaptor import PRECONDITIONERS, MixtureAdaptor
from .conv import MixtureConv2d
from .hooks import Mergeable, Routed
from .layout import FederatedLayout
from .metrics import aggregation_mismatch, cluster_recovery
from .router import EXP_WEIGHTS_MODES

__all__ = ["FloralTrainer", "TRAINER_LOSSES"]

TRAINER_LOSSES = ("cross_entropy", "mse")

ClientData = tuple[Any, Any, Any, Any]


class FloralTrainer:
    """Local training and personal evaluation of FLoRAL clients (module docstring).

    Its federated parameters are one flat vector: ``manifold`` is None, and the engines count
    the uplink in floats.

    Parameters
    ----------
    model : torch.nn.Module
        A :class:`~riemfl.nn.floral.FloralModel`, an :class:`~riemfl.nn.floral.EnsembleModel`
        or a plain model (FedAvg). Trained in place, one client at a time.
    clients : sequence of (X_train, y_train, X_test, y_test)
        Numpy arrays per client (features float, labels int for cross-entropy, targets
        (n, d_y) float for MSE).
    loss : {"cross_entropy", "mse"}
    lr : float
        Step size of the base and adaptor parameters.
    router_lr : float
        Step size of the router logits (the exponential-weights step :math:`\\eta` in the
        ``"exp-weights"`` modes).
    batch_size : int
    local_epochs : int
        Epochs per local run. The paper gives no schedule; the default 1 is the authors' public
        code's (zeligism/FLoRAL).
    precondition : {"scaled_gd", "frobenius"} or None
        Preconditioner of the linear adaptors' factor gradients (Appendix D); None: plain SGD.
    conv_precondition : {"scaled_gd", "frobenius"}
        Preconditioner of ConvLoRA factors when ``precondition`` is set (the paper: Frobenius).
    precondition_eps : float
        :math:`\\epsilon` of eq. (36). The paper gives no value; the default 1e-5 is the
        authors' public code's.
    clusters : sequence of int, optional
        True cluster of each client: required for fixed routing (:math:`\\pi^*` = one-hot), and
        enables the routing diagnostics of :meth:`evaluate`.
    stateless_router : bool
        Reset :math:`\\theta^k = 0` at the start of every local run (clients keep no state).
    augment : callable, optional
        ``augment(batch, generator) -> batch``, applied to every training batch with the local
        run's generator (e.g. :class:`riemfl.nn.augment.CropFlip`); evaluation never augments.
    """

    #: personal client state, changed by every local run (not data: see ``data_digest``)
    run_state_attributes = ("router_logits", "last_pi", "private")
    #: the models are flat vectors, not points of a manifold
    manifold: None = None

    def __init__(
        self,
        model: nn.Module,
        clients: Sequence[ClientData],
        *,
        loss: str = "cross_entropy",
        lr: float = 0.1,
        router_lr: float = 0.1,
        batch_size: int = 32,
        local_epochs: int = 1,
        precondition: str | None = "scaled_gd",
        conv_precondition: str = "frobenius",
        precondition_eps: float = 1e-5,
        clusters: Sequence[int] | None = None,
        stateless_router: bool = False,
        augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None,
    ) -> None:
        if loss not in TRAINER_LOSSES:
            raise ParameterError(
                f"FloralTrainer: loss must be one of {TRAINER_LOSSES}, got {loss!r}"
            )
        for name, value in (
            ("precondition", precondition),
            ("conv_precondition", conv_precondition),
        ):
            if value is not None and value not in PRECONDITIONERS:
                raise ParameterError(
                    f"FloralTrainer: {name} must be one of {PRECONDITIONERS} or None, got {value!r}"
                )
        self.model = model
        self.loss = loss
        self.lr = real(lr, "FloralTrainer: lr", above=0)
        self.router_lr = real(router_lr, "FloralTrainer: router_lr", at_least=0)
        self.batch_size = integer(batch_size, "FloralTrainer: batch_size", minimum=1)
        self.local_epochs = integer(local_epochs, "FloralTrainer: local_epochs", minimum=1)
        self.precondition = precondition
        self.conv_precondition = conv_precondition
        self.precondition_eps = real(precondition_eps, "FloralTrainer: precondition_eps", above=0)
        self.stateless_router = bool(stateless_router)
        if augment is not None and not callable(augment):
            raise ParameterError(
                f"FloralTrainer: augment must be callable (batch, generator) -> batch, got "
                f"{type(augment).__name__}"
            )
        self.augment = augment
        self.layout = FederatedLayout(model)
        self.router = model.router if isinstance(model, Routed) else None
        self._adaptors = [m for m in model.modules() if isinstance(m, MixtureAdaptor)]
        self._weights = [p for name, p in model.named_parameters() if name != "router.logits"]
        index = {id(p): j for j, p in enumerate(self._weights)}
        self._factor_index = [
            (layer, index[id(layer.lora_out)], index[id(layer.lora_in)]) for layer in self._adaptors
        ]
        self._set_data(clients)
        self.clusters = None if clusters is None else np.asarray(clusters, dtype=np.intp)
        k = self.n_clients
        c = 0 if self.router is None else self.router.n_clusters
        if self.clusters is not None and self.clusters.shape != (k,):
            raise ShapeError(
                f"FloralTrainer: clusters must have shape ({k},), got {self.clusters.shape}"
            )
        if (
            self.clusters is not None
            and c > 1
            and (self.clusters.min() < 0 or self.clusters.max() >= c)
        ):
            raise ParameterError(f"FloralTrainer: clusters must lie in 0..{c - 1} (C = {c})")
        if self.router is not None and self.router.mode == "fixed" and self.clusters is None:
            raise ParameterError("FloralTrainer: fixed routing (pi*) needs the true clusters")
        self.router_logits = np.zeros((k, c))
        self.last_pi = np.full((k, c), 1.0 / c) if c else np.zeros((k, 0))
        private0 = self.layout.flatten_private(model)
        self.private = np.tile(private0, (k, 1))
        self._initial = self.layout.flatten(model)

    # ------------------------------------------------------------------ data
    def _set_data(self, clients: Sequence[ClientData]) -> None:
        if len(clients) == 0:
            raise DataError("FloralTrainer: no clients")
        self._data: list[dict[str, torch.Tensor]] = []
        for i, item in enumerate(clients):
            if len(item) != 4:
                raise DataError(
                    f"FloralTrainer: client {i} must be (X_train, y_train, X_test, y_test)"
                )
            entry = {}
            for split, (x, y) in (("train", item[:2]), ("test", item[2:])):
                x, y = np.asarray(x), np.asarray(y)
                if x.shape[:1] != y.shape[:1]:
                    raise DataError(
                        f"FloralTrainer: client {i} {split}: {len(x)} rows but {len(y)} targets"
                    )
                if not np.isfinite(x).all() or (y.dtype.kind == "f" and not np.isfinite(y).all()):
                    raise DataError(f"FloralTrainer: client {i} {split} data contain NaN or inf")
                if self.loss == "cross_entropy" and y.ndim != 1:
                    raise DataError(
                        f"FloralTrainer: client {i} {split}: cross_entropy needs 1-D labels"
                    )
                entry[f"x_{split}"] = torch.as_tensor(x, dtype=torch.float32)
                ydtype = torch.int64 if self.loss == "cross_entropy" else torch.float32
                entry[f"y_{split}"] = torch.as_tensor(y, dtype=ydtype)
            self._data.append(entry)
        self.n_clients = len(self._data)

    def n_samples(self, i: int) -> int:
        """:math:`N^k`: training rows of client ``i``."""
        return int(self._data[self._client(i)]["y_train"].shape[0])

    def num_batches(self, i: int, epochs: int | None = None) -> int:
        """Mini-batches of one local run (the async simulator's compute-time unit)."""
        e = self.local_epochs if epochs is None else int(epochs)
        return e * -(-self.n_samples(i) // self.batch_size)

    def _client(self, i: Any) -> int:
        return integer(i, "FloralTrainer: client index", minimum=0, maximum=self.n_clients - 1)

    # ------------------------------------------------------------------ state
    def global_parameters(self) -> np.ndarray:
        """The federated vector of the model as built (the run's starting point)."""
        return self._initial.copy()

    def client_state(self) -> dict[str, np.ndarray]:
        """Everything clients keep (for checkpoints): router logits, last pi, private vectors
        (:attr:`run_state_attributes`), each with one row per client."""
        return {key: getattr(self, key).copy() for key in self.run_state_attributes}

    def load_client_state(self, state: dict[str, np.ndarray]) -> None:
        for key in self.run_state_attributes:
            if np.shape(state[key]) != getattr(self, key).shape:
                raise ShapeError(f"client state {key!r} has shape {np.shape(state[key])}")
        for key in self.run_state_attributes:
            setattr(self, key, np.array(state[key], dtype=np.float64))

    def state_dict(self) -> dict[str, np.ndarray]:
        """The clients' state as a run checkpoint keeps it (:meth:`client_state`)."""
        return self.client_state()

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.load_client_state(state)

    def _load(self, i: int, flat: np.ndarray) -> None:
        self.layout.load(self.model, flat)
        if self.layout.private_size:
            self.layout.load_private(self.model, self.private[i])
        if self.router is not None:
            if self.router.mode == "fixed":
                self.router.set_fixed(int(self.clusters[i]) if self.router.n_clusters > 1 else 0)
            with torch.no_grad():
                self.router.logits.copy_(torch.from_numpy(self.router_logits[i]))

    def upload_weights(self, i: int) -> tuple[float, np.ndarray]:
        """:math:`(N^k, \\hat\\pi^k)` after the client's last local run: its aggregation weights."""
        i = self._client(i)
        return float(self.n_samples(i)), self.last_pi[i].copy()

    # ------------------------------------------------------------------ training
    def train(
        self, i: int, start: np.ndarray, rng: np.random.Generator, epochs: int | None = None
    ) -> np.ndarray:
        """Client ``i``'s local run from the global vector ``start``; returns its vector.

        One integer drawn from ``rng`` seeds the shuffles and the router noise.
        """
        i = self._client(i)
        if not isinstance(rng, np.random.Generator):
            raise ParameterError(f"train: rng must be a numpy Generator, got {type(rng).__name__}")
        e = self.local_epochs if epochs is None else integer(epochs, "train: epochs", minimum=1)
        if self.stateless_router:
            self.router_logits[i] = 0.0
        self._load(i, start)
        seed = int(rng.integers(0, 2**63 - 1))
        data = self._data[i]
        x, y = data["x_train"], data["y_train"]
        n = x.shape[0]
        if n and self.router is not None and self.router.mode in EXP_WEIGHTS_MODES:
            self.router.exp_weights_update(self.cluster_losses(i), self.router_lr)
        weights = self._weights
        learn_router = (
            self.router is not None and self.router.mode == "learned" and self.router_lr > 0
        )
        params = weights + ([self.router.logits] if learn_router else [])
        loss_fn = self._loss_fn()
        gen = torch.Generator().manual_seed(seed)
        if self.router is not None:
            self.router.generator = gen
        self.model.train()
        for _ in range(e if n else 0):
            perm = torch.randperm(n, generator=gen)
            for b in range(0, n, self.batch_size):
                idx = perm[b : b + self.batch_size]
                xb = x[idx] if self.augment is None else self.augment(x[idx], gen)
                grads = torch.autograd.grad(loss_fn(self.model(xb), y[idx]), params)
                self._sgd_step(weights, grads, learn_router)
        out = self.layout.flatten(self.model)
        if not np.isfinite(out).all():  # the client keeps its previous state
            raise ParameterError(
                f"client {i}: local training diverged (non-finite parameters); lower lr "
                f"(now {self.lr}) or router_lr (now {self.router_lr})"
            )
        self._save(i)
        return out

    @torch.no_grad()
    def cluster_losses(self, i: int) -> torch.Tensor:
        """:math:`f^k(w_c)` for every cluster c: client ``i``'s mean training loss with the model
        as loaded and the router on c alone (C forward passes in eval mode; shape (C,))."""
        i = self._client(i)
        if self.router is None:
            raise ParameterError("cluster_losses: the model has no router")
        x, y = self._data[i]["x_train"], self._data[i]["y_train"]
        if x.shape[0] == 0:
            raise DataError(f"cluster_losses: client {i} has no training rows")
        loss_fn, was_training = self._loss_fn(), self.model.training
        self.model.eval()
        out = torch.zeros(self.router.n_clusters, dtype=torch.float64)
        for c in range(self.router.n_clusters):
            with self.router.one_hot(c):
                for b in range(0, x.shape[0], self.batch_size):
                    xb, yb = x[b : b + self.batch_size], y[b : b + self.batch_size]
                    out[c] += float(loss_fn(self.model(xb), yb)) * xb.shape[0]
        self.model.train(was_training)
        return out / x.shape[0]

    @torch.no_grad()
    def _sgd_step(self, weights: list, grads: tuple, learn_router: bool) -> None:
        """Plain SGD, Alg. 1's step (no weight decay or momentum, as the authors' public code)."""
        grads = list(grads)
        if self.precondition is not None:
            for layer, jo, ji in self._factor_index:
                kind = (
                    self.conv_precondition
                    if isinstance(layer, MixtureConv2d)
                    else self.precondition
                )
                grads[jo], grads[ji] = layer.precondition_grads(
                    grads[jo], grads[ji], self.precondition_eps, kind
                )
        torch._foreach_add_(weights, grads[: len(weights)], alpha=-self.lr)
        if learn_router:
            self.router.logits.add_(grads[-1], alpha=-self.router_lr)

    def _save(self, i: int) -> None:
        if self.router is not None:
            self.router_logits[i] = self.router.logits.detach().double().numpy()
            self.last_pi[i] = self.router.probabilities().double().numpy()
        if self.layout.private_size:
            self.private[i] = self.layout.flatten_private(self.model)

    def _loss_fn(self):
        if self.loss == "cross_entropy":
            return nn.functional.cross_entropy
        return lambda out, y: 0.5 * ((out - y) ** 2).sum(-1).mean()

    # ------------------------------------------------------------------ evaluation
    def client_outputs(self, i: int, flat: np.ndarray, split: str = "test") -> torch.Tensor:
        """Client ``i``'s personal model (``flat`` + its own state) on its ``split`` rows."""
        if split not in ("train", "test"):
            raise ParameterError(f"split must be 'train' or 'test', got {split!r}")
        i = self._client(i)
        self._load(i, flat)
        self.model.eval()
        with torch.no_grad():
            return self.model(self._data[i][f"x_{split}"])

    def personal_model(self, i: int, flat: np.ndarray) -> nn.Module:
        """Client ``i``'s personalised model for inference: ``flat`` with its own state.

        A FLoRAL model is returned merged (:meth:`FloralModel.merge` with the client's
        router: the base architecture and cost); other models as an independent copy.
        """
        import copy

        i = self._client(i)
        self._load(i, flat)
        out = self.model.merge() if isinstance(self.model, Mergeable) else copy.deepcopy(self.model)
        return out.eval()

    def evaluate(self, flat: np.ndarray, split: str = "test") -> dict[str, float]:
        """Personal metrics pooled over all clients (each with its own router and state).

        Returns
        -------
        dict
            ``loss`` (mean per row over all clients' ``split`` rows: sample-weighted; the paper
            does not say how it pools over clients), ``accuracy`` (cross-entropy tasks),
            ``n_samples``; with known clusters and a router, ``cluster_recovery`` and
            ``mismatch`` (mean :math:`\\|\\delta_c\\|_1`) of the routers' current
            probabilities (:mod:`riemfl.nn.floral.metrics`).
        """
        total_loss = 0.0
        correct = 0.0
        rows = 0
        loss_fn = self._loss_fn()
        for i in range(self.n_clients):
            y = self._data[i][f"y_{split}"]
            if y.shape[0] == 0:
                continue
            out = self.client_outputs(i, flat, split)
            total_loss += float(loss_fn(out, y)) * y.shape[0]
            if self.loss == "cross_entropy":
                correct += float((out.argmax(1) == y).sum())
            rows += y.shape[0]
        if rows == 0:
            raise DataError(f"evaluate: no client has {split} rows")
        metrics = {"loss": total_loss / rows, "n_samples": float(rows)}
        if self.loss == "cross_entropy":
            metrics["accuracy"] = correct / rows
        if self.clusters is not None and self.router is not None and self.router.n_clusters > 1:
            pi = self._current_pi()
            sizes = np.array([self.n_samples(i) for i in range(self.n_clients)], dtype=float)
            metrics["cluster_recovery"] = cluster_recovery(pi, self.clusters)
            metrics["mismatch"] = float(np.mean(aggregation_mismatch(pi, self.clusters, sizes)))
        return metrics

    def _current_pi(self) -> np.ndarray:
        if self.router.mode == "fixed":
            return np.eye(self.router.n_clusters)[self.clusters]
        z = self.router_logits - self.router_logits.max(1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(1, keepdims=True)

    def describe(self) -> dict[str, Any]:
        return {
            "loss": self.loss,
            "lr": self.lr,
            "router_lr": self.router_lr,
            "batch_size": self.batch_size,
            "local_epochs": self.local_epochs,
            "precondition": self.precondition,
            "conv_precondition": self.conv_precondition,
            "precondition_eps": self.precondition_eps,
            "stateless_router": self.stateless_router,
            "augment": None if self.augment is None else repr(self.augment),
            "n_clients": self.n_clients,
            "layout": self.layout.describe(),
        }

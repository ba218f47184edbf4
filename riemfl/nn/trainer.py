r"""The clients of the asynchronous experiments: FedProx with local Adam on a torch model.

:class:`TorchClientTrainer` is what the asynchronous simulator calls to run a client. Every method
of Licudi et al. 2025 trains locally the same way (their App. B): starting from the received global
model :math:`\Theta^t`, client i runs **Adam** for K = ``epochs`` epochs (2 in the paper) of
mini-batches on the FedProx objective (eq. (6) of the paper for a point; Licudi 2025 (TR), eq. (3))

.. math::

    F_i(\theta; \Theta^t) = l_i(\theta) + \frac{\mu}{2} \|\theta - \Theta^t\|^2,

with :math:`\eta_l = \mu = 10^{-3}`, and returns the local model :math:`\Theta_i^t`. Here
:math:`l_i` is the mean loss over the mini-batch (cross-entropy over classes, or binary
cross-entropy with logits over the labels of a multi-label task such as CXR8). The optimiser is a
fresh Adam on every call, as the paper implies (it says nothing else); the technical report's
warm start of the moments from the server's last step (Licudi 2025 (TR), Alg. 1) is not done:
those moments are in parameter-displacement units, not gradient units.

Parameters travel as flat float64 numpy vectors (order: ``model.parameters()``, see
:mod:`riemfl.nn.models`). The model computes in its own dtype (float32 for a default torch
model), so a float64 vector is rounded to float32 when loaded.

The numpy metrics :func:`binary_auroc`, :func:`average_precision` and :func:`macro_auroc_auprc` (for
the multi-label evaluation, Licudi et al. 2025, Table 2) need no scikit-learn; the tests compare
them with scikit-learn's ``roc_auc_score`` and ``average_precision_score``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from scipy.stats import rankdata
from torch import nn

from .. import tuning
from .._validation import integer, real
from ..backend import is_torch
from ..errors import DataError, ParameterError, ShapeError
from ..problems.checks import data_rng
from ..problems.data import load_digits
from ..problems.partition import dirichlet_partition
from .models import flatten_parameters, load_flat_parameters, n_parameters

__all__ = [
    "TorchClientTrainer",
    "digits_clients",
    "dirichlet_clients",
    "binary_auroc",
    "average_precision",
    "macro_auroc_auprc",
    "LOSSES",
]

#: Accepted values of ``loss``: single-label classification and multi-label (multi-hot) targets.
LOSSES = ("cross_entropy", "bce_multilabel")


ClientData = tuple[Any, Any, Any, Any]


# ---------------------------------------------------------------------- numpy metrics
def binary_auroc(y_true: Any, scores: Any) -> float:
    r"""Area under the ROC curve of one binary label, by ranks (Mann-Whitney U).

    .. math::

        \mathrm{AUROC} = \frac{\sum_{i: y_i = 1} r_i - P(P+1)/2}{P\,N_-},

    with :math:`r_i` the rank of score i among all scores (ties get their average rank, which
    counts a tied positive/negative pair as 1/2), P positives and :math:`N_-` negatives.

    Returns
    -------
    float
        In [0, 1]; NaN when the labels are all 0 or all 1 (the AUROC is undefined).
    """
    y = np.asarray(y_true).astype(bool).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    if y.shape != s.shape:
        raise ShapeError(f"binary_auroc: {y.size} labels but {s.size} scores")
    pos = int(y.sum())
    neg = y.size - pos
    if pos == 0 or neg == 0:
        return math.nan
    ranks = rankdata(s)
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


def average_precision(y_true: Any, scores: Any) -> float:
    r"""Area under the precision-recall curve of one binary label (average precision).

    .. math::

        \mathrm{AP} = \sum_n (R_n - R_{n-1})\, P_n,

    over the distinct score thresholds in decreasing order, :math:`P_n` and :math:`R_n` the
    precision and recall of "score >= threshold n", :math:`R_0 = 0` (the step-wise definition of
    scikit-learn's ``average_precision_score``, no interpolation).

    Returns
    -------
    float
        In [0, 1]; NaN when there is no positive label.
    """
    y = np.asarray(y_true).astype(bool).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    if y.shape != s.shape:
        raise ShapeError(f"average_precision: {y.size} labels but {s.size} scores")
    pos = int(y.sum())
    if pos == 0:
        return math.nan
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s)), y.size - 1]  # last row of each distinct score
    tps = np.cumsum(y)[last]
    precision = tps / (last + 1)
    recall = tps / pos
    return float(np.sum(np.diff(recall, prepend=0.0) * precision))


def macro_auroc_auprc(y_true: Any, scores: Any) -> tuple[float, float]:
    """Macro (unweighted mean over labels) AUROC and average precision of a multi-label task.

    Labels whose AUROC (one class only) or AP (no positive) is undefined are left out of the
    respective mean; NaN when no label is defined.

    Parameters
    ----------
    y_true : array-like, shape (n, K)
        Multi-hot targets in {0, 1}.
    scores : array-like, shape (n, K)
        Any monotone score per label (logits or probabilities).
    """
    y = np.asarray(y_true)
    s = np.asarray(scores, dtype=np.float64)
    if y.ndim != 2 or y.shape != s.shape:
        raise ShapeError(
            f"macro_auroc_auprc: targets {y.shape} and scores {s.shape} must be equal (n, K)"
        )
    roc = np.array([binary_auroc(y[:, k], s[:, k]) for k in range(y.shape[1])])
    ap = np.array([average_precision(y[:, k], s[:, k]) for k in range(y.shape[1])])

    def mean(v: np.ndarray) -> float:
        v = v[~np.isnan(v)]
        return float(v.mean()) if v.size else math.nan

    return mean(roc), mean(ap)


# ---------------------------------------------------------------------- trainer
class TorchClientTrainer:
    r"""Local FedProx training with Adam for every client of a torch model.

    The local solver of every method in Licudi et al. 2025, App. B (module docstring).

    Parameters
    ----------
    model_fn : callable
        ``model_fn() -> torch.nn.Module``; called once. Its output must be logits of shape
        (n, n_classes) (or (n, K) for multi-label).
    datasets : sequence of (X_train, y_train, X_test, y_test)
        One tuple of numpy arrays per client: features of shape (n_i, ...) (the same trailing
        shape for every client and split; converted to float32) and targets: int labels of
        shape (n_i,) for ``"cross_entropy"``, multi-hot {0, 1} arrays of shape (n_i, K) for
        ``"bce_multilabel"``. A client may have no training or no test rows (then it trains
        to its start and its per-client accuracy is NaN).
    epochs : int, default 2
        Local epochs K per call of :meth:`train` (Licudi et al. 2025, App. B: 2).
    lr : float, default 1e-3
        Adam's step :math:`\eta_l` (Licudi et al. 2025, App. B: 0.001).
    mu : float, default 1e-3
        FedProx weight :math:`\mu >= 0` (Licudi et al. 2025, App. B: 0.001; 0 gives plain local
        training).
    batch_size : int, default 32
        Mini-batch size (Licudi et al. 2025 do not state it; 32 is riemfl's default). The
        last batch of an
        epoch is the remainder (not dropped).
    loss : {"cross_entropy", "bce_multilabel"}
        Mean cross-entropy over classes, or mean binary cross-entropy with logits over the
        labels (for CXR8's multi-hot labels; the paper does not name the head or loss, a
        sigmoid/BCE head is assumed).
    device : str or torch.device, default "cpu"

    Notes
    -----
    **Determinism.** :meth:`train` draws one integer from ``rng`` and seeds, with it, a
    ``torch.Generator`` for the epoch shuffles and (inside :func:`torch.random.fork_rng`, so the
    global torch state is left as it was) torch's global generator for any dropout. Buffers of
    the model (if any) are reset to their ``model_fn()`` values before each call, so the result
    depends only on (i, start, the rng state, epochs) -- on CPU, with a fixed thread count.

    **Normalisation statistics.** Running statistics (of batch normalisation) are buffers, not
    federated parameters, so no client's statistics describe the global model. Before an
    evaluation the trainer therefore recalibrates them at the evaluated parameters: it resets
    them and runs the pooled training rows of all clients through the model in training mode
    with a cumulative average (the recalibration of stochastic weight averaging, Izmailov et
    al. 2018), then evaluates in eval mode. A model without running statistics skips this.
    """

    #: the last evaluation's outputs, a cache (not data: see ``data_digest``)
    run_state_attributes = ("_cache",)

    def __init__(
        self,
        model_fn: Callable[[], nn.Module],
        datasets: Sequence[ClientData],
        *,
        epochs: int = 2,
        lr: float = 1e-3,
        mu: float = 1e-3,
        batch_size: int = 32,
        loss: str = "cross_entropy",
        device: str | torch.device = "cpu",
    ) -> None:
        name = "TorchClientTrainer"
        if not callable(model_fn):
            raise ParameterError(f"{name}: model_fn must be a callable returning a torch module")
        if loss not in LOSSES:
            raise ParameterError(f"{name}: loss must be one of {LOSSES}, got {loss!r}")
        self.epochs = integer(epochs, f"{name}: epochs", minimum=1)
        self.batch_size = integer(batch_size, f"{name}: batch_size", minimum=1)
        self.lr = real(lr, f"{name}: lr", above=0)
        self.mu = real(mu, f"{name}: mu", at_least=0)
        self.loss = loss
        self.device = torch.device(device)
        model = model_fn()
        if not isinstance(model, nn.Module):
            raise ParameterError(
                f"{name}: model_fn() returned {type(model).__name__}, not a torch.nn.Module"
            )
        self.model = model.to(self.device)
        self.n_parameters = n_parameters(self.model)
        self._dtype = next(self.model.parameters()).dtype if self.n_parameters else torch.float32
        self._buffers0 = [b.detach().clone() for b in self.model.buffers()]
        self._norms = [
            m
            for m in self.model.modules()
            if isinstance(m, nn.modules.batchnorm._NormBase) and m.track_running_stats
        ]
        self._init_flat = flatten_parameters(self.model).double().cpu().numpy()
        self._prepare(datasets)
        self._cache: tuple[str, np.ndarray, np.ndarray] | None = None

    # ------------------------------------------------------------------ data
    def _prepare(self, datasets: Sequence[ClientData]) -> None:
        name = "TorchClientTrainer"
        if isinstance(datasets, (str, bytes)) or not isinstance(datasets, Sequence):
            raise DataError(f"{name}: datasets must be a sequence of per-client 4-tuples")
        if len(datasets) == 0:
            raise DataError(f"{name}: datasets is empty (no clients)")
        feat_shape: tuple[int, ...] | None = None
        n_labels: int | None = None
        parts: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {
            "train": ([], []),
            "test": ([], []),
        }
        for i, item in enumerate(datasets):
            if not isinstance(item, (tuple, list)) or len(item) != 4:
                raise DataError(
                    f"{name}: client {i}: expected (X_train, y_train, X_test, y_test), got "
                    f"{type(item).__name__}"
                    + (f" of length {len(item)}" if hasattr(item, "__len__") else "")
                )
            for split, (x, y) in (("train", item[:2]), ("test", item[2:])):
                x, y = self._check_xy(np.asarray(x), np.asarray(y), f"client {i} {split}")
                if feat_shape is None:
                    feat_shape = x.shape[1:]
                elif x.shape[1:] != feat_shape:
                    raise DataError(
                        f"{name}: client {i} {split} features have trailing shape {x.shape[1:]}, "
                        f"but earlier clients have {feat_shape}"
                    )
                if y.ndim == 2:
                    if n_labels is None:
                        n_labels = y.shape[1]
                    elif y.shape[1] != n_labels:
                        raise DataError(
                            f"{name}: client {i} {split} has {y.shape[1]} labels, earlier "
                            f"clients {n_labels}"
                        )
                parts[split][0].append(x)
                parts[split][1].append(y)
        self.n_clients = len(datasets)
        self._sizes: dict[str, np.ndarray] = {}
        self._offsets: dict[str, np.ndarray] = {}
        self._x: dict[str, torch.Tensor] = {}
        self._y: dict[str, torch.Tensor] = {}
        self._y_np: dict[str, np.ndarray] = {}
        self._owner: dict[str, np.ndarray] = {}
        ydtype = torch.int64 if self.loss == "cross_entropy" else torch.float32
        for split, (xs, ys) in parts.items():
            sizes = np.array([x.shape[0] for x in xs], dtype=np.int64)
            self._sizes[split] = sizes
            self._offsets[split] = np.r_[0, np.cumsum(sizes)]
            self._owner[split] = np.repeat(np.arange(self.n_clients), sizes)
            x_all = np.concatenate(xs).astype(np.float32, copy=False)
            y_all = np.concatenate(ys)
            self._y_np[split] = y_all
            self._x[split] = torch.from_numpy(np.ascontiguousarray(x_all)).to(self.device)
            self._y[split] = torch.from_numpy(np.ascontiguousarray(y_all)).to(self.device, ydtype)

    def _check_xy(self, x: np.ndarray, y: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
        name = "TorchClientTrainer"
        if x.ndim < 2:
            raise DataError(
                f"{name}: {where}: features must be (n, ...) with ndim >= 2, got shape {x.shape}"
            )
        if not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
            raise DataError(f"{name}: {where}: features must be numeric, got dtype {x.dtype}")
        if not np.isfinite(x).all():
            raise DataError(f"{name}: {where}: features contain NaN or infinite values")
        if y.shape[:1] != x.shape[:1]:
            raise DataError(
                f"{name}: {where}: {x.shape[0]} feature rows but targets of shape {y.shape}"
            )
        if self.loss == "cross_entropy":
            if y.ndim != 1:
                raise DataError(
                    f"{name}: {where}: cross_entropy needs 1-D int labels, got shape {y.shape}"
                )
            if y.size and (
                not np.issubdtype(y.dtype, np.number)
                or not np.array_equal(y, np.round(y))
                or y.min() < 0
            ):
                raise DataError(f"{name}: {where}: labels must be integers >= 0")
            return x, y.astype(np.int64)
        if y.ndim != 2:
            raise DataError(
                f"{name}: {where}: bce_multilabel needs multi-hot targets of shape "
                f"(n, K), got {y.shape}"
            )
        if y.size and not np.isin(y, (0, 1)).all():
            raise DataError(f"{name}: {where}: multi-hot targets must be 0 or 1")
        return x, y.astype(np.float32)

    # ------------------------------------------------------------------ protocol
    def n_samples(self, i: int) -> int:
        """n_i, the number of training rows of client ``i``."""
        return int(self._sizes["train"][self._client(i)])

    def num_batches(self, i: int, epochs: int | None = None) -> int:
        r"""Mini-batches of one local run: ``epochs * ceil(n_i / batch_size)``.

        The async simulator's delay model (Licudi et al. 2025, App. B.0.1) counts these.
        """
        e = self.epochs if epochs is None else self._epochs(epochs)
        return e * -(-self.n_samples(i) // self.batch_size)

    def initial_parameters(self, seed: int = 0) -> np.ndarray:
        """A fresh ``model_fn``-style initialisation as a float64 flat vector.

        Re-initialises every submodule that has ``reset_parameters`` under
        ``torch.manual_seed(seed)`` (inside ``fork_rng``), so equal seeds give equal vectors.
        The trainer's own model is left with those parameters.
        """
        seed = integer(seed, "initial_parameters: seed")
        with torch.random.fork_rng(devices=self._fork_devices()):
            torch.manual_seed(seed)
            for m in self.model.modules():
                reset = getattr(m, "reset_parameters", None)
                if callable(reset):
                    reset()
        return flatten_parameters(self.model).double().cpu().numpy()

    def train(
        self,
        i: int,
        start: np.ndarray,
        rng: np.random.Generator,
        epochs: int | None = None,
    ) -> np.ndarray:
        r"""Run client ``i`` from ``start`` and return its local model :math:`\Theta_i^t`.

        ``epochs`` (default: the trainer's) epochs of Adam on
        :math:`l_i(\theta) + (\mu/2)\|\theta - \theta_{start}\|^2` over shuffled mini-batches
        (the prox gradient :math:`\mu(\theta - \theta_{start})` is added to the loss gradient
        exactly). A client without training rows returns ``start`` (as rounded by the model
        dtype).

        Parameters
        ----------
        i : int
            Client index in ``0..n_clients-1``.
        start : numpy.ndarray of float64, shape (D,)
            The received global model.
        rng : numpy.random.Generator
            One integer is drawn from it to seed the shuffles (and dropout).
        epochs : int, optional

        Returns
        -------
        numpy.ndarray of float64, shape (D,)
        """
        i = self._client(i)
        e = self.epochs if epochs is None else self._epochs(epochs)
        if not isinstance(rng, np.random.Generator):
            raise ParameterError(
                f"train: rng must be a numpy.random.Generator, got {type(rng).__name__}"
            )
        self._load(start, "train")
        seed = int(rng.integers(0, 2**63 - 1))
        lo, hi = (int(v) for v in self._offsets["train"][i : i + 2])
        n = hi - lo
        if n == 0:
            return flatten_parameters(self.model).double().cpu().numpy()
        x, y = self._x["train"][lo:hi], self._y["train"][lo:hi]
        params = list(self.model.parameters())
        anchors = [p.detach().clone() for p in params]
        opt = torch.optim.Adam(params, lr=self.lr)
        loss_fn = self._loss_fn()
        gen = torch.Generator(device="cpu").manual_seed(seed)
        self.model.train()
        with torch.random.fork_rng(devices=self._fork_devices()):
            torch.manual_seed(seed)
            for _ in range(e):
                perm = torch.randperm(n, generator=gen).to(self.device)
                for b in range(0, n, self.batch_size):
                    idx = perm[b : b + self.batch_size]
                    opt.zero_grad(set_to_none=False)
                    loss_fn(self.model(x[idx]), y[idx]).backward()
                    if self.mu:
                        with torch.no_grad():
                            for p, a in zip(params, anchors, strict=True):
                                p.grad.add_(p - a, alpha=self.mu)
                    opt.step()
        return flatten_parameters(self.model).double().cpu().numpy()

    def evaluate(self, flat: np.ndarray, split: str = "test") -> dict[str, float]:
        """Metrics of the model ``flat`` on the pooled data of all clients.

        Parameters
        ----------
        flat : numpy.ndarray, shape (D,)
        split : {"test", "train"}

        Returns
        -------
        dict
            ``accuracy`` (fraction of correct argmax predictions; for multi-label, of correct
            label decisions at logit 0, i.e. probability 1/2), ``loss`` (mean loss, no prox
            term), ``n_samples``, and ``error``: 1 - accuracy, or for multi-label 1 - macro
            AUROC (the CXR8 error of Licudi et al. 2025, Sec. 4.2). Multi-label adds ``auroc`` and
            ``auprc`` (macro over the labels, :func:`macro_auroc_auprc`).

        Raises
        ------
        DataError
            When no client has rows in ``split``.
        """
        logits = self._logits(flat, split)
        y = self._y_np[split]
        if y.shape[0] == 0:
            raise DataError(f"evaluate: no client has {split} rows")
        with torch.no_grad():
            lt = torch.from_numpy(logits)
            yt = torch.from_numpy(y)
            loss = float(self._loss_fn()(lt, yt.to(lt.dtype) if y.ndim == 2 else yt))
        out: dict[str, float] = {"n_samples": float(y.shape[0]), "loss": loss}
        acc = float(self._correct(logits, y).mean())
        out["accuracy"] = acc
        if self.loss == "bce_multilabel":
            out["auroc"], out["auprc"] = macro_auroc_auprc(y, logits)
            out["error"] = 1.0 - out["auroc"]
        else:
            out["error"] = 1.0 - acc
        return out

    def per_client_accuracy(self, flat: np.ndarray, split: str = "test") -> np.ndarray:
        """Accuracy of the global model ``flat`` on each client's own ``split`` rows.

        The fairness metrics (:func:`riemfl.federated.fairness.gini`, ``theil``; Licudi et al. 2025,
        Sec. 4.2.1) take this vector. Multi-label tasks give the per-label decision accuracy (as in
        :meth:`evaluate`).

        Returns
        -------
        numpy.ndarray of float64, shape (n_clients,)
            NaN for a client without ``split`` rows.
        """
        logits = self._logits(flat, split)
        correct = self._correct(logits, self._y_np[split]).astype(np.float64)
        if correct.ndim == 2:
            correct = correct.mean(axis=1)
        sizes = self._sizes[split]
        sums = np.bincount(self._owner[split], weights=correct, minlength=self.n_clients)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(sizes > 0, sums / np.maximum(sizes, 1), np.nan)

    # ------------------------------------------------------------------ helpers
    def _client(self, i: Any) -> int:
        return integer(
            i, "TorchClientTrainer: client index i", minimum=0, maximum=self.n_clients - 1
        )

    def _epochs(self, epochs: Any) -> int:
        return integer(epochs, "TorchClientTrainer: epochs", minimum=1)

    @torch.no_grad()
    def _recalibrate(self) -> None:
        """Running statistics of the loaded parameters over the pooled training rows (class
        docstring); nothing for a model without them."""
        if not self._norms:
            return
        momenta = [m.momentum for m in self._norms]
        for m in self._norms:
            m.reset_running_stats()
            m.momentum = None  # a cumulative average over the batches
        x, rows = self._x["train"], tuning.EVAL_BATCH_ROWS
        self.model.train()
        with torch.random.fork_rng(devices=self._fork_devices()):
            torch.manual_seed(0)  # any dropout before a normalisation: the same every time
            for b in range(0, x.shape[0], rows):
                self.model(x[b : b + rows])
        for m, momentum in zip(self._norms, momenta, strict=True):
            m.momentum = momentum

    def _fork_devices(self) -> list[Any]:
        return [] if self.device.type == "cpu" else [self.device]

    def _loss_fn(self) -> nn.Module:
        return nn.CrossEntropyLoss() if self.loss == "cross_entropy" else nn.BCEWithLogitsLoss()

    def _load(self, flat: Any, where: str) -> None:
        if is_torch(flat):
            raise ParameterError(f"{where}: pass the flat parameters as a numpy array")
        arr = np.asarray(flat, dtype=np.float64)
        if arr.shape != (self.n_parameters,):
            raise ShapeError(
                f"{where}: flat parameters have shape {arr.shape}; expected ({self.n_parameters},)"
            )
        if not np.isfinite(arr).all():
            raise ParameterError(f"{where}: flat parameters contain NaN or infinite values")
        load_flat_parameters(self.model, arr)
        with torch.no_grad():
            for b, b0 in zip(self.model.buffers(), self._buffers0, strict=True):
                b.copy_(b0)

    def _logits(self, flat: np.ndarray, split: str) -> np.ndarray:
        if split not in ("train", "test"):
            raise ParameterError(f"split must be 'train' or 'test', got {split!r}")
        if (
            self._cache is not None
            and self._cache[0] == split
            and np.array_equal(self._cache[1], flat)
        ):
            return self._cache[2]
        self._load(flat, "evaluate")
        self._recalibrate()
        x = self._x[split]
        self.model.eval()
        rows = tuning.EVAL_BATCH_ROWS
        with torch.no_grad():
            chunks = [
                self.model(x[b : b + rows]).detach().double().cpu()
                for b in range(0, max(x.shape[0], 1), rows)  # one pass if empty
            ]
        logits = torch.cat(chunks).numpy()
        self._cache = (split, np.array(flat, dtype=np.float64), logits)
        return logits

    @staticmethod
    def _correct(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
        if y.ndim == 2:
            return (logits > 0) == (y > 0.5)
        return logits.argmax(axis=1) == y


# ---------------------------------------------------------------------- offline default
def digits_clients(
    n_clients: int = 30,
    alpha: float = 0.5,
    seed: int = 0,
    test_fraction: float = 0.2,
    *,
    min_size: int = 0,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """The offline FEMNIST stand-in: scikit-learn's digits on Dirichlet(alpha) clients.

    The 1797 digits (pixels / 16, in [0, 1]) are split among ``n_clients`` clients with
    :func:`riemfl.problems.partition.dirichlet_partition` (per label, no balancing;
    Licudi et al. 2025 use N = 30, alpha = 0.5), then each client's rows are shuffled and the first
    ``round(test_fraction * n_i)`` become its local test set (the per-client validation data of the
    fairness metrics), the rest its training set. The generator is
    ``riemfl.problems.checks.data_rng(seed, "digits_clients")``.

    Returns
    -------
    list of (X_train, y_train, X_test, y_test)
        Features float32 of shape (m, 1, 8, 8) (for :class:`riemfl.nn.SmallCNN`; ``MLP([64,
        ...])`` flattens them), labels int64 in 0..9.

    Raises
    ------
    MissingDependencyError
        Without scikit-learn (``pip install 'riemfl[data]'``).
    """
    real(test_fraction, "digits_clients: test_fraction", at_least=0, below=1)
    x, y = load_digits()
    rng = data_rng(seed, "digits_clients")
    return dirichlet_clients(
        x.reshape(-1, 1, 8, 8).astype(np.float32),
        y,
        n_clients,
        alpha,
        rng,
        test_fraction,
        min_size=min_size,
    )


def dirichlet_clients(
    x: np.ndarray,
    y: np.ndarray,
    n_clients: int,
    alpha: float,
    rng: np.random.Generator,
    test_fraction: float = 0.2,
    *,
    min_size: int = 0,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Pooled labelled rows split into Dirichlet(alpha) clients, each with a local test split.

    :func:`riemfl.problems.partition.dirichlet_partition` per label without balancing (the FEMNIST
    split of Licudi et al. 2025, App. B.1.1); then each client's rows are shuffled by ``rng`` and
    the first ``round(test_fraction * n_i)`` become its test rows.
    """
    parts = dirichlet_partition(y, n_clients, alpha, rng, min_size=min_size)
    out = []
    for idx in parts:
        idx = rng.permutation(idx)
        k = int(round(test_fraction * idx.size))
        test, train = idx[:k], idx[k:]
        out.append((x[train], y[train], x[test], y[test]))
    return out

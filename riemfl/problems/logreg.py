r"""Federated multinomial logistic (softmax) regression: a Euclidean problem for every rule.

Client i holds :math:`m_i` labelled rows :math:`(x_l, y_l)`, :math:`x_l \in \mathbb R^d`,
:math:`y_l \in \{0, \dots, c-1\}`. The model is a weight matrix with the bias as its last row,
:math:`W \in \mathbb R^{(d+1) \times c}` (the point of :class:`~riemfl.manifolds.Euclidean`
``(d + 1, c)``), applied to :math:`\tilde x = (x, 1)`:

.. math::
    f_i(W) = \frac1{m_i}\sum_{l} \Bigl(\log\sum_k e^{\tilde x_l^\top W_k}
             - \tilde x_l^\top W_{y_l}\Bigr) + \frac{\lambda}{2}\|W\|_F^2, \qquad
    \nabla f_i(W) = \frac1{m_i}\tilde X_i^\top (S_i - Y_i) + \lambda W,

with :math:`S_i` the row-wise softmax of :math:`\tilde X_i W` and :math:`Y_i` the one-hot labels;
a mini-batch B averages over its rows only (unbiased, as :mod:`riemfl.problems.base` requires).
The global objective is :math:`f = \frac1n\sum_i f_i` (problem (1) of Zhang et al. 2024).

Constants. The Hessian of the cross-entropy in the logits, :math:`\operatorname{diag}(s) - s
s^\top`, has norm at most 1/2, so every :math:`f_i` is :math:`\beta_i`-smooth with
:math:`\beta_i = \tfrac12\lambda_{\max}(\tilde X_i^\top\tilde X_i)/m_i + \lambda`; ``smoothness``
is :math:`\max_i \beta_i`. With :math:`\lambda > 0` the problem is strongly convex, so its
minimiser is unique: ``optimum`` and ``solution`` come from L-BFGS on f at construction (the
gradient norm at the solution is checked to be at most 1e-7; about a second for the digits, half
a minute for MNIST's 60,000 rows: ``progress=True`` shows a bar of that solve on stderr).

This is the problem behind ``riemfl run logreg-digits``: a Euclidean task on which the curve
rules (AsyncBezier, AsyncBezierED, whose clients need flat space) run from the command line and
from a Flower deployment's run config, beside every other synchronous and asynchronous rule.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._validation import integer, real
from ..errors import ParameterError, ShapeError
from ..manifolds.euclidean import Euclidean
from ..progress import ProgressBar
from .base import FederatedProblem
from .checks import batch_array, client_index, float_matrix, point_stack
from .data import label_sorted_indices, load_digits, load_mnist
from .partition import dirichlet_partition

__all__ = ["SoftmaxRegressionProblem"]

#: the split of a labelled data set among the clients
PARTITIONS = ("dirichlet", "label-sorted")


class SoftmaxRegressionProblem(FederatedProblem):
    r"""Multinomial logistic regression with an L2 penalty, rows split among n clients.

    Parameters
    ----------
    features : sequence of array-like
        Client i's inputs as the rows of a (m_i, d) array (d the same for all, every m_i >= 1).
    labels : sequence of array-like
        Client i's labels, integers in ``0 .. n_classes - 1``, one per row.
    n_classes : int
        c >= 2.
    l2 : float
        :math:`\lambda > 0` (strong convexity; the default 1e-3 barely changes the fit).
    name : str
        Used in histories and messages.
    progress : bool
        Show the progress of the L-BFGS solve for f* on stderr (:mod:`riemfl.progress`); off
        by default, so that building a problem prints nothing.

    Attributes
    ----------
    manifold : Euclidean
        :math:`\mathbb R^{(d+1) \times c}` (the last row is the bias).
    optimum : float
        :math:`f^* = \min f`.
    solution : numpy.ndarray
        The minimiser, shape (d + 1, c).
    smoothness : float
        :math:`\max_i \beta_i` (module docstring).
    n_samples : tuple of int
        :math:`m_i`.
    """

    def __init__(
        self,
        features: Sequence[Any],
        labels: Sequence[Any],
        n_classes: int,
        *,
        l2: float = 1e-3,
        name: str = "logreg",
        progress: bool = False,
    ) -> None:
        where = "SoftmaxRegressionProblem"
        if not isinstance(features, Sequence) or len(features) == 0:
            raise ParameterError(
                f"{where}: features must be a non-empty sequence of (m_i, d) arrays, got "
                f"{type(features).__name__}"
            )
        if not isinstance(labels, Sequence) or len(labels) != len(features):
            raise ParameterError(
                f"{where}: labels must be a sequence with one label array per client "
                f"({len(features)}), got {type(labels).__name__}"
            )
        self.n_classes = integer(n_classes, f"{where}: n_classes", minimum=2)
        l2 = real(l2, f"{where}: l2", above=0)
        blocks = [
            float_matrix(x, f"{where}: features of client {i}") for i, x in enumerate(features)
        ]
        d = blocks[0].shape[1]
        targets = []
        for i, (x, y) in enumerate(zip(blocks, labels, strict=True)):
            if x.shape[1] != d:
                raise ShapeError(
                    f"{where}: client {i} has {x.shape[1]} features, client 0 has {d}; every "
                    "client's rows must have the same dimension"
                )
            y = np.asarray(y)
            if y.shape != (x.shape[0],) or not np.issubdtype(y.dtype, np.integer):
                raise ShapeError(
                    f"{where}: client {i}'s labels must be {x.shape[0]} integers (one per row), "
                    f"got shape {y.shape} of dtype {y.dtype}"
                )
            if y.size and (y.min() < 0 or y.max() >= self.n_classes):
                raise ParameterError(
                    f"{where}: client {i} has labels outside 0..{self.n_classes - 1}"
                )
            targets.append(y.astype(np.intp))
        self.d = d
        self.l2 = float(l2)
        self.name = name
        self.manifold = Euclidean(d + 1, self.n_classes)
        self.n_clients = len(blocks)
        self.n_samples = tuple(x.shape[0] for x in blocks)
        self._sizes = np.asarray(self.n_samples, dtype=np.intp)
        # inputs with the bias column appended, once
        self.inputs = [np.hstack([x, np.ones((x.shape[0], 1))]) for x in blocks]
        self.labels = targets
        self.smoothness = max(
            0.5 * float(np.linalg.eigvalsh(a.T @ a)[-1]) / a.shape[0] + self.l2 for a in self.inputs
        )
        self.solution, self.optimum = self._solve(progress)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_labelled(
        cls,
        features: Any,
        labels: Any,
        n_clients: int,
        *,
        partition: str = "dirichlet",
        alpha: float = 0.5,
        seed: int | np.random.Generator = 0,
        l2: float = 1e-3,
        name: str = "logreg-labelled",
        progress: bool = False,
    ) -> SoftmaxRegressionProblem:
        """Split one labelled data set among ``n_clients``.

        ``partition="dirichlet"``: a symmetric Dirichlet(``alpha``) per label
        (:func:`~riemfl.problems.partition.dirichlet_partition`, every client keeps at least
        one row); ``"label-sorted"``: contiguous blocks of the label-sorted rows
        (:func:`~riemfl.problems.label_sorted_indices`). The classes are ``0 .. max label``;
        ``l2``, ``name`` and ``progress`` are the class's.
        """
        x = float_matrix(features, f"{cls.__name__}.from_labelled: features")
        y = np.asarray(labels)
        if y.shape != (x.shape[0],) or not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
            raise ShapeError(
                f"{cls.__name__}.from_labelled: labels must be {x.shape[0]} integers >= 0, got "
                f"shape {y.shape} of dtype {y.dtype}"
            )
        if partition == "dirichlet":
            parts = dirichlet_partition(y, n_clients, alpha, seed, min_size=1)
        elif partition == "label-sorted":
            parts = label_sorted_indices(y, n_clients)
        else:
            raise ParameterError(f"partition must be one of {PARTITIONS}, got {partition!r}")
        return cls(
            [x[p] for p in parts],
            [y[p] for p in parts],
            int(y.max()) + 1,
            l2=l2,
            name=name,
            progress=progress,
        )

    @classmethod
    def digits(cls, n_clients: int = 10, **kw: Any) -> SoftmaxRegressionProblem:
        """scikit-learn's digits (1797 x 64, 10 classes) split by :meth:`from_labelled`."""
        x, y = load_digits()
        return cls.from_labelled(x, y, n_clients, name=kw.pop("name", "logreg-digits"), **kw)

    @classmethod
    def mnist(
        cls, path: str | os.PathLike, n_clients: int = 10, **kw: Any
    ) -> SoftmaxRegressionProblem:
        """The user's MNIST file (:func:`~riemfl.problems.load_mnist`) split by
        :meth:`from_labelled`."""
        x, y = load_mnist(path)
        return cls.from_labelled(x, y, n_clients, name=kw.pop("name", "logreg-mnist"), **kw)

    # ------------------------------------------------------------------ oracle
    def _client_terms(
        self, i: int, w: np.ndarray, rows: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Inputs, labels and softmax probabilities of client i's rows (all, or ``rows``)."""
        a, y = self.inputs[i], self.labels[i]
        if rows is not None:
            a, y = a[rows], y[rows]
        logits = a @ w
        logits -= logits.max(axis=1, keepdims=True)
        np.exp(logits, out=logits)
        logits /= logits.sum(axis=1, keepdims=True)
        return a, y, logits

    def client_egrads(
        self, clients: Sequence[int], xs: Any, batches: np.ndarray | None = None
    ) -> np.ndarray:
        r""":math:`\nabla f_i(W_j)` for ``i = clients[j]`` (module docstring), stacked as
        ``(len(clients), d + 1, c)``; with ``batches`` the mean over each row's mini-batch."""
        _, ids = client_index(clients, self.n_clients, self.name)
        xs = point_stack(xs, ids.size, (self.d + 1, self.n_classes), self.name)
        if batches is not None:
            batches = batch_array(batches, ids, self._sizes, self.name)
        out = np.empty_like(xs)
        for j, i in enumerate(ids):
            a, y, probs = self._client_terms(int(i), xs[j], None if batches is None else batches[j])
            probs[np.arange(y.size), y] -= 1.0
            np.matmul(a.T, probs, out=out[j])
            out[j] /= y.size
            out[j] += self.l2 * xs[j]
        return out

    def client_losses(self, clients: Sequence[int], xs: Any) -> np.ndarray:
        """Full local objectives :math:`f_i(W_j)` (cross-entropy plus the penalty)."""
        _, ids = client_index(clients, self.n_clients, self.name)
        xs = point_stack(xs, ids.size, (self.d + 1, self.n_classes), self.name)
        out = np.empty(ids.size)
        for j, i in enumerate(ids):
            a, y = self.inputs[int(i)], self.labels[int(i)]
            logits = a @ xs[j]
            top = logits.max(axis=1)
            lse = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
            ce = float(np.mean(lse - logits[np.arange(y.size), y]))
            out[j] = ce + 0.5 * self.l2 * float(np.sum(xs[j] * xs[j]))
        return out

    def accuracy(self, x: Any) -> float:
        """Share of all clients' rows whose largest logit is the label (pooled over clients)."""
        w = point_stack(np.asarray(x)[None], 1, (self.d + 1, self.n_classes), self.name)[0]
        right = sum(
            int(np.sum(np.argmax(a @ w, axis=1) == y))
            for a, y in zip(self.inputs, self.labels, strict=True)
        )
        return right / float(self._sizes.sum())

    # ------------------------------------------------------------------ the minimiser
    def _solve(self, progress: bool = False) -> tuple[np.ndarray, float]:
        """L-BFGS on f from W = 0; with ``progress`` a bar on stderr whose 100 steps are the
        decades of the gradient norm from its start to the solver's tolerance (each iteration
        also shows its number and the gradient norm)."""
        from scipy.optimize import minimize

        shape = (self.d + 1, self.n_classes)
        everyone = list(self.all_clients)
        norms: list[float] = []  # the gradient norm of every evaluation

        def value_and_grad(flat: np.ndarray) -> tuple[float, np.ndarray]:
            w = np.broadcast_to(flat.reshape(shape), (self.n_clients, *shape))
            value = float(np.mean(self.client_losses(everyone, w)))
            grad = self.client_egrads(everyone, w).mean(axis=0).ravel()
            norms.append(float(np.linalg.norm(grad)))
            return value, grad

        gtol = 1e-10
        with ProgressBar(100, "solving for f* (L-BFGS)", enabled=progress) as bar:
            bar.update(0)  # the first line at once: the first iterations can take seconds
            iterations = [0]

            def advance(_: Any) -> None:
                iterations[0] += 1
                start, now = max(norms[0], 10 * gtol), norms[-1]
                done = math.log(start / now) / math.log(start / gtol) if now > 0 else 1.0
                target = int(100 * min(max(done, 0.0), 1.0))
                bar.update(max(target - bar.count, 0), iteration=iterations[0], grad=now)

            res = minimize(
                value_and_grad,
                np.zeros(np.prod(shape)),
                jac=True,
                method="L-BFGS-B",
                callback=advance if progress else None,
                options={"maxiter": 20000, "gtol": gtol, "ftol": 0.0},
            )
            bar.update(100 - bar.count, iteration=iterations[0])
        solution = res.x.reshape(shape)
        grad = float(np.linalg.norm(value_and_grad(res.x)[1]))
        if not grad <= 1e-7:
            raise ParameterError(
                f"{self.name}: L-BFGS did not find the minimiser (gradient norm {grad:.2e}); "
                "is l2 too small for this data?"
            )
        return solution, float(res.fun)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "n_classes": self.n_classes, "l2": self.l2}

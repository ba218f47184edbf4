r"""Federated hyperbolic embedding of a tree on the Poincare ball (Nickel & Kiela 2017's loss).

The N nodes of a graph are embedded as points :math:`x_1, \dots, x_N` of the Poincare ball
:math:`\mathbb B^k_c`; the whole embedding is one point of the product manifold
:math:`(\mathbb B^k_c)^N` (:class:`~riemfl.manifolds.Product` of N
:class:`~riemfl.manifolds.PoincareBall` factors, packed as a flat vector of length Nk, node by
node), or, with ``model="lorentz"``, of a product of N :class:`~riemfl.manifolds.Lorentz`
(k, 1/c) hyperboloids (k + 1 coordinates a node; the same loss through the isometry onto the
ball). The relations (u, v) (both orientations of every edge) are split among the clients;
client i holds :math:`m_i` of them, each with K negative nodes :math:`\mathcal N_{uv}` drawn
once at generation among the nodes that are neither u nor one of u's neighbours. With the
distance :math:`d(x, y) = \tfrac1{\sqrt c}\operatorname{arcosh}\big(1 + \tfrac{2c\|x -
y\|^2}{(1 - c\|x\|^2)(1 - c\|y\|^2)}\big)`, Nickel & Kiela's (2017) softmax loss of a
relation is

.. math::

    \ell_{uv}(x) = -\log\frac{e^{-d(x_u, x_v)}}{\sum_{w \in \{v\}\cup\mathcal N_{uv}}
    e^{-d(x_u, x_w)}} = d(x_u, x_v) + \log\sum_{w \in \{v\}\cup\mathcal N_{uv}}e^{-d(x_u, x_w)},

and the client objective adds a small radial penalty (the same on every client),

.. math::

    f_i(x) = \frac1{m_i}\sum_{(u, v) \in D_i} \ell_{uv}(x) + \frac\mu2\sum_{u=1}^N
    d(0, x_u)^2, \qquad d(0, x) = \tfrac2{\sqrt c}\operatorname{artanh}(\sqrt c\|x\|).

Without it (:math:`\mu = 0`) the infimum 0 of the softmax loss is approached only as the
points run to the boundary, so f has no minimiser; with :math:`\mu > 0` it is coercive and has
stationary points. f is not convex and the optimum is unknown: ``optimum`` is None and
``reference_loss`` is the loss that centralised Riemannian gradient descent reaches
(``reference_method`` says how it was computed).

f is not differentiable where two nodes coincide (:math:`d(x, y)` behaves like
:math:`\|x - y\|` there), and gradient methods do drive some parent-child pairs together: the
attraction :math:`d(x_u, x_v)` of a relation is a cone at :math:`x_u = x_v`. At such a kink the
Riemannian gradient norm does not go to 0 (the oracle returns the one-sided value with the
direction of :math:`x - y` set to 0 at coincidence), so runs are compared by their loss
against ``reference_loss``, not by the gradient norm.

Gradients (as in Nickel & Kiela 2017, written here for curvature -c with :math:`\sigma_x = 1 -
c\|x\|^2` and :math:`q = 2c\|x - y\|^2/(\sigma_x\sigma_y)`):

.. math::

    \nabla_x d(x, y) = \frac{2\sqrt2}{\sqrt{\sigma_x\sigma_y(q + 2)}}\Big(\frac{x - y}{\|x -
    y\|} + \frac{c\|x - y\|}{\sigma_x}x\Big), \qquad
    \nabla_x \tfrac12 d(0, x)^2 = \frac{2\,d(0, x)}{\sigma_x\|x\|}x,

and :math:`\partial\ell_{uv}/\partial d(x_u, x_w) = [w = v] - p_w`, with :math:`p` the softmax
of :math:`-d(x_u, x_w)` over :math:`\{v\}\cup\mathcal N_{uv}`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._validation import integer, real
from ..errors import NotOnManifoldError, ParameterError, ShapeError
from ..manifolds.poincare import PoincareBall
from ..manifolds.product import Product
from .base import FederatedProblem
from .checks import (
    batch_array,
    client_index,
    data_rng,
    point_stack,
)

__all__ = ["HyperbolicEmbeddingProblem", "balanced_tree"]

#: how :meth:`HyperbolicEmbeddingProblem.tree` splits the relations among the clients
SPLITS = ("random", "subtree")

#: the models of hyperbolic space a node can live in
MODELS = ("poincare", "lorentz")


def balanced_tree(branching: int, depth: int) -> np.ndarray:
    """The edges (parent, child) of the balanced tree, nodes numbered breadth first from 0.

    Node k > 0 has parent (k - 1) // branching; there are
    :math:`N = \\sum_{l=0}^{h} b^l` nodes and N - 1 edges.
    """
    branching = integer(branching, "balanced_tree: branching", minimum=1)
    depth = integer(depth, "balanced_tree: depth", minimum=1)
    n = sum(branching**level for level in range(depth + 1))
    child = np.arange(1, n)
    return np.stack([(child - 1) // branching, child], axis=1)


def _distance_parts(x: np.ndarray, y: np.ndarray, c: float) -> tuple[np.ndarray, ...]:
    """``(d, grad_x d, grad_y d)`` for points x, y of the ball (last axis the coordinates)."""
    diff = x - y
    dist2 = np.sum(diff * diff, axis=-1)
    sx = 1.0 - c * np.sum(x * x, axis=-1)
    sy = 1.0 - c * np.sum(y * y, axis=-1)
    q = 2.0 * c * dist2 / (sx * sy)
    d = np.log1p(q + np.sqrt(q * (q + 2.0))) / math.sqrt(c)
    norm = np.sqrt(dist2)
    unit = diff / np.where(norm > 0, norm, 1.0)[..., None]
    scale = (2.0 * math.sqrt(2.0) / np.sqrt(sx * sy * (q + 2.0)))[..., None]
    gx = scale * (unit + (c * norm / sx)[..., None] * x)
    gy = scale * (-unit + (c * norm / sy)[..., None] * y)
    return d, gx, gy


def _radial_parts(x: np.ndarray, c: float) -> tuple[np.ndarray, np.ndarray]:
    r"""``(d(0, x)^2 / 2, its gradient)`` per point."""
    r = np.sqrt(np.sum(x * x, axis=-1))
    root = math.sqrt(c)
    d = 2.0 / root * np.arctanh(root * r)
    sigma = 1.0 - c * r * r
    tiny = r < 1e-8
    over = np.where(tiny, 2.0, d / np.where(tiny, 1.0, r))  # d / r -> 2 as r -> 0
    return 0.5 * d * d, (2.0 * over / sigma)[..., None] * x


class HyperbolicEmbeddingProblem(FederatedProblem):
    r"""Nickel-Kiela embedding of a graph's relations, split among n clients (module docstring).

    Parameters
    ----------
    n_nodes : int
        N, the number of nodes (ids 0..N-1).
    relations : array-like of int, shape (R, 2)
        The relations (u, v).
    negatives : array-like of int, shape (R, K)
        The K negative nodes of every relation.
    owners : array-like of int, shape (R,)
        The client of every relation (every client in 0..n_clients-1 must hold one).
    dim : int
        k, the dimension of the ball.
    c : float
        Curvature magnitude of the ball.
    mu : float
        :math:`\mu \ge 0`, the weight of the radial penalty.
    model : {"poincare", "lorentz"}
        Where the nodes live: the ball :math:`\mathbb B^k_c` (k coordinates a node), or the
        hyperboloid :class:`~riemfl.manifolds.Lorentz` (k, 1/c) (k + 1 coordinates a node). The
        loss is the same function of the embedded tree: on the hyperboloid it is evaluated
        through the isometry :math:`y \mapsto \bar y/(1 + \sqrt c y_0)` onto the ball, and
        its gradient pulled back by the transpose of that map's differential.
    name : str
        Used in histories and messages.
    reference_iterations : int
        Iterations of the centralised reference run (0: no reference, ``reference_loss`` None).

    Attributes
    ----------
    optimum : None
        Unknown (f is not convex).
    reference_loss : float or None
        f at :attr:`reference_point`.
    reference_point : numpy.ndarray or None
        The end point of the centralised run, packed like every point.
    reference_method : str
        How the reference was computed.
    """

    optimum = None

    def __init__(
        self,
        n_nodes: int,
        relations: Any,
        negatives: Any,
        owners: Any,
        *,
        dim: int = 2,
        c: float = 1.0,
        mu: float = 0.01,
        model: str = "poincare",
        name: str = "hyperbolic-embedding",
        reference_iterations: int = 3000,
    ) -> None:
        where = "HyperbolicEmbeddingProblem"
        self.n_nodes = integer(n_nodes, f"{where}: n_nodes", minimum=2)
        self.dim = integer(dim, f"{where}: dim", minimum=1)
        self.c = real(c, f"{where}: c", above=0)
        self.mu = real(mu, f"{where}: mu", at_least=0)
        rel = self._ints(relations, "relations", 2)
        neg = self._ints(negatives, "negatives", 2)
        own = self._ints(owners, "owners", 1)
        if rel.shape[1] != 2 or rel.shape[0] < 1:
            raise ShapeError(f"{where}: relations has shape {rel.shape}; expected (R, 2), R >= 1")
        if neg.shape[0] != rel.shape[0] or neg.shape[1] < 1 or own.shape != (rel.shape[0],):
            raise ShapeError(
                f"{where}: negatives has shape {neg.shape} and owners {own.shape}; expected "
                f"({rel.shape[0]}, K) with K >= 1 and ({rel.shape[0]},), one row per relation"
            )
        for what, a in (("relations", rel), ("negatives", neg)):
            if a.min() < 0 or a.max() >= self.n_nodes:
                raise ParameterError(
                    f"{where}: {what} holds node ids outside 0..{self.n_nodes - 1}"
                )
        if own.min() < 0:
            raise ParameterError(f"{where}: owners must be client indices >= 0")
        self.n_clients = int(own.max()) + 1
        sizes = np.bincount(own, minlength=self.n_clients)
        if (sizes == 0).any():
            raise ParameterError(
                f"{where}: clients {np.flatnonzero(sizes == 0)[:5].tolist()} hold no relation "
                "(every client in 0..max(owners) needs one)"
            )
        order = np.argsort(own, kind="stable")  # relations client by client
        self.relations = np.ascontiguousarray(rel[order])
        self.negatives = np.ascontiguousarray(neg[order])
        self.owners = own[order]
        self._sizes = sizes.astype(np.intp)
        self._starts = (np.cumsum(sizes) - sizes).astype(np.intp)
        self.n_samples = tuple(int(s) for s in sizes)
        if model not in MODELS:
            raise ParameterError(f"{where}: model must be one of {MODELS}, got {model!r}")
        self.model = model
        self.ball = PoincareBall(self.dim, self.c)
        factor = self.ball if model == "poincare" else self.ball.lorentz
        self.width = self.dim + (model == "lorentz")
        self.manifold = Product(*([factor] * self.n_nodes))
        self.name = name
        self.smoothness = None
        self.reference_iterations = integer(
            reference_iterations, f"{where}: reference_iterations", minimum=0
        )
        self.reference_point: np.ndarray | None = None
        self.reference_loss: float | None = None
        self.reference_method = (
            "none"
            if self.reference_iterations == 0
            else (
                "centralised Riemannian gradient descent on f (full gradients, exponential map "
                "of the ball, step 0.5 halved until f decreases, then doubled up to 0.5) from the "
                "Nickel-Kiela start (coordinates uniform in [-1e-3, 1e-3], seed 0), for at most "
                f"{self.reference_iterations} iterations or until no step decreases f"
            )
        )
        if self.reference_iterations:
            self.reference_point = self._reference()
            self.reference_loss = self.loss(self.reference_point)

    @staticmethod
    def _ints(a: Any, what: str, ndim: int) -> np.ndarray:
        arr = np.asarray(a)
        if arr.ndim != ndim or not np.issubdtype(arr.dtype, np.integer) or arr.size == 0:
            raise ParameterError(
                f"HyperbolicEmbeddingProblem: {what} must be a non-empty {ndim}-D int array, got "
                f"shape {arr.shape} and dtype {arr.dtype}"
            )
        return arr.astype(np.intp)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def tree(
        cls,
        n_clients: int = 4,
        branching: int = 2,
        depth: int = 3,
        n_negatives: int = 5,
        seed: int | np.random.Generator | None = 0,
        *,
        split: str = "random",
        dim: int = 2,
        c: float = 1.0,
        mu: float = 0.01,
        model: str = "poincare",
        reference_iterations: int = 3000,
    ) -> HyperbolicEmbeddingProblem:
        r"""The balanced tree of :func:`balanced_tree`, its relations split among the clients.

        Both orientations (u, v) and (v, u) of every edge are relations (2(N - 1) of them);
        each gets ``n_negatives`` distinct negatives drawn uniformly among the nodes other than
        u and u's neighbours. ``split="random"`` deals the shuffled relations out in nearly
        equal parts; ``split="subtree"`` (heterogeneous) sorts them by the child of the root
        whose subtree holds the relation's deeper node and cuts that order into nearly equal
        contiguous parts.

        Parameters
        ----------
        n_clients : int
            n, at most 2(N - 1).
        branching, depth : int
            b and h of the tree (N = 1 + b + ... + b^h).
        n_negatives : int
            K, at most N - 1 - (the largest degree).
        seed : int, numpy.random.Generator or None
            Source of the negatives and of the split (an int is mixed with a fixed tag).
        split : {"random", "subtree"}
        dim, c, mu, model, reference_iterations
            As in the class.
        """
        where = "HyperbolicEmbeddingProblem.tree"
        if split not in SPLITS:
            raise ParameterError(f"{where}: split must be one of {SPLITS}, got {split!r}")
        edges = balanced_tree(branching, depth)
        n_nodes = edges.shape[0] + 1
        relations = np.concatenate([edges, edges[:, ::-1]])
        n_clients = integer(n_clients, f"{where}: n_clients", minimum=1, maximum=len(relations))
        adjacency = np.eye(n_nodes, dtype=bool)
        adjacency[edges[:, 0], edges[:, 1]] = adjacency[edges[:, 1], edges[:, 0]] = True
        most = n_nodes - int(adjacency.sum(axis=1).max())
        n_negatives = integer(n_negatives, f"{where}: n_negatives", minimum=1, maximum=most)
        rng = data_rng(seed, "hyptree")
        negatives = np.stack(
            [
                rng.choice(np.flatnonzero(~adjacency[u]), n_negatives, replace=False)
                for u, _ in relations
            ]
        )
        if split == "random":
            order = rng.permutation(len(relations))
        else:
            top = relations.max(axis=1)  # the deeper node of the relation
            while (top > branching).any():
                top = np.where(top > branching, (top - 1) // branching, top)
            order = np.argsort(top, kind="stable")
        owners = np.empty(len(relations), dtype=np.intp)
        for i, part in enumerate(np.array_split(order, n_clients)):
            owners[part] = i
        return cls(
            n_nodes,
            relations,
            negatives,
            owners,
            dim=dim,
            c=c,
            mu=mu,
            model=model,
            name=f"hyperbolic-tree-b{branching}-h{depth}",
            reference_iterations=reference_iterations,
        )

    # ------------------------------------------------------------------ evaluation
    def _terms(
        self,
        x: np.ndarray,
        rows: np.ndarray,
        rel: np.ndarray,
        weight: np.ndarray,
        *,
        grad: bool,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        r"""Per row of x (shape (m, N, k)): :math:`\sum_p w_p\ell_p` over the pairs p = (row,
        relation) plus the penalty, and (``grad``) its Euclidean gradient."""
        u = self.relations[rel, 0]
        cand = np.concatenate([self.relations[rel, 1:], self.negatives[rel]], axis=1)
        xu = x[rows, u][:, None, :]  # (P, 1, k)
        xc = x[rows[:, None], cand]  # (P, K + 1, k)
        d, gu, gc = _distance_parts(np.broadcast_to(xu, xc.shape), xc, self.c)
        shift = d.min(axis=1, keepdims=True)
        e = np.exp(-(d - shift))
        total = e.sum(axis=1)
        pair_loss = d[:, 0] + np.log(total) - shift[:, 0]
        pen, pen_grad = _radial_parts(x, self.c)
        losses = np.bincount(rows, weights=weight * pair_loss, minlength=x.shape[0])
        losses = losses + self.mu * pen.sum(axis=1)
        if not grad:
            return losses, None
        coef = -e / total[:, None]
        coef[:, 0] += 1.0
        coef *= weight[:, None]
        out = self.mu * pen_grad
        np.add.at(out, (rows, u), np.sum(coef[..., None] * gu, axis=1))
        np.add.at(out, (rows[:, None], cand), coef[..., None] * gc)
        return losses, out

    def _pairs(self, ids: np.ndarray, batches: np.ndarray | None) -> tuple[np.ndarray, ...]:
        if batches is None:
            sizes = self._sizes[ids]
            rows = np.repeat(np.arange(ids.size), sizes)
            within = np.arange(rows.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
            return rows, within + self._starts[ids][rows], 1.0 / sizes[rows]
        b = batches.shape[1]
        rows = np.repeat(np.arange(ids.size), b)
        rel = (self._starts[ids][:, None] + batches).reshape(-1)
        return rows, rel, np.full(rows.size, 1.0 / b)

    def _nodes(self, clients: Sequence[int], xs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ids, x, p)``: the nodes as given (m, N, width) and in ball coordinates (m, N, k)."""
        _, ids = client_index(clients, self.n_clients, self.name)
        xs = point_stack(xs, ids.size, self.manifold.point_shape, self.name)
        x = xs.reshape(ids.size, self.n_nodes, self.width)
        if self.model == "lorentz":
            den = 1.0 + math.sqrt(self.c) * x[..., :1]
            if (den[..., 0] <= 1.0).any():
                j, node = (int(a) for a in np.argwhere(den[..., 0] <= 1.0)[0])
                raise NotOnManifoldError(
                    f"{self.name}: node {node} of point {j} is not on the upper sheet of the "
                    "hyperboloid (x_0 <= 0)"
                )
            return ids, x, x[..., 1:] / den
        outside = self.c * np.sum(x * x, axis=-1) >= 1.0
        if outside.any():
            j, node = (int(a) for a in np.argwhere(outside)[0])
            raise NotOnManifoldError(
                f"{self.name}: node {node} of point {j} is not in the open ball (c|x|^2 >= 1)"
            )
        return ids, x, x

    def _pull_back(self, x: np.ndarray, g: np.ndarray) -> np.ndarray:
        r"""The gradient in the model's coordinates from the gradient g in ball coordinates:
        the identity on the ball; on the hyperboloid the transpose of the differential of
        :math:`p = \bar x/(1 + \sqrt c x_0)`: :math:`(-\sqrt c\langle \bar x, g\rangle/(1 +
        \sqrt c x_0)^2,\ g/(1 + \sqrt c x_0))`."""
        if self.model != "lorentz":
            return g
        root = math.sqrt(self.c)
        den = 1.0 + root * x[..., :1]
        g0 = -root * np.sum(x[..., 1:] * g, axis=-1, keepdims=True) / (den * den)
        return np.concatenate([g0, g / den], axis=-1)

    # ------------------------------------------------------------------ oracle
    def client_egrads(
        self, clients: Sequence[int], xs: Any, batches: np.ndarray | None = None
    ) -> np.ndarray:
        r"""Stacked :math:`\nabla f_i(x_j)` for ``i = clients[j]`` (``batches``: relation
        indices, the mean of :math:`\ell` over the batch), float64 of shape ``(len(clients),
        N k)``."""
        ids, x, p = self._nodes(clients, xs)
        if batches is not None:
            batches = batch_array(batches, ids, self._sizes, self.name)
        rows, rel, weight = self._pairs(ids, batches)
        _, g = self._terms(p, rows, rel, weight, grad=True)
        return self._pull_back(x, g).reshape(ids.size, -1)

    def client_losses(self, clients: Sequence[int], xs: Any) -> np.ndarray:
        """Stacked :math:`f_i(x_j)`, float64."""
        ids, _, p = self._nodes(clients, xs)
        rows, rel, weight = self._pairs(ids, None)
        return self._terms(p, rows, rel, weight, grad=False)[0]

    def _global(self, x: np.ndarray, *, grad: bool) -> tuple[float, np.ndarray | None]:
        """f and its Euclidean gradient at nodes x (N, k) in one pass over all relations."""
        rel = np.arange(len(self.relations))
        weight = 1.0 / (self.n_clients * self._sizes[self.owners])
        loss, g = self._terms(x[None], np.zeros(rel.size, np.intp), rel, weight, grad=grad)
        return float(loss[0]), None if g is None else g[0]

    def _reference(self) -> np.ndarray:
        """Centralised Riemannian gradient descent with backtracking (``reference_method``)."""
        rng = np.random.default_rng(0)
        x = rng.uniform(-1e-3, 1e-3, size=(self.n_nodes, self.dim))
        loss, g = self._global(x, grad=True)
        step = 0.5
        for _ in range(self.reference_iterations):
            r = self.ball.egrad_to_rgrad(x, g)
            while True:
                y = self.ball.exp(x, -step * r)
                new, g_new = self._global(y, grad=True)
                if new < loss or step < 1e-12:
                    break
                step *= 0.5
            if not new < loss:
                break
            x, loss, g = y, new, g_new
            step = min(2.0 * step, 0.5)
        if self.model == "lorentz":
            x = self.ball.to_lorentz(x)
        return x.reshape(-1)

    def reference_gap(self, x: Any) -> float:
        """f(x) - ``reference_loss`` (NaN without a reference)."""
        if self.reference_loss is None:
            return math.nan
        return self.loss(x) - self.reference_loss

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(
            n_nodes=self.n_nodes,
            dim=self.dim,
            c=self.c,
            mu=self.mu,
            model=self.model,
            n_negatives=int(self.negatives.shape[1]),
            reference_loss=self.reference_loss,
            reference_method=self.reference_method,
        )
        return out

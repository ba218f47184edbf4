r"""Partitions of a data set among federated clients: Dirichlet per label, natural, proportional.

Every partitioner returns a list of ``n_clients`` int64 index arrays, one per client, each sorted
increasingly; together they hold every row index ``0..n-1`` exactly once (the Dirichlet
partitioner with ``min_size = 0`` may leave a client empty, the others never drop a row). The
randomness comes only from the ``rng`` argument (a :class:`numpy.random.Generator`, or an int
seed for ``numpy.random.default_rng``; see :func:`riemfl.backend.as_generator`), so equal
generators give equal partitions.

* :func:`dirichlet_partition`: the label-skewed split of Licudi et al. 2025 (Sec. 4.1,
  App. B.1.1), Hsu et al. (2019) without Flower's balancing;
* :func:`natural_partition`: one client per group (writer for FEMNIST, play for Shakespeare,
  patient for CXR8), optionally dealing the groups to fewer clients;
* :func:`proportional_sizes_partition`: client sizes proportional to the client index
  i = 1..N, the heterogeneity of the technical report's exploratory runs (Licudi 2025 (TR),
  Sec. 3).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import integer, real
from ..backend import as_generator
from ..errors import DataError, ParameterError

__all__ = [
    "dirichlet_partition",
    "natural_partition",
    "proportional_sizes",
    "proportional_sizes_partition",
    "as_generator",  # re-exported from riemfl.backend
]


def _labels(labels: Any, name: str) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise DataError(f"{name}: labels must be a non-empty 1-D array, got shape {labels.shape}")
    return labels


def dirichlet_partition(
    labels: Any,
    n_clients: int,
    alpha: float,
    rng: np.random.Generator | int,
    *,
    min_size: int = 0,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    r"""Split rows among clients with a symmetric Dirichlet(alpha) per label, without balancing.

    For each class :math:`y` (in the order of ``np.unique(labels)``) draw client proportions
    :math:`(p_{y,1}, \dots, p_{y,N}) \sim \operatorname{Dir}(\alpha, \dots, \alpha)`, shuffle
    the :math:`|D_y|` rows of class :math:`y` uniformly and cut them into N consecutive pieces at
    the points :math:`\lfloor |D_y| \sum_{j \le i} p_{y,j} \rfloor`, i = 1..N-1; client i gets
    piece i (Licudi et al. 2025, Sec. 4.1 and App. B.1.1; Hsu et al. 2019). Client i therefore
    receives :math:`\lfloor p_{y,i} |D_y| \rfloor` or one more row of class y: the paper's
    ":math:`\lfloor p_{y,i}|D_y| \rfloor` samples" (App. B.1.1) would drop up to N-1 rows per
    class; riemfl's cumulative cut keeps every row (the paper does not say what happens to the
    remainder).

    Unlike Flower's ``DirichletPartitioner`` nothing rebalances the sizes, so with a small
    ``alpha`` a client can end up **empty**. With ``min_size > 0`` the whole draw is repeated
    (all classes, fresh proportions from the same ``rng``) until every client holds at least
    ``min_size`` rows; this retry is off by default because it changes the distribution (it
    conditions on the event "no small client").

    Parameters
    ----------
    labels : array-like, shape (n,)
        One class label per row (any dtype ``np.unique`` can sort).
    n_clients : int
        N >= 1.
    alpha : float
        Concentration alpha > 0 (0.5 in Licudi et al. 2025); small alpha gives few classes per
        client, large alpha approaches the class frequencies on every client.
    rng : numpy.random.Generator or int
        The randomness (an int is a seed).
    min_size : int, default 0
        Minimum rows per client; 0 accepts any draw.
    max_tries : int, default 1000
        How many draws ``min_size`` may take before a :class:`~riemfl.errors.ParameterError`.

    Returns
    -------
    list of numpy.ndarray of int64
        N sorted index arrays that partition ``0..n-1``.

    Raises
    ------
    DataError
        When ``labels`` is not a non-empty 1-D array.
    ParameterError
        For an invalid ``n_clients``, ``alpha``, ``min_size`` or ``max_tries``, and when no draw
        within ``max_tries`` meets ``min_size``.
    """
    name = "dirichlet_partition"
    labels = _labels(labels, name)
    n_clients = integer(n_clients, f"{name}: n_clients", minimum=1)
    real(alpha, f"{name}: alpha", above=0)
    min_size = integer(min_size, f"{name}: min_size", minimum=0, maximum=labels.size // n_clients)
    max_tries = integer(max_tries, f"{name}: max_tries", minimum=1)
    rng = as_generator(rng, name=name)
    classes = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    for _ in range(max_tries):
        pieces: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
        for idx in classes:
            p = rng.dirichlet(np.full(n_clients, float(alpha)))
            cuts = np.floor(np.cumsum(p)[:-1] * idx.size).astype(np.intp)
            for i, piece in enumerate(np.split(rng.permutation(idx), np.minimum(cuts, idx.size))):
                pieces[i].append(piece)
        parts = [np.sort(np.concatenate(p)).astype(np.int64) for p in pieces]
        if min(part.size for part in parts) >= min_size:
            return parts
    raise ParameterError(
        f"{name}: no Dirichlet(alpha={alpha}) draw in {max_tries} tries gave every one of the "
        f"{n_clients} clients at least min_size = {min_size} rows; lower min_size, raise alpha "
        "or max_tries"
    )


def natural_partition(
    groups: Any,
    n_clients: int | None = None,
    rng: np.random.Generator | int | None = None,
) -> list[np.ndarray]:
    """One client per natural group (writer, play, patient), or groups dealt to fewer clients.

    Parameters
    ----------
    groups : array-like, shape (n,)
        The group id of every row (e.g. the FEMNIST writer or the Shakespeare play).
    n_clients : int, optional
        Without it, client k holds the rows of the k-th group in ``np.unique(groups)`` order.
        With it (``1 <= n_clients <= number of groups``), the groups, in that order or shuffled
        by ``rng`` when given, are dealt round-robin: group g goes to client ``g mod n_clients``,
        so each group stays wholly on one client and the first ``G mod n_clients`` clients get
        one group more (the Shakespeare split of Licudi et al. 2025, App. B.2: 35 plays on 30
        clients, 5 clients with 2 plays).
    rng : numpy.random.Generator or int, optional
        Shuffles the group order before dealing (only with ``n_clients``).

    Returns
    -------
    list of numpy.ndarray of int64
        Sorted index arrays that partition ``0..n-1``; none is empty.
    """
    name = "natural_partition"
    groups = _labels(groups, name)
    ids, inverse = np.unique(groups, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    per_group = np.split(order, np.cumsum(np.bincount(inverse, minlength=ids.size))[:-1])
    if n_clients is None:
        if rng is not None:
            raise ParameterError(f"{name}: rng only shuffles the groups dealt to n_clients")
        return [g.astype(np.int64) for g in per_group]
    n_clients = integer(
        n_clients, f"{name}: n_clients (<= number of groups)", minimum=1, maximum=ids.size
    )
    if rng is None:
        deal = np.arange(ids.size)
    else:
        deal = as_generator(rng, name=name).permutation(ids.size)
    buckets: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for position, g in enumerate(deal):
        buckets[position % n_clients].append(per_group[g])
    return [np.sort(np.concatenate(b)).astype(np.int64) for b in buckets]


def proportional_sizes(n: int, n_clients: int) -> np.ndarray:
    r"""Client sizes proportional to the client index: :math:`n_i \approx n\, i / \sum_j j`.

    The exact shares :math:`n i / (N(N+1)/2)`, i = 1..N, are rounded by largest remainder (floor
    everything, then one more row to the clients with the largest fractional parts, ties to the
    larger index), so the sizes sum to n and each is within one of its share.

    Returns
    -------
    numpy.ndarray of int64, shape (N,)
    """
    name = "proportional_sizes"
    n = integer(n, f"{name}: n", minimum=0)
    n_clients = integer(n_clients, f"{name}: n_clients", minimum=1)
    i = np.arange(1, n_clients + 1, dtype=np.int64)
    total = n_clients * (n_clients + 1) // 2
    sizes, rem = np.divmod(n * i, total)  # exact integer shares: floor and remainder
    short = n - int(sizes.sum())
    if short:
        extra = np.lexsort((-i, -rem))[:short]  # largest remainder first, then larger index
        sizes[extra] += 1
    return sizes


def proportional_sizes_partition(
    n: int, n_clients: int, rng: np.random.Generator | int
) -> list[np.ndarray]:
    """Random rows with client sizes proportional to the client index i = 1..N.

    The sizes are :func:`proportional_sizes`; the rows are a uniform random permutation of
    ``0..n-1`` cut into consecutive pieces of those sizes (client 0, with index i = 1, is the
    smallest). This is the technical report's exploratory heterogeneity ("dataset size
    proportional to client index", Licudi 2025 (TR), Sec. 3), which with the async simulator's
    batch-count delays also makes the larger clients the slower ones.

    Returns
    -------
    list of numpy.ndarray of int64
        N sorted index arrays that partition ``0..n-1`` (the first ones may be empty if n is
        small).
    """
    sizes = proportional_sizes(n, n_clients)
    perm = as_generator(rng, name="proportional_sizes_partition").permutation(n)
    return [np.sort(p).astype(np.int64) for p in np.split(perm, np.cumsum(sizes)[:-1])]

"""Dirichlet, natural and proportional-size partitions: every index once, sizes, determinism."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from riemfl.errors import DataError, ParameterError
from riemfl.problems.partition import (
    dirichlet_partition,
    natural_partition,
    proportional_sizes,
    proportional_sizes_partition,
)


def _assert_partition(parts, n):
    allidx = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    assert allidx.dtype == np.int64
    assert np.array_equal(np.sort(allidx), np.arange(n))  # every index exactly once
    for p in parts:
        assert np.all(np.diff(p) > 0)


@given(
    labels=st.lists(st.integers(0, 5), min_size=1, max_size=200),
    n_clients=st.integers(1, 12),
    alpha=st.floats(0.05, 50.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_dirichlet_properties(labels, n_clients, alpha, seed):
    labels = np.array(labels)
    parts = dirichlet_partition(labels, n_clients, alpha, np.random.default_rng(seed))
    assert len(parts) == n_clients
    _assert_partition(parts, labels.size)
    again = dirichlet_partition(labels, n_clients, alpha, np.random.default_rng(seed))
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    # every class is split over the clients entirely
    for c in np.unique(labels):
        assert sum(int(np.sum(labels[p] == c)) for p in parts) == int(np.sum(labels == c))


@given(n=st.integers(1, 300), n_clients=st.integers(1, 10), seed=st.integers(0, 1000))
def test_dirichlet_counts_follow_the_proportions(n, n_clients, seed):
    # one class: the proportions are the generator's first draw; client i gets
    # floor(C_i n) - floor(C_{i-1} n) rows (C the cumulative sums), within 1 of p_i n
    p = np.random.default_rng(seed).dirichlet(np.full(n_clients, 0.5))
    parts = dirichlet_partition(np.zeros(n, dtype=int), n_clients, 0.5, seed)
    sizes = np.array([q.size for q in parts])
    assert np.all(np.abs(sizes - p * n) < 1 + 1e-9)


def test_dirichlet_alpha_controls_skew():
    labels = np.repeat(np.arange(10), 500)
    rng = np.random.default_rng(0)

    def classes_per_client(alpha):
        parts = dirichlet_partition(labels, 20, alpha, rng)
        shares = [np.bincount(labels[p], minlength=10) / max(p.size, 1) for p in parts]
        return np.mean([np.sum(s > 0.05) for s in shares])

    assert classes_per_client(0.05) < 4 < 9 < classes_per_client(100.0)


def test_dirichlet_min_size_and_empty_clients():
    labels = np.repeat(np.arange(3), 10)
    sizes = []
    for seed in range(30):
        parts = dirichlet_partition(labels, 10, 0.1, seed)
        sizes.append(min(p.size for p in parts))
    assert min(sizes) == 0  # without balancing, small alpha leaves clients empty
    for seed in range(5):
        parts = dirichlet_partition(labels, 10, 0.5, seed, min_size=1)
        _assert_partition(parts, 30)
        assert min(p.size for p in parts) >= 1
    with pytest.raises(ParameterError, match="min_size"):
        dirichlet_partition(labels, 10, 0.01, 0, min_size=3, max_tries=2)


def test_dirichlet_bad_arguments():
    with pytest.raises(DataError):
        dirichlet_partition([], 2, 0.5, 0)
    with pytest.raises(ParameterError):
        dirichlet_partition([0, 1], 0, 0.5, 0)
    with pytest.raises(ParameterError):
        dirichlet_partition([0, 1], 2, 0.0, 0)
    with pytest.raises(ParameterError):
        dirichlet_partition([0, 1], 2, 0.5, "seed")


@given(groups=st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=60), data=st.data())
def test_natural_partition(groups, data):
    groups = np.array(groups)
    parts = natural_partition(groups)
    ids = np.unique(groups)
    assert len(parts) == ids.size
    _assert_partition(parts, groups.size)
    for g, p in zip(ids, parts, strict=True):
        assert np.all(groups[p] == g) and p.size == np.sum(groups == g)
    n = data.draw(st.integers(1, ids.size))
    seed = data.draw(st.integers(0, 1000))
    dealt = natural_partition(groups, n, np.random.default_rng(seed))
    assert len(dealt) == n
    _assert_partition(dealt, groups.size)
    for p in dealt:  # each group wholly on one client
        for g in np.unique(groups[p]):
            assert p.size and np.sum(groups[p] == g) == np.sum(groups == g)
    n_groups = sorted(np.unique(groups[p]).size for p in dealt)
    assert n_groups[-1] - n_groups[0] <= 1
    again = natural_partition(groups, n, np.random.default_rng(seed))
    assert all(np.array_equal(a, b) for a, b in zip(dealt, again, strict=True))


def test_natural_partition_35_plays_on_30_clients():
    plays = np.repeat(np.arange(35), 3)
    parts = natural_partition(plays, 30)
    counts = [np.unique(plays[p]).size for p in parts]
    assert counts.count(2) == 5 and counts.count(1) == 25
    with pytest.raises(ParameterError):
        natural_partition(plays, 36)
    with pytest.raises(ParameterError):
        natural_partition(plays, rng=0)


@given(n=st.integers(0, 2000), n_clients=st.integers(1, 40), seed=st.integers(0, 100))
def test_proportional_sizes(n, n_clients, seed):
    sizes = proportional_sizes(n, n_clients)
    assert sizes.sum() == n and np.all(sizes >= 0)
    share = n * np.arange(1, n_clients + 1) / (n_clients * (n_clients + 1) / 2)
    assert np.all(np.abs(sizes - share) < 1)
    assert np.all(np.diff(sizes) >= 0)
    parts = proportional_sizes_partition(n, n_clients, np.random.default_rng(seed))
    assert [p.size for p in parts] == sizes.tolist()
    _assert_partition(parts, n)
    again = proportional_sizes_partition(n, n_clients, np.random.default_rng(seed))
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


def test_proportional_sizes_exact():
    assert proportional_sizes(55, 10).tolist() == list(range(1, 11))
    assert proportional_sizes(100, 4).tolist() == [10, 20, 30, 40]

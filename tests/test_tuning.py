"""The block-size tunables of ``riemfl.tuning`` change speed only: results are bit-identical."""

from __future__ import annotations

import numpy as np
import pytest

from riemfl import Stiefel, tuning
from riemfl.federated.async_manifold.rule import _combine, _difference_gram


@pytest.mark.parametrize("block", [1, 4096, 2**40])
def test_stiefel_blocks_do_not_change_the_projection(monkeypatch, block):
    M = Stiefel(30, 4)
    rng = np.random.default_rng(0)
    x = M.random_point(600, rng=rng)  # 600 x 30 x 4 float64: 576 KiB, above the default block
    a = rng.standard_normal(x.shape)
    expected = M.to_tangent(x, a.copy())
    monkeypatch.setattr(tuning, "STIEFEL_BLOCK_BYTES", block)
    np.testing.assert_array_equal(M.to_tangent(x, a.copy()), expected)
    np.testing.assert_array_equal(M.egrad_to_rgrad(x, a.copy()), M.to_tangent(x, a.copy()))


@pytest.mark.parametrize("width", [1, 7, 2**30])
def test_gram_blocks_do_not_change_the_result(monkeypatch, width):
    rng = np.random.default_rng(1)
    P, start, current = (
        rng.standard_normal((3, 1000)),
        rng.standard_normal(1000),
        rng.standard_normal(1000),
    )
    d = np.vstack([P - start, current - start])
    monkeypatch.setattr(tuning, "GRAM_BLOCK_ENTRIES", width)
    np.testing.assert_allclose(_difference_gram(P, start, current), d @ d.T, rtol=1e-12)
    w = np.array([0.2, 0.3, 0.5])
    np.testing.assert_allclose(
        _combine(w, P, 0.7, start, -0.1, current), w @ P + 0.7 * start - 0.1 * current, rtol=1e-12
    )

"""SurfaceClientTrainer: the edge-only band is BezierClientTrainer, what is trained and what is
frozen, determinism, the protocol, the errors, and AsyncBezierTriangle end to end."""

from __future__ import annotations

import math

import numpy as np
import pytest

import riemfl
from riemfl.errors import ParameterError
from riemfl.federated import RunOptions, run_async
from riemfl.federated.async_manifold.triangle import AsyncBezierTriangle
from riemfl.testing import importorskip

importorskip("torch")
importorskip("sklearn")

from riemfl.nn import MLP, BezierClientTrainer, TorchClientTrainer, digits_clients  # noqa: E402
from riemfl.nn.surface_trainer import SurfaceClientTrainer  # noqa: E402


@pytest.fixture(scope="module")
def base():
    data = digits_clients(n_clients=4, alpha=0.5, seed=0)
    return TorchClientTrainer(lambda: MLP([64, 16, 10]), data, epochs=1, lr=1e-2)


def test_the_edge_band_is_the_curve_client(base):
    x = base.initial_parameters(0)
    curve = BezierClientTrainer(base, warmup_epochs=1, curve_epochs=2, curve_lr=1e-2)
    edge = SurfaceClientTrainer(base, warmup_epochs=1, surface_epochs=2, surface_lr=1e-2, band=0.0)
    phi_c = curve.train(1, x, np.random.default_rng(3))
    phi_s = edge.train(1, x, np.random.default_rng(3))
    assert phi_s.shape == (6, x.size) and phi_s.dtype == np.float64
    np.testing.assert_allclose(phi_s[:3], phi_c, rtol=0, atol=1e-7)
    np.testing.assert_array_equal(phi_s[3:], np.repeat(x[None], 3, axis=0))  # no gradient


def test_what_is_trained_and_what_is_frozen(base):
    x = base.initial_parameters(0)
    warm = SurfaceClientTrainer(base, warmup_epochs=1, surface_epochs=0)
    phi0 = warm.train(2, x, np.random.default_rng(5))
    np.testing.assert_allclose(phi0[2], base.train(2, x, np.random.default_rng(5)))
    np.testing.assert_array_equal(np.delete(phi0, 2, axis=0), np.repeat(x[None], 5, axis=0))
    surface = SurfaceClientTrainer(base, warmup_epochs=1, surface_epochs=1, band=0.5)
    phi = surface.train(2, x, np.random.default_rng(5))
    np.testing.assert_array_equal(phi, surface.train(2, x, np.random.default_rng(5)))
    np.testing.assert_array_equal(phi[0], x)  # the global vertex
    np.testing.assert_allclose(phi[2], phi0[2])  # the local vertex, frozen
    for k in (1, 3, 4, 5):
        assert np.abs(phi[k] - x).max() > 0, k
    free = SurfaceClientTrainer(base, warmup_epochs=1, surface_epochs=1, freeze_end=False)
    assert np.abs(free.train(2, x, np.random.default_rng(5))[2] - phi0[2]).max() > 0
    assert surface.num_batches(2) == base.num_batches(2, 2)
    assert surface.describe()["band"] == 0.5
    assert surface.n_samples(2) == base.n_samples(2)


@pytest.mark.parametrize(
    "kwargs", [{"band": 1.5}, {"band": -0.1}, {"surface_lr": 0.0}, {"surface_epochs": -1}]
)
def test_errors(base, kwargs):
    with pytest.raises(ParameterError):
        SurfaceClientTrainer(base, **kwargs)
    with pytest.raises(ParameterError, match="TorchClientTrainer"):
        SurfaceClientTrainer(object())  # type: ignore[arg-type]


@pytest.mark.parametrize("path", ["segment", "geodesic"])
def test_asyncbeziertriangle_end_to_end(base, path):
    x = base.initial_parameters(0)
    client = SurfaceClientTrainer(base, surface_epochs=1)
    rule = AsyncBezierTriangle(riemfl.Euclidean(x.size), 1.5, path=path)
    h = run_async(client, rule, 6, workers=2, x0=x, options=RunOptions(seed=0, record_every=3))
    assert h.metrics["step"][-1] == 6 and math.isfinite(h.metrics["accuracy"][-1])
    assert h.metrics["accuracy"][-1] > h.metrics["accuracy"][0]
    assert 0.0 < rule.last["fraction"] and 0.0 < rule.last["r"]

"""Stiefel binds its metric and retraction once: every variant has its maps, and the maps and
the reasons of ``supports`` are those of the chosen variant."""

import numpy as np
import pytest

from riemfl.linalg import polar
from riemfl.manifolds.stiefel import (
    _METRIC_MAPS,
    _RETRACTION_MAPS,
    METRICS,
    RETRACTIONS,
    Stiefel,
    inverse_polar_retraction,
    inverse_qr_retraction,
    qr_retraction,
)
from riemfl.manifolds.stiefel_canonical import cayley_retraction, inverse_cayley_retraction


def test_every_variant_has_its_maps():
    assert set(_METRIC_MAPS) == set(METRICS)
    assert set(_RETRACTION_MAPS) == set(RETRACTIONS)


@pytest.mark.parametrize("metric", list(METRICS))
@pytest.mark.parametrize("retraction", list(RETRACTIONS))
def test_the_bound_variant_is_the_chosen_one(metric, retraction):
    m = Stiefel(5, 2, retraction, metric=metric)
    assert (m.metric, m.retraction) == (metric, retraction)
    x = m.random_point(rng=0)
    u = 0.3 * m.random_tangent(x, rng=1)
    forward, inverse = {
        "polar": (lambda x, u: polar(x + u), inverse_polar_retraction),
        "qr": (qr_retraction, inverse_qr_retraction),
        "cayley": (cayley_retraction, inverse_cayley_retraction),
    }[retraction]
    y = m.retract(x, u)
    assert np.array_equal(y, forward(x, u))
    assert np.array_equal(m.inverse_retract(x, y), inverse(x, y))
    ok, reason = m.supports("retraction_transport")
    assert ok == (retraction == "cayley")
    if not ok:
        assert reason == (
            f"Stiefel's {retraction} retraction has no differentiated-retraction transport in "
            "riemfl; the Cayley retraction has one (retraction='cayley')"
        )
        with pytest.raises(NotImplementedError, match="differentiated-retraction"):
            m.retraction_transport(x, u, u)
    ok, reason = m.supports("parallel_transport")
    assert not ok and reason.startswith(f"Stiefel with the {metric} metric has no closed-form")
    assert list(m.unsupported)[0] == "parallel_transport"

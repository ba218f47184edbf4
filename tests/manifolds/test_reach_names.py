"""The reach names: ``reach`` / ``proximal_smoothness`` and ``local_reach`` /
``local_proximal_smoothness`` agree whichever one a class defines."""

from __future__ import annotations

import numpy as np
import pytest

from riemfl.federated.async_rules import proximal_radius
from riemfl.manifolds import Euclidean, Manifold, Positive, Product, Sphere


class _OldStyle(Sphere):
    """A user subclass written before the rename: it overrides the old names only."""

    @property
    def proximal_smoothness(self) -> float:
        return 0.25

    def local_proximal_smoothness(self, x):
        return np.sum(x * 0, axis=-1) + 0.125


class _OldStyleAttribute(Manifold):
    """The old name as a class attribute, on a direct subclass of Manifold."""

    name = "OldStyleAttribute"
    point_shape = (2,)
    proximal_smoothness = 3.0
    unsupported = {"injectivity_radius": "no exp"}

    @property
    def dim(self) -> int:
        return 2

    def _to_tangent(self, x, a):
        return a

    def _retract(self, x, u):
        return x + u

    def _random_point(self, batch, rng):
        return rng.standard_normal(tuple(batch) + (2,))

    def _point_violation(self, x):
        return "none", 0.0


class _NewStyle(_OldStyle):
    """A subclass of an old-style class that overrides the new names."""

    reach = 0.5

    def local_reach(self, x):
        return np.sum(x * 0, axis=-1) + 0.0625


class _OldReason(Sphere):
    """A refusal declared under the old key of ``unsupported``."""

    unsupported = {"proximal_smoothness": "no uniform constant here"}

    @property
    def proximal_smoothness(self) -> float:
        return self._not_implemented("proximal_smoothness")


def test_a_subclass_overriding_the_old_names_is_read_through_the_new_ones():
    m = _OldStyle(3)
    x = m.random_point(4, rng=np.random.default_rng(0))
    assert m.reach == m.proximal_smoothness == 0.25
    np.testing.assert_array_equal(m.local_reach(x), np.full(4, 0.125))
    np.testing.assert_array_equal(m.local_proximal_smoothness(x), np.full(4, 0.125))
    assert proximal_radius(m, x[0]) == 0.125


def test_the_old_name_as_a_class_attribute_and_the_default_local_reach():
    m = _OldStyleAttribute()
    assert m.reach == m.proximal_smoothness == 3.0
    x = np.zeros((2, 5, 2))
    np.testing.assert_array_equal(m.local_reach(x), np.full((2, 5), 3.0))
    np.testing.assert_array_equal(m.local_proximal_smoothness(x), np.full((2, 5), 3.0))


def test_a_subclass_overriding_the_new_names_wins_over_an_old_style_parent():
    m = _NewStyle(3)
    x = m.random_point(2, rng=np.random.default_rng(1))
    assert m.reach == m.proximal_smoothness == 0.5
    np.testing.assert_array_equal(m.local_proximal_smoothness(x), np.full(2, 0.0625))


def test_the_families_define_the_new_names_and_both_names_agree():
    sphere, positive = Sphere(4), Positive(3)
    assert "reach" in vars(Sphere) and sphere.reach == sphere.proximal_smoothness == 1.0
    assert Euclidean(2).proximal_smoothness == float("inf")
    x = positive.random_point(3, rng=np.random.default_rng(2))
    np.testing.assert_array_equal(positive.local_proximal_smoothness(x), np.min(x, axis=-1))
    with pytest.raises(NotImplementedError, match="local_reach") as new:
        positive.reach  # noqa: B018
    with pytest.raises(NotImplementedError) as old:
        positive.proximal_smoothness  # noqa: B018
    assert str(old.value) == str(new.value)
    assert positive.supports("proximal_smoothness") == positive.supports("reach")
    product = Product(Sphere(3), Positive(2))
    p = product.random_point(rng=np.random.default_rng(3))
    assert float(product.local_reach(p)) == min(1.0, float(np.min(p[3:])))


def test_a_reason_under_the_old_key_serves_both_names():
    m = _OldReason(3)
    for name in ("reach", "proximal_smoothness"):
        with pytest.raises(NotImplementedError, match="no uniform constant here"):
            getattr(m, name)
        assert m.supports(name) == (False, "no uniform constant here")
    with pytest.raises(NotImplementedError, match="no uniform constant here"):
        m.local_reach(m.random_point(rng=np.random.default_rng(0)))

"""The reach of a manifold: ``reach`` and ``local_reach(x)`` are the only names, and they agree
wherever a family defines both."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import numpy as np
import pytest

import riemfl.manifolds
from riemfl.federated.async_rules import proximal_radius
from riemfl.manifolds import Euclidean, Manifold, Positive, Product, Sphere
from riemfl.manifolds.catalogue import examples


class _OwnReach(Sphere):
    """A user subclass that overrides the reach with a property and the local radius."""

    @property
    def reach(self) -> float:
        return 0.25

    def local_reach(self, x):
        return np.sum(x * 0, axis=-1) + 0.125


class _ReachAttribute(Manifold):
    """The reach as a class attribute, on a direct subclass of Manifold."""

    name = "ReachAttribute"
    point_shape = (2,)
    reach = 3.0
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


class _Refined(_OwnReach):
    """A subclass of a user subclass that overrides both again."""

    reach = 0.5

    def local_reach(self, x):
        return np.sum(x * 0, axis=-1) + 0.0625


class _Refused(Sphere):
    """A refusal of the uniform reach declared in ``unsupported``."""

    unsupported = {"reach": "no uniform constant here"}

    @property
    def reach(self) -> float:
        return self._not_implemented("reach")


def _classes_of_riemfl_manifolds() -> list[type]:
    """Every class defined in a module of :mod:`riemfl.manifolds`."""
    found = {}
    prefix = riemfl.manifolds.__name__ + "."
    for info in pkgutil.iter_modules(riemfl.manifolds.__path__, prefix):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__.startswith(riemfl.manifolds.__name__):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return list(found.values())


def test_a_subclass_overriding_reach_and_local_reach_is_read_through_them():
    m = _OwnReach(3)
    x = m.random_point(4, rng=np.random.default_rng(0))
    assert m.reach == 0.25
    np.testing.assert_array_equal(m.local_reach(x), np.full(4, 0.125))
    assert proximal_radius(m, x[0]) == 0.125


def test_reach_as_a_class_attribute_and_the_default_local_reach():
    m = _ReachAttribute()
    assert m.reach == 3.0
    x = np.zeros((2, 5, 2))
    np.testing.assert_array_equal(m.local_reach(x), np.full((2, 5), 3.0))


def test_a_subclass_overriding_both_wins_over_its_parent():
    m = _Refined(3)
    x = m.random_point(2, rng=np.random.default_rng(1))
    assert m.reach == 0.5
    np.testing.assert_array_equal(m.local_reach(x), np.full(2, 0.0625))


def test_the_families_define_reach_and_local_reach():
    sphere, positive = Sphere(4), Positive(3)
    assert "reach" in vars(Sphere) and sphere.reach == 1.0
    assert Euclidean(2).reach == float("inf")
    x = positive.random_point(3, rng=np.random.default_rng(2))
    np.testing.assert_array_equal(positive.local_reach(x), np.min(x, axis=-1))
    with pytest.raises(NotImplementedError, match="local_reach"):
        positive.reach  # noqa: B018
    assert positive.supports("reach")[0] is False
    product = Product(Sphere(3), Positive(2))
    p = product.random_point(rng=np.random.default_rng(3))
    assert float(product.local_reach(p)) == min(1.0, float(np.min(p[3:])))


def test_a_reason_under_the_reach_key_serves_reach_and_the_default_local_reach():
    m = _Refused(3)
    with pytest.raises(NotImplementedError, match="no uniform constant here"):
        m.reach  # noqa: B018
    assert m.supports("reach") == (False, "no uniform constant here")
    with pytest.raises(NotImplementedError, match="no uniform constant here"):
        m.local_reach(m.random_point(rng=np.random.default_rng(0)))


@pytest.mark.parametrize("manifold", examples(), ids=lambda m: m.name)
def test_every_family_has_reach_and_local_reach_and_they_agree(manifold):
    """Each example of the catalogue has a uniform ``reach`` or a positive ``local_reach(x)``
    (the Birkhoff polytope, whose projection is not the metric one, refuses both); where it
    has both, the local value is the uniform one at every point."""
    x = manifold.random_point(3, rng=np.random.default_rng(4))
    try:
        reach = manifold.reach
    except NotImplementedError:
        reach = None
    try:
        local = np.asarray(manifold.local_reach(x))
    except NotImplementedError:
        assert reach is None
        return
    assert local.shape == (3,) and np.all(local > 0)
    if reach is not None:
        np.testing.assert_array_equal(local, np.full(3, reach))


def test_no_class_of_riemfl_manifolds_has_the_proximal_smoothness_names():
    """``reach`` and ``local_reach`` are the only names: no alias is defined or installed."""
    classes = _classes_of_riemfl_manifolds()
    assert Manifold in classes and Sphere in classes
    for cls in classes:
        for name in ("proximal_smoothness", "local_proximal_smoothness"):
            assert not hasattr(cls, name), f"{cls.__qualname__} has {name}"

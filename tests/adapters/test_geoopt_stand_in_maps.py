"""to_geoopt's stand-ins where geoopt's optimisers and containers use them: steps that are not
tangent, ``inner`` without a point, ``geoopt.Scaled``, module buffers, geoopt's product
manifolds, and the transport that goes with the retraction."""

from __future__ import annotations

import numpy as np
import pytest

from riemfl.testing import importorskip

geoopt = importorskip("geoopt")
torch = importorskip("torch")

from riemfl.adapters.geoopt import to_geoopt  # noqa: E402

from riemfl import (  # noqa: E402
    SPD,
    BirkhoffPolytope,
    Euclidean,
    Lorentz,
    PoincareBall,
    Sphere,
    Stiefel,
)
from riemfl.errors import ParameterError  # noqa: E402

F64 = torch.float64

#: one riemfl manifold per stand-in class
STAND_INS = {
    "Euclidean": Euclidean(3),
    "Sphere": Sphere(4),
    "EuclideanStiefel": Stiefel(6, 3),
    "CanonicalStiefel": Stiefel(6, 3, metric="canonical"),
    "Lorentz": Lorentz(3, beta=2.0),
    "PoincareBall": PoincareBall(3, c=0.7),
    "SymmetricPositiveDefinite": SPD(3),
    "BirkhoffPolytope": BirkhoffPolytope(3),
}


def draws(manifold, seed=0):
    """Points x (a batch of 3) and two ambient arrays a, b of Frobenius norm 0.5 a point, not
    tangent (for SPD not symmetric, for the hyperboloid with a normal part)."""
    rng = np.random.default_rng(seed)
    x = manifold.random_point(3, rng=rng)
    a, b = (rng.standard_normal(x.shape) for _ in range(2))
    axes = tuple(range(1, x.ndim))
    a, b = (0.5 * v / np.sqrt(np.sum(v * v, axis=axes, keepdims=True)) for v in (a, b))
    return (torch.tensor(v, dtype=F64) for v in (x, a, b))


@pytest.mark.parametrize("kind", list(STAND_INS))
def test_stand_in_maps_land_on_the_manifold_for_non_tangent_vectors(kind):
    """geoopt's optimisers hand retr, retr_transp, expmap and transp vectors that are not
    tangent (RiemannianSGD's first momentum buffer is the Euclidean gradient); the stand-ins
    project them onto T_x first: every point lands on M to riemfl's tolerance and every
    transported vector is tangent at its new point."""
    manifold = STAND_INS[kind]
    m = to_geoopt(manifold)
    x, a, b = draws(manifold)
    for step in (m.retr, m.expmap):
        y = step(x, a)
        manifold.check_point(y)
        projected = manifold.to_tangent(x, a)
        # Birkhoff's expmap is its retraction, as geoopt's (no closed-form Fisher geodesics)
        exact = step == m.expmap and kind != "BirkhoffPolytope"
        same = manifold.exp if exact else manifold.retract
        np.testing.assert_allclose(y, same(x, projected), atol=1e-12)
    for both in (m.retr_transp, m.expmap_transp):
        y, moved = both(x, a, b)
        manifold.check_point(y)
        manifold.check_tangent(y, moved)
    y = m.retr(x, a)
    manifold.check_tangent(y, m.transp(x, y, b))
    manifold.check_tangent(y, m.transp_follow_retr(x, a, b))
    manifold.check_tangent(m.expmap(x, a), m.transp_follow_expmap(x, a, b))


def test_lorentz_maps_at_the_origin_project_too():
    """geoopt's expmap0 lands on the hyperboloid for any u (it re-lifts the result)."""
    manifold = Lorentz(3, beta=2.0)
    m = to_geoopt(manifold)
    _, a, b = draws(manifold)
    y = m.expmap0(a)
    manifold.check_point(y)
    manifold.check_tangent(y, m.transp0(y, b))
    manifold.check_tangent(m.origin(3, 4, dtype=F64), m.transp0back(y, b))


def test_canonical_stiefel_carries_vectors_by_the_differential_of_its_retraction():
    """retr_transp and transp_follow_retr give D R_x(u)[v] (riemfl's retraction_transport);
    the embedded Stiefel (polar retraction, no such map) transports by projection."""
    canonical = Stiefel(6, 3, metric="canonical")
    m = to_geoopt(canonical)
    x, a, b = draws(canonical)
    u, v = canonical.to_tangent(x, a), canonical.to_tangent(x, b)
    expected = canonical.retraction_transport(x, u, v)
    y, moved = m.retr_transp(x, a, b)
    np.testing.assert_allclose(y, canonical.retract(x, u), atol=1e-13)
    np.testing.assert_allclose(moved, expected, atol=1e-13)
    np.testing.assert_allclose(m.transp_follow_retr(x, a, b), expected, atol=1e-13)
    embedded = Stiefel(6, 3)
    y, moved = to_geoopt(embedded).retr_transp(x, a, b)
    np.testing.assert_allclose(moved, embedded.to_tangent(y, v), atol=1e-13)


def test_inner_without_a_point_where_the_metric_does_not_depend_on_it():
    """geoopt's Lorentz, Euclidean, Sphere and EuclideanStiefel ignore x in inner (and norm);
    stand-ins whose metric reads x refuse x=None with a ParameterError naming the point."""
    for kind in ("Euclidean", "Sphere", "EuclideanStiefel", "Lorentz"):
        manifold = STAND_INS[kind]
        m = to_geoopt(manifold)
        x, a, b = draws(manifold)
        u, v = manifold.to_tangent(x, a), manifold.to_tangent(x, b)
        np.testing.assert_allclose(m.inner(None, u, v), m.inner(x, u, v), atol=1e-15)
        np.testing.assert_allclose(m.inner(None, u), m.inner(x, u, u), atol=1e-15)
        if kind != "Lorentz":  # geoopt's Lorentz.norm takes no x at all
            np.testing.assert_allclose(m.norm(None, u), m.norm(x, u), atol=1e-15)
    for kind in ("CanonicalStiefel", "PoincareBall", "SymmetricPositiveDefinite"):
        manifold = STAND_INS[kind]
        _, a, b = draws(manifold)
        with pytest.raises(ParameterError, match="depends on the point; expected the point x"):
            to_geoopt(manifold).inner(None, a, b)


@pytest.mark.parametrize("kind", list(STAND_INS))
def test_scaling_table_is_geoopts_for_its_class(kind):
    """geoopt.Scaled rescales the methods a class lists in __scaling__: each stand-in lists
    those of its geoopt class (a method whose scaled parameter the stand-in lacks, the
    Lorentz sampler random, is marked incompatible and Scaled raises for it)."""
    theirs = getattr(geoopt, kind).__scaling__
    ours = type(to_geoopt(STAND_INS[kind])).__scaling__
    assert set(ours) == set(theirs)
    incompatible = {k for k in ours if ours[k] is not theirs[k]}
    assert incompatible == ({"random"} if kind == "Lorentz" else set())


@pytest.mark.parametrize(
    "riem,theirs",
    [
        (PoincareBall(3, c=0.7), lambda: geoopt.PoincareBall(c=torch.tensor(0.7, dtype=F64))),
        (Lorentz(3, beta=2.0), lambda: geoopt.Lorentz(k=torch.tensor(2.0, dtype=F64))),
    ],
    ids=["PoincareBall", "Lorentz"],
)
def test_scaled_stand_ins_agree_with_geoopts_scaled_classes(riem, theirs):
    """geoopt.Scaled(m, 2) multiplies distances by 2 and divides tangent arguments by 2 (dist0
    0.7865 became 1.5730 for geoopt's ball; the stand-in's stayed 0.7865)."""
    ours, reference = geoopt.Scaled(to_geoopt(riem), 2.0), geoopt.Scaled(theirs(), 2.0)
    x, y = (torch.tensor(riem.random_point(3, rng=seed), dtype=F64) for seed in (0, 2))
    o = torch.zeros_like(x)
    if isinstance(riem, Lorentz):
        o[:, 0] = riem.beta**0.5
    u0 = 0.3 * riem.to_tangent(o, torch.tensor(np.random.default_rng(1).standard_normal(x.shape)))
    for name, args in (
        ("dist0", (x,)),
        ("logmap0", (x,)),
        ("expmap0", (u0,)),
        ("dist", (x, y)),
        ("logmap", (x, y)),
    ):
        mine, other = getattr(ours, name)(*args), getattr(reference, name)(*args)
        np.testing.assert_allclose(mine, other, rtol=1e-9, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(ours.dist0(x), 2.0 * to_geoopt(riem).dist0(x), rtol=1e-14, atol=0.0)


@pytest.mark.parametrize("riem", [PoincareBall(3, c=0.7), Lorentz(3, beta=2.0)])
def test_curvature_is_a_module_buffer(riem):
    """``k`` is a buffer: Manifold.dtype and device see it, ``.float()`` converts it, and
    geoopt's ProductManifold can check that its factors share a dtype."""
    m = to_geoopt(riem)
    assert "k" in dict(m.named_buffers())
    assert m.dtype == F64 and m.device == torch.device("cpu")
    single = geoopt.PoincareBall(c=torch.tensor(1.0, dtype=torch.float32))
    with pytest.raises(ValueError, match="same dtype"):
        geoopt.ProductManifold((m, riem.point_shape[0]), (single, 2))
    m.float()
    assert m.dtype == torch.float32 and m.k.dtype == torch.float32
    product = geoopt.ProductManifold((m, riem.point_shape[0]), (single, 2))
    assert product.dtype == torch.float32
    x = torch.tensor(riem.random_point(rng=0), dtype=F64)
    assert m.dist(x, x).dtype == F64  # the maps compute in their arguments' dtype


def test_ball_stand_ins_make_a_stereographic_product():
    """StereographicProductManifold takes only Stereographic factors: the ball stand-in is a
    virtual subclass of geoopt.Stereographic (not of PoincareBall), and the product's maps
    agree with the product of geoopt's exact balls."""
    factors = (PoincareBall(3, c=0.7), PoincareBall(2, c=1.3))
    ours = geoopt.StereographicProductManifold(*((to_geoopt(f), f.point_shape[0]) for f in factors))
    theirs = geoopt.StereographicProductManifold(
        *(
            (geoopt.PoincareBallExact(c=torch.tensor(f.c, dtype=F64)), f.point_shape[0])
            for f in factors
        )
    )
    ball = to_geoopt(factors[0])
    assert isinstance(ball, geoopt.Stereographic) and not isinstance(ball, geoopt.PoincareBall)
    rng = np.random.default_rng(0)
    x, y = (
        torch.tensor(np.concatenate([f.random_point(4, rng=rng) for f in factors], axis=-1))
        for _ in range(2)
    )
    u = 0.4 * torch.tensor(rng.standard_normal((4, 5)))
    for name, args in (
        ("dist", (x, y)),
        ("expmap", (x, u)),
        ("retr", (x, u)),
        ("logmap", (x, y)),
        ("mobius_add", (x, y)),
        ("dist0", (x,)),
        ("transp", (x, y, u)),
        ("inner", (x, u, u)),
    ):
        mine, other = getattr(ours, name)(*args), getattr(theirs, name)(*args)
        np.testing.assert_allclose(mine, other, rtol=1e-9, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("metric", ["embedded", "canonical"])
def test_stiefel_random_naive_draws_geoopts_points(metric):
    # geoopt's tests seed torch and count on random_naive's points (the Q factor of a Gaussian,
    # unsigned); riemfl's Haar sampler would put some in the other component of O(n)
    ours = to_geoopt(Stiefel(6, 3, metric=metric))
    theirs = geoopt.EuclideanStiefel() if metric == "embedded" else geoopt.CanonicalStiefel()
    torch.manual_seed(7)
    x = ours.random_naive(16, 6, 3, dtype=F64)
    torch.manual_seed(7)
    torch.testing.assert_close(x, theirs.random_naive(16, 6, 3, dtype=F64), rtol=0, atol=0)
    assert isinstance(x, geoopt.ManifoldTensor) and x.manifold is ours
    ours.assert_check_point_on_manifold(x)
    with pytest.raises(Exception, match="shape|size|dim"):
        ours.random_naive(6, dtype=F64)

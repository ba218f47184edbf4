"""to_pymanopt stands in for pymanopt's own classes: same public names and signatures, same
values where the geometry is the same, and every difference named and pinned.

One pair (pymanopt class, riemfl manifold) per row of PAIRS. Points and tangent vectors are
drawn once from riemfl and converted to pymanopt's representation where it differs (SO(n):
pymanopt's tangent vectors are Lie-algebra elements Omega = X^T U; Product: lists of component
arrays)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from riemfl.testing import importorskip

pymanopt = importorskip("pymanopt")

from pymanopt import manifolds as pm  # noqa: E402
from riemfl.adapters.pymanopt import to_pymanopt  # noqa: E402

from riemfl import manifolds as rm  # noqa: E402


def _same(x, a):
    return a


@dataclass
class Pair:
    """A pymanopt class and the riemfl manifold that stands in for it.

    ``differ``: maps both compute, with values that differ on purpose (the test asserts that
    they differ); ``theirs_missing`` / ``ours_missing``: maps only riemfl / only pymanopt
    computes; ``not_compared``: maps whose values are not compared at all; ``names``: public
    names of the pymanopt class whose value or signature differs on purpose (point layouts)."""

    theirs: Callable[[], Any]
    ours: Callable[[], rm.Manifold]
    point_to: Callable[[Any], Any] = lambda p: p
    point_from: Callable[[Any], Any] = lambda p: p
    tangent_to: Callable[[Any, Any], Any] = _same
    tangent_from: Callable[[Any, Any], Any] = _same
    differ: dict[str, str] = field(default_factory=dict)
    theirs_missing: dict[str, str] = field(default_factory=dict)
    ours_missing: dict[str, str] = field(default_factory=dict)
    not_compared: dict[str, str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)


_NO_PAIR_MEAN = "pymanopt's class has no pair_mean; riemfl's is the geodesic midpoint"
_NO_WEINGARTEN = "pymanopt's class leaves weingarten unimplemented; riemfl's is ehess_to_rhess"
_INVARIANT_HESSIAN = (
    "pymanopt's is P(H) - U X^T G, riemfl's P(H - U sym(X^T G)): equal for the gradient of a "
    "cost with f(XQ) = f(X), whose X^T G is symmetric, not for an arbitrary G"
)
_IDENTITY_TO_TANGENT = (
    "pymanopt's to_tangent_space is its base class's identity (the alias to projection was "
    "made before the subclass overrode projection); riemfl's projects"
)


def _so_to(x, u):
    return x.T @ u  # pymanopt's SO(n) tangent vectors: Omega with U = X Omega


def _so_from(x, omega):
    return x @ omega


def _product():
    return rm.Product(rm.Sphere(3), rm.Euclidean(2))


def _split(p):
    return _product().split(np.asarray(p))


def _pack(parts):
    return _product().pack(*parts)


PAIRS: dict[str, Pair] = {
    "Euclidean": Pair(
        lambda: pm.Euclidean(3, 2),
        lambda: rm.Euclidean(3, 2),
        theirs_missing={"weingarten": _NO_WEINGARTEN},
    ),
    "Sphere": Pair(lambda: pm.Sphere(4), lambda: rm.Sphere(4)),
    "Stiefel": Pair(
        lambda: pm.Stiefel(5, 2, retraction="polar"),
        lambda: rm.Stiefel(5, 2),
        theirs_missing={
            "log": "pymanopt's Stiefel has no log",
            "dist": "pymanopt's Stiefel has no dist",
            "pair_mean": _NO_PAIR_MEAN,
        },
    ),
    "Grassmann": Pair(
        lambda: pm.Grassmann(5, 2),
        lambda: rm.Grassmann(5, 2),
        differ={"euclidean_to_riemannian_hessian": _INVARIANT_HESSIAN},
        theirs_missing={"pair_mean": _NO_PAIR_MEAN},
    ),
    "SymmetricPositiveDefinite": Pair(
        lambda: pm.SymmetricPositiveDefinite(3),
        lambda: rm.SPD(3),
        theirs_missing={"pair_mean": _NO_PAIR_MEAN},
    ),
    "SpecialOrthogonalGroup": Pair(
        lambda: pm.SpecialOrthogonalGroup(3, retraction="polar"),
        lambda: rm.SpecialOrthogonal(3),
        tangent_to=_so_to,
        tangent_from=_so_from,
        differ={
            "transport": "pymanopt's keeps Omega (left translation: U = X Omega -> Y Omega), "
            "riemfl's projects U onto T_Y",
        },
        theirs_missing={"weingarten": _NO_WEINGARTEN},
    ),
    "Oblique": Pair(
        lambda: pm.Oblique(4, 3),
        lambda: rm.Oblique(4, 3),
        theirs_missing={"weingarten": _NO_WEINGARTEN},
    ),
    "Positive": Pair(
        lambda: pm.Positive(3, 2, use_parallel_transport=True),
        lambda: rm.Positive(3, 2),
        differ={
            "retraction": "pymanopt's is the second-order X + U + U^2 / (2X), riemfl's the "
            "exponential map X exp(U / X)",
        },
        theirs_missing={"pair_mean": _NO_PAIR_MEAN},
    ),
    "Symmetric": Pair(
        lambda: pm.Symmetric(3),
        lambda: rm.Symmetric(3),
        differ={"to_tangent_space": _IDENTITY_TO_TANGENT},
        theirs_missing={"weingarten": _NO_WEINGARTEN},
    ),
    "SkewSymmetric": Pair(
        lambda: pm.SkewSymmetric(3),
        lambda: rm.SkewSymmetric(3),
        differ={"to_tangent_space": _IDENTITY_TO_TANGENT},
        theirs_missing={"weingarten": _NO_WEINGARTEN},
    ),
    "Elliptope": Pair(
        lambda: pm.Elliptope(5, 2),
        lambda: rm.Elliptope(5, 2),
        differ={
            m: "pymanopt 2.2.1's Elliptope.projection is not the horizontal projection (its "
            "output U has Y^T U not symmetric, and projecting twice changes it; "
            "test_pymanopt_elliptope_projection_is_not_a_projection); " + m + " goes through it"
            for m in (
                "projection",
                "to_tangent_space",
                "euclidean_to_riemannian_gradient",
                "euclidean_to_riemannian_hessian",
                "transport",
            )
        },
        ours_missing={
            "exp": "pymanopt's Elliptope.exp is its retraction (RetrAsExpMixin), not the "
            "exponential map; riemfl has none",
        },
    ),
    "PSDFixedRank": Pair(
        lambda: pm.PSDFixedRank(5, 2),
        lambda: rm.PSDFixedRank(5, 2),
        differ={
            "euclidean_to_riemannian_gradient": "pymanopt returns the Euclidean gradient as is "
            "(horizontal only for a cost with f(YQ) = f(Y)); riemfl projects it horizontally",
        },
        theirs_missing={"pair_mean": _NO_PAIR_MEAN},
    ),
    "PoincareBall": Pair(
        lambda: pm.PoincareBall(3),
        lambda: rm.PoincareBall(3),
        theirs_missing={
            "transport": "pymanopt's PoincareBall has no transport",
        },
    ),
    "FixedRankEmbedded": Pair(
        lambda: pm.FixedRankEmbedded(5, 4, 2),
        lambda: rm.FixedRank(5, 4, 2),
        not_compared={
            "*": "pymanopt's points are (U, S, V^T) triples and its tangent vectors (Up, M, Vp) "
            "triples, riemfl's the ambient m x n matrices: the values are not compared"
        },
        names={
            "point_layout": "pymanopt's point is 3 arrays (U, S, V^T), riemfl's one matrix",
            "num_values": "pymanopt's point is 3 arrays (U, S, V^T), riemfl's one matrix",
        },
    ),
    "Product": Pair(
        lambda: pm.Product([pm.Sphere(3), pm.Euclidean(2)]),
        _product,
        point_to=_split,
        point_from=_pack,
        tangent_to=lambda x, u: _split(u),
        tangent_from=lambda x, v: _pack(v),
        theirs_missing={"weingarten": "pymanopt's Product has no weingarten"},
        names={
            "point_layout": "pymanopt's product point is a list of the factors' arrays, "
            "riemfl's one flat vector (Product.split / Product.pack convert)",
            "num_values": "pymanopt's product point is a list of the factors' arrays, "
            "riemfl's one flat vector",
        },
    ),
}

#: the maps compared, with their arguments (x, y points; u, v tangent at x; a, g, h ambient;
#: t ambient as a tangent-space representative; n normal at x) and the kind of their value
MAPS = {
    "inner_product": ("xuv", "scalar"),
    "norm": ("xu", "scalar"),
    "dist": ("xy", "scalar"),
    "projection": ("xa", "tangent"),
    "to_tangent_space": ("xt", "tangent"),
    "euclidean_to_riemannian_gradient": ("xg", "tangent"),
    "euclidean_to_riemannian_hessian": ("xghu", "tangent"),
    "retraction": ("xu", "point"),
    "exp": ("xu", "point"),
    "log": ("xy", "tangent"),
    "transport": ("xyu", "tangent_y"),
    "pair_mean": ("xy", "point"),
    "zero_vector": ("x", "tangent"),
    "embedding": ("xu", "ambient"),
    "weingarten": ("xun", "tangent"),
    "conformal_factor": ("x", "ambient"),
    "mobius_addition": ("xy", "ambient"),
}


def public_names(obj: Any) -> set[str]:
    return {n for n in dir(obj) if not n.startswith("_")}


def parameters(method: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(method).parameters.values()]


@pytest.fixture(scope="module", params=sorted(PAIRS))
def pair(request):
    spec = PAIRS[request.param]
    manifold = spec.ours()
    return request.param, spec, spec.theirs(), manifold, to_pymanopt(manifold, rng=0)


def test_the_adapter_has_pymanopts_public_api_with_its_signatures(pair):
    name, spec, theirs, manifold, ours = pair
    assert isinstance(ours, pm.manifold.Manifold)
    for attr in sorted(public_names(theirs)):
        assert hasattr(ours, attr), f"{name}: the adapter lacks {attr}"
        theirs_value = getattr(theirs, attr)
        if attr == "manifolds":  # Product's factors, as adapters
            assert [f.dim for f in ours.manifolds] == [f.dim for f in theirs_value]
        elif callable(theirs_value):
            assert parameters(getattr(ours, attr)) == parameters(theirs_value), (name, attr)
        elif attr in spec.names:
            assert getattr(ours, attr) != theirs_value, (name, attr, spec.names[attr])
        else:
            assert getattr(ours, attr) == pytest.approx(theirs_value), (name, attr)


def draw(manifold: rm.Manifold, rng: np.random.Generator) -> dict[str, Any]:
    """x, y = R_x(0.7 w / |w|_x), tangents u, v at x, ambient a, g, h and the normal part n."""
    x = manifold.random_point(rng=rng)
    w = manifold.random_tangent(x, rng=rng)
    y = manifold.retract(x, 0.7 * w / float(manifold.norm(x, w)))
    a, g, h = (rng.standard_normal(manifold.point_shape) for _ in range(3))
    return {
        "x": x,
        "y": y,
        "u": manifold.random_tangent(x, rng=rng),
        "v": manifold.random_tangent(x, rng=rng),
        "a": a,
        "g": g,
        "h": h,
        "n": a - manifold.to_tangent(x, a),
    }


def call(manifold: Any, method: str, args: list[Any]) -> Any:
    """The value, or the NotImplementedError (pymanopt's base raises it for missing maps)."""
    if not hasattr(manifold, method):
        return NotImplementedError(method)
    try:
        return getattr(manifold, method)(*args)
    except NotImplementedError as exc:
        return exc


def test_each_map_has_pymanopts_value(pair):
    name, spec, theirs, manifold, ours = pair
    assert ours.dim == theirs.dim
    assert ours.typical_dist == pytest.approx(theirs.typical_dist, rel=1e-15)
    if "*" in spec.not_compared:
        return
    d = draw(manifold, np.random.default_rng(1))
    x = d["x"]
    to_theirs = {
        "x": spec.point_to(x),
        "y": spec.point_to(d["y"]),
        "u": spec.tangent_to(x, d["u"]),
        "v": spec.tangent_to(x, d["v"]),
        "t": spec.tangent_to(x, d["a"]),
        "n": spec.point_to(d["n"]),
        **{k: spec.point_to(d[k]) for k in "agh"},
    }
    to_ours = {**d, "t": d["a"]}
    compared = []
    for method, (args, kind) in MAPS.items():
        if not hasattr(theirs, method):
            continue
        mine = call(ours, method, [to_ours[k] for k in args])
        other = call(theirs, method, [to_theirs[k] for k in args])
        if isinstance(other, Exception) or isinstance(mine, Exception):
            listed = spec.theirs_missing if isinstance(other, Exception) else spec.ours_missing
            both = isinstance(other, Exception) and isinstance(mine, Exception)
            assert both or method in listed, f"{name}.{method}: {mine!r} vs {other!r}"
            continue
        if kind == "scalar":
            error = abs(float(mine) - float(other))
        elif kind == "point":
            error = float(manifold.point_gap(mine, spec.point_from(other)))
        elif kind == "ambient":
            error = float(np.max(np.abs(mine - spec.point_from(other))))
        else:
            at = d["y"] if kind == "tangent_y" else x
            error = float(np.max(np.abs(mine - spec.tangent_from(at, other))))
        if method in spec.differ:
            assert error > 1e-6, f"{name}.{method} agrees now: {spec.differ[method]}"
        else:
            assert error < 1e-10, f"{name}.{method}: differs by {error:.2e}"
        compared.append(method)
    listed = {**spec.theirs_missing, **spec.ours_missing, **spec.differ}
    for method, why in listed.items():
        assert why and method in MAPS, (name, method)
    assert len(compared) >= 8, (name, compared)


def test_pymanopt_elliptope_projection_is_not_a_projection():
    """pymanopt 2.2.1's Elliptope.projection leaves Y^T U non-symmetric (not horizontal) and is
    not idempotent; riemfl's horizontal projection is both (checked on the same inputs)."""
    ours, theirs = rm.Elliptope(5, 2), pm.Elliptope(5, 2)
    rng = np.random.default_rng(0)
    y, a = ours.random_point(rng=rng), rng.standard_normal((5, 2))
    for project, broken in ((ours.to_tangent, False), (theirs.projection, True)):
        u = project(y, a)
        np.testing.assert_allclose(np.sum(y * u, axis=1), 0.0, atol=1e-14)  # rows: tangent
        asymmetry = np.max(np.abs(y.T @ u - u.T @ y))
        second = np.max(np.abs(project(y, u) - u))
        assert (asymmetry > 0.1 and second > 0.1) if broken else (asymmetry + second < 1e-14)


def test_quotient_hessians_and_gradients_agree_for_invariant_costs():
    """Where pymanopt and riemfl differ on the quotients (Grassmann's Hessian, PSDFixedRank's
    gradient), they agree for costs with f(XQ) = f(X): f = tr(X^T C X) / 2, G = C X."""
    rng = np.random.default_rng(2)
    c = rng.standard_normal((5, 5))
    c = c + c.T
    for ours, theirs in (
        (rm.Grassmann(5, 2), pm.Grassmann(5, 2)),
        (rm.PSDFixedRank(5, 2), pm.PSDFixedRank(5, 2)),
    ):
        adapter = to_pymanopt(ours, rng=0)
        x = ours.random_point(rng=rng)
        u = ours.random_tangent(x, rng=rng)
        g, h = c @ x, c @ u
        for method, args in (
            ("euclidean_to_riemannian_gradient", (x, g)),
            ("euclidean_to_riemannian_hessian", (x, g, h, u)),
        ):
            np.testing.assert_allclose(
                getattr(adapter, method)(*args), getattr(theirs, method)(*args), atol=1e-12
            )


def test_the_class_specific_adapters_pickle_and_keep_their_extra_names():
    """PymanoptPoincareBall and PymanoptProduct are built on first use, like PymanoptManifold,
    and found again by pickle under riemfl.adapters.pymanopt."""
    import pickle

    for manifold, extra in ((rm.PoincareBall(3), "mobius_addition"), (_product(), "manifolds")):
        adapter = pickle.loads(pickle.dumps(to_pymanopt(manifold, rng=0)))
        assert type(adapter).__module__ == "riemfl.adapters.pymanopt"
        assert hasattr(adapter, extra) and adapter.riemfl_manifold.name == manifold.name
    assert not hasattr(to_pymanopt(rm.Sphere(3)), "mobius_addition")


def test_weingarten_only_where_the_metric_is_the_embedded_one():
    """pymanopt's RiemannianSubmanifold map: riemfl's quotients and intrinsic metrics refuse it,
    as does a family built with a metric other than the embedded one."""
    x = rm.Stiefel(4, 2).random_point(rng=0)
    u, n = rm.Stiefel(4, 2).random_tangent(x, rng=1), x @ np.diag([1.0, 2.0])
    expected = -u @ np.diag([1.0, 2.0])  # -U sym(X^T N) projected: W_X(U, X S) = P(-U S)
    got = to_pymanopt(rm.Stiefel(4, 2)).weingarten(x, u, n)
    np.testing.assert_allclose(got, rm.Stiefel(4, 2).to_tangent(x, expected), atol=1e-14)
    for manifold in (rm.Grassmann(4, 2), rm.SPD(3), rm.Stiefel(4, 2, metric="canonical")):
        with pytest.raises(NotImplementedError, match="not the one induced"):
            to_pymanopt(manifold).weingarten(x, u, n)


def test_scalar_maps_return_numpy_scalars(pair):
    """pymanopt's inner_product, norm and dist return numpy scalars or 0-d arrays (Euclidean's
    inner_product a Python float), and its solvers divide by them: a numpy zero gives inf or NaN
    with a warning where a Python float raises ZeroDivisionError. The adapter returns numpy
    float64 scalars (which are floats too)."""
    name, spec, theirs, manifold, ours = pair
    d = draw(manifold, np.random.default_rng(1))
    for method, args in (("inner_product", "xuv"), ("norm", "xu"), ("dist", "xy")):
        value = call(ours, method, [d[k] for k in args])
        if isinstance(value, NotImplementedError):
            continue
        assert type(value) is np.float64, (name, method, type(value))
        assert value.shape == () and isinstance(value, float)


def test_non_finite_tangent_vectors_give_nan_as_pymanopts_maps_do(pair):
    """pymanopt's maps propagate NaN (those that factorise their argument, Stiefel's and
    Grassmann's retractions, raise LinAlgError instead), and trust regions rely on it to
    reject the NaN step its truncated CG makes after solving a subproblem exactly. riemfl's maps
    raise NonFiniteError; the adapter's retraction, exp, inner_product and norm answer NaN."""
    name, spec, theirs, manifold, ours = pair
    d = draw(manifold, np.random.default_rng(1))
    x, bad = d["x"], np.full_like(d["u"], np.nan)
    assert np.isnan(ours.retraction(x, bad)).all() and ours.retraction(x, bad).shape == x.shape
    assert np.isnan(ours.inner_product(x, bad, d["v"])) and np.isnan(ours.norm(x, bad))
    if manifold.supports("exp")[0]:
        assert np.isnan(ours.exp(x, bad)).all()
    assert np.isfinite(ours.retraction(x, d["u"])).all()  # finite input: riemfl's map

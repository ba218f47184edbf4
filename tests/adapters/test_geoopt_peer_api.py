"""to_geoopt stands in for geoopt's own classes: same public API, same values.

For each (geoopt class, riemfl manifold) pair, the adapted object has every public name of the
geoopt class with the same parameters (names, kinds, defaults), and each method called on the
same inputs returns the same values as geoopt's, in float64 and float32, at sizes and scales
where geoopt's clamps do not act. The deliberate exceptions are listed with their reasons.
"""

import inspect
import math

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
from riemfl.testing import strategies as rst  # noqa: E402

MODULE = set(dir(torch.nn.Module))
#: not compared by value: checks, packing, reprs (same code as geoopt's base class)
NOT_VALUES = {
    "assert_check_point",
    "assert_check_point_on_manifold",
    "assert_check_vector",
    "assert_check_vector_on_tangent",
    "check_point",
    "check_point_on_manifold",
    "check_vector",
    "check_vector_on_tangent",
    "pack_point",
    "unpack_tensor",
    "extra_repr",
    "device",
    "dtype",
    "name",
    "ndim",
    "reversible",
}
BATCHED_INNER = (
    "geoopt's Stereographic.inner with keepdim=False multiplies lambda_x^2 of shape (B, 1) by "
    "<u, v> of shape (B,): a batch of B points gives a B x B matrix (keepdim=True agrees)"
)
SAMPLER = "riemfl's own sampler (checked on the manifold, not against geoopt's draws)"
NO_MAP = "geoopt's {} raises NotImplementedError; riemfl computes it"
CAYLEY_W = (
    "geoopt builds the Cayley W as u x^T - x u^T from its argument u (a retraction only for "
    "x^T u = 0; riemfl's W is built from (I - x x^T / 2) u) and transports by the Cayley "
    "rotation, riemfl by the differential of its retraction"
)

#: geoopt class name -> (factory of the geoopt manifold for a dtype, riemfl manifold,
#: {method: reason its values differ}, {parameter: reason its signature differs})
CASES = {
    "Euclidean": (lambda dtype: geoopt.Euclidean(1), Euclidean(3), {}, {}),
    "Sphere": (
        lambda dtype: geoopt.Sphere(),
        Sphere(3),
        {"random": SAMPLER, "random_uniform": SAMPLER, "origin": SAMPLER},
        {},
    ),
    "EuclideanStiefel": (
        lambda dtype: geoopt.EuclideanStiefel(),
        Stiefel(4, 2, retraction="qr"),  # geoopt's retraction; riemfl's default is polar
        {
            "random": SAMPLER,
            "random_naive": SAMPLER,
            "logmap": NO_MAP.format("logmap"),
            "dist": NO_MAP.format("dist"),
            "dist2": NO_MAP.format("dist"),
        },
        {},
    ),
    "CanonicalStiefel": (
        lambda dtype: geoopt.CanonicalStiefel(),
        Stiefel(4, 2, metric="canonical"),
        {
            "random": SAMPLER,
            "random_naive": SAMPLER,
            "proju": "geoopt's proju is u - x u^T x (the canonical gradient map, its "
            "egrad2rgrad), not the projection onto T_x",
            "retr": CAYLEY_W,
            "expmap": CAYLEY_W + "; riemfl's expmap is the exponential map, geoopt's Cayley",
            "retr_transp": CAYLEY_W,
            "expmap_transp": CAYLEY_W,
            "transp_follow_retr": CAYLEY_W,
            "transp_follow_expmap": CAYLEY_W,
            "transp": NO_MAP.format("transp"),
            "logmap": NO_MAP.format("logmap"),
            "dist": NO_MAP.format("dist"),
            "dist2": NO_MAP.format("dist"),
        },
        {},
    ),
    "Lorentz": (
        lambda dtype: geoopt.Lorentz(k=torch.tensor(2.0, dtype=dtype)),
        Lorentz(3, beta=2.0),
        {
            "random_normal": "geoopt scales its normal draw to unit length first",
            "random": NO_MAP.format("random"),
        },
        {"random": "geoopt's Lorentz has no random (the base class's raises)"},
    ),
    "PoincareBall": (
        lambda dtype: geoopt.PoincareBall(c=torch.tensor(0.7, dtype=dtype)),
        PoincareBall(3, c=0.7),
        {
            "retr": "riemfl's retraction is exp (geoopt's PoincareBallExact), not x + u",
            "inner": BATCHED_INNER,
            "retr_transp": "riemfl's retraction is exp, not x + u",
            "transp_follow_retr": "riemfl's retraction is exp, not x + u",
        },
        {},
    ),
    "SymmetricPositiveDefinite": (
        lambda dtype: geoopt.SymmetricPositiveDefinite(),
        SPD(3),
        {"random": SAMPLER},
        {},
    ),
    "BirkhoffPolytope": (
        lambda dtype: geoopt.BirkhoffPolytope(),
        BirkhoffPolytope(3),
        {
            "random": SAMPLER,
            "random_naive": SAMPLER,
            "proju": "geoopt's proju is Pi_X(u * x) (its egrad2rgrad), not a projection",
            "inner": "geoopt's Fisher metric is divided by n",
            "component_inner": "inner",
            "norm": "inner",
            "logmap": "neither library has the Fisher logarithm (no closed form)",
            "dist": "neither library has the Fisher distance (no closed form)",
            "dist2": "dist",
            "transp": "geoopt's transp is Pi_Y(v * y), riemfl's Pi_Y(v * sqrt(Y / X))",
            "transp_follow_retr": "transp",
            "transp_follow_expmap": "transp",
            "retr_transp": "transp",
            "expmap_transp": "transp",
        },
        {},
    ),
}


def public_api(cls):
    """Public names of a geoopt class: its own and its geoopt bases', not nn.Module's."""
    owners = [c for c in cls.__mro__ if issubclass(c, geoopt.Manifold)]
    return {
        name: inspect.getattr_static(cls, name)
        for name in dir(cls)
        if not name.startswith("_")
        and (name not in MODULE or any(name in c.__dict__ for c in owners))
    }


def instance_attributes(manifold):
    """Public attributes, parameters and buffers that geoopt sets in ``__init__``."""
    names = [*vars(manifold), *manifold._parameters, *manifold._buffers]
    return {n for n in names if not n.startswith("_") and n != "training"}


def parameters(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("kind", list(CASES))
def test_adapter_has_every_public_name_with_geoopt_signatures(kind):
    make, riem, _, signature_exceptions = CASES[kind]
    geoopt_cls, adapted = type(make(torch.float64)), to_geoopt(riem)
    api = public_api(geoopt_cls)
    assert len(api) > 20
    for name in instance_attributes(make(torch.float64)):
        assert hasattr(adapted, name), f"{kind}: no attribute {name}"
    for name, attr in api.items():
        assert hasattr(adapted, name), f"{kind}: no {name}"
        if callable(attr) and name not in signature_exceptions:
            theirs, ours = parameters(getattr(geoopt_cls, name)), parameters(getattr(adapted, name))
            assert ours == theirs[1:], f"{kind}.{name}: {ours} != {theirs[1:]}"


def inputs(riem, dtype, rng):
    """Points x, y = Exp_x(u') and tangents u, v at x (norms 0.2 to 0.8), as tensors."""
    x = riem.random_point(3, rng=rng)
    u, v, w = (rst.scaled_tangent(riem, x, rng.uniform(0.2, 0.8, 3), rng) for _ in range(3))
    y = riem.retract(x, w) if isinstance(riem, BirkhoffPolytope) else riem.exp(x, w)
    d = {"x": x, "y": y, "u": u, "v": v}
    if isinstance(riem, (Lorentz, PoincareBall)):
        o = np.zeros_like(x)
        if isinstance(riem, Lorentz):
            o[..., 0] = math.sqrt(riem.beta)
        d["u0"] = rst.scaled_tangent(riem, o, rng.uniform(0.2, 0.8, 3), rng)
        d["unit"] = u / riem.norm(x, u)[:, None]
    if isinstance(riem, PoincareBall):
        d["h"] = np.roll(riem.to_lorentz(x), -1, axis=-1)
        d["m"] = rng.standard_normal((3, 3))
        d["w"] = rng.standard_normal(3)
        d["weights"] = rng.uniform(0.5, 1.5, 3)
    out = {k: torch.tensor(np.asarray(a), dtype=dtype) for k, a in d.items()}
    out["t"] = torch.tensor(0.7, dtype=dtype)
    out["r"] = torch.tensor(0.7, dtype=dtype)
    return out


#: arguments where the parameter names alone do not say (method -> input names)
ARGS = {
    ("Lorentz", "expmap0"): ["u0"],
    ("Lorentz", "inner0"): ["v"],
    ("Lorentz", "transp0"): ["y", "u0"],
    ("Lorentz", "geodesic_unit"): ["t", "x", "unit"],
    ("PoincareBall", "gyration"): ["x", "y", "v"],
    ("PoincareBall", "dist2plane"): ["x", "y", "u"],
    ("PoincareBall", "sproj"): ["h"],
    ("PoincareBall", "weighted_midpoint"): ["x", "weights"],
    ("PoincareBall", "mobius_fn_apply"): [torch.tanh, "x"],
    ("PoincareBall", "mobius_fn_apply_chain"): ["x", torch.tanh, torch.sin],
    ("PoincareBall", "wrapped_normal"): [3, 3],
    ("SymmetricPositiveDefinite", "logmap"): ["x", "y"],
}


def call_args(kind, name, fn, d, riem):
    """Positional arguments of a method call, from the parameter names (or ARGS)."""
    if (kind, name) in ARGS:
        return [d[a] if isinstance(a, str) else a for a in ARGS[kind, name]]
    params = list(inspect.signature(fn).parameters.values())
    if params and params[0].kind is inspect.Parameter.VAR_POSITIONAL:  # a sampler's *size
        return [3, *riem.point_shape]
    return [
        d[p.name]
        for p in params
        if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.default is inspect._empty
    ]


def compare(kind, name, ours, theirs, tol):
    if isinstance(theirs, tuple):
        for a, b in zip(ours, theirs, strict=True):
            compare(kind, name, a, b, tol)
        return
    assert ours.shape == theirs.shape, f"{kind}.{name}: shape {ours.shape} != {theirs.shape}"
    assert ours.dtype == theirs.dtype, f"{kind}.{name}: dtype {ours.dtype} != {theirs.dtype}"
    a, b = ours.detach().double(), theirs.detach().double()
    err = float((a - b).abs().max()) / max(1.0, float(b.abs().max()))
    assert err <= tol, f"{kind}.{name}: relative difference {err:.2e} > {tol:.0e}"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("kind", list(CASES))
def test_adapter_methods_return_geoopt_values(kind, dtype):
    make, riem, value_exceptions, _ = CASES[kind]
    g, adapted = make(dtype), to_geoopt(riem)
    d = inputs(riem, dtype, np.random.default_rng(0))
    tol = (1e-9 if dtype == torch.float64 else 2e-4) * (1e4 if kind == "BirkhoffPolytope" else 1)
    compared = 0
    for name, attr in public_api(type(g)).items():
        if name in NOT_VALUES or name in value_exceptions or not callable(attr):
            continue
        args = call_args(kind, name, getattr(g, name), d, riem)
        kwargs = {"mean": d["x"][0]} if name == "wrapped_normal" else {}
        if args and isinstance(args[0], int):  # samplers: the same draws from torch's generator
            kwargs["dtype"] = dtype
        results = []
        for m in (adapted, g):
            torch.manual_seed(0)
            results.append(
                getattr(m, name)(*(a.clone() if torch.is_tensor(a) else a for a in args), **kwargs)
            )
        compare(kind, name, *results, tol)
        compared += 1
    assert compared >= 5
    for name in ("c", "k", "radius", "isp_c", "ndim"):  # same-meaning attributes, same values
        if hasattr(g, name):
            assert float(getattr(adapted, name)) == pytest.approx(float(getattr(g, name)), rel=1e-6)


def test_other_metrics_get_the_generic_adapter_not_a_stand_in():
    """geoopt has no class for SPD's other metrics: no geoopt API is claimed for them. The
    canonical-metric Stiefel stands in for geoopt.CanonicalStiefel (geoopt.Stiefel()), not for
    EuclideanStiefel."""
    from riemfl.adapters import geoopt as adapter

    assert type(to_geoopt(SPD(3, metric="log-euclidean"))) is adapter.GeooptManifold
    assert type(to_geoopt(Stiefel(5, 2))).__name__ == "GeooptEuclideanStiefel"
    canonical = to_geoopt(Stiefel(5, 2, metric="canonical"))
    assert type(canonical).__name__ == "GeooptCanonicalStiefel"

"""Regression tests of the input policy: each case that could hang, give a silently wrong result
or raise a raw exception at the geometry layer, with the outcome the policy gives it."""

import numpy as np
import pytest

from riemfl import (
    SPD,
    ControlPoints,
    EpsilonTunnel,
    Euclidean,
    Grassmann,
    Lorentz,
    Oblique,
    PoincareBall,
    Positive,
    Product,
    ProjectionError,
    SkewSymmetric,
    Sphere,
    Stiefel,
    Symmetric,
)
from riemfl.backend import is_torch
from riemfl.errors import DTypeError, NonFiniteError
from riemfl.manifolds import BezierCurve, BezierGraph, FixedRank, Simplex
from riemfl.testing import FLOAT32_EPS_MULTIPLES, checks, importorskip

CURVE = BezierCurve(np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 0.2], [2.0, 0.0, 0.4]]))

#: the eleven manifolds of the campaign
MANIFOLDS = {
    "Euclidean": Euclidean(3),
    "Sphere": Sphere(3),
    "Stiefel": Stiefel(4, 2),
    "Grassmann": Grassmann(4, 2),
    "Lorentz": Lorentz(2),
    "Product": Product(Euclidean(3), Sphere(3)),
    "FixedRank": FixedRank(4, 3, 2),
    "Simplex": Simplex(3, concentration=30),
    "BezierGraph": BezierGraph(CURVE),
    "EpsilonTunnel": EpsilonTunnel(CURVE, 0.2),
    "ControlPoints": ControlPoints(Sphere(3), 2),
}
CURVED = [name for name in MANIFOLDS if name != "Euclidean"]


def _point_and_tangent(m, batch=()):
    x = m.random_point(*batch, rng=0)
    return x, 0.1 * m.random_tangent(x, rng=1)


def _with(x, value):
    out = np.array(x, dtype=np.float64)
    out.flat[0] = value
    return out


# ------------------------------------------------------------------ hangs
@pytest.mark.parametrize(
    "method", ["to_tangent", "egrad_to_rgrad", "retract", "inverse_retract", "check_tangent"]
)
def test_fixedrank_with_an_infinite_point_refuses_instead_of_hanging(method):
    m = FixedRank(4, 3, 2)
    x, u = _point_and_tangent(m)
    with pytest.raises(NonFiniteError, match="point x contains NaN or infinite"):
        getattr(m, method)(_with(x, np.inf), u)


def test_fixedrank_random_tangent_at_an_infinite_point():
    m = FixedRank(4, 3, 2)
    with pytest.raises(NonFiniteError):
        m.random_tangent(_with(m.random_point(rng=0), np.inf), rng=0)


# ------------------------------------------------------------------ silently wrong
@pytest.mark.parametrize("seed", range(8))
def test_stiefel_project_of_a_numerically_rank_deficient_matrix_refuses(seed):
    rng = np.random.default_rng(seed)
    b = rng.standard_normal((6, 1))
    a = np.hstack([b, 2.0 * b + 1e-16 * rng.standard_normal((6, 1)), rng.standard_normal((6, 1))])
    with pytest.raises(ProjectionError, match=r"smallest singular value .* sigma_1 = "):
        Stiefel(6, 3).project(a)


@pytest.mark.parametrize(
    ("name", "method"),
    [("BezierGraph", m) for m in ("project", "retract", "to_tangent", "exp", "log", "dist")]
    + [("EpsilonTunnel", "project"), ("EpsilonTunnel", "retract")],
)
def test_curve_manifolds_on_integers_equal_the_float_call(name, method):
    m = MANIFOLDS[name]
    ints = np.array([[1, 1, 0], [2, 0, 0]])
    args = (ints,) if method == "project" else (ints, np.array([[0, 1, 0], [1, 0, 0]]))
    if method in ("log", "dist"):
        args = (ints, ints[::-1])
    np.testing.assert_allclose(
        getattr(m, method)(*args), getattr(m, method)(*(a.astype(float) for a in args))
    )


@pytest.mark.parametrize("name", MANIFOLDS)
def test_random_tangent_at_an_integer_point_is_float(name):
    m = MANIFOLDS[name]
    x = np.rint(m.random_point(rng=0)).astype(np.int64)
    u = m.random_tangent(x, rng=0)
    assert u.dtype == np.float64
    np.testing.assert_array_equal(u, m.random_tangent(x.astype(np.float64), rng=0))


@pytest.mark.parametrize("value", [np.nan, np.inf])
@pytest.mark.parametrize("name", MANIFOLDS)
def test_check_tangent_refuses_a_non_finite_base_point(name, value):
    m = MANIFOLDS[name]
    x = m.random_point(rng=0)
    with pytest.raises(NonFiniteError, match="point x"):
        m.check_tangent(_with(x, value), m.zero_tangent(x))


# ------------------------------------------------------------------ raw exceptions
def test_stiefel_retract_with_a_nan_step_is_a_typed_error():
    m = Stiefel(20, 5)
    x = m.random_point(rng=0)
    with pytest.raises(NonFiniteError, match="tangent vector u"):
        m.retract(x, np.full((20, 5), np.nan))


@pytest.mark.parametrize(
    "method", ["project", "to_tangent", "retract", "inverse_retract", "check_point", "zero_tangent"]
)
def test_fixedrank_with_nan_is_a_typed_error(method):
    m = FixedRank(4, 3, 2)
    x = _with(m.random_point(rng=0), np.nan)
    args = (x,) if method in ("project", "check_point", "zero_tangent") else (x, x)
    with pytest.raises(NonFiniteError):
        getattr(m, method)(*args)


@pytest.mark.parametrize("name", ["Sphere", "Stiefel", "Product"])
def test_integer_input_is_promoted_to_float64(name):
    m = MANIFOLDS[name]
    x = np.rint(m.random_point(rng=0))
    for method in ("to_tangent", "retract"):
        out = getattr(m, method)(x.astype(np.int64), x.astype(np.int64))
        assert out.dtype == np.float64
        np.testing.assert_array_equal(out, getattr(m, method)(x, x))


@pytest.mark.parametrize("name", ["Grassmann", "FixedRank", "Sphere"])
def test_float16_is_refused_with_a_typed_error(name):
    m = MANIFOLDS[name]
    x, u = _point_and_tangent(m)
    with pytest.raises(DTypeError, match="float16.*cast to float32"):
        m.retract(x.astype(np.float16), u)
    torch = importorskip("torch")
    with pytest.raises(DTypeError, match="bfloat16"):
        m.project(torch.as_tensor(x).to(torch.bfloat16))


@pytest.mark.parametrize("name", MANIFOLDS)
def test_complex_input_is_refused_with_a_typed_error(name):
    m = MANIFOLDS[name]
    x, u = _point_and_tangent(m)
    for method, args in (("retract", (x, u)), ("to_tangent", (x, u)), ("inner", (x, u, u))):
        with pytest.raises(DTypeError, match="complex"):
            getattr(m, method)(*(a.astype(np.complex128) for a in args))
    if m.supports("log")[0]:
        for method in ("log", "dist"):
            with pytest.raises(DTypeError, match="complex"):
                getattr(m, method)(x.astype(np.complex128), x)


@pytest.mark.parametrize("name", MANIFOLDS)
def test_lists_are_arrays(name):
    m = MANIFOLDS[name]
    x, u = _point_and_tangent(m)
    np.testing.assert_array_equal(m.retract(x.tolist(), u.tolist()), m.retract(x, u))
    np.testing.assert_array_equal(m.to_tangent(x.tolist(), u), m.to_tangent(x, u))
    m.check_point(x.tolist())


@pytest.mark.parametrize("name", MANIFOLDS)
def test_mixed_numpy_and_torch_is_a_torch_call(name):
    torch = importorskip("torch")
    m = MANIFOLDS[name]
    x, u = _point_and_tangent(m)
    tx = torch.as_tensor(x, dtype=torch.float32)
    for args in ((tx, u), (x, torch.as_tensor(u, dtype=torch.float32))):
        out = m.retract(*args)
        assert is_torch(out) and out.dtype == torch.float32
        np.testing.assert_allclose(out.numpy(), m.retract(x, u), atol=1e-5)


@pytest.mark.parametrize("name", MANIFOLDS)
def test_empty_batches_give_empty_results(name):
    m = MANIFOLDS[name]
    x, u = _point_and_tangent(m, (2,))
    e, f = x[:0], u[:0]
    m.check_point(e)
    m.check_tangent(e, f)
    assert m.retract(e, f).shape == (0,) + m.point_shape
    assert m.inner(e, f, f).shape == (0,)
    if m.supports("project")[0]:
        assert m.project(e).shape == (0,) + m.point_shape
    if m.supports("dist")[0]:
        assert m.dist(e, e).shape == (0,)


# ------------------------------------------------------------------ float32 and broadcasting
def test_torch_float32_stiefel_exp_is_accurate():
    importorskip("torch")
    m = Stiefel(3, 2)
    x = np.eye(3)[:, :2]
    u = np.array([[0.0, 0.5], [-0.5, 0.0], [0.0, 0.0]])
    err = checks.float32_error(m, "exp", [x, u], "torch")
    assert err <= FLOAT32_EPS_MULTIPLES["exp"], err


@pytest.mark.parametrize("seed", range(8))
def test_float32_polar_projection_batch_equals_single_calls(seed):
    torch = importorskip("torch")
    m = Stiefel(20, 5)  # seed 4 differed by 6.5 float32 eps through the eigenvalues of A^T A
    rng = np.random.default_rng(seed)
    a = torch.as_tensor(rng.standard_normal((8, 20, 5)), dtype=torch.float32)
    loop = torch.stack([m.project(a[i]) for i in range(8)])
    assert float((m.project(a) - loop).abs().max()) <= 2 * torch.finfo(torch.float32).eps


@pytest.mark.parametrize("method", ["to_tangent", "egrad_to_rgrad"])
def test_product_broadcasts_a_batch_of_points_against_one_vector(method):
    m = Product(Euclidean(3), Sphere(3))
    x = m.random_point(4, rng=0)
    u = np.arange(6.0)
    out = getattr(m, method)(x, u)
    assert out.shape == (4, 6)
    np.testing.assert_allclose(out, np.stack([getattr(m, method)(xi, u) for xi in x]))


@pytest.mark.parametrize("name", MANIFOLDS)
def test_point_gap_follows_the_input_policy(name):
    m = MANIFOLDS[name]
    x = m.random_point(2, rng=0)
    np.testing.assert_array_equal(m.point_gap(x.tolist(), x), m.point_gap(x, x))
    with pytest.raises(NonFiniteError):
        m.point_gap(_with(x, np.nan), x)
    assert m.point_gap(x[:0], x[:0]).shape == (0,)


# ------------------------------------------------------------------ maps checked through the result
_ROLES = {
    "to_tangent": ("point x", "ambient vector a"),
    "egrad_to_rgrad": ("point x", "Euclidean gradient g"),
    "ehess_to_rhess": (
        "point x",
        "Euclidean gradient g",
        "Euclidean Hessian-vector product h",
        "tangent vector u",
    ),
    "inner": ("point x", "tangent vector u", "tangent vector v"),
    "norm": ("point x", "tangent vector u"),
    "retract": ("point x", "tangent vector u"),
    "exp": ("point x", "tangent vector u"),
    "inverse_retract": ("point x", "point y"),
    "log": ("point x", "point y"),
    "dist": ("point x", "point y"),
    "squared_dist": ("point x", "point y"),
    "transport": ("point x", "point y", "tangent vector u"),
    "parallel_transport": ("point x", "point y", "tangent vector u"),
}
RESULT_CHECKED = {
    "Euclidean": Euclidean(3),
    "Sphere": Sphere(4),
    "StiefelPolar": Stiefel(5, 2),
    "StiefelQR": Stiefel(5, 2, retraction="qr"),
    "StiefelCanonical": Stiefel(5, 2, metric="canonical"),  # the Cayley retraction
    "StiefelCanonicalPolar": Stiefel(5, 2, "polar", metric="canonical"),
    "Grassmann": Grassmann(5, 2),
    "Lorentz": Lorentz(3, beta=2.5),
    "Product": Product(Sphere(3), Stiefel(4, 2), Lorentz(2)),
    "Oblique": Oblique(4, 3),
    "Positive": Positive(3, 2),
    "PoincareBall": PoincareBall(3, c=0.5),
    "Symmetric": Symmetric(3),
    "SkewSymmetric": SkewSymmetric(3),
    "SPD": SPD(3),
}


def _valid_args(m, method):
    x, u = _point_and_tangent(m)
    y = m.retract(x, u)
    return {"point x": x, "point y": y}, u


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("name", RESULT_CHECKED)
def test_maps_checked_through_the_result_name_each_non_finite_argument(name, backend):
    """Every entry position (first, last, all) and value (NaN, +-inf) of every argument of every
    map the manifold checks through its result: NonFiniteError naming that argument."""
    torch = importorskip("torch") if backend == "torch" else None
    m = RESULT_CHECKED[name]
    assert m._result_checked, "the manifold checks some map through its result"
    points, u = _valid_args(m, None)
    for method in m._result_checked:
        roles = _ROLES[method]
        args = [points.get(role, u) for role in roles]
        for i, role in enumerate(roles):
            for value in (np.nan, np.inf, -np.inf):
                for where in (0, -1, slice(None)):
                    # C order: reshape(-1) is then a view (Oblique's points are F-ordered)
                    bad = [np.array(a, dtype=np.float64, order="C") for a in args]
                    bad[i].reshape(-1)[where] = value
                    if backend == "torch":
                        bad = [torch.as_tensor(a) for a in bad]
                    with (
                        np.errstate(all="ignore"),
                        pytest.raises(NonFiniteError, match=f"{method}: {role} contains"),
                    ):
                        getattr(m, method)(*bad)


def test_a_subclass_does_not_inherit_the_maps_checked_through_the_result():
    class Clamped(Sphere):
        def _inner(self, x, u, v):  # a clamp hides an infinity: must be checked first
            return np.minimum(super()._inner(x, u, v), 1.0)

    m = Clamped(3)
    assert Sphere(3)._result_checked["inner"] == (0,)
    assert m._result_checked == {}
    x, u = _point_and_tangent(m)
    with pytest.raises(NonFiniteError, match="tangent vector u"):
        m.inner(x, _with(u, np.inf), u)


def test_a_non_finite_argument_met_by_a_guard_is_named_and_chained():
    m = Stiefel(6, 3)  # the polar retraction's factorisation guard meets the NaN first
    x, u = _point_and_tangent(m)
    with pytest.raises(NonFiniteError, match="retract: point x contains") as info:
        m.retract(_with(x, np.nan), u)
    assert isinstance(info.value.__cause__, NonFiniteError)


def test_tensors_on_one_accelerator_take_the_fast_path():
    # the fast path (no conversion, no coerce) applies to tensors of one device, the CPU or an
    # accelerator; torch's "meta" device stands in for a GPU (shapes and dtypes, no data)
    torch = importorskip("torch")
    from riemfl.manifolds.inputs import common_shape

    meta = [torch.empty((4, 3), dtype=torch.float32, device="meta") for _ in range(3)]
    assert common_shape(meta) == (4, 3)
    cpu = [torch.zeros((4, 3), dtype=torch.float64) for _ in range(2)]
    assert common_shape(cpu) == (4, 3)
    mixed = [meta[0], torch.zeros((4, 3), dtype=torch.float32)]
    assert common_shape(mixed) is None and common_shape(mixed[::-1]) is None
    assert common_shape([meta[0], meta[1].to(torch.float64)]) is None
    assert common_shape([meta[0], torch.empty((3, 3), device="meta")]) is None

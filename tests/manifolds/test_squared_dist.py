"""squared_dist on every family, and the gradients of dist and squared_dist at coincident
points (beyond the kit's checks): ``safe_sqrt`` itself, the Riemannian gradient of a Karcher
sum started at a data point, and the points where the textbook forms divide by zero (the
antipode of the sphere, a rotation by pi)."""

import math

import numpy as np
import pytest

from riemfl import manifolds as mf
from riemfl.backend import ops_for
from riemfl.manifolds.catalogue import examples
from riemfl.testing import TOLERANCES, checks, importorskip

torch = importorskip("torch")

F64 = TOLERANCES["float64"]


def test_safe_sqrt_values_and_derivatives():
    """sqrt(max(a, 0)) in both backends; in torch the derivative is 1/(2 sqrt a) for a > 0 and
    0 (not inf or NaN) for a <= 0, the second derivative is finite, and NaN propagates."""
    a = np.array([4.0, 1e-300, 0.0, -1.0, np.nan])
    expected = np.array([2.0, 1e-150, 0.0, 0.0, np.nan])
    np.testing.assert_array_equal(ops_for(a).safe_sqrt(a), expected)
    t = torch.as_tensor(a[:4]).requires_grad_(True)
    root = ops_for(t).safe_sqrt(t)
    np.testing.assert_array_equal(root.detach().numpy(), expected[:4])
    (grad,) = torch.autograd.grad(root.sum(), t, create_graph=True)
    np.testing.assert_array_equal(grad.detach().numpy(), [0.25, 0.5e150, 0.0, 0.0])
    (second,) = torch.autograd.grad(grad.sum(), t)  # -1/(4 a^1.5): overflows at a = 1e-300
    np.testing.assert_array_equal(second.numpy()[[0, 2, 3]], [-1 / 32, 0.0, 0.0])
    assert math.isnan(float(ops_for(t).safe_sqrt(torch.tensor(float("nan")))))


KARCHER = [
    mf.Sphere(4),
    mf.Oblique(4, 3),
    mf.Stiefel(5, 2),
    mf.Grassmann(5, 2),
    mf.Lorentz(3),
    mf.PoincareBall(3, c=0.5),
    mf.Simplex(4, concentration=20),
    mf.Positive(3),
    mf.SPD(3),
    mf.SPD(3, metric="log-euclidean"),
    mf.SPD(3, metric="bures-wasserstein"),
    mf.SpecialOrthogonal(3),
    mf.SpecialOrthogonal(4),
    mf.Product(mf.Sphere(3), mf.PoincareBall(2)),
]


@pytest.mark.parametrize("m", KARCHER, ids=str)
def test_karcher_gradient_started_at_a_data_point(m):
    """f(y) = sum_i d(x_i, y)^2 at y = x_0 (one term has y = x): the Riemannian gradient from
    torch's Euclidean gradient (egrad_to_rgrad) is finite and equals -2 sum_i log_y(x_i), whose
    term i = 0 is 0; every squared_dist equals dist**2."""
    rng = np.random.default_rng(0)
    y = m.random_point(rng=rng)
    u = m.random_tangent(np.stack([y] * 4), rng=rng)
    u *= (0.4 / np.asarray(m.norm(np.stack([y] * 4), u))).reshape((4,) + (1,) * m.ndim)
    x = np.concatenate([y[None], np.asarray(m.exp(np.stack([y] * 4), u))])
    yt = torch.tensor(y, requires_grad=True)
    f = m.squared_dist(torch.as_tensor(x), yt).sum()
    (egrad,) = torch.autograd.grad(f, yt)
    assert bool(torch.isfinite(egrad).all())
    rgrad = m.egrad_to_rgrad(y, egrad.numpy())
    expected = -2.0 * np.sum(np.asarray(m.log(np.stack([y] * 5), x)), axis=0)
    checks.assert_close(rgrad, expected, F64, "grad sum d^2 = -2 sum log", m)
    d = np.asarray(m.dist(x, y))
    checks.assert_close(m.squared_dist(x, y), d * d, F64, "squared_dist = dist^2", m)


@pytest.mark.parametrize("m", examples(), ids=str)
def test_every_catalogue_family(m):
    """Every example of the catalogue either has squared_dist, with finite gradients of dist and
    squared_dist at y = x (the kit's check), or lacks dist too, for the same reason."""
    ok, why = m.supports("squared_dist")
    assert (ok, why) == m.supports("dist")
    if not ok:
        with pytest.raises(NotImplementedError):
            m.squared_dist(m.random_point(rng=0), m.random_point(rng=1))
        return
    x = m.random_point(3, rng=0)
    checks.check_distance_gradients_at_coincident_points(m, x, np.random.default_rng(1))


def test_antipodes_and_half_turns_have_finite_gradients():
    """Where the textbook squared distance goes through sqrt(0) away from y = x: the sphere's
    antipode (theta = pi) and a rotation by pi. d^2 = pi^2 (2 pi^2 for SO(3)) and the gradients
    are finite (a maximum of d along every geodesic through it: the zero subgradient)."""
    sphere = mf.Sphere(3)
    x = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([-1.0, 0.0, 0.0], dtype=torch.float64, requires_grad=True)
    rot = mf.SpecialOrthogonal(3)
    a = torch.eye(3, dtype=torch.float64, requires_grad=True)
    b = torch.diag(torch.tensor([-1.0, -1.0, 1.0], dtype=torch.float64)).requires_grad_(True)
    for m, p, q, value in ((sphere, x, y, math.pi**2), (rot, a, b, 2 * math.pi**2)):
        for method, expected in (("squared_dist", value), ("dist", math.sqrt(value))):
            out = getattr(m, method)(p, q)
            assert float(out.detach()) == pytest.approx(expected, rel=1e-15)
            grads = torch.autograd.grad(out, (p, q))
            assert all(bool(torch.isfinite(g).all()) for g in grads)

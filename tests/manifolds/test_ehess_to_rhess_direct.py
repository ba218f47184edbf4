"""ehess_to_rhess of SpecialOrthogonal, Oblique, Symmetric, SkewSymmetric and Positive, checked
directly: tangent, symmetric in the metric, and equal to the covariant derivative of the
Riemannian gradient, a finite difference of parallel-transported gradients along exp.

The test function is the kit's quadratic of the ambient array (riemfl.testing.checks.
quadratic_function), f(a) = <c, a> + <a, B a>/2 with B a random symmetric operator: its Euclidean
gradient is c + B a and its Hessian-vector product B u. The kit checks the same identities on one
instance per class; these run them on more sizes (the closed forms of SO(2), SO(3) and the
generic SO(n)) and seeds.
"""

import numpy as np
import pytest

from riemfl import Oblique, Positive, SkewSymmetric, SpecialOrthogonal, Symmetric
from riemfl.testing import importorskip
from riemfl.testing.checks import quadratic_function

torch = importorskip("torch")

MANIFOLDS = [
    SpecialOrthogonal(2),
    SpecialOrthogonal(3),
    SpecialOrthogonal(4),
    SpecialOrthogonal(5),
    Oblique(4, 3),
    Oblique(3, 1),
    Symmetric(3),
    SkewSymmetric(4),
    Positive(3, 2),
    Positive(4),
]


def _frame(manifold, seed):
    rng = np.random.default_rng(seed)
    x = manifold.random_point(rng=rng)
    u, v = (manifold.random_tangent(x, rng=rng) for _ in range(2))
    return rng, x, u / manifold.norm(x, u), v / manifold.norm(x, v)


@pytest.mark.parametrize("manifold", MANIFOLDS, ids=str)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hessian_is_the_covariant_derivative_of_the_gradient(manifold, seed):
    """Hess f(x)[u] = D/dt grad f(exp_x(tu)) at t = 0, by central differences of the gradients
    at exp_x(+-tu) transported back to x."""
    rng, x, u, _ = _frame(manifold, seed)
    f = quadratic_function(manifold.point_shape, rng)
    hess = manifold.ehess_to_rhess(x, f.egrad(x), f.ehess(x, u), u)
    manifold.check_tangent(x, hess, atol=1e-10 * max(1.0, float(np.abs(hess).max())))

    def transported_gradient(t):
        y = manifold.exp(x, t * u)
        return manifold.parallel_transport(y, x, manifold.egrad_to_rgrad(y, f.egrad(y)))

    t = 1e-4
    fd = (transported_gradient(t) - transported_gradient(-t)) / (2 * t)
    scale = max(1.0, float(np.abs(hess).max()))
    np.testing.assert_allclose(hess, fd, atol=1e-6 * scale)


@pytest.mark.parametrize("manifold", MANIFOLDS, ids=str)
@pytest.mark.parametrize("seed", [0, 1])
def test_hessian_is_symmetric_in_the_metric(manifold, seed):
    rng, x, u, v = _frame(manifold, seed)
    f = quadratic_function(manifold.point_shape, rng)
    g = f.egrad(x)
    hu = manifold.ehess_to_rhess(x, g, f.ehess(x, u), u)
    hv = manifold.ehess_to_rhess(x, g, f.ehess(x, v), v)
    assert float(manifold.inner(x, hu, v)) == pytest.approx(
        float(manifold.inner(x, u, hv)), rel=1e-12, abs=1e-12
    )


@pytest.mark.parametrize("manifold", MANIFOLDS, ids=str)
def test_hessian_batches_and_backends_agree(manifold):
    rng = np.random.default_rng(3)
    f = quadratic_function(manifold.point_shape, rng)
    x = manifold.random_point(3, rng=rng)
    u = manifold.random_tangent(x, rng=rng)
    g, h = f.egrad(x), f.ehess(x, u)
    batched = manifold.ehess_to_rhess(x, g, h, u)
    loop = np.stack([manifold.ehess_to_rhess(x[i], g[i], h[i], u[i]) for i in range(3)])
    np.testing.assert_allclose(batched, loop, atol=1e-13)
    tensors = [torch.as_tensor(a) for a in (x, g, h, u)]
    np.testing.assert_allclose(manifold.ehess_to_rhess(*tensors).numpy(), batched, atol=1e-13)
    assert manifold.supports("ehess_to_rhess") == (True, "")

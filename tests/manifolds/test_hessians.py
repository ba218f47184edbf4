"""ehess_to_rhess: on every manifold family, against independent formulas, and the kit's Hessian
checks fail on deliberately wrong Hessians (so that passing them means something)."""

import numpy as np
import pytest

from riemfl import Grassmann, Sphere, Stiefel
from riemfl.manifolds import Simplex
from riemfl.manifolds.catalogue import FAMILIES, examples
from riemfl.testing import Tolerance, checks, importorskip

SEEDS = range(5)
TOL = Tolerance(atol=1e-10, rtol=1e-10)


def frame(manifold, seed, *, rotation_invariant=False):
    """A point, two tangent vectors of norm 0.5 and a quadratic test function (numpy float64)."""
    rng = np.random.default_rng(seed)
    x = manifold.random_point(rng=rng)
    u, v = (manifold.random_tangent(x, rng=rng) for _ in range(2))
    u, v = (0.5 * w / float(manifold.norm(x, w)) for w in (u, v))
    fn = checks.quadratic_function(manifold.point_shape, rng, rotation_invariant=rotation_invariant)
    return x, u, v, fn


def test_every_family_has_the_riemannian_hessian():
    assert all(m.supports("ehess_to_rhess") == (True, "") for m in examples())
    assert len({type(m) for m in examples()}) == len(FAMILIES)


# --------------------------------------------------------------------- independent formulas
@pytest.mark.parametrize("seed", SEEDS)
def test_simplex_hessian_is_the_spheres_pulled_back_through_the_square_root(seed):
    """phi(p) = sqrt(p) maps the Fisher-Rao simplex onto the positive orthant of the unit sphere
    with metric 4 <., .>, geodesics to geodesics (Simplex.exp is the squared great circle), so
    <Hess f(p)[u], v>_p = <Hess F(y)[u/(2 y)], v/(2 y)> with F(y) = f(y * y), y = sqrt(p): a
    second derivation of the Simplex formula, through the sphere's."""
    simplex, sphere = Simplex(6, concentration=20), Sphere(6)
    p, u, v, fn = frame(simplex, seed)
    y = np.sqrt(p)
    du, dv = u / (2 * y), v / (2 * y)
    g = fn.egrad(p)
    egrad_f = 2 * y * g  # F(y) = f(y * y)
    ehess_f = 2 * du * g + 2 * y * fn.ehess(p, 2 * y * du)
    ours = simplex.inner(p, simplex.ehess_to_rhess(p, g, fn.ehess(p, u), u), v)
    theirs = sphere.inner(y, sphere.ehess_to_rhess(y, egrad_f, ehess_f, du), dv)
    assert float(ours) == pytest.approx(float(theirs), rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("name", ["Sphere", "Stiefel", "Grassmann"])
def test_the_formulas_of_pymanopts_own_manifolds(name):
    """pymanopt 2.2's Sphere, Stiefel and Grassmann: the same maps (Grassmann for a function of
    the subspace, where X^T grad is symmetric and the symmetric part changes nothing)."""
    pymanopt = importorskip("pymanopt")
    ours, theirs = {
        "Sphere": (Sphere(6), pymanopt.manifolds.Sphere(6)),
        "Stiefel": (Stiefel(6, 3), pymanopt.manifolds.Stiefel(6, 3)),
        "Grassmann": (Grassmann(6, 3), pymanopt.manifolds.Grassmann(6, 3)),
    }[name]
    for seed in SEEDS:
        x, u, _, fn = frame(ours, seed, rotation_invariant=name == "Grassmann")
        g, h = fn.egrad(x), fn.ehess(x, u)
        np.testing.assert_allclose(
            ours.ehess_to_rhess(x, g, h, u),
            theirs.euclidean_to_riemannian_hessian(x, g, h, u),
            atol=1e-12,
        )


def canonical_covariant_derivative(m, x, u, fn, h=1e-5):
    """nabla_u grad f = d/dt grad f(Exp_x(tu)) at t = 0 + Gamma_c(u, grad f(x)), the connection
    of the canonical metric from its Christoffel function (Edelman et al. 1998, eq. 2.49)."""

    def grad(t):
        y = m.exp(x, t * u)
        return m.egrad_to_rgrad(y, fn.egrad(y))

    g = grad(0.0)
    qu, qg = u - x @ (x.T @ u), g - x @ (x.T @ g)
    christoffel = 0.5 * ((u @ g.T + g @ u.T) @ x + x @ (u.T @ qg + g.T @ qu))
    return (grad(h) - grad(-h)) / (2 * h) + christoffel


@pytest.mark.parametrize("shape", [(6, 2), (4, 3), (5, 1), (3, 3)])
@pytest.mark.parametrize("seed", range(3))
def test_canonical_stiefel_hessian_is_the_covariant_derivative_of_the_gradient(shape, seed):
    """The canonical metric is not induced by the ambient space, so the kit's finite-difference
    check (the gradient transported back by projection) does not apply to it (see
    test_conformance.py): the Hessian is checked against the canonical Levi-Civita connection,
    and the kit's other checks pass. The Riesz map of h alone (no connection term) fails."""
    m = Stiefel(*shape, metric="canonical")
    x, u, v, fn = frame(m, seed)
    exact = m.ehess_to_rhess(x, fn.egrad(x), fn.ehess(x, u), u)
    reference = canonical_covariant_derivative(m, x, u, fn)
    np.testing.assert_allclose(exact, reference, atol=1e-7)
    wrong = StiefelCanonicalNoChristoffel(*shape, metric="canonical")
    off = wrong.ehess_to_rhess(x, fn.egrad(x), fn.ehess(x, u), u) - reference
    assert np.max(np.abs(off)) > 1e-3
    run("symmetric", m, seed)
    run("taylor", m, seed)


# ------------------------------------------------------------- the checks can fail
class SphereWithoutCurvature(Sphere):
    """The projected Euclidean Hessian alone: self-adjoint, but the Weingarten term is missing."""

    def _ehess_to_rhess(self, x, g, h, u):
        return self._to_tangent(x, h)


class SphereNotSelfAdjoint(Sphere):
    """The right Hessian plus a rank-one term <u, e_0> P_x(e_1) that is not self-adjoint."""

    def _ehess_to_rhess(self, x, g, h, u):
        e0, e1 = np.eye(self.n)[0], np.eye(self.n)[1]
        return super()._ehess_to_rhess(x, g, h, u) + 1e-2 * (u @ e0) * self._to_tangent(x, e1)


class SimplexEmbedded(Simplex):
    """The Fisher-Rao Hessian without the Christoffel term: P_p(p * h) only."""

    def _ehess_to_rhess(self, x, g, h, u):
        return self._egrad_to_rgrad(x, h)


class GrassmannTextbook(Grassmann):
    """P_X(h) - U X^T g without the symmetric part: right for functions of the subspace only."""

    def _ehess_to_rhess(self, x, g, h, u):
        return self._to_tangent(x, h) - u @ (x.T @ g)


class StiefelCanonicalNoChristoffel(Stiefel):
    """The canonical gradient map of h alone, h - X h^T X: self-adjoint, no connection term."""

    def _ehess_to_rhess(self, x, g, h, u):
        return self._egrad_to_rgrad(x, h)


class StiefelCanonicalEmbeddedHessian(Stiefel):
    """The embedded metric's Hessian with the canonical metric: wrong, and not self-adjoint."""

    def _ehess_to_rhess(self, x, g, h, u):
        return Stiefel(*self.point_shape).ehess_to_rhess(x, g, h, u)


def run(check, manifold, seed, *, rotation_invariant=False):
    x, u, v, fn = frame(manifold, seed, rotation_invariant=rotation_invariant)
    if check == "symmetric":
        args = (fn.egrad(x), fn.ehess(x, u), fn.ehess(x, v), TOL)
        checks.check_ehess_to_rhess_symmetric(manifold, x, u, v, *args)
    elif check == "taylor":
        checks.check_ehess_to_rhess_taylor(manifold, x, u, fn)
    else:
        checks.check_ehess_to_rhess_gradient(manifold, x, u, fn)


@pytest.mark.parametrize(
    ("wrong", "right", "failing", "passing"),
    [
        (SphereWithoutCurvature(5), Sphere(5), ["taylor", "gradient"], ["symmetric"]),
        (SphereNotSelfAdjoint(5), Sphere(5), ["symmetric", "gradient"], []),
        (SimplexEmbedded(5, 30), Simplex(5, 30), ["taylor", "gradient"], ["symmetric"]),
        (
            StiefelCanonicalNoChristoffel(6, 2, metric="canonical"),
            Stiefel(6, 2, metric="canonical"),
            ["taylor"],
            ["symmetric"],
        ),
        (
            StiefelCanonicalEmbeddedHessian(6, 2, metric="canonical"),
            Stiefel(6, 2, metric="canonical"),
            ["symmetric", "taylor"],
            [],
        ),
    ],
    ids=[
        "sphere-no-curvature",
        "sphere-not-self-adjoint",
        "simplex-no-christoffel",
        "stiefel-canonical-no-christoffel",
        "stiefel-canonical-embedded-hessian",
    ],
)
@pytest.mark.parametrize("seed", SEEDS)
def test_the_kits_checks_fail_on_a_wrong_hessian(wrong, right, failing, passing, seed):
    for check in failing:
        run(check, right, seed)  # the manifold's own Hessian passes
        with pytest.raises(AssertionError, match="ehess_to_rhess|Hess"):
            run(check, wrong, seed)
    for check in passing:  # what each check cannot see
        run(check, wrong, seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_grassmann_needs_the_symmetric_part_for_functions_of_the_representative(seed):
    """For f(XQ) != f(X), X^T grad is not symmetric and P_X(h) - U X^T g is not self-adjoint;
    riemfl's sym(X^T g) is, and it is the second derivative of f along exp (the kit's Taylor
    check passes for any f). For a function of the subspace both agree."""
    wrong, right = GrassmannTextbook(6, 2), Grassmann(6, 2)
    with pytest.raises(AssertionError, match="self-adjoint"):
        run("symmetric", wrong, seed)
    run("symmetric", right, seed)
    run("taylor", right, seed)
    x, u, _, fn = frame(right, seed, rotation_invariant=True)
    g, h = fn.egrad(x), fn.ehess(x, u)
    np.testing.assert_allclose(
        wrong.ehess_to_rhess(x, g, h, u), right.ehess_to_rhess(x, g, h, u), atol=1e-12
    )

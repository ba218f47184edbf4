"""The conformance kit on every manifold riemfl ships (numpy/torch, float64/float32)."""

import numpy as np
import pytest

from riemfl import Euclidean, Grassmann, Lorentz, Product, Sphere, Stiefel
from riemfl.manifolds import (
    SPD,
    BirkhoffPolytope,
    Elliptope,
    FixedRank,
    Oblique,
    PoincareBall,
    Positive,
    PSDFixedRank,
    Simplex,
    SkewSymmetric,
    SpecialOrthogonal,
    Symmetric,
)
from riemfl.manifolds.poincare import conformal_sigma
from riemfl.testing import Config, ManifoldTests, checks
from riemfl.testing import strategies as rst

#: a further variant of a family: the full run checks it, the quick tier (-m 'not slow') keeps
#: one class per family
VARIANT = pytest.mark.slow
#: the backends and dtypes of a variant (its family's main class runs all four)
VARIANT_CONFIGS = (Config("numpy", "float64"), Config("torch", "float32"))


class TestEuclidean(ManifoldTests):
    manifold = Euclidean(4, 2)


class TestSphere(ManifoldTests):
    manifold = Sphere(5)


class TestStiefelPolar(ManifoldTests):
    manifold = Stiefel(6, 3)


class TestStiefelQR(ManifoldTests):
    pytestmark = VARIANT
    configs = VARIANT_CONFIGS
    manifold = Stiefel(5, 2, retraction="qr")


class TestStiefelColumn(ManifoldTests):
    pytestmark = VARIANT
    configs = VARIANT_CONFIGS
    manifold = Stiefel(4, 1)


class TestStiefelCanonical(ManifoldTests):
    """The canonical metric: its geodesics are not those of the ambient space, and the
    projection transport is not its connection (test_stiefel_canonical.py checks exp against
    the geodesic equation, test_hessians.py the Hessian against the canonical covariant
    derivative)."""

    pytestmark = VARIANT
    configs = VARIANT_CONFIGS
    manifold = Stiefel(5, 2, metric="canonical")

    def test_exp_second_order(self):
        pytest.skip(
            "the kit's check (tangential part of Exp_x(tu) - x - tu is O(t^3)) holds for metrics "
            "induced by the ambient space; a canonical geodesic has the tangential acceleration "
            "(I - XX^T) U X^T U. test_stiefel_canonical.py checks exp against the geodesic "
            "equation instead"
        )

    def test_ehess_to_rhess_finite_differences(self):
        pytest.skip(
            "without parallel transport the kit differentiates the gradient transported by "
            "projection, which is the connection of the embedded metric, not of the canonical "
            "one; test_hessians.py differentiates the gradient along exp and adds the canonical "
            "Christoffel function instead"
        )


class TestGrassmann(ManifoldTests):
    manifold = Grassmann(6, 2)

    def hessian_function(self, rng):
        # the Hessian of a quotient is that of a function of the subspace: f(XQ) = f(X)
        return checks.quadratic_function(self.manifold.point_shape, rng, rotation_invariant=True)


class TestLorentz(ManifoldTests):
    manifold = Lorentz(3)


class TestLorentzCurved(ManifoldTests):
    pytestmark = VARIANT
    configs = VARIANT_CONFIGS
    manifold = Lorentz(2, beta=2.5)


class TestProduct(ManifoldTests):
    manifold = Product(Sphere(3), Stiefel(4, 2), Lorentz(2))


class TestProductEveryFactor(ManifoldTests):
    pytestmark = VARIANT
    configs = VARIANT_CONFIGS
    """Every kind of factor in one product (flat, curved, quotient, fixed rank, Fisher-Rao), so
    that the kit's broadcasting checks (a batch of points against single arguments) run through
    each factor's maps. Simplex's exp domain bounds the tangent norms (see TestSimplex)."""

    manifold = Product(
        Euclidean(3), Sphere(3), Grassmann(4, 1), FixedRank(3, 3, 1), Simplex(3, concentration=30)
    )
    max_tangent_norm = 0.3
    boundary_exempt = {
        **{
            method: "each factor's is defined at its boundary (see OpenSet and TestSimplex)"
            for method in ("to_tangent", "transport")
        },
        "project": "the kit draws no ambient points for it: FixedRank has no uniform reach",
    }

    def boundary_points(self, rng):
        """Points whose Simplex component has a zero (on the boundary) or a negative component
        (beyond it), the other components valid: the product names the component."""
        m = self.manifold
        *parts, p = m.split(m.random_point(2, rng=rng))
        p[0, 1], p[1, -1] = 0.0, -0.1
        return list(m.pack(*parts, p / p.sum(axis=-1, keepdims=True)))

    # The product has no exp (FixedRank) and no parallel transport, so the two Hessian checks
    # along curves would use its retraction and transport, which are first order and not the
    # connection on the Simplex factor; each factor passes them alone (TestSphere, TestGrassmann,
    # TestFixedRank, TestSimplex, TestEuclidean), and TestProduct checks them through a product.
    _NO_CURVE = (
        "no second-order curve and no connection-compatible transport on this product: "
        "FixedRank has no exp and Simplex's retraction (entropic) and transport (identity) "
        "are first order; the factors and TestProduct run this check"
    )

    def test_ehess_to_rhess_second_order(self):
        pytest.skip(self._NO_CURVE)

    def test_ehess_to_rhess_finite_differences(self):
        pytest.skip(self._NO_CURVE)


class LocalReach:
    """For manifolds with a per-point reach only (FixedRank, Simplex): no uniform constant, so
    the kit skips its tube tests (saying why; test_fixedrank.py and test_simplex.py run those
    checks inside local_reach(x)), and the projection's batch, backend, autograd
    and type tests draw their ambient points inside the per-point radius instead."""

    def method_args(self, method, seed):
        if method != "project":
            return super().method_args(method, seed)
        m, rng = self.manifold, np.random.default_rng(seed)
        x = m.random_point(self.batch_size, rng=rng)
        rho = np.reshape(m.local_reach(x), (self.batch_size,) + (1,) * m.ndim)
        return [x + 0.4 * rho * rst.unit_ambient(m, (self.batch_size,), rng)], ["ambient"]


class OpenSet:
    """For manifolds that are open sets whose metric blows up at the boundary: the kit's
    ``test_boundary_points`` feeds every map the points of ``boundary_points``, finite points
    on or beyond the boundary, which each map must refuse with ``NotOnManifoldError``.
    ``to_tangent`` is the identity or a projection that does not read the point's distance to
    the boundary, so it is defined there."""

    boundary_exempt = {
        "to_tangent": (
            "the tangent projection does not read what blows up at the boundary (the identity "
            "of an open set, or a projection onto a fixed subspace)"
        )
    }


class LowerRank:
    """For the manifolds of matrices (or factors) of a fixed rank: points of lower rank, on
    their boundary, which every map that reads the tangent space (or the horizontal space) of
    the point refuses. The embedded metric and the retractions through X + U do not read the
    rank of the point."""

    boundary_exempt = {
        "inner": "the embedded (Frobenius) metric does not depend on the point",
        "norm": "the embedded (Frobenius) metric does not depend on the point",
        "retract": "a projection of X + U: it reads the point only through X + U",
        "transport:x": "the projection onto the tangent space at y does not read x",
    }

    def lower_rank(self, rng, shape, rank):
        """Two exactly rank-deficient matrices (rank - 1), also in float32: one with rank - 1
        nonzero entries in distinct rows and columns, and an integer product A B^T."""
        m, n = shape
        sparse = np.zeros(shape)
        for j, (a, b) in enumerate(zip(rng.permutation(m), rng.permutation(n), strict=False)):
            if j < rank - 1:
                sparse[a, b] = j + 1.0
        a = rng.integers(-3, 4, size=(m, rank - 1)).astype(np.float64)
        b = rng.integers(-3, 4, size=(n, rank - 1)).astype(np.float64)
        return [sparse, a @ b.T]


class TestFixedRank(LowerRank, LocalReach, ManifoldTests):
    manifold = FixedRank(5, 4, 2)

    def boundary_points(self, rng):
        m = self.manifold
        return self.lower_rank(rng, m.point_shape, m.r)


class TestFixedRankWideRankOne(TestFixedRank):
    pytestmark = VARIANT
    manifold = FixedRank(3, 6, 1)
    configs = (Config("numpy", "float64"), Config("torch", "float32"))


class TestFixedRankFullRank(TestFixedRank):
    pytestmark = VARIANT
    manifold = FixedRank(4, 3, 3)  # r = min(m, n): the open set of full-rank matrices
    configs = (Config("numpy", "float32"), Config("torch", "float64"))


# exp leaves the open simplex beyond the distance to the boundary, 2 arcsin(sqrt(min p)): the
# kit's points (Dirichlet(30)) have min p > sin(0.15)^2 = 0.022 except with probability < 1e-18,
# so every tangent vector of Fisher norm <= 0.3 it draws has exp inside. C is odd: near the
# barycentre of an even-C simplex the entropic retraction's t^2 term vanishes for
# u = a(1, -1, 1, -1, ...), and the kit's Taylor-slope fit then meets a sign change of the error
# (test_simplex.py checks the exact t^2 term for every C instead).
class TestSimplex(OpenSet, LocalReach, ManifoldTests):
    manifold = Simplex(5, concentration=30)
    max_tangent_norm = 0.3
    boundary_exempt = {
        **OpenSet.boundary_exempt,
        "transport": (
            "the projection u - (sum u) q onto the tangent space {sum u = 0}, which does not read "
            "1/p (and every tangent vector is tangent at every point)"
        ),
    }

    def boundary_points(self, rng):
        """A zero component (on the boundary) and a negative one (beyond it)."""
        p = self.manifold.random_point(2, rng=rng)
        p[0, 1] = 0.0
        p[1, -1] = -0.1
        return list(p / p.sum(axis=-1, keepdims=True))

    def test_exp_second_order(self):
        pytest.skip(
            "the kit's check (tangential part of Exp_x(tu) - x - tu is O(t^3)) holds for metrics "
            "induced by the ambient space; the Fisher-Rao geodesic has the tangential "
            "acceleration -Gamma(u, u) = u^2/(2p) - (p/2)|u|_p^2. test_simplex.py checks exp "
            "against the geodesic equation instead"
        )


class TestSimplexThree(TestSimplex):
    pytestmark = VARIANT
    manifold = Simplex(3, concentration=30)
    configs = (Config("numpy", "float32"), Config("torch", "float64"))


# SO(2) and SO(3) take the closed forms (Rodrigues, the angle), SO(4) and SO(5) the matrix
# exponential and the logarithm through the square root (both parities of n)
class TestSpecialOrthogonal2(ManifoldTests):
    pytestmark = VARIANT
    configs = VARIANT_CONFIGS
    manifold = SpecialOrthogonal(2)


class TestSpecialOrthogonal3(ManifoldTests):
    manifold = SpecialOrthogonal(3)


class TestSpecialOrthogonal4(ManifoldTests):
    pytestmark = VARIANT
    manifold = SpecialOrthogonal(4)
    configs = (Config("numpy", "float64"), Config("torch", "float32"))


class TestSpecialOrthogonal5(ManifoldTests):
    pytestmark = VARIANT
    configs = VARIANT_CONFIGS
    manifold = SpecialOrthogonal(5)


class TestOblique(ManifoldTests):
    manifold = Oblique(5, 3)


class TestObliqueOneColumn(ManifoldTests):
    pytestmark = VARIANT
    manifold = Oblique(3, 1)
    configs = (Config("numpy", "float32"), Config("torch", "float64"))


class TestSymmetric(ManifoldTests):
    manifold = Symmetric(4)


class TestSkewSymmetric(ManifoldTests):
    manifold = SkewSymmetric(4)


class TestPositive(OpenSet, LocalReach, ManifoldTests):
    manifold = Positive(4, 2)

    def boundary_points(self, rng):
        """A zero entry (on the boundary) and a negative one (beyond it)."""
        x = self.manifold.random_point(2, rng=rng)
        x[0].flat[1] = 0.0
        x[1].flat[-1] = -0.5
        return list(x)

    def test_exp_second_order(self):
        pytest.skip(
            "the kit's check (tangential part of Exp_x(tu) - x - tu is O(t^3)) holds for metrics "
            "induced by the ambient space; the log metric's geodesics accelerate, x'' = x'^2/x. "
            "test_positive.py checks exp against that geodesic equation instead"
        )


class TestPositiveVector(TestPositive):
    pytestmark = VARIANT
    manifold = Positive(3)
    configs = (Config("numpy", "float32"), Config("torch", "float64"))


class NotAmbientGeodesics:
    """For metrics not induced by the ambient space (SPD, the Poincare ball): the kit's
    second-order check of exp does not apply; the manifold's own test file checks exp against
    the geodesic equation instead."""

    def test_exp_second_order(self):
        pytest.skip(
            "the kit's check (tangential part of Exp_x(tu) - x - tu is O(t^3)) holds for metrics "
            "induced by the ambient space; these geodesics accelerate in the ambient coordinates "
            "(test_spd.py and test_poincare.py check exp against the geodesic equations)"
        )


class ConeBoundary(OpenSet):
    """A singular matrix (P D^2 P^T, P a permutation, D = diag(0, 1, ...): exactly singular,
    also in float32) and an indefinite one (eigenvalues from 2 down to -1/2 in a random
    basis)."""

    boundary_exempt = {
        **OpenSet.boundary_exempt,
        "transport": "sym(U), the identity of Sym(n): it reads neither X nor Y",
    }

    def boundary_points(self, rng):
        n = self.manifold.n
        root = np.diag(np.arange(n, dtype=np.float64))[rng.permutation(n)]  # P D
        q = np.linalg.qr(rng.standard_normal((n, n)))[0]
        return [root @ root.T, (q * np.linspace(2.0, -0.5, n)) @ q.T]


class TestSPDAffine(ConeBoundary, NotAmbientGeodesics, LocalReach, ManifoldTests):
    manifold = SPD(3)


class TestSPDLogEuclidean(ConeBoundary, NotAmbientGeodesics, LocalReach, ManifoldTests):
    pytestmark = VARIANT
    configs = VARIANT_CONFIGS
    manifold = SPD(3, metric="log-euclidean")


# exp is defined on the tangent ball of radius sqrt(lambda_min(X)) >= sqrt(1/2) for the kit's
# points (eigenvalues in [1/2, 2])
class TestSPDBuresWasserstein(ConeBoundary, NotAmbientGeodesics, LocalReach, ManifoldTests):
    boundary_exempt = OpenSet.boundary_exempt  # its transport reads X - Y and L_Y
    pytestmark = VARIANT
    configs = VARIANT_CONFIGS
    manifold = SPD(3, metric="bures-wasserstein")
    max_tangent_norm = 0.5


class BallBoundary(OpenSet):
    """A point on the sphere c|x|^2 = 1 (to rounding: the first float32 radius with
    c|x|^2 >= 1, so that float32 sees it there too) and one at 1.5 times its radius (beyond)."""

    def boundary_points(self, rng):
        m = self.manifold
        on = np.zeros(m.point_shape, dtype=np.float32)
        on[0] = 1.0 / np.sqrt(m.c)
        while conformal_sigma(on, m.c) > 0:  # the radius rounded inwards: step out an ulp
            on[0] = np.nextafter(on[0], np.float32(np.inf))
        return [on.astype(np.float64), 1.5 / np.sqrt(m.c) * rst.unit_ambient(m, (), rng)]


class TestPoincareBall(BallBoundary, NotAmbientGeodesics, LocalReach, ManifoldTests):
    manifold = PoincareBall(3)


class TestPoincareBallCurved(BallBoundary, NotAmbientGeodesics, LocalReach, ManifoldTests):
    pytestmark = VARIANT
    configs = VARIANT_CONFIGS
    manifold = PoincareBall(2, c=0.7)


class QuotientProjection:
    """For quotients whose ``project`` is the metric projection of the total space (Elliptope):
    the kit's normal-offset check moves x along every direction orthogonal to the horizontal
    space, the vertical ones included, and a vertical offset changes the class; the manifold's
    own test file checks the nearest-point property in the total space instead."""

    def test_projection_nearest_point(self):
        pytest.skip(
            "project is the metric projection of the total space (nearest representative), and "
            "the kit's normal offsets include vertical directions Y Omega, which change the "
            "class; test_elliptope.py checks the nearest point among representatives"
        )


class TestElliptope(LowerRank, QuotientProjection, ManifoldTests):
    manifold = Elliptope(5, 3)
    boundary_exempt = {
        **LowerRank.boundary_exempt,
        "project": (
            "row normalisation, the metric projection of the total space of unit-row factors: "
            "it does not read the rank"
        ),
    }

    def boundary_points(self, rng):
        """Unit rows in the plane of the first two coordinates (rank 2), and rows +-e_1."""
        n = self.manifold.n
        angles = rng.uniform(0.0, 2 * np.pi, size=n)
        plane = np.zeros(self.manifold.point_shape)
        plane[:, 0], plane[:, 1] = np.cos(angles), np.sin(angles)
        line = np.zeros(self.manifold.point_shape)
        line[:, 0] = rng.choice([-1.0, 1.0], size=n)
        return [plane, line]

    def hessian_function(self, rng):
        # the Hessian of a quotient is that of a function of the class: f(YQ) = f(Y)
        return checks.quadratic_function(self.manifold.point_shape, rng, rotation_invariant=True)


class TestPSDFixedRank(LowerRank, LocalReach, ManifoldTests):
    manifold = PSDFixedRank(5, 2)

    def boundary_points(self, rng):
        m = self.manifold
        return self.lower_rank(rng, m.point_shape, m.k)

    def hessian_function(self, rng):
        # the Hessian of a quotient is that of a function of the class: f(YQ) = f(Y)
        return checks.quadratic_function(self.manifold.point_shape, rng, rotation_invariant=True)

    def test_rejects_points_off_manifold(self, config):
        pytest.skip(
            "the total space (full-rank n x k factors) is open: every direction orthogonal to "
            "the horizontal space is vertical and stays on it; test_psd_fixed_rank.py checks "
            "rank-deficient and NaN points and vertical vectors instead"
        )


class TestBirkhoffPolytope(OpenSet, ManifoldTests):
    manifold = BirkhoffPolytope(4)

    def boundary_points(self, rng):
        """(I + P)/2 for a cyclic shift P (zeros off two diagonals: on the boundary), and a
        point moved along P - I until its diagonal is negative (beyond it)."""
        n = self.manifold.n
        shift = np.roll(np.eye(n), 1, axis=1)
        x = self.manifold.random_point(rng=rng)
        return [0.5 * (np.eye(n) + shift), x + (np.max(np.diag(x)) + 0.1) * (shift - np.eye(n))]

    def method_args(self, method, seed):
        """project is Sinkhorn scaling of a positive matrix: draw X * exp(Z / 4), Z Gaussian."""
        if method != "project":
            return super().method_args(method, seed)
        rng = np.random.default_rng(seed)
        x = self.manifold.random_point(self.batch_size, rng=rng)
        return [x * np.exp(0.25 * rng.standard_normal(x.shape))], ["ambient"]

    def test_ehess_to_rhess_second_order(self):
        pytest.skip(
            "no exp, and the retraction Sinkhorn(X exp(U / X)) is first order for the Fisher "
            "metric (covariant acceleration P_X(U^2 / 2X)); test_birkhoff.py checks the Taylor "
            "slope along the second-order curve Sinkhorn((sqrt X + tU / (2 sqrt X))^2)"
        )

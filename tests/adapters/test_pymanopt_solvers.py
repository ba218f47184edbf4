"""pymanopt's own solvers on to_pymanopt's stand-ins: steepest descent, conjugate gradient and
trust regions (with the exact Riemannian Hessian, which every riemfl family has) reach the
minimiser on every family that stands in for a pymanopt class, and on the canonical-metric
Stiefel, which pymanopt lacks.

The problem is the ambient distance to a target point t of M, f(x) = |d|^2 / 2 + |d|^4 / 4 with
d = x - t (gradient (1 + |d|^2) d), minimised at x = t; on the quotients (Grassmann, Elliptope,
PSDFixedRank), where a point is a class {xQ}, it is |xx^T - tt^T|^2 / 2, which is constant on
the classes. The quartic term and the start R_t(0.37 u), for a unit tangent u, keep the line
searches from landing exactly on t (from R_t(0.5 u), backtracking halves the first step, of
length 1, onto t in the flat families), where pymanopt's own classes fail: steepest descent
divides by the zero directional derivative and returns NaN, conjugate gradient raises
ZeroDivisionError. The flat quadratic is tested apart, against pymanopt's own class. Each solver
must stop on its gradient-norm criterion (1e-8) at a point within 1e-6 of t: near a
nondegenerate minimiser the distance is at most the gradient norm over the smallest Hessian
eigenvalue, which is of order 1 for these problems, the conditioning of a random target point
(1e-6 leaves a factor 100). Trust regions' truncated CG divides 0 by 0 when it solves a
subproblem exactly and rejects the NaN step (numpy's warning is silenced).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from riemfl.testing import importorskip

pymanopt = importorskip("pymanopt")

from riemfl.adapters.pymanopt import to_pymanopt  # noqa: E402

from riemfl import manifolds as rm  # noqa: E402

#: one riemfl manifold per pymanopt class it stands in for (and the canonical Stiefel)
FAMILIES: dict[str, Callable[[], rm.Manifold]] = {
    "Euclidean": lambda: rm.Euclidean(3, 2),
    "Sphere": lambda: rm.Sphere(4),
    "Stiefel": lambda: rm.Stiefel(5, 2),
    "Stiefel-canonical": lambda: rm.Stiefel(5, 2, metric="canonical"),
    "Grassmann": lambda: rm.Grassmann(5, 2),
    "SymmetricPositiveDefinite": lambda: rm.SPD(3),
    "SpecialOrthogonalGroup": lambda: rm.SpecialOrthogonal(3),
    "Oblique": lambda: rm.Oblique(4, 3),
    "Positive": lambda: rm.Positive(3, 2),
    "Symmetric": lambda: rm.Symmetric(3),
    "SkewSymmetric": lambda: rm.SkewSymmetric(3),
    "Elliptope": lambda: rm.Elliptope(5, 2),
    "PSDFixedRank": lambda: rm.PSDFixedRank(5, 2),
    "PoincareBall": lambda: rm.PoincareBall(3),
    "FixedRankEmbedded": lambda: rm.FixedRank(5, 4, 2),
    "Product": lambda: rm.Product(rm.Sphere(3), rm.Euclidean(2)),
}
QUOTIENTS = ("Grassmann", "Elliptope", "PSDFixedRank")
SOLVERS = {
    "steepest_descent": lambda: pymanopt.optimizers.SteepestDescent(
        max_iterations=2000, min_gradient_norm=1e-8, verbosity=0
    ),
    "conjugate_gradient": lambda: pymanopt.optimizers.ConjugateGradient(
        max_iterations=2000, min_gradient_norm=1e-8, verbosity=0
    ),
    "trust_regions": lambda: pymanopt.optimizers.TrustRegions(
        max_iterations=200, min_gradient_norm=1e-8, verbosity=0
    ),
}


def problem(family: str) -> tuple[rm.Manifold, np.ndarray, np.ndarray, Callable, Callable]:
    """(manifold, target, start, cost and Euclidean gradient and Hessian, distance to t)."""
    manifold = FAMILIES[family]()
    rng = np.random.default_rng(0)
    target = manifold.random_point(rng=rng)
    u = manifold.random_tangent(target, rng=rng)
    start = manifold.retract(target, 0.37 * u / float(manifold.norm(target, u)))
    if family in QUOTIENTS:
        tt = target @ target.T

        def cost(x):
            d = x @ x.T - tt
            return 0.5 * float(np.sum(d * d))

        def egrad(x):
            return 2.0 * (x @ x.T - tt) @ x

        def ehess(x, v):
            return 2.0 * ((v @ x.T + x @ v.T) @ x + (x @ x.T - tt) @ v)

        def distance(x):
            return float(np.linalg.norm(x @ x.T - tt))
    else:

        def cost(x):
            squared = float(np.sum((x - target) ** 2))
            return 0.5 * squared + 0.25 * squared**2

        def egrad(x):
            d = x - target
            return (1.0 + float(np.sum(d * d))) * d

        def ehess(x, v):
            d = x - target
            return (1.0 + float(np.sum(d * d))) * v + 2.0 * float(np.sum(d * v)) * d

        def distance(x):
            return float(np.linalg.norm(x - target))

    return manifold, target, start, (cost, egrad, ehess), distance


@pytest.mark.parametrize("family", list(FAMILIES))
def test_pymanopt_solvers_converge_on_the_stand_in(family):
    manifold, _, start, (cost, egrad, ehess), distance = problem(family)
    adapter = to_pymanopt(manifold, rng=0)
    decorate = pymanopt.function.numpy(adapter)
    pm_problem = pymanopt.Problem(
        adapter,
        decorate(cost),
        euclidean_gradient=decorate(egrad),
        euclidean_hessian=decorate(ehess),
    )
    for name, make in SOLVERS.items():
        with np.errstate(invalid="ignore"):
            result = make().run(pm_problem, initial_point=start)
        manifold.check_point(result.point)
        assert "min grad norm reached" in result.stopping_criterion, (family, name, result)
        assert distance(result.point) < 1e-6, (family, name, distance(result.point))


@pytest.mark.parametrize("family", ["Euclidean", "Symmetric", "SkewSymmetric"])
def test_trust_regions_on_a_flat_quadratic_as_on_pymanopts_class(family):
    """f(x) = |x - t|^2 / 2 on a flat manifold (Hessian the identity): pymanopt's truncated CG
    solves the subproblem in one step and then divides 0 by 0, evaluates its model at the NaN
    step and rejects it through the NaN cost. Its own classes propagate the NaN; the stand-in
    answers NaN too (it raised NonFiniteError), and trust regions take the same iterations."""
    manifold = FAMILIES[family]()
    theirs = {
        "Euclidean": lambda: pymanopt.manifolds.Euclidean(3, 2),
        "Symmetric": lambda: pymanopt.manifolds.Symmetric(3),
        "SkewSymmetric": lambda: pymanopt.manifolds.SkewSymmetric(3),
    }[family]()
    rng = np.random.default_rng(0)
    target = manifold.random_point(rng=rng)
    start = manifold.retract(target, manifold.random_tangent(target, rng=rng))
    runs = []
    for adapter in (to_pymanopt(manifold, rng=0), theirs):
        decorate = pymanopt.function.numpy(adapter)
        pm_problem = pymanopt.Problem(
            adapter,
            decorate(lambda x: 0.5 * float(np.sum((x - target) ** 2))),
            euclidean_gradient=decorate(lambda x: x - target),
            euclidean_hessian=decorate(lambda x, v: v),
        )
        with np.errstate(invalid="ignore"):
            runs.append(SOLVERS["trust_regions"]().run(pm_problem, initial_point=start))
    ours, reference = runs
    assert np.linalg.norm(ours.point - target) < 1e-6
    assert ours.iterations == reference.iterations

r"""pymanopt <-> riemfl: riemfl manifolds and problems in pymanopt's solvers, and back.

* :func:`to_pymanopt` wraps a riemfl :class:`~riemfl.manifolds.Manifold` as a
  ``pymanopt.manifolds.manifold.Manifold`` (a :class:`PymanoptManifold`);
* :func:`from_pymanopt` wraps a pymanopt manifold as a riemfl manifold (a
  :class:`FromPymanopt`);
* :func:`solve` runs pymanopt's trust regions, steepest descent or conjugate gradient on a riemfl
  problem (a centralised :class:`~riemfl.problems.KPCAProblem` or
  :class:`~riemfl.problems.LRMCProblem`, any :class:`~riemfl.problems.FederatedProblem`, whose
  clients' objectives are summed, or a cost function) and returns a :class:`SolveResult`.

The adapters translate names and conventions only; every map is computed by the wrapped library.
pymanopt works on single numpy float64 points; riemfl's batch dimensions are looped over by
:class:`FromPymanopt`. pymanopt is imported on first use; without it the functions raise
:class:`~riemfl.errors.MissingDependencyError` naming the ``pymanopt`` extra.

Name map (pymanopt -> riemfl)
-----------------------------
:func:`to_pymanopt` has pymanopt 2.2.1's whole public manifold API, with pymanopt's parameter
names and defaults (``tests/adapters/test_pymanopt_peer_api.py`` compares names, signatures and
values with 15 pymanopt classes), so a riemfl manifold can replace pymanopt's class in pymanopt
code unchanged.

============================================  ===============================================
pymanopt                                      riemfl
============================================  ===============================================
``inner_product(x, u, v)``, ``norm``          ``inner(x, u, v)``, ``norm(x, u)`` (numpy float64
                                              scalars, as pymanopt's; also ``dist``; NaN for a
                                              non-finite tangent vector)
``projection(x, a)``, ``to_tangent_space``    ``to_tangent(x, a)``
``euclidean_to_riemannian_gradient``          ``egrad_to_rgrad``
``euclidean_to_riemannian_hessian``           ``ehess_to_rhess``
``weingarten(x, u, n)``                       ``ehess_to_rhess(x, n, 0, u)`` for metrics induced
                                              by the embedding, else ``NotImplementedError``
``retraction``, ``exp``, ``log``, ``dist``    ``retract``, ``exp``, ``log``, ``dist``
                                              (``retraction`` and ``exp`` of a non-finite
                                              tangent vector: a point of NaN, as pymanopt's
                                              maps give and its trust regions expect)
``transport(x, y, u)``                        ``transport(x, y, u)``
``pair_mean(x, y)``                           ``exp(x, log(x, y) / 2)``, the geodesic midpoint;
                                              without exp/log ``retract(x,
                                              inverse_retract(x, y) / 2)``
``embedding(x, u)``                           the identity (riemfl's tangents are ambient)
``random_point()``                            ``random_point(rng=...)`` (the adapter's generator)
``random_tangent_vector(x)``                  ``random_tangent(x)`` scaled to unit norm
``zero_vector(x)``                            ``zero_tangent(x)``
``typical_dist``                              pymanopt's value for the matching class
                                              (:data:`~riemfl.adapters._pymanopt_peer.TYPICAL_DIST`:
                                              Euclidean, Symmetric, SkewSymmetric, Positive, SPD
                                              sqrt(dim); Sphere pi; Oblique pi sqrt(m); Stiefel,
                                              Grassmann sqrt(p); SO(n) pi sqrt(n); PSDFixedRank
                                              10 + k; Elliptope 10 k; PoincareBall dim / 8;
                                              FixedRank dim; Product the root sum of squares);
                                              other families: ``injectivity_radius``, else
                                              ``diameter``, if finite
``dim``, ``point_layout``, ``num_values``     ``dim``; 1, 1 (one array a point)
``PoincareBall.conformal_factor``,            :math:`2/(1 - c\|x\|^2)`, ``mobius_add``
``mobius_addition``                           (:class:`PymanoptPoincareBall`)
``Product.manifolds``                         the factors, as adapters (:class:`PymanoptProduct`)
============================================  ===============================================

Deliberate exceptions to the peer API (pinned in ``test_pymanopt_peer_api.py``):

* riemfl's ``Product`` point is one flat vector (``point_layout`` 1), pymanopt's a list of the
  factors' arrays (``point_layout`` a tuple): cost functions get one argument, which
  ``Product.split`` unpacks;
* riemfl's ``FixedRank`` points and tangent vectors are ambient m x n matrices, pymanopt's
  ``FixedRankEmbedded`` uses (U, S, V^T) and (Up, M, Vp) triples: the values are not compared;
* riemfl's ``SpecialOrthogonal`` tangent vectors are ambient, :math:`U = X\Omega`; pymanopt's
  ``SpecialOrthogonalGroup`` uses :math:`\Omega` itself (``embedding`` then maps to
  :math:`X\Omega`). :func:`from_pymanopt` translates; :func:`to_pymanopt` keeps riemfl's.
* ``typical_dist`` is pymanopt's scale (it sets trust regions' maximal radius), not a geometric
  constant: Stiefel's :math:`\sqrt p` is neither its diameter :math:`2\sqrt p` nor its
  injectivity radius :math:`\pi`. riemfl's SPD gets :math:`\sqrt{n(n+1)/2}` for each of its
  three metrics, the PoincareBall dim / 8 for every curvature.

Differences between the libraries (measured in ``tests/adapters``)
-------------------------------------------------------------------
* pymanopt's ``random_tangent_vector`` returns unit vectors; riemfl's ``random_tangent`` a
  projected Gaussian: the adapter normalises. pymanopt samples from numpy's *global* random
  state; riemfl never does: :class:`PymanoptManifold` draws from its own generator and
  :class:`FromPymanopt` seeds and restores the global state around pymanopt's sampler.
* pymanopt's trust regions need :math:`\operatorname{Hess} f(x)[u]`. Where the riemfl manifold
  has ``ehess_to_rhess`` and a Euclidean Hessian-vector product exists (pymanopt's autograd or
  torch differentiation, or ``ehess=``), :func:`solve` gives pymanopt the exact Riemannian
  Hessian; otherwise it supplies the finite-difference approximation of the Riemannian gradient
  (Boumal 2015, "Riemannian trust regions with finite-difference Hessian approximations are
  globally convergent"). pymanopt 2.2.1's ``TrustRegions`` mentions such an approximation in a
  comment but does not implement it: a problem without a Hessian fails there.
* pymanopt's ``Stiefel`` uses the QR retraction by default, riemfl's the polar retraction
  (second order: ``check_retraction`` measures slope 3 instead of 2); pymanopt's ``Stiefel``
  has no ``log``/``dist``; riemfl's has (iterative).
* ``arccos`` of a number near 1 loses half the digits: pymanopt's ``Sphere.dist``/``log``,
  ``Oblique.dist``/``log``, ``Grassmann.dist`` (principal angles) and ``PoincareBall.dist``
  (``arccosh``) are off by about 1 % at distance :math:`10^{-7}` (riemfl's ``atan2`` and
  ``arcsinh`` forms are accurate to rounding).
* Retractions: pymanopt's ``Positive`` retracts by the second-order :math:`X + U +
  U^2/(2X)`, riemfl's by exp, :math:`Xe^{U/X}`. (Both SPDs use :math:`X + U + \tfrac12
  UX^{-1}U`.) Where pymanopt's retraction is not its exp (SPD, Positive, Stiefel, SO(n), ...),
  its ``log`` is no inverse retraction.
* Transports: pymanopt's SPD transports by the identity (riemfl's SPD ``transport`` too; its
  ``parallel_transport`` is another map), its SO(n) keeps :math:`\Omega` (a left translation,
  :math:`X\Omega \mapsto Y\Omega`) where riemfl's projects onto :math:`T_Y`, its ``Positive``
  uses the identity unless built with ``use_parallel_transport=True`` (then riemfl's parallel
  transport). pymanopt's ``PoincareBall`` has no transport.
* Quotients: pymanopt's ``Grassmann`` Hessian uses :math:`X^\top G`, riemfl's its symmetric
  part; pymanopt's ``PSDFixedRank.euclidean_to_riemannian_gradient`` returns G as is, riemfl
  projects it horizontally. The two agree for costs with :math:`f(XQ) = f(X)` (tested), where
  :math:`X^\top G` is symmetric and G horizontal.
* pymanopt 2.2.1's ``Elliptope.projection`` is not the horizontal projection: after it
  :math:`Y^\top U` is not symmetric, and applying it twice changes the result (its gradient,
  Hessian and transport go through it); riemfl's ``Elliptope.to_tangent`` is both. pymanopt's
  ``Elliptope.exp`` is its retraction; riemfl's Elliptope has no exp.
* pymanopt's ``Symmetric.to_tangent_space`` and ``SkewSymmetric.to_tangent_space`` are the
  identity (its Euclidean base class's alias, made before they overrode ``projection``);
  riemfl's project.
* ``pair_mean``: pymanopt's ``Stiefel``, ``Grassmann``, ``SymmetricPositiveDefinite``,
  ``Positive`` and ``PSDFixedRank`` have none; riemfl's is the geodesic midpoint there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from riemfl.adapters._lazy import require
from riemfl.adapters._pymanopt_from import FromPymanopt
from riemfl.adapters._pymanopt_manifold import (
    LAZY,
    PYMANOPT_MANIFOLD,
    SPECIFIC,
    require_pymanopt,
)
from riemfl.adapters._pymanopt_solve import (
    BACKENDS,
    HESSIANS,
    OPTIMIZERS,
    SolveResult,
    cost_and_gradient,
    exact_hessian,
    finite_difference_hessian,
)

from riemfl.backend import RandomState, as_generator
from riemfl.errors import ParameterError
from riemfl.manifolds.base import Manifold

# PymanoptManifold is built on first use (module __getattr__ below)
__all__ = [  # noqa: F822
    "to_pymanopt",
    "from_pymanopt",
    "solve",
    "SolveResult",
    "PymanoptManifold",
    "PymanoptPoincareBall",
    "PymanoptProduct",
    "FromPymanopt",
    "finite_difference_hessian",
    "OPTIMIZERS",
    "BACKENDS",
    "HESSIANS",
]


def __getattr__(name: str) -> Any:
    # PEP 562: the pymanopt subclasses exist once pymanopt is importable; pickle finds them here
    if name in LAZY:
        return LAZY[name].get()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def to_pymanopt(manifold: Manifold, *, rng: RandomState = None) -> Any:
    """A ``pymanopt.manifolds.manifold.Manifold`` backed by a riemfl manifold.

    Parameters
    ----------
    manifold : riemfl.manifolds.Manifold
        Any riemfl manifold. ``to_pymanopt(from_pymanopt(m))`` is ``m`` itself.
    rng : None, int or numpy.random.Generator
        Source of ``random_point`` and ``random_tangent_vector`` (pymanopt's own manifolds use
        numpy's global state; this adapter does not).

    Returns
    -------
    PymanoptManifold

    Raises
    ------
    MissingDependencyError
        pymanopt is not installed (``pip install "riemfl[pymanopt]"``).
    ParameterError
        ``manifold`` is not a riemfl manifold.
    """
    require_pymanopt("riemfl.adapters.pymanopt.to_pymanopt")
    cls = PYMANOPT_MANIFOLD.get()
    if isinstance(manifold, FromPymanopt):
        return manifold.wrapped
    if not isinstance(manifold, Manifold):
        raise ParameterError(
            f"to_pymanopt needs a riemfl Manifold, got {type(manifold).__name__} "
            "(for a pymanopt manifold, use it directly or wrap it with from_pymanopt)"
        )
    for family, specific in SPECIFIC:
        if isinstance(manifold, family):
            cls = specific.get()
    return cls(manifold, rng)


# -------------------------------------------------------------------------------- from_pymanopt
def from_pymanopt(
    manifold: Any,
    *,
    point_shape: Iterable[int] | None = None,
    exact: Iterable[str] | None = None,
    reach: float | None = None,
    diameter: float | None = None,
    injectivity_radius: float | None = None,
) -> Manifold:
    """A riemfl manifold backed by a pymanopt manifold.

    Parameters
    ----------
    manifold : pymanopt.manifolds.manifold.Manifold
        A manifold whose points are single arrays (``point_layout == 1``).
        ``to_pymanopt`` objects are unwrapped: ``from_pymanopt(to_pymanopt(m))`` is ``m``.
    point_shape : tuple of int, optional
        Default: the shape of a sample point.
    exact : iterable of str, optional
        The maps among :data:`~riemfl.adapters._lazy.EXACT_MAPS` (except ``"project"``) that
        pymanopt computes exactly in riemfl's sense. Default: riemfl's table of pymanopt's
        classes, :data:`~riemfl.adapters._pymanopt_known.KNOWN` (measured against riemfl's
        maps: e.g. Euclidean, Symmetric, SkewSymmetric all but project; SPD, SO(n), Positive,
        PSDFixedRank exp, log and dist; Sphere, Stiefel, Oblique exp; Elliptope nothing),
        nothing for other classes.
    reach, diameter, injectivity_radius : float, optional
        riemfl's constants (unsupported when not given).

    Returns
    -------
    FromPymanopt

    Raises
    ------
    MissingDependencyError
        pymanopt is not installed.
    ParameterError
        Not a pymanopt manifold, a multi-array point layout, or a bad ``exact``.
    """
    require_pymanopt("riemfl.adapters.pymanopt.from_pymanopt")
    if isinstance(manifold, PYMANOPT_MANIFOLD.get()):
        return manifold.riemfl_manifold
    constants = {
        "reach": reach,
        "diameter": diameter,
        "injectivity_radius": injectivity_radius,
    }
    return FromPymanopt(manifold, point_shape, exact, constants)


# ------------------------------------------------------------------------------------- solve
def solve(
    problem: Any = None,
    optimizer: str = "trust_regions",
    backend: str = "numpy",
    *,
    manifold: Manifold | None = None,
    cost: Callable[[Any], Any] | None = None,
    egrad: Callable[[Any], Any] | None = None,
    ehess: Callable[[Any, Any], Any] | None = None,
    x0: np.ndarray | None = None,
    hessian: str = "auto",
    rng: RandomState = 0,
    verbosity: int = 0,
    **options: Any,
) -> SolveResult:
    r"""Run a pymanopt optimizer on a riemfl problem.

    The objective is the problem's global one, :math:`f(x) = \frac1n\sum_i f_i(x)` for a
    federated problem (its clients' objectives summed and divided by n, so ``cost`` compares with
    ``problem.optimum``), or ``cost`` itself.

    Parameters
    ----------
    problem : FederatedProblem, optional
        E.g. :class:`~riemfl.problems.KPCAProblem` or :class:`~riemfl.problems.LRMCProblem`;
        anything with ``manifold``, ``loss`` (or ``f``) and ``egrad``. Omit it and give
        ``manifold`` and ``cost`` instead.
    optimizer : {"trust_regions", "steepest_descent", "conjugate_gradient"}
        pymanopt's ``TrustRegions``, ``SteepestDescent`` or ``ConjugateGradient``.
    backend : {"numpy", "autograd", "torch"}
        ``"numpy"``: the gradient is the problem's ``egrad`` (or ``egrad=``). ``"autograd"`` /
        ``"torch"``: pymanopt differentiates the objective, which must then be written for that
        library: ``cost=`` or a :class:`~riemfl.problems.FunctionProblem` built with
        ``differentiation`` of the same name. (pymanopt's own term: its backends are the
        decorators of ``pymanopt.function``.)
    manifold : Manifold, optional
        The manifold (default ``problem.manifold``).
    cost, egrad : callable, optional
        ``cost(x)`` and its Euclidean gradient, instead of ``problem``.
    ehess : callable, optional
        ``ehess(x, u)``, the Euclidean Hessian-vector product :math:`\nabla^2 f(x)[u]`, for
        ``backend="numpy"`` (the default: a problem's ``ehess`` where it has one); the
        autograd and torch backends differentiate twice themselves.
    x0 : numpy.ndarray, optional
        Initial point (default ``manifold.random_point(rng=rng)``).
    hessian : {"auto", "exact", "finite_difference"}
        For trust regions. ``"exact"``: the Riemannian Hessian, the manifold's
        ``ehess_to_rhess`` applied to the Euclidean Hessian-vector product (of the autograd or
        torch backend, or ``ehess``); ``"finite_difference"``:
        :func:`finite_difference_hessian`; ``"auto"``: exact where the manifold has
        ``ehess_to_rhess`` and a Euclidean Hessian exists, else finite differences.
    rng : None, int or numpy.random.Generator
        Source of the initial point and of the adapter's random draws.
    verbosity : int
        pymanopt's verbosity (0: silent).
    **options
        Passed to the pymanopt optimizer (``max_iterations``, ``min_gradient_norm``, ...).

    Returns
    -------
    SolveResult

    Raises
    ------
    ParameterError
        Unknown optimizer, backend or hessian mode; no objective; an objective that the backend
        cannot differentiate; ``hessian="exact"`` where there is no exact Hessian.
    MissingDependencyError
        pymanopt (or the backend's library) is not installed.
    """
    pymanopt = require_pymanopt("riemfl.adapters.pymanopt.solve")
    if optimizer not in OPTIMIZERS:
        raise ParameterError(
            f"solve: optimizer must be one of {sorted(OPTIMIZERS)}, got {optimizer!r}"
        )
    if backend not in BACKENDS:
        raise ParameterError(f"solve: backend must be one of {sorted(BACKENDS)}, got {backend!r}")
    if hessian not in HESSIANS:
        raise ParameterError(f"solve: hessian must be one of {HESSIANS}, got {hessian!r}")
    if backend != "numpy":
        require(backend, backend, f"solve(backend={backend!r})")
    manifold = manifold if manifold is not None else getattr(problem, "manifold", None)
    if not isinstance(manifold, Manifold):
        raise ParameterError(
            "solve: no riemfl manifold; pass a problem with a .manifold or manifold="
        )
    f, grad = cost_and_gradient(problem, backend, cost, egrad)
    rng = as_generator(rng)
    target = to_pymanopt(manifold, rng=rng)
    objective = getattr(pymanopt.function, BACKENDS[backend])(target)(_positional(f))
    kwargs: dict[str, Any] = {}
    if grad is not None:
        kwargs["euclidean_gradient"] = pymanopt.function.numpy(target)(_positional(grad))
    mode = "none"
    if optimizer == "trust_regions":
        ehess = exact_hessian(problem, backend, ehess, manifold, hessian)
        mode = "finite_difference" if ehess is None else "exact"
        if callable(ehess):
            kwargs["euclidean_hessian"] = pymanopt.function.numpy(target)(_positional(ehess))
        if mode == "finite_difference":
            egrad_of = grad if grad is not None else objective.get_gradient_operator()

            def rgrad(x):
                return manifold.egrad_to_rgrad(x, np.asarray(egrad_of(x), dtype=np.float64))

            hess = finite_difference_hessian(manifold, rgrad)
            kwargs["riemannian_hessian"] = pymanopt.function.numpy(target)(hess)
    pm_problem = pymanopt.Problem(target, objective, **kwargs)
    solver = getattr(pymanopt.optimizers, OPTIMIZERS[optimizer])(verbosity=verbosity, **options)
    start = manifold.random_point(rng=rng) if x0 is None else np.asarray(x0, dtype=np.float64)
    manifold.check_point(start)
    result = solver.run(pm_problem, initial_point=start)
    return SolveResult(
        point=np.asarray(result.point),
        cost=float(result.cost),
        iterations=int(result.iterations),
        gradient_norm=None if result.gradient_norm is None else float(result.gradient_norm),
        stopping_criterion=str(result.stopping_criterion),
        hessian=mode,
        pymanopt_result=result,
    )


def _positional(fn: Callable[..., Any]) -> Callable[..., Any]:
    """pymanopt's decorators accept only functions with plain positional arguments."""

    def wrapped(*args):
        return fn(*args)

    return wrapped

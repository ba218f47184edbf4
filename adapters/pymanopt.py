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
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend import Array, RandomState, as_generator, is_torch, to_numpy
from ..errors import ParameterError
from ..manifolds import PoincareBall, Product
from ..manifolds.base import MAP_ROLES, Manifold
from ._lazy import ForeignManifold, LazyClass, require
from ._pymanopt_known import known_for
from ._pymanopt_peer import pair_mean as midpoint
from ._pymanopt_peer import typical_dist as pymanopt_typical_dist
from ._pymanopt_peer import weingarten as weingarten_map

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

#: pymanopt optimizers :func:`solve` runs, by riemfl name
OPTIMIZERS = {
    "trust_regions": "TrustRegions",
    "steepest_descent": "SteepestDescent",
    "conjugate_gradient": "ConjugateGradient",
}
#: riemfl backend name -> pymanopt's decorator in ``pymanopt.function``
BACKENDS = {"numpy": "numpy", "autograd": "autograd", "torch": "pytorch"}
#: how :func:`solve` gives trust regions Hessian-vector products
HESSIANS = ("auto", "exact", "finite_difference")

_NO_PROJECTION = "pymanopt manifolds have no metric projection onto M"
#: pymanopt's classes whose tangent vectors are Lie-algebra elements Omega (U = X Omega)
_LIE_GROUPS = ("SpecialOrthogonalGroup", "UnitaryGroup")
#: riemfl map -> (positions of tangent-vector arguments, position of the point whose tangent
#: space holds the result, or None for a point or a number), for the Lie-algebra translation
_LIE_ARGUMENTS: dict[str, tuple[tuple[int, ...], int | None]] = {
    "to_tangent": ((), 0),
    "egrad_to_rgrad": ((), 0),
    "inner": ((1, 2), None),
    "retract": ((1,), None),
    "exp": ((1,), None),
    "log": ((), 0),
    "inverse_retract": ((), 0),
    "dist": ((), None),
    "transport": ((2,), 1),
    "parallel_transport": ((2,), 1),
}


def _pymanopt(feature: str):
    return require("pymanopt", "pymanopt", feature)


def _float(a: Any) -> np.float64:
    """A numpy float64 scalar, as pymanopt's scalar maps return (numpy scalars or 0-d arrays):
    its solvers divide by them, and a numpy zero gives inf or NaN with a warning where a Python
    float raises ``ZeroDivisionError`` (steepest descent's initial step at a zero gradient)."""
    return np.float64(np.asarray(a))


def _propagating(fn: Callable[..., Any], point: Any, *vectors: Any, scalar: bool = False) -> Any:
    """``fn(point, *vectors)``, or NaN (a NaN scalar, else a point of NaN) where a tangent
    vector has a non-finite entry.

    pymanopt's own maps propagate NaN, and its solvers rely on it: trust regions' truncated CG
    divides 0 by 0 once it has solved the subproblem exactly (an identity Hessian: a quadratic
    cost on a flat manifold), then evaluates the model at the NaN step (``inner_product``) and
    rejects the proposal (``retraction``) through its NaN cost. riemfl's maps refuse non-finite
    input (``NonFiniteError``), so the adapter answers NaN itself."""
    if all(np.all(np.isfinite(v)) for v in vectors):
        out = fn(point, *vectors)
        return _float(out) if scalar else out
    return np.float64(np.nan) if scalar else np.full(np.shape(point), np.nan)


# ---------------------------------------------------------------------------------- to_pymanopt
def _build_pymanopt_manifold() -> type:
    _pymanopt("riemfl.adapters.pymanopt.PymanoptManifold")
    from pymanopt.manifolds.manifold import Manifold as PymanoptBase

    class PymanoptManifold(PymanoptBase):
        r"""A riemfl manifold behind pymanopt's ``Manifold`` API (made by :func:`to_pymanopt`).

        Points and tangent vectors are numpy arrays of riemfl's ``point_shape``. Random draws
        come from the generator given to :func:`to_pymanopt` (``self.rng``), never from numpy's
        global state. ``euclidean_to_riemannian_hessian`` is the riemfl manifold's
        ``ehess_to_rhess`` (every riemfl manifold family has it; a manifold without it raises
        ``NotImplementedError`` with its reason, and :func:`solve` then uses finite differences
        of the gradient). As pymanopt's own classes, ``inner_product``, ``norm`` and ``dist``
        return numpy float64 scalars, and ``inner_product``, ``norm``, ``retraction`` and
        ``exp`` of a non-finite tangent vector return NaN (a point of NaN; riemfl's maps would
        raise ``NonFiniteError``): pymanopt's solvers divide by those scalars and reject NaN
        proposals.
        """

        def __init__(self, manifold: Manifold, rng: RandomState = None) -> None:
            super().__init__(f"riemfl.{manifold.name}", int(manifold.dim))
            self.riemfl_manifold = manifold
            self.rng = as_generator(rng)

        @property
        def typical_dist(self) -> float:
            return pymanopt_typical_dist(self.riemfl_manifold)

        def inner_product(self, point, tangent_vector_a, tangent_vector_b) -> np.float64:
            inner = self.riemfl_manifold.inner
            return _propagating(inner, point, tangent_vector_a, tangent_vector_b, scalar=True)

        def norm(self, point, tangent_vector) -> np.float64:
            return _propagating(self.riemfl_manifold.norm, point, tangent_vector, scalar=True)

        def projection(self, point, vector):
            return self.riemfl_manifold.to_tangent(point, vector)

        to_tangent_space = projection

        def euclidean_to_riemannian_gradient(self, point, euclidean_gradient):
            return self.riemfl_manifold.egrad_to_rgrad(point, euclidean_gradient)

        def euclidean_to_riemannian_hessian(
            self, point, euclidean_gradient, euclidean_hessian, tangent_vector
        ):
            m = self.riemfl_manifold
            ok, why = m.supports("ehess_to_rhess")
            if not ok:
                raise NotImplementedError(
                    f"{why}, so a Euclidean Hessian cannot be turned into a Riemannian one; "
                    "riemfl.adapters.pymanopt.solve approximates the Riemannian Hessian by "
                    "finite differences of the gradient instead"
                )
            return m.ehess_to_rhess(point, euclidean_gradient, euclidean_hessian, tangent_vector)

        def retraction(self, point, tangent_vector):
            return _propagating(self.riemfl_manifold.retract, point, tangent_vector)

        def exp(self, point, tangent_vector):
            return _propagating(self.riemfl_manifold.exp, point, tangent_vector)

        def log(self, point_a, point_b):
            return self.riemfl_manifold.log(point_a, point_b)

        def dist(self, point_a, point_b) -> np.float64:
            return _float(self.riemfl_manifold.dist(point_a, point_b))

        def transport(self, point_a, point_b, tangent_vector_a):
            return self.riemfl_manifold.transport(point_a, point_b, tangent_vector_a)

        def random_point(self):
            return self.riemfl_manifold.random_point(rng=self.rng)

        def random_tangent_vector(self, point):
            m = self.riemfl_manifold
            u = m.random_tangent(point, rng=self.rng)
            return u / _float(m.norm(point, u))

        def zero_vector(self, point):
            return self.riemfl_manifold.zero_tangent(point)

        def pair_mean(self, point_a, point_b):
            return midpoint(self.riemfl_manifold, point_a, point_b)

        def embedding(self, point, tangent_vector):
            # riemfl's tangent vectors are ambient already (pymanopt's base: the identity too)
            return tangent_vector

        def weingarten(self, point, tangent_vector, normal_vector):
            return weingarten_map(self.riemfl_manifold, point, tangent_vector, normal_vector)

    return PymanoptManifold


def _build_pymanopt_poincare_ball() -> type:
    class PymanoptPoincareBall(_PYMANOPT_MANIFOLD.get()):
        r"""A riemfl :class:`~riemfl.manifolds.PoincareBall` behind pymanopt's ``PoincareBall``
        API: :class:`PymanoptManifold` plus ``conformal_factor`` and ``mobius_addition``, with
        the ball's curvature :math:`-c` (pymanopt's ball has c = 1)."""

        def conformal_factor(self, point):
            r""":math:`\lambda_x = 2/(1 - c\|x\|^2)`, shaped like pymanopt's (a trailing
            axis of length 1)."""
            c = self.riemfl_manifold.c
            return 2 / (1 - c * np.sum(point * point, axis=-1, keepdims=True))

        def mobius_addition(self, point_a, point_b):
            return self.riemfl_manifold.mobius_add(point_a, point_b)

    return PymanoptPoincareBall


def _build_pymanopt_product() -> type:
    class PymanoptProduct(_PYMANOPT_MANIFOLD.get()):
        """A riemfl :class:`~riemfl.manifolds.Product` behind pymanopt's ``Product`` API:
        :class:`PymanoptManifold` plus ``manifolds``, the factors as adapters. Points stay
        riemfl's flat vectors (``point_layout`` 1), not pymanopt's lists of arrays."""

        @property
        def manifolds(self) -> list[Any]:
            return [to_pymanopt(f, rng=self.rng) for f in self.riemfl_manifold.manifolds]

    return PymanoptProduct


_PYMANOPT_MANIFOLD = LazyClass(__name__, "PymanoptManifold", _build_pymanopt_manifold)
_PYMANOPT_POINCARE_BALL = LazyClass(__name__, "PymanoptPoincareBall", _build_pymanopt_poincare_ball)
_PYMANOPT_PRODUCT = LazyClass(__name__, "PymanoptProduct", _build_pymanopt_product)
_LAZY = {c.name: c for c in (_PYMANOPT_MANIFOLD, _PYMANOPT_POINCARE_BALL, _PYMANOPT_PRODUCT)}
#: riemfl family -> the adapter class with that pymanopt class's extra public names
_SPECIFIC = ((PoincareBall, _PYMANOPT_POINCARE_BALL), (Product, _PYMANOPT_PRODUCT))


def __getattr__(name: str) -> Any:
    # PEP 562: the pymanopt subclasses exist once pymanopt is importable; pickle finds them here
    if name in _LAZY:
        return _LAZY[name].get()
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
    _pymanopt("riemfl.adapters.pymanopt.to_pymanopt")
    cls = _PYMANOPT_MANIFOLD.get()
    if isinstance(manifold, FromPymanopt):
        return manifold.wrapped
    if not isinstance(manifold, Manifold):
        raise ParameterError(
            f"to_pymanopt needs a riemfl Manifold, got {type(manifold).__name__} "
            "(for a pymanopt manifold, use it directly or wrap it with from_pymanopt)"
        )
    for family, specific in _SPECIFIC:
        if isinstance(manifold, family):
            cls = specific.get()
    return cls(manifold, rng)


# -------------------------------------------------------------------------------- from_pymanopt
class FromPymanopt(ForeignManifold):
    r"""A pymanopt manifold behind riemfl's manifold contract (made by :func:`from_pymanopt`).

    pymanopt computes one float64 numpy point at a time: leading batch dimensions are looped
    over (broadcast first), and the result takes the input's type and dtype (a torch input gives
    a torch output on the input's device). Gradients do not flow through pymanopt's numpy code:
    a torch input that requires a gradient raises :class:`~riemfl.errors.ParameterError` rather
    than silently returning a constant.

    Maps taken from pymanopt: ``to_tangent`` (``projection``), ``egrad_to_rgrad``, ``inner``
    (``inner_product``), ``retract`` (``retraction``) and ``transport`` always; ``exp``,
    ``log``, ``dist``, ``parallel_transport`` (``transport``) and ``inverse_retract``
    (``log``, where the retraction is ``exp``) only where they are exact (see
    :func:`from_pymanopt`); ``project`` never (pymanopt has no metric projection).

    pymanopt's ``SpecialOrthogonalGroup`` represents a tangent vector by its Lie-algebra element
    :math:`\Omega = X^\top U`; the wrapper translates, so riemfl sees ambient :math:`U =
    X\Omega` as for its own :class:`~riemfl.manifolds.SpecialOrthogonal`.

    ``check_point`` measures :math:`\|R_x(0) - x\|` with pymanopt's retraction (which maps its
    input onto M: a QR or polar factor, a normalisation); ``random_point`` seeds numpy's global
    state from ``rng`` around pymanopt's sampler and restores it after.
    """

    #: pymanopt computes in numpy: a torch argument is copied to the host and the result back
    deferred_reads = dict.fromkeys(
        MAP_ROLES, "pymanopt computes in numpy: a torch argument is copied to the host"
    )

    library = "pymanopt"
    methods = {
        "to_tangent": "projection",
        "egrad_to_rgrad": "euclidean_to_riemannian_gradient",
        "inner": "inner_product",
        "retract": "retraction",
        "exp": "exp",
        "log": "log",
        "inverse_retract": "log",
        "dist": "dist",
        "transport": "transport",
        "parallel_transport": "transport",
    }

    def __init__(
        self,
        manifold: Any,
        point_shape: Iterable[int] | None,
        exact: Iterable[str] | None,
        constants: dict[str, float | None],
    ) -> None:
        _pymanopt("riemfl.adapters.pymanopt.from_pymanopt")
        from pymanopt.manifolds.manifold import Manifold as PymanoptBase

        if not isinstance(manifold, PymanoptBase):
            raise ParameterError(
                f"from_pymanopt needs a pymanopt manifold, got {type(manifold).__name__} "
                "(for a riemfl manifold, use it directly or wrap it with to_pymanopt)"
            )
        if manifold.point_layout != 1:
            raise ParameterError(
                f"from_pymanopt: {manifold} represents a point by {manifold.point_layout} "
                "arrays; riemfl points are single arrays (point_layout 1)"
            )
        self.wrapped = manifold
        if point_shape is None:
            point_shape = np.shape(self._sample(np.random.default_rng(0)))
        self.point_shape = tuple(int(s) for s in point_shape)
        self.name = f"from_pymanopt({type(manifold).__name__}, {self.point_shape})"
        self._dim = int(manifold.dim)
        self._wrap(manifold, PymanoptBase, known_for(manifold), exact, constants)
        # pymanopt's SO(n) (and O(n), U(n)) tangent vectors are Lie-algebra elements Omega,
        # U = X Omega; riemfl's are ambient U: the wrapper translates
        self._lie = any(c.__name__ in _LIE_GROUPS for c in type(manifold).__mro__)
        self.unsupported["project"] = f"{self.name}: project: {_NO_PROJECTION}"

    @property
    def pymanopt_manifold(self) -> Any:
        """The wrapped pymanopt manifold."""
        return self.wrapped

    # ------------------------------------------------------------------ translation
    def _sample(self, rng: np.random.Generator) -> np.ndarray:
        # pymanopt draws from numpy's global state: seed it from rng, restore it after
        state = np.random.get_state()  # noqa: NPY002
        np.random.seed(int(rng.integers(2**32)))  # noqa: NPY002
        try:
            return np.asarray(self.wrapped.random_point(), dtype=np.float64)
        finally:
            np.random.set_state(state)  # noqa: NPY002

    def _call(self, fn: Callable[..., Any], *arrays: Array, scalar: bool = False) -> Array:
        """Apply a single-point pymanopt map over the broadcast batch of ``arrays``."""
        ref = next((a for a in arrays if is_torch(a)), None)
        if ref is not None and any(is_torch(a) and a.requires_grad for a in arrays):
            import torch

            if torch.is_grad_enabled():
                raise ParameterError(
                    f"{self.name}: pymanopt computes in numpy, so gradients cannot flow through "
                    "its maps; detach the input (or use a riemfl manifold for autograd)"
                )
        nps = [to_numpy(a) for a in arrays]
        dtype = np.result_type(*nps)
        k = len(self.point_shape)
        batch = np.broadcast_shapes(*(a.shape[: a.ndim - k] for a in nps))
        full = [np.broadcast_to(a, batch + a.shape[a.ndim - k :]) for a in nps]
        out = np.empty(batch + (() if scalar else self.point_shape))
        for idx in np.ndindex(*batch):
            out[idx] = fn(*(np.asarray(a[idx], dtype=np.float64) for a in full))
        out = out.astype(dtype, copy=False)
        if ref is None:
            return out
        import torch

        return torch.as_tensor(out, dtype=ref.dtype, device=ref.device)

    def _apply(self, what: str, *arrays: Array, scalar: bool = False) -> Array:
        if not self._lie or what not in self._available:
            return super()._apply(what, *arrays, scalar=scalar)
        fn = getattr(self.wrapped, self.methods[what])
        tangents, at = _LIE_ARGUMENTS[what]

        def translated(*args):
            # U = X Omega <-> Omega = X^T U, with X the first point (the tangent's base)
            args = [a if i not in tangents else args[0].T @ a for i, a in enumerate(args)]
            out = fn(*args)
            return out if at is None else args[at] @ out

        return self._call(translated, *arrays, scalar=scalar)

    def _random_point(self, batch_shape, rng):
        out = np.empty(tuple(batch_shape) + self.point_shape)
        for idx in np.ndindex(*batch_shape):
            out[idx] = self._sample(rng)
        return out

    def _point_violation(self, x):
        m = self.wrapped

        def gap(p):
            d = m.retraction(p, m.zero_vector(p)) - p
            return float(np.sqrt(np.sum(d * d)))

        violation = self._call(gap, x, scalar=True)
        return "x = R_x(0) (pymanopt's retraction maps onto M)", float(np.max(to_numpy(violation)))


def from_pymanopt(
    manifold: Any,
    *,
    point_shape: Iterable[int] | None = None,
    exact: Iterable[str] | None = None,
    proximal_smoothness: float | None = None,
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
    proximal_smoothness, diameter, injectivity_radius : float, optional
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
    _pymanopt("riemfl.adapters.pymanopt.from_pymanopt")
    if isinstance(manifold, _PYMANOPT_MANIFOLD.get()):
        return manifold.riemfl_manifold
    constants = {
        "proximal_smoothness": proximal_smoothness,
        "diameter": diameter,
        "injectivity_radius": injectivity_radius,
    }
    return FromPymanopt(manifold, point_shape, exact, constants)


# ------------------------------------------------------------------------------------- solve
@dataclass
class SolveResult:
    """What :func:`solve` returns.

    Attributes
    ----------
    point : numpy.ndarray
        The last iterate (a point of the riemfl manifold).
    cost : float
        f at ``point``.
    iterations : int
        Outer iterations pymanopt ran.
    gradient_norm : float or None
        Riemannian gradient norm at ``point`` as pymanopt reports it.
    stopping_criterion : str
        pymanopt's reason for stopping.
    hessian : str
        How trust regions got Hessian-vector products: ``"exact"`` (a Euclidean Hessian-vector
        product, from the backend or ``ehess=``, through the manifold's ``ehess_to_rhess``),
        ``"finite_difference"`` (:func:`finite_difference_hessian`) or ``"none"`` (first-order
        optimizers).
    pymanopt_result : pymanopt.optimizers.optimizer.OptimizerResult
        pymanopt's own result (time, cost evaluations, log, ...).
    """

    point: np.ndarray
    cost: float
    iterations: int
    gradient_norm: float | None
    stopping_criterion: str
    hessian: str
    pymanopt_result: Any


def finite_difference_hessian(
    manifold: Manifold, rgrad: Callable[[np.ndarray], np.ndarray], step: float = 2.0**-14
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    r"""Riemannian Hessian-vector products by finite differences of the Riemannian gradient.

    .. math::
        \operatorname{Hess} f(x)[u] \approx \frac{\mathcal T_{y \to x}\operatorname{grad}f(y)
        - \operatorname{grad} f(x)}{c}, \qquad y = R_x(c\,u),\quad c = \frac{h}{\|u\|_x},

    with the manifold's retraction R and vector transport :math:`\mathcal T`, and
    :math:`h = 2^{-14}` (Manopt's ``getHessianFD``; Boumal 2015 proves trust regions converge
    globally with it). Linear in u only up to :math:`O(h)`; exact where the gradient is linear
    in the ambient coordinates and the transport is the projection (e.g. kPCA on the sphere).
    The gradient at x is cached, as trust regions ask for many products at one x.

    Parameters
    ----------
    manifold : Manifold
        Supplies ``norm``, ``retract``, ``transport`` and ``zero_tangent``.
    rgrad : callable
        ``rgrad(x)``: the Riemannian gradient at one point.
    step : float
        h, the length of the step along u.
    """
    cache: dict[str, Any] = {"x": None, "g": None}

    def hessian(point: np.ndarray, tangent_vector: np.ndarray) -> np.ndarray:
        norm = _float(manifold.norm(point, tangent_vector))
        if norm == 0.0:
            return manifold.zero_tangent(point)
        if cache["x"] is None or not np.array_equal(cache["x"], point):
            cache["x"], cache["g"] = np.array(point, copy=True), rgrad(point)
        c = step / norm
        moved = manifold.retract(point, c * tangent_vector)
        back = manifold.transport(moved, point, rgrad(moved))
        return (back - cache["g"]) / c

    return hessian


def _objective(problem: Any, backend: str, cost: Any, egrad: Any) -> tuple[Any, Any]:
    """(cost, Euclidean gradient or None) for :func:`solve` from a problem or a callable."""
    if cost is not None:
        if backend == "numpy" and egrad is None:
            raise ParameterError(
                "solve: backend='numpy' has no automatic differentiation; pass egrad= with the "
                "cost, or choose backend='autograd' or 'torch'"
            )
        return cost, egrad
    if backend == "numpy":
        loss = getattr(problem, "loss", None) or getattr(problem, "f", None)
        grad = getattr(problem, "egrad", None)
        if loss is None or grad is None:
            raise ParameterError(
                f"solve: {type(problem).__name__} has no loss/f and egrad; pass a riemfl "
                "FederatedProblem, or cost= (and egrad=) with manifold="
            )
        return loss, grad
    losses = getattr(problem, "losses", None)
    if losses is None or getattr(problem, "differentiation", None) != backend:
        raise ParameterError(
            f"solve: backend={backend!r} differentiates the objective itself, so it must be "
            f"written for {backend}; {type(problem).__name__}'s objective is not (use "
            f"backend='numpy' with the problem's own egrad, a FunctionProblem with "
            f"differentiation={backend!r}, or cost= written with {backend})"
        )
    sample = problem.n_samples is not None

    def federated_cost(x):
        # f = (1/n) sum_i f_i: the mean of the clients' full objectives
        total = sum((f(x, None) if sample else f(x)) for f in losses)
        return total / len(losses)

    return federated_cost, None


def _exact_hessian(
    problem: Any, backend: str, ehess: Any, manifold: Manifold, hessian: str
) -> Callable[[Any, Any], Any] | bool | None:
    """The exact Hessian :func:`solve` can give trust regions: a Euclidean Hessian-vector
    product ``ehess(x, u)`` to hand to pymanopt, ``True`` where pymanopt differentiates the cost
    twice itself (autograd, torch), or ``None`` (finite differences instead)."""
    if hessian == "finite_difference":
        return None
    if ehess is None and backend == "numpy":
        ehess = getattr(problem, "ehess", None)
    source = ehess if ehess is not None else backend != "numpy"
    supported, why = manifold.supports("ehess_to_rhess")
    if supported and source:
        return source
    if hessian == "exact":
        missing = why if not supported else "backend='numpy' has no Euclidean Hessian"
        raise ParameterError(
            f"solve: hessian='exact' needs the Riemannian Hessian, but {missing}; pass "
            "ehess=(x, u) -> the Euclidean Hessian-vector product, choose backend='autograd' or "
            "'torch', or hessian='finite_difference'"
        )
    return None


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
    pymanopt = _pymanopt("riemfl.adapters.pymanopt.solve")
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
    f, grad = _objective(problem, backend, cost, egrad)
    rng = as_generator(rng)
    target = to_pymanopt(manifold, rng=rng)
    objective = getattr(pymanopt.function, BACKENDS[backend])(target)(_positional(f))
    kwargs: dict[str, Any] = {}
    if grad is not None:
        kwargs["euclidean_gradient"] = pymanopt.function.numpy(target)(_positional(grad))
    mode = "none"
    if optimizer == "trust_regions":
        ehess = _exact_hessian(problem, backend, ehess, manifold, hessian)
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

"""A ready-made pytest test class that runs the whole conformance kit on one manifold.

Subclass :class:`ManifoldTests`, give it a manifold, and pytest collects some thirty property
tests (hypothesis-driven), each run for numpy and torch in float64 and float32::

    from riemfl.testing import ManifoldTests
    from mypackage import Oblique

    class TestOblique(ManifoldTests):
        manifold = Oblique(5, 3)

Tests of maps the manifold does not implement (``supports(name)`` is False) are skipped with the
manifold's reason. Precision-sensitive checks (Taylor slopes, finite differences, nearest point,
Lipschitz constant, diameter) run once, in numpy float64; identity checks run in every
configuration with the tolerance table of :mod:`riemfl.testing.config`.

Class attributes to tune:

``configs``
    The :class:`~riemfl.testing.Config` objects to run (default: numpy and torch in float64 and
    float32 on the CPU, plus torch on CUDA where a device exists).
``max_tangent_norm``
    Largest tangent norm used for exp/log, inverse retraction and transports (default
    ``min(1, injectivity_radius / 2)``); lower it where an iterative log needs it.
``tolerance_scale``
    Multiplies the tolerance table (for manifolds whose maps lose precision).
``batch_size``
    Leading batch size of drawn data (default 3).
``boundary_exempt``
    Maps that are defined at the boundary points on purpose, mapped to the reason (their
    formula does not read what blows up there: an identity ``to_tangent``, a metric that does
    not depend on the point); ``test_boundary_points`` does not call them. A key
    ``"method:x"`` or ``"method:y"`` exempts the map only with the boundary point as that
    argument (``"transport:x"``: a projection onto the tangent space at y does not read x).

Methods to override:

``hessian_function(rng)``
    The test function of the ``ehess_to_rhess`` checks (default: a random
    :func:`~riemfl.testing.checks.quadratic_function` on the ambient space). Manifolds whose
    points are equivalence classes need a function that is constant on the classes (Grassmann:
    ``quadratic_function(shape, rng, rotation_invariant=True)``).
``boundary_points(rng)``
    Finite single points (numpy float64) that lie on or beyond the boundary of an open
    manifold, where its metric or maps blow up (the sphere ``|x| = 1`` of a Poincare ball, a
    zero component of a simplex point, a singular matrix of the SPD cone), each refused by
    ``check_point``. ``test_boundary_points`` checks that every map refuses each of them with
    a :class:`~riemfl.errors.NotOnManifoldError` naming the map, in every configuration
    (:func:`~riemfl.testing.bad_input.check_boundary_points`), never NaN or inf. Default: none
    (a manifold without such a boundary; the test skips).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ..check_levels import checks as riemfl_checks
from ..errors import NotOnManifoldError, ShapeError
from ..manifolds.base import Manifold
from . import bad_input, checks, levels
from . import strategies as rst
from .bad_input import BAD_INPUT_METHODS
from .config import (
    CONFIGS,
    CUDA_CONFIGS,
    FLOAT32_EPS_MULTIPLES,
    METHODS,
    Config,
    Tolerance,
    cuda_available,
    torch_available,
)

__all__ = ["ManifoldTests", "METHODS", "method_arguments"]

_NEEDS = {
    "log": ("exp", "log"),
    "dist": ("exp", "dist"),
    "squared_dist": ("exp", "squared_dist"),
    "parallel_transport": ("exp",),
}


#: CUDA configurations are parametrised only where a device exists (no wall of skips elsewhere)
_FIXTURE_CONFIGS = CONFIGS + (CUDA_CONFIGS if cuda_available() else ())


class ManifoldTests:
    """Mixin of conformance tests; subclass it as ``TestSomething`` and set ``manifold``."""

    manifold: Manifold
    configs: tuple[Config, ...] = CONFIGS + CUDA_CONFIGS
    max_tangent_norm: float | None = None
    tolerance_scale: float = 1.0
    batch_size: int = 3
    boundary_exempt: dict[str, str] = {}

    # ------------------------------------------------------------------ helpers
    @pytest.fixture(params=_FIXTURE_CONFIGS, ids=str, scope="class")
    @classmethod
    def config(cls, request) -> Config:
        cfg = request.param
        if cfg not in cls.configs:
            pytest.skip(f"{cfg} is not among this test class's configs")
        if cfg.backend == "torch" and not torch_available():
            pytest.skip("torch is not installed")
        if cfg.device == "cuda" and not cuda_available():
            pytest.skip("no CUDA device")
        return cfg

    def tol(self, config: Config) -> Tolerance:
        return config.tolerance.scaled(self.tolerance_scale)

    def require(self, *methods: str) -> None:
        for name in methods:
            ok, why = self.manifold.supports(name)
            if not ok:
                pytest.skip(why)

    def require_constant(self, name: str) -> float:
        try:
            return getattr(self.manifold, name)
        except NotImplementedError as exc:
            pytest.skip(str(exc))

    @property
    def radius(self) -> float:
        if self.max_tangent_norm is not None:
            return self.max_tangent_norm
        try:
            inj = self.manifold.injectivity_radius
        except NotImplementedError:
            inj = 2.0
        return min(1.0, 0.5 * inj)

    def draw_frame(self, data, n_tangents: int = 1, max_norm: float | None = None):
        """A batch of points and ``n_tangents`` tangent vectors at them (numpy float64)."""
        m = self.manifold
        x = data.draw(rst.points(m, (self.batch_size,)), label="x")
        limit = self.radius if max_norm is None else max_norm
        tangents = [
            data.draw(rst.tangent_vectors(m, x, max_norm=limit), label=f"u{i}")
            for i in range(n_tangents)
        ]
        return x, tangents

    def method_args(self, method: str, seed: int) -> tuple[list[np.ndarray], list[str]]:
        """numpy float64 batched arguments for ``method`` and their roles.

        Roles are ``"point"``, ``"tangent"`` (at the first argument) or ``"ambient"``.
        """
        m = self.manifold
        rng = np.random.default_rng(seed)
        b = (self.batch_size,)
        x = m.random_point(*b, rng=rng)
        norms = rng.uniform(0.2, 1.0, size=b) * self.radius
        u = rst.scaled_tangent(m, x, norms, rng)
        v = rst.scaled_tangent(m, x, rng.uniform(0.2, 1.0, size=b), rng)
        if method in ("random_tangent", "zero_tangent", "check_point"):
            return [x], ["point"]
        if method == "check_tangent":
            return [x, u], ["point", "tangent"]
        if method == "project":
            reach = self._reach()
            return [x + 0.4 * reach * rst.unit_ambient(m, b, rng)], ["ambient"]
        if method in ("to_tangent", "egrad_to_rgrad"):
            return [x, rng.standard_normal(x.shape)], ["point", "ambient"]
        if method in ("inner", "retraction_transport"):
            return [x, u, v], ["point", "tangent", "tangent"]
        if method in ("norm", "retract", "exp"):
            return [x, u], ["point", "tangent"]
        if method == "inverse_retract":
            return [x, np.asarray(m.retract(x, u))], ["point", "point"]
        if method in ("log", "dist", "squared_dist"):
            return [x, np.asarray(m.exp(x, u))], ["point", "point"]
        if method == "transport":
            return [x, np.asarray(m.retract(x, u)), v], ["point", "point", "tangent"]
        if method == "parallel_transport":
            return [x, np.asarray(m.exp(x, u)), v], ["point", "point", "tangent"]
        if method == "ehess_to_rhess":
            g, h = rng.standard_normal(x.shape), rng.standard_normal(x.shape)
            return [x, g, h, u], ["point", "ambient", "ambient", "tangent"]
        raise ValueError(method)

    def hessian_function(self, rng: np.random.Generator) -> checks.QuadraticFunction:
        """The test function of the ``ehess_to_rhess`` checks (see the module docstring)."""
        return checks.quadratic_function(self.manifold.point_shape, rng)

    def boundary_points(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Finite points on or beyond the boundary of the manifold (see the module docstring);
        none by default."""
        return []

    def _reach(self) -> float:
        gamma = self.require_constant("reach")
        return gamma if math.isfinite(gamma) else 1.0

    # ------------------------------------------------------------------ points and tangents
    @given(data=st.data())
    def test_random_point_on_manifold(self, config, data):
        x = config.convert(data.draw(rst.points(self.manifold, (self.batch_size,))))
        checks.check_point_on_manifold(self.manifold, x, self.tol(config))

    @given(data=st.data())
    def test_projection_idempotent(self, config, data):
        self.require("project")
        a, x = data.draw(
            rst.ambient_points_near(self.manifold, 0.5 * self._reach(), (self.batch_size,))
        )
        checks.check_projection(
            self.manifold, config.convert(a), config.convert(x), self.tol(config)
        )

    @given(data=st.data())
    def test_to_tangent_is_projection(self, config, data):
        x = data.draw(rst.points(self.manifold, (self.batch_size,)))
        a = np.random.default_rng(data.draw(rst.seeds())).standard_normal(x.shape)
        checks.check_to_tangent(
            self.manifold, config.convert(x), config.convert(a), self.tol(config)
        )

    @given(data=st.data())
    def test_zero_tangent(self, config, data):
        x = config.convert(data.draw(rst.points(self.manifold, (self.batch_size,))))
        checks.check_zero_tangent(self.manifold, x, self.tol(config))

    @given(data=st.data())
    def test_metric(self, config, data):
        x, (u, v, w) = self.draw_frame(data, 3)
        c = config.convert
        checks.check_metric(self.manifold, c(x), c(u), c(v), c(w), self.tol(config))

    # ------------------------------------------------------------------ retractions, exp/log
    @given(data=st.data())
    def test_retraction(self, config, data):
        x, (u,) = self.draw_frame(data, 1)
        checks.check_retraction(
            self.manifold, config.convert(x), config.convert(u), self.tol(config)
        )

    @given(data=st.data())
    def test_retraction_first_order(self, data):
        x, (u,) = self.draw_frame(data, 1)
        checks.check_retraction_first_order(self.manifold, x[0], u[0])

    @given(data=st.data())
    def test_exp_second_order(self, data):
        self.require("exp")
        x, (u,) = self.draw_frame(data, 1)
        checks.check_exp_second_order(self.manifold, x[0], u[0])

    @given(data=st.data())
    def test_inverse_retraction(self, config, data):
        self.require("inverse_retract")
        x, (u,) = self.draw_frame(data, 1)
        checks.check_inverse_retraction(
            self.manifold, config.convert(x), config.convert(u), self.tol(config)
        )

    @given(data=st.data())
    def test_exp_log_inverse(self, config, data):
        self.require("exp", "log", "dist")
        x, (u,) = self.draw_frame(data, 1)
        checks.check_exp_log(self.manifold, config.convert(x), config.convert(u), self.tol(config))

    @given(data=st.data())
    def test_squared_dist(self, config, data):
        """``squared_dist = dist**2``, symmetric, non-negative and 0 at ``y = x``."""
        self.require("squared_dist")
        x, (u,) = self.draw_frame(data, 1)
        y = self.manifold.retract(x, u)
        c = config.convert
        checks.check_squared_dist(self.manifold, c(x), c(y), self.tol(config))

    @given(data=st.data())
    def test_torch_distance_gradients_at_coincident_points(self, data):
        """torch gradients of ``dist`` and ``squared_dist`` at ``y = x``: finite; 0 for
        ``squared_dist`` (to the rounding of the computed distance), and for ``dist`` where the
        computed distance is 0 (the zero subgradient)."""
        if not torch_available():
            pytest.skip("torch is not installed")
        self.require("squared_dist")
        x = data.draw(rst.points(self.manifold, (self.batch_size,)))
        rng = np.random.default_rng(data.draw(rst.seeds()))
        checks.check_distance_gradients_at_coincident_points(self.manifold, x, rng)

    @given(data=st.data())
    def test_transport(self, config, data):
        x, (u, v, w) = self.draw_frame(data, 3)
        y = self.manifold.retract(x, u)
        c = config.convert
        checks.check_transport(self.manifold, c(x), c(y), c(v), c(w), self.tol(config))

    @given(data=st.data())
    def test_retraction_transport(self, config, data):
        """Where the manifold has it, ``retraction_transport(x, u, v)`` is tangent at
        :math:`R_x(u)`, linear in v, and v at u = 0."""
        self.require("retraction_transport")
        x, (u, v) = self.draw_frame(data, 2)
        c = config.convert
        checks.check_retraction_transport(self.manifold, c(x), c(u), c(v), self.tol(config))

    @given(data=st.data())
    def test_retraction_transport_is_the_differential_of_retract(self, data):
        r""":math:`R_x(u + tv) - R_x(u) - t\,\mathcal T_u(v) = O(t^2)` (float64)."""
        self.require("retraction_transport")
        x, (u, v) = self.draw_frame(data, 2)
        checks.check_retraction_transport_first_order(self.manifold, x[0], u[0], v[0])

    @given(data=st.data())
    def test_parallel_transport_isometry(self, config, data):
        self.require("exp", "parallel_transport")
        x, (u, v, w) = self.draw_frame(data, 3)
        y = self.manifold.exp(x, u)
        c = config.convert
        checks.check_parallel_transport(self.manifold, c(x), c(y), c(v), c(w), self.tol(config))

    # ------------------------------------------------------------------ gradients, projection
    @given(data=st.data())
    def test_egrad_to_rgrad_finite_differences(self, data):
        x, (v,) = self.draw_frame(data, 1, max_norm=1.0)
        rng = np.random.default_rng(data.draw(rst.seeds()))
        checks.check_egrad_to_rgrad(self.manifold, x[0], v[0], rng)

    # ------------------------------------------------------------------ second order
    @given(data=st.data())
    def test_ehess_to_rhess_symmetric(self, config, data):
        """Self-adjoint in the metric, tangent and linear, in every configuration."""
        self.require("ehess_to_rhess")
        x, (u, v) = self.draw_frame(data, 2)
        fn = self.hessian_function(np.random.default_rng(data.draw(rst.seeds())))
        c = config.convert
        checks.check_ehess_to_rhess_symmetric(
            self.manifold,
            c(x),
            c(u),
            c(v),
            c(fn.egrad(x)),
            c(fn.ehess(x, u)),
            c(fn.ehess(x, v)),
            self.tol(config),
        )

    @given(data=st.data())
    def test_ehess_to_rhess_second_order(self, data):
        """Taylor slope 3 along exp (or the retraction, which must then be second order)."""
        self.require("ehess_to_rhess")
        x, (u,) = self.draw_frame(data, 1)
        fn = self.hessian_function(np.random.default_rng(data.draw(rst.seeds())))
        checks.check_ehess_to_rhess_taylor(self.manifold, x[0], u[0], fn)

    @given(data=st.data())
    def test_ehess_to_rhess_finite_differences(self, data):
        """The derivative of the transported Riemannian gradient (central differences)."""
        self.require("ehess_to_rhess")
        x, (u,) = self.draw_frame(data, 1, max_norm=1.0)
        fn = self.hessian_function(np.random.default_rng(data.draw(rst.seeds())))
        checks.check_ehess_to_rhess_gradient(self.manifold, x[0], u[0], fn)

    def test_local_reach_agrees_with_reach(self):
        """``local_reach(x)`` gives one positive value per point; where the manifold keeps the
        default ``local_reach``, that is the uniform ``reach`` broadcast to the batch shape of
        x."""
        m = self.manifold
        try:
            reach = m.reach
        except NotImplementedError:
            reach = None
        x = m.random_point(self.batch_size, rng=np.random.default_rng(0))
        try:
            local = np.asarray(m.local_reach(x))
        except NotImplementedError as exc:
            pytest.skip(f"{m.name} has no local reach: {exc}")
        assert local.shape == (self.batch_size,)
        assert np.shape(m.local_reach(x[0])) == ()
        assert np.all(local > 0)
        if type(m).local_reach is Manifold.local_reach:
            assert reach is not None
            np.testing.assert_array_equal(local, np.full((self.batch_size,), reach))

    @given(data=st.data(), fraction=st.floats(0.05, 0.8))
    def test_projection_nearest_point(self, data, fraction):
        self.require("project")
        self.require_constant("reach")
        x = data.draw(rst.points(self.manifold))
        rng = np.random.default_rng(data.draw(rst.seeds()))
        checks.check_nearest_point(self.manifold, x, fraction, rng)

    @given(data=st.data(), s=st.floats(0.0, 0.2), t=st.floats(1e-3, 0.24))
    def test_projection_lipschitz_half_tube(self, data, s, t):
        self.require("project")
        reach = self._reach()
        rng = np.random.default_rng(data.draw(rst.seeds()))
        x = self.manifold.random_point(rng=rng)
        a = x + s * reach * rst.unit_ambient(self.manifold, (), rng)
        b = a + t * reach * rst.unit_ambient(self.manifold, (), rng)
        checks.check_projection_lipschitz(self.manifold, a, b)

    # ------------------------------------------------------------------ implementation checks
    @pytest.mark.parametrize("method", METHODS)
    @given(seed=rst.seeds())
    def test_batch_equals_loop(self, config, method, seed):
        self.require(*_NEEDS.get(method, ()), method)
        args, _ = self.method_args(method, seed)
        checks.check_batch_equals_loop(
            self.manifold,
            method,
            [config.convert(a) for a in args],
            [True] * len(args),
            self.tol(config),
        )

    @pytest.mark.parametrize("method", ["to_tangent", "retract", "exp", "inner", "transport"])
    @given(seed=rst.seeds())
    def test_broadcast_single_point(self, config, method, seed):
        self.require(*_NEEDS.get(method, ()), method)
        args, _ = self.method_args(method, seed)
        args[0] = args[0][0]  # one base point, a batch of the other arguments
        if method == "transport":
            args[1] = args[1][0]
        batched = [a.ndim > self.manifold.ndim for a in args]
        checks.check_batch_equals_loop(
            self.manifold, method, [config.convert(a) for a in args], batched, self.tol(config)
        )

    @pytest.mark.parametrize("method", METHODS)
    @given(seed=rst.seeds())
    def test_numpy_equals_torch(self, method, seed):
        if not torch_available():
            pytest.skip("torch is not installed")
        self.require(*_NEEDS.get(method, ()), method)
        args, _ = self.method_args(method, seed)
        checks.check_backends_agree(self.manifold, method, args, TOLERANCE_BACKENDS)

    @pytest.mark.parametrize("method", METHODS)
    @given(seed=rst.seeds())
    def test_torch_autograd(self, method, seed):
        if not torch_available():
            pytest.skip("torch is not installed")
        self.require(*_NEEDS.get(method, ()), method)
        args, roles = self.method_args(method, seed)
        checks.check_autograd(self.manifold, method, args, roles, np.random.default_rng(seed))

    @given(data=st.data())
    def test_torch_autograd_finite_at_zero(self, data):
        if not torch_available():
            pytest.skip("torch is not installed")
        checks.check_autograd_at_zero(self.manifold, data.draw(rst.points(self.manifold)))

    @pytest.mark.slow  # many cases per manifold: part of the full run
    @pytest.mark.parametrize("method", METHODS[1:])
    def test_broadcast_batch_point(self, config, method):
        """A batch of base points against one of each other argument (broadcasting)."""
        self.require(*_NEEDS.get(method, ()), method)
        args, _ = self.method_args(method, 0)
        single = [config.convert(a[0]) for a in args]
        checks.check_broadcast_batch_point(self.manifold, method, single, self.tol(config))

    @pytest.mark.parametrize("method", METHODS)
    def test_deferred_reads_nothing(self, method):
        """At the check levels ``deferred`` and ``off``: no host read (except the maps of
        ``deferred_reads``), eager values, nothing raised at the boundary
        (:func:`riemfl.testing.levels.check_deferred_reads_nothing`)."""
        self._check_deferred(method, levels.check_deferred_reads_nothing)

    @pytest.mark.parametrize("method", METHODS)
    def test_deferred_raises_as_eager(self, method):
        """A NaN or an infinity in any argument: the deferred level raises, at the boundary,
        the error and message eager mode raises at the call
        (:func:`riemfl.testing.levels.check_deferred_raises_as_eager`)."""
        self._check_deferred(method, levels.check_deferred_raises_as_eager)

    def test_deferred_boundary_points_raise_as_eager(self):
        """The boundary points (``boundary_points``) in each point argument of each map: the
        deferred level raises, at the boundary, the error and message eager mode raises at the
        call (:func:`riemfl.testing.levels.check_deferred_boundary_as_eager`)."""
        points = self.boundary_points(np.random.default_rng(0))
        if not points:
            pytest.skip(f"{self.manifold.name}: the test class declares no boundary points")
        for method, skip in self._boundary_methods():
            roles = self.method_args(method, 0)[1]
            self._check_deferred(
                method, levels.check_deferred_boundary_as_eager, roles, points, skip
            )

    def _boundary_methods(self) -> list[tuple[str, list[int]]]:
        """The maps the boundary points are fed to, with the positions of the point arguments
        each one does not read: every supported map but those of ``boundary_exempt``."""
        return [
            (method, [i for i, n in enumerate("xy") if f"{method}:{n}" in self.boundary_exempt])
            for method in METHODS
            if method not in self.boundary_exempt
            and all(self.manifold.supports(m)[0] for m in (*_NEEDS.get(method, ()), method))
        ]

    def _check_deferred(self, method: str, check: Callable[..., None], *extra) -> None:
        """Run a check of the deferred level on ``method``'s arguments: with torch, and for a
        class that declares ``deferred_reads`` (riemfl's families, whose contract it is)."""
        if not torch_available():
            pytest.skip("torch is not installed")
        if not levels.declares_deferred_reads(self.manifold):
            pytest.skip(
                f"{self.manifold.name}: its class does not declare deferred_reads (the maps "
                f"that read values at the deferred level, {{}} for none), so the kit does not "
                f"hold it to the deferred level's contract"
            )
        self.require(*_NEEDS.get(method, ()), method)
        args, _ = self.method_args(method, 0)
        check(self.manifold, method, args, *extra)

    @pytest.mark.slow  # many cases per manifold: part of the full run
    @pytest.mark.parametrize("backend", ["numpy", "torch"])
    @pytest.mark.parametrize("method", METHODS)
    def test_float32_accuracy(self, backend, method):
        """float32 agrees with float64 to the kit's per-map multiple of float32's eps (one
        point: the iterative maps cost a few float64 solves)."""
        if backend == "torch" and not torch_available():
            pytest.skip("torch is not installed")
        self.require(*_NEEDS.get(method, ()), method)
        args = [a[0] for a in self.method_args(method, 0)[0]]
        ulps = FLOAT32_EPS_MULTIPLES[method] * self.tolerance_scale
        checks.check_float32_accuracy(self.manifold, method, args, backend, ulps)

    @pytest.mark.parametrize("method", METHODS)
    def test_types_preserved(self, config, method):
        self.require(*_NEEDS.get(method, ()), method)
        args, _ = self.method_args(method, 0)
        checks.check_types_preserved(self.manifold, method, [config.convert(a) for a in args])

    def test_random_point_follows_like(self, config):
        like = config.convert(np.zeros(1))
        x = self.manifold.random_point(2, rng=1, like=like)
        checks.check_types_preserved(self.manifold, "random_tangent", [x])
        ref = self.manifold.random_point(2, rng=1)
        checks.assert_close(x, ref, self.tol(config), "same seed, same point", self.manifold)

    @given(data=st.data())
    def test_diameter(self, data):
        diameter = self.require_constant("diameter")
        x = data.draw(rst.points(self.manifold, (self.batch_size,)))
        y = data.draw(rst.points(self.manifold, (self.batch_size,)))
        if math.isfinite(diameter):
            checks.check_diameter(self.manifold, x, y)

    # ------------------------------------------------------------------ bad input
    def test_rejects_wrong_shape(self, config):
        m = self.manifold
        x = config.convert(m.random_point(rng=0))
        bad = config.convert(np.zeros(tuple(s + 1 for s in m.point_shape)))
        with pytest.raises(ShapeError, match=r"expected"):
            m.retract(x, bad)
        with pytest.raises(ShapeError):
            m.check_point(bad)

    def test_rejects_points_off_manifold(self, config):
        m = self.manifold
        x = m.random_point(rng=0)
        basis = checks.tangent_basis(m, x, np.random.default_rng(1))
        if basis.shape[0] == basis.shape[1]:
            pytest.skip(f"{m.name} is full-dimensional: there is no normal direction to step off")
        w = np.random.default_rng(2).standard_normal(basis.shape[1])
        normal = np.reshape(w - basis.T @ (basis @ w), x.shape)
        off = x + 0.1 * normal / np.linalg.norm(normal)
        with pytest.raises(NotOnManifoldError, match="constraint"):
            m.check_point(config.convert(off))
        nan = x.copy()
        nan.flat[0] = np.nan
        with pytest.raises(NotOnManifoldError, match="NaN"):
            m.check_point(config.convert(nan))
        with pytest.raises(NotOnManifoldError, match="tangent"):
            m.check_tangent(config.convert(x), config.convert(normal))

    def test_boundary_points(self, config):
        """Finite points on or beyond the boundary (``boundary_points``): every map but those
        of ``boundary_exempt`` refuses them with a typed error naming the map, never NaN or
        inf (:func:`riemfl.testing.bad_input.check_boundary_points`)."""
        points = self.boundary_points(np.random.default_rng(0))
        if not points:
            pytest.skip(f"{self.manifold.name}: the test class declares no boundary points")
        for method, skip in self._boundary_methods():
            args, roles = self.method_args(method, 0)
            with riemfl_checks("eager"):  # the errors are expected at the call
                bad_input.check_boundary_points(
                    self.manifold, method, args, roles, points, config.convert, skip
                )

    @pytest.mark.slow  # many cases per manifold: part of the full run
    @pytest.mark.parametrize("method", BAD_INPUT_METHODS)
    def test_bad_input(self, method):
        """Lists, integers, float16, complex, NaN/inf, empty batches, mixed backends: the
        outcome the input policy prescribes (:mod:`riemfl.testing.bad_input`)."""
        self.require(*_NEEDS.get(method, ()), *((method,) if method in METHODS else ()))
        args, roles = self.method_args(method, 0)
        with riemfl_checks("eager"):  # the errors are expected at the call
            bad_input.check_bad_input(self.manifold, method, args, roles)


#: numpy float64 versus torch float64: same algorithm, only rounding differs
TOLERANCE_BACKENDS = Tolerance(atol=1e-9, rtol=1e-9)


class _Standalone(ManifoldTests):
    """The kit's argument builder outside pytest (not a test class)."""

    __test__ = False

    def __init__(self, manifold: Manifold, batch_size: int) -> None:
        self.manifold = manifold
        self.batch_size = batch_size

    def require_constant(self, name: str) -> float:
        try:
            return getattr(self.manifold, name)
        except NotImplementedError:  # an open set without a uniform reach: a short step
            return 0.1


def method_arguments(
    manifold: Manifold, method: str, seed: int = 0, batch_size: int = 3
) -> tuple[list[np.ndarray], list[str]]:
    """The conformance kit's arguments of ``method`` for ``manifold``, outside a test class.

    numpy float64 arrays with a leading batch of ``batch_size`` (points, tangent vectors of
    norm within the kit's radius, ambient arrays near the manifold for ``project``) and their
    roles (``"point"``, ``"tangent"``, ``"ambient"``), as
    :meth:`ManifoldTests.method_args` draws them; where the manifold has no uniform reach, the
    ambient step of ``project`` takes 0.1.
    """
    return _Standalone(manifold, batch_size).method_args(method, seed)

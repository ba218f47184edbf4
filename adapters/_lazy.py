"""Shared plumbing of the adapters: lazy imports, classes built on first use, wrapped manifolds.

An adapter subclasses a base class of the library it adapts to (``geoopt.Manifold``,
``pymanopt.manifolds.manifold.Manifold``). Importing that library when ``riemfl.adapters.geoopt``
is imported would make the optional dependency a hard one, so the subclass is built the first
time it is needed, by :class:`LazyClass`, and registered under a fixed module-level name: pickle,
``copy.deepcopy`` and ``torch.save`` then find it as ``riemfl.adapters.<lib>.<Name>`` through the
module's ``__getattr__`` (PEP 562), as if it had been defined at import time.

The other direction, a riemfl manifold backed by another library's manifold, shares
:class:`ForeignManifold`: the riemfl map -> foreign method table, the maps declared unsupported
where the other library is not exact, and riemfl's constants, which other libraries lack.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any

from riemfl.errors import MissingDependencyError, ParameterError
from riemfl.manifolds.base import Manifold

__all__ = ["require", "LazyClass", "ForeignManifold", "EXACT_MAPS"]


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module``, or raise :class:`~riemfl.errors.MissingDependencyError`.

    Parameters
    ----------
    module : str
        The module to import, e.g. ``"geoopt"``.
    extra : str
        The riemfl extra that installs it, named in the error message.
    feature : str
        What needs it (``"riemfl.adapters.geoopt.to_geoopt"``), also named in the message.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{feature} needs the optional dependency {module!r}, which is not installed "
            f'(import failed: {exc}); install it with: pip install "riemfl[{extra}]"'
        ) from exc


class LazyClass:
    """A class whose base comes from an optional dependency, built once on first use.

    Parameters
    ----------
    module : str
        ``__name__`` of the adapter module; the built class gets it as ``__module__``.
    name : str
        The class name (and the module attribute its ``__getattr__`` answers to).
    build : callable
        ``build()`` returns the class; it imports the dependency (through :func:`require`).
    """

    def __init__(self, module: str, name: str, build: Callable[[], type]) -> None:
        self.module, self.name, self._build = module, name, build
        self._cls: type | None = None

    def get(self) -> type:
        """The class (built and cached on the first call)."""
        if self._cls is None:
            cls = self._build()
            cls.__module__, cls.__name__, cls.__qualname__ = self.module, self.name, self.name
            self._cls = cls
        return self._cls


#: riemfl maps that a wrapped library provides under the same name but possibly not exactly in
#: riemfl's sense (an approximate exp, a projection that is not the nearest point): a wrapper
#: takes them only where the table of known classes, or the caller, vouches for them
EXACT_MAPS = ("project", "exp", "log", "dist", "parallel_transport", "inverse_retract")


class ForeignManifold(Manifold):
    """Base of the riemfl manifolds that another library's manifold backs.

    A subclass names the wrapped library's method for each riemfl map in :attr:`methods`,
    implements :meth:`_call` (run one of those methods on riemfl's arrays: conversions,
    broadcasting) and calls :meth:`_wrap` in its constructor. The base then maps every private
    riemfl map onto the named method, falls back to riemfl's default transport (the projection
    onto :math:`T_yM`) where the library has none, and holds what other libraries do not
    provide: the maps of :data:`EXACT_MAPS` declared unsupported (with the reason riemfl's
    conformance kit reports when it skips them) and riemfl's constants.
    """

    library = "another library"
    #: riemfl map -> the wrapped library's method of the same meaning (absent: it has none)
    methods: dict[str, str] = {}

    def _wrap(
        self,
        wrapped: Any,
        base: type,
        known: dict[str, dict[str, str]],
        exact: Iterable[str] | None,
        constants: Mapping[str, float | None],
    ) -> None:
        """Record the wrapped manifold, validate ``exact``, declare the unsupported maps.

        Parameters
        ----------
        wrapped : object
            The other library's manifold.
        base : type
            The other library's manifold base class: a method that a subclass does not
            override counts as missing (the base only raises).
        known : dict
            class name -> {map of :data:`EXACT_MAPS`: ``""`` where that class computes it
            exactly, else why not}.
        exact : iterable of str or None
            The caller's claim (``None``: the table's).
        constants : mapping
            ``reach``, ``diameter``, ``injectivity_radius`` (None: unknown).
        """
        self.wrapped = wrapped
        kind = type(wrapped).__name__
        self._available = {
            m
            for m, name in self.methods.items()
            if getattr(type(wrapped), name, None) is not getattr(base, name, None)
        }
        table = known.get(kind, {})
        claimed = {m for m, why in table.items() if not why} if exact is None else set(exact)
        unknown = claimed - set(EXACT_MAPS)
        if unknown:
            raise ParameterError(
                f"{self.name}: exact= names {sorted(unknown)}; expected a subset of {EXACT_MAPS}"
            )
        missing = sorted(claimed - self._available)
        if missing:
            raise ParameterError(
                f"{self.name}: exact= claims {missing}, which {self.library}'s {kind} does not "
                "implement"
            )
        default = (
            f"{self.library}'s {kind} is not known to compute it exactly in riemfl's sense (pass "
            "exact=[...] to vouch for it)"
        )
        self.unsupported = {
            m: f"{self.name}: {m}: {table.get(m) or default}"
            for m in EXACT_MAPS
            if m not in claimed
        }
        self._constants = dict(constants)

    # ------------------------------------------------------------------ constants
    def _constant(self, what: str) -> float:
        value = self._constants.get(what)
        if value is None:
            raise NotImplementedError(
                f"{self.name}: {self.library} provides no {what}; pass {what}= when wrapping"
            )
        return float(value)

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def reach(self) -> float:
        return self._constant("reach")

    @property
    def diameter(self) -> float:
        return self._constant("diameter")

    @property
    def injectivity_radius(self) -> float:
        return self._constant("injectivity_radius")

    # ------------------------------------------------------------------ maps
    def _call(self, fn: Callable[..., Any], *arrays: Any, scalar: bool = False) -> Any:
        """Run the wrapped library's ``fn`` on riemfl arrays (``scalar``: one value a point)."""
        raise NotImplementedError

    def _apply(self, what: str, *arrays: Any, scalar: bool = False) -> Any:
        if what not in self._available:
            return self._not_implemented(what)
        return self._call(getattr(self.wrapped, self.methods[what]), *arrays, scalar=scalar)

    def _project(self, a):
        return self._apply("project", a)

    def _to_tangent(self, x, a):
        return self._apply("to_tangent", x, a)

    def _egrad_to_rgrad(self, x, g):
        return self._apply("egrad_to_rgrad", x, g)

    def _inner(self, x, u, v):
        return self._apply("inner", x, u, v, scalar=True)

    def _retract(self, x, u):
        return self._apply("retract", x, u)

    def _inverse_retract(self, x, y):
        return self._apply("inverse_retract", x, y)

    def _exp(self, x, u):
        return self._apply("exp", x, u)

    def _log(self, x, y):
        return self._apply("log", x, y)

    def _dist(self, x, y):
        return self._apply("dist", x, y, scalar=True)

    def _transport(self, x, y, u):
        if "transport" not in self._available:
            return self._to_tangent(y, u)
        return self._apply("transport", x, y, u)

    def _parallel_transport(self, x, y, u):
        return self._apply("parallel_transport", x, y, u)

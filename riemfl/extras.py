"""The optional dependencies: which extra of ``pyproject.toml`` installs which module.

:data:`EXTRAS` is the one table of them. The command line checks the extras an entry declares
before anything runs (:func:`require_extras`: one line naming the ``pip install`` command, no
traceback), the library calls that need one say which (:class:`~riemfl.errors.
MissingDependencyError`), and the test-suite's skips name it
(:func:`riemfl.testing.importorskip`).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from types import ModuleType

from .errors import MissingDependencyError, ParameterError

__all__ = ["EXTRAS", "extra_of", "installed", "import_extra", "missing_extras", "require_extras"]

#: Each extra of ``pyproject.toml`` that brings a module riemfl imports, and what it installs
#: (the module to import -> the package that provides it). ``all`` is every one of them;
#: ``docs`` and ``dev`` are for contributors.
EXTRAS: dict[str, dict[str, str]] = {
    "torch": {"torch": "torch"},
    "data": {"sklearn": "scikit-learn", "matplotlib": "matplotlib"},
    "privacy": {"dp_accounting": "dp-accounting"},
    "flower": {"flwr": "flwr"},
    "geoopt": {"geoopt": "geoopt"},
    "pymanopt": {"pymanopt": "pymanopt"},
    "autograd": {"autograd": "autograd"},
}


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (looked up, not imported: torch takes seconds)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a broken half-import
        return False


def extra_of(module: str) -> str | None:
    """The extra of :data:`EXTRAS` that installs ``module`` (its top-level package), or None."""
    top = module.partition(".")[0]
    return next((extra for extra, modules in EXTRAS.items() if top in modules), None)


def missing_extras(extras: Iterable[str]) -> dict[str, list[str]]:
    """The extras of ``extras`` (keys of :data:`EXTRAS`) with a module that is not installed.

    Returns
    -------
    dict of str to list of str
        Extra -> the packages of its modules that are missing, in the order given; empty when
        all are there.

    Raises
    ------
    ParameterError
        For a name that is not a key of :data:`EXTRAS`.
    """
    missing: dict[str, list[str]] = {}
    for extra in extras:
        if extra not in EXTRAS:
            raise ParameterError(f"unknown extra {extra!r}; expected one of {list(EXTRAS)}")
        absent = [package for m, package in EXTRAS[extra].items() if not installed(m)]
        if absent:
            missing[extra] = absent
    return missing


def require_extras(extras: Iterable[str], what: str) -> None:
    """Raise unless every module of ``extras`` is installed.

    Parameters
    ----------
    extras : iterable of str
        Keys of :data:`EXTRAS`.
    what : str
        What needs them, named in the message (``"riemfl reproduce floral"``).

    Raises
    ------
    MissingDependencyError
        Naming the missing packages and the one ``pip install`` command that installs them:
        ``riemfl reproduce floral needs torch, which is not installed: pip install
        "riemfl[torch]"``.
    """
    missing = missing_extras(dict.fromkeys(extras))
    if missing:
        packages = [package for absent in missing.values() for package in absent]
        verb = "is" if len(packages) == 1 else "are"
        raise MissingDependencyError(
            f"{what} needs {', '.join(packages)}, which {verb} not installed: "
            f'pip install "riemfl[{",".join(missing)}]"'
        )


def import_extra(module: str, what: str) -> ModuleType:
    """Import ``module`` (a module of :data:`EXTRAS`, or a submodule of one), or say which extra
    installs it.

    Parameters
    ----------
    module : str
        The module, e.g. ``"sklearn.datasets"``.
    what : str
        What needs it, named in the message (``"load_digits"``).

    Raises
    ------
    MissingDependencyError
        ``load_digits needs scikit-learn, which is not installed: pip install "riemfl[data]"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        extra = extra_of(module)
        top = module.partition(".")[0]
        if extra is None:  # not an optional dependency of riemfl: a broken install
            raise
        package = EXTRAS[extra][top]
        raise MissingDependencyError(
            f'{what} needs {package}, which is not installed: pip install "riemfl[{extra}]"'
        ) from exc

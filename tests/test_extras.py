"""riemfl.extras: the table of optional dependencies, and the library calls that need one name
its extra (with the module refused through ``sys.modules``, as if it were not installed)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from riemfl.errors import MissingDependencyError, ParameterError
from riemfl.extras import EXTRAS, extra_of, import_extra, missing_extras, require_extras
from riemfl.testing import importorskip


def refuse(monkeypatch, *modules: str) -> None:
    """Make ``import module`` fail as it does when the package is not installed."""
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def test_every_module_of_the_table_has_one_extra():
    owners = [(m, e) for e, modules in EXTRAS.items() for m in modules]
    assert len({m for m, _ in owners}) == len(owners)
    for module, extra in owners:
        assert extra_of(module) == extra and extra_of(module + ".sub") == extra
    assert extra_of("numpy") is None


def test_import_extra_names_the_package_and_the_extra(monkeypatch):
    refuse(monkeypatch, "sklearn", "sklearn.datasets")
    with pytest.raises(MissingDependencyError) as info:
        import_extra("sklearn.datasets", "load_digits")
    assert str(info.value) == (
        'load_digits needs scikit-learn, which is not installed: pip install "riemfl[data]"'
    )
    assert isinstance(info.value, ImportError)  # callers that catch ImportError still do


def test_a_module_outside_the_table_fails_as_itself():
    with pytest.raises(ModuleNotFoundError, match="no_such_module_riemfl"):
        import_extra("no_such_module_riemfl", "x")


def test_require_extras_lists_every_missing_extra(monkeypatch):
    monkeypatch.setattr("riemfl.extras.installed", lambda m: m not in ("torch", "dp_accounting"))
    assert missing_extras(["torch", "data", "privacy"]) == {
        "torch": ["torch"],
        "privacy": ["dp-accounting"],
    }
    with pytest.raises(MissingDependencyError, match=r'pip install "riemfl\[torch,privacy\]"'):
        require_extras(["torch", "privacy"], "this")
    with pytest.raises(ParameterError, match="unknown extra"):
        missing_extras(["tensorflow"])


def _one_release_epsilon(accountant_type):
    accountant = accountant_type(1.0, 1e-5, population=10, sample_size=2)
    accountant.sampled()
    return accountant.epsilon()


@pytest.mark.parametrize(
    "call, modules, extra",
    [
        ("load_digits", ("sklearn", "sklearn.datasets"), "data"),
        ("history_plot", ("matplotlib",), "data"),
        ("autograd_problem", ("autograd", "autograd.numpy"), "autograd"),
        ("epsilon", ("dp_accounting",), "privacy"),
    ],
)
def test_library_calls_name_their_extra(monkeypatch, tmp_path, call, modules, extra):
    from riemfl import Sphere
    from riemfl.federated import History
    from riemfl.federated.privacy_accounting import ClientLevelAccountant
    from riemfl.problems import FunctionProblem
    from riemfl.problems.data import load_digits

    calls = {
        "load_digits": load_digits,
        "history_plot": lambda: History(metrics={"round": [0, 1], "grad_norm": [1.0, 0.5]}).plot(
            tmp_path / "h.png"
        ),
        "autograd_problem": lambda: FunctionProblem(
            Sphere(3), [lambda x: x.sum()], differentiation="autograd"
        ).egrad(np.eye(3)[0]),
        "epsilon": lambda: _one_release_epsilon(ClientLevelAccountant),
    }
    refuse(monkeypatch, *modules)
    with pytest.raises(MissingDependencyError, match=rf'pip install "riemfl\[{extra}\]"'):
        calls[call]()


def test_importorskip_names_the_extra():
    with pytest.raises(pytest.skip.Exception, match=r"pip install 'riemfl\[data\]'"):
        with pytest.MonkeyPatch.context() as monkeypatch:
            refuse(monkeypatch, "sklearn")
            importorskip("sklearn")

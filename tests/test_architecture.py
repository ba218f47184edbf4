"""The layers of docs/architecture.md: what each package may import, and no private names
across modules. Every import counts, at module level or inside a function."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]

FOUNDATION = {"errors", "tuning", "progress"}
CORE = FOUNDATION | {
    "_validation",
    "backend",
    "check_levels",
    "check_levels_torch",
    "linalg",
    "linalg_torch",
    "extras",
}
#: top-level module or package of riemfl -> what of riemfl it may import
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "tuning": set(),
    "progress": set(),
    "_validation": {"errors"},
    "backend": {"_validation", "errors"},
    "check_levels": {"backend", "check_levels_torch", "errors"},  # (imported while compiling)
    "check_levels_torch": {"check_levels", "errors"},
    "linalg": {
        "backend",
        "check_levels",
        "errors",
        "linalg_torch",
    },  # (imported where torch is used)
    "linalg_torch": {"linalg"},
    "extras": {"errors"},
    "manifolds": CORE,
    "problems": CORE | {"manifolds"},
    "testing": CORE | {"manifolds"},
    "stats": CORE | {"manifolds"},
    "federated": CORE | {"manifolds", "problems", "stats"},
    "theory": CORE | {"manifolds", "problems"},
    "nn": CORE | {"manifolds", "problems", "stats", "federated", "theory"},
    "experiments": CORE | {"manifolds", "problems", "stats", "federated", "nn", "theory"},
    "adapters": CORE
    | {"manifolds", "problems", "testing", "stats", "federated", "theory", "nn", "experiments"},
    "cli": CORE
    | {"__init__", "manifolds", "problems", "stats", "federated", "theory", "nn", "experiments"},
    "__init__": CORE | {"manifolds"},
    "__main__": {"cli"},
}


def _modules() -> Iterator[tuple[str, Path]]:
    """(dotted name, path) of every module of the installed layout (adapters/ is
    riemfl.adapters)."""
    for folder, prefix in ((ROOT / "riemfl", "riemfl"), (ROOT / "adapters", "riemfl.adapters")):
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            yield ".".join((prefix, *parts)), path


def _imports(name: str, path: Path) -> Iterator[tuple[str, list[str], int]]:
    """(absolute module imported, names imported from it, line) for every riemfl import."""
    package = name.rsplit(".", 1)[0] if not name.endswith("__init__") else name[: -len(".__init__")]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("riemfl"):
                names = [a.name for a in node.names]
                # ``from riemfl import manifolds`` imports the submodule
                yield target, names, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("riemfl"):
                    yield alias.name, [], node.lineno


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def _own_layer(name: str) -> str:
    parts = name.split(".")
    if parts[1] == "__init__":
        return "__init__"
    return parts[1]


def _targets(target: str, names: list[str]) -> list[str]:
    """The layers an import reaches: ``from riemfl import manifolds`` reaches manifolds."""
    if target == "riemfl":
        return [n for n in names if n in ALLOWED] or ["__init__"]
    return [_layer(target)]


def test_every_package_is_in_the_layer_table():
    layers = {_own_layer(name) for name, _ in _modules()}
    assert layers <= set(ALLOWED), f"add {sorted(layers - set(ALLOWED))} to docs/architecture.md"


def test_imports_follow_the_layers():
    crossings = []
    for name, path in _modules():
        own = _own_layer(name)
        for target, names, line in _imports(name, path):
            for layer in _targets(target, names):
                if layer != own and layer not in ALLOWED[own]:
                    crossings.append(f"{path.relative_to(ROOT)}:{line}: {own} imports {layer}")
    assert not crossings, "imports that cross the layers:\n" + "\n".join(crossings)


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def test_no_private_name_is_imported_from_another_module():
    found = []
    for name, path in _modules():
        package = name.rsplit(".", 1)[0]
        for target, names, line in _imports(name, path):
            where = f"{path.relative_to(ROOT)}:{line}"
            found += [f"{where}: {n} from {target}" for n in names if _private(n)]
            private_parts = [i for i, p in enumerate(target.split(".")) if _private(p)]
            if private_parts:
                owner = ".".join(target.split(".")[: private_parts[0]])
                if not (package == owner or package.startswith(owner + ".")):
                    found.append(f"{where}: the private module {target} from outside {owner}")
    assert not found, "private names used across modules:\n" + "\n".join(found)


def test_pyproject_lists_every_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    packages = {name[: -len(".__init__")] for name, _ in _modules() if name.endswith(".__init__")}
    assert packages == listed, (
        f"pyproject.toml [tool.setuptools] packages: missing {sorted(packages - listed)}, "
        f"stale {sorted(listed - packages)}"
    )


@pytest.mark.parametrize("crossing", ["riemfl.manifolds.x imports federated"])
def test_the_layer_check_can_fail(tmp_path, crossing):
    # a module of the manifolds layer that imports the federated layer is reported
    module = tmp_path / "x.py"
    module.write_text("from ..federated import run_sync\n", encoding="utf-8")
    ((target, names, _),) = _imports("riemfl.manifolds.x", module)
    assert _targets(target, names) == ["federated"]
    assert "federated" not in ALLOWED[_own_layer("riemfl.manifolds.x")]

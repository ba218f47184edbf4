"""Write the API reference: one page per public module of riemfl and riemfl.adapters.

Run ``python docs/gen_reference.py`` after adding, renaming or removing a module: it rewrites
``docs/reference/`` (a page per module, holding a ``::: module`` directive that mkdocstrings
renders from the docstrings) and the reference part of the ``nav`` in ``mkdocs.yml`` (between
the two ``# reference`` marker lines). ``tests/test_packaging.py`` fails when what this script
would write differs from what is committed, so a new module cannot be left out.

A module is public when no part of its dotted name starts with ``_``. A package's page shows
its docstring, the objects defined in its ``__init__.py`` (not the names it re-exports: they are
documented on their own module's page) and links to its submodules.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import tokenize
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from griffe_sphinx_roles import to_markdown  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"
MKDOCS_YML = ROOT / "mkdocs.yml"
# dotted package name -> its folder (``riemfl.adapters`` lives in ``adapters/``, see pyproject.toml)
SOURCES = {"riemfl": ROOT / "riemfl", "riemfl.adapters": ROOT / "adapters"}
NAV_BEGIN = "  # reference: begin (written by docs/gen_reference.py, do not edit by hand)"
NAV_END = "  # reference: end"


def _is_public(dotted: str) -> bool:
    return not any(part.startswith("_") for part in dotted.split("."))


@functools.cache
def package_folders() -> dict[str, Path]:
    """Every package (a folder with ``__init__.py``) of riemfl and riemfl.adapters, by name."""
    found: dict[str, Path] = {}
    for top, folder in SOURCES.items():
        for init in sorted(folder.rglob("__init__.py")):
            rel = init.parent.relative_to(folder).parts
            if "__pycache__" in rel:
                continue
            found[".".join((top, *rel))] = init.parent
    return found


def public_modules() -> dict[str, Path]:
    """Every public module (packages included) of riemfl and riemfl.adapters: name -> file."""
    modules: dict[str, Path] = {}
    packages = package_folders()
    for name, folder in packages.items():
        if not _is_public(name):
            continue
        modules[name] = folder / "__init__.py"
        for file in sorted(folder.glob("*.py")):
            dotted = f"{name}.{file.stem}"
            if file.name != "__init__.py" and _is_public(dotted) and dotted not in packages:
                modules[dotted] = file
    return dict(sorted(modules.items()))


@functools.cache
def _summary(file: Path) -> str:
    """The first paragraph of a module's docstring on one line, Sphinx roles rewritten."""
    doc = ""
    with file.open("rb") as source:  # the first token only: parsing whole modules is slow
        for token in tokenize.tokenize(source.readline):
            if token.type in (tokenize.ENCODING, tokenize.NL, tokenize.COMMENT):
                continue
            if token.type == tokenize.STRING:
                doc = inspect.cleandoc(ast.literal_eval(token.string)).strip()
            break
    return to_markdown(" ".join(doc.split("\n\n")[0].split()))


def _own_members(init: Path) -> list[str]:
    """Public functions and classes defined (not imported) in a package's ``__init__.py``."""
    tree = ast.parse(init.read_text(encoding="utf-8"))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [n.name for n in tree.body if isinstance(n, kinds) and not n.name.startswith("_")]


def page_path(module: str) -> Path:
    """Where a module's page lives, relative to ``docs/``."""
    parts = module.split(".")
    if module in package_folders():
        return Path("reference", *parts, "index.md")
    return Path("reference", *parts[:-1], parts[-1] + ".md")


def _page(module: str, modules: dict[str, Path]) -> str:
    # the Markdown anchor lets mkdocs-autorefs link the module's name (``:mod:`` roles)
    lines = [f"# `{module}`", "", f"[](){{#{module}}}", "", f"::: {module}"]
    if module in package_folders():
        members = _own_members(modules[module])
        lines += [
            "    options:",
            f"      members: {members if members else 'false'}".replace("'", '"'),
        ]
        children = [m for m in modules if m.rpartition(".")[0] == module]
        if children:
            here = page_path(module).parent
            lines += ["", "## Modules", ""]
            for child in children:
                link = page_path(child).relative_to(here).as_posix()
                summary = _summary(modules[child])
                lines.append(f"- [`{child}`]({link})" + (f": {summary}" if summary else ""))
    return "\n".join(lines) + "\n"


def _index(modules: dict[str, Path]) -> str:
    lines = [
        "# API reference",
        "",
        "One page per public module of `riemfl` and `riemfl.adapters`, rendered from the",
        "docstrings (numpydoc). A package's page shows what its `__init__.py` defines and links",
        "its modules; the names a package re-exports (`from riemfl import Stiefel`) are",
        "documented on the page of the module that defines them.",
        "",
        "| module | what it holds |",
        "|---|---|",
    ]
    for module, file in modules.items():
        link = page_path(module).relative_to("reference").as_posix()
        lines.append(f"| [`{module}`]({link}) | {_summary(file).replace('|', '&#124;')} |")
    return "\n".join(lines) + "\n"


def _nav(modules: dict[str, Path]) -> list[str]:
    """The ``API reference`` section of ``nav``, nested like the packages."""
    lines = ["  - API reference:", "      - reference/index.md"]
    packages = package_folders()
    for module in modules:
        depth = module.count(".")
        indent = "      " + "    " * depth
        if module in packages:
            lines.append(f"{indent}- {module}:")
            lines.append(f"{indent}    - {page_path(module).as_posix()}")
        else:
            lines.append(f"{indent}- {page_path(module).as_posix()}")
    return lines


def expected_files() -> dict[Path, str]:
    """Every reference page (path relative to ``docs/``) and its content."""
    modules = public_modules()
    files = {Path("reference", "index.md"): _index(modules)}
    for module in modules:
        files[page_path(module)] = _page(module, modules)
    return files


def expected_mkdocs_yml() -> str:
    """``mkdocs.yml`` with its reference nav rewritten."""
    text = MKDOCS_YML.read_text(encoding="utf-8")
    head, begin, rest = text.partition(NAV_BEGIN + "\n")
    body, end, tail = rest.partition(NAV_END + "\n")
    if not begin or not end:
        raise SystemExit(f"mkdocs.yml lacks the marker lines {NAV_BEGIN!r} and {NAV_END!r}")
    return head + begin + "\n".join(_nav(public_modules())) + "\n" + end + tail


def stale() -> list[str]:
    """What differs from what this script would write (empty when the reference is current)."""
    problems = []
    expected = expected_files()
    for rel, content in expected.items():
        path = DOCS / rel
        if not path.is_file():
            problems.append(f"missing page {path.relative_to(ROOT)}")
        elif path.read_text(encoding="utf-8") != content:
            problems.append(f"outdated page {path.relative_to(ROOT)}")
    for path in sorted(REFERENCE.rglob("*.md")):
        if path.relative_to(DOCS) not in expected:
            problems.append(f"page of no public module {path.relative_to(ROOT)}")
    if MKDOCS_YML.read_text(encoding="utf-8") != expected_mkdocs_yml():
        problems.append("outdated reference nav in mkdocs.yml")
    return problems


def main() -> int:
    expected = expected_files()
    for path in sorted(REFERENCE.rglob("*.md")):
        if path.relative_to(DOCS) not in expected:
            path.unlink()
    for rel, content in expected.items():
        path = DOCS / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    MKDOCS_YML.write_text(expected_mkdocs_yml(), encoding="utf-8")
    print(f"{len(expected) - 1} module pages in {REFERENCE.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())

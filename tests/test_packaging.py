"""What a user gets: the documentation site builds, and the wheel installs and runs the main job.

Quick: the API reference has a page for every public module (``docs/gen_reference.py`` writes
them; ``tests/test_architecture.py`` checks that ``pyproject.toml`` lists every package), and
the docstring rewriting of ``docs/griffe_sphinx_roles.py`` does what the site relies on.

Slow: ``mkdocs build --strict`` (about 7 s of CPU); the wheel and sdist built offline
(``python -m build --no-isolation``), checked by ``twine check`` and ``check-wheel-contents``,
then the wheel installed (not editable) into a fresh venv and the README's main job run from it
in its quick form (about 25 s of CPU, most of it the reproduction).
"""

from __future__ import annotations

import importlib.util
import os
import re
import site
import subprocess
import sys
import venv
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from riemfl.testing import importorskip

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _load_docs_script(name: str):
    spec = importlib.util.spec_from_file_location(f"_docs_{name}", ROOT / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen_reference = _load_docs_script("gen_reference")
roles = _load_docs_script("griffe_sphinx_roles")


# -- quick: the reference covers every module -------------------------


def test_every_public_module_has_its_reference_page_and_nav_entry():
    problems = gen_reference.stale()
    assert not problems, "run `python docs/gen_reference.py`:\n" + "\n".join(problems)


def test_public_modules_are_found_in_both_source_folders():
    modules = gen_reference.public_modules()
    for name in ("riemfl", "riemfl.manifolds.stiefel", "riemfl.adapters.flower.deploy"):
        assert name in modules
    assert "riemfl.adapters.pymanopt" in modules
    assert not [m for m in modules if any(part.startswith("_") for part in m.split("."))]


def test_sphinx_roles_become_markdown():
    text = (
        "Uses :math:`\\pi_c` and :class:`~riemfl.manifolds.Stiefel`, :func:`riemfl.run_sync`,\n"
        ":meth:`norm <riemfl.Manifold.norm>`, :func:`run_sync`.\n"
        "\n"
        ".. math::\n"
        "\n"
        "    y = W x\n"
        "      + b\n"
        "\n"
        "after, as code::\n"
        "\n"
        "    a::b\n"
    )
    out = roles.to_markdown(text)
    link = '<autoref identifier="{}" optional><code>{}</code></autoref>'.format
    assert "\\(\\pi_c\\)" in out and link("riemfl.manifolds.Stiefel", "Stiefel") in out
    assert link("riemfl.run_sync", "riemfl.run_sync") in out
    assert link("riemfl.Manifold.norm", "norm") in out
    assert "`run_sync`." in out and ":" + "class:" not in out and ":" + "func:" not in out
    assert "\\[\ny = W x\n+ b\n\\]\n\nafter, as code:\n\n    a::b\n" in out


def test_aligned_math_blocks_get_an_environment():
    # MathJax refuses a bare & ("Misplaced &"); Sphinx wraps such a block, and so does the site
    text = ".. math::\n\n    a &= b  && \\text{(1)}\\\\\n    c &= d\n"
    out = roles.to_markdown(text)
    assert out == "\\[\n\\begin{aligned}\na &= b  && \\text{(1)}\\\\\nc &= d\n\\end{aligned}\n\\]"
    already = ".. math::\n\n    \\begin{cases} a & b \\end{cases}\n"
    assert "aligned" not in roles.to_markdown(already)


def test_math_blocks_under_list_items_are_found_by_arithmatex():
    # under "* item" (2 spaces, not a Markdown continuation) the block goes to the left margin;
    # 4 spaces (a Markdown list item's content) stay
    text = "* item gives\n\n  .. math::\n      x = y\n\n  (after)\n"
    assert "\n\n\\[\nx = y\n\\]\n\n" in roles.to_markdown(text)
    text = "1.  item gives\n\n    .. math:: x = y\n"
    assert "\n\n    \\[\n    x = y\n    \\]" in roles.to_markdown(text)


def test_inline_math_broken_over_lines_stays_one_span():
    # a continuation line starting with "+ " would open a Markdown list item inside the formula
    text = "* retraction :math:`X + U = R^\\top(I + W\n  + \\tfrac12 W^2)R`, done\n"
    out = roles.to_markdown(text)
    assert out == "* retraction \\(X + U = R^\\top(I + W + \\tfrac12 W^2)R\\), done\n"


def test_simple_tables_become_markdown_tables():
    text = (
        "Intro:\n\n"
        "====  ==========\n"
        "a     b\n"
        "====  ==========\n"
        "x     first\n"
        "      continued\n"
        "y     :math:`z`\n"
        "====  ==========\n"
        "\n"
        "after\n"
    )
    lines = roles.to_markdown(text).split("\n")
    start = lines.index("| a | b |")
    assert lines[start : start + 4] == [
        "| a | b |",
        "| --- | --- |",
        "| x | first continued |",
        "| y | \\(z\\) |",
    ]
    assert lines[start + 4 :] == ["", "after", ""]


# -- quick: the site loads nothing from the network -----------------------------------------------

MATHJAX = ROOT / "docs" / "javascripts" / "vendor" / "mathjax"


def _mkdocs_assets() -> list[str]:
    yaml = importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return [*config.get("extra_javascript", []), *config.get("extra_css", [])]


def test_site_assets_are_local_files():
    """Formulas render offline: every script and stylesheet mkdocs.yml adds is a file of docs/
    (no CDN), MathJax among them, with its licence beside it."""
    assets = _mkdocs_assets()
    remote = [a for a in assets if "://" in a or a.startswith("//")]
    assert not remote, f"assets loaded from the network: {remote}"
    missing = [a for a in assets if not (ROOT / "docs" / a).is_file()]
    assert not missing, f"assets that are not files of docs/: {missing}"
    assert "javascripts/vendor/mathjax/tex-svg-full.js" in assets
    assert assets.index("javascripts/mathjax.js") < assets.index(
        "javascripts/vendor/mathjax/tex-svg-full.js"
    ), "the MathJax settings must load before MathJax"
    assert "Apache License" in (MATHJAX / "LICENSE").read_text(encoding="utf-8")


def test_vendored_mathjax_is_the_recorded_release():
    """The vendored file is the unchanged npm release that SOURCE.txt names (its sha256)."""
    import hashlib

    source = (MATHJAX / "SOURCE.txt").read_text(encoding="utf-8")
    recorded = source.split("tex-svg-full.js sha256:")[1].split()[0]
    actual = hashlib.sha256((MATHJAX / "tex-svg-full.js").read_bytes()).hexdigest()
    assert actual == recorded


# -- slow: the site, the wheel -------------------------------------------------------------------


def _run(*cmd: str | Path, cwd: Path = ROOT, env: dict | None = None) -> str:
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{cmd} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
def test_site_builds_strictly(tmp_path):
    """``mkdocs build --strict``: a broken link or anchor, a docstring mkdocstrings cannot
    parse or a module it cannot find fails the build (``validation:`` in mkdocs.yml)."""
    missing = [m for m in ("mkdocs", "material", "mkdocstrings_handlers.python") if not _has(m)]
    if missing:
        pytest.skip(f"the site needs {missing}: pip install -e '.[docs]'")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    _run(sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", tmp_path, env=env)
    assert (tmp_path / "reference" / "riemfl" / "adapters" / "flower" / "index.html").is_file()
    assert (tmp_path / "search" / "search_index.json").is_file()
    # docs/griffe_sphinx_roles.py is wired in: no Sphinx role reaches a page
    roles_left = [
        page.relative_to(tmp_path)
        for page in (tmp_path / "reference").rglob("*.html")
        if any(role in page.read_text(encoding="utf-8") for role in (":math:", ":class:", ":func:"))
    ]
    assert not roles_left
    # the built site works offline: MathJax is served from the site, no page loads a script or
    # stylesheet from another host
    assert (tmp_path / "javascripts" / "vendor" / "mathjax" / "tex-svg-full.js").is_file()
    assert (tmp_path / "javascripts" / "vendor" / "mathjax" / "LICENSE").is_file()
    url = r"=[\"'](?:https?:)?//"
    script = re.compile(r"<script\b[^>]*\bsrc" + url, re.I)
    tags = re.compile(r"<link\b[^>]*>", re.I)  # a stylesheet, font or icon from another host
    loaded = re.compile(r"\brel=[\"'][^\"']*(?:stylesheet|preload|icon)", re.I)
    online = []
    for page in tmp_path.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        links = [tag for tag in tags.findall(html) if loaded.search(tag)]
        if script.search(html) or any(re.search(r"\bhref" + url, tag) for tag in links):
            online.append(str(page.relative_to(tmp_path)))
    assert not online, f"pages that load a script or stylesheet from the network: {online[:5]}"
    spd = (tmp_path / "reference" / "riemfl" / "manifolds" / "spd" / "index.html").read_text(
        encoding="utf-8"
    )
    assert 'src="../../../../javascripts/vendor/mathjax/tex-svg-full.js"' in spd
    assert 'class="arithmatex"' in spd


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _build_backend_missing() -> list[str]:
    from packaging.requirements import Requirement

    missing = []
    for text in PYPROJECT["build-system"]["requires"]:
        requirement = Requirement(text)
        try:
            version = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            version = None
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            missing.append(f"{text} (installed: {version})")
    return missing


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The wheel and sdist, built offline from the working tree."""
    missing = [m for m in ("build", "twine", "check_wheel_contents") if not _has(m)]
    missing += _build_backend_missing()
    if missing:
        pytest.skip(f"building needs {missing}: pip install -e '.[dev]'")
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT)
    return out


@pytest.mark.slow
def test_wheel_and_sdist_pass_the_packaging_checks(dist):
    (wheel,) = dist.glob("riemfl-*.whl")
    (sdist,) = dist.glob("riemfl-*.tar.gz")
    _run(sys.executable, "-m", "twine", "check", "--strict", wheel, sdist)
    _run(sys.executable, "-m", "check_wheel_contents", wheel)
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("riemfl/py.typed", "riemfl/adapters/__init__.py", "riemfl/adapters/geoopt.py"):
        assert needed in names
    assert "riemfl/adapters/flower/__init__.py" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert not [n for n in names if n.split("/")[0] in {"tests", "benchmarks", "examples", "docs"}]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


#: the packages of the extras the main job must not need (only ``data`` is): the job runs with
#: them made unimportable, as on a machine where only ``riemfl[data]`` was installed
OTHER_EXTRAS = ("torch", "flwr", "geoopt", "pymanopt", "autograd", "dp_accounting")
_WITHOUT_OTHER_EXTRAS = f"""
import importlib.abc, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {OTHER_EXTRAS!r}:
            raise ImportError(f"No module named {{name!r}} (not in riemfl[data])")
        return None

sys.meta_path.insert(0, NotInstalled())
from riemfl.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_installed_wheel_runs_the_main_job(dist, tmp_path):
    """The wheel, not the working tree: installed into a fresh venv and run from outside the
    repository, it imports from the venv, its entry point runs, and the main job writes the
    quick reproduction's report (its first figure: the whole quick job costs 20 s more and runs
    in process in test_cli_federated) with only the ``data`` extra importable."""
    (wheel,) = dist.glob("riemfl-*.whl")
    env_dir = tmp_path / "venv"
    # Dependencies come from the running environment, not from the network: the system
    # site-packages, and through a .pth file those of this interpreter when it is itself a venv
    # (path entries only: its .pth files, an editable riemfl's among them, are not run).
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    (Path(purelib.strip()) / "_outer_env.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n", encoding="utf-8"
    )
    pip = ("-m", "pip", "install", "--no-index", "--no-deps", "--ignore-installed", "--quiet")
    _run(python, *pip, wheel, cwd=tmp_path)

    code = "import riemfl, riemfl.adapters.flower as f; print(riemfl.__file__); print(f.__file__)"
    for where in _run(python, "-c", code, cwd=tmp_path).split():
        assert Path(where).resolve().is_relative_to(env_dir.resolve()), where

    riemfl = env_dir / ("Scripts/riemfl.exe" if os.name == "nt" else "bin/riemfl")
    assert _run(riemfl, "--version", cwd=tmp_path).startswith("riemfl ")  # the entry point
    out = tmp_path / "report"
    job = ("reproduce", "zhang2024", "--quick", "--figure", "1", "--out", out, "--no-progress")
    printed = _run(python, "-c", _WITHOUT_OTHER_EXTRAS, *job, cwd=tmp_path)
    assert f"report: {out}/report.md" in printed
    assert "fig1.png" in (out / "report.md").read_text(encoding="utf-8")
    assert (out / "fig1.png").stat().st_size > 0

"""The documentation's code runs: README example and the custom-manifold walkthrough."""

import re
from pathlib import Path

import numpy as np
import pytest

from riemfl.testing import importorskip

ROOT = Path(__file__).resolve().parents[1]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def _readme_block(marker: str) -> str:
    (block,) = [b for b in python_blocks(ROOT / "README.md") if marker in b]
    return block


def test_readme_example_runs_and_converges(capsys):
    namespace: dict = {}
    exec(_readme_block("Stiefel(50, 3)"), namespace)  # noqa: S102 - our own documentation
    x, c = namespace["X"], namespace["C"]
    assert np.trace(x.T @ c @ x) == pytest.approx(np.linalg.eigvalsh(c)[-3:].sum(), rel=1e-6)
    assert "log(X, Y) == U: True" in capsys.readouterr().out


def test_readme_federated_example_converges(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(_readme_block("run_sync"), namespace)  # noqa: S102 - our own documentation
    history = namespace["history"]
    assert history.grad_norm[-1] < 1e-8 * history.grad_norm[0]
    assert abs(history.optimality_gap[-1]) < 1e-8
    assert (tmp_path / "history.json").exists()


def _oblique_namespace() -> dict:
    namespace: dict = {}
    blocks = python_blocks(ROOT / "docs" / "custom-manifold.md")
    for block in blocks[:2]:
        exec(block, namespace)  # noqa: S102
    return namespace


OBLIQUE = _oblique_namespace()["Oblique"]


def test_custom_manifold_usage_block():
    ns = _oblique_namespace()
    m, x, y = ns["M"], ns["x"], ns["y"]
    assert float(m.dist(x, y)) == pytest.approx(0.5)


from riemfl.testing import ManifoldTests  # noqa: E402  (after the profile is loaded)


class TestOblique(ManifoldTests):
    manifold = OBLIQUE(5, 3)


def test_learned_curve_figure_script(tmp_path):
    """docs/learned_curve.py learns a curve that avoids the ridge, and draws it."""
    importorskip("matplotlib")
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "learned_curve", ROOT / "docs" / "learned_curve.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    control_points, history = module.learn(steps=150)
    straight = np.array([module.START, [0.0, 0.0], module.END])
    assert module.max_loss_along(control_points) < 0.2 * module.max_loss_along(straight)
    assert history[-1] < history[0]
    out = module.main(["--steps", "20", "--out", str(tmp_path / "curve.png")])
    assert out.exists() and out.stat().st_size > 10_000


def test_curves_doc_example_runs():
    namespace: dict = {}
    exec(python_blocks(ROOT / "docs" / "curves.md")[0], namespace)  # noqa: S102
    assert namespace["curve"].degree == 2


def test_stats_doc_example_runs():
    namespace: dict = {}
    exec(python_blocks(ROOT / "docs" / "stats.md")[1], namespace)  # noqa: S102
    assert namespace["mean"].converged and namespace["median"].converged


def test_adapters_doc_runs():
    for module in ("torch", "geoopt", "pymanopt"):  # the page's blocks use all three
        importorskip(module)
    namespace: dict = {}
    for block in python_blocks(ROOT / "docs" / "adapters.md"):  # the blocks assert their results
        exec(block, namespace)  # noqa: S102 - our own documentation


def _extras_table(path: Path) -> list[str]:
    """The extras named in the first column of the ``| extra | for |`` table of a page."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index("| extra | for |") + 2  # past the header and the |---| row
    names: list[str] = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        names += re.findall(r"`([^`]+)`", line.split("|")[1])
    return names


def test_the_install_page_lists_every_extra_of_pyproject():
    """docs/index.md names each extra of [project.optional-dependencies] once, and no other."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = pyproject["project"]["optional-dependencies"]
    named = _extras_table(ROOT / "docs" / "index.md")
    assert sorted(named) == sorted(set(named)), f"named twice: {named}"
    assert set(named) == set(extras), (
        f"docs/index.md lacks {sorted(set(extras) - set(named))}, "
        f"names unknown {sorted(set(named) - set(extras))}"
    )
    # `all` is "everything above": every extra but itself and the contributors' docs and dev
    (everything,) = extras["all"]
    inside = set(everything.partition("[")[2].rstrip("]").split(","))
    assert inside == set(extras) - {"all", "docs", "dev"}


_LINK = re.compile(r"\[([^\[\]]+)\]\(([^)\s]+)\)")
_PATH_TEXT = re.compile(r"(?:\.\./)*[\w./-]*(?:\.md|\.py|/)(?:, .*)?")


def test_site_link_texts_name_their_target_not_a_file():
    """A link on the site reads "the adapters guide", not "docs/adapters.md": a file name means
    nothing to a reader of the site (the generated API reference names modules, so is skipped)."""
    bad = []
    for path in sorted((ROOT / "docs").rglob("*.md")):
        if "reference" in path.relative_to(ROOT / "docs").parts:
            continue
        for text, target in _LINK.findall(path.read_text(encoding="utf-8")):
            if _PATH_TEXT.fullmatch(" ".join(text.replace("`", "").split())):
                bad.append(f"{path.relative_to(ROOT)}: [{text}]({target})")
    assert not bad, "link texts that are file paths:\n" + "\n".join(bad)

"""The asynchronous documentation's code runs: every ```python block of docs/federated/async/*.md.

Each page's blocks run top to bottom in one namespace (later blocks use earlier names), in a
temporary working directory. The blocks carry their own assertions (the rules' formulas checked by
hand on Euclidean space, small runs of ``run_async``); the tests below add checks on the names
they leave behind, and check the links between the pages.
"""

import inspect
import re
from pathlib import Path

import numpy as np
import pytest

from riemfl.federated import AsyncFedED

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "federated" / "async"
PAGES = (
    "index.md",
    "fedasync.md",
    "fedbuff.md",
    "dcasgd.md",
    "asyncfeded.md",
    "orthocorrect.md",
    "simulator.md",
    "asyncmanifold.md",
    "asyncbezier.md",
    "asynccurve.md",
)


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def run_page(name: str) -> dict:
    namespace: dict = {"__name__": f"docs_async_{name.removesuffix('.md')}"}
    blocks = python_blocks(DOCS / name)
    assert blocks, f"{name} has no python block"
    for k, block in enumerate(blocks):
        code = compile(block, f"docs/federated/async/{name} (python block {k + 1})", "exec")
        exec(code, namespace)  # noqa: S102 - our own documentation
    return namespace


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_index_links_every_page_and_every_link_resolves():
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    for name in PAGES:
        assert (DOCS / name).is_file(), name
        if name != "index.md":
            assert f"]({name})" in index, f"index.md does not link {name}"
    assert sorted(p.name for p in DOCS.glob("*.md")) == sorted(PAGES), "a page is not listed"
    for name in PAGES:
        text = (DOCS / name).read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#]+\.md)\)", text):
            assert (DOCS / target).resolve().is_file(), f"{name} links a missing {target}"


def test_the_federated_index_links_the_async_index():
    text = (DOCS.parent / "index.md").read_text(encoding="utf-8")
    assert "](async/index.md)" in text


def test_every_page_states_its_equations_and_choices():
    for name in PAGES[1:]:
        text = (DOCS / name).read_text(encoding="utf-8")
        assert "## Update equations (as implemented)" in text or name == "simulator.md", name
        assert "## Choices where the pape" in text, name  # what riemfl chose where a paper is open


def test_index_quick_start(capsys):
    ns = run_page("index.md")
    assert set(ns["runs"]) == {"fedasync", "fedortho"}
    assert "fedortho" in capsys.readouterr().out


def test_fedasync_page():
    ns = run_page("fedasync.md")
    assert np.isclose(ns["alpha"], 0.3)
    assert ns["hinge"](100) < ns["hinge"](3) < 1.0


def test_fedbuff_page(capsys):
    ns = run_page("fedbuff.md")
    assert set(ns["history"].log["staleness"]) == {0}
    assert len(ns["history"].log["client"]) == 5 * 6  # every client once per server step
    assert "proximal-smoothness radius" in capsys.readouterr().out


def test_dcasgd_page():
    ns = run_page("dcasgd.md")
    assert ns["rule"]._mean_square is not None  # the adaptive state was used


def test_asyncfeded_page():
    ns = run_page("asyncfeded.md")
    assert ns["history"].config["rule"]["name"] == "asyncfeded"
    assert ns["history"].config["rule"]["eps"] == 0.5
    # the parameter table states the code's default eps
    default = inspect.signature(AsyncFedED).parameters["eps"].default
    assert f"| `eps` | `epsilon` | `{default:g}` |" in (DOCS / "asyncfeded.md").read_text()


def test_orthocorrect_page():
    ns = run_page("orthocorrect.md")
    assert ns["dyn"].projections == 0  # no conflict in the scheduled arrivals
    assert np.allclose(ns["u_perp"], [0.0, 1.0, 0.0])


def test_simulator_page(capsys):
    ns = run_page("simulator.md")
    history = ns["history"]
    assert history.config["workers"] == 3 and history.config["timing"] == "ExponentialTime"
    assert ns["dropping"].metrics["dropped"][-1] > 0
    assert ns["theory"].config["mode"] == "theory"
    assert "staleness" in capsys.readouterr().out


def test_asyncmanifold_page(capsys):
    ns = run_page("asyncmanifold.md")
    assert ns["rule"].embedding.__class__.__name__ == "GeodesicArc"
    assert ns["manifold_quality"](ns["valley"], ns["bend"]) > 1.0
    assert "Q =" in capsys.readouterr().out


def test_asyncbezier_page():
    ns = run_page("asyncbezier.md")
    assert ns["history"].config["rule"]["name"] == "asyncbezier"
    assert ns["history"].metrics["optimality_gap"][-1] < ns["history"].metrics["optimality_gap"][0]


def test_asynccurve_page():
    ns = run_page("asynccurve.md")
    assert ns["rule"].name == "asynccurve" and ns["psi"].shape == (3, 3)

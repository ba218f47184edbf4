"""The federated documentation's code runs: every ```python block of docs/federated/*.md.

Each page's blocks run top to bottom in one namespace (later blocks use earlier names), in a
temporary working directory (the engine page writes history files). The blocks carry their own
assertions; the tests below add checks on the names they leave behind.
"""

import re
from pathlib import Path

import numpy as np
import pytest

from riemfl.testing import ManifoldTests, importorskip

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "federated"
PAGES = (
    "index.md",
    "rfedproj.md",
    "rfedavg.md",
    "rfedprox.md",
    "rfedsvrg.md",
    "engine.md",
    "custom-manifold-tutorial.md",
    "problems.md",
    "server-optimizers.md",
)


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def run_page(name: str) -> dict:
    namespace: dict = {"__name__": f"docs_federated_{name.removesuffix('.md')}"}
    blocks = python_blocks(DOCS / name)
    assert blocks, f"{name} has no python block"
    for k, block in enumerate(blocks):
        code = compile(block, f"docs/federated/{name} (python block {k + 1})", "exec")
        exec(code, namespace)  # noqa: S102 - our own documentation
    return namespace


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_every_page_exists_and_the_index_links_them_all():
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    for name in PAGES:
        assert (DOCS / name).is_file(), name
        if name != "index.md":
            assert f"]({name})" in index, f"index.md does not link {name}"
    for name in PAGES:
        text = (DOCS / name).read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#]+\.md)\)", text):
            assert (DOCS / target).resolve().is_file(), f"{name} links a missing {target}"


def test_index_quick_start(capsys):
    ns = run_page("index.md")
    assert ns["proj"].grad_norm[-1] < 1e-2 * ns["proj"].grad_norm[0]
    assert "rfedproj" in capsys.readouterr().out


def test_problems_page(capsys):
    ns = run_page("problems.md")
    assert ns["spd"].manifold.name == "SPD(3)" and ns["rot"].manifold.name == "SpecialOrthogonal(3)"
    assert ns["tree"].optimum is None and ns["tree"].reference_loss > 0
    assert "reference loss" in capsys.readouterr().out


def test_rfedproj_page():
    ns = run_page("rfedproj.md")
    history = ns["history"]
    assert history.config["algorithm"] == {
        "name": "rfedproj",
        "step_size": 4e-3,
        "local_steps": 5,
        "global_step_size": 1.0,
    }
    assert np.diff(history.uplink_matrices).tolist() == [1.0] * 300
    # the Euclidean hand loop reached the minimiser of f: no client drift
    assert np.linalg.norm(ns["x"] - ns["x_star"]) < 1e-8


def test_rfedavg_page():
    ns = run_page("rfedavg.md")
    assert ns["history"].config["algorithm"]["operators"] == "approximate"
    # FedAvg's fixed point is biased on heterogeneous quadratics
    assert np.linalg.norm(ns["x"] - ns["x_star"]) > 1e-3


def test_rfedprox_page():
    ns = run_page("rfedprox.md")
    assert ns["prox"].config["algorithm"]["mu"] == 1.0
    assert ns["spread"][100.0] < 0.5 * ns["spread"][0.0]


def test_rfedsvrg_page():
    ns = run_page("rfedsvrg.md")
    assert np.diff(ns["history"].uplink_matrices).tolist() == [2.0] * 300
    assert np.linalg.norm(ns["x"] - ns["x_star"]) < 1e-8


def test_engine_page(in_tmp):
    importorskip("matplotlib")
    ns = run_page("engine.md")
    assert (in_tmp / "history.json").is_file() and (in_tmp / "run.ckpt").is_file()
    assert ns["history"].participants == [0, 7, 7, 7, 7]
    assert ns["rest"].round == list(range(21))


def test_custom_manifold_tutorial(capsys):
    ns = run_page("custom-manifold-tutorial.md")
    assert ns["exact"].operators.names(ns["stacked"].manifold)["transport"] == (
        "parallel_transport"
    )
    out = capsys.readouterr().out
    assert "inverse_retract" in out  # the ParameterError names the missing map


def _tutorial_manifold() -> type:
    namespace: dict = {}
    exec(python_blocks(DOCS / "custom-manifold-tutorial.md")[0], namespace)  # noqa: S102
    return namespace["UnitColumns"]


class TestTutorialUnitColumns(ManifoldTests):
    """The conformance kit on the tutorial's manifold, as the tutorial tells its reader to do."""

    manifold = _tutorial_manifold()(5, 3)

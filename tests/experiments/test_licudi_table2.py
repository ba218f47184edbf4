"""Licudi et al. 2025, Table 2 (CXR8): the quick stand-in run, the paper's numbers, T_e by the
multi-label module, and the NIH path end to end on tiny files written here."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from riemfl.testing import importorskip

importorskip("torch")
importorskip("matplotlib")

# seconds per test (a reproduction): part of the full run only
pytestmark = pytest.mark.slow

import torch  # noqa: E402

from riemfl.errors import ParameterError  # noqa: E402
from riemfl.experiments.licudi2025 import (  # noqa: E402
    METHODS,
    PAPER_CXR8,
    PAPER_CXR8_RATES,
    Table2Settings,
    reproduce_table2,
)
from riemfl.experiments.licudi2025 import table2 as table2_module  # noqa: E402
from riemfl.experiments.licudi2025.cxr8 import PAPER_CONDITIONS  # noqa: E402
from riemfl.experiments.licudi2025.multilabel import auroc_t_e  # noqa: E402
from riemfl.experiments.licudi2025.table2_task import (  # noqa: E402
    batch_statistics,
    cxr8_rule,
)
from riemfl.nn import ShuffleNetV2  # noqa: E402
from riemfl.nn.trainer import LOSSES  # noqa: E402

#: Licudi et al. 2025, Table 2 (CXR8): macro AUROC %, std, macro AUPRC %, std, T_e, std; rows 7
#: and 8 beside AsyncBezier and AsyncBezierED (Table 3's order)
TYPED_TABLE2 = {
    "FedAsync": (77.93, 0.01, 25.72, 0.21, 140, 6.0),
    "FedOrtho": (77.91, 0.13, 25.90, 0.29, 134, 2.5),
    "FedGS": (77.85, 0.10, 26.31, 0.18, 141, 6.0),
    "DC-ASGD": (78.32, 0.39, 26.06, 0.34, 146, 1.5),
    "FedBuff": (77.82, 0.02, 25.89, 0.14, 172, 2.0),
    "AsyncFedED": (77.45, 0.08, 25.37, 0.13, 144, 2.5),
    "AsyncBezier": (78.44, 0.04, 26.12, 0.11, 132, 6.8),
    "AsyncBezierED": (77.89, 0.12, 26.11, 0.12, 116, 9.0),
}
#: Licudi et al. 2025, Table 3, CXR8 column
TYPED_TABLE3_RATES = {
    "FedAsync": 2.0,
    "FedOrtho": 2.0,
    "FedGS": 1.0,
    "DC-ASGD": 1.0,
    "FedBuff": 1.0,
    "AsyncFedED": 0.5,
    "AsyncBezier": 0.5,
    "AsyncBezierED": 0.25,
}


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """The quick stand-in run, once, with every call of ``auroc_t_e`` in the module recorded."""
    out = tmp_path_factory.mktemp("table2")
    calls = []

    def spy(clock, aurocs, e):
        calls.append((list(clock), list(aurocs), e))
        return auroc_t_e(clock, aurocs, e)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(table2_module, "auroc_t_e", spy)
        text = reproduce_table2(str(out), quick=True, progress=False)
    return out, text, calls


def test_quick_standin_writes_its_files(quick):
    out, text, _ = quick
    assert (out / "table2.md").read_text() == text
    assert (out / "table2.png").read_bytes()[:4] == b"\x89PNG"
    data = json.loads((out / "table2.json").read_text())
    assert [r["method"] for r in data["runs"]] == list(METHODS)
    assert data["settings"]["steps"] == 120 and data["settings"]["seeds"] == [0]
    assert "# Licudi et al. 2025, Table 2 (CXR8)" in text
    assert "Kendall's tau" in text and "What it cannot show" in text
    assert "far too slow for the CPU stand-in" in text
    for method in METHODS:  # the paper's numbers beside ours
        roc, rocs, prc, prcs, _, _ = PAPER_CXR8[method]
        assert f"| {method} | " in text and f"{roc:.2f} +/- {rocs:.2f} | {prc:.2f}" in text


def test_every_method_has_finite_auroc_and_auprc(quick):
    out, _, _ = quick
    data = json.loads((out / "table2.json").read_text())
    for run in data["runs"]:
        for key in ("auroc", "auprc", "auroc_at_updates"):
            assert math.isfinite(run[key]) and 0.0 <= run[key] <= 1.0, (run["method"], key)
        assert run["rate"] == TYPED_TABLE3_RATES[run["method"]]
    ranked = data["rankings"]["auroc"]
    assert ranked["pairs"] == 28 and 0 <= ranked["agree"] <= 28
    assert sorted(ranked["paper"]) == sorted(METHODS)


def test_t_e_is_the_multilabel_modules(quick):
    out, _, calls = quick
    data = json.loads((out / "table2.json").read_text())
    assert len(calls) == len(data["runs"])
    for run, (clock, aurocs, e) in zip(data["runs"], calls, strict=True):
        assert e == 0.25 and clock[0] == 0 and clock[-1] == 120
        assert all(step % 10 == 0 for step in clock)
        assert run["T_e"] == auroc_t_e(clock, aurocs, e)
        saved = [json.loads(p.read_text()) for p in (out / "runs").rglob("*.json")]
        (own,) = [r for r in saved if r["method"] == run["method"]]
        assert own["T_e"] == run["T_e"]  # the run loop's T_e on 1 - AUROC agrees


def test_paper_numbers_are_those_of_table_2():
    assert PAPER_CXR8 == TYPED_TABLE2
    assert PAPER_CXR8_RATES == TYPED_TABLE3_RATES
    assert Table2Settings().paper_table() == (
        "CXR8",
        {m: (v[0], v[1], v[4], v[5]) for m, v in TYPED_TABLE2.items()},
    )


def test_curve_methods_take_vartheta_zero_on_cxr8():
    assert cxr8_rule("AsyncBezier", 10, 0.5).correction.vartheta == 0.0
    assert cxr8_rule("AsyncBezierED", 10, 0.25).correction.vartheta == 0.0
    assert METHODS["AsyncBezier"](10, 0.5).correction.vartheta == 1.0  # Table 1's
    assert cxr8_rule("FedAsync", 10, 2.0).server_lr == 2.0
    assert "bce_multilabel" in LOSSES


def test_batch_statistics_evaluate_as_they_train():
    torch.manual_seed(0)
    model = batch_statistics(ShuffleNetV2(8, in_channels=1, width=0.5))
    assert list(model.buffers()) == []
    x = torch.rand(5, 1, 32, 32)
    with torch.no_grad():
        trained = model.train()(x)
        evaluated = model.eval()(x)
    assert torch.allclose(trained, evaluated)


def test_settings_check():
    with pytest.raises(ParameterError, match="dataset must be one of"):
        Table2Settings(dataset="digits").check()
    with pytest.raises(ParameterError, match="needs data=DIR"):
        Table2Settings(dataset="cxr8").check()
    with pytest.raises(ParameterError, match="unknown methods"):
        Table2Settings(methods=("FedAvg",)).check()
    files = Table2Settings.files("/nowhere", quick=True)
    assert (files.image_size, files.local_lr, files.max_images) == (128, 1e-3, 2000)
    assert Table2Settings.files("/nowhere").max_images is None


def _tiny_nih_files(root):
    """12 patients of 2 images each, in the NIH layout, every condition present and absent."""
    from tests.experiments.test_cxr8 import _dataset

    rows = []
    for p in range(12):
        first = PAPER_CONDITIONS[p % 8]
        second = "No Finding" if p % 3 == 0 else f"{first}|{PAPER_CONDITIONS[(p + 3) % 8]}"
        rows += [(f"{p:08d}_000.png", first, str(p)), (f"{p:08d}_001.png", second, str(p))]
    return _dataset(root, rows=rows)


def test_cxr8_files_end_to_end(tmp_path):
    pytest.importorskip("PIL.Image")
    (tmp_path / "nih").mkdir()
    data = _tiny_nih_files(tmp_path / "nih")
    s = Table2Settings.files(str(data), quick=True)
    s.image_size, s.width, s.n_clients, s.test_fraction = 32, 0.5, 3, 0.34
    s.steps, s.record_every, s.methods = 2, 2, ("FedAsync", "FedBuff", "AsyncBezier")
    text = reproduce_table2(str(tmp_path / "out"), settings=s, progress=False)
    assert "on the NIH ChestX-ray14 files" in text and "ShuffleNet V2 x0.5" in text
    result = json.loads((tmp_path / "out" / "table2.json").read_text())
    assert [r["method"] for r in result["runs"]] == list(s.methods)
    for run in result["runs"]:
        assert 0.0 <= run["auroc"] <= 1.0 and 0.0 <= run["auprc"] <= 1.0
    assert next(r for r in result["runs"] if r["method"] == "FedBuff")["updates"] == 20
    assert (tmp_path / "out" / "table2.png").exists()
    assert np.isfinite(result["updates_budget"])

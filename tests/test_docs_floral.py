"""The FLoRAL page's code runs: every ```python block of docs/floral.md, top to bottom."""

import re
from pathlib import Path

import numpy as np

from riemfl.testing import importorskip

importorskip("torch")
importorskip("sklearn")

PAGE = Path(__file__).resolve().parents[1] / "docs" / "floral.md"


def test_floral_page_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 6
    namespace: dict = {"__name__": "docs_floral"}
    for k, block in enumerate(blocks):
        exec(compile(block, f"docs/floral.md (python block {k + 1})", "exec"), namespace)  # noqa: S102
    out = capsys.readouterr().out
    assert "factor averaging moved by" in out and "async staleness" in out
    history = namespace["history"]
    assert history.metrics["loss"][-1] < 1e-2 * history.metrics["loss"][0]
    assert namespace["async_history"].metrics["step"][-1] == 10
    assert np.isfinite(namespace["async_history"].metrics["loss"]).all()

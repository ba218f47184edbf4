"""Figures of the reports: one look per method across figures, coinciding curves named."""

from __future__ import annotations

import pytest

from riemfl.experiments.styles import Styles, coinciding, legend_styles


def test_a_label_keeps_its_look_and_neighbours_differ():
    styles = Styles(["A", "B"])
    first = styles.of("A")
    styles.of("C")
    assert styles.of("A") == first and first["label"] == "A"
    looks = [styles.of(k) for k in "ABC"]
    for key in ("color", "linestyle", "marker"):
        assert len({look[key] for look in looks}) == 3, key


def test_coinciding_names_the_earlier_of_two_equal_curves():
    x = [0, 1, 2]
    curves = {
        "RFedProx": (x, [3.0, 2.0, 1.0]),
        "RFedAvg": (x, [3.0, 2.0, 1.0 + 1e-12]),
        "B": (x, [3, 2, 0.5]),
    }
    assert coinciding(curves) == {"RFedAvg": "RFedProx"}
    assert coinciding({"a": ([0, 1], [1, 2]), "b": ([0, 2], [1, 2])}) == {}  # other x
    styles = Styles(["B"])
    looks = legend_styles(styles, curves)
    assert looks["RFedAvg"]["label"] == "RFedAvg (= RFedProx)" and looks["B"] == styles.of("B")
    assert looks["RFedProx"] == styles.of("RFedProx")  # the same look as in every other figure


def test_zhang2024_figures_say_when_curves_lie_on_each_other(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from riemfl.experiments import zhang2024
    from riemfl.federated import RFedAvg, run_sync
    from riemfl.problems import KPCAProblem

    P = KPCAProblem.synthetic(n_clients=3, d=6, k=2, p=5, seed=0)
    h = run_sync(P, RFedAvg(0.05, 2), 3)
    a = zhang2024.Run("kpca", "rfedavg", 2, 3, 0.05)
    b = zhang2024.Run("kpca", "rfedprox", 2, 3, 0.05)
    fig = zhang2024.Figure(
        1,
        "a title " * 20,
        [("", [("RFedAvg", a), ("RFedProx", b)])],
        ("grad_norm",),
        ("round",),
        "",
    )
    captured = {}
    savefig = plt.Figure.savefig

    def keep(self, *args, **kwargs):
        captured["legend"] = [t.get_text() for t in self.axes[0].get_legend().get_texts()]
        captured["title"] = self._suptitle.get_text()
        return savefig(self, *args, **kwargs)

    monkeypatch.setattr(plt.Figure, "savefig", keep)
    zhang2024._plot(fig, {a.key: h, b.key: h}, tmp_path / "f.png", Styles())
    assert captured["legend"] == ["RFedAvg", "RFedProx (= RFedAvg)"]
    assert "\n" in captured["title"]  # a long title is wrapped to the figure's width

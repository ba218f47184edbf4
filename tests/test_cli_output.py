"""The files ``riemfl run`` writes into its ``--out`` folder: ``history.png`` names its run."""

from __future__ import annotations

from riemfl.cli.output import RUN_FILES, run_title, write_history
from riemfl.federated import FedBuff, ProblemTrainer, RFedProj, run_async, run_sync
from riemfl.problems import KPCAProblem
from riemfl.testing import importorskip

importorskip("matplotlib")


def _problem():
    return KPCAProblem.synthetic(n_clients=3, d=6, k=2, p=5, seed=0)


def test_the_history_plot_is_titled_with_the_problem_and_the_algorithm(tmp_path, monkeypatch):
    """history.png had no title: a folder of runs could not be told apart by their plots."""
    import matplotlib.figure

    titles = []
    savefig = matplotlib.figure.Figure.savefig

    def keep(self, *args, **kwargs):
        titles.append(self.get_suptitle())
        return savefig(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    h = run_sync(_problem(), RFedProj(0.01, 3), 4)
    h.config["problem"]["name"] = "kpca-synthetic"  # as the registry names it
    write_history(h, tmp_path, ("grad_norm", "loss"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(RUN_FILES)
    assert titles == ["kpca-synthetic: rfedproj, eta = 0.01, tau = 3, 4 rounds"]


def test_an_asynchronous_run_is_titled_with_its_rule():
    h = run_async(
        ProblemTrainer(_problem(), 0.01), FedBuff(buffer_size=2, server_lr=0.5), 3, workers=2
    )
    title = run_title(h)
    assert title.endswith(": fedbuff (async), eta_g = 0.5, 3 server steps"), title

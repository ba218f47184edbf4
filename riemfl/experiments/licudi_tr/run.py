"""The two runs, FedAsync and AsyncCurve without delay correction, each swept as it goes, and
saved under ``runs/`` when finished so that a rerun reads them back.

Both runs start from the same LeNet-5 (the seed's initialisation), on the asynchronous simulator
with every client training at once (8 workers) and a local run lasting as many time units as it
has mini-batches (:class:`~riemfl.federated.timing.ProportionalTime`): client i's compute is
proportional to its data, so the small clients return often and the large ones stale. FedAsync's
clients run local Adam on the FedProx objective (:class:`~riemfl.nn.TorchClientTrainer`);
AsyncCurve's run Licudi 2025 (TR), Alg. 2 (:class:`~riemfl.nn.CurveClientTrainer`: the Lorentz
prox, E end-point epochs each followed by a control-point epoch).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...errors import ParameterError
from ...federated.async_engine import run_async
from ...federated.run_core import RunOptions
from ...federated.timing import ProportionalTime
from .checkpoints import Checkpoint, RecordedAsyncCurve, RecordedFedAsync
from .data import StudyData
from .proposals import Proposals
from .settings import ALGORITHMS, Settings
from .sweep import Evaluator, Sweeper

__all__ = ["one_run", "cached_run", "run_all"]


def _trainer(algorithm: str, s: Settings, data: StudyData) -> Any:
    from ...nn import CurveClientTrainer, TorchClientTrainer

    local = TorchClientTrainer(
        data.model_fn,
        data.clients,
        epochs=s.epochs,
        lr=s.lr,
        mu=s.mu,
        batch_size=s.batch_size,
    )
    if algorithm == "fedasync":
        return local
    return CurveClientTrainer(local, control_lr=s.control_lr, gamma=s.gamma, mu=s.mu)


def one_run(
    algorithm: str,
    s: Settings,
    data: StudyData,
    bar: Any = None,
    keep: list[Checkpoint] | None = None,
) -> dict[str, Any]:
    """One run of ``algorithm`` ("fedasync" or "asynccurve") for ``s.steps`` server steps, swept
    at every step; returns the :class:`~.sweep.Sweeper`'s table with ``algorithm``.

    ``bar.update()`` is called per server step; ``keep`` receives every checkpoint.
    """
    if algorithm not in ALGORITHMS:
        raise ParameterError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    trainer = _trainer(algorithm, s, data)
    x0 = trainer.initial_parameters(s.seed)
    evaluator = Evaluator(data.model_fn, data.splits, s.eval_rows, s.seed)
    on_step = bar.update if bar is not None else None
    sweeper = Sweeper(s, evaluator, Proposals(s, x0.size), on_step, keep)
    if algorithm == "fedasync":
        rule: Any = RecordedFedAsync(sweeper, s.server_lr)
    else:
        rule = RecordedAsyncCurve(sweeper, x0.size, s.server_lr)
    run_async(
        trainer,
        rule,
        s.steps,
        options=RunOptions(seed=s.seed, record_every=None),
        timing=ProportionalTime(),
        x0=x0,
    )
    return {"algorithm": algorithm, "parameters": int(x0.size), **sweeper.table}


def cached_run(runs_dir: Path, algorithm: str, s: Settings, data: StudyData, bar: Any) -> dict:
    """:func:`one_run`, saved to (and on a rerun read from) ``runs_dir/KEY.json``
    (:meth:`Settings.run_key`); a cached run advances ``bar`` by ``bar.skip``."""
    path = Path(runs_dir) / f"{s.run_key(algorithm)}.json"
    if path.exists():
        run = json.loads(path.read_text())
        if bar is not None:
            bar.skip(len(run["steps"]))
        return run
    run = one_run(algorithm, s, data, bar)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(run))
    tmp.replace(path)  # atomic: a half-written run is never read back
    return run


def run_all(runs_dir: Path, s: Settings, data: StudyData, bar: Any) -> dict[str, dict]:
    """Both runs (:data:`~.settings.ALGORITHMS`), cached under ``runs_dir``."""
    return {a: cached_run(runs_dir, a, s, data, bar) for a in ALGORITHMS}

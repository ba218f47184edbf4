"""One run of the Licudi et al. 2025 reproduction: a method and a seed on the asynchronous engine,
saved under ``runs/`` as it finishes and read back on a rerun."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...federated.async_engine import run_async
from ...federated.async_rules import AsyncRule
from ...federated.fairness import gini, theil, time_to_error
from ...federated.history import History
from ...federated.run_core import RunOptions
from ...federated.timing import ProportionalTime
from .data import client_data, validation_split
from .settings import CURVE_METHODS, METHODS, PAPER_RATES, Settings

__all__ = ["TABLE1", "Task", "cached_run", "fairness", "one_run", "summary", "trainer"]

#: the entries of a run that stay out of the tables and ``results.json``
_BULKY = ("curve", "final_point")


class _BestModel:
    """Wraps a trainer's ``evaluate`` to remember the best global model (for fairness) by the
    evaluation column ``key`` among the evaluations whose call index ``k`` (0, 1, ...) passes
    ``keep(k)``."""

    def __init__(
        self, trainer: Any, keep: Callable[[int], bool] = lambda k: True, key: str = "accuracy"
    ) -> None:
        self.trainer, self.keep, self.key, self.calls = trainer, keep, key, 0
        self.best_score = -math.inf
        self.best = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.trainer, name)

    def evaluate(self, flat: np.ndarray) -> dict[str, float]:
        out = self.trainer.evaluate(flat)
        if self.keep(self.calls) and out[self.key] > self.best_score:
            self.best_score, self.best = out[self.key], np.array(flat, copy=True)
        self.calls += 1
        return out


def _eval_steps(record_every: int, updates_per_step: int) -> int:
    """Server steps between evaluations for a rule taking ``updates_per_step`` client updates per
    server step: the largest divisor of ``record_every`` that is at most ``record_every //
    updates_per_step`` (at least 1). Every method is then evaluated about every ``record_every``
    client updates (FedBuff, K = 10, at every server step), and the rows at multiples of
    ``record_every`` server steps are among the evaluated ones."""
    cap = max(1, record_every // updates_per_step)
    return max(d for d in range(1, cap + 1) if record_every % d == 0)


def _model_fn(s: Settings) -> Callable[[], Any]:
    """The model of ``s.dataset`` (a data set :func:`client_data` accepted)."""
    from ...nn import SmallCNN
    from ...nn.models import CharTransformer

    models: dict[str, Callable[[], Any]] = {
        "digits": SmallCNN,
        "femnist": lambda: SmallCNN(n_classes=62, image_size=28),
        "shakespeare": CharTransformer,
    }
    return models[s.dataset]


def _table1_rule(method: str, d: int, eta: float) -> AsyncRule:
    """The server rule of Table 1: :data:`~riemfl.experiments.licudi2025.settings.METHODS`'s."""
    return METHODS[method](d, eta)


@dataclass(frozen=True)
class Task:
    """What a run trains and evaluates; the defaults are Table 1's (:data:`TABLE1`).

    Attributes
    ----------
    clients : callable
        ``clients(s, seed)``: the clients' (X_train, y_train, X_test, y_test).
    model : callable
        ``model(s)``: the ``model_fn`` of :class:`~riemfl.nn.TorchClientTrainer`.
    loss : str
        The trainer's loss (:data:`riemfl.nn.trainer.LOSSES`).
    rule : callable
        ``rule(method, D, eta_g)``: the server rule.
    target : str
        The evaluation column whose error ``1 - target`` gives T_e and whose best value picks the
        best model (accuracy; macro AUROC for CXR8, Licudi et al. 2025, Sec. 4.2).
    scores : tuple of str
        Further evaluation columns kept in a run's curve and, at the last evaluation, in the run.
    """

    clients: Callable[[Settings, int], list[Any]] = client_data
    model: Callable[[Settings], Callable[[], Any]] = _model_fn
    loss: str = "cross_entropy"
    rule: Callable[[str, int, float], AsyncRule] = _table1_rule
    target: str = "accuracy"
    scores: tuple[str, ...] = ()


#: the task of Table 1: classification with the data set's model and the rules of ``METHODS``
TABLE1 = Task()


def trainer(
    s: Settings, seed: int, epochs: int, validation: bool = False, task: Task = TABLE1
) -> Any:
    """The clients' :class:`~riemfl.nn.TorchClientTrainer` of seed ``seed`` for ``task``, on the
    validation rows of :func:`~riemfl.experiments.licudi2025.data.validation_split` if
    ``validation``."""
    from ...nn import TorchClientTrainer

    data = task.clients(s, seed)
    if validation:
        data = validation_split(data, s.validation_fraction, seed)
    return TorchClientTrainer(
        task.model(s),
        data,
        epochs=epochs,
        lr=s.local_lr,
        mu=s.mu,
        batch_size=s.batch_size,
        loss=task.loss,
        device=s.device,
    )


def one_run(
    method: str,
    seed: int,
    s: Settings,
    epochs: int | None = None,
    steps: int | None = None,
    rate: float | None = None,
    validation: bool = False,
    task: Task = TABLE1,
) -> dict[str, Any]:
    """One run of ``method``: its final and best accuracy, T_e, fairness, client updates and
    staleness, its curve on the three clocks (``equal_work.AXES``) and its final model.

    ``epochs``, ``steps`` and ``rate`` default to ``s.epochs``, ``s.steps`` and the
    paper's Table 3 rate; ``validation`` runs on the line search's validation rows; ``task``:
    what is trained, and which evaluation column gives T_e and the best model (:class:`Task`).
    """
    from ...nn import BezierClientTrainer

    epochs = s.epochs if epochs is None else epochs
    steps = s.steps if steps is None else steps
    rate = PAPER_RATES[method] if rate is None else rate
    local = trainer(s, seed, epochs, validation, task)
    client: Any = local
    if method in CURVE_METHODS:
        client = BezierClientTrainer(
            local, curve_epochs=min(epochs, s.curve_epochs), curve_lr=s.curve_lr
        )
    x0 = local.initial_parameters(seed)
    rule = task.rule(method, x0.size, rate)
    every = _eval_steps(s.record_every, rule.buffer_size)

    def on_grid(step: int) -> bool:  # the evaluations of the per-step comparison
        return step % s.record_every == 0 or step >= steps

    # the best model (fairness) among the per-step evaluations only, as with record_every steps
    watched = _BestModel(client, keep=lambda k: on_grid(min(k * every, steps)), key=task.target)
    h: History = run_async(
        watched,
        rule,
        steps,
        workers=s.workers,
        timing=ProportionalTime(speed=s.scheduler_k),
        scheduler="paper",
        scheduler_k=s.scheduler_k,
        x0=x0,
        options=RunOptions(seed=seed, record_every=every),
    )
    per_client = local.per_client_accuracy(watched.best)
    per_client = per_client[np.isfinite(per_client)]
    rows = [i for i, v in enumerate(h.metrics["step"]) if on_grid(int(v))]
    errors = [1.0 - h.metrics[task.target][i] for i in rows]
    t_e = time_to_error(errors, s.error_target, steps=[int(h.metrics["step"][i]) for i in rows])
    return {
        "method": method,
        "seed": seed,
        "epochs": epochs,
        "steps": steps,
        "rate": rate,
        "validation": validation,
        "accuracy": h.metrics["accuracy"][-1],
        # accuracy is a count over the test rows, so two runs can tie on it: the loss tells them
        # apart (:func:`accuracy_ties`)
        "loss": h.metrics["loss"][-1],
        "test_rows": int(h.metrics["n_samples"][-1]),
        f"best_{task.target}": watched.best_score,
        "T_e": t_e,
        **fairness(per_client),
        "updates": len(h.log["client"]),
        "mean_staleness": float(np.mean(h.log["staleness"])),
        **{k: h.metrics[k][-1] for k in task.scores},
        # every evaluated row on the three clocks (equal_work.AXES)
        "curve": {
            k: list(h.metrics[k]) for k in ("step", "updates", "time", "accuracy", *task.scores)
        },
        "final_point": h.final_point,
    }


def fairness(per_client: np.ndarray) -> dict[str, float]:
    """Gini and Theil of the per-client accuracy; NaN where they are undefined (no client, or
    every client at accuracy 0)."""
    if per_client.size == 0 or not per_client.sum() > 0:
        return {"gini": math.nan, "theil": math.nan}
    return {"gini": gini(per_client), "theil": theil(per_client)}


def summary(run: dict[str, Any]) -> dict[str, Any]:
    """A run without its curve and final model: a row of the tables and of ``results.json``."""
    return {k: v for k, v in run.items() if k not in _BULKY}


def cached_run(
    runs_dir: Path,
    method: str,
    seed: int,
    s: Settings,
    epochs: int | None = None,
    steps: int | None = None,
    rate: float | None = None,
    validation: bool = False,
    task: Task = TABLE1,
) -> dict[str, Any]:
    """:func:`one_run`, saved to (and on a rerun loaded from) ``runs_dir``: resumable.

    A run is saved as ``STEM.json`` (everything but the final model) and ``STEM.npy`` (the final
    model), the stem naming every setting the run depends on.
    """
    epochs = s.epochs if epochs is None else epochs
    steps = s.steps if steps is None else steps
    rate = PAPER_RATES[method] if rate is None else rate
    kind = "val" if validation else "test"
    curve = f"-clr{s.curve_lr:g}" if method in CURVE_METHODS else ""
    stem = (
        f"{s.dataset}-{method}{curve}-K{epochs}-T{steps}-N{s.n_clients}-eta{rate:g}-{kind}"
        f"-seed{seed}"
    )
    path = runs_dir / f"{stem}.json"
    point_path = runs_dir / f"{stem}.npy"
    saved = _load_run(path, point_path)
    if saved is not None:
        return saved
    run = one_run(method, seed, s, epochs, steps, rate, validation, task)
    np.save(point_path, run["final_point"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({k: v for k, v in run.items() if k != "final_point"}, default=str))
    tmp.replace(path)  # atomic: a half-written run is never read back
    return run


def _load_run(path: Path, point_path: Path) -> dict[str, Any] | None:
    """The run saved at ``path`` (its final model from ``point_path``, None if missing); None if
    there is none, or if its curve lacks the client-update clock (an older layout, whose run is
    redone)."""
    if not path.exists():
        return None
    run = json.loads(path.read_text())
    if "updates" not in run["curve"]:
        return None
    run["final_point"] = np.load(point_path) if point_path.exists() else None
    return run

"""The offline sweep: the one-step train/val/test losses of every proposal at every checkpoint.

:class:`Evaluator` computes the mean cross-entropy of a flat model on the pooled training,
validation and test rows (at most ``eval_rows`` of each, a fixed seeded subset, in one forward
pass). :class:`Sweeper` is a run's checkpoint sink: per checkpoint it evaluates the global model
the update arrived at (the run's own curve), every endpoint proposal and, for AsyncCurve, every
control-point proposal (:mod:`.proposals`), and appends the losses to its table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .checkpoints import Checkpoint
from .proposals import Proposals
from .settings import CONTROL, ENDPOINTS, Settings

__all__ = ["SPLITS", "Evaluator", "Sweeper"]

#: the splits every loss is measured on
SPLITS = ("train", "val", "test")


class Evaluator:
    """Losses of flat models on the pooled splits.

    Parameters
    ----------
    model_fn : callable
        Builds the model (its parameters are overwritten by each evaluated vector).
    splits : dict
        ``split -> (x, y)`` for :data:`SPLITS`.
    rows : int or None
        At most this many rows per split (a subset drawn once with ``seed``); None: all.
    seed : int
    """

    def __init__(
        self,
        model_fn: Callable[[], Any],
        splits: dict[str, tuple[np.ndarray, np.ndarray]],
        rows: int | None = None,
        seed: int = 0,
    ) -> None:
        import torch

        rng = np.random.default_rng(seed)
        xs, ys, self.bounds = [], [], {}
        start = 0
        for name in SPLITS:
            x, y = splits[name]
            if rows is not None and len(y) > rows:
                keep = np.sort(rng.choice(len(y), rows, replace=False))
                x, y = x[keep], y[keep]
            xs.append(np.asarray(x, dtype=np.float32))
            ys.append(np.asarray(y, dtype=np.int64))
            self.bounds[name] = (start, start + len(y))
            start += len(y)
        self.model = model_fn()
        self.model.eval()
        self.x = torch.from_numpy(np.ascontiguousarray(np.concatenate(xs)))
        self.y = torch.from_numpy(np.concatenate(ys))
        self.sizes = {name: b - a for name, (a, b) in self.bounds.items()}

    def __call__(self, flat: np.ndarray) -> dict[str, float]:
        """``{split: mean cross-entropy}`` and ``test_accuracy`` of the model ``flat``."""
        import torch

        from ...nn.models import load_flat_parameters

        load_flat_parameters(self.model, np.asarray(flat, dtype=np.float64))
        with torch.no_grad():
            logits = self.model(self.x)
            losses = torch.nn.functional.cross_entropy(logits, self.y, reduction="none")
        out = {name: float(losses[a:b].mean()) for name, (a, b) in self.bounds.items()}
        a, b = self.bounds["test"]
        out["test_accuracy"] = float((logits[a:b].argmax(1) == self.y[a:b]).float().mean())
        return out


class Sweeper:
    """A run's checkpoint sink: the proposals' one-step losses per checkpoint.

    Parameters
    ----------
    s : Settings
    evaluator : Evaluator
    proposals : Proposals
    on_step : callable, optional
        Called after each checkpoint (the progress bar).
    keep : list, optional
        Receives every checkpoint (tests; a run's checkpoints are otherwise let go).

    Attributes
    ----------
    table : dict
        ``steps``, ``client``, ``staleness``, ``weight`` (lists per checkpoint),
        ``trajectory`` (``split -> losses`` of the model the update arrived at, and
        ``test_accuracy``), ``endpoint`` and ``control`` (``split -> proposal -> losses``;
        ``control`` filled on AsyncCurve's checkpoints only).
    """

    def __init__(
        self,
        s: Settings,
        evaluator: Evaluator,
        proposals: Proposals,
        on_step: Callable[[], None] | None = None,
        keep: list[Checkpoint] | None = None,
    ) -> None:
        self.s, self.evaluator, self.proposals = s, evaluator, proposals
        self.on_step, self.keep = on_step, keep
        self.table: dict[str, Any] = {
            "steps": [],
            "client": [],
            "staleness": [],
            "weight": [],
            "trajectory": {k: [] for k in (*SPLITS, "test_accuracy")},
            "endpoint": {split: {name: [] for name in ENDPOINTS} for split in SPLITS},
            "control": {split: {name: [] for name in CONTROL} for split in SPLITS},
        }

    def __call__(self, c: Checkpoint) -> None:
        t = self.table
        for key, value in (
            ("steps", c.step),
            ("client", c.client),
            ("staleness", c.staleness),
            ("weight", c.weight),
        ):
            t[key].append(value)
        for key, value in self.evaluator(c.current).items():
            t["trajectory"][key].append(value)
        measured = {}
        for name, point in self.proposals.endpoints(c).items():
            measured[name] = self.evaluator(point)
            for split in SPLITS:
                t["endpoint"][split][name].append(measured[name][split])
        if c.phi is not None:
            lines = {"gradient/line": measured["asgd"], "position/line": measured["fedasync"]}
            for name, point in self.proposals.controls(c).items():
                lines[name] = self.evaluator(point)
            for split in SPLITS:
                for name in CONTROL:
                    t["control"][split][name].append(lines[name][split])
        if self.keep is not None:
            self.keep.append(c)
        if self.on_step is not None:
            self.on_step()

"""The record of a federated run: per-round metrics, configuration and warnings.

A :class:`History` holds parallel lists (one entry per recorded round; round 0 is the initial
point) plus the run's configuration and the warnings of dropped clients. It round-trips through
JSON exactly (``History.from_json(h.to_json()) == h``), writes CSV, and plots itself.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ParameterError
from ._serialise import dump_json, from_json_float, json_float, load_json

__all__ = ["History", "METRICS"]

#: The per-round columns, in order (the CLI's ``history.json`` / ``history.csv`` schema).
METRICS = (
    "round",
    "loss",
    "optimality_gap",
    "grad_norm",
    "uplink_matrices",
    "uplink_bytes",
    "cpu_time",
    "wall_time",
    "participants",
)

_LABELS = {
    "loss": "f(x)",
    "optimality_gap": "f(x) - f*",
    "grad_norm": "|grad f(x)|",
    "round": "communication round",
    "uplink_matrices": "uplink per client (points)",
    "uplink_bytes": "uplink per client (bytes)",
    "cpu_time": "CPU time (s)",
    "wall_time": "wall-clock time (s)",
}


def _column_equal(a: list[Any], b: list[Any]) -> bool:
    if len(a) != len(b):
        return False
    return all(x == y or (x != x and y != y) for x, y in zip(a, b, strict=True))


@dataclass(eq=False)
class History:
    """Per-round metrics of a run.

    Attributes
    ----------
    config : dict
        Problem, algorithm, operators, seed and engine settings (JSON-ready).
    round, loss, optimality_gap, grad_norm : list
        Round index (0 = initial point), f, f - f* (NaN if f* unknown) and the Riemannian
        gradient norm, evaluated at the algorithm's output point (P_M(x^r) for RFedProj).
    uplink_matrices, uplink_bytes : list
        Cumulative uplink per client: point-sized arrays (the papers' "d x k matrices") and
        bytes, averaged over all clients (each client's own total when participation is full).
    cpu_time : list of float
        Cumulative process CPU time of the algorithm (client and server rules), excluding
        metric evaluation and checkpointing.
    wall_time : list of float
        Cumulative wall-clock seconds of the run, metric evaluation included (what a user
        waits for; ``cpu_time`` is the algorithm's share).
    participants : list of int
        Clients whose uploads were aggregated in the round.
    warnings : list of dict
        ``{"round", "client", "phase", "reason"}`` for every dropped client.
    final_point : array or None
        The output point of the last round (not serialised; set by the engine).
    """

    config: dict[str, Any] = field(default_factory=dict)
    round: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    optimality_gap: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    uplink_matrices: list[float] = field(default_factory=list)
    uplink_bytes: list[float] = field(default_factory=list)
    cpu_time: list[float] = field(default_factory=list)
    wall_time: list[float] = field(default_factory=list)
    participants: list[int] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    final_point: Any = field(default=None, repr=False, compare=False)

    def append(self, **row: Any) -> None:
        """Add one round; every column of :data:`METRICS` must be given."""
        missing = set(METRICS) - set(row)
        extra = set(row) - set(METRICS)
        if missing or extra:
            raise ParameterError(
                f"History.append needs exactly the columns {METRICS}; "
                f"missing {sorted(missing)}, unexpected {sorted(extra)}"
            )
        for key in METRICS:
            getattr(self, key).append(row[key])

    def __eq__(self, other: object) -> bool:
        """Same config, warnings and columns (NaN equals NaN: an unknown f* stays unknown)."""
        if not isinstance(other, History):
            return NotImplemented
        if self.config != other.config or self.warnings != other.warnings:
            return False
        return all(_column_equal(getattr(self, key), getattr(other, key)) for key in METRICS)

    def __len__(self) -> int:
        return len(self.round)

    def last(self, key: str) -> Any:
        """The latest value of column ``key``."""
        return getattr(self, key)[-1]

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"config": self.config}
        for key in METRICS:
            out[key] = [json_float(v) for v in getattr(self, key)]
        out["warnings"] = self.warnings
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> History:
        kwargs: dict[str, Any] = {"config": dict(data.get("config", {}))}
        for key in METRICS:
            kwargs[key] = [from_json_float(v) for v in data.get(key, [])]
        kwargs["warnings"] = list(data.get("warnings", []))
        lengths = {len(kwargs[key]) for key in METRICS}
        if len(lengths) > 1:
            raise ParameterError(f"history columns have different lengths: {sorted(lengths)}")
        return cls(**kwargs)

    def to_json(self, path: str | Path | None = None) -> str:
        """The history as JSON text; also written to ``path`` when given."""
        return dump_json(self.to_dict(), path)

    @classmethod
    def from_json(cls, source: str | Path) -> History:
        """Read a history from JSON text or from a file path."""
        return cls.from_dict(load_json(source))

    def to_csv(self, path: str | Path | None = None) -> str:
        """The per-round columns as CSV text (header = :data:`METRICS`)."""
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(METRICS)
        for row in zip(*(getattr(self, key) for key in METRICS), strict=True):
            writer.writerow([repr(v) if isinstance(v, float) else v for v in row])
        text = buf.getvalue()
        if path is not None:
            Path(path).write_text(text)
        return text

    # ------------------------------------------------------------------ plots
    def plot(
        self,
        path: str | Path | None = None,
        *,
        y: Sequence[str] = ("grad_norm", "optimality_gap"),
        x: Sequence[str] = ("round", "uplink_matrices", "cpu_time"),
        others: Sequence[History] = (),
        labels: Sequence[str] | None = None,
    ):
        """Plot ``y`` columns (log scale) against ``x`` columns, one panel per pair.

        ``others`` adds more histories to the same axes (e.g. several algorithms); ``labels``
        names all curves (default: each history's algorithm name). Returns the matplotlib
        figure; saves it to ``path`` when given. Needs matplotlib (``riemfl[data]``).
        """
        try:
            import matplotlib

            matplotlib.use("Agg", force=False)
            import matplotlib.pyplot as plt
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("History.plot needs matplotlib: pip install 'riemfl[data]'") from exc
        runs = [self, *others]
        names = list(labels) if labels is not None else [h.label for h in runs]
        if len(names) != len(runs):
            raise ParameterError(f"{len(names)} labels for {len(runs)} histories")
        fig, axes = plt.subplots(
            len(y), len(x), figsize=(4.2 * len(x), 3.2 * len(y)), squeeze=False
        )
        for row, ykey in enumerate(y):
            for col, xkey in enumerate(x):
                ax = axes[row][col]
                for h, name in zip(runs, names, strict=True):
                    xs, ys = getattr(h, xkey), getattr(h, ykey)
                    pts = [(a, b) for a, b in zip(xs, ys, strict=True) if b == b and b > 0]
                    if pts:
                        ax.semilogy(*zip(*pts, strict=True), label=name)
                ax.set_xlabel(_LABELS.get(xkey, xkey))
                ax.set_ylabel(_LABELS.get(ykey, ykey))
                ax.grid(True, which="both", alpha=0.3)
        axes[0][0].legend()
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=110)
            plt.close(fig)
        return fig

    @property
    def label(self) -> str:
        algo = self.config.get("algorithm", {})
        return str(algo.get("name", "run")) if isinstance(algo, dict) else str(algo)

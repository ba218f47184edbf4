"""The record of a federated run, one type for every engine: metric rows, update log, warnings.

A :class:`History` holds

* ``metrics``: named columns, one entry per recorded row (row 0 is the initial point). The
  columns that mean the same thing have the same name on every engine (``loss``,
  ``optimality_gap``, ``grad_norm``, ``accuracy``, ``wall_time``, ``dropped``); the rest are an
  engine's own columns: ``round``, ``participants``, ``uplink_matrices``, ``uplink_bytes`` and
  ``cpu_time`` for synchronous rounds (:data:`METRICS`); ``step`` (server steps), ``time``
  (virtual time), ``updates``, ``blocked_time`` and ``uplink_bytes`` (the applied uploads, per
  client) for the asynchronous simulator; personalised
  metrics and aggregation diagnostics for FLoRAL; ``epsilon`` on every engine for runs with
  client-level differential privacy (:mod:`riemfl.federated.privacy`);
* ``log``: one entry per client update (``client``, ``staleness``, ``weight``, ``time``,
  ``version``, ``applied``) for engines that log updates (asynchronous runs, FLoRAL rounds);
* ``warnings``: every dropped client or arrival with where and why, and a divergence or a stall
  found by :meth:`History.check_divergence` and :meth:`History.check_stall` (``riemfl run``
  checks every run);
* ``summary``: run-level scalars (e.g. ``peak_versions`` of the asynchronous version store).

Columns read as attributes (``history.grad_norm`` is ``history.metrics["grad_norm"]``). A
history round-trips through JSON exactly (``History.from_json(h.to_json()) == h``, NaN equal to
NaN), writes CSV and plots itself.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import integer, real
from ..errors import ParameterError
from ..extras import import_extra
from .serialise import dump_json, from_json_float, json_float, load_json

__all__ = [
    "History",
    "METRICS",
    "LOG_COLUMNS",
    "MEASURED_COLUMNS",
    "DIVERGENCE_FACTOR",
    "DIVERGENCE_COLUMNS",
    "STALL_WINDOW",
    "STALL_FACTOR",
    "STALL_FLOOR",
    "STALL_COLUMNS",
]

#: :meth:`History.check_divergence`: a run diverges when a watched column grows beyond this
#: factor times its initial value (or turns NaN or infinite).
DIVERGENCE_FACTOR = 1e3
#: The columns :meth:`History.check_divergence` watches (each where its initial value is > 0).
DIVERGENCE_COLUMNS = ("grad_norm", "optimality_gap", "loss")
#: :meth:`History.check_stall`: the rows of the window in which a run must make progress.
STALL_WINDOW = 50
#: :meth:`History.check_stall`: progress is a best value in the window below this factor times
#: the best value before it.
STALL_FACTOR = 0.99
#: :meth:`History.check_stall`: a run whose best ``grad_norm`` is at most this factor times its
#: initial value has converged (down to the rounding floor) and is not watched.
STALL_FLOOR = 1e-6
#: The columns :meth:`History.check_stall` watches: a run stalls when none of them (that it
#: records, with an initial value > 0) makes progress.
STALL_COLUMNS = ("grad_norm", "optimality_gap")

#: The columns of a synchronous run, in order (the CLI's ``history.json`` / ``history.csv``).
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

#: Columns that measure the machine rather than the run (they differ between identical runs).
MEASURED_COLUMNS = ("wall_time", "cpu_time")

#: The columns of the per-update log.
LOG_COLUMNS = ("client", "staleness", "weight", "time", "version", "applied")

_LABELS = {
    "loss": "f(x)",
    "optimality_gap": "f(x) - f*",
    "grad_norm": "|grad f(x)|",
    "round": "communication round",
    "step": "server step",
    "time": "virtual time (timing-model units)",
    "updates": "client updates applied",
    "uplink_matrices": "uplink per client (points)",
    "uplink_bytes": "uplink per client (bytes)",
    "cpu_time": "CPU time (s)",
    "wall_time": "wall-clock time (s)",
    "epsilon": "epsilon (client-level DP)",
}


def _plain(v: Any) -> Any:
    """numpy scalars as Python numbers (columns hold plain values)."""
    return v.item() if isinstance(v, np.generic) else v


def _column_equal(a: list[Any], b: list[Any]) -> bool:
    if len(a) != len(b):
        return False
    return all(x == y or (x != x and y != y) for x, y in zip(a, b, strict=True))


def _columns_equal(a: dict[str, list[Any]], b: dict[str, list[Any]]) -> bool:
    return a.keys() == b.keys() and all(_column_equal(a[k], b[k]) for k in a)


def _extend(target: list[Any], item: Any, where: str) -> None:
    """``target`` extended by ``item`` = ``[start, values]`` (:meth:`History.since`)."""
    ok = type(item) is list and len(item) == 2 and type(item[0]) is int
    if not ok or type(item[1]) is not list:
        raise ParameterError(f"history entries: {where} is not [start, values]")
    if item[0] != len(target):
        raise ParameterError(
            f"history entries: {where} starts at entry {item[0]}, the history holds {len(target)}"
        )
    target.extend(item[1])


@dataclass(eq=False)
class History:
    """Metric rows, per-update log and warnings of one run (module docstring).

    Attributes
    ----------
    config : dict
        Problem, algorithm or rule, seed and engine settings (JSON-ready).
    metrics : dict of str to list
        One column per metric, one entry per recorded row. A column that a row does not give is
        NaN in that row; a column that first appears in a later row is NaN in the earlier ones.
    log : dict of str to list
        One entry per client update (:data:`LOG_COLUMNS`, empty for engines that log none;
        an engine may add columns, e.g. a reason).
    warnings : list of dict
        Every dropped client or arrival: ``{"client", "reason"}`` plus where it happened
        (``round`` and ``phase`` for synchronous rounds; ``step`` and ``time`` for arrivals).
    summary : dict
        Run-level scalars.
    final_point : array or None
        The output point of the last step (not serialised; set by the engine).
    """

    config: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, list[Any]] = field(default_factory=dict)
    log: dict[str, list[Any]] = field(default_factory=lambda: {k: [] for k in LOG_COLUMNS})
    warnings: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    final_point: Any = field(default=None, repr=False, compare=False)

    # ------------------------------------------------------------------ rows
    def record(self, row: dict[str, Any]) -> None:
        """Append one row (missing columns are NaN; new columns are NaN in earlier rows)."""
        n = len(self)
        for key in row:
            if key not in self.metrics:
                self.metrics[key] = [math.nan] * n
        for key, column in self.metrics.items():
            column.append(_plain(row.get(key, math.nan)))

    def append(self, **row: Any) -> None:
        """Keyword form of :meth:`record`."""
        self.record(row)

    def log_update(self, **entry: Any) -> None:
        """Append one client update to :attr:`log` (every column of :data:`LOG_COLUMNS`)."""
        if set(entry) != set(LOG_COLUMNS):
            raise ParameterError(
                f"History.log_update needs exactly the columns {LOG_COLUMNS}; got {sorted(entry)}"
            )
        for key in LOG_COLUMNS:
            self.log.setdefault(key, []).append(_plain(entry[key]))

    def __len__(self) -> int:
        return len(next(iter(self.metrics.values()), ()))

    def __getattr__(self, name: str) -> list[Any]:
        # only reached when normal attribute lookup fails: a metric column by name
        metrics = self.__dict__.get("metrics")
        if metrics is not None and name in metrics:
            return metrics[name]
        raise AttributeError(f"History has no attribute or metric column {name!r}")

    def last(self, key: str) -> Any:
        """The latest value of column ``key``."""
        return self.metrics[key][-1]

    def __eq__(self, other: object) -> bool:
        """Same config, warnings, summary, metrics and log (NaN equals NaN)."""
        if not isinstance(other, History):
            return NotImplemented
        return (
            self.config == other.config
            and self.warnings == other.warnings
            and self.summary == other.summary
            and _columns_equal(self.metrics, other.metrics)
            and _columns_equal(self.log, other.log)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def same_results(self, other: History) -> bool:
        """Equal in everything but the :data:`MEASURED_COLUMNS` (wall-clock and CPU times):
        what two runs of the same seed, or a resumed and an uninterrupted run, must share."""
        if self.config != other.config or self.warnings != other.warnings:
            return False
        if self.summary != other.summary or not _columns_equal(self.log, other.log):
            return False
        mine = {k: v for k, v in self.metrics.items() if k not in MEASURED_COLUMNS}
        theirs = {k: v for k, v in other.metrics.items() if k not in MEASURED_COLUMNS}
        return _columns_equal(mine, theirs)

    def staleness_stats(self) -> dict[str, float]:
        """Mean, standard deviation and maximum of the logged staleness (NaN when none)."""
        s = np.asarray(self.log.get("staleness", []), dtype=float)
        if s.size == 0:
            return {"mean": math.nan, "std": math.nan, "max": math.nan}
        return {"mean": float(s.mean()), "std": float(s.std()), "max": float(s.max())}

    def check_divergence(self, factor: float = DIVERGENCE_FACTOR) -> dict[str, Any] | None:
        """Find a divergence and record it in :attr:`warnings` (once).

        The rule: a run diverges at the first row where one of :data:`DIVERGENCE_COLUMNS`
        (``grad_norm``, then ``optimality_gap``, then ``loss``), whose initial value v0 is
        finite and > 0, exceeds ``factor * v0`` or is NaN or infinite. Columns that start at
        0, negative (e.g. the kPCA loss) or non-finite are not watched.

        Parameters
        ----------
        factor : float
            The growth that counts as divergence, > 1 (default :data:`DIVERGENCE_FACTOR`, 1e3).

        Returns
        -------
        dict or None
            The warning, ``{"client": None, "kind": "divergence", "metric", "row", "value",
            "initial", "reason"}`` plus ``round`` or ``step`` where the history has that column,
            also appended to :attr:`warnings` unless an equal entry is there; None when the run
            did not diverge.

        Raises
        ------
        ParameterError
            When ``factor`` is not a finite number > 1.
        """
        factor = real(factor, "check_divergence: factor", above=1)
        for name in DIVERGENCE_COLUMNS:
            values = np.asarray(self.metrics.get(name, []), dtype=float)
            if values.size < 2 or not (math.isfinite(values[0]) and values[0] > 0):
                continue
            bad = np.flatnonzero(~np.isfinite(values[1:]) | (values[1:] > factor * values[0]))
            if bad.size == 0:
                continue
            row = int(bad[0]) + 1
            entry: dict[str, Any] = {"client": None, "kind": "divergence", "metric": name}
            where = ""
            for column in ("round", "step"):
                if column in self.metrics:
                    entry[column] = _plain(self.metrics[column][row])
                    where = f" at {column} {entry[column]}"
                    break
            value, initial = float(values[row]), float(values[0])
            entry.update(row=row, value=json_float(value), initial=initial)
            entry["reason"] = (
                f"the run diverges: {name} = {value:.3e}{where}, more than {factor:g} x its "
                f"initial {initial:.3e} (try a smaller step size, --step-size)"
            )
            if entry not in self.warnings:
                self.warnings.append(entry)
            return entry
        return None

    def check_stall(
        self,
        window: int = STALL_WINDOW,
        factor: float = STALL_FACTOR,
        floor: float = STALL_FLOOR,
    ) -> dict[str, Any] | None:
        """Find a stall, a run that no longer makes progress, and record it in :attr:`warnings`
        (once).

        The rule: over its last ``window`` rows, none of :data:`STALL_COLUMNS` (``grad_norm``,
        ``optimality_gap``; those recorded with a finite initial value > 0) reached a value
        below ``factor`` times its best value before them, while the best ``grad_norm`` is
        still above ``floor`` times its initial value. This catches oscillations (the
        gradient norm alternating between two values for ever) and plateaus (client drift,
        mini-batch noise), and leaves alone runs that converge, however slowly, and runs that
        have converged down to the rounding floor. NaN rows are skipped; a history with at
        most ``window`` rows after the first is not judged.

        Parameters
        ----------
        window : int
            Rows of the window, >= 1 (default :data:`STALL_WINDOW`, 50).
        factor : float
            The progress asked of the window, in (0, 1) (default :data:`STALL_FACTOR`).
        floor : float
            The relative ``grad_norm`` below which a run counts as converged, in [0, 1)
            (default :data:`STALL_FLOOR`; ``riemfl run`` passes its problem's tolerance).

        Returns
        -------
        dict or None
            The warning, ``{"client": None, "kind": "stall", "metric", "row", "value",
            "initial", "window", "reason"}`` plus ``round`` or ``step`` (of the window's first
            row) where the history has that column, also appended to :attr:`warnings` unless an
            equal entry is there; None when the run made progress.

        Raises
        ------
        ParameterError
            For a ``window``, ``factor`` or ``floor`` out of range.
        """
        window = integer(window, "check_stall: window", minimum=1)
        factor = real(factor, "check_stall: factor", above=0, below=1)
        floor = real(floor, "check_stall: floor", at_least=0, below=1)
        n = len(self)
        if n <= window + 1:
            return None
        stalled = []
        for name in STALL_COLUMNS:
            values = np.asarray(self.metrics.get(name, []), dtype=float)
            if values.size != n or not (math.isfinite(values[0]) and values[0] > 0):
                continue
            before, recent = values[: n - window], values[n - window :]
            if not (np.isfinite(before).any() and np.isfinite(recent).any()):
                continue
            best_before, best = float(np.nanmin(before)), float(np.nanmin(recent))
            if name == "grad_norm" and min(best, best_before) <= floor * values[0]:
                return None  # converged
            if best < factor * best_before:
                return None  # progress
            stalled.append((name, best, float(values[0])))
        if not stalled:
            return None
        name, best, initial = stalled[0]
        row = n - window
        entry: dict[str, Any] = {"client": None, "kind": "stall", "metric": name}
        where = f"the last {window} rows"
        for column in ("round", "step"):
            if column in self.metrics:
                entry[column] = _plain(self.metrics[column][row])
                where = f"the last {window} rows ({column} {entry[column]} on)"
                break
        entry.update(row=row, value=best, initial=initial, window=window)
        entry["reason"] = (
            f"the run stalls: the best {name} of {where}, {best:.3e} ({best / initial:.1e} x "
            f"its initial {initial:.3e}), is not below {factor:g} x the best before them: it "
            "oscillates or stopped improving (try a smaller step size, --step-size)"
        )
        if entry not in self.warnings:
            self.warnings.append(entry)
        return entry

    @property
    def peak_versions(self) -> int | None:
        """Most global model versions held at once (asynchronous runs)."""
        return self.summary.get("peak_versions")

    @peak_versions.setter
    def peak_versions(self, value: int) -> None:
        self.summary["peak_versions"] = int(value)

    # ------------------------------------------------------------------ appended entries
    def mark(self) -> dict[str, Any]:
        """How many entries each list holds now, for :meth:`since`.

        Returns
        -------
        dict
            ``{"metrics": {column: n}, "log": {column: n}, "warnings": n}``.
        """
        return {
            "metrics": {k: len(v) for k, v in self.metrics.items()},
            "log": {k: len(v) for k, v in self.log.items()},
            "warnings": len(self.warnings),
        }

    def since(self, mark: dict[str, Any] | None) -> dict[str, Any] | None:
        """The entries appended since ``mark``, which :meth:`extend` appends to a history that
        stands at ``mark`` (the engines only ever append: rows, log entries, warnings).

        Parameters
        ----------
        mark : dict or None
            An earlier :meth:`mark` of this history; None: the empty history (everything).

        Returns
        -------
        dict or None
            ``{"metrics": {column: [start, values]}, "log": {column: [start, values]},
            "warnings": [start, entries]}`` with every column (new ones from 0, with the NaN
            they hold in the earlier rows); None when something was removed since ``mark``
            (a list is shorter, a column gone), so that the entries cannot say what changed.
        """
        mark = mark or {"metrics": {}, "log": {}, "warnings": 0}
        part: dict[str, Any] = {}
        for name in ("metrics", "log"):
            columns, before = getattr(self, name), mark[name]
            if any(k not in columns or len(columns[k]) < n for k, n in before.items()):
                return None
            part[name] = {k: [before.get(k, 0), v[before.get(k, 0) :]] for k, v in columns.items()}
        n = mark["warnings"]
        if len(self.warnings) < n:
            return None
        part["warnings"] = [n, self.warnings[n:]]
        return part

    def extend(self, part: Any) -> None:
        """Append the entries of :meth:`since` (e.g. read back from a checkpoint).

        Raises
        ------
        ParameterError
            When ``part`` is not such entries, or does not continue this history (a list
            starts elsewhere than where this history's ends); naming the list. The history may
            then hold part of the entries.
        """
        if type(part) is not dict or set(part) != {"metrics", "log", "warnings"}:
            raise ParameterError(
                "history entries are a dict with 'metrics', 'log' and 'warnings', got "
                f"{sorted(part) if isinstance(part, dict) else type(part).__name__}"
            )
        for name in ("metrics", "log"):
            if type(part[name]) is not dict:
                raise ParameterError(f"history entries: {name!r} is not a dict of columns")
            columns = getattr(self, name)
            for key, item in part[name].items():
                _extend(columns.setdefault(key, []), item, f"{name}[{key!r}]")
        n = len(self.warnings)
        _extend(self.warnings, part["warnings"], "warnings")
        if not all(type(w) is dict for w in self.warnings[n:]):
            raise ParameterError("history entries: a warning is not a dict")
        lengths = {len(v) for v in self.metrics.values()}
        if len(lengths) > 1:
            raise ParameterError(f"history columns have different lengths: {sorted(lengths)}")

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready content (non-finite floats as strings)."""
        return {
            "config": self.config,
            "metrics": {k: [json_float(v) for v in vs] for k, vs in self.metrics.items()},
            "log": {k: [json_float(v) for v in vs] for k, vs in self.log.items()},
            "warnings": self.warnings,
            "summary": {k: json_float(v) for k, v in self.summary.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> History:
        """Inverse of :meth:`to_dict` (also reads the column-per-key layout of riemfl 0.1)."""
        if not isinstance(data, dict):
            raise ParameterError(f"a history is a dict, got {type(data).__name__}")
        if "metrics" in data:
            raw = data["metrics"]
        else:  # riemfl 0.1 wrote a synchronous history's columns at the top level
            raw = {k: data[k] for k in METRICS if k in data}
        metrics = {str(k): [from_json_float(v) for v in vs] for k, vs in raw.items()}
        lengths = {len(v) for v in metrics.values()}
        if len(lengths) > 1:
            raise ParameterError(f"history columns have different lengths: {sorted(lengths)}")
        logged = data.get("log", dict.fromkeys(LOG_COLUMNS, []))
        log = {str(k): [from_json_float(v) for v in vs] for k, vs in logged.items()}
        summary = {k: from_json_float(v) for k, v in data.get("summary", {}).items()}
        if "peak_versions" in data:  # riemfl 0.1's asynchronous histories
            summary.setdefault("peak_versions", data["peak_versions"])
        return cls(
            dict(data.get("config", {})), metrics, log, list(data.get("warnings", [])), summary
        )

    def to_json(self, path: str | Path | None = None) -> str:
        """The history as JSON text; also written to ``path`` when given."""
        return dump_json(self.to_dict(), path)

    @classmethod
    def from_json(cls, source: str | Path) -> History:
        """Read a history from JSON text or from a file path."""
        return cls.from_dict(load_json(source))

    def to_csv(self, path: str | Path | None = None) -> str:
        """The metric columns as CSV text (header = column names, in recording order)."""
        keys = list(self.metrics)
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(keys)
        for row in zip(*(self.metrics[k] for k in keys), strict=True):
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
        y: Sequence[str] | None = None,
        x: Sequence[str] | None = None,
        others: Sequence[History] = (),
        labels: Sequence[str] | None = None,
    ):
        """Plot ``y`` columns (log scale) against ``x`` columns, one panel per pair.

        Defaults: ``y`` the recorded ones of ``grad_norm`` and ``optimality_gap`` (else
        ``loss``); ``x`` ``round``, ``uplink_matrices`` and ``cpu_time`` for synchronous rounds,
        ``step`` and ``time`` for asynchronous runs. ``others`` adds more histories to the same
        axes; ``labels`` names all curves (default: each history's algorithm or rule name).
        Returns the matplotlib figure; saves it to ``path`` when given. Needs matplotlib
        (``riemfl[data]``).
        """
        import_extra("matplotlib", "History.plot").use("Agg", force=False)
        import matplotlib.pyplot as plt

        if y is None:
            y = [k for k in ("grad_norm", "optimality_gap") if self._plottable(k)] or ["loss"]
        if x is None:
            x = (
                ("round", "uplink_matrices", "cpu_time")
                if "round" in self.metrics
                else ("step", "time")
            )
        missing = [k for k in (*y, *x) if k not in self.metrics]
        if missing:
            raise ParameterError(
                f"no column {missing} in this history; it has {list(self.metrics)}"
            )
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
                    xs, ys = h.metrics.get(xkey, []), h.metrics.get(ykey, [])
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

    def _plottable(self, key: str) -> bool:
        return any(v == v and v > 0 for v in self.metrics.get(key, []))

    @property
    def label(self) -> str:
        """The algorithm's or rule's name (curve labels)."""
        named = self.config.get("algorithm", self.config.get("rule", {}))
        return str(named.get("name", "run")) if isinstance(named, dict) else str(named)

"""The run core: the one loop that every federated engine is a configuration of.

An engine supplies *steps* (:class:`Steps`: synchronous rounds with an executor of client
computations, or the asynchronous event loop) and an *evaluator* (the global objective at the
output point, or personalised per-client metrics). :func:`run_steps` owns everything else, once:

* the history rows: step 0 (the initial point) and every ``record_every`` steps and the last one,
  each with the evaluator's metrics and the cumulative ``wall_time`` (metric evaluation is
  outside the steps' own ``cpu_time``);
* the progress bar;
* checkpoints: every ``checkpoint_every`` steps, at the end, at an early stop and at an
  interruption, one record appended to the checkpoint file (:class:`~riemfl.federated.
  checkpoint.CheckpointFile`): the history's entries since the previous checkpoint
  (:meth:`History.since`), the steps' full state (:meth:`Steps.state_dict`), the history's
  lengths and summary, and a fingerprint of the run (its configuration and a hash of the
  clients' data), so that a checkpoint costs the same at any length of the run (its sync to disk
  overlaps the next steps, and is waited for before the next save, at an interruption and at
  the end); a run given an existing checkpoint rebuilds the history from the file's entries,
  resumes from the state, and ends exactly (bit for bit) where the uninterrupted run ends;
* finished runs: a checkpoint of the last step, or of an early stop (it records whether the
  steps could make no further step, ``exhausted``; a ``stop(row)`` is asked again of its last
  row), is the finished run: the same call returns its history and makes no step;
* the consistency of a checkpoint, once its hashes are checked: its ``step`` is >= 0, its
  wall-clock time finite, its ``exhausted`` a bool where it has one, its history has a row for
  step 0 and for every ``record_every``-th step up to ``step`` (and no row beyond it), and the
  steps' own :meth:`Steps.validate` finds their state agreeing with ``step``; anything else is a
  :class:`~riemfl.errors.CheckpointError` naming the field, what it held and what was
  expected;
* interruption: inside :func:`~riemfl.federated.interrupt.handle_interrupts`, SIGINT or SIGTERM
  stops the loop at the next step boundary, writes the checkpoint and raises
  :class:`~riemfl.federated.interrupt.RunInterrupted`;
* early stops: the steps' ``advance`` returns False when no further step can be made (e.g. the
  asynchronous limit on updates), or ``stop(row)`` asks for it (a gradient tolerance).

Client sampling and fault handling are shared through :mod:`riemfl.federated.rounds` and
:mod:`riemfl.federated.faults`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import reprlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .._validation import integer
from ..check_levels import raise_deferred
from ..errors import CheckpointError, CheckpointMismatchError, ParameterError
from ..progress import ProgressBar
from .checkpoint import CheckpointFile, inconsistent, require, require_amount, require_count
from .history import History
from .interrupt import RunInterrupted, handle_interrupts, interrupt_requested, request_served
from .serialise import dump_json

__all__ = [
    "Steps",
    "Stateful",
    "Evaluator",
    "RunOptions",
    "EngineSpec",
    "run_steps",
]

#: Metrics of the current model: ``evaluator(point) -> {"loss": ..., ...}``.
Evaluator = Callable[[Any], dict[str, float]]


@runtime_checkable
class Stateful(Protocol):
    """Something whose run state a checkpoint must hold (rules, server optimisers, clients)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Steps(Stateful, Protocol):
    """What :func:`run_steps` advances: one step (a round, or one server step) per call."""

    def row(self) -> dict[str, Any]:
        """The engine's columns as the run stands now (row 0 before any step)."""
        ...

    def advance(self, step: int) -> bool:
        """Run step ``step`` (1-based); False when no further step can be made (the run ends
        there)."""
        ...

    def output(self) -> Any:
        """The current model (evaluated for the rows; the run's ``final_point``)."""
        ...

    def validate(self, step: int) -> None:
        """Check the state just loaded from a checkpoint of step ``step`` (after
        :meth:`load_state_dict`): the steps it records agree with ``step``, counters are
        non-negative, clocks finite, indices name existing clients and models.

        Raises
        ------
        CheckpointError
            For the first field that disagrees (:func:`~riemfl.federated.checkpoint.
            inconsistent`: the field, what it held, what was expected).
        """
        ...


@dataclass(frozen=True)
class RunOptions:
    """How a run is seeded, recorded, shown, saved and resumed: one object, the same for every
    engine (:func:`~riemfl.federated.run_sync`, :func:`~riemfl.federated.run_async`,
    :func:`~riemfl.nn.floral.run_floral` and the Flower jobs of :mod:`riemfl.adapters.flower`).

    A run is configured by three things: what is trained (a problem or a trainer), how the
    server and clients update it (an algorithm or a rule, with the engine's own keywords), and
    these options. A *step* of a run is one update of the global model: a communication round
    of a synchronous engine, a server step of an asynchronous one.

    Attributes
    ----------
    seed : int
        The run's seed: every random stream of the run (initial point, client sampling,
        mini-batches, timing, noise) is a named child of it (:class:`~riemfl.federated.seeds.
        SeedStreams`).
    record_every : int or None
        Record a row, with the evaluator's metrics, at step 0, every this many steps and at the
        last step. None: rows at step 0 and the last step only.
    checkpoint : path or None
        The checkpoint file (:mod:`riemfl.federated.checkpoint`): a record appended every
        ``checkpoint_every`` steps, at the end, at an early stop and when interrupted.
    checkpoint_every : int
        Steps between checkpoint writes.
    resume : bool
        Continue from ``checkpoint`` when it exists (it must come from the same run: same
        problem or trainer, data, method and settings, else
        :class:`~riemfl.errors.CheckpointMismatchError`).
    progress : bool
        Show a progress bar on stderr.
    desc : str or None
        The progress bar's label (None: the engine names the method and the problem).
    on_step : callable(step, history), optional
        Called after every step (e.g. to drive an outer progress bar).

    Raises
    ------
    ParameterError
        A count that is not an integer in range, or a seed that is not a non-negative integer.
    """

    seed: int = 0
    record_every: int | None = 1
    checkpoint: str | Path | None = None
    checkpoint_every: int = 10
    resume: bool = True
    progress: bool = False
    desc: str | None = None
    on_step: Callable[[int, History], None] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "seed", integer(self.seed, "RunOptions: seed", minimum=0))
        if self.record_every is not None:
            every = integer(self.record_every, "RunOptions: record_every", minimum=1)
            object.__setattr__(self, "record_every", every)
        every = integer(self.checkpoint_every, "RunOptions: checkpoint_every", minimum=1)
        object.__setattr__(self, "checkpoint_every", every)
        if self.on_step is not None and not callable(self.on_step):
            raise ParameterError(
                f"RunOptions: on_step must be callable as on_step(step, history), "
                f"got {self.on_step!r}"
            )

    def label(self, default: str) -> str:
        """The progress bar's label: ``desc``, or the engine's ``default``."""
        return default if self.desc is None else self.desc


@dataclass(frozen=True)
class EngineSpec:
    """What an engine tells :func:`run_steps` about its steps (the user's part of a run's
    configuration is :class:`RunOptions`).

    Attributes
    ----------
    steps : int
        Steps to run (rounds, server steps).
    label : str
        The progress bar's default label (``RunOptions.desc`` overrides it).
    show : sequence of str
        Columns shown after the bar (those recorded).
    columns : sequence of str
        Leading column order of the rows (the engines' documented schemas).
    stop : callable(row) -> bool, optional
        Stop after a recorded row for which it returns True.
    """

    steps: int
    label: str = "run"
    show: Sequence[str] = ()
    columns: Sequence[str] = ()
    stop: Callable[[dict[str, Any]], bool] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", integer(self.steps, "the number of steps", minimum=0))


def _canonical(fingerprint: dict[str, Any]) -> Any:
    """The fingerprint as JSON values (tuples as lists), for comparisons after a reload."""
    return json.loads(dump_json(fingerprint))


def _flat(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts of settings as one dict of dotted keys (``trainer.step_size``), so that a
    mismatch names the setting that differs."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        name = f"{prefix}{key}"
        out.update(_flat(value, f"{name}.") if isinstance(value, dict) and value else {name: value})
    return out


def _shown(flat: dict[str, Any], key: str) -> str:
    """A fingerprint entry for an error message: its repr, or "missing"."""
    return repr(flat[key]) if key in flat else "missing"


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON text (NaN settings, e.g. an unset diagnostic, equal NaN)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _fill(history: History, loaded: History) -> None:
    """Put ``loaded``'s rows, log, warnings and summary into ``history`` in place: the lists
    stay the same objects, so that steps holding them (the event loop appends to the log's
    columns directly) keep writing into the history."""
    for target, source in ((history.metrics, loaded.metrics), (history.log, loaded.log)):
        for key in [k for k in target if k not in source]:
            del target[key]
        for key, values in source.items():
            target.setdefault(key, [])[:] = values
    history.warnings[:] = loaded.warnings
    history.summary.clear()
    history.summary.update(loaded.summary)


def _consistent(where: str, check: Callable[..., Any], *args: Any) -> None:
    """``check(*args)``, its :class:`CheckpointError` prefixed with ``where`` (the file)."""
    try:
        check(*args)
    except CheckpointError as exc:
        raise CheckpointError(f"{where}: {exc}") from None


def _rebuilt(entries: list[Any], saved: Any, where: str) -> History:
    """The history of a checkpoint: its row entries appended in order, checked against the
    lengths its state records, with its summary."""
    lengths = require(saved, "lengths", dict, where=f"{where}['history']")
    summary = require(saved, "summary", dict, where=f"{where}['history']")
    loaded = History(log={})
    for k, part in enumerate(entries):
        try:
            loaded.extend(part)
        except ParameterError as exc:
            raise CheckpointError(f"{where}: its row entry {k} does not fit: {exc}") from None
    if loaded.mark() != lengths:
        raise CheckpointError(
            f"{where}: its row entries add up to {len(loaded)} rows "
            f"({reprlib.repr(loaded.mark())}), its state records {reprlib.repr(lengths)}"
        )
    loaded.summary.update(summary)
    return loaded


#: The column of a row that holds its step (synchronous rounds, asynchronous server steps).
_STEP_COLUMNS = ("round", "step")


def _step_column(history: History) -> str | None:
    """The name of ``history``'s step column (None when it has none)."""
    return next((key for key in _STEP_COLUMNS if key in history.metrics), None)


def _check_rows(history: History, step: int, record_every: int | None) -> None:
    """The rows of a history loaded with a checkpoint of step ``step``: each step once and in
    order, row 0, a row every ``record_every`` steps up to ``step`` (the last step of an earlier,
    shorter run adds one) and none beyond ``step``."""
    column = _step_column(history)
    if column is None:
        return
    recorded = history.metrics[column]
    every = record_every or step + 1
    expected = [0, *range(every, step + 1, every)]
    missing = sorted(set(expected) - set(recorded))
    ordered = all(a < b for a, b in itertools.pairwise(recorded))
    if missing or not ordered or (recorded and recorded[-1] > step):
        why = f"{column} {missing[0]} has no row" if missing else "a row repeated, or beyond"
        raise inconsistent(
            f"the history's column {column!r}",
            recorded,
            f"rows at the {column}s {reprlib.repr(expected)} (every {every} up to the "
            f"checkpoint's step {step}), each once, in order and none beyond; {why}",
        )


def _ordered(row: dict[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    head = {k: row[k] for k in columns if k in row}
    return {**head, **{k: v for k, v in row.items() if k not in head}}


class _Loop:
    def __init__(
        self,
        steps: Steps,
        evaluate: Evaluator | None,
        history: History,
        fingerprint: dict[str, Any],
        options: RunOptions,
        spec: EngineSpec,
    ) -> None:
        self.steps, self.evaluate, self.history = steps, evaluate, history
        self.fingerprint, self.options, self.spec = _canonical(fingerprint), options, spec
        self.start = 0
        self.wall0 = time.perf_counter()
        path = options.checkpoint
        # a checkpoint's sync to disk overlaps the next steps (waited for before the next save)
        self.file = None if path is None else CheckpointFile(path, background_sync=True)
        self.saved: dict[str, Any] | None = None  # the history's mark at the last save
        self.exhausted = False  # the steps could make no further step (advance returned False)
        self.finished = False  # the checkpoint resumed is of the run's end: no step to make

    # ------------------------------------------------------------------ checkpoints
    def resume(self) -> bool:
        path = self.options.checkpoint
        if self.file is None or not self.options.resume or not Path(path).exists():
            return False
        state, entries = self.file.load(
            required={
                "step": int,
                "state": dict,
                "history": dict,
                "fingerprint": dict,
                "wall": float,
            },
        )
        if "record_every" not in state["fingerprint"]:
            raise CheckpointMismatchError(
                f"checkpoint {str(path)!r} was written by a riemfl whose engines took their run "
                "options as separate keywords (its fingerprint has no 'record_every'); this "
                "riemfl configures a run with one RunOptions and cannot tell whether that run "
                "had the same options. Start the run afresh: resume=False, or "
                "`riemfl run --overwrite`",
                "record_every: missing there",
            )
        if not _same(state["fingerprint"], self.fingerprint):
            saved, now = _flat(state["fingerprint"]), _flat(self.fingerprint)
            differ = sorted(
                k
                for k in {*saved, *now}
                if k not in saved or k not in now or not _same(saved[k], now[k])
            )
            shown = "; ".join(
                f"{k}: {_shown(saved, k)} there, {_shown(now, k)} here" for k in differ
            )
            raise CheckpointMismatchError(
                f"checkpoint {str(path)!r} was written by another run (other settings or data: "
                f"{shown}); delete it, name another checkpoint file, or pass resume=False",
                shown,
            )
        if state["step"] > self.spec.steps:
            raise CheckpointError(
                f"checkpoint {str(path)!r} is at step {state['step']}, beyond the "
                f"{self.spec.steps} steps asked for"
            )
        where = f"checkpoint {str(path)!r}"
        _consistent(where, require_count, "its 'step'", state["step"])
        _consistent(where, require_amount, "its wall-clock time 'wall'", state["wall"])
        if "exhausted" in state:  # checkpoints written before early stops were saved lack it
            self.exhausted = require(state, "exhausted", bool, where=where)
        loaded = _rebuilt(entries, state["history"], where)
        try:
            self.steps.load_state_dict(state["state"])
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise CheckpointError(
                f"{where}: its run state does not fit this run: {type(exc).__name__}: {exc}"
            ) from exc
        _fill(self.history, loaded)
        _consistent(where, self.steps.validate, state["step"])
        _consistent(where, _check_rows, self.history, state["step"], self.options.record_every)
        self.saved = self.history.mark()
        self.start = state["step"]
        self.wall0 = time.perf_counter() - state["wall"]
        self.finished = self.exhausted or self._stopped(self.start)
        return True

    def _stopped(self, step: int) -> bool:
        """Whether ``spec.stop`` ends the run at its last row, when that row is of ``step``
        (the row a run that stopped there was stopped by; asked again, so that a run resumed
        with another tolerance goes on)."""
        if self.spec.stop is None or self._last_recorded() != step:
            return False
        return bool(self.spec.stop({k: v[-1] for k, v in self.history.metrics.items()}))

    def save(self, step: int) -> None:
        if self.file is None:
            return
        mark = self.history.mark()
        payload = {
            "step": int(step),
            "state": self.steps.state_dict(),
            "history": {"lengths": mark, "summary": dict(self.history.summary)},
            "fingerprint": self.fingerprint,
            "wall": float(time.perf_counter() - self.wall0),
            "exhausted": self.exhausted,
        }
        part = self.history.since(self.saved)
        if part is None:  # something was removed from the history: the whole of it, anew
            self.file.write(payload, [self.history.since(None)])
        else:
            self.file.save(payload, [part])
        self.saved = mark

    # ------------------------------------------------------------------ rows
    def record(self, row: dict[str, Any]) -> dict[str, Any]:
        if self.evaluate is not None:
            row.update(self.evaluate(self.steps.output()))
        row["wall_time"] = time.perf_counter() - self.wall0
        row = _ordered(row, self.spec.columns)
        self.history.record(row)
        return row

    # ------------------------------------------------------------------ the loop
    def run(self) -> History:
        try:
            history = self._run()
        except BaseException:
            if self.file is not None:  # the error that stops the run is the one to raise
                with contextlib.suppress(OSError):
                    self.file.wait()
            raise
        if self.file is not None:
            self.file.wait()  # the last checkpoint is on disk when the run returns
        return history

    def _run(self) -> History:
        opts, spec = self.options, self.spec
        if not self.resume():
            self.record(self.steps.row())
        done = self.start
        last_saved = self.start
        with (
            handle_interrupts(),
            ProgressBar(
                spec.steps, opts.label(spec.label), enabled=opts.progress, start=self.start
            ) as bar,
        ):
            # the loop body runs once per step (an asynchronous server step can be a single
            # client update): its bookkeeping is kept to a few local lookups
            advance, last, every = self.steps.advance, spec.steps, opts.checkpoint_every
            record_every, on_step = opts.record_every or last + 1, opts.on_step
            show = bar.update if opts.progress else None
            for step in range(last + 1 if self.finished else self.start + 1, last + 1):
                if interrupt_requested():
                    self.interrupt(done, last_saved)
                more = advance(step)
                raise_deferred()  # the step's deferred checks (riemfl.checks): one read, here
                if not more:  # no further step: record and save where it stands
                    if self._last_recorded() != done:
                        self.record(self.steps.row())
                    self.exhausted = True
                    self.save(done)
                    last_saved = done
                    break
                done = step
                stop = False
                if step % record_every == 0 or step == last:
                    row = self.record(self.steps.row())
                    bar.update(1, **{k: row[k] for k in spec.show if k in row})
                    stop = spec.stop is not None and spec.stop(row)
                elif show is not None:
                    show(1)
                if on_step is not None:
                    on_step(step, self.history)
                if stop or step % every == 0 or step == last:
                    self.save(step)
                    last_saved = step
                if stop:
                    break
            if interrupt_requested():
                self.interrupt(done, last_saved)
        self.history.final_point = self.steps.output()
        return self.history

    def _last_recorded(self) -> int | None:
        """The step of the last recorded row (its ``round`` or ``step`` column)."""
        column = _step_column(self.history)
        return None if column is None else self.history.metrics[column][-1]

    def interrupt(self, done: int, last_saved: int) -> None:
        if done != last_saved:
            self.save(done)
        if self.file is not None:
            self.file.wait()  # "saved" means on disk
        path = self.options.checkpoint
        request_served()
        raise RunInterrupted(done, None if path is None else str(path))


def run_steps(
    steps: Steps,
    evaluate: Evaluator | None,
    history: History,
    fingerprint: dict[str, Any],
    options: RunOptions,
    spec: EngineSpec,
) -> History:
    """Run ``spec.steps`` steps of ``steps`` (module docstring); return the history.

    Parameters
    ----------
    steps : Steps
        The engine's steps (rounds, server steps), with their state.
    evaluate : callable(point) -> dict, optional
        Metrics of the current model for every recorded row.
    history : History
        The run's history, with its ``config`` set (filled in place).
    fingerprint : dict
        What a checkpoint must match to be resumed: settings and a hash of the data.
    options : RunOptions
        The user's options (seed, recording, checkpoints, progress, callback).
    spec : EngineSpec
        The engine's part: the number of steps, the bar's label and columns, the stop test.

    Raises
    ------
    CheckpointError
        When the checkpoint is corrupt or belongs to another run.
    RunInterrupted
        When SIGINT/SIGTERM arrived (the checkpoint, if any, is written first).
    """
    fingerprint = {**fingerprint, "record_every": options.record_every}
    return _Loop(steps, evaluate, history, fingerprint, options, spec).run()

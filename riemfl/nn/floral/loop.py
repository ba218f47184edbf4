r"""Synchronous FLoRAL rounds (Algorithm 1 with partial participation), with checkpoints.

:func:`run_floral` runs, per round (digest B.4),

1. sample the participants :math:`S_\tau` (all clients, or ``clients_per_round`` uniformly
   without replacement; :func:`riemfl.federated.engine.sample_round`, the draw of the
   synchronous engine);
2. each participant's local run from the global vector (:meth:`FloralTrainer.train`);
3. the server aggregation of the uploads with :math:`N^k` and :math:`\hat\pi^k`
   (:class:`~riemfl.nn.floral.FloralAggregator`: factor averages or manifold-aware products,
   optional server optimiser);
4. every ``eval_every`` rounds, the personal metrics (:meth:`FloralTrainer.evaluate`: each
   client with its own router) and the aggregation diagnostics.

It is not :func:`riemfl.federated.run_sync` because that engine's metrics are global
objectives at the server's point (loss, Riemannian gradient), while a personalised model is
evaluated with each client's router, which only the client holds. The pieces are riemfl's:
the seed's generator and client sampling (``run_rng``, ``sample_round``), the progress bar, the
atomic checkpoint files, and the metrics table of the asynchronous engine
(:class:`~riemfl.federated.AsyncHistory`: one row per evaluated round with ``step`` = round and
``time`` = wall seconds, a log entry per client update with staleness 0). A checkpoint holds the
global vector, the clients' state, the generator, the server optimiser and the history, so a
resumed run ends exactly where an uninterrupted one does.

A client whose upload is not finite is dropped from the round with a
:class:`~riemfl.federated.ClientDroppedWarning` (counted in ``dropped``); a round where every
participant fails raises :class:`~riemfl.errors.ClientFailureError`.
"""

from __future__ import annotations

import hashlib
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ...errors import CheckpointError, ClientFailureError, ParameterError
from ...federated.async_engine import AsyncHistory
from ...federated.checkpoint import load_checkpoint, save_checkpoint
from ...federated.engine import ClientDroppedWarning, run_rng, sample_round
from ...progress import ProgressBar
from .server import FloralAggregator
from .trainer import FloralTrainer

__all__ = ["run_floral"]


def run_floral(
    trainer: FloralTrainer,
    rounds: int,
    *,
    aggregator: FloralAggregator | None = None,
    clients_per_round: int | None = None,
    seed: int = 0,
    x0: np.ndarray | None = None,
    eval_every: int | None = 1,
    checkpoint: str | Path | None = None,
    checkpoint_every: int = 10,
    resume: bool = True,
    progress: bool = False,
    desc: str = "floral",
    on_round: Callable[[int, AsyncHistory], None] | None = None,
) -> AsyncHistory:
    """Run ``rounds`` synchronous FLoRAL rounds (module docstring).

    Parameters
    ----------
    trainer : FloralTrainer
        The clients (data, personal state, local training).
    rounds : int
        Communication rounds R.
    aggregator : FloralAggregator, optional
        Default: factor-wise averages (Algorithm 1) with plain averaging.
    clients_per_round : int, optional
        Participants per round (default: all).
    seed : int
        Seed of the client sampling and of the local runs' shuffles.
    x0 : array (D,), optional
        Initial global vector (default: ``trainer.global_parameters()``).
    eval_every : int or None
        Evaluate every this many rounds (and at rounds 0 and R); None: only at the end.
    checkpoint : path, optional
        Run-state file, written atomically every ``checkpoint_every`` rounds and at the end.
    resume : bool
        Continue from ``checkpoint`` when it exists (same settings, else ``CheckpointError``).
    progress : bool
        Show a progress bar.
    on_round : callable(round, history), optional
        Called after every round.

    Returns
    -------
    AsyncHistory
        ``metrics``: ``step`` (round), ``time`` (wall s), ``updates``, ``dropped``,
        ``uplink_floats`` (cumulative floats uploaded per client on average), the trainer's
        metrics and the aggregator's diagnostics; ``log``: one entry per client update;
        ``final_point``: the last global vector.
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise ParameterError(f"run_floral: rounds must be an int >= 0, got {rounds!r}")
    if eval_every is not None and (not isinstance(eval_every, int) or eval_every < 1):
        raise ParameterError(
            f"run_floral: eval_every must be an int >= 1 or None, got {eval_every!r}"
        )
    if checkpoint_every < 1:
        raise ParameterError(f"run_floral: checkpoint_every must be >= 1, got {checkpoint_every!r}")
    aggregator = aggregator if aggregator is not None else FloralAggregator(trainer.layout)
    n = trainer.n_clients
    if clients_per_round is not None and not 1 <= clients_per_round <= n:
        raise ParameterError(
            f"run_floral: clients_per_round must be in 1..{n}, got {clients_per_round!r}"
        )
    rng = run_rng(seed)
    x = trainer.global_parameters() if x0 is None else np.array(x0, dtype=np.float64)
    fingerprint = {
        "trainer": trainer.describe(),
        "aggregator": aggregator.describe(),
        "clients_per_round": clients_per_round,
        "seed": seed,
        "x0": hashlib.sha1(np.ascontiguousarray(x).tobytes()).hexdigest(),
    }
    history = AsyncHistory(config={**fingerprint, "rounds": rounds, "engine": "floral-sync"})
    counters = {"updates": 0.0, "dropped": 0.0, "uplink_floats": 0.0}
    info: dict[str, float] = {}
    start = 0
    wall0 = time.perf_counter()
    if checkpoint is not None and resume and Path(checkpoint).exists():
        state = load_checkpoint(checkpoint)
        if state.get("fingerprint") != fingerprint:
            raise CheckpointError(
                f"checkpoint {str(checkpoint)!r} was written by a different run configuration; "
                "delete it or pass resume=False"
            )
        start, x = int(state["round"]), state["x"]
        rng.bit_generator.state = state["rng"]
        trainer.load_client_state(state["clients"])
        aggregator.server_optimizer.load_state_dict(state["server_optimizer"])
        history = AsyncHistory.from_json(state["history"])
        counters = state["counters"]
        info = state["info"]
        wall0 -= state["wall"]

    def evaluate(r: int) -> None:
        row = {"step": r, "time": time.perf_counter() - wall0, **counters, **info}
        row.update(trainer.evaluate(x))
        history.record(row)

    if start == 0:
        evaluate(0)
    upload_floats = trainer.layout.size + 1 + (trainer.last_pi.shape[1])
    with ProgressBar(rounds, desc, enabled=progress, start=start) as bar:
        for r in range(start + 1, rounds + 1):
            active, _ = sample_round(rng, trainer, 1, clients_per_round)
            uploads, sizes, pis, kept = [], [], [], []
            reasons = []
            for i in active:
                counters["updates"] += 1
                try:
                    local = trainer.train(int(i), x, rng)
                except ParameterError as exc:  # diverged: drop it, as the sync engine does
                    counters["dropped"] += 1
                    reasons.append(f"client {i}: {exc}")
                    warnings.warn(f"round {r}: {reasons[-1]}", ClientDroppedWarning, stacklevel=2)
                    continue
                n_k, pi_k = trainer.upload_weights(int(i))
                uploads.append(local)
                sizes.append(n_k)
                pis.append(pi_k)
                kept.append(int(i))
            if not kept:
                raise ClientFailureError(
                    f"round {r}: every participant failed: " + "; ".join(reasons)
                )
            pi = np.array(pis) if trainer.layout.n_clusters is not None else None
            x, info = aggregator.aggregate(x, np.array(uploads), np.array(sizes), pi)
            counters["uplink_floats"] += len(kept) * upload_floats / n
            total = float(np.sum(sizes))
            for i, n_k in zip(kept, sizes, strict=True):
                for key, value in (
                    ("client", i),
                    ("staleness", 0),
                    ("weight", n_k / total),
                    ("time", float(r)),
                    ("version", r),
                    ("applied", True),
                ):
                    history.log[key].append(value)
            if (eval_every is not None and r % eval_every == 0) or r == rounds:
                evaluate(r)
            shown = {
                k: history.metrics[k][-1] for k in ("accuracy", "loss") if k in history.metrics
            }
            bar.update(1, **shown)
            if on_round is not None:
                on_round(r, history)
            if checkpoint is not None and (r % checkpoint_every == 0 or r == rounds):
                save_checkpoint(
                    checkpoint,
                    {
                        "round": r,
                        "x": x,
                        "rng": rng.bit_generator.state,
                        "clients": trainer.client_state(),
                        "server_optimizer": aggregator.server_optimizer.state_dict(),
                        "history": history.to_json(),
                        "counters": counters,
                        "info": info,
                        "wall": time.perf_counter() - wall0,
                        "fingerprint": fingerprint,
                    },
                )
    history.final_point = x
    return history

"""A Flower App for real deployments: ``server_app`` and ``client_app`` built from the run config.

``flwr run`` ships an app directory (a ``pyproject.toml``) to a SuperLink; the SuperLink and the
SuperNodes then load the components named there. This module is such a component pair::

    [tool.flwr.app.components]
    serverapp = "riemfl.adapters.flower.deploy:server_app"
    clientapp = "riemfl.adapters.flower.deploy:client_app"

Both sides build the same job from ``context.run_config`` (the ``[tool.flwr.app.config]`` table,
keys in :data:`DEFAULTS`): the problem by name from :mod:`riemfl.experiments.registry`, the
algorithm or asynchronous rule by name. The server side (``aggregator``, ``server-optimizer``
and their parameters) and compressed uploads (``compression``, ``error-feedback``) are the
options of ``riemfl run`` of the same names, checked and built by the functions the command
line uses (:mod:`riemfl.experiments.run_settings`), so a setting the command line refuses is
refused here with the same error.
:func:`write_app_project` writes such a directory. Importing this module imports Flower.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from riemfl.adapters.flower.client import make_client_app
from riemfl.adapters.flower.errors import ProtocolError
from riemfl.adapters.flower.jobs import (
    MAX_FAILURES,
    REGISTRATION_TIMEOUT,
    REPLY_TIMEOUT,
    AsyncJob,
    ProblemSpec,
    SyncJob,
)
from riemfl.adapters.flower.secure import SecAggSettings
from riemfl.adapters.flower.server import make_server_app
from riemfl.adapters.flower.wire import to_numpy

from riemfl.errors import ParameterError
from riemfl.experiments.registry import (
    CURVE_RULE_NAMES,
    PROBLEMS,
    build_algorithm,
    build_async_rule,
)
from riemfl.experiments.run_settings import async_rule_settings, compressed, server_side
from riemfl.federated.privacy import DPSettings
from riemfl.federated.run_core import RunOptions
from riemfl.federated.server_optimized import ServerOptimized

__all__ = [
    "DEFAULTS",
    "job_from_run_config",
    "write_app_project",
    "load_result",
    "server_app",
    "client_app",
]

#: run-config keys and their defaults (0 / "" / -1 mean "the registry's default" / "none");
#: ``registration-timeout`` bounds the wait for ``min-nodes`` nodes and the job's handshake,
#: ``reply-timeout`` every later reply, ``max-failures`` an asynchronous client's faulty replies in
#: a row (``docs/flower.md``, "Timeouts and faults"); ``secagg = true`` runs a synchronous job's
#: phases through Flower's SecAgg+ with the ``secagg-*`` settings (``docs/flower.md``, "Secure
#: aggregation"; the rule must be sum-only, e.g. ``upload = "tangent"`` for rfedavg);
#: ``dp-clip > 0`` turns on client-level differential privacy with the ``dp-*`` settings
#: (:class:`~riemfl.federated.privacy.DPSettings`; ``docs/flower.md``, "Differential privacy");
#: ``checkpoint`` (a file path on the ServerApp's machine; "" none) saves the job every
#: ``checkpoint-every`` steps, and a job submitted again with the same file resumes from it
#: (``resume``; :class:`~riemfl.federated.RunOptions`). The server side and compressed uploads
#: are ``riemfl run``'s options of the same names (``docs/flower.md``, section 2): ``aggregator``
#: ("" the rule's mean) with ``trim`` (-1: 0.2), ``krum-f`` (-1: 0) and ``clip-radius`` (0: 1);
#: ``server-optimizer`` ("" none) with ``server-lr`` (0: 1 for sgd and momentum, 0.1 for the
#: adaptive ones; without a server optimiser, an asynchronous rule's eta_g), ``server-momentum``
#: (-1: 0.9) and ``server-beta1``, ``server-beta2`` (-1: 0.9, 0.99; both or neither);
#: ``compression`` ("" none; a SPEC of ``--compression``) with ``error-feedback`` ("auto": the
#: compressor's default, "on", "off")
DEFAULTS: dict[str, Any] = {
    "job": "riemfl",
    "engine": "sync",
    "problem": "kpca-synthetic",
    "problem-clients": 0,
    "problem-k": 0,
    "problem-seed": 0,
    "problem-data": "",
    "algorithm": "rfedproj",
    "step-size": 0.0,
    "local-steps": 5,
    "global-step-size": 1.0,
    "mu": 1.0,
    "operators": "approximate",
    "steps": 5,
    "seed": 0,
    "clients-per-round": 0,
    "batch-size": 0,
    "rule": "fedasync",
    "server-lr": 0.0,
    "buffer-size": 10,
    "staleness": "constant",
    "workers": 0,
    "node-workers": 1,
    "max-staleness": -1,
    "warmup-steps": -1,
    "curve-steps": -1,
    "vartheta": 1.0,
    "min-nodes": 2,
    "registration-timeout": REGISTRATION_TIMEOUT,
    "reply-timeout": REPLY_TIMEOUT,
    "max-failures": MAX_FAILURES,
    "atol": 1e-8,
    "max-poll": 0.05,
    "upload": "point",
    "aggregator": "",
    "trim": -1.0,
    "krum-f": -1,
    "clip-radius": 0.0,
    "server-optimizer": "",
    "server-momentum": -1.0,
    "server-beta1": -1.0,
    "server-beta2": -1.0,
    "compression": "",
    "error-feedback": "auto",
    "secagg": False,
    "secagg-num-shares": 1.0,
    "secagg-reconstruction-threshold": 0.5,
    "secagg-clipping-range": 8.0,
    "secagg-quantization-range": 2**22,
    "secagg-modulus-range": 2**32,
    "dp-clip": 0.0,
    "dp-noise": 0.0,
    "dp-delta": 1e-5,
    "dp-mode": "central",
    "output": "",
    "checkpoint": "",
    "checkpoint-every": 10,
    "resume": True,
}

_JOBS: dict[tuple, SyncJob | AsyncJob] = {}


def _config(run_config: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(run_config) - set(DEFAULTS))
    if unknown:
        raise ParameterError(
            f"unknown run-config keys {unknown}; expected some of {list(DEFAULTS)}"
        )
    return {**DEFAULTS, **dict(run_config)}


def job_from_run_config(run_config: Mapping[str, Any]) -> SyncJob | AsyncJob:
    """The job a run config describes (built once per process and config)."""
    c = _config(run_config)
    key = tuple(sorted((k, v) for k, v in c.items() if k != "output"))
    if key in _JOBS:
        return _JOBS[key]
    if c["problem"] not in PROBLEMS:
        raise ParameterError(
            f"unknown problem {c['problem']!r}; expected one of {sorted(PROBLEMS)}"
        )
    if c["engine"] not in ("sync", "async"):
        raise ParameterError(f"engine must be 'sync' or 'async', got {c['engine']!r}")
    sync = c["engine"] == "sync"
    spec = ProblemSpec(
        c["problem"],
        clients=c["problem-clients"] or None,
        k=c["problem-k"] or None,
        seed=int(c["problem-seed"]),
        data=c["problem-data"] or None,
    )
    problem = spec.build()
    step = float(c["step-size"]) or PROBLEMS[c["problem"]].default_step_size(
        problem, int(c["local-steps"]), float(c["global-step-size"])
    )
    common = {
        "name": c["job"],
        "options": RunOptions(
            seed=int(c["seed"]),
            checkpoint=c["checkpoint"] or None,
            checkpoint_every=int(c["checkpoint-every"]),
            resume=bool(c["resume"]),
        ),
        "atol": float(c["atol"]),
        "registration_timeout": float(c["registration-timeout"]),
        "reply_timeout": float(c["reply-timeout"]),
        "max_poll": float(c["max-poll"]),
    }
    args = _cli_args(c, sync=sync)
    server = server_side(args, problem.n_clients, sync=sync)
    if sync:
        algorithm = build_algorithm(
            c["algorithm"],
            step_size=step,
            local_steps=int(c["local-steps"]),
            global_step_size=float(c["global-step-size"]),
            mu=float(c["mu"]),
            operators=c["operators"],
            upload=c["upload"],
        )
        if server.optimizer is not None:
            algorithm = ServerOptimized(algorithm, server.optimizer)
        algorithm = compressed(args, algorithm)
        job: SyncJob | AsyncJob = SyncJob(
            spec,
            algorithm,
            int(c["steps"]),
            clients_per_round=int(c["clients-per-round"]) or None,
            batch_size=int(c["batch-size"]) or None,
            secagg=_secagg(c),
            privacy=_privacy(c),
            aggregator=server.aggregator,
            **common,
        )
    else:
        if float(c["dp-clip"]):
            raise ParameterError(
                "run-config 'dp-clip' sets differential privacy of a synchronous job; "
                "engine 'async' has none here"
            )
        if c["rule"] not in CURVE_RULE_NAMES and float(c["vartheta"]) != DEFAULTS["vartheta"]:
            raise ParameterError(
                f"run-config 'vartheta' sets the curve rules {CURVE_RULE_NAMES}; rule "
                f"{c['rule']!r} has no curve correction"
            )
        rule = build_async_rule(
            c["rule"],
            **async_rule_settings(args, server),
            buffer_size=int(c["buffer-size"]),
            operators=c["operators"],
            staleness=c["staleness"],
            manifold=problem.manifold,
            vartheta=float(c["vartheta"]),
        )
        curve = {
            key: int(c[name])
            for key, name in (("warmup_steps", "warmup-steps"), ("curve_steps", "curve-steps"))
            if int(c[name]) >= 0
        }
        job = AsyncJob(
            spec,
            rule,
            int(c["steps"]),
            step,
            int(c["local-steps"]),
            batch_size=int(c["batch-size"]) or None,
            workers=int(c["workers"]) or None,
            node_workers=int(c["node-workers"]),
            max_staleness=None if int(c["max-staleness"]) < 0 else int(c["max-staleness"]),
            max_failures=int(c["max-failures"]),
            **curve,
            **common,
        )
    _JOBS[key] = job
    return job


#: the values of run-config ``error-feedback`` and ``riemfl run``'s ``--error-feedback`` they
#: stand for (None: not given, the compressor's default)
_ERROR_FEEDBACK = {"auto": None, "on": True, "off": False}


def _given(c: Mapping[str, Any], key: str, kind: type = float) -> Any:
    """The run config's ``key`` as ``kind``, or None when it has its default (not given)."""
    return None if c[key] == DEFAULTS[key] else kind(c[key])


def _cli_args(c: Mapping[str, Any], *, sync: bool) -> argparse.Namespace:
    """The ``riemfl run`` options that the run config's server side and compression keys
    stand for, under the names :func:`~riemfl.experiments.run_settings.server_side`,
    :func:`~riemfl.experiments.run_settings.compressor_of` and
    :func:`~riemfl.experiments.run_settings.compressed`
    read (None: not given), so that their checks and defaults apply as on the command line.
    Attackers have no run-config key (``byzantine`` and ``attack`` are None).

    Raises
    ------
    ParameterError
        An ``error-feedback`` other than "auto", "on" and "off", or one of ``server-beta1`` and
        ``server-beta2`` without the other.
    """
    if c["error-feedback"] not in _ERROR_FEEDBACK:
        raise ParameterError(
            f"run-config 'error-feedback' must be one of {list(_ERROR_FEEDBACK)} (auto: the "
            f"compressor's default), got {c['error-feedback']!r}"
        )
    betas = (_given(c, "server-beta1"), _given(c, "server-beta2"))
    if (betas[0] is None) != (betas[1] is None):
        raise ParameterError(
            "run-config 'server-beta1' and 'server-beta2' are riemfl run's --server-betas B1 B2: "
            f"give both or neither, got {betas[0]} and {betas[1]} (None: not given)"
        )
    return argparse.Namespace(
        algorithm=c["algorithm"] if sync else c["rule"],
        seed=int(c["seed"]),
        clients_per_round=(int(c["clients-per-round"]) or None) if sync else None,
        buffer_size=int(c["buffer-size"]),
        aggregator=_given(c, "aggregator", str),
        trim=_given(c, "trim"),
        krum_f=_given(c, "krum-f", int),
        clip_radius=_given(c, "clip-radius"),
        server_optimizer=_given(c, "server-optimizer", str),
        server_lr=_given(c, "server-lr"),
        server_momentum=_given(c, "server-momentum"),
        server_betas=None if betas[0] is None else betas,
        byzantine=None,
        attack=None,
        compression=_given(c, "compression", str),
        error_feedback=_ERROR_FEEDBACK[c["error-feedback"]],
    )


def _share(value: Any) -> int | float:
    """A share count or fraction of the run config: a whole number >= 2 is a count (toml may
    give it as a float), anything else a fraction."""
    v = float(value)
    return int(v) if v >= 2 and v.is_integer() else v


def _secagg(c: Mapping[str, Any]) -> SecAggSettings | None:
    """The SecAgg+ settings of a run config (``secagg = true``), or None."""
    if not c["secagg"]:
        return None
    return SecAggSettings(
        _share(c["secagg-num-shares"]),
        _share(c["secagg-reconstruction-threshold"]),
        clipping_range=float(c["secagg-clipping-range"]),
        quantization_range=int(c["secagg-quantization-range"]),
        modulus_range=int(c["secagg-modulus-range"]),
    )


def _privacy(c: Mapping[str, Any]) -> DPSettings | None:
    """The DP settings of a run config (``dp-clip > 0``), or None."""
    if not float(c["dp-clip"]):
        return None
    return DPSettings(
        float(c["dp-clip"]), float(c["dp-noise"]), float(c["dp-delta"]), str(c["dp-mode"])
    )


def _write_output(job: Any, result: Any, context: Any) -> None:
    path = _config(context.run_config)["output"]
    if not path:
        return
    final = result.final_point
    payload = {
        "job": job.name,
        "kind": type(job).__name__,
        "history": result.to_dict(),
        "final_point": None if final is None else to_numpy(final).tolist(),
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(json.dumps(payload))
    tmp.replace(target)  # atomic: a reader never sees half a file


def load_result(path: str | Path) -> dict[str, Any]:
    """Read what the deployment's ServerApp wrote to ``output``: ``job``, ``kind``,
    ``history`` (the History's dict) and ``final_point`` (a numpy array)."""
    data = json.loads(Path(path).read_text())
    if data.get("final_point") is not None:
        data["final_point"] = np.asarray(data["final_point"], dtype=float)
    return data


def _toml_value(key: str, v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ParameterError(f"run-config {key!r} must be finite, got {v!r}")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string
    raise ParameterError(f"run-config {key!r} must be a bool, int, float or str, got {v!r}")


def write_app_project(path: str | Path, run_config: Mapping[str, Any] | None = None) -> Path:
    """Write a Flower App directory (``pyproject.toml``) that runs this module's apps.

    Parameters
    ----------
    path : path
        The directory (created); ``flwr run PATH SUPERLINK`` starts the run.
    run_config : mapping, optional
        Values of :data:`DEFAULTS` to change (the others are written with their defaults, since
        ``flwr run --run-config`` can only override keys the file has).

    Returns
    -------
    pathlib.Path
        The ``pyproject.toml`` written.
    """
    config = _config(run_config or {})
    lines = [
        "[build-system]",
        'requires = ["hatchling"]',
        'build-backend = "hatchling.build"',
        "",
        "[project]",
        'name = "riemfl-flower-app"',
        'version = "1.0.0"',
        'description = "riemfl federated optimisation on manifolds, run by Flower"',
        'license = "MIT"',
        "dependencies = []",
        "",
        "[tool.flwr.app]",
        'publisher = "riemfl"',
        "",
        "[tool.flwr.app.components]",
        'serverapp = "riemfl.adapters.flower.deploy:server_app"',
        'clientapp = "riemfl.adapters.flower.deploy:client_app"',
        "",
        "[tool.flwr.app.config]",
        *(f"{k} = {_toml_value(k, v)}" for k, v in config.items()),
        "",
    ]
    target = Path(path)
    target.mkdir(parents=True, exist_ok=True)
    pyproject = target / "pyproject.toml"
    pyproject.write_text("\n".join(lines))
    return pyproject


def _client_job(name: str, context: Any) -> SyncJob | AsyncJob:
    job = job_from_run_config(context.run_config)
    if job.name != name:
        raise ProtocolError(f"message for job {name!r}; this run's job is {job.name!r}")
    return job


server_app = make_server_app(
    lambda context: [job_from_run_config(context.run_config)],
    min_nodes=lambda context: int(_config(context.run_config)["min-nodes"]),
    registration_timeout=lambda context: float(_config(context.run_config)["registration-timeout"]),
    on_result=_write_output,
)
client_app = make_client_app(_client_job)

"""The deployment app's run-config keys of the server side (``aggregator``, ``server-optimizer``
and their parameters) and of compressed uploads (``compression``, ``error-feedback``).

Each key builds what ``riemfl run`` builds from the option of the same name, and is refused
where the command line refuses it, with the same typed error; the defaults leave jobs as they
are. Fast: ``job_from_run_config`` called directly, and one compressed job on real ClientApps
of the deployment app in an in-process grid (no Ray, no processes).
"""

from __future__ import annotations

import numpy as np
import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: the backport Flower depends on
    import tomli as tomllib

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'riemfl[flower]')")

from riemfl.adapters.flower import AsyncJob, NotSumOnlyError, SyncJob, deploy  # noqa: E402
from riemfl.adapters.flower.sync_server import run_sync_job  # noqa: E402
from test_flower_compression import CountingGrid  # noqa: E402
from test_flower_secagg import NODES, task_identity  # noqa: E402, F401 - a fixture

from riemfl.cli.options import build_parser  # noqa: E402
from riemfl.errors import ParameterError  # noqa: E402
from riemfl.experiments.run_settings import compressed, server_side  # noqa: E402
from riemfl.federated import RFedAvg, RFedProj, RunOptions, ServerOptimized, run_sync  # noqa: E402
from riemfl.federated.compressed import Compressed  # noqa: E402
from riemfl.federated.compression import make_compressor  # noqa: E402
from riemfl.federated.privacy import DPSettings, PrivateAlgorithm  # noqa: E402
from riemfl.federated.robust import (  # noqa: E402
    CenteredClipping,
    GeometricMedian,
    Krum,
    MultiKrum,
    TrimmedMean,
)
from riemfl.federated.server_optimizers import ServerAdam, ServerSGD  # noqa: E402

CLIENTS = 6
BASE = {"problem-clients": CLIENTS, "steps": 2}
FEDBUFF = {**BASE, "engine": "async", "rule": "fedbuff", "buffer-size": 5}
NEW_KEYS = {
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
}


def job(**keys):
    """The job of ``BASE`` with ``keys`` (underscores for the run config's dashes)."""
    return deploy.job_from_run_config({**BASE, **{k.replace("_", "-"): v for k, v in keys.items()}})


def cli(*options, engine="sync"):
    """What ``riemfl run kpca-synthetic --clients 6 OPTIONS`` builds of the server side, and the
    compression of its algorithm (the ``compression`` entry of its description, or None)."""
    algorithm = "rfedproj" if engine == "sync" else "fedbuff"
    argv = ["run", "kpca-synthetic", "--clients", str(CLIENTS), "--algorithm", algorithm]
    args = build_parser().parse_args([*argv, "--engine", engine, *options])
    server = server_side(args, CLIENTS, sync=engine == "sync")
    wrapped = compressed(args, RFedProj(0.01, 2)) if engine == "sync" else None
    compression = wrapped.describe().get("compression") if wrapped is not None else None
    return server, compression


def flags(keys):
    """The ``riemfl run`` options of the run-config ``keys`` of the same names."""
    return [text for key, value in keys.items() for text in (f"--{key}", str(value))]


# ---------------------------------------------------------------------------------- defaults
def test_the_new_keys_have_defaults_that_mean_unset():
    assert {k: deploy.DEFAULTS[k] for k in NEW_KEYS} == NEW_KEYS
    assert deploy.DEFAULTS["server-lr"] == 0.0


def test_the_defaults_leave_jobs_unchanged():
    sync = job()
    assert type(sync) is SyncJob and type(sync.algorithm) is RFedProj
    assert sync.aggregator is None
    explicit = job(**NEW_KEYS)
    assert explicit is sync  # the same config once the defaults are filled in
    tangent = job(algorithm="rfedavg", upload="tangent")
    assert type(tangent.algorithm) is RFedAvg and tangent.aggregator is None
    fedbuff = deploy.job_from_run_config(FEDBUFF)
    assert type(fedbuff) is AsyncJob and fedbuff.rule.name == "fedbuff"
    assert fedbuff.rule.aggregator is None and fedbuff.rule.server_optimizer is None
    assert fedbuff.rule.compression is None
    assert fedbuff.rule.server_lr == 1 / FEDBUFF["buffer-size"]  # FedBuff's own eta_g


# ------------------------------------------------------------------------------ aggregators
@pytest.mark.parametrize(
    ("keys", "kind", "settings"),
    [
        ({"aggregator": "median"}, GeometricMedian, {}),
        ({"aggregator": "trimmed", "trim": 0.3}, TrimmedMean, {"trim": 0.3}),
        ({"aggregator": "trimmed"}, TrimmedMean, {"trim": 0.2}),
        ({"aggregator": "krum", "krum-f": 1}, Krum, {"n_byzantine": 1}),
        ({"aggregator": "multikrum"}, MultiKrum, {"n_byzantine": 0}),
        ({"aggregator": "clipped", "clip-radius": 2.5}, CenteredClipping, {"tau": 2.5}),
        ({"aggregator": "clipped"}, CenteredClipping, {"tau": 1.0}),
    ],
)
def test_aggregator_keys_build_the_aggregator_of_the_cli(keys, kind, settings):
    built = deploy.job_from_run_config({**BASE, **keys})
    assert type(built.aggregator) is kind
    assert type(built.algorithm) is RFedProj  # the rule itself is unchanged
    for name, value in settings.items():
        assert getattr(built.aggregator, name) == value
    server, _ = cli(*flags(keys))
    assert built.aggregator.describe() == server.aggregator.describe()


def test_the_mean_aggregator_is_the_rules_own():
    assert job(aggregator="mean").aggregator is None


# ------------------------------------------------------------------------- server optimisers
@pytest.mark.parametrize(
    ("keys", "betas"),
    [
        ({"server-optimizer": "sgd"}, []),
        ({"server-optimizer": "momentum", "server-lr": 0.5, "server-momentum": 0.7}, []),
        ({"server-optimizer": "adam"}, []),
        ({"server-optimizer": "adagrad", "server-lr": 0.05}, []),
        (
            {"server-optimizer": "yogi", "server-beta1": 0.8, "server-beta2": 0.95},
            ["--server-betas", "0.8", "0.95"],  # one option of the CLI, two keys here
        ),
    ],
)
def test_server_optimizer_keys_wrap_the_rule_as_the_cli_does(keys, betas):
    built = deploy.job_from_run_config({**BASE, **keys})
    assert isinstance(built.algorithm, ServerOptimized)
    assert type(built.algorithm.algorithm) is RFedProj
    server, _ = cli(*flags({k: v for k, v in keys.items() if "beta" not in k}), *betas)
    assert built.algorithm.optimizer.describe() == server.optimizer.describe()


def test_server_lr_is_the_server_optimizers_learning_rate():
    sgd = job(server_optimizer="sgd").algorithm.optimizer
    assert type(sgd) is ServerSGD and sgd.lr == 1.0  # the CLI's default for sgd
    adam = job(server_optimizer="adam", server_lr=0.05, server_beta1=0.8, server_beta2=0.95)
    optimizer = adam.algorithm.optimizer
    assert type(optimizer) is ServerAdam and optimizer.lr == 0.05
    assert optimizer.describe()["beta1"] == 0.8 and optimizer.describe()["beta2"] == 0.95
    assert job(server_optimizer="adam").algorithm.optimizer.lr == 0.1  # adaptive default


def test_aggregator_and_server_optimizer_combine():
    built = job(aggregator="median", server_optimizer="adam", algorithm="rfedavg", upload="tangent")
    assert type(built.aggregator) is GeometricMedian
    assert isinstance(built.algorithm, ServerOptimized)
    assert type(built.algorithm.algorithm) is RFedAvg


# ------------------------------------------------------------------------------ compression
@pytest.mark.parametrize(
    ("spec", "feedback", "expected"),
    [
        ("topk:0.1", "off", False),
        ("topk:0.1", "auto", True),  # a biased compressor keeps its residual by default
        ("qsgd:4", "auto", False),  # an unbiased one does not
        ("qsgd:4", "on", True),
        ("rank:1", "auto", True),
        ("bf16", "off", False),
    ],
)
def test_compression_keys_wrap_the_rule_as_the_cli_does(spec, feedback, expected):
    built = job(compression=spec, error_feedback=feedback, seed=4)
    assert isinstance(built.algorithm, Compressed)
    assert type(built.algorithm.algorithm) is RFedProj
    assert built.algorithm.name == f"rfedproj+{spec.split(':')[0]}"
    assert built.algorithm.error_feedback is expected and built.algorithm.seed == 4
    flag = {"on": ["--error-feedback"], "off": ["--no-error-feedback"], "auto": []}[feedback]
    _, compression = cli("--compression", spec, "--seed", "4", *flag)
    assert built.algorithm.describe()["compression"] == compression


def test_topk_compression_keeps_its_fraction():
    algorithm = job(compression="topk:0.1", error_feedback="off").algorithm
    assert algorithm.compressor.name == "topk" and algorithm.compressor.fraction == 0.1
    assert algorithm.error_feedback is False


def test_compression_none_is_no_compression():
    assert type(job(compression="none").algorithm) is RFedProj


def test_compression_wraps_the_server_optimised_rule():
    """The order of ``riemfl run``: the server optimiser around the rule, then compression."""
    built = job(
        compression="fp16", server_optimizer="momentum", algorithm="rfedavg", upload="tangent"
    )
    assert isinstance(built.algorithm, Compressed)
    assert isinstance(built.algorithm.algorithm, ServerOptimized)
    assert type(built.algorithm.algorithm.algorithm) is RFedAvg


# ------------------------------------------------------------------------------ async engine
def test_fedbuff_takes_the_aggregator_and_the_server_optimizer():
    built = deploy.job_from_run_config(
        {**FEDBUFF, "aggregator": "trimmed", "trim": 0.3, "server-optimizer": "momentum"}
    )
    assert type(built.rule.aggregator) is TrimmedMean and built.rule.aggregator.trim == 0.3
    optimizer = built.rule.server_optimizer
    assert type(optimizer) is ServerSGD and optimizer.describe()["momentum"] == 0.9
    options = ["--aggregator", "trimmed", "--trim", "0.3", "--server-optimizer", "momentum"]
    server, _ = cli(*options, "--buffer-size", "5", engine="async")
    assert built.rule.aggregator.describe() == server.aggregator.describe()
    assert optimizer.describe() == server.optimizer.describe()


def test_fedbuff_takes_the_compression_its_nodes_run():
    built = deploy.job_from_run_config(
        {**FEDBUFF, "compression": "qsgd:4", "error-feedback": "on", "seed": 3}
    )
    codec = built.compression
    assert codec is built.rule.compression and built.upload_kind == "payload"
    assert codec.compressor.describe() == make_compressor("qsgd:4").describe()
    assert codec.error_feedback and codec.seed == 3
    plain = deploy.job_from_run_config(FEDBUFF)
    assert plain.compression is None and plain.upload_kind == "point"


def test_async_server_lr_is_the_optimizers_or_the_rules():
    """As ``riemfl run``: with a server optimiser its learning rate, without one FedBuff's eta_g."""
    with_optimizer = deploy.job_from_run_config(
        {**FEDBUFF, "server-optimizer": "sgd", "server-lr": 0.4}
    )
    assert with_optimizer.rule.server_optimizer.lr == 0.4
    assert with_optimizer.rule.server_lr == 1 / FEDBUFF["buffer-size"]  # the rule's own
    plain = deploy.job_from_run_config({**FEDBUFF, "server-lr": 0.4})
    assert plain.rule.server_optimizer is None and plain.rule.server_lr == 0.4


def test_krum_counts_fedbuffs_buffer():
    built = deploy.job_from_run_config({**FEDBUFF, "aggregator": "krum", "krum-f": 1})
    assert type(built.rule.aggregator) is Krum and built.rule.aggregator.n_byzantine == 1
    with pytest.raises(ParameterError, match=r"m = 4 uploads .* Krum needs m >= 2f \+ 3 = 5"):
        deploy.job_from_run_config({**FEDBUFF, "buffer-size": 4, "aggregator": "krum", "krum-f": 1})


# --------------------------------------------------------------------------------- refusals
def test_compression_with_privacy_clips_then_compresses():
    built = deploy.job_from_run_config(
        {**BASE, "compression": "fp16", "dp-clip": 1.0, "dp-noise": 1.0}
    )
    assert isinstance(built.algorithm, Compressed)
    assert isinstance(built.algorithm.algorithm, PrivateAlgorithm)
    assert built.algorithm.algorithm.settings == DPSettings(1.0, 1.0)


@pytest.mark.parametrize(
    ("keys", "error", "match"),
    [
        ({"trim": 0.3}, ParameterError, r"--trim: a parameter of --aggregator trimmed"),
        ({"aggregator": "median", "krum-f": 1}, ParameterError, r"--krum-f: .* krum or multikrum"),
        ({"clip-radius": 2.0}, ParameterError, r"--clip-radius: .* clipped"),
        ({"aggregator": "best"}, ParameterError, r"aggregator must be one of"),
        ({"aggregator": "trimmed", "trim": 0.7}, ParameterError, r"TrimmedMean: trim"),
        ({"aggregator": "krum", "krum-f": 2}, ParameterError, r"Krum needs m >= 2f \+ 3 = 7"),
        ({"server-optimizer": "lion"}, ParameterError, r"server optimiser must be one of"),
        ({"server-lr": 0.5}, ParameterError, r"--server-lr: with --engine sync"),
        (
            {"server-optimizer": "adam", "server-momentum": 0.5},
            ParameterError,
            r"--server-momentum: a parameter of --server-optimizer momentum",
        ),
        (
            {"server-optimizer": "sgd", "server-beta1": 0.8, "server-beta2": 0.9},
            ParameterError,
            r"--server-betas: .* adam or yogi",
        ),
        (
            {"server-optimizer": "adam", "server-beta1": 0.8},
            ParameterError,
            r"'server-beta1' and 'server-beta2' .* give both or neither",
        ),
        ({"compression": "topk"}, ParameterError, r"compression must be one of"),
        ({"compression": "zip:3"}, ParameterError, r"compression must be one of"),
        (
            {"compression": "fp16", "algorithm": "rfedavg"},
            ParameterError,
            r"rfedavg: its clients upload points.*upload='tangent'",
        ),
        (
            {"compression": "fp16", "error-feedback": "yes"},
            ParameterError,
            r"run-config 'error-feedback' must be one of \['auto', 'on', 'off'\]",
        ),
        ({"error-feedback": "off"}, ParameterError, r"--no-error-feedback: a setting of --compr"),
        ({"error-feedback": "on"}, ParameterError, r"--error-feedback: a setting of --compression"),
        # what SyncJob refuses surfaces as its own typed error
        ({"compression": "fp16", "secagg": True}, NotSumOnlyError, r"compressed payloads"),
        ({"aggregator": "median", "secagg": True}, NotSumOnlyError, r"GeometricMedian needs each"),
        (
            {"aggregator": "median", "dp-clip": 1.0, "dp-noise": 1.0},
            ParameterError,
            r"aggregator GeometricMedian does not return their sum",
        ),
    ],
)
def test_sync_settings_the_cli_refuses_are_refused(keys, error, match):
    with pytest.raises(error, match=match):
        deploy.job_from_run_config({**BASE, **keys})


@pytest.mark.parametrize(
    ("keys", "match"),
    [
        ({"aggregator": "median"}, r"--aggregator: on the asynchronous engine only fedbuff"),
        ({"server-optimizer": "adam"}, r"--server-optimizer: on the asynchronous engine only"),
        ({"compression": "fp16"}, r"--compression: on the asynchronous engine only fedbuff"),
    ],
)
def test_async_rules_but_fedbuff_refuse_the_server_side_and_compression(keys, match):
    with pytest.raises(ParameterError, match=match):
        deploy.job_from_run_config({**FEDBUFF, "rule": "fedasync", **keys})


# ------------------------------------------------------------------------- cache and project
def test_the_job_cache_tells_the_new_keys_apart():
    plain, fp16 = job(), job(compression="fp16")
    assert plain is not fp16 and type(plain.algorithm) is RFedProj
    assert job(compression="fp16") is fp16
    assert job(compression="fp16", error_feedback="off") is not fp16
    assert job(aggregator="median") is not plain
    assert job(aggregator="trimmed", trim=0.3) is not job(aggregator="trimmed", trim=0.2)


def test_the_new_keys_travel_in_the_app_project(tmp_path):
    keys = {"compression": "topk:0.25", "error-feedback": "off", "aggregator": "trimmed"}
    keys |= {"trim": 0.1, "server-optimizer": "adam", "server-beta1": 0.8, "server-beta2": 0.9}
    path = deploy.write_app_project(tmp_path / "app", {**BASE, **keys})
    config = tomllib.loads(path.read_text())["tool"]["flwr"]["app"]["config"]
    assert {k: config[k] for k in NEW_KEYS} == {**NEW_KEYS, **keys}
    built = deploy.job_from_run_config(config)
    assert built is deploy.job_from_run_config({**BASE, **keys})  # the same config, read back
    assert isinstance(built.algorithm, Compressed) and built.aggregator.trim == 0.1


# ------------------------------------------------------------------------------ end to end
@pytest.mark.usefixtures("task_identity")
def test_a_compressed_job_of_the_run_config_runs_on_the_deployment_apps_clientapps(monkeypatch):
    """The deployment's ClientApps (each node builds the job from the run config) in the
    in-process grid: the run is ``run_sync``'s, and the uplink is the compressed payload's
    bytes per client and round, which the nodes' replies carry."""
    config = {
        "problem-clients": CLIENTS,
        "problem-seed": 1,
        "step-size": 0.01,
        "local-steps": 2,
        "steps": 3,
        "seed": 2,
        "compression": "topk:0.2",
    }
    server_job = deploy.job_from_run_config(config)
    monkeypatch.setattr(deploy, "_JOBS", {})  # the nodes build their own job from the config
    grid = CountingGrid(deploy.client_app)
    for context in grid.contexts.values():
        context.run_config = dict(config)
    history = run_sync_job(grid, server_job, range(NODES))
    assert deploy._JOBS and next(iter(deploy._JOBS.values())) is not server_job
    problem = server_job.resolved
    local = run_sync(problem, server_job.algorithm, 3, options=RunOptions(seed=2))
    np.testing.assert_allclose(history.final_point, local.final_point, rtol=0, atol=1e-10)
    (shape,) = server_job.algorithm.algorithm.upload_shapes(problem, 0).values()
    payload = server_job.algorithm.compressor.payload_nbytes(tuple(shape), np.float64)
    assert list(history.uplink_bytes) == [r * payload for r in range(4)]
    assert list(history.uplink_bytes) == list(local.uplink_bytes)
    assert grid.payload_bytes == 3 * payload * CLIENTS

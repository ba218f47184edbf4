"""Flower's and Ray's notices that riemfl's simulations cause: fixed or filtered, nothing else."""

from __future__ import annotations

import logging
import os

import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'riemfl[flower]')")

from riemfl.adapters.flower import quiet  # noqa: E402


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("flwr", logging.WARNING, __file__, 1, message, None, None)


def test_the_filter_drops_exactly_the_two_notices():
    f = quiet.NoticeFilter()
    deprecated = (
        "DEPRECATED FEATURE: The `run_simulation` function is deprecated and will be removed"
    )
    assert not f.filter(_record(deprecated))
    assert not f.filter(_record("Manually terminating ClientAppActor"))
    assert f.filter(_record("DEPRECATED FEATURE: something else"))  # other deprecations pass
    assert f.filter(_record("ClientApp raised an exception"))


def test_quiet_flower_is_undone_and_keeps_the_user_s_environment(monkeypatch):
    logger = logging.getLogger("flwr")
    monkeypatch.delenv("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", raising=False)
    before = list(logger.filters)
    with quiet.quiet_flower():
        assert os.environ["RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"] == "0"
        assert any(isinstance(f, quiet.NoticeFilter) for f in logger.filters)
    assert logger.filters == before and "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO" not in os.environ
    monkeypatch.setenv("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "1")
    with quiet.quiet_flower():
        assert os.environ["RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"] == "1"


@pytest.mark.slow
def test_a_simulation_prints_none_of_the_notices(capfd):
    from riemfl.adapters.flower import PingJob, simulate

    simulate([PingJob(repeats=1, payload={"x": (3,)})], 2)
    err = capfd.readouterr().err
    for notice in ("DEPRECATED FEATURE", "Manually terminating", "FutureWarning"):
        assert notice not in err, notice

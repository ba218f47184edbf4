"""Keep Flower's and Ray's notices that riemfl's own simulations cause out of riemfl's output.

Three notices appeared on every :func:`~riemfl.adapters.flower.simulate` call:

* Ray's ``FutureWarning`` that it will stop overriding the accelerator environment variable when
  ``num_gpus=0``. riemfl's actors ask for no GPU and want that future behaviour, so it is
  **fixed** by opting in: ``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0`` while the simulation starts
  Ray (:data:`RAY_ENVIRONMENT`; a value the user set is kept).
* Flower's ``DEPRECATED FEATURE`` notice for ``flwr.simulation.run_simulation``, which riemfl
  calls (Flower's replacement, ``flwr run``, needs an app directory and a SuperLink: the
  deployment path, ``docs/flower.md``); and
* Flower's ``Manually terminating ClientAppActor`` notice, logged by every actor when Flower shuts
  its pool down at the end of a simulation.

The last two cannot be fixed from outside Flower, so they are **filtered**: a
:class:`logging.Filter` on the ``flwr`` logger drops exactly these messages (:data:`NOTICES`),
in the driver only while :func:`simulate` runs (:func:`quiet_flower`) and in the Ray workers that
riemfl's simulation starts (``worker_process_setup_hook``: :func:`install_filter`). Nothing is
filtered from a user's own use of Flower, and every other message of Flower and Ray goes through.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

__all__ = ["NOTICES", "RAY_ENVIRONMENT", "NoticeFilter", "install_filter", "quiet_flower"]

#: the start of each filtered message (the format strings Flower 1.41 logs)
NOTICES = (
    "DEPRECATED FEATURE: The `run_simulation` function is deprecated",
    "Manually terminating",
)
#: environment riemfl's simulations start Ray with (opt-ins that silence a FutureWarning)
RAY_ENVIRONMENT = {"RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}
FLOWER_LOGGER = "flwr"


class NoticeFilter(logging.Filter):
    """Drops the records whose message starts with one of :data:`NOTICES`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().lstrip().startswith(NOTICES)


def install_filter() -> None:
    """Install one :class:`NoticeFilter` on the ``flwr`` logger (the Ray workers' setup hook)."""
    logger = logging.getLogger(FLOWER_LOGGER)
    if not any(isinstance(f, NoticeFilter) for f in logger.filters):
        logger.addFilter(NoticeFilter())


@contextlib.contextmanager
def quiet_flower() -> Iterator[None]:
    """While the block runs: the filter on the driver's ``flwr`` logger, and
    :data:`RAY_ENVIRONMENT` in the environment (variables the user set are kept); both undone
    after."""
    logger = logging.getLogger(FLOWER_LOGGER)
    notice_filter = NoticeFilter()
    added = {k: v for k, v in RAY_ENVIRONMENT.items() if k not in os.environ}
    os.environ.update(added)
    logger.addFilter(notice_filter)
    try:
        yield
    finally:
        logger.removeFilter(notice_filter)
        for key in added:
            os.environ.pop(key, None)
